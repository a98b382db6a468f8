//! OpenAI-compatible chat completions: OpenAI, Ollama, vLLM, llama.cpp, LM Studio, OpenRouter.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::config::{ProviderConfig, ProviderKind, StreamMode, StructuredMode};
use crate::http::{Http, classify_status, parse_json};
use crate::sse::SseParser;
use crate::structured::{self, Prepared, Wire};
use crate::tool_wire::ToolNames;
use crate::{DeltaSink, Message, Model, ModelError, ModelReply, ModelRequest, ToolCall, Usage};
use crate::{capabilities, fit};

/// A model behind an OpenAI-compatible `/chat/completions` endpoint.
#[derive(Debug)]
pub struct OpenAiModel {
    cfg: ProviderConfig,
    label: String,
    http: Http,
}

impl OpenAiModel {
    /// A model for `cfg`, which must be an `openai` configuration; an error names what is wrong
    /// with it (another provider, an HTTP client that cannot be built).
    pub fn new(cfg: ProviderConfig) -> Result<Self, ModelError> {
        if cfg.kind != ProviderKind::OpenAi {
            return Err(ModelError::Config(format!(
                "OpenAiModel needs an `openai` configuration, got `{}`",
                cfg.kind.as_str()
            )));
        }
        let http = Http::new(&cfg)?;
        Ok(Self {
            label: format!("openai:{}", cfg.name),
            cfg,
            http,
        })
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &ProviderConfig {
        &self.cfg
    }

    /// The request body for `req`, asking for a structured reply (when `req` has a schema) in
    /// the form `wire`.
    ///
    /// Only the `prompt` form writes the schema into the system prompt; when the server
    /// constrains the reply to the schema (`json_schema`, `json_object` with `schema`), the
    /// prompt gets a one-line hint to reply in JSON and the schema stays out of it.
    pub fn request_body(&self, req: &ModelRequest, stream: bool, wire: SchemaWire) -> Value {
        let instructions = schema_instructions(req, wire).map(|(text, _)| text);
        let messages = Prepared::new(&req.messages, instructions, self.cfg.system_role);
        let names = ToolNames::new(&req.tools);
        let mut body = Map::new();
        body.insert("model".into(), json!(self.cfg.name));
        body.insert(
            "messages".into(),
            Value::Array(messages.iter().map(|m| wire_message(m, &names)).collect()),
        );
        if !req.tools.is_empty() {
            body.insert(
                "tools".into(),
                Value::Array(
                    req.tools
                        .iter()
                        .map(|t| {
                            json!({"type": "function", "function": {
                                "name": names.wire(&t.name), "description": t.description, "parameters": t.parameters}})
                        })
                        .collect(),
                ),
            );
            if let Some(choice) = self.cfg.tool_choice.wire() {
                body.insert("tool_choice".into(), json!(choice));
            }
        }
        if let Some(n) = req.max_tokens.or(self.cfg.max_tokens) {
            body.insert(self.cfg.max_tokens_field.as_str().into(), json!(n));
        }
        if let Some(t) = req.temperature.or(self.cfg.temperature) {
            body.insert("temperature".into(), json!(t));
        }
        match (&req.response_schema, wire) {
            (Some(schema), SchemaWire::JsonSchema) => {
                let mut js = json!({"name": "reply", "schema": schema});
                if self.cfg.strict_schema {
                    js["strict"] = json!(true);
                }
                body.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": js}),
                );
            }
            (Some(schema), SchemaWire::JsonObject) => {
                body.insert(
                    "response_format".into(),
                    json!({"type": "json_object", "schema": schema}),
                );
            }
            _ => {}
        }
        if stream {
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        Value::Object(body)
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.cfg.api_key {
            Some(k) => vec![("authorization", format!("Bearer {k}"))],
            None => vec![],
        }
    }

    fn usage(&self, u: Option<&Value>) -> Usage {
        let Some(u) = u else {
            return Usage::default();
        };
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        let mut usage = Usage {
            input_tokens: n(u.get("prompt_tokens")),
            output_tokens: n(u.get("completion_tokens")),
            cache_read_tokens: n(u.pointer("/prompt_tokens_details/cached_tokens")),
            ..Usage::default()
        };
        usage.cost_usd = self.cfg.effective_prices().map(|p| {
            p.cost(
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                0,
            )
        });
        usage
    }

    /// The key of this server and model in the learned capabilities.
    /// While recording or replaying a cassette, nothing learned elsewhere applies: both start
    /// afresh, so a replay makes the same requests as the recording.
    fn capabilities_key(&self) -> String {
        let key = capabilities::key(&self.cfg.base_url, &self.cfg.name);
        match self.http.cassette_path() {
            Some(p) => format!("{}{} {key}", capabilities::CASSETTE_PREFIX, p.display()),
            None => key,
        }
    }

    async fn send(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
        wire: SchemaWire,
    ) -> Result<ModelReply, ModelError> {
        let key = self.capabilities_key();
        let stream = deltas.is_some()
            && match self.cfg.stream {
                StreamMode::Never => false,
                StreamMode::Always => true,
                StreamMode::Auto => !capabilities::get(&key).no_stream,
            };
        if let Some(reply) = self.send_as(req, deltas.clone(), wire, stream).await? {
            return Ok(reply);
        }
        // 200 with an empty body to a streamed request (llama-cpp-python does this when
        // `tool_choice` is given): ask again without streaming, and remember it.
        if self.cfg.stream == StreamMode::Always {
            return Err(ModelError::StreamCut {
                provider: "openai".into(),
                message: "the server answered a streamed request with an empty body; set `stream: auto` (fall back to plain calls) or `stream: false` in the model mapping".into(),
            });
        }
        capabilities::learn(&key, |l| l.no_stream = true);
        self.send_as(req, deltas, wire, false)
            .await?
            .ok_or_else(|| ModelError::Malformed {
                provider: "openai".into(),
                message: "the server answered with an empty body".into(),
                body: String::new(),
                usage: Usage::default(),
            })
    }

    /// One request, streamed or not. The reply is read as its content type says (so a replayed
    /// cassette follows the recording); `None` when a streamed request got an empty body.
    async fn send_as(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
        wire: SchemaWire,
        stream: bool,
    ) -> Result<Option<ModelReply>, ModelError> {
        let body = self.request_body(req, stream, wire);
        let instructions = schema_instructions(req, wire);
        fit::Room::of(
            req,
            body.get("tools").map_or(0, |t| t.to_string().len()),
            instructions
                .as_ref()
                .map(|(t, schema)| (t.as_str(), *schema)),
            req.max_tokens.or(self.cfg.max_tokens),
        )
        .check("openai", self.cfg.context_size)?;
        let resp = self
            .http
            .post("/chat/completions", &self.headers(), &body)
            .await?;
        let sse = match resp.headers.get("content-type") {
            Some(t) => t.contains("text/event-stream"),
            None => stream,
        };
        // What the request sent, for a usage estimate when the server reports none.
        let prompt_bytes = ["messages", "tools"]
            .iter()
            .filter_map(|k| body.get(*k))
            .map(|v| v.to_string().len())
            .sum();
        if sse {
            let sink = deltas.unwrap_or_else(|| Arc::new(|_: &str| {}));
            self.read_stream(resp, sink, prompt_bytes).await
        } else {
            let text = resp.text().await?;
            if stream && text.trim().is_empty() {
                return Ok(None);
            }
            let mut reply = self.parse_reply(&text)?;
            // A server that reports no usage (or none but zeros: a call always reads its
            // prompt) is counted roughly, as a stream without usage is, so that every call
            // is counted, the attempts of a structured reply that never fit included.
            if reply.usage.total_tokens() == 0 {
                reply.usage = rough_usage(prompt_bytes, &reply.content, &reply.tool_calls);
            }
            Ok(Some(reply))
        }
    }

    /// Reads a non-streamed reply.
    pub(crate) fn parse_reply(&self, text: &str) -> Result<ModelReply, ModelError> {
        let v = parse_json("openai", text)?;
        let malformed = |m: &str| ModelError::Malformed {
            provider: "openai".into(),
            message: m.to_owned(),
            body: text.to_owned(),
            usage: Usage::default(),
        };
        if let Some(err) = v.get("error") {
            return Err(classify_status("openai", 500, err.to_string(), None));
        }
        let choice = v
            .pointer("/choices/0")
            .ok_or_else(|| malformed("the reply has no `choices[0]`"))?;
        let msg = choice
            .get("message")
            .ok_or_else(|| malformed("`choices[0]` has no `message`"))?;
        let content = msg
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut tool_calls = Vec::new();
        if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
            for (i, c) in calls.iter().enumerate() {
                let name = c
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        malformed(&format!("tool call #{} has no function name", i + 1))
                    })?;
                let args = c
                    .pointer("/function/arguments")
                    .cloned()
                    .unwrap_or(Value::Null);
                let arguments = match args {
                    Value::String(s) => parse_arguments(&s),
                    Value::Null => json!({}),
                    other => other,
                };
                tool_calls.push(ToolCall {
                    id: c
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name: name.to_owned(),
                    arguments,
                    provider_id: None,
                });
            }
        }
        Ok(ModelReply {
            timing: None,
            refused: Vec::new(),
            content,
            tool_calls,
            usage: self.usage(v.get("usage")),
            model: v
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or(&self.cfg.name)
                .to_owned(),
            finish_reason: choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// Reads a streamed reply; `None` when the body was empty.
    pub(crate) async fn read_stream(
        &self,
        mut resp: crate::http::Response,
        sink: DeltaSink,
        prompt_bytes: usize,
    ) -> Result<Option<ModelReply>, ModelError> {
        let mut parser = SseParser::default();
        let mut acc = StreamAcc::default();
        let mut done = false;
        // Events received: a body with none (comments such as `: ping` aside) is empty.
        let mut received = 0usize;
        while !done {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                // llama-cpp-python may also break the connection of an empty streamed reply.
                Err(ModelError::StreamCut { .. }) if received == 0 => return Ok(None),
                Err(e) => return Err(e),
            };
            for ev in parser.feed(&chunk) {
                received += 1;
                if self.stream_event(&ev.data, &mut acc, &sink)? {
                    done = true;
                }
            }
        }
        if !done && let Some(ev) = parser.finish() {
            received += 1;
            done = self.stream_event(&ev.data, &mut acc, &sink)?;
        }
        if received == 0 {
            resp.finish()?;
            return Ok(None);
        }
        if !done && acc.finish_reason.is_none() {
            return Err(ModelError::StreamCut {
                provider: "openai".into(),
                message: format!(
                    "the stream ended before the reply was finished (received {} characters of text)",
                    acc.content.len()
                ),
            });
        }
        resp.finish()?;
        let mut tool_calls = Vec::new();
        for (i, (_, c)) in acc.calls.into_iter().enumerate() {
            if c.name.is_empty() {
                return Err(ModelError::Malformed {
                    provider: "openai".into(),
                    message: format!("streamed tool call #{} has no function name", i + 1),
                    body: c.arguments,
                    usage: Usage::default(),
                });
            }
            tool_calls.push(ToolCall {
                id: c.id.unwrap_or_default(),
                name: c.name,
                arguments: parse_arguments(&c.arguments),
                provider_id: None,
            });
        }
        let usage = match &acc.usage {
            Some(u) => self.usage(Some(u)),
            // Some servers (llama-cpp-python) ignore `stream_options.include_usage`.
            None => rough_usage(prompt_bytes, &acc.content, &tool_calls),
        };
        Ok(Some(ModelReply {
            timing: None,
            refused: Vec::new(),
            content: acc.content,
            tool_calls,
            usage,
            model: acc.model.unwrap_or_else(|| self.cfg.name.clone()),
            finish_reason: acc.finish_reason,
        }))
    }

    /// Applies one SSE data payload. Returns true at `[DONE]`.
    fn stream_event(
        &self,
        data: &str,
        acc: &mut StreamAcc,
        sink: &DeltaSink,
    ) -> Result<bool, ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v = parse_json("openai", data)?;
        if let Some(err) = v.get("error") {
            let status = err
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500);
            return Err(classify_status("openai", status, data.to_owned(), None));
        }
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            acc.model.get_or_insert_with(|| m.to_owned());
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            acc.usage = Some(u.clone());
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return Ok(false);
        };
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            acc.finish_reason = Some(f.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(false);
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str)
            && !t.is_empty()
        {
            sink(t);
            acc.content.push_str(t);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, c) in calls.iter().enumerate() {
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                let slot = acc.calls.entry(index).or_default();
                if let Some(id) = c.get("id").and_then(Value::as_str)
                    && !id.is_empty()
                {
                    slot.id = Some(id.to_owned());
                }
                if let Some(n) = c.pointer("/function/name").and_then(Value::as_str) {
                    slot.name.push_str(n);
                }
                match c.pointer("/function/arguments") {
                    Some(Value::String(a)) => slot.arguments.push_str(a),
                    Some(Value::Object(o)) => slot
                        .arguments
                        .push_str(&Value::Object(o.clone()).to_string()),
                    _ => {}
                }
            }
        }
        Ok(false)
    }
}

