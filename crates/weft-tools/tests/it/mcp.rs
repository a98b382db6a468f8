//! MCP servers, run for real. Install them with `scripts/setup-mcp` and export the variables it
//! prints; without them these tests fail (`scripts/test` leaves them out and says so).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::time::Duration;

use common::*;
use serde_json::json;
use weft_core::ToolCatalog;
use weft_tools::Registry;

fn var(name: &str) -> Option<String> {
    Some(service_var(name))
}

fn fixture() -> String {
    format!(
        "{}/tests/fixtures/mcp_fixture.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

async fn load(yaml: &str, dir: &std::path::Path) -> Registry {
    Registry::from_agent_async(&spec(yaml), dir, Default::default())
        .await
        .unwrap_or_else(|e| panic!("loading: {e}"))
}

async fn load_with(yaml: &str, dir: &std::path::Path, secrets: &[(&str, &str)]) -> Registry {
    let overrides = secrets
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Registry::from_agent_async(&spec(yaml), dir, overrides)
        .await
        .unwrap_or_else(|e| panic!("loading: {e}"))
}

/// The fixture served over Streamable HTTP; killed on drop.
struct HttpFixture {
    child: std::process::Child,
    port: u16,
}

impl HttpFixture {
    async fn start(python: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_on(python, port).await
    }

    async fn start_on(python: &str, port: u16) -> Self {
        Self::start_mode(python, "http", port).await
    }

    async fn start_mode(python: &str, mode: &str, port: u16) -> Self {
        let mut child = std::process::Command::new(python)
            .args([fixture(), mode.to_owned(), port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Self { child, port };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the HTTP fixture did not start listening on {port}");
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn needs_mcp_time_server_lists_and_calls() {
    let Some(time) = var("WEFT_TEST_MCP_TIME") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let reg = load(
        &format!("name: a\ntools:\n  - mcp: {{name: time, command: [\"{time}\"], timeout: 30s}}\n"),
        dir.path(),
    )
    .await;
    let info = reg.tool_info("time.get_current_time").unwrap();
    assert_eq!(info.source, "mcp:time");
    assert_eq!(info.input_schema["required"], json!(["timezone"]));
    assert!(reg.tool_info("time.convert_time").is_some());

    let out = ok(call(&reg, "time.get_current_time", json!({"timezone": "UTC"})).await);
    assert_eq!(out["timezone"], json!("UTC"));
    let dt = out["datetime"].as_str().unwrap();
    assert!(
        dt.len() >= 19 && dt.ends_with("+00:00") && &dt[4..5] == "-",
        "{dt}"
    );
    assert!(out["is_dst"].is_boolean(), "{out}");

    // Arguments are checked against the server's schema before the call.
    let e = err(call(&reg, "time.get_current_time", json!({})).await);
    assert_eq!(e.kind, "invalid_arguments");
    // An unknown timezone is the server's error, shown to the model as a tool error.
    let e = err(call(
        &reg,
        "time.get_current_time",
        json!({"timezone": "Mars/Olympus"}),
    )
    .await);
    assert_eq!(e.kind, "tool_error", "{e:?}");
    assert!(e.message.contains("Mars/Olympus"), "{}", e.message);
    assert!(
        !e.retryable,
        "the tool ran and answered; running it again would not help"
    );
    reg.shutdown().await;
}

#[tokio::test]
async fn needs_mcp_filesystem_server_writes_reads_and_refuses_outside() {
    let (Some(fs), Some(node)) = (var("WEFT_TEST_MCP_FS"), var("WEFT_TEST_NODE")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let allowed = dir.path().join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    let allowed = allowed.canonicalize().unwrap();
    let reg = load(
        &format!(
            // The server's modules are read where they are installed; it writes in `allowed`.
            "name: a\ntools:\n  - mcp: {{name: fs, command: [\"{node}\", \"{fs}\"], args: [\"{}\"], allow: [write_file, read_text_file, list_directory], sandbox: {{read: [\"{}\"], write: [allowed]}}}}\n",
            allowed.display(),
            std::path::Path::new(&fs).ancestors().find(|a| a.ends_with("node_modules")).unwrap().display()
        ),
        dir.path(),
    )
    .await;
    assert_eq!(
        reg.tool_names(),
        vec!["fs.list_directory", "fs.read_text_file", "fs.write_file"]
    );
    let file = allowed.join("note.txt");
    ok(call(
        &reg,
        "fs.write_file",
        json!({"path": file, "content": "written through MCP"}),
    )
    .await);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "written through MCP"
    );
    let out = ok(call(&reg, "fs.read_text_file", json!({"path": file})).await);
    let text = serde_json::to_string(&out).unwrap();
    assert!(text.contains("written through MCP"), "{text}");

    let outside = dir.path().join("outside.txt");
    let e = err(call(
        &reg,
        "fs.write_file",
        json!({"path": outside, "content": "x"}),
    )
    .await);
    assert_eq!(e.kind, "tool_error", "{e:?}");
    assert!(!e.message.is_empty());
    assert!(!outside.exists());
    reg.shutdown().await;
}

#[tokio::test]
async fn needs_mcp_streamable_http_server_with_structured_output() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let server = HttpFixture::start(&py).await;
    let dir = tempfile::tempdir().unwrap();
    let reg = load_with(
        &format!(
            "name: a\nsecrets:\n  tok: {{env: WEFT_TEST_NEVER_SET_VARIABLE}}\ntools:\n  - mcp: {{name: remote, url: \"http://127.0.0.1:{}/mcp\", headers: {{Authorization: \"Bearer {{{{ secrets.tok }}}}\", X-Weft-Test: yes}}, prefix: fx, allow: [add, stats, fail, header]}}\n",
            server.port
        ),
        dir.path(),
        &[("tok", "http-token-value")],
    )
    .await;
    assert_eq!(
        reg.tool_names(),
        vec!["fx.add", "fx.fail", "fx.header", "fx.stats"]
    );
    // The declared headers reach the server (the secret comes back redacted).
    assert_eq!(
        ok(call(&reg, "fx.header", json!({"name": "authorization"})).await),
        json!({"result": "Bearer [secret:tok]"})
    );
    assert_eq!(
        ok(call(&reg, "fx.header", json!({"name": "x-weft-test"})).await),
        json!({"result": "yes"})
    );
    assert_eq!(reg.tool_info("fx.add").unwrap().source, "mcp:remote");
    let out = ok(call(&reg, "fx.add", json!({"a": 2, "b": 40})).await);
    assert_eq!(out, json!({"result": "42"}));
    let out = ok(call(&reg, "fx.stats", json!({"values": [1, 2, 6]})).await);
    assert_eq!(out, json!({"count": 3, "total": 9.0, "mean": 3.0}));
    let e = err(call(&reg, "fx.fail", json!({"message": "refund window closed"})).await);
    assert_eq!(e.kind, "tool_error");
    assert!(e.message.contains("refund window closed"), "{}", e.message);
    assert_eq!(
        err(call(&reg, "fx.sleep", json!({"seconds": 0})).await).kind,
        "unknown_tool"
    );
    reg.shutdown().await;
}

#[tokio::test]
async fn needs_mcp_prefix_allow_env_and_list_refresh() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let mut reg = load_with(
        &format!(
            "name: a\nsecrets:\n  tok: {{env: WEFT_TEST_NEVER_SET_VARIABLE}}\ntools:\n  - mcp: {{name: fx, command: [\"{py}\", \"{fx}\"], prefix: \"\", env: {{FX_TOKEN: \"{{{{ secrets.tok }}}}\"}}}}\n"
        ),
        dir.path(),
        &[("tok", "stdio-token-value")],
    )
    .await;
    // No prefix: the server's own names.
    assert!(reg.tool_info("add").is_some() && reg.tool_info("fx.add").is_none());
    // The declared env reaches the server (and comes back redacted); weft's own does not.
    assert_eq!(
        ok(call(&reg, "env", json!({"name": "FX_TOKEN"})).await),
        json!({"result": "[secret:tok]"})
    );
    assert_eq!(
        ok(call(&reg, "env", json!({"name": "CARGO_MANIFEST_DIR"})).await),
        json!({"result": ""})
    );
    // A tool added at run time appears once the list is loaded again.
    assert!(reg.tool_info("extra").is_none());
    assert!(reg.mcp_servers_changed().is_empty());
    ok(call(&reg, "grow", json!({})).await);
    let mut notified = false;
    for _ in 0..50 {
        if reg.mcp_servers_changed() == vec!["fx".to_owned()] {
            notified = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(notified, "notifications/tools/list_changed was not seen");
    reg.load_mcp_tools().await.unwrap();
    assert!(reg.mcp_servers_changed().is_empty());
    assert_eq!(
        ok(call(&reg, "extra", json!({})).await),
        json!({"result": "extra"})
    );
    reg.shutdown().await;

    // An allow-list naming a tool the server lacks is an error naming both.
    let e = Registry::from_agent_async(
        &spec(&format!(
            "name: a\ntools:\n  - mcp: {{name: fx, command: [\"{py}\", \"{fx}\"], allow: [add, nosuch]}}\n"
        )),
        dir.path(),
        Default::default(),
    )
    .await
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("`fx`") && e.contains("nosuch"), "{e}");
}

#[tokio::test]
async fn needs_mcp_killed_server_fails_the_call_and_restarts() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let reg = load(
        &format!(
            "name: a\ntools:\n  - mcp: {{name: fx, command: [\"{py}\", \"{fx}\"], timeout: 60s}}\n"
        ),
        dir.path(),
    )
    .await;
    let pid = ok(call(&reg, "fx.pid", json!({})).await)["result"]
        .as_str()
        .unwrap()
        .to_owned();
    let r2 = reg.clone();
    let slow = tokio::spawn(async move { call(&r2, "fx.sleep", json!({"seconds": 30})).await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = std::time::Instant::now();
    let e = err(slow.await.unwrap());
    assert_eq!(e.kind, "mcp_connection", "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(20));

    // The next call starts the server again.
    let pid2 = ok(call(&reg, "fx.pid", json!({})).await)["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(pid, pid2);
    reg.shutdown().await;
}

#[tokio::test]
async fn needs_mcp_hung_call_times_out_and_the_server_restarts() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let reg = load(
        // The timeout bounds the server's start too: long enough for Python to start.
        &format!(
            "name: a\ntools:\n  - mcp: {{name: fx, command: [\"{py}\", \"{fx}\"], timeout: 8s}}\n"
        ),
        dir.path(),
    )
    .await;
    let pid = ok(call(&reg, "fx.pid", json!({})).await)["result"].clone();
    let started = std::time::Instant::now();
    let e = err(call(&reg, "fx.sleep", json!({"seconds": 30})).await);
    assert_eq!(e.kind, "timeout", "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    let pid2 = ok(call(&reg, "fx.pid", json!({})).await)["result"].clone();
    assert_ne!(pid, pid2, "a hung server is replaced");
    assert_eq!(
        ok(call(&reg, "fx.sleep", json!({"seconds": 0.1})).await),
        json!({"result": "slept"})
    );
    reg.shutdown().await;
}

async fn wait_gone(pid: &str) -> bool {
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    for _ in 0..50 {
        let state = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
        // Gone, or a zombie waiting to be reaped.
        if state.is_empty() || state.contains(") Z") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn needs_mcp_shutdown_or_drop_stops_the_server_process() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let yaml = format!("name: a\ntools:\n  - mcp: {{name: fx, command: [\"{py}\", \"{fx}\"]}}\n");
    for how in ["shutdown", "drop"] {
        let reg = load(&yaml, dir.path()).await;
        let pid = ok(call(&reg, "fx.pid", json!({})).await)["result"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        if how == "shutdown" {
            reg.shutdown().await;
        } else {
            drop(reg);
        }
        assert!(
            wait_gone(&pid).await,
            "{how}: the server process {pid} is still running"
        );
    }
}

#[tokio::test]
async fn needs_mcp_tools_list_follows_next_cursor() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let reg = load(
        &format!("name: a\ntools:\n  - mcp: {{name: fx, command: [\"{py}\", \"{fx}\"], env: {{FX_PAGE_SIZE: \"2\"}}}}\n"),
        dir.path(),
    )
    .await;
    assert_eq!(
        reg.tool_names(),
        vec![
            "fx.add",
            "fx.env",
            "fx.fail",
            "fx.grow",
            "fx.header",
            "fx.pid",
            "fx.sleep",
            "fx.stats"
        ]
    );
    assert_eq!(
        ok(call(&reg, "fx.env", json!({"name": "FX_PAGE_SIZE"})).await),
        json!({"result": "2"})
    );
    reg.shutdown().await;
}

/// A Streamable HTTP server restarted on the same address forgets weft's session and answers it
/// with 404 (or 400): weft initialises a new session at once and the call goes through, instead
/// of failing or waiting out the call's timeout.
#[tokio::test]
async fn needs_mcp_restarted_http_server_is_initialised_again_at_once() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let server = HttpFixture::start(&py).await;
    let port = server.port;
    let dir = tempfile::tempdir().unwrap();
    let reg = load(
        &format!(
            "name: a\ntools:\n  - mcp: {{name: fx, url: \"http://127.0.0.1:{port}/mcp\", timeout: 30s}}\n"
        ),
        dir.path(),
    )
    .await;
    let pid = ok(call(&reg, "fx.pid", json!({})).await)["result"].clone();
    drop(server);
    let _server = HttpFixture::start_on(&py, port).await;
    let started = std::time::Instant::now();
    let pid2 = ok(call(&reg, "fx.pid", json!({})).await)["result"].clone();
    assert_ne!(pid, pid2, "the call reached the new server");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    reg.shutdown().await;
}

/// The same with a server that answers a session it does not know with 400 and a JSON-RPC
/// error (as servers did before the specification asked for 404).
#[tokio::test]
async fn needs_mcp_restarted_http_server_answering_400_is_initialised_again_at_once() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = HttpFixture::start_mode(&py, "http400", port).await;
    let dir = tempfile::tempdir().unwrap();
    let reg = load(
        &format!(
            "name: a\ntools:\n  - mcp: {{name: fx, url: \"http://127.0.0.1:{port}/mcp\", timeout: 30s}}\n"
        ),
        dir.path(),
    )
    .await;
    let pid = ok(call(&reg, "fx.pid", json!({})).await)["result"].clone();
    drop(server);
    let _server = HttpFixture::start_mode(&py, "http400", port).await;
    let started = std::time::Instant::now();
    let pid2 = ok(call(&reg, "fx.pid", json!({})).await)["result"].clone();
    assert_ne!(pid, pid2, "the call reached the new server");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    reg.shutdown().await;
}

/// A declared `timeout` bounds connecting too: a server that accepts the connection and never
/// answers the initialisation fails the load within it.
#[tokio::test]
async fn a_declared_timeout_bounds_the_connect() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts connections and reads, never answers.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let e = Registry::from_agent_async(
        &spec(&format!(
            "name: a\ntools:\n  - mcp: {{name: mute, url: \"http://127.0.0.1:{port}/mcp\", timeout: 1s}}\n"
        )),
        dir.path(),
        Default::default(),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("a server that never answers was loaded"));
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}: {e}");
    assert!(e.to_string().contains("mute"), "{e}");
    silent.abort();
}

/// A stdio server that writes text that is not JSON-RPC on stdout fails at once with a protocol
/// error naming the line, instead of waiting out the timeout.
#[tokio::test]
async fn needs_mcp_a_stdio_server_writing_garbage_is_a_protocol_error() {
    let Some(py) = var("WEFT_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    let started = std::time::Instant::now();
    let e = Registry::from_agent_async(
        &spec(&format!(
            "name: a\ntools:\n  - mcp: {{name: noisy, command: [\"{py}\", \"{fx}\", \"garbage\"], timeout: 30s}}\n"
        )),
        dir.path(),
        Default::default(),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("a server writing garbage was loaded"));
    let elapsed = started.elapsed();
    let text = e.to_string();
    assert!(
        elapsed < Duration::from_secs(10),
        "took {elapsed:?}: {text}"
    );
    assert!(text.contains("not JSON-RPC"), "{text}");
    assert!(text.contains("Starting the fixture server"), "{text}");
}

#[tokio::test]
async fn needs_mcp_a_secret_in_a_servers_tool_list_is_redacted() {
    let py = service_var("WEFT_TEST_MCP_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture();
    // The server puts the credential it was started with into a tool's description and into
    // its schema's default, as a careless server might.
    let reg = load_with(
        &format!(
            "name: a\nsecrets:\n  tok: {{env: WEFT_TEST_NEVER_SET_VARIABLE}}\ntools:\n  - mcp: {{name: fx, command: [\"{py}\", \"{fx}\"], env: {{FX_LEAK: \"{{{{ secrets.tok }}}}\"}}}}\n"
        ),
        dir.path(),
        &[("tok", "leaky-metadata-token")],
    )
    .await;
    let info = reg.tool_info("fx.login").expect("the login tool is listed");
    let shown = serde_json::to_string(info).unwrap();
    assert!(!shown.contains("leaky-metadata-token"), "{shown}");
    assert_eq!(info.description, "Logs in with the key [secret:tok].");
    assert_eq!(
        info.input_schema["properties"]["token"]["default"],
        "[secret:tok]"
    );
    // The schema's structure is intact: the call still validates and runs.
    assert_eq!(
        ok(call(&reg, "fx.login", json!({"user": "ada"})).await),
        json!({"result": "logged in ada"})
    );
    reg.shutdown().await;
}
