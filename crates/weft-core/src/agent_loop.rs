//! The agent loops' decisions: plan-and-execute and ReAct. Pure: `decide` says what must
//! happen next, and `model_replied` / `model_failed` / `user_replied` turn outcomes into events.
//! Garbage from a model (not JSON, unknown tools, cyclic plans, wrong arguments, empty replies)
//! is fed back within bounds and then ends the run as CANNOT_COMPLETE with the reason.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::Mode;
use crate::engine::{self, Invocation, Limits, Next};
use crate::event::{Event, InputRequest, ResponseVerdict, ReviewDecision, RunStatus};
use crate::graph::{ValidateOptions, validate};
use crate::model::{Message, ModelReply, ModelRequest, Purpose, Usage};
use crate::plan::Plan;
use crate::prompts;
use crate::state::{Phase, State, StepStatus, call_signature};
use crate::tool::ToolInfo;

/// A skill: named instructions the planner may pick and the step executor may follow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Skill {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub instructions: String,
}

/// What the agent loop needs to know of the agent (built by the shell from the agent file and
/// the tool registry).
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub mode: Mode,
    pub limits: Limits,
    /// System instructions, already rendered.
    pub instructions: String,
    /// The tools the model is offered (and may call).
    pub tools: Vec<ToolInfo>,
    pub skills: Vec<Skill>,
    pub approve_plans: bool,
    /// A reviewer checks each answer (plan mode).
    pub review_responses: bool,
}

