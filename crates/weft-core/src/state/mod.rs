//! A session's state: the fold of its events. `apply` is pure and does work proportional to the
//! event, never to the history.
//!
//! **In parts, each with its own `apply`.** [`State`] holds the session's identity and where
//! its loop stands, and parts that each keep what one concern needs: the current [`Turn`]
//! (replaced as one value when a turn starts), the [`PlanRun`] and its [`Waves`] (whose
//! readiness invariants only `plan_run` changes), the [`Calls`] in flight, the
//! [`WorkflowRun`], the conversation ([`History`]) and the [`ModelUse`]. [`State::apply`]
//! dispatches each event to the parts it concerns.
//!
//! **Serialised for snapshots, with a version.** `State` is serialisable (serde, JSON) so that a
//! store can keep a snapshot of it and a load can fold only the events after the snapshot (see
//! the `snapshot` module). The conversation ([`State::history`]) is left out of that form: a
//! snapshot keeps it in parts of its own, each written once. A snapshot is used only when its
//! version is [`SNAPSHOT_VERSION`]; any other is ignored and the session is folded from its log,
//! which stays the truth.
//!
//! **A change of State's shape bumps [`SNAPSHOT_VERSION`]**: a field added, removed, renamed or
//! given another type or meaning, here or in a type State holds (`PlanRun`, `StepRun`,
//! `OpenCall`, ...), and a change of what `apply` makes of an event. Fields carry no
//! `#[serde(default)]` unless they are left out when empty, so a snapshot written before a field
//! existed fails to decode (and is refolded) even when the bump is forgotten; the snapshot tests
//! in `weft-runtime` compare every snapshot with the fold of the same log, and the logs committed
//! in `weft-core/tests/fixtures/logs` must fold to their recorded digests.

mod calls;
mod ledger;
mod plan_run;
mod provenance;
mod turn;
mod usage;
mod workflow_run;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::agent::Mode;
use crate::event::{
    Event, InputRequest, ResponseVerdict, ReviewDecision, RunStatus, SessionStatus, ToolOutcome,
    TransitionRule,
};
use crate::history::History;
use crate::model::{Message, Purpose, value_text};
use crate::path;

pub use calls::{Calls, OpenCall};
pub use ledger::{Ledger, Ran};
pub use plan_run::{Items, PlanRun, StepRun, StepStatus, Waves};
pub use provenance::{MAX_SOURCES, Provenance, Sources};
pub use turn::Turn;
pub use usage::{ModelUse, Spending};
pub use workflow_run::WorkflowRun;

/// The version of State's serialised form (and of what `apply` makes of events) that snapshots
/// are written and read at. Bump it with every change of State's shape (see the module's
/// documentation); a snapshot of another version is ignored and the log is folded.
pub const SNAPSHOT_VERSION: u32 = 8;
/// A conversation's compacted part: requests carry `summary` in place of the messages before
/// `upto` (an index into [`State::history`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    /// The position in the conversation (from 0) of the first message still carried.
    pub upto: usize,
    /// The model-written summary of the messages before `upto`.
    pub summary: String,
}

/// The state of a session: what every decision is made from. Other crates read it through its
/// accessors (named after its fields) and change it only by applying events ([`State::apply`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// The session's id (empty before `session_started` is applied).
    pub(crate) session_id: String,
    /// The name of the agent that runs the session.
    pub(crate) agent: String,
    /// The last event applied.
    pub(crate) seq: u64,
    /// Whether the session runs, waits for a person or has ended.
    pub(crate) status: SessionStatus,
    /// The values the session was given: the session's start's, replaced by those of a later
    /// task that gives some; `null` when none were given.
    pub(crate) input: Value,
    /// The State object that `†state.*` paths address.
    pub(crate) data: Value,
    /// The agent's mode; `None` for a bare plan run.
    pub(crate) mode: Option<Mode>,
    /// Where the agent loop stands.
    pub(crate) phase: Phase,
    /// The phase to return to when the person answers.
    pub(crate) resume_phase: Phase,
    /// The current turn.
    pub(crate) turn: Turn,
    /// The plan being executed in this turn.
    pub(crate) plan: Option<PlanRun>,
    /// The plan run's waves.
    pub(crate) waves: Waves,
    /// Tool calls in flight.
    pub(crate) calls: Calls,
    /// Where a workflow session stands (workflow mode).
    pub(crate) workflow: WorkflowRun,
    /// The conversation (ReAct) across turns, shared with the requests built from it. Not in
    /// the serialised form: a snapshot keeps it in parts of its own (see the `snapshot` module), and a
    /// state loaded from one holds it from its window on ([`History::window`]).
    #[serde(skip)]
    pub(crate) history: History,
    /// The summary that stands for the conversation's older messages in requests.
    pub(crate) compaction: Option<Compaction>,
    /// Earlier turns' tasks and answers (the memory a later turn sees). In plan mode the
    /// conversation holds them too, as a user message and an assistant message each.
    pub(crate) memory: Vec<(String, Option<String>)>,
    /// Model calls and what they used.
    pub(crate) usage: ModelUse,
    /// What the current run and the session spent, and the budget recorded for them.
    pub(crate) spending: Spending,
    /// Where the session's untrusted data came from (see [`crate::trust`]).
    #[serde(default, skip_serializing_if = "Provenance::is_empty")]
    pub(crate) provenance: Provenance,
}

