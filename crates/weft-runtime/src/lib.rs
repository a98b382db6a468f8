//! weft's shell. It asks the core what to do next (`decide`), performs it (tool calls), turns
//! outcomes into events, appends them to the store atomically, applies them to the state and
//! publishes them to observers. It holds no engine logic of its own.
#![warn(missing_docs, unreachable_pub)]

mod agent;
pub mod budget;
mod builder;
mod calls;
pub mod clock;
mod knowledge;
mod patience;
mod process;
pub mod quota;
pub mod retrieval;
mod session;
pub mod snapshots;
mod subagent;

use std::sync::Arc;

use serde_json::Value;
use weft_core::agent::Mode;
use weft_core::engine::{self, Invocation, Next};
use weft_core::graph::{ValidateOptions, validate};
use weft_core::{Event, Limits, Plan, PlanProblem, State};
use weft_store::{NewSession, Store, StoreError};
use weft_tools::Registry;

pub use agent::{Agent, NewRun, SessionInfo, agent_file_of, record_agent_file};
pub use builder::RuntimeBuilder;
use calls::Calls;
pub use clock::{Clock, ManualClock, SharedClock, SystemClock, system_clock};
pub use knowledge::StoreKnowledge;
pub use process::child_id as process_session_id;
pub use session::{Observer, Redact, Session};
pub use snapshots::{Hold, Loaded, load_state, load_state_holding};
pub use subagent::{MAX_DEPTH, StoreSubAgents, SubAgents};

/// A session for [`Runtime::start_sessions`] to create: what `start_session` takes.
pub(crate) struct Start {
    agent: String,
    mode: Option<Mode>,
    info: SessionInfo,
    input: Value,
    first: Vec<Event>,
}

/// Runtime failures (a failed step is not one: it is an outcome recorded in the session).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The store failed, or refused an append (another writer, a lost lease).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The plan does not pass validation; every problem found is listed.
    #[error("the plan is invalid:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    InvalidPlan(Vec<PlanProblem>),
    /// An agent's file cannot be run as written (a skill, a template, a tool it names); the
    /// message names the agent and the field.
    #[error("{0}")]
    Config(String),
    /// The runtime found itself in a state it should never reach, e.g. a tool task that
    /// vanished; the message says which.
    #[error("{0}")]
    Internal(String),
    /// The run stopped at a safe point because it was asked to ([`RuntimeBuilder::stop_on`]): no call
    /// was in flight, everything is stored, and the session can be continued.
    #[error("the run stopped at a safe point, as it was asked to")]
    Stopped,
}

/// Unix time in milliseconds, by the system's clock. Code that a test must be able to move
/// through time reads a [`Clock`] passed to it instead.
pub fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// A new session id (time-ordered UUID).
pub fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The first event of a new session.
pub(crate) fn session_started(
    id: &str,
    agent: &str,
    mode: Option<Mode>,
    input: Value,
    parent_id: Option<String>,
) -> Event {
    Event::SessionStarted {
        session_id: id.to_owned(),
        agent: agent.to_owned(),
        input,
        mode,
        parent_id,
    }
}

