//! The agent loops' decisions. Pure: `decide` says what must happen next, and `model_replied` /
//! `model_failed` / `user_replied` turn outcomes into events.
//!
//! Each mode is a module behind one small interface (`ModeLoop`): `plan` (plan-and-execute),
//! `react` and `workflow` (a state machine of steps). What every mode shares is here and in the
//! modules beside it: the checks every decision starts with (a finished or waiting session, the
//! bounds on failed model calls and unusable replies), reading model replies (`reply`), waits for
//! a person (`wait`), the model's own tool calls (`tool_calls`), the checks made before a call
//! ([`budget`], `repeats`), the long-term memories a turn starts with (`memory`) and ending a
//! run (`end`). Every model call of every mode is returned by [`decide`], here.
//!
//! Garbage from a model (not JSON, unknown tools, cyclic plans, wrong arguments, empty replies)
//! is fed back within bounds and then ends the run as CANNOT_COMPLETE with the reason.

pub mod budget;
mod compact;
mod end;
mod flows;
mod memory;
mod plan;
mod react;
mod repeats;
mod reply;
mod tool_calls;
mod wait;
mod workflow;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::agent::{Mode, Skill};
use crate::engine::Invocation;
use crate::event::{Event, InputRequest, RunStatus};
use crate::limits::Limits;
use crate::model::{ModelReply, ModelRequest, Purpose, Usage};
use crate::state::{Phase, State};
use crate::tool::ToolInfo;

use end::end_run;
pub use memory::{MEMORY_ITEM_BYTES, memories_recalled};
use plan::PlanLoop;
use react::React;
pub use reply::extract_json;
pub use workflow::WorkflowConfig;
use workflow::WorkflowLoop;

/// What the agent loop needs to know of the agent (built by the shell from the agent file and
/// the tool registry).
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// How the agent works (plan, ReAct, workflow).
    pub mode: Mode,
    /// The agent's bounds (steps, attempts, replans, iterations, tokens).
    pub limits: Limits,
    /// System instructions, already rendered.
    pub instructions: String,
    /// The tools the model is offered (and may call).
    pub tools: Vec<ToolInfo>,
    /// The agent's skills, which plan steps may name in `_skill`.
    pub skills: Vec<Skill>,
    /// A person approves each plan before it runs (plan mode).
    pub approve_plans: bool,
    /// A reviewer checks each answer (plan mode).
    pub review_responses: bool,
    /// Each new task's long-term memories are searched for and shown to the model (the shell
    /// searches when `decide` asks with [`AgentNext::Recall`]).
    pub recall_memories: bool,
    /// The state machine (workflow mode).
    pub workflow: Option<std::sync::Arc<WorkflowConfig>>,
    /// The agent file's budget; a budget recorded in the session (`budget_set`) replaces it.
    pub budget: Option<crate::budget::Budget>,
    /// The model's prices and output bound, for what a call may cost at most
    /// ([`crate::budget::call_max`]).
    pub model_costs: crate::budget::ModelCosts,
    /// What a repeat of a call of the run that is not idempotent meets (`repeats:`).
    pub repeats: crate::repeats::Rules,
    /// Which tools' outputs are trusted and which arguments may not take untrusted data
    /// (`trust:`); `None` when the agent file has none: no labels are recorded then.
    pub trust: Option<crate::trust::Trust>,
}

impl AgentConfig {
    fn catalog(&self) -> BTreeMap<String, ToolInfo> {
        self.tools
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect()
    }

    /// The names of the agent's skills, as a plan step's `_skill` names them.
    pub fn skill_names(&self) -> Vec<&str> {
        self.skills.iter().map(|s| s.name.as_str()).collect()
    }

    /// The skill a plan step's `_skill` names.
    pub fn skill(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.iter().find(|t| t.name == name)
    }

    fn tool_names(&self) -> String {
        self.tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The name of the built-in tool through which a model asks the person a question.
pub const ASK_USER: &str = "ask_user";

/// What must happen next in an agent session.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentNext {
    /// Record these events.
    Record(Vec<Event>),
    /// Search the session's long-term memories for `query` (at most `limit`, best first) and
    /// report what was found with [`memories_recalled`], before any model call of the turn.
    Recall {
        /// The text to search for.
        query: String,
        /// The most memories to return.
        limit: usize,
    },
    /// Call the model; report the reply with [`model_replied`] (or the failure with
    /// [`model_failed`]).
    CallModel {
        /// The request to send.
        request: ModelRequest,
        /// The plan step the call serves (the step executor's); `None` otherwise.
        step: Option<String>,
    },
    /// Record these events, then start these tool calls.
    Start {
        /// Events to append first (`tool_call_started` among them).
        events: Vec<Event>,
        /// The calls to perform; each one's end is recorded as a `tool_call_finished` event.
        calls: Vec<Invocation>,
    },
    /// Tool calls are in flight.
    Wait,
    /// The session has ended or waits for a person.
    Done,
}
/// One agent mode's part of the loop. The shared checks have run when `decide` is asked; the
/// shared part records the reply (`model_replied`) and the answer (`user_replied`) before the
/// mode adds what they mean.
trait ModeLoop {
    /// The next move of a session that is running, has a task and is within its bounds.
    fn decide(state: &State, cfg: &AgentConfig) -> AgentNext;