pub use crate::repeats::call_signature;

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

/// Where the agent loop stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No task yet.
    #[default]
    Idle,
    /// Plan mode: the planner is asked for a plan.
    Planning,
    /// Plan mode: the plan's waves run.
    Executing,
    /// Plan mode: the review after a wave decides what comes next.
    Reviewing,
    /// Plan mode: the final answer is drafted.
    Responding,
    /// Plan mode: the reviewer checks the draft.
    ReviewingResponse,
    /// ReAct and workflow modes: the model is called in a loop.
    React,
    /// The run ended.
    Finished,
}

impl State {
    /// A state before any event: an empty State object (`†state`), no turn, no plan.
    pub fn new() -> Self {
        Self {
            data: Value::Object(Map::new()),
            ..Self::default()
        }
    }

    /// The session's id (empty before `session_started` is applied).
    #[must_use]
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The name of the agent that runs the session.
    #[must_use]
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The last event applied (its position in the log, from 1; 0 before any).
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the session runs, waits for a person or has ended.
    #[must_use]
    pub fn status(&self) -> SessionStatus {
        self.status
    }

    /// The values the session was given (the latest task's, when it gave some); `null` if none.
    #[must_use]
    pub fn input(&self) -> &Value {
        &self.input
    }

    /// The State object that `†state.*` paths address.
    #[must_use]
    pub fn data(&self) -> &Value {
        &self.data
    }

    /// Where the session's untrusted data came from (see [`crate::trust`]).
    #[must_use]
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// The agent's mode; `None` for a bare plan run.
    #[must_use]
    pub fn mode(&self) -> Option<Mode> {
        self.mode
    }

    /// Where the agent loop stands.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The phase to return to when the person answers.
    #[must_use]
    pub fn resume_phase(&self) -> Phase {
        self.resume_phase
    }

    /// The current turn.
    #[must_use]
    pub fn turn(&self) -> &Turn {
        &self.turn
    }

    /// The plan being executed in this turn; `None` before one is accepted.
    #[must_use]
    pub fn plan(&self) -> Option<&PlanRun> {
        self.plan.as_ref()
    }

    /// The plan run's waves.
    #[must_use]
    pub fn waves(&self) -> &Waves {
        &self.waves
    }

    /// Tool calls in flight.
    #[must_use]
    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    /// Where a workflow session stands (workflow mode).
    #[must_use]
    pub fn workflow(&self) -> &WorkflowRun {
        &self.workflow
    }

    /// The conversation across turns (from its window on, in a state loaded from a snapshot).
    #[must_use]
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The summary that stands for the conversation's older messages in requests.
    #[must_use]
    pub fn compaction(&self) -> Option<&Compaction> {
        self.compaction.as_ref()
    }

    /// Earlier turns' tasks and answers, oldest first.
    #[must_use]
    pub fn memory(&self) -> &[(String, Option<String>)] {
        &self.memory
    }

    /// Model calls and what they used.
    #[must_use]
    pub fn usage(&self) -> &ModelUse {
        &self.usage
    }

    /// What the current run and the session spent, and the budget recorded for them.
    #[must_use]
    pub fn spending(&self) -> &Spending {
        &self.spending
    }

