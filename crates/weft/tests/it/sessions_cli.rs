//! Durable sessions through the `weft` binary: waiting and answering in a new process, plan and
//! tool approvals across processes, fork, list, show, prune, and clear errors for bad stores.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A temp dir with the fixtures copied in (tools write their log next to the agent).
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    dir
}

fn weft(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn session_id(stderr: &str) -> String {
    let at = stderr.find("session ").expect("a session id on stderr") + "session ".len();
    stderr[at..]
        .split(|c: char| c.is_whitespace() || c == ')' || c == ';')
        .next()
        .unwrap()
        .to_owned()
}

fn log_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("log.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn show(dir: &Path, id: &str) -> Value {
    let out = weft(dir, &["sessions", "show", id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_missing_argument_waits_and_a_new_process_continues_the_same_plan() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "ask-amount.yaml", "Refund my order"]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("How much should be refunded?"));
    let id = session_id(&text(&out.stderr));
    let s = show(d, &id);
    assert_eq!(s["status"], "waiting_for_user");
    assert_eq!(s["waiting"]["step"], "refund");
    assert_eq!(s["waiting"]["tool"], "issueRefund");
    assert_eq!(s["waiting"]["missing"], serde_json::json!(["amount"]));
    assert_eq!(
        s["waiting"]["partial_call"]["arguments"]["customerId"],
        "c1"
    );
    assert_eq!(s["plan"][0]["status"], "WAITING_FOR_USER");
    assert!(log_lines(d).is_empty(), "nothing ran before the answer");

    let out = weft(d, &["run", "ask-amount.yaml", "--session", &id, "50"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "Refunded 50 to c1.");
    let log = log_lines(d);
    assert_eq!(log.len(), 1, "the tool ran once: {log:?}");
    assert_eq!(log[0]["args"]["amount"], 50);
    let s = show(d, &id);
    assert_eq!(s["status"], "completed");
    assert_eq!(s["plan"][0]["status"], "COMPLETED");
    // The answer is logged in the session's events.
    let ev = weft(d, &["sessions", "events", &id]);
    assert!(text(&ev.stdout).contains("\"type\":\"user_replied\",\"text\":\"50\""));
}

#[test]
fn plan_approval_survives_a_new_process_and_rejection_ends_the_session() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "approve-plan.yaml", "note it"]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    let id = session_id(&text(&out.stderr));
    assert_eq!(show(d, &id)["waiting"]["kind"], "plan_approval");
    assert!(show(d, &id)["waiting"]["plan"].is_array());
    let out = weft(
        d,
        &["run", "approve-plan.yaml", "--session", &id, "approve"],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(log_lines(d).len(), 1);

    let out = weft(d, &["run", "approve-plan.yaml", "note it again"]);
    let id2 = session_id(&text(&out.stderr));
    let out = weft(
        d,
        &["run", "approve-plan.yaml", "--session", &id2, "reject"],
    );
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("rejected"));
    assert_eq!(log_lines(d).len(), 1, "a rejected plan never runs");
}

