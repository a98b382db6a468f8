//! Quotas per user across processes: on PostgreSQL, 4 `weft worker` processes and 2 `weft
//! serve` processes share one user's daily cost quota under concurrent runs of that user (a
//! scripted model calling a tool in a loop, with prices). The total spent passes the quota by at
//! most what the calls in flight when it was reached could cost (the test prints the
//! overshoot); every run stops at the quota; a server then refuses the user's runs with 429,
//! `Retry-After` and what was spent, and `GET /me/usage` says the same as the store. And
//! `runs_at_once`, on SQLite: a second run of the user is refused while the first is going.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Database, psql};

/// The users' API keys (keys.txt).
const ANN: &str = "ann-key-0123456789abcdef";
const BOB: &str = "bob-key-0123456789abcdef";

/// The user's daily quota, US dollars.
const QUOTA_USD: f64 = 30.0;

fn weft(dir: &Path, db: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.current_dir(dir)
        .env_remove("WEFT_API_KEYS")
        .env("WEFT_DB", db)
        .env("NO_COLOR", "1");
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request; the status, the headers' text and the body.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    key: &str,
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nx-api-key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, rest) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // A chunked body: its chunks' data joined.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || after.len() < n {
                break;
            }
            out.push_str(&after[..n]);
            rest = after[n..].trim_start_matches("\r\n");
        }
        out
    } else {
        rest.to_owned()
    };
    (status, head.to_owned(), body)
}

/// The seconds a response's `Retry-After` header says (`head`: its status line and headers).
fn retry_after(head: &str) -> u64 {
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("a Retry-After header: {head}"))
}

fn serve(d: &Path, db: &str, port: u16, log: &str) -> Child {
    serve_with(d, db, port, log, &["--quotas", "quotas.yaml"])
}

/// `weft serve` on the agents and keys of `d`, with `flags` after them.
fn serve_with(d: &Path, db: &str, port: u16, log: &str, flags: &[&str]) -> Child {
    let child = weft(d, db)
        .args(["serve", "--agents", ".", "--keys", "keys.txt"])
        .args(flags)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("WEFT_LEASE_SECS", "2")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join(log)).unwrap())
        .spawn()
        .unwrap();
    let began = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "weft serve did not come up: {}",
            std::fs::read_to_string(d.join(log)).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn worker(d: &Path, db: &str, log: &str) -> Child {
    weft(d, db)
        .args([
            "worker",
            "--agents",
            ".",
            "--poll-secs",
            "0.2",
            "--concurrency",
            "4",
        ])
        .args(["--quotas", "quotas.yaml"])
        .env("WEFT_LEASE_SECS", "2")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join(log)).unwrap())
        .spawn()
        .unwrap()
}

fn stop(mut c: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    let _ = c.wait();
}

/// A ReAct agent whose priced model (40 output tokens at most, 200 ms a reply) calls `echo`
/// forever; the user `ann` may spend $30 a day, `bob` may have no run going.
fn files(d: &Path) {
    std::fs::write(
        d.join("looper.yaml"),
        "name: looper\nmode: react\nmodel:\n  provider: scripted\n  script: looper.script.yaml\n  max_tokens: 40\n  prices: { input_per_mtok: 1000, output_per_mtok: 2000 }\nlimits: { max_iterations: 1000 }\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(
        d.join("looper.script.yaml"),
        "react:\n  - { tool_calls: [{ name: echo, arguments: { text: again } }], repeat: 1000, delay_ms: 200 }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("keys.txt"),
        "ann-key-0123456789abcdef ann\nbob-key-0123456789abcdef bob\n",
    )
    .unwrap();
    std::fs::write(
        d.join("quotas.yaml"),
        format!(
            "default:\n  day: {{ cost_usd: {QUOTA_USD} }}\n  month: {{ tokens: 100000000 }}\nusers:\n  bob: {{ runs_at_once: 0 }}\n"
        ),
    )
    .unwrap();
}

