//! Typed events: every transition of a session is one of these, appended to its log.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::Mode;
use crate::model::{Message, ModelReply, Purpose, Usage};
use crate::plan::{Plan, PlanProblem};

/// The version of the event schema written by this build. Readers accept this version and
/// older ones; a log written by a newer build is refused with a clear error.
pub const EVENT_VERSION: u32 = 1;

/// An event as stored and streamed: its place in the log, its time, and the event itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Position in the session's log, from 1.
    pub seq: u64,
    /// Unix time in milliseconds, stamped by the shell when the event was recorded.
    pub ts: i64,
    /// Event schema version.
    pub v: u32,
    /// The lease epoch of the process that wrote the event (each new owner of a session gets
    /// the next one); 0 for a writer that held no lease. The store refuses an append whose
    /// epoch is not the session's current one, so a process that lost its lease cannot write.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub epoch: u64,
    /// The event itself; its fields are flattened into the envelope's JSON object.
    #[serde(flatten)]
    pub event: Event,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a session ended, or that it is still going.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// The session is working on a task (or was when its process stopped).
    #[default]
    Running,
    /// The session waits for a person's answer before it can go on.
    WaitingForUser,
    /// The last run ended with an answer.
    Completed,
    /// The last run ended with an error.
    Failed,
}

impl SessionStatus {
    /// The status as stored and shown (`waiting_for_user`), the inverse of [`Self::parse`].
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::WaitingForUser => "waiting_for_user",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// The status named by `s` as [`Self::as_str`] writes it; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(Self::Running),
            "waiting_for_user" => Some(Self::WaitingForUser),
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }

    /// Whether the session's run has ended (completed or failed); a new task may still start
    /// another turn.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

/// A tool's failure as the engine records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolError {
    /// `invalid_arguments`, `not_found`, `spawn`, `exit_status`, `invalid_output`, `timeout`,
    /// `io`, `refused`, `interrupted`, `unknown_outcome` or a tool's own kind.
    pub kind: String,
    /// What went wrong, in one sentence for a person or a model.
    pub message: String,
    /// Whatever helps a person or the model: stderr, an exit status, a response body.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
    /// Whether running the call again may succeed and is safe (never for a non-idempotent tool
    /// that may have acted).
    #[serde(default)]
    pub retryable: bool,
}

impl ToolError {
    /// An error of `kind` saying `message`, with no detail and not retryable.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            message: message.into(),
            detail: Value::Null,
            retryable: false,
        }
    }

    /// The error with `detail` (stderr, an exit status, a response body) attached.
    #[must_use]
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }

    /// The error marked as safe to retry (`yes`) or not.
    #[must_use]
    pub fn retryable(mut self, yes: bool) -> Self {
        self.retryable = yes;
        self
    }

    /// The error as the JSON object written to a step's error path.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The error as a model is shown it (and as a step's error path holds it): the message and
    /// the last lines of the tool's stderr and stdout, each bounded, and other detail only
    /// when it is short. A failing command's whole traceback stays in the `tool_call_finished`
    /// event, for people; a model gets what it needs to try again, in at most a few KB.
    #[must_use]
    pub fn bounded(&self) -> Self {
        let detail = match &self.detail {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| {
                        let v = match (k.as_str(), v) {
                            ("stderr" | "stdout", Value::String(text)) => {
                                Value::String(last_lines(text, MODEL_TAIL_LINES, MODEL_TAIL_BYTES))
                            }
                            _ => short_or_omitted(v),
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            other => short_or_omitted(other),
        };
        Self {
            kind: self.kind.clone(),
            message: cut(&self.message, MODEL_MESSAGE_BYTES),
            detail,
            retryable: self.retryable,
        }
    }
}

/// Bounds of a tool error as a model sees it ([`ToolError::bounded`]).
const MODEL_MESSAGE_BYTES: usize = 1024;
const MODEL_TAIL_LINES: usize = 5;
const MODEL_TAIL_BYTES: usize = 1024;
const MODEL_DETAIL_BYTES: usize = 512;

/// `text` cut to at most `max` bytes (on a character boundary), marked when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..end], text.len() - end)
}

