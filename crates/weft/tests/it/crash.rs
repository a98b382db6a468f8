//! Crash recovery: a multi-step plan-mode agent (scripted model, command tools that append to a
//! file) is killed with SIGKILL at random points and resumed, again and again. Nothing completed
//! may be lost or repeated, no non-idempotent tool may run twice, and every run must end
//! completed, with any call whose outcome is unknown recorded as such. (The two calls of the
//! non-idempotent tool differ in their arguments: the same call again would be a repeat, refused.)
//! And a ReAct agent whose model repeats a call of a tool that is not idempotent, killed between
//! the two calls and resumed: the repeat is still refused. And one killed after reading untrusted
//! data and before obeying it: the protected call is still refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const RUNS: usize = 100;

/// Steps: (id, idempotent). s3 and s4 run in parallel.
const STEPS: &[(&str, bool)] = &[
    ("s1", true),
    ("s2", false),
    ("s3", true),
    ("s4", true),
    ("s5", false),
    ("s6", true),
];

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

fn write_agent(dir: &Path) {
    let tool = |name: &str, idempotent: bool, parallel: bool| {
        format!(
            r#"  - name: {name}
    description: Append a line to the log.
    command: ["sh", "-c", "cat > /dev/null; printf '%s\\n' \"$WEFT_STEP_ID\" >> \"$LOG\"; sleep 0.03; echo '{{\"ok\": true}}'"]
    env: {{ LOG: "{log}" }}
    sandbox: {{ write: [.] }}
    idempotent: {idempotent}
    parallel: {parallel}
"#,
            log = dir.join("log.txt").display()
        )
    };
    let mut tools = String::new();
    tools.push_str(&tool("appendSafe", true, true));
    tools.push_str(&tool("appendOnce", false, false));
    let agent = format!(
        "name: crashy\nmode: plan\nmodel: scripted:script.yaml\nlimits: {{ max_waves: 20 }}\ntools:\n{tools}"
    );
    std::fs::write(dir.join("agent.yaml"), agent).unwrap();
    let script = r#"plan:
  - json:
      plan:
        - { _id: s1, _tool: appendSafe, _outputPath: "†state.s1" }
        - { _id: s2, _tool: appendOnce, entry: s2, _dependsOn: [s1], _outputPath: "†state.s2" }
        - { _id: s3, _tool: appendSafe, _dependsOn: [s2], _parallel: true, _outputPath: "†state.s3" }
        - { _id: s4, _tool: appendSafe, _dependsOn: [s2], _parallel: true, _outputPath: "†state.s4" }
        - { _id: s5, _tool: appendOnce, entry: s5, _dependsOn: [s3, s4], _outputPath: "†state.s5" }
        - { _id: s6, _tool: appendSafe, _dependsOn: [s5], _outputPath: "†state.s6" }
review:
  - { json: { decision: CONTINUE, reason: "go on" }, repeat: 30 }
respond:
  - text: "done"
response_review:
  - json: { verdict: ACCEPT }
"#;
    std::fs::write(dir.join("script.yaml"), script).unwrap();
}

fn spawn(args: &[&str], db: &Path, dir: &Path) -> Child {
    weft()
        .args(args)
        .arg("--db")
        .arg(db)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A small deterministic generator (xorshift), so a failure can be replayed from its seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs the child for up to `kill_after`, then SIGKILLs it. Returns its exit code if it ended
/// by itself.
fn run_or_kill(mut child: Child, kill_after: Option<Duration>) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if let Some(k) = kill_after
            && start.elapsed() >= k
        {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            return None;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("a weft process ran for more than a minute");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn session_status(db: &Path, dir: &Path, id: &str) -> Option<Value> {
    let out = weft()
        .args(["sessions", "show", id, "--json", "--db"])
        .arg(db)
        .current_dir(dir)
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn sigkill_at_random_points_never_loses_or_repeats_work() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut kills = 0;
    let mut unknown_outcomes = 0;
    for run in 0..RUNS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write_agent(dir);
        let db = dir.join("weft.db");
        let id = format!("crash-{run}");
        // The first process: killed after a random time (or left to finish, sometimes).
        let mut exit = None;
        let mut attempts = 0;
        while exit.is_none() {
            attempts += 1;
            assert!(attempts < 50, "run {run}: no progress after 50 processes");
            // The first process of a run is always killed early; later ones at random times,
            // and one in three is left to finish.
            let kill_after = match (attempts, rng.below(3)) {
                (1, _) => Some(Duration::from_millis(rng.below(150))),
                (_, 0) => None,
                _ => Some(Duration::from_millis(rng.below(300))),
            };
            let exists = session_status(&db, dir, &id)
                .is_some_and(|v| v["events"].as_u64().unwrap_or(0) > 0);
            let child = if exists {
                spawn(&["resume", &id], &db, dir)
            } else {
                spawn(&["run", "agent.yaml", "go", "--id", &id], &db, dir)
            };
            exit = run_or_kill(child, kill_after);
            if exit.is_none() {
                kills += 1;
            }
            // A resume of a session that has already ended is refused (exit 2): that is an end.
            if let Some(code) = exit
                && code == 2
            {
                let s = session_status(&db, dir, &id).expect("the session exists");
                assert_ne!(
                    s["status"], "running",
                    "run {run}: resume refused a running session: {s}"
                );
            }
        }
        let show = session_status(&db, dir, &id).expect("the session exists");
        assert_eq!(show["status"], "completed", "run {run}: {show}");
        let log = std::fs::read_to_string(dir.join("log.txt")).unwrap_or_default();
        let mut lines: HashMap<&str, usize> = HashMap::new();
        for l in log.lines() {
            *lines.entry(l).or_default() += 1;
        }
        // The events: each step completes at most once; an unknown outcome is explicit.
        let out = weft()
            .args(["sessions", "events", &id, "--db"])
            .arg(&db)
            .current_dir(dir)
            .output()
            .unwrap();
        let events: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut completed: HashMap<String, usize> = HashMap::new();
        let mut unknown: Vec<String> = Vec::new();
        for e in &events {
            match e["type"].as_str() {
                Some("step_completed") => {
                    *completed
                        .entry(e["step"].as_str().unwrap().to_owned())
                        .or_default() += 1
                }
                Some("step_failed") if e["error"]["kind"] == "unknown_outcome" => {
                    unknown.push(e["step"].as_str().unwrap().to_owned());
                }
                _ => {}
            }
        }
        let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "run {run}: the log has gaps"
        );
        let plan = show["plan"].as_array().expect("a plan");
        for (step, idempotent) in STEPS {
            let n_done = completed.get(*step).copied().unwrap_or(0);
            assert!(
                n_done <= 1,
                "run {run}: step {step} completed {n_done} times"
            );
            let ran = lines.get(step).copied().unwrap_or(0);
            let status = plan
                .iter()
                .find(|s| s["_id"] == *step)
                .map(|s| s["status"].clone())
                .unwrap();
            if !idempotent {
                assert!(
                    ran <= 1,
                    "run {run}: non-idempotent step {step} ran {ran} times"
                );
            }
            if n_done == 1 {
                assert_eq!(
                    status, "COMPLETED",
                    "run {run}: step {step} completed but shows {status}"
                );
                assert!(ran >= 1, "run {run}: step {step} completed without running");
            }
            if unknown.iter().any(|u| u == step) {
                assert_eq!(
                    status, "FAILED",
                    "run {run}: {step} had an unknown outcome but shows {status}"
                );
                assert!(
                    !idempotent,
                    "run {run}: idempotent step {step} was given an unknown outcome"
                );
            }
            if status != "COMPLETED" {
                // Not completed: either its own outcome is unknown, or it was blocked by one.
                assert!(
                    !unknown.is_empty(),
                    "run {run}: step {step} is {status} without an unknown-outcome decision"
                );
            }
        }
        unknown_outcomes += unknown.len();
    }
    eprintln!("{RUNS} runs, {kills} SIGKILLs, {unknown_outcomes} unknown-outcome decisions");
    assert!(kills >= RUNS, "too few kills to mean anything: {kills}");
}

