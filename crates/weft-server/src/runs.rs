//! Runs: one turn of a thread's session (a new task, an answer to a wait, or the continuation of
//! a session whose process stopped), driven in this process under the session's lease, as `weft
//! run` drives it. A run's record lives in memory; its events live in the session's log, which is
//! what `wait`, `join` and the streams read, so a client sees the same thing whichever it uses.
//! A run another process drives (a replica on the same store, a worker) is found by its marker
//! in the log and followed through the store (`remote.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_core::SessionStatus;

use weft_store::{Leases, RunQueue, SessionLog, SessionRecord};

use super::auth::User;
use super::openapi::{self, Route};
use super::{ApiError, Shared, stream, threads};
use weft_host::HostError;
use weft_host::drive::AgentFile;
use weft_host::run::{Outcome, Work};
use weft_host::sessions::fmt_time;

/// The routes of runs.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::post("/threads/{tid}/runs", "Start a run in the background", create_background)
            .body::<RunBody>()
            .json::<RunInfo>("the run (pending)"),
        openapi::get(
            "/threads/{tid}/runs",
            "The thread's runs from its log, newest first (query: limit, offset, status)",
            list,
        )
        .json::<Vec<RunInfo>>("a list of runs"),
        openapi::post(
            "/threads/{tid}/runs/wait",
            "Start a run and answer with the thread's values when it ends or waits (`__interrupt__`); the headers come at once (Location: the run's join, to ask again after a dropped connection)",
            create_wait,
        )
        .body::<RunBody>()
        .json::<threads::Values>("the thread's values"),
        openapi::post(
            "/threads/{tid}/runs/stream",
            "Start a run and stream it (server-sent events: metadata, then the modes asked for: values, updates, messages, custom, tasks, checkpoints; end or error; each part's id says where it stands, for Last-Event-ID)",
            create_stream,
        )
        .body::<RunBody>()
        .media("text/event-stream", "the run's events; Location: where to reconnect"),
        openapi::get("/threads/{tid}/runs/{rid}", "A run", get).json::<RunInfo>("the run"),
        openapi::get(
            "/threads/{tid}/runs/{rid}/join",
            "Wait for a run and answer with the thread's values",
            join,
        )
        .json::<threads::Values>("the thread's values"),
        openapi::get(
            "/threads/{tid}/runs/{rid}/stream",
            "A run's stream after Last-Event-ID (all of it without), then live until it ends",
            join_stream,
        )
        .media("text/event-stream", "the run's events"),
        openapi::post(
            "/runs",
            "Start a run in the background on a thread made for it (a threadless run; `on_completion`: `delete`, the default, or `keep`)",
            create_threadless,
        )
        .body::<RunBody>()
        .json::<RunInfo>("the run (pending)"),
        openapi::post(
            "/runs/wait",
            "A threadless run: start it on a thread made for it and answer with the thread's values when it ends or waits",
            wait_threadless,
        )
        .body::<RunBody>()
        .json::<threads::Values>("the thread's values"),
        openapi::post(
            "/runs/stream",
            "A threadless run: start it on a thread made for it and stream it (as /threads/{tid}/runs/stream)",
            stream_threadless,
        )
        .body::<RunBody>()
        .media("text/event-stream", "the run's events; Location: where to reconnect"),
        openapi::post(
            "/runs/batch",
            "Start several runs in the background (`runs.create_batch`): each on its `thread_id`, or on a thread made for it",
            create_batch,
        )
        .body::<Vec<RunBody>>()
        .json::<Vec<RunInfo>>("the runs, in the order asked"),
        openapi::post(
            "/runs/cancel",
            "Cancel runs (`runs.cancel_many`): by `run_ids` (of `thread_id`), every run of `thread_id`, or every run of the user with `status` (pending, running, all); action `interrupt` only",
            cancel_many,
        )
        .body::<CancelMany>()
        .empty(204, "once they stopped"),
        openapi::post(
            "/threads/{tid}/runs/{rid}/cancel",
            "Cancel a run: its calls in flight are stopped and recorded, the session ends as failed, the run as interrupted (as LangGraph's)",
            cancel,
        )
        .empty(204, "once it stopped"),
    ]
}

/// A run as LangGraph clients read it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RunInfo {
    run_id: String,
    thread_id: String,
    assistant_id: String,
    created_at: String,
    updated_at: String,
    status: RunStatus,
    #[schemars(schema_with = "openapi::any")]
    metadata: Value,
    multitask_strategy: String,
    kwargs: Map<String, Value>,
}

/// Why a run failed, in the values `runs/wait` and `join` answer with.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct RunError {
    /// `RunError` (the session failed) or `StoreError`.
    pub error: String,
    pub message: Option<String>,
}

/// What `runs/wait` sends when the thread's values cannot be read once the run ended.
#[derive(Serialize)]
struct Unreadable {
    #[serde(rename = "__error__")]
    error: RunError,
}

/// A run's status, as LangGraph names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RunStatus {
    Pending,
    Running,
    Success,
    Error,
    Interrupted,
}

impl RunStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Success => "success",
            Self::Error => "error",
            Self::Interrupted => "interrupted",
        }
    }
    pub(crate) fn is_final(self) -> bool {
        !matches!(self, Self::Pending | Self::Running)
    }
}

/// A run: who started it, on which thread, from which event on, and how it stands.
pub(crate) struct Run {
    pub run_id: String,
    pub thread_id: String,
    pub assistant_id: String,
    pub user: String,
    pub created_at: i64,
    /// The session's last event before the run: the run's events come after it (set again
    /// when a queued run starts).
    start_seq: std::sync::atomic::AtomicU64,
    pub metadata: Value,
    pub multitask_strategy: String,
    /// The trace context the request that created the run carried (`traceparent`): the run's
    /// spans are its children. Stored with the run's marker.
    pub traceparent: Option<String>,
    /// The status, and the session's last event when the run ended.
    pub status: tokio::sync::watch::Sender<(RunStatus, u64)>,
    /// A queued run was cancelled before it began.
    pub cancelled: std::sync::atomic::AtomicBool,
    /// Where the run stands in this process: queued, driven here, followed through the store,
    /// or handed over ([`Place`]).
    place: Mutex<Place>,
    /// A task follows its status through the store.
    pub followed: std::sync::atomic::AtomicBool,
}

/// Where a run stands in this process; it moves as the run does, each move one method of
/// [`Run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Queued behind another run, and stored so (`crate::queue`) until it begins or ends.
    Queued,
    /// Driven by this process (or about to be).
    Here,
    /// Found in the thread's log rather than started here, or begun by another process:
    /// another process (a replica, a worker, a server before a restart) may drive it, and its
    /// status is followed through the store ([`crate::remote`]).
    Elsewhere,
    /// Stopped at a safe point because this server stops: the next process goes on with it.
    /// The API then says `pending` (as LangGraph's server says of a run it will pick up again),
    /// so that a client whose stream closed asks again rather than taking the run as ended.
    HandedOver,
}

