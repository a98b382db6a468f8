//! weft through PostgreSQL faults, on a cluster of the test's own ([`weft_testkit::PgCluster`]):
//! crashed (`-m immediate`) or restarted (`-m fast`) under streamed runs of `weft serve`, under
//! `weft run`, and under health checks; and a replica frozen (SIGSTOP) past its leases while
//! another takes its runs over. What each test asserts is what a client is told: only what is
//! true (a stream ends `error` only for a run that failed; any replica answers from the store;
//! health fails while the store is away), and that work is neither lost nor done twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::serve::{
    ALICE, SeamStep, drive_seam, free_port, logs, now_ms, output_within, serve_command, stop,
    tally_agent,
};
use crate::support as common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The lease of the processes that must ride out an outage: longer than the outage (6 s).
const OUTAGE_LEASE_SECS: &str = "15";

/// What a test does to the database at a fault.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `pg_ctl stop -m immediate`, down for this long, then started again.
    Crash(Duration),
    /// `pg_ctl restart -m fast`.
    RestartFast,
}

impl Fault {
    fn apply(self, cluster: &common::PgCluster) {
        match self {
            Self::Crash(down) => {
                cluster.crash();
                std::thread::sleep(down);
                cluster.start_again();
            }
            Self::RestartFast => cluster.restart_fast(),
        }
    }
}

