//! The plan run: the plan being executed, each step's record, and the readiness invariants
//! (open-dependency counters, candidates, retries due) that only this module changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::event::{Event, ToolError, ToolOutcome};
use crate::graph::Graph;
use crate::path;
use crate::plan::Plan;

use super::{OpenCall, call_signature};

/// A step's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepStatus {
    /// Not started yet (or waiting for a retry).
    #[default]
    Pending,
    /// An attempt is under way.
    Running,
    /// Done; its output was written.
    Completed,
    /// Failed for good.
    Failed,
    /// Will not run: its condition was false, its data was missing, or a step it needs failed.
    Skipped,
    /// Waits for a person's answer (a missing argument, a question, an approval).
    WaitingForUser,
}

impl StepStatus {
    /// Whether the step has its outcome for good: completed, failed or skipped.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Skipped)
    }
}

/// The run-time record of one step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRun {
    /// Where the step stands.
    pub status: StepStatus,
    /// Attempts started so far.
    pub attempts: u32,
    /// The step's result once it completed; `None` before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The error of the last failed attempt; `None` while none failed and once it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// The failure went to the step's error path (its dependants are not blocked).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handled: bool,
    /// Why the step was skipped; `None` unless it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A retry is due after this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    /// The tool call in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// The step's own log (executor decisions, tool results, a person's answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<Value>,
    /// Signatures of the tool calls made in this step (repeats are blocked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<String>,
    /// Failed actions of a step-executor step (bad replies, tool errors, blocked calls).
    pub failures: u32,
    /// The tool call the step executor chose, not yet started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_call: Option<(String, Value)>,
    /// The idempotency key of the step's last call; a retry of that call reuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A fan-out step's items (`_forEach`), once it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<Items>,
}

/// The items of a fan-out step: each one's call, attempts and outcome. Read back from a
/// snapshot only when its lists and indices fit together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredItems")]
pub struct Items {
    /// Each item's outcome once it has one for good, in item order.
    pub done: Vec<Option<ToolOutcome>>,
    /// Attempts made for each item.
    pub attempts: Vec<u32>,
    /// The idempotency key of each item's call (a retry reuses it).
    pub keys: Vec<Option<String>>,
    /// Items whose call runs.
    pub running: BTreeSet<usize>,
    /// Items to try again, with the delay before their next attempt.
    pub retrying: BTreeMap<usize, u64>,
    /// Items never started are those from here on.
    pub next: usize,
    /// Items that failed for good.
    pub failed: usize,
}

/// [`Items`] as it is serialised, checked before it is trusted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredItems {
    done: Vec<Option<ToolOutcome>>,
    attempts: Vec<u32>,
    keys: Vec<Option<String>>,
    running: BTreeSet<usize>,
    retrying: BTreeMap<usize, u64>,
    next: usize,
    failed: usize,
}

impl TryFrom<StoredItems> for Items {
    type Error = String;

    /// Refuses lists of different lengths and item indices past them (an index past the end
    /// would be a panic later, not an error now).
    fn try_from(s: StoredItems) -> Result<Self, String> {
        let n = s.done.len();
        if s.attempts.len() != n || s.keys.len() != n {
            return Err(format!(
                "a fan-out of {n} items has {} attempt counts and {} keys",
                s.attempts.len(),
                s.keys.len()
            ));
        }
        let past = s.running.iter().chain(s.retrying.keys()).find(|&&k| k >= n);
        if let Some(k) = past.copied().or((s.next > n).then_some(s.next)) {
            return Err(format!("item index {k} is past the fan-out's {n} items"));
        }
        if s.failed > n {
            return Err(format!("{} failed items of {n}", s.failed));
        }
        Ok(Self {
            done: s.done,
            attempts: s.attempts,
            keys: s.keys,
            running: s.running,
            retrying: s.retrying,
            next: s.next,
            failed: s.failed,
        })
    }
}

impl Items {
    /// `n` items, none started.
    pub fn new(n: usize) -> Self {
        Self {
            done: vec![None; n],
            attempts: vec![0; n],
            keys: vec![None; n],
            ..Self::default()
        }
    }

