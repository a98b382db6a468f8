//! weft over HTTP (`weft serve`), speaking LangGraph Server's API so that the official
//! `langgraph-sdk` clients work against it unchanged.
//!
//! - `auth.rs`: API keys, each mapped to a user; every route but `/health`, `/ok`, `/info` and
//!   the playground's files needs one.
//! - `threads.rs`: assistants (one per agent file) and threads (sessions), their state and
//!   history as LangGraph clients read them; `messages.rs` their conversation as LangChain
//!   messages, tool calls and results included.
//! - `runs.rs`: runs (a turn of a session, driven under the session's lease in this process),
//!   wait, join, cancel.
//! - `stream.rs`: a run's events as server-sent events (`values`, `updates`, `messages`,
//!   `custom`, `tasks`, `checkpoints`, `end`), each part with an id of its own (its event and
//!   place, or how far a text reaches), so that a client that reconnects with `Last-Event-ID`
//!   loses and repeats nothing; `checkpoints.rs` the thread's checkpoints and tasks, folded from
//!   its log, which the streams and the thread's history share.
//! - `agui.rs`: the AG-UI protocol (`POST /ag-ui/{agent}`) over the same runs and streams.
//! - `crons.rs`: LangGraph's crons (`/runs/crons`), kept in the store, and the scheduler that
//!   starts their runs: each tick claimed once across servers with a compare-and-set, and taken
//!   up again when its server died before the tick's run was stored.
//! - `store.rs`: LangGraph's store API (`/store/...`) on the user's long-term memory.
//! - `sessions.rs`: weft's own routes (`/sessions`, `/agents`): sessions across agents with
//!   their cost, a session at any event, its typed events live, fork, pause, cancel, and the
//!   check of an edited plan; `view.rs` folds a log into what they answer.
//! - `playground.rs`: the web page at `/`, whose embedded files call those routes.
//! - `health.rs`: whether the store answers, pinged twice a second: `/ok` and `/health` answer
//!   503 while it does not, and new runs and threads are refused at once (503, `Retry-After`).
//!
//! [`Server::bind`] binds the address (port 0 takes a free one; [`Server::local_addr`] says
//! which) and [`Server::run`] serves until the [`weft_host::Shutdown`] of its [`Host`] is
//! triggered; [`serve`] does both.
#![warn(missing_docs, unreachable_pub)]

mod agui;
mod auth;
mod checkpoints;
mod compare;
mod cors;
mod crons;
mod evals;
mod health;
mod messages;
mod metrics;
mod model_calls;
mod openapi;
mod orphans;
mod playground;
mod queue;
mod quota;
mod registry;
mod remote;
mod runs;
mod sessions;
mod state_update;
mod store;
mod stream;
mod tail;
mod threadless;
mod threads;
mod view;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use weft_host::Host;
use weft_host::drive::AgentFile;
use weft_store::AnyStore;

/// What a server serves and how (the flags of `weft serve`).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The agent files served as assistants: files, or directories whose `.yaml`, `.yml` and
    /// `.json` agent files are all taken.
    pub agents: Vec<PathBuf>,
    /// The address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// A file of API keys, one `KEY USER` pair per line (`#` starts a comment). `WEFT_API_KEYS`
    /// (`KEY=USER,KEY=USER`) adds more.
    pub keys: Option<PathBuf>,
    /// The largest request body accepted (bytes).
    pub max_body: usize,
    /// Runs one user may have going at once (more are refused with 429).
    pub max_runs_per_user: usize,
    /// The origins whose pages may call the API from a browser (CORS), as `scheme://host[:port]`,
    /// or `*` for any; none by default (only pages of the server's own origin).
    pub cors_origins: Vec<String>,
}

