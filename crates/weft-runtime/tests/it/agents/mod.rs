//! Helpers for driving whole agents in tests: in-process tools that record their calls, a
//! model wrapper that records every request, and a harness that wires them to an in-RAM store.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    dead_code,
    unreachable_pub
)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::model::{Message, ModelReply, ModelRequest, Purpose};
use weft_core::{Event, State, ToolError, ToolInfo};
use weft_model::{DeltaSink, Model, ModelError, ScriptedModel, ScriptedReply, SharedModel};
use weft_runtime::{Agent, Runtime, RuntimeBuilder, Session, SessionInfo};
use weft_store::{RamStore, SessionLog, Store};
use weft_tools::{Registry, Tool, ToolContext};

/// One call a test tool served.
#[derive(Clone, Debug)]
pub struct CallRecord {
    pub tool: String,
    pub args: Value,
    pub start: Instant,
    pub end: Instant,
}

/// The calls every test tool of a harness served, in the order they started.
#[derive(Clone, Debug, Default)]
pub struct CallLog(Arc<Mutex<Vec<CallRecord>>>);

impl CallLog {
    pub fn all(&self) -> Vec<CallRecord> {
        self.0.lock().unwrap().clone()
    }

    pub fn of(&self, tool: &str) -> Vec<CallRecord> {
        self.all().into_iter().filter(|c| c.tool == tool).collect()
    }

    pub fn count(&self, tool: &str) -> usize {
        self.of(tool).len()
    }
}

type Behavior = Arc<dyn Fn(&Value) -> Result<Value, ToolError> + Send + Sync>;

/// An in-process tool whose result is computed by a closure; it records every call.
#[derive(Clone)]
pub struct TestTool {
    info: ToolInfo,
    behavior: Behavior,
    delay_ms: u64,
    pub log: CallLog,
}

impl TestTool {
    /// A tool with this name, category and input schema.
    pub fn new(
        name: &str,
        category: &str,
        schema: Value,
        f: impl Fn(&Value) -> Result<Value, ToolError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            info: ToolInfo {
                name: name.into(),
                description: format!("The {name} test tool."),
                category: Some(category.into()),
                input_schema: schema,
                idempotent: false,
                parallel: false,
                requires_approval: false,
                source: "test".into(),
                output_schema: None,
            },
            behavior: Arc::new(f),
            delay_ms: 0,
            log: CallLog::default(),
        }
    }

    /// A tool that accepts any object and returns `output`.
    pub fn returning(name: &str, output: Value) -> Self {
        Self::new(name, "general", json!({"type": "object"}), move |_| {
            Ok(output.clone())
        })
    }

    #[must_use]
    pub fn description(mut self, d: &str) -> Self {
        self.info.description = d.into();
        self
    }

    #[must_use]
    pub fn sleeping(mut self, ms: u64) -> Self {
        self.delay_ms = ms;
        self
    }

    #[must_use]
    pub fn parallel(mut self) -> Self {
        self.info.parallel = true;
        self
    }

    #[must_use]
    pub fn idempotent(mut self) -> Self {
        self.info.idempotent = true;
        self
    }

    #[must_use]
    pub fn requiring_approval(mut self) -> Self {
        self.info.requires_approval = true;
        self
    }
}

impl Tool for TestTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let start = Instant::now();
        if self.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.delay_ms)).await;
        }
        let result = (self.behavior)(&args);
        self.log.0.lock().unwrap().push(CallRecord {
            tool: self.info.name.clone(),
            args,
            start,
            end: Instant::now(),
        });
        result
    }
}

/// The requests a model received, in order.
#[derive(Clone, Debug, Default)]
pub struct Requests(Arc<Mutex<Vec<ModelRequest>>>);

impl Requests {
    pub fn all(&self) -> Vec<ModelRequest> {
        self.0.lock().unwrap().clone()
    }

    pub fn of(&self, purpose: Purpose) -> Vec<ModelRequest> {
        self.all()
            .into_iter()
            .filter(|r| r.purpose == purpose)
            .collect()
    }

