//! Derived spans sent over OTLP HTTP/protobuf, configured by the standard variables.
//!
//! Nothing is exported unless an endpoint is given (`--otlp`, `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and `OTEL_SDK_DISABLED=true` turns it off whatever
//! else is set. Spans go through a bounded queue to a task of their own: a run never waits for
//! the collector, and a span that finds the queue full is dropped and counted ([`Exporter`]).
//! Metrics go through the SDK's instruments and periodic reader ([`Meters`]), whose requests run
//! on the process's runtime through weft's own `reqwest` client.
//!
//! When the process ends, what is queued is sent within `WEFT_OTLP_EXIT_TIMEOUT` ms (1,000), spans
//! and metrics together; spans not acknowledged by then are counted as lost. A session's spans
//! may carry a mark ([`Exporter::send_of`]): once every span of that session sent before it was
//! acknowledged, the mark is handed to the [`Ack`] set with [`Exporter::on_ack`] (which keeps it
//! with the session, so that the next process that drives it sends what was never acknowledged).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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
/// A request's time limit (`OTEL_EXPORTER_OTLP_TIMEOUT`, ms).
const TIMEOUT_MS: u64 = 10_000;
/// How long the end of a process waits for the collector (`WEFT_OTLP_EXIT_TIMEOUT`, ms).
const EXIT_MS: u64 = 1000;
/// The longest the metrics SDK waits for its last export, whatever weft asks.
const SDK_SHUTDOWN: Duration = Duration::from_secs(5);

/// How long the end of a process waits for the collector to take what is left, spans and
/// metrics together (`WEFT_OTLP_EXIT_TIMEOUT`, ms; 1,000).
pub fn exit_timeout() -> Result<Duration, ConfigError> {
    number("WEFT_OTLP_EXIT_TIMEOUT", EXIT_MS).map(Duration::from_millis)
}

/// "1000 ms (WEFT_OTLP_EXIT_TIMEOUT)": a wait as the reports name it.
fn within(d: Duration) -> String {
    format!(
        "the collector did not answer within {} ms (WEFT_OTLP_EXIT_TIMEOUT)",
        d.as_millis()
    )
}

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

/// Where an exporter sends: the whole URL, and the flag or variable that gave it (named in
/// every message about the endpoint).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The whole URL requests go to.
    pub url: String,
    /// `--otlp` or the variable that set it.
    pub source: &'static str,
}

