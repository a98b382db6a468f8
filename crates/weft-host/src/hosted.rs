//! A session this process drives, from its runtime's setup to the end of its live telemetry: the
//! one place where a front end (`weft run`, `weft plan`, `weft resume`, `weft batch`, a worker,
//! an evaluation, the HTTP server) sets up the run it hosts.
//!
//! [`Hosted::start`] takes what a front end may not forget as arguments: the session's lease
//! (the runtime writes at its epoch and stops when asked), whose quota the model calls count
//! against, and what the session runs with ([`Setup`]: tools, limits, redaction, the agent file
//! that names the spans' provider). The session's live telemetry follows its events from there
//! ([`crate::telemetry::Live`]), and the work runs in its log span ([`Hosted::run`]) until it
//! ends or another process (or this one's shutdown) asks it to stop. The caller gives the lease
//! back once [`Hosted::end`] has sent the telemetry on its way.
//!
//! Work that is not hosted (queueing a session for the workers, the benchmarks) gets its
//! runtime from [`unleased`]; both are configured by one function here, so that the runtime of
//! every front end is built in one place.

use std::sync::Arc;

use serde_json::Value;
use weft_core::{Event, Limits};
use weft_runtime::{
    Agent, Observer, Redact, Runtime, RuntimeBuilder, RuntimeError, Session, SessionInfo,
};
use weft_store::Store;

use crate::drive::{AgentFile, Watchers};
use crate::ownership::{Asked, Held};
use crate::telemetry::{Live, Provider};
use crate::{Host, HostError};

/// What a hosted session runs with.
pub struct Setup {
    /// The model provider its spans name.
    pub provider: Provider,
    /// The run creates the session: nothing is in its log before (its telemetry reads none).
    pub new: bool,
    /// The tools it may call.
    pub tools: Arc<weft_tools::Registry>,
    /// Its limits.
    pub limits: Limits,
    /// What is redacted from its events.
    pub redact: Option<Redact>,
}

impl Setup {
    /// No tools and the default limits: for recording what calls no tool (a wait, a
    /// cancellation).
    pub fn bare() -> Self {
        Self {
            provider: Provider::Recorded,
            new: false,
            tools: Arc::new(weft_tools::Registry::new()),
            limits: Limits::default(),
            redact: None,
        }
    }
}

impl AgentFile {
    /// What a session of this agent file runs with.
    pub fn setup(&self) -> Setup {
        Setup {
            provider: Provider::of(&self.spec),
            new: false,
            tools: self.tools.clone(),
            limits: self.spec.limits.clone(),
            redact: self.redact.clone(),
        }
    }
}

/// The runtime of work that holds no lease and calls no model on anyone's quota: queueing a
/// session for the workers (`weft submit`: the worker that runs it holds it to its user's quota
/// and exports its telemetry; an answer queued under the session's lease binds it with
/// [`Held::bind`]) and the benchmarks, which measure the runtime rather than hosting.
/// `telemetry` follows the session's events live when given.
pub fn unleased<S: Store>(
    store: Arc<S>,
    (tools, limits, redact): (Arc<weft_tools::Registry>, Limits, Option<Redact>),
    telemetry: Option<Observer>,
) -> RuntimeBuilder<S> {
    configure(store, (tools, limits, redact), None, telemetry)
}

/// The one configuration of a front end's runtime: its store, tools, limits and redaction,
/// whose quota its model calls count against, and its live telemetry.
fn configure<S: Store>(
    store: Arc<S>,
    (tools, limits, redact): (Arc<weft_tools::Registry>, Limits, Option<Redact>),
    quota: Option<weft_runtime::quota::UserQuota>,
    telemetry: Option<Observer>,
) -> RuntimeBuilder<S> {
    Runtime::builder(store, tools, limits, quota, telemetry).redact(redact)
}