#[test]
fn tool_approval_granted_and_denied_across_processes() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "approve-tool.yaml", "send 10"]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("transfer"));
    let id = session_id(&text(&out.stderr));
    assert_eq!(show(d, &id)["waiting"]["kind"], "tool_approval");
    let out = weft(
        d,
        &["run", "approve-tool.yaml", "--session", &id, "approve"],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(log_lines(d).len(), 1, "approved: the tool ran");

    let out = weft(d, &["run", "approve-tool.yaml", "send 10 again"]);
    let id2 = session_id(&text(&out.stderr));
    let out = weft(
        d,
        &[
            "run",
            "approve-tool.yaml",
            "--session",
            &id2,
            "deny: not today",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(log_lines(d).len(), 1, "denied: the tool did not run");
    let ev = text(&weft(d, &["sessions", "events", &id2]).stdout);
    assert!(ev.contains("the user denied this call"), "{ev}");
}

#[test]
fn fork_copies_the_state_up_to_seq_and_leaves_the_original_untouched() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "ask-amount.yaml", "Refund my order"]);
    let id = session_id(&text(&out.stderr));
    weft(d, &["run", "ask-amount.yaml", "--session", &id, "50"]);
    let original = show(d, &id);
    let n = original["events"].as_u64().unwrap();
    assert!(n > 6);
    // Fork just after the plan was accepted.
    let events: Vec<Value> = text(&weft(d, &["sessions", "events", &id]).stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = events
        .iter()
        .find(|e| e["type"] == "plan_accepted")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let out = weft(d, &["sessions", "fork", &id, "--at", &at.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let fork = text(&out.stdout).trim().to_owned();
    assert_ne!(fork, id);
    let f = show(d, &fork);
    assert_eq!(f["parent_id"], id);
    assert_eq!(f["events"].as_u64().unwrap(), at);
    assert_eq!(f["status"], "running");
    assert_eq!(f["plan"][0]["status"], "PENDING");
    let fork_events = text(&weft(d, &["sessions", "events", &fork]).stdout);
    assert!(fork_events.contains(&format!("\"session_id\":\"{fork}\"")));
    assert!(fork_events.contains(&format!("\"parent_id\":\"{id}\"")));
    // The original is untouched.
    let again = show(d, &id);
    assert_eq!(again["events"], original["events"]);
    assert_eq!(again["status"], "completed");
    // The fork goes on by itself: it asks again, independently of the original.
    let out = weft(d, &["resume", &fork]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert_eq!(show(d, &fork)["status"], "waiting_for_user");
    assert_eq!(show(d, &id)["events"], original["events"]);
    // A fork point outside the log is refused.
    let out = weft(d, &["sessions", "fork", &id, "--at", "99999"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn list_filters_show_and_prune() {
    let dir = workdir();
    let d = dir.path();
    weft(d, &["run", "ask-amount.yaml", "Refund", "--user", "ada"]);
    weft(d, &["run", "approve-plan.yaml", "note", "--user", "bob"]);
    let out = weft(d, &["sessions", "list", "--user", "ada", "--json"]);
    let rows: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["agent"], "ask-amount");
    let out = weft(
        d,
        &["sessions", "list", "--status", "waiting_for_user", "--json"],
    );
    assert_eq!(text(&out.stdout).lines().count(), 2);
    let out = weft(d, &["sessions", "list", "--status", "completed", "--json"]);
    assert_eq!(text(&out.stdout).lines().count(), 0);
    let out = weft(d, &["sessions", "list", "--status", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let out = weft(d, &["sessions", "prune", "--older-than", "1h"]);
    assert!(text(&out.stdout).contains("pruned 0"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Both wait for a person: kept unless asked.
    let out = weft(d, &["sessions", "prune", "--older-than", "10ms"]);
    assert!(
        text(&out.stdout).contains("pruned 0"),
        "{}",
        text(&out.stdout)
    );
    let out = weft(
        d,
        &[
            "sessions",
            "prune",
            "--older-than",
            "10ms",
            "--include-active",
        ],
    );
    assert!(
        text(&out.stdout).contains("pruned 2"),
        "{}",
        text(&out.stdout)
    );
    let out = weft(d, &["sessions", "list", "--json"]);
    assert_eq!(text(&out.stdout).lines().count(), 0);
}

#[test]
fn bad_stores_give_clear_errors() {
    let dir = workdir();
    let d = dir.path();
    // No database yet: reading commands refuse rather than show an empty list.
    let out = weft(d, &["sessions", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no database"),
        "{}",
        text(&out.stderr)
    );
    // A corrupt file.
    std::fs::write(
        d.join("bad.db"),
        b"this is not a database at all, not even close........",
    )
    .unwrap();
    let out = weft(d, &["sessions", "list", "--db", "bad.db"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.db") && !err.contains("panicked"), "{err}");
    // PostgreSQL that is not there.
    let out = weft(
        d,
        &[
            "sessions",
            "list",
            "--db",
            "postgres://postgres@127.0.0.1:1/none",
        ],
    );
    // A store that cannot be reached is not bad input: exit 4, and the database's error is
    // said once, not once per layer that carried it.
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("cannot connect to PostgreSQL at 127.0.0.1:1") && !err.contains("panicked"),
        "{err}"
    );
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // An unknown session.
    weft(d, &["run", "approve-plan.yaml", "x"]);
    let out = weft(d, &["sessions", "show", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("nope"));
}

/// The list's columns are as wide as their widest value: a long id (a child session's) does not
/// push the rest of its row out of line; each session's task is the last column.
#[test]
fn the_list_aligns_its_columns_whatever_the_ids() {
    let dir = workdir();
    let d = dir.path();
    let long = "a-session-id-much-longer-than-a-uuid-0123456789abcdef";
    weft(d, &["run", "ask-amount.yaml", "Refund", "--id", "short"]);
    weft(d, &["run", "approve-plan.yaml", "note", "--id", long]);
    let out = weft(d, &["sessions", "list"]);
    let shown = text(&out.stdout);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown}");
    let col = |line: &str, word: &str| {
        line.find(word)
            .unwrap_or_else(|| panic!("no {word} in {line}"))
    };
    let (agent_at, status_at) = (col(lines[0], "agent"), col(lines[0], "status"));
    let task_at = col(lines[0], "task");
    for line in &lines[1..] {
        let (agent, task) = if line.contains("ask-amount") {
            ("ask-amount", "Refund")
        } else {
            ("approve-plan", "note")
        };
        assert_eq!(col(line, agent), agent_at, "{shown}");
        assert_eq!(col(line, "waiting_for_user"), status_at, "{shown}");
        // The task is the last column.
        assert_eq!(&line[task_at..], task, "{shown}");
    }
}

/// A PostgreSQL server that answers but refuses the URL (no such database, no such role) is a
/// mistake to fix, not an outage to wait out: exit 2, saying what to do.
#[test]
fn needs_postgres_a_missing_database_or_role_is_bad_input() {
    let base = std::env::var("WEFT_TEST_POSTGRES_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("WEFT_TEST_POSTGRES_URL is not set: this test needs it"));
    let (server, _) = base.rsplit_once('/').unwrap();
    let no_db = format!("{server}/weft_no_such_database");
    let rest = server.split_once("://").unwrap().1;
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let no_role = format!("postgres://weft_no_such_role@{host}/postgres");
    let dir = workdir();
    for (url, says) in [
        (no_db.as_str(), "createdb"),
        (no_role.as_str(), "name a role that exists"),
    ] {
        let out = weft(dir.path(), &["sessions", "list", "--db", url]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert!(
            err.contains("refused the connection") && err.contains(says),
            "{err}"
        );
        assert!(!err.contains("check that the server is running"), "{err}");
    }
}

/// A SQLite file named with --db that is not there is created, and weft says so (a typo in the
/// path would otherwise start an empty store without a word); the default store is created
/// quietly on the first run.
#[test]
fn a_new_sqlite_file_is_named_when_created() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "ask-amount.yaml", "Refund", "--db", "wefft.db"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("note: created a new session store at wefft.db"),
        "{err}"
    );
    let out = weft(d, &["run", "ask-amount.yaml", "Refund", "--db", "wefft.db"]);
    assert!(
        !text(&out.stderr).contains("created a new"),
        "{}",
        text(&out.stderr)
    );
    let out = weft(d, &["run", "ask-amount.yaml", "Refund"]);
    assert!(
        !text(&out.stderr).contains("created a new"),
        "{}",
        text(&out.stderr)
    );
}

/// Every command that starts a session can give it a user (`--user`, or `WEFT_USER`), so CLI
/// sessions are listed by user and shown to that user by `weft serve` and the playground.
#[test]
fn cli_sessions_carry_their_user() {
    let dir = workdir();
    let d = dir.path();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let plan = examples.join("plans/refund.json");
    let shop = examples.join("shop.yaml");
    let out = weft(
        d,
        &[
            "plan",
            "run",
            plan.to_str().unwrap(),
            "--agent",
            shop.to_str().unwrap(),
            "--input",
            r#"{"customerId": "cust_123", "amount": 50.0}"#,
            "--user",
            "carol",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["run", "ask-amount.yaml", "Refund"])
        .current_dir(d)
        .env_remove("WEFT_DB")
        .env("WEFT_USER", "dave")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    for (user, agent) in [("carol", "shop"), ("dave", "ask-amount")] {
        let out = weft(d, &["sessions", "list", "--user", user, "--json"]);
        let rows: Vec<Value> = text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 1, "{user}: {rows:?}");
        assert_eq!(rows[0]["agent"], agent);
        assert_eq!(rows[0]["user_id"], user);
    }
}
