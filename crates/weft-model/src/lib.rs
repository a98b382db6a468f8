//! weft's models. The [`Model`] trait takes a [`ModelRequest`] (messages, tools, an optional
//! reply schema) and returns a [`ModelReply`] (text, tool calls, usage), streaming text deltas
//! to an optional sink. Providers: a scripted model for tests and demos, OpenAI-compatible chat
//! completions ([`OpenAiModel`]) and Anthropic Messages ([`AnthropicModel`]), built from an agent
//! file's `model` field by [`from_spec`].
//!
//! The HTTP providers retry rate limits and server errors with backoff (honouring
//! `Retry-After`), validate structured replies against the request's schema (asking again at most
//! twice), report token usage and cost, and can record or replay their HTTP exchanges
//! (`WEFT_CASSETTE=record:PATH` / `replay:PATH`, see [`Cassette`]).

#![warn(missing_docs, unreachable_pub)]

mod anthropic;
pub mod capabilities;
mod cassette;
mod config;
pub mod embeddings;
mod fit;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod http;
#[cfg(feature = "local-model")]
mod local;
mod openai;
mod scripted;
pub mod sse;
mod structured;
mod tool_wire;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
pub use weft_core::model::{
    Exact, Message, Messages, ModelReply, ModelRequest, Purpose, Staged, ToolCall, ToolDef, Usage,
};

pub use anthropic::{AnthropicModel, DEFAULT_MAX_TOKENS};
pub use cassette::{Cassette, CassetteFile, CassetteMode, Exchange};
pub use config::{
    MaxTokensField, Prices, ProviderConfig, ProviderKind, StreamMode, StructuredMode, ToolChoice,
    builtin_prices, model_schema,
};
pub use embeddings::Embedder;
#[cfg(feature = "local-model")]
pub use local::{LocalConfig, LocalModel, prompt_text, prompt_tokens, read_tool_calls};
pub use openai::{OpenAiModel, SchemaWire};
pub use scripted::{ScriptedModel, ScriptedReply};

/// Receives text deltas as the model generates them.
pub type DeltaSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Model failures. Each keeps what the provider said, so a person can see why.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The agent file's model settings are wrong (unknown provider, missing key, bad file).
    #[error("model configuration: {0}")]
    Config(String),
    /// The provider answered with an HTTP error.
    #[error("{provider} returned HTTP {status}: {body}")]
    Http {
        /// The provider (`openai`, `anthropic`, ...).
        provider: String,
        /// The HTTP status code.
        status: u16,
        /// The response body, as the provider sent it.
        body: String,
        /// Seconds the provider asked to wait (`Retry-After`).
        retry_after: Option<f64>,
    },
    /// The prompt is longer than the model's context window.
    #[error("{provider}: the request exceeds the model's context length: {body}")]
    ContextLength {
        /// The provider.
        provider: String,
        /// The provider's error body.
        body: String,
    },
    /// The request cannot fit the model's context (`context_size`): refused before it is sent.
    #[error("{provider}: the request cannot fit the model's context: {message}")]
    WouldNotFit {
        /// The provider.
        provider: String,
        /// What takes the room, each part with its estimate, and what to do.
        message: String,
    },
    /// The provider did not connect or answer within the time allowed.
    #[error("{provider}: timed out after {seconds:.1} s ({phase})")]
    Timeout {
        /// The provider.
        provider: String,
        /// What weft was doing (`connecting to URL`, `waiting for URL`, `reading the reply`).
        phase: String,
        /// The time limit that ran out, in seconds.
        seconds: f64,
    },
    /// The connection to the provider failed (DNS, TLS, refused, reset).
    #[error("{provider}: connection failed: {message}")]
    Transport {
        /// The provider.
        provider: String,
        /// The address and the chain of errors below it.
        message: String,
    },
    /// The stream ended before the reply was complete.
    #[error("{provider}: the stream was cut mid-reply: {message}")]
    StreamCut {
        /// The provider.
        provider: String,
        /// Why the stream ended.
        message: String,
    },
    /// The provider's reply could not be read.
    #[error("{provider}: malformed reply: {message}; body: {body}")]
    Malformed {
        /// The provider.
        provider: String,
        /// What is wrong with the reply.
        message: String,
        /// The reply's body (or the part that was read).
        body: String,
        /// Tokens spent on the unusable replies, when they were counted.
        usage: Usage,
    },
    /// A scripted model has no reply left for this call.
    #[error(
        "the script {script} has no reply left for a `{purpose}` call (call #{index}); add one"
    )]
    ScriptExhausted {
        /// Where the script came from (its file, or the name it was built under).
        script: String,
        /// The call's purpose (`plan`, `react`, ...).
        purpose: String,
        /// The call's number in the session, from 1.
        index: u32,
    },
    /// A scripted reply does not fit the call.
    #[error("the script {script}: {message}")]
    ScriptMismatch {
        /// Where the script came from.
        script: String,
        /// How the reply does not fit.
        message: String,
    },
    /// The call was given up before the model answered.
    #[error("the model call was cancelled")]
    Cancelled,
    /// A call that failed after earlier attempts of it were answered (replies that did not fit
    /// the schema): the failure, and the tokens those attempts used, so they are counted.
    #[error("{error}")]
    AfterAttempts {
        /// The failure of the last attempt.
        error: Box<ModelError>,
        /// What the earlier attempts used.
        usage: Usage,
    },
}