impl AgentConfig {
    fn catalog(&self) -> BTreeMap<String, ToolInfo> {
        self.tools
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect()
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
    /// Call the model; report the reply with [`model_replied`] (or the failure with
    /// [`model_failed`]).
    CallModel {
        request: ModelRequest,
        step: Option<String>,
    },
    /// Record these events, then start these tool calls.
    Start {
        events: Vec<Event>,
        calls: Vec<Invocation>,
    },
    /// Tool calls are in flight.
    Wait,
    /// The session has ended or waits for a person.
    Done,
}

fn finished(status: RunStatus, error: Option<String>, answer: Option<String>) -> Event {
    Event::RunFinished {
        status,
        error,
        answer,
    }
}

/// Ends a run that still has steps to run: each pending (or waiting) step is skipped with the
/// reason, as the end of execution does, then the run finishes.
fn end_run(
    state: &State,
    status: RunStatus,
    error: Option<String>,
    answer: Option<String>,
) -> Vec<Event> {
    let mut events = Vec::new();
    if let Some(run) = &state.plan {
        let why = error.as_deref().unwrap_or("the run ended");
        for (s, r) in run.plan.steps.iter().zip(&run.steps) {
            if matches!(r.status, StepStatus::Pending | StepStatus::WaitingForUser) {
                events.push(Event::StepSkipped {
                    step: s.id.clone(),
                    reason: format!("the run ended before this step could run: {why}"),
                });
            }
        }
    }
    events.push(finished(status, error, answer));
    events
}

/// Decides the next move of an agent session.
pub fn decide(state: &State, cfg: &AgentConfig) -> AgentNext {
    if state.status.is_terminal() || state.status == crate::SessionStatus::WaitingForUser {
        return AgentNext::Done;
    }
    if state.task.is_none() {
        return AgentNext::Done;
    }
    let retries = cfg.limits.max_model_retries.max(1);
    if state.model_failures >= retries {
        return AgentNext::Record(end_run(
            state,
            RunStatus::Failed,
            Some(format!(
                "the model failed {} times in a row: {}",
                state.model_failures,
                state.error.as_deref().unwrap_or("unknown error")
            )),
            None,
        ));
    }
    if state.rejections >= retries {
        // One bound for every unusable reply of the current purpose: prose, wrong JSON and
        // rejected plans all count together.
        let why = state
            .feedback
            .as_deref()
            .unwrap_or("unusable reply")
            .replace('\n', "; ");
        let message = if state.phase == Phase::Planning {
            format!(
                "CANNOT_COMPLETE: the planner gave no valid plan in {} attempts: {why}",
                state.rejections
            )
        } else {
            format!(
                "CANNOT_COMPLETE: the model's replies could not be used after {} attempts: {why}",
                state.rejections
            )
        };
        return AgentNext::Record(end_run(state, RunStatus::Failed, Some(message), None));
    }
    match cfg.mode {
        Mode::React => decide_react(state, cfg),
        Mode::Plan => decide_plan(state, cfg),
        Mode::Workflow => AgentNext::Record(vec![finished(
            RunStatus::Failed,
            Some("workflow mode is not supported by this build of weft yet; use mode: plan or mode: react".into()),
            None,
        )]),
    }
}

fn decide_plan(state: &State, cfg: &AgentConfig) -> AgentNext {
    match state.phase {
        Phase::Planning => AgentNext::CallModel {
            request: prompts::planner(state, cfg),
            step: None,
        },
        Phase::Executing => match engine::decide_execution(state, &cfg.limits, true) {
            Next::Record(e) => AgentNext::Record(e),
            Next::Start { events, calls } => match approval_needed(state, cfg, &calls) {
                Some(e) => AgentNext::Record(e),
                None => AgentNext::Start { events, calls },
            },
            Next::Wait => AgentNext::Wait,
            Next::Done => AgentNext::Done,
            Next::CallExecutor { step } => AgentNext::CallModel {
                request: prompts::executor(state, cfg, &step),
                step: Some(step),
            },
        },
        Phase::Reviewing => AgentNext::CallModel {
            request: prompts::review(state, cfg),
            step: None,
        },
        Phase::Responding => AgentNext::CallModel {
            request: prompts::respond(state, cfg),
            step: None,
        },
        Phase::ReviewingResponse => {
            if cfg.review_responses {
                AgentNext::CallModel {
                    request: prompts::response_review(state, cfg),
                    step: None,
                }
            } else {
                AgentNext::Record(vec![finished(
                    RunStatus::Completed,
                    None,
                    state.drafts.last().cloned(),
                )])
            }
        }
        Phase::Idle | Phase::React | Phase::Finished => AgentNext::Done,
    }
}

/// A plan step's call of a tool that `requires_approval`: wait for a person, or (after the
/// answer) go on or refuse.
fn approval_needed(state: &State, cfg: &AgentConfig, calls: &[Invocation]) -> Option<Vec<Event>> {
    for c in calls {
        if !cfg.tool(&c.tool).is_some_and(|t| t.requires_approval) {
            continue;
        }
        let prefix = format!("{}=", c.call_id);
        let step = c.step.clone();
        match state
            .approved_calls
            .iter()
            .find_map(|a| a.strip_prefix(&prefix))
        {
            None => {
                return Some(vec![Event::WaitingForUser {
                    request: InputRequest {
                        kind: "tool_approval".into(),
                        question: format!(
                            "Allow the call {} {}? Reply `approve` or `deny` (with a reason).",
                            c.tool, c.args
                        ),
                        step,
                        tool: Some(c.tool.clone()),
                        missing: Vec::new(),
                        partial_call: json!({"tool": c.tool, "arguments": c.args}),
                        plan: None,
                        call_id: Some(c.call_id.clone()),
                    },
                }]);
            }
            Some(answer) if !is_yes(answer) => {
                let reason = format!("the user denied this call: {answer}");
                let mut v = vec![Event::ToolCallBlocked {
                    step: step.clone(),
                    call_id: None,
                    tool: c.tool.clone(),
                    args: c.args.clone(),
                    reason: reason.clone(),
                }];
                let literal = step
                    .as_deref()
                    .and_then(|s| state.plan.as_ref().and_then(|p| p.step(s)))
                    .is_some_and(|(i, _)| {
                        state
                            .plan
                            .as_ref()
                            .is_some_and(|p| p.plan.steps[i].tool.is_some())
                    });
                if let (true, Some(step)) = (literal, step) {
                    v.push(Event::StepFailed {
                        step,
                        error: crate::event::ToolError::new("denied", reason),
                        handled: false,
                    });
                }
                return Some(v);
            }
            Some(_) => {}
        }
    }
    None
}

/// The tool calls of the last assistant message that have no result yet.
fn unanswered_calls(state: &State) -> Vec<&crate::model::ToolCall> {
    let mut answered = std::collections::HashSet::new();
    for m in state.history.iter().rev() {
        match m {
            Message::Tool { call_id, .. } => {
                answered.insert(call_id.as_str());
            }
            Message::Assistant { tool_calls, .. } => {
                return tool_calls
                    .iter()
                    .filter(|c| !answered.contains(c.id.as_str()))
                    .collect();
            }
            _ => return Vec::new(),
        }
    }
    Vec::new()
}

fn is_yes(text: &str) -> bool {
    let t = text.trim().to_ascii_lowercase();
    matches!(
        t.as_str(),
        "y" | "yes" | "approve" | "approved" | "ok" | "okay" | "allow" | "go" | "go ahead"
    )
}

fn decide_react(state: &State, cfg: &AgentConfig) -> AgentNext {
    if !state.open_calls.is_empty() {
        return AgentNext::Wait;
    }
    let pending = unanswered_calls(state);
    if !pending.is_empty() {
        let mut record = Vec::new();
        let mut events = Vec::new();
        let mut calls = Vec::new();
        let mut wave_parallel: Option<bool> = None;
        for c in pending {
            let blocked = |reason: String| Event::ToolCallBlocked {
                step: None,
                call_id: Some(c.id.clone()),
                tool: c.name.clone(),
                args: c.arguments.clone(),
                reason,
            };
            let Some(info) = cfg.tool(&c.name) else {
                record.push(blocked(format!(
                    "`{}` is not a tool this agent may use; available: {}",
                    c.name,
                    cfg.tool_names()
                )));
                continue;
            };
            if c.name == ASK_USER {
                let question = c
                    .arguments
                    .get("question")
                    .and_then(Value::as_str)
                    .unwrap_or("The agent has a question.");
                record.push(Event::WaitingForUser {
                    request: InputRequest {
                        kind: "question".into(),
                        question: question.to_owned(),
                        step: None,
                        tool: Some(ASK_USER.into()),
                        missing: Vec::new(),
                        partial_call: Value::Null,
                        plan: None,
                        call_id: Some(c.id.clone()),
                    },
                });
                break;
            }
            if info.requires_approval {
                let prefix = format!("{}=", c.id);
                match state
                    .approved_calls
                    .iter()
                    .find_map(|a| a.strip_prefix(&prefix))
                {
                    None => {
                        record.push(Event::WaitingForUser {
                            request: InputRequest {
                                kind: "tool_approval".into(),
                                question: format!(
                                    "Allow the call {} {}? Reply `approve` or `deny` (with a reason).",
                                    c.name, c.arguments
                                ),
                                step: None,
                                tool: Some(c.name.clone()),
                                missing: Vec::new(),
                                partial_call: json!({"tool": c.name, "arguments": c.arguments}),
                                plan: None,
                                call_id: Some(c.id.clone()),
                            },
                        });
                        break;
                    }
                    Some(answer) if !is_yes(answer) => {
                        record.push(blocked(format!("the user denied this call: {answer}")));
                        continue;
                    }
                    Some(_) => {}
                }
            }
            // The calls of one reply run in rounds, as a plan's steps run in waves: a call of
            // a tool that is not `parallel` runs alone; calls of parallel tools run together,
            // up to `max_parallel`. The rest wait for the next round.
            match wave_parallel {
                None => wave_parallel = Some(info.parallel),
                Some(together) => {
                    if !together || !info.parallel || calls.len() >= cfg.limits.max_parallel.max(1)
                    {
                        continue;
                    }
                }
            }
            let inv = Invocation {
                call_id: c.id.clone(),
                step: None,
                tool: c.name.clone(),
                args: c.arguments.clone(),
                attempt: 1,
                idempotency_key: crate::state::call_key(
                    &state.session_id,
                    state.tool_invocations + calls.len() as u64 + 1,
                    &c.name,
                    &c.arguments,
                ),
                delay_ms: 0,
            };
            events.push(Event::ToolCallStarted {
                call_id: inv.call_id.clone(),
                step: None,
                tool: inv.tool.clone(),
                args: inv.args.clone(),
                attempt: 1,
                idempotency_key: inv.idempotency_key.clone(),
            });
            calls.push(inv);
        }
        if !record.is_empty() {
            return AgentNext::Record(record);
        }
        return AgentNext::Start { events, calls };
    }
    if state.phase != Phase::React {
        return AgentNext::Done;
    }
    if state.iterations >= cfg.limits.max_iterations {
        return AgentNext::Record(vec![finished(
            RunStatus::Failed,
            Some(format!(
                "CANNOT_COMPLETE: reached max_iterations ({}) without an answer",
                cfg.limits.max_iterations
            )),
            None,
        )]);
    }
    AgentNext::CallModel {
        request: prompts::react(state, cfg),
        step: None,
    }
}

/// Reads a JSON value from a model's text: plain JSON, JSON in a code fence, or the first
/// JSON object or array inside the text.
pub fn extract_json(text: &str) -> Result<Value, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("the reply is empty; a JSON object was expected".into());
    }
    if let Ok(v) = serde_json::from_str(t) {
        return Ok(v);
    }
    let unfenced = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|s| s.trim_end().strip_suffix("```"))
        .map(str::trim);
    if let Some(u) = unfenced
        && let Ok(v) = serde_json::from_str(u)
    {
        return Ok(v);
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (t.find(open), t.rfind(close))
            && a < b
            && let Ok(v) = serde_json::from_str(&t[a..=b])
        {
            return Ok(v);
        }
    }
    let preview: String = t.chars().take(120).collect();
    Err(format!("the reply is not JSON: `{preview}`"))
}