    /// What a reply of the model means, as events after its `model_replied`.
    fn replied(
        state: &State,
        cfg: &AgentConfig,
        purpose: Purpose,
        step: Option<&str>,
        reply: &ModelReply,
    ) -> Vec<Event>;

    /// What a person's answer to `req` means, as events after its `user_replied`.
    fn answered(
        _state: &State,
        _cfg: &AgentConfig,
        _req: &InputRequest,
        _text: &str,
    ) -> Vec<Event> {
        Vec::new()
    }
}

/// Decides the next move of an agent session.
pub fn decide(state: &State, cfg: &AgentConfig) -> AgentNext {
    if state.status.is_terminal() || state.status == crate::SessionStatus::WaitingForUser {
        return AgentNext::Done;
    }
    if state.turn.task.is_none() {
        return AgentNext::Done;
    }
    let retries = cfg.limits.max_model_retries.max(1);
    if state.turn.model_failures >= retries {
        return AgentNext::Record(end_run(
            state,
            RunStatus::Failed,
            Some(format!(
                "the model failed {} times in a row: {}",
                state.turn.model_failures,
                state.turn.error.as_deref().unwrap_or("unknown error")
            )),
            None,
        ));
    }
    if state.turn.rejections >= retries {
        // One bound for every unusable reply of the current purpose: prose, wrong JSON and
        // rejected plans all count together.
        let why = state
            .turn
            .feedback
            .as_deref()
            .unwrap_or("unusable reply")
            .replace('\n', "; ");
        let message = if state.phase == Phase::Planning {
            format!(
                "CANNOT_COMPLETE: the planner gave no valid plan in {} attempts: {why}",
                state.turn.rejections
            )
        } else {
            format!(
                "CANNOT_COMPLETE: the model's replies could not be used after {} attempts: {why}",
                state.turn.rejections
            )
        };
        return AgentNext::Record(end_run(state, RunStatus::Failed, Some(message), None));
    }
    if let Some(recall) = memory::due(state, cfg) {
        return recall;
    }
    let next = match cfg.mode {
        Mode::React => React::decide(state, cfg),
        Mode::Plan => PlanLoop::decide(state, cfg),
        Mode::Workflow => WorkflowLoop::decide(state, cfg),
    };
    // Every tool call's label, and the protected arguments it would fill (`trust:`).
    let next = flows::guard(state, cfg, next);
    // The one hook before every model call: a conversation over its budget is compacted first.
    let next = match &next {
        AgentNext::CallModel { request, .. } => {
            compact::before_call(state, cfg, request).unwrap_or(next)
        }
        _ => next,
    };
    // Then every model call and every tool call is checked against the budget in force.
    budget::guard(state, cfg, next)
}

/// The events that end a run as failed with `error` (pending plan steps skipped).
fn end_run_failed(state: &State, error: String) -> Vec<Event> {
    end_run(state, RunStatus::Failed, Some(error), None)
}

/// Turns a model's reply into events. Every tool call of the reply gets an id of its own first
/// (an empty or repeated id from the provider is replaced, and kept beside the new one), so each
/// call is started, finished and answered under its own id.
pub fn model_replied(
    state: &State,
    cfg: &AgentConfig,
    purpose: Purpose,
    step: Option<&str>,
    mut reply: ModelReply,
) -> Vec<Event> {
    reply::identify_calls(state, &mut reply.tool_calls);
    let more = match (purpose, cfg.mode) {
        (Purpose::Compact, _) => compact::replied(state, cfg, &reply),
        (_, Mode::Plan) => PlanLoop::replied(state, cfg, purpose, step, &reply),
        (_, Mode::React) => React::replied(state, cfg, purpose, step, &reply),
        (_, Mode::Workflow) => WorkflowLoop::replied(state, cfg, purpose, step, &reply),
    };
    let mut events = Vec::with_capacity(1 + more.len());
    events.push(Event::ModelReplied {
        purpose,
        step: step.map(str::to_owned),
        reply,
    });
    events.extend(more);
    events
}

/// Records a model failure (after the provider's own retries). A failure that retrying cannot
/// fix ends the run at once, saved as failed with the error.
pub fn model_failed(
    state: &State,
    cfg: &AgentConfig,
    purpose: Purpose,
    error: String,
    retryable: bool,
    usage: Usage,
) -> Vec<Event> {
    let mut v = vec![Event::ModelFailed {
        purpose,
        error: error.clone(),
        retryable,
        usage,
    }];
    if !retryable || state.turn.model_failures + 1 >= cfg.limits.max_model_retries.max(1) {
        v.extend(end_run(
            state,
            RunStatus::Failed,
            Some(format!(
                "the model call ({}) failed: {error}",
                purpose.as_str()
            )),
            None,
        ));
    }
    v
}

/// A person's answer to a waiting session; the mode reads what it means (a plan approval).
pub fn user_replied(state: &State, cfg: &AgentConfig, text: &str) -> Vec<Event> {
    let mut events = vec![Event::UserReplied {
        text: text.to_owned(),
    }];
    let Some(req) = &state.turn.waiting else {
        return events;
    };
    if req.kind == crate::budget::WAIT_KIND {
        events.extend(budget::answered(state, text));
        return events;
    }
    events.extend(match cfg.mode {
        Mode::Plan => PlanLoop::answered(state, cfg, req, text),
        Mode::React => React::answered(state, cfg, req, text),
        Mode::Workflow => WorkflowLoop::answered(state, cfg, req, text),
    });
    events
}

/// The events that start a new task in a session.
pub fn start_turn(task: &str, input: Value) -> Vec<Event> {
    vec![Event::TurnStarted {
        task: task.to_owned(),
        input,
    }]
}

/// A ReAct session that has started its first turn (task "go"): where the loops' tests begin.
#[cfg(test)]
fn react_session_started() -> State {
    let mut state = State::new();
    for e in [
        Event::SessionStarted {
            session_id: "s".into(),
            agent: "a".into(),
            input: Value::Null,
            mode: Some(Mode::React),
            parent_id: None,
        },
        Event::TurnStarted {
            task: "go".into(),
            input: Value::Null,
        },
    ] {
        state.apply(&e);
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ToolOutcome;
    use crate::model::{ToolCall, Usage};
    use serde_json::json;

    fn react_config() -> AgentConfig {
        let echo: ToolInfo =
            serde_json::from_value(json!({"name": "echo", "idempotent": true})).unwrap();
        AgentConfig {
            mode: Mode::React,
            limits: Limits::default(),
            instructions: String::new(),
            tools: vec![echo],
            skills: Vec::new(),
            approve_plans: false,
            review_responses: false,
            recall_memories: false,
            workflow: None,
            budget: None,
            model_costs: crate::budget::ModelCosts::default(),
            repeats: crate::repeats::Rules::default(),
            trust: None,
        }
    }

    fn echo_reply(k: u32) -> ModelReply {
        ModelReply {
            tool_calls: vec![ToolCall {
                id: format!("c{k}"),
                name: "echo".into(),
                arguments: json!({"text": "x"}),
                provider_id: None,
            }],
            usage: Usage::default(),
            ..ModelReply::default()
        }
    }

    /// Runs `turns` ReAct iterations the way a shell must: each request is dropped before its
    /// reply is applied (`hold` keeps every request alive instead). Returns the state.
    fn react_turns(turns: u32, hold: bool) -> State {
        let cfg = react_config();
        let mut state = react_session_started();
        let mut held = Vec::new();
        for k in 0..turns {
            let AgentNext::CallModel { request, step } = decide(&state, &cfg) else {
                panic!("a model call is due");
            };
            assert!(state.history.is_shared(), "the request shares the history");
            assert_eq!(request.messages.len(), state.history.len() + 1);
            let events = model_replied(
                &state,
                &cfg,
                request.purpose,
                step.as_deref(),
                echo_reply(k),
            );
            if hold {
                held.push(request);
            } else {
                drop(request);
            }
            for e in &events {
                state.apply(e);
            }
            let AgentNext::Start { events, calls } = decide(&state, &cfg) else {
                panic!("the echo call starts");
            };
            for e in &events {
                state.apply(e);
            }
            for c in calls {
                state.apply(&Event::ToolCallFinished {
                    call_id: c.call_id,
                    outcome: ToolOutcome::Ok { output: json!("x") },
                    duration_ms: 0,
                });
            }
        }
        state
    }

    #[test]
    fn react_requests_share_the_history_and_appends_do_not_copy_it() {
        let state = react_turns(5, false);
        assert_eq!(state.history.len(), 11);
        assert!(!state.history.is_shared());
        assert_eq!(state.history.copies(), 0);
        // A request kept alive across the reply's append makes the append copy the history:
        // the check above would catch a shell that did so.
        let state = react_turns(5, true);
        assert_eq!(state.history.copies(), 5);
    }
}
