//! A session's state: the fold of its events. `apply` is pure and does work proportional to the
//! event, never to the history.
//!
//! **Serialised for snapshots, with a version.** `State` is serialisable (serde, JSON) so that a
//! store can keep a snapshot of it and a load can fold only the events after the snapshot (see
//! [`crate::snapshot`]). The conversation ([`State::history`]) is left out of that form: a
//! snapshot keeps it in parts of its own, each written once. A snapshot is used only when its
//! version is [`SNAPSHOT_VERSION`]; any other is ignored and the session is folded from its log,
//! which stays the truth.
//!
//! **A change of State's shape bumps [`SNAPSHOT_VERSION`]**: a field added, removed, renamed or
//! given another type or meaning, here or in a type State holds (`PlanRun`, `StepRun`,
//! `OpenCall`, ...), and a change of what `apply` makes of an event. Fields carry no
//! `#[serde(default)]` unless they are left out when empty, so a snapshot written before a field
//! existed fails to decode (and is refolded) even when the bump is forgotten; the snapshot tests
//! in `weft-runtime` compare every snapshot with the fold of the same log.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::agent::Mode;
use crate::event::{
    Event, InputRequest, RecalledMemory, ResponseVerdict, ReviewDecision, RunStatus, SessionStatus,
    ToolError, ToolOutcome,
};
use crate::graph::Graph;
use crate::history::History;
use crate::model::{Message, Purpose, Usage};
use crate::path;
use crate::plan::{Plan, PlanProblem};
use crate::workflow::WorkflowRun;

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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRun {
    pub status: StepStatus,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// The failure went to the step's error path (its dependants are not blocked).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handled: bool,
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
    pub fn new(n: usize) -> Self {
        Self {
            done: vec![None; n],
            attempts: vec![0; n],
            keys: vec![None; n],
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.done.len()
    }

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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredPlanRun")]
pub struct PlanRun {
    pub plan: Plan,
    #[serde(skip)]
    pub graph: Graph,
    pub steps: Vec<StepRun>,
    #[serde(skip)]
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
    /// Replaces the steps that have not run (pending or waiting) by `new`. Completed, failed and
    /// skipped steps stay as they are; the new steps may depend on them.
    fn revise(&mut self, new: &Plan) {
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

    fn new(plan: Plan) -> Self {
        let graph = Graph::build(&plan);
        let n = plan.steps.len();
        let open_deps: Vec<usize> = graph.deps.iter().map(Vec::len).collect();
        let candidates = (0..n).filter(|&i| open_deps[i] == 0).collect();
        let index = Self::index_of(&plan);
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

    /// Step index by id (the last one, if ids repeat).
    fn index_of(plan: &Plan) -> HashMap<String, usize> {
        plan.steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect()
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
            steps: s.steps,
            open_deps: s.open_deps,
            candidates: s.candidates,
            retrying: s.retrying,
        })
    }
}

/// A call that was started and has not finished.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenCall {
    pub step: Option<String>,
    /// The item of a fan-out step the call serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
    pub tool: String,
    pub args: Value,
    pub attempt: u32,
    pub idempotency_key: String,
}

/// The version of State's serialised form (and of what `apply` makes of events) that snapshots
/// are written and read at. Bump it with every change of State's shape (see the module's
/// documentation); a snapshot of another version is ignored and the log is folded.
pub const SNAPSHOT_VERSION: u32 = 3;
/// A conversation's compacted part: requests carry `summary` in place of the messages before
/// `upto` (an index into [`State::history`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    pub upto: usize,
    pub summary: String,
}

