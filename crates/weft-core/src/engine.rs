//! The plan engine's decisions: which steps run next, what a tool's outcome means for its step,
//! and when a run is over. Pure: the shell performs what `decide` asks and reports outcomes.
//!
//! One tool step, as the shell sees it:
//! 1. [`decide`] finds the step ready (its dependencies ended, the data it reads written, its
//!    `_when` true) and returns [`Next::Start`] with `wave_started`, `step_started` and
//!    `tool_call_started`.
//! 2. The shell stores those events and only then starts the call; calls of idempotent tools
//!    start first, their starts staged and stored with their outcomes when they finish at once
//!    (`weft_runtime`'s `Calls::start`).
//! 3. The outcome comes back; [`tools_finished`] turns the outcomes that ended together into
//!    `tool_call_finished` and `step_completed`, `step_retrying` or `step_failed` (each judged
//!    after the ones before it), committed as one batch.
//! 4. With no call in flight, `decide` closes the wave (`wave_finished`; in an agent, the review
//!    follows) and looks for the next one.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::event::{Event, RunStatus, ToolError, ToolOutcome};
use crate::limits::Limits;
use crate::path;
use crate::plan::{Plan, PlanStep, RefRoot, Reference};
use crate::state::{PlanRun, State, StepRun, StepStatus, call_key};
use crate::tool::ToolCatalog;

/// A tool call the shell must perform.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    /// The call's id (`step#attempt` for a plan step's call, the model's id for its own).
    pub call_id: String,
    /// The plan step the call serves; `None` for a model's own call.
    pub step: Option<String>,
    /// The item of a fan-out step the call serves.
    pub item: Option<usize>,
    /// The tool's name.
    pub tool: String,
    /// The arguments, references resolved.
    pub args: Value,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// The key the tool is given to recognise a repeat of the call; a retry keeps the first
    /// attempt's.
    pub idempotency_key: String,
    /// Wait this long before running (a retry's backoff).
    pub delay_ms: u64,
}

/// What must happen next.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Record these events (pure transitions: skips, wave bookkeeping, the end of the run).
    Record(Vec<Event>),
    /// Record these events (durably), then start these calls.
    Start {
        /// Events to append first (`tool_call_started` among them).
        events: Vec<Event>,
        /// The calls to perform, each reported with [`tool_finished`].
        calls: Vec<Invocation>,
    },
    /// Calls are in flight: wait for an outcome and report it with [`tool_finished`].
    Wait,
    /// A step without a literal tool call needs the step executor (agent plan mode).
    CallExecutor {
        /// The step's id.
        step: String,
    },
    /// Nothing more to do.
    Done,
}

/// Fills in each step's `_parallel` from its tool when the plan leaves it out, so the recorded
/// plan is self-contained.
pub fn normalize(plan: &mut Plan, tools: &dyn ToolCatalog) {
    for s in &mut plan.steps {
        if s.parallel.is_none() {
            let p = s
                .tool
                .as_deref()
                .and_then(|t| tools.tool_info(t))
                .is_some_and(|t| t.parallel);
            s.parallel = Some(p);
        }
    }
}

/// How a candidate step stands once its dependencies are terminal.
enum Readiness {
    Blocked,
    Skip(String),
    Fail(ToolError),
    Run(Value),
}

/// The value a reference names; `item` is the item a fan-out step's call serves (`†item`).
pub(crate) fn resolve_ref(
    state: &State,
    run: &PlanRun,
    r: &Reference,
    item: Option<&Value>,
) -> Result<Value, String> {
    let found = match &r.root {
        RefRoot::Item => item.and_then(|v| path::get(v, &r.path)),
        RefRoot::Input => path::get(&state.input, &r.path),
        RefRoot::State => path::get(&state.data, &r.path),
        RefRoot::Step(id) => run
            .step(id)
            .and_then(|(_, s)| s.output.as_ref())
            .and_then(|o| path::get(o, &r.path)),
    };
    found.cloned().ok_or_else(|| format!("{r} was not written"))
}

