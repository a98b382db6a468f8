//! Prometheus metrics at `/metrics` (OpenMetrics text; it needs an API key, as the API's routes
//! do; it holds counts and durations only, never ids, text or secrets):
//! - `weft_runs_total{status}` and `weft_run_duration_seconds`: runs ended, by how;
//! - `weft_runs_active`: runs being driven by this server, and `weft_runs_pending`: runs
//!   waiting for their thread (queued with `multitask_strategy: enqueue`);
//! - `weft_tool_calls_total{outcome}` and `weft_tool_call_duration_seconds`;
//! - `weft_model_tokens_total{kind}`: input and output tokens the models reported;
//! - when the process's telemetry is configured (`OTEL_*`), the metrics `weft-telemetry` derives
//!   from the events of the runs this server drives (the same as it sends over OTLP), under
//!   their OpenTelemetry names with dots made underscores:
//!   `gen_ai_client_token_usage`, `gen_ai_client_operation_duration_seconds`,
//!   `gen_ai_client_operation_time_to_first_chunk_seconds` (with the conventions' buckets),
//!   `weft_turns_total`, `weft_waits_total`, `weft_lease_takeovers_total`,
//!   `weft_tool_errors_total`, `weft_cost_usd_total`, and the gauge `weft_queue_depth`
//!   (sessions waiting for a worker, sampled from the store);
//! - `weft_quota_refusals_total`: runs refused with 429 at a user's quota;
//! - `weft_budget_stops_total{weft_budget_scope, weft_budget_limit}` (derived, as the metrics
//!   below): budgets and users' quotas reached;
//! - `weft_telemetry_spans_total{outcome}`: spans exported, dropped (queue full) or lost (the
//!   collector failed), when spans are exported.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use weft_core::{Envelope, Event, ToolOutcome};
use weft_telemetry::metrics::{Instrument, Point, Shape};

/// A metric's attributes as labels (dots made underscores).
type Labels = Vec<(String, String)>;

/// Makes a histogram with these bucket boundaries.
#[derive(Clone, Copy)]
struct Buckets(&'static [f64]);

impl prometheus_client::metrics::family::MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// A derived metric as Prometheus keeps it.
enum Derived {
    Histogram(Family<Labels, Histogram, Buckets>),
    Counter(Family<Labels, Counter<f64, AtomicU64>>),
    Gauge(Family<Labels, Gauge<f64, AtomicU64>>),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: String,
}

pub(crate) struct Metrics {
    registry: Mutex<Registry>,
    runs: Family<Status, Counter>,
    run_seconds: Histogram,
    pub active: Gauge,
    pub pending: Gauge,
    tool_calls: Family<Outcome, Counter>,
    tool_seconds: Histogram,
    tokens: Family<Kind, Counter>,
    derived: Vec<(Instrument, Derived)>,
    spans: Family<Outcome, Counter>,
    quota_refusals: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        let mut derived = Vec::new();
        for i in Instrument::ALL {
            let name = i.name().replace('.', "_");
            let unit = match i.unit() {
                "s" => Some(Unit::Seconds),
                "USD" => Some(Unit::Other("usd".into())),
                _ => None,
            };
            let d = match i.shape() {
                Shape::Histogram(bounds) => {
                    let f = Family::new_with_constructor(Buckets(bounds));
                    match unit {
                        Some(u) => root.register_with_unit(name, i.description(), u, f.clone()),
                        None => root.register(name, i.description(), f.clone()),
                    }
                    Derived::Histogram(f)
                }
                Shape::Counter => {
                    let f = Family::<Labels, Counter<f64, AtomicU64>>::default();
                    match unit {
                        Some(u) => root.register_with_unit(name, i.description(), u, f.clone()),
                        None => root.register(name, i.description(), f.clone()),
                    }
                    Derived::Counter(f)
                }
                Shape::Gauge => {
                    let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
                    root.register(name, i.description(), f.clone());
                    Derived::Gauge(f)
                }
            };
            derived.push((i, d));
        }
        let registry = root.sub_registry_with_prefix("weft");
        let spans = Family::<Outcome, Counter>::default();
        registry.register(
            "telemetry_spans",
            "Spans exported, dropped (queue full) or lost (the collector failed)",
            spans.clone(),
        );
        let runs = Family::<Status, Counter>::default();
        registry.register("runs", "Runs ended, by status", runs.clone());
        let run_seconds = Histogram::new(exponential_buckets(0.01, 2.0, 16));
        registry.register(
            "run_duration_seconds",
            "How long runs took, from start to end",
            run_seconds.clone(),
        );
        let active = Gauge::default();
        registry.register(
            "runs_active",
            "Runs being driven by this server",
            active.clone(),
        );
        let pending = Gauge::default();
        registry.register(
            "runs_pending",
            "Runs waiting for their thread's run before them",
            pending.clone(),
        );
        let tool_calls = Family::<Outcome, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls finished, by outcome",
            tool_calls.clone(),
        );
        let tool_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 18));
        registry.register(
            "tool_call_duration_seconds",
            "How long tool calls took",
            tool_seconds.clone(),
        );
        let tokens = Family::<Kind, Counter>::default();
        registry.register(
            "model_tokens",
            "Tokens the models reported, by kind",
            tokens.clone(),
        );
        let quota_refusals = Counter::default();
        registry.register(
            "quota_refusals",
            "Runs refused with 429 because their user reached a quota (a limit or runs at once)",
            quota_refusals.clone(),
        );
        Self {
            registry: Mutex::new(root),
            runs,
            run_seconds,
            active,
            pending,
            tool_calls,
            tool_seconds,
            tokens,
            derived,
            spans,
            quota_refusals,
        }
    }
}