/// The state of a session: what every decision is made from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// The steps of the wave in progress.
    pub wave_steps: Vec<String>,
    pub open_calls: BTreeMap<String, OpenCall>,
    pub tool_invocations: u64,
    pub error: Option<String>,

    // The agent loop.
    /// The agent's mode; `None` for a bare plan run.
    pub mode: Option<Mode>,
    pub phase: Phase,
    /// Turns started (tasks given).
    pub turn: u32,
    /// The current task.
    pub task: Option<String>,
    /// The conversation (ReAct) across turns, shared with the requests built from it. Not in
    /// the serialised form: a snapshot keeps it in parts of its own ([`crate::snapshot`]), and a
    /// state loaded from one holds it from its window on ([`History::window`]).
    #[serde(skip)]
    pub history: History,
    /// The summary that stands for the conversation's older messages in requests.
    pub compaction: Option<Compaction>,
    /// Earlier turns' tasks and answers (the memory a later turn sees). In plan mode the
    /// conversation holds them too, as a user message and an assistant message each.
    pub memory: Vec<(String, Option<String>)>,
    /// The text (a new task, or a workflow's next message) whose long-term memories have not
    /// been searched for yet; the search happens only for an agent that recalls memories.
    pub recall_due: Option<String>,
    /// The long-term memories recalled for the current turn, as its requests carry them.
    pub recalled: Vec<RecalledMemory>,
    pub model_calls: u32,
    pub purpose_calls: BTreeMap<Purpose, u32>,
    pub usage: Usage,
    /// The problems of the last plan rejected.
    pub last_problems: Vec<PlanProblem>,
    pub replans: u32,
    pub replan_reason: Option<String>,
    /// Model turns in the current ReAct turn.
    pub iterations: u32,
    /// Consecutive unusable replies (prose, bad JSON, rejected plans: one count for all) and
    /// model failures.
    pub rejections: u32,
    pub model_failures: u32,
    /// Feedback for the next model call (why the last reply was refused).
    pub feedback: Option<String>,
    pub waiting: Option<InputRequest>,
    /// The phase to return to when the person answers.
    pub resume_phase: Phase,
    /// Answers of a person in this turn (the review and resolver see them).
    pub user_inputs: Vec<String>,
    pub reviews: Vec<(ReviewDecision, String)>,
    pub drafts: Vec<String>,
    pub response_feedback: Option<String>,
    pub answer: Option<String>,
    /// Tool calls of the model waiting for a person's approval (ReAct).
    pub approved_calls: Vec<String>,
    /// Where a workflow session stands (workflow mode).
    pub workflow: WorkflowRun,
}

/// A tool call's signature: its name and canonical arguments (object keys sorted).
pub fn call_signature(tool: &str, args: &Value) -> String {
    fn canon(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> =
                    m.iter().map(|(k, v)| (k, canon(v))).collect();
                serde_json::to_value(sorted).unwrap_or(Value::Null)
            }
            Value::Array(a) => Value::Array(a.iter().map(canon).collect()),
            other => other.clone(),
        }
    }
    format!("{tool}:{}", canon(args))
}

/// The idempotency key of a new logical tool call: the session, the call's position among the
/// session's tool call starts (`nth`: its start is the session's nth `tool_call_started`), and
/// a digest of the call (tool and canonical arguments).
///
/// No two calls of a session get the same key, across turns, replans and forks (a fork has its
/// own session id), because the count of starts only grows. The digest covers the one case
/// where a position is used twice: starts that were staged and lost in a crash (calls of
/// idempotent tools, see ARCHITECTURE.md) free their positions, and a different call made in
/// their place must not inherit a key a server may have seen. Retries and re-runs after a crash
/// reuse the key recorded in the first start instead of asking for a new one.
pub fn call_key(session_id: &str, nth: u64, tool: &str, args: &Value) -> String {
    // FNV-1a, 64 bits: stable across builds and platforms (std's hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in call_signature(tool, args).bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{session_id}:{nth}:{h:016x}")
}

/// A value as text for a model: strings as they are, everything else as JSON.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Where the agent loop stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Idle,
    Planning,
    Executing,
    Reviewing,
    Responding,
    ReviewingResponse,
    React,
    Finished,
}

impl State {
    pub fn new() -> Self {
        Self {
            data: Value::Object(Map::new()),
            ..Self::default()
        }
    }

