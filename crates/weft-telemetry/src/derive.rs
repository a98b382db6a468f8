//! A session's events turned into spans: pure, no I/O, no clock.
//!
//! Every span's ids come from the session id and the sequence number of the event that opened
//! it, and a span is given out once, by the event that closes it. So the same log always gives
//! the same spans: a resumed, taken-over or replayed session continues the same trace, and a
//! process that first feeds the part of the log another process already exported
//! ([`Deriver::skip_through`]) never gives a span twice.
//!
//! The spans: the conventions' `invoke_agent` (or `invoke_workflow`) for a turn, `chat` for a
//! model call and `execute_tool` for a tool call, and weft's own for waves, plan steps, reviews,
//! replans, fan-outs and waits for a person (and `gen_ai.evaluation.result` for a verdict of
//! `weft eval`). A run's `traceparent` (recorded in its `run_started`) puts the turn it starts
//! in the caller's trace. Times come from the events; the one time taken live, to a model
//! call's first piece of text, is measured as it comes by `weft_host::telemetry::Live` (the
//! runtime also keeps it with the reply, `ModelReply::timing`).

use std::collections::HashMap;

use serde_json::Value;
use sha2::{Digest, Sha256};
use weft_core::agent::Mode;
use weft_core::event::{Envelope, Event, ReviewDecision, RunStatus, ToolOutcome};
use weft_core::model::{Purpose, Usage};

/// How a span relates to the process that made it (OpenTelemetry's span kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Work done inside weft's process (a turn, a tool call, an in-process model).
    Internal,
    /// A call to a remote server (a model provider).
    Client,
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// A string.
    Str(String),
    /// An integer (counts such as tokens; a `u64` past `i64::MAX` is clamped to it).
    Int(i64),
    /// A floating-point number.
    F64(f64),
    /// A boolean.
    Bool(bool),
    /// A list of strings (e.g. `gen_ai.response.finish_reasons`).
    StrList(Vec<String>),
}

