//! What the core knows of models: the messages it builds and the replies it parses. Providers
//! (HTTP, scripts) live in `weft-model`.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::history::{History, Log, LogIter};

/// Why the runtime calls the model. Scripted models key replies by it; traces show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// Plan mode: make a plan (or answer directly).
    Plan,
    /// Plan mode: carry out a step that has no literal tool call.
    Execute,
    /// Plan mode: review after a wave.
    Review,
    /// Plan mode: write the final answer from the evidence.
    Respond,
    /// Plan mode: review the final answer.
    ResponseReview,
    /// ReAct mode: one turn of the loop.
    React,
    /// Workflow mode: one turn inside a step.
    Workflow,
    /// Any mode: summarise the older part of a conversation that outgrew its token budget.
    Compact,
    /// `weft eval`: a model as judge grades a session against a rubric (never asked by an
    /// agent's own loop).
    Judge,
}

impl Purpose {
    /// The purpose as serialized (`response_review`): the key of a scripted model's replies and
    /// the name traces show.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Execute => "execute",
            Self::Review => "review",
            Self::Respond => "respond",
            Self::ResponseReview => "response_review",
            Self::React => "react",
            Self::Workflow => "workflow",
            Self::Compact => "compact",
            Self::Judge => "judge",
        }
    }
}

/// A tool call requested by the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id: its identity in weft and the id its result goes back to the model under.
    /// The provider's own id, unless that was empty or repeated an id of the same reply or of
    /// the conversation (see `agent_loop::model_replied`).
    pub id: String,
    /// The name of the tool the model asks for.
    pub name: String,
    /// Arguments as the model gave them. A provider that returned unparsable argument text
    /// keeps it as a JSON string, so the runtime can report it.
    pub arguments: Value,
    /// The provider's id for the call, when weft gave the call another one (`""`: the provider
    /// gave none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions from weft (the agent's prompt, the rules of a reply).
    System {
        /// The instructions.
        content: String,
    },
    /// What a person (or weft speaking for the task) says.
    User {
        /// The text.
        content: String,
    },
    /// What the model said: text, tool calls, or both.
    Assistant {
        /// The text; empty when the model only called tools.
        #[serde(default)]
        content: String,
        /// The tools the model asked to call, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool call's result, answering one call of the assistant message before it.
    Tool {
        /// The id of the [`ToolCall`] this answers.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result as text (JSON for structured results).
        content: String,
        /// Whether the call failed (`content` then holds the error).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// The name the model calls the tool by.
    pub name: String,
    /// What the tool does and when to use it, as the model reads it.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// The messages of a request, in order: the leading ones (a system prompt), then a session's
/// conversation, shared with the session rather than copied (see [`crate::history`]), then the
/// ones added after it (a structured reply asked for again). Reads, compares and serializes as
/// the plain list of messages it stands for.
#[derive(Clone, Default)]
pub struct Messages {
    head: Vec<Message>,
    history: Option<Arc<Log>>,
    /// The first message of `history` carried (the ones before were compacted).
    from: usize,
    tail: Vec<Message>,
}

impl Messages {
    /// No messages.
    pub fn new() -> Self {
        Self::default()
    }

    /// `head`, then the conversation `history` with every tool call paired with a result (a call
    /// without one gets an `interrupted` result). Copies no message of the conversation.
    pub fn with_history(head: Vec<Message>, history: &History) -> Self {
        Self::with_history_from(head, history, 0)
    }

    /// `head`, then the conversation `history` from its message `from` on (the ones before were
    /// compacted into a summary, which `head` carries), repaired as [`Self::with_history`] does.
    pub fn with_history_from(head: Vec<Message>, history: &History, from: usize) -> Self {
        Self {
            head,
            history: Some(history.shared()),
            from,
            tail: history.trailing_repairs(),
        }
    }

    /// How many messages the request carries: the leading ones, the conversation's from its
    /// first carried message, the repairs and the ones added after.
    pub fn len(&self) -> usize {
        self.head.len() + self.history.as_ref().map_or(0, |h| h.len(self.from)) + self.tail.len()
    }

    /// Whether the request carries no message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a message (after the conversation, if there is one).
    pub fn push(&mut self, m: Message) {
        self.tail.push(m);
    }

    /// The messages in order, without copying them.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            head: self.head.iter(),
            history: self.history.as_ref().map(|h| h.iter(self.from)),
            tail: self.tail.iter(),
        }
    }

    /// The messages as one vector (a copy).
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

/// The messages of a [`Messages`], in order.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    head: std::slice::Iter<'a, Message>,
    history: Option<LogIter<'a>>,
    tail: std::slice::Iter<'a, Message>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Message;

    fn next(&mut self) -> Option<&'a Message> {
        if let Some(m) = self.head.next() {
            return Some(m);
        }
        if let Some(m) = self.history.as_mut().and_then(Iterator::next) {
            return Some(m);
        }
        self.tail.next()
    }

    fn fold<B, F: FnMut(B, &'a Message) -> B>(self, init: B, mut f: F) -> B {
        let mut acc = self.head.fold(init, &mut f);
        if let Some(h) = self.history {
            acc = h.fold(acc, &mut f);
        }
        self.tail.fold(acc, f)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.head.len()
            + self.history.as_ref().map_or(0, ExactSizeIterator::len)
            + self.tail.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl From<Vec<Message>> for Messages {
    fn from(head: Vec<Message>) -> Self {
        Self {
            head,
            history: None,
            from: 0,
            tail: Vec::new(),
        }
    }
}

impl FromIterator<Message> for Messages {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl PartialEq<Vec<Message>> for Messages {
    fn eq(&self, other: &Vec<Message>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(d).map(Self::from)
    }
}

/// One call to a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Why the call is made.
    pub purpose: Purpose,
    /// How many model calls this session made before this one (all purposes).
    pub call_index: u32,
    /// How many model calls of this purpose this session made before this one.
    pub purpose_index: u32,
    /// The conversation sent, system prompt first.
    pub messages: Messages,
    /// The tools the model may call; empty when it may call none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDef>,
    /// When set, the reply's text must be JSON matching this schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    /// The same reply format as `response_schema`, stated more exactly for a decoder in the
    /// process that enforces every keyword (the planner's ids by position, references to what
    /// exists only: `prompts::exact_planner_schema`; the step executor's tools and skill, the
    /// reviews' questions: `prompts::exact_executor_schema` and the like). It is larger, so it
    /// never goes to a server or into a prompt, and it is not stored with the request: it is
    /// built again from the state. `None` when `response_schema` is already exact.
    #[serde(skip)]
    pub exact_schema: Option<Exact>,
    /// The most tokens the reply may have; `None` leaves it to the provider's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature; `None` leaves it to the provider's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

/// A reply's exact schema ([`ModelRequest::exact_schema`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Exact {
    /// The schema, as it is before the reply is written.
    pub schema: Value,
    /// How a decoder that can build its grammar again mid-reply narrows the schema as the
    /// items of a list in the reply are written; `None` when the schema says all there is.
    pub staged: Option<Staged>,
}

impl From<Value> for Exact {
    fn from(schema: Value) -> Self {
        Self {
            schema,
            staged: None,
        }
    }
}

/// The exact schema of a reply whose list (the value of key `list` in the reply's object) is
/// typed item by item by the items before: given the items written so far, the schema again
/// (the plan's steps, each reference typed by the steps it reads:
/// `prompts::planner_stages`). Every stage allows what the stage before allowed up to the last
/// item written, so a decoder can read its reply so far again under the new one.
#[derive(Clone)]
pub struct Staged {
    /// The key of the list, in the reply's top-level object.
    pub list: &'static str,
    schema: Arc<StageFn>,
}

/// The schema given the items written so far.
type StageFn = dyn Fn(&[Value]) -> Value + Send + Sync;

impl Staged {
    /// Stages of the list at `list`, the schema given the items written by `schema`.
    pub fn new(
        list: &'static str,
        schema: impl Fn(&[Value]) -> Value + Send + Sync + 'static,
    ) -> Self {
        Self {
            list,
            schema: Arc::new(schema),
        }
    }

    /// The schema once `written` are the list's items so far.
    pub fn schema(&self, written: &[Value]) -> Value {
        (self.schema)(written)
    }
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Staged({})", self.list)
    }
}

