//! Workflow mode: the agent is a state machine of steps (the file's shape and checks are in
//! [`crate::workflow`]). In a step the model may call only the step's tools; when it answers,
//! its output is validated against the step's schema (a refused output is fed back, within
//! `output_retries`), the step's `assign` writes the State, and the first `next` rule that holds
//! picks where the session goes: another step, `end` (the turn is over) or `wait` (the user's
//! next message enters at the step `reentry` picks). The model never chooses the route, and a
//! step may hand its work to another agent (`agent:`), run in a session of its own.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::end::finished;
use super::reply::{extract_json, rejected};
use super::{AgentConfig, AgentNext, ModeLoop, tool_calls};
use crate::engine::Invocation;
use crate::event::{Event, InputRequest, RunStatus, StepEntry, ToolOutcome, TransitionRule};
use crate::model::value_text;
use crate::model::{ModelReply, Purpose};
use crate::path;
use crate::prompts;
use crate::state::{State, call_key};
use crate::tool::ToolInfo;
use crate::workflow::{self, END, StepSpec, WAIT, WorkflowSpec};

/// What the workflow loop needs of a workflow agent (built by the shell from the agent file).
#[derive(Clone, Debug)]
pub struct WorkflowConfig {
    /// The workflow as the agent file declares it.
    pub spec: WorkflowSpec,
    /// Each step's instructions, rendered.
    pub instructions: BTreeMap<String, String>,
    /// The session's metadata, which expressions read as `session.metadata`.
    pub metadata: Value,
}

/// The workflow loop.
pub(crate) struct WorkflowLoop;

impl ModeLoop for WorkflowLoop {
    fn decide(state: &State, cfg: &AgentConfig) -> AgentNext {
        let Some(wf) = cfg.workflow.as_deref() else {
            return AgentNext::Record(vec![finished(
                RunStatus::Failed,
                Some("the agent is in workflow mode but was built without its workflow".into()),
                None,
            )]);
        };
        if !state.calls.open.is_empty() {
            return AgentNext::Wait;
        }
        let Some(name) = state.workflow.step.as_deref() else {
            return AgentNext::Record(enter(state, wf));
        };
        let Some(step) = wf.spec.steps.get(name) else {
            return AgentNext::Record(vec![finished(
                RunStatus::Failed,
                Some(format!(
                    "the session is in workflow step `{name}`, which the agent file no longer has (its steps: {})",
                    wf.spec.steps.keys().cloned().collect::<Vec<_>>().join(", ")
                )),
                None,
            )]);
        };
        if step.agent.is_some() {
            return match &state.workflow.delegated {
                Some(outcome) => AgentNext::Record(delegated(state, cfg, wf, name, step, outcome)),
                None => delegate(state, wf, name, step),
            };
        }
        let tools = step_tools(cfg, step);
        if let Some(next) = tool_calls::start(
            state,
            &tools,
            &cfg.repeats,
            cfg.limits.max_parallel,
            &format!("step `{name}`"),
        ) {
            return next;
        }
        let max_turns = step.max_turns.unwrap_or(cfg.limits.max_iterations);
        if state.workflow.turns >= max_turns {
            return AgentNext::Record(fail_step(
                state,
                cfg,
                name,
                step,
                format!("reached max_turns ({max_turns}) without an output"),
            ));
        }
        AgentNext::CallModel {
            request: prompts::workflow_step(state, cfg, wf, name, &tools),
            step: Some(name.to_owned()),
        }
    }

    fn replied(
        state: &State,
        cfg: &AgentConfig,
        purpose: Purpose,
        step: Option<&str>,
        reply: &ModelReply,
    ) -> Vec<Event> {
        if !reply.tool_calls.is_empty() {
            // `decide` starts the calls the step allows and refuses the others.
            return Vec::new();
        }
        let (Some(wf), Some(name)) = (cfg.workflow.as_deref(), state.workflow.step.as_deref())
        else {
            return vec![rejected(
                purpose,
                step,
                "a reply came while the workflow was in no step",
            )];
        };
        let Some(spec) = wf.spec.steps.get(name) else {
            return Vec::new();
        };
        let text = reply.content.trim();
        if text.is_empty() {
            return vec![rejected(
                Purpose::Workflow,
                Some(name),
                "the reply was empty; give the step's output or call one of its tools",
            )];
        }
        finish_step(state, cfg, wf, name, spec, text)
    }
}

/// What the step's expressions see.
fn context(state: &State, wf: &WorkflowConfig, output: Option<&Value>) -> Value {
    json!({
        "output": output.cloned().unwrap_or(Value::Null),
        "state": state.data,
        "input": state.input,
        "steps": state.workflow.steps_value(),
        "session": {"id": state.session_id, "metadata": wf.metadata, "turn": state.turn.number},
    })
}

/// The user's latest message.
fn last_message(state: &State) -> String {
    state
        .history
        .last_person()
        .map(str::to_owned)
        .or_else(|| state.turn.task.clone())
        .unwrap_or_default()
}

