//! Configuring a [`Runtime`] once: [`Runtime::builder`] takes what every front end must decide
//! (the store, the tools, the limits, the user's quota, the live telemetry), the builder's
//! methods what only some set (observers, redaction, the lease's fence, a stop signal, the
//! snapshot cadence, the embedder, the clock), and [`RuntimeBuilder::build`] makes the runtime,
//! whose configuration nothing changes afterwards.

use std::sync::Arc;

use weft_core::Limits;
use weft_store::Store;
use weft_tools::Registry;

use crate::{
    Observer, Redact, Runtime, SharedClock, StoreKnowledge, SubAgents, quota, retrieval, snapshots,
    system_clock,
};

/// What an embedder is set to: read from this process's configuration when the runtime is
/// built, or given.
enum Embedding {
    Configured,
    Given(Option<Arc<weft_model::Embedder>>),
}

/// A [`Runtime`] being configured (see [`Runtime::builder`]).
#[must_use = "a builder does nothing until `build` makes its runtime"]
pub struct RuntimeBuilder<S: Store> {
    store: Arc<S>,
    tools: Arc<Registry>,
    limits: Limits,
    quota: Option<quota::UserQuota>,
    observers: Vec<Observer>,
    own_observers: Vec<Observer>,
    redact: Option<Redact>,
    sub_agents: Option<Arc<dyn SubAgents>>,
    depth: u32,
    fence: Option<(String, u64)>,
    stop: Option<tokio::sync::watch::Receiver<bool>>,
    snapshot_every: u64,
    snapshot_head_bytes: u64,
    embedding: Embedding,
    clock: SharedClock,
}

impl<S: Store> RuntimeBuilder<S> {
    pub(crate) fn new(
        store: Arc<S>,
        tools: Arc<Registry>,
        limits: Limits,
        quota: Option<quota::UserQuota>,
        telemetry: Option<Observer>,
    ) -> Self {
        Self {
            store,
            tools,
            limits,
            quota,
            observers: Vec::new(),
            own_observers: telemetry.into_iter().collect(),
            redact: None,
            sub_agents: None,
            depth: 0,
            fence: None,
            stop: None,
            snapshot_every: snapshots::DEFAULT_EVERY,
            snapshot_head_bytes: snapshots::HEAD_BYTES_PER_EVENT,
            embedding: Embedding::Configured,
            clock: system_clock(),
        }
    }

    /// Adds an observer that sees every event after it is stored: those of this runtime's
    /// sessions and of the sub-agents' sessions they start, in order.
    pub fn observe(mut self, o: Observer) -> Self {
        self.observers.push(o);
        self
    }

    /// Adds an observer that sees every event of this runtime's own sessions after it is
    /// stored, and none of its sub-agents' sessions (what follows one session, such as its
    /// live telemetry, needs that session's events alone).
    pub fn observe_own(mut self, o: Observer) -> Self {
        self.own_observers.push(o);
        self
    }

    /// Applies `redact` to every event before it is stored or shown (none: nothing redacted).
    pub fn redact(mut self, redact: Option<Redact>) -> Self {
        self.redact = redact;
        self
    }

    /// Runs `agent:` tools with `runner` (default: sub-agents in this runtime's store).
    pub fn sub_agents(mut self, runner: Arc<dyn SubAgents>) -> Self {
        self.sub_agents = Some(runner);
        self
    }

    /// How deep this runtime's sessions are nested under parents (sub-agents; 0 by default).
    pub fn depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }

    /// Writes session `id`'s events at `epoch`, the epoch of the lease this process holds on
    /// it, so that the store refuses them once the lease is lost.
    pub fn fence(mut self, id: String, epoch: u64) -> Self {
        self.fence = Some((id, epoch));
        self
    }

    /// When `stop` turns true, a run starts no new model or tool call, waits for the calls in
    /// flight, stores their outcomes and returns [`crate::RuntimeError::Stopped`].
    pub fn stop_on(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Snapshots a session's state once `every` events followed its last snapshot (0: never).
    pub fn snapshot_every(mut self, every: u64) -> Self {
        self.snapshot_every = every;
        self
    }

    /// A head of `bytes` pushes a session's next snapshot back by one event (0: never).
    pub fn snapshot_head_bytes(mut self, bytes: u64) -> Self {
        self.snapshot_head_bytes = bytes;
        self
    }

    /// Makes the vectors of memories and documents with `embedder` (none: search by text
    /// alone) instead of the embedder this process is configured with (`WEFT_EMBEDDINGS_URL`;
    /// see [`retrieval::configured_embedder`]).
    pub fn embedder(mut self, embedder: Option<Arc<weft_model::Embedder>>) -> Self {
        self.embedding = Embedding::Given(embedder);
        self
    }

    /// Takes events' timestamps from `clock` (the system's clock by default).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The runtime. Its registry's memory and document tools search this runtime's store (a
    /// registry keeps the first knowledge base attached to it).
    pub fn build(self) -> Runtime<S> {
        let embedder = match self.embedding {
            Embedding::Given(e) => e,
            Embedding::Configured => retrieval::configured_embedder().unwrap_or_else(|e| {
                tracing::error!(error = %e, "embeddings are off: their configuration is wrong");
                None
            }),
        };
        self.tools.attach_knowledge(Arc::new(StoreKnowledge::new(
            Arc::clone(&self.store),
            embedder.clone(),
        )));
        Runtime {
            store: self.store,
            tools: self.tools,
            limits: self.limits,
            observers: self.observers,
            own_observers: self.own_observers,
            redact: self.redact,
            sub_agents: self.sub_agents,
            depth: self.depth,
            fence: self.fence,
            stop: self.stop,
            snapshot_every: self.snapshot_every,
            snapshot_head_bytes: self.snapshot_head_bytes,
            embedder,
            clock: self.clock,
            quota: self.quota,
        }
    }
}
