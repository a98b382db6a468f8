//! Settings of the HTTP providers, read from an agent file's `model` field, and the built-in
//! price table.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::ModelError;
use crate::cassette::CassetteMode;

/// Which wire protocol a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, llama.cpp, LM Studio, OpenRouter).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl ProviderKind {
    /// The provider's name as a `model` field writes it (`openai`, `anthropic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    fn default_key_env(self) -> &'static str {
        match self {
            Self::OpenAi => "OPENAI_API_KEY",
            Self::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    fn base_url_env(self) -> &'static str {
        match self {
            Self::OpenAi => "OPENAI_BASE_URL",
            Self::Anthropic => "ANTHROPIC_BASE_URL",
        }
    }

    fn default_base_url(self) -> &'static str {
        match self {
            Self::OpenAi => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com",
        }
    }
}

/// Prices in US dollars per million tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Prices {
    /// Price of input tokens not read from or written to the prompt cache.
    pub input_per_mtok: f64,
    /// Price of output tokens.
    pub output_per_mtok: f64,
    /// Price of input tokens read from the provider's prompt cache (default: the input price).
    pub cache_read_per_mtok: Option<f64>,
    /// Price of input tokens written to the provider's prompt cache (default: the input price).
    pub cache_write_per_mtok: Option<f64>,
}

impl Prices {
    const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Self {
            input_per_mtok: input,
            output_per_mtok: output,
            cache_read_per_mtok: Some(cache_read),
            cache_write_per_mtok: Some(cache_write),
        }
    }

    /// The cost of a call. `input` counts all input tokens, cached ones included.
    pub fn cost(&self, input: u64, output: u64, cache_read: u64, cache_write: u64) -> f64 {
        let plain = input.saturating_sub(cache_read + cache_write) as f64;
        let read = self.cache_read_per_mtok.unwrap_or(self.input_per_mtok);
        let write = self.cache_write_per_mtok.unwrap_or(self.input_per_mtok);
        (plain * self.input_per_mtok
            + cache_read as f64 * read
            + cache_write as f64 * write
            + output as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// Public list prices (USD per million tokens) of common models. The first entry whose pattern
/// the model name starts with (OpenAI) or contains (Anthropic) wins, so longer names come first.
const OPENAI_PRICES: &[(&str, Prices)] = &[
    ("gpt-4o-mini", Prices::new(0.15, 0.60, 0.075, 0.15)),
    ("gpt-4o", Prices::new(2.50, 10.00, 1.25, 2.50)),
    ("gpt-4.1-nano", Prices::new(0.10, 0.40, 0.025, 0.10)),
    ("gpt-4.1-mini", Prices::new(0.40, 1.60, 0.10, 0.40)),
    ("gpt-4.1", Prices::new(2.00, 8.00, 0.50, 2.00)),
    ("o4-mini", Prices::new(1.10, 4.40, 0.275, 1.10)),
    ("o3-mini", Prices::new(1.10, 4.40, 0.55, 1.10)),
];

const ANTHROPIC_PRICES: &[(&str, Prices)] = &[
    ("opus-4-5", Prices::new(5.0, 25.0, 0.50, 6.25)),
    ("opus", Prices::new(15.0, 75.0, 1.50, 18.75)),
    ("sonnet", Prices::new(3.0, 15.0, 0.30, 3.75)),
    ("haiku-4", Prices::new(1.0, 5.0, 0.10, 1.25)),
    ("3-5-haiku", Prices::new(0.80, 4.0, 0.08, 1.0)),
    ("3-haiku", Prices::new(0.25, 1.25, 0.03, 0.30)),
];

/// The built-in prices of a model, when known.
pub fn builtin_prices(kind: ProviderKind, model: &str) -> Option<Prices> {
    let model = model.to_ascii_lowercase();
    // OpenRouter-style names carry a vendor prefix: `openai/gpt-4o-mini`.
    let bare = model.rsplit('/').next().unwrap_or(&model);
    match kind {
        ProviderKind::OpenAi => OPENAI_PRICES
            .iter()
            .find(|(p, _)| bare.starts_with(p))
            .map(|(_, p)| p.clone()),
        ProviderKind::Anthropic => ANTHROPIC_PRICES
            .iter()
            .find(|(p, _)| bare.contains(p))
            .map(|(_, p)| p.clone()),
    }
}

/// How a provider is reached and behaves.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The wire protocol the provider speaks.
    pub kind: ProviderKind,
    /// The model name the provider knows (`gpt-4o-mini`, `claude-sonnet-4-20250514`).
    pub name: String,
    /// Without a trailing slash: `https://api.openai.com/v1`, `https://api.anthropic.com`.
    pub base_url: String,
    /// The environment variable the key is read from (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`
    /// unless set).
    pub api_key_env: String,
    /// The key, read from `api_key_env` when the model was built.
    pub api_key: Option<String>,
    /// `api_key: none` in the mapping: the server needs no key (a local server), so none is sent
    /// and a missing one is not an error.
    pub no_key: bool,
    /// When false, system instructions go in a first user message prefixed
    /// `[System instructions]` (for servers whose chat templates reject a system role).
    pub system_role: bool,
    /// Whether replies are streamed (only when the caller passes a delta sink).
    pub stream: StreamMode,
    /// OpenAI-compatible: the `tool_choice` sent whenever tools are offered.
    pub tool_choice: ToolChoice,
    /// OpenAI-compatible: the name of the reply-length limit on the wire.
    pub max_tokens_field: MaxTokensField,
    /// Limit on the whole request, body included.
    pub timeout: Duration,
    /// Limit on opening the connection (10 s unless set).
    pub connect_timeout: Duration,
    /// How many times a rate-limited (429), failed (5xx) or unreachable call is tried again.
    pub max_retries: u32,
    /// The first backoff step; the n-th retry waits a random time up to `base * 2^n`
    /// (capped at 30 s) unless the provider sent `Retry-After`.
    pub retry_base_delay: Duration,
    /// Default `max_tokens` (Anthropic requires one: 4096 unless set).
    pub max_tokens: Option<u32>,
    /// Default sampling temperature, sent when a request sets none (the server's own default
    /// otherwise). `0` makes a local model's replies repeatable.
    pub temperature: Option<f32>,
    /// Prices; the built-in table when not given.
    pub prices: Option<Prices>,
    /// OpenAI-compatible: send `strict: true` with `response_format` JSON schemas.
    pub strict_schema: bool,
    /// OpenAI-compatible: how replies with a schema are asked for.
    pub structured: StructuredMode,
    /// The model's context window in tokens (`context_size` in the mapping): a request whose
    /// estimated prompt plus `max_tokens` is larger is refused before it is sent.
    pub context_size: Option<u32>,
    /// Record or replay HTTP exchanges.
    pub cassette: Option<CassetteMode>,
}

/// Whether replies are streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamMode {
    /// Stream, but fall back to a plain call when the server answers a streamed request with an
    /// empty body, and remember that (see [`crate::capabilities`]).
    Auto,
    /// Always stream; an empty streamed body is an error.
    Always,
    /// Never stream.
    Never,
}

