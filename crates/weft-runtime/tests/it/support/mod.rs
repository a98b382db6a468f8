//! Test tools and helpers shared by the runtime's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::{Envelope, Event, Limits, Plan, State, ToolError, ToolInfo};
use weft_runtime::Runtime;
use weft_store::RamStore;
use weft_tools::{Echo, Registry, Template, Tool, ToolContext};

/// One call a recording tool served: its step, attempt and logical start/finish ticks.
#[derive(Clone, Debug)]
pub struct CallRecord {
    pub tool: String,
    pub step: Option<String>,
    pub attempt: u32,
    pub args: Value,
    pub start: usize,
    pub end: usize,
}

impl CallRecord {
    /// True when the two calls were running at the same moment.
    pub fn overlaps(&self, other: &CallRecord) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// What every recording tool of a test writes to: a logical clock, the calls, and how many
/// calls are in flight.
#[derive(Default)]
pub struct Log {
    tick: AtomicUsize,
    inflight: AtomicUsize,
    pub max_inflight: AtomicUsize,
    pub calls: Mutex<Vec<CallRecord>>,
}

impl Log {
    /// Whether any call has begun.
    pub fn any_began(&self) -> bool {
        self.tick.load(Ordering::SeqCst) > 0
    }

    pub fn calls(&self) -> Vec<CallRecord> {
        self.calls.lock().unwrap().clone()
    }

    pub fn calls_of(&self, step: &str) -> Vec<CallRecord> {
        self.calls()
            .into_iter()
            .filter(|c| c.step.as_deref() == Some(step))
            .collect()
    }

    pub fn max_inflight(&self) -> usize {
        self.max_inflight.load(Ordering::SeqCst)
    }
}

type Behaviour = Arc<dyn Fn(&Value, &ToolContext) -> Result<Value, ToolError> + Send + Sync>;

/// A tool that records every call, optionally sleeps, and answers as its behaviour says.
pub struct Recorder {
    info: ToolInfo,
    sleep: Duration,
    log: Arc<Log>,
    behaviour: Behaviour,
}

impl Recorder {
    /// An echo-like tool: returns its arguments.
    pub fn new(name: &str, log: &Arc<Log>) -> Self {
        Self {
            info: ToolInfo {
                name: name.into(),
                description: "test tool".into(),
                category: None,
                input_schema: json!({}),
                idempotent: true,
                parallel: false,
                requires_approval: false,
                source: "test".into(),
                output_schema: None,
            },
            sleep: Duration::ZERO,
            log: Arc::clone(log),
            behaviour: Arc::new(|args, _| Ok(args.clone())),
        }
    }

    #[must_use]
    pub fn parallel(mut self, yes: bool) -> Self {
        self.info.parallel = yes;
        self
    }

    #[must_use]
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.info.idempotent = yes;
        self
    }

    #[must_use]
    pub fn sleep_ms(mut self, ms: u64) -> Self {
        self.sleep = Duration::from_millis(ms);
        self
    }

    #[must_use]
    pub fn schema(mut self, schema: Value) -> Self {
        self.info.input_schema = schema;
        self
    }

    #[must_use]
    pub fn behaviour(
        mut self,
        f: impl Fn(&Value, &ToolContext) -> Result<Value, ToolError> + Send + Sync + 'static,
    ) -> Self {
        self.behaviour = Arc::new(f);
        self
    }
}

impl Tool for Recorder {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let start = self.log.tick.fetch_add(1, Ordering::SeqCst);
        let now = self.log.inflight.fetch_add(1, Ordering::SeqCst) + 1;
        self.log.max_inflight.fetch_max(now, Ordering::SeqCst);
        if !self.sleep.is_zero() {
            tokio::time::sleep(self.sleep).await;
        } else {
            tokio::task::yield_now().await;
        }
        let result = (self.behaviour)(&args, &ctx);
        self.log.inflight.fetch_sub(1, Ordering::SeqCst);
        let end = self.log.tick.fetch_add(1, Ordering::SeqCst);
        self.log.calls.lock().unwrap().push(CallRecord {
            tool: self.info.name.clone(),
            step: ctx.step.clone(),
            attempt: ctx.attempt,
            args,
            start,
            end,
        });
        result
    }
}

/// A registry with the built-ins and the given test tools.
pub fn registry(tools: Vec<Recorder>) -> Registry {
    let mut reg = Registry::new();
    reg.register(Echo::default()).unwrap();
    reg.register(Template::default()).unwrap();
    for t in tools {
        reg.register(t).unwrap();
    }
    reg
}

/// Limits for tests: fast retries.
pub fn limits() -> Limits {
    Limits {
        retry_backoff_ms: 1,
        retry_backoff_max_ms: 5,
        ..Limits::default()
    }
}

/// The result of a run: its final state and every event, in order.
pub struct Ran {
    pub state: State,
    pub events: Vec<Envelope>,
}

impl Ran {
    pub fn status_of(&self, step: &str) -> weft_core::StepStatus {
        let run = self.state.plan().unwrap();
        run.step(step).unwrap().1.status
    }

    pub fn step(&self, step: &str) -> weft_core::state::StepRun {
        let run = self.state.plan().unwrap();
        run.step(step).unwrap().1.clone()
    }

    pub fn kinds_for(&self, kind: &str, step: &str) -> Vec<&Event> {
        self.events
            .iter()
            .map(|e| &e.event)
            .filter(|e| e.kind() == kind && step_of(e) == Some(step))
            .collect()
    }

    pub fn waves(&self) -> Vec<Vec<String>> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Event::WaveStarted { steps, .. } => Some(steps.clone()),
                _ => None,
            })
            .collect()
    }
}

pub fn step_of(e: &Event) -> Option<&str> {
    match e {
        Event::StepStarted { step, .. }
        | Event::StepRetrying { step, .. }
        | Event::StepCompleted { step, .. }
        | Event::StepFailed { step, .. }
        | Event::StepSkipped { step, .. } => Some(step),
        Event::ToolCallStarted { step, .. } => step.as_deref(),
        _ => None,
    }
}

/// Runs a plan (given as JSON) to its end and collects the events.
pub async fn run(reg: Registry, limits: Limits, plan: Value, input: Value) -> Ran {
    let plan = Plan::from_value(&plan).unwrap_or_else(|p| panic!("plan does not parse: {p:?}"));
    run_plan(reg, limits, plan, input).await
}

pub async fn run_plan(reg: Registry, limits: Limits, plan: Plan, input: Value) -> Ran {
    let seen: Arc<Mutex<Vec<Envelope>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let rt = Runtime::builder(Arc::new(RamStore::new()), Arc::new(reg), limits, None, None)
        .observe(Arc::new(move |e| sink.lock().unwrap().push(e.clone())))
        .build();
    let session = rt
        .run_plan("test", plan, input)
        .await
        .unwrap_or_else(|e| panic!("the run could not start: {e}"));
    let state = session.state.clone();
    drop(session);
    let events = seen.lock().unwrap().clone();
    // The log is gapless and ordered.
    for (k, e) in events.iter().enumerate() {
        assert_eq!(e.seq, k as u64 + 1);
    }
    // A snapshot after any event reads back as the fold (quadratic: small runs only).
    if events.len() <= 400 {
        let log: Vec<Event> = events.iter().map(|e| e.event.clone()).collect();
        weft_core::snapshot::verify(&log).unwrap();
    }
    Ran { state, events }
}
