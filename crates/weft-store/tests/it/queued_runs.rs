//! Queued runs on every store: stored and read back whole, listed per thread oldest first, a
//! claim renewed by its owner only, an expired claim taken over by one caller of many, deleted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use serde_json::json;
use weft_store::{PgStore, QueuedRun, RamStore, RunQueue, SqliteStore};

fn queued(run_id: &str, thread_id: &str, owner: &str, created_at: i64) -> QueuedRun {
    QueuedRun {
        run_id: run_id.to_owned(),
        thread_id: thread_id.to_owned(),
        user_id: "alice".to_owned(),
        body: json!({"assistant_id": "twice", "input": {"messages": [{"role": "user", "content": "again"}]}}),
        owner: owner.to_owned(),
        expires_at: 1_000,
        created_at,
    }
}

async fn queue_behaves<S: RunQueue>(store: &S) {
    let a = queued("r1", "t1", "p1", 10);
    store.queue_run(&a).await.unwrap();
    store
        .queue_run(&queued("r3", "t1", "p1", 30))
        .await
        .unwrap();
    store
        .queue_run(&queued("r2", "t1", "p2", 20))
        .await
        .unwrap();
    store.queue_run(&queued("r4", "t2", "p2", 5)).await.unwrap();
    let mut bobs = queued("r5", "t3", "p1", 1);
    bobs.user_id = "bob".to_owned();
    store.queue_run(&bobs).await.unwrap();
    assert!(
        store.queue_run(&a).await.is_err(),
        "a run id is queued once"
    );
    assert_eq!(store.queued_run("r1").await.unwrap(), Some(a.clone()));
    assert_eq!(store.queued_run("nope").await.unwrap(), None);
    let ids = |v: Vec<QueuedRun>| v.into_iter().map(|q| q.run_id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.queued_runs_of("t1").await.unwrap()),
        ["r1", "r2", "r3"]
    );
    assert_eq!(ids(store.queued_runs_of("t2").await.unwrap()), ["r4"]);
    assert_eq!(
        ids(store.queued_runs_of_user("alice").await.unwrap()),
        ["r4", "r1", "r2", "r3"]
    );
    assert_eq!(ids(store.queued_runs_of_user("bob").await.unwrap()), ["r5"]);
    store.unqueue_run("r5").await.unwrap();

    // p1 renews its claims (r1, r3) until 5,000; p2's (r2, r4) run out at 1,000.
    store.renew_queued_runs("p1", 5_000).await.unwrap();
    assert_eq!(
        ids(store.stale_queued_runs(999, 10).await.unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(store.stale_queued_runs(1_000, 10).await.unwrap()),
        ["r4", "r2"]
    );
    assert_eq!(
        ids(store.stale_queued_runs(1_000, 1).await.unwrap()),
        ["r4"]
    );
    assert_eq!(
        store.queued_run("r3").await.unwrap().unwrap().expires_at,
        5_000
    );

    // Four callers race to take r2 over: one wins; a live claim is not taken.
    let take = |who: &'static str| store.take_queued_run("r2", "p2", 1_000, who, 9_000);
    let won = tokio::join!(take("w0"), take("w1"), take("w2"), take("w3"));
    let won = [won.0, won.1, won.2, won.3].map(Result::unwrap);
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    let winner = ["w0", "w1", "w2", "w3"][won.iter().position(|w| *w).unwrap()];
    let r2 = store.queued_run("r2").await.unwrap().unwrap();
    assert_eq!((r2.owner.as_str(), r2.expires_at), (winner, 9_000));
    assert!(
        !store
            .take_queued_run("r1", "p1", 1_000, "w9", 9_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .take_queued_run("r4", "p1", 1_000, "w9", 9_000)
            .await
            .unwrap()
    );

    store.unqueue_run("r2").await.unwrap();
    store.unqueue_run("r2").await.unwrap();
    assert_eq!(store.queued_run("r2").await.unwrap(), None);
    assert_eq!(ids(store.queued_runs_of("t1").await.unwrap()), ["r1", "r3"]);
}

#[tokio::test]
async fn memory_queued_runs() {
    queue_behaves(&RamStore::new()).await;
}

#[tokio::test]
async fn sqlite_queued_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("q.db")).await.unwrap();
    queue_behaves(&store).await;
}

#[tokio::test]
async fn needs_postgres_queued_runs() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("queued_{}", std::process::id());
    let store = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    queue_behaves(&store).await;
}
