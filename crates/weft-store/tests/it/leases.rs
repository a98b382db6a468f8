//! Leases on every store: one owner at a time, a new epoch for each new owner, renewal only by
//! the holder, release, takeover after expiry or with force.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus};
use weft_store::{
    Leases, NewSession, Owner, PgStore, RamStore, SessionLog, SqliteStore, Store, StoreError,
};

fn owner(name: &str, pid: u32) -> Owner {
    Owner {
        id: name.to_owned(),
        host: "h1".to_owned(),
        pid,
    }
}

async fn leases_behave<S: Store>(store: &S) {
    let (a, b) = (owner("a", 10), owner("b", 20));
    let s = "sess-lease";
    assert_eq!(store.lease(s).await.unwrap(), None);
    // A takes it (the session need not exist yet).
    let la = store.acquire(s, &a, 1_000, 500, false).await.unwrap();
    assert_eq!((la.epoch, la.expires_at), (1, 1_500));
    // B is refused while it runs, and told who holds it.
    match store.acquire(s, &b, 1_200, 500, false).await {
        Err(StoreError::Leased {
            host,
            pid,
            seconds_left,
            ..
        }) => {
            assert_eq!((host.as_str(), pid, seconds_left), ("h1", 10, 1));
        }
        other => panic!("{other:?}"),
    }
    // A renews; taking it again keeps A's epoch.
    store.renew(&la, 2_000).await.unwrap();
    let again = store.acquire(s, &a, 1_300, 500, false).await.unwrap();
    assert_eq!(again.epoch, 1);
    assert!(store.acquire(s, &b, 1_700, 500, false).await.is_err());
    // After it expires B takes it, at the next epoch; A can no longer renew.
    let lb = store.acquire(s, &b, 1_900, 500, false).await.unwrap();
    assert_eq!(lb.epoch, 2);
    assert!(matches!(
        store.renew(&la, 5_000).await,
        Err(StoreError::LeaseLost(_))
    ));
    // A's release of a lease it lost changes nothing; B's release frees it at once.
    store.release(&la).await.unwrap();
    assert!(store.acquire(s, &a, 2_000, 500, false).await.is_err());
    store.release(&lb).await.unwrap();
    let la2 = store.acquire(s, &a, 2_000, 500, false).await.unwrap();
    assert_eq!(la2.epoch, 3);
    // Force takes a running lease.
    let forced = store.acquire(s, &b, 2_100, 500, true).await.unwrap();
    assert_eq!(forced.epoch, 4);
    let read = store.lease(s).await.unwrap().unwrap();
    assert_eq!((read.owner, read.epoch, read.request), (b.clone(), 4, None));
    // Another process asks the owner to cancel; the owner reads it with the lease.
    assert!(store.request(s, "cancel", 2_200).await.unwrap());
    let read = store.lease(s).await.unwrap().unwrap();
    assert_eq!(read.request.as_deref(), Some("cancel"));
    // No one to ask once the lease ran out; a new owner starts with no request.
    assert!(!store.request(s, "pause", 2_600).await.unwrap());
    let la3 = store.acquire(s, &a, 2_700, 500, false).await.unwrap();
    assert_eq!(store.lease(s).await.unwrap().unwrap().request, None);
    assert_eq!(la3.epoch, 5);
    // Pruning forgets leases that ran out of sessions that do not exist, and keeps one that
    // still runs (a new run takes its lease before it creates its session).
    store
        .acquire("sess-new", &a, 10_000, 500, false)
        .await
        .unwrap();
    store.prune(5_000, true).await.unwrap();
    assert_eq!(store.lease(s).await.unwrap(), None);
    assert!(store.lease("sess-new").await.unwrap().is_some());
}

/// Events `from..=to` written at `epoch`.
fn batch(from: u64, to: u64, epoch: u64) -> Vec<Envelope> {
    (from..=to)
        .map(|seq| Envelope {
            epoch,
            seq,
            ts: 0,
            v: EVENT_VERSION,
            event: Event::TurnStarted {
                task: format!("{seq}"),
                input: serde_json::Value::Null,
            },
        })
        .collect()
}

