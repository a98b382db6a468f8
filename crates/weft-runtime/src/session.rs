//! A live session: its state, and the one way to change it (`commit`).

use std::sync::Arc;

use weft_core::{EVENT_VERSION, Envelope, Event, State};
use weft_store::{NewSession, Store, StoreError};

use crate::RuntimeError;
use crate::snapshots::Cursor;

/// Sees every event after it is stored.
pub type Observer = Arc<dyn Fn(&Envelope) + Send + Sync>;

/// Rewrites an event (as JSON) before it is stored or shown: secret values become
/// `[secret:NAME]`.
pub type Redact = Arc<dyn Fn(&mut String) + Send + Sync>;

/// A session being driven by this process.
pub struct Session<'s, S: Store> {
    store: &'s S,
    /// The session's id.
    pub id: String,
    /// The session's state: every event stored or staged so far, applied.
    pub state: State,
    observers: Vec<Observer>,
    redact: Option<Redact>,
    /// Events applied to the state but not stored or published yet (see [`Session::stage`]).
    pending: Vec<Envelope>,
    /// The lease epoch this process drives the session at (0: it holds no lease). Every
    /// event is written at it, and the store refuses them once another owner took over.
    epoch: u64,
    /// Where the session's snapshots stand (see [`crate::snapshots`]).
    snapshots: Cursor,
    /// Where the timestamps of the events come from.
    clock: crate::SharedClock,
}

impl<'s, S: Store> Session<'s, S> {
    /// A handle on session `id` of `store` whose state is `state`, publishing its events to
    /// `observers`: no redaction, no lease (epoch 0) and the system's clock until the `with_`
    /// methods say otherwise.
    pub fn new(store: &'s S, id: String, state: State, observers: Vec<Observer>) -> Self {
        Self {
            store,
            id,
            state,
            observers,
            redact: None,
            pending: Vec::new(),
            epoch: 0,
            snapshots: Cursor::default(),
            clock: crate::system_clock(),
        }
    }

