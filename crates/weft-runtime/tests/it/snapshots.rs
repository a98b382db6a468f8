//! Snapshots on every store (memory, a SQLite file, PostgreSQL in `needs_postgres_snapshots`):
//! a run writes them with its appends, a load starts from the newest and folds only the events
//! after it, a session continues from one as it would from its log, and a snapshot that cannot
//! be used (garbage, another version, parts missing) is passed over for the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents as common;

use std::sync::Arc;

use common::{TestTool, j, script, t, tool_calls};
use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::snapshot::{Encoded, Part};
use weft_core::{SNAPSHOT_VERSION, SessionStatus, State};
use weft_model::{Purpose, ScriptedModel, ScriptedReply};
use weft_runtime::{Agent, Runtime, SessionInfo, load_state};
use weft_store::{RamStore, SqliteStore, Store};
use weft_tools::Registry;

fn agent(yaml: &str, tools: Vec<TestTool>, replies: Vec<(Purpose, Vec<ScriptedReply>)>) -> Agent {
    let spec = AgentSpec::parse("snap.yaml", yaml).unwrap();
    let mut reg = Registry::new();
    for tool in tools {
        reg.register(tool).unwrap();
    }
    let model = Arc::new(ScriptedModel::keyed("snap", script(replies)));
    Agent::new(&spec, Arc::new(reg), model, &json!({}), &json!({})).unwrap()
}

/// The fold of the session's whole log.
async fn folded<S: Store>(store: &S, id: &str) -> State {
    let (_, log) = store.load(id).await.unwrap();
    State::fold(log.iter().map(|e| &e.event))
}

/// Runs a ReAct session of 30 calls of a tool that is not idempotent (its starts are stored on
/// their own) to its answer, with a snapshot due every 5 events and one event more per
/// `head_bytes` of the last head (0: heads push nothing back). Returns its id and last sequence.
async fn run_poster<S: Store>(store: Arc<S>, head_bytes: u64) -> (String, u64) {
    let post = TestTool::returning("post", json!({"ok": true}));
    let mut call = tool_calls(&[("post", json!({"n": 1}))]);
    call.repeat = Some(30);
    let a = agent(
        "name: poster\nmode: react\nlimits: { max_iterations: 40 }\n",
        vec![post],
        vec![(Purpose::React, vec![call, t("posted")])],
    );
    let rt = Runtime::builder(store, a.tools.clone(), a.config.limits.clone(), None, None)
        .snapshot_every(5)
        .snapshot_head_bytes(head_bytes)
        .build();
    let s = rt
        .run_agent(&a, SessionInfo::default(), "post", Value::Null)
        .await
        .unwrap();
    assert_eq!(s.state.turn().answer(), Some("posted"));
    (s.id.clone(), s.state.seq())
}

/// A ReAct session of 30 tool calls (a tool that is not idempotent: its starts are stored on
/// their own) with a snapshot every 5 events: the load folds at most a few events after the
/// newest snapshot, the conversation is in several parts written once each, and the state is
/// the fold of the log.
async fn loads_start_from_the_newest_snapshot<S: Store>(store: Arc<S>) {
    let (id, seq) = run_poster(store.clone(), 0).await;
    let loaded = load_state(store.as_ref(), &id).await.unwrap();
    let at = loaded.snapshot.expect("a snapshot was used");
    assert!(
        at + 5 >= seq && at < seq,
        "snapshot at {at} of {seq} events"
    );
    assert_eq!(loaded.folded as u64, seq - at);
    assert_eq!(loaded.state, folded(store.as_ref(), &id).await);
    let parts = store.snapshot_parts(&id, 0).await.unwrap();
    assert!(parts.len() > 5, "{} parts", parts.len());
    let in_parts: usize = parts
        .iter()
        .map(|(_, text)| serde_json::from_str::<Vec<Value>>(text).unwrap().len())
        .sum();
    assert!(in_parts <= loaded.state.history().len() && in_parts > 50);
}

