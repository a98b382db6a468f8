//! A property test of the plan engine and its fan-out steps, with no I/O: random plans (random
//! dependencies, fan-out steps under each `_onItemError`, error paths and their readers) run by
//! a shell played here, whose calls end in a random order, several at a time or one by one, each
//! with a random outcome (success, a failure for good, a failure that may be retried). Whatever
//! happens, the run ends; it ends `completed` only when every step ended and none failed without
//! an error path; no retry is scheduled and no call starts for a step that has failed; no step is
//! running in an ended run; and every call started has exactly one finish.
//!
//! The seed is fixed (`PROPTEST_RNG_SEED` sets another) and the count modest (`PROPTEST_CASES`
//! sets another: `scripts/fuzz` runs many more).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value, json};
use weft_core::engine::{Invocation, Next, decide, tools_finished};
use weft_core::limits::Limits;
use weft_core::plan::ItemPolicy;
use weft_core::{Event, Plan, RunStatus, SessionStatus, State, StepStatus, ToolError, ToolOutcome};

/// A generated step.
#[derive(Clone, Debug)]
struct GenStep {
    depends_on: BTreeSet<usize>,
    /// Earlier steps whose output (or, `true`, error path) this step reads.
    reads: BTreeMap<usize, bool>,
    parallel: bool,
    error_path: bool,
    /// A fan-out over this many items, with its window and policy.
    fan_out: Option<(usize, usize, ItemPolicy)>,
}

fn gen_step(i: usize) -> impl Strategy<Value = GenStep> {
    let earlier = move || {
        if i == 0 {
            Just(BTreeSet::new()).boxed()
        } else {
            proptest::collection::btree_set(0..i, 0..=i.min(2)).boxed()
        }
    };
    let policy = prop_oneof![
        Just(ItemPolicy::Fail),
        Just(ItemPolicy::Skip),
        Just(ItemPolicy::Collect)
    ];
    (
        earlier(),
        earlier(),
        proptest::collection::vec(any::<bool>(), 3),
        any::<bool>(),
        any::<bool>(),
        proptest::option::weighted(0.5, (0usize..5, 1usize..4, policy)),
    )
        .prop_map(
            |(depends_on, reads, read_err, parallel, error_path, fan_out)| GenStep {
                depends_on,
                reads: reads
                    .into_iter()
                    .zip(read_err.into_iter().cycle())
                    .collect(),
                parallel,
                error_path,
                fan_out,
            },
        )
}

fn gen_plan() -> impl Strategy<Value = Vec<GenStep>> {
    (1usize..10).prop_flat_map(|n| (0..n).map(gen_step).collect::<Vec<_>>())
}

/// The plan, and the input its fan-outs read their lists from.
fn to_plan(steps: &[GenStep]) -> (Plan, Value) {
    let mut input = Map::new();
    let calls: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut c = Map::new();
            c.insert("_id".into(), json!(format!("s{i}")));
            c.insert("_tool".into(), json!("t"));
            c.insert("n".into(), json!(i));
            c.insert("_parallel".into(), json!(s.parallel));
            let out = if s.error_path {
                format!("†state.s{i} || †state.e{i}")
            } else {
                format!("†state.s{i}")
            };
            c.insert("_outputPath".into(), json!(out));
            if !s.depends_on.is_empty() {
                let ids: Vec<String> = s.depends_on.iter().map(|j| format!("s{j}")).collect();
                c.insert("_dependsOn".into(), json!(ids));
            }
            for (&j, &err) in &s.reads {
                // An error path is read only where the step has one.
                let r = if err && steps[j].error_path {
                    format!("†state.e{j}")
                } else {
                    format!("†state.s{j}")
                };
                c.insert(format!("in{j}"), json!(r));
            }
            if let Some((items, window, policy)) = s.fan_out {
                input.insert(format!("l{i}"), json!((0..items).collect::<Vec<_>>()));
                c.insert("_forEach".into(), json!(format!("†input.l{i}")));
                c.insert("item".into(), json!("†item"));
                c.insert("_maxParallel".into(), json!(window));
                c.insert("_onItemError".into(), json!(policy.as_str()));
            }
            Value::Object(c)
        })
        .collect();
    let plan = Plan::from_value(&Value::Array(calls))
        .unwrap_or_else(|p| panic!("a generated plan does not parse: {p:?}"));
    (plan, Value::Object(input))
}

