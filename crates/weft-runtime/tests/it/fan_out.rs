//! Fan-out steps (`_forEach`): one call per item, at most `_maxParallel` at once, results in
//! item order, per-item retries and failure policies, and a run cut in the middle of a fan-out
//! resumed without losing or repeating an item.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::sync::Arc;

use common::{Log, Recorder, limits, registry, run};
use serde_json::{Value, json};
use weft_core::{Event, Plan, SessionStatus, StepStatus, ToolError};
use weft_runtime::Runtime;
use weft_store::{NewSession, RamStore, SessionLog};

fn items(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"id": format!("o{i}"), "n": i}))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_item_gets_a_call_within_the_window_and_results_keep_item_order() {
    let log = Arc::new(Log::default());
    // Later items finish first: the results must still be in item order.
    let reg = registry(vec![
        Recorder::new("lookup", &log)
            .parallel(true)
            .sleep_ms(30)
            .behaviour(|args, _| {
                Ok(json!({"order": args["order"], "total": args["n"].as_u64().unwrap() * 10}))
            }),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "list", "_tool": "echo", "orders": "†input.orders", "_outputPath": "†state.list"},
            {"_id": "each", "_tool": "lookup", "_forEach": "†state.list.orders", "_maxParallel": 3,
             "order": "†item.id", "n": "†item.n", "_outputPath": "†state.totals"},
            {"_id": "after", "_tool": "echo", "totals": "†state.totals"}
        ]),
        json!({"orders": items(10)}),
    )
    .await;
    assert_eq!(
        ran.state.status(),
        SessionStatus::Completed,
        "{:?}",
        ran.state.turn().error()
    );
    assert_eq!(log.calls_of("each").len(), 10);
    assert_eq!(log.max_inflight(), 3, "the window is _maxParallel");
    let totals: Vec<Value> = (0..10)
        .map(|i| json!({"order": format!("o{i}"), "total": i * 10}))
        .collect();
    assert_eq!(ran.state.data()["totals"], Value::Array(totals));
    // One start of the step, one fan-out event, a call per item naming it, and the step's
    // dependant ran after it.
    assert_eq!(ran.kinds_for("step_started", "each").len(), 1);
    let fan = ran
        .events
        .iter()
        .find_map(|e| match &e.event {
            Event::FanOutStarted { step, items } => Some((step.clone(), *items)),
            _ => None,
        })
        .unwrap();
    assert_eq!(fan, ("each".to_owned(), 10));
    let mut served: Vec<usize> = ran
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallStarted { item, .. } => *item,
            _ => None,
        })
        .collect();
    served.sort_unstable();
    assert_eq!(served, (0..10).collect::<Vec<_>>());
    assert_eq!(ran.status_of("after"), StepStatus::Completed);
}

fn failing_odd(log: &Arc<Log>) -> Recorder {
    Recorder::new("check", log)
        .parallel(true)
        .idempotent(false)
        .behaviour(|args, _| {
            let n = args["n"].as_u64().unwrap();
            if n % 2 == 1 {
                Err(ToolError::new("rejected", format!("order {n} is odd")))
            } else {
                Ok(json!(n))
            }
        })
}

async fn with_policy(policy: &str) -> (common::Ran, Arc<Log>) {
    let log = Arc::new(Log::default());
    let ran = run(
        registry(vec![failing_odd(&log)]),
        limits(),
        json!([
            {"_id": "each", "_tool": "check", "_forEach": "†input.orders", "_onItemError": policy,
             "_maxParallel": 1, "n": "†item.n", "_outputPath": "†state.checked"}
        ]),
        json!({"orders": items(5)}),
    )
    .await;
    (ran, log)
}

#[tokio::test]
async fn an_item_that_fails_follows_the_step_policy() {
    // fail: the step fails at the first failed item, and no later item starts.
    let (ran, log) = with_policy("fail").await;
    assert_eq!(ran.state.status(), SessionStatus::Failed);
    let step = ran.step("each");
    assert_eq!(step.status, StepStatus::Failed);
    let e = step.error.unwrap();
    assert_eq!(e.kind, "rejected");
    assert!(
        e.message.starts_with("item 1 of 5 failed: order 1 is odd"),
        "{e:?}"
    );
    assert_eq!(
        log.calls_of("each").len(),
        2,
        "items after the failure do not start"
    );

    // skip: the failed items are left out.
    let (ran, log) = with_policy("skip").await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(ran.state.data()["checked"], json!([0, 2, 4]));
    assert_eq!(log.calls_of("each").len(), 5);

    // collect: each failed item's place holds its error.
    let (ran, _) = with_policy("collect").await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    let checked = ran.state.data()["checked"].as_array().unwrap().clone();
    assert_eq!(checked.len(), 5);
    assert_eq!(checked[0], json!(0));
    assert_eq!(checked[1]["error"]["kind"], json!("rejected"));
    assert_eq!(checked[3]["error"]["message"], json!("order 3 is odd"));
    assert_eq!(checked[4], json!(4));
}