    /// Whether a call serving `step` is a workflow step's call of its agent (a workflow's calls
    /// name a step only then; the model's own calls name none).
    fn delegates(&self, step: Option<&str>) -> bool {
        self.mode == Some(Mode::Workflow) && self.plan.is_none() && step.is_some()
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
                Event::SessionStarted { .. }
                | Event::TurnStarted { .. }
                | Event::UserReplied { .. } => {
                    status = SessionStatus::Running;
                }
                Event::WaitingForUser { .. } => status = SessionStatus::WaitingForUser,
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
        self.seq = self.seq.saturating_add(1);
        match event {
            Event::SessionStarted {
                session_id,
                agent,
                input,
                mode,
                ..
            } => {
                self.session_id.clone_from(session_id);
                self.agent.clone_from(agent);
                self.input = input.clone();
                self.status = SessionStatus::Running;
                self.mode = *mode;
            }
            Event::TurnStarted { task, input } => {
                if let Some(prev) = self.task.take() {
                    if self.mode == Some(Mode::Plan) {
                        // Plan mode's conversation is its turns: what later planners and
                        // answers see (and compaction bounds).
                        let answer = match (&self.answer, &self.error) {
                            (Some(a), _) => a.clone(),
                            (None, Some(e)) => format!("(the task ended without an answer: {e})"),
                            (None, None) => "(the task ended without an answer)".to_owned(),
                        };
                        self.history.extend([
                            Message::User {
                                content: prev.clone(),
                            },
                            Message::Assistant {
                                content: answer,
                                tool_calls: Vec::new(),
                            },
                        ]);
                    }
                    self.memory.push((prev, self.answer.take()));
                }
                self.recall_due = Some(task.clone());
                self.recalled.clear();
                self.task = Some(task.clone());
                if !input.is_null() {
                    self.input = input.clone();
                }
                self.turn = self.turn.saturating_add(1);
                self.status = SessionStatus::Running;
                self.error = None;
                self.answer = None;
                self.plan = None;
                self.open_wave = None;
                self.waves = 0;
                self.last_problems.clear();
                self.replans = 0;
                self.replan_reason = None;
                self.iterations = 0;
                self.rejections = 0;
                self.model_failures = 0;
                self.feedback = None;
                self.waiting = None;
                self.user_inputs.clear();
                self.reviews.clear();
                self.drafts.clear();
                self.response_feedback = None;
                self.workflow.message_in();
                self.phase = match self.mode {
                    Some(Mode::Plan) => Phase::Planning,
                    _ => Phase::React,
                };
                if self.phase == Phase::React {
                    self.history.push(Message::User {
                        content: task.clone(),
                    });
                }
            }
            Event::ModelReplied {
                purpose,
                reply,
                step,
            } => {
                self.usage.add(&reply.usage);
                self.model_calls = self.model_calls.saturating_add(1);
                let calls = self.purpose_calls.entry(*purpose).or_default();
                *calls = calls.saturating_add(1);
                self.model_failures = 0;
                if *purpose == Purpose::Workflow {
                    self.workflow.turns = self.workflow.turns.saturating_add(1);
                }
                if *purpose == Purpose::React || *purpose == Purpose::Workflow {
                    self.iterations = self.iterations.saturating_add(1);
                    self.history.push(Message::Assistant {
                        content: reply.content.clone(),
                        tool_calls: reply.tool_calls.clone(),
                    });
                }
                if let (Some(step), Some(p)) = (step, &mut self.plan)
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i]
                        .log
                        .push(serde_json::json!({"executor": reply.content, "tool_calls": reply.tool_calls}));
                }
            }
            Event::ModelReplyRejected {
                reason,
                step,
                purpose,
            } => {
                self.rejections = self.rejections.saturating_add(1);
                self.feedback = Some(reason.clone());
                if let (Some(step), Some(p)) = (step, &mut self.plan)
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].failures = p.steps[i].failures.saturating_add(1);
                    p.steps[i].log.push(serde_json::json!({"rejected": reason}));
                }
                if matches!(purpose, Purpose::React | Purpose::Workflow) {
                    self.history.push(Message::User {
                        content: format!("[weft] Your last reply could not be used: {reason}"),
                    });
                }
            }
            Event::ModelFailed { error, usage, .. } => {
                self.usage.add(usage);
                self.model_failures = self.model_failures.saturating_add(1);
                self.error = Some(error.clone());
            }
            Event::PlanRejected { problems } => {
                self.rejections = self.rejections.saturating_add(1);
                self.last_problems.clone_from(problems);
                let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
                self.feedback = Some(text.join("\n"));
            }
            Event::PlanRevised { plan, reason } => {
                match &mut self.plan {
                    Some(p) => p.revise(plan),
                    None => self.plan = Some(PlanRun::new(plan.clone())),
                }
                self.replans = self.replans.saturating_add(1);
                self.replan_reason = Some(reason.clone());
                self.phase = Phase::Executing;
                self.feedback = None;
                self.rejections = 0;
            }
            Event::StepAction {
                step,
                action,
                detail,
            } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                {
                    if action == "USE_TOOL"
                        && let Some(tool) = detail.get("tool").and_then(Value::as_str)
                    {
                        let args = detail.get("arguments").cloned().unwrap_or(Value::Null);
                        p.steps[i].next_call = Some((tool.to_owned(), args));
                    }
                    p.steps[i]
                        .log
                        .push(serde_json::json!({"action": action, "detail": detail}));
                }
                self.rejections = 0;
            }
            Event::ToolCallBlocked {
                step,
                tool,
                args,
                reason,
                call_id,
            } => {
                if let (Some(step), Some(p)) = (step, &mut self.plan)
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].failures = p.steps[i].failures.saturating_add(1);
                    p.steps[i]
                        .log
                        .push(serde_json::json!({"blocked": {"tool": tool, "args": args, "reason": reason}}));
                }
                if let Some(id) = call_id {
                    self.history.push(Message::Tool {
                        call_id: id.clone(),
                        name: tool.clone(),
                        content: format!("refused: {reason}"),
                        is_error: true,
                    });
                }
            }
            Event::ReviewDecided { decision, reason } => {
                self.reviews.push((*decision, reason.clone()));
                self.rejections = 0;
                self.phase = match decision {
                    ReviewDecision::Continue => Phase::Executing,
                    ReviewDecision::Replan => {
                        self.replan_reason = Some(reason.clone());
                        Phase::Planning
                    }
                    ReviewDecision::FinalResponse | ReviewDecision::CannotComplete => {
                        Phase::Responding
                    }
                    ReviewDecision::AskUser => Phase::Reviewing,
                };
            }
            Event::AnswerDrafted { text, .. } => {
                self.drafts.push(text.clone());
                self.rejections = 0;
                self.phase = Phase::ReviewingResponse;
            }
            Event::ResponseReviewed { verdict, feedback } => {
                self.rejections = 0;
                if matches!(verdict, ResponseVerdict::Refine | ResponseVerdict::AskUser) {
                    self.response_feedback = Some(feedback.clone());
                    self.phase = Phase::Responding;
                }
            }
            Event::WaitingForUser { request } => {
                self.status = SessionStatus::WaitingForUser;
                self.resume_phase = self.phase;
                if let (Some(step), Some(p)) = (&request.step, &mut self.plan)
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].status = StepStatus::WaitingForUser;
                    p.candidates.remove(&i);
                    // The step ran alone in its wave (or had not started): the wave is over.
                    self.open_wave = None;
                }
                self.waiting = Some(request.clone());
            }
            Event::UserReplied { text } => {
                self.status = SessionStatus::Running;
                self.user_inputs.push(text.clone());
                if let Some(req) = self.waiting.take() {
                    if let (Some(step), Some(p)) = (&req.step, &mut self.plan)
                        && let Some(&i) = p.index.get(step)
                    {
                        let r = &mut p.steps[i];
                        r.status = StepStatus::Pending;
                        r.log.push(
                            serde_json::json!({"user_input": text, "question": req.question}),
                        );
                        r.failures = 0;
                        if p.open_deps[i] == 0 {
                            p.candidates.insert(i);
                        }
                    }
                    if req.kind == "question"
                        && let Some(id) = &req.call_id
                    {
                        self.history.push(Message::Tool {
                            call_id: id.clone(),
                            name: req.tool.clone().unwrap_or_else(|| "ask_user".into()),
                            content: serde_json::json!({"answer": text}).to_string(),
                            is_error: false,
                        });
                    }
                    if req.kind == "tool_approval"
                        && let Some(id) = &req.call_id
                    {
                        self.approved_calls.push(format!("{id}={text}"));
                    }
                    if req.kind == "message" {
                        // A workflow waited for the user's next message: it enters anew.
                        self.workflow.message_in();
                        self.recall_due = Some(text.clone());
                        self.recalled.clear();
                        self.history.push(Message::User {
                            content: text.clone(),
                        });
                    }
                } else if self.mode == Some(Mode::React) {
                    self.history.push(Message::User {
                        content: text.clone(),
                    });
                }
                self.phase = self.resume_phase;
            }
            Event::HistoryCompacted { upto, summary } => {
                self.rejections = 0;
                self.feedback = None;
                self.compaction = Some(Compaction {
                    upto: usize::try_from(*upto)
                        .unwrap_or(usize::MAX)
                        .min(self.history.len()),
                    summary: summary.clone(),
                });
            }
            Event::MemoriesRecalled { memories, .. } => {
                self.recall_due = None;
                self.recalled.clone_from(memories);
            }
            Event::MessagesImported { messages } => {
                self.history.extend(messages.iter().cloned());
            }
            // A marker for clients: nothing to decide from.
            Event::RunStarted { .. } => {}
            Event::TextDelta { .. } => {
                // Never stored: it does not count as a position in the log.
                self.seq = self.seq.saturating_sub(1);
            }
            Event::PlanAccepted { plan } => {
                self.plan = Some(PlanRun::new(plan.clone()));
                self.feedback = None;
                self.rejections = 0;
                if self.mode == Some(Mode::Plan) {
                    self.phase = Phase::Executing;
                }
            }
            Event::WaveStarted { wave, steps } => {
                self.open_wave = Some(*wave);
                self.waves = *wave;
                self.wave_steps.clone_from(steps);
            }
            Event::ExecutionFinished { .. } => {
                self.phase = Phase::Responding;
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
                item,
                tool,
                args,
                attempt,
                idempotency_key,
            } => {
                self.tool_invocations = self.tool_invocations.saturating_add(1);
                self.open_calls.insert(
                    call_id.clone(),
                    OpenCall {
                        step: step.clone(),
                        item: *item,
                        tool: tool.clone(),
                        args: args.clone(),
                        attempt: *attempt,
                        idempotency_key: idempotency_key.clone(),
                    },
                );
                if let (Some(k), Some(step), Some(p)) = (item, step, &mut self.plan)
                    && let Some(&i) = p.index.get(step)
                {
                    if let Some(items) = &mut p.steps[i].items {
                        items.started(*k, *attempt, idempotency_key);
                    }
                    return;
                }
                if let (Some(step), Some(p)) = (step, &mut self.plan)
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].signatures.push(call_signature(tool, args));
                    p.steps[i].next_call = None;
                    p.steps[i].key = Some(idempotency_key.clone());
                }
                if let (Some(p), Some(step)) = (&mut self.plan, step)
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].call = Some(call_id.clone());
                }
                if self.delegates(step.as_deref()) {
                    self.workflow.delegating = true;
                }
            }
            Event::ToolCallFinished {
                call_id, outcome, ..
            } => {
                let Some(c) = self.open_calls.remove(call_id) else {
                    return;
                };
                if self.delegates(c.step.as_deref()) {
                    self.workflow.delegating = false;
                    self.workflow.delegated = Some(outcome.clone());
                    return;
                }
                if let (Some(k), Some(step), Some(p)) = (c.item, &c.step, &mut self.plan) {
                    if let Some(&i) = p.index.get(step)
                        && let Some(items) = &mut p.steps[i].items
                    {
                        items.finished(k, outcome.clone());
                    }
                    return;
                }
                match (&mut self.plan, &c.step) {
                    (Some(p), Some(step)) => {
                        if let Some(&i) = p.index.get(step) {
                            let r = &mut p.steps[i];
                            r.call = None;
                            if p.plan.steps[i].tool.is_none() {
                                // The step executor sees a failure bounded, as a ReAct
                                // model does; the event keeps it whole.
                                let result = match outcome {
                                    ToolOutcome::Error { error } => ToolOutcome::Error {
                                        error: error.bounded(),
                                    },
                                    ok @ ToolOutcome::Ok { .. } => ok.clone(),
                                };
                                r.log.push(serde_json::json!({"tool": c.tool, "args": c.args, "result": result}));
                                if matches!(outcome, ToolOutcome::Error { .. }) {
                                    r.failures = r.failures.saturating_add(1);
                                }
                            }
                        }
                    }
                    _ => {
                        let (content, is_error) = match outcome {
                            ToolOutcome::Ok { output } => (value_text(output), false),
                            ToolOutcome::Error { error } => {
                                (error.bounded().to_value().to_string(), true)
                            }
                        };
                        self.history.push(Message::Tool {
                            call_id: call_id.clone(),
                            name: c.tool.clone(),
                            content,
                            is_error,
                        });
                    }
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
            Event::FanOutStarted { step, items } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                {
                    p.steps[i].items = Some(Items::new(*items));
                }
            }
            Event::ItemRetrying {
                step,
                item,
                delay_ms,
                ..
            } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                    && let Some(items) = &mut p.steps[i].items
                {
                    items.retry(*item, *delay_ms);
                }
            }
            Event::ItemFailed { step, item, error } => {
                if let Some(p) = &mut self.plan
                    && let Some(&i) = p.index.get(step)
                    && let Some(items) = &mut p.steps[i].items
                {
                    items.failed_without_call(*item, error.clone());
                }
            }
            Event::StepCompleted { step, output, .. } => {
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
                        path::set(&mut self.data, err_path, error.bounded().to_value());
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
                if self.mode == Some(Mode::Plan) {
                    self.phase = Phase::Reviewing;
                }
            }
            Event::WorkflowStepEntered { step, .. } => {
                self.workflow.enter(step);
            }
            Event::WorkflowOutputAccepted {
                step,
                output,
                assigned,
                reply,
            } => {
                self.workflow.outputs.insert(step.clone(), output.clone());
                for (at, v) in assigned {
                    if let Some(p) = path::parse(at) {
                        path::set(&mut self.data, &p, v.clone());
                    }
                }
                if reply.is_some() {
                    self.workflow.reply.clone_from(reply);
                }
            }
            Event::WorkflowOutputRejected { step, reason, .. } => {
                self.workflow.rejected = self.workflow.rejected.saturating_add(1);
                self.workflow.feedback = Some(reason.clone());
                // A delegated step asks its agent again (the next task says why); a model is
                // told in the conversation.
                if self.workflow.delegated.take().is_none() {
                    self.history.push(Message::User {
                        content: format!(
                            "[weft] Your output for step `{step}` could not be used: {reason}. Reply again with the step's output."
                        ),
                    });
                }
            }
            Event::WorkflowTransition { to, .. } => {
                self.workflow.transitions = self.workflow.transitions.saturating_add(1);
                if to == crate::workflow::END || to == crate::workflow::WAIT {
                    self.workflow.step = None;
                }
            }
            Event::RunFinished {
                status,
                error,
                answer,
            } => {
                self.status = match status {
                    RunStatus::Completed => SessionStatus::Completed,
                    RunStatus::Failed => SessionStatus::Failed,
                };
                self.error.clone_from(error);
                self.answer.clone_from(answer);
                self.phase = Phase::Finished;
            }
        }
    }
}
