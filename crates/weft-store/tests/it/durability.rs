#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Each durability is what the database says is in effect (read back from it), on SQLite and on
//! PostgreSQL; a change of durability while a store is open reaches the next append; at `full`
//! a PostgreSQL backend syncs its log for the commits of an append and at `normal` it does not
//! (counted by tracing the backend's system calls: `needs_strace::needs_postgres_*`); and the
//! SQLite store's group commit puts the appends of many sessions into one commit, and the
//! creations of one `create_many` too.

use crate::support as common;

use std::sync::Arc;

use serde_json::json;
use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus};
use weft_store::{Durability, NewSession, PgStore, SessionLog, SqliteStore, Store};

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

fn session(id: &str) -> NewSession {
    NewSession {
        id: id.into(),
        agent: "a".into(),
        metadata: json!(null),
        ..NewSession::default()
    }
}

/// Appends `n` batches of one event to a new session `id`, one after the other.
async fn appends<S: Store>(store: &S, id: &str, n: u64) {
    store.create(session(id), 0).await.unwrap();
    for seq in 0..n {
        store
            .append(id, seq, &batch(seq + 1, 1), SessionStatus::Running, 1)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn sqlite_reads_back_each_durability() {
    let dir = tempfile::tempdir().unwrap();
    for (d, synchronous) in [(Durability::Full, "2"), (Durability::Normal, "1")] {
        let path = dir.path().join(format!("{d}.db"));
        let st = SqliteStore::open_with(&path, d).await.unwrap();
        let s = st.settings();
        assert_eq!(s.durability, d);
        assert_eq!(s.read_back["synchronous"], synchronous, "{d}: {s:?}");
        assert_eq!(s.read_back["journal_mode"], "wal", "{d}: {s:?}");
        st.close().await;
    }
    // The default is full.
    let st = SqliteStore::open(dir.path().join("default.db"))
        .await
        .unwrap();
    assert_eq!(st.settings().read_back["synchronous"], "2");
    // A change reaches the writing connection with the next append.
    st.set_durability(Durability::Normal);
    appends(&st, "s", 1).await;
    let s = st.settings();
    assert_eq!(
        (s.durability, s.read_back["synchronous"].as_str()),
        (Durability::Normal, "1")
    );
    st.set_durability(Durability::Full);
    st.append("s", 1, &batch(2, 1), SessionStatus::Running, 2)
        .await
        .unwrap();
    assert_eq!(st.settings().read_back["synchronous"], "2");
}

/// At `full`, appends of many sessions arriving together share commits (and so the sync of the
/// log each commit makes): fewer commits than appends, and every append answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_group_commit_shares_a_commit_among_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::open_with(dir.path().join("g.db"), Durability::Full)
            .await
            .unwrap(),
    );
    let sessions = 200u64;
    let each = 5u64;
    let before = store.write_stats();
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            appends(store.as_ref(), &format!("s{s}"), each).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let after = store.write_stats();
    let appended = after.appends - before.appends;
    let commits = after.commits - before.commits;
    assert_eq!(appended, sessions * (each + 1), "{after:?}");
    assert!(
        commits < appended,
        "{commits} commits for {appended} appends: no commit was shared"
    );
    for s in 0..sessions {
        assert_eq!(store.get(&format!("s{s}")).await.unwrap().last_seq, each);
    }
}

/// `create_many` hands its creations to the writer together: a thousand sessions, each with
/// its first events, take one commit (one sync of the log at `full`), not one each; and a batch
/// with a taken id is answered creation by creation as before.
#[tokio::test]
async fn sqlite_create_many_is_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with(dir.path().join("c.db"), Durability::Full)
        .await
        .unwrap();
    store.create(session("taken"), 1).await.unwrap();
    let mut logs: Vec<weft_store::NewLog> = (0..1000)
        .map(|k| weft_store::NewLog {
            session: session(&format!("c{k}")),
            events: batch(1, 2),
            status: SessionStatus::Running,
        })
        .collect();
    logs[500].session.id = "taken".into();
    let before = store.write_stats();
    let answers = store.create_many(&logs, 2).await.unwrap();
    let after = store.write_stats();
    assert_eq!(answers.iter().filter(|a| a.is_none()).count(), 999);
    assert!(
        matches!(answers[500], Some(weft_store::StoreError::Exists(_))),
        "{:?}",
        answers[500]
    );
    let commits = after.commits - before.commits;
    assert!(commits <= 2, "{commits} commits for 1,000 creations");
    assert_eq!(store.get("c999").await.unwrap().last_seq, 2);
}

fn unique(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "weft_dur_{test}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000
    )
}

