//! A live session: its state, and the one way to change it (`commit`).

use std::sync::Arc;

use weft_core::{EVENT_VERSION, Envelope, Event, State};
use weft_store::Store;

use crate::{RuntimeError, now_ms};

/// Sees every event after it is stored.
pub type Observer = Arc<dyn Fn(&Envelope) + Send + Sync>;

/// Rewrites an event (as JSON) before it is stored or shown: secret values become
/// `[secret:NAME]`.
pub type Redact = Arc<dyn Fn(&mut serde_json::Value) + Send + Sync>;

/// A session being driven by this process.
pub struct Session<'s, S: Store> {
    store: &'s S,
    pub id: String,
    pub state: State,
    observers: Vec<Observer>,
    redact: Option<Redact>,
}

impl<'s, S: Store> Session<'s, S> {
    pub fn new(store: &'s S, id: String, state: State, observers: Vec<Observer>) -> Self {
        Self {
            store,
            id,
            state,
            observers,
            redact: None,
        }
    }

    /// Redacts every event before it is stored, applied or published.
    #[must_use]
    pub fn with_redactor(mut self, redact: Option<Redact>) -> Self {
        self.redact = redact;
        self
    }

    fn redacted(&self, events: Vec<Event>) -> Result<Vec<Event>, RuntimeError> {
        let Some(r) = &self.redact else {
            return Ok(events);
        };
        events
            .into_iter()
            .map(|e| {
                let mut v = serde_json::to_value(&e)
                    .map_err(|err| RuntimeError::Internal(format!("encoding an event: {err}")))?;
                r(&mut v);
                serde_json::from_value(v).map_err(|err| {
                    RuntimeError::Internal(format!("an event did not survive redaction: {err}"))
                })
            })
            .collect()
    }

    /// Stores a batch of events atomically, then applies and publishes them. Nothing is applied
    /// unless the store accepted the whole batch.
    pub async fn commit(&mut self, events: Vec<Event>) -> Result<(), RuntimeError> {
        if events.is_empty() {
            return Ok(());
        }
        let events = self.redacted(events)?;
        let ts = now_ms();
        let base = self.state.seq;
        let status = self.state.status_after(&events);
        let envelopes: Vec<Envelope> = events
            .into_iter()
            .enumerate()
            .map(|(k, event)| Envelope {
                seq: base + 1 + k as u64,
                ts,
                v: EVENT_VERSION,
                event,
            })
            .collect();
        self.store
            .append(&self.id, base, &envelopes, status, ts)
            .await?;
        for e in &envelopes {
            self.state.apply(&e.event);
        }
        for e in &envelopes {
            for o in &self.observers {
                o(e);
            }
        }
        Ok(())
    }
}
