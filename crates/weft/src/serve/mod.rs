//! `weft serve`: weft over HTTP, speaking LangGraph Server's API so that the official
//! `langgraph-sdk` clients work against it unchanged.
//!
//! - `auth.rs`: API keys, each mapped to a user; every route but `/health` needs one.
//! - `threads.rs`: assistants (one per agent file) and threads (sessions), their state and
//!   history as LangGraph clients read them.
//! - `runs.rs`: runs (a turn of a session, driven under the session's lease in this process),
//!   wait, join, cancel.
//! - `stream.rs`: a run's events as server-sent events (`values`, `updates`, `messages`,
//!   `custom`, `end`), each part with an id of its own (its event and mode, or how far a text
//!   reaches), so that a client that reconnects with `Last-Event-ID` loses and repeats nothing.
//! - `agui.rs`: the AG-UI protocol (`POST /ag-ui/{agent}`) over the same runs and streams.
//! - `sessions.rs`: weft's own routes (`/sessions`, `/agents`): sessions across agents with
//!   their cost, a session at any event, its typed events live, fork, pause, cancel, and the
//!   check of an edited plan; `view.rs` folds a log into what they answer.
//! - `playground.rs`: the web page at `/`, whose embedded files call those routes.

mod agui;
mod auth;
mod metrics;
mod openapi;
mod playground;
mod runs;
mod sessions;
mod stream;
mod threads;
mod view;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use serde_json::json;

use crate::drive::AgentFile;
use crate::store::CliStore;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The agent files served as assistants: files, or directories whose `.yaml`, `.yml` and
    /// `.json` agent files are all taken (default: the current directory).
    #[arg(long, default_value = ".")]
    pub agents: Vec<PathBuf>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:2024")]
    pub listen: SocketAddr,
    /// A file of API keys, one `KEY USER` pair per line (`#` starts a comment). `WEFT_API_KEYS`
    /// (`KEY=USER,KEY=USER`) adds more.
    #[arg(long)]
    pub keys: Option<PathBuf>,
    /// The largest request body accepted (bytes).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body: usize,
    /// Runs one user may have going at once (more are refused with 429).
    #[arg(long, default_value_t = 100)]
    pub max_runs_per_user: usize,
}

/// What every handler shares.
pub struct App {
    pub store: Arc<CliStore>,
    pub agents: HashMap<String, Arc<AgentFile>>,
    pub runs: runs::Runs,
    pub max_runs_per_user: usize,
    pub metrics: metrics::Metrics,
    pub summaries: sessions::Summaries,
}

impl App {
    /// The assistant (agent) named `id`, or 404.
    pub fn assistant(&self, id: &str) -> Result<&Arc<AgentFile>, ApiError> {
        self.agents
            .get(id)
            .ok_or_else(|| ApiError::not_found("assistant"))
    }
}

pub type Shared = Arc<App>;

/// An API error: a status and a JSON body `{"detail": ...}` (what LangGraph's server sends),
/// never a stack trace or a secret.
pub struct ApiError(pub StatusCode, pub String);

impl ApiError {
    pub fn not_found(what: &str) -> Self {
        Self(StatusCode::NOT_FOUND, format!("{what} not found"))
    }
    pub fn bad(msg: impl Into<String>) -> Self {
        Self(StatusCode::UNPROCESSABLE_ENTITY, msg.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"detail": self.1}))).into_response()
    }
}

impl From<weft_store::StoreError> for ApiError {
    fn from(e: weft_store::StoreError) -> Self {
        match e {
            weft_store::StoreError::NotFound(_) => Self::not_found("thread"),
            weft_store::StoreError::Leased { .. } => {
                Self(StatusCode::CONFLICT, "the thread is busy with a run".into())
            }
            other => {
                tracing::warn!("store error: {other}");
                Self(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the session store failed; try again".into(),
                )
            }
        }
    }
}

