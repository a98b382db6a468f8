//! Metrics derived from a session's events and the spans they close: pure, no I/O, no clock.
//!
//! The GenAI conventions' client instruments, with their names, units and bucket boundaries
//! (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration` for model calls, tool
//! calls and turns, `gen_ai.client.operation.time_to_first_chunk` for streamed model calls),
//! and weft's own counters (turns by outcome, waits, lease takeovers, tool errors, cost, budget
//! and quota stops) and the queue's depth (a gauge the process samples from the store,
//! [`queue_depth`]). A
//! [`Recorder`] follows one session beside its [`crate::Deriver`]: each point comes from a span
//! that an event closed, or from an event, so the process that commits the event records it
//! and a process that continues the session never records it again.

use std::collections::HashMap;

use weft_core::event::{Envelope, Event};

use crate::derive::{Attr, Span};

/// `gen_ai.client.token.usage`'s explicit bucket boundaries, as the conventions give them.
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// The bucket boundaries of the conventions' durations (`gen_ai.client.operation.duration`,
/// `gen_ai.client.operation.time_to_first_chunk`), in seconds.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// A metric weft records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instrument {
    /// `gen_ai.client.token.usage`: tokens of one model call, by `gen_ai.token.type`.
    TokenUsage,
    /// `gen_ai.client.operation.duration`: a model call, a tool call or a turn, in seconds.
    OperationDuration,
    /// `gen_ai.client.operation.time_to_first_chunk`: from a streamed model call's start to
    /// its first piece of text, in seconds (latest conventions only).
    TimeToFirstChunk,
    /// `weft.turns`: turns ended, by `weft.turn.outcome`.
    Turns,
    /// `weft.waits`: waits for a person begun, by `weft.wait.kind`.
    Waits,
    /// `weft.lease.takeovers`: a running session continued by another lease holder.
    Takeovers,
    /// `weft.tool.errors`: tool calls that failed, by `gen_ai.tool.name` and `error.type`.
    ToolErrors,
    /// `weft.cost`: what model calls cost, in US dollars, by `gen_ai.request.model`.
    Cost,
    /// `weft.queue.depth`: sessions waiting for a worker (running, with no live lease), as
    /// the store counted them last.
    QueueDepth,
    /// `weft.budget.stops`: budgets and quotas reached (`budget_exceeded`), by
    /// `weft.budget.scope` (`run`, `session`, or `user` for a user's quota) and
    /// `weft.budget.limit` (`cost_usd`, `tool_calls`, ...).
    BudgetStops,
}

/// How an instrument aggregates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// A histogram with these explicit bucket boundaries.
    Histogram(&'static [f64]),
    /// A monotonic sum.
    Counter,
    /// The last value sampled.
    Gauge,
}

impl Instrument {
    /// Every instrument.
    pub const ALL: [Self; 10] = [
        Self::TokenUsage,
        Self::OperationDuration,
        Self::TimeToFirstChunk,
        Self::Turns,
        Self::Waits,
        Self::Takeovers,
        Self::ToolErrors,
        Self::Cost,
        Self::QueueDepth,
        Self::BudgetStops,
    ];

    /// The OpenTelemetry name.
    pub fn name(self) -> &'static str {
        match self {
            Self::TokenUsage => "gen_ai.client.token.usage",
            Self::OperationDuration => "gen_ai.client.operation.duration",
            Self::TimeToFirstChunk => "gen_ai.client.operation.time_to_first_chunk",
            Self::Turns => "weft.turns",
            Self::Waits => "weft.waits",
            Self::Takeovers => "weft.lease.takeovers",
            Self::ToolErrors => "weft.tool.errors",
            Self::Cost => "weft.cost",
            Self::QueueDepth => "weft.queue.depth",
            Self::BudgetStops => "weft.budget.stops",
        }
    }

    /// The unit (UCUM, as the conventions write it).
    pub fn unit(self) -> &'static str {
        match self {
            Self::TokenUsage => "{token}",
            Self::OperationDuration | Self::TimeToFirstChunk => "s",
            Self::Turns => "{turn}",
            Self::Waits => "{wait}",
            Self::Takeovers => "{takeover}",
            Self::ToolErrors => "{error}",
            Self::Cost => "USD",
            Self::QueueDepth => "{session}",
            Self::BudgetStops => "{stop}",
        }
    }

    /// One line saying what it counts.
    pub fn description(self) -> &'static str {
        match self {
            Self::TokenUsage => "Number of input and output tokens used",
            Self::OperationDuration => "GenAI operation duration",
            Self::TimeToFirstChunk => "Time from a streamed model call's start to its first chunk",
            Self::Turns => "Turns ended, by outcome",
            Self::Waits => "Waits for a person begun, by kind",
            Self::Takeovers => "Running sessions continued by another lease holder",
            Self::ToolErrors => "Tool calls that failed, by tool and error type",
            Self::Cost => "Cost of model calls, by model",
            Self::QueueDepth => "Sessions waiting for a worker: running, with no live lease",
            Self::BudgetStops => "Budgets and users' quotas reached, by scope and limit",
        }
    }

    /// How it aggregates.
    pub fn shape(self) -> Shape {
        match self {
            Self::TokenUsage => Shape::Histogram(&TOKEN_BUCKETS),
            Self::OperationDuration | Self::TimeToFirstChunk => Shape::Histogram(&DURATION_BUCKETS),
            Self::QueueDepth => Shape::Gauge,
            _ => Shape::Counter,
        }
    }
}