    /// How many items the fan-out has.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// Whether the fan-out has no item.
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    fn started(&mut self, k: usize, attempt: u32, key: &str) {
        if k >= self.len() {
            return;
        }
        self.running.insert(k);
        self.retrying.remove(&k);
        self.attempts[k] = attempt;
        self.keys[k] = Some(key.to_owned());
        self.next = self.next.max(k + 1);
    }

    fn finished(&mut self, k: usize, outcome: ToolOutcome) {
        if k >= self.len() {
            return;
        }
        self.running.remove(&k);
        if matches!(outcome, ToolOutcome::Error { .. }) {
            self.failed = self.failed.saturating_add(1);
        }
        self.done[k] = Some(outcome);
    }

    fn retry(&mut self, k: usize, delay_ms: u64) {
        if k >= self.len() {
            return;
        }
        if matches!(self.done[k], Some(ToolOutcome::Error { .. })) {
            self.failed = self.failed.saturating_sub(1);
        }
        self.done[k] = None;
        self.retrying.insert(k, delay_ms);
    }

    fn failed_without_call(&mut self, k: usize, error: ToolError) {
        if k >= self.len() {
            return;
        }
        self.next = self.next.max(k + 1);
        self.failed = self.failed.saturating_add(1);
        self.done[k] = Some(ToolOutcome::Error { error });
    }

    /// No item runs or waits for a retry.
    pub fn idle(&self) -> bool {
        self.running.is_empty() && self.retrying.is_empty()
    }
}

/// A plan being executed. Serialised without its graph and index, which are rebuilt from the
/// plan when it is read back (and the counters checked against it).
///
/// The plan is not changed in place once the run exists (a revision makes a new run): its JSON
/// text is made once, on the first serialisation, and reused by every later one (each snapshot
/// writes the whole run, and for a large plan the plan is most of it).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(try_from = "StoredPlanRun")]
pub struct PlanRun {
    /// The plan as accepted (and revised by replans).
    pub plan: Plan,
    #[serde(skip)]
    plan_text: PlanText,
    #[serde(skip)]
    graph: Graph,
    /// Each step's record, in the plan's order.
    pub steps: Vec<StepRun>,
    #[serde(skip)]
    index: HashMap<String, usize>,
    /// For each step: how many of its dependencies have not reached a terminal status.
    open_deps: Vec<usize>,
    /// Pending steps whose dependencies are all terminal and none failed unhandled, in plan
    /// order.
    candidates: BTreeSet<usize>,
    /// Steps with a retry due.
    retrying: BTreeSet<usize>,
}

/// The plan's JSON text, made on the first serialisation of its run (see [`PlanRun`]). Not part
/// of the run's value: two runs that differ only in whether it was made yet are equal.
#[derive(Clone, Debug, Default)]
struct PlanText(OnceLock<Arc<RawValue>>);

impl PartialEq for PlanText {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Serialize for PlanRun {
    /// The fields of `StoredPlanRun`, in its order; the plan as its kept JSON text.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let plan: &RawValue = match self.plan_text.0.get() {
            Some(text) => text,
            None => {
                let text = serde_json::to_string(&self.plan)
                    .and_then(RawValue::from_string)
                    .map_err(serde::ser::Error::custom)?;
                self.plan_text.0.get_or_init(|| Arc::from(text))
            }
        };
        let mut s = serializer.serialize_struct("PlanRun", 5)?;
        s.serialize_field("plan", plan)?;
        s.serialize_field("steps", &self.steps)?;
        s.serialize_field("open_deps", &self.open_deps)?;
        s.serialize_field("candidates", &self.candidates)?;
        s.serialize_field("retrying", &self.retrying)?;
        s.end()
    }
}

impl PlanRun {
    /// The plan's dependency graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// For each step: how many of its dependencies have not reached a terminal status.
    pub fn open_deps(&self) -> &[usize] {
        &self.open_deps
    }

    /// Pending steps whose dependencies are all terminal and none failed unhandled, in plan
    /// order: the only steps a wave may start.
    pub fn candidates(&self) -> &BTreeSet<usize> {
        &self.candidates
    }

    /// Steps with a retry due.
    pub fn retrying(&self) -> &BTreeSet<usize> {
        &self.retrying
    }

