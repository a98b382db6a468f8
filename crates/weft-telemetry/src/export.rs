//! Derived spans sent over OTLP HTTP/protobuf, configured by the standard variables.
//!
//! Nothing is exported unless an endpoint is given (`--otlp`, `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and `OTEL_SDK_DISABLED=true` turns it off whatever
//! else is set. Spans go through a bounded queue to a task of their own: a run never waits for
//! the collector, and a span that finds the queue full is dropped and counted ([`Exporter`]).
//! Metrics go through the SDK's instruments and periodic reader ([`Meters`]), whose requests run
//! on the process's runtime through weft's own `reqwest` client.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use tokio::sync::mpsc;

use crate::derive::{Attr, Kind, Span};

/// How many spans wait for the exporter at most (`OTEL_BSP_MAX_QUEUE_SIZE`).
const QUEUE: usize = 2048;
/// How many spans one request carries at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
const BATCH: usize = 512;
/// How long a span waits for more to fill its request (`OTEL_BSP_SCHEDULE_DELAY`, ms).
const DELAY_MS: u64 = 1000;

/// A positive number from `var`, or `default` (a value that is not one is refused).
fn number(var: &str, default: u64) -> Result<u64, ConfigError> {
    match env(var) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(ConfigError(format!(
                "{var}={v}: not a positive whole number; unset it for the default ({default})"
            ))),
        },
    }
}

/// A mistake in the exporter's settings, naming the variable or flag.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether `OTEL_SDK_DISABLED` turns telemetry off.
pub fn disabled() -> bool {
    env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether message contents go on spans
/// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
pub fn capture_content() -> bool {
    env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The traces endpoint: `explicit` (a base URL, or one ending in `/v1/traces`), else the
/// standard variables; `None` when nothing is configured.
pub fn endpoint(explicit: Option<&str>) -> Option<String> {
    if let Some(e) = explicit.filter(|e| !e.trim().is_empty()) {
        return Some(traces_url(e));
    }
    if let Some(e) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Some(e);
    }
    env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| traces_url(&e))
}

fn traces_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

fn check_protocol() -> Result<(), ConfigError> {
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(p) = env(var) {
            if p.trim() == "http/protobuf" {
                return Ok(());
            }
            return Err(ConfigError(format!(
                "{var}={p}: weft exports over OTLP HTTP/protobuf only; set it to http/protobuf or unset it"
            )));
        }
    }
    Ok(())
}

/// The metrics endpoint: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (the whole URL), else
/// `/v1/metrics` under `OTEL_EXPORTER_OTLP_ENDPOINT`; `None` when neither is set or
/// `OTEL_METRICS_EXPORTER=none`.
pub fn metrics_endpoint() -> Option<String> {
    if env("OTEL_METRICS_EXPORTER").is_some_and(|v| v.trim() == "none") {
        return None;
    }
    if let Some(e) = env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
        return Some(e);
    }
    env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| {
        let base = e.trim().trim_end_matches('/');
        format!("{base}/v1/metrics")
    })
}

/// Whether `OTEL_SEMCONV_STABILITY_OPT_IN` asks for the GenAI conventions' latest experimental
/// names (`gen_ai_latest_experimental`, in a comma-separated list).
pub fn latest_conventions() -> bool {
    env("OTEL_SEMCONV_STABILITY_OPT_IN").is_some_and(|v| {
        v.split(',')
            .any(|x| x.trim() == "gen_ai_latest_experimental")
    })
}

/// What an exporter did, for the report at its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans dropped because the queue was full.
    pub dropped: u64,
    /// Spans lost because a request failed (the collector was down or refused them).
    pub failed: u64,
}

#[derive(Debug, Default)]
struct Shared {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
}

/// A running exporter: spans in, OTLP requests out. One serves the whole process (every session
/// it drives).
#[derive(Debug)]
pub struct Exporter {
    tx: mpsc::Sender<Span>,
    shared: Arc<Shared>,
    /// Told to send what is queued and stop.
    stop: Arc<tokio::sync::Notify>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    url: String,
}

