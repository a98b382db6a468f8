//! Anthropic Messages.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::config::{ProviderConfig, ProviderKind, StreamMode};
use crate::http::{Http, classify_status, parse_json};
use crate::sse::SseParser;
use crate::structured::{self, Prepared, Wire};
use crate::tool_wire::ToolNames;
use crate::{DeltaSink, Message, Model, ModelError, ModelReply, ModelRequest, ToolCall, Usage};

/// `max_tokens` when neither the request nor the configuration gives one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
const API_VERSION: &str = "2023-06-01";

/// A model behind the Anthropic Messages API.
#[derive(Debug)]
pub struct AnthropicModel {
    cfg: ProviderConfig,
    label: String,
    http: Http,
}

impl AnthropicModel {
    /// A model for `cfg`, which must be an `anthropic` configuration; an error names what is
    /// wrong with it (another provider, an HTTP client that cannot be built).
    pub fn new(cfg: ProviderConfig) -> Result<Self, ModelError> {
        if cfg.kind != ProviderKind::Anthropic {
            return Err(ModelError::Config(format!(
                "AnthropicModel needs an `anthropic` configuration, got `{}`",
                cfg.kind.as_str()
            )));
        }
        let http = Http::new(&cfg)?;
        Ok(Self {
            label: format!("anthropic:{}", cfg.name),
            cfg,
            http,
        })
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &ProviderConfig {
        &self.cfg
    }

    /// The request body for `req` (schema instructions included when it has a reply schema).
    pub fn request_body(&self, req: &ModelRequest, stream: bool) -> Value {
        let instructions = req.response_schema.as_ref().map(structured::instructions);
        let messages = Prepared::new(&req.messages, instructions, self.cfg.system_role);
        let system: Vec<&str> = messages
            .iter()
            .filter_map(|m| match m {
                Message::System { content } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let mut body = Map::new();
        body.insert("model".into(), json!(self.cfg.name));
        body.insert(
            "max_tokens".into(),
            json!(
                req.max_tokens
                    .or(self.cfg.max_tokens)
                    .unwrap_or(DEFAULT_MAX_TOKENS)
            ),
        );
        if !system.is_empty() {
            body.insert("system".into(), json!(system.join("\n\n")));
        }
        let names = ToolNames::new(&req.tools);
        body.insert(
            "messages".into(),
            Value::Array(wire_messages(messages.iter(), &names)),
        );
        if !req.tools.is_empty() {
            body.insert(
                "tools".into(),
                Value::Array(
                    req.tools
                        .iter()
                        .map(|t| {
                            json!({"name": names.wire(&t.name), "description": t.description,
                                "input_schema": t.parameters})
                        })
                        .collect(),
                ),
            );
        }
        if let Some(t) = req.temperature.or(self.cfg.temperature) {
            body.insert("temperature".into(), json!(t));
        }
        if stream {
            body.insert("stream".into(), json!(true));
        }
        Value::Object(body)
    }

    fn usage(&self, u: &RawUsage) -> Usage {
        let mut usage = Usage {
            input_tokens: u.input + u.cache_read + u.cache_write,
            output_tokens: u.output,
            cache_read_tokens: u.cache_read,
            cache_write_tokens: u.cache_write,
            cost_usd: None,
            estimated: false,
        };
        usage.cost_usd = self.cfg.effective_prices().map(|p| {
            p.cost(
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            )
        });
        usage
    }

    fn malformed(message: impl Into<String>, body: &str) -> ModelError {
        ModelError::Malformed {
            provider: "anthropic".into(),
            message: message.into(),
            body: body.to_owned(),
            usage: Usage::default(),
        }
    }

    pub(crate) fn parse_reply(&self, text: &str) -> Result<ModelReply, ModelError> {
        let v = parse_json("anthropic", text)?;
        if v.get("type").and_then(Value::as_str) == Some("error") {
            return Err(stream_error(&v, text));
        }
        let blocks = v
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| Self::malformed("the reply has no `content` list", text))?;
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => {
                    content.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""))
                }
                Some("tool_use") => {
                    let name = b.get("name").and_then(Value::as_str).ok_or_else(|| {
                        Self::malformed(
                            format!("content block #{} (tool_use) has no name", i + 1),
                            text,
                        )
                    })?;
                    tool_calls.push(ToolCall {
                        id: b
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        name: name.to_owned(),
                        arguments: b.get("input").cloned().unwrap_or_else(|| json!({})),
                        provider_id: None,
                    });
                }
                _ => {}
            }
        }
        let u = RawUsage::from(v.get("usage"));
        Ok(ModelReply {
            timing: None,
            refused: Vec::new(),
            content,
            tool_calls,
            usage: self.usage(&u),
            model: v
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or(&self.cfg.name)
                .to_owned(),
            finish_reason: v
                .get("stop_reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    pub(crate) async fn read_stream(
        &self,
        mut resp: crate::http::Response,
        sink: DeltaSink,
    ) -> Result<ModelReply, ModelError> {
        let mut parser = SseParser::default();
        let mut st = StreamState::default();
        while !st.stopped {
            let Some(chunk) = resp.chunk().await? else {
                break;
            };
            for ev in parser.feed(&chunk) {
                self.stream_event(&ev.data, &mut st, &sink)?;
            }
        }
        if !st.stopped
            && let Some(ev) = parser.finish()
        {
            self.stream_event(&ev.data, &mut st, &sink)?;
        }
        if !st.stopped {
            return Err(ModelError::StreamCut {
                provider: "anthropic".into(),
                message: format!(
                    "the stream ended before `message_stop` (received {} characters of text)",
                    st.content.len()
                ),
            });
        }
        resp.finish()?;
        let mut tool_calls = Vec::new();
        for (_, b) in st.tools {
            let arguments = if b.json.trim().is_empty() {
                b.input
            } else {
                serde_json::from_str(&b.json).unwrap_or(Value::String(b.json))
            };
            tool_calls.push(ToolCall {
                id: b.id,
                name: b.name,
                arguments,
                provider_id: None,
            });
        }
        Ok(ModelReply {
            timing: None,
            refused: Vec::new(),
            content: st.content,
            tool_calls,
            usage: self.usage(&st.usage),
            model: st.model.unwrap_or_else(|| self.cfg.name.clone()),
            finish_reason: st.stop_reason,
        })
    }

    fn stream_event(
        &self,
        data: &str,
        st: &mut StreamState,
        sink: &DeltaSink,
    ) -> Result<(), ModelError> {
        if data.trim().is_empty() {
            return Ok(());
        }
        let v = parse_json("anthropic", data)?;
        match v.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(m) = v.pointer("/message/model").and_then(Value::as_str) {
                    st.model = Some(m.to_owned());
                }
                st.usage.merge(v.pointer("/message/usage"));
            }
            Some("content_block_start") => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        st.tools.insert(
                            index,
                            ToolBlock {
                                id: block
                                    .get("id")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_owned(),
                                name: block
                                    .get("name")
                                    .and_then(Value::as_str)
                                    .ok_or_else(|| {
                                        Self::malformed(
                                            "a streamed tool_use block has no name",
                                            data,
                                        )
                                    })?
                                    .to_owned(),
                                input: block.get("input").cloned().unwrap_or_else(|| json!({})),
                                json: String::new(),
                            },
                        );
                    }
                    Some("text") => {
                        if let Some(t) = block.get("text").and_then(Value::as_str)
                            && !t.is_empty()
                        {
                            sink(t);
                            st.content.push_str(t);
                        }
                    }
                    _ => {}
                }
            }
            Some("content_block_delta") => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                match v.pointer("/delta/type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                            sink(t);
                            st.content.push_str(t);
                        }
                    }
                    Some("input_json_delta") => {
                        let part = v
                            .pointer("/delta/partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        let block = st.tools.get_mut(&index).ok_or_else(|| {
                            Self::malformed(
                                format!("input_json_delta for block {index}, which is not a tool_use block"),
                                data,
                            )
                        })?;
                        block.json.push_str(part);
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    st.stop_reason = Some(r.to_owned());
                }
                st.usage.merge(v.get("usage"));
            }
            Some("message_stop") => st.stopped = true,
            Some("error") => return Err(stream_error(&v, data)),
            _ => {}
        }
        Ok(())
    }
}

