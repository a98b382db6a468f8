//! Ctrl-C (SIGINT) during `weft run`: the run stops, says which session stopped and how to
//! continue it (with `--db`), exits 130; `weft resume` then finishes the session, recording the
//! interrupted call of a non-idempotent tool as an unknown outcome rather than running it again,
//! and running an idempotent tool's call again, which its usage line counts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn weft(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.current_dir(dir).env_remove("WEFT_DB");
    c
}

fn wait_for(path: &Path) {
    weft_testkit::wait_for_file(path, Duration::from_secs(60));
}

#[test]
fn ctrl_c_stops_a_run_that_weft_resume_then_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: slow
mode: react
model: scripted:script.yaml
tools:
  - name: charge
    description: Charges a card (not idempotent), slowly.
    command: ["sh", "-c", "cat > /dev/null; echo run >> charges.log; touch started; sleep 30; echo '{}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: charge, arguments: {} } ]\n- text: \"The charge's outcome is unknown; please check it.\"\n",
    )
    .unwrap();
    let child = weft(d)
        .args(["run", "agent.yaml", "charge the card", "--db", "w.db"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&d.join("started"));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out: Output = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("interrupted: session "))
        .unwrap_or_else(|| panic!("no interruption line:\n{err}"));
    let id = line["interrupted: session ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    assert!(
        line.contains(&format!("weft resume --db w.db {id}")),
        "{line}"
    );

    let out = weft(d)
        .args(["resume", &id, "--db", "w.db", "--events"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(text(&out.stdout).contains("outcome is unknown"));
    // The charge ran once: the interrupted call is recorded, not repeated.
    assert_eq!(
        std::fs::read_to_string(d.join("charges.log")).unwrap(),
        "run\n"
    );
    assert!(err.contains("unknown_outcome"), "{err}");
    // The resume ran no tool call: the interrupted one was recorded, not run.
    let usage = err.lines().find(|l| l.starts_with("usage: ")).unwrap();
    assert!(usage.starts_with("usage: this run "), "{usage}");
    assert!(
        usage.contains("output tokens · 0 tool call(s) · session total"),
        "{usage}"
    );
}

/// An idempotent tool's call interrupted by Ctrl-C runs again on `weft resume`, and the resume's
/// usage line counts it as the run's tool call (it was started before, by the run that stopped).
#[test]
fn a_call_run_again_on_resume_counts_as_the_resumes_tool_call() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: lookup
mode: react
model: scripted:script.yaml
tools:
  - name: lookup
    description: Looks an order up (idempotent), slowly the first time.
    idempotent: true
    command: ["sh", "-c", "cat > /dev/null; echo run >> lookups.log; if [ ! -f started ]; then touch started; sleep 30; fi; echo '{\"status\": \"shipped\"}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: lookup, arguments: {} } ]\n- text: The order has shipped.\n",
    )
    .unwrap();
    let child = weft(d)
        .args(["run", "agent.yaml", "where is my order", "--db", "w.db"])
        .args(["--id", "lookup-1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&d.join("started"));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out: Output = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));

    let out = weft(d)
        .args(["resume", "lookup-1", "--db", "w.db"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout).trim(), "The order has shipped.");
    // The call ran again...
    assert_eq!(
        std::fs::read_to_string(d.join("lookups.log")).unwrap(),
        "run\nrun\n"
    );
    // ...in this run, which its usage line says.
    let usage = err.lines().find(|l| l.starts_with("usage: ")).unwrap();
    assert!(
        usage.contains("output tokens · 1 tool call(s) · session total"),
        "{usage}"
    );
    assert!(
        usage.ends_with("output tokens · 1 tool call(s) · session lookup-1"),
        "{usage}"
    );
}

/// Ctrl-C typed on a terminal: `weft run` under a pseudo-terminal (util-linux `script`) gets the
/// ^C character, which the terminal turns into SIGINT for weft (a command tool runs in its own
/// process group, so the tool does not get it from the terminal). The run names its session when
/// it starts, stops with the resume hint, and `weft resume` finishes it.
#[test]
fn ctrl_c_typed_on_a_terminal_leaves_a_session_that_resume_finishes() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: slow
mode: react
model: scripted:script.yaml
tools:
  - name: wait
    description: Waits a long time (idempotent).
    idempotent: true
    command: ["sh", "-c", "cat > /dev/null; touch started; sleep 30; echo '{}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: wait, arguments: {} } ]\n- text: \"Waited.\"\n",
    )
    .unwrap();
    let inner = format!(
        "stty cols 100 rows 30; exec '{}' run agent.yaml wait --db w.db 2>&1",
        env!("CARGO_BIN_EXE_weft")
    );
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &inner, "/dev/null"])
        .current_dir(d)
        .env_remove("WEFT_DB")
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("util-linux `script` is needed for this test: {e}"));
    wait_for(&d.join("started"));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\x03").unwrap();
    stdin.flush().unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{shown}");
    let line = shown
        .lines()
        .find(|l| l.contains("interrupted: session "))
        .unwrap_or_else(|| panic!("no interruption line:\n{shown}"));
    let id = line[line.find("interrupted: session ").unwrap() + "interrupted: session ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    // The session was named when the run started, before the interruption.
    assert!(
        shown.find(&id).unwrap() < shown.find("interrupted: session ").unwrap(),
        "{shown}"
    );
    // Stopped: running, but no process drives it, and `sessions show` says how to continue.
    let out = weft(d)
        .args(["sessions", "show", &id, "--db", "w.db"])
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert!(
        shown.contains("no process drives it")
            && shown.contains(&format!("weft resume --db w.db {id}")),
        "{shown}"
    );
    std::fs::write(
        d.join("agent.yaml"),
        std::fs::read_to_string(d.join("agent.yaml"))
            .unwrap()
            .replace("sleep 30", "true"),
    )
    .unwrap();
    let out = weft(d)
        .args(["resume", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "Waited.");
    // The call that ran again is shown by its tool and arguments, not by its id.
    let err = text(&out.stderr);
    assert!(err.contains("✓ wait {}"), "{err}");
}