/// Under `_onItemError: fail`, item 0 fails for good while item 1 runs; item 1 then fails with
/// an error that could be retried. The step has failed: item 1 is not retried, the step fails,
/// its dependant is blocked and the run fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_retries_no_item_and_fails_the_run() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("check", &log)
            .parallel(true)
            .idempotent(true)
            .behaviour(|args, _| match args["n"].as_u64().unwrap() {
                0 => Err(ToolError::new("tool_error", "item 0 is refused")),
                _ => {
                    std::thread::sleep(std::time::Duration::from_millis(150));
                    Err(ToolError::new("timeout", "item 1 was slow").retryable(true))
                }
            }),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "each", "_tool": "check", "_forEach": "†input.orders", "_maxParallel": 2,
             "n": "†item.n", "_outputPath": "†state.out"},
            {"_id": "after", "_tool": "echo", "out": "†state.out"}
        ]),
        json!({"orders": items(2)}),
    )
    .await;
    assert_eq!(
        ran.state.status(),
        SessionStatus::Failed,
        "{:?}",
        ran.events
    );
    assert_eq!(ran.status_of("each"), StepStatus::Failed);
    let e = ran.step("each").error.unwrap();
    assert!(e.message.starts_with("item 0 of 2 failed"), "{e:?}");
    assert_eq!(ran.status_of("after"), StepStatus::Skipped);
    assert_eq!(
        ran.step("after").reason.as_deref(),
        Some("blocked: step `each` failed")
    );
    assert!(
        !ran.events
            .iter()
            .any(|e| matches!(e.event, Event::ItemRetrying { .. })),
        "a failed step scheduled a retry"
    );
    assert_eq!(log.calls_of("each").len(), 2, "item 1 ran once");
    assert!(ran.state.calls().open.is_empty());
}

#[tokio::test]
async fn a_retryable_failure_retries_only_its_item_with_the_same_key() {
    let log = Arc::new(Log::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(u64, u32, String)>::new()));
    let keys = Arc::clone(&seen);
    let reg = registry(vec![
        Recorder::new("flaky", &log)
            .parallel(true)
            .idempotent(true)
            .behaviour(move |args, ctx| {
                let n = args["n"].as_u64().unwrap();
                keys.lock()
                    .unwrap()
                    .push((n, ctx.attempt, ctx.idempotency_key.clone()));
                if n == 2 && ctx.attempt == 1 {
                    Err(ToolError::new("timeout", "slow").retryable(true))
                } else {
                    Ok(json!(n))
                }
            }),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([{"_id": "each", "_tool": "flaky", "_forEach": "†input.orders", "n": "†item.n",
                "_outputPath": "†state.out"}]),
        json!({"orders": items(4)}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(ran.state.data()["out"], json!([0, 1, 2, 3]));
    let calls = seen.lock().unwrap().clone();
    assert_eq!(calls.len(), 5);
    let item2: Vec<&(u64, u32, String)> = calls.iter().filter(|c| c.0 == 2).collect();
    assert_eq!(item2.len(), 2);
    assert_eq!((item2[0].1, item2[1].1), (1, 2));
    assert_eq!(item2[0].2, item2[1].2, "a retry reuses its key");
    let retried: Vec<usize> = ran
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ItemRetrying { item, .. } => Some(*item),
            _ => None,
        })
        .collect();
    assert_eq!(retried, [2]);
}