/// How a run of an agent begins.
#[derive(Debug)]
pub enum Begin {
    /// A new session, with its task and input.
    New {
        /// Its id, user and metadata.
        info: SessionInfo,
        /// The task.
        task: String,
        /// The run's input.
        input: Value,
    },
    /// Another task for a session that ended.
    Task {
        /// The task.
        task: String,
        /// The run's input.
        input: Value,
    },
    /// The answer a waiting session asked for.
    Answer(String),
}

/// A session this process drives (see the module's documentation).
pub struct Hosted<'h, S: Store + 'static> {
    host: &'h Host,
    held: &'h Held<S>,
    rt: Runtime<S>,
    live: Option<Live>,
}

impl<S: Store + 'static> std::fmt::Debug for Hosted<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosted")
            .field("session", &self.held.fence())
            .finish_non_exhaustive()
    }
}

impl<'h, S: Store + 'static> Hosted<'h, S> {
    /// Sets up the run of the session whose lease is `held`: its runtime writes at the lease's
    /// epoch and stops when asked, counts its model calls against `user`'s quota
    /// ([`Host::counted_as`]; `None` for a session without a user), and hands its events to
    /// the session's live telemetry and to `watchers`.
    pub async fn start(
        host: &'h Host,
        store: Arc<S>,
        held: &'h Held<S>,
        setup: Setup,
        user: Option<&str>,
        watchers: Watchers,
    ) -> Self {
        let (id, _) = held.fence();
        let Setup {
            provider,
            new,
            tools,
            limits,
            redact,
        } = setup;
        let live = Live::start(
            &host.telemetry,
            store.clone(),
            &id,
            (provider, new),
            redact.clone(),
        )
        .await;
        let mut built = held.bind(configure(
            store,
            (tools, limits, redact),
            host.counted_as(user),
            live.as_ref().map(Live::observer),
        ));
        for o in watchers.all {
            built = built.observe(o);
        }
        for o in watchers.own {
            built = built.observe_own(o);
        }
        Self {
            host,
            held,
            rt: built.build(),
            live,
        }
    }

    /// The runtime the session runs on.
    pub fn runtime(&self) -> &Runtime<S> {
        &self.rt
    }

    /// The session's id.
    pub fn id(&self) -> String {
        self.held.fence().0
    }

    /// Begins a run of `agent` on this session: its first events (the task, or the answer) are
    /// stored in one write with `first` (the run's own: its marker, its budget), so that a
    /// crash cannot leave one without the other. Then [`Runtime::drive_agent`] goes on.
    pub async fn begin(
        &self,
        agent: &Agent,
        begin: Begin,
        first: Vec<Event>,
    ) -> Result<Session<'_, S>, RuntimeError> {
        let rt = &self.rt;
        match begin {
            Begin::New { info, task, input } => {
                rt.queue_agent(agent, info, &task, input, first).await
            }
            Begin::Task { task, input } => {
                let mut s = rt.load_session(&self.id()).await?;
                s.stage(first)?;
                rt.queue_task(&mut s, &task, input).await?;
                Ok(s)
            }
            Begin::Answer(text) => {
                let mut s = rt.load_session(&self.id()).await?;
                s.stage(first)?;
                rt.queue_reply(agent, &mut s, &text).await?;
                Ok(s)
            }
        }
    }

    /// Runs `work` (on [`Hosted::runtime`]) in the session's log span until it ends, or until
    /// it must stop ([`Held::until_asked`]): then why.
    pub async fn run<F: std::future::Future>(&self, work: F) -> Result<F::Output, Asked> {
        let span = self
            .live
            .as_ref()
            .map_or_else(tracing::Span::none, Live::log_span);
        self.held
            .until_asked(tracing::Instrument::instrument(work, span))
            .await
    }

    /// Ends a run asked to stop as asked ([`crate::ownership::stopped`]): the exit code.
    pub async fn stopped(&self, asked: Asked) -> Result<u8, HostError> {
        crate::ownership::stopped(self.host, &self.rt, &self.id(), asked).await
    }

    /// Exports what the session's log holds now (its spans go with the process's exporters).
    /// The lease is the caller's to give back.
    pub async fn end(self) {
        if let Some(l) = self.live {
            l.finish().await;
        }
    }
}
