//! `weft batch`, through the binary: one session per record, failures in the dead-letter file
//! with their reasons, and a batch interrupted with Ctrl-C then run again finishes every record
//! without running a finished one (or a finished call) twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

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
    sandbox: { write: [.] }
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
}

/// A plan agent whose one tool charges the record's `k` (not idempotent): each charge is a line
/// of `charges.txt`, so a record run twice is seen.
fn charger(d: &Path) {
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: charger
mode: plan
model: scripted:script.yaml
review_responses: false
tools:
  - name: charge
    description: Charges the record (not idempotent).
    command: ["sh", "-c", "a=$(cat); printf '%s\n' \"$a\" >> charges.txt; echo '{\"charged\": true}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        r#"plan:
  - json:
      plan:
        - { _id: c, _tool: charge, k: "†input.k", _outputPath: "†state.c" }
review:
  - json: { decision: FINAL_RESPONSE, reason: "charged" }
respond:
  - text: "Charged."
"#,
    )
    .unwrap();
}

/// How many times each record's `k` was charged.
fn charges(d: &Path) -> BTreeMap<i64, usize> {
    let mut n = BTreeMap::new();
    for l in std::fs::read_to_string(d.join("charges.txt"))
        .unwrap_or_default()
        .lines()
    {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        *n.entry(v["k"].as_i64().unwrap()).or_default() += 1;
    }
    n
}

fn record(k: i64) -> String {
    format!("{{\"task\": \"charge {k}\", \"input\": {{\"k\": {k}}}}}")
}

/// Runs `weft batch agent.yaml recs.jsonl` with `extra`; its exit code and stderr.
fn batch(d: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = weft(d)
        .args(["batch", "agent.yaml", "recs.jsonl", "--concurrency", "3"])
        .args(extra)
        .output()
        .unwrap();
    (out.status.code(), text(&out.stderr))
}

fn write_records(d: &Path, lines: &[String]) {
    std::fs::write(d.join("recs.jsonl"), lines.join("\n") + "\n").unwrap();
}

/// The results and failures of the last run, by what this run did with them.
fn did(d: &Path, what: &str) -> Vec<serde_json::Value> {
    lines(&d.join("recs.results.jsonl"))
        .into_iter()
        .chain(lines(&d.join("recs.failed.jsonl")))
        .filter(|r| r["this_run"] == what)
        .collect()
}

#[test]
fn a_finished_batch_edited_every_way_charges_no_record_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    charger(d);
    // 50 lines; 7, 19 and 33 cannot be read (no task), so they have no session.
    let mut file: Vec<String> = (1..=50)
        .map(|l| {
            if [7, 19, 33].contains(&l) {
                "{\"input\": {}}".to_owned()
            } else {
                record(l)
            }
        })
        .collect();
    write_records(d, &file);
    let (code, err) = batch(d, &[]);
    assert_eq!(code, Some(1), "three lines are bad: {err}");
    assert!(err.contains("47 done, 3 failed"), "{err}");
    let once: BTreeMap<i64, usize> = (1..=50)
        .filter(|k| ![7, 19, 33].contains(k))
        .map(|k| (k, 1))
        .collect();
    assert_eq!(charges(d), once);

    // A line inserted at the top: every record moves down one line, the last onto a new line.
    file.insert(0, record(100));
    write_records(d, &file);
    let (code, err) = batch(d, &[]);
    let mut expected = once.clone();
    expected.insert(100, 1);
    assert_eq!(charges(d), expected, "{err}");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("48 done, 3 failed"), "{err}");
    assert!(err.contains("started (new records): 1 (line 1)"), "{err}");
    assert_eq!(did(d, "earlier").len(), 47);

    // Records removed: nothing runs; the command says their sessions have no record now.
    file.retain(|l| *l != record(2) && *l != record(3));
    write_records(d, &file);
    let (_, err) = batch(d, &[]);
    assert!(err.contains("46 done, 3 failed"), "{err}");
    assert!(
        err.contains("2 session(s) of this batch have no record in the file now"),
        "{err}"
    );
    assert!(!err.contains("started"), "{err}");
    assert_eq!(charges(d), expected);

    // Reordered: nothing runs.
    file.reverse();
    write_records(d, &file);
    let (_, err) = batch(d, &[]);
    assert!(err.contains("46 done, 3 failed"), "{err}");
    assert!(!err.contains("started"), "{err}");
    assert_eq!(charges(d), expected);

    // Duplicated: a copy of a record, as it is and with keys in another order and other
    // spacing, is refused (the record runs once) and says which line it repeats.
    let at = file.iter().position(|l| *l == record(5)).unwrap() + 1;
    file.push(record(5));
    file.push("{ \"input\":{\"k\":5},   \"task\":\"charge 5\" }".to_owned());
    write_records(d, &file);
    let (code, err) = batch(d, &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("46 done, 5 failed"), "{err}");
    assert!(err.contains("repeats an earlier line"), "{err}");
    let refused = did(d, "refused");
    let copies: Vec<_> = refused
        .iter()
        .filter(|r| r["refused"] == "repeats an earlier line")
        .collect();
    assert_eq!(copies.len(), 2, "{refused:?}");
    assert!(
        copies
            .iter()
            .all(|r| r["error"].as_str().unwrap().contains(&format!("line {at}"))),
        "{copies:?}"
    );
    assert_eq!(charges(d), expected);

    // Changed: the digest identity makes it another record, said to be new (and the old one's
    // session said to have no record); every other record is left alone.
    let i = file.iter().position(|l| *l == record(10)).unwrap();
    file[i] = "{\"task\": \"charge 10 in euros\", \"input\": {\"k\": 10}}".to_owned();
    write_records(d, &file);
    let (_, err) = batch(d, &[]);
    assert!(
        err.contains(&format!("started (new records): 1 (line {})", i + 1)),
        "{err}"
    );
    assert!(
        err.contains("3 session(s) of this batch have no record in the file now"),
        "{err}"
    );
    expected.insert(10, 2);
    assert_eq!(charges(d), expected);
}

