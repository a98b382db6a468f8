//! Bad databases give clear errors, never a panic or an empty answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::path::Path;

use serde_json::json;
use sqlx::Connection;
use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus};
use weft_store::{AnyStore, NewSession, PgStore, SessionLog, SqliteStore, StoreError};

fn session(id: &str) -> NewSession {
    NewSession {
        id: id.into(),
        agent: "a".into(),
        metadata: json!({}),
        ..Default::default()
    }
}

fn waves(from: u64, n: u64) -> Vec<Envelope> {
    (from..from + n)
        .map(|seq| Envelope {
            epoch: 0,
            seq,
            ts: seq as i64,
            v: EVENT_VERSION,
            event: Event::WaveFinished { wave: seq as u32 },
        })
        .collect()
}

/// A database with a few sessions in it, checkpointed so the file holds everything.
async fn real_db(path: &Path, sessions: usize) {
    let st = SqliteStore::open(path).await.unwrap();
    for k in 0..sessions {
        let id = format!("s{k}");
        st.create(session(&id), 1).await.unwrap();
        st.append(&id, 0, &waves(1, 50), SessionStatus::Completed, 2)
            .await
            .unwrap();
    }
    st.checkpoint().await.unwrap();
    st.close().await;
}

async fn raw_sqlite(path: &Path) -> sqlx::SqliteConnection {
    sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap()
}

#[tokio::test]
async fn garbage_file_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    std::fs::write(
        &path,
        b"this is not a database, just some words. ".repeat(100),
    )
    .unwrap();
    let err = SqliteStore::open(&path).await.unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{msg}");
    assert!(
        msg.starts_with(&format!(
            "{} is not a weft database or is corrupt: ",
            path.display()
        )),
        "{msg}"
    );
    // Through the spec-based opener too.
    let err = AnyStore::open(path.to_str().unwrap()).await.unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
}

#[tokio::test]
async fn garbage_after_a_sqlite_header_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xA5u8, 8192));
    std::fs::write(&path, &bytes).unwrap();
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("is not a weft database or is corrupt")
    );
}

#[tokio::test]
async fn damaged_pages_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    real_db(&path, 20).await;
    let mut bytes = std::fs::read(&path).unwrap();
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    // Keep the first page (header and schema), scribble over the rest.
    for b in &mut bytes[page..] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let res = match SqliteStore::open(&path).await {
        Err(e) => Err(e),
        Ok(st) => st.load("s3").await.map(|_| ()),
    };
    let err = res.unwrap_err();
    println!("{err}");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("is not a weft database or is corrupt")
    );
}

#[tokio::test]
async fn truncated_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.db");
    real_db(&good, 20).await;
    let bytes = std::fs::read(&good).unwrap();
    assert!(bytes.len() > 8192, "the database should span several pages");
    let cut = dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = SqliteStore::open(&cut).await.unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{msg}");
    assert!(msg.contains("truncated"), "{msg}");
    assert!(msg.contains("cut.db"), "{msg}");
    // The original still opens and reads.
    let st = SqliteStore::open_existing(&good).await.unwrap();
    assert_eq!(st.load("s19").await.unwrap().1.len(), 50);
}

#[tokio::test]
async fn missing_database_for_reading() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none/weft.db");
    let err = SqliteStore::open_existing(&path).await.unwrap_err();
    assert!(matches!(err, StoreError::NoDatabase(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "no database at {}; run a session first or pass --db",
            path.display()
        )
    );
    assert!(!path.exists(), "open_existing must not create the file");
    let err = AnyStore::open_existing(&format!("sqlite://{}", path.display()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NoDatabase(_)), "{err}");
    // `open` creates it, parent directories included.
    SqliteStore::open(&path).await.unwrap();
    assert!(path.exists());
    SqliteStore::open_existing(&path).await.unwrap();
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    real_db(&path, 1).await;
    let mut conn = raw_sqlite(&path).await;
    sqlx::query("INSERT INTO weft_schema (version, applied_at) VALUES (?, 0)")
        .bind(weft_store::SQLITE_SCHEMA_VERSION + 1)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let err = SqliteStore::open(&path).await.unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{msg}");
    assert!(
        msg.ends_with(&format!(
            "was written by a newer weft (schema {}, this build knows {}); upgrade weft",
            weft_store::SQLITE_SCHEMA_VERSION + 1,
            weft_store::SQLITE_SCHEMA_VERSION
        )),
        "{msg}"
    );
    assert!(msg.contains("weft.db"), "{msg}");
}

#[tokio::test]
async fn another_programs_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    std::fs::write(&path, b"").unwrap();
    let mut conn = raw_sqlite(&path).await;
    sqlx::raw_sql("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    assert!(err.to_string().contains("another program"), "{err}");
}

