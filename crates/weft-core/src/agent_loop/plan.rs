//! Plan-and-execute: a planner makes a data-flow graph of tool calls, the engine runs it in
//! waves (a step executor carries out steps without a literal call), a review follows each wave,
//! and a resolver writes the answer from the evidence, checked by a reviewer within bounds.

use serde_json::{Value, json};

use super::end::{end_run, finished};
use super::reply::{extract_json, rejected, str_field, upper_field};
use super::wait::{self, approval, approval_request, is_yes};
use super::{ASK_USER, AgentConfig, AgentNext, ModeLoop};
use crate::engine::{self, Invocation, Next};
use crate::event::{Event, InputRequest, ResponseVerdict, ReviewDecision, RunStatus};
use crate::graph::{ValidateOptions, validate};
use crate::model::{ModelReply, Purpose};
use crate::plan::Plan;
use crate::prompts;
use crate::repeats::{self, Policy};
use crate::state::{Phase, State, StepStatus};
use crate::tool::ToolInfo;

/// The plan-and-execute loop.
pub(crate) struct PlanLoop;

impl ModeLoop for PlanLoop {
    fn decide(state: &State, cfg: &AgentConfig) -> AgentNext {
        match state.phase {
            Phase::Planning => AgentNext::CallModel {
                request: prompts::planner(state, cfg),
                step: None,
            },
            Phase::Executing => match engine::decide_execution(state, &cfg.limits, true) {
                Next::Record(e) => AgentNext::Record(e),
                Next::Start { events, calls } => match repeated(state, cfg, &calls)
                    .or_else(|| approval_needed(state, cfg, &calls))
                {
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
                        state.turn.drafts.last().cloned(),
                    )])
                }
            }
            Phase::Idle | Phase::React | Phase::Finished => AgentNext::Done,
        }
    }

    fn replied(
        state: &State,
        cfg: &AgentConfig,
        purpose: Purpose,
        step: Option<&str>,
        reply: &ModelReply,
    ) -> Vec<Event> {
        match purpose {
            Purpose::Plan => planner_replied(state, cfg, reply),
            Purpose::Execute => match step {
                Some(s) => executor_replied(state, cfg, s, reply),
                None => vec![rejected(purpose, None, "an executor reply without a step")],
            },
            Purpose::Review => review_replied(state, cfg, reply),
            Purpose::Respond => respond_replied(state, cfg, reply),
            Purpose::ResponseReview => response_review_replied(state, cfg, reply),
            Purpose::React | Purpose::Workflow | Purpose::Compact | Purpose::Judge => {
                vec![rejected(
                    purpose,
                    step,
                    format!("a {} reply in plan mode", purpose.as_str()),
                )]
            }
        }
    }

    /// Plan approvals: `approve`, `reject`, or an edited plan (validated before it runs).
    fn answered(state: &State, cfg: &AgentConfig, req: &InputRequest, text: &str) -> Vec<Event> {
        let mut events = Vec::new();
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
        let skills = cfg.skill_names();
        let plan = Plan::from_value(&edited).and_then(|mut plan| {
            let problems = validate(
                &plan,
                &catalog,
                &ValidateOptions {
                    input: Some(&state.input),
                    skills: &skills,
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
}

/// A plan step's call that repeats an earlier call of the run (see [`crate::repeats`]):
/// refused, its step given the earlier call's outcome; or, under `ask`, a wait for a person
/// (whose denial is a refusal).
fn repeated(state: &State, cfg: &AgentConfig, calls: &[Invocation]) -> Option<Vec<Event>> {
    for c in calls {
        if c.item.is_some() {
            continue;
        }
        let Some(info) = cfg.tool(&c.tool) else {
            continue;
        };
        let Some(rep) = super::repeats::check(state, &cfg.repeats, info, &c.args) else {
            continue;
        };
        match (rep.policy, approval(state, &c.call_id)) {
            (Policy::Ask, None) => {
                let mut request = approval_request(&c.tool, &c.args, c.step.clone(), &c.call_id);
                request.question = rep.question(&c.tool, &c.args);
                return Some(vec![Event::WaitingForUser { request }]);
            }
            (Policy::Ask, Some(answer)) if is_yes(answer) => {}
            _ => {
                let mut v = vec![rep.refused(c.step.clone(), None, &c.tool, &c.args)];
                if let Some(step) = &c.step {
                    v.extend(engine::step_outcome(
                        state,
                        &cfg.limits,
                        step,
                        rep.earlier.outcome.clone(),
                    ));
                }
                return Some(v);
            }
        }
    }
    None
}

/// A plan step's call of a tool that `requires_approval`: wait for a person, or (after the
/// answer) go on or refuse.
fn approval_needed(state: &State, cfg: &AgentConfig, calls: &[Invocation]) -> Option<Vec<Event>> {
    for c in calls {
        if !cfg.tool(&c.tool).is_some_and(|t| t.requires_approval) {
            continue;
        }
        let step = c.step.clone();
        match approval(state, &c.call_id) {
            None => {
                return Some(vec![Event::WaitingForUser {
                    request: approval_request(&c.tool, &c.args, step, &c.call_id),
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
                    repeats: None,
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
    let skills = cfg.skill_names();
    let problems = validate(
        &plan,
        &catalog,
        &ValidateOptions {
            input: Some(&state.input),
            initial_state: Some(&state.data),
            known_steps: &known,
            require_tools: false,
            skills: &skills,
            tools_declared_in: None,
        },
    );
    if !problems.is_empty() {
        return vec![Event::PlanRejected { problems }];
    }
    engine::normalize(&mut plan, &catalog);
    if state.plan.is_some() {
        return vec![Event::PlanRevised {
            plan,
            reason: state.turn.replan_reason.clone().unwrap_or_default(),
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

/// The step executor's reply as events. What it refuses, `prompts::exact_executor_schema`
/// (the grammar of a local model) does not allow: a change to one is a change to the other.
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
    let planned = state.plan.as_ref().and_then(|p| p.plan.steps.get(i));
    if let Some(schema) = planned.and_then(|s| s.output_schema.as_ref()) {
        return match quarantined_output(schema, reply) {
            Ok(output) => direct_response(step, output),
            Err(reason) => reject(reason),
        };
    }
    let skill = planned.and_then(|s| s.skill.clone());
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
                repeats: None,
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
                .filter(|q| !q.trim().is_empty())
                .unwrap_or("The agent has a question.")
                .to_owned();
            return vec![
                Event::StepAction {
                    step: step.to_owned(),
                    action: "ASK_USER".into(),
                    detail: json!({"question": question}),
                },
                Event::WaitingForUser {
                    request: wait::question(
                        question,
                        Some(step.to_owned()),
                        Some(ASK_USER.into()),
                        None,
                    ),
                },
            ];
        }
        if repeats::in_step(&run_step.signatures, &tool, &args) {
            let mut v = vec![Event::ToolCallBlocked {
                step: Some(step.to_owned()),
                call_id: None,
                tool,
                args,
                reason: "the same call (tool and arguments) was already made in this step; use its result or change the call".into(),
                repeats: None,
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
                .filter(|q| !q.trim().is_empty())
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
            direct_response(step, Value::String(text.to_owned()))
        }
        "DESIGN_INSTRUCTIONS" => {
            // Local instructions drawn from the step's selected skill, for the steps that
            // depend on it: without a skill there is nothing to draw them from.
            let Some(skill) = skill else {
                return reject("DESIGN_INSTRUCTIONS returns instructions drawn from the step's selected skill, and this step has no `_skill`; use DIRECT_RESPONSE or USE_TOOL".into());
            };
            let Some(text) = str_field(&value, &["instructions"]) else {
                return reject("DESIGN_INSTRUCTIONS needs an `instructions` string".into());
            };
            vec![
                Event::StepAction {
                    step: step.to_owned(),
                    action: "DESIGN_INSTRUCTIONS".into(),
                    detail: json!({"skill": skill}),
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

/// The executor answered step `step` without a call: `output` is the step's.
fn direct_response(step: &str, output: Value) -> Vec<Event> {
    vec![
        Event::StepAction {
            step: step.to_owned(),
            action: "DIRECT_RESPONSE".into(),
            detail: Value::Null,
        },
        Event::StepCompleted {
            step: step.to_owned(),
            summary: Some(engine::summarize(&output)),
            output,
        },
    ]
}

/// The value the executor of a step with an `_outputSchema` (a quarantined step) returned: the
/// `response` of a `DIRECT_RESPONSE`, a value of the schema (a text that holds one is read as
/// it). Any other reply is refused with the reason; `prompts::quarantined_schema` (the grammar
/// of a local model) allows none of them.
fn quarantined_output(schema: &Value, reply: &ModelReply) -> Result<Value, String> {
    const FORM: &str = "this step calls no tool: reply {\"action\": \"DIRECT_RESPONSE\", \"response\": <a value that matches the step's `_outputSchema`>}";
    if !reply.tool_calls.is_empty() {
        return Err(FORM.into());
    }
    let value = extract_json(&reply.content)?;
    if upper_field(&value, &["action"]).as_deref() != Some("DIRECT_RESPONSE") {
        return Err(FORM.into());
    }
    let Some(response) = value.get("response") else {
        return Err(format!("the reply has no `response`; {FORM}"));
    };
    let read = |v: &Value| {
        crate::limits::check_depth(v, "the response")?;
        crate::workflow::validate_output(schema, v)
    };
    match (read(response), response) {
        (Ok(()), _) => Ok(response.clone()),
        (Err(e), Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(parsed) if read(&parsed).is_ok() => Ok(parsed),
            _ => Err(format!("`response`: {e}")),
        },
        (Err(e), _) => Err(format!("`response`: {e}")),
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

/// The review's reply as events. What it refuses, `prompts::exact_review_schema` (the grammar
/// of a local model) does not allow: a change to one is a change to the other.
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
        ReviewDecision::Replan if state.turn.replans >= cfg.limits.max_replans => {
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
            // The person is never asked an empty question.
            let Some(question) = str_field(&value, &["question"])
                .filter(|q| !q.trim().is_empty())
                .or(Some(reason.as_str()).filter(|r| !r.trim().is_empty()))
                .map(str::to_owned)
            else {
                return vec![rejected(
                    Purpose::Review,
                    None,
                    "ASK_USER needs a `question` for the person",
                )];
            };
            vec![
                Event::ReviewDecided { decision, reason },
                Event::WaitingForUser {
                    request: wait::question(question, None, None, None),
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
        ReviewDecision::FinalResponse => {
            // The steps left will never run: each is skipped now, with why (a failed step it
            // needs, or the review's decision), so that no finished session shows them pending.
            let mut v = skip_pending(state, "the review decided to answer");
            v.push(Event::ReviewDecided { decision, reason });
            v
        }
        _ => vec![Event::ReviewDecided { decision, reason }],
    }
}

/// A `step_skipped` for each step still pending or waiting: blocked by a failed step it
/// needs, or not run because `why`.
fn skip_pending(state: &State, why: &str) -> Vec<Event> {
    let Some(run) = &state.plan else {
        return Vec::new();
    };
    (0..run.steps.len())
        .filter(|&i| {
            matches!(
                run.steps[i].status,
                StepStatus::Pending | StepStatus::WaitingForUser
            )
        })
        .map(|i| Event::StepSkipped {
            step: run.plan.steps[i].id.clone(),
            reason: crate::engine::blocked_reason(run, i)
                .filter(|r| r.contains("failed"))
                .unwrap_or_else(|| format!("not run: {why}")),
        })
        .collect()
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
    let round = u32::try_from(_state.turn.drafts.len()).unwrap_or(u32::MAX);
    let mut v = vec![Event::AnswerDrafted {
        text: text.clone(),
        round,
    }];
    if !cfg.review_responses {
        v.push(finished(RunStatus::Completed, None, Some(text)));
    }
    v
}

/// The response review's reply as events. What it refuses,
/// `prompts::exact_response_review_schema` (the grammar of a local model) does not allow: a
/// change to one is a change to the other.
fn response_review_replied(state: &State, cfg: &AgentConfig, reply: &ModelReply) -> Vec<Event> {
    let value = match extract_json(&reply.content) {
        Ok(v) => v,
        Err(e) => return vec![rejected(Purpose::ResponseReview, None, e)],
    };
    let feedback = str_field(&value, &["feedback", "reason", "question"])
        .unwrap_or_default()
        .to_owned();
    let draft = state.turn.drafts.last().cloned();
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
    if verdict == ResponseVerdict::AskUser && feedback.trim().is_empty() {
        // The person is never asked an empty question.
        return vec![rejected(
            Purpose::ResponseReview,
            None,
            "ASK_USER needs the question for the person in `feedback`",
        )];
    }
    let reviewed = Event::ResponseReviewed {
        verdict,
        feedback: feedback.clone(),
    };
    match verdict {
        ResponseVerdict::Accept => vec![reviewed, finished(RunStatus::Completed, None, draft)],
        ResponseVerdict::Refine => {
            let rounds = u32::try_from(state.turn.drafts.len()).unwrap_or(u32::MAX);
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
                request: wait::question(feedback, None, None, None),
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::quarantined_output;
    use crate::model::ModelReply;

    fn reply(v: &Value) -> ModelReply {
        ModelReply {
            content: v.to_string(),
            ..ModelReply::default()
        }
    }

    /// Every reply that `prompts::quarantined_schema` allows is a value the engine takes as the
    /// step's output, and the replies the engine refuses are outside it.
    #[test]
    fn a_quarantined_steps_grammar_allows_only_replies_the_engine_takes() {
        let schema = json!({"type": "object", "required": ["amount"],
                            "properties": {"amount": {"type": "number", "minimum": 0}}});
        let Ok(grammar) = jsonschema::validator_for(&crate::prompts::quarantined_schema(&schema))
        else {
            panic!("the quarantined schema is not a JSON Schema");
        };
        let replies = [
            json!({"action": "DIRECT_RESPONSE", "response": {"amount": 42}}),
            json!({"action": "DIRECT_RESPONSE", "response": {"amount": 4.5, "note": "x"}}),
            json!({"action": "DIRECT_RESPONSE", "response": {"amount": -1}}),
            json!({"action": "DIRECT_RESPONSE", "response": {"amount": "42"}}),
            json!({"action": "DIRECT_RESPONSE", "response": "{\"amount\": 7}"}),
            json!({"action": "DIRECT_RESPONSE"}),
            json!({"action": "USE_TOOL", "tool": "t", "arguments": {}}),
            json!({"action": "DIRECT_RESPONSE", "response": {"amount": 1}, "tool": "t"}),
        ];
        for r in &replies {
            let engine = quarantined_output(&schema, &reply(r));
            if grammar.is_valid(r) {
                assert_eq!(engine.as_ref().ok(), r.get("response"), "{r}");
            }
        }
        assert_eq!(
            quarantined_output(&schema, &reply(&replies[4])),
            Ok(json!({"amount": 7})),
            "a text holding a value of the schema is read as it"
        );
        for r in &replies[2..4] {
            let Err(e) = quarantined_output(&schema, &reply(r)) else {
                panic!("{r} was taken");
            };
            assert!(e.contains("/amount"), "{e}");
        }
        let with_call = ModelReply {
            tool_calls: vec![crate::model::ToolCall {
                id: "c".into(),
                name: "t".into(),
                arguments: json!({}),
                provider_id: None,
            }],
            ..ModelReply::default()
        };
        assert!(quarantined_output(&schema, &with_call).is_err());
    }
}
