//! Unit tests of the engine's pure decisions: `select_wave`, `decide`, `tool_finished` and
//! `dry_run`, with the state folded from events and tool outcomes made up by the test.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::engine::{Next, decide, dry_run, normalize, select_wave, tool_finished, tools_finished};
use crate::event::{Event, RunStatus, SessionStatus, ToolError, ToolOutcome};
use crate::limits::Limits;
use crate::plan::Plan;
use crate::state::{State, StepStatus};
use crate::tool::ToolInfo;

fn plan(v: Value) -> Plan {
    Plan::from_value(&v).unwrap_or_else(|p| panic!("plan does not parse: {p:?}"))
}

fn catalog() -> BTreeMap<String, ToolInfo> {
    let info = |name: &str, parallel: bool| ToolInfo {
        name: name.to_owned(),
        description: String::new(),
        category: None,
        input_schema: json!({}),
        idempotent: true,
        parallel,
        requires_approval: false,
        source: "test".into(),
        output_schema: None,
    };
    BTreeMap::from([
        ("par".to_owned(), info("par", true)),
        ("seq".to_owned(), info("seq", false)),
    ])
}

fn started(p: Plan, input: Value) -> State {
    let mut p = p;
    normalize(&mut p, &catalog());
    State::fold(&[
        Event::SessionStarted {
            session_id: "sess".into(),
            agent: "t".into(),
            input,
            mode: None,
            parent_id: None,
        },
        Event::PlanAccepted { plan: p },
    ])
}

/// Drives a run to its end with no I/O: every call is answered by `answer`. Returns every
/// event, in order.
fn drive(
    state: &mut State,
    limits: &Limits,
    answer: impl Fn(&str, &Value, u32) -> ToolOutcome,
) -> Vec<Event> {
    let mut log = Vec::new();
    let mut pending: Vec<crate::engine::Invocation> = Vec::new();
    for _ in 0..10_000 {
        match decide(state, limits) {
            Next::Done => return log,
            Next::CallExecutor { step } => panic!("a plan run has no step executor (step {step})"),
            Next::Record(events) => {
                assert!(!events.is_empty(), "decide asked to record nothing");
                for e in events {
                    state.apply(&e);
                    log.push(e);
                }
            }
            Next::Start { events, calls } => {
                for e in events {
                    state.apply(&e);
                    log.push(e);
                }
                pending.extend(calls);
            }
            Next::Wait => {
                assert!(!pending.is_empty(), "decide waits but no call is open");
                // Answer the calls of a wave in reverse order, to show order does not matter.
                let call = pending.pop().unwrap_or_else(|| unreachable!());
                let step = call.step.clone().unwrap_or_default();
                let outcome = answer(&step, &call.args, call.attempt);
                for e in tool_finished(state, limits, &call.call_id, outcome, 1) {
                    state.apply(&e);
                    log.push(e);
                }
            }
        }
    }
    panic!("the run did not end in 10,000 decisions");
}

fn echo(_: &str, args: &Value, _: u32) -> ToolOutcome {
    ToolOutcome::Ok {
        output: args.clone(),
    }
}

fn waves_of(log: &[Event]) -> Vec<Vec<String>> {
    log.iter()
        .filter_map(|e| match e {
            Event::WaveStarted { steps, .. } => Some(steps.clone()),
            _ => None,
        })
        .collect()
}

fn status(state: &State, id: &str) -> StepStatus {
    state
        .plan
        .as_ref()
        .and_then(|r| r.step(id))
        .map(|(_, s)| s.status)
        .unwrap_or_else(|| panic!("no step {id}"))
}

#[test]
fn select_wave_picks_a_lone_step_or_parallel_steps() {
    let p = plan(json!([
        {"_id": "a", "_tool": "seq", "_parallel": false},
        {"_id": "b", "_tool": "par", "_parallel": true},
        {"_id": "c", "_tool": "seq", "_parallel": false},
        {"_id": "d", "_tool": "par", "_parallel": true},
        {"_id": "e", "_tool": "par", "_parallel": true}
    ]));
    assert_eq!(select_wave(&[], &p, 4), Vec::<usize>::new());
    assert_eq!(select_wave(&[0, 1, 3], &p, 4), vec![0]);
    assert_eq!(select_wave(&[1, 2, 3, 4], &p, 4), vec![1, 3, 4]);
    assert_eq!(select_wave(&[1, 2, 3, 4], &p, 2), vec![1, 3]);
    // max_parallel 0 still makes progress.
    assert_eq!(select_wave(&[3, 4], &p, 0), vec![3]);
}

