#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Micro-benchmarks of weft's hot paths: folding an event into the state, validating a plan,
//! encoding an event, appending a batch to SQLite, and deciding a plan's wave with and without
//! `trust:` (the labels' cost).

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

/// The state of a plan-mode session about to start its second wave (100 steps that read step
/// `s0`'s untrusted output), and the agent, with `trust:` or without.
fn plan_wave(
    rt: &tokio::runtime::Runtime,
    trust: bool,
) -> (State, weft_core::agent_loop::AgentConfig) {
    use std::collections::HashMap;
    use weft_core::agent::AgentSpec;
    use weft_model::{Purpose, ScriptedModel};
    let mut steps = vec![serde_json::json!({"_id": "s0", "_tool": "echo", "text": "†input.text"})];
    steps.extend((1..=100).map(
        |i| serde_json::json!({"_id": format!("s{i}"), "_tool": "echo", "text": "†steps.s0.text"}),
    ));
    let mut review = ScriptedReply::json(serde_json::json!({"decision": "CONTINUE"}));
    review.repeat = Some(10);
    let replies = HashMap::from([
        (
            Purpose::Plan,
            vec![ScriptedReply::json(serde_json::json!({"plan": steps}))],
        ),
        (Purpose::Review, vec![review]),
        (Purpose::Respond, vec![ScriptedReply::text("done")]),
    ]);
    // `text` is read from an untrusted output and not protected: the guard labels every
    // argument and finds nothing to refuse, as in a run that goes through.
    let yaml = format!(
        "name: bench\nmode: plan\nreview_responses: false\nlimits: {{ max_parallel: 100 }}\n{}",
        if trust {
            "trust: { protect: { echo: [other] } }\n"
        } else {
            ""
        }
    );
    let spec = AgentSpec::parse("bench.yaml", &yaml).unwrap();
    let tools = echo_tools().unwrap();
    let model = Arc::new(ScriptedModel::keyed("bench", replies));
    let agent =
        weft_runtime::Agent::new(&spec, Arc::clone(&tools), model, &Value::Null, &Value::Null)
            .unwrap();
    let log = rt.block_on(async {
        let store = Arc::new(RamStore::new());
        let weft = runtime(Arc::clone(&store), tools, Limits::default(), None);
        let s = weft
            .run_agent(
                &agent,
                SessionInfo::default(),
                "go",
                serde_json::json!({"text": "hi"}),
            )
            .await
            .unwrap();
        assert_eq!(s.state.status(), SessionStatus::Completed);
        store.load(&s.id).await.unwrap().1
    });
    let second = log
        .iter()
        .filter(|e| matches!(e.event, weft_core::Event::WaveStarted { .. }))
        .nth(1)
        .unwrap()
        .seq;
    let mut state = State::new();
    for e in log.iter().take_while(|e| e.seq < second) {
        state.apply(&e.event);
    }
    (state, agent.config)
}

fn labels(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (name, trust) in [
        ("decide_plan_wave_100_steps_without_trust", false),
        ("decide_plan_wave_100_steps_with_trust", true),
    ] {
        let (state, cfg) = plan_wave(&rt, trust);
        let weft_core::agent_loop::AgentNext::Start { calls, .. } =
            weft_core::agent_loop::decide(&state, &cfg)
        else {
            panic!("the second wave starts");
        };
        assert_eq!(calls.len(), 100);
        c.bench_function(name, |b| {
            b.iter(|| weft_core::agent_loop::decide(black_box(&state), &cfg));
        });
    }
}

criterion_group!(benches, hot, labels);
criterion_main!(benches);