impl Run {
    pub(crate) fn start_seq(&self) -> u64 {
        self.start_seq.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Where the run stands in this process.
    pub(crate) fn place(&self) -> Place {
        self.place.lock().map_or(Place::Here, |p| *p)
    }

    fn move_to(&self, place: Place) {
        if let Ok(mut p) = self.place.lock() {
            *p = place;
        }
    }

    /// Found in the thread's log (or the queue) rather than driven here: followed through the
    /// store.
    pub(crate) fn followed_from_store(&self) -> bool {
        self.place() == Place::Elsewhere
    }

    /// Followed through the store from now on: a queued run another process began, or a run
    /// this process could not go on with.
    pub(crate) fn began_elsewhere(&self) {
        self.move_to(Place::Elsewhere);
    }

    /// Driven by this process from now on: a run it took over.
    pub(crate) fn driven_here(&self) {
        self.move_to(Place::Here);
    }

    /// Queued here (and stored so) from now on.
    pub(crate) fn queue(&self) {
        self.move_to(Place::Queued);
    }

    /// No longer queued (it began here, or ended before it began): whether it was, so that its
    /// stored record is deleted once.
    pub(crate) fn dequeue(&self) -> bool {
        self.place.lock().is_ok_and(|mut p| {
            *p == Place::Queued && {
                *p = Place::Here;
                true
            }
        })
    }

    /// Stopped at a safe point because this server stops ([`Place::HandedOver`]).
    pub(crate) fn hand_over(&self) {
        self.move_to(Place::HandedOver);
    }

    /// The run begins after the thread's event `seq` (a queued run, once it starts).
    pub(crate) fn begins_after(&self, seq: u64) {
        self.start_seq
            .store(seq, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn json(&self) -> RunInfo {
        let (status, _) = *self.status.borrow();
        let status = if self.place() == Place::HandedOver {
            RunStatus::Pending
        } else {
            status
        };
        RunInfo {
            run_id: self.run_id.clone(),
            thread_id: self.thread_id.clone(),
            assistant_id: self.assistant_id.clone(),
            created_at: fmt_time(self.created_at),
            updated_at: fmt_time(weft_runtime::now_ms()),
            status,
            metadata: self.metadata.clone(),
            multitask_strategy: self.multitask_strategy.clone(),
            kwargs: Map::new(),
        }
    }

    /// Waits until the run has ended; its final status and last event.
    pub(crate) async fn finished(&self) -> (RunStatus, u64) {
        let mut rx = self.status.subscribe();
        match rx.wait_for(|(s, _)| s.is_final()).await {
            Ok(v) => *v,
            Err(_) => *self.status.borrow(),
        }
    }
}

/// A piece of the model's text, and where it stands: it was generated after the session's event
/// `after`, at byte `offset` of the text generated since that event. A stream gives each piece
/// that position as its id, so a reconnection goes on from the next byte.
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub after: u64,
    pub offset: usize,
    pub text: String,
}

/// A thread's pieces of text as they come, and the text generated since its last stored event.
struct TextFeed {
    tx: tokio::sync::broadcast::Sender<Piece>,
    after: u64,
    so_far: String,
}

impl Default for TextFeed {
    fn default() -> Self {
        Self {
            tx: tokio::sync::broadcast::channel(1024).0,
            after: 0,
            so_far: String::new(),
        }
    }
}

/// The runs of this process, and which thread each drives.
#[derive(Default)]
pub(crate) struct Runs {
    runs: Mutex<HashMap<String, Arc<Run>>>,
    /// Thread → the run driving it.
    active: Mutex<HashMap<String, String>>,
    /// Thread → woken after every event stored for it, and when its run ends.
    wakers: Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
    /// Thread → the text the model is generating, piece by piece (never stored: live only).
    texts: Mutex<HashMap<String, TextFeed>>,
    /// Thread → the events its runs stored lately through this process (see `tail`).
    pub(crate) tails: crate::tail::Tails,
    tasks: tokio::sync::Mutex<tokio::task::JoinSet<()>>,
}

impl Runs {
    /// The run this process drives on `thread`, if any.
    pub(crate) fn active_run(&self, thread: &str) -> Option<String> {
        self.active.lock().ok()?.get(thread).cloned()
    }

    pub(crate) fn active_on(&self, thread: &str) -> bool {
        self.active
            .lock()
            .map(|a| a.contains_key(thread))
            .unwrap_or(false)
    }

    fn active_for(&self, user: &str) -> usize {
        let runs = self.runs.lock();
        let active = self.active.lock();
        match (runs, active) {
            (Ok(r), Ok(a)) => a
                .values()
                .filter(|id| r.get(*id).is_some_and(|run| run.user == user))
                .count(),
            _ => 0,
        }
    }

    /// Keeps `run`, or the one with its id kept already.
    pub(crate) fn insert(&self, run: Arc<Run>) -> Arc<Run> {
        match self.runs.lock() {
            Ok(mut runs) => runs.entry(run.run_id.clone()).or_insert(run).clone(),
            Err(_) => run,
        }
    }

    /// Runs being driven, and runs waiting for their thread.
    pub(crate) fn counts(&self) -> (i64, i64) {
        let active = self.active.lock().map(|a| a.len()).unwrap_or(0);
        let pending = self
            .runs
            .lock()
            .map(|r| {
                r.values()
                    .filter(|run| run.status.borrow().0 == RunStatus::Pending)
                    .count()
            })
            .unwrap_or(0);
        (
            i64::try_from(active).unwrap_or(i64::MAX),
            i64::try_from(pending).unwrap_or(i64::MAX),
        )
    }

    pub(crate) fn get(&self, thread: &str, run: &str) -> Option<Arc<Run>> {
        self.runs
            .lock()
            .ok()?
            .get(run)
            .filter(|r| r.thread_id == thread)
            .cloned()
    }

    /// The pieces of text a model generates on `thread`, as they come, and the text generated
    /// since the thread's last stored event as one piece (empty when there is none), taken
    /// together so that no piece falls between them.
    pub(crate) fn texts(&self, thread: &str) -> (tokio::sync::broadcast::Receiver<Piece>, Piece) {
        match self.texts.lock() {
            Ok(mut t) => {
                let feed = t.entry(thread.to_owned()).or_default();
                let so_far = Piece {
                    after: feed.after,
                    offset: 0,
                    text: feed.so_far.clone(),
                };
                (feed.tx.subscribe(), so_far)
            }
            Err(_) => (
                tokio::sync::broadcast::channel(1).1,
                Piece {
                    after: 0,
                    offset: 0,
                    text: String::new(),
                },
            ),
        }
    }

    /// Notes an event of `thread`: a piece of text is sent to its streams; a stored event
    /// (`seq` > 0) begins the text after it.
    fn text_observed(&self, thread: &str, e: &weft_core::Envelope) {
        let Ok(mut t) = self.texts.lock() else {
            return;
        };
        let feed = t.entry(thread.to_owned()).or_default();
        match &e.event {
            weft_core::Event::TextDelta { text } => {
                let piece = Piece {
                    after: feed.after,
                    offset: feed.so_far.len(),
                    text: text.clone(),
                };
                feed.so_far.push_str(text);
                let _ = feed.tx.send(piece);
            }
            _ if e.seq > 0 => {
                feed.after = feed.after.max(e.seq);
                feed.so_far.clear();
            }
            _ => {}
        }
    }

    /// The text `thread`'s model generates next comes after event `seq` (a run begins there).
    fn text_after(&self, thread: &str, seq: u64) {
        if let Ok(mut t) = self.texts.lock() {
            let feed = t.entry(thread.to_owned()).or_default();
            if feed.after != seq {
                feed.after = seq;
                feed.so_far.clear();
            }
        }
    }

    /// `run` does not drive its thread (any more).
    pub(crate) fn let_go(&self, run: &Run) {
        if let Ok(mut a) = self.active.lock()
            && a.get(&run.thread_id) == Some(&run.run_id)
        {
            a.remove(&run.thread_id);
        }
    }

    /// Forgets run `id` (it was never answered).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.remove(id);
        }
    }

