//! Snapshots of a session's state, so that a load folds only the events after one.
//!
//! A snapshot is a **head** and **parts**. The head is [`State`] in its serialised form (without
//! the conversation) and the conversation's length. The conversation, which only grows, is kept
//! in parts: each snapshot adds one part with the messages that arrived since the last, and a
//! part is never written again. So a snapshot costs work in proportion to what changed since the
//! last one plus the head, not to the whole conversation (rewriting the conversation at every
//! snapshot would write it again and again, as a checkpointer that saves whole states does).
//!
//! Pure: text in, text out. The runtime decides when to write one (`weft_runtime::Session`), the
//! store keeps the newest head and the parts (`weft_store::Snapshot`). A head that does not
//! decode, that was written at another [`SNAPSHOT_VERSION`], whose sequence number or session is
//! not the one asked for, or whose parts do not add up to its conversation is refused with a
//! [`SnapshotError`], and the caller folds the log instead.

use serde::{Deserialize, Serialize};

use crate::history::History;
use crate::model::Message;
use crate::state::{SNAPSHOT_VERSION, State};

/// A snapshot to store: the head, and the part it adds to the conversation (if any message
/// arrived since the last part).
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// The state's sequence number: the snapshot covers the log up to this event.
    pub seq: u64,
    /// The [`SNAPSHOT_VERSION`] the head was written at.
    pub version: u32,
    /// JSON text.
    pub head: String,
    /// The conversation's messages since the last part; `None` when none arrived.
    pub part: Option<Part>,
    /// The conversation's length, i.e. where the next snapshot's part starts.
    pub history_len: u64,
}

/// Messages of the conversation from `start` on, as a JSON array.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// The position in the conversation (from 0) of the part's first message.
    pub start: u64,
    /// The messages, as a JSON array.
    pub text: String,
}

/// Why a snapshot cannot be used (the log is folded instead).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The snapshot was written at another [`SNAPSHOT_VERSION`].
    #[error("snapshot version {found}, this build reads {SNAPSHOT_VERSION}")]
    Version {
        /// The version the snapshot was written at.
        found: u32,
    },
    /// The state could not be serialised, or its conversation is not all held.
    #[error("cannot encode the state: {0}")]
    Encode(String),
    /// The head is not a state this build reads (the decoder's message).
    #[error("the state does not decode: {0}")]
    Head(String),
    /// The head's sequence number is not the one it is stored at.
    #[error("the snapshot says event {found}, but it is stored at event {expected}")]
    Seq {
        /// The sequence number the store keeps the snapshot at.
        expected: u64,
        /// The sequence number the head records.
        found: u64,
    },
    /// The head is of another session.
    #[error("the snapshot is of session {found:?}")]
    Session {
        /// The session id the head records.
        found: String,
    },
    /// A part of the conversation is not a JSON array of messages.
    #[error("the conversation's part at message {start} does not decode: {reason}")]
    Part {
        /// The position of the part's first message.
        start: u64,
        /// The decoder's message.
        reason: String,
    },
    /// The parts do not add up to the conversation the head records (a gap, an overlap, a
    /// wrong length).
    #[error("the conversation's parts {0}")]
    Parts(String),
}

#[derive(Serialize)]
struct HeadOut<'a> {
    history_len: u64,
    window: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_person: Option<&'a str>,
    state: &'a State,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadIn {
    history_len: u64,
    window: u64,
    #[serde(default)]
    last_person: Option<String>,
    state: State,
}

