//! A run's events as server-sent events, in the stream modes LangGraph clients ask for:
//! - `values`: the thread's values after each step that changes them;
//! - `updates`: what each step added (`{"agent": ...}`, `{"tools": ...}`, `{"__interrupt__": ...}`);
//! - `messages` / `messages-tuple`: the model's text as it is generated, piece by piece
//!   (`AIMessageChunk`s, live only: pieces are never stored), or, for a stream that saw none
//!   (a replay), the answer as one message;
//! - `custom`: weft's own typed events, as stored;
//! - `tasks`: each task (a model turn `agent`, a tool call `tools`, a plan step) when it starts
//!   (`{id, name, input, triggers}`) and when it ends (`{id, name, error, result, interrupts}`,
//!   the same id);
//! - `checkpoints`: the thread's checkpoint after each event that changed its values (`{config,
//!   parent_config, values, metadata, next, tasks}`), whose id the thread's history and state
//!   give too (`checkpoints.rs` says what they are).
//!
//! Every part has an SSE id of its own that says where it stands ([`Position`]): `S-K` is part K
//! of the session's event S, `S-tN` a piece of the model's text that ends at byte N of the text
//! generated after event S. K is the part's place among the event's parts, which is the order
//! they are sent in: 0 values, 1 updates, 2 messages, 3 custom (each mode's place in
//! [`MODES`]), then the `tasks` parts of the tasks that ended at the event (from 4), its
//! `checkpoints` part (104) and the `tasks` parts of the tasks that started at it (from 105).
//! A place does not depend on the modes asked for. A client that reconnects with
//! `Last-Event-ID` gets exactly the parts after it, in any mix of modes, and the rest of a text
//! it had begun to receive (not the whole text again). The stream begins with `metadata` (the
//! run's id) and ends with `end` (or `error` when the run failed).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::Sse as SseResponse;
use axum::response::sse::{Event as Sse, KeepAlive};
use futures::{FutureExt, Stream};
use serde_json::{Value, json};
use weft_core::state::OpenCall;
use weft_core::{Envelope, Event, State};
use weft_store::SessionLog;

use super::checkpoints::{self, Lineage, Noted};
use super::registry::{Piece, Run, RunStatus};
use super::{ApiError, Shared};
use super::{messages, threads};

/// LangGraph's stream modes. weft sends `values`, `updates`, `messages` (as `messages-tuple`),
/// `custom` (weft's typed events, which `events` and `debug` also get), `tasks` and
/// `checkpoints` (in LangGraph's shapes).
const KNOWN: [&str; 9] = [
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "events",
    "debug",
    "tasks",
    "checkpoints",
];

/// The modes a request's `stream_mode` asks for (a mode or a list; default `values`), or why
/// they cannot be streamed.
pub(crate) fn modes(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<String> = Vec::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => out.push(s.clone()),
        Some(Value::Array(a)) => {
            for m in a {
                let Some(m) = m.as_str() else {
                    return Err(ApiError::bad(format!(
                        "stream_mode: {m} is not a mode; give a mode or a list of them, e.g. \
                         [\"values\", \"messages-tuple\"]"
                    )));
                };
                out.push(m.to_owned());
            }
        }
        Some(other) => {
            return Err(ApiError::bad(format!(
                "stream_mode: {other} is not a mode; give a mode or a list of them, e.g. \
                 [\"values\", \"messages-tuple\"]"
            )));
        }
    }
    if let Some(m) = out.iter().find(|m| !KNOWN.contains(&m.as_str())) {
        return Err(ApiError::bad(format!(
            "stream_mode `{m}` is not a stream mode; use values, updates, messages-tuple, custom, \
             tasks or checkpoints"
        )));
    }
    if out.is_empty() {
        out.push("values".into());
    }
    Ok(out)
}

/// The modes of a join's query string: `stream_mode` repeated (`?stream_mode=values&
/// stream_mode=updates`, as the Python SDK sends them), or a JSON list (`?stream_mode=
/// ["values","updates"]`, as the JavaScript SDK sends them). An empty `stream_mode=` (the
/// Python SDK's `join_stream` with its default arguments) asks for nothing: the default,
/// `values`.
pub(crate) fn query_modes(query: &[(String, String)]) -> Result<Vec<String>, ApiError> {
    let mut asked = Vec::new();
    for (_, v) in query
        .iter()
        .filter(|(k, v)| k == "stream_mode" && !v.is_empty())
    {
        match serde_json::from_str::<Value>(v) {
            Ok(Value::Array(a)) => asked.extend(a),
            _ => asked.push(Value::String(v.clone())),
        }
    }
    modes(Some(&Value::Array(asked)))
}

