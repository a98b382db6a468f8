//! `weft batch`, through the binary: one session per record, failures in the dead-letter file
//! with their reasons, and a batch interrupted with Ctrl-C then run again finishes every record
//! without running a finished one (or a finished call) twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn weft(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.current_dir(dir)
        .env_remove("WEFT_DB")
        .env("WEFT_DB", "b.db")
        .env("NO_COLOR", "1");
    c
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A react agent whose one tool posts to a ledger (not idempotent) and takes a moment.
fn agent(d: &Path) {
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: poster
mode: react
model: scripted:script.yaml
tools:
  - name: post
    description: Posts the task to the ledger (not idempotent), slowly.
    command: ["sh", "-c", "cat > /dev/null; sleep 0.2; echo \"$WEFT_SESSION_ID\" >> ledger.txt; echo '{\"posted\": true}'"]
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: post, arguments: {} } ]\n- text: \"Posted.\"\n",
    )
    .unwrap();
}

#[test]
fn a_batch_interrupted_and_run_again_finishes_without_repeating_a_record() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agent(d);
    let mut records: String = (1..=24)
        .map(|k| format!("{{\"task\": \"post {k}\", \"input\": {{\"k\": {k}}}}}\n"))
        .collect();
    records.push_str("{\"input\": {}}\n");
    std::fs::write(d.join("recs.jsonl"), records).unwrap();
    let child = weft(d)
        .args(["batch", "agent.yaml", "recs.jsonl", "--concurrency", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once a few records are done.
    let began = Instant::now();
    while lines(&d.join("recs.results.jsonl")).len() < 4 {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no record finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("run the same command again"), "{err}");
    let first = lines(&d.join("recs.results.jsonl")).len();
    assert!(first < 24, "the batch finished before it was interrupted");

    // Run again: every record ends; finished ones are reported, not run again.
    let out = weft(d)
        .args(["batch", "agent.yaml", "recs.jsonl", "--concurrency", "3"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "one record is bad: {err}");
    assert!(err.contains("24 done, 1 failed"), "{err}");
    let results = lines(&d.join("recs.results.jsonl"));
    assert_eq!(results.len(), 24);
    assert!(
        results
            .iter()
            .all(|r| r["status"] == "completed" && r["answer"] == "Posted.")
    );
    let dead = lines(&d.join("recs.failed.jsonl"));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["line"], 25);
    assert!(
        dead[0]["error"].as_str().unwrap().contains("recs.jsonl:25")
            && dead[0]["error"].as_str().unwrap().contains("\"task\""),
        "{dead:?}"
    );
    // Each record's post ran once at most (a call in flight at the interrupt was let finish and
    // recorded, or dropped and recorded with an unknown outcome), and every finished record's
    // post exactly once.
    let mut posts: BTreeMap<String, usize> = BTreeMap::new();
    for l in std::fs::read_to_string(d.join("ledger.txt"))
        .unwrap()
        .lines()
    {
        *posts.entry(l.to_owned()).or_default() += 1;
    }
    assert!(posts.values().all(|n| *n == 1), "{posts:?}");
    assert!(posts.len() >= 23, "{posts:?}");
    // A third run does nothing new.
    let before = std::fs::read_to_string(d.join("ledger.txt")).unwrap();
    let out = weft(d)
        .args(["batch", "agent.yaml", "recs.jsonl"])
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains("24 done, 1 failed"));
    assert_eq!(
        std::fs::read_to_string(d.join("ledger.txt")).unwrap(),
        before
    );
    // A records file that changed under the same name is refused record by record.
    std::fs::write(d.join("recs.jsonl"), "{\"task\": \"something else\"}\n").unwrap();
    let out = weft(d)
        .args(["batch", "agent.yaml", "recs.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let dead = lines(&d.join("recs.failed.jsonl"));
    assert!(
        dead[0]["error"].as_str().unwrap().contains("--name"),
        "{dead:?}"
    );
}
