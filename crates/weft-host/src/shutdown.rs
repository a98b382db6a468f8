//! Stopping the sessions a process drives. When the [`Shutdown`] handle is triggered (the
//! command line does it on Ctrl-C and SIGTERM), a run starts no new model or tool call, and the
//! calls in flight get a short grace ([`Shutdown::grace`], 2 s; a worker's drain time) to
//! finish and be recorded. A call still running after it is dropped where it stands, as a
//! process that dies drops it: every batch of events committed is whole, the call's process is
//! killed, and `weft resume` recovers the session exactly as after a crash (an idempotent call
//! is run again, any other is recorded with an unknown outcome, never repeated). A second
//! trigger means "stop at once" ([`Shutdown::forced`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft_core::{Envelope, Event};
use weft_runtime::Observer;

/// A clone-able handle: every clone sees the same trigger.
#[derive(Clone, Debug)]
pub struct Shutdown {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// How many times it was triggered.
    times: tokio::sync::watch::Sender<u32>,
    grace_ms: AtomicU64,
    quiet: AtomicBool,
    session: Mutex<Option<String>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A handle not triggered yet, with a grace of 2 s.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                times: tokio::sync::watch::channel(0).0,
                grace_ms: AtomicU64::new(2_000),
                quiet: AtomicBool::new(false),
                session: Mutex::new(None),
            }),
        }
    }

    /// Asks every run driven under this handle to stop at its next safe point; a second call
    /// asks them to stop at once.
    pub fn trigger(&self) {
        self.inner.times.send_modify(|n| *n = n.saturating_add(1));
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_requested(&self) -> bool {
        *self.inner.times.borrow() > 0
    }

    /// Resolves once [`Shutdown::trigger`] was called.
    pub async fn requested(&self) {
        self.at_least(1).await;
    }

    /// Resolves once [`Shutdown::trigger`] was called twice: stop at once.
    pub async fn forced(&self) {
        self.at_least(2).await;
    }

    async fn at_least(&self, n: u32) {
        let mut rx = self.inner.times.subscribe();
        let _ = rx.wait_for(|v| *v >= n).await;
    }

    /// How long calls in flight get to finish after a trigger.
    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.inner.grace_ms.load(Ordering::Relaxed))
    }

    /// Sets [`Shutdown::grace`] (a worker's drain time).
    pub fn set_grace(&self, d: Duration) {
        self.inner.grace_ms.store(
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// For hosts that drive many sessions (a batch, a worker): they say once what an
    /// interruption means, rather than once per session.
    pub fn set_quiet(&self) {
        self.inner.quiet.store(true, Ordering::Relaxed);
    }

    /// Whether [`Shutdown::set_quiet`] was called.
    pub fn is_quiet(&self) -> bool {
        self.inner.quiet.load(Ordering::Relaxed)
    }

    /// Notes the session this process drives, when it is known before the run starts (for the
    /// message after an interruption).
    pub fn note_session(&self, id: &str) {
        if let Ok(mut c) = self.inner.session.lock() {
            *c = Some(id.to_owned());
        }
    }

    /// The session noted last ([`Shutdown::note_session`], [`Shutdown::observer`]).
    pub fn session(&self) -> Option<String> {
        self.inner.session.lock().ok().and_then(|c| c.clone())
    }

    /// An observer that notes the session a run starts.
    pub fn observer(&self) -> Observer {
        let me = self.clone();
        Arc::new(move |e: &Envelope| {
            if let Event::SessionStarted { session_id, .. } = &e.event {
                me.note_session(session_id);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_trigger_reaches_every_clone_and_a_second_forces() {
        let s = Shutdown::new();
        let c = s.clone();
        assert!(!c.is_requested());
        s.trigger();
        assert!(c.is_requested());
        tokio::time::timeout(Duration::from_secs(1), c.requested())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), c.forced())
                .await
                .is_err()
        );
        s.trigger();
        tokio::time::timeout(Duration::from_secs(1), c.forced())
            .await
            .unwrap();
    }
}
