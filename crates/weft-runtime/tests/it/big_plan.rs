//! 10,000-step plans, linear and wide, validated and run through the runtime with `echo`.
//! No timing assertions: the time per step is printed (`-- --nocapture`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use weft_core::{Limits, Plan, SessionStatus, StepStatus};
use weft_runtime::Runtime;
use weft_store::{RamStore, SessionLog};
use weft_tools::{Echo, Registry};

const N: usize = 10_000;

/// Each step reads the previous step's number through the State object.
fn chain(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                let mut call = json!({"_id": format!("s{i}"), "_tool": "echo", "n": i,
                                      "_outputPath": format!("†state.s{i}")});
                if i > 0 {
                    call["prev"] = json!(format!("†state.s{}.n", i - 1));
                }
                call
            })
            .collect(),
    )
}

/// Independent parallel steps.
fn wide(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                json!({"_id": format!("w{i}"), "_tool": "echo", "n": i, "_parallel": true,
                       "_outputPath": format!("†state.w{i}")})
            })
            .collect(),
    )
}

fn per_step(label: &str, what: &str, t: std::time::Duration, n: usize) {
    println!(
        "{label}: {what} {:.3} s total, {:.1} µs/step",
        t.as_secs_f64(),
        t.as_secs_f64() * 1e6 / n as f64
    );
}

async fn run_big(label: &str, plan: Value, max_parallel: usize) -> weft_core::State {
    let n = plan.as_array().unwrap().len();
    let mut reg = Registry::new();
    reg.register(Echo::default()).unwrap();
    let limits = Limits {
        max_parallel,
        max_waves: u32::MAX,
        ..Limits::default()
    };
    let store = Arc::new(RamStore::new());
    let rt = Runtime::builder(Arc::clone(&store), Arc::new(reg), limits, None, None).build();

    let t = Instant::now();
    let plan = Plan::from_value(&plan).unwrap();
    per_step(label, "parse", t.elapsed(), n);

    let t = Instant::now();
    let problems = rt.check_plan(&plan, Some(&json!({})));
    per_step(label, "validate", t.elapsed(), n);
    assert!(problems.is_empty(), "{problems:?}");

    let t = Instant::now();
    let session = rt.run_plan("big", plan, json!({})).await.unwrap();
    per_step(label, "run (validation included)", t.elapsed(), n);

    let state = session.state.clone();
    let id = session.id.clone();
    drop(session);
    let (rec, log) = store.load(&id).await.unwrap();
    println!(
        "{label}: {} events, {} waves",
        log.len(),
        state.waves().started
    );
    assert_eq!(rec.status, SessionStatus::Completed);
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_steps_in_a_chain() {
    let state = run_big("chain", chain(N), 4).await;
    assert_eq!(state.status(), SessionStatus::Completed);
    let run = state.plan().unwrap();
    assert!(run.steps.iter().all(|s| s.status == StepStatus::Completed));
    assert_eq!(run.steps.len(), N);
    assert_eq!(state.waves().started as usize, N);
    assert_eq!(
        state.data()[format!("s{}", N - 1).as_str()]["prev"],
        json!(N - 2)
    );
    assert_eq!(state.calls().started as usize, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_independent_parallel_steps() {
    for max_parallel in [4, 256] {
        let label = format!("wide (max_parallel {max_parallel})");
        let state = run_big(&label, wide(N), max_parallel).await;
        assert_eq!(state.status(), SessionStatus::Completed);
        let run = state.plan().unwrap();
        assert!(run.steps.iter().all(|s| s.status == StepStatus::Completed));
        assert_eq!(state.waves().started as usize, N.div_ceil(max_parallel));
        assert_eq!(state.data().as_object().unwrap().len(), N);
        assert_eq!(state.data()["w9999"], json!({"n": 9999}));
    }
}