#[test]
fn needs_postgres_workers_and_servers_share_a_users_daily_quota() {
    let db = Database::new("quotas");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    files(d);
    let ports = [free_port(), free_port()];
    let servers: Vec<Child> = ports
        .iter()
        .enumerate()
        .map(|(k, p)| serve(d, &db.url, *p, &format!("serve{k}.log")))
        .collect();
    // The load: 8 sessions queued for the workers and 4 runs on each server, all of ann's, then
    // the workers start: 16 runs at once.
    let submits: Vec<Child> = (0..8)
        .map(|k| {
            weft(d, &db.url)
                .args([
                    "submit",
                    "looper.yaml",
                    &format!("loop {k}"),
                    "--user",
                    "ann",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for s in submits {
        let out = s.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for p in ports {
        for _ in 0..4 {
            let (status, _, body) = http(
                p,
                "POST",
                "/runs",
                ANN,
                r#"{"assistant_id": "looper", "input": {"task": "loop"}, "on_completion": "keep"}"#,
            );
            assert_eq!(status, 200, "{body}");
        }
    }
    let workers: Vec<Child> = (0..4)
        .map(|k| worker(d, &db.url, &format!("worker{k}.log")))
        .collect();
    let began = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let open: u64 = psql(
            &db.url,
            "SELECT count(*) FROM sessions WHERE status = 'running'",
        )
        .parse()
        .unwrap();
        if open == 0 {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(180),
            "{open} sessions still running after 3 minutes; logs in {}",
            d.display()
        );
    }
    let took = began.elapsed();

    // Every run stopped at ann's daily quota.
    let sessions: u64 = psql(
        &db.url,
        "SELECT count(*) FROM sessions WHERE user_id = 'ann'",
    )
    .parse()
    .unwrap();
    assert_eq!(sessions, 16);
    let stops = psql(
        &db.url,
        "SELECT count(*) FROM events WHERE type = 'budget_exceeded' \
         AND payload::jsonb->>'which' = 'user.day.cost_usd'",
    );
    assert_eq!(stops, "16", "every run stops at the quota");
    let failed = psql(
        &db.url,
        "SELECT count(*) FROM sessions WHERE user_id = 'ann' AND status = 'failed'",
    );
    assert_eq!(failed, "16");

    // The store's counter is every reply's cost, to the cent.
    let counted: f64 = psql(
        &db.url,
        "SELECT cost_usd FROM usage_counters WHERE user_id = 'ann' AND period LIKE 'day:%'",
    )
    .parse()
    .unwrap();
    let replies: Vec<(i64, f64)> = psql(
        &db.url,
        "SELECT ts || ' ' || (payload::jsonb->'reply'->'usage'->>'cost_usd') FROM events \
         WHERE type = 'model_replied' ORDER BY ts, session_id, seq",
    )
    .lines()
    .map(|l| {
        let (ts, c) = l.split_once(' ').unwrap();
        (ts.parse().unwrap(), c.parse().unwrap())
    })
    .collect();
    let replied: f64 = replies.iter().map(|(_, c)| c).sum();
    assert!(
        (counted - replied).abs() < 1e-6,
        "counted {counted}, replies cost {replied}"
    );

    // The overshoot, and the calls in flight when the quota was reached: those whose reply came
    // after the reply that took the total past the quota (each had passed its check before).
    let mut total = 0.0;
    let mut crossed_at = None;
    for (k, (_, c)) in replies.iter().enumerate() {
        total += c;
        if total > QUOTA_USD && crossed_at.is_none() {
            crossed_at = Some(k);
        }
    }
    let in_flight = crossed_at.map_or(0, |k| replies.len() - k);
    let most_per_call: f64 = psql(
        &db.url,
        "SELECT max((payload::jsonb->>'call')::float8) FROM events WHERE type = 'budget_exceeded'",
    )
    .parse()
    .unwrap();
    let overshoot = (counted - QUOTA_USD).max(0.0);
    eprintln!(
        "quota: 16 runs of one user on 4 workers and 2 servers (PostgreSQL) in {:.1} s: {} model calls, \
         ${counted:.4} spent of a ${QUOTA_USD} daily quota, overshoot ${overshoot:.4} ({:.1}% of the quota) \
         with {in_flight} calls in flight when it was reached (each at most ${most_per_call:.4})",
        took.as_secs_f64(),
        replies.len(),
        overshoot / QUOTA_USD * 100.0,
    );
    assert!(
        overshoot <= in_flight as f64 * most_per_call + 1e-9,
        "overshoot ${overshoot} is more than {in_flight} calls in flight could cost"
    );
    // At most one call per run can be in flight at once (the runs' calls are sequential).
    assert!(in_flight <= 16, "{in_flight}");

    // Either server now refuses ann's runs with 429, what was spent, the limit and the reset.
    let (status, head, body) = http(
        ports[1],
        "POST",
        "/runs",
        ANN,
        r#"{"assistant_id": "looper", "input": {"task": "loop"}, "on_completion": "keep"}"#,
    );
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains(&format!("user.day.cost_usd is {QUOTA_USD}")),
        "{body}"
    );
    assert!(body.contains("resets at"), "{body}");
    let retry = retry_after(&head);
    assert!((1..=86_400).contains(&retry), "{retry}");
    // bob may have no run going: refused before anything is spent.
    let (status, _, body) = http(
        ports[0],
        "POST",
        "/runs",
        BOB,
        r#"{"assistant_id": "looper", "input": {"task": "loop"}, "on_completion": "keep"}"#,
    );
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("runs_at_once is 0"), "{body}");
    // Each server counts the runs it refused at a quota (one each: ann's and bob's).
    for p in ports {
        let (status, _, body) = http(p, "GET", "/metrics", ANN, "");
        assert_eq!(status, 200);
        assert!(body.contains("weft_quota_refusals_total 1"), "{body}");
    }
    // GET /me/usage: the day's counter as the store has it, against the limit.
    let (status, _, body) = http(ports[0], "GET", "/me/usage", ANN, "");
    assert_eq!(status, 200, "{body}");
    let usage: serde_json::Value = serde_json::from_str(&body).unwrap();
    let day = &usage["periods"][0];
    assert_eq!(day["period"], "day");
    assert_eq!(day["limits"]["cost_usd"], QUOTA_USD);
    assert!((day["used"]["cost_usd"].as_f64().unwrap() - counted).abs() < 1e-6);
    assert_eq!(usage["periods"][1]["limits"]["tokens"], 100_000_000);
    assert_eq!(usage["runs_going"], 0);

    for c in workers.into_iter().chain(servers) {
        stop(c);
    }
}

/// `runs_at_once` on the default SQLite store: while one run of the user is going, a second is
/// refused with 429 naming the limit; once the first ended, a new run is accepted. A thread made
/// for the run being started (a threadless run) is not counted.
#[test]
fn runs_at_once_are_refused_until_a_run_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    files(d);
    std::fs::write(
        d.join("quotas.yaml"),
        "users:\n  ann: { runs_at_once: 1 }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("napper.yaml"),
        "name: napper\nmode: react\nmodel: scripted:napper.script.yaml\ntools:\n  - name: nap\n    description: Naps.\n    command: [\"sh\", \"-c\", \"cat > /dev/null; sleep 2; echo '{}'\"]\n",
    )
    .unwrap();
    std::fs::write(
        d.join("napper.script.yaml"),
        "- tool_calls: [ { name: nap, arguments: {} } ]\n- text: Rested.\n",
    )
    .unwrap();
    let port = free_port();
    let server = serve(d, "weft.db", port, "serve.log");
    let run = || {
        http(
            port,
            "POST",
            "/runs",
            ANN,
            r#"{"assistant_id": "napper", "input": {"task": "nap"}, "on_completion": "keep"}"#,
        )
    };
    let (status, _, body) = run();
    assert_eq!(status, 200, "{body}");
    let (status, head, body) = run();
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("has 1 runs going and runs_at_once is 1"),
        "{body}"
    );
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let began = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let (_, _, body) = http(port, "GET", "/me/usage", ANN, "");
        let usage: serde_json::Value = serde_json::from_str(&body).unwrap();
        if usage["runs_going"] == 0 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(30), "{body}");
    }
    let (status, _, body) = run();
    assert_eq!(status, 200, "{body}");
    stop(server);
}