pub async fn run(store: Arc<CliStore>, a: ServeArgs) -> Result<u8> {
    let keys = auth::Keys::load(a.keys.as_deref())?;
    let agents = crate::drive::agents(&a.agents).await?;
    crate::store::agent_durability(store.as_ref(), agents.values().map(|f| &f.spec));
    let app: Shared = Arc::new(App {
        store,
        agents,
        runs: runs::Runs::default(),
        max_runs_per_user: a.max_runs_per_user,
        metrics: metrics::Metrics::default(),
        summaries: sessions::Summaries::default(),
    });
    let router = router(app.clone(), keys, a.max_body);
    // Threads whose server stopped mid-run are continued here.
    tokio::spawn(runs::adopt_orphans(app.clone()));
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .map_err(|e| anyhow!("cannot listen on {}: {e}", a.listen))?;
    let mut names: Vec<&String> = app.agents.keys().collect();
    names.sort();
    eprintln!(
        "weft serve: listening on http://{} (the playground is at /) with assistants {}",
        listener.local_addr().unwrap_or(a.listen),
        names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // On SIGTERM or Ctrl-C: runs stop at their next safe point and let their sessions go (the
    // next `weft serve` on the store continues them); streams end without `end`, so clients
    // reconnect with their last event id.
    let stopping = async {
        crate::interrupt::signal().await;
        crate::interrupt::begin();
    };
    axum::serve(listener, router)
        .with_graceful_shutdown(stopping)
        .await
        .map_err(|e| anyhow!("the server stopped: {e}"))?;
    app.runs.wait_all(crate::interrupt::grace()).await;
    eprintln!("weft serve: stopped");
    Ok(0)
}

async fn metrics_text(axum::extract::State(app): axum::extract::State<Shared>) -> Response {
    let (active, pending) = app.runs.counts();
    app.metrics.active.set(active);
    app.metrics.pending.set(pending);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}

/// A documented route: its handlers, and one entry of the OpenAPI document per method.
struct Api {
    path: &'static str,
    handler: axum::routing::MethodRouter<Shared>,
    docs: Vec<openapi::Route>,
}

fn doc(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    body: Option<fn() -> serde_json::Value>,
    answers: &'static str,
) -> openapi::Route {
    openapi::Route {
        method,
        path,
        summary,
        body,
        answers,
    }
}

/// Every route that needs a key: the router and `/openapi.json` are both made from this table.
fn api() -> Vec<Api> {
    use openapi::schema_of;
    let one = |path, handler, d: openapi::Route| Api {
        path,
        handler,
        docs: vec![d],
    };
    vec![
        one(
            "/assistants/search",
            post(threads::search_assistants),
            doc(
                "post",
                "/assistants/search",
                "List the assistants (one per agent file)",
                Some(schema_of::<threads::SearchAssistants>),
                "a list of assistants",
            ),
        ),
        one(
            "/assistants/count",
            post(threads::count_assistants),
            doc(
                "post",
                "/assistants/count",
                "How many assistants match (graph_id, name, metadata)",
                Some(schema_of::<threads::CountAssistants>),
                "a number",
            ),
        ),
        one(
            "/assistants/{id}",
            get(threads::get_assistant),
            doc(
                "get",
                "/assistants/{id}",
                "An assistant, by its agent's name",
                None,
                "the assistant",
            ),
        ),
        one(
            "/assistants/{id}/graph",
            get(threads::assistant_graph),
            doc(
                "get",
                "/assistants/{id}/graph",
                "The agent as LangGraph's graph: the loop of `agent` and, when it has tools, `tools` (plan and workflow steps are not nodes)",
                None,
                "{nodes, edges}",
            ),
        ),
        one(
            "/assistants/{id}/schemas",
            get(threads::assistant_schemas),
            doc(
                "get",
                "/assistants/{id}/schemas",
                "The input a run takes and the thread's values (state and output); no config or context",
                None,
                "{graph_id, input_schema, output_schema, state_schema, config_schema, context_schema}",
            ),
        ),
        one(
            "/threads",
            post(threads::create_thread),
            doc(
                "post",
                "/threads",
                "Create a thread (a session) owned by the key's user",
                Some(schema_of::<threads::CreateThread>),
                "the thread",
            ),
        ),
        one(
            "/threads/search",
            post(threads::search_threads),
            doc(
                "post",
                "/threads/search",
                "The user's threads, newest first",
                Some(schema_of::<threads::SearchThreads>),
                "a list of threads",
            ),
        ),
        one(
            "/threads/count",
            post(threads::count_threads),
            doc(
                "post",
                "/threads/count",
                "How many of the user's threads match (status, metadata, values; of the newest 10,000)",
                Some(schema_of::<threads::CountThreads>),
                "a number",
            ),
        ),
        Api {
            path: "/threads/{tid}",
            handler: get(threads::get_thread).delete(threads::delete_thread),
            docs: vec![
                doc(
                    "get",
                    "/threads/{tid}",
                    "A thread: status (idle, busy, interrupted, error), values, interrupts",
                    None,
                    "the thread",
                ),
                doc(
                    "delete",
                    "/threads/{tid}",
                    "Not supported (405): `weft sessions prune` removes old sessions",
                    None,
                    "never",
                ),
            ],
        },
        one(
            "/threads/{tid}/state",
            get(threads::get_state),
            doc(
                "get",
                "/threads/{tid}/state",
                "The thread's state: values, next, tasks with interrupts, checkpoint",
                None,
                "the state",
            ),
        ),
        one(
            "/threads/{tid}/history",
            post(threads::history),
            doc(
                "post",
                "/threads/{tid}/history",
                "The thread's states after each turn ended or waited, newest first",
                Some(schema_of::<threads::History>),
                "a list of states",
            ),
        ),
        Api {
            path: "/threads/{tid}/runs",
            handler: post(runs::create_background).get(runs::list),
            docs: vec![
                doc(
                    "post",
                    "/threads/{tid}/runs",
                    "Start a run in the background",
                    Some(schema_of::<runs::RunBody>),
                    "the run (pending)",
                ),
                doc(
                    "get",
                    "/threads/{tid}/runs",
                    "The thread's runs from its log, newest first (query: limit, offset, status)",
                    None,
                    "a list of runs",
                ),
            ],
        },
        one(
            "/threads/{tid}/runs/wait",
            post(runs::create_wait),
            doc(
                "post",
                "/threads/{tid}/runs/wait",
                "Start a run and answer with the thread's values when it ends or waits (`__interrupt__`); the headers come at once (Location: the run's join, to ask again after a dropped connection)",
                Some(schema_of::<runs::RunBody>),
                "the thread's values",
            ),
        ),
        one(
            "/threads/{tid}/runs/stream",
            post(runs::create_stream),
            doc(
                "post",
                "/threads/{tid}/runs/stream",
                "Start a run and stream it (server-sent events: metadata, values, updates, messages, custom, end or error; ids are sequence numbers)",
                Some(schema_of::<runs::RunBody>),
                "text/event-stream; Location: where to reconnect",
            ),
        ),
        one(
            "/threads/{tid}/runs/{rid}",
            get(runs::get),
            doc("get", "/threads/{tid}/runs/{rid}", "A run", None, "the run"),
        ),
        one(
            "/threads/{tid}/runs/{rid}/join",
            get(runs::join),
            doc(
                "get",
                "/threads/{tid}/runs/{rid}/join",
                "Wait for a run and answer with the thread's values",
                None,
                "the thread's values",
            ),
        ),
        one(
            "/threads/{tid}/runs/{rid}/stream",
            get(runs::join_stream),
            doc(
                "get",
                "/threads/{tid}/runs/{rid}/stream",
                "A run's stream after Last-Event-ID (all of it without), then live until it ends",
                None,
                "text/event-stream",
            ),
        ),
        one(
            "/threads/{tid}/runs/{rid}/cancel",
            post(runs::cancel),
            doc(
                "post",
                "/threads/{tid}/runs/{rid}/cancel",
                "Cancel a run: its calls in flight are stopped and recorded, the session ends as failed",
                None,
                "204 once it stopped",
            ),
        ),
        one(
            "/ag-ui/{agent}",
            post(agui::run),
            doc(
                "post",
                "/ag-ui/{agent}",
                "Run an agent with an AG-UI RunAgentInput and stream AG-UI events",
                Some(schema_of::<agui::RunAgentInput>),
                "text/event-stream of AG-UI events",
            ),
        ),
        one(
            "/agents",
            get(sessions::agents),
            doc(
                "get",
                "/agents",
                "The agents this server runs, with their tools and the tools' input schemas, and the key's user",
                None,
                "{user, agents: [...]}",
            ),
        ),
        one(
            "/sessions",
            get(sessions::list),
            doc(
                "get",
                "/sessions",
                "The user's sessions across agents, newest first, with status, agent, task, age, usage and cost (query: status, agent, limit, offset)",
                None,
                "{sessions: [...], more}",
            ),
        ),
        one(
            "/sessions/{id}",
            get(sessions::get),
            doc(
                "get",
                "/sessions/{id}",
                "The session as it was after event `at` (query; default the last): state, the plan as a graph with each step's state and wave, tool calls, reviews, plan versions and their changes, usage",
                None,
                "the session",
            ),
        ),
        one(
            "/sessions/{id}/events",
            get(sessions::events),
            doc(
                "get",
                "/sessions/{id}/events",
                "The session's typed events as server-sent events after Last-Event-ID (or `after`), then live: `event` (id: sequence number), `text` (the model's text as it comes), `ready`",
                None,
                "text/event-stream",
            ),
        ),
        one(
            "/sessions/{id}/fork",
            post(sessions::fork),
            doc(
                "post",
                "/sessions/{id}/fork",
                "Fork the session at an event into a new session (a running fork is continued at once)",
                Some(schema_of::<sessions::ForkBody>),
                "{id, forked_from, status}",
            ),
        ),
        one(
            "/sessions/{id}/pause",
            post(sessions::pause),
            doc(
                "post",
                "/sessions/{id}/pause",
                "Pause the run at its next safe point; the session waits (kind `paused`) until any answer continues it",
                None,
                "{id, status}",
            ),
        ),
        one(
            "/sessions/{id}/cancel",
            post(sessions::cancel),
            doc(
                "post",
                "/sessions/{id}/cancel",
                "Cancel the session: calls in flight are stopped and recorded, it ends as failed",
                None,
                "{id, status}",
            ),
        ),
        one(
            "/sessions/{id}/plan/check",
            post(sessions::check_plan),
            doc(
                "post",
                "/sessions/{id}/plan/check",
                "Check an edited plan as the answer to the session's plan approval: every problem, or the waves it would run in",
                Some(schema_of::<sessions::PlanCheck>),
                "{ok, problems, waves, plan}",
            ),
        ),
        one(
            "/metrics",
            get(metrics_text),
            doc(
                "get",
                "/metrics",
                "Prometheus metrics (OpenMetrics text)",
                None,
                "the metrics",
            ),
        ),
        one(
            "/info",
            get(info),
            doc(
                "get",
                "/info",
                "What this server is, as LangGraph Server's /info says it: weft's version, and flags for the features it has (assistants) and has not (crons, langsmith)",
                None,
                "{version, flags, host}",
            ),
        ),
        one(
            "/openapi.json",
            get(openapi_json),
            doc(
                "get",
                "/openapi.json",
                "This document",
                None,
                "the OpenAPI document",
            ),
        ),
    ]
}

/// LangGraph Server's `/info`: its version is weft's; the flags say what a client may use.
async fn info() -> Json<serde_json::Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "flags": {"assistants": true, "crons": false, "langsmith": false},
        "host": {"kind": "weft"},
    }))
}