#[tokio::test]
async fn undecodable_rows_name_session_and_seq() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let st = SqliteStore::open(&path).await.unwrap();
    st.create(session("bad"), 1).await.unwrap();
    st.append("bad", 0, &waves(1, 4), SessionStatus::Running, 2)
        .await
        .unwrap();
    let mut conn = raw_sqlite(&path).await;
    sqlx::query("UPDATE events SET payload = '{\"wave\": 1' WHERE session = (SELECT pk FROM sessions WHERE id = 'bad') AND seq = 3")
        .execute(&mut conn)
        .await
        .unwrap();
    let err = st.load("bad").await.unwrap_err();
    println!("{err}");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("session bad, event 3"), "{err}");
    assert!(st.events_after("bad", 2).await.is_err());
    // Events before the bad one still read.
    assert_eq!(st.events_after("bad", 3).await.unwrap(), waves(4, 1));

    sqlx::query(
        "UPDATE events SET payload = '{\"wave\": \"one\"}' WHERE session = (SELECT pk FROM sessions WHERE id = 'bad') AND seq = 3",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let err = st.load("bad").await.unwrap_err();
    assert!(err.to_string().contains("session bad, event 3"), "{err}");

    sqlx::query("UPDATE events SET v = ? WHERE session = (SELECT pk FROM sessions WHERE id = 'bad') AND seq = 2")
        .bind(i64::from(EVENT_VERSION) + 1)
        .execute(&mut conn)
        .await
        .unwrap();
    let err = st.load("bad").await.unwrap_err();
    assert!(
        matches!(err, StoreError::NewerEvent { seq: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("newer weft"), "{err}");

    // A missing event is a gap, not a shorter log. (The log's end is where its last event is:
    // events deleted from the end would read as a shorter log.)
    sqlx::query(
        "DELETE FROM events WHERE session = (SELECT pk FROM sessions WHERE id = 'bad') AND seq = 2",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let err = st.load("bad").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    conn.close().await.unwrap();
}

#[tokio::test]
async fn postgres_down_is_unavailable() {
    let started = std::time::Instant::now();
    let err = PgStore::connect("postgres://postgres@127.0.0.1:1/test")
        .await
        .unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    assert!(matches!(err, StoreError::Unavailable { .. }), "{msg}");
    assert!(
        msg.starts_with("cannot connect to PostgreSQL at 127.0.0.1:1: "),
        "{msg}"
    );
    // Refused connections fail at once rather than retrying until a timeout.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let err = AnyStore::open("postgresql://postgres@127.0.0.1:1/test")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
}

#[tokio::test]
async fn bad_specs_are_refused() {
    for spec in ["mysql://h/db", "", "sqlite::memory:"] {
        let err = AnyStore::open(spec).await.unwrap_err();
        assert!(matches!(err, StoreError::BadSpec { .. }), "{spec}: {err}");
    }
    let err = AnyStore::open("postgres://h:notaport/db")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::BadSpec { .. }), "{err}");
}

#[tokio::test]
async fn needs_postgres_newer_schema_is_refused() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = unique_schema("newer");
    let st = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    st.close().await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO \"{schema}\".weft_schema (version, applied_at) VALUES ({}, 0)",
        weft_store::POSTGRES_SCHEMA_VERSION + 1
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let res = PgStore::connect_in_schema(&url, &schema).await;
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
    let err = res.unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
    let v = weft_store::POSTGRES_SCHEMA_VERSION;
    assert!(
        err.to_string().contains(&format!(
            "written by a newer weft (schema {}, this build knows {v}); upgrade weft",
            v + 1
        )),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn needs_postgres_migrations_run_once_when_many_connect_at_once() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = unique_schema("race");
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move { PgStore::connect_in_schema(&url, &schema).await })
        })
        .collect();
    let mut results = Vec::new();
    for o in opens {
        results.push(o.await.unwrap());
    }
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let versions: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT version FROM \"{schema}\".weft_schema ORDER BY version"
    ))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
    for r in results {
        r.unwrap();
    }
    // Each migration was applied once.
    assert_eq!(
        versions,
        (1..=weft_store::POSTGRES_SCHEMA_VERSION).collect::<Vec<_>>()
    );
}

