//! Prometheus metrics at `/metrics` (text exposition, no key needed on loopback setups that
//! scrape it; it holds counts and durations only, never ids, text or secrets):
//! - `weft_runs_total{status}` and `weft_run_duration_seconds`: runs ended, by how;
//! - `weft_runs_active`: runs being driven by this server, and `weft_runs_pending`: runs
//!   waiting for their thread (queued with `multitask_strategy: enqueue`);
//! - `weft_tool_calls_total{outcome}` and `weft_tool_call_duration_seconds`;
//! - `weft_model_tokens_total{kind}`: input and output tokens the models reported.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use weft_core::{Envelope, Event, ToolOutcome};

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
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("weft");
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
        Self {
            registry: Mutex::new(registry),
            runs,
            run_seconds,
            active,
            pending,
            tool_calls,
            tool_seconds,
            tokens,
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