/// The `tool_choice` an OpenAI-compatible request carries when it offers tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// `"auto"`: the model decides. llama.cpp's `chatml-function-calling` format shows the
    /// tools to the model only when a `tool_choice` is sent.
    Auto,
    /// `"required"`: the model must call a tool.
    Required,
    /// `"none"`: the model must not call a tool.
    None,
    /// No `tool_choice` field at all.
    Omit,
}

impl ToolChoice {
    /// The wire value, `None` for [`ToolChoice::Omit`].
    pub fn wire(self) -> Option<&'static str> {
        match self {
            Self::Auto => Some("auto"),
            Self::Required => Some("required"),
            Self::None => Some("none"),
            Self::Omit => None,
        }
    }
}

/// The field an OpenAI-compatible request limits the reply length with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens` (most servers; OpenAI's older models).
    MaxTokens,
    /// `max_completion_tokens` (OpenAI's newer and reasoning models).
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// The field's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// How an OpenAI-compatible provider asks for structured replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StructuredMode {
    /// `response_format: {type: json_schema}`, falling back to instructions when rejected.
    JsonSchema,
    /// Instructions in the prompt only.
    Prompt,
}

const KNOWN_KEYS: &[&str] = &[
    "provider",
    "name",
    "base_url",
    "api_key_env",
    "api_key",
    "system_role",
    "stream",
    "timeout",
    "connect_timeout",
    "max_retries",
    "max_tokens",
    "max_tokens_field",
    "temperature",
    "tool_choice",
    "prices",
    "strict",
    "structured_output",
    "context_size",
];