impl Metrics {
    /// Counts what one stored event says (tool calls, tokens).
    pub(crate) fn observe(&self, e: &Envelope) {
        match &e.event {
            Event::ToolCallFinished {
                outcome,
                duration_ms,
                ..
            } => {
                let outcome = match outcome {
                    ToolOutcome::Ok { .. } => "ok".to_owned(),
                    ToolOutcome::Error { error } => error.kind.clone(),
                };
                self.tool_calls.get_or_create(&Outcome { outcome }).inc();
                self.tool_seconds.observe(*duration_ms as f64 / 1000.0);
            }
            Event::ModelReplied { reply, .. } => {
                let u = &reply.usage;
                self.tokens
                    .get_or_create(&Kind {
                        kind: "input".into(),
                    })
                    .inc_by(u.input_tokens);
                self.tokens
                    .get_or_create(&Kind {
                        kind: "output".into(),
                    })
                    .inc_by(u.output_tokens);
            }
            _ => {}
        }
    }

    /// Records points derived from the events of a session this server drives.
    pub(crate) fn points(&self, points: &[Point]) {
        for p in points {
            let labels: Labels = p
                .attributes
                .iter()
                .map(|(k, v)| (k.replace('.', "_"), v.clone()))
                .collect();
            match self.derived.iter().find(|(i, _)| *i == p.instrument) {
                Some((_, Derived::Histogram(f))) => f.get_or_create(&labels).observe(p.value),
                Some((_, Derived::Counter(f))) => {
                    f.get_or_create(&labels).inc_by(p.value);
                }
                Some((_, Derived::Gauge(f))) => {
                    f.get_or_create(&labels).set(p.value);
                }
                None => {}
            }
        }
    }

    /// What the span exporter did so far (a count only grows).
    pub(crate) fn spans(&self, c: weft_telemetry::Counts) {
        for (outcome, n) in [
            ("exported", c.exported),
            ("dropped", c.dropped),
            ("failed", c.failed),
        ] {
            let counter = self.spans.get_or_create(&Outcome {
                outcome: outcome.into(),
            });
            counter.inc_by(n.saturating_sub(counter.get()));
        }
    }

    /// A run was refused because its user reached a quota.
    pub(crate) fn quota_refused(&self) {
        self.quota_refusals.inc();
    }

    /// A run ended with `status` after `seconds`.
    pub(crate) fn run_ended(&self, status: &str, seconds: f64) {
        self.runs
            .get_or_create(&Status {
                status: status.to_owned(),
            })
            .inc();
        self.run_seconds.observe(seconds);
    }

    /// The text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        if let Ok(r) = self.registry.lock() {
            let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        }
        out
    }
}
