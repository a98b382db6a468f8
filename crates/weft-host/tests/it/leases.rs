//! The lease holder on a clock moved by hand: who may take a session, when a lease runs out and
//! how a renewal extends it, with no sleep. The store's own lease rules (epochs, fencing) are
//! tested in weft-store; here the times come from the host's [`Host::clock`].

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use weft_host::{Host, HostError, ownership};
use weft_runtime::clock::ManualClock;
use weft_store::{RamStore, SqliteStore, Store};

const START: i64 = 1_700_000_000_000;

fn host_at(clock: &Arc<ManualClock>) -> Host {
    Host {
        clock: clock.clone(),
        ..Host::default()
    }
}

/// Two drivers of this process: the first takes the session, the second is refused while the
/// lease runs (by the manual clock), the lease is renewed from the clock's time, and once the
/// clock passes its end the second takes it at the next epoch and the first can no longer renew.
/// `renewal`: also check the renewal, which needs tokio's paused time (the renewal task sleeps
/// between looks); sqlx's SQLite pool cannot run on paused time (its timeouts would fire at once).
async fn a_lease_runs_out_by_the_hosts_clock<S: Store>(store: Arc<S>, renewal: bool) {
    let clock = ManualClock::starting_at(START);
    let host = host_at(&clock);
    let (first, second) = (ownership::driver(), ownership::driver());
    let id = "sess-clock";
    let ttl = ownership::ttl_ms();

    let held = ownership::take_as(&host, store.clone(), id, false, &first)
        .await
        .unwrap();
    let lease = store.lease(id).await.unwrap().unwrap();
    assert_eq!(lease.expires_at, START + ttl, "taken at the clock's time");
    assert_eq!(held.fence().1, 1);
    assert!(
        ownership::driven(clock.as_ref(), store.as_ref(), id)
            .await
            .unwrap()
    );

    // Just before the end, the other driver is refused and told how to take over.
    clock.advance(ttl - 1);
    match ownership::take_as(&host, store.clone(), id, false, &second).await {
        Err(HostError::Leased(msg)) => assert!(msg.contains("--force"), "{msg}"),
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("a running lease was taken"),
    }

    // The holder renews every third of the lease: tokio's paused time moves the renewal task on,
    // the manual clock says what time the renewal is stamped with.
    let end = if renewal {
        tokio::task::yield_now().await; // the renewal task starts its first sleep
        tokio::time::advance(ownership::ttl() / 3 + Duration::from_millis(1)).await;
        let renewed = wait_for_expiry(store.as_ref(), id, START + 2 * ttl - 1).await;
        assert_eq!(
            renewed,
            START + 2 * ttl - 1,
            "renewed to the clock's now plus the lease time"
        );
        renewed
    } else {
        START + ttl
    };

    // The holder stops renewing (it is dropped, as a frozen process would stop); the clock reaches
    // the lease's end: the session is no longer driven and the other driver takes it over.
    drop(held);
    clock.set(end - 1);
    assert!(
        ownership::take_as(&host, store.clone(), id, false, &second)
            .await
            .is_err(),
        "refused until the lease's end"
    );
    clock.advance(1);
    assert!(
        !ownership::driven(clock.as_ref(), store.as_ref(), id)
            .await
            .unwrap()
    );
    let taken = ownership::take_as(&host, store.clone(), id, false, &second)
        .await
        .unwrap();
    assert_eq!(taken.fence().1, 2, "taken over at the next epoch");
    assert_eq!(
        store.lease(id).await.unwrap().unwrap().owner.id,
        second.id,
        "the second driver holds it"
    );
    taken.release().await;
    let left = store.lease(id).await.unwrap().unwrap();
    assert_eq!(
        (left.epoch, left.expires_at),
        (2, 0),
        "released: it ran out at once and keeps its epoch"
    );
    assert!(
        !ownership::driven(clock.as_ref(), store.as_ref(), id)
            .await
            .unwrap()
    );
}

/// Yields to the renewal task until the stored lease runs until `until` (a few turns of the
/// scheduler; the paused clock does not move meanwhile), and returns the stored end.
async fn wait_for_expiry<S: Store>(store: &S, id: &str, until: i64) -> i64 {
    for _ in 0..1_000 {
        let now = store.lease(id).await.unwrap().unwrap().expires_at;
        if now == until {
            return now;
        }
        tokio::task::yield_now().await;
    }
    store.lease(id).await.unwrap().unwrap().expires_at
}

#[tokio::test(start_paused = true)]
async fn in_ram_a_lease_runs_out_by_the_hosts_clock() {
    a_lease_runs_out_by_the_hosts_clock(Arc::new(RamStore::new()), true).await;
}

#[tokio::test]
async fn on_sqlite_a_lease_runs_out_by_the_hosts_clock() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("weft.db")).await.unwrap();
    a_lease_runs_out_by_the_hosts_clock(Arc::new(store), false).await;
}