/// The keys of a `{provider: local}` mapping (a GGUF model run in the process).
#[cfg_attr(not(feature = "local-model"), allow(dead_code))]
pub(crate) const LOCAL_KEYS: &[&str] = &[
    "provider",
    "file",
    "name",
    "context_size",
    "temperature",
    "seed",
    "max_tokens",
    "tool_choice",
];

/// The schema of an agent file's `model`: `provider:name`, `scripted:PATH`, `local:PATH`, or a
/// mapping whose keys are `KNOWN_KEYS` or `LOCAL_KEYS` (a test keeps them equal).
pub fn model_schema() -> Value {
    let duration =
        serde_json::json!({"anyOf": [{"type": "string"}, {"type": "number", "minimum": 0}]});
    let prices = serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "input_per_mtok": {"type": "number"},
            "output_per_mtok": {"type": "number"},
            "cache_read_per_mtok": {"type": "number"},
            "cache_write_per_mtok": {"type": "number"}
        }
    });
    serde_json::json!({
        "description": "`openai:NAME`, `anthropic:NAME`, `scripted:PATH`, `local:PATH.gguf`, or a mapping",
        "anyOf": [
            {"type": "string", "pattern": "^(openai|anthropic|scripted|local):.+"},
            {
                "type": "object",
                "additionalProperties": false,
                "required": ["provider", "name"],
                "properties": {
                    "provider": {"enum": ["openai", "anthropic"]},
                    "name": {"type": "string", "description": "the model as the server names it"},
                    "base_url": {"type": "string", "description": "an http(s) URL"},
                    "api_key_env": {"type": "string", "description": "the variable the key is read from"},
                    "api_key": {"const": "none", "description": "`none`: the server needs no key"},
                    "system_role": {"type": "boolean"},
                    "stream": {"anyOf": [{"type": "boolean"}, {"const": "auto"}]},
                    "timeout": duration,
                    "connect_timeout": duration,
                    "max_retries": {"type": "integer", "minimum": 0},
                    "max_tokens": {"type": "integer", "minimum": 1},
                    "max_tokens_field": {"enum": ["max_tokens", "max_completion_tokens"]},
                    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                    "tool_choice": {"enum": ["auto", "required", "none", "omit"]},
                    "prices": prices,
                    "strict": {"type": "boolean"},
                    "structured_output": {"enum": ["json_schema", "prompt"]},
                    "context_size": {"type": "integer", "minimum": 1, "description": "the model's context window in tokens, as the server is configured (llama.cpp: --ctx-size / --n_ctx)"}
                }
            },
            {
                "type": "object",
                "required": ["provider"],
                "properties": {
                    "provider": {"const": "scripted"},
                    "script": {"type": "string", "description": "the script, relative to the agent file"},
                    "name": {"type": "string"},
                    "prices": prices,
                    "max_tokens": {"type": "integer", "minimum": 1}
                }
            },
            {
                "type": "object",
                "additionalProperties": false,
                "required": ["provider"],
                "properties": {
                    "provider": {"const": "local"},
                    "file": {"type": "string", "description": "the GGUF file, relative to the agent file"},
                    "name": {"type": "string", "description": "the GGUF file (when `file` is not given)"},
                    "context_size": {"type": "integer", "minimum": 1, "maximum": 4096, "description": "the most tokens of prompt and reply together"},
                    "temperature": {"type": "number", "minimum": 0, "maximum": 2, "description": "0 (the default) picks the likeliest token"},
                    "seed": {"type": "integer", "minimum": 0, "description": "the sampler's seed"},
                    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
                    "tool_choice": {"enum": ["auto", "required", "none"], "description": "required: call tools until one has answered in this turn; none: never call"}
                }
            }
        ]
    })
}