fn upper_field(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(|s| s.trim().to_ascii_uppercase().replace([' ', '-'], "_"))
}

fn str_field<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str))
}

fn rejected(purpose: Purpose, step: Option<&str>, reason: impl Into<String>) -> Event {
    Event::ModelReplyRejected {
        purpose,
        step: step.map(str::to_owned),
        reason: reason.into(),
    }
}

/// Turns a model's reply into events.
pub fn model_replied(
    state: &State,
    cfg: &AgentConfig,
    purpose: Purpose,
    step: Option<&str>,
    reply: ModelReply,
) -> Vec<Event> {
    let mut events = vec![Event::ModelReplied {
        purpose,
        step: step.map(str::to_owned),
        reply: reply.clone(),
    }];
    let more = match purpose {
        Purpose::React | Purpose::Workflow => react_replied(&reply),
        Purpose::Plan => planner_replied(state, cfg, &reply),
        Purpose::Execute => match step {
            Some(s) => executor_replied(state, cfg, s, &reply),
            None => vec![rejected(purpose, None, "an executor reply without a step")],
        },
        Purpose::Review => review_replied(state, cfg, &reply),
        Purpose::Respond => respond_replied(state, cfg, &reply),
        Purpose::ResponseReview => response_review_replied(state, cfg, &reply),
    };
    events.extend(more);
    events
}