/// What the shell does at each of its choices, drawn in turn (and cycled).
#[derive(Clone, Debug)]
struct Script {
    /// Which pending call ends next, and how many end together.
    picks: Vec<usize>,
    /// Each ending call's outcome: mostly success, then failures for good and retryable ones.
    outcomes: Vec<u8>,
}

fn gen_script() -> impl Strategy<Value = Script> {
    (
        proptest::collection::vec(any::<usize>(), 1..64),
        proptest::collection::vec(0u8..6, 1..64),
    )
        .prop_map(|(picks, outcomes)| Script { picks, outcomes })
}

fn outcome(kind: u8, call: &Invocation) -> ToolOutcome {
    match kind {
        0 => ToolOutcome::Error {
            error: ToolError::new("refused", format!("{} failed for good", call.call_id)),
        },
        1 => ToolOutcome::Error {
            error: ToolError::new("timeout", format!("{} may be tried again", call.call_id))
                .retryable(true),
        },
        _ => ToolOutcome::Ok {
            output: json!({"call": call.call_id}),
        },
    }
}

fn step_run<'a>(state: &'a State, id: &str) -> Option<&'a weft_core::state::StepRun> {
    state.plan.as_ref()?.step(id).map(|(_, r)| r)
}

/// The step's fan-out policy, if it is a fan-out.
fn policy_of(state: &State, id: &str) -> Option<ItemPolicy> {
    let run = state.plan.as_ref()?;
    let (i, _) = run.step(id)?;
    run.plan.steps[i].for_each.as_ref().map(|f| f.on_error)
}

/// Checks, before `e` is applied, that it schedules no retry and starts no call for a step that
/// has failed.
fn check_event(state: &State, e: &Event) -> Result<(), TestCaseError> {
    let failed = |id: &str| step_run(state, id).is_some_and(|r| r.status == StepStatus::Failed);
    match e {
        Event::StepRetrying { step, .. } => {
            prop_assert!(!failed(step), "a retry of failed step {}", step);
        }
        Event::ItemRetrying { step, item, .. } => {
            prop_assert!(
                !failed(step),
                "a retry of item {} of failed step {}",
                item,
                step
            );
            // Items failed for good, other than this one (whose `tool_call_finished`, just
            // applied, counts it until its retry is).
            let others = step_run(state, step)
                .and_then(|r| r.items.as_ref())
                .map_or(0, |items| {
                    let own =
                        matches!(items.done.get(*item), Some(Some(ToolOutcome::Error { .. })));
                    items.failed - usize::from(own)
                });
            let stopped = policy_of(state, step) == Some(ItemPolicy::Fail) && others > 0;
            prop_assert!(
                !stopped,
                "a retry of item {} of step {}, whose items failed for good",
                item,
                step
            );
        }
        Event::ToolCallStarted {
            step: Some(step),
            call_id,
            ..
        } => {
            let r = step_run(state, step);
            prop_assert!(
                r.is_some_and(|r| !r.status.is_terminal()),
                "call {} started for step {}, which ended ({:?})",
                call_id,
                step,
                r.map(|r| r.status)
            );
        }
        _ => {}
    }
    Ok(())
}

fn apply_all(
    state: &mut State,
    log: &mut Vec<Event>,
    events: Vec<Event>,
) -> Result<(), TestCaseError> {
    for e in events {
        check_event(state, &e)?;
        state.apply(&e);
        log.push(e);
    }
    Ok(())
}

/// Runs the plan to its end as a shell would, the script choosing which calls end when and how.
fn drive(
    plan: Plan,
    input: Value,
    limits: &Limits,
    script: &Script,
) -> Result<(State, Vec<Event>), TestCaseError> {
    let mut state = State::fold(&[
        Event::SessionStarted {
            session_id: "prop".into(),
            agent: "prop".into(),
            input,
            mode: None,
            parent_id: None,
        },
        Event::PlanAccepted { plan },
    ]);
    let mut log = Vec::new();
    let mut pending: Vec<Invocation> = Vec::new();
    let (mut pick, mut out) = (0usize, 0usize);
    let mut next_pick = || {
        pick += 1;
        script.picks[pick % script.picks.len()]
    };
    for _ in 0..5_000 {
        match decide(&state, limits) {
            Next::Done => {
                prop_assert!(
                    pending.is_empty(),
                    "the run ended with calls running: {:?}",
                    pending
                );
                return Ok((state, log));
            }
            Next::CallExecutor { step } => {
                prop_assert!(false, "a plan run asked for a step executor ({})", step);
            }
            Next::Record(events) => {
                prop_assert!(!events.is_empty(), "decide asked to record nothing");
                apply_all(&mut state, &mut log, events)?;
            }
            Next::Start { events, calls } => {
                prop_assert!(!events.is_empty() || !calls.is_empty(), "an empty start");
                apply_all(&mut state, &mut log, events)?;
                pending.extend(calls);
            }
            Next::Wait => {
                prop_assert!(!pending.is_empty(), "decide waits but no call runs");
                // One call ends, or a few end together (one batch of outcomes).
                let together = 1 + next_pick() % pending.len().min(3);
                let mut batch = Vec::with_capacity(together);
                for _ in 0..together {
                    let call = pending.remove(next_pick() % pending.len());
                    out += 1;
                    let o = outcome(script.outcomes[out % script.outcomes.len()], &call);
                    batch.push((call.call_id, o, 1));
                }
                let events = tools_finished(&state, limits, batch);
                apply_all(&mut state, &mut log, events)?;
            }
        }
    }
    Err(TestCaseError::fail(format!(
        "the run did not end in 5,000 decisions; last events: {:?}",
        &log[log.len().saturating_sub(8)..]
    )))
}

