//! A session's model calls for the playground's inspector: the list (each call's purpose, step,
//! outcome, tokens, cost, latency, attempt and refusal reason, with the session's totals), and
//! one call in full: the request weft sent (messages, tools offered, response format), rebuilt
//! from the log by the core (`weft_core::model_calls`; logs hold no requests), the raw reply and
//! what the core made of it. Behind the same keys and user rules as the session routes. The
//! request is rebuilt with the agent file this server serves under the session's agent name
//! (redacted with its secrets); a server that does not serve it answers why, with no request.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use weft_core::model::{ModelReply, Usage};
use weft_core::model_calls::{self, ModelCall};

use super::auth::User;
use super::openapi::{self, Route};
use super::{ApiError, Shared, threads, view};

/// The routes of the inspector.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::get(
            "/sessions/{id}/model-calls",
            "The session's model calls in order: purpose, step, outcome (and why a reply was refused or a call failed), attempt, tokens, cost and latency, with the session's totals",
            list,
        )
        .json::<ModelCalls>("{calls: [...], totals}"),
        openapi::get(
            "/sessions/{id}/model-calls/{n}",
            "Model call `n` (from 1) in full: the request weft sent (messages, tools offered, response format), rebuilt from the log with the agent's file; the raw reply; the events the reply meant",
            one,
        )
        .json::<ModelCallDetail>("{call, request, reply, decision}"),
    ]
}

/// A session's model calls, and what they used in all.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ModelCalls {
    calls: Vec<ModelCall>,
    /// The session's model usage (the calls' usages add up to it).
    totals: Usage,
}

/// One model call in full.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ModelCallDetail {
    call: ModelCall,
    /// The request as weft sent it; `null` when it cannot be rebuilt (`request_error` says why).
    request: Option<SentRequest>,
    /// Why the request cannot be rebuilt (the agent file changed or is not served here).
    #[serde(skip_serializing_if = "Option::is_none")]
    request_error: Option<String>,
    /// The reply as the provider gave it (its text unparsed); `null` for a failed call.
    reply: Option<RawReply>,
    /// The events the reply meant, in order (a plan accepted or refused, tool calls started, a
    /// review, an answer): the parsed decision.
    #[schemars(schema_with = "objects")]
    decision: Vec<Value>,
}

/// A request as weft sent it to the model (secrets redacted).
#[derive(Serialize, JsonSchema)]
pub(crate) struct SentRequest {
    /// The conversation, system prompt first: messages tagged by `role`.
    #[schemars(schema_with = "openapi::messages")]
    messages: Value,
    /// The tools the model was offered: `{name, description, parameters}`.
    #[schemars(schema_with = "objects")]
    tools: Vec<Value>,
    /// The JSON Schema the reply's text had to match, if any.
    #[schemars(schema_with = "openapi::any")]
    response_schema: Option<Value>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
}

/// A model's reply as it came.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RawReply {
    /// The reply's text, unparsed.
    content: String,
    /// The tool calls it asked for: `{id, name, arguments}`.
    #[schemars(schema_with = "objects")]
    tool_calls: Vec<Value>,
    model: String,
    finish_reason: Option<String>,
    /// The replies to this call the model layer refused and asked again for first (a structured
    /// reply that did not match the schema), each with why.
    refused: Vec<weft_core::model::RefusedTry>,
}

/// The schema of a list of JSON objects whose fields are weft-core's own (an event, a tool, a
/// tool call), typed by hand where the page reads them.
fn objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "array", "items": {"type": "object"}})
}

async fn log(
    app: &Shared,
    user: &User,
    id: &str,
) -> Result<(weft_store::SessionRecord, Vec<weft_core::Envelope>), ApiError> {
    threads::load_log(app, user, id)
        .await
        .map_err(|e| match e.0 {
            StatusCode::NOT_FOUND => ApiError::not_found("session"),
            _ => e,
        })
}