    /// Forgets what this process keeps of a deleted thread: its runs, its waker, its text.
    pub(crate) fn forget_thread(&self, thread: &str) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.retain(|_, r| r.thread_id != thread);
        }
        if let Ok(mut w) = self.wakers.lock() {
            w.remove(thread);
        }
        if let Ok(mut t) = self.texts.lock() {
            t.remove(thread);
        }
        self.tails.forget(thread);
    }

    pub(crate) fn waker(&self, thread: &str) -> Arc<tokio::sync::Notify> {
        match self.wakers.lock() {
            Ok(mut w) => w.entry(thread.to_owned()).or_default().clone(),
            Err(_) => Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Waits for the runs still going, at most `grace` plus a little (they stop at their next
    /// safe point once `interrupt::begin` was called).
    pub(crate) async fn wait_all(&self, grace: Duration) {
        let mut tasks = self.tasks.lock().await;
        let _ = tokio::time::timeout(grace + Duration::from_secs(2), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.abort_all();
    }
}

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct RunBody {
    pub assistant_id: String,
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub command: Option<Value>,
    /// The stream modes, a mode or a list: `values` (the default), `updates`, `messages-tuple`
    /// (or `messages`), `custom` (or `events`, `debug`), `tasks`, `checkpoints`.
    #[serde(default)]
    pub stream_mode: Option<Value>,
    #[serde(default)]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub multitask_strategy: Option<String>,
    /// `create`: a thread that does not exist is made for the run; `reject` (the default): 404.
    #[serde(default)]
    pub if_not_exists: Option<String>,
    /// A threadless run's thread once the run ended: `delete` (the default) or `keep`.
    #[serde(default)]
    pub on_completion: Option<String>,
    /// The thread of a run of `/runs/batch` (none: a thread is made for it).
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The run's settings. `budget`: the run's budget, a mapping as the agent file's `budget:`
    /// (it replaces the one in force) or a string `KEY=VALUE,...` as `weft run --budget` takes
    /// it (over the one in force); with an answer (`command.resume`) it raises a budget that
    /// was reached.
    #[serde(default)]
    pub config: Option<Value>,
    /// The request's W3C `traceparent` header (not part of the body).
    #[serde(skip)]
    #[schemars(skip)]
    pub traceparent: Option<String>,
}

impl RunBody {
    /// The answer `command.resume` gives (a string as it is, anything else as JSON text).
    fn resume(&self) -> Option<String> {
        self.command
            .as_ref()
            .and_then(|c| c.get("resume"))
            .map(|r| match r {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
    }

    /// The run's budget (`config.budget`) over the one in force on the thread `st` of `agent`.
    fn budget(
        &self,
        st: &weft_core::State,
        agent: &AgentFile,
    ) -> Result<Option<weft_core::budget::Budget>, ApiError> {
        run_budget(
            self.config.as_ref(),
            st.spending().budget.as_ref().or(agent.spec.budget.as_ref()),
            Some(&weft_core::ToolCatalog::tool_names(agent.tools.as_ref())),
        )
    }
}

/// The budget a run's `config.budget` gives, over `base` (the one in force); `None` when it
/// gives none. With `tools` (the assistant's), a per-tool limit it sets must name one of them.
pub(crate) fn run_budget(
    config: Option<&Value>,
    base: Option<&weft_core::budget::Budget>,
    tools: Option<&[String]>,
) -> Result<Option<weft_core::budget::Budget>, ApiError> {
    let Some(b) = config.and_then(|c| c.get("budget")) else {
        return Ok(None);
    };
    let Some(change) =
        weft_core::budget::BudgetChange::from_json(b, "config.budget").map_err(ApiError::bad)?
    else {
        return Ok(None);
    };
    if let Some((scope, tool, why)) = tools.and_then(|t| change.unknown_tools(t).into_iter().next())
    {
        return Err(ApiError::bad(format!(
            "config.budget: {scope}.tool_calls.{tool}: {why}"
        )));
    }
    change
        .over(base)
        .map(Some)
        .map_err(|e| ApiError::bad(format!("config.budget: {e}")))
}

/// The `traceparent` header of a request that creates a run, when it is a valid W3C trace
/// context. One that is not is ignored (W3C Trace Context: the run starts a trace of its own)
/// and logged, naming the header.
pub(crate) fn traceparent(headers: &HeaderMap) -> Option<String> {
    let h = headers.get("traceparent")?;
    let text = h.to_str().ok().map(str::trim);
    match text.filter(|t| weft_telemetry::export::parse_traceparent(t).is_some()) {
        Some(t) => Some(t.to_ascii_lowercase()),
        None => {
            tracing::warn!(
                header = ?h,
                "ignored a traceparent header that is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>); the run starts its own trace"
            );
            None
        }
    }
}

/// The task in a run's input: the last message's content (`{"messages": [...]}`, as LangGraph
/// clients send it), or `{"task": "..."}`. The input's other keys are the run's input.
pub(crate) fn task_and_input(input: Option<&Value>) -> Result<(Option<String>, Value), ApiError> {
    let Some(input) = input.filter(|v| !v.is_null()) else {
        return Ok((None, json!({})));
    };
    let Value::Object(m) = input else {
        return Err(ApiError::bad(
            "input must be a JSON object, e.g. {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}",
        ));
    };
    let mut rest = m.clone();
    let task = match (rest.remove("messages"), rest.remove("task")) {
        (Some(Value::Array(msgs)), _) => msgs.last().map(message_text).transpose()?,
        (Some(_), _) => return Err(ApiError::bad("input.messages must be a list of messages")),
        (None, Some(Value::String(t))) => Some(t),
        (None, Some(_)) => return Err(ApiError::bad("input.task must be a string")),
        (None, None) => None,
    };
    Ok((task.filter(|t| !t.trim().is_empty()), Value::Object(rest)))
}

/// A message's text: a string, `{"content": ...}` with a string or a list of text parts.
pub(crate) fn message_text(m: &Value) -> Result<String, ApiError> {
    let content = match m {
        Value::String(s) => return Ok(s.clone()),
        Value::Object(o) => o.get("content").cloned().unwrap_or(Value::Null),
        _ => Value::Null,
    };
    match content {
        Value::String(s) => Ok(s),
        Value::Array(parts) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")),
        _ => Err(ApiError::bad(
            "a message needs a `content` string (or a list of text parts)",
        )),
    }
}

/// Checks the request, takes the thread's lease and starts the run in the background.
async fn start(app: &Shared, user: &User, tid: &str, body: RunBody) -> Result<Arc<Run>, ApiError> {
    start_with_id(app, user, tid, body, None).await
}

/// [`start`] with the run's id given by the client (AG-UI's `runId`), which must be new.
pub(crate) async fn start_with_id(
    app: &Shared,
    user: &User,
    tid: &str,
    body: RunBody,
    run_id: Option<String>,
) -> Result<Arc<Run>, ApiError> {
    crate::health::refuse_while_down(app)?;
    if let Some(id) = &run_id
        && app.runs.runs.lock().is_ok_and(|r| r.contains_key(id))
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("run {id} exists already; give each run a new id"),
        ));
    }
    let agent = app.assistant(&body.assistant_id)?.clone();
    match body.if_not_exists.as_deref() {
        None | Some("reject") => {}
        Some("create") => create_thread(app, user, tid, true).await?,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "if_not_exists `{other}`: use `create` or `reject`"
            )));
        }
    }
    let (rec, st) = threads::load(app, user, tid).await?;
    if st.seq() > 0 && st.agent() != agent.spec.name {
        return Err(ApiError::bad(format!(
            "thread {tid} belongs to assistant `{}`, not `{}`",
            st.agent(),
            agent.spec.name
        )));
    }
    if app.runs.active_for(&user.0) >= app.max_runs_per_user {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "this user has {} runs going already; wait for one to end",
                app.max_runs_per_user
            ),
        ));
    }
    let (task, input) = task_and_input(body.input.as_ref())?;
    let resume = body.resume();
    let work = weft_host::run::decide(tid, &st, task.clone(), resume.clone());
    // The user's quota, with what the run's first model call may take.
    let first = work.as_ref().ok().and_then(|w| {
        weft_host::run::first_call_max(&app.host, &user.0, &agent, (&rec, &st), w, &input)
    });
    crate::quota::admit(app, &user.0, tid, first.as_ref()).await?;
    let strategy = body
        .multitask_strategy
        .clone()
        .unwrap_or_else(|| "reject".into());
    let busy = app.runs.active_on(tid) || (st.seq() > 0 && st.status() == SessionStatus::Running);
    // An enqueued run waits for the run before it, whichever process drives that one.
    if busy && strategy != "enqueue" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("thread {tid} is busy with a run (multitask_strategy `{strategy}`)"),
        ));
    }
    let work = work?;
    let budget = body.budget(&st, &agent)?;
    if let Some(b) = &budget {
        weft_runtime::budget::warn_unpriced(agent.model.as_ref(), Some(b));
    }
    let run = Arc::new(Run {
        run_id: run_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        thread_id: tid.to_owned(),
        assistant_id: agent.spec.name.clone(),
        user: user.0.clone(),
        created_at: weft_runtime::now_ms(),
        start_seq: st.seq().into(),
        metadata: body.metadata.clone().unwrap_or_else(|| json!({})),
        multitask_strategy: strategy,
        traceparent: body.traceparent.clone(),
        status: tokio::sync::watch::channel((RunStatus::Pending, st.seq())).0,
        cancelled: false.into(),
        place: Mutex::new(if busy { Place::Queued } else { Place::Here }),
        followed: false.into(),
    });
    if let Ok(mut runs) = app.runs.runs.lock() {
        runs.insert(run.run_id.clone(), run.clone());
    }
    // Taken before answering, so that a thread another process drives is refused at once
    // (unless the run is enqueued: then it waits for the thread).
    let queued = busy;
    let start = if queued {
        // Stored before it is answered: a queued run outlives this process.
        if let Err(e) = crate::queue::keep(app, &run, &body).await {
            app.runs.forget(&run.run_id);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the run could not be queued: {}", crate::message(&e.into())),
            ));
        }
        None
    } else {
        Some((take(app, &run).await?, work))
    };
    let (accept, accepted) = tokio::sync::oneshot::channel();
    let task = execute(
        app.clone(),
        run.clone(),
        start,
        (task, resume, budget),
        agent,
        rec,
        input,
        accept,
    );
    app.runs.tasks.lock().await.spawn(task);
    // A run is answered only once it is durable (its marker and first events are stored, or,
    // queued, its request), so a client never holds the id of a run that a crash can lose.
    if !queued {
        match accepted.await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the run could not be started: {why}"),
                ));
            }
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the run could not be started (the server is stopping); try again".into(),
                ));
            }
        }
    }
    Ok(run)
}

