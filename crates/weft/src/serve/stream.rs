//! A run's events as server-sent events, in the stream modes LangGraph clients ask for:
//! - `values`: the thread's values after each step that changes them;
//! - `updates`: what each step added (`{"agent": ...}`, `{"tools": ...}`, `{"__interrupt__": ...}`);
//! - `messages` / `messages-tuple`: the model's text as it is generated, piece by piece
//!   (`AIMessageChunk`s, live only: pieces are never stored), or, for a stream that saw none
//!   (a replay), the answer as one message;
//! - `custom`: weft's own typed events, as stored.
//!
//! Every event from the session's log carries the log's sequence number as its SSE id, so a
//! client that reconnects with `Last-Event-ID` gets exactly the events after it. The stream
//! begins with `metadata` (the run's id) and ends with `end` (or `error` when the run failed).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::Sse as SseResponse;
use axum::response::sse::{Event as Sse, KeepAlive};
use futures::Stream;
use serde_json::{Value, json};
use weft_core::{Envelope, Event, State};
use weft_store::Store;

use super::Shared;
use super::runs::{Run, RunStatus};
use super::threads;

/// The modes a request asks for (default `values`).
pub fn modes(v: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    if out.is_empty() {
        out.push("values".into());
    }
    out
}

/// How a run's events are written: LangGraph's stream modes, or AG-UI events (`agui.rs`).
pub enum Format {
    LangGraph(Vec<String>),
    AgUi { thread_id: String, run_id: String },
}

impl Format {
    fn prologue(&self, run: &Run) -> Vec<Sse> {
        match self {
            Self::LangGraph(_) => vec![part(
                "metadata",
                &json!({"run_id": run.run_id, "attempt": 1}),
                None,
            )],
            Self::AgUi { thread_id, run_id } => vec![super::agui::run_started(thread_id, run_id)],
        }
    }

    fn parts(
        &self,
        env: &Envelope,
        st: &State,
        streamed: bool,
        out: &mut std::collections::VecDeque<Sse>,
    ) {
        match self {
            Self::LangGraph(modes) => parts(modes, env, st, streamed, out),
            Self::AgUi { .. } => super::agui::parts(env, st, streamed, out),
        }
    }

    /// Whether this stream sends the model's text as it comes.
    fn streams_text(&self) -> bool {
        match self {
            Self::LangGraph(modes) => modes
                .iter()
                .any(|m| m == "messages" || m == "messages-tuple"),
            Self::AgUi { .. } => true,
        }
    }

    /// A piece of the model's text; `first`: the first piece this stream sends.
    fn text(&self, st: &State, text: &str, first: bool) -> Vec<Sse> {
        match self {
            Self::LangGraph(_) => vec![part("messages", &chunk(st, text), None)],
            Self::AgUi { .. } => super::agui::text(st, text, first),
        }
    }

    /// The last events: the run ended with `status` (`state`: the session after it), or failed
    /// with `error`.
    fn epilogue(
        &self,
        run: &Run,
        state: Option<&State>,
        status: RunStatus,
        error: Option<String>,
    ) -> Vec<Sse> {
        match self {
            Self::LangGraph(_) => vec![match error {
                Some(message) => part(
                    "error",
                    &json!({"error": "RunError", "message": message}),
                    None,
                ),
                None => part(
                    "end",
                    &json!({"run_id": run.run_id, "status": status.as_str()}),
                    None,
                ),
            }],
            Self::AgUi { thread_id, run_id } => {
                super::agui::finished(thread_id, run_id, state, error)
            }
        }
    }
}

pub(super) fn part(event: &str, data: &Value, id: Option<u64>) -> Sse {
    let e = Sse::default().event(event).data(data.to_string());
    match id {
        Some(seq) => e.id(seq.to_string()),
        None => e,
    }
}

/// A piece of the agent's text as LangGraph's `messages` mode sends it: the chunk and its
/// metadata.
fn chunk(st: &State, text: &str) -> Value {
    json!([
        {"type": "AIMessageChunk", "content": text, "id": format!("{}-answer-{}", st.session_id, st.memory.len())},
        {"langgraph_node": "agent", "run_attempt": 1},
    ])
}

