//! Recovery after a crash, and repair of forked sessions. Pure: given the folded state, what
//! to record and which calls to run again.
//!
//! A tool call recorded as started but not finished either completed or not before the process
//! died, or before it lost the session (frozen past its lease, then fenced out); the new owner
//! cannot know which. A call of an idempotent tool is run again with the same
//! idempotency key. A call of any other tool is never silently repeated: it is recorded as
//! finished with an `unknown_outcome` error, which goes to the step's failure handling (and in
//! an agent, to the review or the model, which may ask the person).

use crate::engine::{self, Invocation};
use crate::event::{EVENT_VERSION, Envelope, Event, RunStatus, ToolError, ToolOutcome};
use crate::limits::Limits;
use crate::state::State;
use crate::tool::ToolCatalog;

/// What recovery decided.
#[derive(Debug, Default, PartialEq)]
pub struct Recovery {
    /// Record these first.
    pub events: Vec<Event>,
    /// Then run these again (idempotent calls, with their original ids and keys).
    pub rerun: Vec<Invocation>,
}

/// Decides what to do with the calls that were in flight when the process stopped.
pub fn recover(state: &State, tools: &dyn ToolCatalog, limits: &Limits) -> Recovery {
    let mut out = Recovery::default();
    for (call_id, c) in &state.calls.open {
        let idempotent = tools.tool_info(&c.tool).is_some_and(|t| t.idempotent);
        if idempotent {
            out.rerun.push(Invocation {
                call_id: call_id.clone(),
                step: c.step.clone(),
                item: c.item,
                tool: c.tool.clone(),
                args: c.args.clone(),
                attempt: c.attempt,
                idempotency_key: c.idempotency_key.clone(),
                delay_ms: 0,
            });
        } else {
            let error = ToolError::new(
                "unknown_outcome",
                format!(
                    "the process that was running `{}` stopped, or lost the session to another process, before its result was recorded; the call may or may not have taken effect, and it is not idempotent, so it was not run again",
                    c.tool
                ),
            )
            .with_detail(serde_json::json!({"idempotency_key": c.idempotency_key, "args": c.args}));
            out.events.extend(engine::tool_finished(
                state,
                limits,
                call_id,
                ToolOutcome::Error { error },
                0,
            ));
        }
    }
    out
}

/// The error a session cancelled by [`cancel`] ends with.
pub const CANCELLED: &str = "cancelled (weft sessions cancel)";

/// Whether `state` ended because it was cancelled ([`cancel`]), not because it failed.
pub fn was_cancelled(state: &State) -> bool {
    state.status == crate::SessionStatus::Failed && state.turn.error.as_deref() == Some(CANCELLED)
}

/// A person cancelled the session (`weft sessions cancel`): every call in flight is recorded as
/// cancelled with an unknown outcome (its process was stopped; whether it acted is not known),
/// with how long it had run (`ran_ms`, by call id, which the shell measures from the time its
/// start was recorded; 0 for a call it does not give), and the run ends as failed, saying so.
pub fn cancel(
    state: &State,
    limits: &Limits,
    ran_ms: &std::collections::BTreeMap<String, u64>,
) -> Vec<Event> {
    let mut st = state.clone();
    let mut events = Vec::new();
    let open: Vec<String> = state.calls.open.keys().cloned().collect();
    for call_id in open {
        let error = ToolError::new(
            "cancelled",
            "the session was cancelled while this call ran; its outcome is unknown",
        );
        let ran = ran_ms.get(&call_id).copied().unwrap_or(0);
        for e in engine::tool_finished(&st, limits, &call_id, ToolOutcome::Error { error }, ran) {
            st.apply(&e);
            events.push(e);
        }
    }
    if !st.status.is_terminal() {
        events.push(Event::RunFinished {
            status: RunStatus::Failed,
            error: Some(CANCELLED.into()),
            answer: None,
        });
    }
    events
}

