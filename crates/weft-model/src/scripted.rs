//! A scripted model: replies read from a file, for tests and demos.
//!
//! A script is either a list of replies served in order (the session's n-th model call gets the
//! n-th reply), or a mapping from purpose (`plan`, `execute`, `review`, `respond`,
//! `response_review`, `react`, `workflow`) to a list (the n-th call of that purpose gets the n-th
//! reply of its list). Because the position comes from the session's own count of calls, a
//! session resumed in a new process continues the script where it stopped.
//!
//! A script may also hold `cases`, each with a `when` text and a `script` of either form: a
//! session is served by the first case whose `when` its first user message contains (the task
//! it began with), so one script can play a model that answers each request in its own way.
//!
//! A reply has one of `text`, `json` (sent as JSON text) or `tool_calls`, and may carry
//! `purpose` (in a list: the call must have this purpose, or the script fails loudly),
//! `delay_ms` (think time), `piece_ms` (a pause between the streamed pieces of its text), `usage`
//! and `repeat` (the reply stands for that many calls).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::{
    DeltaSink, Model, ModelError, ModelReply, ModelRequest, Prices, Purpose, ToolCall, Usage,
};

/// A tool call in a script.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool to call.
    pub name: String,
    /// The call's arguments (`null` when not given).
    #[serde(default)]
    pub arguments: Value,
    /// The call's id; `None` gives it `call_<call number>_<position>`.
    #[serde(default)]
    pub id: Option<String>,
}

/// One scripted reply.
#[derive(Clone, Debug, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ScriptedReply {
    /// In a list, the purpose the call must have (the script fails loudly otherwise); `None`
    /// accepts any.
    #[serde(default)]
    pub purpose: Option<Purpose>,
    /// The reply's text.
    #[serde(default)]
    pub text: Option<String>,
    /// A reply sent as JSON text.
    #[serde(default)]
    pub json: Option<Value>,
    /// The tool calls the reply makes.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Think time before the reply, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// A pause between the streamed pieces (words) of the text, in milliseconds, so that a client
    /// receives them apart rather than in one write.
    #[serde(default)]
    pub piece_ms: u64,
    /// The usage reported; `None` counts it from the request's and the reply's lengths (see
    /// docs/scripted-model.md, "Usage").
    #[serde(default)]
    pub usage: Option<Usage>,
    /// How many calls the reply stands for (`None`: one).
    #[serde(default)]
    pub repeat: Option<u32>,
}

impl ScriptedReply {
    /// A reply with text `t`.
    pub fn text(t: impl Into<String>) -> Self {
        Self {
            text: Some(t.into()),
            ..Self::default()
        }
    }

    /// A reply whose text is `v` as JSON.
    pub fn json(v: Value) -> Self {
        Self {
            json: Some(v),
            ..Self::default()
        }
    }

    /// A reply that calls tool `name` once with `arguments`.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            tool_calls: vec![ScriptedCall {
                name: name.into(),
                arguments,
                id: None,
            }],
            ..Self::default()
        }
    }

    /// The reply, served only to a call of purpose `p`.
    #[must_use]
    pub fn for_purpose(mut self, p: Purpose) -> Self {
        self.purpose = Some(p);
        self
    }

    /// The reply, sent after `ms` milliseconds.
    #[must_use]
    pub fn delayed(mut self, ms: u64) -> Self {
        self.delay_ms = ms;
        self
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScriptFile {
    List(Vec<ScriptedReply>),
    Wrapped { replies: Vec<ScriptedReply> },
    Cases { cases: Vec<CaseFile> },
    Keyed(HashMap<Purpose, Vec<ScriptedReply>>),
}

/// The replies of one case: a list, or a mapping from purpose to a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum ScriptBody {
    List(Vec<ScriptedReply>),
    Keyed(HashMap<Purpose, Vec<ScriptedReply>>),
}

impl ScriptBody {
    fn lists(&self) -> Vec<&Vec<ScriptedReply>> {
        match self {
            Self::List(l) => vec![l],
            Self::Keyed(k) => k.values().collect(),
        }
    }
}

/// One case of a script with cases: its replies serve sessions whose first user message
/// contains `when` (any session, without `when`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    #[serde(default)]
    when: Option<String>,
    script: ScriptBody,
}

/// The replies a session is served: in order, or per purpose.
#[derive(Debug, Clone, Default)]
struct Replies {
    flat: Vec<ScriptedReply>,
    keyed: HashMap<Purpose, Vec<ScriptedReply>>,
}