/// The SSE parts one stored event makes, after it was applied to `st`.
fn parts(
    modes: &[String],
    env: &Envelope,
    st: &State,
    streamed: bool,
    out: &mut std::collections::VecDeque<Sse>,
) {
    let id = Some(env.seq);
    let changes_values = matches!(
        env.event,
        Event::TurnStarted { .. }
            | Event::UserReplied { .. }
            | Event::StepCompleted { .. }
            | Event::ToolCallFinished { .. }
            | Event::WaitingForUser { .. }
            | Event::RunFinished { .. }
    );
    let update = match &env.event {
        Event::ToolCallFinished {
            call_id, outcome, ..
        } => Some(json!({"tools": {"call_id": call_id, "outcome": outcome}})),
        Event::StepCompleted { step, output, .. } => {
            Some(json!({ step.clone(): {"output": output} }))
        }
        Event::WaitingForUser { request } => {
            Some(json!({"__interrupt__": [threads::interrupt(st, request)]}))
        }
        Event::RunFinished { answer, error, .. } => Some(json!({"agent": {
            "answer": answer, "error": error,
            "messages": answer.iter().map(|a| json!({"type": "ai", "content": a})).collect::<Vec<_>>(),
        }})),
        _ => None,
    };
    for mode in modes {
        match mode.as_str() {
            "values" if changes_values => out.push_back(part("values", &threads::values(st), id)),
            "updates" => {
                if let Some(u) = &update {
                    out.push_back(part("updates", u, id));
                }
            }
            // The text came piece by piece already; a stream that saw none gets it whole.
            "messages" | "messages-tuple" if !streamed => {
                if let Event::RunFinished {
                    answer: Some(a), ..
                } = &env.event
                {
                    out.push_back(part("messages", &chunk(st, a), id));
                }
            }
            "custom" | "events" | "debug" => {
                if let Ok(v) = serde_json::to_value(env) {
                    out.push_back(part("custom", &v, id));
                }
            }
            _ => {}
        }
    }
}

/// Where a run stands in its session's log: whether its marker (`RunStarted`) has been applied,
/// and whether the session has been running since. The run has ended once it then stops
/// running.
#[derive(Default)]
struct Progress {
    marker_seen: bool,
    ran: bool,
}

impl Progress {
    /// After `e` was applied, leaving the session at `status`.
    fn note(&mut self, e: &Event, run_id: &str, status: weft_core::SessionStatus) {
        self.marker_seen |= matches!(e, Event::RunStarted { run_id: r, .. } if r == run_id);
        self.ran |= self.marker_seen && status == weft_core::SessionStatus::Running;
    }

    fn ended(&self, status: weft_core::SessionStatus) -> bool {
        self.marker_seen && self.ran && status != weft_core::SessionStatus::Running
    }
}