/// Takes the run's thread ([`weft_host::run::take`]) and makes the run the thread's active one
/// here. A thread another process drives is refused (409); a store that could not be asked is
/// an outage the client can try again after (503).
async fn take(
    app: &Shared,
    run: &Arc<Run>,
) -> Result<weft_host::ownership::Held<weft_store::AnyStore>, ApiError> {
    let taken = weft_host::run::take(&app.host, app.store.clone(), &run.thread_id, || {
        app.runs.active_on(&run.thread_id)
    })
    .await
    .map_err(|e| {
        let outage =
            weft_host::store_error_in(&e).is_some_and(weft_store::StoreError::is_infrastructure);
        let text = crate::message(&e.into());
        if outage {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the run could not be started: {text}; try again"),
            )
            .retry_after(2)
        } else {
            ApiError::new(StatusCode::CONFLICT, text)
        }
    })?;
    if let Some(after) = taken.after {
        run.begins_after(after);
        run.status.send_replace((RunStatus::Pending, after));
    }
    if let Ok(mut a) = app.runs.active.lock() {
        a.insert(run.thread_id.clone(), run.run_id.clone());
    }
    Ok(taken.held)
}

/// Drives the run and records how it ended. `start`: the thread's lease and what the run does,
/// or `None` for a queued run, which waits for the thread and then decides. `accept` is told
/// once the run is stored (or why it could not be).
#[allow(clippy::too_many_arguments)]
async fn execute(
    app: Shared,
    run: Arc<Run>,
    start: Option<(weft_host::ownership::Held<weft_store::AnyStore>, Work)>,
    (task, resume, budget): (
        Option<String>,
        Option<String>,
        Option<weft_core::budget::Budget>,
    ),
    agent: Arc<AgentFile>,
    rec: SessionRecord,
    input: Value,
    accept: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    let mut accept = Some(accept);
    let waker = app.runs.waker(&run.thread_id);
    let (held, work) = match start {
        Some((h, work)) => (Ok(h), Ok(work)),
        // Enqueued: wait for the run before it to end, then decide from the thread as it is.
        None => {
            let held = loop {
                if run.cancelled.load(std::sync::atomic::Ordering::Acquire) {
                    break Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "the run was cancelled before it began".into(),
                    ));
                }
                if !app.runs.active_on(&run.thread_id)
                    && crate::remote::free(&app, &run.thread_id).await
                {
                    use crate::queue::Standing;
                    match crate::queue::standing(&app, &run, false).await {
                        Standing::Queued => {}
                        Standing::Began => return crate::queue::follow(&app, &run),
                        Standing::Cancelled => {
                            // Cancelled by another process: it ends as one cancelled here.
                            run.cancelled
                                .store(true, std::sync::atomic::Ordering::Release);
                            break Err(ApiError::new(
                                StatusCode::CONFLICT,
                                "the run was cancelled before it began".into(),
                            ));
                        }
                    }
                    match take(&app, &run).await {
                        // Another process took the thread first, or the store is away for a
                        // moment: wait for the thread again.
                        Err(e)
                            if e.0 == StatusCode::CONFLICT
                                || e.0 == StatusCode::SERVICE_UNAVAILABLE => {}
                        Err(e) => break Err(e),
                        // Another process that took the run over (this one froze past its
                        // claim) may have begun it meanwhile.
                        Ok(held) => match crate::queue::standing(&app, &run, true).await {
                            Standing::Queued => break Ok(held),
                            Standing::Began => {
                                app.runs.let_go(&run);
                                held.release().await;
                                return crate::queue::follow(&app, &run);
                            }
                            Standing::Cancelled => {
                                app.runs.let_go(&run);
                                held.release().await;
                                run.cancelled
                                    .store(true, std::sync::atomic::Ordering::Release);
                                break Err(ApiError::new(
                                    StatusCode::CONFLICT,
                                    "the run was cancelled before it began".into(),
                                ));
                            }
                        },
                    }
                }
                let _ = tokio::time::timeout(Duration::from_millis(200), waker.notified()).await;
            };
            let work = match weft_runtime::load_state(app.store.as_ref(), &run.thread_id).await {
                Ok(loaded) => {
                    let st = loaded.state;
                    run.start_seq
                        .store(st.seq(), std::sync::atomic::Ordering::Release);
                    weft_host::run::decide(&run.thread_id, &st, task, resume)
                        .map_err(ApiError::from)
                }
                Err(e) => Err(e.into()),
            };
            (held, work)
        }
    };
    let outcome = match (held, work) {
        (Ok(held), Err(e)) => {
            held.release().await;
            Outcome::Failed(HostError::Refused(e.1))
        }
        (Ok(held), Ok(work)) => {
            run.status
                .send_replace((RunStatus::Running, run.start_seq()));
            app.runs.text_after(&run.thread_id, run.start_seq());
            let start = weft_host::run::Start {
                agent: &agent,
                rec: &rec,
                user: &run.user,
                work,
                input,
                marker: weft_host::run::Marker {
                    run_id: run.run_id.clone(),
                    after: run.start_seq(),
                    traceparent: run.traceparent.clone(),
                    metadata: run.metadata.clone(),
                    budget,
                },
            };
            // A run is answered once its marker is stored; its queued record is not needed
            // from then on.
            let stored = |r: Result<(), String>| {
                let ok = r.is_ok();
                if let Some(accept) = accept.take() {
                    let _ = accept.send(r);
                }
                let (app, run) = (app.clone(), run.clone());
                async move {
                    if ok {
                        crate::queue::done(&app, &run).await;
                    }
                }
            };
            let out = weft_host::run::drive(
                &app.host,
                app.store.clone(),
                &held,
                start,
                watchers(&app, &run.thread_id),
                stored,
            )
            .await;
            let out = weft_host::run::hold_if_paused(
                &app.host,
                app.store.clone(),
                &held,
                out,
                watchers(&app, &run.thread_id),
            )
            .await;
            held.release().await;
            Outcome::from(out)
        }
        (Err(e), _) => Outcome::Failed(HostError::Refused(e.1)),
    };
    if let Some(accept) = accept.take() {
        let _ = accept.send(match &outcome {
            Outcome::Ended(_) => Ok(()),
            Outcome::Lost(e) | Outcome::Failed(e) => Err(crate::message_of(e)),
        });
    }
    crate::queue::done(&app, &run).await;
    finish(&app, &run, outcome).await;
}

/// Who sees the events of a thread this process drives ([`observer`], [`own_observer`]).
fn watchers(app: &Shared, thread: &str) -> weft_host::drive::Watchers {
    weft_host::drive::Watchers {
        all: vec![observer(app, thread)],
        own: vec![own_observer(app, thread)],
    }
}

/// What the server sees of every event of a thread it drives, its sub-agents' included:
/// metrics count it, and the model's text goes to the thread's live streams. (The thread's own
/// events wake its streams through [`own_observer`].)
fn observer(app: &Shared, thread: &str) -> weft_runtime::Observer {
    let counted = app.clone();
    let thread = thread.to_owned();
    Arc::new(move |e: &weft_core::Envelope| {
        counted.metrics.observe(e);
        counted.runs.text_observed(&thread, e);
    })
}