impl ModelError {
    /// Tokens the failed call used (the attempts that reported usage).
    pub fn usage(&self) -> Usage {
        match self {
            Self::Malformed { usage, .. } => usage.clone(),
            Self::AfterAttempts { error, usage } => {
                let mut all = usage.clone();
                all.add(&error.usage());
                all
            }
            _ => Usage::default(),
        }
    }

    /// The error with the tokens of earlier attempts of the same call added to what it used
    /// (unchanged when they used none).
    #[must_use]
    pub fn with_usage(self, usage: Usage) -> Self {
        if usage.is_empty() {
            return self;
        }
        Self::AfterAttempts {
            error: Box::new(self),
            usage,
        }
    }

    /// Whether trying the same call again may succeed (rate limits, server errors, cuts).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::AfterAttempts { error, .. } => error.is_retryable(),
            Self::Http { status, body, .. } => http::retryable_status(*status, body),
            Self::Timeout { .. } | Self::Transport { .. } | Self::StreamCut { .. } => true,
            _ => false,
        }
    }
}

/// A language model.
pub trait Model: Send + Sync + 'static {
    /// `provider:model`, for events and usage.
    fn name(&self) -> &str;
    /// One call. Text deltas go to `deltas` as they arrive, when given.
    fn complete(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> impl Future<Output = Result<ModelReply, ModelError>> + Send;
    /// The prices a call's cost is counted with; `None` when the model has none (its cost is
    /// then unknown, and cost budgets cannot be enforced).
    fn prices(&self) -> Option<Prices> {
        None
    }
    /// The `max_tokens` sent when a request sets none; `None` when the provider decides.
    fn max_output_tokens(&self) -> Option<u32> {
        None
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe form of [`Model`], for choosing a provider at run time.
pub trait DynModel: Send + Sync {
    /// `provider:model`, as [`Model::name`].
    fn name(&self) -> &str;
    /// One call, as [`Model::complete`], its future boxed.
    fn complete_boxed<'a>(
        &'a self,
        req: &'a ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
    /// The model's prices, as [`Model::prices`].
    fn prices(&self) -> Option<Prices>;
    /// The model's default `max_tokens`, as [`Model::max_output_tokens`].
    fn max_output_tokens(&self) -> Option<u32>;
}

impl<M: Model> DynModel for M {
    fn name(&self) -> &str {
        Model::name(self)
    }
    fn complete_boxed<'a>(
        &'a self,
        req: &'a ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.complete(req, deltas))
    }
    fn prices(&self) -> Option<Prices> {
        Model::prices(self)
    }
    fn max_output_tokens(&self) -> Option<u32> {
        Model::max_output_tokens(self)
    }
}

/// A model chosen at run time.
pub type SharedModel = Arc<dyn DynModel>;

/// Builds the model an agent file's `model` field names. `base_dir` is the agent file's
/// directory (scripts are found relative to it). Keys, base URLs and `WEFT_CASSETTE` come from
/// the process environment.
///
/// Forms: `scripted:PATH`, `openai:MODEL`, `anthropic:MODEL`, or a mapping
/// `{provider: scripted, script: PATH}` / `{provider: openai|anthropic, name: MODEL, base_url,
/// api_key_env, system_role, stream, tool_choice, timeout, connect_timeout, max_retries,
/// max_tokens, max_tokens_field, temperature, prices, strict, structured_output}`.
pub fn from_spec(spec: &Value, base_dir: &Path) -> Result<SharedModel, ModelError> {
    from_spec_with_env(spec, base_dir, &|k| std::env::var(k).ok())
}

/// The script an agent file's `model` names (`scripted:PATH`, or a mapping with `provider:
/// scripted`), read from `base_dir`; `None` for any other model.
pub fn script_of(spec: &Value, base_dir: &Path) -> Option<Result<ScriptedModel, ModelError>> {
    let path = match spec {
        Value::String(s) => s.strip_prefix("scripted:")?,
        Value::Object(m) if m.get("provider").and_then(Value::as_str) == Some("scripted") => m
            .get("script")
            .or_else(|| m.get("name"))
            .and_then(Value::as_str)?,
        _ => return None,
    };
    Some(ScriptedModel::from_file(&base_dir.join(path)))
}

/// The provider an agent file's `model` names (`openai`, `local`, ...); `None` when it names
/// none.
pub fn provider_of(spec: &Value) -> Option<&str> {
    match spec {
        Value::String(s) => s.split_once(':').map(|(p, _)| p),
        Value::Object(m) => m.get("provider").and_then(Value::as_str),
        _ => None,
    }
}

/// [`from_spec`] with the environment given as a lookup function.
pub fn from_spec_with_env(
    spec: &Value,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SharedModel, ModelError> {
    let (provider, rest, map) = match spec {
        Value::String(s) => match s.split_once(':') {
            Some((p, r)) => (p.to_owned(), r.to_owned(), None),
            None => {
                return Err(ModelError::Config(format!(
                    "`model: {s}` names no provider; write provider:model, e.g. openai:gpt-4o-mini or scripted:script.yaml"
                )));
            }
        },
        Value::Object(m) => {
            let provider = m
                .get("provider")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ModelError::Config(
                        "the `model` mapping needs `provider` (openai, anthropic or scripted)"
                            .into(),
                    )
                })?
                .to_owned();
            let key = match provider.as_str() {
                "scripted" => "script",
                "local" => "file",
                _ => "name",
            };
            let name = m
                .get(key)
                .or_else(|| m.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ModelError::Config(format!(
                        "the `model` mapping with `provider: {provider}` needs `{key}`"
                    ))
                })?
                .to_owned();
            (provider, name, Some(m))
        }
        other => {
            return Err(ModelError::Config(format!(
                "`model` must be a string or a mapping, found {other}"
            )));
        }
    };
    if rest.trim().is_empty() {
        return Err(ModelError::Config(format!(
            "`model`: provider `{provider}` needs a model name (or script), e.g. {provider}:NAME"
        )));
    }
    match provider.as_str() {
        "scripted" => {
            if let Some(m) = map
                && let Some(k) = m.keys().find(|k| {
                    !["provider", "script", "name", "prices", "max_tokens"].contains(&k.as_str())
                })
            {
                return Err(ModelError::Config(format!(
                    "the `model` mapping: unknown key `{k}` for the scripted provider; known keys: provider, script, prices, max_tokens"
                )));
            }
            // A cassette records and replays a provider's HTTP exchanges; a script makes none,
            // so the variable would do nothing here: say so rather than write no file.
            if let Some(spec) = env("WEFT_CASSETTE").filter(|s| !s.is_empty()) {
                CassetteMode::parse(&spec)?;
                return Err(ModelError::Config(format!(
                    "WEFT_CASSETTE={spec}: the scripted model (scripted:{rest}) sends no HTTP \
                     requests, so there is nothing to record or replay (its replies are already a \
                     file); unset WEFT_CASSETTE for this agent"
                )));
            }
            let mut model = ScriptedModel::from_file(&base_dir.join(&rest))?;
            if let Some(m) = map {
                if let Some(p) = m.get("prices") {
                    model = model.with_prices(config::prices(p)?);
                }
                if let Some(v) = m.get("max_tokens") {
                    let n = v
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| *n > 0)
                        .ok_or_else(|| {
                            ModelError::Config(format!(
                                "the `model` mapping: `max_tokens` must be a whole number of tokens, at least 1, found {v}"
                            ))
                        })?;
                    model = model.with_max_tokens(n);
                }
            }
            Ok(Arc::new(model))
        }
        "openai" => {
            let cfg = ProviderConfig::from_spec(ProviderKind::OpenAi, &rest, map, env)?;
            Ok(Arc::new(OpenAiModel::new(cfg)?))
        }
        "anthropic" => {
            let cfg = ProviderConfig::from_spec(ProviderKind::Anthropic, &rest, map, env)?;
            Ok(Arc::new(AnthropicModel::new(cfg)?))
        }
        #[cfg(feature = "local-model")]
        "local" => {
            let cfg = local::LocalConfig::from_spec(&rest, map, base_dir)?;
            Ok(Arc::new(local::LocalModel::new(cfg)?))
        }
        #[cfg(not(feature = "local-model"))]
        "local" => Err(ModelError::Config(format!(
            "`model: local:{rest}` runs a GGUF model in the process, which this build of weft \
             leaves out; build weft with the `local-model` feature \
             (cargo install --path crates/weft --features local-model)"
        ))),
        other => Err(ModelError::Config(format!(
            "unknown model provider `{other}`{}; known: scripted, openai, anthropic, local",
            weft_core::diagnose::did_you_mean(other, ["scripted", "openai", "anthropic", "local"])
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(k: &str) -> Option<String> {
        (k == "ANTHROPIC_API_KEY").then(|| "k".to_owned())
    }

    #[test]
    fn specs_name_their_provider_and_model() {
        let dir = Path::new(".");
        let m = from_spec_with_env(&json!("anthropic:claude-sonnet-4-0"), dir, &env).unwrap();
        assert_eq!(m.name(), "anthropic:claude-sonnet-4-0");
        let m = from_spec_with_env(
            &json!({"provider": "anthropic", "name": "claude-haiku-4-5", "max_tokens": 512}),
            dir,
            &env,
        )
        .unwrap();
        assert_eq!(m.name(), "anthropic:claude-haiku-4-5");
        let e = from_spec_with_env(&json!("gemini:pro"), dir, &env)
            .err()
            .unwrap();
        assert!(e.to_string().contains("`gemini`"), "{e}");
        let e = from_spec_with_env(&json!("opanai:gpt-4o"), dir, &env)
            .err()
            .unwrap();
        assert!(e.to_string().contains("did you mean `openai`?"), "{e}");
        let e = from_spec_with_env(&json!({"name": "gpt-4o"}), dir, &env)
            .err()
            .unwrap();
        assert!(e.to_string().contains("`provider`"), "{e}");
        let e = from_spec_with_env(&json!({"provider": "openai"}), dir, &env)
            .err()
            .unwrap();
        assert!(e.to_string().contains("`name`"), "{e}");
        let e = from_spec_with_env(
            &json!({"provider": "scripted", "script": "s.yaml", "stream": true}),
            dir,
            &env,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("`stream`"), "{e}");
        let e = from_spec_with_env(&json!("openai:gpt-4o"), dir, &|k| {
            (k == "WEFT_CASSETTE").then(|| "tape:x".to_owned())
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("WEFT_CASSETTE"), "{e}");
        // A scripted model makes no exchanges: a cassette, good or bad, is refused by name.
        for spec in ["record:run.json", "bogus"] {
            let e = from_spec_with_env(&json!("scripted:s.yaml"), dir, &|k| {
                (k == "WEFT_CASSETTE").then(|| spec.to_owned())
            })
            .err()
            .unwrap();
            assert!(
                e.to_string().contains(&format!("WEFT_CASSETTE={spec}")),
                "{e}"
            );
        }
    }
}