/// `GET /sessions/{id}/model-calls`.
pub(crate) async fn list(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Result<Json<ModelCalls>, ApiError> {
    let (_, events) = log(&app, &user, &id).await?;
    let calls = model_calls::calls(&events);
    let totals = weft_core::State::fold(events.iter().map(|e| &e.event))
        .usage()
        .tokens
        .clone();
    Ok(Json(ModelCalls { calls, totals }))
}

/// `GET /sessions/{id}/model-calls/{n}`.
pub(crate) async fn one(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((id, n)): Path<(String, u32)>,
) -> Result<Json<ModelCallDetail>, ApiError> {
    let (rec, events) = log(&app, &user, &id).await?;
    let calls = model_calls::calls(&events);
    let Some(call) = n
        .checked_sub(1)
        .and_then(|i| calls.get(i as usize))
        .cloned()
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "model call {n} not found: session {id} has {} model call(s), numbered from 1",
                calls.len()
            ),
        ));
    };
    let reply = events
        .iter()
        .find(|e| e.seq == call.seq)
        .and_then(|e| match &e.event {
            weft_core::Event::ModelReplied { reply, .. } => Some(raw(reply)),
            _ => None,
        });
    // The state before the call: its agent, and the input its instructions were rendered with.
    let before = weft_core::State::fold(
        events
            .iter()
            .take_while(|e| e.seq < call.seq)
            .map(|e| &e.event),
    );
    let name = view::agent_of(&rec, &before);
    let rebuilt = match app.agents.get(&name) {
        None => Err(format!(
            "session {id} belongs to agent `{name}`, which this server does not run; serve its agent file to see the request"
        )),
        Some(agent) => weft_runtime::Agent::new(
            &agent.spec,
            agent.tools.clone(),
            agent.model.clone(),
            &rec.metadata,
            before.input(),
        )
        .map_err(|e| format!("agent `{name}`: {e}"))
        .and_then(|built| {
            let mut found = None;
            model_calls::rebuild(&events, &built.config, Some(n), |r| found = Some(r))
                .map_err(|e| e.to_string())?;
            found.ok_or_else(|| format!("model call {n} was not rebuilt"))
        })
        .map(|r| (r, agent.redact.clone())),
    };
    let (request, request_error, decision) = match rebuilt {
        Ok((r, redact)) => {
            let hide = |mut v: Value| {
                if let Some(f) = &redact {
                    redact_strings(&mut v, f.as_ref());
                }
                v
            };
            let req = &r.request;
            let request = SentRequest {
                messages: hide(serde_json::to_value(&req.messages).unwrap_or(Value::Null)),
                tools: req
                    .tools
                    .iter()
                    .map(|t| hide(serde_json::to_value(t).unwrap_or(Value::Null)))
                    .collect(),
                response_schema: req.response_schema.clone().map(&hide),
                max_tokens: req.max_tokens,
                temperature: req.temperature,
            };
            let decision = r
                .decision
                .iter()
                .map(|e| hide(serde_json::to_value(e).unwrap_or(Value::Null)))
                .collect();
            (Some(request), None, decision)
        }
        Err(e) => (None, Some(e), Vec::new()),
    };
    Ok(Json(ModelCallDetail {
        call,
        request,
        request_error,
        reply,
        decision,
    }))
}

fn raw(reply: &ModelReply) -> RawReply {
    RawReply {
        content: reply.content.clone(),
        tool_calls: reply
            .tool_calls
            .iter()
            .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
            .collect(),
        model: reply.model.clone(),
        finish_reason: reply.finish_reason.clone(),
        refused: reply.refused.clone(),
    }
}

/// Rewrites every string of `v` (keys aside) with the agent's redaction: a rebuilt request holds
/// text the log does not (the rendered instructions), so it is redacted as events are.
fn redact_strings(v: &mut Value, f: &(dyn Fn(&mut String) + Send + Sync)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter_mut().for_each(|x| redact_strings(x, f)),
        Value::Object(m) => m.values_mut().for_each(|x| redact_strings(x, f)),
        _ => {}
    }
}