impl ProviderConfig {
    /// Defaults for `kind` and model `name`, without reading the environment.
    pub fn new(kind: ProviderKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            base_url: kind.default_base_url().to_owned(),
            api_key_env: kind.default_key_env().to_owned(),
            api_key: None,
            no_key: false,
            system_role: true,
            stream: StreamMode::Auto,
            tool_choice: ToolChoice::Auto,
            max_tokens_field: MaxTokensField::MaxTokens,
            timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            max_retries: 3,
            retry_base_delay: Duration::from_millis(500),
            max_tokens: None,
            temperature: None,
            prices: None,
            strict_schema: false,
            structured: StructuredMode::JsonSchema,
            context_size: None,
            cassette: None,
        }
    }

    /// Reads `provider:name` or a mapping. `env` looks up environment variables (the key,
    /// `OPENAI_BASE_URL`/`ANTHROPIC_BASE_URL`, `WEFT_CASSETTE`).
    pub fn from_spec(
        kind: ProviderKind,
        name: &str,
        map: Option<&Map<String, Value>>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ModelError> {
        let mut c = Self::new(kind, name);
        if let Some(url) = env(kind.base_url_env()).filter(|s| !s.is_empty()) {
            c.base_url = url;
        }
        if let Some(m) = map {
            for (k, v) in m {
                let bad = |what: &str| {
                    ModelError::Config(format!("model mapping: `{k}` must be {what}, found {v}"))
                };
                match k.as_str() {
                    "provider" | "name" => {}
                    "base_url" => c.base_url = v.as_str().ok_or_else(|| bad("a URL"))?.to_owned(),
                    "api_key_env" => {
                        c.api_key_env = v
                            .as_str()
                            .ok_or_else(|| bad("an environment variable name"))?
                            .to_owned();
                    }
                    "api_key" => {
                        if v.as_str() != Some("none") {
                            return Err(ModelError::Config(format!(
                                "model mapping: `api_key` takes only `none` (for a server that needs no key), found {v}; \
                                 keys are read from the environment: name the variable with `api_key_env`"
                            )));
                        }
                        c.no_key = true;
                    }
                    "system_role" => {
                        c.system_role = v.as_bool().ok_or_else(|| bad("true or false"))?
                    }
                    "stream" => {
                        c.stream = match v {
                            Value::Bool(true) => StreamMode::Always,
                            Value::Bool(false) => StreamMode::Never,
                            Value::String(s) if s == "auto" => StreamMode::Auto,
                            _ => return Err(bad("`auto`, true or false")),
                        }
                    }
                    "tool_choice" => {
                        c.tool_choice = match v.as_str() {
                            Some("auto") => ToolChoice::Auto,
                            Some("required") => ToolChoice::Required,
                            Some("none") => ToolChoice::None,
                            Some("omit") => ToolChoice::Omit,
                            _ => return Err(bad("`auto`, `required`, `none` or `omit`")),
                        }
                    }
                    "max_tokens_field" => {
                        c.max_tokens_field = match v.as_str() {
                            Some("max_tokens") => MaxTokensField::MaxTokens,
                            Some("max_completion_tokens") => MaxTokensField::MaxCompletionTokens,
                            _ => return Err(bad("`max_tokens` or `max_completion_tokens`")),
                        }
                    }
                    "strict" => {
                        c.strict_schema = v.as_bool().ok_or_else(|| bad("true or false"))?
                    }
                    "timeout" => {
                        c.timeout = duration(v)
                            .ok_or_else(|| bad("seconds, or a duration like 30s, 500ms, 2m"))?;
                    }
                    "connect_timeout" => {
                        c.connect_timeout = duration(v)
                            .ok_or_else(|| bad("seconds, or a duration like 30s, 500ms, 2m"))?;
                    }
                    "max_retries" => {
                        c.max_retries = v
                            .as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| bad("a whole number"))?;
                    }
                    "context_size" => {
                        c.context_size = Some(
                            v.as_u64()
                                .and_then(|n| u32::try_from(n).ok())
                                .filter(|n| *n > 0)
                                .ok_or_else(|| bad("a positive whole number of tokens"))?,
                        );
                    }
                    "max_tokens" => {
                        c.max_tokens = Some(
                            v.as_u64()
                                .and_then(|n| u32::try_from(n).ok())
                                .filter(|n| *n > 0)
                                .ok_or_else(|| bad("a positive whole number"))?,
                        );
                    }
                    "temperature" => {
                        c.temperature = Some(
                            v.as_f64()
                                .filter(|t| (0.0..=2.0).contains(t))
                                .ok_or_else(|| bad("a number from 0 to 2"))?
                                as f32,
                        );
                    }
                    "structured_output" => {
                        c.structured = match v.as_str() {
                            Some("json_schema") => StructuredMode::JsonSchema,
                            Some("prompt") => StructuredMode::Prompt,
                            _ => return Err(bad("`json_schema` or `prompt`")),
                        };
                    }
                    "prices" => c.prices = Some(prices(v)?),
                    other => {
                        return Err(ModelError::Config(format!(
                            "model mapping: unknown key `{other}`; known keys: {}",
                            KNOWN_KEYS.join(", ")
                        )));
                    }
                }
            }
        }
        while c.base_url.ends_with('/') {
            c.base_url.pop();
        }
        check_base_url(&c.base_url)?;
        if !c.no_key {
            c.api_key = env(&c.api_key_env).filter(|s| !s.is_empty());
        }
        if let Some(spec) = env("WEFT_CASSETTE").filter(|s| !s.is_empty()) {
            c.cassette = Some(CassetteMode::parse(&spec)?);
        }
        let replaying = matches!(c.cassette, Some(CassetteMode::Replay(_)));
        if c.api_key.is_none() && !c.no_key && !replaying {
            return Err(ModelError::Config(format!(
                "{}:{} needs an API key: set {} (or name another variable with `api_key_env` in the \
                 model mapping; for a local server that needs no key, write `api_key: none` there)",
                kind.as_str(),
                c.name,
                c.api_key_env
            )));
        }
        Ok(c)
    }

    /// The prices used for cost: the configured ones, else the built-in table's.
    pub fn effective_prices(&self) -> Option<Prices> {
        self.prices
            .clone()
            .or_else(|| builtin_prices(self.kind, &self.name))
    }
}