    /// The index of step `id` (the last one, if ids repeat).
    fn at(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// Applies what an event says about the plan's steps (`data`: the State object that steps'
    /// output paths write to). Events about no step of this plan change nothing.
    pub(super) fn apply(&mut self, event: &Event, data: &mut Value) {
        match event {
            Event::ModelReplied {
                reply,
                step: Some(step),
                ..
            } => {
                if let Some(i) = self.at(step) {
                    self.steps[i].log.push(
                        serde_json::json!({"executor": reply.content, "tool_calls": reply.tool_calls}),
                    );
                }
            }
            Event::ModelReplyRejected {
                reason,
                step: Some(step),
                ..
            } => {
                if let Some(i) = self.at(step) {
                    self.steps[i].failures = self.steps[i].failures.saturating_add(1);
                    self.steps[i]
                        .log
                        .push(serde_json::json!({"rejected": reason}));
                }
            }
            Event::StepAction {
                step,
                action,
                detail,
            } => {
                if let Some(i) = self.at(step) {
                    if action == "USE_TOOL"
                        && let Some(tool) = detail.get("tool").and_then(Value::as_str)
                    {
                        let args = detail.get("arguments").cloned().unwrap_or(Value::Null);
                        self.steps[i].next_call = Some((tool.to_owned(), args));
                    }
                    self.steps[i]
                        .log
                        .push(serde_json::json!({"action": action, "detail": detail}));
                }
            }
            Event::ToolCallBlocked {
                step: Some(step),
                tool,
                args,
                reason,
                ..
            } => {
                if let Some(i) = self.at(step) {
                    // The executor's call was refused (a repeat, a person's denial, untrusted
                    // data in a protected argument): it chooses again, the refusal in its log.
                    self.steps[i].next_call = None;
                    self.steps[i].failures = self.steps[i].failures.saturating_add(1);
                    self.steps[i].log.push(
                        serde_json::json!({"blocked": {"tool": tool, "args": args, "reason": reason}}),
                    );
                }
            }
            Event::StepStarted { step, attempt } => {
                if let Some(i) = self.at(step) {
                    let r = &mut self.steps[i];
                    r.status = StepStatus::Running;
                    r.attempts = *attempt;
                    r.retry_in_ms = None;
                    self.candidates.remove(&i);
                    self.retrying.remove(&i);
                }
            }
            Event::StepRetrying {
                step,
                error,
                delay_ms,
                ..
            } => {
                if let Some(i) = self.at(step) {
                    self.steps[i].retry_in_ms = Some(*delay_ms);
                    self.steps[i].error = Some(error.clone());
                    self.retrying.insert(i);
                }
            }
            Event::FanOutStarted { step, items } => {
                if let Some(i) = self.at(step) {
                    self.steps[i].items = Some(Items::new(*items));
                }
            }
            Event::ItemRetrying {
                step,
                item,
                delay_ms,
                ..
            } => {
                if let Some(i) = self.at(step)
                    && let Some(items) = &mut self.steps[i].items
                {
                    items.retry(*item, *delay_ms);
                }
            }
            Event::ItemFailed { step, item, error } => {
                if let Some(i) = self.at(step)
                    && let Some(items) = &mut self.steps[i].items
                {
                    items.failed_without_call(*item, error.clone());
                }
            }
            Event::StepCompleted { step, output, .. } => {
                if let Some(i) = self.at(step) {
                    if let Some(o) = &self.plan.steps[i].output {
                        path::set(data, &o.ok, output.clone());
                    }
                    let r = &mut self.steps[i];
                    r.status = StepStatus::Completed;
                    r.output = Some(output.clone());
                    r.error = None;
                    self.finish(i);
                }
            }
            Event::StepFailed {
                step,
                error,
                handled,
            } => {
                if let Some(i) = self.at(step) {
                    if *handled
                        && let Some(err_path) = self.plan.steps[i]
                            .output
                            .as_ref()
                            .and_then(|o| o.err.as_ref())
                    {
                        path::set(data, err_path, error.bounded().to_value());
                    }
                    let r = &mut self.steps[i];
                    r.status = StepStatus::Failed;
                    r.error = Some(error.clone());
                    r.handled = *handled;
                    self.finish(i);
                }
            }
            Event::StepSkipped { step, reason } => {
                if let Some(i) = self.at(step) {
                    let r = &mut self.steps[i];
                    r.status = StepStatus::Skipped;
                    r.reason = Some(reason.clone());
                    self.finish(i);
                }
            }
            _ => {}
        }
    }

    /// A call serving step `step` started. Returns whether it serves an item of a fan-out
    /// (whose record is the item's, not the step's).
    pub(super) fn call_started(&mut self, call_id: &str, step: &str, call: &OpenCall) -> bool {
        let Some(i) = self.at(step) else {
            return false;
        };
        if let Some(k) = call.item {
            if let Some(items) = &mut self.steps[i].items {
                items.started(k, call.attempt, &call.idempotency_key);
            }
            return true;
        }
        let r = &mut self.steps[i];
        r.signatures.push(call_signature(&call.tool, &call.args));
        r.next_call = None;
        r.key = Some(call.idempotency_key.clone());
        r.call = Some(call_id.to_owned());
        false
    }

    /// Call `c` of step `step` ended with `outcome`.
    pub(super) fn call_finished(&mut self, step: &str, c: &OpenCall, outcome: &ToolOutcome) {
        let Some(i) = self.at(step) else {
            return;
        };
        if let Some(k) = c.item {
            if let Some(items) = &mut self.steps[i].items {
                items.finished(k, outcome.clone());
            }
            return;
        }
        let r = &mut self.steps[i];
        r.call = None;
        if self.plan.steps[i].tool.is_none() {
            // The step executor sees a failure bounded, as a ReAct model does; the event keeps
            // it whole.
            let result = match outcome {
                ToolOutcome::Error { error } => ToolOutcome::Error {
                    error: error.bounded(),
                },
                ok @ ToolOutcome::Ok { .. } => ok.clone(),
            };
            r.log
                .push(serde_json::json!({"tool": c.tool, "args": c.args, "result": result}));
            if matches!(outcome, ToolOutcome::Error { .. }) {
                r.failures = r.failures.saturating_add(1);
            }
        }
    }

    /// Step `step` waits for a person: it is no candidate until they answer. Returns whether
    /// the step is one of this plan's.
    pub(super) fn step_waits(&mut self, step: &str) -> bool {
        let Some(i) = self.at(step) else {
            return false;
        };
        self.steps[i].status = StepStatus::WaitingForUser;
        self.candidates.remove(&i);
        true
    }

    /// A person answered `question` of step `step` with `text`: the step is pending again.
    pub(super) fn step_answered(&mut self, step: &str, question: &str, text: &str) {
        let Some(i) = self.at(step) else {
            return;
        };
        let r = &mut self.steps[i];
        r.status = StepStatus::Pending;
        r.log
            .push(serde_json::json!({"user_input": text, "question": question}));
        r.failures = 0;
        if self.open_deps[i] == 0 {
            self.candidates.insert(i);
        }
    }

    /// Replaces the steps that have not run (pending or waiting) by `new`. Completed, failed and
    /// skipped steps stay as they are; the new steps may depend on them.
    pub(super) fn revise(&mut self, new: &Plan) {
        let mut steps = Vec::new();
        let mut runs = Vec::new();
        for (s, r) in self.plan.steps.iter().zip(&self.steps) {
            if r.status.is_terminal() || r.status == StepStatus::Running {
                steps.push(s.clone());
                runs.push(r.clone());
            }
        }
        steps.extend(new.steps.iter().cloned());
        runs.resize(steps.len(), StepRun::default());
        let mut next = Self::new(Plan { steps });
        next.steps = runs;
        next.candidates.clear();
        for i in 0..next.steps.len() {
            next.open_deps[i] = next.graph.deps[i]
                .iter()
                .filter(|&&d| !next.steps[d].status.is_terminal())
                .count();
            if next.open_deps[i] == 0 && next.steps[i].status == StepStatus::Pending {
                next.candidates.insert(i);
            }
        }
        *self = next;
    }

    pub(super) fn new(plan: Plan) -> Self {
        let graph = Graph::build(&plan);
        let n = plan.steps.len();
        let open_deps: Vec<usize> = graph.deps.iter().map(Vec::len).collect();
        let candidates = (0..n).filter(|&i| open_deps[i] == 0).collect();
        let index = Self::index_of(&plan);
        Self {
            plan,
            plan_text: PlanText::default(),
            graph,
            steps: vec![StepRun::default(); n],
            index,
            open_deps,
            candidates,
            retrying: BTreeSet::new(),
        }
    }

    /// Step index by id (the last one, if ids repeat).
    fn index_of(plan: &Plan) -> HashMap<String, usize> {
        plan.steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect()
    }

    /// The step `id`'s position in the plan and its record; `None` when the plan has no such
    /// step.
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

/// A [`PlanRun`] as it is serialised: what the graph and index are rebuilt from.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredPlanRun {
    plan: Plan,
    steps: Vec<StepRun>,
    open_deps: Vec<usize>,
    candidates: BTreeSet<usize>,
    retrying: BTreeSet<usize>,
}

impl TryFrom<StoredPlanRun> for PlanRun {
    type Error = String;

