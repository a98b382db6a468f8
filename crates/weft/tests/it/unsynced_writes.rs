//! A crash that loses every write the disk was not told to keep: `weft run` is traced with
//! strace (every open, write, truncate, unlink and sync of the process, with the bytes written),
//! and the database's files are rebuilt as a power cut right before each sync would leave them:
//! for each file, its writes up to its last completed `fsync`/`fdatasync` and none after. Every
//! rebuilt database must open, pass `PRAGMA integrity_check`, and hold a readable prefix of the
//! session's log. At `full`, every event the run reported (`--events`, printed after its commit)
//! before the cut must be in it; at `normal` the test measures how many reported events a cut
//! loses, which is what `normal` allows.
//!
//! What this does not cover: writes torn inside a page or reordered between two syncs (a write
//! is kept or lost whole, and an unsynced file keeps nothing after its last sync, the harshest
//! order), a directory's entries (a file's creation and an unlink count as durable at once), the
//! `-shm` index (rebuilt from the log on open, as after any crash), and PostgreSQL.
//! (`needs_strace_*`: `WEFT_TEST_STRACE` names the strace binary.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const CALLS: u64 = 20;

/// What the traced process did, in the order the calls completed.
#[derive(Debug)]
enum Op {
    Write {
        file: String,
        offset: u64,
        bytes: Vec<u8>,
    },
    Truncate {
        file: String,
        len: u64,
    },
    Unlink {
        file: String,
    },
    Sync {
        file: String,
    },
    /// An event reported on stderr (its sequence number) after its commit.
    Reported(u64),
}

/// A C string as strace prints it with `-xx` (every byte as `\xHH`).
fn bytes(quoted: &str) -> Vec<u8> {
    let inner = quoted.trim().trim_start_matches('"');
    let (inner, after) = inner.split_once('"').unwrap_or((inner, ""));
    assert!(
        !after.starts_with("..."),
        "strace cut a string short (raise -s)"
    );
    inner
        .split("\\x")
        .filter(|h| !h.is_empty())
        .map(|h| u8::from_str_radix(h, 16).unwrap_or_else(|e| panic!("{h}: {e}")))
        .collect()
}

/// The database file a path names (`weft.db`, `weft.db-wal`, `weft.db-journal`), if any.
fn db_file(path: &[u8], db: &str) -> Option<String> {
    let path = String::from_utf8_lossy(path);
    let name = path.rsplit('/').next()?.to_owned();
    (name.starts_with(db) && !name.ends_with("-shm")).then_some(name)
}

