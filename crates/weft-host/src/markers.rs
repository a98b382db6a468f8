//! A session's runs as its log tells them. Every run driven through [`crate::run::drive`] begins
//! with its marker (`Event::RunStarted`: its id, the event it follows, its trace context and
//! metadata); how it stands is the session's state when the next run began, or now. Any process
//! reading the log (a replica, a server after a restart) finds the same runs with the same
//! statuses, whichever process drove them.

use serde_json::Value;
use weft_core::{Envelope, Event, SessionStatus, State};

/// A run found in a session's log.
#[derive(Clone, Debug, PartialEq)]
pub struct Logged {
    /// The run's id, as its client was given it.
    pub run_id: String,
    /// The session's last event before the run.
    pub after: u64,
    /// When its marker was written (ms since the epoch).
    pub ts: i64,
    /// The metadata the client gave it (`null` when none).
    pub metadata: Value,
    /// The W3C trace context of the request that created it.
    pub traceparent: Option<String>,
    /// The agent of the session.
    pub agent: String,
    /// How the run stands: the session's status when the next run began, or now.
    pub status: Standing,
    /// The session's last event when the next run began, or now.
    pub seq: u64,
}

/// How a run found in the log stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Still going (or its process stopped and no other has gone on with it yet).
    Running,
    /// It ended with an answer.
    Completed,
    /// It ended waiting for an answer.
    Waiting,
    /// It failed.
    Failed,
    /// A person cancelled it.
    Cancelled,
}

impl Standing {
    /// How a run stands whose session is in state `st`.
    #[must_use]
    pub fn of(st: &State) -> Self {
        match st.status() {
            SessionStatus::Completed => Self::Completed,
            SessionStatus::Failed if weft_core::recovery::was_cancelled(st) => Self::Cancelled,
            SessionStatus::Failed => Self::Failed,
            SessionStatus::WaitingForUser => Self::Waiting,
            SessionStatus::Running => Self::Running,
        }
    }
}

/// Run `rid` of the log (the last run when `None`), if its marker is there.
#[must_use]
pub fn find(log: &[Envelope], rid: Option<&str>) -> Option<Logged> {
    let at = log.iter().rposition(
        |e| matches!(&e.event, Event::RunStarted { run_id, .. } if rid.is_none_or(|r| r == run_id)),
    )?;
    let next = log[at + 1..]
        .iter()
        .position(|e| matches!(e.event, Event::RunStarted { .. }))
        .map_or(log.len(), |k| at + 1 + k);
    let st = State::fold(log[..next].iter().map(|e| &e.event));
    logged(&log[at], &st)
}

/// Every run of the log, oldest first (one fold of the log).
#[must_use]
pub fn all(log: &[Envelope]) -> Vec<Logged> {
    let mut out = Vec::new();
    let mut st = State::new();
    let mut open: Option<&Envelope> = None;
    for e in log {
        if matches!(e.event, Event::RunStarted { .. })
            && let Some(marker) = open.replace(e)
        {
            out.extend(logged(marker, &st));
        }
        st.apply(&e.event);
    }
    if let Some(marker) = open {
        out.extend(logged(marker, &st));
    }
    out
}

/// The run whose marker is `marker`, standing as `st` says.
fn logged(marker: &Envelope, st: &State) -> Option<Logged> {
    let Event::RunStarted {
        run_id,
        after,
        traceparent,
        metadata,
    } = &marker.event
    else {
        return None;
    };
    Some(Logged {
        run_id: run_id.clone(),
        after: *after,
        ts: marker.ts,
        metadata: metadata.clone(),
        traceparent: traceparent.clone(),
        agent: st.agent().to_owned(),
        status: Standing::of(st),
        seq: st.seq(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn env(seq: u64, event: Value) -> Envelope {
        Envelope {
            seq,
            ts: i64::try_from(seq).unwrap() * 1000,
            v: weft_core::EVENT_VERSION,
            epoch: 0,
            event: serde_json::from_value(event).unwrap(),
        }
    }

    fn marker(seq: u64, id: &str, after: u64) -> Envelope {
        env(
            seq,
            json!({"type": "run_started", "run_id": id, "after": after, "metadata": {"n": id}}),
        )
    }

    #[test]
    fn each_run_stands_as_the_session_did_when_the_next_began() {
        let log = vec![
            env(
                1,
                json!({"type": "session_started", "session_id": "s", "agent": "a"}),
            ),
            marker(2, "r1", 1),
            env(
                3,
                json!({"type": "run_finished", "status": "completed", "answer": "done"}),
            ),
            marker(4, "r2", 3),
        ];
        let runs = all(&log);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].run_id, "r1");
        assert_eq!(runs[0].status, Standing::Completed);
        assert_eq!((runs[0].after, runs[0].seq, runs[0].ts), (1, 3, 2000));
        assert_eq!(runs[0].metadata, json!({"n": "r1"}));
        assert_eq!(runs[1].run_id, "r2");
        assert_eq!(runs[1].agent, "a");
        assert_eq!(runs[1].seq, 4);
        assert_eq!(find(&log, Some("r1")), Some(runs[0].clone()));
        assert_eq!(find(&log, None), Some(runs[1].clone()));
        assert_eq!(find(&log, Some("r3")), None);
    }
}
