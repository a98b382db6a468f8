//! The events this process stored lately for the threads it drives, kept in memory so that the
//! threads' streams read them here instead of from the store: each event of a run is read by
//! every stream of its thread as soon as it is stored, and on SQLite a read is a hop to one of
//! the pool's connection threads and back.
//!
//! A thread's tail holds the events its runs' sessions committed through this process, as the
//! runtime published them (after the store accepted them), in order and without a gap: an event
//! that does not follow the last one (another process or another path wrote in between) starts
//! the tail again from it. A stream takes from the tail only a stretch that begins right after
//! the last event it has; anything else (an older event, nothing new) it reads from the store as
//! before, so the tail can only save reads, never change what is read. A tail holds at most
//! [`MAX_EVENTS`] events and is dropped [`KEEP_AFTER_END`] after its run ended.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use weft_core::Envelope;

/// The most events one thread's tail holds (the oldest go first).
const MAX_EVENTS: usize = 512;

/// How long a tail is kept after its run ended, for the streams still catching up.
const KEEP_AFTER_END: Duration = Duration::from_secs(10);

/// How often ended tails are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Tail {
    events: VecDeque<Envelope>,
    /// When the run that wrote it ended.
    ended: Option<Instant>,
}

/// Every thread's tail.
#[derive(Default)]
pub(crate) struct Tails {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_thread: HashMap<String, Tail>,
    swept: Option<Instant>,
}

impl Tails {
    /// Adds an event `thread`'s run stored.
    pub(crate) fn push(&self, thread: &str, e: &Envelope) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let now = Instant::now();
        if inner
            .swept
            .is_none_or(|t| now.duration_since(t) >= SWEEP_EVERY)
        {
            inner.swept = Some(now);
            inner.by_thread.retain(|_, t| {
                t.ended
                    .is_none_or(|at| now.duration_since(at) < KEEP_AFTER_END)
            });
        }
        let tail = match inner.by_thread.get_mut(thread) {
            Some(t) => t,
            None => inner.by_thread.entry(thread.to_owned()).or_default(),
        };
        tail.ended = None;
        if tail.events.back().is_some_and(|last| last.seq + 1 != e.seq) {
            tail.events.clear();
        }
        tail.events.push_back(e.clone());
        if tail.events.len() > MAX_EVENTS {
            tail.events.pop_front();
        }
    }

    /// The events of `thread` after `seq`, when the tail holds the whole stretch from `seq + 1`
    /// to its end and that stretch is not empty; `None`: read the store.
    pub(crate) fn after(&self, thread: &str, seq: u64) -> Option<Vec<Envelope>> {
        let inner = self.inner.lock().ok()?;
        let events = &inner.by_thread.get(thread)?.events;
        let first = events.front()?.seq;
        let last = events.back()?.seq;
        if first > seq + 1 || last <= seq {
            return None;
        }
        let skip = usize::try_from(seq + 1 - first).ok()?;
        Some(events.iter().skip(skip).cloned().collect())
    }

    /// `thread`'s run ended: its tail goes a while later.
    pub(crate) fn ended(&self, thread: &str) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(t) = inner.by_thread.get_mut(thread)
        {
            t.ended = Some(Instant::now());
        }
    }

    /// Forgets a deleted thread's tail.
    pub(crate) fn forget(&self, thread: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.by_thread.remove(thread);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::Event;

    fn env(seq: u64) -> Envelope {
        Envelope {
            seq,
            ts: 0,
            v: weft_core::event::EVENT_VERSION,
            epoch: 1,
            event: Event::TextDelta {
                text: format!("{seq}"),
            },
        }
    }

    fn seqs(v: Option<Vec<Envelope>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.seq).collect())
    }

    #[test]
    fn a_stream_takes_only_a_stretch_that_follows_what_it_has() {
        let t = Tails::default();
        assert_eq!(seqs(t.after("a", 0)), None, "nothing kept: read the store");
        for s in 3..=6 {
            t.push("a", &env(s));
        }
        assert_eq!(seqs(t.after("a", 2)), Some(vec![3, 4, 5, 6]));
        assert_eq!(seqs(t.after("a", 4)), Some(vec![5, 6]));
        assert_eq!(seqs(t.after("a", 1)), None, "event 2 is not kept");
        assert_eq!(seqs(t.after("a", 6)), None, "nothing new: read the store");
        assert_eq!(seqs(t.after("b", 2)), None, "another thread");
    }

    #[test]
    fn a_gap_starts_the_tail_again() {
        let t = Tails::default();
        t.push("a", &env(1));
        t.push("a", &env(2));
        // Event 3 was written by another path: the tail cannot say what it was.
        t.push("a", &env(4));
        assert_eq!(seqs(t.after("a", 2)), None);
        assert_eq!(seqs(t.after("a", 3)), Some(vec![4]));
    }

    #[test]
    fn a_tail_is_bounded_and_forgotten() {
        let t = Tails::default();
        for s in 1..=(MAX_EVENTS as u64 + 10) {
            t.push("a", &env(s));
        }
        assert_eq!(seqs(t.after("a", 0)), None, "the oldest went");
        assert_eq!(
            seqs(t.after("a", MAX_EVENTS as u64 + 8)),
            Some(vec![MAX_EVENTS as u64 + 9, MAX_EVENTS as u64 + 10])
        );
        t.forget("a");
        assert_eq!(seqs(t.after("a", MAX_EVENTS as u64 + 8)), None);
    }
}