async fn openapi_json() -> Json<serde_json::Value> {
    let mut docs: Vec<openapi::Route> = api().into_iter().flat_map(|a| a.docs).collect();
    docs.push(doc(
        "get",
        "/health",
        "Whether the server answers (no key needed)",
        None,
        "{\"ok\": true}",
    ));
    docs.push(doc(
        "get",
        "/",
        "The playground, a web page over this API (its files need no key; the page asks for one)",
        None,
        "text/html",
    ));
    docs.push(doc(
        "get",
        "/playground/{path}",
        "The playground's scripts and styles",
        None,
        "the file",
    ));
    Json(openapi::document(&docs))
}

fn router(app: Shared, keys: auth::Keys, max_body: usize) -> Router {
    let mut protected = Router::new();
    for a in api() {
        protected = protected.route(a.path, a.handler);
    }
    let protected = protected.layer(axum::middleware::from_fn_with_state(
        Arc::new(keys),
        auth::require,
    ));
    Router::new()
        .route("/health", get(|| async { Json(json!({"ok": true})) }))
        // The playground's files hold no data; what it shows comes from the routes above.
        .route("/", get(playground::index))
        .route("/playground/{*path}", get(playground::asset))
        .route("/ok", get(|| async { Json(json!({"ok": true})) }))
        .merge(protected)
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(max_body, over_limit))
        .layer(axum::middleware::map_response(close_on_413))
        // gzip or brotli, as the client accepts (the page is about 113 KB, 31 KB gzipped; a
        // large session's JSON shrinks tenfold). Event streams are left as they are (the
        // default predicate skips `text/event-stream`), so each event still leaves at once.
        .layer(tower_http::compression::CompressionLayer::new())
        .with_state(app)
}