impl ServeConfig {
    /// The defaults of `weft serve` for these agent files: `127.0.0.1:2024`, bodies up to
    /// 1 MiB, 100 runs per user, keys from `WEFT_API_KEYS` only.
    pub fn new(agents: Vec<PathBuf>) -> Self {
        Self {
            agents,
            listen: SocketAddr::from(([127, 0, 0, 1], 2024)),
            keys: None,
            max_body: 1 << 20,
            max_runs_per_user: 100,
            cors_origins: Vec::new(),
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The API keys could not be read; the message names the file or variable.
    #[error("{0}")]
    Keys(String),
    /// An allowed origin is not an origin; the message names it and says what one looks like.
    #[error("{0}")]
    Cors(String),
    /// The agent files could not be loaded.
    #[error(transparent)]
    Host(#[from] weft_host::HostError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("the server stopped: {0}")]
    Serve(std::io::Error),
}

/// What every handler shares.
pub(crate) struct App {
    pub store: Arc<AnyStore>,
    /// The shutdown handle, durability policy and hints of the process.
    pub host: Host,
    pub agents: HashMap<String, Arc<AgentFile>>,
    pub runs: registry::Runs,
    pub max_runs_per_user: usize,
    pub metrics: Arc<metrics::Metrics>,
    pub summaries: sessions::Summaries,
    pub eval_results: evals::Results,
    /// Whether the store answers, as the last ping found.
    pub health: health::Health,
}

impl App {
    /// The assistant (agent) named `id`, or 404.
    pub(crate) fn assistant(&self, id: &str) -> Result<&Arc<AgentFile>, ApiError> {
        self.agents
            .get(id)
            .ok_or_else(|| ApiError::not_found("assistant"))
    }
}

pub(crate) type Shared = Arc<App>;

/// An API error: a status and a JSON body `{"detail": ...}` (what LangGraph's server sends),
/// never a stack trace or a secret.
/// A refusal that can be tried again later (429 at a quota) says when: `Retry-After`, seconds.
#[derive(Debug)]
pub(crate) struct ApiError(pub StatusCode, pub String, pub Option<u64>);

impl ApiError {
    pub(crate) fn new(status: StatusCode, detail: String) -> Self {
        Self(status, detail, None)
    }
    /// The error with `Retry-After: secs`.
    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        self.2 = Some(secs);
        self
    }
    pub(crate) fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("{what} not found"))
    }
    pub(crate) fn bad(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, msg.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.0, Json(openapi::Detail { detail: self.1 })).into_response();
        if let Some(secs) = self.2 {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

/// The host's errors as HTTP, at the edge: a refused request is the client's to change (422),
/// a thread another process holds is busy (409), the store's errors as [`weft_store::StoreError`]
/// says, anything else a failure of the server (500).
impl From<weft_host::HostError> for ApiError {
    fn from(e: weft_host::HostError) -> Self {
        use weft_host::HostError;
        match e {
            HostError::Refused(why) | HostError::Invalid(why) | HostError::AgentFile(why) => {
                Self::bad(why)
            }
            HostError::Leased(why) | HostError::Busy(why) => Self::new(StatusCode::CONFLICT, why),
            HostError::OverQuota {
                why,
                retry_after_secs,
            } => Self::new(StatusCode::TOO_MANY_REQUESTS, why).retry_after(retry_after_secs),
            HostError::Store(e) => e.into(),
            other => Self::new(StatusCode::INTERNAL_SERVER_ERROR, message(&other.into())),
        }
    }
}

impl From<weft_store::StoreError> for ApiError {
    fn from(e: weft_store::StoreError) -> Self {
        match e {
            weft_store::StoreError::NotFound(_) => Self::not_found("thread"),
            weft_store::StoreError::Leased { .. } => {
                Self::new(StatusCode::CONFLICT, "the thread is busy with a run".into())
            }
            other => {
                tracing::warn!("store error: {other}");
                let e = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the session store failed; try again".into(),
                );
                if other.is_transient() {
                    e.retry_after(2)
                } else {
                    e
                }
            }
        }
    }
}

/// The API's OpenAPI document: what `/openapi.json` answers.
pub fn openapi_document() -> serde_json::Value {
    openapi::document(&api())
}

/// A server bound to its address, not serving yet.
pub struct Server {
    app: Shared,
    router: Router,
    listener: tokio::net::TcpListener,
}

/// A server's configuration read and checked, its address bound: the keys, the allowed origins
/// and the agent files (with their tools). Made before the session store is opened, so that a
/// mistake in any of them leaves no store behind.
pub struct Prepared {
    keys: auth::Keys,
    cors: Option<tower_http::cors::CorsLayer>,
    agents: HashMap<String, Arc<AgentFile>>,
    listener: tokio::net::TcpListener,
    max_body: usize,
    max_runs_per_user: usize,
}

impl Server {
    /// Reads the keys, the allowed origins and the agent files, and binds `config.listen`:
    /// everything of a server that can be wrong, found before it has a store.
    pub async fn prepare(config: ServeConfig) -> Result<Prepared, ServerError> {
        let a = config;
        let keys =
            auth::Keys::load(a.keys.as_deref()).map_err(|e| ServerError::Keys(message(&e)))?;
        let cors = cors::layer(&a.cors_origins).map_err(ServerError::Cors)?;
        let agents = weft_host::drive::agents(&a.agents).await?;
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .map_err(|source| ServerError::Listen {
                addr: a.listen,
                source,
            })?;
        Ok(Prepared {
            keys,
            cors,
            agents,
            listener,
            max_body: a.max_body,
            max_runs_per_user: a.max_runs_per_user,
        })
    }