#[derive(Default)]
struct StreamAcc {
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Value>,
    model: Option<String>,
    finish_reason: Option<String>,
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// The text added to the system prompt of a request with a reply schema sent in the form `wire`,
/// and whether it is the schema itself (`prompt`) rather than a hint to reply in JSON.
fn schema_instructions(req: &ModelRequest, wire: SchemaWire) -> Option<(String, bool)> {
    let schema = req.response_schema.as_ref()?;
    Some(match wire {
        SchemaWire::Prompt => (structured::instructions(schema), true),
        SchemaWire::JsonSchema | SchemaWire::JsonObject => (structured::HINT.to_owned(), false),
    })
}

/// Tool-call arguments: JSON when they parse, else kept as a string for the runtime to report.
fn parse_arguments(s: &str) -> Value {
    if s.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_owned()))
}

fn wire_message(m: &Message, names: &ToolNames) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            // Always a string, `""` beside tool calls: OpenAI accepts it, and llama-cpp-python
            // answers 500 to `null`.
            let mut o = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                o["tool_calls"] = Value::Array(
                    tool_calls
                        .iter()
                        .map(|c| {
                            let args = match &c.arguments {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            json!({"id": c.id, "type": "function",
                                "function": {"name": names.wire(&c.name), "arguments": args}})
                        })
                        .collect(),
                );
            }
            o
        }
        Message::Tool {
            call_id,
            content,
            is_error,
            ..
        } => {
            let content = if *is_error && !content.starts_with("Error") {
                format!("Error: {content}")
            } else {
                content.clone()
            };
            json!({"role": "tool", "tool_call_id": call_id, "content": content})
        }
    }
}

