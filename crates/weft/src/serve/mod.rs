//! `weft serve`: weft over HTTP, speaking LangGraph Server's API so that the official
//! `langgraph-sdk` clients work against it unchanged.
//!
//! - `auth.rs`: API keys, each mapped to a user; every route but `/health` needs one.
//! - `threads.rs`: assistants (one per agent file) and threads (sessions), their state and
//!   history as LangGraph clients read them.
//! - `runs.rs`: runs (a turn of a session, driven under the session's lease in this process),
//!   wait, join, cancel.
//! - `stream.rs`: a run's events as server-sent events (`values`, `updates`, `messages`,
//!   `custom`, `end`), each with the session's sequence number as its id, so that a client that
//!   reconnects with `Last-Event-ID` loses and repeats nothing.
//! - `agui.rs`: the AG-UI protocol (`POST /ag-ui/{agent}`) over the same runs and streams.

mod agui;
mod auth;
mod metrics;
mod runs;
mod stream;
mod threads;

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
    let agents = crate::worker::agents(&a.agents).await?;
    let app: Shared = Arc::new(App {
        store,
        agents,
        runs: runs::Runs::default(),
        max_runs_per_user: a.max_runs_per_user,
        metrics: metrics::Metrics::default(),
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
        "weft serve: listening on http://{} with assistants {}",
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

fn router(app: Shared, keys: auth::Keys, max_body: usize) -> Router {
    let api = Router::new()
        .route("/assistants/search", post(threads::search_assistants))
        .route("/assistants/{id}", get(threads::get_assistant))
        .route("/threads", post(threads::create_thread))
        .route("/threads/search", post(threads::search_threads))
        .route(
            "/threads/{tid}",
            get(threads::get_thread).delete(threads::delete_thread),
        )
        .route("/threads/{tid}/state", get(threads::get_state))
        .route("/threads/{tid}/history", post(threads::history))
        .route(
            "/threads/{tid}/runs",
            post(runs::create_background).get(runs::list),
        )
        .route("/threads/{tid}/runs/wait", post(runs::create_wait))
        .route("/threads/{tid}/runs/stream", post(runs::create_stream))
        .route("/threads/{tid}/runs/{rid}", get(runs::get))
        .route("/threads/{tid}/runs/{rid}/join", get(runs::join))
        .route("/threads/{tid}/runs/{rid}/stream", get(runs::join_stream))
        .route("/threads/{tid}/runs/{rid}/cancel", post(runs::cancel))
        .route("/ag-ui/{agent}", post(agui::run))
        .route("/metrics", get(metrics_text))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(keys),
            auth::require,
        ));
    Router::new()
        .route("/health", get(|| async { Json(json!({"ok": true})) }))
        .route("/ok", get(|| async { Json(json!({"ok": true})) }))
        .merge(api)
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(app)
}