fn config() -> Config {
    let base = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            base.cases
        } else {
            256
        },
        rng_seed: if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
            base.rng_seed
        } else {
            RngSeed::Fixed(0x7765_6674)
        },
        failure_persistence: None,
        ..base
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_plans_with_random_outcomes_end_as_their_steps_did(
        steps in gen_plan(),
        script in gen_script(),
        max_parallel in 1usize..4,
        max_step_attempts in 1u32..4,
    ) {
        let (plan, input) = to_plan(&steps);
        let limits = Limits { max_parallel, max_step_attempts, ..Limits::default() };
        let (state, log) = drive(plan, input, &limits, &script)?;

        // The run ended, and no step is left running or waiting.
        prop_assert!(state.status.is_terminal(), "{:?}", state.status);
        prop_assert!(state.calls.open.is_empty());
        let run = state.plan.as_ref().unwrap();
        for (s, r) in run.plan.steps.iter().zip(&run.steps) {
            prop_assert!(r.status.is_terminal(), "step {} is {:?} in an ended run", s.id, r.status);
        }

        // Completed exactly when no step failed without an error path.
        let unhandled: Vec<&str> = run
            .plan
            .steps
            .iter()
            .zip(&run.steps)
            .filter(|(_, r)| r.status == StepStatus::Failed && !r.handled)
            .map(|(s, _)| s.id.as_str())
            .collect();
        let want = if unhandled.is_empty() { SessionStatus::Completed } else { SessionStatus::Failed };
        prop_assert_eq!(state.status, want, "unhandled failures: {:?}", unhandled);
        let finished: Vec<&RunStatus> = log
            .iter()
            .filter_map(|e| match e {
                Event::RunFinished { status, .. } => Some(status),
                _ => None,
            })
            .collect();
        prop_assert_eq!(finished.len(), 1);

        // A failure is handled only by an error path, and blocks the steps that need it.
        for (i, (s, r)) in run.plan.steps.iter().zip(&run.steps).enumerate() {
            if r.status == StepStatus::Failed && r.handled {
                prop_assert!(steps[i].error_path, "step {} was handled without an error path", s.id);
            }
            let blocked_by = run.graph().deps[i]
                .iter()
                .find(|&&d| run.steps[d].status == StepStatus::Failed && !run.steps[d].handled);
            if let Some(&d) = blocked_by {
                prop_assert_eq!(r.status, StepStatus::Skipped, "step {} ran after {} failed", s.id, run.plan.steps[d].id);
            }
            // A fan-out that stops at its first failure failed if an item failed for good.
            if let Some((_, _, ItemPolicy::Fail)) = steps[i].fan_out
                && r.items.as_ref().is_some_and(|items| items.failed > 0)
            {
                prop_assert_eq!(r.status, StepStatus::Failed, "step {}", s.id);
            }
        }

        // Every call started has exactly one finish.
        let mut open: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &log {
            match e {
                Event::ToolCallStarted { call_id, .. } => {
                    prop_assert!(open.insert(call_id.as_str(), 0).is_none(), "{} started twice", call_id);
                }
                Event::ToolCallFinished { call_id, .. } => {
                    let n = open.get_mut(call_id.as_str());
                    prop_assert!(n.is_some(), "{} finished without a start", call_id);
                    if let Some(n) = n {
                        *n += 1;
                    }
                }
                _ => {}
            }
        }
        for (id, n) in &open {
            prop_assert_eq!(*n, 1, "call {} finished {} times", id, n);
        }
    }
}
