//! The HTTP layer the providers share: one request with timeouts, retries with backoff that
//! honour `Retry-After`, error classification, streamed bodies, SSE framing, and the cassette.
//!
//! Nothing here spawns a task: dropping a provider's future drops the request and its body,
//! which closes the connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::cassette::{Cassette, CassetteMode, Exchange};
use crate::config::ProviderConfig;
use crate::sse::Utf8Decoder;
use crate::{ModelError, Usage};

/// Response headers kept in cassettes.
const KEPT_HEADERS: &[&str] = &["content-type", "retry-after", "x-request-id", "request-id"];

/// Longest wait honoured from a `Retry-After` header.
const MAX_RETRY_AFTER: f64 = 300.0;
/// Longest backoff step without `Retry-After`.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A provider's HTTP client.
#[derive(Debug)]
pub(crate) struct Http {
    provider: String,
    client: reqwest::Client,
    base_url: String,
    max_retries: u32,
    retry_base_delay: Duration,
    connect_timeout: Duration,
    timeout: Duration,
    cassette: Option<Arc<Cassette>>,
    key: Option<Arc<ApiKey>>,
}

/// The provider's API key, to be kept out of what a server sends back: an error body that echoes
/// the key (some do, on a 401) is stored, printed and recorded with `[secret:VARIABLE]` instead.
#[derive(Debug)]
struct ApiKey {
    variable: String,
    value: String,
}

impl ApiKey {
    fn scrub(&self, text: &mut String) {
        if text.contains(&self.value) {
            *text = text.replace(&self.value, &format!("[secret:{}]", self.variable));
        }
    }
}

fn scrub(key: Option<&ApiKey>, text: &mut String) {
    if let Some(k) = key {
        k.scrub(text);
    }
}