/// One measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// What it measures.
    pub instrument: Instrument,
    /// The value (a count is 1).
    pub value: f64,
    /// Its attributes, by their OpenTelemetry names (never ids, text or secrets: bounded sets
    /// of values only).
    pub attributes: Vec<(&'static str, String)>,
}

/// The depth of the work queue: `waiting` sessions (see `weft_store::Leases::waiting`).
pub fn queue_depth(waiting: u64) -> Point {
    Point {
        instrument: Instrument::QueueDepth,
        value: waiting as f64,
        attributes: Vec::new(),
    }
}

/// Follows one session's events and closed spans, and gives the points they make.
#[derive(Debug, Default)]
pub struct Recorder {
    latest: bool,
    epoch: u64,
    running: bool,
    skip_through: u64,
    /// Time to first chunk (s) of the model call that follows the stored event `seq`.
    first_chunks: HashMap<u64, f64>,
}

impl Recorder {
    /// A recorder; `latest`: the latest experimental conventions (names of the provider
    /// attribute, and time to first chunk recorded).
    pub fn new(latest: bool) -> Self {
        Self {
            latest,
            ..Self::default()
        }
    }

    /// Events up to `seq` were recorded by the process that committed them.
    pub fn skip_through(&mut self, seq: u64) {
        self.skip_through = seq;
    }

    /// The first piece of text of the model call that follows stored event `after` came
    /// `seconds` after that event (the call's start).
    pub fn first_chunk(&mut self, after: u64, seconds: f64) {
        if self.latest && seconds >= 0.0 {
            self.first_chunks.entry(after).or_insert(seconds);
        }
    }

    /// The points of one event and of the spans it closed (what [`crate::Deriver::push`]
    /// gave for it).
    pub fn push(&mut self, env: &Envelope, closed: &[Span]) -> Vec<Point> {
        let mut out = Vec::new();
        let fresh = env.seq > self.skip_through;
        if env.epoch > 0 {
            if self.epoch > 0 && env.epoch > self.epoch && self.running && fresh {
                out.push(Point {
                    instrument: Instrument::Takeovers,
                    value: 1.0,
                    attributes: Vec::new(),
                });
            }
            self.epoch = self.epoch.max(env.epoch);
        }
        match &env.event {
            Event::SessionStarted { .. }
            | Event::TurnStarted { .. }
            | Event::UserReplied { .. } => {
                self.running = true;
            }
            Event::WaitingForUser { request } => {
                self.running = false;
                if fresh {
                    out.push(Point {
                        instrument: Instrument::Waits,
                        value: 1.0,
                        attributes: vec![("weft.wait.kind", request.kind.as_str().to_owned())],
                    });
                }
            }
            Event::RunFinished { .. } => self.running = false,
            Event::BudgetExceeded { which, .. } if fresh => {
                // `run.cost_usd`, `session.tool_calls.search`, `user.day.tokens`: the scope, and
                // the limit without a tool's or a period's name.
                let mut parts = which.split('.');
                let scope = parts.next().unwrap_or_default().to_owned();
                let rest: Vec<&str> = parts.collect();
                let limit = match (scope.as_str(), rest.as_slice()) {
                    ("user", [_, limit, ..]) => (*limit).to_owned(),
                    (_, [limit, ..]) => (*limit).to_owned(),
                    _ => String::new(),
                };
                out.push(Point {
                    instrument: Instrument::BudgetStops,
                    value: 1.0,
                    attributes: vec![("weft.budget.scope", scope), ("weft.budget.limit", limit)],
                });
            }
            _ => {}
        }
        for s in closed {
            self.span(s, &mut out);
        }
        // A chunk whose call never replied (the process stopped) is forgotten with its event.
        self.first_chunks.retain(|after, _| *after + 1 >= env.seq);
        out
    }

