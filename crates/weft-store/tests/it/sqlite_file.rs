//! The SQLite file itself: sessions survive a new store instance, and a long run stays small.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::json;
use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus, ToolOutcome};
use weft_store::{AnyStore, ListFilter, NewSession, SessionLog, SqliteStore};

fn env(seq: u64, event: Event) -> Envelope {
    Envelope {
        epoch: 0,
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
                item: None,
                tool: "search".into(),
                args: json!({"q": format!("durable agents part {i}")}),
                attempt: 1,
                idempotency_key: format!("sess-size:turn-{i}:1"),
                untrusted_from: Vec::new(),
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

fn session(id: &str) -> NewSession {
    NewSession {
        id: id.into(),
        agent: "a".into(),
        ..NewSession::default()
    }
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
    // The checkpoint must complete even if the store's own checkpointer is at work: the log
    // is then empty, and the file holds everything.
    st.checkpoint().await.unwrap();
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(
        wal, 0,
        "the write-ahead log still holds {wal} bytes after a checkpoint"
    );
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

/// While another connection holds the database's write lock, appends wait for it (on a thread
/// of their own, not the caller's) and all land once it is released; appends afterwards are
/// written at once again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_wait_for_a_lock_held_elsewhere() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let st = std::sync::Arc::new(SqliteStore::open(&path).await.unwrap());
    for s in 0..3 {
        st.create(session(&format!("s{s}")), 1).await.unwrap();
    }
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let started = Instant::now();
    let appends: Vec<_> = (0..3)
        .map(|s| {
            let st = std::sync::Arc::clone(&st);
            tokio::spawn(async move {
                st.append(
                    &format!("s{s}"),
                    0,
                    &iteration(s, 1),
                    SessionStatus::Running,
                    2,
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        appends.iter().all(|a| !a.is_finished()),
        "an append finished while another connection held the write lock"
    );
    // The runtime's threads are free meanwhile: a timer still fires on time.
    let tick = Instant::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(tick.elapsed() < Duration::from_millis(500));
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    for a in appends {
        a.await.unwrap().unwrap();
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
    for s in 0..3 {
        let (rec, log) = st.load(&format!("s{s}")).await.unwrap();
        assert_eq!(log, iteration(s, 1));
        assert_eq!(rec.last_seq, 4);
    }
    st.append("s0", 4, &iteration(9, 5), SessionStatus::Completed, 3)
        .await
        .unwrap();
    assert_eq!(st.get("s0").await.unwrap().last_seq, 8);
    other.close().await.unwrap();
}

/// Under steady appends the write-ahead log is checkpointed and starts over, so its file stays
/// bounded instead of growing with every commit (which would be more than 8 KB each here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_starts_over_under_steady_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    let st = SqliteStore::open(&path).await.unwrap();
    st.create(session("steady"), 1).await.unwrap();
    let commits = 20_000u64;
    for i in 0..commits {
        st.append(
            "steady",
            i,
            &[env(
                i + 1,
                Event::UserReplied {
                    text: format!("reply {i}"),
                },
            )],
            SessionStatus::Running,
            2 + i as i64,
        )
        .await
        .unwrap();
    }
    let wal = std::fs::metadata(dir.path().join("wal.db-wal"))
        .unwrap()
        .len();
    println!(
        "{commits} commits; write-ahead log file {} MB",
        wal as f64 / 1e6
    );
    assert!(
        wal < 48_000_000,
        "the write-ahead log grew to {wal} bytes over {commits} commits: it never started over"
    );
    assert_eq!(st.get("steady").await.unwrap().last_seq, commits);
}

/// A database of schema 1 (sessions keyed by their id, `last_seq` in the row) is brought to
/// schema 2 when opened, with every session, event and snapshot as it was.
#[tokio::test]
async fn a_schema_1_database_is_migrated_with_its_data() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_init.sql"))
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE weft_schema (version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL);
         INSERT INTO weft_schema VALUES (1, 0);",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // Two sessions as schema 1 stored them: events in their own column layout.
    let logs = [
        (
            "old-a",
            iteration(1, 1),
            SessionStatus::Completed,
            Some("ann"),
        ),
        (
            "old-b",
            [iteration(2, 1), iteration(3, 5)].concat(),
            SessionStatus::WaitingForUser,
            None,
        ),
    ];
    for (k, (id, log, status, user)) in logs.iter().enumerate() {
        sqlx::query(
            "INSERT INTO sessions (id, user_id, agent, reference_id, metadata, parent_id, status, \
             created_at, updated_at, last_seq) VALUES (?, ?, 'old', NULL, '{\"k\":1}', NULL, ?, ?, ?, ?)",
        )
        .bind(id)
        .bind(user)
        .bind(status.as_str())
        .bind(10 + k as i64)
        .bind(20 + k as i64)
        .bind(log.len() as i64)
        .execute(&mut conn)
        .await
        .unwrap();
        for e in log {
            let mut obj = serde_json::to_value(&e.event).unwrap();
            let kind = obj.as_object_mut().unwrap().shift_remove("type").unwrap();
            sqlx::query(
                "INSERT INTO events (session_id, seq, ts, v, type, payload) VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(id)
            .bind(e.seq as i64)
            .bind(e.ts)
            .bind(e.v as i64)
            .bind(kind.as_str().unwrap())
            .bind(obj.to_string())
            .execute(&mut conn)
            .await
            .unwrap();
        }
    }
    sqlx::query("INSERT INTO snapshots (session_id, seq, state) VALUES ('old-b', 4, '{\"at\":4}')")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let st = SqliteStore::open(&path).await.unwrap();
    for (k, (id, log, status, user)) in logs.iter().enumerate() {
        let (rec, back) = st.load(id).await.unwrap();
        assert_eq!(&back, log, "{id}");
        assert_eq!(
            (rec.status, rec.created_at, rec.updated_at, rec.last_seq),
            (*status, 10 + k as i64, 20 + k as i64, log.len() as u64)
        );
        assert_eq!(rec.user_id.as_deref(), *user);
        assert_eq!(rec.metadata, json!({"k": 1}));
    }
    let snap = st.latest_snapshot("old-b").await.unwrap().unwrap();
    assert_eq!(
        (snap.seq, snap.version, snap.head.as_str()),
        (4, 0, "{\"at\":4}")
    );
    assert!(st.snapshot_parts("old-b", 0).await.unwrap().is_empty());
    // It carries on: appends, new sessions, listing and pruning work on the migrated data.
    st.append(
        "old-b",
        8,
        &iteration(4, 9),
        SessionStatus::Completed,
        5_000,
    )
    .await
    .unwrap();
    assert_eq!(st.get("old-b").await.unwrap().last_seq, 12);
    let f = st
        .create_with(
            session("old-b-fork"),
            &logs[1].1[..6],
            SessionStatus::Running,
            6_000,
        )
        .await
        .unwrap();
    assert_eq!(f.last_seq, 6);
    assert_eq!(st.load("old-b-fork").await.unwrap().1, logs[1].1[..6]);
    let listed = st.list(&ListFilter::default()).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["old-b-fork", "old-b", "old-a"]);
    assert_eq!(st.prune(100, true).await.unwrap(), 1);
    assert!(st.get("old-a").await.is_err());
    st.close().await;
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM weft_schema ORDER BY version")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        versions,
        (1..=weft_store::SQLITE_SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let orphans: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pragma_foreign_key_check")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(orphans, 0);
}
