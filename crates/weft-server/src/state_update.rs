//! `threads.update_state` (`POST /threads/{tid}/state`): messages added to a thread's
//! conversation between runs, as one `messages_imported` event of its log.
//!
//! A weft thread's state is the fold of its log, so an update is an event like any other: it
//! is stored under the thread's lease (no run can start beside it), it is a checkpoint of the
//! thread's history (`source: update`), and the model reads the messages on the next turn. What
//! can be updated is the conversation, and only by adding to it: a message is never replaced (a
//! message whose `id` is already the thread's is refused; fork at an earlier checkpoint to change
//! what was said), `data` is written by a plan's steps and `answer` by the model. A thread must
//! have run once (its first run names its agent), must not be running or waiting for an answer,
//! and must not be a plan agent's (whose conversation is its turns).

use std::collections::HashSet;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Extension;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_core::model::{Message, ToolCall};
use weft_core::{Envelope, Event, SessionStatus, State as SessionState};

use weft_store::SessionLog;

use super::auth::User;
use super::{ApiError, Shared, messages, openapi, runs, threads};

/// The body of `threads.update_state`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct UpdateState {
    /// `{"messages": [...]}` (or a list of such objects): LangChain messages (`human`, `ai` with
    /// `tool_calls`, `tool` with `tool_call_id`) added to the conversation in order.
    #[serde(default)]
    #[schemars(schema_with = "openapi::any")]
    values: Value,
    /// Accepted and not used: what runs next follows from the conversation.
    #[serde(default, rename = "as_node")]
    _as_node: Option<String>,
    /// The checkpoint the update is made on: it must be the thread's latest.
    #[serde(default)]
    checkpoint_id: Option<String>,
    /// `{"checkpoint_id": ...}`, as `checkpoint_id`.
    #[serde(default)]
    #[schemars(schema_with = "openapi::any")]
    checkpoint: Value,
}

/// What `threads.update_state` answers: the checkpoint the update made.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Updated {
    checkpoint: UpdatedCheckpoint,
}

#[derive(Serialize, schemars::JsonSchema)]
struct UpdatedCheckpoint {
    thread_id: String,
    checkpoint_ns: String,
    checkpoint_id: String,
    /// Always `{}`.
    checkpoint_map: serde_json::Map<String, Value>,
}

/// `POST /threads/{tid}/state`: `values.messages` added to the thread's conversation.
pub(crate) async fn update_state(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    body: Option<Json<UpdateState>>,
) -> Result<Json<Updated>, ApiError> {
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let (_, st) = threads::load(&app, &user, &tid).await?;
    updatable(&tid, &st)?;
    let at = body
        .checkpoint_id
        .clone()
        .or_else(|| {
            body.checkpoint
                .get("checkpoint_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .filter(|c| !c.is_empty());
    if threads::busy(&app, &tid).await? {
        return Err(threads::busy_error(&tid, "update its state"));
    }
    // Under the thread's lease, so that no run starts beside the update; the state is read
    // again once it is held, and the messages are checked against it.
    let owner = weft_host::ownership::driver();
    let held = weft_host::ownership::take_as(&app.host, app.store.clone(), &tid, false, &owner)
        .await
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, crate::message(&e.into())))?;
    let written = async {
        let (_, st) = threads::load(&app, &user, &tid).await?;
        updatable(&tid, &st)?;
        if let Some(at) = &at
            && *at != st.seq().to_string()
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "checkpoint {at} is not thread {tid}'s latest ({}): an update adds to the \
                     thread as it is now. To change an earlier point, fork the thread there \
                     (POST /sessions/{tid}/fork with `at`) and update the fork",
                    st.seq()
                ),
            ));
        }
        let imported = imported_messages(&st, &body.values)?;
        let seq = st.seq() + 1;
        let event = Envelope {
            seq,
            ts: weft_runtime::now_ms(),
            v: weft_core::EVENT_VERSION,
            epoch: held.fence().1,
            event: Event::MessagesImported { messages: imported },
        };
        app.store
            .append(
                &tid,
                st.seq(),
                std::slice::from_ref(&event),
                st.status(),
                event.ts,
            )
            .await?;
        Ok(seq)
    }
    .await;
    held.release().await;
    let seq = written?;
    Ok(Json(Updated {
        checkpoint: UpdatedCheckpoint {
            thread_id: tid,
            checkpoint_ns: String::new(),
            checkpoint_id: seq.to_string(),
            checkpoint_map: serde_json::Map::new(),
        },
    }))
}

