//! Driving agent sessions: the plan-and-execute, ReAct and workflow loops of
//! `weft_core::agent_loop`, with a model and tools.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use weft_core::agent::{AgentSpec, Skill};
use weft_core::agent_loop::{self, AgentConfig, AgentNext, WorkflowConfig};
use weft_core::engine::Invocation;
use weft_core::model::Timing;
use weft_core::{EVENT_VERSION, Envelope, Event, RunStatus, SessionStatus, State};
use weft_model::{DeltaSink, ModelRequest, Purpose, SharedModel};
use weft_store::{Store, StoreError};
use weft_tools::Registry;

use crate::calls::Calls;
use crate::{Observer, Runtime, RuntimeError, Session, now_ms};

/// An agent ready to run: its configuration, model and tools.
#[derive(Clone)]
pub struct Agent {
    /// The agent's name, as its file gives it.
    pub name: String,
    /// How the agent runs: its mode, rendered instructions, tools offered and limits.
    pub config: AgentConfig,
    /// The model the agent asks for its turns.
    pub model: SharedModel,
    /// The tools the agent may call.
    pub tools: Arc<Registry>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("mode", &self.config.mode)
            .finish()
    }
}

impl Agent {
    /// Builds an agent from its file's spec, tools and model. `metadata` and `input` are
    /// available to the instructions template as `session.metadata` and `input`.
    pub fn new(
        spec: &AgentSpec,
        tools: Arc<Registry>,
        model: SharedModel,
        metadata: &Value,
        input: &Value,
    ) -> Result<Self, RuntimeError> {
        let instructions = match &spec.instructions {
            None => String::new(),
            Some(_) => Self::instructions(spec, metadata, input)?,
        };
        let mut skills = Vec::new();
        for (i, s) in spec.skills.iter().enumerate() {
            let skill: Skill = serde_json::from_value(s.clone()).map_err(|e| {
                RuntimeError::Config(format!("agent `{}`: skills[{i}]: {e}", spec.name))
            })?;
            if skill.name.trim().is_empty() {
                return Err(RuntimeError::Config(format!(
                    "agent `{}`: skills[{i}].name: empty; name the skill (a plan step's `_skill` names it)",
                    spec.name
                )));
            }
            if skills.iter().any(|k: &Skill| k.name == skill.name) {
                return Err(RuntimeError::Config(format!(
                    "agent `{}`: skills[{i}].name: `{}` is the name of an earlier skill; give each skill its own name",
                    spec.name, skill.name
                )));
            }
            skills.push(skill);
        }
        let workflow = Self::workflow(spec, &tools, metadata, input)?;
        let repeats = Self::repeats(spec, &tools)?;
        let trust = Self::trust(spec, &tools)?;
        let offered: Vec<weft_core::ToolInfo> = tools
            .infos()
            .filter(|t| {
                spec.allowed_tools
                    .as_ref()
                    .is_none_or(|a| a.iter().any(|n| n == &t.name))
            })
            .cloned()
            .collect();
        // Memories come with the task when the model could look them up itself.
        let recall_memories = spec.recall_memories.unwrap_or_else(|| {
            offered
                .iter()
                .any(|t| t.name == "recall" && t.source == "builtin")
        });
        crate::budget::warn_unpriced(model.as_ref(), spec.budget.as_ref());
        let model_costs = crate::budget::costs_of(model.as_ref());
        Ok(Self {
            name: spec.name.clone(),
            config: AgentConfig {
                mode: spec.mode,
                limits: spec.limits.clone(),
                instructions,
                tools: offered,
                skills,
                approve_plans: spec.approve_plans,
                review_responses: spec.review_responses.unwrap_or(true),
                recall_memories,
                workflow,
                budget: spec.budget.clone(),
                model_costs,
                repeats,
                trust,
            },
            model,
            tools,
        })
    }

    /// The agent file's `repeats:`, each tool it names one of the agent's.
    fn repeats(
        spec: &AgentSpec,
        tools: &Registry,
    ) -> Result<weft_core::repeats::Rules, RuntimeError> {
        let config = |m: String| RuntimeError::Config(format!("agent `{}`: {m}", spec.name));
        let rules = match &spec.repeats {
            None => weft_core::repeats::Rules::default(),
            Some(v) => weft_core::repeats::Rules::parse(v).map_err(|p| config(p.join("; ")))?,
        };
        for name in rules.tools.keys() {
            if !tools.infos().any(|t| &t.name == name) {
                let known: Vec<&str> = tools.infos().map(|t| t.name.as_str()).collect();
                return Err(config(format!(
                    "repeats.tools.{name}: the agent has no tool `{name}`; its tools are: {}",
                    known.join(", ")
                )));
            }
        }
        Ok(rules)
    }