/// What the server sees of the events of the thread's own session (not its sub-agents'): kept
/// in the thread's tail for its streams, which are then woken.
fn own_observer(app: &Shared, thread: &str) -> weft_runtime::Observer {
    let waker = app.runs.waker(thread);
    let app = app.clone();
    let thread = thread.to_owned();
    Arc::new(move |e: &weft_core::Envelope| {
        app.runs.tails.push(&thread, e);
        waker.notify_waiters();
    })
}

/// Records how a run ended and wakes whoever waits for it. A run this process could not go on
/// with ([`lost_hold`]) has not ended: from then on it is followed through the store, as a run
/// of another process is, so that its streams, `runs.get` and joins say what the store says.
async fn finish(app: &Shared, run: &Arc<Run>, outcome: Outcome) {
    let waker = app.runs.waker(&run.thread_id);
    if let Outcome::Lost(e) = &outcome {
        tracing::warn!(
            run = %run.run_id,
            thread = %run.thread_id,
            "this process cannot go on with the run; following it through the store, where it goes on: {}",
            crate::message_of(e)
        );
        if let Ok(mut a) = app.runs.active.lock()
            && a.get(&run.thread_id) == Some(&run.run_id)
        {
            a.remove(&run.thread_id);
        }
        run.began_elsewhere();
        let (_, last) = *run.status.borrow();
        run.status.send_replace((RunStatus::Running, last));
        app.runs.tails.ended(&run.thread_id);
        crate::remote::follow(app, run);
        waker.notify_waiters();
        return;
    }
    let last = app
        .store
        .get(&run.thread_id)
        .await
        .map(|r| r.last_seq)
        .unwrap_or(run.start_seq());
    let status = match outcome {
        Outcome::Ended(SessionStatus::Completed) => RunStatus::Success,
        Outcome::Ended(SessionStatus::WaitingForUser) => RunStatus::Interrupted,
        Outcome::Ended(SessionStatus::Failed) => {
            match weft_runtime::load_state(app.store.as_ref(), &run.thread_id).await {
                Ok(loaded) => ended_as(&loaded.state),
                Err(_) => RunStatus::Error,
            }
        }
        // Stopped at a safe point (the server stops): another process continues it.
        Outcome::Ended(SessionStatus::Running) => {
            run.hand_over();
            RunStatus::Interrupted
        }
        // A queued run cancelled before it began.
        Outcome::Failed(_) if run.cancelled.load(std::sync::atomic::Ordering::Acquire) => {
            RunStatus::Interrupted
        }
        Outcome::Failed(e) | Outcome::Lost(e) => {
            tracing::warn!(run = %run.run_id, "run failed: {}", crate::message_of(&e));
            RunStatus::Error
        }
    };
    if let Ok(mut a) = app.runs.active.lock()
        && a.get(&run.thread_id) == Some(&run.run_id)
    {
        a.remove(&run.thread_id);
    }
    run.status.send_replace((status, last));
    app.runs.tails.ended(&run.thread_id);
    let seconds = (weft_runtime::now_ms() - run.created_at).max(0) as f64 / 1000.0;
    app.metrics.run_ended(status.as_str(), seconds);
    waker.notify_waiters();
}

pub(crate) async fn create_background(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    headers: HeaderMap,
    Json(mut body): Json<RunBody>,
) -> Result<Json<RunInfo>, ApiError> {
    body.traceparent = traceparent(&headers);
    let run = start(&app, &user, &tid, body).await?;
    Ok(Json(run.json()))
}

/// The thread's values once the run has ended (with `__interrupt__` when it waits).
async fn final_values(
    app: &Shared,
    user: &User,
    run: &Run,
) -> Result<Json<threads::Values>, ApiError> {
    run.finished().await;
    let (_, st) = threads::load(app, user, &run.thread_id).await?;
    let mut v = threads::values(&st);
    if st.status() == SessionStatus::Failed {
        v.error = Some(RunError {
            error: "RunError".into(),
            message: st.turn().error().map(str::to_owned),
        });
    }
    Ok(Json(v))
}

pub(crate) async fn create_wait(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    headers: HeaderMap,
    Json(mut body): Json<RunBody>,
) -> Result<Response, ApiError> {
    body.traceparent = traceparent(&headers);
    let run = start(&app, &user, &tid, body).await?;
    Ok(waiting(app, user, run, None))
}

/// The answer of `runs/wait`. Its headers go at once: `Location` names the run's join, where a
/// client whose connection dropped asks again (the SDK does so by itself), `Content-Location`
/// the run. The body is the thread's values once the run has ended, after a newline every 5 s
/// until then (JSON allows leading whitespace) to keep the connection alive. If the server stops
/// while the session still runs, the body breaks off, so that the client follows `Location` to
/// the server that goes on with it.
fn waiting(app: Shared, user: User, run: Arc<Run>, temporary: Option<Temporary>) -> Response {
    let location = format!("/threads/{}/runs/{}", run.thread_id, run.run_id);
    let body = futures::stream::unfold(Some((app, user, run, 0u32)), |st| async move {
        let (app, user, run, mut ticks) = st?;
        let done = loop {
            if tokio::time::timeout(Duration::from_millis(250), run.finished())
                .await
                .is_ok()
            {
                break true;
            }
            ticks += 1;
            if app.host.shutdown.is_requested() {
                break false;
            }
            if ticks % 20 == 0 {
                let beat = axum::body::Bytes::from_static(b"\n");
                return Some((Ok(beat), Some((app, user, run, ticks))));
            }
        };
        let still_running = || async {
            app.store
                .get(&run.thread_id)
                .await
                .map_or(true, |r| r.status == SessionStatus::Running)
        };
        if !done || (app.host.shutdown.is_requested() && still_running().await) {
            let stop = std::io::Error::other("the server stops; ask the run's Location again");
            return Some((Err(stop), None));
        }
        let v = match final_values(&app, &user, &run).await {
            Ok(Json(v)) => serde_json::to_string(&v),
            Err(e) => serde_json::to_string(&Unreadable {
                error: RunError {
                    error: "StoreError".into(),
                    message: Some(e.1),
                },
            }),
        };
        let v = v.unwrap_or_default();
        Some((Ok(axum::body::Bytes::from(v)), None))
    });
    // The thread of a threadless run goes once the answer is sent (or the client left).
    let body = futures::StreamExt::map(futures::StreamExt::fuse(body), move |part| {
        let _ = &temporary;
        part
    });
    let mut resp = axum::body::Body::from_stream(body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = format!("{location}/join").parse() {
        headers.insert(axum::http::header::LOCATION, v);
    }
    if let Ok(v) = location.parse() {
        headers.insert(axum::http::header::CONTENT_LOCATION, v);
    }
    resp
}

pub(crate) async fn create_stream(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    headers: HeaderMap,
    Json(mut body): Json<RunBody>,
) -> Result<Response, ApiError> {
    body.traceparent = traceparent(&headers);
    let modes = stream::modes(body.stream_mode.as_ref())?;
    let run = start(&app, &user, &tid, body).await?;
    Ok(streaming(app, run, modes, None))
}

/// A new run's stream, with `Location`: where the client reconnects after a dropped connection
/// (the SDK does so by itself), with the same stream modes; and `Content-Location`: the run,
/// from which the JavaScript SDK learns the run's id (`onRunCreated`; `useStream`'s `onCreated`
/// and its rejoin after a reload).
fn streaming(
    app: Shared,
    run: Arc<Run>,
    modes: Vec<String>,
    temporary: Option<Temporary>,
) -> Response {
    let query: Vec<String> = modes.iter().map(|m| format!("stream_mode={m}")).collect();
    let location = format!(
        "/threads/{}/runs/{}/stream?{}",
        run.thread_id,
        run.run_id,
        query.join("&")
    );
    let after = stream::Position::after(run.start_seq());
    let format = stream::Format::LangGraph(modes);
    let run_path = format!("/threads/{}/runs/{}", run.thread_id, run.run_id);
    let mut resp = stream::sse(app, run, after, format, true, temporary).into_response();
    if let Ok(v) = location.parse() {
        resp.headers_mut().insert(axum::http::header::LOCATION, v);
    }
    if let Ok(v) = run_path.parse() {
        resp.headers_mut()
            .insert(axum::http::header::CONTENT_LOCATION, v);
    }
    resp
}

/// The run, from memory or, for a run this process does not know (it began before a restart,
/// or on another server), from its marker in the thread's log.
pub(crate) async fn found(
    app: &Shared,
    user: &User,
    tid: &str,
    rid: &str,
) -> Result<Arc<Run>, ApiError> {
    if let Some(run) = app.runs.get(tid, rid) {
        if run.user != user.0 {
            return Err(ApiError::not_found("run"));
        }
        crate::remote::follow(app, &run);
        return Ok(run);
    }
    let (rec, log) = threads::load_log(app, user, tid).await?;
    let run = match from_log(&rec, &log, Some(rid)) {
        Some(run) => run,
        // Queued (by this process before a restart, or by another): it begins later.
        None => crate::queue::pending(app, tid, rid)
            .await?
            .ok_or_else(|| ApiError::not_found("run"))?,
    };
    let run = app.runs.insert(Arc::new(run));
    crate::remote::follow(app, &run);
    Ok(run)
}

/// Run `rid` (the last run when `None`) as the thread's log tells it: where it began, and how
/// it stands (it ended when the session stopped running after its marker).
pub(crate) fn from_log(
    rec: &SessionRecord,
    log: &[weft_core::Envelope],
    rid: Option<&str>,
) -> Option<Run> {
    let at = log.iter().rposition(|e| {
        matches!(&e.event, weft_core::Event::RunStarted { run_id, .. } if rid.is_none_or(|r| r == run_id))
    })?;
    let weft_core::Event::RunStarted {
        run_id,
        after,
        traceparent,
        metadata,
    } = &log[at].event
    else {
        return None;
    };
    let next = log[at + 1..]
        .iter()
        .position(|e| matches!(e.event, weft_core::Event::RunStarted { .. }))
        .map_or(log.len(), |k| at + 1 + k);
    let st = weft_core::State::fold(log[..next].iter().map(|e| &e.event));
    let marker = Marker {
        run_id,
        after: *after,
        ts: log[at].ts,
        metadata,
    };
    let mut run = logged(rec, marker, &st);
    run.traceparent = traceparent.clone();
    Some(run)
}

/// Every run of the thread, as its log tells them, oldest first (one fold of the log).
pub(crate) fn all_from_log(rec: &SessionRecord, log: &[weft_core::Envelope]) -> Vec<Run> {
    let mut out = Vec::new();
    let mut st = weft_core::State::new();
    let mut open: Option<Marker> = None;
    for e in log {
        if let weft_core::Event::RunStarted {
            run_id,
            after,
            metadata,
            ..
        } = &e.event
        {
            if let Some(m) = open.take() {
                out.push(logged(rec, m, &st));
            }
            open = Some(Marker {
                run_id,
                after: *after,
                ts: e.ts,
                metadata,
            });
        }
        st.apply(&e.event);
    }
    if let Some(m) = open {
        out.push(logged(rec, m, &st));
    }
    out
}

/// A run's status as the session's state says it. A cancelled run is `interrupted`, as
/// LangGraph's server reports a run cancelled by request; a failed one is `error`.
pub(crate) fn ended_as(st: &weft_core::State) -> RunStatus {
    match st.status() {
        SessionStatus::Completed => RunStatus::Success,
        SessionStatus::Failed if weft_core::recovery::was_cancelled(st) => RunStatus::Interrupted,
        SessionStatus::Failed => RunStatus::Error,
        SessionStatus::WaitingForUser => RunStatus::Interrupted,
        SessionStatus::Running => RunStatus::Running,
    }
}

/// A run's marker in the log, and when it was written.
struct Marker<'a> {
    run_id: &'a String,
    after: u64,
    ts: i64,
    metadata: &'a Value,
}

