//! `weft run` through the binary: the answer alone on stdout, the usage on stderr, exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs in the repository's root (the examples' paths are relative to it), with a store in
/// memory unless the test names one, so nothing is left behind in the source tree.
fn weft(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(root())
        .env("WEFT_DB", "memory:")
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const REFUND_INPUT: &str = r#"{"customerId": "cust_123", "amount": 50.0}"#;

#[test]
fn refund_desk_prints_the_answer_alone() {
    let out = weft(&[
        "run",
        "examples/refund-desk.yaml",
        "I'd like a refund for my last order.",
        "--input",
        REFUND_INPUT,
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        stdout,
        "Your refund of 50.00 has been processed. Confirmation: refund_cust_123_5000.\n"
    );
    let usage = stderr
        .lines()
        .find(|l| l.starts_with("usage: "))
        .unwrap_or_else(|| panic!("no usage line in {stderr}"));
    assert!(usage.contains("2 tool call(s)"), "{usage}");
    assert!(usage.contains("input +"), "{usage}");
}

#[test]
fn refund_desk_events_show_the_tools_results() {
    let out = weft(&[
        "run",
        "examples/refund-desk.yaml",
        "I'd like a refund for my last order.",
        "--input",
        REFUND_INPUT,
        "--events",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let events: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let refund = events
        .iter()
        .find(|e| e["type"] == "step_completed" && e["step"] == "refund")
        .unwrap_or_else(|| panic!("no completed refund step in {stderr}"));
    // The command tool computed this from the input's amount.
    assert_eq!(
        refund["output"]["confirmationId"],
        Value::from("refund_cust_123_5000")
    );
    assert!(!events.iter().any(|e| e["tool"] == "escalateToSupervisor"));
    assert_eq!(events.last().unwrap()["type"], "run_finished");
    // Stored events are numbered from 1 without gaps (text deltas are live only, unnumbered).
    let seqs: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] != "text_delta")
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[test]
fn weather_chat_answers_after_two_lookups() {
    let out = weft(&[
        "run",
        "examples/weather-chat.yaml",
        "Where is it sunnier, Lisbon or Oslo?",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        stdout,
        "Lisbon is sunny at 24°C, while Oslo is cloudy at 12°C, so Lisbon is sunnier.\n"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("usage: ") && l.contains("2 tool call(s)")),
        "{stderr}"
    );
}

#[test]
fn a_waiting_agent_exits_3_with_the_question_and_the_session() {
    let out = weft(&[
        "run",
        "crates/weft/tests/fixtures/ask-amount-cli.yaml",
        "Refund my last order.",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert_eq!(stdout, "How much should be refunded?\n");
    let id = stderr
        .split("(session ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no session id in {stderr}"));
    assert_eq!(id.len(), 36, "{id}");
    assert!(stderr.contains(&format!("--session {id}")), "{stderr}");
    assert!(stderr.contains("0 tool call(s)"), "{stderr}");
}

#[test]
fn an_agent_that_cannot_complete_exits_1_with_the_reason() {
    let out = weft(&[
        "run",
        "crates/weft/tests/fixtures/garbage-planner.yaml",
        "Do something.",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("could not complete: CANNOT_COMPLETE"),
        "{stderr}"
    );
    assert!(stderr.contains("not JSON"), "{stderr}");
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let out = weft(&[
        "run",
        "examples/refund-desk.yaml",
        "Refund.",
        "--input",
        "{not json",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("input"), "{stderr}");
    let missing = weft(&["run", "examples/no-such-agent.yaml", "Hi."]);
    let stderr = text(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("no-such-agent.yaml"), "{stderr}");
}

/// A follow-up task in a session: the usage line gives this run's share and the session's
/// total, each labelled (the first run's line is the session's alone).
#[test]
fn a_follow_up_run_shows_its_own_usage_and_the_sessions() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "name: usage-turns\nmode: react\nmodel: scripted:script.yaml\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        r#"- tool_calls: [ { name: echo, arguments: { text: "a" } } ]
  usage: { input_tokens: 10, output_tokens: 1 }
- text: "first"
  usage: { input_tokens: 20, output_tokens: 2 }
- tool_calls: [ { name: echo, arguments: { text: "b" } }, { name: echo, arguments: { text: "c" } } ]
  usage: { input_tokens: 100, output_tokens: 10 }
- text: "second"
  usage: { input_tokens: 200, output_tokens: 20 }
"#,
    )
    .unwrap();
    let db = dir.path().join("w.db");
    let agent = dir.path().join("agent.yaml");
    let run = |extra: &[&str]| {
        let mut args = vec!["--db", db.to_str().unwrap(), "run", agent.to_str().unwrap()];
        args.extend_from_slice(extra);
        weft(&args)
    };
    let usage = |out: &Output| {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
        stderr
            .lines()
            .find(|l| l.starts_with("usage: "))
            .unwrap_or_else(|| panic!("no usage line in {stderr}"))
            .to_owned()
    };
    let first = run(&["--id", "usage-turns-1", "Go."]);
    let line = usage(&first);
    assert!(
        line.starts_with(
            "usage: 30 input + 3 output tokens · 1 tool call(s) · session usage-turns-1"
        ),
        "{line}"
    );
    let second = run(&["--session", "usage-turns-1", "Again."]);
    assert_eq!(text(&second.stdout), "second\n");
    let line = usage(&second);
    assert_eq!(
        line,
        "usage: this run 300 input + 30 output tokens · 2 tool call(s) · session total 330 input + 33 output tokens · 3 tool call(s) · session usage-turns-1"
    );
}

/// A model server that is down: the first failure is shown with its error, the same error again
/// is counted as a retry rather than printed again, and the last one says weft gives up.
#[test]
fn a_model_server_that_is_down_shows_its_retries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("down.yaml"),
        "name: down\nmode: react\nmodel: { provider: openai, name: m, base_url: \"http://127.0.0.1:9/v1\", api_key: none, max_retries: 0 }\ninstructions: hi\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(dir.path())
        .env("WEFT_DB", "memory:")
        .args(["run", "down.yaml", "hello"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("connection failed").count(), 2, "{err}");
    assert!(err.contains("model call (react) failed: "), "{err}");
    assert!(err.contains("retry 2/3"), "{err}");
    assert!(err.contains("failed again: retry 3/3"), "{err}");
    assert!(err.contains("failed 3/3 times, giving up"), "{err}");
}

/// A new run given the id of a session that exists is refused (exit 2) with how to go on with
/// that session: a waiting one is answered, an ended one gets another task with `--session`
/// (a session that stopped while running is resumed: `ownership.rs` checks that one).
#[test]
fn a_new_run_with_a_taken_id_says_how_to_go_on_with_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("w.db");
    let db = db.to_str().unwrap();
    let run =
        |agent: &str, task: &str, id: &str| weft(&["run", agent, task, "--id", id, "--db", db]);
    let weather = "examples/weather-chat.yaml";
    let out = run(weather, "Where is it sunnier, Lisbon or Oslo?", "ended");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ended = format!(
        "session ended already exists: it has ended; give it another task with `weft run --db {db} {weather} --session ended \"<task>\"`"
    );
    // The refused run lets the session go at once: `weft submit` with the same id is told the
    // same (not that the refused process holds the session), and so is a plan run.
    for out in [
        run(weather, "And Rome?", "ended"),
        weft(&["submit", weather, "And Rome?", "--id", "ended", "--db", db]),
    ] {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&ended), "{err}");
    }
    let out = weft(&[
        "plan",
        "run",
        "examples/plans/refund.json",
        "--agent",
        "examples/shop.yaml",
        "--input",
        r#"{"customerId": "c1", "amount": 5}"#,
        "--id",
        "ended",
        "--db",
        db,
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "session ended already exists: it has ended; give the new session another --id"
        ),
        "{err}"
    );
    // The hint's command goes on with the session (whose script has no reply left: it fails).
    let out = weft(&[
        "run",
        weather,
        "And Rome?",
        "--session",
        "ended",
        "--db",
        db,
    ]);
    let err = text(&out.stderr);
    assert!(
        err.contains("▶ And Rome?") && err.contains("session ended"),
        "{err}"
    );
    // `sessions events` takes `--json` as other commands do: it prints JSON lines either way.
    let out = weft(&["sessions", "events", "ended", "--json", "--db", db]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "session_started");
    assert_eq!(
        lines.iter().filter(|e| e["type"] == "turn_started").count(),
        2,
        "the first task and the one given with --session"
    );
    let ask = "crates/weft/tests/fixtures/ask-amount-cli.yaml";
    let out = run(ask, "Refund my last order.", "waiting");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = run(ask, "Refund my last order.", "waiting");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "session waiting already exists: it waits for an answer; give it with `weft answer --db {db} waiting \"<answer>\"`"
        )),
        "{err}"
    );
}

