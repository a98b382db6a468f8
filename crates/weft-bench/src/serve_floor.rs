//! The floor under `serve-load`: an HTTP server that does only what the load generator needs
//! from a LangGraph-API server, and nothing durable or agent-like, so that a batch against it
//! shows what the machine, the HTTP stack and the generator allow before any server's own work.
//!
//! `POST /threads` answers a new thread id. `POST /threads/{id}/runs/stream` reads the run's
//! JSON body and streams what the benchmark's agent streams in `updates` mode (a `metadata`
//! event, then for each of its four model turns a 50 ms wait and an update, with a tool's update
//! after each of the first three), the last update holding the scripted answer. It keeps no
//! state: a figure measured against it is a bound no real server can beat on the same machine,
//! not a server to compare with.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt as _;
use serde_json::{Value, json};

/// The wait of each model turn (the benchmark agent's scripted model takes 50 ms a call).
pub const MODEL_TURN: Duration = Duration::from_millis(50);

/// The agent's model turns: three that call `echo`, then the answer.
const TURNS: usize = 4;

/// The floor server's routes.
pub fn router(answer: String) -> Router {
    Router::new().route("/threads", post(create_thread)).route(
        "/threads/{id}/runs/stream",
        post(move |id: Path<String>, body: Bytes| stream_run(id, body, answer.clone())),
    )
}

async fn create_thread(body: Bytes) -> Response {
    if serde_json::from_slice::<Value>(&body).is_err() {
        return (StatusCode::UNPROCESSABLE_ENTITY, "the body is not JSON").into_response();
    }
    let id = uuid::Uuid::new_v4().to_string();
    axum::Json(json!({"thread_id": id, "status": "idle", "metadata": {}, "values": {}}))
        .into_response()
}

fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

async fn stream_run(Path(thread): Path<String>, body: Bytes, answer: String) -> Response {
    let run: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            return (StatusCode::UNPROCESSABLE_ENTITY, "the body is not JSON").into_response();
        }
    };
    // What every step writes, made once: the stream only counts steps.
    let run_id = uuid::Uuid::new_v4().to_string();
    let metadata = event("metadata", &json!({"run_id": run_id, "thread_id": thread}));
    let mut updates = Vec::with_capacity(2 * TURNS - 1);
    for turn in 0..TURNS {
        let message = if turn + 1 == TURNS {
            json!({"type": "ai", "content": answer})
        } else {
            json!({"type": "ai", "content": "", "tool_calls": [
                {"id": format!("call-{turn}"), "name": "echo", "args": {"text": run["input"]}}]})
        };
        updates.push((
            true,
            event("updates", &json!({"agent": {"messages": [message]}})),
        ));
        if turn + 1 < TURNS {
            let result = json!({"tools": {"messages": [{"type": "tool",
                "tool_call_id": format!("call-{turn}"), "content": "echo"}]}});
            updates.push((false, event("updates", &result)));
        }
    }
    // A model turn's update comes after the turn's wait; a tool's at once.
    let steps = futures::stream::iter(updates).then(|(turn, bytes)| async move {
        if turn {
            tokio::time::sleep(MODEL_TURN).await;
        }
        Ok::<_, Infallible>(bytes)
    });
    let events = futures::stream::once(async move { Ok::<_, Infallible>(metadata) }).chain(steps);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::from_stream(events))
        .map(IntoResponse::into_response)
        .unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
}
