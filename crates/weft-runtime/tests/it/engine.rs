//! The plan engine driven by the runtime: waves, parallelism, retries, conditions, error paths,
//! blocking, limits and run-time argument checks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Log, Recorder, limits, registry, run};
use serde_json::{Value, json};
use weft_core::{Event, Limits, Plan, SessionStatus, StepStatus, ToolError};
use weft_runtime::{Runtime, RuntimeError};
use weft_store::RamStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parallel_steps_overlap_in_time() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("slow", &log).parallel(true).sleep_ms(200),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "a", "_tool": "slow", "n": 1, "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "slow", "n": 2, "_outputPath": "†state.b"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    let calls = log.calls();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[0].overlaps(&calls[1]),
        "parallel calls did not overlap: {calls:?}"
    );
    assert_eq!(log.max_inflight(), 2);
    // Both steps started before either completed, as the log tells it too.
    let pos = |kind: &str, step: &str| {
        ran.events
            .iter()
            .position(|e| e.event.kind() == kind && common::step_of(&e.event) == Some(step))
            .unwrap()
    };
    let last_start = pos("step_started", "a").max(pos("step_started", "b"));
    let first_done = pos("step_completed", "a").min(pos("step_completed", "b"));
    assert!(last_start < first_done);
    assert_eq!(ran.waves(), vec![vec!["a".to_owned(), "b".to_owned()]]);
    assert_eq!(*ran.state.data(), json!({"a": {"n": 1}, "b": {"n": 2}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_parallel_step_runs_alone() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("fast", &log).parallel(true).sleep_ms(50),
        Recorder::new("solo", &log).parallel(false).sleep_ms(50),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "p1", "_tool": "fast"},
            {"_id": "s", "_tool": "solo"},
            {"_id": "p2", "_tool": "fast"},
            {"_id": "p3", "_tool": "fast"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    let calls = log.calls();
    assert_eq!(calls.len(), 4);
    let solo = log.calls_of("s").pop().unwrap();
    for c in calls.iter().filter(|c| c.step.as_deref() != Some("s")) {
        assert!(!solo.overlaps(c), "{c:?} overlapped the non-parallel step");
    }
    // Plan order: p1 is ready first and parallel, so it runs with the other parallel steps;
    // then `s` alone.
    assert_eq!(
        ran.waves(),
        vec![
            vec!["p1".to_owned(), "p2".to_owned(), "p3".to_owned()],
            vec!["s".to_owned()]
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_marked_not_parallel_runs_alone_even_with_a_parallel_tool() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("fast", &log).parallel(true).sleep_ms(30),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "a", "_tool": "fast", "_parallel": false},
            {"_id": "b", "_tool": "fast"},
            {"_id": "c", "_tool": "fast"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(
        ran.waves(),
        vec![vec!["a".to_owned()], vec!["b".to_owned(), "c".to_owned()]]
    );
    let a = log.calls_of("a").pop().unwrap();
    assert!(
        log.calls()
            .iter()
            .filter(|c| c.step.as_deref() != Some("a"))
            .all(|c| !a.overlaps(c))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallel_bounds_the_calls_in_flight() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("slow", &log).parallel(true).sleep_ms(40),
    ]);
    let plan: Vec<Value> = (0..5)
        .map(|i| json!({"_id": format!("p{i}"), "_tool": "slow", "i": i}))
        .collect();
    let ran = run(
        reg,
        Limits {
            max_parallel: 2,
            ..limits()
        },
        Value::Array(plan),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(log.calls().len(), 5);
    assert_eq!(log.max_inflight(), 2, "at most 2 in flight, and 2 reached");
    let waves = ran.waves();
    assert_eq!(waves.len(), 3, "{waves:?}");
    assert!(waves.iter().all(|w| w.len() <= 2), "{waves:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flaky_idempotent_tool_completes_on_the_third_attempt() {
    let log = Arc::new(Log::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen_by_tool = Arc::clone(&seen);
    let reg = registry(vec![
        Recorder::new("flaky", &log)
            .idempotent(true)
            .behaviour(move |_, ctx| {
                seen_by_tool
                    .lock()
                    .unwrap()
                    .push(ctx.idempotency_key.clone());
                if ctx.attempt < 3 {
                    Err(ToolError::new("io", format!("hiccup {}", ctx.attempt)))
                } else {
                    Ok(json!({"attempt": ctx.attempt}))
                }
            }),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([{"_id": "f", "_tool": "flaky", "_outputPath": "†state.out"}]),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(ran.status_of("f"), StepStatus::Completed);
    assert_eq!(ran.step("f").attempts, 3);
    assert_eq!(*ran.state.data(), json!({"out": {"attempt": 3}}));
    let retrying = ran.kinds_for("step_retrying", "f");
    assert_eq!(retrying.len(), 2);
    let attempts: Vec<u32> = retrying
        .iter()
        .map(|e| match e {
            Event::StepRetrying { attempt, error, .. } => {
                assert!(error.retryable);
                *attempt
            }
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(attempts, vec![1, 2]);
    let tried: Vec<u32> = log.calls_of("f").iter().map(|c| c.attempt).collect();
    assert_eq!(tried, vec![1, 2, 3]);
    // The attempts are retries of one logical call: one idempotency key, recorded in each
    // start and given to the tool each time.
    let keys: std::collections::BTreeSet<String> = ran
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallStarted {
                idempotency_key, ..
            } => Some(idempotency_key.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|k| keys.contains(k)), "{seen:?} {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_non_idempotent_tool_is_not_retried() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("charge", &log)
            .idempotent(false)
            .behaviour(|_, _| Err(ToolError::new("io", "connection reset"))),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([{"_id": "c", "_tool": "charge", "_outputPath": "†state.receipt"}]),
        json!({}),
    )
    .await;
    assert_eq!(log.calls().len(), 1);
    assert!(ran.kinds_for("step_retrying", "c").is_empty());
    let step = ran.step("c");
    assert_eq!(step.status, StepStatus::Failed);
    assert!(!step.handled);
    assert_eq!(step.error.as_ref().map(|e| e.retryable), Some(false));
    assert_eq!(ran.state.status(), SessionStatus::Failed);
    assert!(
        ran.state.turn().error().unwrap().contains("c"),
        "{:?}",
        ran.state.turn().error()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_max_step_attempts() {
    for max in [1u32, 2, 4] {
        let log = Arc::new(Log::default());
        let ran = run(
            registry(vec![
                Recorder::new("down", &log)
                    .idempotent(true)
                    .behaviour(|_, _| Err(ToolError::new("timeout", "no answer"))),
            ]),
            Limits {
                max_step_attempts: max,
                ..limits()
            },
            json!([{"_id": "d", "_tool": "down"}]),
            json!({}),
        )
        .await;
        assert_eq!(log.calls().len(), max as usize);
        assert_eq!(ran.kinds_for("step_retrying", "d").len(), max as usize - 1);
        assert_eq!(ran.status_of("d"), StepStatus::Failed);
        assert_eq!(ran.step("d").attempts, max);
        assert_eq!(ran.state.status(), SessionStatus::Failed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_never_retried() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("picky", &log)
            .idempotent(true)
            .behaviour(|_, _| Err(ToolError::new("invalid_arguments", "no"))),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([{"_id": "p", "_tool": "picky"}]),
        json!({}),
    )
    .await;
    assert_eq!(log.calls().len(), 1);
    assert_eq!(ran.status_of("p"), StepStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_false_condition_skips_the_step_and_its_readers() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![Recorder::new("rec", &log)]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "w", "_tool": "echo", "sunny": "†input.sunny", "_outputPath": "†state.weather"},
            {"_id": "park", "_tool": "rec", "where": "park", "_when": "state.weather.sunny", "_outputPath": "†state.park"},
            {"_id": "film", "_tool": "rec", "where": "cinema", "_when": "not state.weather.sunny", "_outputPath": "†state.film"},
            {"_id": "after_park", "_tool": "rec", "p": "†state.park", "_outputPath": "†state.done"}
        ]),
        json!({"sunny": false}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(ran.status_of("park"), StepStatus::Skipped);
    assert!(
        ran.step("park")
            .reason
            .unwrap()
            .contains("condition `state.weather.sunny` is false")
    );
    assert_eq!(ran.status_of("film"), StepStatus::Completed);
    assert_eq!(ran.status_of("after_park"), StepStatus::Skipped);
    assert!(
        ran.step("after_park")
            .reason
            .unwrap()
            .contains("state.park")
    );
    let ran_steps: Vec<String> = log.calls().into_iter().filter_map(|c| c.step).collect();
    assert_eq!(ran_steps, vec!["film".to_owned()]);
    assert_eq!(
        *ran.state.data(),
        json!({"weather": {"sunny": false}, "film": {"where": "cinema"}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_that_cannot_be_evaluated_fails_the_step() {
    let reg = registry(vec![]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "w", "_tool": "echo", "n": 1, "_outputPath": "†state.w"},
            {"_id": "c", "_tool": "echo", "_when": "state.w.n + 'text'"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(ran.status_of("c"), StepStatus::Failed);
    assert_eq!(ran.step("c").error.unwrap().kind, "condition");
    assert_eq!(ran.state.status(), SessionStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_with_an_error_path_runs_the_error_branch() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("pay", &log)
            .idempotent(false)
            .behaviour(|_, _| Err(ToolError::new("declined", "card declined"))),
        Recorder::new("rec", &log),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "pay", "_tool": "pay", "_outputPath": "†state.receipt || †state.err"},
            {"_id": "confirm", "_tool": "rec", "r": "†state.receipt", "_outputPath": "†state.order"},
            {"_id": "report", "_tool": "rec", "e": "†state.err.message", "_outputPath": "†state.report"},
            {"_id": "after", "_tool": "rec", "_dependsOn": ["pay"], "_outputPath": "†state.after"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(
        ran.state.status(),
        SessionStatus::Completed,
        "{:?}",
        ran.state.turn().error()
    );
    let pay = ran.step("pay");
    assert_eq!(pay.status, StepStatus::Failed);
    assert!(pay.handled);
    assert_eq!(ran.state.data()["err"]["kind"], json!("declined"));
    assert_eq!(ran.status_of("confirm"), StepStatus::Skipped);
    assert!(
        ran.step("confirm")
            .reason
            .unwrap()
            .contains("state.receipt")
    );
    assert_eq!(ran.status_of("report"), StepStatus::Completed);
    assert_eq!(ran.state.data()["report"], json!({"e": "card declined"}));
    // A handled failure does not block an explicit dependant.
    assert_eq!(ran.status_of("after"), StepStatus::Completed);
    let failed = ran.kinds_for("step_failed", "pay");
    assert!(matches!(failed[0], Event::StepFailed { handled: true, .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhandled_failure_blocks_its_dependants() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("bad", &log)
            .idempotent(false)
            .behaviour(|_, _| Err(ToolError::new("boom", "it broke"))),
        Recorder::new("rec", &log),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "bad", "_tool": "bad", "_outputPath": "†state.x"},
            {"_id": "reader", "_tool": "rec", "x": "†state.x", "_outputPath": "†state.y"},
            {"_id": "explicit", "_tool": "rec", "_dependsOn": "bad"},
            {"_id": "transitive", "_tool": "rec", "y": "†state.y"},
            {"_id": "free", "_tool": "rec", "_outputPath": "†state.free"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Failed);
    assert!(ran.state.turn().error().unwrap().contains("bad"));
    assert_eq!(ran.status_of("bad"), StepStatus::Failed);
    for s in ["reader", "explicit"] {
        assert_eq!(ran.status_of(s), StepStatus::Skipped, "{s}");
        let reason = ran.step(s).reason.unwrap();
        assert!(
            reason.starts_with("blocked: step `bad` failed"),
            "{s}: {reason}"
        );
    }
    assert_eq!(ran.status_of("transitive"), StepStatus::Skipped);
    assert!(
        ran.step("transitive")
            .reason
            .unwrap()
            .starts_with("blocked:")
    );
    assert_eq!(ran.status_of("free"), StepStatus::Completed);
    let ran_steps: Vec<String> = log.calls().into_iter().filter_map(|c| c.step).collect();
    assert_eq!(ran_steps, vec!["bad".to_owned(), "free".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_max_waves_fails_the_run_with_a_clear_error() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![Recorder::new("rec", &log)]);
    let ran = run(
        reg,
        Limits {
            max_waves: 2,
            ..limits()
        },
        json!([
            {"_id": "a", "_tool": "rec", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "rec", "a": "†state.a", "_outputPath": "†state.b"},
            {"_id": "c", "_tool": "rec", "b": "†state.b", "_outputPath": "†state.c"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Failed);
    let err = ran.state.turn().error().map(str::to_owned).unwrap();
    assert!(err.contains("max_waves (2)"), "{err}");
    assert_eq!(ran.status_of("a"), StepStatus::Completed);
    assert_eq!(ran.status_of("b"), StepStatus::Completed);
    assert_eq!(ran.status_of("c"), StepStatus::Skipped);
    assert!(ran.step("c").reason.unwrap().contains("max_waves"));
    assert_eq!(log.calls().len(), 2);
    let last = &ran.events.last().unwrap().event;
    assert!(matches!(last, Event::RunFinished { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_referenced_value_of_the_wrong_type_fails_before_the_tool_runs() {
    let counter = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&counter);
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("typed", &log)
            .schema(json!({
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"]
            }))
            .behaviour(move |args, _| {
                seen.fetch_add(1, Ordering::SeqCst);
                Ok(args.clone())
            }),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "src", "_tool": "echo", "s": "not a number", "_outputPath": "†state.v"},
            {"_id": "use", "_tool": "typed", "n": "†state.v.s", "_outputPath": "†state.out"},
            {"_id": "after", "_tool": "echo", "o": "†state.out"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(counter.load(Ordering::SeqCst), 0, "the tool must never run");
    let step = ran.step("use");
    assert_eq!(step.status, StepStatus::Failed);
    let err = step.error.unwrap();
    assert_eq!(err.kind, "invalid_arguments");
    assert!(!err.retryable);
    assert!(err.message.contains("typed"), "{}", err.message);
    assert!(ran.kinds_for("step_retrying", "use").is_empty());
    assert_eq!(ran.status_of("after"), StepStatus::Skipped);
    assert_eq!(ran.state.status(), SessionStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_outputs_and_input_flow_through_references() {
    let reg = registry(vec![]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "a", "_tool": "echo", "name": "†input.user.name", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "template", "template": "Hi {{ who }}!", "who": "†steps.a.name", "_outputPath": "†state.greeting"},
            {"_id": "c", "_tool": "echo", "all": {"g": "†state.greeting", "list": ["†state.a.name", 3]}, "_outputPath": "†state.c"}
        ]),
        json!({"user": {"name": "Ada"}}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(ran.state.data()["greeting"], json!("Hi Ada!"));
    assert_eq!(
        ran.state.data()["c"],
        json!({"all": {"g": "Hi Ada!", "list": ["Ada", 3]}})
    );
}

#[tokio::test]
async fn an_invalid_plan_is_refused_before_a_session_starts() {
    let store = Arc::new(RamStore::new());
    let rt = Runtime::builder(
        Arc::clone(&store),
        Arc::new(registry(vec![])),
        limits(),
        None,
        None,
    )
    .build();
    let plan = Plan::from_value(&json!([{"_id": "a", "_tool": "nope"}])).unwrap();
    let err = rt.run_plan("t", plan, json!({})).await.err().unwrap();
    match err {
        RuntimeError::InvalidPlan(p) => {
            assert_eq!(p.len(), 1);
            assert_eq!(p[0].field.as_deref(), Some("_tool"));
        }
        other => panic!("unexpected error {other}"),
    }
    use weft_store::SessionLog;
    let listed = store
        .list(&weft_store::ListFilter::default())
        .await
        .unwrap();
    assert!(listed.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_go_to_the_error_path() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("down", &log)
            .idempotent(true)
            .behaviour(|_, ctx| Err(ToolError::new("timeout", format!("try {}", ctx.attempt)))),
        Recorder::new("rec", &log),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "d", "_tool": "down", "_outputPath": "†state.ok || †state.err"},
            {"_id": "fallback", "_tool": "rec", "why": "†state.err.message", "_outputPath": "†state.fb"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(log.calls_of("d").len(), 3);
    assert_eq!(ran.kinds_for("step_retrying", "d").len(), 2);
    let d = ran.step("d");
    assert_eq!(d.status, StepStatus::Failed);
    assert!(d.handled);
    // The error of the last attempt is the one recorded.
    assert_eq!(ran.state.data()["err"]["message"], json!("try 3"));
    assert_eq!(ran.state.data()["fb"], json!({"why": "try 3"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_may_read_a_step_output() {
    let reg = registry(vec![]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "probe", "_tool": "echo", "count": "†input.count"},
            {"_id": "many", "_tool": "echo", "_when": "steps.probe.count > 3", "_outputPath": "†state.many"},
            {"_id": "few", "_tool": "echo", "_when": "steps.probe.count <= 3", "_outputPath": "†state.few"}
        ]),
        json!({"count": 5}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Completed);
    assert_eq!(ran.status_of("many"), StepStatus::Completed);
    assert_eq!(ran.status_of("few"), StepStatus::Skipped);
    // The condition waited for the step it reads.
    let pos = |kind: &str, step: &str| {
        ran.events
            .iter()
            .position(|e| e.event.kind() == kind && common::step_of(&e.event) == Some(step))
            .unwrap()
    };
    assert!(pos("step_completed", "probe") < pos("step_started", "many"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_fails_its_step_and_the_run_ends() {
    let log = Arc::new(Log::default());
    let reg = registry(vec![
        Recorder::new("crashy", &log)
            .idempotent(true)
            .behaviour(|_, _| panic!("the tool fell over")),
        Recorder::new("rec", &log),
    ]);
    let ran = run(
        reg,
        limits(),
        json!([
            {"_id": "c", "_tool": "crashy", "_outputPath": "†state.c"},
            {"_id": "after", "_tool": "rec", "x": "†state.c"},
            {"_id": "free", "_tool": "rec"}
        ]),
        json!({}),
    )
    .await;
    assert_eq!(ran.state.status(), SessionStatus::Failed);
    let c = ran.step("c");
    assert_eq!(c.status, StepStatus::Failed);
    let err = c.error.unwrap();
    assert_eq!(err.kind, "panicked");
    assert!(
        err.message.contains("the tool fell over"),
        "{}",
        err.message
    );
    assert!(!err.retryable, "a panic is not retried");
    assert!(ran.kinds_for("step_retrying", "c").is_empty());
    assert_eq!(ran.status_of("after"), StepStatus::Skipped);
    assert_eq!(ran.status_of("free"), StepStatus::Completed);
    assert!(ran.state.calls().open.is_empty());
}

/// A crash after an idempotent call's start was stored: the resumed run re-runs the call with
/// the key recorded in that start, and a later new call gets a key of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_reruns_an_idempotent_call_with_its_recorded_key() {
    let log = Arc::new(Log::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen_by_tool = Arc::clone(&seen);
    let reg = Arc::new(registry(vec![
        Recorder::new("book", &log)
            .idempotent(true)
            .behaviour(move |args, ctx| {
                seen_by_tool
                    .lock()
                    .unwrap()
                    .push(ctx.idempotency_key.clone());
                Ok(args.clone())
            }),
    ]));
    let store = Arc::new(RamStore::new());
    let plan = Plan::from_value(&json!([
        {"_id": "a", "_tool": "book", "n": 1, "_outputPath": "†state.a"},
        {"_id": "b", "_tool": "book", "n": 1, "_dependsOn": ["a"], "_outputPath": "†state.b"}
    ]))
    .unwrap();
    // The first process records the start of `a` and dies before it runs.
    let id = {
        let rt =
            Runtime::builder(Arc::clone(&store), Arc::clone(&reg), limits(), None, None).build();
        let mut session = rt
            .session("crashed".into(), weft_core::State::new())
            .with_redactor(None);
        session
            .create(
                weft_store::NewSession {
                    id: "crashed".into(),
                    agent: "t".into(),
                    user_id: None,
                    reference_id: None,
                    metadata: Value::Null,
                    parent_id: None,
                },
                vec![
                    Event::SessionStarted {
                        session_id: "crashed".into(),
                        agent: "t".into(),
                        input: json!({}),
                        mode: None,
                        parent_id: None,
                    },
                    Event::PlanAccepted { plan },
                ],
            )
            .await
            .unwrap();
        let weft_core::engine::Next::Start { events, .. } =
            weft_core::engine::decide(&session.state, &limits())
        else {
            panic!("the first wave starts");
        };
        session.commit(events).await.unwrap();
        session.id.clone()
    };
    let recorded: String = {
        let (_, events) = weft_store::SessionLog::load(store.as_ref(), &id)
            .await
            .unwrap();
        events
            .iter()
            .find_map(|e| match &e.event {
                Event::ToolCallStarted {
                    idempotency_key, ..
                } => Some(idempotency_key.clone()),
                _ => None,
            })
            .unwrap()
    };
    let rt = Runtime::builder(Arc::clone(&store), reg, limits(), None, None).build();
    let mut session = rt.load_session(&id).await.unwrap();
    rt.resume_plan(&mut session).await.unwrap();
    assert_eq!(session.state.status(), SessionStatus::Completed);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0], recorded, "the re-run keeps the recorded key");
    assert_ne!(
        seen[1], recorded,
        "the next call (same tool and arguments) has its own key"
    );
}