fn react_replied(reply: &ModelReply) -> Vec<Event> {
    if !reply.tool_calls.is_empty() {
        return Vec::new();
    }
    if reply.content.trim().is_empty() {
        return vec![rejected(
            Purpose::React,
            None,
            "the reply was empty; answer the user or call a tool",
        )];
    }
    vec![finished(
        RunStatus::Completed,
        None,
        Some(reply.content.trim().to_owned()),
    )]
}

fn parse_plan_value(v: &Value) -> Option<&Value> {
    match v {
        Value::Array(_) => Some(v),
        Value::Object(m) => ["plan", "steps", "calls"]
            .iter()
            .find_map(|k| m.get(*k))
            .filter(|p| !p.is_null()),
        _ => None,
    }
}

fn planner_replied(state: &State, cfg: &AgentConfig, reply: &ModelReply) -> Vec<Event> {
    let value = match extract_json(&reply.content) {
        Ok(v) => v,
        Err(e) => return vec![rejected(Purpose::Plan, None, e)],
    };
    let direct = str_field(&value, &["direct_response", "response", "answer"]).map(str::to_owned);
    let plan_value = parse_plan_value(&value);
    if let (Some(answer), None) = (&direct, plan_value) {
        if state.plan.is_some() {
            // A replan that needs no more steps: answer from what was done.
            return vec![Event::AnswerDrafted {
                text: answer.clone(),
                round: 0,
            }];
        }
        return vec![finished(RunStatus::Completed, None, Some(answer.clone()))];
    }
    let Some(plan_value) = plan_value else {
        return vec![rejected(
            Purpose::Plan,
            None,
            "the reply has neither `direct_response` nor `plan`; give one of them",
        )];
    };
    let existing: Vec<&str> = state
        .plan
        .as_ref()
        .map(|run| run.plan.steps.iter().map(|s| s.id.as_str()).collect())
        .unwrap_or_default();
    let mut plan = match Plan::from_value_after(plan_value, &existing) {
        Ok(p) => p,
        Err(problems) => return vec![Event::PlanRejected { problems }],
    };
    if plan.steps.is_empty() && state.plan.is_none() {
        return vec![rejected(
            Purpose::Plan,
            None,
            "the plan has no steps; give a `direct_response` when no tool is needed",
        )];
    }
    let known: Vec<String> = state
        .plan
        .as_ref()
        .map(|run| {
            run.plan
                .steps
                .iter()
                .zip(&run.steps)
                .filter(|(_, r)| r.status.is_terminal())
                .map(|(s, _)| s.id.clone())
                .collect()
        })
        .unwrap_or_default();
    let catalog = cfg.catalog();
    let problems = validate(
        &plan,
        &catalog,
        &ValidateOptions {
            input: Some(&state.input),
            initial_state: Some(&state.data),
            known_steps: &known,
            require_tools: false,
        },
    );
    if !problems.is_empty() {
        return vec![Event::PlanRejected { problems }];
    }
    engine::normalize(&mut plan, &catalog);
    if state.plan.is_some() {
        return vec![Event::PlanRevised {
            plan,
            reason: state.replan_reason.clone().unwrap_or_default(),
        }];
    }
    if cfg.approve_plans {
        return vec![Event::WaitingForUser {
            request: InputRequest {
                kind: "plan_approval".into(),
                question:
                    "Approve this plan? Reply `approve`, `reject`, or send an edited plan as JSON."
                        .into(),
                step: None,
                tool: None,
                missing: Vec::new(),
                partial_call: Value::Null,
                plan: Some(plan),
                call_id: None,
            },
        }];
    }
    vec![Event::PlanAccepted { plan }]
}

