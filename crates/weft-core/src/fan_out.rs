//! Fan-out: a plan step with `_forEach: "†state.orders"` runs its tool once per item of the
//! list, its arguments reading the item as `†item` (`†item.id`). At most `_maxParallel` (by
//! default the run's `max_parallel`) of its calls run at once, and a new one starts as soon as
//! one finishes. Each item's call is retried as a step's call is; an item that fails for good
//! follows `_onItemError`: `fail` (the step fails, no new item starts), `skip` (left out of the
//! results) or `collect` (its place holds `{"error": ...}`). The step's output is the list of
//! results in item order. Pure, like the rest of the engine.
//!
//! Fan-out is a window, not waves: the whole fan-out is one step of one wave (in plan mode, one
//! review after it). Under `fail`, the first item that fails for good stops new items and
//! retries (a retry already due is dropped, and an outcome judged after it in the same batch
//! schedules none; see `engine::tools_finished`); the calls running finish and are recorded
//! before the step fails.

use serde_json::{Value, json};

use crate::engine::{Invocation, Next, call_started, resolve_ref, resolve_value};
use crate::event::{Event, ToolError, ToolOutcome};
use crate::limits::Limits;
use crate::plan::{ForEach, ItemPolicy, PlanStep};
use crate::state::{Items, PlanRun, State, StepStatus, call_key};

/// A value's kind, for errors.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The call for item `k` (its `attempt`), or why its arguments cannot be made.
#[allow(clippy::too_many_arguments)]
fn item_call(
    state: &State,
    run: &PlanRun,
    step: &PlanStep,
    item: &Value,
    k: usize,
    attempt: u32,
    key: Option<&String>,
    delay_ms: u64,
    nth: u64,
) -> Result<Invocation, ToolError> {
    let args = resolve_value(state, run, &Value::Object(step.args.clone()), Some(item))
        .map_err(|e| ToolError::new("invalid_arguments", format!("item {k}: {e}")))?;
    let tool = step.tool.clone().unwrap_or_default();
    let idempotency_key = match (key, attempt > 1) {
        (Some(k), true) => k.clone(),
        _ => call_key(&state.session_id, nth, &tool, &args),
    };
    Ok(Invocation {
        call_id: format!("{}[{k}]#{attempt}", step.id),
        step: Some(step.id.clone()),
        item: Some(k),
        tool,
        args,
        attempt,
        idempotency_key,
        delay_ms,
    })
}

fn window(f: &ForEach, limits: &Limits) -> usize {
    f.max_parallel.unwrap_or(limits.max_parallel).max(1)
}

/// A fan-out step of a new wave begins: its start, how many items it has, and the calls of the
/// first items (or, for an empty list, its empty result).
pub(crate) fn begin(
    state: &State,
    run: &PlanRun,
    i: usize,
    limits: &Limits,
    nth: u64,
    events: &mut Vec<Event>,
    calls: &mut Vec<Invocation>,
) {
    let step = &run.plan.steps[i];
    let Some(f) = &step.for_each else { return };
    let list = match resolve_ref(state, run, &f.list, None) {
        Ok(Value::Array(list)) => list,
        _ => Vec::new(),
    };
    events.push(Event::StepStarted {
        step: step.id.clone(),
        attempt: 1,
    });
    events.push(Event::FanOutStarted {
        step: step.id.clone(),
        items: list.len(),
    });
    if list.is_empty() {
        events.push(Event::StepCompleted {
            step: step.id.clone(),
            output: json!([]),
            summary: Some("0 items".into()),
        });
        return;
    }
    let mut started = 0;
    for (k, item) in list.iter().enumerate().take(window(f, limits)) {
        match item_call(state, run, step, item, k, 1, None, 0, nth + started) {
            Ok(inv) => {
                events.push(call_started(&inv));
                calls.push(inv);
                started += 1;
            }
            Err(error) => {
                events.push(Event::ItemFailed {
                    step: step.id.clone(),
                    item: k,
                    error,
                });
                if f.on_error == ItemPolicy::Fail {
                    break;
                }
            }
        }
    }
}