/// A run found in the log: its marker and the session's state when the next run began (or
/// now).
fn logged(rec: &SessionRecord, m: Marker<'_>, st: &weft_core::State) -> Run {
    let status = ended_as(st);
    Run {
        run_id: m.run_id.clone(),
        thread_id: rec.id.clone(),
        assistant_id: st.agent().to_owned(),
        user: rec.user_id.clone().unwrap_or_default(),
        created_at: m.ts,
        start_seq: m.after.into(),
        metadata: match m.metadata {
            Value::Null => json!({}),
            v => v.clone(),
        },
        multitask_strategy: "reject".into(),
        traceparent: None,
        status: tokio::sync::watch::channel((status, st.seq())).0,
        cancelled: false.into(),
        place: Mutex::new(Place::Elsewhere),
        followed: false.into(),
    }
}

/// Queued run `q` as a run of this server (`from_log`: followed through the store, as a run
/// another process holds): pending, beginning after the thread's events as they are when it
/// starts.
pub(crate) fn from_queue(q: &weft_store::QueuedRun, from_log: bool) -> Run {
    let body = q.body.as_object();
    let field = |k: &str| body.and_then(|b| b.get(k));
    Run {
        run_id: q.run_id.clone(),
        thread_id: q.thread_id.clone(),
        assistant_id: field("assistant_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        user: q.user_id.clone(),
        created_at: q.created_at,
        start_seq: 0.into(),
        metadata: field("metadata")
            .filter(|m| !m.is_null())
            .cloned()
            .unwrap_or_else(|| json!({})),
        multitask_strategy: "enqueue".into(),
        traceparent: field("traceparent")
            .and_then(Value::as_str)
            .map(str::to_owned),
        status: tokio::sync::watch::channel((RunStatus::Pending, 0)).0,
        cancelled: false.into(),
        place: Mutex::new(if from_log {
            Place::Elsewhere
        } else {
            Place::Here
        }),
        followed: false.into(),
    }
}

/// Starts queued run `q` here from its stored request (its server stopped before it began): it
/// waits for its thread as it did there.
pub(crate) async fn start_queued(app: &Shared, q: &weft_store::QueuedRun) -> Result<(), ApiError> {
    let body: RunBody = serde_json::from_value(q.body.clone())
        .map_err(|e| ApiError::bad(format!("the queued run's request cannot be read: {e}")))?;
    let agent = app.assistant(&body.assistant_id)?.clone();
    let user = User(q.user_id.clone());
    let (rec, st) = threads::load(app, &user, &q.thread_id).await?;
    let (task, input) = task_and_input(body.input.as_ref())?;
    let resume = body.resume();
    let budget = body.budget(&st, &agent)?;
    let run = crate::queue::held_here(app, from_queue(q, false));
    run.begins_after(st.seq());
    let (accept, _) = tokio::sync::oneshot::channel();
    let task = execute(
        app.clone(),
        run,
        None,
        (task, resume, budget),
        agent,
        rec,
        input,
        accept,
    );
    app.runs.tasks.lock().await.spawn(task);
    Ok(())
}

/// Drives the sessions of this server's threads that no process drives (their server stopped
/// or died mid-run): claims them as a worker would, and finishes their runs, which clients find
/// by id and stream on from their last event id. A claim never takes a lease that runs, this
/// process's included: each claim is an owner of its own ([`weft_host::ownership::driver`]), and a
/// thread that never had a run has no events and is not claimed.
pub(crate) async fn adopt_orphans(app: Shared) {
    let mut agents: Vec<String> = app.agents.keys().cloned().collect();
    // A thread created empty (`POST /threads`) has no agent name on its record.
    agents.push(String::new());
    take_over_the_dead(&app, &agents).await;
    let mut queue = crate::queue::Tending::default();
    loop {
        if app.host.shutdown.is_requested() {
            return;
        }
        queue.tend(&app).await;
        let now = weft_runtime::now_ms();
        match app
            .store
            .claim(
                &weft_host::ownership::driver(),
                &agents,
                now,
                weft_host::ownership::ttl_ms(),
                8,
            )
            .await
        {
            Ok(leases) => {
                for lease in leases {
                    let held = weft_host::ownership::hold(&app.host, app.store.clone(), lease);
                    app.runs.tasks.lock().await.spawn(adopt(app.clone(), held));
                }
            }
            Err(e) => tracing::warn!("cannot claim orphaned threads: {e}"),
        }
        app.store.wait_for_work(Duration::from_secs(1)).await;
    }
}

/// At start: the running threads whose lease a process of this host holds that no longer exists
/// (a server killed with SIGKILL) are taken over at once, as `weft resume` would, rather than
/// after their lease runs out.
async fn take_over_the_dead(app: &Shared, agents: &[String]) {
    let filter = weft_store::ListFilter {
        user_id: None,
        status: Some(SessionStatus::Running),
        limit: None,
    };
    let running = match app.store.list(&filter).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("cannot list the running threads: {e}");
            return;
        }
    };
    let now = weft_runtime::now_ms();
    for rec in running {
        if rec.last_seq == 0 || !agents.contains(&rec.agent) {
            continue;
        }
        let dead = matches!(
            app.store.lease(&rec.id).await,
            Ok(Some(l)) if l.expires_at > now && weft_host::ownership::owner_gone(&l.owner)
        );
        if !dead {
            continue;
        }
        let owner = weft_host::ownership::driver();
        match weft_host::ownership::take_as(&app.host, app.store.clone(), &rec.id, false, &owner)
            .await
        {
            Ok(held) => {
                app.runs.tasks.lock().await.spawn(adopt(app.clone(), held));
            }
            Err(e) => {
                tracing::info!(thread = %rec.id, "not taken over: {}", crate::message(&e.into()))
            }
        }
    }
}