    /// The agent file's `trust:`, each tool it names one of the agent's.
    fn trust(
        spec: &AgentSpec,
        tools: &Registry,
    ) -> Result<Option<weft_core::trust::Trust>, RuntimeError> {
        let config = |m: String| RuntimeError::Config(format!("agent `{}`: {m}", spec.name));
        let Some(v) = &spec.trust else {
            return Ok(None);
        };
        let trust = weft_core::trust::Trust::parse(v).map_err(|p| config(p.join("; ")))?;
        let infos: Vec<&weft_core::ToolInfo> = tools.infos().collect();
        if let Some((at, why)) = trust.problems(&infos).into_iter().next() {
            return Err(config(format!("{at}: {why}")));
        }
        Ok(Some(trust))
    }

    /// The agent's instructions rendered for a session's metadata and input; a variable that is
    /// not defined (and has no `default`) is an error that names it.
    pub fn instructions(
        spec: &AgentSpec,
        metadata: &Value,
        input: &Value,
    ) -> Result<String, RuntimeError> {
        match &spec.instructions {
            None => Ok(String::new()),
            Some(t) => render_instructions(&spec.name, "instructions", t, metadata, input),
        }
    }

    /// A workflow agent's state machine, ready to run: each step's instructions rendered (as the
    /// agent's are), and each step's tools and agent found among the agent's tools. Mistakes name
    /// the step and the field.
    pub fn workflow(
        spec: &AgentSpec,
        tools: &Registry,
        metadata: &Value,
        input: &Value,
    ) -> Result<Option<Arc<WorkflowConfig>>, RuntimeError> {
        use weft_core::ToolCatalog;
        let Some(wf) = &spec.workflow else {
            return Ok(None);
        };
        let mut instructions = BTreeMap::new();
        for (name, step) in &wf.steps {
            let at = format!("workflow.steps.{name}");
            if let Some(t) = &step.instructions {
                let text = render_instructions(
                    &spec.name,
                    &format!("{at}.instructions"),
                    t,
                    metadata,
                    input,
                )?;
                instructions.insert(name.clone(), text);
            }
            for t in &step.tools {
                if tools.tool_info(t).is_none() {
                    let names = tools.tool_names();
                    return Err(RuntimeError::Config(format!(
                        "agent `{}`: {at}.tools: `{t}` is not a tool of this agent{}; declare it in `tools` (the tools: {})",
                        spec.name,
                        weft_core::diagnose::did_you_mean(t, names.iter().map(String::as_str)),
                        names.join(", ")
                    )));
                }
            }
            if step.agent.is_some() {
                let tool = weft_core::workflow::delegate_tool(name);
                if !tools.agent_tools().any(|d| d.name == tool) {
                    return Err(RuntimeError::Config(format!(
                        "agent `{}`: {at}.agent: the step's agent was not loaded with the agent's tools (build them with Registry::from_agent)",
                        spec.name
                    )));
                }
            }
        }
        Ok(Some(Arc::new(WorkflowConfig {
            spec: wf.clone(),
            instructions,
            metadata: metadata.clone(),
        })))
    }

    /// Builds the model an agent file names (relative paths from `base_dir`).
    pub fn model_from_spec(spec: &AgentSpec, base_dir: &Path) -> Result<SharedModel, RuntimeError> {
        let Some(m) = &spec.model else {
            return Err(RuntimeError::Config(format!(
                "agent `{}` has no `model`; set e.g. `model: openai:gpt-4o-mini` or `model: scripted:script.yaml`",
                spec.name
            )));
        };
        weft_model::from_spec(m, base_dir)
            .map_err(|e| RuntimeError::Config(format!("agent `{}`: {e}", spec.name)))
    }
}