/// Refuses a thread whose conversation cannot be added to now.
fn updatable(tid: &str, st: &SessionState) -> Result<(), ApiError> {
    let conflict = |why: String| Err(ApiError::new(StatusCode::CONFLICT, why));
    if st.seq() == 0 {
        return conflict(format!(
            "thread {tid} has not run yet: its first run starts its conversation (runs.create \
             with input messages); update its state after that run"
        ));
    }
    if st.mode() == Some(weft_core::agent::Mode::Plan) {
        return conflict(format!(
            "thread {tid} is a plan agent's: its conversation is its turns (each task and its \
             answer), which only runs add; start a run with the message instead"
        ));
    }
    match st.status() {
        SessionStatus::Running => conflict(format!(
            "thread {tid} is running (or waits for a process to continue it); cancel the run \
             (runs.cancel) or update its state once it ended"
        )),
        SessionStatus::WaitingForUser => conflict(format!(
            "thread {tid} waits for an answer (its interrupt): answer it with a run whose \
             command is {{\"resume\": ...}}, then update its state"
        )),
        SessionStatus::Completed | SessionStatus::Failed => Ok(()),
    }
}

/// `values` as weft's messages, checked against the thread's conversation: each field that
/// cannot be taken is named in the error.
fn imported_messages(st: &SessionState, values: &Value) -> Result<Vec<Message>, ApiError> {
    let updates: Vec<&serde_json::Map<String, Value>> = match values {
        Value::Object(o) => vec![o],
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_object().ok_or_else(|| {
                    ApiError::bad(format!(
                        "values[{i}] must be an object such as {{\"messages\": [...]}}"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(ApiError::bad(
                "values must be an object: {\"messages\": [{\"type\": \"human\", \"content\": \"...\"}]}",
            ));
        }
    };
    let mut given = Vec::new();
    for update in updates {
        for (key, v) in update {
            match key.as_str() {
                "messages" => match v {
                    Value::Array(ms) => given.extend(ms.iter()),
                    other => given.push(other),
                },
                "data" => {
                    return Err(ApiError::bad(
                        "values.data cannot be updated: it is a plan's State, which its steps \
                         write; only values.messages can be added to",
                    ));
                }
                "answer" => {
                    return Err(ApiError::bad(
                        "values.answer cannot be updated: it is the model's answer; add an `ai` \
                         message to values.messages instead",
                    ));
                }
                other => {
                    return Err(ApiError::bad(format!(
                        "values.{other}: a weft thread's values are `messages`, `data` and \
                         `answer`, and only `messages` can be added to"
                    )));
                }
            }
        }
    }
    if given.is_empty() {
        return Err(ApiError::bad(
            "values.messages is empty: give the messages to add, e.g. [{\"type\": \"human\", \"content\": \"...\"}]",
        ));
    }
    let mut conversation = Conversation::of(st);
    given
        .into_iter()
        .enumerate()
        .map(|(i, m)| conversation.add(i, m))
        .collect()
}

/// What a new message is checked against: the ids of the thread's messages, the tool calls made
/// so far and those still without a result.
struct Conversation {
    ids: HashSet<String>,
    calls: HashSet<String>,
    open: Vec<(String, String)>,
}

impl Conversation {
    fn of(st: &SessionState) -> Self {
        let ids = messages::messages(st)
            .iter()
            .map(|m| m.id().to_owned())
            .collect();
        let mut calls = HashSet::new();
        let mut open = Vec::new();
        for m in st.history().iter() {
            match m {
                Message::Assistant { tool_calls, .. } => {
                    for c in tool_calls {
                        calls.insert(c.id.clone());
                        open.push((c.id.clone(), c.name.clone()));
                    }
                }
                Message::Tool { call_id, .. } => open.retain(|(id, _)| id != call_id),
                _ => {}
            }
        }
        Self { ids, calls, open }
    }

    /// Message `i` of the update as weft's, or why it cannot be added.
    fn add(&mut self, i: usize, m: &Value) -> Result<Message, ApiError> {
        let at = format!("values.messages[{i}]");
        let Value::Object(o) = m else {
            return Err(ApiError::bad(format!(
                "{at} must be an object: {{\"type\": \"human\", \"content\": \"...\"}}"
            )));
        };
        if let Some(id) = o.get("id").and_then(Value::as_str)
            && self.ids.contains(id)
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "{at}.id `{id}` is a message of the thread already, and a weft thread keeps \
                     its conversation as it was said: to change that message, fork the thread \
                     at the checkpoint before it (POST /sessions/{{id}}/fork with `at`) and add \
                     the new one there; to add a message, leave out its id"
                ),
            ));
        }
        let kind = o
            .get("type")
            .or_else(|| o.get("role"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let content = runs::message_text(m).map_err(|e| ApiError::bad(format!("{at}: {}", e.1)))?;
        match kind {
            "human" | "user" => Ok(Message::User { content }),
            "ai" | "assistant" => {
                let calls = match o.get("tool_calls") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(cs)) => cs
                        .iter()
                        .enumerate()
                        .map(|(k, c)| self.call(&format!("{at}.tool_calls[{k}]"), c))
                        .collect::<Result<_, _>>()?,
                    Some(_) => {
                        return Err(ApiError::bad(format!(
                            "{at}.tool_calls must be a list of {{name, args, id}}"
                        )));
                    }
                };
                Ok(Message::Assistant {
                    content,
                    tool_calls: calls,
                })
            }
            "tool" => {
                let Some(call_id) = o.get("tool_call_id").and_then(Value::as_str) else {
                    return Err(ApiError::bad(format!(
                        "{at}.tool_call_id is missing: a tool message answers one tool call of \
                         an `ai` message before it"
                    )));
                };
                let Some(k) = self.open.iter().position(|(id, _)| id == call_id) else {
                    return Err(ApiError::bad(format!(
                        "{at}.tool_call_id `{call_id}` answers no tool call of the conversation \
                         that is still without a result"
                    )));
                };
                let (_, tool) = self.open.remove(k);
                let name = o
                    .get("name")
                    .and_then(Value::as_str)
                    .map_or(tool, str::to_owned);
                let is_error = o.get("status").and_then(Value::as_str) == Some("error");
                Ok(Message::Tool {
                    call_id: call_id.to_owned(),
                    name,
                    content,
                    is_error,
                })
            }
            "system" => Err(ApiError::bad(format!(
                "{at}: system messages cannot be added; an agent's instructions are its prompt \
                 (the agent file's `instructions`)"
            ))),
            "" => Err(ApiError::bad(format!(
                "{at} needs a `type` (`human`, `ai` or `tool`)"
            ))),
            other => Err(ApiError::bad(format!(
                "{at}.type `{other}`: use `human`, `ai` or `tool` (messages are only added, \
                 never removed)"
            ))),
        }
    }

    /// A tool call of an `ai` message: `{name, args, id}`; a call without an id gets one.
    fn call(&mut self, at: &str, c: &Value) -> Result<ToolCall, ApiError> {
        let Some(name) = c
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Err(ApiError::bad(format!(
                "{at}.name is missing: the tool's name"
            )));
        };
        let args = match c.get("args") {
            None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
            Some(a @ Value::Object(_)) => a.clone(),
            Some(_) => {
                return Err(ApiError::bad(format!(
                    "{at}.args must be an object of the call's arguments"
                )));
            }
        };
        let id = match c
            .get("id")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty())
        {
            Some(id) => id.to_owned(),
            None => format!("call-{}", uuid::Uuid::now_v7().simple()),
        };
        if !self.calls.insert(id.clone()) {
            return Err(ApiError::bad(format!(
                "{at}.id `{id}` is the id of another tool call of the conversation; give each \
                 call its own id (or none)"
            )));
        }
        self.open.push((id.clone(), name.to_owned()));
        Ok(ToolCall {
            id,
            name: name.to_owned(),
            arguments: args,
            provider_id: None,
        })
    }
}