async fn adopt(app: Shared, held: weft_host::ownership::Held<weft_store::AnyStore>) {
    let tid = held.fence().0;
    let result: anyhow::Result<()> = async {
        let (rec, log) = app.store.load(&tid).await?;
        if rec.status != SessionStatus::Running {
            return Ok(());
        }
        let st = weft_runtime::load_state(app.store.as_ref(), &tid)
            .await?
            .state;
        let Some(agent) = app.agents.get(st.agent()).cloned() else {
            return Ok(());
        };
        let run = match from_log(&rec, &log, None) {
            Some(r) => app.runs.insert(Arc::new(r)),
            None => return Ok(()),
        };
        run.status.send_replace((RunStatus::Running, st.seq()));
        // Driven here from now on, though it may have been followed through the store.
        run.driven_here();
        if let Ok(mut a) = app.runs.active.lock() {
            a.insert(tid.clone(), run.run_id.clone());
        }
        app.runs.text_after(&tid, st.seq());
        // Its spans continue the run's trace (under the `traceparent` its marker recorded).
        tracing::info!(thread = %tid, run = %run.run_id, "continuing a run whose server stopped");
        let outcome = weft_host::run::continue_run(
            &app.host,
            app.store.clone(),
            &held,
            (&rec, &agent),
            || watchers(&app, &tid),
        )
        .await;
        let outcome = Outcome::from(outcome);
        finish(&app, &run, outcome).await;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(thread = %tid, "cannot continue the thread: {}", crate::message(&e));
    }
    held.release().await;
}

pub(crate) async fn get(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((tid, rid)): Path<(String, String)>,
) -> Result<Json<RunInfo>, ApiError> {
    let run = found(&app, &user, &tid, &rid).await?;
    crate::remote::refresh(&app, &run).await;
    Ok(Json(run.json()))
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    /// At most this many (default 10, at most 1,000).
    limit: Option<usize>,
    offset: Option<usize>,
    /// Only runs with this status (`pending`, `running`, `success`, `error`, `interrupted`).
    status: Option<String>,
}