/// The last non-empty lines of `text`, at most `lines` of them and `max` bytes (a longer last
/// line keeps its end).
fn last_lines(text: &str, lines: usize, max: usize) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut size = 0;
    for line in text.lines().rev().filter(|l| !l.trim().is_empty()) {
        if kept.len() == lines || size + line.len() + 1 > max {
            if kept.is_empty() {
                let mut start = line.len().saturating_sub(max);
                while !line.is_char_boundary(start) {
                    start += 1;
                }
                kept.push(&line[start..]);
            }
            break;
        }
        size += line.len() + 1;
        kept.push(line);
    }
    kept.reverse();
    let shown = kept.join("\n");
    if shown.len() < text.trim().len() {
        format!("[earlier output cut]\n{shown}")
    } else {
        shown
    }
}

fn short_or_omitted(v: &Value) -> Value {
    let size = serde_json::to_string(v).map(|s| s.len()).unwrap_or(0);
    if size <= MODEL_DETAIL_BYTES {
        v.clone()
    } else {
        Value::String(format!("[{size} bytes omitted; the event has them]"))
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.kind)
    }
}

/// The result of one tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolOutcome {
    /// The tool succeeded.
    Ok {
        /// What the tool returned.
        output: Value,
    },
    /// The tool failed.
    Error {
        /// Why, as the engine records it.
        error: ToolError,
    },
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The run ended with an answer.
    Completed,
    /// The run ended with an error (its `run_finished` event says which).
    Failed,
}

