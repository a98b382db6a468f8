//! `weft serve` driven by LangGraph's JavaScript SDK (`@langchain/langgraph-sdk`, with react,
//! react-dom and esbuild, pinned in `scripts/setup-clients`; `WEFT_TEST_JS_CLIENTS` is their
//! `node_modules`):
//! - a Node script, `tests/jssdk/langgraph_client.mjs`, through the SDK's `Client`;
//! - a chat page on the SDK's React hook `useStream` (`tests/jssdk/chat.jsx`, bundled here with
//!   esbuild), served from another origin than the API's (so through `--cors-origin`) and
//!   clicked through in headless Chromium by `tests/jssdk/use_stream.py` (selenium, from
//!   `scripts/setup-browser`).
//!
//! The agent, `banker`, reads a balance (a tool call), asks before a transfer (a tool that needs
//! approval: an interrupt) and answers once the transfer ran.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::serve::{free_port, serve_with};
use crate::support as common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

const KEY: &str = "alice-key-0123456789abcdef";

/// The `banker` agent and the key file, in `d`.
fn banker(d: &Path) {
    std::fs::write(
        d.join("banker.yaml"),
        r#"name: banker
mode: react
model: scripted:banker.script.yaml
tools:
  - name: balance
    description: Reads the account's balance.
    command: ["sh", "-c", "cat > /dev/null; echo '{\"balance\": 120}'"]
  - name: transfer
    description: Moves money to savings (logs the transfer).
    command: ["sh", "-c", "cat > /dev/null; echo \"$WEFT_CALL_ID\" >> transfer.log; echo '{\"moved\": 10}'"]
    sandbox: { write: [.] }
    input_schema: { type: object, properties: { amount: { type: number } }, required: [amount] }
    requires_approval: true
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("banker.script.yaml"),
        "- tool_calls: [ { name: balance, arguments: {} } ]\n\
         - tool_calls: [ { name: transfer, arguments: { amount: 10 } } ]\n\
         - { text: \"Moved 10 to savings; the balance was 120.\", piece_ms: 60 }\n",
    )
    .unwrap();
    std::fs::write(d.join("keys.txt"), format!("{KEY} alice\n")).unwrap();
}

/// A `weft serve` over `banker` in `d` (with `extra` flags), stopped with SIGTERM when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(d: &Path, extra: &[&str]) -> Self {
        banker(d);
        let port = free_port();
        Self {
            child: serve_with(d, port, "serve.db", extra),
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A raw request's answer (status line and headers; `Connection: close`).
    fn raw(&self, request: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        r.to_ascii_lowercase()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Asserts the client or driver script succeeded and printed each `ok: CHECK`.
fn assert_checks(what: &str, out: &Output, d: &Path, checks: &[&str]) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(d.join("serve.log")).unwrap_or_default()
    );
    for check in checks {
        assert!(
            stdout.contains(&format!("ok: {check}\n")),
            "{check}: {stdout}"
        );
    }
}

fn js_clients() -> PathBuf {
    PathBuf::from(common::service_var("WEFT_TEST_JS_CLIENTS"))
}

#[test]
fn needs_jssdk_the_javascript_client_streams_interrupts_and_resumes() {
    let modules = js_clients();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let server = Server::start(d, &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jssdk/langgraph_client.mjs");
    let out = Command::new("node")
        .arg(&script)
        .args([&server.url(), KEY])
        .arg(d)
        .env("WEFT_TEST_JS_CLIENTS", &modules)
        .output()
        .expect("node (setup-clients installs the JavaScript SDK with npm, beside node)");
    assert_checks(
        "the JavaScript SDK's script",
        &out,
        d,
        &[
            "assistants.search",
            "runs.stream in values, messages-tuple and updates",
            "the tool call and its result in values.messages and updates",
            "the interrupt: its question in the stream, the thread interrupted",
            "resumed with command resume: the transfer ran once and the answer streamed",
            "runs.wait with an interrupt and command resume",
            "joinStream with lastEventId sends what followed",
        ],
    );
}

/// The page of another origin reads the API only with `--cors-origin` naming it: a preflight
/// from it is allowed (the SDK's headers, `Content-Location` exposed), one from elsewhere is not.
#[test]
fn needs_browser_jssdk_a_use_stream_chat_shows_the_tool_call_the_interrupt_and_the_answer() {
    let modules = js_clients();
    let python = common::service_var("WEFT_TEST_BROWSER_PYTHON");
    common::service_var("WEFT_TEST_CHROMIUM");
    common::service_var("WEFT_TEST_CHROMEDRIVER");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let page_port = free_port();
    let origin = format!("http://127.0.0.1:{page_port}");
    let server = Server::start(d, &["--cors-origin", &origin]);

    let preflight = |from: &str| {
        server.raw(&format!(
            "OPTIONS /threads HTTP/1.1\r\nHost: x\r\nOrigin: {from}\r\n\
             Access-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: content-type,x-api-key\r\nConnection: close\r\n\r\n"
        ))
    };
    let allowed = preflight(&origin);
    assert!(allowed.starts_with("http/1.1 200"), "{allowed}");
    for header in [
        format!("access-control-allow-origin: {origin}"),
        "access-control-allow-headers: content-type,x-api-key".into(),
    ] {
        assert!(allowed.contains(&header), "{header}: {allowed}");
    }
    let elsewhere = preflight("http://127.0.0.1:1");
    assert!(
        !elsewhere.contains("access-control-allow-origin"),
        "{elsewhere}"
    );
    // An answer (a refusal too) can be read by the page, with the headers the SDK reads.
    let refused = server.raw(&format!(
        "POST /threads HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nContent-Length: 2\r\n\
         Connection: close\r\n\r\n{{}}"
    ));
    assert!(refused.starts_with("http/1.1 401"), "{refused}");
    for header in [
        format!("access-control-allow-origin: {origin}"),
        "access-control-expose-headers: content-location,location".into(),
    ] {
        assert!(refused.contains(&header), "{header}: {refused}");
    }

    // The page: chat.jsx and what it imports, in one file.
    let page = tempfile::tempdir().unwrap();
    let entry = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jssdk/chat.jsx");
    let bundled = Command::new(modules.join(".bin/esbuild"))
        .arg(&entry)
        .args([
            "--bundle",
            "--jsx=automatic",
            "--define:process.env.NODE_ENV=\"production\"",
            "--log-level=warning",
        ])
        .arg(format!(
            "--outfile={}",
            page.path().join("chat.js").display()
        ))
        .env("NODE_PATH", &modules)
        .output()
        .unwrap();
    assert!(
        bundled.status.success(),
        "esbuild: {}",
        String::from_utf8_lossy(&bundled.stderr)
    );
    std::fs::write(
        page.path().join("index.html"),
        "<!doctype html><meta charset=utf-8><title>useStream chat</title><link rel=icon href=data:,>\
         <div id=root></div><script src=chat.js></script>\n",
    )
    .unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jssdk/use_stream.py");
    let out = Command::new(python)
        .arg(&script)
        .args([&server.url(), KEY])
        .arg(page.path())
        .arg(page_port.to_string())
        .arg(d)
        .env("SE_OFFLINE", "true")
        .output()
        .unwrap();
    assert_checks(
        "the useStream page",
        &out,
        d,
        &[
            "the tool call and its result are shown",
            "the interrupt's question is shown",
            "approved: the transfer ran once and the final answer is shown",
            "the answer was shown as it streamed",
        ],
    );
}
