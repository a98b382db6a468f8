//! The server started in this test's process: bound on port 0, a thread and a run created
//! through HTTP with the scripted-model agent `examples/weather-chat.yaml`, the answer
//! checked, then stopped through the host's `Shutdown`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weft_host::Host;
use weft_server::{ServeConfig, Server};
use weft_store::{AnyStore, Durability};

const KEY: &str = "in-process-key-0123456789";

fn http() -> reqwest::Client {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// POSTs `body` with alice's key: the status and the answer's text.
async fn send(http: &reqwest::Client, addr: SocketAddr, path: &str, body: Value) -> (u16, String) {
    let r = http
        .post(format!("http://{addr}{path}"))
        .header("x-api-key", KEY)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

async fn post(http: &reqwest::Client, addr: SocketAddr, path: &str, body: Value) -> Value {
    let (status, text) = send(http, addr, path, body).await;
    assert!(
        (200..300).contains(&status),
        "POST {path}: {status}: {text}"
    );
    serde_json::from_str(&text).unwrap()
}

/// A server bound on port 0 over `examples/EXAMPLE`, alice's key the only one, its store a
/// SQLite file in a temporary directory; stopped through `host`'s `Shutdown`.
struct Serving {
    _dir: tempfile::TempDir,
    host: Host,
    store: Arc<AnyStore>,
    addr: SocketAddr,
    serving: tokio::task::JoinHandle<Result<(), weft_server::ServerError>>,
}

async fn serve(example: &str) -> Serving {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, format!("{KEY} alice\n")).unwrap();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(example);
    let db = dir.path().join("weft.db");
    let store = Arc::new(
        AnyStore::open_with(db.to_str().unwrap(), Durability::Normal)
            .await
            .unwrap(),
    );
    let host = Host::default();
    let config = ServeConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        keys: Some(keys),
        ..ServeConfig::new(vec![agent])
    };
    let server = Server::bind(host.clone(), store.clone(), config)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    assert_ne!(addr.port(), 0, "port 0 is replaced by the port chosen");
    let serving = tokio::spawn(server.run());
    Serving {
        _dir: dir,
        host,
        store,
        addr,
        serving,
    }
}

/// Stops the server through `host`'s `Shutdown` and waits (20 s at most) for it to end well.
async fn stop(host: &Host, serving: tokio::task::JoinHandle<Result<(), weft_server::ServerError>>) {
    host.shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_http_then_a_shutdown_stops_the_server() {
    let Serving {
        _dir,
        host,
        addr,
        serving,
        ..
    } = serve("weather-chat.yaml").await;

    let http = http();
    let thread = post(&http, addr, "/threads", json!({})).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let done = post(
        &http,
        addr,
        &format!("/threads/{tid}/runs/wait"),
        json!({
            "assistant_id": "weather-chat",
            "input": {"messages": [{"role": "user", "content": "Where is it sunnier, Lisbon or Oslo?"}]},
        }),
    )
    .await;
    let text = done.to_string();
    assert!(
        text.contains("Lisbon is sunny at 24°C, while Oslo is cloudy at 12°C"),
        "the scripted answer: {text}"
    );

    host.shutdown.trigger();
    let stopped = tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("the server stops once its Shutdown is triggered");
    stopped.unwrap().unwrap();
    let refused =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
            .await
            .unwrap();
    assert!(refused.is_err(), "nothing listens on {addr} any more");
}

/// A run's `config.budget` over HTTP: the example agent whose model calls a tool forever waits
/// at its budget (`on_budget: ask`, an interrupt), an answer with a raised budget goes on to the
/// new limit, and a budget that is not one is refused with 422 naming `config.budget`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_config_budget_raises_a_budget_that_was_reached() {
    use weft_store::SessionLog;
    let Serving {
        _dir,
        host,
        store,
        addr,
        serving,
    } = serve("budgeted-loop.yaml").await;
    let http = http();
    let thread = post(&http, addr, "/threads", json!({})).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let runs = format!("/threads/{tid}/runs/wait");

    let first = post(
        &http,
        addr,
        &runs,
        json!({
            "assistant_id": "budgeted-loop",
            "input": {"messages": [{"role": "user", "content": "Echo until the budget says stop."}]},
        }),
    )
    .await;
    assert!(
        first
            .to_string()
            .contains("budget reached: run.cost_usd is 0.25"),
        "an interrupt at the budget: {first}"
    );

    let (status, text) = send(
        &http,
        addr,
        &runs,
        json!({
            "assistant_id": "budgeted-loop",
            "command": {"resume": "go on"},
            "config": {"budget": {"run": {"cost_usd": 1}, "on_budgets": "ask"}},
        }),
    )
    .await;
    assert_eq!(status, 422);
    assert!(
        text.contains("config.budget") && text.contains("on_budgets"),
        "{text}"
    );
    // A per-tool limit on a tool the assistant does not have would hold nothing: refused, with
    // the name meant, for a run and for a fork.
    for (path, body) in [
        (
            runs.clone(),
            json!({
                "assistant_id": "budgeted-loop",
                "command": {"resume": "go on"},
                "config": {"budget": "cost_usd=1,tool_calls.ecoh=3"},
            }),
        ),
        (
            format!("/sessions/{tid}/fork"),
            json!({"at": 2, "budget": {"run": {"tool_calls_per_tool": {"ecoh": 3}}}}),
        ),
    ] {
        let (status, text) = send(&http, addr, &path, body).await;
        assert_eq!(status, 422, "{path}");
        assert!(
            text.contains(
                "run.tool_calls.ecoh: the agent has no tool `ecoh` (did you mean `echo`?)"
            ),
            "{path}: {text}"
        );
    }

    let second = post(
        &http,
        addr,
        &runs,
        json!({
            "assistant_id": "budgeted-loop",
            "command": {"resume": "go on"},
            "config": {"budget": "run.cost_usd=0.5"},
        }),
    )
    .await;
    assert!(
        second
            .to_string()
            .contains("budget reached: run.cost_usd is 0.5"),
        "went on to the raised limit: {second}"
    );
    let events = store.events_after(&tid, 0).await.unwrap();
    let limits: Vec<f64> = events
        .iter()
        .filter_map(|e| match &e.event {
            weft_core::Event::BudgetExceeded { limit, .. } => Some(*limit),
            _ => None,
        })
        .collect();
    assert_eq!(limits, vec![0.25, 0.5]);

    // A fork at the first wait, with a budget of its own: recorded as its last event, and what
    // was spent until then is the fork's too.
    let first_wait = events
        .iter()
        .find(|e| e.event.kind() == "waiting_for_user")
        .unwrap()
        .seq;
    let forked = post(
        &http,
        addr,
        &format!("/sessions/{tid}/fork"),
        json!({"at": first_wait, "budget": {"run": {"cost_usd": 0.3}}}),
    )
    .await;
    let fid = forked["id"].as_str().unwrap();
    let fork_events = store.events_after(fid, 0).await.unwrap();
    let Some(weft_core::Event::BudgetSet { budget }) = fork_events.last().map(|e| &e.event) else {
        panic!("the fork ends with its budget: {fork_events:?}");
    };
    assert_eq!(budget.run.cost_usd, Some(0.3));
    assert_eq!(budget.on_budget, weft_core::budget::OnBudget::Stop);
    let folded = weft_core::State::fold(fork_events.iter().map(|e| &e.event));
    let original = weft_core::State::fold(
        events
            .iter()
            .take_while(|e| e.seq <= first_wait)
            .map(|e| &e.event),
    );
    assert_eq!(folded.spending().session, original.spending().session);
    assert!(folded.spending().session.cost_usd > 0.0);

    stop(&host, serving).await;
}