/// Appends are fenced by the lease's epoch: an owner that lost its lease cannot write again,
/// even when its batch follows the log exactly; a writer without a lease cannot write while
/// another process holds one; the epochs read back.
async fn appends_are_fenced<S: Store>(store: &S) {
    let (a, b) = (owner("a", 10), owner("b", 20));
    let s = "sess-fenced";
    let la = store.acquire(s, &a, 1_000, 500, false).await.unwrap();
    let new = NewSession {
        id: s.to_owned(),
        agent: "t".to_owned(),
        ..NewSession::default()
    };
    store
        .create_with(new, &batch(1, 1, la.epoch), SessionStatus::Running, 1_000)
        .await
        .unwrap();
    store
        .append(s, 1, &batch(2, 3, la.epoch), SessionStatus::Running, 1_100)
        .await
        .unwrap();
    // No lease, no write while A's lease runs.
    assert!(matches!(
        store
            .append(s, 3, &batch(4, 4, 0), SessionStatus::Running, 1_200)
            .await,
        Err(StoreError::Leased { pid: 10, .. })
    ));
    // A stalls; its lease runs out and B takes the session over.
    let lb = store.acquire(s, &b, 1_600, 500, false).await.unwrap();
    assert_eq!(lb.epoch, 2);
    // A wakes and appends exactly where the log ends: refused by its epoch.
    assert!(matches!(
        store
            .append(s, 3, &batch(4, 4, la.epoch), SessionStatus::Running, 1_700)
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    store
        .append(s, 3, &batch(4, 5, lb.epoch), SessionStatus::Running, 1_700)
        .await
        .unwrap();
    // B lets the session go: A still cannot write; a writer without a lease now can.
    store.release(&lb).await.unwrap();
    assert!(matches!(
        store
            .append(s, 5, &batch(6, 6, la.epoch), SessionStatus::Running, 1_800)
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    store
        .append(s, 5, &batch(6, 6, 0), SessionStatus::Completed, 1_800)
        .await
        .unwrap();
    // A batch that mixes epochs is refused whole.
    let mut mixed = batch(7, 8, lb.epoch);
    mixed[1].epoch = 7;
    assert!(matches!(
        store
            .append(s, 6, &mixed, SessionStatus::Completed, 1_900)
            .await,
        Err(StoreError::Corrupt(_))
    ));
    let (_, log) = store.load(s).await.unwrap();
    let epochs: Vec<u64> = log.iter().map(|e| e.epoch).collect();
    assert_eq!(epochs, [1, 1, 1, 2, 2, 0]);
}

/// Workers claim running sessions of their agents that no live lease holds, each once.
async fn claims_are_exclusive<S: Store>(store: &S) {
    let (w1, w2, z) = (owner("w1", 1), owner("w2", 2), owner("z", 3));
    let agents = ["a".to_owned()];
    for (k, agent, status) in [
        (1, "a", SessionStatus::Running),
        (2, "a", SessionStatus::Running),
        (3, "a", SessionStatus::Running),
        (4, "a", SessionStatus::Running),
        (5, "a", SessionStatus::Running),
        (6, "b", SessionStatus::Running),
        (7, "a", SessionStatus::Completed),
        (8, "a", SessionStatus::WaitingForUser),
    ] {
        let new = NewSession {
            id: format!("c{k}"),
            agent: agent.to_owned(),
            ..NewSession::default()
        };
        store
            .create_with(new, &batch(1, 1, 0), status, 1_000 + k)
            .await
            .unwrap();
    }
    // c9 has no events (a thread created empty): there is nothing to drive, so no one claims it.
    let empty = NewSession {
        id: "c9".to_owned(),
        agent: "a".to_owned(),
        ..NewSession::default()
    };
    store.create(empty, 1_009).await.unwrap();
    assert_eq!(
        store.get("c9").await.unwrap().status,
        SessionStatus::Running
    );
    // c3 is being run by a live process; c4's owner stopped (its lease ran out).
    store.acquire("c3", &z, 1_000, 10_000, false).await.unwrap();
    store.acquire("c4", &z, 1_000, 100, false).await.unwrap();
    // Waiting for a worker: c1, c2, c4 (owner stopped), c5 and c6 (another agent's); not c3
    // (running under a live lease), c7, c8 (not running) or c9 (no events).
    assert_eq!(store.waiting(2_000).await.unwrap(), 5);
    assert_eq!(
        store.waiting(1_050).await.unwrap(),
        4,
        "c4's lease still runs"
    );
    let first = store.claim(&w1, &agents, 2_000, 500, 2).await.unwrap();
    let second = store.claim(&w2, &agents, 2_000, 500, 10).await.unwrap();
    let ids = |ls: &[weft_store::Lease]| ls.iter().map(|l| l.session.clone()).collect::<Vec<_>>();
    // c4, whose owner stopped, comes before sessions no one started.
    assert_eq!(ids(&first), ["c4", "c1"]);
    assert_eq!(ids(&second), ["c2", "c5"]);
    assert_eq!(
        store.waiting(2_000).await.unwrap(),
        1,
        "only c6 (agent b) is left"
    );
    assert_eq!(first[0].epoch, 2, "c4 is taken over at the next epoch");
    assert_eq!(store.lease("c1").await.unwrap().unwrap().owner, w1);
    // Nothing is left until a lease runs out.
    assert!(
        store
            .claim(&w2, &agents, 2_100, 500, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store.claim(&w2, &agents, 2_600, 500, 10).await.unwrap();
    assert_eq!(ids(&again), ["c1", "c2", "c4", "c5"]);
    assert!(again.iter().all(|l| l.owner == w2));
}

/// Two workers claiming at the same moment never get the same session.
async fn concurrent_claims_never_overlap<S: Store>(store: &S) {
    for k in 0..40 {
        let new = NewSession {
            id: format!("q{k:02}"),
            agent: "q".to_owned(),
            ..NewSession::default()
        };
        store
            .create_with(new, &batch(1, 1, 0), SessionStatus::Running, 1_000)
            .await
            .unwrap();
    }
    let agents = ["q".to_owned()];
    let claims = |w: u32| {
        let agents = agents.clone();
        async move {
            let me = owner(&format!("cw{w}"), w);
            let mut mine = Vec::new();
            for _ in 0..20 {
                mine.extend(store.claim(&me, &agents, 2_000, 60_000, 3).await.unwrap());
                tokio::task::yield_now().await;
            }
            mine
        }
    };
    let (a, b, c, d) = tokio::join!(claims(0), claims(1), claims(2), claims(3));
    let all: Vec<String> = [a, b, c, d]
        .into_iter()
        .flatten()
        .map(|l| l.session)
        .collect();
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((all.len(), unique.len()), (40, 40));
}

#[tokio::test]
async fn memory_claims() {
    let store = RamStore::new();
    claims_are_exclusive(&store).await;
    concurrent_claims_never_overlap(&store).await;
}

#[tokio::test]
async fn sqlite_claims() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("w.db")).await.unwrap();
    claims_are_exclusive(&store).await;
    concurrent_claims_never_overlap(&store).await;
}

#[tokio::test]
async fn needs_postgres_claims() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("claims_{}", std::process::id());
    let store = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    claims_are_exclusive(&store).await;
    concurrent_claims_never_overlap(&store).await;
}

#[tokio::test]
async fn memory_leases() {
    leases_behave(&RamStore::new()).await;
    appends_are_fenced(&RamStore::new()).await;
}

#[tokio::test]
async fn sqlite_leases() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("w.db")).await.unwrap();
    leases_behave(&store).await;
    appends_are_fenced(&store).await;
}

#[tokio::test]
async fn needs_postgres_leases() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("leases_{}", std::process::id());
    let store = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    leases_behave(&store).await;
    appends_are_fenced(&store).await;
}