    /// Stamps the session's events with `clock`'s time.
    pub fn with_clock(mut self, clock: crate::SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Writes a snapshot with an append once `every` events followed the last one (0: never),
    /// starting from where a load left `cursor`.
    #[must_use]
    pub(crate) fn with_snapshots(
        mut self,
        (every, head_bytes): (u64, u64),
        cursor: Cursor,
    ) -> Self {
        self.snapshots = Cursor {
            every,
            head_bytes,
            ..cursor
        };
        self
    }

    /// Appends a batch, with a snapshot of the state as it is now when one is due. A store that
    /// is briefly away is waited for (see [`crate::patience`]): the batch is written once it is
    /// back, unless another process took the session over meanwhile (the fence refuses it).
    async fn append(
        &mut self,
        base: u64,
        events: &[Envelope],
        status: weft_core::SessionStatus,
        ts: i64,
    ) -> Result<(), RuntimeError> {
        let snap = self.snapshots.due(&self.state);
        let mut patience = crate::patience::Patience::new();
        let what = format!("appending to session {}", self.id);
        loop {
            let written = match &snap {
                Some(snap) => {
                    self.store
                        .append_with_snapshot(&self.id, base, events, status, ts, snap)
                        .await
                }
                None => self.store.append(&self.id, base, events, status, ts).await,
            };
            let e = match written {
                Ok(()) => break,
                Err(e) => e,
            };
            // Asked again after a try whose answer was lost: that try may have been committed.
            if patience.tried()
                && matches!(e, StoreError::Conflict { .. })
                && self.written_already(base, events).await?
            {
                break;
            }
            if !patience.again(&e, &what).await {
                return Err(e.into());
            }
        }
        if let Some(snap) = &snap {
            self.snapshots.written(snap);
        }
        Ok(())
    }

    /// Whether the log holds `events` right after event `base` as this session wrote them (at
    /// its epoch, with their time): an earlier try of this append was committed. No other
    /// writer writes at this session's epoch, so those events can only be these.
    pub(crate) async fn written_already(
        &self,
        base: u64,
        events: &[Envelope],
    ) -> Result<bool, RuntimeError> {
        let what = format!("reading session {} back", self.id);
        let stored =
            crate::patience::patiently(&what, || self.store.events_after(&self.id, base)).await?;
        Ok(stored.len() >= events.len()
            && events.iter().zip(&stored).all(|(mine, there)| {
                mine.seq == there.seq && mine.epoch == there.epoch && mine.ts == there.ts
            }))
    }

    /// Writes every event at the lease epoch `epoch` (see [`weft_core::Envelope::epoch`]).
    #[must_use]
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// Applies events now and stores them with the next commit, in the same batch. For events
    /// whose loss in a crash is harmless (a model's reply: the model is simply asked again), so
    /// that a reply and the tool calls it starts reach the store in one append.
    pub fn stage(&mut self, events: Vec<Event>) -> Result<(), RuntimeError> {
        let events = self.redacted(events);
        let ts = self.clock.now_ms();
        for event in events {
            let seq = self.state.seq() + 1;
            self.state.apply(&event);
            self.pending.push(Envelope {
                epoch: self.epoch,
                seq,
                ts,
                v: EVENT_VERSION,
                event,
            });
        }
        Ok(())
    }

    /// Stores the staged events, if any. If the store refuses them, the state in memory is
    /// ahead of the store and the session must be loaded again.
    pub async fn flush(&mut self) -> Result<(), RuntimeError> {
        let Some(first) = self.pending.first() else {
            return Ok(());
        };
        let base = first.seq - 1;
        let ts = self.clock.now_ms();
        let pending = std::mem::take(&mut self.pending);
        let status = self.state.status();
        if let Err(e) = self.append(base, &pending, status, ts).await {
            self.pending = pending;
            return Err(e);
        }
        for e in pending {
            tracing::debug!(seq = e.seq, event = e.event.kind(), "committed");
            for o in &self.observers {
                o(&e);
            }
        }
        Ok(())
    }

    /// Redacts every event before it is stored, applied or published.
    #[must_use]
    pub fn with_redactor(mut self, redact: Option<Redact>) -> Self {
        self.redact = redact;
        self
    }

    /// The events with secrets replaced in their text and data (never in their structure).
    fn redacted(&self, mut events: Vec<Event>) -> Vec<Event> {
        if let Some(r) = &self.redact {
            for e in &mut events {
                e.rewrite_text(&mut |s: &mut String| r(s));
            }
        }
        events
    }

    /// Creates the session in the store with `events` as the start of its log, in one write,
    /// then applies and publishes them. A session with this id that exists but has no events
    /// (its creator died between two writes of a store that cannot do both at once) is taken
    /// over; any other is refused with [`StoreError::Exists`].
    pub async fn create(
        &mut self,
        new: NewSession,
        events: Vec<Event>,
    ) -> Result<(), RuntimeError> {
        if self.state.seq() != 0 || !self.pending.is_empty() {
            return Err(RuntimeError::Internal(format!(
                "session {} is not new: it cannot be created again",
                self.id
            )));
        }
        let ts = self.clock.now_ms();
        let (envelopes, status) = self.creation(events, ts);
        let mut patience = crate::patience::Patience::new();
        let what = format!("creating session {}", self.id);
        loop {
            let e = match self
                .store
                .create_with(new.clone(), &envelopes, status, ts)
                .await
            {
                Ok(_) => break,
                Err(e) => e,
            };
            if let StoreError::Exists(id) = &e {
                // Created by an earlier try whose answer was lost with the connection.
                if patience.tried() && self.written_already(0, &envelopes).await? {
                    break;
                }
                let found = crate::patience::patiently(&what, || self.store.get(id)).await?;
                if found.last_seq != 0 {
                    return Err(e.into());
                }
                self.append(0, &envelopes, status, ts).await?;
                break;
            }
            if !patience.again(&e, &what).await {
                return Err(e.into());
            }
        }
        self.apply_and_publish(&envelopes);
        Ok(())
    }

    /// The start of a new session's log as it is stored: `events` redacted and numbered from 1
    /// at time `ts`, and the session's status after them.
    pub(crate) fn creation(
        &self,
        events: Vec<Event>,
        ts: i64,
    ) -> (Vec<Envelope>, weft_core::SessionStatus) {
        let events = self.redacted(events);
        let status = self.state.status_after(&events);
        (self.number(events, ts), status)
    }

    /// Numbers events to follow the state's last one.
    fn number(&self, events: Vec<Event>, ts: i64) -> Vec<Envelope> {
        let base = self.state.seq();
        events
            .into_iter()
            .enumerate()
            .map(|(k, event)| Envelope {
                epoch: self.epoch,
                seq: base + 1 + k as u64,
                ts,
                v: EVENT_VERSION,
                event,
            })
            .collect()
    }

    fn apply_and_publish(&mut self, envelopes: &[Envelope]) {
        for e in envelopes {
            self.state.apply(&e.event);
        }
        for e in envelopes {
            tracing::debug!(seq = e.seq, event = e.event.kind(), "committed");
            for o in &self.observers {
                o(e);
            }
        }
    }

    /// Stores a batch of events atomically, then applies and publishes them. Nothing is applied
    /// unless the store accepted the whole batch.
    pub async fn commit(&mut self, events: Vec<Event>) -> Result<(), RuntimeError> {
        if !self.pending.is_empty() {
            self.stage(events)?;
            return self.flush().await;
        }
        if events.is_empty() {
            return Ok(());
        }
        let events = self.redacted(events);
        let ts = self.clock.now_ms();
        let base = self.state.seq();
        let status = self.state.status_after(&events);
        let envelopes = self.number(events, ts);
        // A snapshot written here is of the state before the batch (it covers the log up to
        // `base`): the batch is applied only once the store accepted it.
        self.append(base, &envelopes, status, ts).await?;
        self.apply_and_publish(&envelopes);
        Ok(())
    }
}