/// The snapshot of `state`, whose conversation is kept in parts up to message `parts_end`
/// already (0: none yet; a value past the conversation's end starts the parts over, which a
/// state that does not hold its whole conversation cannot do: [`SnapshotError::Encode`]).
pub fn encode(state: &State, parts_end: u64) -> Result<Encoded, SnapshotError> {
    let history = &state.history;
    let len = history.len() as u64;
    let start = if parts_end <= len { parts_end } else { 0 };
    let upto = state.compaction.as_ref().map_or(0, |c| c.upto);
    let head = serde_json::to_string(&HeadOut {
        history_len: len,
        window: history.window(upto) as u64,
        last_person: history.last_person(),
        state,
    })
    .map_err(|e| SnapshotError::Encode(e.to_string()))?;
    let part = if start < len {
        let from = usize::try_from(start).unwrap_or(usize::MAX);
        let messages = history.range(from, history.len()).ok_or_else(|| {
            SnapshotError::Encode(format!(
                "the conversation's messages from {from} on are not all held (they start at {})",
                history.start()
            ))
        })?;
        let text =
            serde_json::to_string(messages).map_err(|e| SnapshotError::Encode(e.to_string()))?;
        Some(Part { start, text })
    } else {
        None
    };
    Ok(Encoded {
        seq: state.seq,
        version: SNAPSHOT_VERSION,
        head,
        part,
        history_len: len,
    })
}

/// A stored snapshot's head, read and checked: the state without its conversation, and which
/// of the conversation's parts a load needs ([`Head::window`]).
#[derive(Debug)]
pub struct Head {
    state: State,
    history_len: u64,
    window: u64,
    last_person: Option<String>,
}

/// Reads the head of session `id`'s snapshot after event `seq`, written at `version`.
pub fn read_head(id: &str, seq: u64, version: u32, head: &str) -> Result<Head, SnapshotError> {
    if version != SNAPSHOT_VERSION {
        return Err(SnapshotError::Version { found: version });
    }
    let HeadIn {
        history_len,
        window,
        last_person,
        state,
    } = serde_json::from_str(head).map_err(|e| SnapshotError::Head(e.to_string()))?;
    if state.seq != seq {
        return Err(SnapshotError::Seq {
            expected: seq,
            found: state.seq,
        });
    }
    if state.session_id != id {
        return Err(SnapshotError::Session {
            found: state.session_id,
        });
    }
    if window > history_len {
        return Err(SnapshotError::Parts(format!(
            "start a window at message {window} of {history_len}"
        )));
    }
    Ok(Head {
        state,
        history_len,
        window,
        last_person,
    })
}

impl Head {
    /// The first message a load holds: the parts from the one holding it on are all it needs
    /// (see [`crate::history::History::window`]).
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The conversation's length.
    pub fn history_len(&self) -> u64 {
        self.history_len
    }

    /// Holds the whole conversation instead of its window (for a reader that shows it all):
    /// then every part from the first is needed.
    pub fn whole(mut self) -> Self {
        self.window = 0;
        self
    }

    /// The state, its conversation held from [`Self::window`] on, read from `parts`
    /// (`(start, text)`, in order of `start`): the part holding the window's first message and
    /// every later one (earlier parts are skipped unread). Returns the state and the
    /// conversation's length.
    pub fn with_parts(self, parts: &[(u64, String)]) -> Result<(State, u64), SnapshotError> {
        let Self {
            mut state,
            history_len,
            window,
            last_person,
        } = self;
        // The last part that starts at or before the window, and every one after it.
        let first = parts
            .iter()
            .rposition(|(start, _)| *start <= window)
            .unwrap_or(0);
        let mut have = parts.get(first).map_or(0, |(start, _)| *start);
        if history_len > window && have > window {
            return Err(SnapshotError::Parts(format!(
                "leave a gap: the first starts at message {have}, after the window's first message {window}"
            )));
        }
        let mut messages: Vec<Message> = Vec::new();
        for (start, text) in parts.get(first..).unwrap_or_default() {
            if have >= history_len {
                break;
            }
            if *start != have {
                return Err(SnapshotError::Parts(format!(
                    "leave a gap: a part starts at message {start} after {have} messages"
                )));
            }
            let more: Vec<Message> =
                serde_json::from_str(text).map_err(|e| SnapshotError::Part {
                    start: *start,
                    reason: e.to_string(),
                })?;
            let skip = usize::try_from(window.saturating_sub(have)).unwrap_or(usize::MAX);
            have += more.len() as u64;
            messages.extend(more.into_iter().skip(skip));
        }
        if window < history_len && have != history_len {
            return Err(SnapshotError::Parts(format!(
                "hold {have} messages where the snapshot has {history_len}"
            )));
        }
        let start = usize::try_from(window).unwrap_or(usize::MAX);
        state.history = History::from_window(start, messages, last_person);
        Ok((state, history_len))
    }
}