/// `weft serve` on `db` in `d` (agents and keys there), with `WEFT_LEASE_SECS=lease`, logging
/// to `log`; returns once `/health` answers.
fn serve_on(d: &Path, port: u16, db: &str, lease: &str, log: &str) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(["--db", db, "serve", "--agents", ".", "--keys", "keys.txt"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--max-runs-per-user", "100000"])
        .env("WEFT_LEASE_SECS", lease);
    serve_command(d, port, c, log)
}

fn keys(d: &Path) {
    std::fs::write(d.join("keys.txt"), format!("{ALICE} alice\n")).unwrap();
}

/// Waits for `child` for at most `limit`; kills it when it runs past that. Its status, and
/// whether it had to be killed.
fn wait_bounded(child: &mut Child, limit: Duration) -> (ExitStatus, bool) {
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, false);
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            return (child.wait().unwrap(), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `seam_client.py` in its `outage` mode against one `weft serve` on a private cluster: `rounds`
/// rounds of `n` concurrent SDK streams, a fault in every `every`-th round (the next of
/// `faults`, in turn) once 30 % of its streams began. Returns what the script printed.
fn outage_seam(rounds: usize, n: usize, every: usize, faults: &[Fault]) -> String {
    seam_on_a_cluster(rounds, n, every, faults, OUTAGE_LEASE_SECS, false)
}

/// [`outage_seam`] with the server's lease `lease` (seconds), and, when `busy`, both cores
/// kept busy by other processes and another client working the same database server for the
/// whole batch.
fn seam_on_a_cluster(
    rounds: usize,
    n: usize,
    every: usize,
    faults: &[Fault],
    lease: &str,
    busy: bool,
) -> String {
    let cluster = common::PgCluster::start("seam");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    keys(d);
    tally_agent(d);
    let port = free_port();
    let mut server = serve_on(d, port, &cluster.url, lease, "serve-0.log");
    let _load = busy.then(|| Load::start(&cluster.url));
    let mut applied = 0;
    let args = [rounds, n, every]
        .map(|v| v.to_string())
        .into_iter()
        .chain(["outage".to_owned()])
        .collect::<Vec<_>>();
    let url = format!("http://127.0.0.1:{port}");
    let status = drive_seam(d, &url, &args, Duration::from_secs(150), |step| {
        let SeamStep::Fault(r) = step else {
            return 0;
        };
        let at = now_ms();
        let fault = faults[applied % faults.len()];
        fault.apply(&cluster);
        applied += 1;
        println!("round {r}: {fault:?}");
        at
    });
    // No process died: the server is the one that started.
    let alive = server.try_wait().unwrap().is_none();
    stop(&mut server);
    let stdout = std::fs::read_to_string(d.join("client.out")).unwrap_or_default();
    let report = format!(
        "{stdout}\n{}\n{}",
        std::fs::read_to_string(d.join("client.err")).unwrap_or_default(),
        logs(d, &["serve-0.log"])
    );
    assert!(alive, "the server died during the outages:\n{report}");
    assert!(status.success() && stdout.contains("ok: seam"), "{report}");
    assert_eq!(
        applied,
        faults.len(),
        "not every fault was applied: {stdout}"
    );
    println!("{stdout}");
    stdout
}

/// Other work on the machine and on the database while a test runs, stopped when dropped: a
/// busy loop per core, and a client of the same PostgreSQL running sorts and writes of its own
/// (the busy database host of production). Each process stops by itself after 10 minutes.
struct Load(Vec<Child>);

impl Load {
    fn start(db: &str) -> Self {
        use std::os::unix::process::CommandExt;
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let sql = "CREATE TABLE IF NOT EXISTS busy (k int, v text); \
                   INSERT INTO busy SELECT g, md5(g::text) FROM generate_series(1, 20000) g; \
                   SELECT count(DISTINCT v) FROM (SELECT v FROM busy ORDER BY v DESC) t; \
                   DELETE FROM busy;";
        let client = format!("while :; do psql '{db}' -Xq -c \"{sql}\" >/dev/null 2>&1; done");
        let scripts = std::iter::repeat_n("while :; do :; done".to_owned(), cores)
            .chain([client])
            .collect::<Vec<_>>();
        // Each in a process group of its own, killed whole when dropped; `timeout` ends it if
        // this test dies without dropping it.
        Self(
            scripts
                .iter()
                .map(|script| {
                    Command::new("timeout")
                        .args(["600", "sh", "-c", script])
                        .process_group(0)
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{}", c.id())])
                .status();
            let _ = c.wait();
        }
    }
}

/// An agent whose one tool call takes `secs` seconds (not idempotent; logs its start and end
/// with its idempotency key in `tally.log`), then answers.
fn slow_tally_agent(d: &Path, secs: u32) {
    std::fs::write(
        d.join("slowtally.yaml"),
        format!(
            r#"name: slowtally
mode: react
model: scripted:slowtally.script.yaml
tools:
  - name: tally
    description: Counts one, slowly (not idempotent; logs its start and end).
    command: ["sh", "-c", "cat > /dev/null; echo \"start $WEFT_IDEMPOTENCY_KEY\" >> tally.log; sleep {secs}; echo \"end $WEFT_IDEMPOTENCY_KEY\" >> tally.log; echo '{{\"counted\": 1}}'"]
    sandbox: {{ write: [.] }}
"#
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("slowtally.script.yaml"),
        "- tool_calls: [ { name: tally, arguments: {} } ]\n- text: Tallied.\n",
    )
    .unwrap();
}

/// A two-step ReAct agent for `weft run`: two calls of a one-second tool, one after the other
/// (not idempotent; each logs its start and end with its call id in `steps.log` and returns
/// the call id), then the answer.
fn two_step_agent(d: &Path) {
    std::fs::write(
        d.join("twostep.yaml"),
        r#"name: twostep
mode: react
model: scripted:twostep.script.yaml
tools:
  - name: step
    description: One slow step (not idempotent; logs its call).
    command: ["sh", "-c", "cat > /dev/null; echo \"start $WEFT_CALL_ID\" >> steps.log; sleep 1; echo \"end $WEFT_CALL_ID\" >> steps.log; echo \"{\\\"done\\\": \\\"$WEFT_CALL_ID\\\"}\""]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("twostep.script.yaml"),
        // Two different steps: the same call again would be a repeat, refused (`repeats`).
        "- tool_calls: [ { name: step, arguments: { n: 1 } } ]\n- tool_calls: [ { name: step, arguments: { n: 2 } } ]\n- text: Both steps done.\n",
    )
    .unwrap();
}

/// `weft ARGS` in `d` on `db`, stdout and stderr to `NAME.out` and `NAME.err`.
fn spawn_weft(d: &Path, db: &str, args: &[&str], lease: Option<&str>, name: &str) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(["--db", db])
        .args(args)
        .current_dir(d)
        .env_remove("WEFT_DB")
        .env_remove("WEFT_LEASE_SECS")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(d.join(format!("{name}.out"))).unwrap())
        .stderr(std::fs::File::create(d.join(format!("{name}.err"))).unwrap());
    if let Some(secs) = lease {
        c.env("WEFT_LEASE_SECS", secs);
    }
    c.spawn().unwrap()
}

/// The lines of `steps.log` (`start ID` / `end ID`): for each call id, how many starts and
/// how many ends.
fn step_calls(d: &Path) -> std::collections::BTreeMap<String, (usize, usize)> {
    let mut calls = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(d.join("steps.log"))
        .unwrap_or_default()
        .lines()
    {
        let (what, id) = line.split_once(' ').unwrap();
        let e: &mut (usize, usize) = calls.entry(id.to_owned()).or_default();
        match what {
            "start" => e.0 += 1,
            _ => e.1 += 1,
        }
    }
    calls
}

/// Waits until `steps.log` holds a line beginning `start`, for at most `limit`.
fn wait_for_a_step(d: &Path, limit: Duration) {
    let began = Instant::now();
    while !std::fs::read_to_string(d.join("steps.log"))
        .unwrap_or_default()
        .contains("start ")
    {
        assert!(
            began.elapsed() < limit,
            "no step began within {limit:?}: {}",
            std::fs::read_to_string(d.join("run.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The session's events, as `weft sessions events ID` prints them.
fn session_events(d: &Path, db: &str, id: &str) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["--db", db, "sessions", "events", id])
        .current_dir(d)
        .env_remove("WEFT_DB")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weft sessions events {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A plain HTTP/1.0 exchange with the server on `port` (the body is not chunked, the
/// connection closes after it), with the API key: (status, head, body), or `None` when no
/// answer came within `limit`.
fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    limit: Duration,
) -> Option<(u16, String, String)> {
    let mut s =
        TcpStream::connect_timeout(&std::net::SocketAddr::from(([127, 0, 0, 1], port)), limit)
            .ok()?;
    s.set_read_timeout(Some(limit)).unwrap();
    s.set_write_timeout(Some(limit)).unwrap();
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nx-api-key: {ALICE}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, head.to_owned(), body.to_owned()))
}

/// Asks `GET path` every 100 ms until it answers `want`, for at most `limit`; the last answer
/// (`None`: no answer) when it never did.
fn until_status(port: u16, path: &str, want: u16, limit: Duration) -> Result<(), String> {
    let began = Instant::now();
    let mut last = None;
    while began.elapsed() < limit {
        let left = limit
            .saturating_sub(began.elapsed())
            .max(Duration::from_millis(100));
        match http(port, "GET", path, None, left) {
            Some((status, _, _)) if status == want => return Ok(()),
            answer => last = answer,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "GET {path} did not answer {want} within {limit:?}; last answer: {last:?}"
    ))
}

/// A new thread on the server on `port`: its id.
fn new_thread(port: u16) -> String {
    let (status, _, body) = http(
        port,
        "POST",
        "/threads",
        Some("{}"),
        Duration::from_secs(10),
    )
    .expect("POST /threads answered");
    assert_eq!(status, 200, "POST /threads: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["thread_id"].as_str().unwrap().to_owned()
}

/// The body of a run of `tally` on a thread.
const TALLY_RUN: &str = r#"{"assistant_id": "tally", "input": {"messages": [{"role": "user", "content": "tally one"}]}}"#;

/// `weft run` of [`two_step_agent`] on a private cluster crashed for `down` while the first
/// step's tool runs (default lease): exit 0 with the answer, both calls finished with the
/// tool's own result (none an unknown outcome), each call run once.
fn ride_out(down: Duration) {
    let cluster = common::PgCluster::start("cli");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    two_step_agent(d);
    let mut run = spawn_weft(
        d,
        &cluster.url,
        &["run", "twostep.yaml", "go", "--id", "cli-1"],
        None,
        "run",
    );
    wait_for_a_step(d, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));
    Fault::Crash(down).apply(&cluster);
    let (status, killed) = wait_bounded(&mut run, Duration::from_secs(60));
    let stdout = std::fs::read_to_string(d.join("run.out")).unwrap_or_default();
    let stderr = std::fs::read_to_string(d.join("run.err")).unwrap_or_default();
    assert!(
        !killed,
        "weft run was still running a minute after the outage: {stderr}"
    );
    assert_eq!(
        status.code(),
        Some(0),
        "weft run through a {down:?} crash:\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.contains("Both steps done."), "{stdout}");
    let calls = step_calls(d);
    assert_eq!(calls.len(), 2, "two calls of the tool: {calls:?}");
    assert!(
        calls.values().all(|c| *c == (1, 1)),
        "each call started and ended once: {calls:?}"
    );
    let events = session_events(d, &cluster.url, "cli-1");
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_finished")
        .collect();
    assert_eq!(finished.len(), 2, "{events:?}");
    for f in &finished {
        assert_eq!(
            f["outcome"]["status"], "ok",
            "a call that finished during the outage is recorded without its result: {f}"
        );
        let done = f["outcome"]["output"]["done"].as_str().unwrap_or_default();
        assert!(
            calls.contains_key(done),
            "the recorded output is not the tool's: {f} (calls {calls:?})"
        );
    }
}

/// Tests that need PostgreSQL (a cluster of their own: its server programs on PATH), some the
/// SDK as well.
mod needs_postgres {
    use super::*;

    /// Four rounds of 20 concurrent SDK streams on one `weft serve` on a private cluster; in the
    /// second the database crashes for 6 s (less than the 15 s lease), in the fourth it
    /// restarts (`-m fast`). No process dies, so every acknowledged stream ends `end` with its
    /// run `success` and no `error` event, no call has an unknown outcome, no run is continued
    /// by another owner (or at another lease epoch), no tool call runs twice, and the server
    /// is still up at the end.
    #[test]
    fn needs_sdk_streams_through_a_postgres_crash_end_as_their_runs() {
        let out = outage_seam(
            4,
            20,
            2,
            &[Fault::Crash(Duration::from_secs(6)), Fault::RestartFast],
        );
        assert!(
            out.contains("kills=2,")
                && out.contains("unknown_outcome=0,")
                && out.contains("continued=0"),
            "{out}"
        );
    }

    /// Two rounds of 100 concurrent SDK streams on one `weft serve` on a private cluster (the
    /// default 15 s lease), while both cores are kept busy by other processes and another
    /// client works the same database server: the 100 runs fill the store's pool, yet the
    /// server's lease renewals (on connections of their own) keep every run it drives, so no
    /// live run is taken over as an orphan, none moves to another lease epoch, no stream ends
    /// with `error`, no call has an unknown outcome and none runs twice.
    #[test]
    fn needs_sdk_concurrent_streams_on_a_busy_database_are_never_taken_over() {
        let out = seam_on_a_cluster(2, 100, 0, &[], "15", true);
        assert!(
            out.contains("unknown_outcome=0,") && out.contains("continued=0"),
            "{out}"
        );
    }

    /// Two replicas on one PostgreSQL; 10 runs streamed on A, each in a 4 s tool call, when A
    /// is frozen (SIGSTOP) past its leases: B takes them over and finishes them `success`.
    /// Thawed (SIGCONT), A answers `runs.get` for each with `success` as B does (any replica
    /// answers from the store), A's streams opened before the freeze end `end` with
    /// `success` and never `error`, and no tool call runs twice.
    #[test]
    fn needs_sdk_a_thawed_replica_answers_from_the_store() {
        let python = common::service_var("WEFT_TEST_SDK_PYTHON");
        let db = common::Database::new("pg_thawed");
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        keys(d);
        slow_tally_agent(d, 4);
        let ports = [free_port(), free_port()];
        let lease = crate::serve::REPLICA_LEASE_SECS;
        let mut a = serve_on(d, ports[0], &db.url, lease, "serve-a.log");
        let mut b = serve_on(d, ports[1], &db.url, lease, "serve-b.log");
        let script = r#"
import asyncio, os, signal, sys, time
from langgraph_sdk import get_client
A, B, KEY, PID, LEASE = sys.argv[1:6]
PID, LEASE, N = int(PID), float(LEASE), 10
MSG = {"messages": [{"role": "user", "content": "tally slowly"}]}

async def stream(client, tid, started):
    parts = []
    try:
        async for p in client.runs.stream(tid, "slowtally", input=MSG, stream_mode="custom"):
            parts.append((p.event, p.data))
            if p.event == "custom" and p.data.get("type") == "tool_call_started":
                started.add(tid)
    except Exception as e:
        return parts, repr(e)
    return parts, None

async def terminal(client, tid, rid, limit):
    since = time.time()
    while (s := (await client.runs.get(tid, rid))["status"]) in ("pending", "running"):
        assert time.time() - since < limit, (tid, rid, s, f"not done within {limit} s")
        await asyncio.sleep(0.2)
    return s

async def main():
    a = get_client(url=A, api_key=KEY, timeout=120)
    b = get_client(url=B, api_key=KEY, timeout=120)
    tids = [(await a.threads.create())["thread_id"] for _ in range(N)]
    started = set()
    tasks = [asyncio.ensure_future(stream(a, t, started)) for t in tids]
    since = time.time()
    while len(started) < N:
        assert time.time() - since < 30, f"only {len(started)} of {N} tool calls began on A"
        assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]
        await asyncio.sleep(0.02)
    runs = {}
    for t in tids:
        listed = await a.runs.list(t)
        assert len(listed) == 1, listed
        runs[t] = listed[0]["run_id"]
    os.kill(PID, signal.SIGSTOP)
    frozen = time.time()
    try:
        on_b = {t: await terminal(b, t, r, 60) for t, r in runs.items()}
        assert all(s == "success" for s in on_b.values()), f"B's answers while A was frozen: {on_b}"
        took = time.time() - frozen
        # Frozen for longer than a lease, whatever B took.
        await asyncio.sleep(max(0.0, LEASE + 1 - (time.time() - frozen)))
    finally:
        os.kill(PID, signal.SIGCONT)
    print(f"B finished A's {N} runs {took:.1f} s into the freeze", flush=True)
    for t, r in runs.items():
        sa = await terminal(a, t, r, 20)
        sb = (await b.runs.get(t, r))["status"]
        assert (sa, sb) == ("success", "success"), f"run {r}: A says {sa}, B says {sb}"
    print("ok: A and B answer runs.get with success", flush=True)
    done = await asyncio.wait_for(asyncio.gather(*tasks), 60)
    ends = []
    for t, (parts, err) in zip(tids, done):
        events = [e for e, _ in parts]
        assert "error" not in events, f"A's stream of {t} ended with error for a run that succeeded: {parts}"
        assert err is None, f"A's stream of {t} failed: {err}; parts {parts}"
        assert events and events[-1] == "end" and parts[-1][1]["status"] == "success", (t, parts)
        ends.append(events[-1])
    print(f"ok: A's streams end as their runs: {ends}", flush=True)
    starts = [l.split()[1] for l in open("tally.log").read().splitlines() if l.startswith("start")]
    assert len(starts) == len(set(starts)) == N, f"tool calls started: {starts}"
    print("ok: each tool call ran once", flush=True)

asyncio.run(main())
"#;
        let client = Command::new(&python)
            .args(["-c", script])
            .args(ports.map(|p| format!("http://127.0.0.1:{p}")))
            .arg(ALICE)
            .arg(a.id().to_string())
            .arg(lease)
            .current_dir(d)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Bounded by time: the client's own waits add up to well under this.
        let out = output_within(client, Duration::from_secs(150));
        let _ = Command::new("kill")
            .args(["-CONT", &a.id().to_string()])
            .status();
        stop(&mut a);
        stop(&mut b);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("ok: each tool call ran once"),
            "{stdout}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs(d, &["serve-a.log", "serve-b.log"])
        );
        println!("{stdout}");
    }

    /// `weft run` of a two-step agent on a private cluster that crashes for 3 s while the
    /// first step's tool runs: it rides the outage out and exits 0 with the answer; the
    /// session's events hold both calls finished with the tool's real result (none an unknown
    /// outcome), and each call ran once.
    #[test]
    fn weft_run_rides_out_a_3s_postgres_crash() {
        ride_out(Duration::from_secs(3));
    }

    /// As [`weft_run_rides_out_a_3s_postgres_crash`], with the database down for 8 s: longer
    /// than the store's wait for a connection (5 s), shorter than the run's lease (15 s, the
    /// default), so `weft run` still rides it out.
    #[test]
    fn weft_run_rides_out_an_outage_shorter_than_its_lease() {
        ride_out(Duration::from_secs(8));
    }

    /// `weft run` on a private cluster that stays down for longer than the run's lease (2 s;
    /// down 10 s, well past the store's 5 s wait for a connection) while a step's tool runs: it
    /// gives up with exit 4 (the store failed) and says `weft resume` with the session's id;
    /// that advice works once the database is back, and no call runs twice.
    #[test]
    fn weft_run_down_past_its_lease_exits_4_saying_weft_resume() {
        let cluster = common::PgCluster::start("cli_lease");
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        two_step_agent(d);
        let mut run = spawn_weft(
            d,
            &cluster.url,
            &["run", "twostep.yaml", "go", "--id", "cli-2"],
            Some("2"),
            "run",
        );
        wait_for_a_step(d, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(300));
        Fault::Crash(Duration::from_secs(10)).apply(&cluster);
        let (status, killed) = wait_bounded(&mut run, Duration::from_secs(60));
        let stderr = std::fs::read_to_string(d.join("run.err")).unwrap_or_default();
        assert!(
            !killed,
            "weft run was still running a minute after the outage: {stderr}"
        );
        assert_eq!(
            status.code(),
            Some(4),
            "weft run with the database down past its lease: {stderr}"
        );
        assert!(
            stderr.contains("weft resume") && stderr.contains("cli-2"),
            "exit 4 without saying `weft resume cli-2`: {stderr}"
        );
        let mut resume = spawn_weft(d, &cluster.url, &["resume", "cli-2"], Some("2"), "resume");
        let (status, killed) = wait_bounded(&mut resume, Duration::from_secs(60));
        let resumed = std::fs::read_to_string(d.join("resume.err")).unwrap_or_default();
        assert!(
            !killed && status.code() == Some(0),
            "weft resume cli-2: {resumed}"
        );
        let calls = step_calls(d);
        assert!(
            calls.values().all(|c| c.0 == 1),
            "a call ran more than once: {calls:?}"
        );
    }

    /// `weft serve` on a private cluster: `/ok` answers 200 while the database is up; within
    /// 3 s of a crash `/ok` and `/ok?check_db=1` answer 503 and a new run is refused with 503
    /// and `Retry-After` in under a second; within 5 s of the database's return `/ok` answers
    /// 200 again and a run succeeds.
    #[test]
    fn health_says_the_store_is_down() {
        let cluster = common::PgCluster::start("health");
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        keys(d);
        tally_agent(d);
        let port = free_port();
        let mut server = serve_on(d, port, &cluster.url, OUTAGE_LEASE_SECS, "serve.log");
        let check = |what: &str, r: Result<(), String>| {
            if let Err(e) = r {
                panic!("{what}: {e}\n{}", logs(d, &["serve.log"]));
            }
        };
        let second = Duration::from_secs(1);
        check("up", until_status(port, "/ok", 200, second));
        check("up", until_status(port, "/ok?check_db=1", 200, second));
        let thread = new_thread(port);

        cluster.crash();
        // Both asked from the crash on, side by side: `check_db=1` may take a probe's time.
        let probe = std::thread::spawn(move || {
            until_status(port, "/ok?check_db=1", 503, Duration::from_secs(3))
        });
        check(
            "the database crashed",
            until_status(port, "/ok", 503, Duration::from_secs(3)),
        );
        check("the database crashed", probe.join().unwrap());
        let asked = Instant::now();
        let answer = http(
            port,
            "POST",
            &format!("/threads/{thread}/runs"),
            Some(TALLY_RUN),
            Duration::from_secs(10),
        );
        let took = asked.elapsed();
        let (status, head, body) = answer.expect("POST /threads/{id}/runs answered");
        assert!(
            status == 503 && head.to_ascii_lowercase().contains("\nretry-after:"),
            "a run created while the database is down: {status} after {took:?}\n{head}\n{body}"
        );
        assert!(took < second, "the 503 took {took:?}");

        cluster.start_again();
        check(
            "the database is back",
            until_status(port, "/ok", 200, Duration::from_secs(5)),
        );
        let thread = new_thread(port);
        let (status, _, body) = http(
            port,
            "POST",
            &format!("/threads/{thread}/runs"),
            Some(TALLY_RUN),
            Duration::from_secs(10),
        )
        .expect("POST /threads/{id}/runs answered");
        assert_eq!(status, 200, "a run after the database came back: {body}");
        let run: Value = serde_json::from_str(&body).unwrap();
        let rid = run["run_id"].as_str().unwrap();
        let began = Instant::now();
        let final_status = loop {
            let (_, _, body) = http(
                port,
                "GET",
                &format!("/threads/{thread}/runs/{rid}"),
                None,
                Duration::from_secs(10),
            )
            .expect("GET the run");
            let s = serde_json::from_str::<Value>(&body).unwrap()["status"].clone();
            if (s != "pending" && s != "running") || began.elapsed() > Duration::from_secs(30) {
                break s;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        stop(&mut server);
        assert_eq!(
            final_status,
            "success",
            "the run after the outage\n{}",
            logs(d, &["serve.log"])
        );
    }
}