impl Exporter {
    /// An exporter to the configured endpoint (see [`endpoint`]), or `None` when none is
    /// configured or `OTEL_SDK_DISABLED=true`. Must be called inside a Tokio runtime.
    pub fn from_env(explicit: Option<&str>) -> Result<Option<Self>, ConfigError> {
        if disabled() {
            return Ok(None);
        }
        let Some(url) = endpoint(explicit) else {
            return Ok(None);
        };
        check_protocol()?;
        Self::start(&url).map(Some)
    }

    /// An exporter to `url` (the whole traces URL).
    pub fn start(url: &str) -> Result<Self, ConfigError> {
        let queue =
            usize::try_from(number("OTEL_BSP_MAX_QUEUE_SIZE", QUEUE as u64)?).unwrap_or(QUEUE);
        Self::start_queued(url, queue)
    }

    /// [`Exporter::start`] with a queue of `queue` spans.
    fn start_queued(url: &str, queue: usize) -> Result<Self, ConfigError> {
        let _ = url
            .parse::<reqwest::Url>()
            .map_err(|e| ConfigError(format!("OTLP endpoint `{url}` is not a URL: {e}")))?;
        // One TLS stack for the whole process: rustls with ring, as weft's other clients.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let timeout = number(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?,
        )?;
        let max_batch = usize::try_from(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", BATCH as u64)?)
            .unwrap_or(BATCH);
        let delay = number("OTEL_BSP_SCHEDULE_DELAY", DELAY_MS)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(timeout))
            .build()
            .map_err(|e| ConfigError(format!("cannot build the OTLP client: {e}")))?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(Duration::from_millis(timeout))
            .build()
            .map_err(|e| ConfigError(format!("OTLP exporter to {url}: {e}")))?;
        let service = env("OTEL_SERVICE_NAME").unwrap_or_else(|| "weft".to_owned());
        exporter.set_resource(&Resource::builder().with_service_name(service).build());
        let (tx, mut rx) = mpsc::channel::<Span>(queue);
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut batch: Vec<Span> = Vec::new();
            let mut stopping = false;
            loop {
                let more = if stopping {
                    rx.try_recv().ok()
                } else if batch.is_empty() {
                    tokio::select! {
                        s = rx.recv() => s,
                        () = stopped.notified() => { stopping = true; continue; }
                    }
                } else {
                    tokio::select! {
                        s = tokio::time::timeout(Duration::from_millis(delay), rx.recv()) => match s {
                            Ok(s) => s,
                            Err(_) => {
                                send(&exporter, &sh, std::mem::take(&mut batch)).await;
                                continue;
                            }
                        },
                        () = stopped.notified() => { stopping = true; continue; }
                    }
                };
                match more {
                    Some(s) => {
                        batch.push(s);
                        if batch.len() >= max_batch {
                            send(&exporter, &sh, std::mem::take(&mut batch)).await;
                        }
                    }
                    None => {
                        if !batch.is_empty() {
                            send(&exporter, &sh, batch).await;
                        }
                        return;
                    }
                }
            }
        });
        Ok(Self {
            tx,
            shared,
            stop,
            task: std::sync::Mutex::new(Some(task)),
            url: url.to_owned(),
        })
    }

    /// The traces URL spans go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Queues spans without waiting; a span that finds the queue full is dropped and counted.
    pub fn send(&self, spans: Vec<Span>) {
        for s in spans {
            if self.tx.try_send(s).is_err() {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Queues spans, waiting for room (for `weft sessions trace`, where nothing else waits).
    pub async fn send_all(&self, spans: Vec<Span>) {
        for s in spans {
            if self.tx.send(s).await.is_err() {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// What was done so far.
    pub fn counts(&self) -> Counts {
        Counts {
            exported: self.shared.exported.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            failed: self.shared.failed.load(Ordering::Relaxed),
        }
    }

    /// The last error of a request, if one failed.
    pub fn last_error(&self) -> Option<String> {
        self.shared.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Sends what is queued, waiting at most `grace`, and stops (spans sent later are dropped
    /// and counted); returns the counts and the last error.
    pub async fn finish(&self, grace: Duration) -> (Counts, Option<String>) {
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            self.stop.notify_one();
            let abort = task.abort_handle();
            if tokio::time::timeout(grace, task).await.is_err() {
                abort.abort();
            }
        }
        (self.counts(), self.last_error())
    }
}

/// The OpenTelemetry SDK's HTTP client interface over weft's `reqwest` client, its requests run
/// on the process's Tokio runtime: the SDK's metric reader exports from a thread of its own,
/// where `reqwest` cannot run by itself.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let client = self.client.clone();
        self.runtime
            .spawn(
                async move { opentelemetry_http::HttpClient::send_bytes(&client, request).await },
            )
            .await
            .map_err(|e| -> opentelemetry_http::HttpError { Box::new(e) })?
    }
}

/// The metrics sent over OTLP HTTP/protobuf: the SDK's instruments, with the conventions'
/// bucket boundaries, read and sent every `OTEL_METRIC_EXPORT_INTERVAL` ms (60,000) and when
/// the process ends.
pub struct Meters {
    provider: opentelemetry_sdk::metrics::SdkMeterProvider,
    histograms: Vec<(
        crate::metrics::Instrument,
        opentelemetry::metrics::Histogram<f64>,
    )>,
    counters: Vec<(
        crate::metrics::Instrument,
        opentelemetry::metrics::Counter<f64>,
    )>,
    gauges: Vec<(
        crate::metrics::Instrument,
        opentelemetry::metrics::Gauge<f64>,
    )>,
    url: String,
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meters").field("url", &self.url).finish()
    }
}

impl Meters {
    /// Meters sending to the configured endpoint (see [`metrics_endpoint`]), or `None` when
    /// none is configured or `OTEL_SDK_DISABLED=true`. Must be called inside a Tokio runtime.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        if disabled() {
            return Ok(None);
        }
        let Some(url) = metrics_endpoint() else {
            return Ok(None);
        };
        check_protocol()?;
        Self::start(&url).map(Some)
    }

    /// Meters sending to `url` (the whole metrics URL).
    pub fn start(url: &str) -> Result<Self, ConfigError> {
        use opentelemetry::metrics::MeterProvider as _;
        use opentelemetry_otlp::WithHttpConfig as _;

        use crate::metrics::{Instrument, Shape};
        let _ = url
            .parse::<reqwest::Url>()
            .map_err(|e| ConfigError(format!("OTLP metrics endpoint `{url}` is not a URL: {e}")))?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| ConfigError(format!("the metrics exporter needs a Tokio runtime: {e}")))?;
        let timeout = number(
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?,
        )?;
        let interval = number("OTEL_METRIC_EXPORT_INTERVAL", 60_000)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(timeout))
            .build()
            .map_err(|e| ConfigError(format!("cannot build the OTLP client: {e}")))?;
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(OnRuntime { client, runtime })
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(Duration::from_millis(timeout))
            .build()
            .map_err(|e| ConfigError(format!("OTLP metrics exporter to {url}: {e}")))?;
        let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter)
            .with_interval(Duration::from_millis(interval))
            .build();
        let service = env("OTEL_SERVICE_NAME").unwrap_or_else(|| "weft".to_owned());
        let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        let meter = provider.meter_with_scope(
            InstrumentationScope::builder("weft")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        let mut histograms = Vec::new();
        let mut counters = Vec::new();
        let mut gauges = Vec::new();
        for i in Instrument::ALL {
            match i.shape() {
                Shape::Histogram(bounds) => histograms.push((
                    i,
                    meter
                        .f64_histogram(i.name())
                        .with_unit(i.unit())
                        .with_description(i.description())
                        .with_boundaries(bounds.to_vec())
                        .build(),
                )),
                Shape::Counter => counters.push((
                    i,
                    meter
                        .f64_counter(i.name())
                        .with_unit(i.unit())
                        .with_description(i.description())
                        .build(),
                )),
                Shape::Gauge => gauges.push((
                    i,
                    meter
                        .f64_gauge(i.name())
                        .with_unit(i.unit())
                        .with_description(i.description())
                        .build(),
                )),
            }
        }
        Ok(Self {
            provider,
            histograms,
            counters,
            gauges,
            url: url.to_owned(),
        })
    }

    /// The metrics URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Records points (in memory: the reader sends them later, never on the run's path).
    pub fn record(&self, points: &[crate::metrics::Point]) {
        for p in points {
            let attrs: Vec<KeyValue> = p
                .attributes
                .iter()
                .map(|(k, v)| KeyValue::new(*k, v.clone()))
                .collect();
            if let Some((_, h)) = self.histograms.iter().find(|(i, _)| *i == p.instrument) {
                h.record(p.value, &attrs);
            } else if let Some((_, c)) = self.counters.iter().find(|(i, _)| *i == p.instrument) {
                c.add(p.value, &attrs);
            } else if let Some((_, g)) = self.gauges.iter().find(|(i, _)| *i == p.instrument) {
                g.record(p.value, &attrs);
            }
        }
    }

    /// Sends what was recorded and stops; the error when the last send failed.
    pub async fn finish(&self) -> Option<String> {
        let provider = self.provider.clone();
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        }
    }
}

