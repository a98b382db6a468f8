//! A session's state: the fold of its events. `apply` is pure and does work proportional to the
//! event, never to the history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::{Event, RunStatus, SessionStatus, ToolError};
use crate::graph::Graph;
use crate::path;
use crate::plan::Plan;

/// A step's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepStatus {
    #[default]
    Pending,
    Running,
    Completed,
    Failed,
    Skipped,
    WaitingForUser,
}

impl StepStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Skipped)
    }
}

/// The run-time record of one step.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StepRun {
    pub status: StepStatus,
    pub attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// The failure went to the step's error path (its dependants are not blocked).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub handled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A retry is due after this many milliseconds.
    #[serde(skip)]
    pub retry_in_ms: Option<u64>,
    /// The tool call in flight.
    #[serde(skip)]
    pub call: Option<String>,
}

/// A plan being executed.
#[derive(Clone, Debug, Default)]
pub struct PlanRun {
    pub plan: Plan,
    pub graph: Graph,
    pub steps: Vec<StepRun>,
    pub index: HashMap<String, usize>,
    /// For each step: how many of its dependencies have not reached a terminal status.
    pub open_deps: Vec<usize>,
    /// Pending steps whose dependencies are all terminal and none failed unhandled, in plan
    /// order.
    pub candidates: BTreeSet<usize>,
    /// Steps with a retry due.
    pub retrying: BTreeSet<usize>,
}

impl PlanRun {
    fn new(plan: Plan) -> Self {
        let graph = Graph::build(&plan);
        let n = plan.steps.len();
        let open_deps: Vec<usize> = graph.deps.iter().map(Vec::len).collect();
        let candidates = (0..n).filter(|&i| open_deps[i] == 0).collect();
        let index = plan
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect();
        Self {
            plan,
            graph,
            steps: vec![StepRun::default(); n],
            index,
            open_deps,
            candidates,
            retrying: BTreeSet::new(),
        }
    }

    pub fn step(&self, id: &str) -> Option<(usize, &StepRun)> {
        let &i = self.index.get(id)?;
        Some((i, &self.steps[i]))
    }

    fn finish(&mut self, i: usize) {
        self.candidates.remove(&i);
        self.retrying.remove(&i);
        for k in 0..self.graph.dependants[i].len() {
            let d = self.graph.dependants[i][k];
            self.open_deps[d] = self.open_deps[d].saturating_sub(1);
            // A step behind an unhandled failure can never run: it is left out of the
            // candidates (the run's end skips it as blocked) so that `decide` does not look at
            // it again for every later wave.
            if self.open_deps[d] == 0
                && self.steps[d].status == StepStatus::Pending
                && !self.graph.deps[d]
                    .iter()
                    .any(|&j| self.steps[j].status == StepStatus::Failed && !self.steps[j].handled)
            {
                self.candidates.insert(d);
            }
        }
    }

    /// The plan with each step's status, as shown to people and models.
    pub fn view(&self) -> Value {
        Value::Array(
            self.plan
                .steps
                .iter()
                .zip(&self.steps)
                .map(|(s, r)| {
                    let mut call = s.to_call();
                    if let Value::Object(m) = &mut call {
                        m.insert(
                            "status".into(),
                            serde_json::to_value(r.status).unwrap_or_default(),
                        );
                        if let Some(reason) = &r.reason {
                            m.insert("reason".into(), Value::String(reason.clone()));
                        }
                    }
                    call
                })
                .collect(),
        )
    }
}

/// A call that was started and has not finished.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpenCall {
    pub step: Option<String>,
    pub tool: String,
    pub args: Value,
    pub attempt: u32,
    pub idempotency_key: String,
}

/// The state of a session: what every decision is made from.
#[derive(Clone, Debug, Default)]
pub struct State {
    pub session_id: String,
    pub agent: String,
    /// The last event applied.
    pub seq: u64,
    pub status: SessionStatus,
    pub input: Value,
    /// The State object that `†state.*` paths address.
    pub data: Value,
    pub plan: Option<PlanRun>,
    /// The wave in progress, if any.
    pub open_wave: Option<u32>,
    /// Waves started so far.
    pub waves: u32,
    pub open_calls: BTreeMap<String, OpenCall>,
    pub tool_invocations: u64,
    pub error: Option<String>,
}