#[tokio::test]
async fn an_empty_list_completes_at_once_and_a_non_list_fails_saying_so() {
    let log = Arc::new(Log::default());
    let ran = run(
        registry(vec![Recorder::new("t", &log)]),
        limits(),
        json!([
            {"_id": "each", "_tool": "t", "_forEach": "†input.orders", "x": "†item", "_outputPath": "†state.out"},
            {"_id": "after", "_tool": "echo", "out": "†state.out"}
        ]),
        json!({"orders": []}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(ran.state.data()["out"], json!([]));
    assert!(log.calls().is_empty());
    assert_eq!(ran.status_of("after"), StepStatus::Completed);

    let ran = run(
        registry(vec![Recorder::new("t", &log)]),
        limits(),
        json!([{"_id": "each", "_tool": "t", "_forEach": "†input.orders", "x": "†item"}]),
        json!({"orders": {"not": "a list"}}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Failed);
    let e = ran.step("each").error.unwrap();
    assert!(
        e.message
            .contains("`_forEach`: †input.orders is not a list (it is an object)"),
        "{e:?}"
    );
}

#[test]
fn fan_out_mistakes_are_plan_problems() {
    let reg = registry(vec![]);
    let rt = Runtime::builder(
        Arc::new(RamStore::new()),
        Arc::new(reg),
        Default::default(),
        None,
        None,
    )
    .build();
    let check = |plan: Value| -> Vec<String> {
        match Plan::from_value(&plan) {
            Err(p) => p.iter().map(ToString::to_string).collect(),
            Ok(plan) => rt
                .check_plan(&plan, Some(&json!({"l": [1]})))
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    };
    let p = check(json!([{"_id": "a", "_tool": "echo", "text": "†item"}]));
    assert!(
        p[0].contains("is read only in a step with `_forEach`"),
        "{p:?}"
    );
    let p =
        check(json!([{"_id": "a", "_tool": "echo", "_forEach": "†input.l", "_when": "item.x"}]));
    assert!(p[0].contains("`_when` is decided once"), "{p:?}");
    let p = check(json!([{"_id": "a", "_tool": "echo", "_forEach": "input.l"}]));
    assert!(p[0].contains("is not a reference"), "{p:?}");
    let p = check(
        json!([{"_id": "a", "_tool": "echo", "_forEach": "†input.l", "_onItemError": "ignore", "_maxParallel": 0}]),
    );
    assert!(p.iter().any(|x| x.contains("_onItemError")), "{p:?}");
    assert!(p.iter().any(|x| x.contains("_maxParallel")), "{p:?}");
    let p = check(json!([{"_id": "a", "_tool": "echo", "_maxParallel": 2}]));
    assert!(p[0].contains("belongs to a fan-out step"), "{p:?}");
    let p = check(
        json!([{"_id": "a", "_tool": "echo", "_forEach": "†state.nothing", "text": "†item"}]),
    );
    assert!(
        p[0].contains("field `_forEach`") && p[0].contains("written by no step"),
        "{p:?}"
    );
}

/// The log of a finished run cut after its `cut`-th item start, stored as a session of a new
/// store, as a crash would leave it; then resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_mid_fan_out_resumes_every_item_once() {
    let plan = json!([{"_id": "each", "_tool": "slow", "_forEach": "†input.orders", "_maxParallel": 2,
                       "n": "†item.n", "_outputPath": "†state.out"}]);
    let input = json!({"orders": items(6)});
    let log = Arc::new(Log::default());
    let reg = || {
        registry(vec![
            Recorder::new("slow", &log)
                .parallel(true)
                .idempotent(true)
                .sleep_ms(10)
                .behaviour(|args, _| Ok(args["n"].clone())),
        ])
    };
    let full = run(reg(), limits(), plan.clone(), input.clone()).await;
    assert_eq!(full.state.status(), SessionStatus::Completed);
    // Cut right after the fourth item's start: items 0..=3 started, some of them finished.
    let starts: Vec<usize> = full
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.event, Event::ToolCallStarted { .. }))
        .map(|(i, _)| i)
        .collect();
    let cut: Vec<_> = full.events[..=starts[3]].to_vec();
    let finished_before: usize = cut
        .iter()
        .filter(|e| matches!(e.event, Event::ToolCallFinished { .. }))
        .count();
    assert!(finished_before < 4);
    let store = Arc::new(RamStore::new());
    store
        .create_with(
            NewSession {
                id: "cut".into(),
                agent: "test".into(),
                user_id: None,
                reference_id: None,
                metadata: json!({}),
                parent_id: None,
            },
            &cut,
            SessionStatus::Running,
            0,
        )
        .await
        .unwrap();
    let before = log.calls().len();
    let rt = Runtime::builder(store.clone(), Arc::new(reg()), limits(), None, None).build();
    let mut s = rt.load_session("cut").await.unwrap();
    rt.resume_plan(&mut s).await.unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    assert_eq!(s.state.data()["out"], json!([0, 1, 2, 3, 4, 5]));
    // The items in flight at the cut ran again (idempotent), the unstarted ones once, and the
    // finished ones not at all.
    let again = log.calls().len() - before;
    assert_eq!(again, 6 - finished_before);
}