impl Endpoint {
    /// An endpoint from `given` (as `source` gave it) whose URL is `url`: refused unless it is
    /// an `http` or `https` URL with a host.
    fn checked(source: &'static str, given: &str, url: String) -> Result<Self, ConfigError> {
        let given = given.trim();
        let parsed = url.trim().parse::<reqwest::Url>().map_err(|e| {
            ConfigError(format!(
                "{source}={given}: not a URL ({e}); give the collector's http:// or https:// URL, \
                 such as http://127.0.0.1:4318"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ConfigError(format!(
                "{source}={given}: the scheme `{}` is not one OTLP over HTTP uses; give the \
                 collector's http:// or https:// URL, such as http://127.0.0.1:4318",
                parsed.scheme()
            )));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(ConfigError(format!(
                "{source}={given}: no host; give the collector's http:// or https:// URL, \
                 such as http://127.0.0.1:4318"
            )));
        }
        Ok(Self {
            url: url.trim().to_owned(),
            source,
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.url, self.source)
    }
}

/// The traces endpoint: `explicit` (`--otlp`: a base URL, or one ending in `/v1/traces`), else
/// the standard variables; `None` when nothing is configured, an error naming the flag or
/// variable when it is not an `http` or `https` URL.
pub fn endpoint(explicit: Option<&str>) -> Result<Option<Endpoint>, ConfigError> {
    if let Some(e) = explicit.filter(|e| !e.trim().is_empty()) {
        return Endpoint::checked("--otlp", e, traces_url(e)).map(Some);
    }
    if let Some(e) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Endpoint::checked("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &e, e.clone()).map(Some);
    }
    env("OTEL_EXPORTER_OTLP_ENDPOINT")
        .map(|e| Endpoint::checked("OTEL_EXPORTER_OTLP_ENDPOINT", &e, traces_url(&e)))
        .transpose()
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
/// `OTEL_METRICS_EXPORTER=none`, an error naming the variable when it is not an `http` or
/// `https` URL.
pub fn metrics_endpoint() -> Result<Option<Endpoint>, ConfigError> {
    if env("OTEL_METRICS_EXPORTER").is_some_and(|v| v.trim() == "none") {
        return Ok(None);
    }
    if let Some(e) = env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
        return Endpoint::checked("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &e, e.clone()).map(Some);
    }
    env("OTEL_EXPORTER_OTLP_ENDPOINT")
        .map(|e| {
            let base = e.trim().trim_end_matches('/');
            Endpoint::checked(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &e,
                format!("{base}/v1/metrics"),
            )
        })
        .transpose()
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
    /// Spans lost because a request failed (the collector was down or refused them) or was not
    /// answered before the process ended.
    pub failed: u64,
}

/// Where acknowledged marks go: (session, sequence number) pairs, each meaning that every span
/// of that session sent with a mark up to that number was acknowledged by the collector.
pub type Ack = Arc<dyn Fn(Vec<(String, u64)>) + Send + Sync>;

/// What the exporter's queue holds: a span (of a session, when its sender named one), or a
/// session's mark following its spans.
enum Item {
    Span(Span, Option<Arc<str>>),
    Mark(Arc<str>, u64),
}

#[derive(Default)]
struct Shared {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    /// Spans that went into the queue.
    queued: AtomicU64,
    last_error: Mutex<Option<String>>,
    ack: OnceLock<Ack>,
    /// Sessions with a span lost in this process: their marks stay where they are.
    spoiled: Mutex<HashSet<Arc<str>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    fn spoil(&self, session: Arc<str>) {
        if let Ok(mut s) = self.spoiled.lock() {
            s.insert(session);
        }
    }
}

/// The spans of one request, the sessions they are of, and the marks that follow them.
#[derive(Default)]
struct Batch {
    spans: Vec<Span>,
    of: HashSet<Arc<str>>,
    marks: Vec<(Arc<str>, u64)>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.spans.is_empty() && self.marks.is_empty()
    }
}

/// A running exporter: spans in, OTLP requests out. One serves the whole process (every session
/// it drives).
#[derive(Debug)]
pub struct Exporter {
    tx: mpsc::Sender<Item>,
    shared: Arc<Shared>,
    /// Told to send what is queued and stop.
    stop: Arc<tokio::sync::Notify>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    endpoint: Endpoint,
    exit: Duration,
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Span(s, _) => write!(f, "Span({})", s.name),
            Self::Mark(id, seq) => write!(f, "Mark({id}, {seq})"),
        }
    }
}

impl Exporter {
    /// An exporter to the configured endpoint (see [`endpoint`]), or `None` when none is
    /// configured or `OTEL_SDK_DISABLED=true`. Must be called inside a Tokio runtime.
    pub fn from_env(explicit: Option<&str>) -> Result<Option<Self>, ConfigError> {
        if disabled() {
            return Ok(None);
        }
        let Some(endpoint) = endpoint(explicit)? else {
            return Ok(None);
        };
        check_protocol()?;
        Self::start(endpoint).map(Some)
    }

    /// An exporter to `endpoint`.
    pub fn start(endpoint: Endpoint) -> Result<Self, ConfigError> {
        let queue =
            usize::try_from(number("OTEL_BSP_MAX_QUEUE_SIZE", QUEUE as u64)?).unwrap_or(QUEUE);
        Self::start_queued(endpoint, queue)
    }

