//! What the binary tells a person to do next works as written: hints carry `--db`, `weft answer`
//! needs no agent file, a fork's hint names a command its state accepts, lookups create no store;
//! and the small things: the task from stdin, completions, logging, prune, RFC 3339 times.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

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

fn cmd(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(args)
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .env_remove("RUST_LOG");
    c
}

fn weft(dir: &Path, args: &[&str]) -> Output {
    cmd(dir, args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `weft answer ...` line of a waiting run's hint.
fn answer_hint(stderr: &str) -> String {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("weft answer"))
        .unwrap_or_else(|| panic!("no `weft answer` hint in {stderr}"))
        .to_owned()
}

/// Runs a hint line as written (the `<answer>` placeholder replaced).
fn run_hint(dir: &Path, hint: &str, answer: &str) -> Output {
    let line = hint
        .replace("<answer>", answer)
        .replace("<a new task>", answer);
    Command::new("sh")
        .arg("-c")
        .arg(line.replacen("weft", env!("CARGO_BIN_EXE_weft"), 1))
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .output()
        .unwrap()
}

#[test]
fn the_waiting_hint_carries_db_and_weft_answer_continues_without_the_agent_file() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(
        d,
        &[
            "run",
            "ask-amount.yaml",
            "Refund my order",
            "--db",
            "other.db",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let hint = answer_hint(&stderr);
    assert!(hint.contains("--db other.db"), "{hint}");
    assert!(!d.join(".weft").exists(), "only the named store exists");
    let out = run_hint(d, &hint, "50");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "Refunded 50 to c1.");
}

#[test]
fn a_failed_lookup_creates_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(
        fixtures().join("ask-amount.yaml"),
        d.join("ask-amount.yaml"),
    )
    .unwrap();
    for args in [
        &["sessions", "show", "nope"][..],
        &["answer", "nope", "50"],
        &["run", "ask-amount.yaml", "--session", "nope", "50"],
        &["resume", "nope"],
    ] {
        let out = weft(d, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).is_empty());
        assert!(!d.join(".weft").exists(), "{args:?} created .weft/");
    }
}