    /// Rebuilds the graph and index, refusing counters that do not fit the plan (a step index
    /// past its end would be a panic later, not an error now).
    fn try_from(s: StoredPlanRun) -> Result<Self, String> {
        let n = s.plan.steps.len();
        if s.steps.len() != n || s.open_deps.len() != n {
            return Err(format!(
                "a plan of {n} steps has {} step records and {} dependency counters",
                s.steps.len(),
                s.open_deps.len()
            ));
        }
        if let Some(i) = s.candidates.iter().chain(&s.retrying).find(|&&i| i >= n) {
            return Err(format!("step index {i} is past the plan's {n} steps"));
        }
        Ok(Self {
            graph: Graph::build(&s.plan),
            index: Self::index_of(&s.plan),
            plan: s.plan,
            plan_text: PlanText::default(),
            steps: s.steps,
            open_deps: s.open_deps,
            candidates: s.candidates,
            retrying: s.retrying,
        })
    }
}

/// The waves of the plan run: the one in progress, how many started this turn, and the steps
/// of the last one started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waves {
    /// The wave in progress, if any.
    pub open: Option<u32>,
    /// Waves started in this turn.
    pub started: u32,
    /// The steps of the last wave started (kept after it ends, until the next one starts).
    pub steps: Vec<String>,
}