/// The next move of the running fan-out steps of the open wave: start items while their window
/// has room (retries first), or end a step whose items are all settled. `None` when none of
/// them has anything to do now.
pub(crate) fn progress(state: &State, run: &PlanRun, limits: &Limits) -> Option<Next> {
    let mut events = Vec::new();
    let mut calls = Vec::new();
    for id in &state.waves.steps {
        let Some((i, r)) = run.step(id) else { continue };
        let step = &run.plan.steps[i];
        let (Some(f), Some(items)) = (&step.for_each, &r.items) else {
            continue;
        };
        if r.status != StepStatus::Running {
            continue;
        }
        let stopped = f.on_error == ItemPolicy::Fail && items.failed > 0;
        let before = events.len();
        if !stopped {
            let list = match resolve_ref(state, run, &f.list, None) {
                Ok(Value::Array(list)) => list,
                _ => Vec::new(),
            };
            let room = window(f, limits).saturating_sub(items.running.len());
            let due = items
                .retrying
                .iter()
                .map(|(&k, &d)| (k, d))
                .chain((items.next..items.len()).map(|k| (k, 0)))
                .take(room);
            for (k, delay) in due {
                let attempt = items.attempts.get(k).copied().unwrap_or(0) + 1;
                let call = match list.get(k) {
                    Some(item) => item_call(
                        state,
                        run,
                        step,
                        item,
                        k,
                        attempt,
                        items.keys.get(k).and_then(Option::as_ref),
                        delay,
                        state.calls.started + calls.len() as u64 + 1,
                    ),
                    None => Err(ToolError::new(
                        "invalid_arguments",
                        format!("item {k}: {} no longer holds it", f.list),
                    )),
                };
                match call {
                    Ok(inv) => {
                        events.push(call_started(&inv));
                        calls.push(inv);
                    }
                    Err(error) => {
                        events.push(Event::ItemFailed {
                            step: step.id.clone(),
                            item: k,
                            error,
                        });
                        if f.on_error == ItemPolicy::Fail {
                            break;
                        }
                    }
                }
            }
        }
        // A stopped step ends once no call of it runs: a retry still due is dropped, as no
        // call of a failed step starts.
        let settled = if stopped {
            items.running.is_empty()
        } else {
            items.idle() && items.next >= items.len()
        };
        if events.len() == before && settled {
            events.push(end(step, f, items));
        }
    }
    match (events.is_empty(), calls.is_empty()) {
        (true, _) => None,
        (false, true) => Some(Next::Record(events)),
        (false, false) => Some(Next::Start { events, calls }),
    }
}

/// The end of a fan-out step whose items are settled: its results, or its failure.
fn end(step: &PlanStep, f: &ForEach, items: &Items) -> Event {
    let n = items.len();
    let mut results = Vec::with_capacity(n);
    let mut ok = 0;
    let mut first_error: Option<(usize, &ToolError)> = None;
    for (k, done) in items.done.iter().enumerate() {
        match done {
            Some(ToolOutcome::Ok { output }) => {
                ok += 1;
                results.push(output.clone());
            }
            Some(ToolOutcome::Error { error }) => {
                first_error.get_or_insert((k, error));
                if f.on_error == ItemPolicy::Collect {
                    results.push(json!({"error": error.bounded().to_value()}));
                }
            }
            None => {}
        }
    }
    if let (ItemPolicy::Fail, Some((k, e))) = (f.on_error, first_error) {
        return Event::StepFailed {
            step: step.id.clone(),
            error: ToolError {
                kind: e.kind.clone(),
                message: format!("item {k} of {n} failed: {}", e.message),
                detail: e.detail.clone(),
                retryable: false,
            },
            handled: step.output.as_ref().is_some_and(|o| o.err.is_some()),
        };
    }
    let summary = if ok == n {
        format!("{n} items")
    } else {
        format!("{ok} of {n} items succeeded ({})", f.on_error.as_str())
    };
    Event::StepCompleted {
        step: step.id.clone(),
        output: Value::Array(results),
        summary: Some(summary),
    }
}

/// An item's call ended: a failure that may be retried is (within `max_step_attempts`),
/// unless the step has failed (`_onItemError: fail` and an item failed for good, here or in
/// `stopped`: the steps whose items failed for good earlier in the same batch of outcomes).
/// The item's outcome is recorded by its `tool_call_finished`.
pub(crate) fn item_finished(
    run: &PlanRun,
    limits: &Limits,
    step: &str,
    k: usize,
    outcome: &ToolOutcome,
    stopped: &mut Vec<String>,
) -> Vec<Event> {
    let ToolOutcome::Error { error } = outcome else {
        return Vec::new();
    };
    let Some((i, r)) = run.step(step) else {
        return Vec::new();
    };
    let Some(items) = r.items.as_ref() else {
        return Vec::new();
    };
    let fails_step = run.plan.steps[i]
        .for_each
        .as_ref()
        .is_some_and(|f| f.on_error == ItemPolicy::Fail);
    let failed = fails_step && (items.failed > 0 || stopped.iter().any(|s| s == step));
    let attempt = items.attempts.get(k).copied().unwrap_or(1);
    if error.retryable && attempt < limits.max_step_attempts && !failed {
        return vec![Event::ItemRetrying {
            step: step.to_owned(),
            item: k,
            attempt,
            error: error.clone(),
            delay_ms: limits.backoff_ms(attempt + 1),
        }];
    }
    if fails_step && !failed {
        stopped.push(step.to_owned());
    }
    Vec::new()
}