/// The state a stored snapshot holds: session `id`'s, after event `seq`, written at `version`,
/// its conversation held from the head's window on, read from `parts` (`(start, text)`, in order
/// of `start`; parts before the one holding the window are skipped). Returns the state and the
/// conversation's length.
pub fn decode(
    id: &str,
    seq: u64,
    version: u32,
    head: &str,
    parts: &[(u64, String)],
) -> Result<(State, u64), SnapshotError> {
    read_head(id, seq, version, head)?.with_parts(parts)
}

/// Checks that a snapshot taken after any event of `events` (its conversation in two parts: one
/// written halfway there, one after), decoded and followed by the rest of the log, is the fold of
/// the whole log: snapshots change how a state is loaded, never what it is. The load holds the
/// conversation from its window on: it must equal the fold with the messages before the window
/// let go of, and every request built from it must carry what the same request built from the
/// fold carries; the whole conversation read from the same parts must be the fold's. For tests
/// and fuzz targets; quadratic in the length of the log.
pub fn verify(events: &[crate::Event]) -> Result<(), String> {
    let whole = State::fold(events);
    let mut states = vec![State::new()];
    for e in events {
        let mut next = states.last().cloned().unwrap_or_default();
        next.apply(e);
        states.push(next);
    }
    let carried = |s: &State| crate::prompts::conversation(s, Vec::new()).to_vec();
    let windowed = |s: &State, window: usize| {
        let mut s = s.clone();
        s.history.forget_before(window);
        s
    };
    for k in 1..states.len() {
        let fail = |what: String| format!("the snapshot after event {k} {what}");
        let early = encode(&states[k / 2], 0).map_err(|e| fail(e.to_string()))?;
        let late = encode(&states[k], early.history_len).map_err(|e| fail(e.to_string()))?;
        let parts: Vec<(u64, String)> = [early.part, late.part]
            .into_iter()
            .flatten()
            .map(|p| (p.start, p.text))
            .collect();
        let head = || {
            read_head(
                &states[k].session_id,
                states[k].seq,
                late.version,
                &late.head,
            )
            .map_err(|e| fail(format!("does not decode: {e}")))
        };
        let (all, _) = head()?
            .whole()
            .with_parts(&parts)
            .map_err(|e| fail(format!("does not decode whole: {e}")))?;
        if all != states[k] {
            return Err(fail(format!(
                "reads back whole otherwise:\n{all:?}\ninstead of\n{:?}",
                states[k]
            )));
        }
        let (mut back, _) = head()?
            .with_parts(&parts)
            .map_err(|e| fail(format!("does not decode: {e}")))?;
        let window = back.history.start();
        if back != windowed(&states[k], window) || carried(&back) != carried(&states[k]) {
            return Err(fail(format!(
                "reads back otherwise (from message {window}):\n{back:?}\ninstead of\n{:?}",
                states[k]
            )));
        }
        for e in &events[k..] {
            back.apply(e);
        }
        if back != windowed(&whole, window) || carried(&back) != carried(&whole) {
            return Err(fail(format!(
                "and the rest of the log fold into\n{back:?}\ninstead of\n{whole:?}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::Event;
    use crate::model::{ModelReply, Purpose, ToolCall};

    fn react_state(iterations: usize) -> State {
        State::fold(&react_events(iterations))
    }

    fn react_events(iterations: usize) -> Vec<Event> {
        let mut events = vec![
            Event::SessionStarted {
                session_id: "s".into(),
                agent: "a".into(),
                input: json!({"x": 1}),
                mode: Some(crate::agent::Mode::React),
                parent_id: None,
            },
            Event::TurnStarted {
                task: "go".into(),
                input: serde_json::Value::Null,
            },
        ];
        for i in 0..iterations {
            let id = format!("c{i}");
            events.push(Event::ModelReplied {
                purpose: Purpose::React,
                reply: ModelReply {
                    tool_calls: vec![ToolCall {
                        id: id.clone(),
                        name: "echo".into(),
                        arguments: json!({"text": i}),
                        provider_id: None,
                    }],
                    ..ModelReply::default()
                },
                step: None,
            });
            events.push(Event::ToolCallStarted {
                call_id: id.clone(),
                step: None,
                tool: "echo".into(),
                args: json!({"text": i}),
                attempt: 1,
                idempotency_key: format!("s:{i}"),
                item: None,
                untrusted_from: Vec::new(),
            });
            events.push(Event::ToolCallFinished {
                call_id: id,
                outcome: crate::event::ToolOutcome::Ok {
                    output: json!({"text": i}),
                },
                duration_ms: 1,
            });
        }
        events
    }

    /// A ReAct turn of `iterations` calls whose conversation was compacted up to message `upto`
    /// after `at` iterations, then a reply that starts two calls, one answered.
    fn compacted_events(iterations: usize, at: usize, upto: u64) -> Vec<Event> {
        let mut events = react_events(iterations);
        events.insert(
            2 + 3 * at,
            Event::HistoryCompacted {
                upto,
                summary: "earlier: echoes".into(),
            },
        );
        let calls: Vec<ToolCall> = ["x", "y"]
            .iter()
            .map(|id| ToolCall {
                id: (*id).into(),
                name: "echo".into(),
                arguments: json!({}),
                provider_id: None,
            })
            .collect();
        events.push(Event::ModelReplied {
            purpose: Purpose::React,
            reply: ModelReply {
                tool_calls: calls,
                ..ModelReply::default()
            },
            step: None,
        });
        events.push(Event::ToolCallStarted {
            call_id: "x".into(),
            step: None,
            tool: "echo".into(),
            args: json!({}),
            attempt: 1,
            idempotency_key: "s:x".into(),
            item: None,
            untrusted_from: Vec::new(),
        });
        events.push(Event::ToolCallFinished {
            call_id: "x".into(),
            outcome: crate::event::ToolOutcome::Ok { output: json!({}) },
            duration_ms: 1,
        });
        events
    }

    #[test]
    fn a_compacted_conversation_loads_from_its_window_only() {
        let events = compacted_events(40, 30, 41);
        let state = State::fold(&events);
        let early = encode(&State::fold(&events[..40]), 0).unwrap();
        let late = encode(&state, early.history_len).unwrap();
        let head = read_head("s", state.seq, late.version, &late.head).unwrap();
        // Message 41 is the assistant message of iteration 20: the window starts there.
        assert_eq!(head.window(), 41);
        assert!(early.history_len <= head.window());
        // The part before the window is never read: garbage there does not matter.
        let late_part = late.part.unwrap();
        let parts = vec![
            (0, "not json".to_owned()),
            (late_part.start, late_part.text),
        ];
        let (back, len) = head.with_parts(&parts).unwrap();
        assert_eq!(len, state.history.len() as u64);
        assert_eq!(back.history.start(), 41);
        assert_eq!(back.history.held().len(), state.history.len() - 41);
        assert_eq!(back.history.get(41), state.history.get(41));
        assert_eq!(back.history.get(40), None);
        let mut want = state.clone();
        want.history.forget_before(41);
        assert_eq!(back, want);
        // A request carries the same messages, the open call's `interrupted` result included.
        let carried = |s: &State| crate::prompts::conversation(s, Vec::new()).to_vec();
        assert_eq!(carried(&back), carried(&state));
        assert!(back.history.needs_repair());
        // And every prefix of the log loads and continues as its fold does.
        verify(&events).unwrap();
    }

    #[test]
    fn fan_outs_and_counters_from_a_head_are_checked_or_saturate() {
        let plan = crate::Plan::from_value(&json!([
            {"_id": "a", "_tool": "echo", "text": "x", "_forEach": "†input.items"}
        ]))
        .unwrap();
        let mut state = react_state(1);
        state.apply(&Event::PlanAccepted { plan });
        state.apply(&Event::FanOutStarted {
            step: "a".into(),
            items: 3,
        });
        let enc = encode(&state, 0).unwrap();
        let parts = vec![(0, enc.part.clone().unwrap().text)];
        let read = |head: &str| decode("s", state.seq, enc.version, head, &parts);
        assert_eq!(read(&enc.head).unwrap().0, state);
        // Lists of different lengths, or an index past them, would be a panic when the next
        // event of the fan-out is applied: refused.
        for (from, to, why) in [
            ("\"attempts\":[0,0,0]", "\"attempts\":[0]", "attempt counts"),
            ("\"running\":[]", "\"running\":[5]", "item index 5"),
            ("\"next\":0", "\"next\":9", "item index 9"),
        ] {
            let bad = enc.head.replace(from, to);
            assert_ne!(bad, enc.head, "{from}");
            let e = read(&bad).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        // Counters at their largest saturate instead of overflowing.
        let big = enc.head.replacen(
            "\"turn\":{\"number\":1",
            &format!("\"turn\":{{\"number\":{}", u32::MAX),
            1,
        );
        assert_ne!(big, enc.head);
        let (mut back, _) = read(&big).unwrap();
        back.apply(&Event::TurnStarted {
            task: "more".into(),
            input: serde_json::Value::Null,
        });
        assert_eq!(back.turn.number, u32::MAX);
    }

    #[test]
    fn the_window_keeps_the_last_reply_and_never_starts_at_a_result() {
        // Compacted past everything but the last reply and its results: the window starts at
        // the last message that is not a tool result.
        let events = compacted_events(6, 6, 1000);
        let state = State::fold(&events);
        let len = state.history.len();
        let w = state.history.window(1000);
        assert_eq!(w, len - 2, "the last reply and its one result");
        assert!(matches!(
            state.history.get(w),
            Some(crate::model::Message::Assistant { .. })
        ));
        // An `upto` at a tool result moves back to its call.
        assert_eq!(state.history.window(3), 3);
        let w = state.history.window(2);
        assert_eq!(w, 1);
        // The text a person wrote last survives the window.
        let mut s = state.clone();
        s.history.forget_before(w);
        assert_eq!(s.history.last_person(), Some("go"));
        verify(&events).unwrap();
    }

    #[test]
    fn a_snapshot_reads_back_as_the_state_it_was_made_of() {
        let state = react_state(3);
        let enc = encode(&state, 0).unwrap();
        assert_eq!(enc.seq, state.seq);
        let part = enc.part.clone().unwrap();
        assert_eq!(part.start, 0);
        let (back, len) =
            decode("s", state.seq, enc.version, &enc.head, &[(0, part.text)]).unwrap();
        assert_eq!(back, state);
        assert_eq!(len, state.history.len() as u64);
        // The run's ledger of calls (`turn.repeats`) names call ids; no message is in the head.
        let mut head: serde_json::Value = serde_json::from_str(&enc.head).unwrap();
        head["state"]["turn"]
            .as_object_mut()
            .unwrap()
            .remove("repeats");
        assert!(
            !head.to_string().contains("\"c1\""),
            "the head holds no message: {}",
            enc.head
        );
    }

    #[test]
    fn later_snapshots_add_only_the_new_messages() {
        let first = react_state(2);
        let a = encode(&first, 0).unwrap();
        let later = react_state(5);
        let b = encode(&later, a.history_len).unwrap();
        let part_b = b.part.clone().unwrap();
        assert_eq!(part_b.start, a.history_len);
        let parts = vec![(0, a.part.unwrap().text), (part_b.start, part_b.text)];
        let (back, _) = decode("s", later.seq, b.version, &b.head, &parts).unwrap();
        assert_eq!(back, later);
        // Nothing new: no part.
        assert!(encode(&later, b.history_len).unwrap().part.is_none());
    }

    #[test]
    fn unusable_snapshots_are_refused_not_trusted() {
        let state = react_state(2);
        let enc = encode(&state, 0).unwrap();
        let parts = vec![(0, enc.part.clone().unwrap().text)];
        let seq = state.seq;
        let bad = |r: Result<(State, u64), SnapshotError>| r.unwrap_err().to_string();
        assert!(bad(decode("s", seq, SNAPSHOT_VERSION + 1, &enc.head, &parts)).contains("version"));
        assert!(bad(decode("s", seq + 1, enc.version, &enc.head, &parts)).contains("event"));
        assert!(bad(decode("t", seq, enc.version, &enc.head, &parts)).contains("session"));
        assert!(
            bad(decode(
                "s",
                seq,
                enc.version,
                "{\"history_len\": 0}",
                &parts
            ))
            .contains("decode")
        );
        assert!(bad(decode("s", seq, enc.version, &enc.head, &[])).contains("hold 0"));
        assert!(
            bad(decode(
                "s",
                seq,
                enc.version,
                &enc.head,
                &[(1, "[]".into())]
            ))
            .contains("gap")
        );
        assert!(
            bad(decode(
                "s",
                seq,
                enc.version,
                &enc.head,
                &[(0, "[{]".into())]
            ))
            .contains("message 0")
        );
        // A field this build does not know (a snapshot of a newer shape) is refused too.
        let newer = enc
            .head
            .replacen("\"state\":{", "\"state\":{\"later_field\":1,", 1);
        assert!(bad(decode("s", seq, enc.version, &newer, &parts)).contains("later_field"));
    }

    proptest::proptest! {
        /// A damaged head (a character changed or cut out anywhere) is refused or read, never a
        /// panic; what reads back is a state whose plan fits its counters.
        #[test]
        fn damaged_heads_never_panic(at in 0usize..4096, with in proptest::char::range(' ', '~'), cut: bool) {
            let plan = crate::Plan::from_value(&json!([
                {"_id": "a", "_tool": "echo", "text": "x", "_outputPath": "†state.a"},
                {"_id": "b", "_tool": "echo", "text": "†state.a", "_outputPath": "†state.b"}
            ]))
            .unwrap();
            let mut state = react_state(2);
            state.apply(&Event::PlanAccepted { plan });
            let enc = encode(&state, 0).unwrap();
            let mut head: Vec<char> = enc.head.chars().collect();
            let i = at % head.len();
            if cut { head.remove(i); } else { head[i] = with; }
            let head: String = head.into_iter().collect();
            let parts = vec![(0, enc.part.clone().unwrap().text)];
            if let Ok((back, _)) = decode("s", state.seq, enc.version, &head, &parts)
                && let Some(p) = &back.plan
            {
                proptest::prop_assert_eq!(p.steps.len(), p.plan.steps.len());
                proptest::prop_assert!(p.candidates().iter().all(|&c| c < p.steps.len()));
            }
        }
    }

    #[test]
    fn a_plan_run_is_rebuilt_and_checked() {
        let plan = crate::Plan::from_value(&json!([
            {"_id": "a", "_tool": "echo", "text": "x", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "echo", "text": "†state.a", "_outputPath": "†state.b"}
        ]))
        .unwrap();
        let state = State::fold(&[
            Event::SessionStarted {
                session_id: "p".into(),
                agent: "a".into(),
                input: serde_json::Value::Null,
                mode: None,
                parent_id: None,
            },
            Event::PlanAccepted { plan },
        ]);
        let enc = encode(&state, 0).unwrap();
        assert!(enc.part.is_none());
        let (back, _) = decode("p", state.seq, enc.version, &enc.head, &[]).unwrap();
        assert_eq!(back, state);
        assert_eq!(
            back.plan.as_ref().unwrap().graph().deps,
            vec![vec![], vec![0]]
        );
        // Counters that do not fit the plan are refused (they would index past its end).
        let broken = enc
            .head
            .replace("\"candidates\":[0]", "\"candidates\":[0,7]");
        assert_ne!(broken, enc.head);
        let e = decode("p", state.seq, enc.version, &broken, &[]).unwrap_err();
        assert!(e.to_string().contains("past the plan"), "{e}");
    }
}