/// Where a client stands in a run's stream, read from its `Last-Event-ID`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Position {
    /// The session's event.
    pub seq: u64,
    /// The last of the event's parts the client has (`None`: all of them).
    pub part: Option<u8>,
    /// Bytes of the text generated after the event the client has.
    pub text: usize,
}

impl Position {
    /// After every part of event `seq`.
    pub(crate) fn after(seq: u64) -> Self {
        Self {
            seq,
            part: None,
            text: 0,
        }
    }

    /// A `Last-Event-ID`: `S`, `S-K` or `S-tN`; `None` for anything else.
    pub(crate) fn parse(id: &str) -> Option<Self> {
        let id = id.trim();
        let Some((seq, rest)) = id.split_once('-') else {
            return id.parse().ok().map(Self::after);
        };
        let seq = seq.parse().ok()?;
        match rest.strip_prefix('t') {
            Some(n) => Some(Self {
                seq,
                part: None,
                text: n.parse().ok()?,
            }),
            None => Some(Self {
                seq,
                part: Some(rest.parse().ok()?),
                text: 0,
            }),
        }
    }
}

/// How long a stream waits for a store that is away before it ends for its client to
/// reconnect: two lease times, by when the run has moved to a process that reaches the store,
/// if this one does not.
fn unreachable_for() -> Duration {
    weft_store::lease_time() * 2
}

/// The stream modes of an event's first parts, in the order they are sent (part K is sent to
/// the modes of `MODES[K]`); the `tasks` and `checkpoints` parts follow at their own places.
const MODES: [&[&str]; 4] = [
    &["values"],
    &["updates"],
    &["messages", "messages-tuple"],
    &["custom", "events", "debug"],
];

/// The places of an event's `tasks` parts for tasks that ended at it (`TASK_ENDS + i`), of its
/// `checkpoints` part, and of its `tasks` parts for tasks that started at it; at most
/// [`PER_EVENT`] of each (more end at one event only when a run stops with that many plan steps
/// running: those get no end part).
const TASK_ENDS: usize = 4;
const CHECKPOINT: usize = TASK_ENDS + PER_EVENT;
const TASK_STARTS: usize = CHECKPOINT + 1;
const PER_EVENT: usize = 100;

/// How a run's events are written: LangGraph's stream modes, or AG-UI events (`agui.rs`).
pub(crate) enum Format {
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