    /// Forgets the conversation's messages before `start`, as a state loaded from a snapshot's
    /// window holds it (see [`History::window`]): a fold, made so, equals such a load.
    pub fn forget_history_before(&mut self, start: usize) {
        self.history.forget_before(start);
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
    /// Dispatches the event to the parts it concerns.
    pub fn apply(&mut self, event: &Event) {
        self.seq = self.seq.saturating_add(1);
        self.spending.apply(event, self.seq);
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
                self.provenance.turn_started(self.mode == Some(Mode::Plan));
                self.turn_started(task, input);
            }
            Event::ToolCallBlocked {
                step,
                repeats: Some(earlier),
                ..
            } => {
                // The earlier call's result stands for this one's.
                self.output_read(earlier, step.as_deref());
                self.apply_rest(event);
            }
            Event::WaitingForUser { request } => self.waiting_for_user(request),
            Event::UserReplied { text } => self.user_replied(text),
            Event::ToolCallStarted {
                call_id,
                step,
                item,
                tool,
                args,
                attempt,
                idempotency_key,
                untrusted_from,
            } => {
                self.provenance.started(call_id, tool, untrusted_from);
                let call = OpenCall {
                    step: step.clone(),
                    item: *item,
                    tool: tool.clone(),
                    args: args.clone(),
                    attempt: *attempt,
                    idempotency_key: idempotency_key.clone(),
                };
                let of_item = match (step, &mut self.plan) {
                    (Some(step), Some(p)) => p.call_started(call_id, step, &call),
                    _ => false,
                };
                self.calls.start(call_id, call);
                if !of_item && self.delegates(step.as_deref()) {
                    self.workflow.delegating = true;
                }
            }
            Event::ToolCallFinished {
                call_id, outcome, ..
            } => {
                self.output_read(call_id, None);
                self.tool_call_finished(call_id, outcome);
            }
            Event::TextDelta { .. } => {
                // Never stored: it does not count as a position in the log.
                self.seq = self.seq.saturating_sub(1);
            }
            Event::StepAction { step, action, .. }
                if action == "DIRECT_RESPONSE" || action == "DESIGN_INSTRUCTIONS" =>
            {
                let to_state = self.plan.as_ref().is_some_and(|p| {
                    p.step(step)
                        .is_some_and(|(i, _)| p.plan.steps[i].output.is_some())
                });
                let label = self.executor_read(step);
                self.provenance.step_answered(step, &label, to_state);
                self.apply_rest(event);
            }
            Event::WorkflowOutputAccepted { assigned, .. } if !assigned.is_empty() => {
                self.provenance.assigned();
                self.apply_workflow(event);
            }
            Event::WorkflowStepEntered { .. }
            | Event::WorkflowOutputAccepted { .. }
            | Event::WorkflowOutputRejected { .. }
            | Event::WorkflowTransition { .. } => self.apply_workflow(event),
            Event::PlanAccepted { .. } | Event::PlanRevised { .. } => {
                self.provenance.plan_written();
                self.apply_rest(event);
            }
            _ => self.apply_rest(event),
        }
    }

    /// An event that the turn, the usage, the plan's steps and the loop take their shares of.
    fn apply_rest(&mut self, event: &Event) {
        self.turn.apply(event);
        self.usage.apply(event);
        if let Some(p) = &mut self.plan {
            p.apply(event, &mut self.data);
        }
        self.apply_loop(event);
    }

    /// A new turn: the last one's task and answer go to the memory (and, in plan mode, to the
    /// conversation), and the turn and the plan run start afresh.
    fn turn_started(&mut self, task: &str, input: &Value) {
        let last = std::mem::take(&mut self.turn);
        if let Some(prev) = last.task {
            if self.mode == Some(Mode::Plan) {
                // Plan mode's conversation is its turns: what later planners and answers see
                // (and compaction bounds).
                let answer = match (&last.answer, &last.error) {
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
            self.memory.push((prev, last.answer));
        }
        self.turn = Turn::start(last.number.saturating_add(1), task);
        if !input.is_null() {
            self.input = input.clone();
        }
        self.status = SessionStatus::Running;
        self.plan = None;
        self.waves.new_turn();
        self.workflow.message_in();
        self.phase = match self.mode {
            Some(Mode::Plan) => Phase::Planning,
            _ => Phase::React,
        };
        if self.phase == Phase::React {
            self.history.push(Message::User {
                content: task.to_owned(),
            });
        }
    }

    fn waiting_for_user(&mut self, request: &InputRequest) {
        self.status = SessionStatus::WaitingForUser;
        self.resume_phase = self.phase;
        if let (Some(step), Some(p)) = (&request.step, &mut self.plan)
            && p.step_waits(step)
        {
            // The step ran alone in its wave (or had not started): the wave is over.
            self.waves.open = None;
        }
        self.turn.waiting = Some(request.clone());
    }

    fn user_replied(&mut self, text: &str) {
        self.status = SessionStatus::Running;
        self.turn.user_inputs.push(text.to_owned());
        if let Some(req) = self.turn.waiting.take() {
            if let (Some(step), Some(p)) = (&req.step, &mut self.plan) {
                p.step_answered(step, &req.question, text);
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
                self.calls.approved.push(format!("{id}={text}"));
            }
            if req.kind == "message" {
                // A workflow waited for the user's next message: it enters anew.
                self.workflow.message_in();
                self.turn.recall_due = Some(text.to_owned());
                self.turn.recalled.clear();
                self.history.push(Message::User {
                    content: text.to_owned(),
                });
            }
        } else if self.mode == Some(Mode::React) {
            self.history.push(Message::User {
                content: text.to_owned(),
            });
        }
        self.phase = self.resume_phase;
    }

    /// What the executor of plan step `step` reads (`prompts::executor`), as a label: the plan's
    /// (the step's description was written by the planner), the outputs of the steps it depends
    /// on and its own calls' results. Not the conversation nor the other steps' results: its
    /// request holds neither. So a step with an `_outputSchema` that reads one untrusted output
    /// returns a value labelled with that output alone (a quarantined step).
    pub(crate) fn executor_read(&self, step: &str) -> Sources {
        let p = &self.provenance;
        let mut label = p.plan.clone();
        label.extend(&p.step(step));
        if let Some(run) = &self.plan
            && let Some((i, _)) = run.step(step)
        {
            for &d in &run.graph().deps[i] {
                label.extend(&p.step(&run.plan.steps[d].id));
            }
        }
        label
    }

    /// The output of call `call_id` reached a model or a step: its label goes where it went.
    /// `step` is the plan step it served (`None`: the call's own, as started).
    fn output_read(&mut self, call_id: &str, step: Option<&str>) {
        let step = step
            .or_else(|| self.calls.open.get(call_id).and_then(|c| c.step.as_deref()))
            .filter(|_| self.plan.is_some())
            .map(str::to_owned);
        let to_state = step.as_deref().is_some_and(|s| {
            self.plan
                .as_ref()
                .and_then(|p| p.step(s).map(|(i, _)| p.plan.steps[i].output.is_some()))
                .unwrap_or(false)
        });
        self.provenance
            .output_read(call_id, step.as_deref(), to_state);
    }

    fn tool_call_finished(&mut self, call_id: &str, outcome: &ToolOutcome) {
        let Some(c) = self.calls.finish(call_id) else {
            return;
        };
        self.turn.repeats.finished(call_id, &c, outcome);
        if self.delegates(c.step.as_deref()) {
            self.workflow.delegating = false;
            self.workflow.delegated = Some(outcome.clone());
            return;
        }
        match (&mut self.plan, &c.step) {
            (Some(p), Some(step)) => p.call_finished(step, &c, outcome),
            _ => {
                let (content, is_error) = match outcome {
                    ToolOutcome::Ok { output } => (value_text(output), false),
                    ToolOutcome::Error { error } => (error.bounded().to_value().to_string(), true),
                };
                self.history.push(Message::Tool {
                    call_id: call_id.to_owned(),
                    name: c.tool.clone(),
                    content,
                    is_error,
                });
            }
        }
    }

    /// What an event changes in the loop's position, the plan run's existence and waves, and
    /// the conversation (after the turn, usage and the plan's steps took their share).
    fn apply_loop(&mut self, event: &Event) {
        match event {
            Event::ModelReplied { purpose, reply, .. } => {
                if *purpose == Purpose::Workflow {
                    self.workflow.turns = self.workflow.turns.saturating_add(1);
                }
                if *purpose == Purpose::React || *purpose == Purpose::Workflow {
                    self.history.push(Message::Assistant {
                        content: reply.content.clone(),
                        tool_calls: reply.tool_calls.clone(),
                    });
                }
            }
            Event::ModelReplyRejected {
                reason, purpose, ..
            } => {
                if matches!(purpose, Purpose::React | Purpose::Workflow) {
                    self.history.push(Message::User {
                        content: format!("[weft] Your last reply could not be used: {reason}"),
                    });
                }
            }
            Event::PlanRevised { plan, .. } => {
                match &mut self.plan {
                    Some(p) => p.revise(plan),
                    None => self.plan = Some(PlanRun::new(plan.clone())),
                }
                self.phase = Phase::Executing;
            }
            Event::ToolCallBlocked {
                tool,
                reason,
                call_id: Some(id),
                repeats,
                ..
            } => {
                // A refused repeat answers with the earlier call's result (in `reason`).
                self.history.push(Message::Tool {
                    call_id: id.clone(),
                    name: tool.clone(),
                    content: if repeats.is_some() {
                        reason.clone()
                    } else {
                        format!("refused: {reason}")
                    },
                    is_error: repeats.is_none(),
                });
            }
            Event::ReviewDecided { decision, .. } => {
                self.phase = match decision {
                    ReviewDecision::Continue => Phase::Executing,
                    ReviewDecision::Replan => Phase::Planning,
                    ReviewDecision::FinalResponse | ReviewDecision::CannotComplete => {
                        Phase::Responding
                    }
                    ReviewDecision::AskUser => Phase::Reviewing,
                };
            }
            Event::AnswerDrafted { .. } => {
                self.phase = Phase::ReviewingResponse;
            }
            Event::ResponseReviewed { verdict, .. } => {
                if matches!(verdict, ResponseVerdict::Refine | ResponseVerdict::AskUser) {
                    self.phase = Phase::Responding;
                }
            }
            Event::HistoryCompacted { upto, summary } => {
                self.compaction = Some(Compaction {
                    upto: usize::try_from(*upto)
                        .unwrap_or(usize::MAX)
                        .min(self.history.len()),
                    summary: summary.clone(),
                });
            }
            Event::MessagesImported { messages } => {
                self.history.extend(messages.iter().cloned());
            }
            Event::PlanAccepted { plan } => {
                self.plan = Some(PlanRun::new(plan.clone()));
                if self.mode == Some(Mode::Plan) {
                    self.phase = Phase::Executing;
                }
            }
            Event::WaveStarted { wave, steps } => {
                self.waves.open = Some(*wave);
                self.waves.started = *wave;
                self.waves.steps.clone_from(steps);
            }
            Event::ExecutionFinished { .. } => {
                self.phase = Phase::Responding;
            }
            Event::WaveFinished { .. } => {
                self.waves.open = None;
                if self.mode == Some(Mode::Plan) {
                    self.phase = Phase::Reviewing;
                }
            }
            Event::RunFinished { status, .. } => {
                self.status = match status {
                    RunStatus::Completed => SessionStatus::Completed,
                    RunStatus::Failed => SessionStatus::Failed,
                };
                self.phase = Phase::Finished;
            }
            // A marker for clients (`RunStarted`), or an event only the parts apply.
            _ => {}
        }
    }

    /// A workflow's step entered, output judged or transition taken.
    fn apply_workflow(&mut self, event: &Event) {
        match event {
            Event::WorkflowStepEntered { step, .. } => {
                self.workflow.enter(step);
                // A conversation that ends with an earlier step's reply (or its tool results)
                // gets a turn of the user's naming the step, so that the model answers anew.
                // It is part of the conversation: every later request carries it where it was.
                if matches!(
                    self.history.iter().next_back(),
                    Some(Message::Assistant { .. } | Message::Tool { .. })
                ) {
                    self.history.push(Message::User {
                        content: crate::workflow::step_notice(step),
                    });
                }
            }
            Event::WorkflowOutputAccepted {
                step,
                output,
                assigned,
                reply,
            } => {
                // A step's agent answered in a session of its own: its answer is the step's
                // reply in this conversation (which then alternates as every other step's).
                if self.workflow.delegated.is_some() {
                    self.history.push(Message::Assistant {
                        content: value_text(output),
                        tool_calls: Vec::new(),
                    });
                }
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
            Event::WorkflowTransition { from, to, rule } => {
                // A step's agent that failed leaves no answer: the conversation says so.
                if let (Some(_), TransitionRule::OnError { error }) =
                    (&self.workflow.delegated, rule)
                    && matches!(self.history.iter().next_back(), Some(Message::User { .. }))
                {
                    self.history.push(Message::Assistant {
                        content: format!("[weft] Step `{from}` failed: {error}"),
                        tool_calls: Vec::new(),
                    });
                }
                self.workflow.transitions = self.workflow.transitions.saturating_add(1);
                if to == crate::workflow::END || to == crate::workflow::WAIT {
                    self.workflow.step = None;
                }
            }
            _ => {}
        }
    }
}
