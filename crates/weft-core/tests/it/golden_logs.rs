//! Committed event logs of real sessions (`tests/fixtures/logs/`, made by `make.sh` there) fold
//! to the digests recorded beside them: a change to `State::apply` that folds an existing
//! session differently fails here, and so does one that reads an older event shape otherwise.
//!
//! The digest is over [`facts`] of the state after every event of the log: a projection into
//! JSON with names of its own (not State's serialised form), so that it stays valid when
//! State's fields move.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use weft_core::snapshot;
use weft_core::state::{Items, State};
use weft_core::{Envelope, Event};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs")
}

/// The logs of the directory, by name (the file name without `.jsonl`).
fn logs() -> BTreeMap<String, Vec<Event>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let mut events = Vec::new();
        for (k, line) in text.lines().enumerate() {
            let env: Envelope = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), k + 1));
            assert_eq!(env.seq, k as u64 + 1, "{}:{}", path.display(), k + 1);
            events.push(env.event);
        }
        out.insert(name.to_owned(), events);
    }
    out
}

/// The recorded digests: `NAME  HEX` per line of `digests`.
fn recorded() -> BTreeMap<String, String> {
    std::fs::read_to_string(dir().join("digests"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, hex) = l.split_once(char::is_whitespace).unwrap();
            (name.to_owned(), hex.trim().to_owned())
        })
        .collect()
}

fn items(i: &Items) -> Value {
    json!({
        "done": i.done,
        "attempts": i.attempts,
        "keys": i.keys,
        "running": i.running,
        "retrying": i.retrying,
        "next": i.next,
        "failed": i.failed,
    })
}

/// What a session's state says, named here: status, turn, plan steps, calls, waits, the
/// workflow's position, the conversation, usage, the loop's counters.
fn facts(s: &State) -> Value {
    let plan = s.plan.as_ref().map(|p| {
        let steps: Vec<Value> = p
            .plan
            .steps
            .iter()
            .zip(&p.steps)
            .enumerate()
            .map(|(i, (step, r))| {
                json!({
                    "step": step.to_call(),
                    "status": r.status,
                    "attempts": r.attempts,
                    "output": r.output,
                    "error": r.error,
                    "handled": r.handled,
                    "reason": r.reason,
                    "retry_in_ms": r.retry_in_ms,
                    "call": r.call,
                    "log": r.log,
                    "signatures": r.signatures,
                    "failures": r.failures,
                    "next_call": r.next_call,
                    "key": r.key,
                    "items": r.items.as_ref().map(items),
                    "open_deps": p.open_deps()[i],
                    "candidate": p.candidates().contains(&i),
                    "retrying": p.retrying().contains(&i),
                })
            })
            .collect();
        json!({ "steps": steps })
    });
    let calls: BTreeMap<&String, Value> = s
        .calls
        .open
        .iter()
        .map(|(id, c)| {
            (
                id,
                json!({
                    "step": c.step, "item": c.item, "tool": c.tool, "args": c.args,
                    "attempt": c.attempt, "key": c.idempotency_key,
                }),
            )
        })
        .collect();
    // The turn's and the workflow's fields as they serialize (their names are the fields'),
    // including those only the core reads.
    let t = serde_json::to_value(&s.turn).unwrap();
    let w = serde_json::to_value(&s.workflow).unwrap();
    let mut facts = json!({
        "session": s.session_id,
        "agent": s.agent,
        "seq": s.seq,
        "status": s.status,
        "input": s.input,
        "data": s.data,
        "error": s.turn.error(),
        "answer": s.turn.answer(),
        "mode": s.mode,
        "phase": s.phase,
        "resume_phase": s.resume_phase,
        "turn": s.turn.number(),
        "task": s.turn.task(),
        "memory": s.memory,
        "recall_due": t["recall_due"],
        "recalled": s.turn.recalled(),
        "plan": plan,
        "open_wave": s.waves.open,
        "waves": s.waves.started,
        "wave_steps": s.waves.steps,
        "calls": calls,
        "tool_invocations": s.calls.started,
        "waiting": s.turn.waiting(),
        "user_inputs": s.turn.user_inputs(),
        "approved_calls": s.calls.approved,
        "conversation": s.history.iter().collect::<Vec<_>>(),
        "conversation_start": s.history.start(),
        "compaction": s.compaction.as_ref().map(|c| json!({"upto": c.upto, "summary": c.summary})),
        "model_calls": s.usage.calls,
        "purpose_calls": s.usage.by_purpose,
        "usage": s.usage.tokens,
        "last_problems": t["last_problems"],
        "replans": s.turn.replans(),
        "replan_reason": t["replan_reason"],
        "iterations": t["iterations"],
        "rejections": t["rejections"],
        "model_failures": t["model_failures"],
        "feedback": t["feedback"],
        "reviews": t["reviews"],
        "drafts": s.turn.drafts(),
        "response_feedback": t["response_feedback"],
        "workflow": {
            "step": w["step"], "entered": w["entered"], "transitions": w["transitions"],
            "turns": w["turns"], "rejected": w["rejected"], "feedback": w["feedback"],
            "delegated": w["delegated"], "delegating": w["delegating"], "outputs": w.get("outputs").cloned().unwrap_or(json!({})),
            "reply": w["reply"], "path": w.get("path").cloned().unwrap_or(json!([])),
        },
    });
    // What a session given a budget spent, and the budget: only for such a session (a
    // `budget_set` event), so that the logs made before budgets keep their digests.
    if let Some(budget) = &s.spending.budget {
        let spent = |x: &weft_core::budget::Spent| {
            json!({
                "input_tokens": x.input_tokens, "output_tokens": x.output_tokens,
                "cost_usd": x.cost_usd, "model_calls": x.model_calls,
                "tool_calls": x.tool_calls, "per_tool": x.per_tool,
            })
        };
        facts["budget"] = json!({
            "budget": budget,
            "run": spent(&s.spending.run),
            "session": spent(&s.spending.session),
            "run_started_seq": s.spending.run_started_seq,
        });
    }
    facts
}

