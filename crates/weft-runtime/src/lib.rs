//! weft's shell. It asks the core what to do next (`decide`), performs it (tool calls), turns
//! outcomes into events, appends them to the store atomically, applies them to the state and
//! publishes them to observers. It holds no engine logic of its own.

mod session;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::task::JoinSet;
use weft_core::engine::{self, Invocation, Next};
use weft_core::graph::{ValidateOptions, validate};
use weft_core::{Event, Limits, Plan, PlanProblem, State, ToolOutcome};
use weft_store::{NewSession, Store, StoreError};
use weft_tools::{Registry, ToolContext};

pub use session::{Observer, Session};

/// Runtime failures (a failed step is not one: it is an outcome recorded in the session).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the plan is invalid:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    InvalidPlan(Vec<PlanProblem>),
    #[error("{0}")]
    Internal(String),
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A new session id (time-ordered UUID).
pub fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Runs plans and agents against a store and a registry of tools.
pub struct Runtime<S: Store> {
    pub store: Arc<S>,
    pub tools: Arc<Registry>,
    pub limits: Limits,
    pub observers: Vec<Observer>,
}

impl<S: Store> Runtime<S> {
    pub fn new(store: Arc<S>, tools: Arc<Registry>, limits: Limits) -> Self {
        Self {
            store,
            tools,
            limits,
            observers: Vec::new(),
        }
    }

    /// Adds an observer that sees every event after it is stored.
    #[must_use]
    pub fn observe(mut self, o: Observer) -> Self {
        self.observers.push(o);
        self
    }

    /// Validates a plan against the registry (and the input, when given).
    pub fn check_plan(&self, plan: &Plan, input: Option<&Value>) -> Vec<PlanProblem> {
        validate(
            plan,
            self.tools.as_ref(),
            &ValidateOptions {
                input,
                require_tools: true,
                ..ValidateOptions::default()
            },
        )
    }

    /// Starts a session that runs `plan` with `input`, and drives it to its end.
    pub async fn run_plan(
        &self,
        agent: &str,
        mut plan: Plan,
        input: Value,
    ) -> Result<Session<'_, S>, RuntimeError> {
        let problems = self.check_plan(&plan, Some(&input));
        if !problems.is_empty() {
            return Err(RuntimeError::InvalidPlan(problems));
        }
        engine::normalize(&mut plan, self.tools.as_ref());
        let id = new_session_id();
        self.store
            .create(
                NewSession {
                    id: id.clone(),
                    agent: agent.to_owned(),
                    ..NewSession::default()
                },
                now_ms(),
            )
            .await?;
        let mut session = Session::new(
            self.store.as_ref(),
            id.clone(),
            State::new(),
            self.observers.clone(),
        );
        session
            .commit(vec![
                Event::SessionStarted {
                    session_id: id,
                    agent: agent.to_owned(),
                    input,
                },
                Event::PlanAccepted { plan },
            ])
            .await?;
        self.drive_plan(&mut session).await?;
        Ok(session)
    }

    /// Drives a plan session until the engine says it is done.
    pub async fn drive_plan(&self, session: &mut Session<'_, S>) -> Result<(), RuntimeError> {
        let mut inflight: JoinSet<(String, ToolOutcome, u64)> = JoinSet::new();
        // The call each task serves, so that a tool that panics fails its own call.
        let mut task_calls: HashMap<tokio::task::Id, String> = HashMap::new();
        loop {
            match engine::decide(&session.state, &self.limits) {
                Next::Record(events) => session.commit(events).await?,
                Next::Start { events, calls } => {
                    session.commit(events).await?;
                    for call in calls {
                        let call_id = call.call_id.clone();
                        let id = self.spawn_call(&mut inflight, &session.state, call);
                        task_calls.insert(id, call_id);
                    }
                }
                Next::Wait => {
                    let Some(first) = inflight.join_next_with_id().await else {
                        return Err(RuntimeError::Internal(
                            "the engine waits for tool calls but none is running".into(),
                        ));
                    };
                    let mut done = vec![first];
                    while let Some(more) = inflight.try_join_next_with_id() {
                        done.push(more);
                    }
                    // Outcomes of different calls concern different steps, so each is judged
                    // against the same state and all are stored in one batch.
                    let mut events = Vec::new();
                    for joined in done {
                        let (call_id, outcome, ms) = match joined {
                            Ok((id, result)) => {
                                task_calls.remove(&id);
                                result
                            }
                            Err(e) => {
                                let call_id = task_calls.remove(&e.id()).ok_or_else(|| {
                                    RuntimeError::Internal(format!("a tool task failed: {e}"))
                                })?;
                                if !e.is_panic() {
                                    return Err(RuntimeError::Internal(format!(
                                        "tool call {call_id} was cancelled: {e}"
                                    )));
                                }
                                (call_id, panicked(e.into_panic()), 0)
                            }
                        };
                        events.extend(engine::tool_finished(
                            &session.state,
                            &self.limits,
                            &call_id,
                            outcome,
                            ms,
                        ));
                    }
                    session.commit(events).await?;
                }
                Next::Done => return Ok(()),
            }
        }
    }

    fn spawn_call(
        &self,
        set: &mut JoinSet<(String, ToolOutcome, u64)>,
        state: &State,
        call: Invocation,
    ) -> tokio::task::Id {
        let tools = Arc::clone(&self.tools);
        let ctx = ToolContext {
            session_id: state.session_id.clone(),
            step: call.step.clone(),
            call_id: call.call_id.clone(),
            idempotency_key: call.idempotency_key.clone(),
            attempt: call.attempt,
        };
        set.spawn(async move {
            if call.delay_ms > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(call.delay_ms)).await;
            }
            let start = Instant::now();
            let outcome = tools.invoke(&call.tool, call.args, ctx).await;
            let ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
            (call.call_id, outcome, ms)
        })
        .id()
    }
}

/// The outcome of a call whose tool panicked: a failure that is not retried.
fn panicked(payload: Box<dyn std::any::Any + Send>) -> ToolOutcome {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    ToolOutcome::Error {
        error: weft_core::ToolError::new("panicked", format!("the tool panicked: {message}")),
    }
}
