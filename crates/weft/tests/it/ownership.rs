//! One owner per session, through the binary: `weft resume` of a session another live process
//! is running is refused naming that process; once the process is gone (killed), the session is
//! taken over at once; `--force` takes over from an owner that is alive but stuck; another
//! process cancels or pauses a running session.
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
    weft_testkit::wait_for_file(path, Duration::from_secs(60));
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
    sandbox: { write: [.] }
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
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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

fn events_of(d: &Path, id: &str) -> Vec<serde_json::Value> {
    let out = weft(d)
        .args(["sessions", "events", id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn cancel_from_another_process_stops_the_run_and_fails_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (child, id) = slow_run(d);
    // The call runs a while before it is cancelled.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let out = weft(d)
        .args(["sessions", "cancel", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("session {id} stopped")));
    let run = child.wait_with_output().unwrap();
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cancelled: session {id}")), "{err}");
    let evs = events_of(d, &id);
    let finished = evs
        .iter()
        .find(|e| e["type"] == "tool_call_finished")
        .unwrap();
    assert_eq!(finished["outcome"]["error"]["kind"], "cancelled");
    // It is recorded with how long it ran before it was cancelled, not 0 ms: at least the wait
    // above, at most from its start to the cancellation's record.
    let started = evs
        .iter()
        .find(|e| e["type"] == "tool_call_started")
        .unwrap();
    let ran = finished["duration_ms"].as_i64().unwrap();
    let span = finished["ts"].as_i64().unwrap() - started["ts"].as_i64().unwrap();
    assert!((400..=span).contains(&ran), "ran {ran} ms of {span} ms");
    assert!(!err.contains(" 0 ms"), "{err}");
    let last = evs.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["status"].as_str()),
        (Some("run_finished"), Some("failed"))
    );
    assert!(last["error"].as_str().unwrap().contains("cancelled"));
    std::fs::write(d.join("release"), "").unwrap();
    // Nothing is left to cancel.
    let out = weft(d)
        .args(["sessions", "cancel", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Pause stops at the next safe point: the call in flight is let finish and recorded, no new
/// model or tool call starts, and `weft resume` goes on from there.
#[test]
fn pause_from_another_process_stops_the_run_and_resume_finishes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (child, id) = slow_run(d);
    let pause = weft(d)
        .args(["sessions", "pause", &id, "--db", "w.db"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The owner reads requests twice a second: by now it has the pause, and the call goes on.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !events_of(d, &id)
            .iter()
            .any(|e| e["type"] == "tool_call_finished"),
        "the call was cut short"
    );
    std::fs::write(d.join("release"), "").unwrap();
    let out = pause.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("weft resume --db w.db {id}")));
    let run = child.wait_with_output().unwrap();
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(130), "{err}");
    assert!(err.contains(&format!("paused: session {id}")), "{err}");
    // The call finished and was recorded; the model was not asked again.
    let evs = events_of(d, &id);
    let finished: Vec<_> = evs
        .iter()
        .filter(|e| e["type"] == "tool_call_finished")
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(
        finished[0]["outcome"]["output"]["waited"], true,
        "{:?}",
        finished[0]
    );
    assert_eq!(
        evs.iter().filter(|e| e["type"] == "model_replied").count(),
        1
    );
    // Paused, not ended: a pause with no process to ask says so, and resume finishes it.
    let out = weft(d)
        .args(["sessions", "pause", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not being run by any process"));
    let out = weft(d)
        .args(["resume", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "done");
}

#[test]
fn a_session_no_process_runs_is_cancelled_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (mut child, id) = slow_run(d);
    signal(&child, "-KILL");
    child.wait().unwrap();
    std::fs::write(d.join("release"), "").unwrap();
    let out = weft(d)
        .args(["sessions", "cancel", &id, "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let last = events_of(d, &id).pop().unwrap();
    assert_eq!(last["status"], "failed");
}

/// Cancelling a run kills its tool's whole process group, not only the process weft started: a
/// grandchild the tool left running (here a `sleep` in the background) is gone too.
#[test]
fn cancel_kills_the_tools_whole_process_group() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: spawner
mode: react
model: scripted:script.yaml
tools:
  - name: spawn
    description: Starts a helper and waits for it.
    command: ["sh", "-c", "cat > /dev/null; sleep 300 & echo $! > helper.pid; wait"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: spawn, arguments: {} } ]\n- text: done\n",
    )
    .unwrap();
    let child = weft(d)
        .args(["run", "agent.yaml", "go", "--db", "w.db", "--id", "s-group"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&d.join("helper.pid"));
    std::thread::sleep(Duration::from_millis(100));
    let helper = std::fs::read_to_string(d.join("helper.pid"))
        .unwrap()
        .trim()
        .to_owned();
    assert!(Path::new(&format!("/proc/{helper}")).exists());
    let out = weft(d)
        .args(["sessions", "cancel", "s-group", "--db", "w.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run = child.wait_with_output().unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    let began = Instant::now();
    while Path::new(&format!("/proc/{helper}")).exists() {
        // A killed process lingers as a zombie until its parent (here init) reaps it.
        let state = std::fs::read_to_string(format!("/proc/{helper}/stat")).unwrap_or_default();
        if state.contains(") Z") {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the tool's helper {helper} outlived the cancelled call"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A tool's process belongs to the weft that started it: weft killed with SIGKILL one second
/// into a call of a tool that sleeps 5 s and then charges (appends to a file) takes the tool
/// with it (`setpriv --pdeathsig KILL`), so the charge never lands after another process could
/// have taken the session over. A second `weft run` with the session's id then says to resume
/// it, and `weft resume` does not charge again (the call's outcome is unknown).
#[cfg(target_os = "linux")]
#[test]
fn a_killed_weft_takes_its_tools_process_with_it() {
    assert!(
        Command::new("setpriv")
            .arg("--help")
            .output()
            .is_ok_and(|o| text(&o.stdout).contains("--pdeathsig")),
        "this test needs util-linux's setpriv with --pdeathsig (apt-get install util-linux)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: charger
mode: react
model: scripted:script.yaml
tools:
  - name: charge
    description: Charges the customer (not idempotent).
    command: [python3, -c, "import os, time; open('started', 'w').write(str(os.getpid())); time.sleep(5); open('charged', 'a').write('charged\\n'); print('{}')"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: charge, arguments: {} } ]\n- text: done\n",
    )
    .unwrap();
    let mut child = weft(d)
        .args([
            "run",
            "agent.yaml",
            "charge",
            "--db",
            "w.db",
            "--id",
            "s-killed",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&d.join("started"));
    std::thread::sleep(Duration::from_millis(100));
    let tool = std::fs::read_to_string(d.join("started"))
        .unwrap()
        .trim()
        .to_owned();
    std::thread::sleep(Duration::from_secs(1));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The tool would have charged 4 s from now.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        !d.join("charged").exists(),
        "the tool's process outlived the killed weft and charged"
    );
    let stat = std::fs::read_to_string(format!("/proc/{tool}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "the tool's process {tool} is still there: {stat}"
    );

    // The id is taken by a session that stopped while running: say how to go on with it.
    let out = weft(d)
        .args([
            "run",
            "agent.yaml",
            "charge",
            "--db",
            "w.db",
            "--id",
            "s-killed",
        ])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("session s-killed already exists: it stopped before it finished; continue it with `weft resume --db w.db s-killed`"),
        "{err}"
    );
    let out = weft(d)
        .args(["resume", "s-killed", "--db", "w.db"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!d.join("charged").exists(), "the resumed run charged again");
}