/// The digest of the facts of the state after each event of `events`, one JSON line each: a
/// change that folds any prefix otherwise changes it, even one that a later event hides.
fn digest(events: &[Event]) -> String {
    let mut hash = Sha256::new();
    let mut s = State::new();
    for e in events {
        s.apply(e);
        hash.update(serde_json::to_string(&facts(&s)).unwrap().as_bytes());
        hash.update(b"\n");
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn committed_logs_fold_to_their_recorded_digests() {
    let logs = logs();
    let recorded = recorded();
    assert!(logs.len() >= 7, "{} logs", logs.len());
    let mut wrong = Vec::new();
    for (name, events) in &logs {
        let got = digest(events);
        match recorded.get(name) {
            Some(want) if *want == got => {}
            want => wrong.push(format!("{name}: recorded {want:?}, folds to {got}")),
        }
    }
    for name in recorded.keys().filter(|n| !logs.contains_key(*n)) {
        wrong.push(format!("{name}: a digest without its log"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_log_without_epochs_folds_as_the_same_session_with_them() {
    let logs = logs();
    assert_eq!(
        digest(&logs["react-plain-before-epoch"]),
        digest(&logs["react-plain"])
    );
}

#[test]
fn a_snapshot_after_any_event_of_a_committed_log_loads_as_its_fold() {
    for (name, events) in logs() {
        if let Err(e) = snapshot::verify(&events) {
            panic!("{name}: {e}");
        }
    }
}

/// The logs cover what they are committed for: each mode, retries, a replan, waits answered,
/// a fan-out, a compaction, a refined answer, several turns.
#[test]
fn the_committed_logs_cover_the_events_they_are_for() {
    let logs = logs();
    let kinds: std::collections::BTreeSet<&str> =
        logs.values().flatten().map(Event::kind).collect();
    for k in [
        "turn_started",
        "step_retrying",
        "step_failed",
        "plan_revised",
        "waiting_for_user",
        "user_replied",
        "fan_out_started",
        "history_compacted",
        "tool_call_blocked",
        "response_reviewed",
        "workflow_step_entered",
        "workflow_output_rejected",
        "workflow_transition",
        "step_action",
        "budget_set",
        "budget_exceeded",
    ] {
        assert!(kinds.contains(k), "no committed log has a {k} event");
    }
}