#[test]
fn a_batch_keyed_by_an_id_field_refuses_a_changed_record() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    charger(d);
    let rec = |k: i64, task: &str| {
        format!("{{\"id\": \"order-{k}\", \"task\": \"{task}\", \"input\": {{\"k\": {k}}}}}")
    };
    let mut file: Vec<String> = (1..=12).map(|k| rec(k, &format!("charge {k}"))).collect();
    write_records(d, &file);
    // First by content; then by id, which finds the same sessions by their content.
    let (code, err) = batch(d, &[]);
    assert_eq!(code, Some(0), "{err}");
    let once: BTreeMap<i64, usize> = (1..=12).map(|k| (k, 1)).collect();
    assert_eq!(charges(d), once);
    let (code, err) = batch(d, &["--id-field", "id"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("started"), "{err}");
    assert_eq!(did(d, "earlier").len(), 12);
    assert_eq!(charges(d), once);

    // A new record at the top, the rest reordered: only the new one runs, under its id.
    file.reverse();
    file.insert(0, rec(13, "charge 13"));
    write_records(d, &file);
    let (code, err) = batch(d, &["--id-field", "id"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("started (new records): 1 (line 1)"), "{err}");
    let started = did(d, "started");
    assert_eq!(started[0]["session"], "batch-recs-id-order-13");
    let mut expected = once.clone();
    expected.insert(13, 1);
    assert_eq!(charges(d), expected);

    // Changed under its id (both for a session started by id and one started by content), the
    // same id twice with other content, and no id: each refused with its reason; none runs.
    let changed = |file: &mut Vec<String>, k: i64| {
        let i = file
            .iter()
            .position(|l| *l == rec(k, &format!("charge {k}")))
            .unwrap();
        file[i] = rec(k, &format!("charge {k} in euros"));
    };
    changed(&mut file, 13);
    changed(&mut file, 4);
    file.push(rec(7, "charge 7 again"));
    file.push(record(99));
    write_records(d, &file);
    let (code, err) = batch(d, &["--id-field", "id"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("11 done, 4 failed"), "{err}");
    assert!(!err.contains("started"), "{err}");
    // A refused record's session is still its record's: none is said to have been removed.
    assert!(!err.contains("no record in the file now"), "{err}");
    let refused = did(d, "refused");
    let why = |what: &str| -> Vec<String> {
        refused
            .iter()
            .filter(|r| r["refused"] == what)
            .map(|r| r["error"].as_str().unwrap().to_owned())
            .collect()
    };
    let changed = why("changed");
    assert_eq!(changed.len(), 2, "{refused:?}");
    assert!(changed.iter().any(|e| e.contains("batch-recs-id-order-13")));
    assert!(changed.iter().all(|e| e.contains("another version")));
    assert_eq!(why("id of an earlier line").len(), 1, "{refused:?}");
    assert!(why("no id")[0].contains("--id-field id"), "{refused:?}");
    assert_eq!(charges(d), expected);
}

#[test]
fn a_batch_started_keyed_by_line_keeps_its_finished_records_after_its_lines_move() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    charger(d);
    // Sessions as an older weft made them: record N of batch-recs is session batch-recs-N,
    // with the record in its metadata.
    let mut file: Vec<String> = (1..=6).map(record).collect();
    for (n, r) in file.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(r).unwrap();
        let out = weft(d)
            .args(["run", "agent.yaml", v["task"].as_str().unwrap()])
            .args(["--id", &format!("batch-recs-{}", n + 1)])
            .args(["--input", &v["input"].to_string()])
            .args(["--metadata", &json!({ "weft_batch_record": v }).to_string()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let once: BTreeMap<i64, usize> = (1..=6).map(|k| (k, 1)).collect();
    assert_eq!(charges(d), once);
    // A new record and a bad line at the top move every record two lines down.
    file.insert(0, "not json".to_owned());
    file.insert(0, record(7));
    write_records(d, &file);
    let (code, err) = batch(d, &[]);
    let mut expected = once.clone();
    expected.insert(7, 1);
    assert_eq!(charges(d), expected, "{err}");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("7 done, 1 failed"), "{err}");
    assert!(err.contains("started (new records): 1 (line 1)"), "{err}");
    // Each old record is reported from its old session.
    for r in did(d, "earlier") {
        let line = r["line"].as_u64().unwrap();
        assert_eq!(r["session"], format!("batch-recs-{}", line - 2), "{r}");
        assert_eq!(r["answer"], "Charged.");
    }
    assert_eq!(did(d, "earlier").len(), 6);
}

/// `--user` (or `WEFT_USER`) gives every session of the batch that user.
#[test]
fn a_batch_runs_as_its_user() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let agent = examples.join("refund-desk.yaml");
    let records = examples.join("records/refunds.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["--db", "b.db", "batch"])
        .arg(&agent)
        .arg(&records)
        .args(["--out", "out.jsonl", "--dead-letter", "failed.jsonl"])
        .current_dir(d)
        .env_remove("WEFT_DB")
        .env("WEFT_USER", "erin")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "--db", "b.db", "sessions", "list", "--user", "erin", "--json",
        ])
        .current_dir(d)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
}