impl Wire for OpenAiModel {
    fn provider(&self) -> &str {
        self.http.provider()
    }

    async fn call_once(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        let names = ToolNames::new(&req.tools);
        let mut reply = self.structured_call(req, deltas).await?;
        names.map_back(&mut reply.tool_calls);
        Ok(reply)
    }
}

impl OpenAiModel {
    /// One call, asking for a structured reply in the form the server accepts.
    async fn structured_call(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        if req.response_schema.is_none() {
            return self.send(req, deltas, SchemaWire::Prompt).await;
        }
        let key = self.capabilities_key();
        loop {
            let wire = match self.cfg.structured {
                StructuredMode::Prompt => SchemaWire::Prompt,
                StructuredMode::JsonSchema => capabilities::get(&key)
                    .structured
                    .as_deref()
                    .map_or(SchemaWire::JsonSchema, SchemaWire::parse),
            };
            match self.send(req, deltas.clone(), wire).await {
                // OpenAI answers 400; some servers (llama-cpp-python) answer 422 or 500.
                Err(ModelError::Http { status, body, .. })
                    if wire != SchemaWire::Prompt
                        && matches!(status, 400 | 422 | 500)
                        && body.to_ascii_lowercase().contains("response_format") =>
                {
                    // llama-cpp-python knows `json_object` with a schema (grammar-constrained).
                    let next = if wire == SchemaWire::JsonSchema && body.contains("json_object") {
                        SchemaWire::JsonObject
                    } else {
                        SchemaWire::Prompt
                    };
                    capabilities::learn(&key, |l| {
                        let known = l
                            .structured
                            .as_deref()
                            .map_or(SchemaWire::JsonSchema, SchemaWire::parse);
                        l.structured = Some(next.max(known).as_str().to_owned());
                    });
                }
                other => return other,
            }
        }
    }
}

