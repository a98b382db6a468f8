//! The sandbox, tried by hostile tools: each a real process under the default sandbox (or one
//! widened as named), each stopped by the rule it breaks, and the cases the sandbox must let
//! through. The tests run as root too: the sandbox, not file permissions, stops them.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};
use weft_core::ToolOutcome;

/// The launcher this crate builds.
fn use_launcher() {
    weft_tools::sandbox::set_launcher(PathBuf::from(env!("CARGO_BIN_EXE_weft-sandbox")), vec![]);
}

/// A temp directory with `agent/` (the agent file's directory) in it.
fn place() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir(&agent).unwrap();
    (dir, agent)
}

/// Runs `command` once as tool `t` of an agent in `agent`, its declaration with `extra`.
async fn run(agent: &Path, command: &[&str], extra: Value) -> ToolOutcome {
    use_launcher();
    let mut decl = json!({"name": "t", "command": command, "timeout": "60s"});
    if let (Some(d), Value::Object(e)) = (decl.as_object_mut(), extra) {
        d.extend(e);
    }
    let yaml = serde_json::to_string(&json!({"name": "a", "tools": [decl]})).unwrap();
    let reg = registry(&yaml, agent);
    call(&reg, "t", json!({})).await
}

fn sh(script: &str) -> Vec<&str> {
    vec!["sh", "-c", script]
}

/// The call failed as a sandbox error of `rule`, whose message says what to add.
fn broke(o: ToolOutcome, rule: &str) -> weft_core::ToolError {
    let e = err(o);
    assert_eq!(
        (e.kind.as_str(), e.detail["rule"].as_str()),
        ("sandbox", Some(rule)),
        "{e:?}"
    );
    assert!(e.message.contains("sandbox"), "{}", e.message);
    e
}

#[tokio::test]
async fn sandbox_stops_reading_an_ssh_key() {
    let (dir, agent) = place();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "-----BEGIN FAKE KEY-----\n").unwrap();
    let o = run(
        &agent,
        &sh("cat \"$HOME/.ssh/id_rsa\" && echo '{}'"),
        json!({"env": {"HOME": home}}),
    )
    .await;
    let e = broke(o, "file");
    assert!(e.message.contains("read:"), "{}", e.message);
    // The real home's key, when there is one.
    if let Some(real) = std::env::var_os("HOME").map(|h| Path::new(&h).join(".ssh/id_rsa"))
        && real.exists()
    {
        let o = run(&agent, &["cat", real.to_str().unwrap()], json!({})).await;
        broke(o, "file");
    }
}

#[tokio::test]
async fn sandbox_stops_listing_home() {
    let (_dir, agent) = place();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    assert!(
        std::fs::read_dir(&home).is_ok(),
        "the test itself can list {home}"
    );
    broke(run(&agent, &["ls", &home], json!({})).await, "file");
}

#[tokio::test]
async fn sandbox_stops_reading_etc_shadow() {
    let (_dir, agent) = place();
    assert!(Path::new("/etc/shadow").exists());
    broke(
        run(&agent, &["cat", "/etc/shadow"], json!({})).await,
        "file",
    );
}

#[tokio::test]
async fn sandbox_stops_writing_outside_the_workspace() {
    let (dir, agent) = place();
    let outside = dir.path().join("outside.txt");
    let o = run(
        &agent,
        &sh(&format!("echo x > '{}' && echo '{{}}'", outside.display())),
        json!({}),
    )
    .await;
    let e = broke(o, "file");
    assert!(e.message.contains("write:"), "{}", e.message);
    assert!(!outside.exists());
    // Nor beside the agent file, which is only read.
    let o = run(&agent, &sh("echo x > here.txt && echo '{}'"), json!({})).await;
    broke(o, "file");
    assert!(!agent.join("here.txt").exists());
}

#[tokio::test]
async fn sandbox_stops_reading_the_parents_environ() {
    let (_dir, agent) = place();
    let o = run(
        &agent,
        &sh("cat /proc/$PPID/environ && echo '{}'"),
        json!({}),
    )
    .await;
    broke(o, "proc");
}

const CONNECT: &str = "import socket,sys,json; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); print(json.dumps({'connected': True}))";

#[tokio::test]
async fn sandbox_stops_connecting_over_ipv4() {
    let (_dir, agent) = place();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let o = run(
        &agent,
        &["python3", "-c", CONNECT, "127.0.0.1", &port],
        json!({}),
    )
    .await;
    let e = broke(o, "network");
    assert!(e.message.contains("network: [PORT]"), "{}", e.message);
}