/// Resolves every reference inside an argument value (`item`: see [`resolve_ref`]).
pub(crate) fn resolve_value(
    state: &State,
    run: &PlanRun,
    v: &Value,
    item: Option<&Value>,
) -> Result<Value, String> {
    if let Some(r) = Reference::from_arg(v) {
        let r = r?;
        return resolve_ref(state, run, &r, item);
    }
    match v {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            for (k, x) in m {
                out.insert(k.clone(), resolve_value(state, run, x, item)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(a) => a
            .iter()
            .map(|x| resolve_value(state, run, x, item))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => Ok(other.clone()),
    }
}

/// The context a `_when` condition sees: the input, the State object and the steps it names.
fn condition_context(state: &State, run: &PlanRun, step: &PlanStep) -> Value {
    let mut steps = Map::new();
    if let Some(c) = &step.when {
        for r in &c.reads {
            if let RefRoot::Step(id) = &r.root
                && let Some((_, s)) = run.step(id)
                && let Some(o) = &s.output
            {
                steps.insert(id.clone(), o.clone());
            }
        }
    }
    serde_json::json!({"input": state.input, "state": state.data, "steps": steps})
}

fn readiness(state: &State, run: &PlanRun, i: usize) -> Readiness {
    for &d in &run.graph().deps[i] {
        let ds = &run.steps[d];
        if ds.status == StepStatus::Failed && !ds.handled {
            return Readiness::Blocked;
        }
    }
    let step = &run.plan.steps[i];
    for r in step.reads() {
        if matches!(r.root, RefRoot::Input | RefRoot::Item) {
            continue;
        }
        if let Some(c) = &step.when
            && c.reads.contains(&r)
        {
            continue;
        }
        if resolve_ref(state, run, &r, None).is_err() {
            return Readiness::Skip(format!("{r} was not written"));
        }
    }
    if let Some(c) = &step.when {
        match c.eval(&condition_context(state, run, step)) {
            Ok(true) => {}
            Ok(false) => return Readiness::Skip(format!("condition `{}` is false", c.source)),
            Err(e) => return Readiness::Fail(ToolError::new("condition", e)),
        }
    }
    if let Some(f) = &step.for_each {
        // Each item's arguments are made when its call starts.
        return match resolve_ref(state, run, &f.list, None) {
            Ok(Value::Array(_)) => Readiness::Run(Value::Null),
            Ok(other) => Readiness::Fail(ToolError::new(
                "invalid_arguments",
                format!(
                    "`_forEach`: {} is not a list (it is {})",
                    f.list,
                    crate::fan_out::kind_of(&other)
                ),
            )),
            Err(e) => Readiness::Skip(e),
        };
    }
    match resolve_value(state, run, &Value::Object(step.args.clone()), None) {
        Ok(args) => Readiness::Run(args),
        Err(e) => Readiness::Fail(ToolError::new("invalid_arguments", e)),
    }
}

/// Picks the wave from the runnable steps (in plan order): a step that is not parallel runs
/// alone; otherwise every runnable parallel step, up to `max_parallel`.
pub fn select_wave(runnable: &[usize], plan: &Plan, max_parallel: usize) -> Vec<usize> {
    let Some(&first) = runnable.first() else {
        return Vec::new();
    };
    if plan.steps[first].parallel != Some(true) {
        return vec![first];
    }
    runnable
        .iter()
        .copied()
        .filter(|&i| plan.steps[i].parallel == Some(true))
        .take(max_parallel.max(1))
        .collect()
}

/// A step's call. `nth`: the position its start will have among the session's tool call starts
/// (for a new key); a retry (`attempt` > 1) keeps the key of the step's first attempt.
fn invocation(
    state: &State,
    step: &PlanStep,
    run: &StepRun,
    attempt: u32,
    args: Value,
    delay_ms: u64,
    nth: u64,
) -> Invocation {
    let tool = step.tool.clone().unwrap_or_default();
    let idempotency_key = match (&run.key, attempt > 1) {
        (Some(k), true) => k.clone(),
        _ => call_key(&state.session_id, nth, &tool, &args),
    };
    Invocation {
        call_id: format!("{}#{}", step.id, attempt),
        step: Some(step.id.clone()),
        item: None,
        tool,
        args,
        attempt,
        idempotency_key,
        delay_ms,
    }
}

fn start_events(inv: &Invocation) -> [Event; 2] {
    [
        Event::StepStarted {
            step: inv.step.clone().unwrap_or_default(),
            attempt: inv.attempt,
        },
        call_started(inv),
    ]
}

/// The durable start of a call.
pub(crate) fn call_started(inv: &Invocation) -> Event {
    Event::ToolCallStarted {
        call_id: inv.call_id.clone(),
        step: inv.step.clone(),
        item: inv.item,
        tool: inv.tool.clone(),
        args: inv.args.clone(),
        attempt: inv.attempt,
        idempotency_key: inv.idempotency_key.clone(),
        untrusted_from: Vec::new(),
    }
}

/// Decides the next move of a plan run (no model involved).
pub fn decide(state: &State, limits: &Limits) -> Next {
    decide_execution(state, limits, false)
}

/// Decides the next move of plan execution. In an agent (`agent`), steps without a literal
/// tool call go to the step executor, and the end of execution hands over to the response
/// instead of ending the run.
pub fn decide_execution(state: &State, limits: &Limits, agent: bool) -> Next {
    if state.status.is_terminal() {
        return Next::Done;
    }
    let Some(run) = &state.plan else {
        return Next::Record(vec![Event::RunFinished {
            status: RunStatus::Failed,
            error: Some("no plan to run".into()),
            answer: None,
        }]);
    };
    // Retries that are due.
    if !run.retrying().is_empty() {
        let mut events = Vec::new();
        let mut calls = Vec::new();
        for &i in run.retrying() {
            let step = &run.plan.steps[i];
            let r = &run.steps[i];
            match resolve_value(state, run, &Value::Object(step.args.clone()), None) {
                Ok(args) => {
                    let nth = state.calls.started + calls.len() as u64 + 1;
                    let inv = invocation(
                        state,
                        step,
                        r,
                        r.attempts + 1,
                        args,
                        r.retry_in_ms.unwrap_or(0),
                        nth,
                    );
                    events.extend(start_events(&inv));
                    calls.push(inv);
                }
                Err(e) => events.push(Event::StepFailed {
                    step: step.id.clone(),
                    error: ToolError::new("invalid_arguments", e),
                    handled: false,
                }),
            }
        }
        return Next::Start { events, calls };
    }
    // Fan-out steps of the wave start items as calls finish, and end once all have.
    if let Some(next) = crate::fan_out::progress(state, run, limits) {
        return next;
    }
    if !state.calls.open.is_empty() {
        return Next::Wait;
    }
    if agent {
        for id in &state.waves.steps {
            let Some((i, r)) = run.step(id) else { continue };
            let step = &run.plan.steps[i];
            if r.status != StepStatus::Running || step.tool.is_some() {
                continue;
            }
            if let Some((tool, args)) = &r.next_call {
                let n = u32::try_from(r.signatures.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(1);
                // Each call the step executor chooses is a new logical call with its own key.
                let inv = Invocation {
                    call_id: format!("{}#{n}", step.id),
                    step: Some(step.id.clone()),
                    item: None,
                    tool: tool.clone(),
                    args: args.clone(),
                    attempt: n,
                    idempotency_key: call_key(
                        &state.session_id,
                        state.calls.started + 1,
                        tool,
                        args,
                    ),
                    delay_ms: 0,
                };
                let [_, started] = start_events(&inv);
                return Next::Start {
                    events: vec![started],
                    calls: vec![inv],
                };
            }
            return Next::CallExecutor {
                step: step.id.clone(),
            };
        }
    }
    // An agent reviews after each wave: steps the wave's outcomes rule out (data not written, a
    // false condition) are settled first, so the review sees them as skipped.
    if let Some(wave) = state.waves.open
        && !agent
    {
        return Next::Record(vec![Event::WaveFinished { wave }]);
    }
    // Candidates are looked at in plan order, only as far as the next wave needs.
    let mut settle = Vec::new();
    let mut runnable = Vec::new();
    let mut args_of = std::collections::HashMap::new();
    let quota = limits.max_parallel.max(1);
    for &i in run.candidates() {
        let step = &run.plan.steps[i];
        match readiness(state, run, i) {
            Readiness::Blocked => {}
            Readiness::Skip(reason) => settle.push(Event::StepSkipped {
                step: step.id.clone(),
                reason,
            }),
            Readiness::Fail(error) => settle.push(Event::StepFailed {
                step: step.id.clone(),
                handled: step.output.as_ref().is_some_and(|o| o.err.is_some()),
                error,
            }),
            Readiness::Run(args) => {
                let parallel = |k: usize| run.plan.steps[k].parallel == Some(true);
                if runnable.is_empty() || (parallel(runnable[0]) && parallel(i)) {
                    runnable.push(i);
                    args_of.insert(i, args);
                }
                let wave_full = !parallel(runnable[0]) || runnable.len() >= quota;
                if settle.is_empty() && wave_full {
                    break;
                }
            }
        }
    }
    if !settle.is_empty() {
        return Next::Record(settle);
    }
    if let Some(wave) = state.waves.open {
        return Next::Record(vec![Event::WaveFinished { wave }]);
    }
    if !runnable.is_empty() {
        if state.waves.started >= limits.max_waves {
            return finish(
                state,
                run,
                Some(format!(
                    "reached max_waves ({}) with steps still to run",
                    limits.max_waves
                )),
                agent,
            );
        }
        let wave = select_wave(&runnable, &run.plan, limits.max_parallel);
        let n = state.waves.started + 1;
        let mut events = vec![Event::WaveStarted {
            wave: n,
            steps: wave.iter().map(|&i| run.plan.steps[i].id.clone()).collect(),
        }];
        let mut calls = Vec::with_capacity(wave.len());
        for i in wave {
            let step = &run.plan.steps[i];
            if step.for_each.is_some() {
                let nth = state.calls.started + calls.len() as u64 + 1;
                crate::fan_out::begin(state, run, i, limits, nth, &mut events, &mut calls);
                continue;
            }
            if step.tool.is_none() {
                events.push(Event::StepStarted {
                    step: step.id.clone(),
                    attempt: 1,
                });
                continue;
            }
            let args = args_of.remove(&i).unwrap_or(Value::Null);
            let nth = state.calls.started + calls.len() as u64 + 1;
            let inv = invocation(state, step, &run.steps[i], 1, args, 0, nth);
            events.extend(start_events(&inv));
            calls.push(inv);
        }
        return Next::Start { events, calls };
    }
    finish(state, run, None, agent)
}

/// Ends execution: every step still pending is skipped with the reason. A plan run then
/// finishes; an agent goes on to its response.
fn finish(_state: &State, run: &PlanRun, error: Option<String>, agent: bool) -> Next {
    let mut events = Vec::new();
    for (i, r) in run.steps.iter().enumerate() {
        if r.status == StepStatus::Pending || r.status == StepStatus::WaitingForUser {
            let reason = blocked_reason(run, i).unwrap_or_else(|| {
                error
                    .clone()
                    .unwrap_or_else(|| "the run ended before it could run".into())
            });
            events.push(Event::StepSkipped {
                step: run.plan.steps[i].id.clone(),
                reason,
            });
        }
    }
    let failed: Vec<&str> = run
        .steps
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status == StepStatus::Failed && !r.handled)
        .map(|(i, _)| run.plan.steps[i].id.as_str())
        .collect();
    if agent {
        let reason = error.unwrap_or_else(|| match failed.is_empty() {
            true => "every step has finished".to_owned(),
            false => format!("no step can run any more; failed: {}", failed.join(", ")),
        });
        events.push(Event::ExecutionFinished { reason });
        return Next::Record(events);
    }
    let (status, error) = match (error, failed.is_empty()) {
        (Some(e), _) => (RunStatus::Failed, Some(e)),
        (None, true) => (RunStatus::Completed, None),
        (None, false) => (
            RunStatus::Failed,
            Some(format!("step(s) failed: {}", failed.join(", "))),
        ),
    };
    events.push(Event::RunFinished {
        status,
        error,
        answer: None,
    });
    Next::Record(events)
}

pub(crate) fn blocked_reason(run: &PlanRun, i: usize) -> Option<String> {
    let deps = &run.graph().deps[i];
    if let Some(&d) = deps
        .iter()
        .find(|&&d| run.steps[d].status == StepStatus::Failed && !run.steps[d].handled)
    {
        return Some(format!("blocked: step `{}` failed", run.plan.steps[d].id));
    }
    deps.iter()
        .find(|&&d| !run.steps[d].status.is_terminal())
        .map(|&d| format!("blocked: step `{}` could not run", run.plan.steps[d].id))
}

/// Turns a tool call's outcome into events: the call finished, and the step completed, will be
/// retried, or failed.
pub fn tool_finished(
    state: &State,
    limits: &Limits,
    call_id: &str,
    outcome: ToolOutcome,
    duration_ms: u64,
) -> Vec<Event> {
    finished(
        state,
        limits,
        call_id,
        outcome,
        duration_ms,
        &mut Vec::new(),
    )
}

/// Turns the outcomes of calls that ended together into events, as [`tool_finished`] does for
/// each, judged against `state` and the outcomes before it in the batch: once an item of a
/// fan-out step under `_onItemError: fail` has failed for good, the step schedules no retry of
/// another item.
pub fn tools_finished(
    state: &State,
    limits: &Limits,
    done: impl IntoIterator<Item = (String, ToolOutcome, u64)>,
) -> Vec<Event> {
    let mut stopped = Vec::new();
    let mut events = Vec::new();
    for (call_id, outcome, ms) in done {
        events.extend(finished(state, limits, &call_id, outcome, ms, &mut stopped));
    }
    events
}

fn finished(
    state: &State,
    limits: &Limits,
    call_id: &str,
    outcome: ToolOutcome,
    duration_ms: u64,
    stopped: &mut Vec<String>,
) -> Vec<Event> {
    let step_id = state.calls.open.get(call_id).and_then(|c| c.step.clone());
    let item = state.calls.open.get(call_id).and_then(|c| c.item);
    let mut events = vec![Event::ToolCallFinished {
        call_id: call_id.to_owned(),
        outcome: outcome.clone(),
        duration_ms,
    }];
    if let (Some(k), Some(step), Some(run)) = (item, &step_id, &state.plan) {
        events.extend(crate::fan_out::item_finished(
            run, limits, step, k, &outcome, stopped,
        ));
        return events;
    }
    if let Some(step_id) = step_id {
        events.extend(step_outcome(state, limits, &step_id, outcome));
    }
    events
}

/// What a plan step's call ending with `outcome` means for step `step_id`: it completes, goes
/// back to its executor, is retried or fails. Also what a refused repeat of an earlier call
/// means for it, with the earlier call's outcome (see [`crate::repeats`]).
pub fn step_outcome(
    state: &State,
    limits: &Limits,
    step_id: &str,
    outcome: ToolOutcome,
) -> Vec<Event> {
    let mut events = Vec::new();
    let step_id = step_id.to_owned();
    let Some(run) = &state.plan else {
        return events;
    };
    let Some((i, r)) = run.step(&step_id) else {
        return events;
    };
    let executor_step = run.plan.steps[i].tool.is_none();
    match outcome {
        ToolOutcome::Ok { output } => events.push(Event::StepCompleted {
            step: step_id,
            summary: Some(summarize(&output)),
            output,
        }),
        ToolOutcome::Error { error } if executor_step => {
            // The error goes back to the step executor, which may try something else.
            if r.failures + 1 >= limits.max_step_attempts {
                events.push(Event::StepFailed {
                    step: step_id,
                    error,
                    handled: false,
                });
            }
        }
        ToolOutcome::Error { error } => {
            if error.retryable && r.attempts < limits.max_step_attempts {
                events.push(Event::StepRetrying {
                    step: step_id,
                    attempt: r.attempts,
                    delay_ms: limits.backoff_ms(r.attempts + 1),
                    error,
                });
            } else {
                let handled = run.plan.steps[i]
                    .output
                    .as_ref()
                    .is_some_and(|o| o.err.is_some());
                events.push(Event::StepFailed {
                    step: step_id,
                    error,
                    handled,
                });
            }
        }
    }
    events
}

/// One wave of a dry run.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DryWave {
    /// The wave's number, from 1.
    pub wave: u32,
    /// The steps that would run in it, in plan order.
    pub steps: Vec<DryStep>,
}

/// A step as a dry run shows it.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DryStep {
    /// The step's id.
    pub id: String,
    /// The tool it calls, or `(step executor)` for a step without one.
    pub tool: String,
    /// Whether the step says it may run beside others (`_parallel: true`).
    pub parallel: bool,
    /// Why the step may be skipped at run time (its condition, or data that may not be written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditional: Option<String>,
}