/// A raw connection to `schema`, standing for another process's transaction.
async fn raw_connection(url: &str, schema: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let opts: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    sqlx::PgConnection::connect_with(&opts.options([("search_path", schema)]))
        .await
        .unwrap()
}

/// A claim on PostgreSQL passes over nothing it may take and waits for nothing: a session
/// whose lease ran out is claimed even while an open transaction of its old owner (frozen or
/// cut off) holds its session row; one whose lease row an append in progress holds (`FOR
/// SHARE`, the fence) is passed over without waiting, and claimed once that transaction ends.
#[tokio::test]
async fn needs_postgres_claims_go_by_lease_rows_and_never_wait() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("claim_locks_{}", std::process::id());
    let store = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    let (z, w) = (owner("z", 1), owner("w", 2));
    for k in 1..=3 {
        let new = NewSession {
            id: format!("x{k}"),
            agent: "k".to_owned(),
            ..NewSession::default()
        };
        store
            .create_with(new, &batch(1, 1, 0), SessionStatus::Running, 1_000 + k)
            .await
            .unwrap();
    }
    // x1 and x2 were run by z, whose leases ran out; x3 was never run.
    store.acquire("x1", &z, 1_000, 100, false).await.unwrap();
    store.acquire("x2", &z, 1_000, 100, false).await.unwrap();
    let mut frozen = raw_connection(&url, &schema).await;
    sqlx::query("BEGIN").execute(&mut frozen).await.unwrap();
    sqlx::query("SELECT epoch FROM leases WHERE session = 'x1' FOR SHARE")
        .execute(&mut frozen)
        .await
        .unwrap();
    sqlx::query("UPDATE sessions SET last_seq = last_seq WHERE id = 'x2'")
        .execute(&mut frozen)
        .await
        .unwrap();
    let agents = ["k".to_owned()];
    let claimed = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        store.claim(&w, &agents, 2_000, 60_000, 10),
    )
    .await
    .expect("the claim waited for another transaction's lock")
    .unwrap();
    let ids: Vec<&str> = claimed.iter().map(|l| l.session.as_str()).collect();
    assert_eq!(ids, ["x2", "x3"]);
    assert_eq!(claimed[0].epoch, 2, "x2 is taken over at the next epoch");
    // Once the transaction holding x1's lease row ends, x1 is claimed too.
    sqlx::query("ROLLBACK").execute(&mut frozen).await.unwrap();
    let claimed = store.claim(&w, &agents, 2_000, 60_000, 10).await.unwrap();
    let ids: Vec<&str> = claimed.iter().map(|l| l.session.as_str()).collect();
    assert_eq!(ids, ["x1"]);
}