impl State {
    pub fn new() -> Self {
        Self {
            data: Value::Object(Map::new()),
            ..Self::default()
        }
    }

    /// Folds a sequence of events into a fresh state.
    pub fn fold<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut s = Self::new();
        for e in events {
            s.apply(e);
        }
        s
    }

    /// The session's status once `events` are applied (without applying them).
    pub fn status_after(&self, events: &[Event]) -> SessionStatus {
        let mut status = self.status;
        for e in events {
            match e {
                Event::SessionStarted { .. } => status = SessionStatus::Running,
                Event::RunFinished { status: s, .. } => {
                    status = match s {
                        RunStatus::Completed => SessionStatus::Completed,
                        RunStatus::Failed => SessionStatus::Failed,
                    };
                }
                _ => {}
            }
        }
        status
    }

    /// Applies one event. Pure; the work done is proportional to the event, not the history.
    pub fn apply(&mut self, event: &Event) {
        self.seq += 1;
        match event {
            Event::SessionStarted {
                session_id,
                agent,
                input,
            } => {
                self.session_id.clone_from(session_id);
                self.agent.clone_from(agent);
                self.input = input.clone();
                self.status = SessionStatus::Running;
            }
            Event::PlanAccepted { plan } => {
                self.plan = Some(PlanRun::new(plan.clone()));
            }
            Event::WaveStarted { wave, .. } => {
                self.open_wave = Some(*wave);
                self.waves = *wave;
            }
            Event::StepStarted { step, attempt } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                {
                    let r = &mut p.steps[i];
                    r.status = StepStatus::Running;
                    r.attempts = *attempt;
                    r.retry_in_ms = None;
                    p.candidates.remove(&i);
                    p.retrying.remove(&i);
                }
            }
            Event::ToolCallStarted {
                call_id,
                step,
                tool,
                args,
                attempt,
                idempotency_key,
            } => {
                self.tool_invocations += 1;
                self.open_calls.insert(
                    call_id.clone(),
                    OpenCall {
                        step: step.clone(),
                        tool: tool.clone(),
                        args: args.clone(),
                        attempt: *attempt,
                        idempotency_key: idempotency_key.clone(),
                    },
                );
                if let (Some(p), Some(step)) = (&mut self.plan, step)
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].call = Some(call_id.clone());
                }
            }
            Event::ToolCallFinished { call_id, .. } => {
                if let Some(c) = self.open_calls.remove(call_id)
                    && let (Some(p), Some(step)) = (&mut self.plan, c.step)
                    && let Some(&i) = p.index.get(&step)
                {
                    p.steps[i].call = None;
                }
            }
            Event::StepRetrying {
                step,
                error,
                delay_ms,
                ..
            } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].retry_in_ms = Some(*delay_ms);
                    p.steps[i].error = Some(error.clone());
                    p.retrying.insert(i);
                }
            }
            Event::StepCompleted { step, output } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                {
                    if let Some(o) = &p.plan.steps[i].output {
                        path::set(&mut self.data, &o.ok, output.clone());
                    }
                    let r = &mut p.steps[i];
                    r.status = StepStatus::Completed;
                    r.output = Some(output.clone());
                    r.error = None;
                    p.finish(i);
                }
            }
            Event::StepFailed {
                step,
                error,
                handled,
            } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                {
                    if *handled
                        && let Some(err_path) =
                            p.plan.steps[i].output.as_ref().and_then(|o| o.err.as_ref())
                    {
                        path::set(&mut self.data, err_path, error.to_value());
                    }
                    let r = &mut p.steps[i];
                    r.status = StepStatus::Failed;
                    r.error = Some(error.clone());
                    r.handled = *handled;
                    p.finish(i);
                }
            }
            Event::StepSkipped { step, reason } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                {
                    let r = &mut p.steps[i];
                    r.status = StepStatus::Skipped;
                    r.reason = Some(reason.clone());
                    p.finish(i);
                }
            }
            Event::WaveFinished { .. } => {
                self.open_wave = None;
            }
            Event::RunFinished { status, error } => {
                self.status = match status {
                    RunStatus::Completed => SessionStatus::Completed,
                    RunStatus::Failed => SessionStatus::Failed,
                };
                self.error.clone_from(error);
            }
        }
    }
}