/// The waves a plan would run in if every step completed, without running anything. Steps are
/// marked conditional when they have a `_when`, read an error path, or read data that only a
/// conditional step writes.
pub fn dry_run(plan: &Plan, limits: &Limits) -> Vec<DryWave> {
    let run = PlanRun::new_for_dry_run(plan.clone());
    let n = plan.steps.len();
    let mut conditional: Vec<Option<String>> = vec![None; n];
    let err_writers: Vec<&[String]> = plan
        .steps
        .iter()
        .filter_map(|s| s.output.as_ref().and_then(|o| o.err.as_deref()))
        .collect();
    let mut open: Vec<usize> = run.graph().deps.iter().map(Vec::len).collect();
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| open[i] == 0).collect();
    let mut waves = Vec::new();
    let mut wave_no = 0;
    while !ready.is_empty() {
        // Only the steps the wave can take, not every ready step: copying the whole ready set
        // for each wave made dry runs of wide plans quadratic.
        let parallel = |i: usize| plan.steps[i].parallel == Some(true);
        let list: Vec<usize> = match ready.first() {
            Some(&first) if parallel(first) => ready
                .iter()
                .copied()
                .filter(|&i| parallel(i))
                .take(limits.max_parallel.max(1))
                .collect(),
            Some(&first) => vec![first],
            None => Vec::new(),
        };
        let chosen = select_wave(&list, plan, limits.max_parallel);
        wave_no += 1;
        let mut steps = Vec::new();
        for &i in &chosen {
            ready.remove(&i);
            let s = &plan.steps[i];
            let mut why = s.when.as_ref().map(|c| format!("when {}", c.source));
            if why.is_none() {
                why = s.reads().iter().find_map(|r| {
                    (r.root == RefRoot::State
                        && err_writers.iter().any(|e| path::overlaps(e, &r.path)))
                    .then(|| format!("runs only if {r} is written (an error path)"))
                });
            }
            if why.is_none() {
                why = run.graph().deps[i]
                    .iter()
                    .find(|&&d| conditional[d].is_some())
                    .map(|&d| format!("after conditional step `{}`", plan.steps[d].id));
            }
            conditional[i].clone_from(&why);
            steps.push(DryStep {
                id: s.id.clone(),
                tool: s.tool.clone().unwrap_or_else(|| "(step executor)".into()),
                parallel: s.parallel == Some(true),
                conditional: why,
            });
            for &d in &run.graph().dependants[i] {
                open[d] -= 1;
                if open[d] == 0 {
                    ready.insert(d);
                }
            }
        }
        waves.push(DryWave {
            wave: wave_no,
            steps,
        });
    }
    waves
}

impl PlanRun {
    fn new_for_dry_run(plan: Plan) -> Self {
        let mut s = State::new();
        s.apply(&Event::PlanAccepted { plan });
        s.plan.unwrap_or_default()
    }
}

/// A short account of a result for people: the text, or compact JSON, cut at 200 characters.
pub fn summarize(v: &Value) -> String {
    let text = crate::model::value_text(v);
    if text.chars().count() <= 200 {
        return text;
    }
    let cut: String = text.chars().take(200).collect();
    format!("{cut}…")
}