/// Reads strace's output (`-f -xx`) into the operations on the database's files and the events
/// reported on stderr.
fn ops(trace: &str, db: &str) -> Vec<Op> {
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut fds: HashMap<u64, String> = HashMap::new();
    let mut stderr = Vec::new();
    let mut out = Vec::new();
    for line in trace.lines() {
        // strace pads the pid column (`1575  write(...)`).
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let call = if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), start.to_owned());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = tail.split_once(" resumed>") else {
                continue;
            };
            format!("{}{tail}", pending.remove(pid).unwrap_or_default())
        } else {
            rest.to_owned()
        };
        let Some((name, args)) = call.split_once('(') else {
            continue;
        };
        // strace pads short calls: `write(2, "\x0a", 1)               = 1`.
        let Some((args, ret)) = args.rsplit_once(" = ") else {
            continue;
        };
        let Some(args) = args.trim_end().strip_suffix(')') else {
            continue;
        };
        let ret = ret.split_whitespace().next().unwrap_or_default();
        let Ok(ret) = ret.parse::<i64>() else {
            continue;
        };
        if ret < 0 {
            continue;
        }
        let fd = || args.split(',').next()?.trim().parse::<u64>().ok();
        let file = || fd().and_then(|fd| fds.get(&fd).cloned());
        match name {
            "openat" => {
                let path = args.split_once(", ").map_or("", |(_, p)| p);
                if let Some(f) = db_file(&bytes(path), db) {
                    fds.insert(ret as u64, f);
                } else {
                    fds.remove(&(ret as u64));
                }
            }
            "close" => {
                if let Some(fd) = fd() {
                    fds.remove(&fd);
                }
            }
            "unlink" | "unlinkat" => {
                let path = if name == "unlink" {
                    args
                } else {
                    args.split_once(", ").map_or("", |(_, p)| p)
                };
                if let Some(f) = db_file(&bytes(path), db) {
                    out.push(Op::Unlink { file: f });
                }
            }
            "pwrite64" => {
                if let Some(f) = file() {
                    let offset = args.rsplit(", ").next().unwrap().trim().parse().unwrap();
                    let text = args.split_once(", ").unwrap().1;
                    out.push(Op::Write {
                        file: f,
                        offset,
                        bytes: bytes(text),
                    });
                }
            }
            "write" if fd() == Some(2) => {
                stderr.extend(bytes(args.split_once(", ").unwrap().1));
                while let Some(end) = stderr.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = stderr.drain(..=end).collect();
                    let v: serde_json::Value = serde_json::from_slice(&line).unwrap_or_default();
                    if let Some(seq) = v["seq"].as_u64() {
                        out.push(Op::Reported(seq));
                    }
                }
            }
            "write" | "writev" | "pwritev" | "pwritev2" => {
                assert!(
                    file().is_none(),
                    "a write this test does not rebuild: {line}"
                );
            }
            "ftruncate" => {
                if let Some(f) = file() {
                    let len = args.rsplit(", ").next().unwrap().trim().parse().unwrap();
                    out.push(Op::Truncate { file: f, len });
                }
            }
            "fsync" | "fdatasync" => {
                if let Some(f) = file() {
                    out.push(Op::Sync { file: f });
                }
            }
            _ => {}
        }
    }
    out
}

