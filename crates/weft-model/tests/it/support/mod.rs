//! A local HTTP server for provider tests: it answers with canned replies in order and keeps
//! what it received.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;
use weft_model::{
    DeltaSink, Message, ModelRequest, ProviderConfig, ProviderKind, Purpose, ToolDef,
};

/// One canned answer.
pub enum Reply {
    /// A whole body.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// A chunked body sent piece by piece; `cut` breaks the connection after the last piece.
    Chunks { chunks: Vec<String>, cut: bool },
    /// Sends `first`, then never finishes; `dropped` is set when the server stops sending.
    Hang {
        first: String,
        dropped: Arc<AtomicBool>,
    },
}

impl Reply {
    pub fn json(body: Value) -> Self {
        Self::Full {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            body: body.to_string(),
        }
    }

    pub fn status(status: u16, body: &str) -> Self {
        Self::Full {
            status,
            headers: vec![],
            body: body.to_owned(),
        }
    }

    /// Server-sent events, one chunk per event.
    pub fn sse(events: &[String]) -> Self {
        Self::Chunks {
            chunks: events.iter().map(|e| format!("{e}\n\n")).collect(),
            cut: false,
        }
    }
}

/// What the server received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
    pub at: Instant,
}

struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    seen: Mutex<Vec<Seen>>,
}

pub struct Mock {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Mock {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

async fn handle(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.seen.lock().unwrap().push(Seen {
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body,
        at: Instant::now(),
    });
    let next = shared.replies.lock().unwrap().pop_front();
    match next {
        None => Response::builder()
            .status(500)
            .body(Body::from("the test server has no canned reply left"))
            .unwrap(),
        Some(Reply::Full {
            status,
            headers,
            body,
        }) => {
            let mut b = Response::builder().status(StatusCode::from_u16(status).unwrap());
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.body(Body::from(body)).unwrap()
        }
        Some(Reply::Chunks { chunks, cut }) => {
            let stream =
                futures::stream::unfold((chunks.into_iter(), cut), |(mut it, cut)| async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    match it.next() {
                        Some(c) => Some((Ok::<_, std::io::Error>(Bytes::from(c)), (it, cut))),
                        None if cut => Some((Err(std::io::Error::other("cut")), (it, false))),
                        None => None,
                    }
                });
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Some(Reply::Hang { first, dropped }) => {
            let guard = DropFlag(dropped);
            let stream =
                futures::stream::unfold((Some(first), guard), |(first, guard)| async move {
                    match first {
                        Some(f) => Some((Ok::<_, std::io::Error>(Bytes::from(f)), (None, guard))),
                        None => {
                            std::future::pending::<()>().await;
                            drop(guard);
                            None
                        }
                    }
                });
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
    }
}

/// Starts a server on 127.0.0.1 that gives `replies` in order.
pub async fn serve(replies: Vec<Reply>) -> Mock {
    let shared = Arc::new(Shared {
        replies: Mutex::new(replies.into()),
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new().fallback(handle).with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    Mock {
        addr,
        shared,
        stop: Some(tx),
        task: Some(task),
    }
}

/// A configuration pointing at `base_url`, quick to retry, reading no environment.
pub fn config(kind: ProviderKind, name: &str, base_url: &str) -> ProviderConfig {
    let mut c = ProviderConfig::new(kind, name);
    c.base_url = base_url.to_owned();
    c.api_key = Some("test-key".into());
    c.retry_base_delay = Duration::from_millis(10);
    c.max_retries = 2;
    c
}

pub fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        purpose: Purpose::React,
        call_index: 0,
        purpose_index: 0,
        messages: messages.into(),
        tools: vec![],
        response_schema: None,
        exact_schema: None,
        max_tokens: None,
        temperature: None,
    }
}

pub fn chat(system: &str, user: &str) -> ModelRequest {
    request(vec![
        Message::System {
            content: system.into(),
        },
        Message::User {
            content: user.into(),
        },
    ])
}

pub fn weather_tool() -> ToolDef {
    ToolDef {
        name: "get_weather".into(),
        description: "Current weather for a city".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    }
}

/// A sink that keeps every delta.
pub fn sink() -> (DeltaSink, Arc<Mutex<Vec<String>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    (
        Arc::new(move |d: &str| g.lock().unwrap().push(d.to_owned())),
        got,
    )
}

pub use weft_testkit::service_var;