fn required_args(info: &ToolInfo) -> Vec<String> {
    info.input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn executor_replied(
    state: &State,
    cfg: &AgentConfig,
    step: &str,
    reply: &ModelReply,
) -> Vec<Event> {
    let Some((i, run_step)) = state.plan.as_ref().and_then(|p| p.step(step)) else {
        return vec![rejected(
            Purpose::Execute,
            Some(step),
            format!("no step `{step}` in the plan"),
        )];
    };
    let fail_step = |error: crate::event::ToolError| Event::StepFailed {
        step: step.to_owned(),
        error,
        handled: false,
    };
    let last_chance = run_step.failures + 1 >= cfg.limits.max_step_attempts;
    let reject = |reason: String| -> Vec<Event> {
        let mut v = vec![rejected(Purpose::Execute, Some(step), reason.clone())];
        if last_chance {
            v.push(fail_step(crate::event::ToolError::new("executor", reason)));
        }
        v
    };
    let _ = i;
    // A native tool call counts as USE_TOOL.
    let value = if let Some(c) = reply.tool_calls.first() {
        json!({"action": "USE_TOOL", "tool": c.name, "arguments": c.arguments})
    } else {
        match extract_json(&reply.content) {
            Ok(v) => v,
            Err(e) => return reject(e),
        }
    };
    let Some(action) = upper_field(&value, &["action"]) else {
        return reject("the reply has no `action`; use USE_TOOL, REQUEST_TOOL_INPUT, DIRECT_RESPONSE or DESIGN_INSTRUCTIONS".into());
    };
    let tool_and_args = |value: &Value| -> Result<(String, Value), String> {
        let tool = str_field(value, &["tool", "name"])
            .ok_or("the reply names no `tool`")?
            .to_owned();
        let args = value
            .get("arguments")
            .or_else(|| value.get("args"))
            .cloned()
            .unwrap_or(json!({}));
        let args = match args {
            Value::String(s) => serde_json::from_str(&s)
                .map_err(|_| format!("`arguments` of `{tool}` is not a JSON object"))?,
            other => other,
        };
        if !args.is_object() {
            return Err(format!("`arguments` of `{tool}` must be an object"));
        }
        Ok((tool, args))
    };
    let use_tool = |tool: String, args: Value| -> Vec<Event> {
        let Some(info) = cfg.tool(&tool) else {
            let mut v = vec![Event::ToolCallBlocked {
                step: Some(step.to_owned()),
                call_id: None,
                tool: tool.clone(),
                args,
                reason: format!("unknown tool `{tool}`; available: {}", cfg.tool_names()),
            }];
            if last_chance {
                v.push(fail_step(crate::event::ToolError::new(
                    "unknown_tool",
                    format!("unknown tool `{tool}`"),
                )));
            }
            return v;
        };
        if info.name == ASK_USER {
            let question = args
                .get("question")
                .and_then(Value::as_str)
                .unwrap_or("The agent has a question.")
                .to_owned();
            return vec![
                Event::StepAction {
                    step: step.to_owned(),
                    action: "ASK_USER".into(),
                    detail: json!({"question": question}),
                },
                Event::WaitingForUser {
                    request: InputRequest {
                        kind: "question".into(),
                        question,
                        step: Some(step.to_owned()),
                        tool: Some(ASK_USER.into()),
                        missing: Vec::new(),
                        partial_call: Value::Null,
                        plan: None,
                        call_id: None,
                    },
                },
            ];
        }
        let sig = call_signature(&tool, &args);
        if run_step.signatures.contains(&sig) {
            let mut v = vec![Event::ToolCallBlocked {
                step: Some(step.to_owned()),
                call_id: None,
                tool,
                args,
                reason: "the same call (tool and arguments) was already made in this step; use its result or change the call".into(),
            }];
            if last_chance {
                v.push(fail_step(crate::event::ToolError::new(
                    "repeated_call",
                    "the step repeated the same tool call",
                )));
            }
            return v;
        }
        vec![Event::StepAction {
            step: step.to_owned(),
            action: "USE_TOOL".into(),
            detail: json!({"tool": tool, "arguments": args}),
        }]
    };
    match action.as_str() {
        "USE_TOOL" => match tool_and_args(&value) {
            Ok((tool, args)) => use_tool(tool, args),
            Err(e) => reject(e),
        },
        "REQUEST_TOOL_INPUT" => {
            let (tool, args) = match tool_and_args(&value) {
                Ok(t) => t,
                Err(e) => return reject(e),
            };
            let missing: Vec<String> = match cfg.tool(&tool) {
                Some(info) => required_args(info)
                    .into_iter()
                    .filter(|k| args.get(k).is_none_or(Value::is_null))
                    .collect(),
                None => return use_tool(tool, args),
            };
            if missing.is_empty() {
                // Every required argument is there: this is a tool call.
                return use_tool(tool, args);
            }
            let question = str_field(&value, &["question"])
                .map(str::to_owned)
                .unwrap_or_else(|| format!("Please provide {} for {tool}.", missing.join(", ")));
            vec![
                Event::StepAction {
                    step: step.to_owned(),
                    action: "REQUEST_TOOL_INPUT".into(),
                    detail: json!({"tool": tool, "missing": missing}),
                },
                Event::WaitingForUser {
                    request: InputRequest {
                        kind: "missing_input".into(),
                        question,
                        step: Some(step.to_owned()),
                        tool: Some(tool.clone()),
                        missing,
                        partial_call: json!({"tool": tool, "arguments": args}),
                        plan: None,
                        call_id: None,
                    },
                },
            ]
        }
        "DIRECT_RESPONSE" => {
            let Some(text) = str_field(&value, &["response", "text", "result"]) else {
                return reject("DIRECT_RESPONSE needs a `response` string".into());
            };
            vec![
                Event::StepAction {
                    step: step.to_owned(),
                    action: "DIRECT_RESPONSE".into(),
                    detail: Value::Null,
                },
                Event::StepCompleted {
                    step: step.to_owned(),
                    output: Value::String(text.to_owned()),
                    summary: Some(engine::summarize(&Value::String(text.to_owned()))),
                },
            ]
        }
        "DESIGN_INSTRUCTIONS" => {
            let Some(text) = str_field(&value, &["instructions"]) else {
                return reject("DESIGN_INSTRUCTIONS needs an `instructions` string".into());
            };
            vec![
                Event::StepAction {
                    step: step.to_owned(),
                    action: "DESIGN_INSTRUCTIONS".into(),
                    detail: Value::Null,
                },
                Event::StepCompleted {
                    step: step.to_owned(),
                    output: json!({"instructions": text}),
                    summary: Some(engine::summarize(&Value::String(text.to_owned()))),
                },
            ]
        }
        other => reject(format!(
            "unknown action `{other}`; use USE_TOOL, REQUEST_TOOL_INPUT, DIRECT_RESPONSE or DESIGN_INSTRUCTIONS"
        )),
    }
}

fn pending_step_failures(state: &State, reason: &str) -> Vec<Event> {
    let Some(run) = &state.plan else {
        return Vec::new();
    };
    run.plan
        .steps
        .iter()
        .zip(&run.steps)
        .filter(|(_, r)| matches!(r.status, StepStatus::Pending | StepStatus::WaitingForUser))
        .map(|(s, _)| Event::StepFailed {
            step: s.id.clone(),
            error: crate::event::ToolError::new("replan_limit", reason),
            handled: false,
        })
        .collect()
}

fn review_replied(state: &State, cfg: &AgentConfig, reply: &ModelReply) -> Vec<Event> {
    let value = match extract_json(&reply.content) {
        Ok(v) => v,
        Err(e) => return vec![rejected(Purpose::Review, None, e)],
    };
    let reason = str_field(&value, &["reason", "rationale"])
        .unwrap_or_default()
        .to_owned();
    let decision = match upper_field(&value, &["decision", "outcome"]).as_deref() {
        Some("CONTINUE") => ReviewDecision::Continue,
        Some("REPLAN") => ReviewDecision::Replan,
        Some("FINAL_RESPONSE") => ReviewDecision::FinalResponse,
        Some("ASK_USER") => ReviewDecision::AskUser,
        Some("CANNOT_COMPLETE") => ReviewDecision::CannotComplete,
        other => {
            return vec![rejected(
                Purpose::Review,
                None,
                format!(
                    "`decision` is {other:?}; use CONTINUE, REPLAN, FINAL_RESPONSE, ASK_USER or CANNOT_COMPLETE"
                ),
            )];
        }
    };
    match decision {
        ReviewDecision::Replan if state.replans >= cfg.limits.max_replans => {
            let why = format!(
                "replan limit ({}) reached; {reason}",
                cfg.limits.max_replans
            );
            let mut v = pending_step_failures(state, &why);
            v.push(Event::ReviewDecided {
                decision: ReviewDecision::FinalResponse,
                reason: why,
            });
            v
        }
        ReviewDecision::AskUser => {
            let question = str_field(&value, &["question"])
                .map(str::to_owned)
                .unwrap_or_else(|| reason.clone());
            vec![
                Event::ReviewDecided { decision, reason },
                Event::WaitingForUser {
                    request: InputRequest {
                        kind: "question".into(),
                        question,
                        step: None,
                        tool: None,
                        missing: Vec::new(),
                        partial_call: Value::Null,
                        plan: None,
                        call_id: None,
                    },
                },
            ]
        }
        ReviewDecision::CannotComplete => {
            let mut v = vec![Event::ReviewDecided {
                decision,
                reason: reason.clone(),
            }];
            v.extend(end_run(
                state,
                RunStatus::Failed,
                Some(format!("CANNOT_COMPLETE: {reason}")),
                Some(if reason.is_empty() {
                    "The task cannot be completed.".into()
                } else {
                    reason
                }),
            ));
            v
        }
        _ => vec![Event::ReviewDecided { decision, reason }],
    }
}

fn respond_replied(_state: &State, cfg: &AgentConfig, reply: &ModelReply) -> Vec<Event> {
    let mut text = reply.content.trim().to_owned();
    if let Ok(v) = serde_json::from_str::<Value>(&text)
        && let Some(a) = str_field(&v, &["answer", "response", "text"])
    {
        text = a.to_owned();
    }
    if text.is_empty() {
        return vec![rejected(
            Purpose::Respond,
            None,
            "the answer was empty; write the answer as text",
        )];
    }
    let round = u32::try_from(_state.drafts.len()).unwrap_or(u32::MAX);
    let mut v = vec![Event::AnswerDrafted {
        text: text.clone(),
        round,
    }];
    if !cfg.review_responses {
        v.push(finished(RunStatus::Completed, None, Some(text)));
    }
    v
}

fn response_review_replied(state: &State, cfg: &AgentConfig, reply: &ModelReply) -> Vec<Event> {
    let value = match extract_json(&reply.content) {
        Ok(v) => v,
        Err(e) => return vec![rejected(Purpose::ResponseReview, None, e)],
    };
    let feedback = str_field(&value, &["feedback", "reason", "question"])
        .unwrap_or_default()
        .to_owned();
    let draft = state.drafts.last().cloned();
    let verdict = match upper_field(&value, &["verdict", "decision"]).as_deref() {
        Some("ACCEPT") => ResponseVerdict::Accept,
        Some("REFINE") => ResponseVerdict::Refine,
        Some("ASK_USER") => ResponseVerdict::AskUser,
        Some("CANNOT_COMPLETE") => ResponseVerdict::CannotComplete,
        other => {
            return vec![rejected(
                Purpose::ResponseReview,
                None,
                format!("`verdict` is {other:?}; use ACCEPT, REFINE, ASK_USER or CANNOT_COMPLETE"),
            )];
        }
    };
    let reviewed = Event::ResponseReviewed {
        verdict,
        feedback: feedback.clone(),
    };
    match verdict {
        ResponseVerdict::Accept => vec![reviewed, finished(RunStatus::Completed, None, draft)],
        ResponseVerdict::Refine => {
            let rounds = u32::try_from(state.drafts.len()).unwrap_or(u32::MAX);
            if rounds >= cfg.limits.max_response_rounds {
                // Out of rounds: the last draft stands.
                vec![reviewed, finished(RunStatus::Completed, None, draft)]
            } else {
                vec![reviewed]
            }
        }
        ResponseVerdict::AskUser => vec![
            reviewed,
            Event::WaitingForUser {
                request: InputRequest {
                    kind: "question".into(),
                    question: feedback,
                    step: None,
                    tool: None,
                    missing: Vec::new(),
                    partial_call: Value::Null,
                    plan: None,
                    call_id: None,
                },
            },
        ],
        ResponseVerdict::CannotComplete => vec![
            reviewed,
            finished(
                RunStatus::Failed,
                Some(format!("CANNOT_COMPLETE: {feedback}")),
                draft.or(Some(feedback)),
            ),
        ],
    }
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
    if !retryable || state.model_failures + 1 >= cfg.limits.max_model_retries.max(1) {
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

/// A person's answer to a waiting session. Plan approvals are read here: `approve`, `reject`,
/// or an edited plan (validated before it runs).
pub fn user_replied(state: &State, cfg: &AgentConfig, text: &str) -> Vec<Event> {
    let mut events = vec![Event::UserReplied {
        text: text.to_owned(),
    }];
    let Some(req) = &state.waiting else {
        return events;
    };
    if req.kind != "plan_approval" {
        return events;
    }
    let t = text.trim();
    if is_yes(t) {
        if let Some(plan) = &req.plan {
            events.push(Event::PlanAccepted { plan: plan.clone() });
        }
        return events;
    }
    let lower = t.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "n" | "no" | "reject" | "rejected" | "deny" | "cancel"
    ) {
        events.push(finished(
            RunStatus::Failed,
            Some("the user rejected the plan".into()),
            None,
        ));
        return events;
    }
    let edited = extract_json(t)
        .ok()
        .and_then(|v| parse_plan_value(&v).cloned());
    let Some(edited) = edited else {
        events.push(Event::WaitingForUser {
            request: InputRequest {
                question: format!(
                    "`{t}` is neither `approve`, `reject` nor a plan in JSON. {}",
                    req.question
                ),
                ..req.clone()
            },
        });
        return events;
    };
    let catalog = cfg.catalog();
    let plan = Plan::from_value(&edited).and_then(|mut plan| {
        let problems = validate(
            &plan,
            &catalog,
            &ValidateOptions {
                input: Some(&state.input),
                ..ValidateOptions::default()
            },
        );
        if problems.is_empty() {
            engine::normalize(&mut plan, &catalog);
            Ok(plan)
        } else {
            Err(problems)
        }
    });
    match plan {
        Ok(plan) => events.push(Event::PlanAccepted { plan }),
        Err(problems) => {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            events.push(Event::WaitingForUser {
                request: InputRequest {
                    question: format!(
                        "The edited plan is invalid: {}. Reply `approve` for the original plan, `reject`, or send a corrected plan.",
                        list.join("; ")
                    ),
                    ..req.clone()
                },
            });
        }
    }
    events
}

/// The events that start a new task in a session.
pub fn start_turn(task: &str, input: Value) -> Vec<Event> {
    vec![Event::TurnStarted {
        task: task.to_owned(),
        input,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ToolOutcome;
    use crate::model::{ToolCall, Usage};

    fn react_config() -> AgentConfig {
        let echo: ToolInfo = serde_json::from_value(json!({"name": "echo"})).unwrap();
        AgentConfig {
            mode: Mode::React,
            limits: Limits::default(),
            instructions: String::new(),
            tools: vec![echo],
            skills: Vec::new(),
            approve_plans: false,
            review_responses: false,
        }
    }

    fn echo_reply(k: u32) -> ModelReply {
        ModelReply {
            tool_calls: vec![ToolCall {
                id: format!("c{k}"),
                name: "echo".into(),
                arguments: json!({"text": "x"}),
            }],
            usage: Usage::default(),
            ..ModelReply::default()
        }
    }

    /// Runs `turns` ReAct iterations the way a shell must: each request is dropped before its
    /// reply is applied (`hold` keeps every request alive instead). Returns the state.
    fn react_turns(turns: u32, hold: bool) -> State {
        let cfg = react_config();
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