/// The database's files as a power cut right before operation `cut` leaves them: each file's
/// operations up to its last sync before `cut`.
fn rebuild(ops: &[Op], cut: usize, dir: &Path) {
    let mut last_sync: HashMap<&str, usize> = HashMap::new();
    for (i, op) in ops[..cut].iter().enumerate() {
        if let Op::Sync { file } = op {
            last_sync.insert(file, i);
        }
    }
    let mut files: HashMap<&str, Option<Vec<u8>>> = HashMap::new();
    for (i, op) in ops[..cut].iter().enumerate() {
        let kept = |f: &str| last_sync.get(f).is_some_and(|&s| i < s);
        match op {
            Op::Write {
                file,
                offset,
                bytes,
            } if kept(file) => {
                let data = files.entry(file).or_default().get_or_insert_default();
                let (at, end) = (*offset as usize, *offset as usize + bytes.len());
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[at..end].copy_from_slice(bytes);
            }
            Op::Truncate { file, len } if kept(file) => {
                files
                    .entry(file)
                    .or_default()
                    .get_or_insert_default()
                    .resize(*len as usize, 0);
            }
            Op::Unlink { file } => {
                files.insert(file, None);
            }
            _ => {}
        }
    }
    for (name, data) in files {
        if let Some(data) = data {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
}

/// The events the rebuilt database holds (its one session's sequence numbers, checked to be
/// 1..=n and to decode), after `PRAGMA integrity_check` said ok.
async fn check(dir: &Path, what: &str) -> u64 {
    let path = dir.join("weft.db");
    let id = {
        let conn = rusqlite::Connection::open(&path)
            .unwrap_or_else(|e| panic!("{what}: the database does not open: {e}"));
        let ok: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{what}: integrity_check: {e}"));
        assert_eq!(ok, "ok", "{what}: integrity_check");
        let has: bool = conn
            .query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'sessions'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if !has {
            return 0;
        }
        let id: Option<String> = conn
            .query_row("SELECT id FROM sessions", [], |r| r.get(0))
            .ok();
        match id {
            Some(id) => id,
            None => return 0,
        }
    };
    let store = weft_store::SqliteStore::open_existing(&path)
        .await
        .unwrap_or_else(|e| panic!("{what}: weft cannot open it: {e}"));
    let (_, log) = weft_store::SessionLog::load(&store, &id)
        .await
        .unwrap_or_else(|e| panic!("{what}: the log does not read back: {e}"));
    store.close().await;
    for (k, e) in log.iter().enumerate() {
        assert_eq!(e.seq, k as u64 + 1, "{what}: the log has a gap");
    }
    log.len() as u64
}

/// Runs the agent at `durability` under strace and checks a database rebuilt at every cut;
/// returns (cuts, the most reported events a cut lost).
async fn crash_at_every_sync(durability: &str) -> (usize, u64) {
    let strace = common::service_var("WEFT_TEST_STRACE");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        format!(
            "- {{ tool_calls: [{{ name: echo, arguments: {{ text: hi }} }}], repeat: {CALLS} }}\n- {{ text: done }}\n"
        ),
    )
    .unwrap();
    let agent = dir.path().join("agent.yaml");
    std::fs::write(
        &agent,
        "name: echoer\nmode: react\nmodel: scripted:script.yaml\nlimits: { max_iterations: 50 }\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    let trace = dir.path().join("trace.txt");
    let out = Command::new(&strace)
        .args(["-f", "-qq", "-xx", "-s", "1048576", "-o"])
        .arg(&trace)
        .args([
            "-e",
            "trace=openat,close,unlink,unlinkat,write,writev,pwrite64,pwritev,pwritev2,ftruncate,fsync,fdatasync",
        ])
        .arg(env!("CARGO_BIN_EXE_weft"))
        .arg("run")
        .arg(&agent)
        .args(["go", "--events", "--durability", durability, "--db"])
        .arg(dir.path().join("weft.db"))
        .env_remove("WEFT_DURABILITY")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let ops = ops(&text, "weft.db");
    let reported = ops.iter().filter(|o| matches!(o, Op::Reported(_))).count() as u64;
    assert!(
        reported > 2 * CALLS,
        "{reported} events reported in {} lines of trace:\n{}",
        text.lines().count(),
        text.lines()
            .filter(|l| l.contains("write(2"))
            .take(3)
            .map(|l| l.get(..120).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let cuts: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, Op::Sync { .. }))
        .map(|(i, _)| i)
        .chain([ops.len()])
        .collect();
    let mut lost_most = 0;
    for &cut in &cuts {
        let what = format!(
            "{durability}, crash before operation {cut} of {}",
            ops.len()
        );
        let at = tempfile::tempdir().unwrap();
        rebuild(&ops, cut, at.path());
        let held = check(at.path(), &what).await;
        let reported = ops[..cut]
            .iter()
            .filter_map(|o| match o {
                Op::Reported(seq) => Some(*seq),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        lost_most = lost_most.max(reported.saturating_sub(held));
        if durability == "full" {
            assert!(
                held >= reported,
                "{what}: event {reported} was reported committed, the database holds {held}"
            );
        }
    }
    (cuts.len(), lost_most)
}

#[tokio::test]
async fn needs_strace_a_crash_keeps_every_reported_event_at_full() {
    let (cuts, lost) = crash_at_every_sync("full").await;
    eprintln!("full: {cuts} cuts, at most {lost} reported events lost");
    assert!(cuts as u64 > CALLS, "{cuts} cuts");
    assert_eq!(lost, 0);
}

#[tokio::test]
async fn needs_strace_a_crash_at_normal_loses_only_the_tail() {
    // Every cut still opens, checks and reads back a prefix of the log (`check`); the events
    // reported since the last sync may be missing.
    let (cuts, lost) = crash_at_every_sync("normal").await;
    eprintln!("normal: {cuts} cuts, at most {lost} reported events lost");
    assert!(cuts >= 1);
}