/// Every transition of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A session began.
    SessionStarted {
        /// The session's id.
        session_id: String,
        /// The name of the agent that runs the session (its agent file's `name`, also for a
        /// bare plan run, whose tools the agent file declares).
        agent: String,
        /// The values the session was given to start with (the plan's input data); `null` when
        /// none were given.
        #[serde(default)]
        input: Value,
        /// The agent's mode; absent for a bare plan run (`weft plan run`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<Mode>,
        /// The session this one runs under (a sub-agent's parent) or was forked from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_id: Option<String>,
    },
    /// A person gave the agent a task (a new turn of the session).
    TurnStarted {
        /// The task, as the person wrote it.
        task: String,
        /// Values given with the task; when not `null` they replace the session's input.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        input: Value,
    },
    /// A model answered. `step` is set for a step executor's call.
    ModelReplied {
        /// What the call was for (planning, a step, a review, ...).
        purpose: Purpose,
        /// The plan step the call served; `None` for a call that served no step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// The reply: text, tool calls and usage.
        reply: ModelReply,
    },
    /// A model's reply could not be used; the reason is fed back on the next call.
    ModelReplyRejected {
        /// What the call was for.
        purpose: Purpose,
        /// The plan step the call served; `None` for a call that served no step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// Why the reply could not be used, as the model is told on its next call.
        reason: String,
    },
    /// The conversation's messages before `upto` are replaced, in what later requests carry, by
    /// `summary` (which covers every earlier compaction too). The messages stay in the log.
    HistoryCompacted {
        /// The position in the conversation (counted in messages, from 0) where the messages
        /// still carried begin.
        upto: u64,
        /// The model-written summary of every message before `upto`.
        summary: String,
    },
    /// Long-term memories found for a new task (or a workflow's next message) before the turn's
    /// first model call, already cut to the agent's budget: the requests of the turn carry them
    /// as "What you remember". Recorded once per turn, so a resumed or forked session sends the
    /// same prompt without searching again. `error` says why the search found nothing.
    MemoriesRecalled {
        /// The text searched for: the task (or a workflow's next message), cut to at most
        /// 1000 bytes.
        query: String,
        /// What was found, best first.
        memories: Vec<RecalledMemory>,
        /// Why the search failed; `None` when it ran (even if it found nothing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A model call failed (after the provider's own retries).
    ModelFailed {
        /// What the call was for.
        purpose: Purpose,
        /// The provider's error, as the model layer reported it.
        error: String,
        /// Whether calling again may succeed (a rate limit, a timeout, a server error).
        retryable: bool,
        /// Tokens the failed call used (attempts whose replies were unusable).
        #[serde(default, skip_serializing_if = "Usage::is_empty")]
        usage: Usage,
    },
    /// The session was given a budget (`weft run --budget`, a run's `config.budget`, a raised
    /// budget with an answer, a fork's own): it replaces the agent file's, and every earlier
    /// one, from here on. What was spent is not reset.
    BudgetSet {
        /// The budget in force from here on.
        budget: crate::budget::Budget,
    },
    /// A call was not made because it could take a budget's limit past it (see
    /// [`crate::budget`]); the run stops here (or waits, with `on_budget: ask`).
    BudgetExceeded {
        /// The limit, scope first: `run.cost_usd`, `session.tool_calls.search`,
        /// `run.wall_time_secs`.
        which: String,
        /// The limit's value.
        #[serde(serialize_with = "crate::budget::whole_if_whole")]
        limit: f64,
        /// What the scope had spent of it.
        #[serde(serialize_with = "crate::budget::whole_if_whole")]
        spent: f64,
        /// What the call that was not made could have added at most.
        #[serde(default, serialize_with = "crate::budget::whole_if_whole")]
        call: f64,
    },
    /// The planner's plan was invalid; the problems go back to the planner.
    PlanRejected {
        /// Every problem found, each naming the step and field at fault.
        problems: Vec<PlanProblem>,
    },
    /// A replan: the pending steps are replaced by these. Completed and failed steps stay.
    PlanRevised {
        /// The new steps.
        plan: Plan,
        /// Why the plan was revised (the review's reason).
        reason: String,
    },
    /// What the step executor decided for a step (for people; the raw reply is in
    /// `model_replied`).
    StepAction {
        /// The plan step.
        step: String,
        /// The executor's decision: `USE_TOOL`, `REQUEST_TOOL_INPUT`, `ASK_USER`,
        /// `DIRECT_RESPONSE` or `DESIGN_INSTRUCTIONS`.
        action: String,
        /// What goes with the decision (the tool and its arguments for `USE_TOOL`, the question
        /// for `ASK_USER`, ...); `null` when nothing does.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        detail: Value,
    },
    /// A tool call was refused without running: a repeat of the same call in a step or of a
    /// call of the run that is not idempotent, a tool the agent may not use, a person's denial,
    /// or arguments that do not fit.
    ToolCallBlocked {
        /// The plan step that asked for the call; `None` outside a plan.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// The model's id for the call (ReAct), which its refusal answers; `None` for a plan
        /// step's call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The tool asked for.
        tool: String,
        /// The arguments it was given.
        args: Value,
        /// Why the call was refused, as the model is told.
        reason: String,
        /// The id of the earlier call of the run that this call repeats, when it was refused
        /// as a repeat (see [`crate::repeats`]): `reason` then carries that call's result, which
        /// stands for this call's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repeats: Option<String>,
    },
    /// The review after a wave.
    ReviewDecided {
        /// What happens next.
        decision: ReviewDecision,
        /// The reviewer's reason (or, for `ASK_USER`, its question).
        #[serde(default)]
        reason: String,
    },
    /// A draft of the final answer.
    AnswerDrafted {
        /// The draft.
        text: String,
        /// How many drafts came before this one in the turn (0 for the first).
        round: u32,
    },
    /// The reviewer's verdict on the draft.
    ResponseReviewed {
        /// Whether the draft stands.
        verdict: ResponseVerdict,
        /// What to change, or the question for the person.
        #[serde(default)]
        feedback: String,
    },
    /// The session waits for a person.
    WaitingForUser {
        /// What is asked of the person.
        request: InputRequest,
    },
    /// A person answered the session's request.
    UserReplied {
        /// The answer, as the person wrote it.
        text: String,
    },
    /// Conversation messages carried into this session (a fork or an import).
    MessagesImported {
        /// The messages, appended to the conversation in order.
        messages: Vec<Message>,
    },
    /// A client's run (`weft serve`) began here: its events are those after event `after`.
    /// Changes nothing in the state; it lets any process find the run by its id (after a
    /// restart, or on another server).
    RunStarted {
        /// The run's id, as the client was given it.
        run_id: String,
        /// The sequence number of the last event before the run (0 for a new session).
        after: u64,
        /// The W3C trace context the client sent with the request that created the run
        /// (`traceparent`): the run's spans are its children, whichever process drives it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
        /// The metadata the client gave the run (LangGraph's `metadata`: a cron's run holds its
        /// `cron_id`), so that any process reading the log lists the run with it; `null` when
        /// none was given.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        metadata: Value,
    },
    /// An evaluation's scorer judged the session (`weft eval`): OpenTelemetry's
    /// `gen_ai.evaluation.result`. Changes nothing in the state; written after the run ended.
    EvaluationResult {
        /// The scorer (`trajectory`, `answer.contains`, `judge`, ...).
        name: String,
        /// Its score, from 0 to 1.
        score: f64,
        /// `pass` or `fail`.
        label: String,
        /// Why: what was wrong, or a judge's reasoning.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        explanation: Option<String>,
        /// The evaluation run (`weft eval --name`).
        run: String,
    },
    /// A piece of the answer as the model generates it. Published live, never stored.
    TextDelta {
        /// The text generated since the last delta.
        text: String,
    },
    /// A plan was accepted for execution (validated, tool flags filled in).
    PlanAccepted {
        /// The plan as it will run.
        plan: Plan,
    },
    /// A wave of ready steps begins.
    WaveStarted {
        /// The wave's number in the turn, from 1.
        wave: u32,
        /// The ids of the steps that run in it.
        steps: Vec<String>,
    },
    /// A step's attempt begins.
    StepStarted {
        /// The step's id.
        step: String,
        /// The attempt's number, from 1.
        attempt: u32,
    },
    /// A tool call is about to run. Durable before the tool runs.
    ToolCallStarted {
        /// The call's id (a plan step's `step#attempt`, or the model's id for the call).
        call_id: String,
        /// The plan step the call serves; `None` for a model's own call (ReAct).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// The item (its position in the list) a fan-out step's call serves.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item: Option<usize>,
        /// The tool's name.
        tool: String,
        /// The arguments, validated against the tool's schema.
        args: Value,
        /// The attempt's number, from 1.
        attempt: u32,
        /// The logical call's key, `SESSION:N:DIGEST` (made by `state::call_key`): reused by
        /// the call's retries and by a re-run after a crash.
        idempotency_key: String,
        /// Where the untrusted data in the call's output comes from (call ids: this call's own
        /// when the tool's output is untrusted, and those its arguments were read from); empty
        /// when the output is trusted or the agent has no `trust:` (see [`crate::trust`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        untrusted_from: Vec<String>,
    },
    /// A tool call ended.
    ToolCallFinished {
        /// The id its `tool_call_started` gave.
        call_id: String,
        /// What the tool returned, or its error.
        outcome: ToolOutcome,
        /// Wall-clock time the call took, in milliseconds.
        duration_ms: u64,
    },
    /// A step's attempt failed and the step will be tried again after `delay_ms`.
    StepRetrying {
        /// The step's id.
        step: String,
        /// The number of the attempt that failed, from 1.
        attempt: u32,
        /// Why it failed.
        error: ToolError,
        /// The wait before the next attempt, in milliseconds.
        delay_ms: u64,
    },
    /// A fan-out step (`_forEach`) began: its tool runs once for each of `items` items.
    FanOutStarted {
        /// The step's id.
        step: String,
        /// How many items its list holds.
        items: usize,
    },
    /// A fan-out step's call for item `item` failed and will be tried again after `delay_ms`.
    ItemRetrying {
        /// The step's id.
        step: String,
        /// The item's position in the list, from 0.
        item: usize,
        /// The number of the item's attempt that failed, from 1.
        attempt: u32,
        /// Why it failed.
        error: ToolError,
        /// The wait before the next attempt, in milliseconds.
        delay_ms: u64,
    },
    /// A fan-out step's item failed without a call (its arguments could not be made from it).
    ItemFailed {
        /// The step's id.
        step: String,
        /// The item's position in the list, from 0.
        item: usize,
        /// Why its arguments could not be made.
        error: ToolError,
    },
    /// A step completed; its output went to its `_outputPath`.
    StepCompleted {
        /// The step's id.
        step: String,
        /// The raw result, for the model and for references.
        output: Value,
        /// A short account for people.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
    },
    /// A step failed for good. `handled`: the error went to the step's error path.
    StepFailed {
        /// The step's id.
        step: String,
        /// The error of its last attempt.
        error: ToolError,
        /// Whether the step has an error path that received the error (its dependents may then
        /// run).
        handled: bool,
    },
    /// A step was skipped: its condition was false, the data it reads was not written, or a step
    /// it depends on failed.
    StepSkipped {
        /// The step's id.
        step: String,
        /// Which of those it was, for people.
        reason: String,
    },
    /// A wave ended (every step in it reached an outcome).
    WaveFinished {
        /// The wave's number, as its `wave_started` gave it.
        wave: u32,
    },
    /// No step of the plan can run any more; the agent goes on to its answer.
    ExecutionFinished {
        /// Why execution stopped (every step done, a step failed, a limit reached).
        reason: String,
    },
    /// A workflow step began: the session is in `step` until routing takes it elsewhere.
    WorkflowStepEntered {
        /// The workflow step's name.
        step: String,
        /// How the session came to it.
        via: StepEntry,
    },
    /// A workflow step's output was accepted (it matched the step's `output_schema`, if any).
    /// `assigned`: the State paths the step's `assign` set; `reply`: the text the user is given.
    WorkflowOutputAccepted {
        /// The workflow step's name.
        step: String,
        /// The step's output.
        output: Value,
        /// Each State path the step's `assign` set, with its new value.
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        assigned: serde_json::Map<String, Value>,
        /// The text the user is given; `None` when the step replies nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply: Option<String>,
    },
    /// A workflow step's output was refused; the reason goes back to the model (or the step's
    /// agent), which tries again. `attempt`: the refused outputs of the step so far.
    WorkflowOutputRejected {
        /// The workflow step's name.
        step: String,
        /// Why the output was refused, as the model is told.
        reason: String,
        /// How many of the step's outputs have been refused so far, this one included.
        attempt: u32,
    },
    /// Routing took the session from step `from` to `to` (a step, `end` or `wait`).
    WorkflowTransition {
        /// The step left.
        from: String,
        /// The step entered, or `end` or `wait`.
        to: String,
        /// The rule that chose `to`.
        rule: TransitionRule,
    },
    /// The run ended.
    RunFinished {
        /// Whether it ended with an answer or an error.
        status: RunStatus,
        /// Why the run failed; `None` when it completed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The answer given to the person.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
}

/// How a message entered a workflow step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum StepEntry {
    /// The session's first message entered at `initial` (or a later one, with no `reentry`).
    Initial,
    /// A later message entered by rule `rule` of `reentry` (`when` absent: the default).
    Reentry {
        /// The rule's position in `reentry`, from 0.
        rule: usize,
        /// The rule's `when` expression; `None` for the default rule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<String>,
    },
    /// Routing came from step `from` (the `workflow_transition` just before says by which rule).
    Transition {
        /// The step routing came from.
        from: String,
    },
}

