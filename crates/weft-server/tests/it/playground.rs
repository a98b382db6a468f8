//! The playground's routes from an HTTP client, against a server started in this test's process
//! (bound on port 0, stopped through the host's `Shutdown`) over a copy of the playground's
//! agents, `crates/weft/tests/fixtures/playground/` (a scripted model, local command tools run
//! in the sandbox, the launcher this crate's `weft-server-sandbox`): sessions across agents with
//! cost and filters, a session at any event, its events as SSE with `Last-Event-ID`, fork,
//! compare, pause and continue, cancel, the check of an edited plan, the model-call inspector,
//! the page and its compression, another user's session answering 404, and the main routes'
//! answers against the OpenAPI document. The page in a real browser is tested with `weft serve`
//! in `crates/weft/tests/it/playground.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_host::Host;
use weft_server::{ServeConfig, ServerError};
use weft_store::{AnyStore, Durability};

const ALICE: &str = "alice-key-0123456789abcdef";
const BOB: &str = "bob-key-0123456789abcdef00";

/// A server on port 0 over a copy of the playground's agents in a temporary directory (its
/// store `serve.db` there), configured as `weft serve --keys keys.txt --quotas
/// limits/quotas.yaml` is; stopped through its host's `Shutdown` ([`Server::stop`]) or with
/// the test's runtime.
struct Server {
    url: String,
    dir: tempfile::TempDir,
    host: Host,
    store: Arc<AnyStore>,
    serving: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl Server {
    async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// A server whose directory `prepare` was given first (to put agent files beside the
    /// fixtures before it serves them).
    async fn start_with(prepare: impl FnOnce(&Path)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fixtures =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../weft/tests/fixtures/playground");
        for f in std::fs::read_dir(&fixtures).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
        prepare(dir.path());
        std::fs::write(
            dir.path().join("keys.txt"),
            format!("{ALICE} alice\n{BOB} bob\n"),
        )
        .unwrap();
        // alice has a quota (the page shows her spending against it); bob has none.
        std::fs::create_dir(dir.path().join("limits")).unwrap();
        std::fs::write(
            dir.path().join("limits/quotas.yaml"),
            "users:\n  alice: { day: { cost_usd: 100 }, month: { tokens: 10000000 } }\n",
        )
        .unwrap();
        Self::serve(dir).await
    }

    /// Serves the agents of `dir`, prepared by [`Server::start_with`] (its store as it is).
    async fn serve(dir: tempfile::TempDir) -> Self {
        // Command tools run through the sandbox's launcher: this package's own binary, which
        // cargo builds for its tests (weft-tools' `weft-sandbox` is not built with them).
        weft_tools::sandbox::set_launcher(
            PathBuf::from(env!("CARGO_BIN_EXE_weft-server-sandbox")),
            vec![],
        );
        let quotas = weft_host::load::quotas(&dir.path().join("limits/quotas.yaml")).unwrap();
        let host = Host {
            quotas: Some(Arc::new(quotas)),
            ..Host::default()
        };
        let db = dir.path().join("serve.db");
        let store = Arc::new(
            AnyStore::open_with(db.to_str().unwrap(), Durability::default())
                .await
                .unwrap(),
        );
        let config = ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            keys: Some(dir.path().join("keys.txt")),
            ..ServeConfig::new(vec![dir.path().to_path_buf()])
        };
        let server = weft_server::Server::bind(host.clone(), store.clone(), config)
            .await
            .unwrap();
        let addr = server.local_addr().unwrap();
        let serving = tokio::spawn(server.run());
        Self {
            url: format!("http://{addr}"),
            dir,
            host,
            store,
            serving,
        }
    }