/// `weft new NAME` writes a starter agent that `weft check` passes and `weft run` runs to its
/// answer, calling its tool (a command: its output is today's date and time in UTC). A second
/// `weft new` with the same name overwrites nothing.
#[test]
fn weft_new_writes_a_starter_that_checks_and_runs_its_tool() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let weft_in = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .current_dir(dir)
            .env_remove("WEFT_DB")
            .args(args)
            .output()
            .unwrap()
    };
    let out = weft_in(&["new", "helper"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("weft run helper.yaml \"What time is it?\""),
        "{}",
        text(&out.stdout)
    );
    let written = std::fs::read_to_string(dir.join("helper.yaml")).unwrap();
    assert!(dir.join("helper.script.yaml").exists());

    let out = weft_in(&["check", "helper.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "helper.yaml: no problems");

    let out = weft_in(&["run", "helper.yaml", "What time is it?", "--events"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        text(&out.stdout).trim(),
        "I asked the clock: its answer, above, is the time now in UTC."
    );
    let events: Vec<Value> = err
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_started")
        .collect();
    assert_eq!(started.len(), 1, "{err}");
    assert_eq!(started[0]["tool"], "clock");
    let finished = events
        .iter()
        .find(|e| e["type"] == "tool_call_finished")
        .unwrap_or_else(|| panic!("the tool call finished: {err}"));
    assert_eq!(finished["outcome"]["status"], "ok", "{err}");
    // The command ran: its output is the date now, in UTC.
    let utc = finished["outcome"]["output"]["utc"].as_str().unwrap();
    let year: i32 = utc[..4].parse().unwrap();
    assert!(
        utc.len() == 20 && utc.ends_with('Z') && year >= 2025,
        "{utc}"
    );
    assert_eq!(events.last().unwrap()["type"], "run_finished", "{err}");

    // Written once: a second `weft new` of the name, or of a name one of whose files exists,
    // writes nothing.
    std::fs::write(dir.join("other.script.yaml"), "mine").unwrap();
    for name in ["helper", "other"] {
        let out = weft_in(&["new", name]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("exists already; `weft new` writes new files only"),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("helper.yaml")).unwrap(),
        written
    );
    assert!(!dir.join("other.yaml").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("other.script.yaml")).unwrap(),
        "mine"
    );
    let out = weft_in(&["new", "no good"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is not an agent name"));
}

/// An OpenAI-compatible server that answers every chat request with `body`, `n` times at most;
/// its address.
fn one_reply_server(body: String, n: usize) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(n) {
            let Ok(mut s) = stream else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut req = vec![0u8; len];
            let _ = r.read_exact(&mut req);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}/v1")
}

/// A plan agent on a server that reports no usage and whose replies never match the planner's
/// schema fails after three attempts of its one model call, and the three attempts are counted
/// all the same (roughly, from the bytes sent and received): in the usage line and in the
/// failed call's event, marked estimated.
#[test]
fn a_call_that_failed_after_three_structured_attempts_counts_their_tokens() {
    let reply = serde_json::json!({
        "id": "c1", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "no plan today"}, "finish_reason": "stop"}],
    });
    let url = one_reply_server(reply.to_string(), 3);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("planner.yaml"),
        format!(
            "name: planner\nmode: plan\nmodel: {{ provider: openai, name: m, base_url: \"{url}\", api_key: none, max_retries: 0 }}\ninstructions: Plan.\nlimits: {{ max_model_retries: 1 }}\ntools:\n  - builtin: echo\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(dir.path())
        .env("WEFT_DB", "memory:")
        .args(["run", "planner.yaml", "Echo hi.", "--events"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("after 3 attempts"), "{err}");
    let failed: Value = err
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "model_failed")
        .unwrap_or_else(|| panic!("no model_failed event: {err}"));
    let usage = &failed["usage"];
    let (input, output) = (
        usage["input_tokens"].as_u64().unwrap_or(0),
        usage["output_tokens"].as_u64().unwrap_or(0),
    );
    // Each attempt's reply is "no plan today" (13 bytes: 4 tokens).
    assert_eq!(output, 12, "{failed}");
    assert!(input > 100, "{failed}");
    assert_eq!(usage["usage_estimated"], true, "{failed}");
    assert!(
        err.contains(&format!("usage: {input} input + {output} output tokens")),
        "{err}"
    );
}