#[test]
fn select_wave_treats_an_unset_parallel_flag_as_not_parallel() {
    let p = plan(json!([{"_tool": "par"}, {"_tool": "par"}]));
    assert_eq!(select_wave(&[0, 1], &p, 4), vec![0]);
}

#[test]
fn decide_on_a_finished_session_is_done() {
    let mut s = started(plan(json!([{"_tool": "par"}])), json!({}));
    s.apply(&Event::RunFinished {
        status: RunStatus::Completed,
        error: None,
        answer: None,
    });
    assert_eq!(decide(&s, &Limits::default()), Next::Done);
}

#[test]
fn decide_without_a_plan_fails_the_run() {
    let s = State::fold(&[Event::SessionStarted {
        session_id: "x".into(),
        agent: "a".into(),
        input: json!({}),
        mode: None,
        parent_id: None,
    }]);
    match decide(&s, &Limits::default()) {
        Next::Record(events) => assert!(matches!(
            events.as_slice(),
            [Event::RunFinished {
                status: RunStatus::Failed,
                ..
            }]
        )),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn decide_starts_a_wave_then_waits_then_closes_it() {
    let limits = Limits::default();
    let mut s = started(
        plan(json!([
            {"_id": "a", "_tool": "par", "x": "†input.x", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "par", "_outputPath": "†state.b"},
            {"_id": "c", "_tool": "seq", "v": "†state.a.x"}
        ])),
        json!({"x": 7}),
    );
    let Next::Start { events, calls } = decide(&s, &limits) else {
        panic!("expected a wave to start");
    };
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].args, json!({"x": 7}));
    // Keys name the session and the call's position among the session's starts.
    assert!(calls[0].idempotency_key.starts_with("sess:1:"), "{calls:?}");
    assert!(calls[1].idempotency_key.starts_with("sess:2:"), "{calls:?}");
    assert_eq!(calls[0].delay_ms, 0);
    assert!(matches!(&events[0], Event::WaveStarted { wave: 1, steps } if steps == &["a", "b"]));
    for e in &events {
        s.apply(e);
    }
    assert_eq!(decide(&s, &limits), Next::Wait);
    for e in tool_finished(
        &s,
        &limits,
        "a#1",
        ToolOutcome::Ok {
            output: json!({"x": 7}),
        },
        3,
    ) {
        s.apply(&e);
    }
    assert_eq!(decide(&s, &limits), Next::Wait, "b is still open");
    for e in tool_finished(&s, &limits, "b#1", ToolOutcome::Ok { output: json!(1) }, 3) {
        s.apply(&e);
    }
    assert_eq!(
        decide(&s, &limits),
        Next::Record(vec![Event::WaveFinished { wave: 1 }])
    );
    s.apply(&Event::WaveFinished { wave: 1 });
    let Next::Start { calls, .. } = decide(&s, &limits) else {
        panic!("expected c to start");
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].args, json!({"v": 7}));
}