/// An `error` event or body: `{type: error, error: {type, message}}`.
fn stream_error(v: &Value, raw: &str) -> ModelError {
    let status = match v.pointer("/error/type").and_then(Value::as_str) {
        Some("overloaded_error") => 529,
        Some("rate_limit_error") => 429,
        Some("invalid_request_error") => 400,
        Some("authentication_error") => 401,
        Some("permission_error") => 403,
        Some("not_found_error") => 404,
        Some("request_too_large") => 413,
        _ => 500,
    };
    classify_status("anthropic", status, raw.to_owned(), None)
}

#[derive(Default)]
struct RawUsage {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

impl RawUsage {
    fn from(u: Option<&Value>) -> Self {
        let mut r = Self::default();
        r.merge(u);
        r
    }

    /// Takes the fields `u` has (later events carry cumulative counts).
    fn merge(&mut self, u: Option<&Value>) {
        let Some(u) = u else { return };
        let n = |k: &str| u.get(k).and_then(Value::as_u64);
        if let Some(x) = n("input_tokens") {
            self.input = x;
        }
        if let Some(x) = n("output_tokens") {
            self.output = x;
        }
        if let Some(x) = n("cache_read_input_tokens") {
            self.cache_read = x;
        }
        if let Some(x) = n("cache_creation_input_tokens") {
            self.cache_write = x;
        }
    }
}

struct ToolBlock {
    id: String,
    name: String,
    input: Value,
    json: String,
}

#[derive(Default)]
struct StreamState {
    content: String,
    tools: BTreeMap<u64, ToolBlock>,
    usage: RawUsage,
    model: Option<String>,
    stop_reason: Option<String>,
    stopped: bool,
}

/// Messages on the wire: system messages dropped (they go in `system`), tool results as
/// `tool_result` blocks, and consecutive messages of one role merged into one.
fn wire_messages<'a>(messages: impl Iterator<Item = &'a Message>, names: &ToolNames) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks): (&'static str, Vec<Value>) = match m {
            Message::System { .. } => continue,
            Message::User { content } => ("user", vec![json!({"type": "text", "text": content})]),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut b = Vec::new();
                if !content.is_empty() {
                    b.push(json!({"type": "text", "text": content}));
                }
                for c in tool_calls {
                    let input = match &c.arguments {
                        Value::Object(_) => c.arguments.clone(),
                        Value::String(s) => serde_json::from_str::<Value>(s)
                            .ok()
                            .filter(Value::is_object)
                            .unwrap_or_else(|| json!({"arguments": s})),
                        other => json!({"arguments": other}),
                    };
                    b.push(json!({"type": "tool_use", "id": c.id, "name": names.wire(&c.name), "input": input}));
                }
                if b.is_empty() {
                    continue;
                }
                ("assistant", b)
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => {
                let mut r =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    r["is_error"] = json!(true);
                }
                ("user", vec![r])
            }
        };
        match out.last_mut() {
            Some((last, b)) if *last == role => b.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter()
        .map(|(role, blocks)| {
            // A lone text block is sent as a plain string, the common form.
            let content = match blocks.as_slice() {
                [b] if b.get("type").and_then(Value::as_str) == Some("text") => {
                    b.get("text").cloned().unwrap_or(Value::Null)
                }
                _ => Value::Array(blocks),
            };
            json!({"role": role, "content": content})
        })
        .collect()
}

