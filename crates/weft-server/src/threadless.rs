//! Threadless runs (`POST /runs`, `/runs/wait`, `/runs/stream`) and batches (`/runs/batch`):
//! each run on a thread made for it, deleted once the run has ended unless `on_completion` is
//! `keep`; a run that waits for a person, or stopped with its server, keeps its thread.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use weft_store::SessionLog;

use crate::auth::User;
use crate::openapi::{self, Route};
use crate::registry::{Run, RunInfo, Temporary};
use crate::runs::{RunBody, create_thread, start, start_with_id, streaming, traceparent, waiting};
use crate::{ApiError, Shared, stream, threads};

/// The routes of threadless runs and batches.
pub(crate) fn routes() -> Vec<Route> {
    vec![
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
    ]
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
    let temporary = (!keep).then(|| Temporary::new(app, run.clone()));
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