/// Which routing rule a workflow transition took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum TransitionRule {
    /// Rule `rule` of the step's `next` (`when` absent: the default); no `rule` when the step
    /// has no `next` (the turn ends).
    Next {
        /// The rule's position in `next`, from 0; `None` when the step has no `next`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<usize>,
        /// The rule's `when` expression; `None` for the default rule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<String>,
    },
    /// The step failed (`error` says why) and went to its `on_error`.
    OnError {
        /// Why the step failed.
        error: String,
    },
}

/// What the review after a wave decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReviewDecision {
    /// Runnable pending steps remain and still make sense: run the next wave.
    Continue,
    /// The results change what should happen next: plan again.
    Replan,
    /// The evidence suffices: write the answer.
    FinalResponse,
    /// Only the person can unblock the task: ask them.
    AskUser,
    /// The task cannot be done with the tools and evidence available: the run fails, with the
    /// reason as its answer.
    CannotComplete,
}

/// What the response reviewer decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResponseVerdict {
    /// The draft is the answer.
    Accept,
    /// The draft is written again with the reviewer's feedback.
    Refine,
    /// The person is asked the reviewer's question first.
    AskUser,
    /// The task cannot be done: the run fails, with the draft (or the feedback) as its answer.
    CannotComplete,
}