/// A message enters: at `initial` the first time, then at the step `reentry` picks.
fn enter(state: &State, wf: &WorkflowConfig) -> Vec<Event> {
    let spec = &wf.spec;
    if !state.workflow.entered || spec.reentry.is_empty() {
        return vec![Event::WorkflowStepEntered {
            step: spec.initial.clone(),
            via: StepEntry::Initial,
        }];
    }
    let mut ctx = context(state, wf, None);
    if let Value::Object(m) = &mut ctx {
        m.remove("output");
        m.insert("message".into(), Value::String(last_message(state)));
    }
    for (i, r) in spec.reentry.iter().enumerate() {
        let holds = match &r.when {
            None => Ok(true),
            Some(w) => workflow::holds(w, &ctx),
        };
        match holds {
            Ok(true) => {
                return vec![Event::WorkflowStepEntered {
                    step: r.to.clone(),
                    via: StepEntry::Reentry {
                        rule: i,
                        when: r.when.clone(),
                    },
                }];
            }
            Ok(false) => {}
            Err(e) => {
                return vec![finished(
                    RunStatus::Failed,
                    Some(format!("workflow.reentry[{i}].when: {e}")),
                    None,
                )];
            }
        }
    }
    vec![finished(
        RunStatus::Failed,
        Some("no rule of workflow.reentry applies; make the last one `{ to: STEP }`".into()),
        None,
    )]
}

/// The tools of a step, as the model is offered them (`approve` makes every call wait for a
/// person).
fn step_tools(cfg: &AgentConfig, step: &StepSpec) -> Vec<ToolInfo> {
    step.tools
        .iter()
        .filter_map(|n| cfg.tool(n))
        .map(|t| {
            let mut t = t.clone();
            t.requires_approval |= step.approve;
            t
        })
        .collect()
}

/// The task a delegating step gives its agent.
fn delegation_task(state: &State, wf: &WorkflowConfig, name: &str, step: &StepSpec) -> String {
    let mut task = wf
        .instructions
        .get(name)
        .filter(|i| !i.trim().is_empty())
        .cloned()
        .unwrap_or_else(|| format!("Carry out the `{name}` step of this request."));
    task.push_str(&format!("\n\nThe user's message: {}", last_message(state)));
    if state.data.as_object().is_some_and(|m| !m.is_empty()) {
        task.push_str(&format!("\nWhat is known so far: {}", state.data));
    }
    if let Some(schema) = &step.output_schema {
        task.push_str(&format!(
            "\nAnswer with JSON only, matching this JSON Schema: {schema}"
        ));
    }
    if let Some(f) = &state.workflow.feedback {
        task.push_str(&format!("\nYour previous answer could not be used: {f}"));
    }
    task
}

/// Starts the call through which a step hands its work to its agent.
fn delegate(state: &State, wf: &WorkflowConfig, name: &str, step: &StepSpec) -> AgentNext {
    let tool = workflow::delegate_tool(name);
    let args = json!({"task": delegation_task(state, wf, name, step)});
    let n = state.calls.started + 1;
    let inv = Invocation {
        call_id: format!("{name}#{n}"),
        step: Some(name.to_owned()),
        item: None,
        idempotency_key: call_key(&state.session_id, n, &tool, &args),
        tool,
        args,
        attempt: 1,
        delay_ms: 0,
    };
    let started = Event::ToolCallStarted {
        call_id: inv.call_id.clone(),
        step: inv.step.clone(),
        item: None,
        tool: inv.tool.clone(),
        args: inv.args.clone(),
        attempt: 1,
        idempotency_key: inv.idempotency_key.clone(),
        untrusted_from: Vec::new(),
    };
    AgentNext::Start {
        events: vec![started],
        calls: vec![inv],
    }
}

/// The step's agent answered (or failed).
fn delegated(
    state: &State,
    cfg: &AgentConfig,
    wf: &WorkflowConfig,
    name: &str,
    step: &StepSpec,
    outcome: &ToolOutcome,
) -> Vec<Event> {
    match outcome {
        ToolOutcome::Ok { output } => {
            let answer = output
                .get("answer")
                .map(value_text)
                .unwrap_or_else(|| value_text(output));
            if answer.trim().is_empty() {
                return fail_step(state, cfg, name, step, "its agent gave no answer".into());
            }
            finish_step(state, cfg, wf, name, step, answer.trim())
        }
        ToolOutcome::Error { error } => fail_step(
            state,
            cfg,
            name,
            step,
            format!("its agent failed: {}", error.message),
        ),
    }
}