pub(crate) fn prices(v: &Value) -> Result<Prices, ModelError> {
    let m = v.as_object().ok_or_else(|| {
        ModelError::Config(format!(
            "model mapping: `prices` must be a mapping with input_per_mtok and output_per_mtok, found {v}"
        ))
    })?;
    let mut p = Prices {
        input_per_mtok: f64::NAN,
        output_per_mtok: f64::NAN,
        cache_read_per_mtok: None,
        cache_write_per_mtok: None,
    };
    for (k, x) in m {
        let n = x.as_f64().filter(|n| *n >= 0.0).ok_or_else(|| {
            ModelError::Config(format!(
                "model mapping: `prices.{k}` must be a non-negative number (USD per million tokens), found {x}"
            ))
        })?;
        match k.as_str() {
            "input_per_mtok" => p.input_per_mtok = n,
            "output_per_mtok" => p.output_per_mtok = n,
            "cache_read_per_mtok" => p.cache_read_per_mtok = Some(n),
            "cache_write_per_mtok" => p.cache_write_per_mtok = Some(n),
            other => {
                return Err(ModelError::Config(format!(
                    "model mapping: unknown key `prices.{other}`; known keys: input_per_mtok, output_per_mtok, cache_read_per_mtok, cache_write_per_mtok"
                )));
            }
        }
    }
    if p.input_per_mtok.is_nan() || p.output_per_mtok.is_nan() {
        return Err(ModelError::Config(
            "model mapping: `prices` needs both input_per_mtok and output_per_mtok".into(),
        ));
    }
    Ok(p)
}

