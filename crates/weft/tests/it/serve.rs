//! `weft serve` driven by the official `langgraph-sdk` Python client (pinned in
//! `scripts/setup-clients`), as an application would: the client script
//! `tests/serve/langgraph_client.py` asserts what it gets back; this test starts the server,
//! writes the agents, runs the script and checks what only the server side can see.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) const ALICE: &str = "alice-key-0123456789abcdef";
pub(crate) const BOB: &str = "bob-key-0123456789abcdef00";

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The agents the client script expects.
fn agents(d: &Path) {
    std::fs::write(
        d.join("echoer.yaml"),
        r#"name: echoer
mode: react
model: scripted:echoer.script.yaml
tools:
  - name: shout
    description: Shouts (logs the call).
    command: ["sh", "-c", "cat > /dev/null; echo shout >> tool.log; sleep 0.2; echo '{\"shouted\": \"LOUD\"}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("echoer.script.yaml"),
        "- tool_calls: [ { name: shout, arguments: {} } ]\n- text: \"Shouted: LOUD\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("stuck.yaml"),
        r#"name: stuck
mode: react
model: scripted:stuck.script.yaml
tools:
  - name: hang
    description: Never ends.
    command: ["sh", "-c", "cat > /dev/null; touch stuck.started; sleep 60; echo '{}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("stuck.script.yaml"),
        "- tool_calls: [ { name: hang, arguments: {} } ]\n- text: never\n",
    )
    .unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let ask = std::fs::read_to_string(fixtures.join("ask-amount.yaml"))
        .unwrap()
        .replace("name: ask-amount", "name: ask");
    std::fs::write(d.join("ask.yaml"), ask).unwrap();
    for f in ["ask-amount.script.yaml", "log_tool.py"] {
        std::fs::copy(fixtures.join(f), d.join(f)).unwrap();
    }
    std::fs::write(
        d.join("slowpoke.yaml"),
        r#"name: slowpoke
mode: react
model: scripted:slowpoke.script.yaml
tools:
  - name: step
    description: One slow step (not idempotent; logs its call).
    command: ["sh", "-c", "cat > /dev/null; sleep 1; echo \"$WEFT_CALL_ID\" >> slow.log; echo '{\"done\": true}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("slowpoke.script.yaml"),
        // Three different steps: the same call again would be a repeat, refused (`repeats`).
        "- tool_calls: [ { name: step, arguments: { n: 1 } } ]\n- tool_calls: [ { name: step, arguments: { n: 2 } } ]\n- tool_calls: [ { name: step, arguments: { n: 3 } } ]\n- text: \"All three done.\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("twice.yaml"),
        r#"name: twice
mode: react
model: scripted:twice.script.yaml
tools:
  - name: nap
    description: Naps briefly.
    command: ["sh", "-c", "cat > /dev/null; sleep 0.3; echo '{}'"]
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("twice.script.yaml"),
        "- tool_calls: [ { name: nap, arguments: {} } ]\n- text: Once.\n- tool_calls: [ { name: nap, arguments: {} } ]\n- text: Twice.\n",
    )
    .unwrap();
    // The same call twice in one turn: the second is a repeat, refused with the first's result.
    std::fs::write(
        d.join("repeater.yaml"),
        r#"name: repeater
mode: react
model: scripted:repeater.script.yaml
tools:
  - name: post
    description: Posts a note (not idempotent; logs its call).
    command: ["sh", "-c", "cat > /dev/null; echo post >> post.log; echo '{\"posted\": true}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("repeater.script.yaml"),
        "- tool_calls: [ { name: post, arguments: { note: hi } } ]\n- tool_calls: [ { name: post, arguments: { note: hi } } ]\n- text: Posted once.\n",
    )
    .unwrap();
    // As `stuck`, for the scenarios that run beside the one that looks for `stuck`'s process.
    std::fs::write(
        d.join("hold.yaml"),
        r#"name: hold
mode: react
model: scripted:stuck.script.yaml
tools:
  - name: hang
    description: Never ends.
    command: ["sh", "-c", "cat > /dev/null; touch hold.started; sleep 60; echo '{}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("rememberer.yaml"),
        "name: rememberer\nmode: react\nmodel: scripted:rememberer.script.yaml\ntools:\n  - builtin: remember\n",
    )
    .unwrap();
    std::fs::write(
        d.join("rememberer.script.yaml"),
        "- tool_calls: [ { name: remember, arguments: { text: \"Alice's dog is called Biscuit.\" } } ]\n- text: Noted.\n",
    )
    .unwrap();
    std::fs::write(
        d.join("recaller.yaml"),
        "name: recaller\nmode: react\nmodel: scripted:recaller.script.yaml\nrecall_memories: false\ntools:\n  - builtin: recall\n",
    )
    .unwrap();
    std::fs::write(
        d.join("recaller.script.yaml"),
        "- tool_calls: [ { name: recall, arguments: { query: \"parcel\" } } ]\n- text: Found it.\n",
    )
    .unwrap();
    std::fs::write(d.join("keys.txt"), format!("{ALICE} alice\n{BOB} bob\n")).unwrap();
}

/// Starts `weft serve` and waits until `/health` answers.
fn serve(d: &Path, port: u16, db: &str) -> Child {
    serve_with(d, port, db, &[])
}

pub(crate) fn serve_with(d: &Path, port: u16, db: &str, extra: &[&str]) -> Child {
    serve_logged(d, port, db, extra, "serve.log")
}

/// [`serve_with`], logging to `log` in `d`.
pub(crate) fn serve_logged(d: &Path, port: u16, db: &str, extra: &[&str], log: &str) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(["--db", db, "serve", "--agents", ".", "--keys", "keys.txt"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(extra);
    serve_command(d, port, c, log)
}

/// Starts `weft serve` as `command` says, in `d`, logging at `info` (threads taken over are
/// named) to `log`, and waits until `/health` answers.
pub(crate) fn serve_command(d: &Path, port: u16, mut command: Command, log: &str) -> Child {
    let mut child = command
        .current_dir(d)
        .env_remove("WEFT_DB")
        .env_remove("WEFT_API_KEYS")
        .env("RUST_LOG", "weft=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join(log)).unwrap())
        .spawn()
        .unwrap();
    let began = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            if r.starts_with("HTTP/1.1 200") {
                return child;
            }
        }
        if began.elapsed() > Duration::from_secs(30) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "weft serve did not come up: {}",
                std::fs::read_to_string(d.join(log)).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops a process with SIGTERM and waits for it.
pub(crate) fn stop(c: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    let _ = c.wait();
}

/// The last 40 lines of each log in `d`, newest first.
pub(crate) fn logs(d: &Path, names: &[&str]) -> String {
    names
        .iter()
        .map(|name| {
            let log = std::fs::read_to_string(d.join(name)).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            format!("{name} (last lines, newest first):\n{}\n", tail.join("\n"))
        })
        .collect()
}

/// Runs the SDK client script `tests/serve/SCRIPT` against the server on `port`: it is given
/// the server's URL, both users' keys, `d` and `args`.
pub(crate) fn sdk_script(script: &str, d: &Path, port: u16, args: &[&str]) -> Output {
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    Command::new(&python)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/serve")
                .join(script),
        )
        .args([&format!("http://127.0.0.1:{port}"), ALICE, BOB])
        .arg(d)
        .args(args)
        .output()
        .unwrap()
}

/// The output of a client process once it ended, or once `limit` passed (it is then killed).
pub(crate) fn output_within(mut client: Child, limit: Duration) -> Output {
    let began = Instant::now();
    while client.try_wait().unwrap().is_none() && began.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = client.kill();
    client.wait_with_output().unwrap()
}

/// What a client script (`what`) printed, once it succeeded; else the test fails with what it
/// printed and the last lines of the servers' `logs` in `d`.
pub(crate) fn succeeded(what: &str, out: &Output, d: &Path, logs_of: &[&str]) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs(d, logs_of)
    );
    stdout
}

#[test]
fn needs_sdk_the_langgraph_client_drives_weft_serve() {
    let stdout = scenario(None);
    for check in [
        "assistants",
        "assistants graph and schemas",
        "runs.wait",
        "runs.stream in each mode",
        "interrupt answered with Command(resume)",
        "join with Last-Event-ID after a dropped connection",
        "cancel",
        "multitask enqueue",
        "body limit",
        "keys and users",
        "threads.search by metadata",
        "counts",
        "metrics",
        "openapi",
        "info",
        "join_stream with default arguments",
    ] {
        assert!(
            stdout.contains(&format!("ok: {check}\n")),
            "{check}: {stdout}"
        );
    }
    // The cancelled call's process is gone with its group.
    let stuck = Command::new("pgrep")
        .args(["-f", "touch stuck.started; sleep 60"])
        .output()
        .unwrap();
    assert!(stuck.stdout.is_empty(), "the cancelled tool still runs");
}

/// A streaming run outlives its server: the server is stopped (SIGTERM) in the middle of the
/// run and started again on the same store; the run goes on under the new server (it takes the
/// thread's released lease), and the SDK's stream reconnects by itself with its last event id,
/// losing and repeating nothing. Every step ran exactly once.
#[test]
fn needs_sdk_a_streaming_run_survives_a_server_restart() {
    let tmp = tempfile::tempdir().unwrap();
    agents(tmp.path());
    run_across_a_restart(tmp.path(), RESTART, "TERM", &[]);
}

/// `runs.wait` outlives its server: the answer's `Location` names the run's join, which the SDK
/// follows when the connection drops; the answer comes from the next server. Runs are listed
/// from the log, so the new server lists the runs of the old one (with limit, offset, status).
#[test]
fn needs_sdk_runs_wait_survives_a_server_restart_and_runs_are_listed_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    agents(tmp.path());
    run_across_a_restart(
        tmp.path(),
        ("wait-restart", "runs.wait across a server restart"),
        "TERM",
        &[],
    );
}

/// The client script's mode for a streaming run across a restart, and the check it prints.
const RESTART: (&str, &str) = ("restart", "a streaming run across a server restart");

/// The slowpoke run of `langgraph_client.py MODE` (`script`: the mode and the check it prints
/// as `ok: CHECK`), whose server gets `signal` after the run's first tool call and is started
/// again (with `env`); checks the run and its steps, and returns how long the run took from the
/// restart on.
fn run_across_a_restart(
    d: &Path,
    script: (&str, &str),
    signal: &str,
    env: &[(&str, &str)],
) -> Duration {
    let (mode, check) = script;
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    let port = free_port();
    let start = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
        c.args([
            "--db", "serve.db", "serve", "--agents", ".", "--keys", "keys.txt",
        ])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .envs(env.iter().copied());
        c
    };
    let mut server = serve_command(d, port, start(), "serve.log");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/langgraph_client.py");
    let mut client = Command::new(&python)
        .arg(&script)
        .args([&format!("http://127.0.0.1:{port}"), ALICE, BOB])
        .arg(d)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let began = Instant::now();
    while !d.join("restart.now").exists() {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &server.id().to_string()])
        .status();
    let stopped = server.wait().unwrap();
    if signal == "TERM" {
        assert!(stopped.success(), "weft serve exited with {stopped:?}");
    }
    let first_log = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
    std::fs::write(d.join("restarted"), "").unwrap();
    let mut server = serve_command(d, port, start(), "serve-2.log");
    let restarted = Instant::now();
    // The client gives up by itself when its stream makes no progress; a minute is plenty.
    while client.try_wait().unwrap().is_none() && restarted.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = restarted.elapsed();
    let finished = client.try_wait().unwrap().is_some();
    let _ = client.kill();
    let out = client.wait_with_output().unwrap();
    stop(&mut server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("ok: {check}\n")),
        "{}{stdout}\n{}\nfirst server:\n{first_log}\nsecond server:\n{}",
        if finished {
            String::new()
        } else {
            format!("the client had not finished {took:?} after the restart\n")
        },
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(d.join("serve-2.log")).unwrap_or_default()
    );
    if mode == "queued-restart" {
        // Its runs are `lineup`'s, not `slowpoke`'s: the client checked them.
        return took;
    }
    let calls: Vec<String> = std::fs::read_to_string(d.join("slow.log"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let mut unique = calls.clone();
    unique.sort();
    unique.dedup();
    // No step ran twice. After SIGTERM the step in flight finished within the drain's grace.
    // After SIGKILL the step in flight at the kill (if one was) died with its server, its tool
    // process too (`setpriv --pdeathsig`), before it logged: its outcome is recorded as unknown
    // and it is not run again, so it never lands after the takeover.
    let logged = if signal == "KILL" { 2..=3 } else { 3..=3 };
    assert!(
        unique.len() == calls.len() && logged.contains(&calls.len()),
        "each step ran at most once, and every step but one killed in flight ran: {calls:?}"
    );
    took
}

/// Runs the client script (in `mode`, or all of its default checks) against a fresh server;
/// its output.
fn scenario(mode: Option<&str>) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    let port = free_port();
    let mut server = serve(d, port, "serve.db");
    let out = sdk_script("langgraph_client.py", d, port, mode.as_slice());
    stop(&mut server);
    succeeded("the client script", &out, d, &["serve.log"])
}

/// Every part of a stream in several modes has an id of its own: cut after any part, a join
/// with its id sends exactly what followed, and a text cut mid-way goes on from its next byte.
#[test]
fn needs_sdk_a_stream_in_several_modes_resumes_after_any_part() {
    let out = scenario(Some("resume"));
    assert!(
        out.contains("ok: a stream resumes after any of its parts\n"),
        "{out}"
    );
}

/// A ReAct run's tool call as chat UIs read it: in `values.messages` an `ai` message with
/// `tool_calls`, then a `tool` message with the call's `tool_call_id`, then the answer; in the
/// `updates` stream `{"agent": {"messages": [...]}}` and `{"tools": {"messages": [...]}}`; the
/// answer's streamed pieces carry its message's id.
#[test]
fn needs_sdk_tool_calls_and_tool_messages_reach_langgraph_clients() {
    let out = scenario(Some("tools"));
    assert!(
        out.contains("ok: tool calls and tool messages in values and updates\n"),
        "{out}"
    );
}

/// The `tasks` and `checkpoints` stream modes as LangGraph's server sends them, through the
/// Python SDK: task starts and ends paired by id for the model's turns and the tool call;
/// checkpoints whose ids `get_history` lists and whose state `get_state` reads; a join with
/// `Last-Event-ID` after any part of a finished run, or mid-way through a live one, repeats and
/// loses nothing.
#[test]
fn needs_sdk_tasks_and_checkpoints_stream_as_langgraph_sends_them() {
    let out = scenario(Some("tasks-checkpoints"));
    for check in [
        "tasks and checkpoints as LangGraph sends them",
        "a stream of tasks and checkpoints resumes after any of its parts, live or replayed",
        "a plan agent's model turns are agent tasks between its steps",
    ] {
        assert!(out.contains(&format!("ok: {check}\n")), "{check}: {out}");
    }
}

/// `threads.update` merges metadata, `threads.copy` forks a thread at its last event,
/// `threads.delete` deletes the session and its runs and refuses a busy thread; another user
/// can do none of it.
#[test]
fn needs_sdk_threads_are_updated_copied_and_deleted() {
    let out = scenario(Some("threads"));
    for check in ["threads.update", "threads.copy", "threads.delete"] {
        assert!(out.contains(&format!("ok: {check}\n")), "{check}: {out}");
    }
}

/// Threadless runs (`runs.wait`, `runs.stream`, `runs.create` without a thread), whose thread
/// goes when the run ends unless kept; `if_not_exists: create`; `runs.create_batch`;
/// `runs.cancel_many` by thread and by status, a queued run included.
#[test]
fn needs_sdk_threadless_runs_batches_and_cancel_many() {
    let out = scenario(Some("threadless"));
    for check in [
        "threadless runs",
        "if_not_exists create",
        "runs.create_batch",
        "runs.cancel_many",
    ] {
        assert!(out.contains(&format!("ok: {check}\n")), "{check}: {out}");
    }
}

/// `client.store` on the user's long-term memory: items put, read, searched, listed by
/// namespace and deleted, isolated per user; what an agent remembered is listed and deletable.
#[test]
fn needs_sdk_the_store_api_is_the_users_long_term_memory() {
    let out = scenario(Some("store"));
    for check in [
        "store items",
        "store items are the user's memories",
        "store memories",
    ] {
        assert!(out.contains(&format!("ok: {check}\n")), "{check}: {out}");
    }
}

/// `threads.update_state` adds messages (a person's, a model's with a tool call, the call's
/// result) to a thread between runs: they are in its values and history (a checkpoint with
/// source `update`) and in the next run's model request; a message that would replace one, a
/// result for no call, `data`, a system message, a stale checkpoint, another user and a busy
/// thread are refused with what to do.
#[test]
fn needs_sdk_update_state_adds_messages_the_next_run_reads() {
    let out = scenario(Some("update-state"));
    if let Some(line) = out.lines().find(|l| l.starts_with("update_state raced")) {
        eprintln!("{line}");
    }
    for check in [
        "threads.update_state adds messages the next run's model reads",
        "threads.update_state refuses what it cannot add, with what to do",
        "threads.update_state raced against a run start: the run waits for the update or the update is refused, nothing is lost or split",
    ] {
        assert!(out.contains(&format!("ok: {check}\n")), "{check}: {out}");
    }
}

/// Bodies over `--max-body` (20 MB and 3 MB) get a 413 the async client reads, and the client's
/// next request on the same connection pool works.
#[test]
fn needs_sdk_bodies_over_the_limit_get_a_readable_413() {
    let out = scenario(Some("body-limit"));
    assert!(
        out.contains("ok: bodies over the limit are refused cleanly\n"),
        "{out}"
    );
}

/// The AG-UI endpoint, driven with the AG-UI protocol's own Python package: every event
/// validates as an AG-UI `Event`; a tool call, the answer, and a wait resumed.
#[test]
fn needs_sdk_the_ag_ui_client_drives_weft_serve() {
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    let port = free_port();
    let mut server = serve(d, port, "serve.db");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/agui_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .args([&format!("http://127.0.0.1:{port}"), ALICE])
        .output()
        .unwrap();
    stop(&mut server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the AG-UI client failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(d.join("serve.log")).unwrap_or_default()
    );
    for check in [
        "ag-ui: a tool call and the answer",
        "ag-ui: an interrupt resumed",
        "ag-ui: a repeated call is shown blocked",
        "ag-ui: a key is needed",
    ] {
        assert!(
            stdout.contains(&format!("ok: {check}\n")),
            "{check}: {stdout}"
        );
    }
}

/// A user with as many runs going as `--max-runs-per-user` allows gets 429 for one more, and
/// another user is not held back by it.
#[test]
fn needs_sdk_a_user_over_the_run_limit_gets_429() {
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    // An agent file in the directory that cannot run here is left out, and said so.
    std::fs::write(d.join("plan-only.yaml"), "name: plan-only\nmode: plan\n").unwrap();
    let port = free_port();
    let mut server = serve_with(d, port, "serve.db", &["--max-runs-per-user", "1"]);
    let script = r#"
import asyncio, sys
from langgraph_sdk import get_client
from langgraph_sdk.errors import RateLimitError
URL, ALICE, BOB = sys.argv[1:4]
msg = {"messages": [{"role": "user", "content": "go"}]}
async def main():
    alice, bob = get_client(url=URL, api_key=ALICE), get_client(url=URL, api_key=BOB)
    t1, t2 = await alice.threads.create(), await alice.threads.create()
    run = await alice.runs.create(t1["thread_id"], "stuck", input=msg)
    try:
        await alice.runs.create(t2["thread_id"], "stuck", input=msg)
        raise AssertionError("a second run over the limit was accepted")
    except RateLimitError as e:
        assert "runs going" in str(e), e
    out = await bob.runs.wait((await bob.threads.create())["thread_id"], "echoer", input=msg)
    assert out["answer"] == "Shouted: LOUD", out
    await alice.runs.cancel(t1["thread_id"], run["run_id"], wait=True)
    print("ok: limit")
asyncio.run(main())
"#;
    let out = Command::new(&python)
        .args([
            "-c",
            script,
            &format!("http://127.0.0.1:{port}"),
            ALICE,
            BOB,
        ])
        .output()
        .unwrap();
    stop(&mut server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ok: limit"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    assert!(
        log.contains("skipped") && log.contains("plan-only.yaml") && log.contains("no `model`"),
        "{log}"
    );
}

/// A run queued behind another (`multitask_strategy: enqueue`) is stored before it is answered:
/// with its server killed (SIGKILL) while the run before it runs, the next server finds it by
/// id (`runs.get` answers rather than 404), takes it up once the dead server's claim ran out,
/// and starts it after the run before it, which it continues; both end, in order.
#[test]
fn needs_sdk_a_queued_run_survives_its_servers_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    std::fs::write(
        d.join("lineup.yaml"),
        r#"name: lineup
mode: react
model: scripted:lineup.script.yaml
tools:
  - name: linger
    description: Takes its time.
    command: ["sh", "-c", "cat > /dev/null; touch lineup.started; sleep 2; echo '{}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("lineup.script.yaml"),
        "- tool_calls: [ { name: linger, arguments: {} } ]\n- text: First.\n- text: Second.\n",
    )
    .unwrap();
    run_across_a_restart(
        d,
        (
            "queued-restart",
            "a queued run survives its server's SIGKILL",
        ),
        "KILL",
        &[("WEFT_LEASE_SECS", "3")],
    );
}

/// After SIGKILL, the restarted server sees that the run's owner was a process of its own host
/// that is gone, and continues the run at once instead of waiting for the lease (30 s here) to
/// run out. The step in flight at the kill is recorded with an unknown outcome, never repeated.
#[test]
fn needs_sdk_a_run_killed_with_its_server_goes_on_without_waiting_for_its_lease() {
    let tmp = tempfile::tempdir().unwrap();
    agents(tmp.path());
    let took = run_across_a_restart(tmp.path(), RESTART, "KILL", &[("WEFT_LEASE_SECS", "30")]);
    assert!(
        took < Duration::from_secs(15),
        "the run took {took:?} after the restart"
    );
}

/// Threads that never had a run (created, then refused with 429, or never used) are not running
/// sessions to claim: with ten of them in the store, a run whose server stopped is still
/// continued by the next server at once.
#[test]
fn needs_sdk_a_stopped_run_is_continued_past_threads_that_never_had_a_run() {
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    let port = free_port();
    let mut server = serve(d, port, "serve.db");
    let out = Command::new(&python)
        .args([
            "-c",
            "import asyncio, sys\nfrom langgraph_sdk import get_client\nasync def main():\n    c = get_client(url=sys.argv[1], api_key=sys.argv[2])\n    for _ in range(10):\n        await c.threads.create()\nasyncio.run(main())\n",
            &format!("http://127.0.0.1:{port}"),
            ALICE,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The server's loop for orphaned runs looks at the store every second.
    std::thread::sleep(Duration::from_millis(2500));
    stop(&mut server);
    let took = run_across_a_restart(d, RESTART, "TERM", &[]);
    assert!(
        took < Duration::from_secs(15),
        "the run took {took:?} after the restart"
    );
}

/// The `tally` agent of `seam_client.py`: one call of a tool that is not idempotent and logs
/// its start and end, then the answer.
pub(crate) fn tally_agent(d: &Path) {
    std::fs::write(
        d.join("tally.yaml"),
        r#"name: tally
mode: react
model: scripted:tally.script.yaml
tools:
  - name: tally
    description: Counts one (not idempotent; logs its start and end).
    command: ["sh", "-c", "cat > /dev/null; echo \"start $WEFT_IDEMPOTENCY_KEY $(date +%s%N)\" >> tally.log; sleep 0.5; echo \"end $WEFT_IDEMPOTENCY_KEY $(date +%s%N)\" >> tally.log; echo '{\"counted\": 1}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("tally.script.yaml"),
        "- tool_calls: [ { name: tally, arguments: {} } ]\n- text: Tallied.\n",
    )
    .unwrap();
}

/// What `seam_client.py`'s driver is asked to do: make the fault of round `r` (returning the time
/// to write to `killed-R`, Unix ms), or look after the servers between faults.
pub(crate) enum SeamStep {
    Fault(usize),
    Tick,
}

/// Runs `seam_client.py` against `url` with `args` after its URL, key and work dir `d` (rounds,
/// streams, fault every, mode), its output in `d`'s `client.out` and `client.err`. When the
/// script writes `kill-R`, `step(SeamStep::Fault(R))` makes the fault and `killed-R` gets the
/// time it returns; between looks (every 5 ms) `step(SeamStep::Tick)` runs. The script's exit
/// status; it is killed after `limit`.
pub(crate) fn drive_seam(
    d: &Path,
    url: &str,
    args: &[String],
    limit: Duration,
    mut step: impl FnMut(SeamStep) -> u128,
) -> std::process::ExitStatus {
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/seam_client.py");
    let rounds: usize = args[0].parse().unwrap();
    let mut client = Command::new(&python)
        .arg(&script)
        .args([url, ALICE])
        .arg(d)
        .args(args)
        .stdout(std::fs::File::create(d.join("client.out")).unwrap())
        .stderr(std::fs::File::create(d.join("client.err")).unwrap())
        .spawn()
        .unwrap();
    let began = Instant::now();
    loop {
        if let Some(status) = client.try_wait().unwrap() {
            return status;
        }
        if began.elapsed() > limit {
            let _ = client.kill();
            return client.wait().unwrap();
        }
        step(SeamStep::Tick);
        for r in 0..rounds {
            if d.join(format!("kill-{r}")).exists() && !d.join(format!("killed-{r}")).exists() {
                let at = step(SeamStep::Fault(r));
                std::fs::write(d.join(format!("killed-{r}")), at.to_string()).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Unix time in milliseconds.
pub(crate) fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// `seam_client.py`: `rounds` rounds of `n` concurrent SDK streams on `db`, with the server
/// killed (SIGKILL) and started again in every `kill_every`-th round (0: never). Returns what
/// the script printed (its counts).
fn seam(db: &str, rounds: usize, n: usize, kill_every: usize) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    tally_agent(d);
    let port = free_port();
    let extra = ["--max-runs-per-user", "100000"];
    let mut server = serve_logged(d, port, db, &extra, "serve-0.log");
    let mut kills = 0;
    let args = [rounds, n, kill_every].map(|v| v.to_string());
    let url = format!("http://127.0.0.1:{port}");
    let status = drive_seam(d, &url, &args, Duration::from_secs(900), |step| {
        if let SeamStep::Fault(_) = step {
            server.kill().unwrap();
            server.wait().unwrap();
            let at = now_ms();
            kills += 1;
            server = serve_logged(d, port, db, &extra, &format!("serve-{kills}.log"));
            return at;
        }
        0
    });
    stop(&mut server);
    let stdout = std::fs::read_to_string(d.join("client.out")).unwrap_or_default();
    let names: Vec<String> = (0..=kills).map(|k| format!("serve-{k}.log")).collect();
    let logs = logs(d, &names.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        status.success() && stdout.contains("ok: seam"),
        "{stdout}\n{}\n{logs}",
        std::fs::read_to_string(d.join("client.err")).unwrap_or_default()
    );
    println!("{stdout}");
    stdout
}

fn seam_rounds() -> usize {
    std::env::var("WEFT_SEAM_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
}

/// Rounds of 100 concurrent `threads.create` + `runs.stream` on one server: no run is taken
/// over while this server drives it, none fails, no call is reported with an unknown outcome.
#[test]
fn needs_sdk_concurrent_streams_are_never_taken_over_while_live() {
    let out = seam("serve.db", 3, 100, 0);
    assert!(
        out.contains("unknown_outcome=0,") && out.contains("continued=0"),
        "{out}"
    );
}

/// The seam: rounds of 100 concurrent SDK streams (6 by default, `WEFT_SEAM_ROUNDS=20` for the
/// full run) with a SIGKILL and a restart every third round, on SQLite: no acknowledged run is
/// lost, adopted while live or failed; no tool call repeated; unknown outcomes only for calls in
/// flight at a kill; every stream complete, with no gap and no repeat across reconnects.
#[test]
fn needs_sdk_concurrent_streams_survive_sigkill_and_restarts_on_sqlite() {
    seam("serve.db", seam_rounds(), 100, 3);
}

/// Tests that need PostgreSQL as well as the SDK.
mod needs_postgres {
    /// [`super::needs_sdk_concurrent_streams_survive_sigkill_and_restarts_on_sqlite`], on
    /// PostgreSQL.
    #[test]
    fn needs_sdk_concurrent_streams_survive_sigkill_and_restarts() {
        let db = super::common::Database::new("serve_seam");
        super::seam(&db.url, super::seam_rounds(), 100, 3);
    }

    /// Two `weft serve` replicas on one PostgreSQL: a run started on A is seen (`runs.get`,
    /// `runs.list`, `threads.get`), streamed (whole and after a `Last-Event-ID`) and joined from
    /// B, with `end` right after its last event; a second run sent to B is refused (`reject`) or
    /// queued behind A's run (`enqueue`); `runs.cancel` and `runs.cancel_many` (by thread, by
    /// run ids, by status) from B stop runs A drives; a run queued on A is seen from B, and
    /// cancelled from B (by id, or by `cancel_many(status="pending")`) it never begins on A.
    #[test]
    fn needs_sdk_a_replica_sees_streams_queues_behind_and_cancels_anothers_runs() {
        let python = super::common::service_var("WEFT_TEST_SDK_PYTHON");
        let db = super::common::Database::new("serve_replicas");
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        super::agents(d);
        super::relay_agent(d);
        let ports = [super::free_port(), super::free_port()];
        let mut servers: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(k, port)| super::replica(d, *port, &db.url, &format!("serve-{k}.log")))
            .collect();
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/replicas_client.py");
        let out = std::process::Command::new(&python)
            .arg(&script)
            .args(ports.map(|p| format!("http://127.0.0.1:{p}")))
            .arg(super::ALICE)
            .current_dir(d)
            .output()
            .unwrap();
        for s in &mut servers {
            super::stop(s);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            super::logs(d, &["serve-0.log", "serve-1.log"])
        );
        println!("{stdout}");
        for check in [
            "a run of A seen from B while A drives it",
            "B streams A's run to its end",
            "B joins A's run and sees it ended",
            "multitask reject and enqueue across replicas",
            "runs.cancel from B of A's run",
            "runs.cancel_many from B reaches A's runs",
            "a run queued on A, cancelled from B, never begins",
            "cancel_many by status on B reaches a run queued on A",
        ] {
            assert!(
                stdout.contains(&format!("ok: {check}")),
                "{check}: {stdout}"
            );
        }
    }

    /// A run on a thread made with `threads.create`, started on replica A, which is killed
    /// mid-run: a worker takes it over (the thread was named by its first run, so the worker,
    /// which claims its agents' sessions, finds it; replica B, serving other agents, cannot)
    /// and B streams it to its end, with events of both owners.
    #[test]
    fn needs_sdk_a_killed_replicas_run_moves_to_a_worker_and_streams_through_another() {
        super::replica_to_worker();
    }

    /// Replica A queues a run behind its own, then freezes (SIGSTOP) past its leases and
    /// claims: B continues the run before it and takes the queued one over, starting it once;
    /// A, thawed, finds it begun and follows it to its end instead of starting it again.
    #[test]
    fn needs_sdk_a_run_queued_on_a_frozen_replica_is_started_once_by_another() {
        super::frozen_queue();
    }

    /// Two replicas and two workers on one PostgreSQL behind a round-robin balancer; the SDK
    /// talks to the balancer only. Rounds of concurrent streams (3 by default,
    /// `WEFT_SEAM_ROUNDS` for more) with one replica killed (SIGKILL) mid-round every second
    /// round: every acknowledged stream ends through the other replica, with no gap or repeat,
    /// no run lost or failed, no tool call run twice, unknown outcomes only for calls in flight
    /// at the kill.
    #[test]
    fn needs_sdk_streams_go_on_through_another_replica_when_one_is_killed() {
        let db = super::common::Database::new("serve_replica_seam");
        let out = super::replica_seam(
            &db.url,
            std::env::var("WEFT_SEAM_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(3),
            60,
        );
        assert!(!out.contains("kills=0,"), "no replica was killed: {out}");
    }
}

/// See [`needs_postgres::needs_sdk_a_run_queued_on_a_frozen_replica_is_started_once_by_another`].
fn frozen_queue() {
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    let db = common::Database::new("serve_frozen_queue");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    relay_agent(d);
    let ports = [free_port(), free_port()];
    let mut a = replica(d, ports[0], &db.url, "serve-a.log");
    let mut b = replica(d, ports[1], &db.url, "serve-b.log");
    let script = r#"
import asyncio, os, signal, sys, time
from langgraph_sdk import get_client
A, B, KEY, PID = sys.argv[1:5]
def msg(text):
    return {"messages": [{"role": "user", "content": text}]}
async def main():
    a, b = get_client(url=A, api_key=KEY), get_client(url=B, api_key=KEY)
    t = (await a.threads.create())["thread_id"]
    first = await a.runs.create(t, "relay", input=msg("first"))
    second = await a.runs.create(t, "relay", input=msg("second"), multitask_strategy="enqueue")
    assert second["status"] == "pending", second
    os.kill(int(PID), signal.SIGSTOP)
    try:
        out = await asyncio.wait_for(b.runs.join(t, second["run_id"]), 60)
        assert out["answer"] == "Twice.", out
        assert (await b.runs.get(t, first["run_id"]))["status"] == "success"
    finally:
        os.kill(int(PID), signal.SIGCONT)
    since = time.time()
    while (await a.runs.get(t, second["run_id"]))["status"] != "success":
        assert time.time() - since < 30, await a.runs.get(t, second["run_id"])
        await asyncio.sleep(0.2)
    # A, thawed, does not start it again.
    await asyncio.sleep(2)
    runs = await b.runs.list(t)
    assert sorted(r["run_id"] for r in runs) == sorted([first["run_id"], second["run_id"]]), runs
    assert all(r["status"] == "success" for r in runs), runs
    msgs = (await b.threads.get_state(t))["values"]["messages"]
    assert [m["content"] for m in msgs if m["type"] == "human"] == ["first", "second"], msgs
    print("ok: a run queued on a frozen replica is started once by another", flush=True)
asyncio.run(main())
"#;
    let out = Command::new(&python)
        .args(["-c", script])
        .args(ports.map(|p| format!("http://127.0.0.1:{p}")))
        .arg(ALICE)
        .arg(a.id().to_string())
        .current_dir(d)
        .output()
        .unwrap();
    let _ = Command::new("kill")
        .args(["-CONT", &a.id().to_string()])
        .status();
    stop(&mut a);
    stop(&mut b);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains("ok: a run queued on a frozen replica is started once by another"),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs(d, &["serve-a.log", "serve-b.log"])
    );
}

/// See [`needs_postgres::needs_sdk_a_killed_replicas_run_moves_to_a_worker_and_streams_through_another`].
fn replica_to_worker() {
    let python = common::service_var("WEFT_TEST_SDK_PYTHON");
    let db = common::Database::new("serve_replica_worker");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    // B serves only `relay`, from a directory of its own.
    std::fs::create_dir(d.join("b")).unwrap();
    relay_agent(&d.join("b"));
    let ports = [free_port(), free_port()];
    let mut a = replica(d, ports[0], &db.url, "serve-a.log");
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args([
        "--db", &db.url, "serve", "--agents", "b", "--keys", "keys.txt",
    ])
    .args(["--listen", &format!("127.0.0.1:{}", ports[1])])
    .env("WEFT_LEASE_SECS", REPLICA_LEASE_SECS);
    let mut b = serve_command(d, ports[1], c, "serve-b.log");
    let mut w = worker(d, &db.url, "worker-0.log");
    let script = r#"
import asyncio, sys, time
from langgraph_sdk import get_client
A, B, KEY = sys.argv[1:4]
async def main():
    a, b = get_client(url=A, api_key=KEY), get_client(url=B, api_key=KEY)
    t = (await a.threads.create())["thread_id"]
    r = await a.runs.create(t, "slowpoke", input={"messages": [{"role": "user", "content": "go"}]})
    await asyncio.sleep(1.5)
    open("kill", "w").close()
    while not __import__("os").path.exists("killed"):
        await asyncio.sleep(0.05)
    parts = [p async for p in b.runs.join_stream(t, r["run_id"], stream_mode="custom")]
    custom = [p.data for p in parts if p.event == "custom"]
    assert parts[-1].event == "end" and custom[-1]["type"] == "run_finished", parts
    seqs = [e["seq"] for e in custom]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    epochs = sorted({e["epoch"] for e in custom})
    assert len(epochs) == 2, epochs
    assert (await b.runs.get(t, r["run_id"]))["status"] == "success"
    print(f"ok: moved to a worker, epochs {epochs}", flush=True)
asyncio.run(main())
"#;
    let client = Command::new(&python)
        .args(["-c", script])
        .args(ports.map(|p| format!("http://127.0.0.1:{p}")))
        .arg(ALICE)
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    weft_testkit::wait_for_file(&d.join("kill"), Duration::from_secs(30));
    a.kill().unwrap();
    a.wait().unwrap();
    std::fs::write(d.join("killed"), "").unwrap();
    let out = output_within(client, Duration::from_secs(90));
    stop(&mut b);
    stop(&mut w);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let worker_log = std::fs::read_to_string(d.join("worker-0.log")).unwrap_or_default();
    assert!(
        out.status.success() && stdout.contains("ok: moved to a worker"),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs(d, &["serve-a.log", "serve-b.log", "worker-0.log"])
    );
    assert!(
        worker_log.contains("stopped after 1 session(s)"),
        "{worker_log}"
    );
}

/// A two-turn agent whose first turn takes a second: `Once.`, then `Twice.`.
fn relay_agent(d: &Path) {
    std::fs::write(
        d.join("relay.yaml"),
        r#"name: relay
mode: react
model: scripted:relay.script.yaml
tools:
  - name: nap
    description: Naps for a second.
    command: ["sh", "-c", "cat > /dev/null; sleep 1; echo '{}'"]
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("relay.script.yaml"),
        "- tool_calls: [ { name: nap, arguments: {} } ]\n- text: Once.\n- tool_calls: [ { name: nap, arguments: {} } ]\n- text: Twice.\n",
    )
    .unwrap();
}

/// The lease of the replica tests' processes: a run whose replica was killed is taken over
/// once it runs out.
pub(crate) const REPLICA_LEASE_SECS: &str = "5";

/// A `weft serve` replica on `db`, logging to `log` in `d`.
pub(crate) fn replica(d: &Path, port: u16, db: &str, log: &str) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(["--db", db, "serve", "--agents", ".", "--keys", "keys.txt"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--max-runs-per-user", "100000"])
        .env("WEFT_LEASE_SECS", REPLICA_LEASE_SECS);
    serve_command(d, port, c, log)
}

/// A `weft worker` on `db`, logging to `log` in `d`.
fn worker(d: &Path, db: &str, log: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["--db", db, "worker", "--agents", ".", "--poll-secs", "0.5"])
        .args(["--concurrency", "8"])
        .current_dir(d)
        .env_remove("WEFT_DB")
        .env_remove("WEFT_API_KEYS")
        .env("RUST_LOG", "weft=info")
        .env("WEFT_LEASE_SECS", REPLICA_LEASE_SECS)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join(log)).unwrap())
        .spawn()
        .unwrap()
}

/// `seam_client.py` in its `replicas` mode: two replicas (`serve-a*.log`, `serve-b*.log`) and
/// two workers on `db` behind a [`common::Balancer`]; at each kill the next replica in turn is
/// killed (SIGKILL), and started again once its runs' leases ran out (so that the other
/// processes, not its restart, take them over). Returns what the script printed.
fn replica_seam(db: &str, rounds: usize, n: usize) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agents(d);
    tally_agent(d);
    let ports = [free_port(), free_port()];
    let mut servers: Vec<Child> = ports
        .iter()
        .zip(["a", "b"])
        .map(|(port, name)| replica(d, *port, db, &format!("serve-{name}0.log")))
        .collect();
    let mut workers: Vec<Child> = (0..2)
        .map(|k| worker(d, db, &format!("worker-{k}.log")))
        .collect();
    let balancer = common::Balancer::start(
        ports
            .iter()
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect(),
    );
    let mut kills = 0;
    // The replica killed last, and when to start it again.
    let mut restart: Option<(usize, Instant)> = None;
    let args = [
        rounds.to_string(),
        n.to_string(),
        "2".into(),
        "replicas".into(),
    ];
    let status = drive_seam(
        d,
        &balancer.url(),
        &args,
        Duration::from_secs(900),
        |step| match step {
            SeamStep::Tick => {
                if let Some((k, at)) = restart
                    && Instant::now() >= at
                {
                    let name = ["a", "b"][k];
                    servers[k] = replica(d, ports[k], db, &format!("serve-{name}{kills}.log"));
                    restart = None;
                }
                0
            }
            SeamStep::Fault(_) => {
                let k = kills % 2;
                servers[k].kill().unwrap();
                servers[k].wait().unwrap();
                let at = now_ms();
                kills += 1;
                let lease: u64 = REPLICA_LEASE_SECS.parse().unwrap();
                restart = Some((k, Instant::now() + Duration::from_secs(lease + 3)));
                at
            }
        },
    );
    let carried = balancer.carried();
    drop(balancer);
    for c in servers.iter_mut().chain(workers.iter_mut()) {
        stop(c);
    }
    let stdout = std::fs::read_to_string(d.join("client.out")).unwrap_or_default();
    let mut names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".log") && (n.starts_with("serve-") || n.starts_with("worker-")))
        .collect();
    names.sort();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(
        status.success() && stdout.contains("ok: seam"),
        "{stdout}\n{}\n{}",
        std::fs::read_to_string(d.join("client.err")).unwrap_or_default(),
        logs(d, &names)
    );
    // A worker says at its stop how many sessions it drove.
    let by_workers: Vec<String> = (0..2)
        .map(|k| {
            let log =
                std::fs::read_to_string(d.join(format!("worker-{k}.log"))).unwrap_or_default();
            log.lines()
                .find_map(|l| l.split("stopped after ").nth(1)?.split(' ').next())
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    println!(
        "{stdout}connections through the balancer, by replica: {carried:?}\nsessions driven by the workers: {by_workers:?}"
    );
    assert!(
        carried.iter().all(|c| *c > 0),
        "a replica got no connection: {carried:?}"
    );
    stdout
}

/// `--cors-origin` takes origins as a browser sends them; anything else stops the server at
/// start with the value, what is wrong and what an origin looks like.
#[test]
fn a_cors_origin_that_is_not_an_origin_stops_the_server_with_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    agents(tmp.path());
    for (origin, says) in [
        ("localhost:5173", "no scheme"),
        ("http://localhost:5173/", "no path"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args([
                "--db", "serve.db", "serve", "--agents", ".", "--keys", "keys.txt",
            ])
            .args(["--listen", "127.0.0.1:0", "--cors-origin", origin])
            .current_dir(tmp.path())
            .env_remove("WEFT_DB")
            .env_remove("WEFT_API_KEYS")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{origin}: {stderr}");
        assert!(
            stderr.contains(&format!("--cors-origin `{origin}`"))
                && stderr.contains(says)
                && stderr.contains("scheme://host[:port]"),
            "{origin}: {stderr}"
        );
    }
}
