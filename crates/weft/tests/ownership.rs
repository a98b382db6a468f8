//! One owner per session, through the binary: `weft resume` of a session another live process
//! is running is refused naming that process; once the process is gone (killed), the session is
//! taken over at once; `--force` takes over from an owner that is alive but stuck.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn weft(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.current_dir(dir).env_remove("WEFT_DB");
    c
}

fn wait_for(path: &Path) {
    let began = Instant::now();
    while !path.exists() {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Starts a run whose one tool call blocks until `release` exists; returns it and its session.
fn slow_run(d: &Path) -> (Child, String) {
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: slow
mode: react
model: scripted:script.yaml
tools:
  - name: wait
    description: Waits for the file `release` (idempotent).
    idempotent: true
    command: ["sh", "-c", "cat > /dev/null; touch started; while [ ! -e release ]; do sleep 0.05; done; echo '{\"waited\": true}'"]
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: wait, arguments: {} } ]\n- text: done\n",
    )
    .unwrap();
    let child = weft(d)
        .args([
            "run",
            "agent.yaml",
            "wait",
            "--db",
            "w.db",
            "--id",
            "s-owned",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&d.join("started"));
    (child, "s-owned".to_owned())
}

#[test]
fn resume_of_a_live_session_is_refused_and_a_killed_owners_session_is_taken_over() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (mut child, id) = slow_run(d);
    let out = weft(d)
        .args(["resume", &id, "--db", "w.db"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("session {id} is being run by pid {}", child.id()))
            && err.contains("--force"),
        "{err}"
    );
    // The owner dies without a word; its lease has not run out, but its process is gone.
    signal(&child, "-KILL");
    child.wait().unwrap();
    std::fs::write(d.join("release"), "").unwrap();
    let out = weft(d)
        .args(["resume", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "done");
}

#[test]
fn force_takes_over_from_an_owner_that_is_alive_but_stuck() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (mut child, id) = slow_run(d);
    // The owner is stopped, not gone: only --force takes the session from it.
    signal(&child, "-STOP");
    let out = weft(d)
        .args(["resume", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    std::fs::write(d.join("release"), "").unwrap();
    let out = weft(d)
        .args(["resume", &id, "--db", "w.db", "--force"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "done");
    signal(&child, "-KILL");
    child.wait().unwrap();
}