/// The run's stream: events after `after`, live until the run has ended. The format's first
/// events (`metadata`, `RUN_STARTED`) when `announce` (a new run's stream; a reconnection goes
/// on where it stopped).
pub fn sse(
    app: Shared,
    run: Arc<Run>,
    after: u64,
    format: Format,
    announce: bool,
) -> SseResponse<impl Stream<Item = Result<Sse, Infallible>>> {
    struct Cursor {
        app: Shared,
        run: Arc<Run>,
        format: Format,
        state: Option<State>,
        seq: u64,
        progress: Progress,
        /// The model's text as it comes (`messages` mode of a live stream), and whether any came.
        texts: Option<tokio::sync::broadcast::Receiver<String>>,
        streamed: bool,
        queue: std::collections::VecDeque<Sse>,
        done: bool,
    }
    let mut first = std::collections::VecDeque::new();
    if announce {
        first.extend(format.prologue(&run));
    }
    let texts = format
        .streams_text()
        .then(|| app.runs.texts(&run.thread_id).subscribe());
    let cursor = Cursor {
        texts,
        streamed: false,
        app,
        run,
        format,
        state: None,
        seq: after,
        progress: Progress::default(),
        queue: first,
        done: false,
    };
    impl Cursor {
        /// The run's events are all in the log: after its marker the session ran, then stopped.
        fn ended_in_log(&self) -> bool {
            self.state
                .as_ref()
                .is_some_and(|s| self.progress.ended(s.status))
        }
    }
    let stream = futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(e) = c.queue.pop_front() {
                return Some((Ok(e), c));
            }
            if c.done {
                return None;
            }
            let waker = c.app.runs.waker(&c.run.thread_id);
            // Registered before looking, so that an event stored meanwhile wakes the wait.
            let notified = waker.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (status, end) = *c.run.status.borrow();
            // A queued run has not begun: its events come after whatever runs before it.
            if status == RunStatus::Pending && c.state.is_none() {
                let _ = tokio::time::timeout(Duration::from_millis(250), &mut notified).await;
                continue;
            }
            // The state before the first event to send, folded once.
            if c.state.is_none() {
                c.seq = c.seq.max(c.run.start_seq());
                match c.app.store.load(&c.run.thread_id).await {
                    Ok((_, log)) => {
                        let mut st = State::new();
                        for e in log.iter().take_while(|e| e.seq <= c.seq) {
                            st.apply(&e.event);
                            c.progress.note(&e.event, &c.run.run_id, st.status);
                        }
                        c.state = Some(st);
                    }
                    Err(e) => {
                        c.queue.push_back(part(
                            "error",
                            &json!({"error": "StoreError", "message": e.to_string()}),
                            None,
                        ));
                        c.done = true;
                        continue;
                    }
                }
            }
            match c.app.store.events_after(&c.run.thread_id, c.seq).await {
                Ok(events) if !events.is_empty() => {
                    // Text generated before these events were stored goes first (a reply's
                    // pieces are all sent before the reply is stored).
                    if let (Some(rx), Some(st)) = (c.texts.as_mut(), c.state.as_ref()) {
                        while let Ok(text) = rx.try_recv() {
                            c.queue.extend(c.format.text(st, &text, !c.streamed));
                            c.streamed = true;
                        }
                    }
                    if let Some(st) = c.state.as_mut() {
                        for env in &events {
                            if c.progress.ended(st.status) {
                                // The run ended; what follows belongs to a later run.
                                break;
                            }
                            st.apply(&env.event);
                            c.progress.note(&env.event, &c.run.run_id, st.status);
                            c.format.parts(env, st, c.streamed, &mut c.queue);
                            c.seq = env.seq;
                        }
                    }
                    if !c.ended_in_log() {
                        continue;
                    }
                    // The run ended within this batch: finish below.
                }
                Ok(_) => {}
                Err(e) => {
                    c.queue.push_back(part(
                        "error",
                        &json!({"error": "StoreError", "message": e.to_string()}),
                        None,
                    ));
                    c.done = true;
                    continue;
                }
            }
            if crate::interrupt::is_requested() && !c.ended_in_log() {
                // The server stops: the client reconnects (to the next server) and goes on.
                return None;
            }
            if c.ended_in_log() || (status.is_final() && c.seq >= end) {
                let failed = c
                    .state
                    .as_ref()
                    .is_some_and(|s| s.status == weft_core::SessionStatus::Failed);
                let error =
                    (failed || (!c.ended_in_log() && status == RunStatus::Error)).then(|| {
                        c.state
                            .as_ref()
                            .and_then(|s| s.error.clone())
                            .unwrap_or_else(|| "the run failed".into())
                    });
                let status = match c.state.as_ref().map(|s| s.status) {
                    Some(weft_core::SessionStatus::WaitingForUser) => RunStatus::Interrupted,
                    Some(weft_core::SessionStatus::Completed) => RunStatus::Success,
                    _ => status,
                };
                let last = c.format.epilogue(&c.run, c.state.as_ref(), status, error);
                c.queue.extend(last);
                c.done = true;
                continue;
            }
            let wait = tokio::time::timeout(Duration::from_millis(250), &mut notified);
            match c.texts.as_mut() {
                Some(rx) => {
                    tokio::select! {
                        _ = wait => {}
                        got = rx.recv() => {
                            if let (Ok(text), Some(st)) = (got, c.state.as_ref()) {
                                c.queue.extend(c.format.text(st, &text, !c.streamed));
                                c.streamed = true;
                            }
                        }
                    }
                }
                None => {
                    let _ = wait.await;
                }
            }
        }
    });
    SseResponse::new(stream).keep_alive(KeepAlive::default())
}