impl Waves {
    /// A new turn: no wave open and none started. The last wave's steps are kept: no decision
    /// reads them while no wave is open.
    pub(super) fn new_turn(&mut self) {
        self.open = None;
        self.started = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> PlanRun {
        let plan = Plan::from_value(&serde_json::json!([
            {"_id": "a", "_tool": "echo", "text": "x", "_outputPath": "\u{2020}state.a"},
            {"_id": "b", "_tool": "echo", "text": "\u{2020}state.a.text"}
        ]));
        match plan {
            Ok(p) => PlanRun::new(p),
            Err(problems) => panic!("the test plan is invalid: {problems:?}"),
        }
    }

    /// The kept text is the plan's own serialisation, the same at every write, and a run read
    /// back from it equals the run written (as the derived form did before the text was kept).
    #[test]
    fn the_plan_text_is_kept_and_reads_back() -> Result<(), serde_json::Error> {
        let run = run();
        let first = serde_json::to_string(&run)?;
        let second = serde_json::to_string(&run)?;
        assert_eq!(first, second);
        let value = serde_json::to_value(&run)?;
        assert_eq!(value["plan"], serde_json::to_value(&run.plan)?);
        let keys: Vec<&str> = value
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            ["plan", "steps", "open_deps", "candidates", "retrying"]
        );
        let back: PlanRun = serde_json::from_str(&first)?;
        assert_eq!(back, run);
        assert_eq!(serde_json::to_string(&back)?, first);
        Ok(())
    }

    /// A revised run writes its new plan, not the text kept for the old one.
    #[test]
    fn a_revision_writes_the_new_plan() -> Result<(), serde_json::Error> {
        let mut run = run();
        let _ = serde_json::to_string(&run)?;
        let new = Plan::from_value_after(
            &serde_json::json!([{"_id": "c", "_tool": "echo", "text": "y"}]),
            &["a", "b"],
        );
        let Ok(new) = new else {
            panic!("the revision is invalid: {new:?}");
        };
        run.revise(&new);
        let value = serde_json::to_value(&run)?;
        assert_eq!(value["plan"], serde_json::to_value(&run.plan)?);
        Ok(())
    }
}