/// The most of a refused body that is read (and dropped) before the connection is closed.
const DRAIN_MAX: usize = 64 << 20;

/// A body declared larger than `max` is refused with 413 before a handler sees it. What the
/// client sends is read and dropped first (at most [`DRAIN_MAX`] bytes, for at most 10 s), and
/// the answer says `Connection: close`: a client still writing its body would otherwise find the
/// connection reset and never read the answer.
async fn over_limit(
    axum::extract::State(max): axum::extract::State<usize>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_none_or(|n| n <= max as u64) {
        return next.run(req).await;
    }
    let mut body = req.into_body().into_data_stream();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut read = 0usize;
        while let Some(Ok(chunk)) = futures::StreamExt::next(&mut body).await {
            read += chunk.len();
            if read > DRAIN_MAX {
                break;
            }
        }
    })
    .await;
    ApiError(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {max} bytes; send less, or start the server with a larger --max-body"),
    )
    .into_response()
}

/// Errors axum writes itself as plain text (a body that is not JSON, a missing field, a body
/// over the limit) become `{"detail": ...}` like every other error.
async fn json_errors(res: Response) -> Response {
    let plain = res
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !plain || !(res.status().is_client_error() || res.status().is_server_error()) {
        return res;
    }
    let status = res.status();
    let text = axum::body::to_bytes(res.into_body(), 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    ApiError(status, text).into_response()
}

/// A 413 closes the connection (the rest of the body may be unread), and says so.
async fn close_on_413(mut res: Response) -> Response {
    if res.status() == StatusCode::PAYLOAD_TOO_LARGE {
        res.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    res
}
