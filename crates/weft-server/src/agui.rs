//! AG-UI: `POST /ag-ui/{agent}` takes a `RunAgentInput` and streams the run as AG-UI events
//! (`data: {json}` lines), for CopilotKit-style front-ends. The thread is a session, created on
//! first use and owned by the key's user; the run is a run of `runs.rs`, so it is durable, can be
//! joined through the LangGraph routes, and continues after a restart.
//!
//! | weft event | AG-UI event |
//! |---|---|
//! | the run begins | `RUN_STARTED` |
//! | wave started / finished | `STEP_STARTED` / `STEP_FINISHED` (`wave N`) |
//! | plan step started / completed, failed or skipped | `STEP_STARTED` / `STEP_FINISHED` (the step's id) |
//! | tool call started | `TOOL_CALL_START`, `TOOL_CALL_ARGS` (the arguments as JSON), `TOOL_CALL_END` |
//! | tool call finished | `TOOL_CALL_RESULT` (the outcome as JSON) |
//! | tool call refused by weft (a repeat, a denial, a tool not allowed) | the four `TOOL_CALL_*` events, the result `{"status": "blocked", "reason", "repeats"}` |
//! | a step's output stored | `STATE_SNAPSHOT` (the plan's State object) |
//! | the model's text as it comes (the whole answer on a replay) | `TEXT_MESSAGE_START`, `TEXT_MESSAGE_CONTENT` per piece, `TEXT_MESSAGE_END` |
//! | the run ended | `RUN_FINISHED` (outcome `success`, or `interrupt` with the wait) or `RUN_ERROR` |
//!
//! A wait is answered by the next input's `resume` entry (its `payload`, as text).

use std::collections::VecDeque;

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::response::sse::Event as Sse;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weft_core::{Envelope, Event, State as SessionState};
use weft_store::{NewSession, SessionLog, StoreError};

use super::auth::User;
use super::openapi::{self, Route};
use super::runs::{self, RunBody};
use super::stream::{self, Format};
use super::{ApiError, Shared};

/// The route of AG-UI.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::post(
            "/ag-ui/{agent}",
            "Run an agent with an AG-UI RunAgentInput and stream AG-UI events",
            run,
        )
        .body::<RunAgentInput>()
        .events::<AgUiEvent>("text/event-stream of AG-UI events (`data:` lines)"),
    ]
}

/// An AG-UI event, as each `data:` line of the stream carries it.
#[derive(Serialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
pub(crate) enum AgUiEvent {
    RunStarted {
        thread_id: String,
        run_id: String,
    },
    StepStarted {
        step_name: String,
    },
    StepFinished {
        step_name: String,
    },
    StateSnapshot {
        #[schemars(schema_with = "openapi::any")]
        snapshot: Value,
    },
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
    },
    ToolCallArgs {
        tool_call_id: String,
        /// The arguments as JSON text.
        delta: String,
    },
    ToolCallEnd {
        tool_call_id: String,
    },
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        /// The outcome as JSON text.
        content: String,
        role: String,
    },
    TextMessageStart {
        message_id: String,
        role: String,
    },
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    TextMessageEnd {
        message_id: String,
    },
    RunError {
        message: String,
        code: String,
    },
    RunFinished {
        thread_id: String,
        run_id: String,
        result: Option<RunResult>,
        outcome: Outcome,
    },
}

/// What a finished run leaves: its answer and the plan's State object.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RunResult {
    answer: Option<String>,
    #[schemars(schema_with = "openapi::any")]
    data: Value,
}

/// How a run finished: `success`, or `interrupt` with the wait.
#[derive(Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Outcome {
    Success,
    Interrupt { interrupts: Vec<AgUiInterrupt> },
}

/// A wait as AG-UI's interrupt: answered by the next input's `resume` entry.
#[derive(Serialize, JsonSchema)]
pub(crate) struct AgUiInterrupt {
    id: String,
    reason: String,
    message: String,
}

fn event(data: &AgUiEvent) -> Sse {
    Sse::default().data(serde_json::to_string(data).unwrap_or_default())
}

pub(crate) fn run_started(thread_id: &str, run_id: &str) -> Sse {
    event(&AgUiEvent::RunStarted {
        thread_id: thread_id.to_owned(),
        run_id: run_id.to_owned(),
    })
}