/// A connection is lent without a check when it rested in the pool for less than a second; one
/// the server ended in that moment fails its statement. The health check (`ping`) then tries
/// the next connection, so a server that is up is said to be up: here every backend of the
/// store is ended right after the pings that opened its lease connections (one or both).
#[tokio::test]
async fn needs_postgres_a_ping_after_dropped_connections_finds_the_server() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("ping_{}", std::process::id());
    let app = schema.clone();
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = PgStore::connect_in_schema(&format!("{url}{sep}application_name={app}"), &schema)
        .await
        .unwrap();
    let mut admin = raw_connection(&url, &schema).await;
    for round in 0..3 {
        // Two pings at once, which may hold both lease connections.
        let (a, b) = tokio::join!(store.ping(), store.ping());
        a.unwrap();
        b.unwrap();
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&app)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert!(!ended.is_empty(), "round {round}: no backend of the store");
        store
            .ping()
            .await
            .unwrap_or_else(|e| panic!("round {round}: the server is up, but ping says: {e}"));
    }
}

/// The PostgreSQL store's connections bound statements, lock waits and idle transactions by
/// the lease time: half a lease for a lock wait and an idle transaction, a whole lease for a
/// statement.
#[tokio::test]
async fn needs_postgres_connections_are_bounded_by_the_lease() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("bounds_{}", std::process::id());
    PgStore::connect_in_schema(&url, &schema).await.unwrap();
    let opts: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let store = PgStore::connect_bounded(
        opts.options([("search_path", schema.as_str())]),
        weft_store::Durability::Full,
        weft_store::PgBounds::for_lease(std::time::Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let read = store.settings().await.unwrap().read_back;
    assert_eq!(read["statement_timeout"], "2s", "{read:?}");
    assert_eq!(read["lock_timeout"], "1s", "{read:?}");
    assert_eq!(
        read["idle_in_transaction_session_timeout"], "1s",
        "{read:?}"
    );
}

/// A lease row this build cannot have written (a negative epoch, epoch 0, a process id out of
/// range) is reported as corruption by every read of it: [`Leases::lease`], the fence of an
/// append, and a forced [`Leases::acquire`]; it is never read as "no lease" (epoch 0), which
/// would let a writer without a lease through the fence. `corrupt` runs SQL on the database
/// behind the store's back.
async fn corrupt_leases_are_reported<S, F, Fut>(store: &S, corrupt: F)
where
    S: Store,
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let new = NewSession {
        id: "c".into(),
        agent: "x".into(),
        ..Default::default()
    };
    store.create(new, 1_000).await.unwrap();
    store
        .acquire("c", &owner("a", 1), 1_000, 60_000, false)
        .await
        .unwrap();

    corrupt("UPDATE leases SET epoch = -3 WHERE session = 'c'").await;
    let err = store.lease("c").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("epoch -3"), "{err}");
    // The fence reads the same row: a batch without a lease is refused as corrupt, where a
    // defaulted epoch would have let it through or blamed another owner.
    let err = store
        .append("c", 0, &batch(1, 1, 0), SessionStatus::Running, 1_100)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    // A forced takeover would follow the corrupt epoch with another one (-2).
    let err = store
        .acquire("c", &owner("b", 2), 1_200, 60_000, true)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");

    corrupt("UPDATE leases SET epoch = 0 WHERE session = 'c'").await;
    let err = store.lease("c").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("epoch 0"), "{err}");

    corrupt("UPDATE leases SET epoch = 4, pid = -1 WHERE session = 'c'").await;
    let err = store.lease("c").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("process id -1"), "{err}");
    // Nothing was written meanwhile.
    let (_, log) = store.load("c").await.unwrap();
    assert!(log.is_empty());
}

#[tokio::test]
async fn sqlite_corrupt_leases_are_reported() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let url = format!("sqlite://{}", path.display());
    corrupt_leases_are_reported(&store, |sql| {
        let url = url.clone();
        async move {
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query(sql).execute(&mut c).await.unwrap();
        }
    })
    .await;
}

#[tokio::test]
async fn needs_postgres_corrupt_leases_are_reported() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("corrupt_leases_{}", std::process::id());
    let store = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    corrupt_leases_are_reported(&store, |sql| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            let mut c = raw_connection(&url, &schema).await;
            sqlx::query(sql).execute(&mut c).await.unwrap();
        }
    })
    .await;
}