#[test]
fn a_forks_hint_names_a_command_that_accepts_it() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "ask-amount.yaml", "Refund my order"]);
    assert_eq!(out.status.code(), Some(3));
    let id = answer_hint(&text(&out.stderr))
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_owned();
    assert_eq!(weft(d, &["answer", &id, "50"]).status.code(), Some(0));
    let show: Value =
        serde_json::from_slice(&weft(d, &["sessions", "show", &id, "--json"]).stdout).unwrap();
    let last = show["events"].as_u64().unwrap();
    // Forked at its end, the session has completed: the hint gives it a new task, and that works.
    let out = weft(d, &["sessions", "fork", &id, "--at", &last.to_string()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("weft resume"), "{stderr}");
    let hint = stderr.split('`').nth(1).unwrap();
    assert!(hint.contains("--session"), "{hint}");
    let out = run_hint(d, hint, "Refund my order again");
    assert_ne!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // Forked while it waited, the hint is `weft answer`, and that works.
    let waiting_at = (1..last)
        .rev()
        .find(|at| {
            let out = weft(d, &["sessions", "fork", &id, "--at", &at.to_string()]);
            text(&out.stderr).contains("(waiting_for_user)")
        })
        .expect("a point where the session waited");
    let out = weft(
        d,
        &["sessions", "fork", &id, "--at", &waiting_at.to_string()],
    );
    let stderr = text(&out.stderr);
    let hint = stderr.split('`').nth(1).unwrap();
    assert!(hint.starts_with("weft answer"), "{stderr}");
    let out = run_hint(d, hint, "50");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn the_task_can_come_from_stdin() {
    let dir = workdir();
    let mut child = cmd(dir.path(), &["run", "ask-amount.yaml", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Refund my order\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let id = answer_hint(&text(&out.stderr))
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_owned();
    let show: Value =
        serde_json::from_slice(&weft(dir.path(), &["sessions", "show", &id, "--json"]).stdout)
            .unwrap();
    assert_eq!(show["task"], "Refund my order");
    // An empty stdin is refused.
    let out = cmd(dir.path(), &["run", "ask-amount.yaml", "-"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("stdin"), "{}", text(&out.stderr));
}

#[test]
fn completions_for_three_shells() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef weft"),
        ("fish", "complete -c weft"),
    ] {
        let out = weft(dir.path(), &["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        let s = text(&out.stdout);
        assert!(s.contains(marker) && s.contains("sessions"), "{shell}: {s}");
    }
    let out = weft(dir.path(), &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn log_level_and_rust_log_show_what_weft_does() {
    let dir = workdir();
    let run = ["run", "ask-amount.yaml", "Refund my order"];
    let out = weft(dir.path(), &[&run[..], &["--log-level", "debug"]].concat());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("agent loaded") && stderr.contains("ask-amount"),
        "{stderr}"
    );
    assert!(stderr.contains("opening the session store"), "{stderr}");
    let out = cmd(dir.path(), &run)
        .env("RUST_LOG", "weft=info")
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("agent loaded"),
        "{}",
        text(&out.stderr)
    );
    let out = weft(dir.path(), &run);
    assert!(
        !text(&out.stderr).contains("agent loaded"),
        "quiet by default"
    );
    let out = weft(dir.path(), &[&run[..], &["--log-level", "=x=["]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--log-level"));
}

#[test]
fn prune_keeps_waiting_sessions_unless_asked_and_can_dry_run() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "ask-amount.yaml", "Refund my order"]);
    assert_eq!(out.status.code(), Some(3));
    let waiting = answer_hint(&text(&out.stderr))
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_owned();
    let out = weft(d, &["run", "ask-amount.yaml", "Refund my order"]);
    let done = answer_hint(&text(&out.stderr))
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_owned();
    assert_eq!(weft(d, &["answer", &done, "5"]).status.code(), Some(0));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = weft(d, &["sessions", "prune", "--older-than", "1s", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed.contains(&done) && !listed.contains(&waiting),
        "{listed}"
    );
    assert!(
        text(&out.stderr).contains("would prune 1"),
        "{}",
        text(&out.stderr)
    );
    let count = |d: &Path| {
        text(&weft(d, &["sessions", "list", "--json"]).stdout)
            .lines()
            .count()
    };
    assert_eq!(count(d), 2, "a dry run deletes nothing");
    let out = weft(d, &["sessions", "prune", "--older-than", "1s"]);
    assert!(
        text(&out.stdout).contains("pruned 1"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(count(d), 1);
    let out = weft(
        d,
        &[
            "sessions",
            "prune",
            "--older-than",
            "1s",
            "--include-active",
        ],
    );
    assert!(
        text(&out.stdout).contains("pruned 1"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(count(d), 0);
}

#[test]
fn json_times_are_rfc_3339() {
    let dir = workdir();
    let d = dir.path();
    let out = weft(d, &["run", "ask-amount.yaml", "Refund my order"]);
    assert_eq!(out.status.code(), Some(3));
    let line = text(&weft(d, &["sessions", "list", "--json"]).stdout);
    let row: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let id = row["id"].as_str().unwrap().to_owned();
    let show: Value =
        serde_json::from_slice(&weft(d, &["sessions", "show", &id, "--json"]).stdout).unwrap();
    for t in [
        &row["created_at"],
        &row["updated_at"],
        &show["created_at"],
        &show["updated_at"],
    ] {
        let t = t.as_str().unwrap_or_else(|| panic!("a string time: {row}"));
        let b = t.as_bytes();
        assert!(
            t.len() == 20 && b[4] == b'-' && b[10] == b'T' && b[13] == b':' && t.ends_with('Z'),
            "{t}"
        );
    }
}