    /// Stops the server through its host's `Shutdown`; its directory, to serve again.
    async fn stop(self) -> tempfile::TempDir {
        self.host.shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(20), self.serving)
            .await
            .expect("the server stops once its Shutdown is triggered")
            .unwrap()
            .unwrap();
        self.dir
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The tools' calls, in order (`tools.py` appends each to `calls.log`).
    fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// An HTTP client of the API, with one user's key.
struct Client {
    http: reqwest::Client,
    base: String,
    key: &'static str,
}

/// An HTTP client (reqwest on rustls with `ring`, as weft's own clients are built).
fn http() -> reqwest::Client {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

impl Client {
    fn new(server: &Server, key: &'static str) -> Self {
        Self {
            http: http(),
            base: server.url.clone(),
            key,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", self.key);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> Value {
        let (status, v) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.call(reqwest::Method::POST, path, Some(body)).await;
        assert!((200..300).contains(&status), "POST {path}: {status} {v}");
        v
    }

    /// A new thread of `agent` and a run of it, waited for; its id.
    async fn run_wait(&self, agent: &str, task: &str, input: Value) -> String {
        let tid = self.post("/threads", json!({})).await["thread_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut input = input;
        input["messages"] = json!([{"role": "user", "content": task}]);
        self.post(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": agent, "input": input}),
        )
        .await;
        tid
    }

    /// A new thread of `agent` and a run of it in the background; its id.
    async fn run(&self, agent: &str, task: &str, input: Value) -> String {
        let tid = self.post("/threads", json!({})).await["thread_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut input = input;
        input["messages"] = json!([{"role": "user", "content": task}]);
        self.post(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": agent, "input": input}),
        )
        .await;
        tid
    }

    /// Waits until the session's view satisfies `cond`; the view.
    async fn until(&self, id: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        let began = Instant::now();
        loop {
            let v = self.get(&format!("/sessions/{id}")).await;
            if cond(&v) {
                return v;
            }
            assert!(
                began.elapsed() < Duration::from_secs(40),
                "{what}: never happened; the session: {v:#}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The session's events stream: the ids and types of the events it sends until `ready`.
    async fn events(&self, id: &str, last_event_id: Option<u64>) -> Vec<(u64, String)> {
        let mut req = self
            .http
            .get(format!("{}/sessions/{id}/events", self.base))
            .header("x-api-key", self.key);
        if let Some(l) = last_event_id {
            req = req.header("last-event-id", l.to_string());
        }
        let mut resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let mut text = String::new();
        let mut out = Vec::new();
        loop {
            let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
                .await
                .expect("the stream stalled before `ready`")
                .unwrap()
                .expect("the stream ended before `ready`");
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let block: String = text.drain(..end + 2).collect();
                let mut name = "";
                let mut data = "";
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = v;
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = v;
                    }
                }
                match name {
                    "ready" => return out,
                    "event" => {
                        let e: Value = serde_json::from_str(data).unwrap();
                        out.push((
                            e["seq"].as_u64().unwrap(),
                            e["type"].as_str().unwrap().to_owned(),
                        ));
                    }
                    _ => {}
                }
            }
        }
    }
}

fn node<'v>(view: &'v Value, id: &str) -> &'v Value {
    view["plan"]["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["id"] == id))
        .unwrap_or_else(|| panic!("no node {id}: {view:#}"))
}

fn statuses(view: &Value) -> Vec<(String, String)> {
    view["plan"]["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .map(|n| {
                    (
                        n["id"].as_str().unwrap().to_owned(),
                        n["status"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn desk_input() -> Value {
    json!({"customerId": "c-42", "amount": 50})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_list_every_agent_with_cost_and_filters_and_hide_other_users() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let bob = Client::new(&server, BOB);
    let desk = alice.run_wait("desk", "Refund c-42.", desk_input()).await;
    let broken = alice
        .run_wait(
            "breaker",
            "Refund 900.",
            json!({"customerId": "c-9", "amount": 900}),
        )
        .await;
    let list = alice.get("/sessions").await;
    let all = list["sessions"].as_array().unwrap();
    assert_eq!(all.len(), 2, "{list:#}");
    // Newest first, with agent, status, task, user, times, usage and cost.
    assert_eq!(all[0]["id"], broken.as_str());
    let d = &all[1];
    assert_eq!(
        (
            d["id"].as_str(),
            d["agent"].as_str(),
            d["status"].as_str(),
            d["user"].as_str()
        ),
        (
            Some(desk.as_str()),
            Some("desk"),
            Some("completed"),
            Some("alice")
        )
    );
    assert_eq!(d["task"], "Refund c-42.");
    assert_eq!(d["tool_calls"], 4);
    let cost = d["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.0014).abs() < 1e-9, "{cost}");
    assert!(d["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(all[0]["status"], "failed");
    // Filters.
    let failed = alice.get("/sessions?status=failed").await;
    assert_eq!(failed["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(failed["sessions"][0]["id"], broken.as_str());
    let of_desk = alice.get("/sessions?agent=desk").await;
    assert_eq!(of_desk["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(of_desk["sessions"][0]["id"], desk.as_str());
    let page = alice.get("/sessions?limit=1").await;
    assert_eq!(
        (page["sessions"].as_array().unwrap().len(), &page["more"]),
        (1, &json!(true))
    );
    let (status, err) = alice
        .call(reqwest::Method::GET, "/sessions?status=asleep", None)
        .await;
    assert_eq!(status, 422, "{err}");
    assert!(err["detail"].as_str().unwrap().contains("waiting_for_user"));
    // Another user sees none of them, and each route answers 404 for them.
    assert_eq!(bob.get("/sessions").await["sessions"], json!([]));
    for (method, path, body) in [
        (reqwest::Method::GET, format!("/sessions/{desk}"), None),
        (
            reqwest::Method::GET,
            format!("/sessions/{desk}/events"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{desk}/fork"),
            Some(json!({"at": 3})),
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{desk}/pause"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{desk}/cancel"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{desk}/plan/check"),
            Some(json!({"plan": []})),
        ),
    ] {
        let (status, v) = bob.call(method, &path, body).await;
        assert_eq!(status, 404, "{path}: {v}");
        assert_eq!(v["detail"], "session not found", "{path}");
    }
    // Without a key, nothing.
    let anon = http()
        .get(format!("{}/sessions", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
}

/// The memories a turn was given are part of its session's view, and each user's view holds
/// their own memories only (the agent's and public ones are shared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_view_shows_the_memories_its_user_was_given() {
    use weft_store::{Kind, Knowledge, NewEntry, Shelf};
    let server = Server::start().await;
    let store = &server.store;
    for (shelf, text) in [
        (Shelf::user("alice"), "Alice's locker code is 4417"),
        (Shelf::user("bob"), "Bob's locker code is 9051"),
        (Shelf::public(), "Every locker is emptied on Friday"),
    ] {
        let entry = NewEntry {
            text: text.into(),
            source: String::new(),
            position: 0,
            embedding: None,
        };
        store
            .add(Kind::Memory, &shelf, vec![entry], false, 1)
            .await
            .unwrap();
    }
    for (key, own, other) in [(ALICE, "4417", "9051"), (BOB, "9051", "4417")] {
        let client = Client::new(&server, key);
        let id = client
            .run_wait("memo", "what is my locker code", json!({}))
            .await;
        let view = client.get(&format!("/sessions/{id}")).await;
        assert_eq!(view["status"], "completed", "{view:#}");
        let memories = view["memories"].to_string();
        assert!(memories.contains(own), "{memories}");
        assert!(memories.contains("emptied on Friday"), "{memories}");
        assert!(!memories.contains(other), "{memories}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_shown_as_it_was_at_any_event() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let id = alice.run_wait("desk", "Refund c-42.", desk_input()).await;
    let last = alice.get(&format!("/sessions/{id}")).await;
    assert_eq!(last["status"], "completed");
    assert_eq!(last["latest"], true);
    assert!(
        statuses(&last).iter().all(|(_, s)| s == "COMPLETED"),
        "{last:#}"
    );
    // The plan as a graph: waves, and edges from references and `_dependsOn`.
    assert_eq!(
        [
            node(&last, "customer")["wave"].as_u64(),
            node(&last, "orders")["wave"].as_u64(),
            node(&last, "refund")["wave"].as_u64(),
            node(&last, "tell")["wave"].as_u64()
        ],
        [Some(1), Some(1), Some(2), Some(3)]
    );
    let edges = last["plan"]["edges"].as_array().unwrap();
    assert!(edges.contains(
        &json!({"from": "customer", "to": "refund", "kind": "data", "reads": ["†state.customer"]})
    ));
    assert!(edges.contains(&json!({"from": "refund", "to": "tell", "kind": "order", "reads": []})));
    assert_eq!(last["calls"].as_array().unwrap().len(), 4);
    assert!(
        last["calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "ok" && c["duration_ms"].as_u64().unwrap() > 0)
    );
    let decisions: Vec<&str> = last["reviews"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["CONTINUE", "CONTINUE", "FINAL_RESPONSE"]);
    assert!((last["usage"]["cost_usd"].as_f64().unwrap() - 0.0014).abs() < 1e-9);
    // At the end of the first wave: the lookups done, the rest to come, no answer.
    let log = alice.events(&id, None).await;
    let wave1 = log
        .iter()
        .find(|(_, t)| t == "wave_finished")
        .map(|(s, _)| *s)
        .unwrap();
    let then = alice.get(&format!("/sessions/{id}?at={wave1}")).await;
    assert_eq!(
        statuses(&then),
        [
            ("customer".to_owned(), "COMPLETED".to_owned()),
            ("orders".to_owned(), "COMPLETED".to_owned()),
            ("refund".to_owned(), "PENDING".to_owned()),
            ("tell".to_owned(), "PENDING".to_owned())
        ]
    );
    assert_eq!(node(&then, "refund")["projected"], true);
    assert_eq!(then["status"], "running");
    assert_eq!(then["latest"], false);
    assert_eq!(then["event"]["type"], "wave_finished");
    assert!(then["answer"].is_null());
    assert_eq!(then["calls"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_resumes_after_the_last_event_id() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let id = alice.run_wait("desk", "Refund c-42.", desk_input()).await;
    let last = alice.get(&format!("/sessions/{id}")).await["last_seq"]
        .as_u64()
        .unwrap();
    let all = alice.events(&id, None).await;
    let seqs: Vec<u64> = all.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>());
    assert_eq!(all[0].1, "session_started");
    let rest = alice.events(&id, Some(5)).await;
    assert_eq!(rest, all[5..].to_vec());
    // A live stream: a run started after the stream was opened is seen as it is stored.
    let tid = alice.post("/threads", json!({})).await["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let follower = {
        let c = Client::new(&server, ALICE);
        let tid = tid.clone();
        tokio::spawn(async move {
            let mut resp = c
                .http
                .get(format!("{}/sessions/{tid}/events", c.base))
                .header("x-api-key", c.key)
                .send()
                .await
                .unwrap();
            let mut text = String::new();
            while !text.contains("\"type\":\"run_finished\"") {
                let chunk = tokio::time::timeout(Duration::from_secs(30), resp.chunk())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            text
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut input = desk_input();
    input["messages"] = json!([{"role": "user", "content": "Refund c-42."}]);
    alice
        .post(
            &format!("/threads/{tid}/runs"),
            json!({"assistant_id": "desk", "input": input}),
        )
        .await;
    let text = follower.await.unwrap();
    assert!(text.contains("event: ready"), "{text}");
    assert!(text.contains("\"type\":\"step_completed\""), "{text}");
    // The model's answer came as it was generated, piece by piece, before it was stored.
    assert!(text.contains("event: text"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_at_an_event_continues_from_there() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let id = alice.run_wait("desk", "Refund c-42.", desk_input()).await;
    let log = alice.events(&id, None).await;
    let wave1 = log
        .iter()
        .find(|(_, t)| t == "wave_finished")
        .map(|(s, _)| *s)
        .unwrap();
    let before = server.calls().len();
    let fork = alice
        .post(&format!("/sessions/{id}/fork"), json!({"at": wave1}))
        .await;
    assert_eq!(fork["status"], "running");
    assert_eq!(fork["forked_from"], json!({"session": id, "at": wave1}));
    let fid = fork["id"].as_str().unwrap().to_owned();
    // The server continues a running fork by itself.
    let done = alice
        .until(&fid, "the fork completed", |v| v["status"] == "completed")
        .await;
    assert_eq!(done["parent_id"], id.as_str());
    assert_eq!(done["forked_from"]["at"], wave1);
    assert!(done["answer"].as_str().unwrap().contains("Refunded 50"));
    // Only what came after the fork point ran again.
    let ran: Vec<String> = server.calls()[before..]
        .iter()
        .map(|c| c["tool"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ran, ["refund", "notify"]);
    // The fork is listed as alice's; the original is unchanged.
    let list = alice.get("/sessions").await;
    assert_eq!(list["sessions"][0]["id"], fid.as_str());
    assert_eq!(list["sessions"][0]["parent_id"], id.as_str());
    assert_eq!(
        alice.get(&format!("/sessions/{id}")).await["last_seq"],
        log.last().unwrap().0
    );
    // A point that does not exist is refused, naming the range.
    let (status, err) = alice
        .call(
            reqwest::Method::POST,
            &format!("/sessions/{id}/fork"),
            Some(json!({"at": 10_000})),
        )
        .await;
    assert_eq!(status, 422);
    assert!(
        err["detail"].as_str().unwrap().contains("has events 1 to"),
        "{err}"
    );
}

/// A desk session `origin` of alice's, run by a first server over the directory, which is then
/// stopped; then the world changes: the refund tool's receipt (`receipt.txt`) and the model's
/// answer (its script) are new, so that a fork of `origin` after its lookups, on the server
/// started again over the same directory and store, refunds with another receipt and says so.
async fn origin_then_the_world_changes() -> Server {
    let first = Server::start().await;
    let alice = Client::new(&first, ALICE);
    alice.post("/threads", json!({"thread_id": "origin"})).await;
    let mut input = desk_input();
    input["messages"] = json!([{"role": "user", "content": "Refund c-42."}]);
    let done = alice
        .post(
            "/threads/origin/runs/wait",
            json!({"assistant_id": "desk", "input": input}),
        )
        .await;
    assert!(done["answer"].is_string(), "the origin completed: {done:#}");
    let dir = first.stop().await;
    std::fs::write(dir.path().join("receipt.txt"), "r-77777").unwrap();
    let script = dir.path().join("desk.script.yaml");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("(receipt r-20931)"));
    std::fs::write(
        &script,
        text.replace("(receipt r-20931)", "(receipt r-77777)"),
    )
    .unwrap();
    Server::serve(dir).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_compared_with_its_origin_names_the_result_and_the_answer_that_differ() {
    let server = origin_then_the_world_changes().await;
    let alice = Client::new(&server, ALICE);
    let bob = Client::new(&server, BOB);
    let log = alice.events("origin", None).await;
    let wave1 = log
        .iter()
        .find(|(_, t)| t == "wave_finished")
        .map(|(s, _)| *s)
        .unwrap();
    let fork = alice
        .post("/sessions/origin/fork", json!({"at": wave1}))
        .await;
    let fid = fork["id"].as_str().unwrap().to_owned();
    alice
        .until(&fid, "the fork completed", |v| v["status"] == "completed")
        .await;
    let c = alice.get(&format!("/sessions/origin/compare/{fid}")).await;
    assert_eq!(
        c["fork"],
        json!({"side": "b", "fork": fid, "origin": "origin", "at": wave1, "event": "wave_finished"})
    );
    assert_eq!(c["aligned_by"], "plan");
    assert_eq!(
        (c["a"]["id"].as_str(), c["b"]["id"].as_str()),
        (Some("origin"), Some(fid.as_str()))
    );
    // Of the four steps, only the refund differs, and only in its result's receipt.
    let steps: Vec<(&str, &str)> = c["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["key"].as_str().unwrap(), s["change"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            ("customer", "same"),
            ("orders", "same"),
            ("refund", "differs"),
            ("tell", "same")
        ],
        "{c:#}"
    );
    let refund = &c["steps"][2];
    assert_eq!(refund["differs"], json!(["result"]), "{refund:#}");
    assert_eq!(refund["result_paths"], json!(["/receipt"]));
    assert_eq!(refund["args_paths"], json!([]));
    assert_eq!(refund["a"]["result"]["receipt"], "r-20931");
    assert_eq!(refund["b"]["result"]["receipt"], "r-77777");
    // The answers differ in the receipt's word alone.
    assert_eq!(
        c["answer"]["words"],
        json!([
            {"op": "same", "text": "Refunded 50 to Ada Lovelace (receipt"},
            {"op": "removed", "text": "r-20931)"},
            {"op": "added", "text": "r-77777)"},
            {"op": "same", "text": "and let her know."},
        ])
    );
    let differs: Vec<&str> = c["differs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(differs.contains(&"answer"), "{differs:?}");
    for same in [
        "agent",
        "task",
        "input",
        "status",
        "model_calls",
        "tool_calls",
    ] {
        assert!(!differs.contains(&same), "{same} differs: {differs:?}");
    }
    // The other way round: the fork is `a`, and still named.
    let back = alice.get(&format!("/sessions/{fid}/compare/origin")).await;
    assert_eq!(back["fork"]["side"], "a");
    assert_eq!(back["steps"][2]["b"]["result"]["receipt"], "r-20931");
    // A key compares only its user's sessions: bob's own compare, alice's are not found.
    let bobs = bob.run("desk", "Refund c-42.", desk_input()).await;
    bob.get(&format!("/sessions/{bobs}/compare/{bobs}")).await;
    for (who, path) in [
        (&bob, format!("/sessions/origin/compare/{fid}")),
        (&bob, format!("/sessions/{bobs}/compare/origin")),
        (&alice, format!("/sessions/origin/compare/{bobs}")),
    ] {
        let (status, err) = who.call(reqwest::Method::GET, &path, None).await;
        assert_eq!(status, 404, "{path}: {err}");
        assert!(
            err["detail"].as_str().unwrap().contains("not found"),
            "{err}"
        );
    }
}

/// A session that is running compared with one that finished: the comparison answers at once
/// (no error, no wait for the run) and says which one runs, with the running plan's steps as
/// they stand; the other way round too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_session_compared_with_a_finished_one_says_which_runs() {
    let server = Server::start_with(slow_agent).await;
    let alice = Client::new(&server, ALICE);
    let done = alice.run_wait("desk", "Refund c-42.", desk_input()).await;
    let running = alice
        .run("slow200", "Run two hundred slow steps.", json!({}))
        .await;
    alice
        .until(&running, "a step running", |v| {
            v["status"] == "running"
                && v["plan"]["nodes"]
                    .as_array()
                    .is_some_and(|n| n.iter().any(|n| n["status"] == "RUNNING"))
        })
        .await;
    for (a, b, side) in [(&running, &done, "a"), (&done, &running, "b")] {
        let path = format!("/sessions/{a}/compare/{b}");
        let c = tokio::time::timeout(Duration::from_secs(10), alice.get(&path))
            .await
            .unwrap_or_else(|_| panic!("GET {path} did not answer within 10 s"));
        let other = if side == "a" { "b" } else { "a" };
        assert_eq!(c[side]["id"], running.as_str(), "{c:#}");
        assert_eq!(c[side]["status"], "running", "{c:#}");
        assert_eq!(c[other]["status"], "completed", "{c:#}");
        assert_eq!(c[side]["answer"], Value::Null, "{c:#}");
        assert!(
            c["differs"].as_array().unwrap().contains(&json!("status")),
            "{c:#}"
        );
        assert_eq!(c["aligned_by"], "plan");
        // The running plan's steps are there as they stand: some running, none of the other's.
        let mine: Vec<&Value> = c["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["change"] == format!("only_{side}"))
            .collect();
        assert_eq!(mine.len(), 200, "{c:#}");
        assert!(
            mine.iter().any(|s| s[side]["status"] == "RUNNING"),
            "no running step: {c:#}"
        );
    }
    let (status, err) = alice
        .call(
            reqwest::Method::POST,
            &format!("/sessions/{running}/cancel"),
            None,
        )
        .await;
    assert!((200..300).contains(&status), "cancel: {status} {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_waits_until_it_is_continued() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let id = alice.run("desk", "Refund c-42.", desk_input()).await;
    alice
        .until(&id, "the lookups running", |v| {
            v["plan"].is_object() && node(v, "customer")["status"] == "RUNNING"
        })
        .await;
    let paused = alice
        .post(&format!("/sessions/{id}/pause"), json!(null))
        .await;
    assert_eq!(paused["status"], "waiting_for_user", "{paused}");
    let v = alice.get(&format!("/sessions/{id}")).await;
    assert_eq!(v["waiting"]["kind"], "paused");
    // The calls in flight finished and were recorded; nothing new started.
    assert_eq!(node(&v, "customer")["status"], "COMPLETED");
    assert_eq!(node(&v, "refund")["status"], "PENDING");
    // Nothing claims a paused session: it stays as it is.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let still = alice.get(&format!("/sessions/{id}")).await;
    assert_eq!(still["last_seq"], v["last_seq"]);
    let list = alice.get("/sessions?status=waiting_for_user").await;
    assert_eq!(list["sessions"][0]["waiting"], "paused");
    // Any answer continues it where it stopped.
    alice
        .post(
            &format!("/threads/{id}/runs"),
            json!({"assistant_id": "desk", "command": {"resume": "continue"}}),
        )
        .await;
    let done = alice
        .until(&id, "the run completed", |v| v["status"] == "completed")
        .await;
    assert!(statuses(&done).iter().all(|(_, s)| s == "COMPLETED"));
    let mut ran: Vec<String> = server
        .calls()
        .iter()
        .map(|c| c["tool"].as_str().unwrap().to_owned())
        .collect();
    ran.sort();
    assert_eq!(ran, ["history", "lookup", "notify", "refund"], "each once");
    // A finished session has nothing to pause or cancel.
    let (status, err) = alice
        .call(
            reqwest::Method::POST,
            &format!("/sessions/{id}/pause"),
            None,
        )
        .await;
    assert_eq!(status, 409, "{err}");
    let (status, _) = alice
        .call(
            reqwest::Method::POST,
            &format!("/sessions/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_session_is_cancelled_and_a_running_one_stopped() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let waiting = alice.run_wait("asker", "Refund c1.", json!({})).await;
    assert_eq!(
        alice.get(&format!("/sessions/{waiting}")).await["status"],
        "waiting_for_user"
    );
    let out = alice
        .post(&format!("/sessions/{waiting}/cancel"), json!(null))
        .await;
    assert_eq!(out["status"], "failed");
    let running = alice.run("desk", "Refund c-42.", desk_input()).await;
    alice
        .until(&running, "a call in flight", |v| {
            v["calls"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["status"] == "running"))
        })
        .await;
    let out = alice
        .post(&format!("/sessions/{running}/cancel"), json!(null))
        .await;
    assert_eq!(out["status"], "failed");
    let v = alice.get(&format!("/sessions/{running}")).await;
    assert!(
        v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] != "running"),
        "{v:#}"
    );
    assert!(v["error"].as_str().unwrap().contains("cancel"), "{v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_plan_is_checked_before_it_is_sent() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let id = alice.run_wait("gatekeeper", "Refund c-7.", json!({})).await;
    let v = alice.get(&format!("/sessions/{id}")).await;
    assert_eq!(v["waiting"]["kind"], "plan_approval");
    assert_eq!(v["plan"]["proposed"], true);
    assert_eq!(node(&v, "refund")["status"], "PROPOSED");
    let bad = alice
        .post(
            &format!("/sessions/{id}/plan/check"),
            json!({"plan": [
                {"_id": "customer", "_tool": "lookupCustomer", "customerId": 7},
                {"_id": "x", "_tool": "wireMoney", "v": "†state.nowhere"},
            ]}),
        )
        .await;
    assert_eq!(bad["ok"], false);
    let problems: Vec<(String, String)> = bad["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["step"].as_str().unwrap_or("").to_owned(),
                p["field"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert!(
        problems.contains(&("x".into(), "_tool".into())),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|(s, f)| s == "customer" && f.contains("customerId")),
        "{problems:?}"
    );
    let good = alice
        .post(
            &format!("/sessions/{id}/plan/check"),
            json!({"plan": [
                {"_id": "customer", "_tool": "lookupCustomer", "customerId": "c-7", "_outputPath": "†state.customer"},
                {"_id": "refund", "_tool": "issueRefund", "customerId": "c-7", "amount": 10, "_dependsOn": ["customer"]},
            ]}),
        )
        .await;
    assert_eq!(good["ok"], true, "{good}");
    assert_eq!(good["waves"].as_array().unwrap().len(), 2);
    // The route says what it checks against: the agent's own tools.
    let agents = alice.get("/agents").await;
    assert_eq!(agents["user"], "alice");
    let gatekeeper = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "gatekeeper")
        .unwrap();
    assert_eq!(gatekeeper["approve_plans"], true);
    let tools: Vec<&str> = gatekeeper["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["issueRefund", "lookupCustomer"]);
    assert!(gatekeeper["tools"][0]["input_schema"]["properties"]["amount"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_loads_without_a_key_and_its_data_needs_one() {
    let server = Server::start().await;
    let http = http();
    let page = http.get(&server.url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    let html = page.text().await.unwrap();
    assert!(html.contains("/playground/js/main.js"));
    let js = http
        .get(format!("{}/playground/js/main.js", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .contains("javascript")
    );
    let etag = js.headers()["etag"].to_str().unwrap().to_owned();
    let again = http
        .get(format!("{}/playground/js/main.js", server.url))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    let missing = http
        .get(format!("{}/playground/..%2fkeys.txt", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // The routes the page calls are documented with the others, and need a key.
    let alice = Client::new(&server, ALICE);
    let doc = alice.get("/openapi.json").await;
    for path in [
        "/sessions",
        "/sessions/{id}",
        "/sessions/{id}/events",
        "/sessions/{id}/fork",
        "/sessions/{id}/pause",
        "/sessions/{id}/cancel",
        "/sessions/{id}/plan/check",
        "/agents",
        "/",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is not documented");
    }
    assert!(doc["paths"]["/sessions/{id}/fork"]["post"]["requestBody"].is_object());
    for path in ["/agents", "/sessions"] {
        let r = http
            .get(format!("{}{path}", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
}

/// A response's body, decoded as its `content-encoding` says (`gzip`, `br`, or none).
fn decoded(encoding: Option<&str>, body: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    match encoding {
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli_decompressor::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        None => out.extend_from_slice(body),
        Some(other) => panic!("unexpected content-encoding {other}"),
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_the_api_are_compressed_for_clients_that_accept_it() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let sid = alice.run_wait("desk", "Refund c-42.", desk_input()).await;
    let http = http();
    let get = |path: String, accept: Option<&'static str>| {
        let mut req = http
            .get(format!("{}{path}", server.url))
            .header("x-api-key", ALICE);
        if let Some(a) = accept {
            req = req.header("accept-encoding", a);
        }
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            let enc = resp
                .headers()
                .get("content-encoding")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = resp.bytes().await.unwrap().to_vec();
            (enc, body)
        }
    };
    for path in [
        "/".to_owned(),
        "/playground/js/session.js".to_owned(),
        format!("/sessions/{sid}"),
    ] {
        let (plain_enc, plain) = get(path.clone(), None).await;
        assert_eq!(
            plain_enc, None,
            "{path} compressed for a client that did not ask"
        );
        for (accept, expect) in [("gzip", "gzip"), ("br", "br"), ("gzip, br", "br")] {
            let (enc, body) = get(path.clone(), Some(accept)).await;
            assert_eq!(enc.as_deref(), Some(expect), "{path} with {accept}");
            assert!(
                body.len() * 2 < plain.len(),
                "{path} with {accept}: {} bytes of {}",
                body.len(),
                plain.len()
            );
            assert_eq!(
                decoded(enc.as_deref(), &body),
                plain,
                "{path} with {accept} decodes to the same body"
            );
        }
    }
    // The event stream is never held back to be compressed.
    let resp = http
        .get(format!("{}/sessions/{sid}/events", server.url))
        .header("x-api-key", ALICE)
        .header("accept-encoding", "gzip, br")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("content-encoding").is_none());
}

/// The inspector's routes: each model call with its tokens, cost, latency and outcome, adding up
/// to the session's totals; one call's request (rebuilt from the log: the task, the tools
/// offered, the planner's schema), its raw reply and what it meant; the answers match the
/// OpenAPI document; another user's session and a call that does not exist answer 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_calls_show_each_request_reply_and_usage_adding_up_to_the_session() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let bob = Client::new(&server, BOB);
    let doc = alice.get("/openapi.json").await;
    let id = alice.run_wait("desk", "Refund c-42.", desk_input()).await;
    let list = alice.get(&format!("/sessions/{id}/model-calls")).await;
    conforms(&doc, "get", "/sessions/{id}/model-calls", &list);
    let calls = list["calls"].as_array().unwrap();
    let purposes: Vec<&str> = calls
        .iter()
        .map(|c| c["purpose"].as_str().unwrap())
        .collect();
    assert_eq!(
        purposes,
        [
            "plan",
            "review",
            "review",
            "review",
            "respond",
            "response_review"
        ],
        "{list:#}"
    );
    // Each call's tokens (the script's) add up to the session's totals, as the list of
    // sessions shows them.
    let sum = |k: &str| {
        calls
            .iter()
            .map(|c| c["usage"][k].as_u64().unwrap())
            .sum::<u64>()
    };
    let totals = &list["totals"];
    assert_eq!(
        (sum("input_tokens"), sum("output_tokens")),
        (
            totals["input_tokens"].as_u64().unwrap(),
            totals["output_tokens"].as_u64().unwrap()
        )
    );
    assert_eq!((sum("input_tokens"), sum("output_tokens")), (6650, 338));
    let cost: f64 = calls
        .iter()
        .map(|c| c["usage"]["cost_usd"].as_f64().unwrap())
        .sum();
    let listed = alice.get("/sessions").await;
    let listed = listed["sessions"][0]["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - listed).abs() < 1e-9, "{cost} {listed}");
    // The plan call took the script's 300 ms at least, and its JSON did not stream; the
    // answer's text streamed after the script's 200 ms.
    assert!(
        calls[0]["latency_ms"].as_u64().unwrap() >= 300,
        "{:#}",
        calls[0]
    );
    assert!(calls[0].get("ttft_ms").is_none(), "{:#}", calls[0]);
    let answer = &calls[4];
    let ttft = answer["ttft_ms"]
        .as_u64()
        .expect("the answer's first token is timed");
    assert!(
        (200..=answer["latency_ms"].as_u64().unwrap()).contains(&ttft),
        "{answer:#}"
    );
    assert_eq!(
        (&calls[0]["n"], &calls[0]["outcome"], &calls[0]["attempt"]),
        (&json!(1), &json!("replied"), &json!(1))
    );

    let plan = alice.get(&format!("/sessions/{id}/model-calls/1")).await;
    conforms(&doc, "get", "/sessions/{id}/model-calls/{n}", &plan);
    let req = &plan["request"];
    let messages = req["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system", "{req:#}");
    assert!(
        messages
            .iter()
            .any(|m| m["content"].as_str().unwrap_or("").contains("Refund c-42.")),
        "the task is in the request: {req:#}"
    );
    let text = req.to_string();
    for tool in ["lookupCustomer", "billingHistory", "issueRefund", "notify"] {
        assert!(text.contains(tool), "{tool} is offered: {req:#}");
    }
    assert!(
        req["response_schema"].is_object(),
        "the planner's schema: {req:#}"
    );
    let reply: Value = serde_json::from_str(plan["reply"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(reply["plan"][2]["_id"], "refund");
    assert_eq!(plan["decision"][0]["type"], "plan_accepted", "{plan:#}");
    assert_eq!(plan["decision"][0]["plan"].as_array().unwrap().len(), 4);
    let review = alice.get(&format!("/sessions/{id}/model-calls/2")).await;
    assert_eq!(review["call"]["purpose"], "review");
    assert_eq!(
        review["decision"][0]["type"], "review_decided",
        "{review:#}"
    );

    let (status, v) = alice
        .call(
            reqwest::Method::GET,
            &format!("/sessions/{id}/model-calls/7"),
            None,
        )
        .await;
    assert_eq!(status, 404, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("has 6 model call(s)"),
        "{v}"
    );
    for path in [
        format!("/sessions/{id}/model-calls"),
        format!("/sessions/{id}/model-calls/1"),
    ] {
        let (status, v) = bob.call(reqwest::Method::GET, &path, None).await;
        assert_eq!(
            (status, &v["detail"]),
            (404, &json!("session not found")),
            "{path}"
        );
    }
}

/// A secret a tool leaked into its result is redacted in the inspector's request as in the
/// events: the request that carried the result back to the model shows `[secret:token]`. The
/// secret is read from a file beside the agent (an environment variable would be this test
/// process's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_shows_no_secret() {
    let canary = format!("canary-{}-inspector", std::process::id());
    let agent = r#"name: secretive
mode: react
model: scripted:secretive.script.yaml
instructions: Help with refunds.
secrets:
  token: { file: canary.txt }
tools:
  - name: showEnv
    description: Prints the token it was given (a leaky tool).
    command: ["sh", "-c", "cat > /dev/null; printf '{\"token\": \"%s\"}' \"$TOKEN\""]
    env: { TOKEN: "{{ secrets.token }}" }
"#;
    let script = "- tool_calls:\n    - { name: showEnv, arguments: {} }\n- text: done\n";
    let server = Server::start_with(|dir| {
        std::fs::write(dir.join("secretive.yaml"), agent).unwrap();
        std::fs::write(dir.join("secretive.script.yaml"), script).unwrap();
        std::fs::write(dir.join("canary.txt"), &canary).unwrap();
    })
    .await;
    let alice = Client::new(&server, ALICE);
    let id = alice
        .run_wait("secretive", "Show the token.", json!({}))
        .await;
    let list = alice.get(&format!("/sessions/{id}/model-calls")).await;
    assert_eq!(list["calls"].as_array().unwrap().len(), 2, "{list:#}");
    let second = alice.get(&format!("/sessions/{id}/model-calls/2")).await;
    let text = second.to_string();
    assert!(!text.contains(&canary), "the secret leaked: {second:#}");
    let tool = second["request"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result in {second:#}"));
    assert!(
        tool["content"].as_str().unwrap().contains("[secret:token]"),
        "{tool:#}"
    );
    assert_eq!(second["request"]["tools"][0]["name"], "showEnv");
}

// --- Large plans --------------------------------------------------------------------------------

/// A plan of `waves` waves of `per` steps `s0000`, `s0001`…: a step after the first wave runs
/// after the step in its row of the wave before (`_dependsOn`); `step(i)` gives step `i` its call.
fn wide_plan(waves: usize, per: usize, step: impl Fn(usize) -> Value) -> Vec<Value> {
    (0..waves * per)
        .map(|i| {
            let mut s = step(i);
            s["_id"] = json!(format!("s{i:04}"));
            if i >= per {
                s["_dependsOn"] = json!([format!("s{:04}", i - per)]);
            }
            s
        })
        .collect()
}

/// The scripted model's reviews (`CONTINUE` after each wave), answer and check of it.
fn wide_script(plan: Vec<Value>) -> Value {
    json!({
        "plan": [{ "usage": { "input_tokens": 52000, "output_tokens": 9000, "cost_usd": 0.0123 }, "json": { "plan": plan } }],
        "execute": [{ "repeat": 2, "usage": { "input_tokens": 800, "output_tokens": 40, "cost_usd": 0.0002 },
                      "json": { "action": "USE_TOOL", "tool": "echo", "arguments": { "text": "summary" } } }],
        "review": [{ "repeat": 40, "usage": { "input_tokens": 3000, "output_tokens": 30, "cost_usd": 0.0005 },
                     "json": { "decision": "CONTINUE", "reason": "On to the next wave." } }],
        "respond": [{ "usage": { "input_tokens": 1000, "output_tokens": 20, "cost_usd": 0.0001 }, "text": "Every step ran." }],
        "response_review": [{ "usage": { "input_tokens": 500, "output_tokens": 10, "cost_usd": 0.0001 },
                              "json": { "verdict": "ACCEPT", "feedback": "Grounded in the steps." } }],
    })
}

/// An agent `slow200` whose plan is 200 steps in 10 waves of 20, each a shell command that sleeps
/// half a second and logs its call; 20 run at once. The command is `sh`, not `tools.py`: twenty
/// Python interpreters starting at each wave took the page's two cores for about half a second,
/// which the browser measured as its own long tasks.
fn slow_agent(dir: &Path) {
    slow_agent_of(dir, "0.5");
}

/// [`slow_agent`], its steps sleeping `sleep` seconds.
fn slow_agent_of(dir: &Path, sleep: &str) {
    let plan = wide_plan(10, 20, |i| json!({ "_tool": "slow", "n": i }));
    std::fs::write(
        dir.join("slow200.script.json"),
        wide_script(plan).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("slow.sh"),
        "a=$(cat)\nsleep SECONDS\nprintf '{\"tool\":\"slow\",\"args\":%s}\\n' \"$a\" >> calls.log\n\
         printf '{\"echo\":%s}' \"$a\"\n"
            .replace("SECONDS", sleep),
    )
    .unwrap();
    std::fs::write(
        dir.join("slow200.yaml"),
        "name: slow200\nmode: plan\ndescription: Two hundred slow steps in ten waves.\n\
         model: scripted:slow200.script.json\nlimits: { max_parallel: 20 }\ntools:\n  \
         - name: slow\n    description: Wait a moment.\n    \
         command: [\"sh\", \"slow.sh\"]\n    \
         sandbox: { write: [.] }\n    \
         input_schema: { type: object, properties: { n: { type: integer } }, required: [n] }\n    \
         idempotent: true\n    parallel: true\n",
    )
    .unwrap();
}

// --- The OpenAPI document against real answers -------------------------------------------------

/// The schema `/openapi.json` declares for a route's answer (`200`), made a document of its own
/// (the named schemas beside it), compiled.
fn answer_schema(doc: &Value, method: &str, path: &str) -> jsonschema::Validator {
    let op = &doc["paths"][path][method];
    let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} declares no JSON answer: {op:#}"
    );
    let mut root = schema.clone();
    root["components"] = doc["components"].clone();
    jsonschema::draft202012::new(&root)
        .unwrap_or_else(|e| panic!("{method} {path}: the schema does not compile: {e}"))
}

/// Asserts that `answer`, what `method path` answered, is valid against its declared schema.
fn conforms(doc: &Value, method: &str, path: &str, answer: &Value) {
    let v = answer_schema(doc, method, path);
    let errors: Vec<String> = v
        .iter_errors(answer)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path}: the answer does not match its schema:\n{}\nthe answer: {answer:#}",
        errors.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_main_routes_answer_as_the_openapi_document_declares() {
    let server = Server::start().await;
    let alice = Client::new(&server, ALICE);
    let doc = alice.get("/openapi.json").await;
    // Every operation declares what it answers: a JSON schema, another media type, or no body.
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            let ok = ["200", "204", "501"]
                .iter()
                .find_map(|s| responses.get(*s))
                .unwrap_or_else(|| panic!("{method} {path} declares no answer"));
            let declared = ok["content"]
                .as_object()
                .is_some_and(|c| c.values().all(|m| m["schema"].is_object()))
                || !responses.contains_key("200");
            assert!(declared, "{method} {path}: {ok:#}");
        }
    }
    let check = |method: &str, path: &str, answer: &Value| conforms(&doc, method, path, answer);

    // Assistants.
    let list = alice.post("/assistants/search", json!({})).await;
    check("post", "/assistants/search", &list);
    check(
        "post",
        "/assistants/count",
        &alice.post("/assistants/count", json!({})).await,
    );
    for sub in ["", "/graph", "/schemas"] {
        let answer = alice.get(&format!("/assistants/desk{sub}")).await;
        check("get", &format!("/assistants/{{id}}{sub}"), &answer);
    }

    // A plan session that completes: threads, runs, state, history, the session view.
    let thread = alice.post("/threads", json!({"metadata": {"k": 1}})).await;
    check("post", "/threads", &thread);
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let mut input = desk_input();
    input["messages"] = json!([{"role": "user", "content": "Refund c-42."}]);
    let values = alice
        .post(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "desk", "input": input}),
        )
        .await;
    assert!(values["answer"].is_string(), "{values:#}");
    check("post", "/threads/{tid}/runs/wait", &values);
    check(
        "get",
        "/threads/{tid}",
        &alice.get(&format!("/threads/{tid}")).await,
    );
    check(
        "get",
        "/threads/{tid}/state",
        &alice.get(&format!("/threads/{tid}/state")).await,
    );
    let history = alice
        .post(&format!("/threads/{tid}/history"), json!({}))
        .await;
    assert!(!history.as_array().unwrap().is_empty());
    check("post", "/threads/{tid}/history", &history);
    let runs = alice.get(&format!("/threads/{tid}/runs")).await;
    check("get", "/threads/{tid}/runs", &runs);
    let rid = runs[0]["run_id"].as_str().unwrap().to_owned();
    check(
        "get",
        "/threads/{tid}/runs/{rid}",
        &alice.get(&format!("/threads/{tid}/runs/{rid}")).await,
    );
    check(
        "get",
        "/threads/{tid}/runs/{rid}/join",
        &alice.get(&format!("/threads/{tid}/runs/{rid}/join")).await,
    );
    check(
        "post",
        "/threads/search",
        &alice.post("/threads/search", json!({})).await,
    );
    check(
        "post",
        "/threads/count",
        &alice
            .post("/threads/count", json!({"status": "idle"}))
            .await,
    );
    // threads.update, threads.copy, a threadless run, a batch, the store.
    let (status, updated) = alice
        .call(
            reqwest::Method::PATCH,
            &format!("/threads/{tid}"),
            Some(json!({"metadata": {"k": 2}})),
        )
        .await;
    assert_eq!(
        (status, &updated["metadata"]["k"]),
        (200, &json!(2)),
        "{updated:#}"
    );
    check("patch", "/threads/{tid}", &updated);
    let copy = alice
        .post(&format!("/threads/{tid}/copy"), json!(null))
        .await;
    check("post", "/threads/{tid}/copy", &copy);
    let mut input = desk_input();
    input["messages"] = json!([{"role": "user", "content": "Refund c-43."}]);
    let threadless = alice
        .post(
            "/runs/wait",
            json!({"assistant_id": "desk", "input": input.clone()}),
        )
        .await;
    assert!(threadless["answer"].is_string(), "{threadless:#}");
    check("post", "/runs/wait", &threadless);
    let batch = alice
        .post(
            "/runs/batch",
            json!([{"assistant_id": "desk", "input": input, "on_completion": "keep"}]),
        )
        .await;
    check("post", "/runs/batch", &batch);
    let (status, _) = alice
        .call(
            reqwest::Method::PUT,
            "/store/items",
            Some(json!({"namespace": ["a", "b"], "key": "k", "value": {"v": 1}})),
        )
        .await;
    assert_eq!(status, 204);
    let item = alice.get("/store/items?namespace=a.b&key=k").await;
    assert_eq!(item["value"], json!({"v": 1}), "{item:#}");
    check("get", "/store/items", &item);
    let found = alice
        .post("/store/items/search", json!({"namespace_prefix": ["a"]}))
        .await;
    assert_eq!(found["items"].as_array().unwrap().len(), 1, "{found:#}");
    check("post", "/store/items/search", &found);
    let spaces = alice.post("/store/namespaces", json!({})).await;
    assert_eq!(spaces["namespaces"], json!([["a", "b"]]), "{spaces:#}");
    check("post", "/store/namespaces", &spaces);
    // A plan agent's conversation is its turns: its state is not updated.
    let (status, refused) = alice
        .call(
            reqwest::Method::POST,
            &format!("/threads/{tid}/state"),
            Some(json!({"values": {"messages": [{"type": "human", "content": "x"}]}})),
        )
        .await;
    assert_eq!(status, 409, "{refused:#}");
    assert!(
        refused["detail"].as_str().unwrap().contains("plan agent"),
        "{refused:#}"
    );
    // A ReAct thread's conversation is added to.
    let react = alice.post("/threads", json!({})).await;
    let rid = react["thread_id"].as_str().unwrap().to_owned();
    alice
        .post(
            &format!("/threads/{rid}/runs/wait"),
            json!({"assistant_id": "memo", "input": {"messages": [{"role": "user", "content": "hi"}]}}),
        )
        .await;
    let updated = alice
        .post(
            &format!("/threads/{rid}/state"),
            json!({"values": {"messages": [{"type": "human", "content": "noted"}]}}),
        )
        .await;
    check("post", "/threads/{tid}/state", &updated);
    let state = alice.get(&format!("/threads/{rid}/state")).await;
    assert_eq!(
        state["checkpoint"]["checkpoint_id"], updated["checkpoint"]["checkpoint_id"],
        "{state:#}"
    );

    let view = alice.get(&format!("/sessions/{tid}")).await;
    assert!(view["plan"]["nodes"].is_array(), "{view:#}");
    check("get", "/sessions/{id}", &view);
    let early = alice.get(&format!("/sessions/{tid}?at=3")).await;
    check("get", "/sessions/{id}", &early);

    // A plan that waits for approval: the interrupt, the proposed plan, the check of an edit.
    let waiting = alice.run_wait("gatekeeper", "Refund c-7.", json!({})).await;
    let view = alice.get(&format!("/sessions/{waiting}")).await;
    assert_eq!(view["waiting"]["kind"], "plan_approval");
    check("get", "/sessions/{id}", &view);
    let thread = alice.get(&format!("/threads/{waiting}")).await;
    assert_eq!(thread["status"], "interrupted");
    check("get", "/threads/{tid}", &thread);
    check(
        "get",
        "/threads/{tid}/state",
        &alice.get(&format!("/threads/{waiting}/state")).await,
    );
    let proposed = view["waiting"]["plan"].clone();
    let ok = alice
        .post(
            &format!("/sessions/{waiting}/plan/check"),
            json!({ "plan": proposed }),
        )
        .await;
    assert_eq!(ok["ok"], true, "{ok:#}");
    check("post", "/sessions/{id}/plan/check", &ok);
    let bad = alice
        .post(
            &format!("/sessions/{waiting}/plan/check"),
            json!({"plan": [{"_id": "x", "_tool": "nothing"}]}),
        )
        .await;
    assert_eq!(bad["ok"], false, "{bad:#}");
    check("post", "/sessions/{id}/plan/check", &bad);

    // weft's own routes: agents, the list of sessions, fork, cancel.
    check("get", "/agents", &alice.get("/agents").await);
    let sessions = alice.get("/sessions").await;
    assert!(sessions["sessions"].as_array().unwrap().len() >= 2);
    check("get", "/sessions", &sessions);
    let fork = alice
        .post(&format!("/sessions/{tid}/fork"), json!({"at": 3}))
        .await;
    check("post", "/sessions/{id}/fork", &fork);
    let fid = fork["id"].as_str().unwrap();
    check(
        "get",
        "/sessions/{id}/compare/{other}",
        &alice.get(&format!("/sessions/{tid}/compare/{fid}")).await,
    );
    let cancelled = alice
        .post(&format!("/sessions/{waiting}/cancel"), json!(null))
        .await;
    assert_eq!(cancelled["status"], "failed");
    check("post", "/sessions/{id}/cancel", &cancelled);
    // A run started in the background, and the server's own routes.
    let tid2 = alice.post("/threads", json!({})).await["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = alice
        .post(
            &format!("/threads/{tid2}/runs"),
            json!({"assistant_id": "asker", "input": {"messages": [{"role": "user", "content": "Refund c1."}]}}),
        )
        .await;
    check("post", "/threads/{tid}/runs", &run);
    check("get", "/info", &alice.get("/info").await);
    check("get", "/health", &alice.get("/health").await);
    // An error is `{"detail": ...}`, as declared.
    let (status, missing) = alice
        .call(reqwest::Method::GET, "/threads/nothing-here", None)
        .await;
    assert_eq!(status, 404);
    let op = &doc["paths"]["/threads/{tid}"]["get"]["responses"]["404"];
    let mut root = op["content"]["application/json"]["schema"].clone();
    root["components"] = doc["components"].clone();
    assert!(
        jsonschema::draft202012::is_valid(&root, &missing),
        "{missing}"
    );
}