/// The step produced `text`: validate it, assign, and route.
fn finish_step(
    state: &State,
    cfg: &AgentConfig,
    wf: &WorkflowConfig,
    name: &str,
    step: &StepSpec,
    text: &str,
) -> Vec<Event> {
    let output = match &step.output_schema {
        None => Value::String(text.to_owned()),
        Some(schema) => {
            let checked = extract_json(text).and_then(|v| {
                crate::limits::check_depth(&v, "the output")?;
                workflow::validate_output(schema, &v).map(|()| v)
            });
            match checked {
                Ok(v) => v,
                Err(reason) => return refuse(state, cfg, name, step, reason),
            }
        }
    };
    let mut ctx = context(state, wf, Some(&output));
    let mut assigned = Map::new();
    for (at, expr) in &step.assign {
        let v = match workflow::eval(expr, &ctx) {
            Ok(v) => v,
            Err(e) => return fail_step(state, cfg, name, step, format!("assign.{at}: {e}")),
        };
        if let (Some(p), Some(data)) = (path::parse(at), ctx.get_mut("state")) {
            path::set(data, &p, v.clone());
        }
        assigned.insert(at.clone(), v);
    }
    let reply = match &step.reply {
        None => output.as_str().map(str::to_owned),
        Some(expr) => match workflow::eval(expr, &ctx) {
            Ok(Value::Null) => None,
            Ok(v) => Some(value_text(&v)),
            Err(e) => return fail_step(state, cfg, name, step, format!("reply: {e}")),
        },
    };
    let route = if step.next.is_empty() {
        Some((
            END,
            TransitionRule::Next {
                rule: None,
                when: None,
            },
        ))
    } else {
        let mut found = None;
        for (i, r) in step.next.iter().enumerate() {
            let holds = match &r.when {
                None => Ok(true),
                Some(w) => workflow::holds(w, &ctx),
            };
            match holds {
                Ok(true) => {
                    found = Some((
                        r.to.as_str(),
                        TransitionRule::Next {
                            rule: Some(i),
                            when: r.when.clone(),
                        },
                    ));
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    return fail_step(state, cfg, name, step, format!("next[{i}].when: {e}"));
                }
            }
        }
        found
    };
    let Some((to, rule)) = route else {
        return fail_step(
            state,
            cfg,
            name,
            step,
            "no rule of `next` applies; make the last one `{ to: STEP }`".into(),
        );
    };
    let answer = reply
        .clone()
        .or_else(|| state.workflow.reply.clone())
        .or_else(|| Some(value_text(&output)));
    let mut events = vec![Event::WorkflowOutputAccepted {
        step: name.to_owned(),
        output,
        assigned,
        reply,
    }];
    events.extend(transition(state, cfg, name, to, rule, answer));
    events
}

/// A refused output: asked for again within `output_retries`, then the step fails.
fn refuse(
    state: &State,
    cfg: &AgentConfig,
    name: &str,
    step: &StepSpec,
    reason: String,
) -> Vec<Event> {
    let attempt = state.workflow.rejected + 1;
    if state.workflow.rejected < step.output_retries() {
        return vec![Event::WorkflowOutputRejected {
            step: name.to_owned(),
            reason,
            attempt,
        }];
    }
    fail_step(
        state,
        cfg,
        name,
        step,
        format!("its output was refused {attempt} time(s); the last time: {reason}"),
    )
}

/// The step failed: to its `on_error`, or the run fails.
fn fail_step(
    state: &State,
    cfg: &AgentConfig,
    name: &str,
    step: &StepSpec,
    reason: String,
) -> Vec<Event> {
    match &step.on_error {
        Some(target) => transition(
            state,
            cfg,
            name,
            target,
            TransitionRule::OnError { error: reason },
            state.workflow.reply.clone(),
        ),
        None => vec![finished(
            RunStatus::Failed,
            Some(format!("workflow step `{name}` failed: {reason}")),
            state.workflow.reply.clone(),
        )],
    }
}

/// Goes from `from` to `to`: another step, `end` (the answer is given) or `wait`.
fn transition(
    state: &State,
    cfg: &AgentConfig,
    from: &str,
    to: &str,
    rule: TransitionRule,
    answer: Option<String>,
) -> Vec<Event> {
    let max = cfg.limits.max_transitions;
    if state.workflow.transitions >= max {
        // `path` holds the steps entered since the message came in: one more than the
        // transitions taken, so the list shows exactly the transitions counted.
        return vec![finished(
            RunStatus::Failed,
            Some(format!(
                "CANNOT_COMPLETE: the workflow took {max} transitions (limits.max_transitions) without ending its turn: {}; the next one, from `{from}` to `{to}`, was not taken",
                state.workflow.path.join(" -> ")
            )),
            None,
        )];
    }
    let mut events = vec![Event::WorkflowTransition {
        from: from.to_owned(),
        to: to.to_owned(),
        rule,
    }];
    events.push(match to {
        END => finished(RunStatus::Completed, None, answer),
        WAIT => Event::WaitingForUser {
            request: InputRequest {
                kind: "message".into(),
                question: answer
                    .unwrap_or_else(|| "The workflow waits for your next message.".into()),
                step: Some(from.to_owned()),
                tool: None,
                missing: Vec::new(),
                partial_call: Value::Null,
                plan: None,
                call_id: None,
            },
        },
        step => Event::WorkflowStepEntered {
            step: step.to_owned(),
            via: StepEntry::Transition {
                from: from.to_owned(),
            },
        },
    });
    events
}