/// The AG-UI events one stored event makes, after it was applied to `st`, as SSE parts.
pub(crate) fn parts(env: &Envelope, st: &SessionState, streamed: bool, out: &mut VecDeque<Sse>) {
    out.extend(of(env, st, streamed).iter().map(event));
}

/// The AG-UI events one stored event makes, after it was applied to `st` (`streamed`: the
/// answer's text was sent piece by piece already).
fn of(env: &Envelope, st: &SessionState, streamed: bool) -> Vec<AgUiEvent> {
    let mut out = Vec::new();
    let started = |name: String| AgUiEvent::StepStarted { step_name: name };
    let finished = |name: String| AgUiEvent::StepFinished { step_name: name };
    let end = || AgUiEvent::TextMessageEnd {
        message_id: message_id(st),
    };
    match &env.event {
        Event::WaveStarted { wave, .. } => out.push(started(format!("wave {wave}"))),
        Event::WaveFinished { wave } => out.push(finished(format!("wave {wave}"))),
        Event::StepStarted { step: s, .. } => out.push(started(s.clone())),
        Event::StepCompleted { step: s, .. } => {
            out.push(finished(s.clone()));
            out.push(AgUiEvent::StateSnapshot {
                snapshot: st.data().clone(),
            });
        }
        Event::StepFailed { step: s, .. } | Event::StepSkipped { step: s, .. } => {
            out.push(finished(s.clone()));
        }
        Event::ToolCallStarted {
            call_id,
            tool,
            args,
            ..
        } => {
            out.extend(call(call_id, tool, args));
        }
        // A call weft refused (a repeat, a tool the agent may not use, a person's denial): shown
        // as a call whose result says so, under the model's id for it (a plan step's: the
        // step's), with the earlier call it repeats.
        Event::ToolCallBlocked {
            step,
            call_id,
            tool,
            args,
            reason,
            repeats,
        } => {
            let id = call_id.clone().unwrap_or_else(|| {
                format!("{}-blocked-{}", step.as_deref().unwrap_or(tool), env.seq)
            });
            out.extend(call(&id, tool, args));
            let mut content = serde_json::json!({"status": "blocked", "reason": reason});
            if let Some(earlier) = repeats {
                content["repeats"] = Value::String(earlier.clone());
            }
            out.push(AgUiEvent::ToolCallResult {
                message_id: format!("{id}-result"),
                tool_call_id: id,
                content: content.to_string(),
                role: "tool".into(),
            });
        }
        Event::ToolCallFinished {
            call_id, outcome, ..
        } => {
            out.push(AgUiEvent::ToolCallResult {
                message_id: format!("{call_id}-result"),
                tool_call_id: call_id.clone(),
                content: serde_json::to_string(outcome).unwrap_or_default(),
                role: "tool".into(),
            });
        }
        // The text came piece by piece already: the message ends here.
        Event::RunFinished {
            answer: Some(_), ..
        } if streamed => out.push(end()),
        Event::RunFinished {
            answer: Some(a), ..
        } => {
            out.extend(text_events(st, a, true));
            out.push(end());
        }
        _ => {}
    }
    out
}

/// A tool call as AG-UI announces it: its start, its arguments (as JSON text) and its end.
fn call(id: &str, tool: &str, args: &Value) -> [AgUiEvent; 3] {
    [
        AgUiEvent::ToolCallStart {
            tool_call_id: id.to_owned(),
            tool_call_name: tool.to_owned(),
        },
        AgUiEvent::ToolCallArgs {
            tool_call_id: id.to_owned(),
            delta: args.to_string(),
        },
        AgUiEvent::ToolCallEnd {
            tool_call_id: id.to_owned(),
        },
    ]
}

fn message_id(st: &SessionState) -> String {
    format!("{}-answer-{}", st.session_id(), st.memory().len())
}

/// A piece of the agent's text (`first`: the message starts with it), as SSE parts.
pub(crate) fn text(st: &SessionState, piece: &str, first: bool) -> Vec<Sse> {
    text_events(st, piece, first).iter().map(event).collect()
}

/// A piece of the agent's text (`first`: the message starts with it).
fn text_events(st: &SessionState, piece: &str, first: bool) -> Vec<AgUiEvent> {
    let id = message_id(st);
    let mut out = Vec::new();
    if first {
        out.push(AgUiEvent::TextMessageStart {
            message_id: id.clone(),
            role: "assistant".into(),
        });
    }
    out.push(AgUiEvent::TextMessageContent {
        message_id: id,
        delta: piece.to_owned(),
    });
    out
}

