//! The SQLite file itself: sessions survive a new store instance, and a long run stays small.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::json;
use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus, ToolOutcome};
use weft_store::{AnyStore, ListFilter, NewSession, SqliteStore, Store};

fn env(seq: u64, event: Event) -> Envelope {
    Envelope {
        seq,
        ts: 1_763_900_000_000 + seq as i64 * 37,
        v: EVENT_VERSION,
        event,
    }
}

/// One ReAct iteration: the model's turn (recorded as a step with the model's message, which
/// asks for one small tool call), then the tool call starting and finishing with a ~50-byte
/// output.
fn iteration(i: u64, from: u64) -> Vec<Envelope> {
    let step = format!("turn-{i}");
    let call = format!("call_{i:04}");
    vec![
        env(
            from,
            Event::StepStarted {
                step: step.clone(),
                attempt: 1,
            },
        ),
        env(
            from + 1,
            Event::StepCompleted {
                step: step.clone(),
                output: json!({
                    "role": "assistant",
                    "content": "Let me look that up.",
                    "tool_calls": [{"id": call, "name": "search", "args": {"q": format!("durable agents part {i}")}}],
                    "usage": {"input_tokens": 812 + i, "output_tokens": 37}
                }),
                summary: None,
            },
        ),
        env(
            from + 2,
            Event::ToolCallStarted {
                call_id: call.clone(),
                step: Some(step),
                tool: "search".into(),
                args: json!({"q": format!("durable agents part {i}")}),
                attempt: 1,
                idempotency_key: format!("sess-size:turn-{i}:1"),
            },
        ),
        env(
            from + 3,
            Event::ToolCallFinished {
                call_id: call,
                outcome: ToolOutcome::Ok {
                    output: json!(format!(
                        "result {i:04}: three pages found about durable runs"
                    )),
                },
                duration_ms: 41,
            },
        ),
    ]
}

#[tokio::test]
async fn sessions_survive_a_new_store_instance() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".weft/weft.db");
    let log: Vec<Envelope> = (0..3).flat_map(|i| iteration(i, 1 + i * 4)).collect();
    {
        let st = SqliteStore::open(&path).await.unwrap();
        st.create(
            NewSession {
                id: "durable".into(),
                user_id: Some("u".into()),
                agent: "a".into(),
                reference_id: None,
                metadata: json!({"k": "v"}),
                parent_id: Some("parent".into()),
            },
            5,
        )
        .await
        .unwrap();
        st.append("durable", 0, &log[..4], SessionStatus::Running, 6)
            .await
            .unwrap();
        st.append("durable", 4, &log[4..], SessionStatus::WaitingForUser, 7)
            .await
            .unwrap();
        st.close().await;
    }
    // Left unchecked-pointed: the write-ahead log must be read back too.
    // Opened from a spawned task: the opening future must be `Send`.
    let spec = path.to_str().unwrap().to_owned();
    let st = tokio::spawn(async move { AnyStore::open_existing(&spec).await })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st.backend(), "sqlite");
    let (rec, back) = st.load("durable").await.unwrap();
    assert_eq!(back, log);
    assert_eq!(rec.status, SessionStatus::WaitingForUser);
    assert_eq!(rec.parent_id.as_deref(), Some("parent"));
    assert_eq!(rec.metadata, json!({"k": "v"}));
    assert_eq!((rec.created_at, rec.updated_at, rec.last_seq), (5, 7, 12));
    // And it carries on where it stopped.
    let more = iteration(3, 13);
    st.append("durable", 12, &more, SessionStatus::Completed, 8)
        .await
        .unwrap();
    let listed = st.list(&ListFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_seq, 16);
}

#[tokio::test]
async fn a_long_run_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let st = SqliteStore::open(&path).await.unwrap();
    st.create(
        NewSession {
            id: "sess-size".into(),
            agent: "researcher".into(),
            metadata: json!({}),
            ..Default::default()
        },
        1,
    )
    .await
    .unwrap();
    let mut seq = 0;
    let mut spent = Duration::ZERO;
    let iterations = 400;
    for i in 0..iterations {
        let batch = iteration(i, seq + 1);
        let t = Instant::now();
        st.append(
            "sess-size",
            seq,
            &batch,
            SessionStatus::Running,
            2 + i as i64,
        )
        .await
        .unwrap();
        spent += t.elapsed();
        seq += batch.len() as u64;
    }
    st.checkpoint().await.unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "{iterations} iterations, {seq} events: database file {size} bytes ({:.1} KiB); \
         mean append of a 4-event batch {:?}",
        size as f64 / 1024.0,
        spent / iterations as u32
    );
    assert!(size < 2 * 1024 * 1024, "database is {size} bytes");
    let (rec, log) = st.load("sess-size").await.unwrap();
    assert_eq!(rec.last_seq, 1600);
    assert_eq!(log.len(), 1600);
    assert_eq!(log[1599], iteration(399, 1597)[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_opening_a_new_file_at_once_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new/weft.db");
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { SqliteStore::open(&path).await })
        })
        .collect();
    let mut stores = Vec::new();
    for o in opens {
        stores.push(o.await.unwrap().unwrap());
    }
    stores[0]
        .create(
            NewSession {
                id: "one".into(),
                agent: "a".into(),
                ..Default::default()
            },
            1,
        )
        .await
        .unwrap();
    for st in &stores {
        assert_eq!(st.get("one").await.unwrap().id, "one");
    }
}

/// A store dropped without closing checkpoints its write-ahead log in the background; opening
/// the file again meanwhile must see a good database, not a "truncated" one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_while_the_last_store_shuts_down() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    for round in 0..15u64 {
        let st = SqliteStore::open(&path).await.unwrap();
        let id = format!("r{round}");
        st.create(
            NewSession {
                id: id.clone(),
                agent: "a".into(),
                ..Default::default()
            },
            1,
        )
        .await
        .unwrap();
        let batch: Vec<Envelope> = (0..5).flat_map(|i| iteration(i, 1 + i * 4)).collect();
        st.append(&id, 0, &batch, SessionStatus::Running, 2)
            .await
            .unwrap();
        drop(st);
        let again = SqliteStore::open_existing(&path).await.unwrap();
        assert_eq!(again.get(&id).await.unwrap().last_seq, 20);
        drop(again);
    }
}