/// A plan session waits for an argument with a snapshot after every event; a new process
/// (a new runtime) loads it from the snapshot and finishes it.
async fn a_waiting_session_continues_from_its_snapshot<S: Store>(store: Arc<S>) {
    let refund = TestTool::new(
        "issueRefund",
        "billing",
        json!({"type": "object", "properties": {"customerId": {"type": "string"}, "amount": {"type": "number"}}, "required": ["customerId", "amount"]}),
        |a| Ok(json!({"refunded": a["amount"]})),
    );
    let log = refund.log.clone();
    let a = agent(
        "name: asker\nmode: plan\nreview_responses: false\n",
        vec![refund],
        vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "refund", "_description": "Issue the refund", "_category": "billing"}]}),
                )],
            ),
            (
                Purpose::Execute,
                vec![
                    j(
                        json!({"action": "REQUEST_TOOL_INPUT", "tool": "issueRefund", "arguments": {"customerId": "c1"}, "missing": ["amount"], "question": "How much?"}),
                    ),
                    j(
                        json!({"action": "USE_TOOL", "tool": "issueRefund", "arguments": {"customerId": "c1", "amount": 20}}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Refunded 20.")]),
        ],
    );
    let rt = crate::agents::runtime_of(&store, &a)
        .snapshot_every(1)
        .snapshot_head_bytes(0)
        .build();
    let s = rt
        .run_agent(&a, SessionInfo::default(), "refund me", json!({}))
        .await
        .unwrap();
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    let id = s.id.clone();
    drop(s);
    let rt = crate::agents::runtime_of(&store, &a)
        .snapshot_every(1)
        .snapshot_head_bytes(0)
        .build();
    let loaded = load_state(store.as_ref(), &id).await.unwrap();
    assert!(loaded.snapshot.is_some(), "{loaded:?}");
    let mut s = rt.load_session(&id).await.unwrap();
    assert_eq!(s.state.turn().waiting().unwrap().missing, vec!["amount"]);
    rt.reply(&a, &mut s, "20").await.unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    assert_eq!(s.state.turn().answer(), Some("Refunded 20."));
    assert_eq!(log.count("issueRefund"), 1);
    assert_eq!(s.state, folded(store.as_ref(), &id).await);
}

/// A snapshot that does not decode, of another version, or whose conversation has a part
/// missing is passed over, saying why; the state is the fold of the log, and the next snapshot
/// written starts the parts over.
async fn unusable_snapshots_are_passed_over<S: Store>(store: Arc<S>) {
    let echo = TestTool::returning("echo", json!({"text": "hi"})).idempotent();
    let mut call = tool_calls(&[("echo", json!({"text": "hi"}))]);
    call.repeat = Some(6);
    let a = agent(
        "name: echoer\nmode: react\n",
        vec![echo],
        vec![(Purpose::React, vec![call, t("done"), t("again")])],
    );
    let rt = crate::agents::runtime_of(&store, &a)
        .snapshot_every(4)
        .snapshot_head_bytes(0)
        .build();
    let s = rt
        .run_agent(&a, SessionInfo::default(), "go", Value::Null)
        .await
        .unwrap();
    let (id, seq, status) = (s.id.clone(), s.state.seq(), s.state.status());
    drop(s);
    let truth = folded(store.as_ref(), &id).await;
    let good = weft_core::snapshot::encode(&truth, 0).unwrap();
    let bad = [
        (
            "garbage",
            Encoded {
                head: "{\"history_len\": ".into(),
                ..good.clone()
            },
            "does not decode",
        ),
        (
            "old",
            Encoded {
                version: SNAPSHOT_VERSION + 1,
                ..good.clone()
            },
            "version",
        ),
        (
            "parts missing",
            Encoded {
                part: Some(Part {
                    start: 0,
                    text: serde_json::to_string(&truth.history().held()[..2]).unwrap(),
                }),
                ..good.clone()
            },
            "hold 2 messages",
        ),
    ];
    for (what, snap, why) in bad {
        // A snapshot written with an empty batch: nothing else changes.
        store
            .append_with_snapshot(&id, seq, &[], status, 1, &snap)
            .await
            .unwrap();
        let loaded = load_state(store.as_ref(), &id).await.unwrap();
        assert_eq!(loaded.snapshot, None, "{what}");
        let reason = loaded.passed_over.unwrap_or_default();
        assert!(reason.contains(why), "{what}: {reason}");
        assert_eq!(loaded.state, truth, "{what}");
    }
    // The next turn writes a good snapshot again (its parts from the first message on).
    let mut s = rt.load_session(&id).await.unwrap();
    rt.run_task(&a, &mut s, "once more", Value::Null)
        .await
        .unwrap();
    assert_eq!(s.state.turn().answer(), Some("again"));
    let loaded = load_state(store.as_ref(), &id).await.unwrap();
    assert!(loaded.snapshot.is_some(), "{:?}", loaded.passed_over);
    assert_eq!(loaded.state, folded(store.as_ref(), &id).await);
}

/// A ReAct session whose conversation is compacted as it grows, with a snapshot every 8 events:
/// the load holds the conversation from the snapshot's window on, reads only the parts that
/// hold it, and is the fold of the log with the messages before the window let go of; the
/// session continues from it (compacting again) as it would from its log, and a load of the
/// whole conversation reads every part.
async fn a_compacted_session_loads_its_window<S: Store>(store: Arc<S>) {
    let echo = TestTool::returning("echo", json!({"text": "a longer line of echoed text"}));
    let mut call = tool_calls(&[("echo", json!({"text": "a longer line of echoed text"}))]);
    call.repeat = Some(40);
    let mut more = call.clone();
    more.repeat = Some(10);
    let mut summary = t("SUMMARY: lines were echoed");
    summary.repeat = Some(100);
    let a = agent(
        "name: compacted\nmode: react\nlimits: { max_iterations: 100, max_context_tokens: 400 }\n",
        vec![echo],
        vec![
            (Purpose::React, vec![call, t("echoed"), more, t("again")]),
            (Purpose::Compact, vec![summary]),
        ],
    );
    let rt = crate::agents::runtime_of(&store, &a)
        .snapshot_every(8)
        .snapshot_head_bytes(0)
        .build();
    let s = rt
        .run_agent(&a, SessionInfo::default(), "echo", Value::Null)
        .await
        .unwrap();
    assert_eq!(s.state.turn().answer(), Some("echoed"));
    let id = s.id.clone();
    drop(s);
    let truth = folded(store.as_ref(), &id).await;
    let upto = truth
        .compaction()
        .as_ref()
        .expect("the conversation was compacted")
        .upto;
    let loaded = load_state(store.as_ref(), &id).await.unwrap();
    assert!(loaded.snapshot.is_some(), "{:?}", loaded.passed_over);
    let start = loaded.state.history().start();
    assert!(
        start > 0 && start <= upto,
        "window at {start}, compacted to {upto}"
    );
    assert_eq!(loaded.state.history().len(), truth.history().len());
    let mut want = truth.clone();
    want.forget_history_before(start);
    assert_eq!(loaded.state, want);
    // Only the parts from the one holding the window's first message were read.
    let all_parts = store.snapshot_parts(&id, 0).await.unwrap();
    let read = store.snapshot_parts(&id, start as u64).await.unwrap();
    assert!(
        read.len() < all_parts.len(),
        "{} of {} parts",
        read.len(),
        all_parts.len()
    );
    let whole = weft_runtime::load_state_holding(store.as_ref(), &id, weft_runtime::Hold::Whole)
        .await
        .unwrap();
    assert!(whole.snapshot.is_some());
    assert_eq!(whole.state, truth);
    // The next turn runs from the window, compacts again, and ends where the log says.
    let mut s = rt.load_session(&id).await.unwrap();
    rt.run_task(&a, &mut s, "more", Value::Null).await.unwrap();
    assert_eq!(s.state.turn().answer(), Some("again"));
    let truth = folded(store.as_ref(), &id).await;
    assert!(truth.compaction().unwrap().upto > upto);
    let mut want = truth.clone();
    want.forget_history_before(start);
    assert_eq!(s.state, want);
    let (_, log) = store.load(&id).await.unwrap();
    let events: Vec<_> = log.into_iter().map(|e| e.event).collect();
    weft_core::snapshot::verify(&events).unwrap();
}

async fn all<S: Store>(make: impl AsyncFn() -> Arc<S>) {
    a_compacted_session_loads_its_window(make().await).await;
    loads_start_from_the_newest_snapshot(make().await).await;
    a_waiting_session_continues_from_its_snapshot(make().await).await;
    unusable_snapshots_are_passed_over(make().await).await;
}

/// A large head pushes the next snapshot back: with a snapshot due every 5 events but one event
/// more per 16 bytes of the last head (a head of a few kilobytes), the same 30-call session
/// writes far fewer snapshots, and a load folds more than 5 events after the newest.
#[tokio::test]
async fn a_large_head_pushes_the_next_snapshot_back() {
    let store = Arc::new(RamStore::new());
    let (id, seq) = run_poster(store.clone(), 16).await;
    let loaded = load_state(store.as_ref(), &id).await.unwrap();
    let head = weft_store::SessionLog::latest_snapshot(store.as_ref(), &id)
        .await
        .unwrap()
        .expect("a snapshot")
        .head
        .len() as u64;
    assert!(
        loaded.folded as u64 > 5,
        "a snapshot every 5 events despite a head of {head} bytes: {} events folded of {seq}",
        loaded.folded
    );
    assert!(
        (loaded.folded as u64) <= head / 16 + 1,
        "{} events folded after a head of {head} bytes",
        loaded.folded
    );
    assert_eq!(loaded.state, folded(store.as_ref(), &id).await);
}

#[tokio::test]
async fn snapshots_in_memory() {
    all(async || Arc::new(RamStore::new())).await;
}

#[tokio::test]
async fn snapshots_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("weft.db")).await.unwrap());
    all(async || store.clone()).await;
}

#[tokio::test]
async fn needs_postgres_snapshots() {
    let mut pg = common::PgSchemas::new("weft_snap");
    let store = pg.store().await;
    all(async || store.clone()).await;
    store.close().await;
}