async fn send(exporter: &opentelemetry_otlp::SpanExporter, sh: &Shared, batch: Vec<Span>) {
    let n = batch.len() as u64;
    let data = batch.into_iter().map(span_data).collect();
    match exporter.export(data).await {
        Ok(()) => {
            sh.exported.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => {
            sh.failed.fetch_add(n, Ordering::Relaxed);
            if let Ok(mut last) = sh.last_error.lock() {
                *last = Some(e.to_string());
            }
        }
    }
}

fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn value(a: Attr) -> Value {
    match a {
        Attr::Str(s) => Value::from(s),
        Attr::Int(n) => Value::I64(n),
        Attr::F64(f) => Value::F64(f),
        Attr::Bool(b) => Value::Bool(b),
        Attr::StrList(v) => Value::Array(opentelemetry::Array::String(
            v.into_iter().map(StringValue::from).collect(),
        )),
    }
}

/// A derived span as the OpenTelemetry SDK's exporters take it.
pub fn span_data(s: Span) -> SpanData {
    let mut attributes: Vec<KeyValue> = s
        .attributes
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, value(v)))
        .collect();
    let status = match &s.error {
        Some(kind) => {
            attributes.push(KeyValue::new("error.type", kind.clone()));
            Status::error(kind.clone())
        }
        None => Status::Unset,
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(s.trace_id),
            SpanId::from_bytes(s.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: s.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: s.parent_remote,
        span_kind: match s.kind {
            Kind::Internal => SpanKind::Internal,
            Kind::Client => SpanKind::Client,
        },
        name: Cow::Owned(s.name),
        start_time: time(s.start_ms),
        end_time: time(s.end_ms),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: InstrumentationScope::builder("weft")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

/// A span as one JSON object (`weft sessions trace --json`): ids in hex, as W3C writes them.
pub fn span_json(s: &Span) -> serde_json::Value {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let attrs: serde_json::Map<String, serde_json::Value> = s
        .attributes
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Attr::Str(s) => serde_json::json!(s),
                Attr::Int(n) => serde_json::json!(n),
                Attr::F64(f) => serde_json::json!(f),
                Attr::Bool(b) => serde_json::json!(b),
                Attr::StrList(l) => serde_json::json!(l),
            };
            ((*k).to_owned(), v)
        })
        .collect();
    serde_json::json!({
        "trace_id": hex(&s.trace_id),
        "span_id": hex(&s.span_id),
        "parent_span_id": s.parent.map(|p| hex(&p)),
        "name": s.name,
        "kind": match s.kind { Kind::Internal => "internal", Kind::Client => "client" },
        "start_ms": s.start_ms,
        "end_ms": s.end_ms,
        "error_type": s.error,
        "attributes": attrs,
    })
}