/// A ReAct agent calls `refund` (not idempotent; each real run appends a line to
/// `refunds.txt`), then, after a slow think, the same call again. `weft run` is SIGKILLed in
/// that think and `weft resume` goes on: the repeat is refused from the log alone.
#[test]
fn a_repeat_after_sigkill_and_resume_is_still_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let count = dir.join("refunds.txt");
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            r#"name: refunder
mode: react
model: scripted:script.yaml
tools:
  - name: refund
    description: Refund an order (not idempotent).
    command: ["sh", "-c", "cat > /dev/null; echo run >> \"$COUNT\"; echo '{{\"refunded\": true}}'"]
    env: {{ COUNT: "{}" }}
    sandbox: {{ write: [.] }}
"#,
            count.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "- tool_calls: [ { name: refund, arguments: { order: o1 } } ]\n- { delay_ms: 3000, tool_calls: [ { name: refund, arguments: { order: o1 } } ] }\n- text: Refunded once.\n",
    )
    .unwrap();
    let runs = || {
        std::fs::read_to_string(&count)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let events = killed_in_a_think_and_resumed(dir, "agent.yaml", "r1", || runs() > 0);
    assert_eq!(runs(), 1, "the refund ran again after the resume");
    let refused: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_blocked" && e["repeats"].is_string())
        .collect();
    assert_eq!(refused.len(), 1, "{events:?}");
    assert_eq!(refused[0]["tool"], "refund");
}

/// A ReAct agent reads an untrusted inbox, then, after a slow think, obeys it: a transfer to
/// the account the inbox names, whose `recipient` is protected (`trust:`). `weft run` is
/// SIGKILLed in that think and `weft resume` goes on: the inbox's label is read from the log, so
/// the transfer is refused and never runs.
#[test]
fn untrusted_data_is_still_refused_after_sigkill_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    crate::untrusted::payer_agent(dir);
    let events =
        killed_in_a_think_and_resumed(dir, "payer.yaml", "p1", || dir.join("inbox.read").exists());
    crate::untrusted::assert_refused(dir, &events);
}

/// Runs `agent` (a file in `dir`) as session `id` until `acted` holds (its first call ran),
/// SIGKILLs `weft run` 600 ms later (while its scripted model thinks), resumes the session to
/// its end and checks that it completed; returns its events.
fn killed_in_a_think_and_resumed(
    dir: &Path,
    agent: &str,
    id: &str,
    acted: impl Fn() -> bool,
) -> Vec<Value> {
    let db = dir.join("weft.db");
    let mut child = spawn(&["run", agent, "go", "--id", id], &db, dir);
    let start = Instant::now();
    while !acted() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the first call did not run"
        );
        assert!(child.try_wait().unwrap().is_none(), "weft run ended early");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        child.try_wait().unwrap().is_none(),
        "weft run ended before the kill"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let exit = run_or_kill(spawn(&["resume", id], &db, dir), None);
    assert_eq!(exit, Some(0));
    let show = session_status(&db, dir, id).expect("the session exists");
    assert_eq!(show["status"], "completed", "{show}");
    let out = weft()
        .args(["sessions", "events", id, "--db"])
        .arg(&db)
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