    /// Loads the agent files and the keys, sets the store's durability by the agent files
    /// (unless the host's policy chose one) and binds `config.listen`.
    pub async fn bind(
        host: Host,
        store: Arc<AnyStore>,
        config: ServeConfig,
    ) -> Result<Self, ServerError> {
        Ok(Self::on(host, store, Self::prepare(config).await?))
    }

    /// The server `prepared` makes on `store`, whose durability it sets by the agent files
    /// (unless the host's policy chose one).
    pub fn on(host: Host, store: Arc<AnyStore>, prepared: Prepared) -> Self {
        let Prepared {
            keys,
            cors,
            agents,
            listener,
            max_body,
            max_runs_per_user,
        } = prepared;
        host.durability
            .for_agents(store.as_ref(), agents.values().map(|f| &f.spec));
        // The metrics derived from the runs' events go to `/metrics` as well as over OTLP, when
        // telemetry is configured: deriving them follows every run's log from the store, which a
        // server without a collector does not pay for (its `/metrics` keeps the server's own
        // counters).
        let metrics = Arc::new(metrics::Metrics::default());
        if host.telemetry.on() {
            let sink = metrics.clone();
            host.telemetry
                .add_sink(Arc::new(move |points: &[weft_telemetry::Point]| {
                    sink.points(points)
                }));
        }
        let app: Shared = Arc::new(App {
            store,
            host,
            agents,
            runs: registry::Runs::default(),
            max_runs_per_user,
            metrics,
            summaries: sessions::Summaries::default(),
            eval_results: evals::Results::default(),
            health: health::Health::default(),
        });
        let router = router(app.clone(), keys, max_body, cors);
        Self {
            app,
            router,
            listener,
        }
    }

    /// The address it listens on (the port chosen when it was bound on port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        self.listener.local_addr().map_err(ServerError::Serve)
    }

    /// Serves until the host's shutdown is triggered: runs then stop at their next safe point
    /// and let their sessions go (the next server on the store continues them); streams end
    /// without `end`, so clients reconnect with their last event id. Returns once the runs
    /// have stopped (or the grace ran out).
    pub async fn run(self) -> Result<(), ServerError> {
        let Self {
            app,
            router,
            listener,
        } = self;
        // Threads whose server stopped mid-run are continued here.
        tokio::spawn(orphans::adopt_all(app.clone()));
        // The crons' ticks.
        tokio::spawn(crons::schedule(app.clone()));
        // Whether the store answers, for `/ok` and for refusing new runs while it does not.
        let pinging = tokio::spawn(health::watch(app.clone()));
        // The depth of the work queue on `/metrics` and over OTLP (when telemetry is on).
        let sampling = app
            .host
            .telemetry
            .sample_queue(app.store.clone(), app.host.clock.clone());
        let mut names: Vec<&String> = app.agents.keys().collect();
        names.sort();
        eprintln!(
            "weft serve: listening on http://{} (the playground is at /) with assistants {}",
            listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            names
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let shutdown = app.host.shutdown.clone();
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.requested().await })
            .await
            .map_err(ServerError::Serve)?;
        app.runs.wait_all(app.host.shutdown.grace()).await;
        pinging.abort();
        if let Some(s) = sampling {
            s.abort();
        }
        eprintln!("weft serve: stopped");
        Ok(())
    }
}

/// [`Server::bind`], then [`Server::run`].
pub async fn serve(
    host: Host,
    store: Arc<AnyStore>,
    config: ServeConfig,
) -> Result<(), ServerError> {
    Server::bind(host, store, config).await?.run().await
}

/// The error and its causes, each said once: a cause whose text its wrapper already holds
/// (a database error quoted in the store's message) is not repeated.
pub(crate) fn message(e: &anyhow::Error) -> String {
    message_of(e.as_ref())
}

