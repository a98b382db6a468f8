//! Runs: one turn of a thread's session (a new task, an answer to a wait, or the continuation of
//! a session whose process stopped), driven in this process under the session's lease, as `weft
//! run` drives it, through [`weft_host::run`]: this module turns the requests of a thread's runs
//! into calls of it and its outcome into the run's status. A run's record lives in memory
//! (`registry.rs`); its events live in the session's log, which is what `wait`, `join` and the
//! streams read, so a client sees the same thing whichever it uses. A run another process drives
//! (a replica on the same store, a worker) is found by its marker in the log and followed
//! through the store (`remote.rs`); runs on threads made for them are in `threadless.rs`, and
//! threads no process drives are taken up in `orphans.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weft_core::SessionStatus;

use weft_store::{Leases, RunQueue, SessionLog, SessionRecord};

use super::auth::User;
use super::openapi::{self, Route};
use super::registry::{Run, RunInfo, RunStatus, Temporary, ended_as, from_log};
use super::{ApiError, Shared, stream, threads};
use weft_host::HostError;
use weft_host::drive::AgentFile;
use weft_host::run::{Outcome, Work};

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
pub(crate) async fn start(
    app: &Shared,
    user: &User,
    tid: &str,
    body: RunBody,
) -> Result<Arc<Run>, ApiError> {
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
        && app.runs.contains(id)
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
    let budget = body.budget(&st, &agent)?;
    let strategy = body
        .multitask_strategy
        .clone()
        .unwrap_or_else(|| "reject".into());
    let ask = weft_host::run::Ask {
        user: &user.0,
        agent: &agent,
        session: (&rec, &st),
        task: task.clone(),
        resume: resume.clone(),
        input: &input,
        // An enqueued run waits for the run before it, whichever process drives that one.
        wait_turn: strategy == "enqueue",
    };
    // Taken before answering, so that a thread another process drives is refused at once
    // (unless the run is enqueued: then it waits for the thread).
    let opened = weft_host::run::open(&app.host, app.store.clone(), ask, || {
        app.runs.active_on(tid)
    })
    .await;
    let opened = match opened {
        Ok(o) => o,
        Err(e @ HostError::OverQuota { .. }) => {
            app.metrics.quota_refused();
            return Err(e.into());
        }
        Err(HostError::Busy(why)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("{why} (multitask_strategy `{strategy}`)"),
            ));
        }
        // Another process drives the thread, or the store could not be asked.
        Err(e) if busy_or_away(&e) => return Err(not_taken(e)),
        Err(e) => return Err(e.into()),
    };
    if let Some(b) = &budget {
        weft_runtime::budget::warn_unpriced(agent.model.as_ref(), Some(b));
    }
    let queued = matches!(opened, weft_host::run::Opened::Queued);
    let run = Arc::new(Run::new(
        run_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        (tid, &agent.spec.name, &user.0),
        st.seq(),
        body.metadata.clone().unwrap_or_else(|| json!({})),
        strategy,
        body.traceparent.clone(),
        queued,
    ));
    app.runs.insert(run.clone());
    let start = match opened {
        weft_host::run::Opened::Now { taken, work } => Some((began(app, &run, taken), work)),
        weft_host::run::Opened::Queued => {
            // Stored before it is answered: a queued run outlives this process.
            if let Err(e) = crate::queue::keep(app, &run, &body).await {
                app.runs.forget(&run.run_id);
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the run could not be queued: {}", crate::message(&e.into())),
                ));
            }
            None
        }
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
    app.runs.spawn(task).await;
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
/// here ([`began`]).
async fn take(
    app: &Shared,
    run: &Arc<Run>,
) -> Result<weft_host::ownership::Held<weft_store::AnyStore>, HostError> {
    let taken = weft_host::run::take(&app.host, app.store.clone(), &run.thread_id, || {
        app.runs.active_on(&run.thread_id)
    })
    .await?;
    Ok(began(app, run, taken))
}

/// Makes `run`, whose thread was taken, the thread's active one here: after what was written
/// while the lease was waited for.
fn began(
    app: &Shared,
    run: &Arc<Run>,
    taken: weft_host::run::Taken<weft_store::AnyStore>,
) -> weft_host::ownership::Held<weft_store::AnyStore> {
    if let Some(after) = taken.after {
        run.begins_after(after);
        run.status.send_replace((RunStatus::Pending, after));
    }
    app.runs.activate(run);
    taken.held
}

/// Whether the thread could not be taken for a moment only: another process drives it, or the
/// store could not be asked.
fn busy_or_away(e: &HostError) -> bool {
    matches!(e, HostError::Leased(_))
        || weft_host::store_error_in(e).is_some_and(weft_store::StoreError::is_infrastructure)
}

