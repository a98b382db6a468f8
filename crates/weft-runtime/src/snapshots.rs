//! When a session's state is snapshotted, and how a session is loaded: from its newest snapshot
//! and the events after it, or, when there is no usable snapshot, by folding its whole log.
//!
//! A snapshot is written with an append, in its transaction ([`weft_store::SessionLog::
//! append_with_snapshot`]), once [`DEFAULT_EVERY`] events (or [`crate::RuntimeBuilder::snapshot_every`])
//! have been appended since the last one, and later when the state is large: never more often
//! than once per [`HEAD_BYTES_PER_EVENT`] bytes of the last head (or
//! [`crate::RuntimeBuilder::snapshot_head_bytes`]), so that writing heads costs at
//! most about a quarter of what writing the events does (an event is some 250 bytes). The
//! conversation goes into parts that are written once (see [`weft_core::snapshot`]). A load
//! therefore folds at most about that many events after decoding the snapshot: about four heads'
//! worth of events, for a state as large as a 10,000-step plan's.
//!
//! A snapshot is of the state as the append finds it, so it is never ahead of the log: a plain
//! commit writes it before the batch is applied (it covers the log up to the event before the
//! batch), a flush of staged events after they were applied (it covers the batch's last event).
//! Only the newest head is kept; each snapshot adds one part (which replaces those from its
//! start on, when the parts start over). A state loaded from its window cannot start them over
//! (that needs the messages before the window): such a snapshot is not written (a warning says
//! so), and the next load folds further.
//!
//! A load holds the conversation from the snapshot's window on (the messages a request still
//! carries after a compaction; see [`weft_core::history::History::window`]) and reads only the
//! parts that hold them, so a compacted session loads in about the same time at any length.
//! [`load_state_holding`] with [`Hold::Whole`] reads every part, for a reader that shows it all.
//!
//! The log stays the truth: a snapshot that cannot be used (another version, a decoding error,
//! parts that do not add up) is passed over with a warning and the log is folded.

use weft_core::snapshot::{self, Encoded};
use weft_core::{Envelope, State};
use weft_store::{Store, StoreError};

/// Events between two snapshots of a session, by default.
pub const DEFAULT_EVERY: u64 = 1000;

/// A head of this many bytes pushes the next snapshot back by one event. 256 made a 10,000-step
/// plan's run spend about a sixth of its time in memory (a tenth on SQLite) encoding heads (BENCHMARKS.md, "What was profiled
/// and changed", 12); 64 trades that for a longer fold after a large head on load.
pub const HEAD_BYTES_PER_EVENT: u64 = 64;

/// Where a session's snapshots stand: what the last one covered.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cursor {
    /// Events between snapshots (0: none are written).
    pub every: u64,
    /// Bytes of the last head that push the next snapshot back by one event (0: none do).
    pub head_bytes: u64,
    /// The sequence number the last snapshot (or the load) covered.
    pub at: u64,
    /// Messages of the conversation already kept in parts.
    pub parts_end: u64,
    /// The last head's size in bytes.
    pub head_len: u64,
}

impl Cursor {
    /// The snapshot to write with the next append, if one is due at `state`.
    pub(crate) fn due(&self, state: &State) -> Option<Encoded> {
        if self.every == 0 {
            return None;
        }
        let pushed = self.head_len.checked_div(self.head_bytes).unwrap_or(0);
        let gap = self.every.max(pushed);
        if state.seq() < self.at.saturating_add(gap) {
            return None;
        }
        match snapshot::encode(state, self.parts_end) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(session = %state.session_id(), "no snapshot written: {e}");
                None
            }
        }
    }

    /// The snapshot was stored.
    pub(crate) fn written(&mut self, s: &Encoded) {
        self.at = s.seq;
        self.parts_end = s.history_len;
        self.head_len = s.head.len() as u64;
    }
}

/// A session's state as loaded.
#[derive(Debug)]
pub struct Loaded {
    /// The state the session's log folds to.
    pub state: State,
    /// The snapshot the load started from (its sequence number), if one was used.
    pub snapshot: Option<u64>,
    /// Events folded (after the snapshot, or the whole log).
    pub folded: usize,
    /// Why a snapshot that exists was not used.
    pub passed_over: Option<String>,
    pub(crate) cursor: Cursor,
}

/// How much of the conversation a load holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// From the snapshot's window on: what requests and decisions read (the messages before it
    /// are compacted into a summary), so a load costs the same however long the session is.
    Window,
    /// Every message (a reader that shows the whole conversation).
    Whole,
}

/// Loads session `id`'s state to continue it: its newest snapshot, its conversation from the
/// snapshot's window on, and the events after it; or its whole log folded when it has no usable
/// snapshot.
pub async fn load_state<S: Store + ?Sized>(store: &S, id: &str) -> Result<Loaded, StoreError> {
    load_state_holding(store, id, Hold::Window).await
}

/// Loads session `id`'s state holding `hold` of its conversation (see [`load_state`]).
pub async fn load_state_holding<S: Store + ?Sized>(
    store: &S,
    id: &str,
    hold: Hold,
) -> Result<Loaded, StoreError> {
    let mut passed_over = None;
    if let Some(snap) = store.latest_snapshot(id).await? {
        let head =
            snapshot::read_head(id, snap.seq, snap.version, &snap.head).map(|h| match hold {
                Hold::Window => h,
                Hold::Whole => h.whole(),
            });
        let decoded = match head {
            Ok(head) => {
                let parts = store.snapshot_parts(id, head.window()).await?;
                head.with_parts(&parts)
            }
            Err(e) => Err(e),
        };
        match decoded {
            Ok((mut state, parts_end)) => {
                let events = store.events_after(id, snap.seq).await?;
                fold_into(&mut state, &events);
                return Ok(Loaded {
                    state,
                    snapshot: Some(snap.seq),
                    folded: events.len(),
                    passed_over: None,
                    cursor: Cursor {
                        every: 0,
                        head_bytes: 0,
                        at: snap.seq,
                        parts_end,
                        head_len: snap.head.len() as u64,
                    },
                });
            }
            Err(e) => {
                tracing::warn!(
                    session = id,
                    "the snapshot at event {} is passed over (the log is folded instead): {e}",
                    snap.seq
                );
                passed_over = Some(e.to_string());
            }
        }
    }
    let (_, events) = store.load(id).await?;
    let mut state = State::new();
    fold_into(&mut state, &events);
    Ok(Loaded {
        state,
        snapshot: None,
        folded: events.len(),
        passed_over,
        cursor: Cursor::default(),
    })
}

fn fold_into(state: &mut State, events: &[Envelope]) {
    for e in events {
        state.apply(&e.event);
    }
}
