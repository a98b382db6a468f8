//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weft_core::ToolOutcome;
use weft_core::agent::AgentSpec;
use weft_tools::{Registry, ToolContext};

pub fn spec(yaml: &str) -> AgentSpec {
    AgentSpec::parse("test.yaml", yaml).unwrap_or_else(|e| panic!("agent file: {e}"))
}

pub fn registry(yaml: &str, dir: &Path) -> Registry {
    Registry::from_agent(&spec(yaml), dir).unwrap_or_else(|e| panic!("registry: {e}"))
}

pub async fn call(reg: &Registry, name: &str, args: serde_json::Value) -> ToolOutcome {
    reg.invoke(name, args, ToolContext::default()).await
}

pub fn ok(o: ToolOutcome) -> serde_json::Value {
    match o {
        ToolOutcome::Ok { output } => output,
        ToolOutcome::Error { error } => panic!("expected success, got {error:?}"),
    }
}

pub fn err(o: ToolOutcome) -> weft_core::ToolError {
    match o {
        ToolOutcome::Error { error } => error,
        ToolOutcome::Ok { output } => panic!("expected an error, got {output}"),
    }
}

/// A tiny HTTP/1.1 server on 127.0.0.1 that records each request (head and body) and answers
/// every request with `status` and `body` (JSON).
pub struct TestServer {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl TestServer {
    pub async fn start(status: u16, body: &str) -> Self {
        Self::start_full(status, "application/json", body, std::time::Duration::ZERO).await
    }

    /// Answers with this content type, after `delay`.
    pub async fn start_full(
        status: u16,
        content_type: &str,
        body: &str,
        delay: std::time::Duration,
    ) -> Self {
        Self::start_with_headers(
            status,
            &format!("content-type: {content_type}\r\n"),
            body,
            delay,
        )
        .await
    }

    /// Answers every request with a 302 to `location`.
    pub async fn redirect(location: &str) -> Self {
        Self::start_with_headers(
            302,
            &format!("location: {location}\r\n"),
            "",
            std::time::Duration::ZERO,
        )
        .await
    }

    /// Answers with `headers` (each line ending in CRLF), after `delay`.
    async fn start_with_headers(
        status: u16,
        headers: &str,
        body: &str,
        delay: std::time::Duration,
    ) -> Self {
        let headers = headers.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let body = body.to_owned();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                let body = body.clone();
                let headers = headers.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let n = sock.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len = text[..end]
                                .lines()
                                .find_map(|l| {
                                    let l = l.to_ascii_lowercase();
                                    l.strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                break;
                            }
                        }
                    }
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&buf).to_string());
                    tokio::time::sleep(delay).await;
                    let reason = if status < 300 { "OK" } else { "Error" };
                    let resp = format!(
                        "HTTP/1.1 {status} {reason}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(resp.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        Self { port, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A random value that appears nowhere else.
pub fn canary() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("canary-{:x}-{}", nanos, std::process::id())
}

pub use weft_testkit::service_var;