    /// [`Exporter::start`] with a queue of `queue` spans.
    fn start_queued(endpoint: Endpoint, queue: usize) -> Result<Self, ConfigError> {
        let url = endpoint.url.as_str();
        // One TLS stack for the whole process: rustls with ring, as weft's other clients.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let timeout = number(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            number("OTEL_EXPORTER_OTLP_TIMEOUT", TIMEOUT_MS)?,
        )?;
        let exit = exit_timeout()?;
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
            .map_err(|e| ConfigError(format!("OTLP exporter to {endpoint}: {e}")))?;
        let service = env("OTEL_SERVICE_NAME").unwrap_or_else(|| "weft".to_owned());
        exporter.set_resource(&Resource::builder().with_service_name(service).build());
        let (tx, mut rx) = mpsc::channel::<Item>(queue);
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut batch = Batch::default();
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
                    Some(Item::Span(s, of)) => {
                        batch.spans.push(s);
                        if let Some(of) = of {
                            batch.of.insert(of);
                        }
                        if batch.spans.len() >= max_batch {
                            send(&exporter, &sh, std::mem::take(&mut batch)).await;
                        }
                    }
                    Some(Item::Mark(of, seq)) => batch.marks.push((of, seq)),
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
            task: Mutex::new(Some(task)),
            endpoint,
            exit,
        })
    }

    /// The traces URL spans go to.
    pub fn url(&self) -> &str {
        &self.endpoint.url
    }

    /// The endpoint, with the flag or variable that gave it.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// How long the end of the process waits for the collector (`WEFT_OTLP_EXIT_TIMEOUT`).
    pub fn exit_timeout(&self) -> Duration {
        self.exit
    }

    /// Hands the marks the collector acknowledged to `ack` from now on (the first one set
    /// stays).
    pub fn on_ack(&self, ack: Ack) {
        let _ = self.shared.ack.set(ack);
    }

    /// Queues spans without waiting; a span that finds the queue full is dropped and counted.
    pub fn send(&self, spans: Vec<Span>) {
        for s in spans {
            self.queue(Item::Span(s, None));
        }
    }

    /// Queues the spans of session `session` closed by its events up to `through`, then its
    /// mark `through`, without waiting; the mark is acknowledged once these spans and every
    /// span of the session queued before them were. A span dropped or lost keeps the session's
    /// mark where it is for the rest of the process.
    pub fn send_of(&self, session: &str, through: u64, spans: Vec<Span>) {
        let of: Arc<str> = Arc::from(session);
        let mut whole = true;
        for s in spans {
            whole &= self.queue(Item::Span(s, Some(of.clone())));
        }
        if whole {
            let _ = self.tx.try_send(Item::Mark(of, through));
        } else {
            self.shared.spoil(of);
        }
    }

    /// Whether a span of session `session` was dropped or lost in this process (its mark
    /// stays where it was).
    pub fn lost_some(&self, session: &str) -> bool {
        self.shared
            .spoiled
            .lock()
            .is_ok_and(|s| s.contains(session))
    }

    /// Queues one item without waiting; false when it was a span that found the queue full.
    fn queue(&self, item: Item) -> bool {
        let span = matches!(item, Item::Span(..));
        match self.tx.try_send(item) {
            Ok(()) => {
                if span {
                    self.shared.queued.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            Err(_) => {
                if span {
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                }
                !span
            }
        }
    }

    /// Queues spans, waiting for room (for `weft sessions trace`, where nothing else waits).
    pub async fn send_all(&self, spans: Vec<Span>) {
        for s in spans {
            if self.tx.send(Item::Span(s, None)).await.is_err() {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                self.shared.queued.fetch_add(1, Ordering::Relaxed);
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

    /// Sends what is queued, waiting at most `grace`, and stops; returns the counts and the
    /// last error. Spans the collector had not acknowledged by then are counted as lost, the
    /// wait named as the error.
    pub async fn finish(&self, grace: Duration) -> (Counts, Option<String>) {
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            self.stop.notify_one();
            let abort = task.abort_handle();
            if tokio::time::timeout(grace, task).await.is_err() {
                abort.abort();
                let sh = &self.shared;
                let done = sh.exported.load(Ordering::Relaxed) + sh.failed.load(Ordering::Relaxed);
                let unanswered = sh.queued.load(Ordering::Relaxed).saturating_sub(done);
                if unanswered > 0 {
                    sh.failed.fetch_add(unanswered, Ordering::Relaxed);
                    if let Ok(mut last) = sh.last_error.lock() {
                        *last = Some(within(grace));
                    }
                }
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
    endpoint: Endpoint,
    exit: Duration,
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meters")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl Meters {
    /// Meters sending to the configured endpoint (see [`metrics_endpoint`]), or `None` when
    /// none is configured or `OTEL_SDK_DISABLED=true`. Must be called inside a Tokio runtime.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        if disabled() {
            return Ok(None);
        }
        let Some(endpoint) = metrics_endpoint()? else {
            return Ok(None);
        };
        check_protocol()?;
        Self::start(endpoint).map(Some)
    }

    /// Meters sending to `endpoint`.
    pub fn start(endpoint: Endpoint) -> Result<Self, ConfigError> {
        use opentelemetry::metrics::MeterProvider as _;
        use opentelemetry_otlp::WithHttpConfig as _;

        use crate::metrics::{Instrument, Shape};
        let url = endpoint.url.as_str();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| ConfigError(format!("the metrics exporter needs a Tokio runtime: {e}")))?;
        let timeout = number(
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            number("OTEL_EXPORTER_OTLP_TIMEOUT", TIMEOUT_MS)?,
        )?;
        let exit = exit_timeout()?;
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
            .map_err(|e| ConfigError(format!("OTLP metrics exporter to {endpoint}: {e}")))?;
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
            endpoint,
            exit,
        })
    }

    /// The metrics URL.
    pub fn url(&self) -> &str {
        &self.endpoint.url
    }

    /// The endpoint, with the variable that gave it.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
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

    /// Sends what was recorded and stops, waiting at most `WEFT_OTLP_EXIT_TIMEOUT` (and never
    /// more than the SDK's own 5 s); the error when the last send failed or was not answered.
    pub async fn finish(&self) -> Option<String> {
        let provider = self.provider.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own, not the runtime's blocking pool: one left waiting for a
        // collector that does not answer must not hold the process's end.
        let spawned = std::thread::Builder::new()
            .name("weft-metrics-end".into())
            .spawn(move || {
                let _ = tx.send(provider.shutdown());
            });
        if let Err(e) = spawned {
            return Some(format!("cannot send the last metrics: {e}"));
        }
        match tokio::time::timeout(self.exit, rx).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(opentelemetry_sdk::error::OTelSdkError::Timeout(_)))) => {
                Some(within(self.exit.min(SDK_SHUTDOWN)))
            }
            Ok(Ok(Err(e))) => Some(e.to_string()),
            Ok(Err(_)) => Some("the metrics exporter stopped".to_owned()),
            Err(_) => Some(within(self.exit)),
        }
    }
}