#[test]
fn a_pure_run_reaches_the_expected_state() {
    let limits = Limits::default();
    let mut s = started(
        plan(json!([
            {"_id": "w", "_tool": "par", "sunny": "†input.sunny", "_outputPath": "†state.weather"},
            {"_id": "park", "_tool": "par", "what": "park", "_when": "state.weather.sunny", "_outputPath": "†state.pick"},
            {"_id": "film", "_tool": "par", "what": "film", "_when": "not state.weather.sunny", "_outputPath": "†state.pick"},
            {"_id": "show", "_tool": "seq", "p": "†state.pick.what", "_outputPath": "†state.shown"}
        ])),
        json!({"sunny": true}),
    );
    let log = drive(&mut s, &limits, echo);
    assert_eq!(s.status, SessionStatus::Completed);
    assert_eq!(status(&s, "film"), StepStatus::Skipped);
    assert_eq!(s.data["shown"], json!({"p": "park"}));
    assert_eq!(
        waves_of(&log),
        vec![vec!["w"], vec!["park"], vec!["show"]]
            .into_iter()
            .map(|w| w.into_iter().map(str::to_owned).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
    assert!(matches!(
        log.last(),
        Some(Event::RunFinished {
            status: RunStatus::Completed,
            error: None,
            ..
        })
    ));
    // The log folds into the same state.
    let mut again = started(
        match &s.plan {
            Some(r) => r.plan.clone(),
            None => Plan::default(),
        },
        json!({"sunny": true}),
    );
    for e in &log {
        again.apply(e);
    }
    assert_eq!(again.data, s.data);
    assert_eq!(again.status, s.status);
}

#[test]
fn retries_carry_a_growing_backoff_and_stop_at_the_limit() {
    let limits = Limits {
        max_step_attempts: 4,
        retry_backoff_ms: 100,
        retry_backoff_max_ms: 250,
        ..Limits::default()
    };
    let mut s = started(plan(json!([{"_id": "f", "_tool": "par"}])), json!({}));
    let log = drive(&mut s, &limits, |_, _, _| ToolOutcome::Error {
        error: ToolError::new("io", "down").retryable(true),
    });
    let delays: Vec<u64> = log
        .iter()
        .filter_map(|e| match e {
            Event::StepRetrying { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays, vec![100, 200, 250]);
    let attempts: Vec<u32> = log
        .iter()
        .filter_map(|e| match e {
            Event::StepStarted { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, vec![1, 2, 3, 4]);
    assert_eq!(status(&s, "f"), StepStatus::Failed);
    assert_eq!(s.status, SessionStatus::Failed);
}

#[test]
fn a_non_retryable_error_fails_at_once() {
    let limits = Limits::default();
    let mut s = started(plan(json!([{"_id": "f", "_tool": "par"}])), json!({}));
    let log = drive(&mut s, &limits, |_, _, _| ToolOutcome::Error {
        error: ToolError::new("refused", "no"),
    });
    assert!(!log.iter().any(|e| matches!(e, Event::StepRetrying { .. })));
    assert_eq!(status(&s, "f"), StepStatus::Failed);
}

#[test]
fn an_error_path_handles_the_failure() {
    let limits = Limits::default();
    let mut s = started(
        plan(json!([
            {"_id": "pay", "_tool": "seq", "_outputPath": "†state.ok || †state.err"},
            {"_id": "good", "_tool": "seq", "r": "†state.ok"},
            {"_id": "bad", "_tool": "seq", "e": "†state.err.kind", "_outputPath": "†state.reported"}
        ])),
        json!({}),
    );
    let log = drive(&mut s, &limits, |step, args, _| {
        if step == "pay" {
            ToolOutcome::Error {
                error: ToolError::new("declined", "no money"),
            }
        } else {
            echo(step, args, 1)
        }
    });
    assert_eq!(s.status, SessionStatus::Completed);
    assert!(
        log.iter()
            .any(|e| matches!(e, Event::StepFailed { step, handled: true, .. } if step == "pay"))
    );
    assert_eq!(status(&s, "good"), StepStatus::Skipped);
    assert_eq!(s.data["reported"], json!({"e": "declined"}));
}

#[test]
fn an_unhandled_failure_blocks_and_fails_the_run() {
    let limits = Limits::default();
    let mut s = started(
        plan(json!([
            {"_id": "a", "_tool": "seq", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "seq", "x": "†state.a", "_outputPath": "†state.b"},
            {"_id": "c", "_tool": "seq", "_dependsOn": "b"},
            {"_id": "d", "_tool": "seq"}
        ])),
        json!({}),
    );
    let log = drive(&mut s, &limits, |step, args, _| {
        if step == "a" {
            ToolOutcome::Error {
                error: ToolError::new("boom", "broken"),
            }
        } else {
            echo(step, args, 1)
        }
    });
    assert_eq!(s.status, SessionStatus::Failed);
    assert_eq!(s.turn.error.as_deref(), Some("step(s) failed: a"));
    assert_eq!(status(&s, "d"), StepStatus::Completed);
    let reason = |id: &str| {
        log.iter()
            .find_map(|e| match e {
                Event::StepSkipped { step, reason } if step == id => Some(reason.clone()),
                _ => None,
            })
            .unwrap_or_default()
    };
    assert_eq!(reason("b"), "blocked: step `a` failed");
    assert!(
        reason("c").starts_with("blocked: step `b`"),
        "{}",
        reason("c")
    );
}

#[test]
fn max_waves_ends_the_run() {
    let limits = Limits {
        max_waves: 1,
        ..Limits::default()
    };
    let mut s = started(
        plan(json!([
            {"_id": "a", "_tool": "seq"},
            {"_id": "b", "_tool": "seq"}
        ])),
        json!({}),
    );
    drive(&mut s, &limits, echo);
    assert_eq!(s.status, SessionStatus::Failed);
    assert!(
        s.turn
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("max_waves (1)")
    );
    assert_eq!(status(&s, "a"), StepStatus::Completed);
    assert_eq!(status(&s, "b"), StepStatus::Skipped);
}

#[test]
fn dry_run_lays_out_waves_and_marks_conditional_steps() {
    let mut p = plan(json!([
        {"_id": "pay", "_tool": "seq", "_outputPath": "†state.ok || †state.err"},
        {"_id": "confirm", "_tool": "seq", "r": "†state.ok", "_outputPath": "†state.confirmed"},
        {"_id": "report", "_tool": "seq", "e": "†state.err", "_outputPath": "†state.report"},
        {"_id": "after", "_tool": "seq", "x": "†state.report"},
        {"_id": "maybe", "_tool": "par", "_when": "input.go"},
        {"_id": "p1", "_tool": "par"},
        {"_id": "p2", "_tool": "par"}
    ]));
    normalize(&mut p, &catalog());
    let waves = dry_run(
        &p,
        &Limits {
            max_parallel: 2,
            ..Limits::default()
        },
    );
    let ids: Vec<Vec<&str>> = waves
        .iter()
        .map(|w| w.steps.iter().map(|s| s.id.as_str()).collect())
        .collect();
    assert_eq!(
        ids,
        vec![
            vec!["pay"],
            vec!["confirm"],
            vec!["report"],
            vec!["after"],
            vec!["maybe", "p1"],
            vec!["p2"]
        ]
    );
    let why = |id: &str| {
        waves
            .iter()
            .flat_map(|w| &w.steps)
            .find(|s| s.id == id)
            .and_then(|s| s.conditional.clone())
    };
    assert_eq!(why("pay"), None);
    assert_eq!(why("confirm"), None);
    assert!(why("report").unwrap_or_default().contains("error path"));
    assert!(why("after").unwrap_or_default().contains("`report`"));
    assert!(why("maybe").unwrap_or_default().contains("input.go"));
    assert_eq!(why("p1"), None);
    let numbers: Vec<u32> = waves.iter().map(|w| w.wave).collect();
    assert_eq!(numbers, vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn dry_run_counts_every_step_once() {
    let calls: Vec<Value> = (0..300)
        .map(|i| {
            let mut c = json!({"_id": format!("s{i}"), "_tool": if i % 3 == 0 { "seq" } else { "par" },
                               "_outputPath": format!("†state.s{i}")});
            if i >= 7 {
                c["x"] = json!(format!("†state.s{}", i - 7));
            }
            c
        })
        .collect();
    let mut p = plan(Value::Array(calls));
    normalize(&mut p, &catalog());
    let waves = dry_run(&p, &Limits::default());
    let mut seen: Vec<&str> = waves
        .iter()
        .flat_map(|w| w.steps.iter().map(|s| s.id.as_str()))
        .collect();
    assert_eq!(seen.len(), 300);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 300);
    for w in &waves {
        assert!(w.steps.len() <= 4);
        if w.steps.len() > 1 {
            assert!(w.steps.iter().all(|s| s.parallel));
        }
    }
    // The dry run's waves match those of a real (pure) run where everything succeeds.
    let mut s = started(p, json!({}));
    let limits = Limits {
        max_waves: 10_000,
        ..Limits::default()
    };
    let log = drive(&mut s, &limits, echo);
    assert_eq!(s.status, SessionStatus::Completed);
    let real: Vec<Vec<String>> = waves_of(&log);
    let dry: Vec<Vec<String>> = waves
        .iter()
        .map(|w| w.steps.iter().map(|s| s.id.clone()).collect())
        .collect();
    assert_eq!(real, dry);
}

#[test]
fn steps_behind_an_unhandled_failure_are_not_candidates() {
    let limits = Limits::default();
    let mut s = started(
        plan(json!([
            {"_id": "a", "_tool": "seq", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "par", "x": "†state.a"},
            {"_id": "c", "_tool": "par", "x": "†state.a"},
            {"_id": "d", "_tool": "seq"}
        ])),
        json!({}),
    );
    let Next::Start { events, .. } = decide(&s, &limits) else {
        panic!("expected a to start");
    };
    for e in &events {
        s.apply(e);
    }
    let failure = ToolOutcome::Error {
        error: ToolError::new("boom", "no"),
    };
    for e in tool_finished(&s, &limits, "a#1", failure, 1) {
        s.apply(&e);
    }
    let run = s.plan.as_ref().unwrap_or_else(|| unreachable!());
    let candidates: Vec<usize> = run.candidates().iter().copied().collect();
    assert_eq!(candidates, vec![3], "only `d` can still run");
    let log = drive(&mut s, &limits, echo);
    let skipped: Vec<(&str, &str)> = log
        .iter()
        .filter_map(|e| match e {
            Event::StepSkipped { step, reason } => Some((step.as_str(), reason.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        skipped,
        vec![
            ("b", "blocked: step `a` failed"),
            ("c", "blocked: step `a` failed")
        ]
    );
    assert_eq!(status(&s, "d"), StepStatus::Completed);
}

/// A fan-out of two items under `_onItemError: fail` whose calls both run, with a dependant.
fn two_items_running(limits: &Limits) -> (State, Vec<String>) {
    let mut s = started(
        plan(json!([
            {"_id": "each", "_tool": "par", "_forEach": "†input.items", "_maxParallel": 2,
             "n": "†item", "_outputPath": "†state.out"},
            {"_id": "after", "_tool": "par", "x": "†state.out"}
        ])),
        json!({"items": [0, 1]}),
    );
    let Next::Start { events, calls } = decide(&s, limits) else {
        panic!("expected both items to start");
    };
    for e in &events {
        s.apply(e);
    }
    assert_eq!(calls.len(), 2);
    (s, calls.into_iter().map(|c| c.call_id).collect())
}

/// The end of a fan-out whose items fail together: item 0 for good, item 1 with a retryable
/// error, reported in one batch in `order`. Returns the events from the batch on.
fn fail_together(order: [usize; 2]) -> (State, Vec<Event>) {
    let limits = Limits::default();
    let (mut s, ids) = two_items_running(&limits);
    let outcome = |k: usize| ToolOutcome::Error {
        error: ToolError::new("boom", format!("item {k}")).retryable(k == 1),
    };
    let batch = order.map(|k| (ids[k].clone(), outcome(k), 1));
    let mut log = tools_finished(&s, &limits, batch);
    for e in &log {
        s.apply(e);
    }
    log.extend(drive(&mut s, &limits, |_, _, _| {
        panic!("no call of a failed fan-out starts")
    }));
    (s, log)
}

#[test]
fn an_item_failed_for_good_stops_the_retries_of_the_others() {
    // Item 0's failure comes first: item 1's retryable failure schedules no retry.
    let (s, log) = fail_together([0, 1]);
    assert!(
        !log.iter().any(|e| matches!(e, Event::ItemRetrying { .. })),
        "{log:?}"
    );
    // Item 1's retry was scheduled first: the step ends without running it.
    let (s2, log2) = fail_together([1, 0]);
    for (s, log) in [(&s, &log), (&s2, &log2)] {
        assert_eq!(s.status, SessionStatus::Failed, "{log:?}");
        assert_eq!(status(s, "each"), StepStatus::Failed);
        assert_eq!(status(s, "after"), StepStatus::Skipped);
        let reason = s
            .plan
            .as_ref()
            .and_then(|r| r.step("after"))
            .and_then(|(_, r)| r.reason.clone());
        assert_eq!(reason.as_deref(), Some("blocked: step `each` failed"));
        assert!(s.calls.open.is_empty());
    }
}