    /// The parts of a stored event; `skip`: the client has its parts up to this one;
    /// `text_sent`: bytes of the answer's text the client has; `call`: the call a
    /// `tool_call_finished` ends; `noted`: what the event did to the thread's tasks.
    fn parts(
        &self,
        event: (&Envelope, Option<&OpenCall>, &Noted),
        st: &State,
        (text_sent, skip): (usize, Option<u8>),
        out: &mut std::collections::VecDeque<Sse>,
    ) {
        let env = event.0;
        match self {
            Self::LangGraph(modes) => parts(modes, event, st, (text_sent, skip), out),
            Self::AgUi { .. } => super::agui::parts(env, st, text_sent > 0, out),
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

    /// A piece of the model's text that ends at byte `end` of the text after event `after`;
    /// `first`: the first piece this stream sends.
    fn text(&self, st: &State, text: &str, first: bool, (after, end): (u64, usize)) -> Vec<Sse> {
        match self {
            Self::LangGraph(_) => vec![
                Sse::default()
                    .event("messages")
                    .data(chunk(&messages::reply_id(st), text).to_string())
                    .id(format!("{after}-t{end}")),
            ],
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

pub(super) fn part(event: &str, data: &impl serde::Serialize, id: Option<(u64, usize)>) -> Sse {
    let e = Sse::default()
        .event(event)
        .data(serde_json::to_string(data).unwrap_or_default());
    match id {
        Some((seq, k)) => e.id(format!("{seq}-{k}")),
        None => e,
    }
}

/// A piece of the agent's text as LangGraph's `messages` mode sends it: the chunk (with the id
/// of the message it becomes in the thread's values, `id`) and its metadata.
fn chunk(id: &str, text: &str) -> Value {
    json!([
        {"type": "AIMessageChunk", "content": text, "id": id},
        {"langgraph_node": "agent", "run_attempt": 1},
    ])
}

/// What one stored event changed, as LangGraph's `updates` mode sends it: by node, what it
/// added (`agent`: the model's reply with its tool calls, or the answer; `tools`: a call's
/// result; a plan step's output under its id; `__interrupt__`: a wait). `call`: the call a
/// `tool_call_finished` ends, as it was in flight.
fn update(env: &Envelope, st: &State, call: Option<&OpenCall>) -> Option<Value> {
    match &env.event {
        Event::ModelReplied {
            purpose: weft_core::model::Purpose::React | weft_core::model::Purpose::Workflow,
            ..
        } => messages::calls_message(st).map(|m| json!({"agent": {"messages": [m]}})),
        Event::ToolCallFinished {
            call_id, outcome, ..
        } => {
            let message = messages::result_message(st, call_id).unwrap_or_else(|| {
                let (content, error) = match outcome {
                    weft_core::ToolOutcome::Ok { output } => {
                        (weft_core::model::value_text(output), false)
                    }
                    weft_core::ToolOutcome::Error { error } => {
                        (error.bounded().to_value().to_string(), true)
                    }
                };
                let tool = call.map_or("", |c| c.tool.as_str());
                messages::Message::tool(format!("{call_id}-result"), call_id, tool, &content, error)
            });
            Some(json!({"tools": {"messages": [message]}}))
        }
        Event::StepCompleted { step, output, .. } => {
            Some(json!({ step.clone(): {"output": output} }))
        }
        Event::WaitingForUser { request } => {
            Some(json!({"__interrupt__": [threads::interrupt(st, request)]}))
        }
        Event::RunFinished { answer, error, .. } => {
            let mut agent = serde_json::Map::new();
            let messages: Vec<messages::Message> = answer
                .iter()
                .map(|a| messages::answer_message(st, a))
                .collect();
            agent.insert("messages".into(), json!(messages));
            agent.insert("answer".into(), json!(answer));
            if let Some(e) = error {
                agent.insert("error".into(), json!(e));
            }
            Some(json!({ "agent": agent }))
        }
        _ => None,
    }
}

/// The SSE parts one stored event makes, after it was applied to `st` (`noted`: what it did to
/// the thread's tasks and checkpoints), in the order of their places ([`MODES`], then
/// [`TASK_ENDS`], [`CHECKPOINT`], [`TASK_STARTS`]) and after part `skip`; the answer without
/// its first `text_sent` bytes (sent as it came).
fn parts(
    modes: &[String],
    (env, call, noted): (&Envelope, Option<&OpenCall>, &Noted),
    st: &State,
    (text_sent, skip): (usize, Option<u8>),
    out: &mut std::collections::VecDeque<Sse>,
) {
    let wants = |names: &[&str]| modes.iter().any(|m| names.contains(&m.as_str()));
    let mut send = |k: usize, event: &str, data: &Value| {
        if skip.is_none_or(|s| k > usize::from(s)) {
            out.push_back(part(event, data, Some((env.seq, k))));
        }
    };
    let tasks = wants(&["tasks"]);
    let update = (wants(&["updates"]) || tasks && !noted.ended.is_empty())
        .then(|| update(env, st, call))
        .flatten();
    for (k, names) in MODES.iter().enumerate() {
        if !wants(names) {
            continue;
        }
        match k {
            0 if checkpoints::is_checkpoint(&env.event) => {
                send(k, "values", &json!(threads::values(st)))
            }
            1 => {
                if let Some(u) = &update {
                    send(k, "updates", u);
                }
            }
            // What of the answer did not come piece by piece (a replay: all of it).
            2 => {
                if let Event::RunFinished {
                    answer: Some(a), ..
                } = &env.event
                    && let Some(rest) = a.get(text_sent..).filter(|r| !r.is_empty())
                {
                    let id_of = messages::answer_message(st, a);
                    send(k, "messages", &chunk(id_of.id(), rest));
                }
            }
            3 => {
                if let Ok(v) = serde_json::to_value(env) {
                    send(k, "custom", &v);
                }
            }
            _ => {}
        }
    }
    if tasks {
        for (i, (t, outcome)) in noted.ended.iter().enumerate().take(PER_EVENT) {
            let data = checkpoints::ended_json(t, outcome, (env, update.as_ref()), st);
            send(TASK_ENDS + i, "tasks", &data);
        }
    }
    if wants(&["checkpoints"])
        && let Some(cp) = &noted.checkpoint
    {
        let data = checkpoints::checkpoint_json(&st.session_id, cp, st);
        send(CHECKPOINT, "checkpoints", &data);
    }
    if tasks {
        for (i, (t, kind)) in noted.started.iter().enumerate().take(PER_EVENT) {
            let data = checkpoints::started_json(t, kind, env, st);
            send(TASK_STARTS + i, "tasks", &data);
        }
    }
}

/// Keeps the text of a reply without tool calls (a possible answer).
fn note_reply(reply: &mut Option<String>, e: &Event) {
    if let Event::ModelReplied { reply: r, .. } = e
        && r.tool_calls.is_empty()
    {
        *reply = Some(r.content.clone());
    }
}

/// Whether the text generated before `e` belonged to a reply that is not the answer (or to no
/// reply): a text that follows begins at byte 0 for the answer's count.
fn ends_text(e: &Event) -> bool {
    matches!(
        e,
        Event::ToolCallStarted { .. }
            | Event::ModelReplyRejected { .. }
            | Event::ModelFailed { .. }
            | Event::WaitingForUser { .. }
            | Event::RunFinished { .. }
    )
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

/// The run's stream: its parts after position `from`, live until the run has ended. The
/// format's first events (`metadata`, `RUN_STARTED`) when `announce` (a new run's stream; a
/// reconnection goes on where it stopped). `temporary`: the thread made for a threadless run,
/// deleted once the run ended and this stream is done with it.
pub(crate) fn sse(
    app: Shared,
    run: Arc<Run>,
    from: Position,
    format: Format,
    announce: bool,
    temporary: Option<super::registry::Temporary>,
) -> SseResponse<impl Stream<Item = Result<Sse, Infallible>>> {
    let cursor = Cursor::new(app, run, from, (format, announce), temporary);
    let stream = futures::stream::unfold(cursor, |mut c| async move {
        c.next_part().await.map(|part| (Ok(part), c))
    });
    SseResponse::new(stream).keep_alive(KeepAlive::default())
}

/// Where one client's stream of a run stands: the state folded up to the last event sent, the
/// parts made and not sent yet, and the model's text as it comes.
struct Cursor {
    /// Dropped with the stream.
    _temporary: Option<super::registry::Temporary>,
    app: Shared,
    run: Arc<Run>,
    format: Format,
    state: Option<State>,
    /// The thread's tasks and checkpoints up to the last event sent.
    lineage: Lineage,
    seq: u64,
    /// The client has the parts of event `skip.0` up to `skip.1`.
    skip: Option<(u64, u8)>,
    progress: Progress,
    /// The model's text as it comes (a stream that sends text), pieces that come after
    /// events not read yet, and whether any was sent.
    texts: Option<tokio::sync::broadcast::Receiver<Piece>>,
    pending: std::collections::VecDeque<Piece>,
    streamed: bool,
    /// The text of the last reply without tool calls read (an answer's, when the run ends
    /// with it: sent where the reply is).
    reply: Option<String>,
    /// Bytes of the text after event `text_at` the client has.
    text_at: u64,
    text_sent: usize,
    queue: std::collections::VecDeque<Sse>,
    done: bool,
    /// A wait for the thread's next append, registered before the last read of its log.
    armed: Option<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
    /// Since when the log could not be read because the store is away (see
    /// [`Cursor::read_failed`]).
    unreachable_since: Option<tokio::time::Instant>,
}

impl Cursor {
    fn new(
        app: Shared,
        run: Arc<Run>,
        from: Position,
        (format, announce): (Format, bool),
        temporary: Option<super::registry::Temporary>,
    ) -> Self {
        let mut first = std::collections::VecDeque::new();
        if announce {
            first.extend(format.prologue(&run));
        }
        // A position before the run is its beginning.
        let from = if from.seq < run.start_seq() {
            Position::after(run.start_seq())
        } else {
            from
        };
        let mut pending = std::collections::VecDeque::new();
        let texts = format.streams_text().then(|| {
            let (rx, so_far) = app.runs.texts(&run.thread_id);
            if !so_far.text.is_empty() {
                pending.push_back(so_far);
            }
            rx
        });
        Self {
            _temporary: temporary,
            lineage: Lineage::new(&run.thread_id),
            texts,
            pending,
            streamed: false,
            reply: None,
            text_at: from.seq,
            text_sent: from.text,
            app,
            run,
            format,
            state: None,
            seq: match from.part {
                Some(_) => from.seq.saturating_sub(1),
                None => from.seq,
            },
            skip: from.part.map(|k| (from.seq, k)),
            progress: Progress::default(),
            queue: first,
            done: false,
            armed: None,
            unreachable_since: None,
        }
    }

    /// The next part to send, waiting for the run when it has none; `None` at the stream's end.
    async fn next_part(&mut self) -> Option<Sse> {
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            // Registered before looking, so that an event stored meanwhile wakes the wait. A
            // wait registered before the last read that has not been woken since says that
            // nothing was stored after that read: the log is not read again for nothing.
            let kept = self
                .armed
                .take()
                .and_then(|mut n| n.as_mut().now_or_never().is_none().then_some(n));
            let quiet = kept.is_some();
            let mut notified = kept.unwrap_or_else(|| {
                let waker = self.app.runs.waker(&self.run.thread_id);
                let mut n = Box::pin(waker.notified_owned());
                n.as_mut().enable();
                n
            });
            let (status, end) = *self.run.status.borrow();
            // A queued run has not begun: its events come after whatever runs before it.
            if status == RunStatus::Pending && self.state.is_none() {
                let _ = tokio::time::timeout(Duration::from_millis(250), &mut notified).await;
                continue;
            }
            if self.state.is_none() && !self.fold_to_start().await {
                continue;
            }
            // Text generated before the events read next was generated before they were stored.
            if let Some(rx) = self.texts.as_mut() {
                while let Ok(piece) = rx.try_recv() {
                    self.pending.push_back(piece);
                }
            }
            self.flush_text();
            let read = if quiet {
                Ok(Vec::new())
            } else if let Some(kept) = self.app.runs.tails.after(&self.run.thread_id, self.seq) {
                // Stored through this process just now: no need to read them back.
                Ok(kept)
            } else {
                self.app
                    .store
                    .events_after(&self.run.thread_id, self.seq)
                    .await
            };
            match read {
                Ok(events) if !events.is_empty() => {
                    self.unreachable_since = None;
                    self.read(&events);
                    if !self.ended_in_log() {
                        // Kept: unless woken meanwhile, the next look needs no read.
                        self.armed = Some(notified);
                        continue;
                    }
                    // The run ended within this batch: finish below.
                }
                Ok(_) => self.unreachable_since = None,
                Err(e) => {
                    self.read_failed(&e).await;
                    continue;
                }
            }
            if self.app.host.shutdown.is_requested() && !self.ended_in_log() {
                // The server stops: the client reconnects (to the next server) and goes on.
                return None;
            }
            if self.ended_in_log() || (status.is_final() && self.seq >= end) {
                if !status.is_final() {
                    // The run's last events are stored; its process lets the thread go next.
                    // `end` waits for that, so that a client may start the next run at once.
                    let _ =
                        tokio::time::timeout(Duration::from_secs(10), self.run.finished()).await;
                }
                self.finish(status);
                continue;
            }
            if !self.queue.is_empty() {
                continue;
            }
            self.wait(notified.as_mut()).await;
        }
    }

    /// Folds the state before the first event to send, once. False when the log cannot be read
    /// (the stream then ends with an error).
    async fn fold_to_start(&mut self) -> bool {
        if self.seq < self.run.start_seq() {
            self.seq = self.run.start_seq();
            self.skip = None;
        }
        match self.app.store.load(&self.run.thread_id).await {
            Ok((_, log)) => {
                let mut st = State::new();
                let mut lineage = Lineage::new(&self.run.thread_id);
                for e in log.iter().take_while(|e| e.seq <= self.seq) {
                    note_reply(&mut self.reply, &e.event);
                    let call = checkpoints::open_call(&e.event, &st);
                    st.apply(&e.event);
                    lineage.note(e, call.as_ref(), &st);
                    self.progress.note(&e.event, &self.run.run_id, st.status);
                }
                self.state = Some(st);
                self.lineage = lineage;
                true
            }
            Err(e) => {
                self.read_failed(&e).await;
                false
            }
        }
    }

    /// A read of the log failed. A store that is briefly away says nothing about the run,
    /// which goes on once it is back (here, or wherever it is driven next): the stream waits
    /// and reads again. After [`unreachable_for`] of that it ends without a last part, as when
    /// its server stops, so that the client reconnects to `Location` and goes on where it
    /// stopped. Any other error ends it with an `error` part.
    async fn read_failed(&mut self, e: &weft_store::StoreError) {
        if !e.is_transient() {
            self.fail(e);
            return;
        }
        let since = *self
            .unreachable_since
            .get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= unreachable_for() {
            tracing::warn!(run = %self.run.run_id, "the store stayed unreachable; the stream ends for its client to reconnect: {e}");
            self.done = true;
            return;
        }
        tracing::debug!(run = %self.run.run_id, "cannot read the run's log (reading again): {e}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    /// Ends the stream with an `error` part: the log could not be read, and waiting will not
    /// change that.
    fn fail(&mut self, e: &weft_store::StoreError) {
        self.queue.push_back(part(
            "error",
            &json!({"error": "StoreError", "message": e.to_string()}),
            None,
        ));
        self.done = true;
    }

    /// Makes the parts of `events` (read from the log after the last event sent), up to the
    /// end of the run.
    fn read(&mut self, events: &[Envelope]) {
        // The answer, when the run ends in this read: its text is sent where it was generated
        // (before the reply that holds it), as it is live, so that its id is the same in a
        // replay and in a live stream.
        let answer = events.iter().find_map(|e| match &e.event {
            Event::RunFinished {
                answer: Some(a), ..
            } => Some(a.as_str()),
            _ => None,
        });
        let mut answer_sent = false;
        for env in events {
            let Some(st) = self.state.as_mut() else {
                break;
            };
            if self.progress.ended(st.status) {
                // The run ended; what follows belongs to a later run.
                break;
            }
            let skip = self.skip.filter(|(s, _)| *s == env.seq).map(|(_, k)| k);
            if let Event::ModelReplied { reply, .. } = &env.event
                && reply.tool_calls.is_empty()
                && answer == Some(reply.content.as_str())
                && matches!(self.format, Format::LangGraph(_))
            {
                answer_sent = true;
                let after = if self.text_sent > 0 && self.text_at < env.seq {
                    self.text_at
                } else {
                    env.seq.saturating_sub(1)
                };
                let sent = if after == self.text_at {
                    self.text_sent
                } else {
                    0
                };
                let text = reply.content.as_str();
                if skip.is_none()
                    && self.format.streams_text()
                    && let Some(rest) = text.get(sent..).filter(|r| !r.is_empty())
                {
                    let parts = self
                        .format
                        .text(st, rest, !self.streamed, (after, text.len()));
                    self.queue.extend(parts);
                    self.streamed = true;
                }
            }
            note_reply(&mut self.reply, &env.event);
            let call = checkpoints::open_call(&env.event, st);
            st.apply(&env.event);
            let noted = self.lineage.note(env, call.as_ref(), st);
            self.progress.note(&env.event, &self.run.run_id, st.status);
            let answered = matches!(self.format, Format::LangGraph(_))
                && matches!(&env.event, Event::RunFinished { answer: Some(a), .. } if self.reply.as_deref() == Some(a.as_str()));
            // A stream that sent text (the answer's, or a plan's replies) sends no answer at
            // the end; one that saw none sends it whole.
            let sent = if answer_sent || answered || self.streamed {
                usize::MAX
            } else {
                0
            };
            self.format.parts(
                (env, call.as_ref(), &noted),
                st,
                (sent, skip),
                &mut self.queue,
            );
            self.seq = env.seq;
            if ends_text(&env.event) {
                self.text_at = env.seq;
                self.text_sent = 0;
            }
            self.flush_text();
        }
        self.skip = None;
    }

    /// Queues the format's last parts (`end`, or `error` when the run failed).
    fn finish(&mut self, status: RunStatus) {
        let failed = self
            .state
            .as_ref()
            .is_some_and(|s| s.status == weft_core::SessionStatus::Failed);
        let error = (failed || (!self.ended_in_log() && status == RunStatus::Error)).then(|| {
            self.state
                .as_ref()
                .and_then(|s| s.turn.error().map(str::to_owned))
                .unwrap_or_else(|| "the run failed".into())
        });
        let status = match self.state.as_ref() {
            Some(s) if s.status != weft_core::SessionStatus::Running => {
                crate::registry::ended_as(s)
            }
            _ => status,
        };
        let last = self
            .format
            .epilogue(&self.run, self.state.as_ref(), status, error);
        self.queue.extend(last);
        self.done = true;
    }

    /// Waits for the run's next event (a quarter second at most) or, in a stream that sends
    /// text, for the model's next piece of text.
    async fn wait(&mut self, notified: std::pin::Pin<&mut tokio::sync::futures::OwnedNotified>) {
        let wait = tokio::time::timeout(Duration::from_millis(250), notified);
        match self.texts.as_mut() {
            Some(rx) => {
                tokio::select! {
                    _ = wait => {}
                    got = rx.recv() => {
                        if let Ok(piece) = got {
                            self.pending.push_back(piece);
                            self.flush_text();
                        }
                    }
                }
            }
            None => {
                let _ = wait.await;
            }
        }
    }

    /// The run's events are all in the log: after its marker the session ran, then stopped.
    fn ended_in_log(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| self.progress.ended(s.status))
    }

    /// Sends the pieces of text that come after the last event sent, without what the client
    /// has; drops those whose reply is in the log already (its parts carry it).
    fn flush_text(&mut self) {
        let Some(st) = self.state.as_ref() else {
            return;
        };
        let mut later = std::collections::VecDeque::new();
        while let Some(p) = self.pending.pop_front() {
            if p.after > self.seq {
                later.push_back(p);
                continue;
            }
            if p.after < self.seq {
                continue;
            }
            if p.after != self.text_at {
                self.text_at = p.after;
                self.text_sent = 0;
            }
            let end = p.offset + p.text.len();
            let Some(rest) = self
                .text_sent
                .checked_sub(p.offset)
                .map_or(Some(p.text.as_str()), |k| p.text.get(k..))
                .filter(|r| !r.is_empty())
            else {
                continue;
            };
            let parts = self.format.text(st, rest, !self.streamed, (p.after, end));
            self.queue.extend(parts);
            self.streamed = true;
            self.text_sent = end;
        }
        self.pending = later;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_join_reads_its_modes_as_either_sdk_sends_them() {
        let python = q(&[("stream_mode", "values"), ("stream_mode", "updates")]);
        let js = q(&[
            ("stream_mode", r#"["values","messages-tuple"]"#),
            ("cancel_on_disconnect", "0"),
        ]);
        assert_eq!(query_modes(&python).unwrap(), ["values", "updates"]);
        assert_eq!(query_modes(&js).unwrap(), ["values", "messages-tuple"]);
        assert_eq!(query_modes(&[]).unwrap(), ["values"]);
        // The Python SDK's `join_stream` with its defaults sends `stream_mode=`.
        assert_eq!(query_modes(&q(&[("stream_mode", "")])).unwrap(), ["values"]);
        let e = query_modes(&q(&[("stream_mode", "valuez")])).unwrap_err();
        assert_eq!(e.0, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            e.1.contains("`valuez`") && e.1.contains("messages-tuple"),
            "{}",
            e.1
        );
    }

    #[test]
    fn a_body_s_stream_mode_is_a_mode_or_a_list_of_known_modes() {
        assert_eq!(modes(None).unwrap(), ["values"]);
        assert_eq!(modes(Some(&json!("updates"))).unwrap(), ["updates"]);
        assert_eq!(
            modes(Some(&json!(["values", "tasks"]))).unwrap(),
            ["values", "tasks"]
        );
        for bad in [json!(3), json!(["values", 3]), json!(["value"])] {
            let e = modes(Some(&bad)).unwrap_err();
            assert!(e.1.starts_with("stream_mode"), "{}", e.1);
        }
    }
}