impl Replies {
    fn from_body(body: ScriptBody) -> Self {
        match body {
            ScriptBody::List(l) => Self {
                flat: expand(l),
                keyed: HashMap::new(),
            },
            ScriptBody::Keyed(k) => Self {
                flat: Vec::new(),
                keyed: k.into_iter().map(|(p, v)| (p, expand(v))).collect(),
            },
        }
    }

    fn all(&self) -> impl Iterator<Item = &ScriptedReply> {
        self.flat.iter().chain(self.keyed.values().flatten())
    }
}

/// A model that answers from a script.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    name: String,
    /// Where the script came from, for errors.
    origin: String,
    /// The script's cases, tried in order (`None`: any session); a script without cases is
    /// one case for any session.
    cases: Vec<(Option<String>, Replies)>,
    /// Prices its usage is costed at (`prices` in the agent file's model mapping).
    prices: Option<Prices>,
    /// The `max_tokens` it reports (`max_tokens` in the model mapping), for budgets.
    max_tokens: Option<u32>,
}

/// The most replies a script serves, `repeat` counted ([`ScriptedModel::parse`] refuses more;
/// [`ScriptedModel::new`] stops expanding there).
pub(crate) const MAX_REPLIES: u64 = 100_000;

fn expand(replies: Vec<ScriptedReply>) -> Vec<ScriptedReply> {
    let mut out = Vec::with_capacity(replies.len());
    for r in replies {
        let room = MAX_REPLIES.saturating_sub(out.len() as u64);
        let n = u64::from(r.repeat.unwrap_or(1)).min(room);
        for _ in 0..n {
            out.push(ScriptedReply {
                repeat: None,
                ..r.clone()
            });
        }
    }
    out
}

impl ScriptedModel {
    /// Replies served in order.
    pub fn new(origin: impl Into<String>, replies: Vec<ScriptedReply>) -> Self {
        let origin = origin.into();
        Self {
            name: format!("scripted:{origin}"),
            origin,
            cases: vec![(None, Replies::from_body(ScriptBody::List(replies)))],
            prices: None,
            max_tokens: None,
        }
    }

    /// Replies per purpose.
    pub fn keyed(origin: impl Into<String>, replies: HashMap<Purpose, Vec<ScriptedReply>>) -> Self {
        let origin = origin.into();
        Self {
            name: format!("scripted:{origin}"),
            origin,
            cases: vec![(None, Replies::from_body(ScriptBody::Keyed(replies)))],
            prices: None,
            max_tokens: None,
        }
    }

    /// The model with prices: each reply's usage gets its cost at them.
    #[must_use]
    pub fn with_prices(mut self, prices: Prices) -> Self {
        self.prices = Some(prices);
        self
    }

