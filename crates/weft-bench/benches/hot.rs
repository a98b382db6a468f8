#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Micro-benchmarks of weft's hot paths: folding an event into the state, validating a plan,
//! encoding an event, and appending a batch to SQLite.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::Value;
use weft_bench::workloads::{echo_plan, echo_tools, react_agent, runtime, temp_sqlite};
use weft_core::graph::{ValidateOptions, validate};
use weft_core::{Envelope, Limits, SessionStatus, State};
use weft_model::ScriptedReply;
use weft_runtime::SessionInfo;
use weft_store::{NewSession, RamStore, SessionLog};

/// The log of a ReAct session of 20 echo calls.
fn react_log(rt: &tokio::runtime::Runtime) -> Vec<Envelope> {
    rt.block_on(async {
        let tools = echo_tools().unwrap();
        let mut call = ScriptedReply::tool_call("echo", serde_json::json!({"text": "step"}));
        call.repeat = Some(20);
        let agent = react_agent(&tools, vec![call, ScriptedReply::text("done")], 30).unwrap();
        let store = Arc::new(RamStore::new());
        let weft = runtime(Arc::clone(&store), tools, Limits::default(), None);
        let s = weft
            .run_agent(&agent, SessionInfo::default(), "go", Value::Null)
            .await
            .unwrap();
        store.load(&s.id).await.unwrap().1
    })
}

fn hot(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let log = react_log(&rt);
    // A typical iteration: the model's tool call, the call starting, its result.
    let mid = log.len() / 2;
    let before = || {
        let mut s = State::new();
        for e in &log[..mid] {
            s.apply(&e.event);
        }
        s
    };
    let iteration: Vec<Envelope> = log[mid..mid + 3].to_vec();

    // Each run starts from a state folded afresh: a clone would share its conversation with the
    // original, and the first message applied would copy it, which a session never does.
    c.bench_function("state_apply_react_iteration_3_events", |b| {
        b.iter_batched(
            before,
            |mut s| {
                for e in &iteration {
                    s.apply(&e.event);
                }
                s
            },
            BatchSize::SmallInput,
        );
    });

    let tools = echo_tools().unwrap();
    let plan = echo_plan(1000, true).unwrap();
    let input = serde_json::json!({"text": "hello"});
    c.bench_function("validate_plan_1000_linear_steps", |b| {
        b.iter(|| {
            let p = validate(
                black_box(&plan),
                tools.as_ref(),
                &ValidateOptions {
                    input: Some(&input),
                    require_tools: true,
                    ..ValidateOptions::default()
                },
            );
            assert!(p.is_empty());
        });
    });

    c.bench_function("encode_envelope_json", |b| {
        b.iter(|| serde_json::to_string(black_box(&iteration[2])).unwrap());
    });

    let (_dir, _path, store) = rt.block_on(temp_sqlite()).unwrap();
    rt.block_on(store.create(
        NewSession {
            id: "bench".into(),
            agent: "bench".into(),
            ..NewSession::default()
        },
        0,
    ))
    .unwrap();
    let batch: Vec<Envelope> = log[mid..mid + 4].to_vec();
    let mut seq = 0u64;
    c.bench_function("sqlite_append_4_events", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let events: Vec<Envelope> = batch
                        .iter()
                        .enumerate()
                        .map(|(k, e)| Envelope {
                            epoch: 0,
                            seq: seq + 1 + k as u64,
                            ..e.clone()
                        })
                        .collect();
                    let t = Instant::now();
                    store
                        .append("bench", seq, &events, SessionStatus::Running, 0)
                        .await
                        .unwrap();
                    spent += t.elapsed();
                    seq += 4;
                }
                spent
            })
        });
    });
}

criterion_group!(benches, hot);
criterion_main!(benches);
