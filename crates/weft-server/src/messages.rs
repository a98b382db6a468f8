//! A thread's conversation as LangChain messages, the `messages` of its values: the tasks and a
//! person's messages (`human`), the model's replies with the tool calls they asked for (`ai`),
//! and each call's result naming the call it answers (`tool`), each with its position in the
//! conversation as its id. The streams (`stream.rs`) send the same messages in `updates` and
//! give a reply's streamed pieces the id of the message they become.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};
use weft_core::State as SessionState;

use super::openapi;

/// A message as LangChain clients read it: `human`, `ai` (with the tool calls it asked for) or
/// `tool` (a call's result, naming the call it answers).
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct Message {
    /// `human`, `ai` or `tool`.
    #[serde(rename = "type")]
    kind: String,
    content: String,
    /// `{thread}-{N}`: the message's position N in the conversation.
    id: String,
    /// An `ai` message's tool calls (`[]` when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<MessageToolCall>>,
    /// A `tool` message: the tool's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// A `tool` message: the id of the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
    /// A `tool` message: `success` or `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    additional_kwargs: Map<String, Value>,
    response_metadata: Map<String, Value>,
}

/// A tool call of an `ai` message, as LangChain writes it.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct MessageToolCall {
    name: String,
    #[schemars(schema_with = "openapi::any")]
    args: Value,
    id: String,
    /// Always `tool_call`.
    #[serde(rename = "type")]
    kind: String,
}

impl Message {
    fn new(kind: &str, content: &str, id: String) -> Self {
        Self {
            kind: kind.to_owned(),
            content: content.to_owned(),
            id,
            tool_calls: (kind == "ai").then(Vec::new),
            name: None,
            tool_call_id: None,
            status: None,
            additional_kwargs: Map::new(),
            response_metadata: Map::new(),
        }
    }

    /// A tool call's result: the output as text (JSON for structured output), or the error.
    pub(crate) fn tool(id: String, call_id: &str, tool: &str, content: &str, error: bool) -> Self {
        Self {
            name: Some(tool.to_owned()),
            tool_call_id: Some(call_id.to_owned()),
            status: Some(if error { "error" } else { "success" }.to_owned()),
            ..Self::new("tool", content, id)
        }
    }

    /// The message's id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

/// The id of the message at position `n` of the thread's conversation.
fn message_id(st: &SessionState, n: usize) -> String {
    format!("{}-{n}", st.session_id())
}

/// A message of weft's conversation as LangChain's, with its id: what weft says to the model
/// in the user's place (`[weft] ...`) and system prompts are not shown.
fn from_history(st: &SessionState, n: usize, m: &weft_core::model::Message) -> Option<Message> {
    use weft_core::model::Message as M;
    let id = message_id(st, n);
    match m {
        M::System { .. } => None,
        M::User { content } if content.starts_with(weft_core::history::WEFT_PREFIX) => None,
        M::User { content } => Some(Message::new("human", content, id)),
        M::Assistant {
            content,
            tool_calls,
        } => Some(Message {
            tool_calls: Some(
                tool_calls
                    .iter()
                    .map(|c| MessageToolCall {
                        name: c.name.clone(),
                        args: c.arguments.clone(),
                        id: c.id.clone(),
                        kind: "tool_call".into(),
                    })
                    .collect(),
            ),
            ..Message::new("ai", content, id)
        }),
        M::Tool {
            call_id,
            name,
            content,
            is_error,
        } => Some(Message::tool(id, call_id, name, content, *is_error)),
    }
}

/// The thread's messages as LangGraph's `messages` value: weft's conversation (the tasks, the
/// model's replies with their tool calls, each call's result, the answers), each message with
/// its position as its id. A plan's steps are not messages (they are in `data`), and a plan
/// agent's conversation is its turns: the task and the answer of each. A thread loaded from a
/// compacted snapshot holds its conversation from the snapshot's window on.
pub(crate) fn messages(st: &SessionState) -> Vec<Message> {
    let h = st.history();
    let mut out: Vec<Message> = h
        .iter()
        .enumerate()
        .filter_map(|(k, m)| from_history(st, h.start() + k, m))
        .collect();
    let end = h.len();
    if st.mode() == Some(weft_core::agent::Mode::Plan) || st.mode().is_none() {
        // A plan turn's task and answer join the conversation when the next turn begins, at
        // these positions.
        if let Some(task) = st.turn().task() {
            out.push(Message::new("human", task, message_id(st, end)));
        }
        for (k, reply) in st.turn().user_inputs().iter().enumerate() {
            let id = format!("{}-{end}-reply{k}", st.session_id());
            out.push(Message::new("human", reply, id));
        }
        if let Some(a) = &st.turn().answer() {
            out.push(Message::new("ai", a, message_id(st, end + 1)));
        }
    } else if let Some(a) = &st.turn().answer() {
        // A workflow's answer may be its reply template rather than the model's last reply.
        // It was said if an `ai` message of the turn (after its task; messages added by
        // `threads.update_state` may follow it) says it.
        let task = st.turn().task();
        let said = out
            .iter()
            .rev()
            .take_while(|m| !(m.kind == "human" && Some(m.content.as_str()) == task))
            .any(|m| m.kind == "ai" && &m.content == a);
        if !said {
            out.push(Message::new("ai", a, message_id(st, end)));
        }
    }
    out
}

/// The id of the message the model's next reply becomes (`st`: the thread before the reply),
/// which the pieces of its text streamed in `messages` mode carry.
pub(crate) fn reply_id(st: &SessionState) -> String {
    match st.mode() {
        Some(weft_core::agent::Mode::Plan) | None => message_id(st, st.history().len() + 1),
        _ => message_id(st, st.history().len()),
    }
}

/// The turn's answer as the `ai` message of [`messages`] (`st`: the thread once the turn
/// ended).
pub(crate) fn answer_message(st: &SessionState, answer: &str) -> Message {
    messages(st)
        .into_iter()
        .rev()
        .find(|m| m.kind == "ai" && m.content == answer)
        .unwrap_or_else(|| Message::new("ai", answer, reply_id(st)))
}

/// The conversation's last message as [`messages`] shows it, if it is the result of call
/// `call_id` (`st`: the thread after the call finished).
pub(crate) fn result_message(st: &SessionState, call_id: &str) -> Option<Message> {
    let n = st.history().len().checked_sub(1)?;
    match st.history().get(n)? {
        m @ weft_core::model::Message::Tool { call_id: c, .. } if c == call_id => {
            from_history(st, n, m)
        }
        _ => None,
    }
}

/// The conversation's last message as [`messages`] shows it, if it is the model's reply with
/// tool calls (`st`: the thread after the reply).
pub(crate) fn calls_message(st: &SessionState) -> Option<Message> {
    last_reply(st).filter(|m| m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()))
}

/// The conversation's last message as [`messages`] shows it, if it is a reply of the model
/// (`st`: the thread after the reply).
pub(crate) fn last_reply(st: &SessionState) -> Option<Message> {
    let n = st.history().len().checked_sub(1)?;
    match st.history().get(n)? {
        m @ weft_core::model::Message::Assistant { .. } => from_history(st, n, m),
        _ => None,
    }
}