/// A new run at the edge of its user's quota: what is left cannot cover the run's first model
/// call at its most, which the check before that call would refuse. The run is refused up front
/// (429, `Retry-After`, the limit, what was spent and what the call may take), not accepted to
/// fail inside: no run is made on the thread and nothing more is spent. Input is free and output
/// costs $0.002 a token at most 40 tokens a call, so every call may take $0.08 at most; a loop
/// stops (in its body) once less than that is left of the user's $1.
#[test]
fn a_run_whose_first_call_the_quota_cannot_cover_is_refused_up_front() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    files(d);
    std::fs::write(
        d.join("looper.yaml"),
        "name: looper\nmode: react\nmodel:\n  provider: scripted\n  script: looper.script.yaml\n  max_tokens: 40\n  prices: { input_per_mtok: 0, output_per_mtok: 2000 }\nlimits: { max_iterations: 1000 }\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(
        d.join("looper.script.yaml"),
        "react:\n  - { tool_calls: [{ name: echo, arguments: { text: again } }], repeat: 1000 }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("quotas.yaml"),
        "users:\n  ann: { day: { cost_usd: 1 } }\n",
    )
    .unwrap();
    let port = free_port();
    let server = serve(d, "weft.db", port, "serve.log");
    let thread = || {
        let (status, _, body) = http(port, "POST", "/threads", ANN, "{}");
        assert_eq!(status, 200, "{body}");
        let t: serde_json::Value = serde_json::from_str(&body).unwrap();
        t["thread_id"].as_str().unwrap().to_owned()
    };
    let run = |tid: &str| {
        http(
            port,
            "POST",
            &format!("/threads/{tid}/runs/wait"),
            ANN,
            r#"{"assistant_id": "looper", "input": {"task": "loop"}}"#,
        )
    };
    let spent = || {
        let (_, _, body) = http(port, "GET", "/me/usage", ANN, "");
        let usage: serde_json::Value = serde_json::from_str(&body).unwrap();
        let day = &usage["periods"][0]["used"];
        (
            day["cost_usd"].as_f64().unwrap(),
            day["model_calls"].as_u64().unwrap(),
        )
    };

    // The loop runs until the quota stops it in its body, less than a call's worth short of it.
    let (status, _, body) = run(&thread());
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("quota reached: user.day.cost_usd is 1"),
        "{body}"
    );
    let (cost, calls) = spent();
    assert!(
        cost < 1.0 && cost > 1.0 - 0.08,
        "at the edge: ${cost} of $1"
    );

    // The next run could not make its first call: refused before it is made.
    let tid = thread();
    let (status, head, body) = run(&tid);
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("quota reached: user.day.cost_usd is 1")
            && body.contains("spent (user ann), and the run's first model call may take up to 0.08 more; it resets at"),
        "{body}"
    );
    let retry = retry_after(&head);
    assert!((1..=86_400).contains(&retry), "until midnight UTC: {retry}");
    let (status, _, body) = http(port, "GET", &format!("/threads/{tid}/runs"), ANN, "");
    assert_eq!((status, body.trim()), (200, "[]"), "no run was made");
    assert_eq!(spent(), (cost, calls), "nothing more was spent");
    stop(server);
}

