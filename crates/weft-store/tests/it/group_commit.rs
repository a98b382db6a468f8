#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The SQLite store writes appends that arrive together in one transaction: each caller still
//! gets its own answer, a stale batch is refused alone, and every log ends complete.

use std::sync::Arc;

use serde_json::json;
use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus};
use weft_store::{NewSession, SessionLog, SqliteStore, StoreError};

fn batch(from: u64, n: u64) -> Vec<Envelope> {
    (0..n)
        .map(|k| Envelope {
            epoch: 0,
            seq: from + k,
            ts: 1,
            v: EVENT_VERSION,
            event: Event::UserReplied {
                text: format!("event {}", from + k),
            },
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_appending_at_once_each_get_their_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("g.db")).await.unwrap());
    let sessions = 40u64;
    let batches = 15u64;
    for s in 0..sessions {
        store
            .create(
                NewSession {
                    id: format!("s{s}"),
                    agent: "a".into(),
                    metadata: json!(null),
                    ..NewSession::default()
                },
                0,
            )
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let id = format!("s{s}");
            let mut seq = 0;
            let mut conflicts = 0;
            for b in 0..batches {
                let n = 1 + (s + b) % 4;
                store
                    .append(&id, seq, &batch(seq + 1, n), SessionStatus::Running, 2)
                    .await
                    .unwrap();
                seq += n;
                // A writer that missed the batch above is refused, without harming the others.
                match store
                    .append(
                        &id,
                        seq - n,
                        &batch(seq - n + 1, 1),
                        SessionStatus::Running,
                        2,
                    )
                    .await
                {
                    Err(StoreError::Conflict {
                        expected, actual, ..
                    }) => {
                        assert_eq!((expected, actual), (seq - n, seq));
                        conflicts += 1;
                    }
                    other => panic!("a stale append of {id} gave {other:?}"),
                }
            }
            (id, seq, conflicts)
        }));
    }
    for t in tasks {
        let (id, seq, conflicts) = t.await.unwrap();
        assert_eq!(conflicts, batches);
        let (rec, log) = store.load(&id).await.unwrap();
        assert_eq!(rec.last_seq, seq);
        let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=seq).collect::<Vec<_>>(), "{id}");
    }
    let missing = store
        .append("nobody", 0, &batch(1, 1), SessionStatus::Running, 2)
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
}

#[tokio::test]
async fn appends_after_close_fail_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();
    store
        .create(
            NewSession {
                id: "x".into(),
                agent: "a".into(),
                ..NewSession::default()
            },
            0,
        )
        .await
        .unwrap();
    store.close().await;
    let err = store
        .append("x", 0, &batch(1, 1), SessionStatus::Running, 1)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
}