/// What a waiting session asks of a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InputRequest {
    /// `missing_input`, `question`, `plan_approval`, `tool_approval`, or `message` (a workflow
    /// routed to `wait`: the user's next message enters at the step `reentry` picks).
    pub kind: String,
    /// The question shown to the person.
    pub question: String,
    /// The plan step that asks; `None` outside a plan step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The tool a `missing_input` or `tool_approval` request is about; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Required arguments the call lacks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// The call as far as it is known (tool and arguments).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub partial_call: Value,
    /// The plan awaiting approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<serde_json::Map<String, Value>>>")]
    pub plan: Option<Plan>,
    /// The model's tool call this request belongs to (ReAct `ask_user`, approvals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// A memory as a turn's requests show it: its id and scope in the store (`user`, `agent`,
/// `public`), and its text, made one line and bounded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecalledMemory {
    /// The memory's id in the store.
    pub id: i64,
    /// `user`, `agent` or `public`.
    pub scope: String,
    /// The memory's text, on one line and bounded.
    pub text: String,
}

impl Event {
    /// The event's type name as it appears in JSON (`step_completed`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SessionStarted { .. } => "session_started",
            Self::TurnStarted { .. } => "turn_started",
            Self::ModelReplied { .. } => "model_replied",
            Self::ModelReplyRejected { .. } => "model_reply_rejected",
            Self::ModelFailed { .. } => "model_failed",
            Self::HistoryCompacted { .. } => "history_compacted",
            Self::MemoriesRecalled { .. } => "memories_recalled",
            Self::BudgetSet { .. } => "budget_set",
            Self::BudgetExceeded { .. } => "budget_exceeded",
            Self::PlanRejected { .. } => "plan_rejected",
            Self::PlanRevised { .. } => "plan_revised",
            Self::StepAction { .. } => "step_action",
            Self::ToolCallBlocked { .. } => "tool_call_blocked",
            Self::ReviewDecided { .. } => "review_decided",
            Self::AnswerDrafted { .. } => "answer_drafted",
            Self::ResponseReviewed { .. } => "response_reviewed",
            Self::WaitingForUser { .. } => "waiting_for_user",
            Self::UserReplied { .. } => "user_replied",
            Self::MessagesImported { .. } => "messages_imported",
            Self::RunStarted { .. } => "run_started",
            Self::EvaluationResult { .. } => "evaluation_result",
            Self::TextDelta { .. } => "text_delta",
            Self::PlanAccepted { .. } => "plan_accepted",
            Self::WaveStarted { .. } => "wave_started",
            Self::StepStarted { .. } => "step_started",
            Self::ToolCallStarted { .. } => "tool_call_started",
            Self::ToolCallFinished { .. } => "tool_call_finished",
            Self::StepRetrying { .. } => "step_retrying",
            Self::FanOutStarted { .. } => "fan_out_started",
            Self::ItemRetrying { .. } => "item_retrying",
            Self::ItemFailed { .. } => "item_failed",
            Self::StepCompleted { .. } => "step_completed",
            Self::StepFailed { .. } => "step_failed",
            Self::StepSkipped { .. } => "step_skipped",
            Self::WaveFinished { .. } => "wave_finished",
            Self::ExecutionFinished { .. } => "execution_finished",
            Self::WorkflowStepEntered { .. } => "workflow_step_entered",
            Self::WorkflowOutputAccepted { .. } => "workflow_output_accepted",
            Self::WorkflowOutputRejected { .. } => "workflow_output_rejected",
            Self::WorkflowTransition { .. } => "workflow_transition",
            Self::RunFinished { .. } => "run_finished",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelope_is_flat_and_tagged() {
        let e = Envelope {
            epoch: 0,
            seq: 3,
            ts: 1,
            v: EVENT_VERSION,
            event: Event::StepSkipped {
                step: "s2".into(),
                reason: "r".into(),
            },
        };
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(
            v,
            json!({"seq": 3, "ts": 1, "v": 1, "type": "step_skipped", "step": "s2", "reason": "r"})
        );
        let back: Result<Envelope, _> = serde_json::from_value(v);
        assert_eq!(back.ok(), Some(e));
    }