async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn needs_postgres_reads_back_each_durability() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = unique("readback");
    for (d, commit) in [(Durability::Normal, "off"), (Durability::Full, "on")] {
        let st = PgStore::connect_durable(&url, Some(&schema), d)
            .await
            .unwrap();
        let s = st.settings().await.unwrap();
        assert_eq!(s.durability, d);
        assert_eq!(s.read_back["synchronous_commit"], commit, "{d}: {s:?}");
        assert_eq!(
            s.read_back["fsync"], "on",
            "the test server runs without fsync"
        );
        // Another durability for the appends from now on: their transactions have it.
        let other = match d {
            Durability::Full => (Durability::Normal, "off"),
            Durability::Normal => (Durability::Full, "on"),
        };
        st.set_durability(other.0);
        let s = st.settings().await.unwrap();
        assert_eq!(
            (s.durability, s.read_back["synchronous_commit"].as_str()),
            other
        );
        appends(&st, &format!("s-{d}"), 2).await;
        st.close().await;
    }
    drop_schema(&url, &schema).await;
}

/// Tests that trace system calls with strace (`WEFT_TEST_STRACE`).
mod needs_strace {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    use super::*;

    /// The pids of the backends whose connections carry `app` as their application name.
    async fn backends(admin: &mut sqlx::PgConnection, app: &str) -> Vec<i32> {
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name = $1")
            .bind(app)
            .fetch_all(admin)
            .await
            .unwrap()
    }

    /// The fsync and fdatasync calls the backends `pids` make while `st` appends `n` batches one
    /// after the other to session `id`.
    async fn traced_syncs(strace: &str, pids: &[i32], st: &PgStore, id: &str, n: u64) -> u64 {
        let out = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new(strace);
        cmd.args(["-c", "-e", "trace=fsync,fdatasync", "-o"])
            .arg(out.path());
        for p in pids {
            cmd.args(["-p", &p.to_string()]);
        }
        let mut tracer = cmd
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {strace}: {e}"));
        // Wait until strace has attached to every backend.
        let mut attached = 0;
        let mut err = BufReader::new(tracer.stderr.take().unwrap());
        let mut line = String::new();
        while attached < pids.len() {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "strace stopped before it attached (is ptrace allowed?)"
            );
            if line.contains("attached") {
                attached += 1;
            }
        }
        appends(st, id, n).await;
        let stopped = Command::new("kill")
            .args(["-INT", &tracer.id().to_string()])
            .status()
            .unwrap();
        assert!(stopped.success());
        tracer.wait().unwrap();
        std::fs::read_to_string(out.path())
            .unwrap()
            .lines()
            .filter(|l| l.ends_with("fsync") || l.ends_with("fdatasync"))
            .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
            .sum()
    }

    /// The fsync and fdatasync calls the PostgreSQL backends serving a store make while it
    /// appends `n` batches one after the other. A measure during which the pool opened a
    /// connection (a backend strace did not follow) is taken again, up to three times.
    async fn backend_syncs(url: &str, d: Durability, n: u64) -> u64 {
        let strace = crate::support::service_var("WEFT_TEST_STRACE");
        let schema = unique(&format!("syncs_{d}"));
        let app = schema.clone();
        let sep = if url.contains('?') { '&' } else { '?' };
        let st = PgStore::connect_durable(
            &format!("{url}{sep}application_name={app}"),
            Some(&schema),
            d,
        )
        .await
        .unwrap();
        // The connections opened now serve the appends below (they come one at a time).
        appends(&st, "warm", 1).await;
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(url).await.unwrap();
        let mut syncs = 0;
        for attempt in 0..3 {
            let pids = backends(&mut admin, &app).await;
            assert!(!pids.is_empty(), "no backend serves the store");
            syncs = traced_syncs(&strace, &pids, &st, &format!("measured-{attempt}"), n).await;
            let after = backends(&mut admin, &app).await;
            if after.iter().all(|p| pids.contains(p)) {
                break;
            }
            eprintln!("a backend opened while tracing ({pids:?} then {after:?}): measuring again");
        }
        st.close().await;
        drop_schema(url, &schema).await;
        syncs
    }

    /// `full` (`synchronous_commit=on`): the backend flushes its log for the commits (on a quiet
    /// server 41 syncs for 40 appends and the session's creation); `normal` (`off`): it leaves
    /// that to the WAL writer (0 syncs).
    #[tokio::test]
    async fn needs_postgres_full_syncs_each_commit_and_normal_does_not() {
        let url = crate::support::service_var("WEFT_TEST_POSTGRES_URL");
        let n = 40;
        let full = backend_syncs(&url, Durability::Full, n).await;
        let normal = backend_syncs(&url, Durability::Normal, n).await;
        eprintln!("backend syncs for {n} appends: full {full}, normal {normal}");
        // Not every commit: on a busy server the WAL writer flushes some first, and a
        // connection the pool opens during the run is not traced.
        assert!(
            full >= n / 2,
            "full: {full} syncs for {n} appends (and their session's creation)"
        );
        assert!(normal <= 2, "normal: {normal} syncs for {n} appends");
    }
}