/// A run refused because another process drives its thread (409) leaves no run behind: the
/// thread's runs list none (a run was made before the thread was taken, and stayed `pending`
/// after the refusal), and once the other process lets the thread go, the same request runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_refused_for_a_thread_driven_elsewhere_leaves_no_run_behind() {
    use weft_store::Leases;
    let Serving {
        _dir,
        host,
        store,
        addr,
        serving,
    } = serve("weather-chat.yaml").await;
    let http = http();
    let thread = post(&http, addr, "/threads", json!({})).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let elsewhere = weft_store::Owner {
        id: "another-process".into(),
        host: "another-machine".into(),
        pid: 1,
    };
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let lease = store
        .acquire(&tid, &elsewhere, now, 60_000, false)
        .await
        .unwrap();
    let ask = json!({
        "assistant_id": "weather-chat",
        "input": {"messages": [{"role": "user", "content": "Where is it sunnier, Lisbon or Oslo?"}]},
    });
    let (status, text) = send(&http, addr, &format!("/threads/{tid}/runs"), ask.clone()).await;
    assert_eq!(status, 409, "{text}");
    assert!(
        text.contains("another-machine"),
        "the holder is named: {text}"
    );
    let listed = |http: reqwest::Client, tid: String| async move {
        let r = http
            .get(format!("http://{addr}/threads/{tid}/runs"))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.json::<Vec<Value>>().await.unwrap()
    };
    let runs = listed(http.clone(), tid.clone()).await;
    assert!(runs.is_empty(), "a refused run is not listed: {runs:?}");

    store.release(&lease).await.unwrap();
    let done = post(&http, addr, &format!("/threads/{tid}/runs/wait"), ask).await;
    assert!(
        done.to_string().contains("Lisbon is sunny"),
        "the thread let go runs the request: {done}"
    );
    let runs = listed(http.clone(), tid.clone()).await;
    let statuses: Vec<&str> = runs.iter().filter_map(|r| r["status"].as_str()).collect();
    assert_eq!(statuses, vec!["success"], "{runs:?}");

    stop(&host, serving).await;
}

/// A request refused for its key before its body was read: the answer says `connection: close`,
/// since the server closes a connection whose body it did not read. Without it a client sent its
/// next request on that connection and got "Server disconnected without sending a response"
/// (the body here arrives after the headers, as it can under load). The same request with a key
/// whose body arrives late is answered, and the connection is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_before_its_body_is_read_closes_its_connection_and_says_so() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Serving {
        _dir,
        host,
        addr,
        serving,
        ..
    } = serve("weather-chat.yaml").await;

    // Headers first, the body 100 ms later; the answer read up to the end of its headers.
    async fn answer_head(addr: SocketAddr, key: Option<&str>) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let key = key
            .map(|k| format!("x-api-key: {k}\r\n"))
            .unwrap_or_default();
        s.write_all(
            format!(
                "POST /threads HTTP/1.1\r\nhost: x\r\n{key}content-type: application/json\r\n\
                 content-length: 2\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(b"{}").await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "the connection closed before an answer");
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).to_lowercase()
    }
    let refused = answer_head(addr, None).await;
    assert!(refused.starts_with("http/1.1 401"), "{refused}");
    assert!(refused.contains("connection: close"), "{refused}");
    let created = answer_head(addr, Some(KEY)).await;
    assert!(created.starts_with("http/1.1 200"), "{created}");
    assert!(!created.contains("connection: close"), "{created}");

    host.shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(20), serving).await;
}
