//! Crons on every store: stored and read back whole, listed per user, changed, deleted; a tick
//! claimed by one caller of many (a compare-and-set on the next due time), a claim closed only
//! by its holder, an expired claim taken over by one caller.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use serde_json::json;
use weft_store::{CronRecord, CronTick, Crons, PgStore, RamStore, SqliteStore};

fn cron(id: &str, user: &str, created_at: i64) -> CronRecord {
    CronRecord {
        id: id.to_owned(),
        user_id: user.to_owned(),
        assistant_id: "ticker".to_owned(),
        thread_id: Some("t1".to_owned()),
        schedule: "* * * * * *".to_owned(),
        payload: json!({"input": {"messages": [{"role": "user", "content": "tick"}]}}),
        metadata: json!({"team": "red"}),
        on_run_completed: None,
        enabled: true,
        end_time: Some(90_000),
        next_run_at: Some(1_000),
        claim: None,
        last: None,
        ticks: 0,
        created_at,
        updated_at: created_at,
    }
}

async fn crons_behave<S: Crons>(store: &S) {
    let a = cron("c1", "alice", 10);
    store.create_cron(&a).await.unwrap();
    store.create_cron(&cron("c2", "alice", 20)).await.unwrap();
    store.create_cron(&cron("c3", "bob", 30)).await.unwrap();
    assert_eq!(store.cron("c1").await.unwrap(), Some(a.clone()));
    assert_eq!(store.cron("nope").await.unwrap(), None);
    let ids = |v: Vec<CronRecord>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(store.crons_of("alice").await.unwrap()), ["c1", "c2"]);
    assert_eq!(ids(store.crons_of("bob").await.unwrap()), ["c3"]);

    // Four callers race for the tick due at 1,000: one wins.
    let claim = |who: &'static str| store.claim_cron_tick("c1", 1_000, Some(2_000), who, 5_000);
    let won = tokio::join!(claim("w0"), claim("w1"), claim("w2"), claim("w3"));
    let won = [won.0, won.1, won.2, won.3].map(Result::unwrap);
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    let winner = ["w0", "w1", "w2", "w3"][won.iter().position(|w| *w).unwrap()];
    let c = store.cron("c1").await.unwrap().unwrap();
    assert_eq!(c.next_run_at, Some(2_000));
    assert_eq!(
        c.claim.as_ref().map(|h| (h.tick, h.owner.as_str())),
        Some((1_000, winner))
    );
    // The same tick again, or the next one while the claim is open: refused.
    assert!(!claim("w9").await.unwrap());
    assert!(
        !store
            .claim_cron_tick("c1", 2_000, Some(3_000), "w9", 5_000)
            .await
            .unwrap()
    );
    // An open claim is due only once it expired.
    assert!(
        store
            .due_crons(4_000, 10)
            .await
            .unwrap()
            .iter()
            .all(|c| c.id != "c1")
    );
    let due = store.due_crons(5_000, 10).await.unwrap();
    let open = due
        .iter()
        .find(|c| c.id == "c1")
        .unwrap()
        .claim
        .clone()
        .unwrap();
    // Two take it over at once: one wins; its old holder can no longer close it.
    let take = |who: &'static str| store.reclaim_cron_tick("c1", &open, who, 5_000, 9_000);
    let (x, y) = tokio::join!(take("r0"), take("r1"));
    let (x, y) = (x.unwrap(), y.unwrap());
    assert!(x ^ y, "{x} {y}");
    let taker = if x { "r0" } else { "r1" };
    let done = CronTick {
        tick: 1_000,
        run_id: Some("run-1".into()),
        thread_id: Some("t1".into()),
        error: None,
    };
    assert!(!store.finish_cron_tick("c1", winner, &done).await.unwrap());
    assert!(store.finish_cron_tick("c1", taker, &done).await.unwrap());
    let c = store.cron("c1").await.unwrap().unwrap();
    assert_eq!((c.claim, c.last, c.ticks), (None, Some(done), 1));
    // The next tick is claimable now.
    assert!(
        store
            .claim_cron_tick("c1", 2_000, None, "w0", 9_000)
            .await
            .unwrap()
    );

    // Changes, a disabled cron is never due, deletion.
    let mut b = cron("c2", "alice", 20);
    b.enabled = false;
    b.schedule = "0 9 * * *".into();
    b.end_time = None;
    b.updated_at = 99;
    // Not rescheduled, the stored next due time stays (a claim may have moved it on since the
    // cron was read); rescheduled, it is the one given.
    let stored = store.cron("c2").await.unwrap().unwrap().next_run_at;
    let mut stale = b.clone();
    stale.next_run_at = Some(5);
    assert!(store.update_cron(&stale, false).await.unwrap());
    assert_eq!(store.cron("c2").await.unwrap().unwrap().next_run_at, stored);
    assert!(store.update_cron(&b, true).await.unwrap());
    assert_eq!(store.cron("c2").await.unwrap(), Some(b.clone()));
    assert!(
        store
            .due_crons(1_000_000, 10)
            .await
            .unwrap()
            .iter()
            .all(|c| c.id != "c2")
    );
    assert!(
        !store
            .claim_cron_tick("c2", 1_000, None, "w0", 9_000)
            .await
            .unwrap()
    );
    assert!(store.delete_cron("c2", 1_000).await.unwrap());
    assert!(!store.delete_cron("c2", 1_000).await.unwrap());
    assert!(!store.update_cron(&b, true).await.unwrap());
    assert_eq!(ids(store.crons_of("alice").await.unwrap()), ["c1"]);
    // A cron whose tick is claimed (until 9,000) is deleted only once the claim expired.
    assert!(!store.delete_cron("c1", 8_999).await.unwrap());
    assert_eq!(ids(store.crons_of("alice").await.unwrap()), ["c1"]);
    assert!(store.delete_cron("c1", 9_000).await.unwrap());
    assert!(store.crons_of("alice").await.unwrap().is_empty());
}

#[tokio::test]
async fn memory_crons() {
    crons_behave(&RamStore::new()).await;
}

#[tokio::test]
async fn sqlite_crons() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();
    crons_behave(&store).await;
}

#[tokio::test]
async fn needs_postgres_crons() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("crons_{}", std::process::id());
    let store = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    crons_behave(&store).await;
}