/// The thread's runs, newest first: every run its log has a marker for (so a restarted server
/// lists the runs of the one before), with this process's record of a run where it has one
/// (its metadata), and the runs queued here that have not begun.
pub(crate) async fn list(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    axum::extract::Query(q): axum::extract::Query<ListQuery>,
) -> Result<Json<Vec<RunInfo>>, ApiError> {
    let (rec, log) = threads::load_log(&app, &user, &tid).await?;
    let mut here: HashMap<String, Arc<Run>> = app
        .runs
        .runs
        .lock()
        .map(|r| {
            r.values()
                // A run found in the log is listed as the log tells it now.
                .filter(|r| r.thread_id == tid && r.user == user.0 && !r.followed_from_store())
                .map(|r| (r.run_id.clone(), r.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut runs: Vec<Arc<Run>> = all_from_log(&rec, &log)
        .into_iter()
        .map(|r| here.remove(&r.run_id).unwrap_or_else(|| Arc::new(r)))
        .collect();
    runs.extend(here.into_values());
    for q in crate::queue::of_thread(&app, &tid).await? {
        if !runs.iter().any(|r| r.run_id == q.run_id) {
            runs.push(Arc::new(q));
        }
    }
    runs.sort_by_key(|r| std::cmp::Reverse(r.created_at));
    let limit = q.limit.unwrap_or(10).min(1000);
    let listed: Vec<RunInfo> = runs
        .iter()
        .map(|r| r.json())
        .filter(|r| q.status.as_deref().is_none_or(|s| r.status.as_str() == s))
        .skip(q.offset.unwrap_or(0))
        .take(limit)
        .collect();
    Ok(Json(listed))
}

pub(crate) async fn join(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((tid, rid)): Path<(String, String)>,
) -> Result<Json<threads::Values>, ApiError> {
    let run = found(&app, &user, &tid, &rid).await?;
    final_values(&app, &user, &run).await
}

/// The run's events after `Last-Event-ID` (all of them without it), then live until it ends.
pub(crate) async fn join_stream(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((tid, rid)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // An unknown run is 404 whatever the modes asked.
    let run = found(&app, &user, &tid, &rid).await?;
    let modes = stream::query_modes(&query)?;
    // The stream clamps a position before the run to its beginning.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(stream::Position::parse)
        .unwrap_or_else(|| stream::Position::after(run.start_seq()));
    Ok(stream::sse(
        app,
        run,
        after,
        stream::Format::LangGraph(modes),
        false,
        None,
    )
    .into_response())
}

/// Cancels a run: its calls in flight are stopped and recorded as cancelled, and the session
/// ends as failed (a new run gives the thread a new task); the run's status is `interrupted`.
pub(crate) async fn cancel(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((tid, rid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let run = found(&app, &user, &tid, &rid).await?;
    stop(&app, &run).await?;
    let _ = tokio::time::timeout(Duration::from_secs(30), run.finished()).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Asks a run to stop: a queued run never begins; a running one is cancelled through its
/// thread's lease (its calls in flight stopped and recorded).
async fn stop(app: &Shared, run: &Arc<Run>) -> Result<(), ApiError> {
    let (status, _) = *run.status.borrow();
    match status {
        s if s.is_final() => Ok(()),
        RunStatus::Pending => {
            run.cancelled
                .store(true, std::sync::atomic::Ordering::Release);
            // Its record goes too, so that the process that queued it never starts it.
            crate::queue::cancel(app, run).await?;
            app.runs.waker(&run.thread_id).notify_waiters();
            Ok(())
        }
        _ if app.runs.active_run(&run.thread_id).as_deref() == Some(run.run_id.as_str()) => {
            app.store
                .request(&run.thread_id, "cancel", weft_runtime::now_ms())
                .await?;
            Ok(())
        }
        _ => crate::remote::cancel(app, run).await,
    }
}

/// Makes thread `tid` for `user` (`exists_ok`: a thread of that id is left as it is; whose it
/// is is checked when it is loaded).
async fn create_thread(
    app: &Shared,
    user: &User,
    tid: &str,
    exists_ok: bool,
) -> Result<(), ApiError> {
    let new = weft_store::NewSession {
        id: tid.to_owned(),
        user_id: Some(user.0.clone()),
        agent: String::new(),
        metadata: json!({}),
        ..weft_store::NewSession::default()
    };
    match app.store.create(new, weft_runtime::now_ms()).await {
        Ok(_) => Ok(()),
        Err(weft_store::StoreError::Exists(_)) if exists_ok => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The thread made for a threadless run, deleted once the run has ended and whoever holds
/// this (the request's answer, its stream) has let it go, unless `keep`. A run that waits for
/// a person, or stopped with its server, keeps its thread (it can still be answered or
/// continued).
pub(crate) struct Temporary {
    app: Shared,
    run: Arc<Run>,
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let (app, run) = (self.app.clone(), self.run.clone());
        tokio::spawn(async move {
            run.finished().await;
            if app.host.shutdown.is_requested() {
                return;
            }
            let tid = &run.thread_id;
            let ended = matches!(
                app.store.get(tid).await,
                Ok(r) if r.status.is_terminal()
            );
            if ended && !app.runs.active_on(tid) {
                if let Err(e) = app.store.delete(tid).await {
                    tracing::warn!(thread = %tid, "cannot delete a threadless run's thread: {e}");
                }
                app.runs.forget_thread(tid);
            }
        });
    }
}

/// Starts a threadless run: on a thread made for it, deleted when the run ends unless
/// `on_completion` is `keep` (then `None`).
async fn start_threadless(
    app: &Shared,
    user: &User,
    body: RunBody,
) -> Result<(Arc<Run>, Option<Temporary>), ApiError> {
    let tid = uuid::Uuid::now_v7().to_string();
    start_threadless_on(app, user, body, &tid, None).await
}

/// [`start_threadless`] on thread `tid`, made for the run unless it exists already (a cron's
/// tick taken up again after its server died names the same thread), as run `run_id` if given.
pub(crate) async fn start_threadless_on(
    app: &Shared,
    user: &User,
    body: RunBody,
    tid: &str,
    run_id: Option<String>,
) -> Result<(Arc<Run>, Option<Temporary>), ApiError> {
    crate::health::refuse_while_down(app)?;
    let keep = match body.on_completion.as_deref() {
        None | Some("delete") => false,
        Some("keep") => true,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "on_completion `{other}`: use `delete` or `keep`"
            )));
        }
    };
    app.assistant(&body.assistant_id)?;
    create_thread(app, user, tid, run_id.is_some()).await?;
    let run = match start_with_id(app, user, tid, body, run_id).await {
        Ok(run) => run,
        Err(e) => {
            // Nothing ran on it: the thread goes with the refusal.
            let _ = app.store.delete(tid).await;
            return Err(e);
        }
    };
    let temporary = (!keep).then(|| Temporary {
        app: app.clone(),
        run: run.clone(),
    });
    Ok((run, temporary))
}

pub(crate) async fn create_threadless(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Json(mut body): Json<RunBody>,
) -> Result<Json<RunInfo>, ApiError> {
    body.traceparent = traceparent(&headers);
    let (run, temporary) = start_threadless(&app, &user, body).await?;
    drop(temporary);
    Ok(Json(run.json()))
}

pub(crate) async fn wait_threadless(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Json(mut body): Json<RunBody>,
) -> Result<Response, ApiError> {
    body.traceparent = traceparent(&headers);
    let (run, temporary) = start_threadless(&app, &user, body).await?;
    Ok(waiting(app, user, run, temporary))
}

pub(crate) async fn stream_threadless(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Json(mut body): Json<RunBody>,
) -> Result<Response, ApiError> {
    body.traceparent = traceparent(&headers);
    let modes = stream::modes(body.stream_mode.as_ref())?;
    let (run, temporary) = start_threadless(&app, &user, body).await?;
    Ok(streaming(app, run, modes, temporary))
}

/// `runs.create_batch`: each run started in the background in the order given, on its
/// `thread_id` or on a thread made for it. The assistants are checked first; a run refused
/// after that stops the batch with its error (the runs before it go on).
pub(crate) async fn create_batch(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    headers: HeaderMap,
    Json(mut bodies): Json<Vec<RunBody>>,
) -> Result<Json<Vec<RunInfo>>, ApiError> {
    let parent = traceparent(&headers);
    for b in &mut bodies {
        b.traceparent.clone_from(&parent);
    }
    for (i, b) in bodies.iter().enumerate() {
        if !app.agents.contains_key(&b.assistant_id) {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "[{i}].assistant_id: assistant `{}` not found",
                    b.assistant_id
                ),
            ));
        }
    }
    let mut out = Vec::with_capacity(bodies.len());
    for (i, mut b) in bodies.into_iter().enumerate() {
        let started = match b.thread_id.take() {
            Some(tid) => start(&app, &user, &tid, b).await,
            None => start_threadless(&app, &user, b).await.map(|(run, _)| run),
        };
        let run = started.map_err(|e| ApiError::new(e.0, format!("[{i}]: {}", e.1)))?;
        out.push(run.json());
    }
    Ok(Json(out))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct CancelMany {
    /// The thread whose runs are cancelled (all of them, or those of `run_ids`).
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    run_ids: Option<Vec<String>>,
    /// Every run of the user with this status: `pending`, `running` or `all`.
    #[serde(default)]
    status: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CancelQuery {
    /// `interrupt` (the default); `rollback` is not supported.
    action: Option<String>,
}

/// `runs.cancel_many`: the runs named (by `run_ids` of `thread_id`, every run of `thread_id`,
/// or every run of the user with `status`) are cancelled as `runs.cancel` cancels one; answers
/// once they stopped (at most 30 s).
pub(crate) async fn cancel_many(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    axum::extract::Query(q): axum::extract::Query<CancelQuery>,
    Json(body): Json<CancelMany>,
) -> Result<StatusCode, ApiError> {
    match q.action.as_deref() {
        None | Some("interrupt") => {}
        Some("rollback") => {
            return Err(ApiError::bad(
                "action `rollback` is not supported: a weft run's events stay in its thread's log; \
                 cancel with action `interrupt`, then delete the thread (threads.delete) or fork it \
                 before the run (POST /sessions/{id}/fork with `at`)",
            ));
        }
        Some(other) => {
            return Err(ApiError::bad(format!("action `{other}`: use `interrupt`")));
        }
    }
    let status = match body.status.as_deref() {
        None => None,
        Some(s @ ("pending" | "running" | "all")) => Some(s),
        Some(other) => {
            return Err(ApiError::bad(format!(
                "status `{other}`: use `pending`, `running` or `all`"
            )));
        }
    };
    // The user's runs this process holds, and those the store shows running elsewhere (another
    // replica, a worker, or no process yet).
    let mut mine: Vec<Arc<Run>> = app
        .runs
        .runs
        .lock()
        .map(|r| r.values().filter(|r| r.user == user.0).cloned().collect())
        .unwrap_or_default();
    if body.thread_id.is_none() {
        for run in crate::remote::running(&app, &user).await? {
            if !mine.iter().any(|r| Arc::ptr_eq(r, &run)) {
                mine.push(run);
            }
        }
    }
    let chosen: Vec<Arc<Run>> = match (&body.thread_id, &body.run_ids, status) {
        (Some(tid), Some(ids), _) => {
            let mut out = Vec::new();
            for id in ids {
                out.push(found(&app, &user, tid, id).await?);
            }
            out
        }
        (None, Some(ids), _) => mine
            .into_iter()
            .filter(|r| ids.contains(&r.run_id))
            .collect(),
        (Some(tid), None, _) => {
            let (rec, log) = threads::load_log(&app, &user, tid).await?;
            let mut out: Vec<Arc<Run>> = mine
                .into_iter()
                .filter(|r| &r.thread_id == tid && !r.status.borrow().0.is_final())
                .collect();
            // The thread's run going elsewhere, as its log tells it.
            if let Some(last) = from_log(&rec, &log, None)
                && !last.status.borrow().0.is_final()
                && !out.iter().any(|r| r.run_id == last.run_id)
            {
                out.push(found(&app, &user, tid, &last.run_id).await?);
            }
            // The runs queued on it, wherever they wait.
            for q in app.store.queued_runs_of(tid).await? {
                if !out.iter().any(|r| r.run_id == q.run_id) {
                    out.push(found(&app, &user, tid, &q.run_id).await?);
                }
            }
            out
        }
        (None, None, Some(status)) => {
            // The user's runs queued on any replica, wherever they wait.
            if status != "running" {
                for q in app.store.queued_runs_of_user(&user.0).await? {
                    if !mine.iter().any(|r| r.run_id == q.run_id)
                        && let Ok(run) = found(&app, &user, &q.thread_id, &q.run_id).await
                    {
                        mine.push(run);
                    }
                }
            }
            mine.into_iter()
                .filter(|r| {
                    let s = r.status.borrow().0;
                    match status {
                        "pending" => s == RunStatus::Pending,
                        "running" => s == RunStatus::Running,
                        _ => !s.is_final(),
                    }
                })
                .collect()
        }
        (None, None, None) => {
            return Err(ApiError::bad(
                "say which runs: thread_id, run_ids (with thread_id), or status",
            ));
        }
    };
    for run in &chosen {
        stop(&app, run).await?;
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        for run in &chosen {
            run.finished().await;
        }
    })
    .await;
    Ok(StatusCode::NO_CONTENT)
}