/// The usage of a call whose server reported none: one token per four bytes of the request's
/// messages and tools, and of the reply's text and calls; marked estimated, its cost unknown.
fn rough_usage(prompt_bytes: usize, content: &str, tool_calls: &[ToolCall]) -> Usage {
    let calls: usize = tool_calls
        .iter()
        .map(|c| c.name.len() + c.arguments.to_string().len())
        .sum();
    Usage {
        estimated: true,
        input_tokens: (prompt_bytes as u64).div_ceil(4),
        output_tokens: ((content.len() + calls) as u64).div_ceil(4),
        ..Usage::default()
    }
}

/// How an OpenAI-compatible request asks for a structured reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SchemaWire {
    /// `response_format: {type: json_schema, json_schema: {name, schema}}`, OpenAI's form.
    JsonSchema = 0,
    /// `response_format: {type: json_object, schema}`: llama-cpp-python constrains the reply to
    /// the schema with a grammar.
    JsonObject = 1,
    /// The schema as instructions in the system prompt, nothing on the wire.
    Prompt = 2,
}

impl SchemaWire {
    /// The name kept in the learned capabilities.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonSchema => "json_schema",
            Self::JsonObject => "json_object",
            Self::Prompt => "prompt",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "json_schema" => Self::JsonSchema,
            "json_object" => Self::JsonObject,
            _ => Self::Prompt,
        }
    }
}

impl Model for OpenAiModel {
    fn name(&self) -> &str {
        &self.label
    }

    async fn complete(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        structured::complete(self, req, deltas).await
    }

    fn prices(&self) -> Option<crate::Prices> {
        self.cfg.effective_prices()
    }

    fn max_output_tokens(&self) -> Option<u32> {
        self.cfg.max_tokens
    }
}
