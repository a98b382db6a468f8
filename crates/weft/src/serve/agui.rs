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
use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::{Envelope, Event, State as SessionState};
use weft_store::{NewSession, SessionLog, StoreError};

use super::auth::User;
use super::runs::{self, RunBody};
use super::stream::{self, Format};
use super::{ApiError, Shared};

fn event(data: &Value) -> Sse {
    Sse::default().data(data.to_string())
}

pub fn run_started(thread_id: &str, run_id: &str) -> Sse {
    event(&json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}))
}

/// The AG-UI events one stored event makes, after it was applied to `st`.
pub fn parts(env: &Envelope, st: &SessionState, streamed: bool, out: &mut VecDeque<Sse>) {
    let step = |kind: &str, name: &str| event(&json!({"type": kind, "stepName": name}));
    match &env.event {
        Event::WaveStarted { wave, .. } => {
            out.push_back(step("STEP_STARTED", &format!("wave {wave}")))
        }
        Event::WaveFinished { wave } => {
            out.push_back(step("STEP_FINISHED", &format!("wave {wave}")))
        }
        Event::StepStarted { step: s, .. } => out.push_back(step("STEP_STARTED", s)),
        Event::StepCompleted { step: s, .. } => {
            out.push_back(step("STEP_FINISHED", s));
            out.push_back(event(
                &json!({"type": "STATE_SNAPSHOT", "snapshot": st.data}),
            ));
        }
        Event::StepFailed { step: s, .. } | Event::StepSkipped { step: s, .. } => {
            out.push_back(step("STEP_FINISHED", s));
        }
        Event::ToolCallStarted {
            call_id,
            tool,
            args,
            ..
        } => {
            out.push_back(event(
                &json!({"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": tool}),
            ));
            out.push_back(event(&json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args.to_string()})));
            out.push_back(event(
                &json!({"type": "TOOL_CALL_END", "toolCallId": call_id}),
            ));
        }
        Event::ToolCallFinished {
            call_id, outcome, ..
        } => {
            let content = serde_json::to_string(outcome).unwrap_or_default();
            out.push_back(event(&json!({
                "type": "TOOL_CALL_RESULT", "messageId": format!("{call_id}-result"),
                "toolCallId": call_id, "content": content, "role": "tool",
            })));
        }
        // The text came piece by piece already: the message ends here.
        Event::RunFinished {
            answer: Some(_), ..
        } if streamed => {
            out.push_back(event(
                &json!({"type": "TEXT_MESSAGE_END", "messageId": message_id(st)}),
            ));
        }
        Event::RunFinished {
            answer: Some(a), ..
        } => {
            out.extend(text(st, a, true));
            out.push_back(event(
                &json!({"type": "TEXT_MESSAGE_END", "messageId": message_id(st)}),
            ));
        }
        _ => {}
    }
}

fn message_id(st: &SessionState) -> String {
    format!("{}-answer-{}", st.session_id, st.memory.len())
}

/// A piece of the agent's text (`first`: the message starts with it).
pub fn text(st: &SessionState, piece: &str, first: bool) -> Vec<Sse> {
    let id = message_id(st);
    let mut out = Vec::new();
    if first {
        out.push(event(
            &json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}),
        ));
    }
    out.push(event(
        &json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": piece}),
    ));
    out
}

/// The run's last event: `RUN_FINISHED` (with the wait as an interrupt outcome) or `RUN_ERROR`.
pub fn finished(
    thread_id: &str,
    run_id: &str,
    st: Option<&SessionState>,
    error: Option<String>,
) -> Vec<Sse> {
    if let Some(message) = error {
        return vec![event(
            &json!({"type": "RUN_ERROR", "message": message, "code": "run_failed"}),
        )];
    }
    let outcome = match st.and_then(|s| s.waiting.as_ref().map(|w| (s, w))) {
        Some((s, w)) => json!({"type": "interrupt", "interrupts": [{
            "id": super::threads::interrupt(s, w)["id"],
            "reason": w.kind,
            "message": w.question,
        }]}),
        None => json!({"type": "success"}),
    };
    let result = st
        .map(|s| json!({"answer": s.answer, "data": s.data}))
        .unwrap_or(Value::Null);
    vec![event(&json!({
        "type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id,
        "result": result, "outcome": outcome,
    }))]
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    resume: Vec<Value>,
    #[serde(default)]
    state: Option<Value>,
}

pub async fn run(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(agent): Path<String>,
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
        stream_mode: None,
        metadata: None,
        multitask_strategy: None,
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
    Ok(stream::sse(app, run, stream::Position::after(after), format, true).into_response())
}