    #[test]
    fn kind_matches_the_serde_tag() {
        let e = Event::ToolCallFinished {
            call_id: "c".into(),
            outcome: ToolOutcome::Ok { output: json!(1) },
            duration_ms: 2,
        };
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(v["type"], json!(e.kind()));
        assert_eq!(v["outcome"]["status"], json!("ok"));
    }

    #[test]
    fn a_bounded_error_keeps_the_end_of_long_output_within_its_limits() {
        // One 10 KB line of multi-byte characters, then the line that matters.
        let long = "é".repeat(5000);
        let e = ToolError::new("exit_status", "x".repeat(3000)).with_detail(json!({
            "stderr": format!("Traceback (most recent call last):\n{long}\nValueError: bad amount\n"),
            "stdout": long,
            "exit_code": 1,
            "body": "y".repeat(2000),
        }));
        let b = e.bounded();
        assert!(b.message.len() < 1100, "{}", b.message.len());
        let stderr = b.detail["stderr"].as_str().unwrap_or_default();
        assert!(stderr.ends_with("ValueError: bad amount"), "{stderr}");
        assert!(!stderr.contains("Traceback"), "{stderr}");
        assert!(stderr.len() <= 1100, "{}", stderr.len());
        // A single line longer than the bound keeps its end, cut on a character boundary.
        let stdout = b.detail["stdout"].as_str().unwrap_or_default();
        assert!(
            stdout.len() <= 1100 && stdout.ends_with('é'),
            "{}",
            stdout.len()
        );
        assert_eq!(b.detail["exit_code"], json!(1));
        assert!(
            b.detail["body"]
                .as_str()
                .unwrap_or_default()
                .contains("omitted")
        );
        assert!(b.to_value().to_string().len() < 4096);
        // A short error is unchanged.
        let short = ToolError::new("io", "reset").with_detail(json!({"stderr": "one line"}));
        assert_eq!(short.bounded(), short);
    }
}