    fn provider_key(&self) -> &'static str {
        if self.latest {
            "gen_ai.provider.name"
        } else {
            "gen_ai.system"
        }
    }

    fn span(&mut self, s: &Span, out: &mut Vec<Point>) {
        let Some(op) = s.str_attr("gen_ai.operation.name") else {
            return;
        };
        let seconds = (s.end_ms - s.start_ms).max(0) as f64 / 1000.0;
        let mut attrs = vec![("gen_ai.operation.name", op.to_owned())];
        let copy = |attrs: &mut Vec<(&'static str, String)>, key: &'static str| {
            if let Some(v) = s.str_attr(key) {
                attrs.push((key, v.to_owned()));
            }
        };
        match op {
            "chat" => {
                copy(&mut attrs, self.provider_key());
                copy(&mut attrs, "gen_ai.request.model");
                copy(&mut attrs, "gen_ai.response.model");
                if let Some(e) = &s.error {
                    attrs.push(("error.type", e.clone()));
                }
                for (key, kind) in [
                    ("gen_ai.usage.input_tokens", "input"),
                    ("gen_ai.usage.output_tokens", "output"),
                ] {
                    if let Some(Attr::Int(n)) = s.attr(key) {
                        let mut a = attrs.clone();
                        a.retain(|(k, _)| *k != "error.type");
                        a.push(("gen_ai.token.type", kind.to_owned()));
                        out.push(Point {
                            instrument: Instrument::TokenUsage,
                            value: *n as f64,
                            attributes: a,
                        });
                    }
                }
                if let Some(Attr::F64(c)) = s.attr("weft.cost_usd") {
                    let mut a = Vec::new();
                    copy(&mut a, "gen_ai.request.model");
                    out.push(Point {
                        instrument: Instrument::Cost,
                        value: *c,
                        attributes: a,
                    });
                }
                if let Some(t) = s
                    .first_seq
                    .checked_sub(1)
                    .and_then(|after| self.first_chunks.remove(&after))
                {
                    out.push(Point {
                        instrument: Instrument::TimeToFirstChunk,
                        value: t,
                        attributes: attrs.clone(),
                    });
                }
            }
            "execute_tool" => {
                copy(&mut attrs, "gen_ai.tool.name");
                if let Some(e) = &s.error {
                    attrs.push(("error.type", e.clone()));
                    let mut a = Vec::new();
                    copy(&mut a, "gen_ai.tool.name");
                    a.push(("error.type", e.clone()));
                    out.push(Point {
                        instrument: Instrument::ToolErrors,
                        value: 1.0,
                        attributes: a,
                    });
                }
            }
            "invoke_agent" | "invoke_workflow" => {
                copy(&mut attrs, "gen_ai.agent.name");
                if let Some(e) = &s.error {
                    attrs.push(("error.type", e.clone()));
                }
                if let Some(o) = s.str_attr("weft.turn.outcome") {
                    out.push(Point {
                        instrument: Instrument::Turns,
                        value: 1.0,
                        attributes: vec![("weft.turn.outcome", o.to_owned())],
                    });
                }
            }
            _ => return,
        }
        out.push(Point {
            instrument: Instrument::OperationDuration,
            value: seconds,
            attributes: attrs,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buckets_are_the_conventions() {
        assert_eq!(TOKEN_BUCKETS[0], 1.0);
        assert!(TOKEN_BUCKETS.windows(2).all(|w| w[1] == w[0] * 4.0));
        assert!(
            DURATION_BUCKETS
                .windows(2)
                .all(|w| (w[1] - w[0] * 2.0).abs() < 1e-9)
        );
        assert_eq!(DURATION_BUCKETS[13], 81.92);
    }

    #[test]
    fn budget_and_quota_stops_are_counted_by_scope_and_limit_once() {
        let stop = |seq: u64, which: &str| Envelope {
            seq,
            ts: 0,
            v: weft_core::EVENT_VERSION,
            epoch: 0,
            event: Event::BudgetExceeded {
                which: which.into(),
                limit: 1.0,
                spent: 1.0,
                call: 0.1,
            },
        };
        let mut r = Recorder::new(false);
        let attrs = |p: Vec<Point>| {
            assert_eq!(p.len(), 1);
            assert_eq!(p[0].instrument, Instrument::BudgetStops);
            p[0].attributes
                .iter()
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            attrs(r.push(&stop(1, "run.cost_usd"), &[])),
            ["run", "cost_usd"]
        );
        assert_eq!(
            attrs(r.push(&stop(2, "session.tool_calls.search"), &[])),
            ["session", "tool_calls"]
        );
        assert_eq!(
            attrs(r.push(&stop(3, "user.day.tokens"), &[])),
            ["user", "tokens"]
        );
        // A process that continues the session does not count it again.
        let mut again = Recorder::new(false);
        again.skip_through(3);
        assert!(again.push(&stop(3, "user.day.tokens"), &[]).is_empty());
    }
}