    /// The model reporting `max_tokens` as its bound on a reply (for budgets; replies are not
    /// cut to it).
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Reads a script file (YAML or JSON).
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let origin = path.display().to_string();
        let text = std::fs::File::open(path)
            .and_then(weft_core::limits::read_text)
            .map_err(|e| ModelError::Config(format!("cannot read the script {origin}: {e}")))?;
        Self::parse(&origin, &text)
    }

    /// Parses a script (YAML or JSON). `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Self, ModelError> {
        weft_core::limits::check_text_depth(text, &format!("the script {origin}"))
            .map_err(ModelError::Config)?;
        let file: ScriptFile = serde_yaml_ng::from_str(text).map_err(|e| {
            ModelError::Config(format!(
                "the script {origin} is not a list of replies or a mapping from purpose to replies: {e}"
            ))
        })?;
        let lists: Vec<&Vec<ScriptedReply>> = match &file {
            ScriptFile::List(l) | ScriptFile::Wrapped { replies: l } => vec![l],
            ScriptFile::Keyed(k) => k.values().collect(),
            ScriptFile::Cases { cases } => cases.iter().flat_map(|c| c.script.lists()).collect(),
        };
        let mut total: u64 = 0;
        for (i, r) in lists.into_iter().flatten().enumerate() {
            total += u64::from(r.repeat.unwrap_or(1));
            if total > MAX_REPLIES {
                return Err(ModelError::Config(format!(
                    "the script {origin}: reply #{} (repeat: {}) takes the script past {MAX_REPLIES} replies, the most a script may serve; lower `repeat`",
                    i + 1,
                    r.repeat.unwrap_or(1)
                )));
            }
        }
        let model = match file {
            ScriptFile::List(l) | ScriptFile::Wrapped { replies: l } => Self::new(origin, l),
            ScriptFile::Keyed(k) => Self::keyed(origin, k),
            ScriptFile::Cases { cases } => {
                if let Some(i) = cases
                    .iter()
                    .position(|c| c.when.as_deref().is_some_and(|w| w.trim().is_empty()))
                {
                    return Err(ModelError::Config(format!(
                        "the script {origin}: cases[{i}] has an empty `when`; leave it out for the case of any session"
                    )));
                }
                Self {
                    name: format!("scripted:{origin}"),
                    origin: origin.to_owned(),
                    cases: cases
                        .into_iter()
                        .map(|c| (c.when, Replies::from_body(c.script)))
                        .collect(),
                    prices: None,
                    max_tokens: None,
                }
            }
        };
        for (i, r) in model.cases.iter().flat_map(|(_, r)| r.all()).enumerate() {
            let kinds = usize::from(r.text.is_some())
                + usize::from(r.json.is_some())
                + usize::from(!r.tool_calls.is_empty());
            if kinds > 1 && !(r.text.is_some() && !r.tool_calls.is_empty() && r.json.is_none()) {
                return Err(ModelError::Config(format!(
                    "the script {origin}: reply #{} has both `json` and another kind; give one of text, json, tool_calls",
                    i + 1
                )));
            }
        }
        Ok(model)
    }

    /// The cases (by their `when`, `None`: any session) whose replies are all keyed by purpose
    /// and hold none for `purpose`: a session of such a case fails at its first call of that
    /// purpose. A case served in order can serve any purpose.
    pub fn unserved(&self, purpose: Purpose) -> Vec<(Option<&str>, Vec<&'static str>)> {
        self.cases
            .iter()
            .filter(|(_, r)| r.flat.is_empty() && !r.keyed.contains_key(&purpose))
            .map(|(when, r)| {
                let mut has: Vec<&'static str> = r.keyed.keys().map(|p| p.as_str()).collect();
                has.sort_unstable();
                (when.as_deref(), has)
            })
            .collect()
    }

    /// The case a request belongs to: the first whose `when` its first user message contains
    /// (ignoring case).
    fn case(&self, req: &ModelRequest) -> Result<&Replies, ModelError> {
        let first = req
            .messages
            .iter()
            .find_map(|m| match m {
                crate::Message::User { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or_default();
        let lower = first.to_lowercase();
        self.cases
            .iter()
            .find(|(when, _)| {
                when.as_deref()
                    .is_none_or(|w| lower.contains(&w.to_lowercase()))
            })
            .map(|(_, r)| r)
            .ok_or_else(|| ModelError::ScriptMismatch {
                script: self.origin.clone(),
                message: format!(
                    "no case's `when` is in the first user message (`{}`); add a case without `when` for any other session",
                    first.chars().take(80).collect::<String>()
                ),
            })
    }

    fn pick(&self, req: &ModelRequest) -> Result<&ScriptedReply, ModelError> {
        let Replies { flat, keyed } = self.case(req)?;
        if keyed.is_empty() {
            let reply =
                flat.get(req.call_index as usize)
                    .ok_or_else(|| ModelError::ScriptExhausted {
                        script: self.origin.clone(),
                        purpose: req.purpose.as_str().to_owned(),
                        index: req.call_index + 1,
                    })?;
            if let Some(p) = reply.purpose
                && p != req.purpose
            {
                return Err(ModelError::ScriptMismatch {
                    script: self.origin.clone(),
                    message: format!(
                        "reply #{} is for a `{}` call, but call #{} is a `{}` call",
                        req.call_index + 1,
                        p.as_str(),
                        req.call_index + 1,
                        req.purpose.as_str()
                    ),
                });
            }
            return Ok(reply);
        }
        keyed
            .get(&req.purpose)
            .and_then(|l| l.get(req.purpose_index as usize))
            .ok_or_else(|| ModelError::ScriptExhausted {
                script: self.origin.clone(),
                purpose: req.purpose.as_str().to_owned(),
                index: req.purpose_index + 1,
            })
    }
}

/// With `WEFT_SCRIPT_TRACE=FILE`, every request a scripted model receives is appended to FILE
/// as a JSON line: what the model was shown, for tests and for debugging scripts.
fn trace_request(req: &ModelRequest) {
    use std::io::Write;
    let Some(path) = std::env::var_os("WEFT_SCRIPT_TRACE") else {
        return;
    };
    if let (Ok(mut f), Ok(line)) = (
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path),
        serde_json::to_string(req),
    ) {
        let _ = writeln!(f, "{line}");
    }
}

/// A rough token count of a message: its text, plus a few tokens per tool call. Counted from
/// lengths, without serializing anything (this runs on every call, over the whole history).
fn message_tokens(m: &crate::Message) -> u64 {
    use crate::Message;
    let text = match m {
        Message::System { content } | Message::User { content } => content.len(),
        Message::Assistant {
            content,
            tool_calls,
        } => content.len() + tool_calls.iter().map(|c| c.name.len() + 24).sum::<usize>(),
        Message::Tool { content, name, .. } => content.len() + name.len(),
    };
    (text as u64).div_ceil(4) + 4
}

/// A rough token count for scripted usage: one token per four bytes.
fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

impl Model for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn prices(&self) -> Option<Prices> {
        self.prices.clone()
    }

    fn max_output_tokens(&self) -> Option<u32> {
        self.max_tokens
    }

    async fn complete(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        trace_request(req);
        let reply = self.pick(req)?;
        if reply.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
        }
        let content = match (&reply.text, &reply.json) {
            (Some(t), _) => t.clone(),
            (None, Some(j)) => serde_json::to_string(j).unwrap_or_default(),
            (None, None) => String::new(),
        };
        if req.response_schema.is_some() && !reply.tool_calls.is_empty() && content.is_empty() {
            return Err(ModelError::ScriptMismatch {
                script: self.origin.clone(),
                message: format!(
                    "call #{} (`{}`) expects a structured reply, but the script gives tool calls",
                    req.call_index + 1,
                    req.purpose.as_str()
                ),
            });
        }
        if let Some(sink) = &deltas
            && !content.is_empty()
        {
            let mut start = 0;
            let mut pieces = Vec::new();
            for (i, c) in content.char_indices() {
                if c == ' ' && i > start {
                    pieces.push(&content[start..i]);
                    start = i;
                }
            }
            pieces.push(&content[start..]);
            for (k, piece) in pieces.into_iter().enumerate() {
                if k > 0 && reply.piece_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(reply.piece_ms)).await;
                }
                sink(piece);
            }
        }
        let tool_calls = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(k, c)| ToolCall {
                id: c
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{}", req.call_index + 1, k + 1)),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
                provider_id: None,
            })
            .collect();
        let mut usage = reply.usage.clone().unwrap_or_else(|| {
            let prompt: u64 = req.messages.iter().map(message_tokens).sum();
            Usage {
                input_tokens: prompt,
                output_tokens: estimate_tokens(&content) + reply.tool_calls.len() as u64 * 10,
                ..Usage::default()
            }
        });
        if let (Some(p), None) = (&self.prices, usage.cost_usd) {
            usage.cost_usd = Some(p.cost(
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            ));
        }
        Ok(ModelReply {
            timing: None,
            refused: Vec::new(),
            content,
            tool_calls,
            usage,
            model: self.name.clone(),
            finish_reason: Some(
                if reply.tool_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                }
                .into(),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(purpose: Purpose, call_index: u32, purpose_index: u32) -> ModelRequest {
        ModelRequest {
            purpose,
            call_index,
            purpose_index,
            messages: vec![crate::Message::User {
                content: "hi".into(),
            }]
            .into(),
            tools: vec![],
            response_schema: None,
            exact_schema: None,
            max_tokens: None,
            temperature: None,
        }
    }

    #[tokio::test]
    async fn flat_scripts_serve_in_order_and_fail_loudly_when_exhausted() {
        let m = ScriptedModel::parse(
            "s.yaml",
            "- text: one\n- tool_calls: [{name: echo, arguments: {a: 1}}]\n",
        )
        .unwrap();
        assert_eq!(
            m.complete(&req(Purpose::React, 0, 0), None)
                .await
                .unwrap()
                .content,
            "one"
        );
        let r = m.complete(&req(Purpose::React, 1, 1), None).await.unwrap();
        assert_eq!(r.tool_calls[0].name, "echo");
        assert_eq!(r.tool_calls[0].arguments, json!({"a": 1}));
        let e = m
            .complete(&req(Purpose::React, 2, 2), None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no reply left"), "{e}");
    }

    #[tokio::test]
    async fn keyed_scripts_serve_by_purpose_and_check_purposes() {
        let m = ScriptedModel::parse(
            "k.yaml",
            "plan:\n  - json: {direct_response: hi}\nreview:\n  - text: ok\n",
        )
        .unwrap();
        let r = m.complete(&req(Purpose::Plan, 5, 0), None).await.unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&r.content).unwrap(),
            json!({"direct_response": "hi"})
        );
        assert!(
            m.complete(&req(Purpose::Respond, 6, 0), None)
                .await
                .is_err()
        );
        let flat = ScriptedModel::parse("f.yaml", "- {purpose: plan, text: x}\n").unwrap();
        let e = flat
            .complete(&req(Purpose::Review, 0, 0), None)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("`plan`") && e.to_string().contains("`review`"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn cases_are_chosen_by_the_first_user_message() {
        let m = ScriptedModel::parse(
            "c.yaml",
            "cases:\n  - when: Refund\n    script: { workflow: [{ text: money }] }\n  - script:\n      - text: other\n",
        )
        .unwrap();
        let ask = |first: &str, purpose: Purpose| {
            let mut r = req(purpose, 0, 0);
            r.messages = vec![
                crate::Message::System {
                    content: "refund".into(),
                },
                crate::Message::User {
                    content: first.into(),
                },
                crate::Message::User {
                    content: "later refund".into(),
                },
            ]
            .into();
            r
        };
        let r = m
            .complete(&ask("I want a REFUND", Purpose::Workflow), None)
            .await
            .unwrap();
        assert_eq!(r.content, "money");
        let r = m
            .complete(&ask("hello", Purpose::React), None)
            .await
            .unwrap();
        assert_eq!(r.content, "other");
        let only = ScriptedModel::parse(
            "o.yaml",
            "cases:\n  - when: refund\n    script: [{ text: x }]\n",
        )
        .unwrap();
        let e = only
            .complete(&ask("hello", Purpose::React), None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no case"), "{e}");
        assert!(ScriptedModel::parse("e.yaml", "cases:\n  - when: ''\n    script: []\n").is_err());
    }

    #[tokio::test]
    async fn repeat_and_deltas() {
        let m = ScriptedModel::parse("r.yaml", "- {text: \"a b c\", repeat: 2}\n").unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let s2 = seen.clone();
        let sink: DeltaSink = std::sync::Arc::new(move |d: &str| s2.lock().unwrap().push_str(d));
        m.complete(&req(Purpose::React, 1, 1), Some(sink))
            .await
            .unwrap();
        assert_eq!(seen.lock().unwrap().as_str(), "a b c");
        assert!(m.complete(&req(Purpose::React, 2, 2), None).await.is_err());
    }

    /// The worked example of docs/scripted-model.md ("Usage"): the counts its table gives.
    #[tokio::test]
    async fn the_usage_its_page_shows_is_what_it_counts() {
        use crate::Message;
        let m = ScriptedModel::parse(
            "w.yaml",
            "- tool_calls: [{name: getWeather, arguments: {city: Lisbon}}]\n- text: Yes, it is sunny in Lisbon.\n",
        )
        .unwrap();
        let mut messages = vec![
            Message::System {
                content: "You check the weather.".into(),
            },
            Message::User {
                content: "Is it sunny in Lisbon?".into(),
            },
        ];
        let ask = |messages: &Vec<Message>, i: u32| ModelRequest {
            messages: messages.clone().into(),
            ..req(Purpose::React, i, i)
        };
        let first = m.complete(&ask(&messages, 0), None).await.unwrap();
        assert_eq!(
            (first.usage.input_tokens, first.usage.output_tokens),
            (20, 10)
        );
        messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: first.tool_calls.clone(),
        });
        messages.push(Message::Tool {
            call_id: first.tool_calls[0].id.clone(),
            name: "getWeather".into(),
            content: "{\"sunny\":true}".into(),
            is_error: false,
        });
        let second = m.complete(&ask(&messages, 1), None).await.unwrap();
        assert_eq!(
            (second.usage.input_tokens, second.usage.output_tokens),
            (43, 7)
        );
        let page = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/scripted-model.md"),
        )
        .unwrap();
        for row in ["| 10 + 10 = 20 | 10 |", "| 20 + 13 + 10 = 43 | 7 |"] {
            assert!(page.contains(row), "docs/scripted-model.md lacks {row}");
        }
        assert!(!page.contains("estimated as a quarter of the bytes"));
    }

    #[tokio::test(start_paused = true)]
    async fn piece_ms_sends_the_pieces_apart() {
        let m = ScriptedModel::parse("p.yaml", "- {text: \"a b c\", piece_ms: 40}\n").unwrap();
        let start = tokio::time::Instant::now();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let sink: DeltaSink = std::sync::Arc::new(move |d: &str| {
            s2.lock()
                .unwrap()
                .push((d.to_owned(), start.elapsed().as_millis()));
        });
        m.complete(&req(Purpose::React, 0, 0), Some(sink))
            .await
            .unwrap();
        let seen = seen.lock().unwrap().clone();
        let at = |p: &str, ms: u128| (p.to_owned(), ms);
        assert_eq!(seen, [at("a", 0), at(" b", 40), at(" c", 80)]);
    }
}