/// Renders an instructions template (`what` names it: `instructions`, or a workflow step's). A
/// variable it names that is not defined (and has no `default`) is an error naming the variable,
/// not an empty string in the prompt.
fn render_instructions(
    agent: &str,
    what: &str,
    template: &str,
    metadata: &Value,
    input: &Value,
) -> Result<String, RuntimeError> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let err = |e: &minijinja::Error| {
        RuntimeError::Config(format!("agent `{agent}`: `{what}` template: {e:#}"))
    };
    let tmpl = env.template_from_str(template).map_err(|e| err(&e))?;
    let ctx = serde_json::json!({"session": {"metadata": metadata}, "input": input});
    tmpl.render(&ctx).map_err(|e| {
        if e.kind() != minijinja::ErrorKind::UndefinedError {
            return err(&e);
        }
        let mut missing: Vec<String> = tmpl
            .undeclared_variables(true)
            .into_iter()
            .filter(|path| {
                let mut v = &ctx;
                path.split('.').any(|k| match v.get(k) {
                    Some(next) => {
                        v = next;
                        false
                    }
                    None => true,
                })
            })
            .collect();
        missing.sort();
        if missing.is_empty() {
            return err(&e);
        }
        RuntimeError::Config(format!(
            "agent `{agent}`: `{what}` uses undefined variable(s) {}: give them (`session.metadata.*` \
             with --metadata, `input.*` with --input) or write a default, e.g. {{{{ x | default(\"...\") }}}}",
            missing
                .iter()
                .map(|m| match meant(&ctx, m) {
                    Some(c) => format!("`{m}` (did you mean `{c}`?)"),
                    None => format!("`{m}`"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// The variable a template probably meant where it names `path`, which `ctx` does not hold:
/// the part of `path` that is there, then the name closest to the first part that is not.
fn meant(ctx: &Value, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut v = ctx;
    for (i, k) in parts.iter().enumerate() {
        match v.get(k) {
            Some(next) => v = next,
            None => {
                let keys = v.as_object()?.keys().map(String::as_str);
                let c = weft_core::diagnose::closest(k, keys)?;
                let mut out: Vec<&str> = parts[..i].to_vec();
                out.push(c);
                out.extend(&parts[i + 1..]);
                return Some(out.join("."));
            }
        }
    }
    None
}

/// Who starts a session and what it is about.
#[derive(Clone, Debug, Default)]
pub struct SessionInfo {
    /// The new session's id (a time-ordered UUID when absent).
    pub id: Option<String>,
    /// The user the session belongs to; None for a session without one.
    pub user_id: Option<String>,
    /// An outside reference, e.g. a chat id.
    pub reference_id: Option<String>,
    /// Free-form JSON stored with the session; the instructions see it as `session.metadata`.
    pub metadata: Value,
    /// The session this one runs under (a sub-agent's parent); None for a top-level session.
    pub parent_id: Option<String>,
}

/// A run to queue with [`Runtime::queue_agents`]: what [`Runtime::queue_agent`] takes.
#[derive(Clone, Debug)]
pub struct NewRun {
    /// The new session.
    pub info: SessionInfo,
    /// The task.
    pub task: String,
    /// The run's input.
    pub input: Value,
    /// Events recorded after the task's (e.g. a budget).
    pub extra: Vec<Event>,
}

/// The key of a session's metadata that records its agent file.
const AGENT_FILE: &str = "weft_agent_file";

/// Records in a session's `metadata` the agent file it runs (`weft_agent_file`), made absolute
/// so that it is found from any directory: [`agent_file_of`] reads it back (to continue the
/// session, answer it, follow its telemetry, replay it). Null metadata becomes an object;
/// metadata that is neither cannot hold it and is left as it is.
pub fn record_agent_file(metadata: &mut Value, path: &Path) {
    if metadata.is_null() {
        *metadata = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(m) = metadata {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        m.insert(
            AGENT_FILE.to_owned(),
            Value::String(path.display().to_string()),
        );
    }
}

/// The agent file a session records ([`record_agent_file`]), if any.
pub fn agent_file_of(metadata: &Value) -> Option<std::path::PathBuf> {
    metadata
        .get(AGENT_FILE)
        .and_then(Value::as_str)
        .map(std::path::PathBuf::from)
}

fn delta_sink(observers: &[Observer]) -> Option<DeltaSink> {
    if observers.is_empty() {
        return None;
    }
    let observers = observers.to_vec();
    Some(Arc::new(move |text: &str| {
        let e = Envelope {
            epoch: 0,
            seq: 0,
            ts: now_ms(),
            v: EVENT_VERSION,
            event: Event::TextDelta {
                text: text.to_owned(),
            },
        };
        for o in &observers {
            o(&e);
        }
    }))
}

impl<S: Store> Runtime<S> {
    /// Creates a session for an agent (no turn yet).
    pub async fn create_session(
        &self,
        agent: &Agent,
        info: SessionInfo,
        input: Value,
    ) -> Result<Session<'_, S>, RuntimeError> {
        self.start_session(
            &agent.name,
            Some(agent.config.mode),
            info,
            input,
            Vec::new(),
        )
        .await
    }

    /// Gives the session a new task and runs it until it answers, fails or waits.
    pub async fn run_task(
        &self,
        agent: &Agent,
        session: &mut Session<'_, S>,
        task: &str,
        input: Value,
    ) -> Result<(), RuntimeError> {
        self.queue_task(session, task, input).await?;
        self.drive_agent(agent, session).await
    }

    /// Gives the session a new task (stored with anything staged), without driving it.
    pub async fn queue_task(
        &self,
        session: &mut Session<'_, S>,
        task: &str,
        input: Value,
    ) -> Result<(), RuntimeError> {
        session.commit(agent_loop::start_turn(task, input)).await
    }

    /// Continues a session that waits for a person with their answer.
    pub async fn reply(
        &self,
        agent: &Agent,
        session: &mut Session<'_, S>,
        text: &str,
    ) -> Result<(), RuntimeError> {
        self.queue_reply(agent, session, text).await?;
        self.drive_agent(agent, session).await
    }

    /// Drives an agent session until it is done or waits. An unexpected error is saved in the
    /// session (as failed, with the error) before it is returned.
    pub async fn drive_agent(
        &self,
        agent: &Agent,
        session: &mut Session<'_, S>,
    ) -> Result<(), RuntimeError> {
        self.drive_agent_with(agent, session, Vec::new()).await
    }

    /// Continues a session whose process stopped while it was running: calls that were in
    /// flight are re-run (idempotent tools) or recorded with an unknown outcome (the others),
    /// then the agent goes on.
    pub async fn resume_agent(
        &self,
        agent: &Agent,
        session: &mut Session<'_, S>,
    ) -> Result<(), RuntimeError> {
        let rec = weft_core::recovery::recover(
            &session.state,
            agent.tools.as_ref(),
            &agent.config.limits,
        );
        session.commit(rec.events).await?;
        self.drive_agent_with(agent, session, rec.rerun).await
    }

    async fn drive_agent_with(
        &self,
        agent: &Agent,
        session: &mut Session<'_, S>,
        rerun: Vec<Invocation>,
    ) -> Result<(), RuntimeError> {
        match self.drive_agent_inner(agent, session, rerun).await {
            Ok(()) => Ok(()),
            Err(e) => {
                if !session.state.status().is_terminal()
                    && !matches!(e, RuntimeError::Store(_) | RuntimeError::Stopped)
                {
                    let _ = session
                        .commit(vec![Event::RunFinished {
                            status: RunStatus::Failed,
                            error: Some(format!("internal error: {e}")),
                            answer: None,
                        }])
                        .await;
                }
                Err(e)
            }
        }
    }

    async fn drive_agent_inner(
        &self,
        agent: &Agent,
        session: &mut Session<'_, S>,
        rerun: Vec<Invocation>,
    ) -> Result<(), RuntimeError> {
        let mut inflight = Calls::new(self.sub_agent_runner(), self.depth);
        for call in rerun {
            inflight.spawn(&agent.tools, &session.state, call);
        }
        let mut wall = crate::budget::WallClock::default();
        if self.quota.as_ref().is_some_and(|q| q.quota.has_cost()) {
            crate::budget::warn_unpriced_cost(agent.model.as_ref());
        }
        loop {
            let next = agent_loop::decide(&session.state, &agent.config);
            // A wall-time limit is checked here, before a call, as the core checks the others
            // (the core reads no clock); at a safe point: no call in flight.
            if matches!(next, AgentNext::CallModel { .. } | AgentNext::Start { .. })
                && session.state.calls().open.is_empty()
                && !inflight.busy()
            {
                let budget = agent_loop::budget::in_force(&session.state, &agent.config).cloned();
                let id = session.id.clone();
                if let Some(events) = self
                    .wall_time_reached(budget.as_ref(), &id, &session.state, &mut wall)
                    .await?
                {
                    drop(next);
                    session.commit(events).await?;
                    continue;
                }
            }
            match next {
                AgentNext::Record(events) => session.commit(events).await?,
                AgentNext::Recall { query, limit } => {
                    let found = crate::knowledge::recall_memories(
                        &self.store,
                        self.embedder.clone(),
                        &session.id,
                        &query,
                        limit,
                    )
                    .await;
                    session
                        .commit(agent_loop::memories_recalled(&agent.config, &query, found))
                        .await?;
                }
                AgentNext::CallModel { .. } | AgentNext::Start { .. } if self.stopping() => {
                    self.stop_here(&mut inflight, session, &agent.config.limits)
                        .await?;
                }
                AgentNext::CallModel { request, step } => {
                    // The user's quota, read from the store (shared by every process), is
                    // checked as the core checks a budget: with what the call may cost at most.
                    if self.quota.is_some() {
                        let max = weft_core::budget::call_max(&request, &agent.config.model_costs);
                        if let Some(r) = self.quota_reached(&max).await? {
                            drop(request);
                            if session.state.calls().open.is_empty() && !inflight.busy() {
                                let budget =
                                    agent_loop::budget::in_force(&session.state, &agent.config)
                                        .cloned()
                                        .unwrap_or_default();
                                let events =
                                    agent_loop::budget::reached(&session.state, &budget, &r);
                                session.commit(events).await?;
                            } else {
                                inflight.settle(session, &agent.config.limits).await?;
                            }
                            continue;
                        }
                    }
                    let before = session.state.spending().session.clone();
                    // `call_model` takes the request and drops it: a request shares the
                    // conversation with the state, and the reply's append must find it unshared
                    // or it copies the whole conversation (see `weft_core::history`).
                    let events = self
                        .call_model(agent, &session.state, request, step.as_deref())
                        .await;
                    session.stage(events)?;
                    if self.quota.is_some() {
                        let used = weft_core::quota::Used::between(
                            &before,
                            &session.state.spending().session,
                        );
                        self.quota_spent(&used).await?;
                    }
                }
                AgentNext::Start { events, calls } => {
                    inflight.start(session, &agent.tools, events, calls).await?;
                }
                AgentNext::Wait => inflight.settle(session, &agent.config.limits).await?,
                AgentNext::Done => return session.flush().await,
            }
        }
    }

    /// Asks the model and turns its reply (or failure) into events. Takes the request so that it
    /// is gone when the events are applied.
    async fn call_model(
        &self,
        agent: &Agent,
        state: &State,
        request: ModelRequest,
        step: Option<&str>,
    ) -> Vec<Event> {
        let purpose = request.purpose;
        let stream = matches!(purpose, Purpose::React | Purpose::Respond);
        // The call's latency and, when its text streams, the time to its first piece.
        let began = std::time::Instant::now();
        let first = Arc::new(std::sync::OnceLock::new());
        let deltas = if stream {
            delta_sink(&self.session_observers()).map(|sink| {
                let first = Arc::clone(&first);
                Arc::new(move |text: &str| {
                    first.get_or_init(std::time::Instant::now);
                    sink(text);
                }) as DeltaSink
            })
        } else {
            None
        };
        let result = agent.model.complete_boxed(&request, deltas).await;
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let timing = Timing {
            latency_ms: ms(began.elapsed()),
            ttft_ms: first.get().map(|t| ms(t.duration_since(began))),
        };
        drop(request);
        match result {
            Ok(mut reply) => {
                reply.timing = Some(timing);
                agent_loop::model_replied(state, &agent.config, purpose, step, reply)
            }
            Err(e) => agent_loop::model_failed(
                state,
                &agent.config,
                purpose,
                e.to_string(),
                e.is_retryable(),
                e.usage(),
            ),
        }
    }

    /// Starts a session for `agent` and runs `task` in it.
    pub async fn run_agent(
        &self,
        agent: &Agent,
        info: SessionInfo,
        task: &str,
        input: Value,
    ) -> Result<Session<'_, S>, RuntimeError> {
        let mut session = self
            .queue_agent(agent, info, task, input, Vec::new())
            .await?;
        self.drive_agent(agent, &mut session).await?;
        Ok(session)
    }

    /// Creates a session with its first task (and `extra` events after it), in one write, and
    /// leaves it for a worker to drive (`weft submit`): it is running, and no process holds it
    /// until one claims it.
    pub async fn queue_agent(
        &self,
        agent: &Agent,
        info: SessionInfo,
        task: &str,
        input: Value,
        extra: Vec<Event>,
    ) -> Result<Session<'_, S>, RuntimeError> {
        let mut first = agent_loop::start_turn(task, input.clone());
        first.extend(extra);
        self.start_session(&agent.name, Some(agent.config.mode), info, input, first)
            .await
    }

    /// Queues many new sessions of `agent` for workers, each as [`Runtime::queue_agent`] queues
    /// one, written together (one transaction on PostgreSQL; see
    /// [`weft_store::SessionLog::create_many`]). For each run, in order, its session's id or
    /// why the store refused it (its id is taken). Nothing is published: no one watches a
    /// session before it exists.
    pub async fn queue_agents(
        &self,
        agent: &Agent,
        runs: Vec<NewRun>,
    ) -> Result<Vec<Result<String, StoreError>>, RuntimeError> {
        let starts = runs
            .into_iter()
            .map(|r| {
                let mut first = agent_loop::start_turn(&r.task, r.input.clone());
                first.extend(r.extra);
                crate::Start {
                    agent: agent.name.clone(),
                    mode: Some(agent.config.mode),
                    info: r.info,
                    input: r.input,
                    first,
                }
            })
            .collect();
        self.start_sessions(starts).await
    }

    /// Records a person's answer to a session that waits, and leaves it for a worker to drive.
    pub async fn queue_reply(
        &self,
        agent: &Agent,
        session: &mut Session<'_, S>,
        text: &str,
    ) -> Result<(), RuntimeError> {
        self.check_waiting(session)?;
        let events = agent_loop::user_replied(&session.state, &agent.config, text);
        session.commit(events).await
    }

    fn check_waiting(&self, session: &Session<'_, S>) -> Result<(), RuntimeError> {
        // An answer to nothing would reopen a finished session (or one another process drives).
        if session.state.status() != SessionStatus::WaitingForUser {
            return Err(RuntimeError::Config(format!(
                "session {} is not waiting for an answer (it is {}); give it a new task instead",
                session.id,
                session.state.status().as_str()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_model::{ScriptedModel, ScriptedReply};
    use weft_store::RamStore;
    use weft_tools::Echo;

    use super::*;

    /// Every model request shares the session's conversation; the shell must drop it before the
    /// reply is applied, or each append copies the conversation. `copies` counts those copies.
    #[tokio::test]
    async fn react_iterations_never_copy_the_history() {
        let mut reg = Registry::new();
        reg.register(Echo::default()).unwrap();
        let tools = Arc::new(reg);
        let spec = AgentSpec::parse(
            "t.yaml",
            "name: t\nmode: react\nlimits:\n  max_iterations: 20\n",
        )
        .unwrap();
        let mut call = ScriptedReply::tool_call("echo", json!({"text": "x"}));
        call.repeat = Some(8);
        let model = Arc::new(ScriptedModel::new(
            "t",
            vec![
                call,
                ScriptedReply::text("done"),
                ScriptedReply::tool_call("echo", json!({"text": "y"})),
                ScriptedReply::text("again"),
            ],
        ));
        let agent =
            Agent::new(&spec, Arc::clone(&tools), model, &Value::Null, &Value::Null).unwrap();
        let rt = Runtime::builder(
            Arc::new(RamStore::new()),
            tools,
            spec.limits.clone(),
            None,
            None,
        )
        .build();
        let mut session = rt
            .run_agent(&agent, SessionInfo::default(), "go", Value::Null)
            .await
            .unwrap();
        assert_eq!(session.state.turn().answer(), Some("done"));
        // The task, 8 calls with their results, and the answer.
        assert_eq!(session.state.history().len(), 18);
        assert!(!session.state.history().is_shared());
        assert_eq!(session.state.history().copies(), 0);
        // A second turn in the same session: still no copy.
        rt.run_task(&agent, &mut session, "more", Value::Null)
            .await
            .unwrap();
        assert_eq!(session.state.turn().answer(), Some("again"));
        assert_eq!(session.state.history().len(), 22);
        assert_eq!(session.state.history().copies(), 0);
    }
}