impl Wire for AnthropicModel {
    fn provider(&self) -> &str {
        self.http.provider()
    }

    async fn call_once(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        let mut headers = vec![("anthropic-version", API_VERSION.to_owned())];
        match &self.cfg.api_key {
            Some(k) => headers.push(("x-api-key", k.clone())),
            None if !self.http.replaying() && self.cfg.base_url.contains("api.anthropic.com") => {
                return Err(ModelError::Config(format!(
                    "anthropic:{} needs an API key: set {} (or `api_key_env` in the model mapping)",
                    self.cfg.name, self.cfg.api_key_env
                )));
            }
            None => {}
        }
        let stream = self.cfg.stream != StreamMode::Never && deltas.is_some();
        let body = self.request_body(req, stream);
        let instructions = req.response_schema.as_ref().map(structured::instructions);
        crate::fit::Room::of(
            req,
            body.get("tools").map_or(0, |t| t.to_string().len()),
            instructions.as_deref().map(|t| (t, true)),
            body.get("max_tokens")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        )
        .check("anthropic", self.cfg.context_size)?;
        let resp = self.http.post("/v1/messages", &headers, &body).await?;
        // Read as the content type says, so a replayed cassette follows the recording.
        let sse = match resp.headers.get("content-type") {
            Some(t) => t.contains("text/event-stream"),
            None => stream,
        };
        let mut reply = if sse {
            let sink = deltas.unwrap_or_else(|| std::sync::Arc::new(|_: &str| {}));
            self.read_stream(resp, sink).await
        } else {
            let text = resp.text().await?;
            self.parse_reply(&text)
        }?;
        ToolNames::new(&req.tools).map_back(&mut reply.tool_calls);
        Ok(reply)
    }
}

impl Model for AnthropicModel {
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
        Some(self.cfg.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS))
    }
}