    /// Every request so far alternates roles as strict chat templates require
    /// ([`alternation_problem`]).
    pub fn assert_alternate(&self) {
        let problems: Vec<String> = self.all().iter().filter_map(alternation_problem).collect();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

/// All the text of a request's messages (tool results and tool-call arguments included).
pub fn request_text(r: &ModelRequest) -> String {
    r.messages
        .iter()
        .map(|m| match m {
            Message::System { content } | Message::User { content } => content.clone(),
            Message::Assistant {
                content,
                tool_calls,
            } => format!("{content} {}", json!(tool_calls)),
            Message::Tool { content, .. } => content.clone(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why a request's messages do not alternate roles as the strictest chat templates require, or
/// `None` when they do: one system message, first; then a user message; a user message is
/// followed by the assistant's; an assistant message without tool calls by a user message; one
/// with tool calls by a result of each of its calls (and only of its calls), then by the
/// assistant's or a user message; the last message is a user message or a tool result.
pub fn alternation_problem(r: &ModelRequest) -> Option<String> {
    let roles: Vec<String> = r
        .messages
        .iter()
        .map(|m| match m {
            Message::System { .. } => "system".to_owned(),
            Message::User { .. } => "user".to_owned(),
            Message::Assistant { tool_calls, .. } if tool_calls.is_empty() => "assistant".into(),
            Message::Assistant { tool_calls, .. } => {
                format!("assistant({} calls)", tool_calls.len())
            }
            Message::Tool { .. } => "tool".to_owned(),
        })
        .collect();
    let problem = |at: usize, what: &str| {
        Some(format!(
            "{:?} request #{}: message {at}: {what}; roles: {}",
            r.purpose,
            r.call_index,
            roles.join(", ")
        ))
    };
    let msgs: Vec<&Message> = r.messages.iter().collect();
    if !matches!(msgs.first(), Some(Message::System { .. })) {
        return problem(0, "the first message is not the system message");
    }
    // What may come next: after the system message, a user message.
    let mut calls: Vec<&str> = Vec::new();
    let mut prev = "system";
    for (at, m) in msgs.iter().enumerate().skip(1) {
        let ok = match (prev, m) {
            (_, Message::System { .. }) => return problem(at, "a second system message"),
            ("system" | "assistant" | "results", Message::User { .. }) => true,
            ("user" | "results", Message::Assistant { .. }) => true,
            ("calls" | "results", Message::Tool { call_id, .. }) => {
                match calls.iter().position(|c| c == call_id) {
                    Some(i) => {
                        calls.remove(i);
                        true
                    }
                    None => {
                        return problem(
                            at,
                            &format!(
                                "a result of `{call_id}`, which the assistant message before did not call (or which is answered twice)"
                            ),
                        );
                    }
                }
            }
            _ => false,
        };
        if !ok {
            return problem(
                at,
                &format!("it does not follow {prev} in a strict template"),
            );
        }
        if (prev == "calls" || prev == "results")
            && !matches!(m, Message::Tool { .. })
            && !calls.is_empty()
        {
            return problem(at, &format!("calls {calls:?} have no result"));
        }
        prev = match m {
            Message::User { .. } => "user",
            Message::Assistant { tool_calls, .. } if tool_calls.is_empty() => "assistant",
            Message::Assistant { tool_calls, .. } => {
                calls = tool_calls.iter().map(|c| c.id.as_str()).collect();
                "calls"
            }
            Message::Tool { .. } => "results",
            Message::System { .. } => "system",
        };
    }
    match prev {
        "user" | "results" if calls.is_empty() => None,
        "results" => problem(msgs.len(), &format!("calls {calls:?} have no result")),
        _ => problem(
            msgs.len().saturating_sub(1),
            "the last message is neither a user message nor a tool result",
        ),
    }
}

/// A model that records each request and lets another model (a scripted one) answer it.
pub struct RecordingModel {
    inner: SharedModel,
    requests: Requests,
}

impl RecordingModel {
    /// `inner`, recording each request into the returned [`Requests`].
    pub fn new(inner: ScriptedModel) -> (Self, Requests) {
        Self::wrap(Arc::new(inner))
    }

    /// Any model (one built from an agent file), recording each request.
    pub fn wrap(inner: SharedModel) -> (Self, Requests) {
        let requests = Requests::default();
        (
            Self {
                inner,
                requests: requests.clone(),
            },
            requests,
        )
    }
}

impl Model for RecordingModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn complete(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        self.requests.0.lock().unwrap().push(req.clone());
        self.inner.complete_boxed(req, deltas).await
    }
}

/// Builds a per-purpose script.
pub fn script(parts: Vec<(Purpose, Vec<ScriptedReply>)>) -> HashMap<Purpose, Vec<ScriptedReply>> {
    parts.into_iter().collect()
}

/// A reply of several tool calls at once.
pub fn tool_calls(calls: &[(&str, Value)]) -> ScriptedReply {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(n, a)| json!({"name": n, "arguments": a}))
        .collect();
    serde_json::from_value(json!({ "tool_calls": calls })).unwrap()
}

/// An agent wired to an in-RAM store, recording tools and a recording scripted model.
pub struct Harness {
    pub store: Arc<RamStore>,
    pub runtime: Runtime<RamStore>,
    pub agent: Agent,
    pub calls: CallLog,
    pub requests: Requests,
}

impl Harness {
    /// `yaml` is the agent file (without tools: the test tools are offered instead).
    pub fn new(
        yaml: &str,
        tools: Vec<TestTool>,
        replies: HashMap<Purpose, Vec<ScriptedReply>>,
        input: &Value,
    ) -> Self {
        Self::with_store(Arc::new(RamStore::new()), yaml, tools, replies, input)
    }

    /// The same, on an existing store (a new process continuing a session).
    pub fn with_store(
        store: Arc<RamStore>,
        yaml: &str,
        tools: Vec<TestTool>,
        replies: HashMap<Purpose, Vec<ScriptedReply>>,
        input: &Value,
    ) -> Self {
        let spec = AgentSpec::parse("test.yaml", yaml).unwrap();
        let calls = CallLog::default();
        let mut registry = Registry::new();
        for mut t in tools {
            t.log = calls.clone();
            registry.register(t).unwrap();
        }
        let registry = Arc::new(registry);
        let requests = Requests::default();
        let model = Arc::new(RecordingModel {
            inner: Arc::new(ScriptedModel::keyed("test-script", replies)),
            requests: requests.clone(),
        });
        let agent = Agent::new(&spec, registry.clone(), model, &json!({}), input).unwrap();
        let runtime =
            Runtime::builder(store.clone(), registry, spec.limits.clone(), None, None).build();
        Self {
            store,
            runtime,
            agent,
            calls,
            requests,
        }
    }

    /// Starts a session and runs `task` until it answers, fails or waits.
    pub async fn run(&self, task: &str, input: Value) -> Session<'_, RamStore> {
        let s = self
            .runtime
            .run_agent(&self.agent, SessionInfo::default(), task, input)
            .await
            .unwrap();
        self.assert_replays(&s).await;
        s
    }

    /// Answers a waiting session.
    pub async fn reply(&self, session: &mut Session<'_, RamStore>, text: &str) {
        self.runtime
            .reply(&self.agent, session, text)
            .await
            .unwrap();
        self.assert_replays(session).await;
    }

    /// The fold of the stored log is the live state: what a new process would load. And every
    /// request so far alternated roles.
    pub async fn assert_replays(&self, s: &Session<'_, RamStore>) {
        self.requests.assert_alternate();
        let events = self.events(&s.id).await;
        let folded = State::fold(events.iter());
        let live = &s.state;
        assert_eq!(folded.seq(), live.seq());
        assert_eq!(folded.status(), live.status());
        assert_eq!(folded.phase(), live.phase());
        assert_eq!(folded.turn().answer(), live.turn().answer());
        assert_eq!(folded.turn().error(), live.turn().error());
        assert_eq!(folded.data(), live.data());
        assert_eq!(folded.usage(), live.usage());
        assert_eq!(folded.history(), live.history());
        assert_eq!(folded.turn().waiting(), live.turn().waiting());
        assert_eq!(folded.calls().started, live.calls().started);
        assert_eq!(folded.provenance(), live.provenance());
        assert_eq!(
            folded.plan().map(|p| p.view()),
            live.plan().map(|p| p.view())
        );
        weft_core::snapshot::verify(&events).unwrap();
        self.assert_rebuilds(&s.id).await;
    }

    /// Every request the model received in session `id` is the one rebuilt from its log
    /// (`weft_core::model_calls::rebuild`), field by field: the session's last requests are the
    /// last ones this harness's model received.
    pub async fn assert_rebuilds(&self, id: &str) {
        let (_, envs) = self.store.load(id).await.unwrap();
        let mut rebuilt = Vec::new();
        weft_core::model_calls::rebuild(&envs, &self.agent.config, None, |r| {
            rebuilt.push(serde_json::to_value(&r.request).unwrap());
        })
        .unwrap_or_else(|e| panic!("session {id}: {e}"));
        let sent: Vec<Value> = self
            .requests
            .all()
            .iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect();
        // A harness continuing a session (a new process) received only its last requests.
        let k = rebuilt.len().min(sent.len());
        let (rebuilt, sent) = (&rebuilt[rebuilt.len() - k..], &sent[sent.len() - k..]);
        for (i, (a, b)) in rebuilt.iter().zip(sent).enumerate() {
            assert_eq!(
                a,
                b,
                "session {id}: request {} of the last {k} differs from the one sent",
                i + 1
            );
        }
    }

    /// The stored events of a session.
    pub async fn events(&self, id: &str) -> Vec<Event> {
        let (_, envs) = self.store.load(id).await.unwrap();
        envs.into_iter().map(|e| e.event).collect()
    }

    /// The kinds of the stored events of a session, in order.
    pub async fn kinds(&self, id: &str) -> Vec<&'static str> {
        self.events(id).await.iter().map(Event::kind).collect()
    }
}

/// The kinds of `events` that are in `keep`, in order.
pub fn only(kinds: &[&'static str], keep: &[&str]) -> Vec<&'static str> {
    kinds.iter().copied().filter(|k| keep.contains(k)).collect()
}

/// A step's status in the state's plan.
pub fn step_status(state: &State, id: &str) -> weft_core::StepStatus {
    let run = state.plan().expect("a plan");
    run.step(id)
        .unwrap_or_else(|| panic!("no step `{id}` in {:?}", run.view()))
        .1
        .status
}

/// The ids of the steps of the state's plan, in order.
pub fn step_ids(state: &State) -> Vec<String> {
    state
        .plan()
        .as_ref()
        .map(|p| p.plan.steps.iter().map(|s| s.id.clone()).collect())
        .unwrap_or_default()
}

/// A JSON reply.
pub fn j(v: Value) -> ScriptedReply {
    ScriptedReply::json(v)
}

/// A text reply.
pub fn t(s: &str) -> ScriptedReply {
    ScriptedReply::text(s)
}

pub use weft_testkit::service_var;

/// PostgreSQL schemas of a test's own in the database at `WEFT_TEST_POSTGRES_URL`, each with a
/// store, dropped when this value is dropped (`weft_testkit::Schemas`).
pub struct PgSchemas(weft_testkit::Schemas);

impl PgSchemas {
    pub fn new(prefix: &str) -> Self {
        Self(weft_testkit::Schemas::new(prefix))
    }

    /// A store in a new schema.
    pub async fn store(&mut self) -> Arc<weft_store::PgStore> {
        let name = self.0.new_name();
        let store = weft_store::PgStore::connect_in_schema(self.0.url(), &name)
            .await
            .unwrap();
        Arc::new(store)
    }
}

/// Runs the ReAct agent `agent_yaml` for `user` on `store` to completion, its model scripted with
/// `react`, its memory and document tools embedding with `embedder` (none: text search), and
/// returns the tool results the model was given, in order (none of them an error).
pub async fn react_tool_results<S: Store>(
    store: &Arc<S>,
    user: &str,
    agent_yaml: &str,
    react: Vec<ScriptedReply>,
    embedder: Option<Arc<weft_model::Embedder>>,
) -> Vec<String> {
    let spec = AgentSpec::parse("agent.yaml", agent_yaml).unwrap();
    let reg = Registry::from_agent(&spec, std::path::Path::new(".")).unwrap();
    let model = Arc::new(ScriptedModel::keyed(
        "agent",
        script(vec![(Purpose::React, react)]),
    ));
    let a = Agent::new(&spec, Arc::new(reg), model, &json!({}), &json!({})).unwrap();
    let rt = Runtime::builder(
        Arc::clone(store),
        a.tools.clone(),
        a.config.limits.clone(),
        None,
        None,
    )
    .embedder(embedder)
    .build();
    let info = SessionInfo {
        user_id: Some(user.into()),
        ..SessionInfo::default()
    };
    let s = rt
        .run_agent(&a, info, "help me", Value::Null)
        .await
        .unwrap();
    let id = s.id.clone();
    drop(s);
    let st = weft_runtime::load_state(store.as_ref(), &id)
        .await
        .unwrap()
        .state;
    assert_eq!(
        st.status(),
        weft_core::SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    st.history()
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => {
                assert!(!is_error, "{content}");
                Some(content.clone())
            }
            _ => None,
        })
        .collect()
}

/// A runtime for `agent`'s tools and limits on `store`, with no user and no telemetry (what a
/// test that plays a process of its own builds).
pub fn runtime_of<S: Store>(store: &Arc<S>, agent: &Agent) -> RuntimeBuilder<S> {
    Runtime::builder(
        store.clone(),
        agent.tools.clone(),
        agent.config.limits.clone(),
        None,
        None,
    )
}