impl From<&str> for Attr {
    fn from(s: &str) -> Self {
        Self::Str(s.to_owned())
    }
}
impl From<String> for Attr {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}
impl From<u64> for Attr {
    fn from(n: u64) -> Self {
        Self::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}
impl From<u32> for Attr {
    fn from(n: u32) -> Self {
        Self::Int(i64::from(n))
    }
}

/// A finished span, ready for an exporter.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// The trace the span belongs to: the session's (see [`trace_id`]) or the one a caller
    /// passed in ([`Options::parent`]).
    pub trace_id: [u8; 16],
    /// The span's own id, derived from the session id and the event that opened it (see
    /// [`span_id`]).
    pub span_id: [u8; 8],
    /// The parent span; `None` for a turn with no trace context from outside.
    pub parent: Option<[u8; 8]>,
    /// The parent came from outside the session (a `traceparent` a server received).
    pub parent_remote: bool,
    /// The span's name as the GenAI conventions give it, e.g. `invoke_agent NAME`,
    /// `execute_tool TOOL`.
    pub name: String,
    /// Whether the span's work was done in the process or by a remote server.
    pub kind: Kind,
    /// Unix time in milliseconds.
    pub start_ms: i64,
    /// Unix time in milliseconds.
    pub end_ms: i64,
    /// The span's attributes by their OpenTelemetry names (`gen_ai.*`, `weft.*`), in the order
    /// they were set.
    pub attributes: Vec<(&'static str, Attr)>,
    /// `Some(error type)` when the operation failed.
    pub error: Option<String>,
    /// The sequence number of the event that opened the span.
    pub first_seq: u64,
    /// The sequence number of the event that closed the span.
    pub last_seq: u64,
}

impl Span {
    /// An attribute's value, if the span has it.
    pub fn attr(&self, key: &str) -> Option<&Attr> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// A string attribute's value.
    pub fn str_attr(&self, key: &str) -> Option<&str> {
        match self.attr(key) {
            Some(Attr::Str(s)) => Some(s),
            _ => None,
        }
    }
}

/// Hides secrets in a text, in place (weft's `Redactor`).
pub type Redact = std::sync::Arc<dyn Fn(&mut String) + Send + Sync>;

/// Options of a derivation.
#[derive(Clone, Default)]
pub struct Options {
    /// Put message contents, tool arguments and results on the spans
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`). Off by default.
    pub capture_content: bool,
    /// `gen_ai.provider.name` of the session's model (the agent file says it; events do not).
    pub provider: Option<String>,
    /// A trace context from outside (W3C `traceparent`): its trace id and parent span.
    pub parent: Option<([u8; 16], [u8; 8])>,
    /// Applied to every text that carries content, after the redaction the events had when
    /// they were stored (the same redactor: a secret added since is hidden too).
    pub redact: Option<Redact>,
    /// The conventions' latest experimental names
    /// (`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`): `gen_ai.provider.name`
    /// instead of v1.36's `gen_ai.system`.
    pub latest: bool,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("capture_content", &self.capture_content)
            .field("provider", &self.provider)
            .field("parent", &self.parent.is_some())
            .field("latest", &self.latest)
            .finish_non_exhaustive()
    }
}

/// `gen_ai.provider.name` for an agent file's `model:` (`openai:gpt-4o-mini`, or a mapping with
/// `provider`): the provider as weft names it, which for OpenAI and Anthropic is the conventions'
/// own value; `None` for the scripted model and a model not given.
pub fn provider_of(model: Option<&Value>) -> Option<String> {
    let p = match model? {
        Value::String(s) => s.split_once(':').map(|(p, _)| p.to_owned())?,
        Value::Object(m) => m.get("provider")?.as_str()?.to_owned(),
        _ => return None,
    };
    (p != "scripted" && !p.is_empty()).then_some(p)
}

/// The trace id of a session: the same for every process that ever drives it.
pub fn trace_id(session_id: &str) -> [u8; 16] {
    let d = Sha256::digest(format!("weft-trace\0{session_id}").as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    if out == [0; 16] {
        out[15] = 1;
    }
    out
}

/// The id of the span opened by event `seq` of a session (`role` tells apart the spans one
/// event opens).
pub fn span_id(session_id: &str, seq: u64, role: &str) -> [u8; 8] {
    let d = Sha256::digest(format!("weft-span\0{session_id}\0{seq}\0{role}").as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    if out == [0; 8] {
        out[7] = 1;
    }
    out
}

/// A span not closed yet.
#[derive(Clone, Debug)]
struct Open {
    span: Span,
}

/// Turns a session's events, one at a time, into the spans they close.
#[derive(Debug)]
pub struct Deriver {
    session: String,
    trace: [u8; 16],
    /// The trace of the current turn: the session's, or that of the `traceparent` its run was
    /// created with.
    turn_trace: [u8; 16],
    /// A `traceparent` recorded with a run (`RunStarted`), for the turn it starts.
    run_parent: Option<([u8; 16], [u8; 8])>,
    opts: Options,
    agent: String,
    mode: Option<Mode>,
    turns: u32,
    last_ts: i64,
    turn: Option<Open>,
    wave: Option<Open>,
    steps: HashMap<String, Open>,
    fan_outs: HashMap<String, Open>,
    calls: HashMap<String, Open>,
    review: Option<Open>,
    replan: Option<Open>,
    workflow_step: Option<Open>,
    wait: Option<Open>,
    /// Usage summed over the current turn's model calls.
    turn_usage: Usage,
    /// Spans closed by events up to this one are not given out (already exported).
    skip_through: u64,
    /// The span of the last turn that ended (what an evaluation judged).
    last_turn: Option<[u8; 8]>,
}

impl Deriver {
    /// A deriver for the session `session_id`, which has given out no span yet.
    pub fn new(session_id: &str, opts: Options) -> Self {
        let trace = opts
            .parent
            .map(|(t, _)| t)
            .unwrap_or_else(|| trace_id(session_id));
        Self {
            session: session_id.to_owned(),
            trace,
            turn_trace: trace,
            run_parent: None,
            opts,
            agent: String::new(),
            mode: None,
            turns: 0,
            last_ts: 0,
            turn: None,
            wave: None,
            steps: HashMap::new(),
            fan_outs: HashMap::new(),
            calls: HashMap::new(),
            review: None,
            replan: None,
            workflow_step: None,
            wait: None,
            turn_usage: Usage::default(),
            skip_through: 0,
            last_turn: None,
        }
    }

    /// Spans closed by events up to `seq` are not given out: another process exported them
    /// while it drove the session (the events are still fed, for the spans they open).
    pub fn skip_through(&mut self, seq: u64) {
        self.skip_through = seq;
    }

    /// The trace and span ids of the turn open now, if one is.
    pub fn turn(&self) -> Option<([u8; 16], [u8; 8])> {
        self.turn
            .as_ref()
            .map(|o| (o.span.trace_id, o.span.span_id))
    }

    /// The agent's name, once the log's first event was fed.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// Feeds one event; returns the spans it closes.
    pub fn push(&mut self, env: &Envelope) -> Vec<Span> {
        let mut out = Vec::new();
        self.event(env, &mut out);
        self.last_ts = env.ts;
        if env.seq <= self.skip_through {
            out.clear();
        }
        out
    }

    /// The spans of a whole log.
    pub fn derive(session_id: &str, opts: Options, events: &[Envelope]) -> Vec<Span> {
        let mut d = Self::new(session_id, opts);
        events.iter().flat_map(|e| d.push(e)).collect()
    }

    fn open(&self, env: &Envelope, role: &str, name: String, parent: Option<[u8; 8]>) -> Open {
        let mut attributes = vec![
            ("weft.session.id", Attr::from(self.session.as_str())),
            ("gen_ai.conversation.id", Attr::from(self.session.as_str())),
        ];
        if env.epoch > 0 {
            attributes.push(("weft.epoch", Attr::from(env.epoch)));
        }
        Open {
            span: Span {
                trace_id: self.turn_trace,
                span_id: span_id(&self.session, env.seq, role),
                parent,
                parent_remote: false,
                name,
                kind: Kind::Internal,
                start_ms: env.ts,
                end_ms: env.ts,
                attributes,
                error: None,
                first_seq: env.seq,
                last_seq: env.seq,
            },
        }
    }

    fn close(mut open: Open, env: &Envelope, out: &mut Vec<Span>) {
        open.span.end_ms = env.ts.max(open.span.start_ms);
        open.span.last_seq = env.seq;
        out.push(open.span);
    }

    fn turn_id(&self) -> Option<[u8; 8]> {
        self.turn.as_ref().map(|o| o.span.span_id)
    }

    fn content(&self, mut text: String) -> String {
        if let Some(r) = &self.opts.redact {
            r(&mut text);
        }
        text
    }

    fn start_turn(&mut self, env: &Envelope, task: Option<&str>) {
        self.turns += 1;
        // A run created with a trace context puts its turn in that trace, under that span.
        let parent = self.run_parent.take().or(self.opts.parent);
        self.turn_trace = parent.map_or(self.trace, |(t, _)| t);
        let workflow = self.mode == Some(Mode::Workflow);
        let op = if workflow {
            "invoke_workflow"
        } else {
            "invoke_agent"
        };
        let mut o = self.open(env, "turn", format!("{op} {}", self.agent), None);
        if let Some((_, parent)) = parent {
            o.span.parent = Some(parent);
            o.span.parent_remote = true;
        }
        let a = &mut o.span.attributes;
        a.push(("gen_ai.operation.name", op.into()));
        if workflow {
            a.push(("gen_ai.workflow.name", self.agent.as_str().into()));
        }
        a.push(("gen_ai.agent.name", self.agent.as_str().into()));
        a.push(("weft.turn", self.turns.into()));
        if let Some(m) = self.mode {
            a.push(("weft.mode", mode_name(m).into()));
        }
        if self.opts.capture_content
            && let Some(task) = task
        {
            let msg =
                serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": task}]}]);
            let text = self.content(msg.to_string());
            o.span
                .attributes
                .push(("gen_ai.input.messages", text.into()));
        }
        self.turn_usage = Usage::default();
        self.turn = Some(o);
    }

    /// Ends the turn (and whatever is still open in it) at `env`; `outcome` says how
    /// (`weft.turn.outcome`: `completed`, `failed`, `waiting`, or `superseded` by a new task).
    fn end_turn(
        &mut self,
        env: &Envelope,
        outcome: &str,
        error: Option<String>,
        out: &mut Vec<Span>,
    ) {
        for (_, o) in std::mem::take(&mut self.calls) {
            Self::close(o, env, out);
        }
        for (_, o) in std::mem::take(&mut self.fan_outs) {
            Self::close(o, env, out);
        }
        for (_, o) in std::mem::take(&mut self.steps) {
            Self::close(o, env, out);
        }
        for o in [
            self.review.take(),
            self.replan.take(),
            self.wave.take(),
            self.workflow_step.take(),
        ]
        .into_iter()
        .flatten()
        {
            Self::close(o, env, out);
        }
        if let Some(mut t) = self.turn.take() {
            self.last_turn = Some(t.span.span_id);
            usage_attrs(&mut t.span.attributes, &self.turn_usage);
            t.span
                .attributes
                .push(("weft.turn.outcome", outcome.into()));
            t.span.error = error;
            Self::close(t, env, out);
        }
    }

    fn ensure_turn(&mut self, env: &Envelope) {
        if self.turn.is_none() {
            self.start_turn(env, None);
        }
    }

    fn event(&mut self, env: &Envelope, out: &mut Vec<Span>) {
        let _ = self.turn_event(env, out)
            || self.model_event(env, out)
            || self.plan_event(env, out)
            || self.tool_event(env, out)
            || self.workflow_event(env, out);
    }

    /// A session's and a turn's lifecycle: the turn span, waits for a person, the run's end. Whether the event was one of these.
    fn turn_event(&mut self, env: &Envelope, out: &mut Vec<Span>) -> bool {
        match &env.event {
            Event::SessionStarted { agent, mode, .. } => {
                self.agent = agent.clone();
                self.mode = *mode;
            }
            Event::TurnStarted { task, .. } => {
                if self.turn.is_some() {
                    self.end_turn(env, "superseded", None, out);
                }
                self.start_turn(env, Some(task));
            }
            Event::UserReplied { text } => {
                if let Some(mut w) = self.wait.take() {
                    if self.opts.capture_content {
                        let t = self.content(text.clone());
                        w.span.attributes.push(("weft.wait.reply", t.into()));
                    }
                    Self::close(w, env, out);
                }
                if self.turn.is_none() {
                    self.start_turn(env, Some(text));
                }
            }
            Event::WaitingForUser { request } => {
                let parent = self.turn_id();
                // The wait belongs to the turn's trace (opened before the turn's trace is left).
                let mut w = self.open(env, "wait", "weft.wait".to_owned(), parent);
                self.end_turn(env, "waiting", None, out);
                w.span
                    .attributes
                    .push(("weft.wait.kind", request.kind.as_str().into()));
                if let Some(step) = &request.step {
                    w.span
                        .attributes
                        .push(("weft.step.id", step.as_str().into()));
                }
                self.wait = Some(w);
            }
            Event::EvaluationResult {
                name,
                score,
                label,
                explanation,
                run,
            } => {
                // OpenTelemetry's `gen_ai.evaluation.result`, as a span of no length under the
                // turn it judged (the explanation is content: it may quote the answer).
                let mut o = self.open(
                    env,
                    "evaluation",
                    "gen_ai.evaluation.result".to_owned(),
                    self.turn_id().or(self.last_turn),
                );
                let a = &mut o.span.attributes;
                a.push(("gen_ai.evaluation.name", name.as_str().into()));
                a.push(("gen_ai.evaluation.score.value", Attr::F64(*score)));
                a.push(("gen_ai.evaluation.score.label", label.as_str().into()));
                a.push(("weft.evaluation.run", run.as_str().into()));
                if self.opts.capture_content
                    && let Some(e) = explanation
                {
                    let e = self.content(e.clone());
                    o.span
                        .attributes
                        .push(("gen_ai.evaluation.explanation", e.into()));
                }
                Self::close(o, env, out);
            }
            Event::RunFinished { status, error, .. } => {
                let (outcome, err) = match status {
                    RunStatus::Completed => ("completed", None),
                    RunStatus::Failed => ("failed", Some("run_failed".to_owned())),
                };
                self.ensure_turn(env);
                if self.opts.capture_content
                    && let (Some(e), Some(t)) = (error, self.turn.as_mut())
                {
                    let mut e = e.clone();
                    if let Some(r) = &self.opts.redact {
                        r(&mut e);
                    }
                    t.span.attributes.push(("weft.error.message", e.into()));
                }
                self.end_turn(env, outcome, err, out);
            }
            Event::RunStarted {
                traceparent: Some(tp),
                after,
                ..
            } => {
                // A header that is not a valid trace context was refused when it was received;
                // one read back that is not is ignored, as W3C Trace Context asks.
                let parent = crate::export::parse_traceparent(tp);
                match (self.turn.as_mut(), parent) {
                    // A new session's marker follows the turn it starts, in the same write:
                    // that turn (nothing in it opened yet) moves to the caller's trace.
                    (Some(t), Some((trace, span))) if t.span.first_seq > *after => {
                        t.span.trace_id = trace;
                        t.span.parent = Some(span);
                        t.span.parent_remote = true;
                        self.turn_trace = trace;
                    }
                    _ => self.run_parent = parent,
                }
            }
            _ => return false,
        }
        true
    }

    /// Model calls and what they decide: chat spans, reviews, replans. Whether the event was one of these.
    fn model_event(&mut self, env: &Envelope, out: &mut Vec<Span>) -> bool {
        match &env.event {
            Event::ModelReplied {
                purpose,
                step,
                reply,
            } => {
                self.ensure_turn(env);
                self.turn_usage.add(&reply.usage);
                let mut o = self.model_span(env, *purpose, step.as_deref(), &reply.model);
                let a = &mut o.span.attributes;
                if !reply.model.is_empty() {
                    a.push(("gen_ai.response.model", reply.model.as_str().into()));
                }
                if let Some(f) = &reply.finish_reason {
                    a.push((
                        "gen_ai.response.finish_reasons",
                        Attr::StrList(vec![f.clone()]),
                    ));
                }
                usage_attrs(a, &reply.usage);
                if self.opts.capture_content {
                    let mut parts = Vec::new();
                    if !reply.content.is_empty() {
                        parts.push(serde_json::json!({"type": "text", "content": reply.content}));
                    }
                    for c in &reply.tool_calls {
                        parts.push(serde_json::json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}));
                    }
                    let msg = serde_json::json!([{"role": "assistant", "parts": parts, "finish_reason": reply.finish_reason}]);
                    let text = self.content(msg.to_string());
                    o.span
                        .attributes
                        .push(("gen_ai.output.messages", text.into()));
                }
                Self::close(o, env, out);
            }
            Event::ModelFailed {
                purpose,
                error,
                usage,
                ..
            } => {
                self.ensure_turn(env);
                self.turn_usage.add(usage);
                let mut o = self.model_span(env, *purpose, None, "");
                usage_attrs(&mut o.span.attributes, usage);
                o.span.error = Some("model_failed".to_owned());
                o.span
                    .attributes
                    .push(("weft.error.message", self.content(error.clone()).into()));
                Self::close(o, env, out);
            }
            Event::ReviewDecided { decision, reason } => {
                let mut o = match self.review.take() {
                    Some(o) => o,
                    None => {
                        let p = self.turn_id();
                        self.open(env, "review", "weft.review".to_owned(), p)
                    }
                };
                o.span
                    .attributes
                    .push(("weft.review.decision", review_name(*decision).into()));
                let replan = *decision == ReviewDecision::Replan;
                if self.opts.capture_content {
                    let r = self.content(reason.clone());
                    o.span.attributes.push(("weft.review.reason", r.into()));
                }
                Self::close(o, env, out);
                if replan {
                    let p = self.turn_id();
                    self.replan = Some(self.open(env, "replan", "weft.replan".to_owned(), p));
                }
            }
            Event::PlanRevised { plan, .. } => {
                let mut o = match self.replan.take() {
                    Some(o) => o,
                    None => {
                        let p = self.turn_id();
                        self.open(env, "replan", "weft.replan".to_owned(), p)
                    }
                };
                o.span
                    .attributes
                    .push(("weft.plan.steps", Attr::from(plan.steps.len() as u64)));
                Self::close(o, env, out);
            }
            _ => return false,
        }
        true
    }

    /// A plan's waves, steps and fan-outs. Whether the event was one of these.
    fn plan_event(&mut self, env: &Envelope, out: &mut Vec<Span>) -> bool {
        match &env.event {
            Event::WaveStarted { wave, steps } => {
                self.ensure_turn(env);
                if let Some(w) = self.wave.take() {
                    Self::close(w, env, out);
                }
                let p = self.turn_id();
                let mut o = self.open(env, "wave", format!("weft.wave {wave}"), p);
                o.span.attributes.push(("weft.wave", (*wave).into()));
                o.span
                    .attributes
                    .push(("weft.wave.steps", Attr::from(steps.len() as u64)));
                self.wave = Some(o);
            }
            Event::WaveFinished { .. } => {
                if let Some(w) = self.wave.take() {
                    Self::close(w, env, out);
                }
            }
            Event::StepStarted { step, attempt } => {
                self.ensure_turn(env);
                if let Some(o) = self.steps.remove(step) {
                    Self::close(o, env, out);
                }
                let o = self.step_span(env, step, Some(*attempt));
                self.steps.insert(step.clone(), o);
            }
            Event::FanOutStarted { step, items } => {
                let p = self
                    .steps
                    .get(step)
                    .map(|o| o.span.span_id)
                    .or_else(|| self.turn_id());
                let mut o = self.open(env, "fan_out", format!("weft.fan_out {step}"), p);
                o.span
                    .attributes
                    .push(("weft.step.id", step.as_str().into()));
                o.span
                    .attributes
                    .push(("weft.fan_out.items", Attr::from(*items as u64)));
                self.fan_outs.insert(step.clone(), o);
            }
            Event::StepCompleted { step, .. } => self.end_step(env, step, "completed", None, out),
            Event::StepFailed {
                step,
                error,
                handled,
            } => {
                let status = if *handled { "failed_handled" } else { "failed" };
                self.end_step(env, step, status, Some(error.kind.clone()), out);
            }
            Event::StepRetrying { step, error, .. } => {
                self.end_step(env, step, "retrying", Some(error.kind.clone()), out);
            }
            Event::StepSkipped { step, reason } => {
                let mut o = self.step_span(env, step, None);
                o.span
                    .attributes
                    .push(("weft.step.status", "skipped".into()));
                o.span
                    .attributes
                    .push(("weft.step.skip_reason", reason.as_str().into()));
                Self::close(o, env, out);
            }
            _ => return false,
        }
        true
    }

    /// Tool calls: execute_tool spans. Whether the event was one of these.
    fn tool_event(&mut self, env: &Envelope, out: &mut Vec<Span>) -> bool {
        match &env.event {
            Event::ToolCallStarted {
                call_id,
                step,
                item,
                tool,
                args,
                attempt,
                idempotency_key,
                untrusted_from,
            } => {
                self.ensure_turn(env);
                let parent = self.call_parent(step.as_deref(), item.is_some());
                let mut o = self.open(env, "tool", format!("execute_tool {tool}"), parent);
                let a = &mut o.span.attributes;
                a.push(("gen_ai.operation.name", "execute_tool".into()));
                a.push(("gen_ai.tool.name", tool.as_str().into()));
                a.push(("gen_ai.tool.call.id", call_id.as_str().into()));
                a.push(("gen_ai.tool.type", "function".into()));
                a.push(("weft.attempt", (*attempt).into()));
                a.push(("weft.idempotency_key", idempotency_key.as_str().into()));
                if let Some(s) = step {
                    a.push(("weft.step.id", s.as_str().into()));
                }
                if let Some(i) = item {
                    a.push(("weft.item", Attr::from(*i as u64)));
                }
                if !untrusted_from.is_empty() {
                    a.push(("weft.untrusted_from", untrusted_from.join(",").into()));
                }
                if let Some(w) = &self.wave
                    && step.is_some()
                    && let Some(Attr::Int(n)) = w.span.attr("weft.wave")
                {
                    o.span.attributes.push(("weft.wave", Attr::Int(*n)));
                }
                if self.opts.capture_content {
                    let text = self.content(args.to_string());
                    o.span
                        .attributes
                        .push(("gen_ai.tool.call.arguments", text.into()));
                }
                self.calls.insert(call_id.clone(), o);
            }
            Event::ToolCallFinished {
                call_id,
                outcome,
                duration_ms,
            } => {
                let Some(mut o) = self.calls.remove(call_id) else {
                    return true;
                };
                let dur = i64::try_from(*duration_ms).unwrap_or(i64::MAX);
                // A start stored with its outcome (a staged start) carries the outcome's time.
                o.span.start_ms = o.span.start_ms.min(env.ts.saturating_sub(dur));
                o.span
                    .attributes
                    .push(("weft.tool.duration_ms", (*duration_ms).into()));
                match outcome {
                    ToolOutcome::Ok { output } => {
                        if self.opts.capture_content {
                            let text = self.content(value_text(output));
                            o.span
                                .attributes
                                .push(("gen_ai.tool.call.result", text.into()));
                        }
                    }
                    ToolOutcome::Error { error } => {
                        o.span.error = Some(error.kind.clone());
                        if self.opts.capture_content {
                            let text = self.content(error.message.clone());
                            o.span.attributes.push(("weft.error.message", text.into()));
                        }
                    }
                }
                Self::close(o, env, out);
            }
            Event::ToolCallBlocked {
                step,
                call_id,
                tool,
                reason,
                repeats,
                ..
            } => {
                self.ensure_turn(env);
                let parent = self.call_parent(step.as_deref(), false);
                let mut o = self.open(env, "tool", format!("execute_tool {tool}"), parent);
                let a = &mut o.span.attributes;
                a.push(("gen_ai.operation.name", "execute_tool".into()));
                a.push(("gen_ai.tool.name", tool.as_str().into()));
                if let Some(c) = call_id {
                    a.push(("gen_ai.tool.call.id", c.as_str().into()));
                }
                a.push(("weft.tool.blocked", Attr::Bool(true)));
                if let Some(earlier) = repeats {
                    a.push(("weft.tool.repeats", earlier.as_str().into()));
                }
                if self.opts.capture_content {
                    let r = self.content(reason.clone());
                    o.span.attributes.push(("weft.error.message", r.into()));
                }
                o.span.error = Some("blocked".to_owned());
                Self::close(o, env, out);
            }
            _ => return false,
        }
        true
    }

    /// Workflow steps and transitions, and the end of an execution. Whether the event was one of these.
    fn workflow_event(&mut self, env: &Envelope, out: &mut Vec<Span>) -> bool {
        match &env.event {
            Event::WorkflowStepEntered { step, .. } => {
                self.ensure_turn(env);
                if let Some(o) = self.workflow_step.take() {
                    Self::close(o, env, out);
                }
                let p = self.turn_id();
                let mut o = self.open(
                    env,
                    "workflow_step",
                    format!("weft.workflow_step {step}"),
                    p,
                );
                o.span
                    .attributes
                    .push(("weft.step.id", step.as_str().into()));
                self.workflow_step = Some(o);
            }
            Event::WorkflowTransition { from, to, .. } => {
                if let Some(mut o) = self.workflow_step.take() {
                    if o.span.str_attr("weft.step.id") == Some(from.as_str()) {
                        o.span
                            .attributes
                            .push(("weft.workflow.next", to.as_str().into()));
                        Self::close(o, env, out);
                    } else {
                        self.workflow_step = Some(o);
                    }
                }
            }
            Event::WorkflowOutputRejected { .. } | Event::ModelReplyRejected { .. } => {}
            Event::ExecutionFinished { .. } => {
                if let Some(w) = self.wave.take() {
                    Self::close(w, env, out);
                }
            }
            _ => return false,
        }
        true
    }

    fn model_span(
        &mut self,
        env: &Envelope,
        purpose: Purpose,
        step: Option<&str>,
        model: &str,
    ) -> Open {
        let parent = match purpose {
            Purpose::Review => {
                if self.review.is_none() {
                    let p = self.turn_id();
                    let mut r = self.open(env, "review", "weft.review".to_owned(), p);
                    r.span.start_ms = self.last_ts.min(env.ts);
                    self.review = Some(r);
                }
                self.review.as_ref().map(|o| o.span.span_id)
            }
            Purpose::Plan if self.replan.is_some() => self.replan.as_ref().map(|o| o.span.span_id),
            Purpose::Execute => step
                .and_then(|s| self.steps.get(s))
                .map(|o| o.span.span_id)
                .or_else(|| self.turn_id()),
            Purpose::Workflow => self
                .workflow_step
                .as_ref()
                .map(|o| o.span.span_id)
                .or_else(|| self.turn_id()),
            _ => self.turn_id(),
        };
        let scripted = model.is_empty() || model.starts_with("scripted");
        let name = if model.is_empty() {
            "chat".to_owned()
        } else {
            format!("chat {model}")
        };
        let mut o = self.open(env, "model", name, parent);
        // The call began when the event before its reply was recorded.
        o.span.start_ms = self.last_ts.min(env.ts);
        if self.last_ts == 0 {
            o.span.start_ms = env.ts;
        }
        o.span.kind = if scripted {
            Kind::Internal
        } else {
            Kind::Client
        };
        let a = &mut o.span.attributes;
        a.push(("gen_ai.operation.name", "chat".into()));
        let provider = match (&self.opts.provider, scripted) {
            (Some(p), _) => Some(p.clone()),
            (None, true) => Some("weft.scripted".to_owned()),
            (None, false) => None,
        };
        if let Some(p) = provider {
            let key = if self.opts.latest {
                "gen_ai.provider.name"
            } else {
                "gen_ai.system"
            };
            a.push((key, p.into()));
        }
        if !model.is_empty() {
            a.push(("gen_ai.request.model", model.into()));
        }
        a.push(("weft.purpose", purpose.as_str().into()));
        if let Some(s) = step {
            a.push(("weft.step.id", s.into()));
        }
        o
    }

    fn step_span(&self, env: &Envelope, step: &str, attempt: Option<u32>) -> Open {
        let p = self
            .wave
            .as_ref()
            .map(|o| o.span.span_id)
            .or_else(|| self.turn_id());
        let mut o = self.open(env, "step", format!("weft.step {step}"), p);
        o.span.attributes.push(("weft.step.id", step.into()));
        if let Some(a) = attempt {
            o.span.attributes.push(("weft.attempt", a.into()));
        }
        if let Some(w) = &self.wave
            && let Some(Attr::Int(n)) = w.span.attr("weft.wave")
        {
            o.span.attributes.push(("weft.wave", Attr::Int(*n)));
        }
        o
    }

    fn end_step(
        &mut self,
        env: &Envelope,
        step: &str,
        status: &str,
        error: Option<String>,
        out: &mut Vec<Span>,
    ) {
        if let Some(f) = self.fan_outs.remove(step) {
            Self::close(f, env, out);
        }
        if let Some(mut o) = self.steps.remove(step) {
            o.span.attributes.push(("weft.step.status", status.into()));
            if status != "failed_handled" {
                o.span.error = error;
            }
            Self::close(o, env, out);
        }
    }

    fn call_parent(&self, step: Option<&str>, item: bool) -> Option<[u8; 8]> {
        if let Some(s) = step {
            if item && let Some(f) = self.fan_outs.get(s) {
                return Some(f.span.span_id);
            }
            if let Some(o) = self.steps.get(s) {
                return Some(o.span.span_id);
            }
        }
        self.workflow_step
            .as_ref()
            .map(|o| o.span.span_id)
            .or_else(|| self.turn_id())
    }
}

fn usage_attrs(a: &mut Vec<(&'static str, Attr)>, u: &Usage) {
    a.push(("gen_ai.usage.input_tokens", u.input_tokens.into()));
    a.push(("gen_ai.usage.output_tokens", u.output_tokens.into()));
    if u.cache_read_tokens > 0 {
        a.push((
            "gen_ai.usage.cache_read.input_tokens",
            u.cache_read_tokens.into(),
        ));
    }
    if u.cache_write_tokens > 0 {
        a.push((
            "gen_ai.usage.cache_creation.input_tokens",
            u.cache_write_tokens.into(),
        ));
    }
    if let Some(c) = u.cost_usd {
        a.push(("weft.cost_usd", Attr::F64(c)));
    }
    if u.estimated {
        a.push(("weft.usage.estimated", Attr::Bool(true)));
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Plan => "plan",
        Mode::React => "react",
        Mode::Workflow => "workflow",
    }
}

fn review_name(d: ReviewDecision) -> &'static str {
    match d {
        ReviewDecision::Continue => "CONTINUE",
        ReviewDecision::Replan => "REPLAN",
        ReviewDecision::FinalResponse => "FINAL_RESPONSE",
        ReviewDecision::AskUser => "ASK_USER",
        ReviewDecision::CannotComplete => "CANNOT_COMPLETE",
    }
}