impl PartialEq for Staged {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list && Arc::ptr_eq(&self.schema, &other.schema)
    }
}

/// Token usage of one call (or a sum of calls).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Usage {
    /// Tokens of the request (prompt), cached ones included.
    #[serde(default)]
    pub input_tokens: u64,
    /// Tokens the model generated.
    #[serde(default)]
    pub output_tokens: u64,
    /// Of the input tokens, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of the input tokens, those written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Cost in US dollars, when the model's prices are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The counts are weft's estimate (the server reported none), not the provider's.
    #[serde(
        default,
        rename = "usage_estimated",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub estimated: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Adds `other` to this sum: counts saturate, costs add (an unknown cost counts as 0 once
    /// either is known), and the sum is an estimate if either part is.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        self.estimated |= other.estimated;
    }

    /// Whether nothing was used: no tokens and no known cost.
    pub fn is_empty(&self) -> bool {
        self.total_tokens() == 0 && self.cost_usd.is_none()
    }

    /// Input and output tokens together.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// A model's reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    /// The reply's text; empty when the model only called tools.
    #[serde(default)]
    pub content: String,
    /// The tools the model asks to call, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tokens (and cost) of the call.
    #[serde(default)]
    pub usage: Usage,
    /// The model that answered, as the provider names it.
    #[serde(default)]
    pub model: String,
    /// Why the model stopped, as the provider says it (`stop`, `length`, `tool_calls`, ...);
    /// `None` when it did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// How long the call took, as the runtime measured it around the call; `None` in replies
    /// recorded before weft measured it (and in a provider's own reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// The replies to this call that the model layer refused and asked again for before this
    /// one (a structured reply that did not match the schema), each with why; their tokens are
    /// in `usage`. Empty when the first reply was used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedTry>,
}

/// A reply the model layer refused and asked again for within one call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefusedTry {
    /// Why it was refused, as the model was told.
    pub reason: String,
    /// The reply's text, cut to [`RefusedTry::MAX_TEXT`] bytes.
    pub text: String,
}

impl RefusedTry {
    /// The most bytes of a refused reply's text kept.
    pub const MAX_TEXT: usize = 2000;

    /// A refused reply `text` and why.
    pub fn new(reason: &str, text: &str) -> Self {
        let mut end = text.len().min(Self::MAX_TEXT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            reason: reason.to_owned(),
            text: text[..end].to_owned(),
        }
    }
}

/// How long a model call took, as the runtime measured it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Timing {
    /// From the call to its whole reply, in ms (the provider's own retries included).
    pub latency_ms: u64,
    /// From the call to the first piece of the reply's text, in ms; `None` when the reply's text
    /// did not stream (it came whole, or there was none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<u64>,
}

/// A value as text for a model: strings as they are, everything else as JSON.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