/// Why a run's thread could not be taken, as the request that started it is answered: a store
/// that could not be asked is an outage the client can try again after (503); anything else
/// (another process drives the thread) is a conflict (409).
fn not_taken(e: HostError) -> ApiError {
    let outage =
        weft_host::store_error_in(&e).is_some_and(weft_store::StoreError::is_infrastructure);
    let text = crate::message_of(&e);
    if outage {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the run could not be started: {text}; try again"),
        )
        .retry_after(2)
    } else {
        ApiError::new(StatusCode::CONFLICT, text)
    }
}

/// Waits until queued run `run` may take its thread (the run before it ended, whichever process
/// drove it) and takes it: the lease, or `None` when another process began the run meanwhile
/// (it is followed from then on), or why it ends before it began (it was cancelled).
async fn wait_for_thread(
    app: &Shared,
    run: &Arc<Run>,
) -> Result<Option<weft_host::ownership::Held<weft_store::AnyStore>>, HostError> {
    use crate::queue::Standing;
    let cancelled = || {
        run.cancelled
            .store(true, std::sync::atomic::Ordering::Release);
        HostError::Refused("the run was cancelled before it began".into())
    };
    let waker = app.runs.waker(&run.thread_id);
    loop {
        if run.cancelled.load(std::sync::atomic::Ordering::Acquire) {
            return Err(cancelled());
        }
        if !app.runs.active_on(&run.thread_id) && crate::remote::free(app, &run.thread_id).await {
            match crate::queue::standing(app, run, false).await {
                Standing::Queued => {}
                Standing::Began => return Ok(None),
                // Cancelled by another process: it ends as one cancelled here.
                Standing::Cancelled => return Err(cancelled()),
            }
            match take(app, run).await {
                // Another process took the thread first, or the store is away for a moment:
                // wait for the thread again.
                Err(e) if busy_or_away(&e) => {}
                Err(e) => return Err(e),
                // Another process that took the run over (this one froze past its claim) may
                // have begun it meanwhile.
                Ok(held) => match crate::queue::standing(app, run, true).await {
                    Standing::Queued => return Ok(Some(held)),
                    standing => {
                        app.runs.let_go(run);
                        held.release().await;
                        return match standing {
                            Standing::Began => Ok(None),
                            _ => Err(cancelled()),
                        };
                    }
                },
            }
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), waker.notified()).await;
    }
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
    let (held, work) = match start {
        Some((h, work)) => (Ok(h), Ok(work)),
        // Enqueued: wait for the run before it to end, then decide from the thread as it is.
        None => {
            let held = match wait_for_thread(&app, &run).await {
                Ok(Some(held)) => Ok(held),
                Ok(None) => return crate::queue::follow(&app, &run),
                Err(e) => Err(e),
            };
            let work = match weft_runtime::load_state(app.store.as_ref(), &run.thread_id).await {
                Ok(loaded) => {
                    let st = loaded.state;
                    run.begins_after(st.seq());
                    weft_host::run::decide(&run.thread_id, &st, task, resume)
                }
                Err(e) => Err(e.into()),
            };
            (held, work)
        }
    };
    let outcome = match (held, work) {
        (Ok(held), Err(e)) => {
            held.release().await;
            Outcome::Failed(e)
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
            weft_host::run::drive(
                &app.host,
                app.store.clone(),
                held,
                start,
                || watchers(&app, &run.thread_id),
                stored,
            )
            .await
        }
        (Err(e), _) => Outcome::Failed(e),
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
pub(crate) fn watchers(app: &Shared, thread: &str) -> weft_host::drive::Watchers {
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
pub(crate) async fn finish(app: &Shared, run: &Arc<Run>, outcome: Outcome) {
    let waker = app.runs.waker(&run.thread_id);
    if let Outcome::Lost(e) = &outcome {
        tracing::warn!(
            run = %run.run_id,
            thread = %run.thread_id,
            "this process cannot go on with the run; following it through the store, where it goes on: {}",
            crate::message_of(e)
        );
        app.runs.let_go(run);
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
    app.runs.let_go(run);
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
pub(crate) fn waiting(
    app: Shared,
    user: User,
    run: Arc<Run>,
    temporary: Option<Temporary>,
) -> Response {
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
pub(crate) fn streaming(
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
    let run = crate::queue::held_here(app, Run::from_queue(q, false));
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
    app.runs.spawn(task).await;
    Ok(())
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
        // A run found in the log is listed as the log tells it now.
        .matching(|r| r.thread_id == tid && r.user == user.0 && !r.followed_from_store())
        .into_iter()
        .map(|r| (r.run_id.clone(), r))
        .collect();
    let mut runs: Vec<Arc<Run>> = weft_host::markers::all(&log)
        .into_iter()
        .map(|l| {
            here.remove(&l.run_id)
                .unwrap_or_else(|| Arc::new(Run::logged(&rec, l)))
        })
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
pub(crate) async fn create_thread(
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
    let mut mine: Vec<Arc<Run>> = app.runs.matching(|r| r.user == user.0);
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