/// Runs plans and agents against a store and a registry of tools. It is configured once, by
/// [`Runtime::builder`], whose required arguments are what a front end may not forget (the
/// user's quota and the run's live telemetry); nothing is assigned to it afterwards.
pub struct Runtime<S: Store> {
    /// Where sessions are stored.
    pub(crate) store: Arc<S>,
    /// The tools plans call.
    pub(crate) tools: Arc<Registry>,
    /// The limits every run is held to (steps, time, retries).
    pub(crate) limits: Limits,
    /// Called with every event once it is stored, in order: the events of this runtime's
    /// sessions and of the sub-agents' sessions they start (an event does not say whose it is).
    pub(crate) observers: Vec<Observer>,
    /// Called with the events of this runtime's own sessions only, in order, not with those of
    /// the sub-agents' sessions (which run in runtimes of their own): what follows one session,
    /// such as its live telemetry, needs that session's events alone.
    pub(crate) own_observers: Vec<Observer>,
    /// Applied to every event before it is stored or shown (secrets).
    pub(crate) redact: Option<Redact>,
    /// Runs `agent:` tools (default: sub-agents in this runtime's store).
    pub(crate) sub_agents: Option<Arc<dyn SubAgents>>,
    /// How deep this runtime's sessions are nested under parents (sub-agents).
    pub(crate) depth: u32,
    /// The session this process holds the lease of, and the lease's epoch: that session's
    /// events are written at the epoch, so the store refuses them once the lease is lost.
    pub(crate) fence: Option<(String, u64)>,
    /// When it turns true, the run starts no new model or tool call, waits for the calls in
    /// flight, stores their outcomes and returns [`RuntimeError::Stopped`] (pause, drain).
    pub(crate) stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// A session's state is snapshotted with an append once this many events followed the
    /// last snapshot (0: never); see [`snapshots`].
    pub(crate) snapshot_every: u64,
    /// A head of this many bytes pushes a session's next snapshot back by one event (0: heads
    /// never push it back); [`snapshots::HEAD_BYTES_PER_EVENT`] by default.
    pub(crate) snapshot_head_bytes: u64,
    /// What makes the vectors of memories and documents (none: search by text alone); see
    /// [`retrieval`].
    pub(crate) embedder: Option<Arc<weft_model::Embedder>>,
    /// Where events' timestamps come from (the system's clock unless a test sets another).
    pub(crate) clock: SharedClock,
    /// The user whose sessions this runtime drives, and their quota: checked before every
    /// model call when it limits spending, added to after every call (see [`quota`]); none: no
    /// user, nothing counted.
    pub(crate) quota: Option<quota::UserQuota>,
}

/// What a run of `plan` with `input` would refuse before its first step: its problems, every
/// tool it names checked against `tools`. Checking runs nothing (no store, no runtime).
pub fn check_plan(
    plan: &Plan,
    tools: &weft_tools::Registry,
    input: Option<&Value>,
) -> Vec<PlanProblem> {
    validate(
        plan,
        tools,
        &ValidateOptions {
            input,
            require_tools: true,
            ..ValidateOptions::default()
        },
    )
}

impl<S: Store> Runtime<S> {
    /// Starts configuring a runtime. `quota` is the user whose sessions it drives and their
    /// quota (none: no user, nothing counted), `telemetry` the observer of its own sessions'
    /// live telemetry (none: telemetry is off); both are required so that no front end
    /// forgets them.
    pub fn builder(
        store: Arc<S>,
        tools: Arc<Registry>,
        limits: Limits,
        quota: Option<quota::UserQuota>,
        telemetry: Option<Observer>,
    ) -> RuntimeBuilder<S> {
        RuntimeBuilder::new(store, tools, limits, quota, telemetry)
    }

    /// The store this runtime writes to.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The tools its plans and agents call.
    pub fn tools(&self) -> &Arc<Registry> {
        &self.tools
    }

    /// The limits its runs are held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The observers of this runtime's own sessions: both kinds.
    pub(crate) fn session_observers(&self) -> Vec<Observer> {
        self.observers
            .iter()
            .chain(&self.own_observers)
            .cloned()
            .collect()
    }

    /// The runner of `agent:` tools.
    pub(crate) fn sub_agent_runner(&self) -> Arc<dyn SubAgents> {
        match &self.sub_agents {
            Some(r) => Arc::clone(r),
            None => Arc::new(StoreSubAgents {
                store: Arc::clone(&self.store),
                observers: self.observers.clone(),
                redact: self.redact.clone(),
                quota: self.quota.clone(),
            }),
        }
    }