impl Http {
    pub(crate) fn new(cfg: &ProviderConfig) -> Result<Self, ModelError> {
        // weft builds rustls without a default crypto provider (one TLS stack, no aws-lc C
        // build): install `ring` unless the process installed one (another thread may win the
        // race; either provider is fine).
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.connect_timeout)
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {e}")))?;
        let cassette = cfg.cassette.as_ref().map(Cassette::open).transpose()?;
        Ok(Self {
            provider: cfg.kind.as_str().to_owned(),
            client,
            base_url: cfg.base_url.clone(),
            max_retries: cfg.max_retries,
            retry_base_delay: cfg.retry_base_delay,
            connect_timeout: cfg.connect_timeout,
            timeout: cfg.timeout,
            cassette,
            key: cfg.api_key.as_ref().map(|value| {
                Arc::new(ApiKey {
                    variable: cfg.api_key_env.clone(),
                    value: value.clone(),
                })
            }),
        })
    }

    pub(crate) fn provider(&self) -> &str {
        &self.provider
    }

    /// The cassette file calls are recorded to or replayed from.
    pub(crate) fn cassette_path(&self) -> Option<&std::path::Path> {
        self.cassette.as_deref().map(|c| c.mode().path())
    }

    /// Whether calls are served from a cassette (no network, no key needed).
    pub(crate) fn replaying(&self) -> bool {
        matches!(
            self.cassette.as_deref().map(Cassette::mode),
            Some(CassetteMode::Replay(_))
        )
    }

    /// POSTs `body` to `base_url + suffix`, retrying 429, 408, 5xx and connection failures.
    /// Returns a response with a 2xx status; any other status becomes an error with the body.
    pub(crate) async fn post(
        &self,
        suffix: &str,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<Response, ModelError> {
        let mut attempt = 0u32;
        loop {
            let outcome = self.post_once(suffix, headers, body).await;
            let err = match outcome {
                Ok(resp) if (200..300).contains(&resp.status) => return Ok(resp),
                Ok(resp) => {
                    let status = resp.status;
                    let retry_after = resp.headers.get("retry-after").and_then(|v| retry_after(v));
                    let mut text = resp.text().await.unwrap_or_else(|e| e.to_string());
                    scrub(self.key.as_deref(), &mut text);
                    classify_status(&self.provider, status, text, retry_after)
                }
                Err(e) => e,
            };
            let retryable = match &err {
                ModelError::Http { status, body, .. } => retryable_status(*status, body),
                ModelError::Transport { .. } => true,
                ModelError::Timeout { phase, .. } => phase.starts_with("connecting"),
                _ => false,
            };
            if !retryable || attempt >= self.max_retries {
                return Err(err);
            }
            let wait = match &err {
                ModelError::Http {
                    retry_after: Some(s),
                    ..
                } => Duration::from_secs_f64(s.clamp(0.0, MAX_RETRY_AFTER)),
                _ => backoff(self.retry_base_delay, attempt),
            };
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    async fn post_once(
        &self,
        suffix: &str,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<Response, ModelError> {
        let url = format!("{}{suffix}", self.base_url);
        let path = reqwest::Url::parse(&url)
            .map(|u| u.path().to_owned())
            .map_err(|e| {
                ModelError::Config(format!("`base_url` {} is not a URL: {e}", self.base_url))
            })?;
        if let Some(c) = &self.cassette
            && let CassetteMode::Replay(_) = c.mode()
        {
            let ex = c.next("POST", &path, body)?;
            return Ok(Response {
                provider: self.provider.clone(),
                timeout: self.timeout,
                status: ex.status,
                headers: ex.headers,
                body: Body::Replay {
                    text: Some(ex.body),
                    cut: ex.cut,
                },
                text: Utf8Decoder::default(),
                recording: None,
                key: self.key.clone(),
            });
        }
        let bytes = serde_json::to_vec(body)
            .map_err(|e| ModelError::Config(format!("cannot encode the request: {e}")))?;
        let mut rb = self
            .client
            .post(&url)
            .header("content-type", "application/json")
            .body(bytes);
        for (k, v) in headers {
            rb = rb.header(*k, v);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| self.transport_error(&e, &url))?;
        let status = resp.status().as_u16();
        let mut kept = BTreeMap::new();
        for h in KEPT_HEADERS {
            if let Some(v) = resp.headers().get(*h).and_then(|v| v.to_str().ok()) {
                kept.insert((*h).to_owned(), v.to_owned());
            }
        }
        let recording = self.cassette.as_ref().map(|c| {
            (
                c.clone(),
                Exchange {
                    method: "POST".into(),
                    path,
                    request: body.clone(),
                    status,
                    headers: kept.clone(),
                    body: String::new(),
                    cut: false,
                },
            )
        });
        Ok(Response {
            provider: self.provider.clone(),
            timeout: self.timeout,
            status,
            headers: kept,
            body: Body::Live(resp),
            text: Utf8Decoder::default(),
            recording,
            key: self.key.clone(),
        })
    }

    fn transport_error(&self, e: &reqwest::Error, url: &str) -> ModelError {
        transport_error(&self.provider, e, url, (self.connect_timeout, self.timeout))
    }
}

fn transport_error(
    provider: &str,
    e: &reqwest::Error,
    url: &str,
    timeouts: (Duration, Duration),
) -> ModelError {
    let mut message = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        message.push_str(": ");
        message.push_str(&s.to_string());
        src = s.source();
    }
    if e.is_timeout() {
        let (phase, limit) = if e.is_connect() {
            (format!("connecting to {url}"), timeouts.0)
        } else {
            (format!("waiting for {url}"), timeouts.1)
        };
        ModelError::Timeout {
            provider: provider.to_owned(),
            phase,
            seconds: limit.as_secs_f64(),
        }
    } else {
        ModelError::Transport {
            provider: provider.to_owned(),
            message: format!("{url}: {message}"),
        }
    }
}

/// A random wait in `[0, min(cap, base * 2^attempt)]` ("full jitter").
fn backoff(base: Duration, attempt: u32) -> Duration {
    let ceiling = base
        .saturating_mul(2u32.saturating_pow(attempt.min(16)))
        .min(MAX_BACKOFF);
    ceiling.mul_f64(fastrand::f64())
}

/// Seconds from a `Retry-After` value: a number of seconds or an HTTP date.
pub(crate) fn retry_after(v: &str) -> Option<f64> {
    let v = v.trim();
    if let Ok(n) = v.parse::<f64>() {
        return (n.is_finite() && n >= 0.0).then_some(n);
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
    )
}

/// Whether an HTTP error may go away when the same request is sent again: rate limits (429),
/// timeouts (408) and server errors, except a server error that says the request itself is
/// invalid (llama-cpp-python answers 500 to a request field it does not know, e.g.
/// `response_format: json_schema`: "1 validation error: ... ('body', 'response_format', ...)").
pub(crate) fn retryable_status(status: u16, body: &str) -> bool {
    if status == 429 || status == 408 {
        return true;
    }
    if status < 500 {
        return false;
    }
    let lower = body.to_ascii_lowercase();
    ![
        "validation error",
        "('body',",
        "not supported",
        "unsupported",
        "invalid request",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// Turns a non-2xx answer into an error, spotting context-length errors.
pub(crate) fn classify_status(
    provider: &str,
    status: u16,
    body: String,
    retry_after: Option<f64>,
) -> ModelError {
    let lower = body.to_ascii_lowercase();
    if (400..500).contains(&status)
        && [
            "context_length_exceeded",
            "maximum context length",
            "prompt is too long",
            "exceeds the available context size",
            "context window",
        ]
        .iter()
        .any(|p| lower.contains(p))
    {
        return ModelError::ContextLength {
            provider: provider.to_owned(),
            body,
        };
    }
    ModelError::Http {
        provider: provider.to_owned(),
        status,
        body,
        retry_after,
    }
}

enum Body {
    Live(reqwest::Response),
    Replay { text: Option<String>, cut: bool },
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Live(_) => f.write_str("Live"),
            Self::Replay { .. } => f.write_str("Replay"),
        }
    }
}

/// A response whose body is read piece by piece.
#[derive(Debug)]
pub(crate) struct Response {
    provider: String,
    timeout: Duration,
    pub(crate) status: u16,
    pub(crate) headers: BTreeMap<String, String>,
    body: Body,
    /// The body's bytes as text, an incomplete UTF-8 character kept for the next piece.
    text: Utf8Decoder,
    recording: Option<(Arc<Cassette>, Exchange)>,
    key: Option<Arc<ApiKey>>,
}

impl Response {
    /// A 200 response whose body is `text`, read as a live one would be (the fuzz targets).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn of_text(provider: &str, text: String) -> Self {
        Self {
            provider: provider.to_owned(),
            timeout: Duration::from_secs(1),
            status: 200,
            headers: BTreeMap::new(),
            body: Body::Replay {
                text: Some(text),
                cut: false,
            },
            text: Utf8Decoder::default(),
            recording: None,
            key: None,
        }
    }

    /// The next piece of body text; `None` at the end. A connection that breaks gives
    /// [`ModelError::StreamCut`] (or a timeout).
    pub(crate) async fn chunk(&mut self) -> Result<Option<String>, ModelError> {
        let mut next = match &mut self.body {
            Body::Live(r) => match r.chunk().await {
                Ok(Some(b)) => Ok(Some(self.text.decode(&b))),
                Ok(None) => Ok(None),
                Err(e) => Err(if e.is_timeout() {
                    ModelError::Timeout {
                        provider: self.provider.clone(),
                        phase: "reading the reply".into(),
                        seconds: self.timeout.as_secs_f64(),
                    }
                } else {
                    let mut message = e.to_string();
                    let mut src = std::error::Error::source(&e);
                    while let Some(s) = src {
                        message.push_str(": ");
                        message.push_str(&s.to_string());
                        src = s.source();
                    }
                    ModelError::StreamCut {
                        provider: self.provider.clone(),
                        message,
                    }
                }),
            },
            Body::Replay { text, cut } => match text.take() {
                Some(t) => Ok(Some(t)),
                None if *cut => Err(ModelError::StreamCut {
                    provider: self.provider.clone(),
                    message: "the recorded reply was cut".into(),
                }),
                None => Ok(None),
            },
        };
        if let Ok(Some(t)) = &mut next {
            scrub(self.key.as_deref(), t);
        }
        match &next {
            Ok(Some(t)) => {
                if let Some((_, ex)) = &mut self.recording {
                    ex.body.push_str(t);
                }
            }
            Ok(None) => self.finish_recording(false)?,
            Err(_) => self.finish_recording(true)?,
        }
        next
    }

    fn finish_recording(&mut self, cut: bool) -> Result<(), ModelError> {
        if let Some((c, mut ex)) = self.recording.take() {
            ex.cut = cut;
            // A key split across two pieces of the body is whole again here.
            scrub(self.key.as_deref(), &mut ex.body);
            c.record(ex)?;
        }
        Ok(())
    }

    /// Ends reading early (the reply is complete); records what was read.
    pub(crate) fn finish(mut self) -> Result<(), ModelError> {
        self.finish_recording(false)
    }

    /// The whole body.
    pub(crate) async fn text(mut self) -> Result<String, ModelError> {
        let mut out = String::new();
        while let Some(c) = self.chunk().await? {
            out.push_str(&c);
        }
        Ok(out)
    }
}

impl Drop for Response {
    /// A reply left unread (an error event, a dropped call) is still recorded, marked cut, so a
    /// replay sees the same sequence of exchanges.
    fn drop(&mut self) {
        let _ = self.finish_recording(true);
    }
}

/// Parses a JSON body, or says it is malformed.
pub(crate) fn parse_json(provider: &str, text: &str) -> Result<Value, ModelError> {
    serde_json::from_str(text).map_err(|e| ModelError::Malformed {
        provider: provider.to_owned(),
        message: format!("the reply is not JSON: {e}"),
        body: text.to_owned(),
        usage: Usage::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after("2"), Some(2.0));
        assert_eq!(retry_after("soon"), None);
        let later = SystemTime::now() + Duration::from_secs(60);
        let s = retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!((55.0..=60.0).contains(&s), "{s}");
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(0.0));
    }

    #[test]
    fn backoff_is_bounded() {
        for attempt in 0..40 {
            let d = backoff(Duration::from_millis(100), attempt);
            assert!(d <= MAX_BACKOFF);
            assert!(d <= Duration::from_millis(100) * 2u32.saturating_pow(attempt.min(16)));
        }
    }

    #[test]
    fn context_errors_are_recognised() {
        let e = classify_status(
            "openai",
            400,
            r#"{"error":{"code":"context_length_exceeded"}}"#.into(),
            None,
        );
        assert!(matches!(e, ModelError::ContextLength { .. }));
        let e = classify_status(
            "anthropic",
            400,
            "prompt is too long: 250000 tokens".into(),
            None,
        );
        assert!(matches!(e, ModelError::ContextLength { .. }));
        let e = classify_status("openai", 400, "bad".into(), None);
        assert!(matches!(e, ModelError::Http { status: 400, .. }));
    }

    #[test]
    fn errors_about_the_request_itself_are_not_retried() {
        assert!(retryable_status(500, "Internal Server Error"));
        assert!(retryable_status(503, ""));
        assert!(retryable_status(429, "slow down"));
        assert!(!retryable_status(400, "bad"));
        let llama = r#"{"error":{"message":"1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}","type":"internal_server_error"}}"#;
        assert!(!retryable_status(500, llama));
    }
}