/// The run's last event: `RUN_FINISHED` (with the wait as an interrupt outcome) or `RUN_ERROR`.
pub(crate) fn finished(
    thread_id: &str,
    run_id: &str,
    st: Option<&SessionState>,
    error: Option<String>,
) -> Vec<Sse> {
    if let Some(message) = error {
        return vec![event(&AgUiEvent::RunError {
            message,
            code: "run_failed".into(),
        })];
    }
    let outcome = match st.and_then(|s| s.turn().waiting().map(|w| (s, w))) {
        Some((s, w)) => Outcome::Interrupt {
            interrupts: vec![AgUiInterrupt {
                id: super::threads::interrupt(s, w).id,
                reason: w.kind.clone(),
                message: w.question.clone(),
            }],
        },
        None => Outcome::Success,
    };
    let result = st.map(|s| RunResult {
        answer: s.turn().answer().map(str::to_owned),
        data: s.data().clone(),
    });
    vec![event(&AgUiEvent::RunFinished {
        thread_id: thread_id.to_owned(),
        run_id: run_id.to_owned(),
        result,
        outcome,
    })]
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunAgentInput {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    resume: Vec<Value>,
    #[serde(default)]
    state: Option<Value>,
}

pub(crate) async fn run(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(agent): Path<String>,
    headers: axum::http::HeaderMap,
    Json(input): Json<RunAgentInput>,
) -> Result<Response, ApiError> {
    if !app.agents.contains_key(&agent) {
        return Err(ApiError::not_found("agent"));
    }
    // A thread the client names is created on first use.
    let new = NewSession {
        id: input.thread_id.clone(),
        user_id: Some(user.0.clone()),
        agent: String::new(),
        metadata: json!({}),
        ..NewSession::default()
    };
    match app.store.create(new, weft_runtime::now_ms()).await {
        Ok(_) | Err(StoreError::Exists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let last_user = input
        .messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .cloned();
    let resume = input
        .resume
        .iter()
        .find(|r| r.get("status").and_then(Value::as_str) == Some("resolved"))
        .map(|r| match r.get("payload") {
            Some(Value::String(s)) => Value::String(s.clone()),
            Some(other) => Value::String(other.to_string()),
            None => Value::String(String::new()),
        });
    let mut run_input = json!({ "messages": last_user.into_iter().collect::<Vec<_>>() });
    if let Some(Value::Object(state)) = &input.state
        && !state.is_empty()
    {
        run_input["state"] = Value::Object(state.clone());
    }
    let body = RunBody {
        assistant_id: agent,
        input: Some(run_input),
        command: resume.map(|r| json!({"resume": r})),
        traceparent: runs::traceparent(&headers),
        ..RunBody::default()
    };
    let run = runs::start_with_id(
        &app,
        &user,
        &input.thread_id,
        body,
        Some(input.run_id.clone()),
    )
    .await?;
    let after = run.start_seq();
    let format = Format::AgUi {
        thread_id: input.thread_id,
        run_id: input.run_id,
    };
    Ok(stream::sse(app, run, stream::Position::after(after), format, true, None).into_response())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_refused_repeat_is_a_call_whose_result_says_blocked() {
        let env = Envelope {
            seq: 7,
            ts: 0,
            v: weft_core::EVENT_VERSION,
            epoch: 0,
            event: Event::ToolCallBlocked {
                step: None,
                call_id: Some("call_2".into()),
                tool: "shout".into(),
                args: serde_json::json!({"text": "hi"}),
                reason: "a repeat of call_1".into(),
                repeats: Some("call_1".into()),
            },
        };
        let evs: Vec<Value> = of(&env, &SessionState::new(), false)
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT"
            ]
        );
        assert!(evs.iter().all(|e| e["toolCallId"] == "call_2"), "{evs:?}");
        assert_eq!(evs[0]["toolCallName"], "shout");
        let content: Value = serde_json::from_str(evs[3]["content"].as_str().unwrap()).unwrap();
        assert_eq!(
            content,
            serde_json::json!({"status": "blocked", "reason": "a repeat of call_1", "repeats": "call_1"})
        );
    }
}