/// Sends a batch's spans; once the collector acknowledged them, hands over the marks of the
/// sessions that lost no span in this process.
async fn send(exporter: &opentelemetry_otlp::SpanExporter, sh: &Shared, batch: Batch) {
    let Batch { spans, of, marks } = batch;
    let n = spans.len() as u64;
    if n > 0 {
        let data = spans.into_iter().map(span_data).collect();
        if let Err(e) = exporter.export(data).await {
            sh.failed.fetch_add(n, Ordering::Relaxed);
            if let Ok(mut last) = sh.last_error.lock() {
                *last = Some(e.to_string());
            }
            for s in of {
                sh.spoil(s);
            }
            return;
        }
        sh.exported.fetch_add(n, Ordering::Relaxed);
    }
    if marks.is_empty() {
        return;
    }
    let Some(ack) = sh.ack.get() else {
        return;
    };
    let acked: Vec<(String, u64)> = match sh.spoiled.lock() {
        Ok(spoiled) => marks
            .into_iter()
            .filter(|(s, _)| !spoiled.contains(s))
            .map(|(s, seq)| (s.to_string(), seq))
            .collect(),
        Err(_) => return,
    };
    if !acked.is_empty() {
        ack(acked);
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

    fn at(url: &str) -> Endpoint {
        Endpoint {
            url: url.to_owned(),
            source: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        }
    }

    #[test]
    fn an_endpoint_that_is_not_http_is_refused_naming_its_variable() {
        let var = "OTEL_EXPORTER_OTLP_ENDPOINT";
        let e = Endpoint::checked(
            var,
            "ftp://127.0.0.1:4318",
            traces_url("ftp://127.0.0.1:4318"),
        )
        .map(|_| ())
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT=ftp://127.0.0.1:4318:"),
            "{e}"
        );
        assert!(e.contains("scheme `ftp`") && e.contains("http://"), "{e}");
        // No scheme at all reads as a scheme `localhost`.
        let e = Endpoint::checked("--otlp", "localhost:4318", traces_url("localhost:4318"))
            .map(|_| ())
            .unwrap_err()
            .0;
        assert!(e.starts_with("--otlp=localhost:4318:"), "{e}");
        let e = Endpoint::checked(var, "not a url", traces_url("not a url"))
            .map(|_| ())
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT=not a url: not a URL"),
            "{e}"
        );
        let ok = Endpoint::checked(var, "https://h:4318/", traces_url("https://h:4318/"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.url, "https://h:4318/v1/traces");
        assert_eq!(
            ok.to_string(),
            "https://h:4318/v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT)"
        );
    }

    /// A collector on loopback that accepts connections and never answers; its address.
    async fn silent_collector() -> (String, tokio::task::JoinHandle<()>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((c, _)) = l.accept().await {
                held.push(c);
            }
        });
        (format!("http://{addr}/v1/traces"), task)
    }

    /// A collector on loopback that answers every request with `status` and an empty body.
    async fn answering_collector(status: u16) -> (String, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let task = tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = c.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_lowercase();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let len = text[..end]
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() < end + 4 + len {
                            continue;
                        }
                        buf.drain(..end + 4 + len);
                        let reply = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
                        );
                        if c.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}/v1/traces"), task)
    }

    /// A collector that accepts and never answers costs the end of the process no more than
    /// its grace, and the spans it never acknowledged are counted as lost, the wait named.
    #[tokio::test]
    async fn a_collector_that_never_answers_costs_the_grace_and_its_spans_are_reported_lost() {
        let (url, collector) = silent_collector().await;
        let ex = Exporter::start(at(&url)).unwrap_or_else(|e| panic!("{e}"));
        ex.send((1..=7).map(span).collect());
        let start = std::time::Instant::now();
        let (counts, err) = ex.finish(Duration::from_millis(300)).await;
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(counts.exported, 0);
        assert_eq!(counts.failed, 7);
        assert_eq!(
            err.as_deref(),
            Some("the collector did not answer within 300 ms (WEFT_OTLP_EXIT_TIMEOUT)")
        );
        collector.abort();
    }

    /// A session's mark is acknowledged once its spans were, and never after one of them was
    /// lost (the next process sends them again from the mark before).
    #[tokio::test]
    async fn a_mark_is_acknowledged_after_its_spans_and_not_after_a_lost_one() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let ack = {
            let got = got.clone();
            Arc::new(move |m: Vec<(String, u64)>| {
                if let Ok(mut g) = got.lock() {
                    g.extend(m);
                }
            }) as Ack
        };
        let (url, ok) = answering_collector(200).await;
        let ex = Exporter::start(at(&url)).unwrap_or_else(|e| panic!("{e}"));
        ex.on_ack(ack.clone());
        ex.send_of("a", 3, vec![span(1), span(2)]);
        ex.send_of("b", 9, vec![span(3)]);
        ex.send_of("a", 5, vec![span(4)]);
        let (counts, err) = ex.finish(Duration::from_secs(20)).await;
        assert_eq!((counts.exported, counts.failed), (4, 0), "{err:?}");
        let marks = got.lock().map(|g| g.clone()).unwrap_or_default();
        assert_eq!(
            marks,
            vec![("a".into(), 3), ("b".into(), 9), ("a".into(), 5)]
        );
        ok.abort();

        let got_bad = Arc::new(Mutex::new(Vec::<(String, u64)>::new()));
        let (url, bad) = answering_collector(500).await;
        let ex = Exporter::start(at(&url)).unwrap_or_else(|e| panic!("{e}"));
        let g = got_bad.clone();
        ex.on_ack(Arc::new(move |m| {
            if let Ok(mut g) = g.lock() {
                g.extend(m);
            }
        }));
        ex.send_of("a", 3, vec![span(1)]);
        let (counts, _) = ex.finish(Duration::from_secs(20)).await;
        assert_eq!(counts.failed, 1);
        assert!(got_bad.lock().map(|g| g.is_empty()).unwrap_or(false));
        bad.abort();
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
        let ex = Exporter::start_queued(at("http://127.0.0.1:9/v1/traces"), 4)
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
        let ex =
            Exporter::start(at("http://127.0.0.1:9/v1/traces")).unwrap_or_else(|e| panic!("{e}"));
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
