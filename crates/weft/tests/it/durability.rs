//! The durability a run is written at, seen from outside: `weft run` under strace, counting the
//! fsync and fdatasync calls it makes. At `full` (the default) every commit of the SQLite store
//! syncs its write-ahead log; at `normal` (the agent file's `durability: normal`, or
//! `--durability normal`) none does; `--durability` overrides the agent file.
//! (`needs_strace_*`: `WEFT_TEST_STRACE` names the strace binary.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::path::Path;
use std::process::Command;

const CALLS: u64 = 40;

/// An agent whose scripted model calls `echo` `CALLS` times, then answers (one commit each).
fn agent(dir: &Path, durability: Option<&str>) -> std::path::PathBuf {
    std::fs::write(
        dir.join("script.yaml"),
        format!(
            "- {{ tool_calls: [{{ name: echo, arguments: {{ text: hi }} }}], repeat: {CALLS} }}\n- {{ text: done }}\n"
        ),
    )
    .unwrap();
    let line = durability.map_or(String::new(), |d| format!("durability: {d}\n"));
    let path = dir.join(format!("agent-{}.yaml", durability.unwrap_or("unset")));
    std::fs::write(
        &path,
        format!(
            "name: echoer\nmode: react\nmodel: scripted:script.yaml\nlimits: {{ max_iterations: 50 }}\n{line}tools:\n  - builtin: echo\n"
        ),
    )
    .unwrap();
    path
}

/// Runs the agent under strace in a fresh database; returns the syncs it made.
fn syncs(agent_durability: Option<&str>, flag: Option<&str>) -> u64 {
    let strace = common::service_var("WEFT_TEST_STRACE");
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(dir.path(), agent_durability);
    let summary = dir.path().join("strace.txt");
    let db = dir.path().join("weft.db");
    let mut cmd = Command::new(&strace);
    cmd.args(["-f", "-qq", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&summary)
        .arg(env!("CARGO_BIN_EXE_weft"))
        .arg("run")
        .arg(&agent)
        .args(["go", "--db"])
        .arg(&db)
        .env_remove("WEFT_DURABILITY");
    if let Some(f) = flag {
        cmd.args(["--durability", f]);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    std::fs::read_to_string(&summary)
        .unwrap()
        .lines()
        .filter(|l| l.ends_with("fsync") || l.ends_with("fdatasync"))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .sum()
}

#[test]
fn needs_strace_full_syncs_every_commit_and_normal_none() {
    let default = syncs(None, None);
    let full_in_file = syncs(Some("full"), None);
    let normal_in_file = syncs(Some("normal"), None);
    let normal_flag = syncs(None, Some("normal"));
    let flag_over_file = syncs(Some("normal"), Some("full"));
    eprintln!(
        "syncs for {CALLS} tool calls: default {default}, full {full_in_file}, normal {normal_in_file}, \
         --durability normal {normal_flag}, normal overridden by --durability full {flag_over_file}"
    );
    // One commit per iteration (the call and its result), plus the session's start, the answer
    // and the lease's writes.
    for (what, n) in [
        ("default", default),
        ("durability: full", full_in_file),
        ("--durability full over durability: normal", flag_over_file),
    ] {
        assert!(n >= CALLS, "{what}: {n} syncs for {CALLS} commits or more");
    }
    // At normal no commit syncs: what is left does not grow with the run (the checkpoint of
    // the log when the database is closed, the files written once).
    for (what, n) in [
        ("durability: normal", normal_in_file),
        ("--durability normal", normal_flag),
    ] {
        assert!(n <= CALLS / 4, "{what}: {n} syncs");
    }
}
