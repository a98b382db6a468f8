//! Other agents as tools. A call of an `agent:` tool runs the child agent in a session of its
//! own, linked to the parent session; the child's answer is the tool result.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::{Limits, SessionStatus, ToolError, ToolOutcome};
use weft_store::Store;
use weft_tools::{AgentToolDecl, ProcessDecl, Registry};

use crate::quota::UserQuota;
use crate::{Agent, Observer, Redact, Runtime, SessionInfo};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs the linked child sessions of calls: sub-agents, and processes (plans reused as tools).
pub trait SubAgents: Send + Sync {
    /// Runs the sub-agent `decl` names on `task` as a child session of `parent_session`, at
    /// nesting `depth` (a call from a top-level session is at 0); its answer, or an error
    /// outcome when it fails or nests deeper than [`MAX_DEPTH`].
    fn run(
        &self,
        decl: AgentToolDecl,
        task: String,
        parent_session: String,
        depth: u32,
    ) -> BoxFuture<ToolOutcome>;

    /// Runs (or, after a crash, continues) the process a call names; `key` is the call's
    /// idempotency key, which names the child session.
    fn run_process(
        &self,
        decl: ProcessDecl,
        args: Value,
        parent_session: String,
        key: String,
        depth: u32,
    ) -> BoxFuture<ToolOutcome>;
}

/// Sub-agents in the same store as their parent.
pub struct StoreSubAgents<S: Store> {
    /// The store of the parent sessions, where the children are stored too.
    pub store: Arc<S>,
    /// Called with every event of a child session.
    pub observers: Vec<Observer>,
    /// Applied to every event of a child session before it is stored or shown.
    pub redact: Option<Redact>,
    /// The quota of the parent's user, which the children's model calls are held to and
    /// counted against as the parent's own are.
    pub quota: Option<UserQuota>,
}

impl<S: Store> Clone for StoreSubAgents<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            observers: self.observers.clone(),
            redact: self.redact.clone(),
            quota: self.quota.clone(),
        }
    }
}

impl<S: Store> StoreSubAgents<S> {
    /// The same children, whose events go to no observer (a process's: see [`crate::process`]).
    pub(crate) fn unobserved(&self) -> Self {
        Self {
            observers: Vec::new(),
            ..self.clone()
        }
    }

    /// The runtime of a child session (a sub-agent, a process) called from a session at
    /// nesting `depth`: it stores in the parent's store, is held to the parent's quota, hands
    /// its events to these observers, hides the parent's secrets and, when its own file
    /// declares some (`secrets`), its tools' own, and runs its own children the same way, one
    /// level deeper. Every child is built here, so none can forget what its parent has.
    pub fn child_runtime(
        &self,
        tools: Arc<Registry>,
        limits: Limits,
        secrets: bool,
        depth: u32,
    ) -> Runtime<S> {
        // The child's events hide the parent's secrets and its own.
        let redact: Option<Redact> = match (self.redact.clone(), secrets) {
            (parent, false) => parent,
            (parent, true) => {
                let own = tools.redactor();
                Some(Arc::new(move |s: &mut String| {
                    own.redact_in_place(s);
                    if let Some(p) = &parent {
                        p(s);
                    }
                }))
            }
        };
        let mut built = Runtime::builder(
            Arc::clone(&self.store),
            tools,
            limits,
            self.quota.clone(),
            None,
        );
        for o in &self.observers {
            built = built.observe(o.clone());
        }
        built
            .redact(redact.clone())
            .sub_agents(Arc::new(Self {
                redact,
                ..self.clone()
            }))
            .depth(depth + 1)
            .build()
    }
}

/// How deep sub-agents may nest (a guard against an agent that calls itself).
pub const MAX_DEPTH: u32 = 4;

fn error(kind: &str, message: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Error {
        error: ToolError::new(kind, message),
    }
}

impl<S: Store> SubAgents for StoreSubAgents<S> {
    fn run_process(
        &self,
        decl: ProcessDecl,
        args: Value,
        parent_session: String,
        key: String,
        depth: u32,
    ) -> BoxFuture<ToolOutcome> {
        Box::pin(crate::process::run(
            self.unobserved(),
            decl,
            args,
            parent_session,
            key,
            depth,
        ))
    }

    fn run(
        &self,
        decl: AgentToolDecl,
        task: String,
        parent_session: String,
        depth: u32,
    ) -> BoxFuture<ToolOutcome> {
        let parent = self.clone();
        Box::pin(async move {
            if depth >= MAX_DEPTH {
                return error(
                    "agent_tool",
                    format!(
                        "sub-agents nest deeper than {MAX_DEPTH}; `{}` was not run",
                        decl.name
                    ),
                );
            }
            let path = decl.path.clone();
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    return error(
                        "agent_tool",
                        format!("cannot read agent file {}: {e}", path.display()),
                    );
                }
            };
            let spec = match AgentSpec::parse(&path.display().to_string(), &text) {
                Ok(s) => s,
                Err(e) => return error("agent_tool", e.to_string()),
            };
            let base = path
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            let tools = match Registry::from_agent_async(&spec, &base, BTreeMap::new()).await {
                Ok(t) => Arc::new(t),
                Err(e) => {
                    return error("agent_tool", format!("agent file {}: {e}", path.display()));
                }
            };
            let model = match Agent::model_from_spec(&spec, &base) {
                Ok(m) => m,
                Err(e) => return error("agent_tool", e.to_string()),
            };
            let mut metadata = json!({"parent_session": parent_session});
            crate::record_agent_file(&mut metadata, &path);
            let agent = match Agent::new(
                &spec,
                tools.clone(),
                model,
                &metadata,
                &Value::Object(serde_json::Map::new()),
            ) {
                Ok(a) => a,
                Err(e) => return error("agent_tool", e.to_string()),
            };
            let rt = parent.child_runtime(
                tools.clone(),
                spec.limits.clone(),
                !spec.secrets.is_empty(),
                depth,
            );
            let info = SessionInfo {
                parent_id: Some(parent_session),
                metadata,
                ..SessionInfo::default()
            };
            let outcome = match rt
                .run_agent(&agent, info, &task, Value::Object(serde_json::Map::new()))
                .await
            {
                Ok(session) => {
                    let st = &session.state;
                    match st.status {
                        SessionStatus::Completed => ToolOutcome::Ok {
                            output: json!({"answer": st.turn.answer(), "session_id": session.id}),
                        },
                        SessionStatus::WaitingForUser => error(
                            "agent_tool",
                            format!(
                                "the sub-agent `{}` (session {}) needs a person: {}",
                                decl.name,
                                session.id,
                                st.turn
                                    .waiting()
                                    .map(|w| w.question.as_str())
                                    .unwrap_or_default()
                            ),
                        ),
                        _ => error(
                            "agent_tool",
                            format!(
                                "the sub-agent `{}` (session {}) could not complete: {}",
                                decl.name,
                                session.id,
                                st.turn.error().unwrap_or("unknown reason")
                            ),
                        ),
                    }
                }
                Err(e) => error(
                    "agent_tool",
                    format!("the sub-agent `{}` failed: {e}", decl.name),
                ),
            };
            tools.shutdown().await;
            outcome
        })
    }
}