/// A quota file with a mistake stops `weft serve` and `weft worker` before they open their
/// store: exit 2, the file, line and field named, and no `.weft/weft.db` made. So do a bad key
/// file and a bad agent file.
#[test]
fn a_bad_quota_file_stops_serve_before_it_makes_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    files(d);
    std::fs::write(
        d.join("bad-quotas.yaml"),
        "default:\n  day: { cost_usd: .nan }\n",
    )
    .unwrap();
    std::fs::write(d.join("bad-keys.txt"), "short ann\n").unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let serve = ["serve", "--agents", "looper.yaml", "--listen", &listen];
    for (args, said) in [
        (
            [
                &serve[..],
                &["--keys", "keys.txt", "--quotas", "bad-quotas.yaml"],
            ]
            .concat(),
            "the quota file bad-quotas.yaml has 1 problem:\n  bad-quotas.yaml:2:10: default.day.cost_usd: NaN is not a cost",
        ),
        (
            vec![
                "worker",
                "--agents",
                "looper.yaml",
                "--quotas",
                "bad-quotas.yaml",
            ],
            "bad-quotas.yaml:2:10: default.day.cost_usd",
        ),
        (
            [&serve[..], &["--keys", "bad-keys.txt"]].concat(),
            "bad-keys.txt:1: the key of user `ann`",
        ),
        (
            vec![
                "serve",
                "--agents",
                "nosuch.yaml",
                "--keys",
                "keys.txt",
                "--listen",
                &listen,
            ],
            "--agents nosuch.yaml: no such file or directory",
        ),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
        let out = c
            .current_dir(d)
            .env_remove("WEFT_DB")
            .env_remove("WEFT_API_KEYS")
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(!d.join(".weft").exists(), "{args:?}: no store was made");
    }
}

/// A user's spending is counted without a quota file: after a run of a priced model, `GET
/// /me/usage` reports its tokens, cost and model calls for the day and the month, and no quota.
#[test]
fn usage_is_counted_without_a_quota() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    files(d);
    std::fs::write(
        d.join("priced.yaml"),
        "name: priced\nmode: react\nmodel:\n  provider: scripted\n  script: priced.script.yaml\n  prices: { input_per_mtok: 1000, output_per_mtok: 2000 }\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(
        d.join("priced.script.yaml"),
        "- tool_calls: [ { name: echo, arguments: { text: hi } } ]\n- text: Done.\n",
    )
    .unwrap();
    let port = free_port();
    let server = serve_with(d, "weft.db", port, "serve.log", &[]);
    let (status, _, body) = http(
        port,
        "POST",
        "/runs/wait",
        ANN,
        r#"{"assistant_id": "priced", "input": {"task": "say hi"}, "on_completion": "keep"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = http(port, "GET", "/me/usage", ANN, "");
    stop(server);
    assert_eq!(status, 200, "{body}");
    let usage: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(usage["quota"].is_null(), "{body}");
    for p in usage["periods"].as_array().unwrap() {
        let used = &p["used"];
        assert_eq!(used["model_calls"], 2, "{body}");
        assert!(used["output_tokens"].as_u64().unwrap() > 0, "{body}");
        assert!(used["cost_usd"].as_f64().unwrap() > 0.0, "{body}");
    }
}