/// A W3C `traceparent` header's trace id and parent span id (version 00, ids not all zero).
pub fn parse_traceparent(h: &str) -> Option<([u8; 16], [u8; 8])> {
    let parts: Vec<&str> = h.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return None;
    };
    if version.len() != 2 || *version == "ff" || flags.len() != 2 {
        return None;
    }
    let mut t = [0u8; 16];
    let mut p = [0u8; 8];
    hex_into(trace, &mut t)?;
    hex_into(span, &mut p)?;
    (t != [0; 16] && p != [0; 8]).then_some((t, p))
}

fn hex_into(s: &str, out: &mut [u8]) -> Option<()> {
    if s.len() != out.len() * 2 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_gets_the_traces_path_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(
            traces_url("http://h:4318/v1/traces"),
            "http://h:4318/v1/traces"
        );
    }

    #[test]
    fn a_traceparent_is_read_and_a_bad_one_refused() {
        let (t, p) = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .unwrap_or_default();
        assert_eq!(t[0], 0x4b);
        assert_eq!(p[7], 0xb7);
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(parse_traceparent("00-4bf9-00f067aa0ba902b7-01").is_none());
        assert!(
            parse_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_none()
        );
    }

    fn span(n: u8) -> Span {
        Span {
            trace_id: [1; 16],
            span_id: [n.max(1); 8],
            parent: None,
            parent_remote: false,
            name: "x".into(),
            kind: Kind::Internal,
            start_ms: 1,
            end_ms: 2,
            attributes: vec![],
            error: None,
            first_seq: 1,
            last_seq: 1,
        }
    }

    /// Sending never waits: spans that find the queue full are dropped and counted, and every
    /// span is accounted for (sent, dropped, or lost to the collector that is down).
    #[tokio::test]
    async fn a_full_queue_drops_spans_and_counts_them() {
        let ex = Exporter::start_queued("http://127.0.0.1:9/v1/traces", 4)
            .unwrap_or_else(|e| panic!("{e}"));
        // On this thread the exporter's task cannot run between the sends: the queue fills.
        ex.send((0..100).map(span).collect());
        assert_eq!(ex.counts().dropped, 96);
        let (counts, _) = ex.finish(Duration::from_secs(20)).await;
        assert_eq!(counts.exported, 0);
        assert_eq!(counts.dropped + counts.failed, 100);
    }

    #[tokio::test]
    async fn a_collector_that_is_down_costs_the_spans_and_says_so_without_failing() {
        // Nothing listens on port 9 of loopback (discard, never served here).
        let ex = Exporter::start("http://127.0.0.1:9/v1/traces").unwrap_or_else(|e| panic!("{e}"));
        let spans = crate::Deriver::derive(
            "s",
            crate::Options::default(),
            &[serde_json::from_str(
                r#"{"seq":1,"ts":1,"v":1,"type":"session_started","session_id":"s","agent":"a"}"#,
            )
            .unwrap_or_else(|e| panic!("{e}"))],
        );
        assert!(spans.is_empty());
        let span = Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: None,
            parent_remote: false,
            name: "x".into(),
            kind: Kind::Internal,
            start_ms: 1,
            end_ms: 2,
            attributes: vec![],
            error: None,
            first_seq: 1,
            last_seq: 1,
        };
        ex.send(vec![span]);
        let (counts, err) = ex.finish(Duration::from_secs(20)).await;
        assert_eq!(counts.exported, 0);
        assert_eq!(counts.failed, 1);
        assert!(err.is_some());
    }
}