/// A database of schema 1 (JSON kept as `jsonb`) is brought to the current schema when a store
/// connects, with its sessions, events and snapshots as they were, and then keeps text with a
/// NUL character, which schema 1 could not.
#[tokio::test]
async fn needs_postgres_a_schema_1_database_is_migrated_with_its_data() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = unique_schema("v1");
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let setup = format!(
        "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"; {} \
         CREATE TABLE weft_schema (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL); \
         INSERT INTO weft_schema VALUES (1, 0); \
         INSERT INTO sessions (id, agent, metadata, status, created_at, updated_at, last_seq) \
           VALUES ('old', 'a', '{{\"k\": [1, \"v\"]}}', 'running', 5, 6, 2); \
         INSERT INTO events (session_id, seq, ts, v, type, payload) VALUES \
           ('old', 1, 1, 1, 'wave_finished', '{{\"wave\": 1}}'), \
           ('old', 2, 2, 1, 'wave_finished', '{{\"wave\": 2}}'); \
         INSERT INTO snapshots (session_id, seq, state) VALUES ('old', 2, '{{\"s\": true}}'); \
         SET search_path TO DEFAULT;",
        include_str!("../../migrations/postgres/0001_init.sql")
    );
    sqlx::raw_sql(&setup).execute(&mut conn).await.unwrap();
    let opened = PgStore::connect_in_schema(&url, &schema).await;
    let check = async {
        let st = opened.unwrap();
        let (rec, log) = st.load("old").await.unwrap();
        assert_eq!((rec.metadata, rec.last_seq), (json!({"k": [1, "v"]}), 2));
        assert_eq!(log, waves(1, 2));
        // A snapshot of before versions is kept, as version 0 (which no build reads as a state).
        let snap = st.latest_snapshot("old").await.unwrap().unwrap();
        assert_eq!((snap.seq, snap.version), (2, 0));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&snap.head).unwrap(),
            json!({"s": true})
        );
        let nul = Envelope {
            epoch: 0,
            seq: 3,
            ts: 3,
            v: EVENT_VERSION,
            event: Event::UserReplied {
                text: "a\u{0}b".into(),
            },
        };
        st.append(
            "old",
            2,
            std::slice::from_ref(&nul),
            SessionStatus::Running,
            7,
        )
        .await
        .unwrap();
        assert_eq!(st.load("old").await.unwrap().1[2], nul);
        st.close().await;
    };
    let outcome = tokio::spawn(check).await;
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

fn unique_schema(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "weft_test_{what}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

#[tokio::test]
async fn a_directory_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(dir.path()).await.unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
}

#[tokio::test]
async fn memory_spec_gives_an_empty_memory_store() {
    let st = AnyStore::open("memory:").await.unwrap();
    assert_eq!(st.backend(), "memory");
    assert!(st.list(&Default::default()).await.unwrap().is_empty());
    st.create(session("m"), 1).await.unwrap();
    assert_eq!(st.get("m").await.unwrap().id, "m");
}

/// A log whose last event has a negative number (SQLite reads a session's end from its log) is
/// reported as corrupt by the append that would follow it, never taken for an empty log that a
/// batch numbered from 1 may start.
#[tokio::test]
async fn sqlite_appends_after_a_corrupt_log_end_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let st = SqliteStore::open(&path).await.unwrap();
    st.create(session("neg"), 1).await.unwrap();
    st.append("neg", 0, &waves(1, 1), SessionStatus::Running, 2)
        .await
        .unwrap();
    let mut conn = raw_sqlite(&path).await;
    sqlx::query(
        "UPDATE events SET seq = -5 WHERE session = (SELECT pk FROM sessions WHERE id = 'neg')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    for expected in [0, 1] {
        let err = st
            .append(
                "neg",
                expected,
                &waves(expected + 1, 1),
                SessionStatus::Running,
                3,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert!(err.to_string().contains("numbered -5"), "{err}");
    }
}

/// A session row whose `last_seq` is negative is reported as corrupt by an append to it on
/// PostgreSQL, not as a conflict with a log that ends at 0.
#[tokio::test]
async fn needs_postgres_appends_after_a_corrupt_log_end_are_refused() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("corrupt_end_{}", std::process::id());
    let st = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    st.create(session("neg"), 1).await.unwrap();
    let opts: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let mut conn =
        sqlx::PgConnection::connect_with(&opts.options([("search_path", schema.as_str())]))
            .await
            .unwrap();
    sqlx::query("UPDATE sessions SET last_seq = -5 WHERE id = 'neg'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let err = st
        .append("neg", 0, &waves(1, 1), SessionStatus::Running, 3)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("numbered -5"), "{err}");
}

#[tokio::test]
async fn a_gap_in_the_log_is_reported_by_every_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let st = SqliteStore::open(&path).await.unwrap();
    st.create(session("gap"), 1).await.unwrap();
    st.append("gap", 0, &waves(1, 4), SessionStatus::Running, 2)
        .await
        .unwrap();
    let mut conn = raw_sqlite(&path).await;
    sqlx::query(
        "DELETE FROM events WHERE session = (SELECT pk FROM sessions WHERE id = 'gap') AND seq = 2",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    for err in [
        st.load("gap").await.map(|_| ()).unwrap_err(),
        st.events_after("gap", 0).await.map(|_| ()).unwrap_err(),
        st.events_after("gap", 1).await.map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert!(
            err.to_string().contains("event 2 is missing from the log"),
            "{err}"
        );
    }
    // The events after the gap still read; an unknown session is not an empty log.
    assert_eq!(st.events_after("gap", 2).await.unwrap(), waves(3, 2));
    assert!(st.events_after("gap", 4).await.unwrap().is_empty());
    assert!(matches!(
        st.events_after("nope", 0).await,
        Err(StoreError::NotFound(_))
    ));
}
