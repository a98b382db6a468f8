//! What users spent per quota period, on every store: adds accumulate, many adds at once are
//! all counted, each user and period has its own counter, and a new period starts from zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::sync::Arc;

use weft_core::quota::{Period, Used};
use weft_store::{PgStore, RamStore, SqliteStore, Store};

/// 2026-11-26T23:59:59.999Z: one millisecond before a new day and before nothing else.
const LATE: i64 = 1_795_737_599_999;

fn call(cost: f64) -> Used {
    Used {
        input_tokens: 100,
        output_tokens: 20,
        cost_usd: cost,
        model_calls: 1,
    }
}

fn keys(now: i64) -> Vec<String> {
    Period::ALL.iter().map(|p| p.key(now)).collect()
}

async fn counters_add_up<S: Store>(store: Arc<S>) {
    let before = store.usage("ann", &keys(LATE)).await.unwrap();
    assert_eq!(before, vec![Used::default(), Used::default()]);
    // 40 adds at once, as 40 model calls ending together in several processes would make.
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .add_usage("ann", &keys(LATE), &call(0.25), LATE)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let [day, month]: [Used; 2] = store
        .usage("ann", &keys(LATE))
        .await
        .unwrap()
        .try_into()
        .unwrap();
    let want = Used {
        input_tokens: 4000,
        output_tokens: 800,
        cost_usd: 10.0,
        model_calls: 40,
    };
    assert_eq!(day, want);
    assert_eq!(month, want);
    // Another user's counters are their own.
    assert_eq!(
        store.usage("bob", &keys(LATE)).await.unwrap()[0],
        Used::default()
    );
    // One millisecond later it is a new day (the month goes on): the day's counter starts
    // from zero, the month's keeps what was spent.
    let next = LATE + 1;
    store
        .add_usage("ann", &keys(next), &call(0.5), next)
        .await
        .unwrap();
    let [day2, month2]: [Used; 2] = store
        .usage("ann", &keys(next))
        .await
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(day2, call(0.5));
    assert_eq!(month2.model_calls, 41);
    assert!((month2.cost_usd - 10.5).abs() < 1e-9, "{}", month2.cost_usd);
    // Nothing used: nothing written.
    store
        .add_usage("carl", &keys(next), &Used::default(), next)
        .await
        .unwrap();
    assert_eq!(
        store.usage("carl", &keys(next)).await.unwrap()[1],
        Used::default()
    );
}

#[tokio::test]
async fn memory_usage_counters() {
    counters_add_up(Arc::new(RamStore::new())).await;
}

#[tokio::test]
async fn sqlite_usage_counters() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("u.db")).await.unwrap();
    counters_add_up(Arc::new(store)).await;
}

#[tokio::test]
async fn needs_postgres_usage_counters() {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let schema = format!("usage_{}", std::process::id());
    let store = PgStore::connect_in_schema(&url, &schema).await.unwrap();
    counters_add_up(Arc::new(store)).await;
}