    /// Whether the run was asked to stop at the next safe point.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| *s.borrow())
    }

    /// At a point where the run would start new work and was asked to stop: waits for a call
    /// in flight (true: go on deciding), or, with none left, stores what is staged and stops.
    pub(crate) async fn stop_here(
        &self,
        calls: &mut Calls,
        session: &mut Session<'_, S>,
        limits: &Limits,
    ) -> Result<(), RuntimeError> {
        if calls.busy() {
            return calls.settle(session, limits).await;
        }
        session.flush().await?;
        Err(RuntimeError::Stopped)
    }

    /// A handle on a session of this runtime's store, with its observers and redaction.
    pub fn session(&self, id: String, state: State) -> Session<'_, S> {
        self.session_at(id, state, snapshots::Cursor::default())
    }

    fn session_at(&self, id: String, state: State, cursor: snapshots::Cursor) -> Session<'_, S> {
        let epoch = match &self.fence {
            Some((fenced, epoch)) if *fenced == id => *epoch,
            _ => 0,
        };
        Session::new(self.store.as_ref(), id, state, self.session_observers())
            .with_redactor(self.redact.clone())
            .with_clock(Arc::clone(&self.clock))
            .with_epoch(epoch)
            .with_snapshots((self.snapshot_every, self.snapshot_head_bytes), cursor)
    }

    /// Loads a session: its newest snapshot and the events after it, or, when it has no usable
    /// snapshot, the fold of its whole log (see [`snapshots`]). A store that is briefly away is
    /// waited for, as appends wait for it.
    pub async fn load_session(&self, id: &str) -> Result<Session<'_, S>, RuntimeError> {
        let what = format!("loading session {id}");
        let loaded = patience::patiently(&what, || load_state(self.store.as_ref(), id)).await?;
        Ok(self.session_at(id.to_owned(), loaded.state, loaded.cursor))
    }

    /// Validates a plan against the registry (and the input, when given).
    pub fn check_plan(&self, plan: &Plan, input: Option<&Value>) -> Vec<PlanProblem> {
        check_plan(plan, &self.tools, input)
    }

    /// Starts a session that runs `plan` with `input`, and drives it to its end.
    pub async fn run_plan(
        &self,
        agent: &str,
        plan: Plan,
        input: Value,
    ) -> Result<Session<'_, S>, RuntimeError> {
        self.run_plan_in(agent, plan, input, SessionInfo::default())
            .await
    }

    /// Like [`Runtime::run_plan`], with the new session's id and metadata.
    pub async fn run_plan_in(
        &self,
        agent: &str,
        mut plan: Plan,
        input: Value,
        info: SessionInfo,
    ) -> Result<Session<'_, S>, RuntimeError> {
        let problems = self.check_plan(&plan, Some(&input));
        if !problems.is_empty() {
            return Err(RuntimeError::InvalidPlan(problems));
        }
        engine::normalize(&mut plan, self.tools.as_ref());
        let mut session = self
            .start_session(agent, None, info, input, vec![Event::PlanAccepted { plan }])
            .await?;
        self.drive_plan(&mut session).await?;
        Ok(session)
    }

    /// Continues a plan run whose process stopped (see [`Runtime::resume_agent`]).
    pub async fn resume_plan(&self, session: &mut Session<'_, S>) -> Result<(), RuntimeError> {
        let rec = weft_core::recovery::recover(&session.state, self.tools.as_ref(), &self.limits);
        session.commit(rec.events).await?;
        self.drive_plan_with(session, rec.rerun).await
    }

    /// Creates a session and records its start (`session_started`, then `first`) in one write.
    /// A session with this id that exists but has no events (its creator died before recording
    /// anything) is taken over.
    pub(crate) async fn start_session(
        &self,
        agent: &str,
        mode: Option<Mode>,
        info: SessionInfo,
        input: Value,
        first: Vec<Event>,
    ) -> Result<Session<'_, S>, RuntimeError> {
        let id = info.id.unwrap_or_else(new_session_id);
        let mut events = vec![session_started(
            &id,
            agent,
            mode,
            input,
            info.parent_id.clone(),
        )];
        events.extend(first);
        let new = NewSession {
            id: id.clone(),
            agent: agent.to_owned(),
            user_id: info.user_id,
            reference_id: info.reference_id,
            metadata: info.metadata,
            parent_id: info.parent_id,
        };
        let mut session = self.session(id, State::new());
        session.create(new, events).await?;
        Ok(session)
    }

    /// Creates many sessions, each as [`Runtime::start_session`] creates one, in one write of
    /// the store's ([`weft_store::SessionLog::create_many`]: one transaction on PostgreSQL, and
    /// on SQLite up to 1,024 creations to a commit). Their events are neither applied nor
    /// published here: these sessions are for workers, which load them. For each, in order, its
    /// id or the store's refusal.
    pub(crate) async fn start_sessions(
        &self,
        starts: Vec<Start>,
    ) -> Result<Vec<Result<String, StoreError>>, RuntimeError> {
        let ts = self.clock.now_ms();
        let mut batch = Vec::with_capacity(starts.len());
        for st in starts {
            let id = st.info.id.unwrap_or_else(new_session_id);
            let mut events = vec![session_started(
                &id,
                &st.agent,
                st.mode,
                st.input,
                st.info.parent_id.clone(),
            )];
            events.extend(st.first);
            let (events, status) = self.session(id.clone(), State::new()).creation(events, ts);
            batch.push(weft_store::NewLog {
                session: NewSession {
                    id,
                    agent: st.agent,
                    user_id: st.info.user_id,
                    reference_id: st.info.reference_id,
                    metadata: st.info.metadata,
                    parent_id: st.info.parent_id,
                },
                events,
                status,
            });
        }
        let mut patience = crate::patience::Patience::new();
        let what = format!("creating {} sessions", batch.len());
        let answers = loop {
            match self.store.create_many(&batch, ts).await {
                Ok(answers) => break answers,
                Err(e) => {
                    if !patience.again(&e, &what).await {
                        return Err(e.into());
                    }
                }
            }
        };
        let mut ids = Vec::with_capacity(batch.len());
        for (n, refused) in batch.into_iter().zip(answers) {
            ids.push(match refused {
                None => Ok(n.session.id),
                // Asked again after a try whose answer was lost: that try may have created it.
                Some(StoreError::Exists(id))
                    if patience.tried()
                        && self
                            .session(id.clone(), State::new())
                            .written_already(0, &n.events)
                            .await? =>
                {
                    Ok(id)
                }
                Some(e) => Err(e),
            });
        }
        Ok(ids)
    }

    /// Drives a plan session until the engine says it is done.
    pub async fn drive_plan(&self, session: &mut Session<'_, S>) -> Result<(), RuntimeError> {
        self.drive_plan_with(session, Vec::new()).await
    }

    async fn drive_plan_with(
        &self,
        session: &mut Session<'_, S>,
        rerun: Vec<Invocation>,
    ) -> Result<(), RuntimeError> {
        let mut calls = Calls::new(self.sub_agent_runner(), self.depth);
        for call in rerun {
            calls.spawn(&self.tools, &session.state, call);
        }
        loop {
            match engine::decide(&session.state, &self.limits) {
                Next::Record(events) => session.commit(events).await?,
                Next::Start { .. } | Next::CallExecutor { .. } if self.stopping() => {
                    self.stop_here(&mut calls, session, &self.limits).await?;
                }
                Next::Start {
                    events,
                    calls: starts,
                } => calls.start(session, &self.tools, events, starts).await?,
                Next::Wait => calls.settle(session, &self.limits).await?,
                Next::Done => return session.flush().await,
                Next::CallExecutor { step } => {
                    return Err(RuntimeError::Internal(format!(
                        "step `{step}` needs the step executor, which a plan run without a model does not have"
                    )));
                }
            }
        }
    }
}