#[tokio::test]
async fn sandbox_stops_connecting_over_ipv6() {
    let (_dir, agent) = place();
    let l = std::net::TcpListener::bind("[::1]:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let o = run(&agent, &["python3", "-c", CONNECT, "::1", &port], json!({})).await;
    broke(o, "network");
}

#[tokio::test]
async fn sandbox_with_a_listed_port_connects_to_it_and_no_other() {
    let (_dir, agent) = place();
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = allowed.local_addr().unwrap().port();
    let extra = json!({"sandbox": {"network": [port]}});
    let o = run(
        &agent,
        &["python3", "-c", CONNECT, "127.0.0.1", &port.to_string()],
        extra.clone(),
    )
    .await;
    assert_eq!(ok(o), json!({"connected": true}));
    let o = run(
        &agent,
        &[
            "python3",
            "-c",
            CONNECT,
            "127.0.0.1",
            &other.local_addr().unwrap().port().to_string(),
        ],
        extra,
    )
    .await;
    broke(o, "network");
}

#[tokio::test]
async fn sandbox_stops_allocating_3_gib() {
    let (_dir, agent) = place();
    let o = run(
        &agent,
        &["python3", "-c", "b = bytearray(3 << 30); print(len(b))"],
        json!({}),
    )
    .await;
    let e = broke(o, "memory");
    assert!(e.message.contains("memory_mb"), "{}", e.message);
}

#[tokio::test]
async fn sandbox_stops_a_2_gib_file() {
    let (_dir, agent) = place();
    // In the tool's own workspace ($TMPDIR), where it may write: the size limit (1 GiB) stops it.
    let o = run(
        &agent,
        &sh("head -c 2147483648 /dev/zero > \"$TMPDIR/big\"; s=$?; rm -f \"$TMPDIR/big\"; exit $s"),
        json!({}),
    )
    .await;
    let e = broke(o, "file_size");
    assert!(e.message.contains("file_size_mb"), "{}", e.message);
}

#[tokio::test]
async fn sandbox_stops_burning_cpu_past_its_limit() {
    let (_dir, agent) = place();
    let start = std::time::Instant::now();
    let o = run(
        &agent,
        &["python3", "-c", "while True: pass"],
        json!({"sandbox": {"limits": {"cpu_s": 1}}}),
    )
    .await;
    let e = broke(o, "cpu");
    assert!(e.message.contains("cpu_s"), "{}", e.message);
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

/// RLIMIT_NPROC does not bind a process whose real uid is 0 (the kernel exempts root), so as
/// root the tool is started through `setpriv` as `nobody`, which the limit binds.
#[tokio::test]
async fn sandbox_stops_starting_400_processes() {
    let (_dir, agent) = place();
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    if root {
        weft_tools::sandbox::set_launcher(
            PathBuf::from("setpriv"),
            vec![
                "--reuid=65534".into(),
                "--regid=65534".into(),
                "--clear-groups".into(),
                env!("CARGO_BIN_EXE_weft-sandbox").into(),
            ],
        );
    }
    let fork = "import os, time\nfor i in range(400):\n    if os.fork() == 0:\n        time.sleep(2)\n        os._exit(0)\nprint('{}')";
    let o = run(&agent, &["/usr/bin/python3", "-c", fork], json!({})).await;
    let e = broke(o, "processes");
    assert!(e.message.contains("processes"), "{}", e.message);
}

#[tokio::test]
async fn sandbox_lets_an_ordinary_tool_run() {
    let (_dir, agent) = place();
    std::fs::write(agent.join("tool.py"), "import json, sys, os, tempfile\nargs = json.load(sys.stdin)\nwith tempfile.NamedTemporaryFile() as f:\n    f.write(b'scratch')\nprint(json.dumps({'ok': True, 'workspace': os.environ['WEFT_WORKSPACE'] == os.environ['TMPDIR']}))\n").unwrap();
    let o = run(&agent, &["python3", "tool.py"], json!({})).await;
    assert_eq!(ok(o), json!({"ok": true, "workspace": true}));
}

#[tokio::test]
async fn sandbox_lets_a_listed_read_path_be_read() {
    let (dir, agent) = place();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("in.json"), "{\"n\": 7}").unwrap();
    let o = run(&agent, &["cat", "../data/in.json"], json!({})).await;
    broke(o, "file");
    let o = run(
        &agent,
        &["cat", "../data/in.json"],
        json!({"sandbox": {"read": ["../data"]}}),
    )
    .await;
    assert_eq!(ok(o), json!({"n": 7}));
}

#[tokio::test]
async fn sandbox_with_write_dot_writes_beside_the_agent_file() {
    let (_dir, agent) = place();
    let o = run(
        &agent,
        &sh("echo written > out.txt && echo '{}'"),
        json!({"sandbox": {"write": ["."]}}),
    )
    .await;
    assert_eq!(ok(o), json!({}));
    assert_eq!(
        std::fs::read_to_string(agent.join("out.txt")).unwrap(),
        "written\n"
    );
}

#[tokio::test]
async fn sandbox_none_runs_the_tool_unsandboxed() {
    let (_dir, agent) = place();
    let o = run(
        &agent,
        &sh("head -c 1 /etc/shadow > /dev/null && echo '{}'"),
        json!({"sandbox": "none"}),
    )
    .await;
    assert_eq!(ok(o), json!({}));
}

#[tokio::test]
async fn sandbox_key_problems_name_the_field() {
    let yaml = "name: a\ntools:\n  - name: t\n    command: [cat]\n    sandbox:\n      reed: [x]\n      limits: {cpu_s: 0}\n";
    let e = weft_core::agent::AgentSpec::parse("a.yaml", yaml).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("line 6")
            && m.contains("tools[0].sandbox.reed")
            && m.contains("did you mean `read`?"),
        "{m}"
    );
    assert!(
        m.contains("line 7") && m.contains("tools[0].sandbox.limits.cpu_s"),
        "{m}"
    );
    let yaml = "name: a\ntools:\n  - mcp: {name: m, command: [x], sandbox: off}\n";
    let m = weft_core::agent::AgentSpec::parse("a.yaml", yaml)
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("tools[0].mcp.sandbox") && m.contains("`none`"),
        "{m}"
    );
}
