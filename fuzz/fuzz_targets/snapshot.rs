//! A stored snapshot (its head on the first line, then one part a line: the message it starts
//! at, a tab, its JSON) is read as a load reads it, with its conversation's window and whole.
//! A snapshot of another shape, an old version or damaged text must be refused with an error (the
//! load then folds the log), never a panic; and a state that is accepted must take the rest of a
//! log, build a request and be written again without one either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use weft_core::event::{InputRequest, ToolOutcome};
use weft_core::model::{ModelReply, Purpose, ToolCall};
use weft_core::snapshot::{encode, read_head};
use weft_core::{Event, SNAPSHOT_VERSION, prompts};

/// Events a log may hold after a snapshot: a reply that starts a call, its result, a new turn, a
/// compaction, a wait and its answer, a step's end.
fn rest() -> Vec<Event> {
    let call = ToolCall {
        id: "f1".into(),
        name: "echo".into(),
        arguments: json!({"text": "x"}),
        provider_id: None,
    };
    vec![
        Event::ModelReplied {
            purpose: Purpose::React,
            reply: ModelReply {
                tool_calls: vec![call],
                ..ModelReply::default()
            },
            step: None,
        },
        Event::ToolCallStarted {
            call_id: "f1".into(),
            step: Some("a".into()),
            tool: "echo".into(),
            args: json!({"text": "x"}),
            attempt: 1,
            idempotency_key: "s:1:0".into(),
            item: Some(0),
            untrusted_from: vec![],
        },
        Event::ToolCallFinished {
            call_id: "f1".into(),
            outcome: ToolOutcome::Ok {
                output: json!({"text": "x"}),
            },
            duration_ms: 1,
        },
        Event::HistoryCompacted {
            upto: 3,
            summary: "so far".into(),
        },
        Event::WaitingForUser {
            request: InputRequest {
                kind: "question".into(),
                question: "which?".into(),
                step: Some("a".into()),
                tool: None,
                missing: Vec::new(),
                partial_call: Value::Null,
                plan: None,
                call_id: Some("f1".into()),
            },
        },
        Event::UserReplied {
            text: "this".into(),
        },
        Event::StepCompleted {
            step: "a".into(),
            output: json!(1),
            summary: None,
        },
        Event::TurnStarted {
            task: "again".into(),
            input: Value::Null,
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.lines();
    let head = lines.next().unwrap_or_default();
    let parts: Vec<(u64, String)> = lines
        .filter_map(|l| {
            let (start, part) = l.split_once('\t')?;
            Some((start.parse().ok()?, part.to_owned()))
        })
        .collect();
    // The session and event the head names, so that the fuzzer reaches past those checks.
    let named: Value = serde_json::from_str(head).unwrap_or_default();
    let id = named["state"]["session_id"].as_str().unwrap_or("s");
    let seq = named["state"]["seq"].as_u64().unwrap_or(0);
    for whole in [false, true] {
        let Ok(h) = read_head(id, seq, SNAPSHOT_VERSION, head) else {
            return;
        };
        let h = if whole { h.whole() } else { h };
        let Ok((mut state, len)) = h.with_parts(&parts) else {
            continue;
        };
        assert_eq!(
            state.history().len() as u64,
            len,
            "the conversation's length"
        );
        let _ = prompts::conversation(&state, Vec::new()).to_vec();
        let _ = encode(&state, len);
        for e in rest() {
            state.apply(&e);
            let _ = prompts::conversation(&state, Vec::new()).to_vec();
        }
        let _ = encode(&state, 0);
    }
});