/// [`message`] of any error.
pub(crate) fn message_of(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    for cause in std::iter::successors(Some(e), |c| c.source()) {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

async fn metrics_text(axum::extract::State(app): axum::extract::State<Shared>) -> Response {
    let (active, pending) = app.runs.counts();
    app.metrics.active.set(active);
    app.metrics.pending.set(pending);
    app.metrics.spans(app.host.telemetry.counts());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}

/// Every route: each module's, and the server's own. The router and `/openapi.json` are both
/// made from this list.
fn api() -> Vec<openapi::Route> {
    [
        threads::routes(),
        runs::routes(),
        threadless::routes(),
        crons::routes(),
        agui::routes(),
        store::routes(),
        sessions::routes(),
        evals::routes(),
        quota::routes(),
        model_calls::routes(),
        compare::routes(),
        routes(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The server's own routes: health, metrics, info, this document, the playground's files.
fn routes() -> Vec<openapi::Route> {
    use openapi::get;
    vec![
        get("/metrics", "Prometheus metrics (OpenMetrics text)", metrics_text)
            .media("application/openmetrics-text", "the metrics"),
        get(
            "/info",
            "What this server is, as LangGraph Server's /info says it: weft's version, and flags for the features it has (assistants, crons) and has not (langsmith); no key needed, as LangGraph's clients ask it first",
            info,
        )
        .json::<Info>("{version, flags, host}")
        .open(),
        get("/openapi.json", "This document", openapi_json)
            .media("application/json", "the OpenAPI document"),
        get(
            "/health",
            "Whether the server can serve: 200 while its session store answers, 503 (with Retry-After) while it does not (no key needed)",
            health::ok,
        )
        .json::<health::Answer>("{\"ok\": true}")
        .open(),
        get(
            "/ok",
            "The same as /health; ?check_db=1 (LangGraph's) pings the store now instead of answering from the last ping",
            health::ok,
        )
        .json::<health::Answer>("{\"ok\": true}")
        .open(),
        // The playground's files hold no data; what it shows comes from the routes above.
        get(
            "/",
            "The playground, a web page over this API (its files need no key; the page asks for one)",
            playground::index,
        )
        .media("text/html", "the page")
        .open(),
        get(
            "/playground/{*path}",
            "The playground's scripts and styles",
            playground::asset,
        )
        .media("application/octet-stream", "the file")
        .open(),
    ]
}

/// LangGraph Server's `/info`.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Info {
    version: &'static str,
    flags: InfoFlags,
    host: InfoHost,
}

/// The features this server has.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct InfoFlags {
    assistants: bool,
    crons: bool,
    langsmith: bool,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct InfoHost {
    kind: &'static str,
}

/// LangGraph Server's `/info`: its version is weft's; the flags say what a client may use.
async fn info() -> Json<Info> {
    Json(Info {
        version: env!("CARGO_PKG_VERSION"),
        flags: InfoFlags {
            assistants: true,
            crons: true,
            langsmith: false,
        },
        host: InfoHost { kind: "weft" },
    })
}

async fn openapi_json() -> Json<serde_json::Value> {
    Json(openapi::document(&api()))
}

fn router(
    app: Shared,
    keys: auth::Keys,
    max_body: usize,
    cors: Option<tower_http::cors::CorsLayer>,
) -> Router {
    let mut open = Router::new();
    let mut protected = Router::new();
    for r in api() {
        if r.open {
            open = open.route(r.path, r.handler);
        } else {
            protected = protected.route(r.path, r.handler);
        }
    }
    let protected = protected.layer(axum::middleware::from_fn_with_state(
        Arc::new(keys),
        auth::require,
    ));
    let router = open
        .merge(protected)
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(max_body, over_limit))
        .layer(axum::middleware::map_response(close_on_413))
        // gzip or brotli, as the client accepts (the page is about 113 KB, 31 KB gzipped; a
        // large session's JSON shrinks tenfold). Event streams are left as they are (the
        // default predicate skips `text/event-stream`), so each event still leaves at once.
        .layer(tower_http::compression::CompressionLayer::new());
    // Outermost: a preflight is answered before the key is asked for, and every answer (errors
    // included) carries the headers a page of an allowed origin needs to read it.
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
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
    ApiError::new(
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
    ApiError::new(status, text).into_response()
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