/// For a fork taken mid-run: every call in flight at the fork point is recorded as interrupted
/// (the fork must never repeat or await the original's side effects).
pub fn interrupt_open_calls(state: &State, limits: &Limits) -> Vec<Event> {
    let mut events = Vec::new();
    for call_id in state.calls.open.keys() {
        let error = ToolError::new(
            "interrupted",
            "the session was forked while this call was running; its result belongs to the original session",
        );
        events.extend(engine::tool_finished(
            state,
            limits,
            call_id,
            ToolOutcome::Error { error },
            0,
        ));
    }
    events
}

/// The log of a fork: `events` up to sequence number `at`, the first naming `new_id` as the
/// session and `parent` as its parent, then every call in flight at that point recorded as
/// interrupted (stamped `now`). The copy is written by no owner yet (epoch 0). Returns the log
/// and the state it folds to.
pub fn fork_log(
    events: impl IntoIterator<Item = Envelope>,
    at: u64,
    new_id: &str,
    parent: &str,
    now: i64,
) -> (Vec<Envelope>, State) {
    let mut log: Vec<Envelope> = events.into_iter().take_while(|e| e.seq <= at).collect();
    for e in &mut log {
        e.epoch = 0;
        if let Event::SessionStarted {
            session_id,
            parent_id,
            ..
        } = &mut e.event
        {
            new_id.clone_into(session_id);
            *parent_id = Some(parent.to_owned());
        }
    }
    let mut state = State::fold(log.iter().map(|e| &e.event));
    // Calls in flight at the fork point belong to the original: interrupt them here.
    for event in interrupt_open_calls(&state, &Limits::default()) {
        state.apply(&event);
        log.push(Envelope {
            epoch: 0,
            seq: state.seq,
            ts: now,
            v: EVENT_VERSION,
            event,
        });
    }
    (log, state)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn env(seq: u64, event: Event) -> Envelope {
        Envelope {
            epoch: 0,
            seq,
            ts: 1,
            v: EVENT_VERSION,
            event,
        }
    }

    #[test]
    fn a_fork_names_itself_and_interrupts_the_calls_in_flight() {
        let log = vec![
            env(
                1,
                Event::SessionStarted {
                    session_id: "orig".into(),
                    agent: "a".into(),
                    input: json!({}),
                    mode: None,
                    parent_id: None,
                },
            ),
            env(
                2,
                Event::ToolCallStarted {
                    call_id: "c1".into(),
                    step: None,
                    item: None,
                    tool: "echo".into(),
                    args: json!({}),
                    attempt: 1,
                    idempotency_key: "k".into(),
                    untrusted_from: Vec::new(),
                },
            ),
            env(
                3,
                Event::ToolCallFinished {
                    call_id: "c1".into(),
                    outcome: ToolOutcome::Ok { output: json!(1) },
                    duration_ms: 0,
                },
            ),
        ];
        let (forked, state) = fork_log(log.clone(), 2, "copy", "orig", 9);
        let seqs: Vec<u64> = forked.iter().map(|e| e.seq).collect();
        assert_eq!(seqs[..2], [1, 2]);
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        assert!(matches!(
            &forked[0].event,
            Event::SessionStarted { session_id, parent_id: Some(p), .. } if session_id == "copy" && p == "orig"
        ));
        assert_eq!(forked[1], log[1]);
        // The call open at event 2 is finished as interrupted, after the copied events.
        assert!(matches!(
            &forked[2].event,
            Event::ToolCallFinished { call_id, outcome: ToolOutcome::Error { error }, .. }
                if call_id == "c1" && error.kind == "interrupted"
        ));
        assert_eq!(forked[2].ts, 9);
        assert!(state.calls.open.is_empty());
        assert_eq!(state.seq, forked.len() as u64);
        // At the end of the log nothing is open: a plain copy, renamed.
        let (whole, _) = fork_log(log.clone(), 3, "copy2", "orig", 9);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[1..], log[1..]);
    }
}