/// Seconds as a number, or a string `500ms`, `30s`, `2m`, `30`.
/// A base URL must be an absolute http(s) URL with a host.
pub(crate) fn check_base_url(url: &str) -> Result<(), ModelError> {
    let bad = |why: String| {
        ModelError::Config(format!(
            "model: `base_url` {url:?} {why}; write e.g. http://127.0.0.1:8080/v1"
        ))
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(format!("is not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(format!(
            "has scheme `{}`, not http or https",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host".into()));
    }
    Ok(())
}

fn duration(v: &Value) -> Option<Duration> {
    if let Some(n) = v.as_f64() {
        return (n > 0.0 && n.is_finite())
            .then(|| Duration::try_from_secs_f64(n).ok())
            .flatten();
    }
    let s = v.as_str()?.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let n: f64 = num.trim().parse().ok()?;
    (n > 0.0 && n.is_finite())
        .then(|| Duration::try_from_secs_f64(n * scale).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_model_schema_names_every_key_the_mapping_reads() {
        let schema = model_schema();
        let mut keys: Vec<&str> = schema["anyOf"][1]["properties"]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        let mut known = KNOWN_KEYS.to_vec();
        known.sort_unstable();
        assert_eq!(keys, known);
        let mut keys: Vec<&str> = schema["anyOf"][3]["properties"]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        let mut known = LOCAL_KEYS.to_vec();
        known.sort_unstable();
        assert_eq!(keys, known);
    }

    use super::*;
    use serde_json::json;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn mappings_are_read_and_unknown_keys_named() {
        let m = json!({"provider": "openai", "name": "llama", "base_url": "http://localhost:1/v1/",
            "api_key": "none", "system_role": false, "timeout": "2m", "connect_timeout": 3, "max_retries": 1,
            "prices": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}});
        let c = ProviderConfig::from_spec(ProviderKind::OpenAi, "llama", m.as_object(), &no_env)
            .unwrap();
        assert_eq!(c.base_url, "http://localhost:1/v1");
        assert!(!c.system_role);
        assert_eq!(c.timeout, Duration::from_secs(120));
        assert_eq!(c.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.max_retries, 1);
        assert_eq!(c.effective_prices().unwrap().output_per_mtok, 2.0);

        let bad = json!({"provider": "openai", "name": "x", "temprature": 1});
        let e = ProviderConfig::from_spec(ProviderKind::OpenAi, "x", bad.as_object(), &no_env)
            .unwrap_err();
        assert!(e.to_string().contains("`temprature`"), "{e}");
        let bad = json!({"timeout": "soon"});
        let e = ProviderConfig::from_spec(ProviderKind::OpenAi, "x", bad.as_object(), &no_env)
            .unwrap_err();
        assert!(e.to_string().contains("`timeout`"), "{e}");
    }

    #[test]
    fn environment_supplies_key_and_base_url() {
        let env = |k: &str| match k {
            "OPENAI_API_KEY" => Some("sk-test".to_owned()),
            "OPENAI_BASE_URL" => Some("http://127.0.0.1:9/v1".to_owned()),
            _ => None,
        };
        let c = ProviderConfig::from_spec(ProviderKind::OpenAi, "gpt-4o-mini", None, &env).unwrap();
        assert_eq!(c.api_key.as_deref(), Some("sk-test"));
        assert_eq!(c.base_url, "http://127.0.0.1:9/v1");
        let e = ProviderConfig::from_spec(ProviderKind::Anthropic, "claude", None, &env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("anthropic:claude needs an API key: set ANTHROPIC_API_KEY")
                && e.contains("api_key: none"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_key_is_refused_unless_the_mapping_says_none() {
        let e = ProviderConfig::from_spec(ProviderKind::OpenAi, "gpt-4o-mini", None, &no_env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("set OPENAI_API_KEY"), "{e}");
        let m = json!({"api_key": "none", "base_url": "http://127.0.0.1:8089/v1"});
        let c = ProviderConfig::from_spec(ProviderKind::OpenAi, "local", m.as_object(), &|k| {
            (k == "OPENAI_API_KEY").then(|| "not-sent".to_owned())
        })
        .unwrap();
        assert_eq!(c.api_key, None, "api_key: none sends no key");
        let m = json!({"api_key": "sk-live-123"});
        let e = ProviderConfig::from_spec(ProviderKind::OpenAi, "x", m.as_object(), &no_env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`api_key` takes only `none`"), "{e}");
        // A replayed cassette needs no key.
        let c = ProviderConfig::from_spec(ProviderKind::OpenAi, "x", None, &|k| {
            (k == "WEFT_CASSETTE").then(|| "replay:/tmp/tape.json".to_owned())
        })
        .unwrap();
        assert_eq!(c.api_key, None);
    }

    #[test]
    fn a_malformed_base_url_is_refused() {
        for url in [
            "localhost:8080/v1",
            "http//127.0.0.1/v1",
            "ftp://h/v1",
            "http://",
        ] {
            let m = json!({"api_key": "none", "base_url": url});
            let e = ProviderConfig::from_spec(ProviderKind::OpenAi, "x", m.as_object(), &no_env)
                .unwrap_err()
                .to_string();
            assert!(e.contains("`base_url`") && e.contains(url), "{url}: {e}");
        }
    }

    #[test]
    fn price_table_prefers_the_longest_name_and_counts_cache() {
        let mini = builtin_prices(ProviderKind::OpenAi, "gpt-4o-mini-2024-07-18").unwrap();
        assert_eq!(mini.input_per_mtok, 0.15);
        let big = builtin_prices(ProviderKind::OpenAi, "openai/gpt-4o").unwrap();
        assert_eq!(big.input_per_mtok, 2.5);
        assert!(builtin_prices(ProviderKind::OpenAi, "smollm2").is_none());
        let sonnet = builtin_prices(ProviderKind::Anthropic, "claude-sonnet-4-20250514").unwrap();
        // 1M plain input, 1M output, 1M cache reads, 1M cache writes.
        let c = sonnet.cost(3_000_000, 1_000_000, 1_000_000, 1_000_000);
        assert!((c - (3.0 + 15.0 + 0.30 + 3.75)).abs() < 1e-9, "{c}");
    }
}
