//! Crons of `weft serve` driven by the official `langgraph-sdk` Python client (`client.crons`):
//! the client script `tests/serve/cron_client.py` asserts what it gets back; these tests start
//! the servers (and kill them), write the agent, and run the script's phases.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::serve::{ALICE, BOB, free_port, sdk_script, serve_logged, stop, succeeded};
use crate::support as common;

use std::path::Path;
use std::time::Duration;

/// The `ticker` agent: one call of its tool `tick` (which logs `tick SESSION` to `ticks.log`)
/// and an answer, turn after turn.
fn ticker(d: &Path) {
    std::fs::write(
        d.join("ticker.yaml"),
        r#"name: ticker
mode: react
model: scripted:ticker.script.yaml
tools:
  - name: tick
    description: Logs a tick (not idempotent).
    command: ["sh", "-c", "cat > /dev/null; echo \"tick $WEFT_SESSION_ID\" >> ticks.log; echo '{\"ticked\": true}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    let turn = "- tool_calls: [ { name: tick, arguments: {} } ]\n- text: Ticked.\n";
    std::fs::write(d.join("ticker.script.yaml"), turn.repeat(300)).unwrap();
    std::fs::write(d.join("keys.txt"), format!("{ALICE} alice\n{BOB} bob\n")).unwrap();
}

/// Runs `cron_client.py` in `mode` against the server on `port`; what it printed (it must
/// succeed; else the last lines of the servers' `logs` are shown).
fn client(d: &Path, port: u16, mode: &[&str], logs: &[&str]) -> String {
    let out = sdk_script("cron_client.py", d, port, mode);
    succeeded(&format!("cron_client.py {mode:?}"), &out, d, logs)
}

/// The value of `key: VALUE` in the script's output.
fn printed<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
}

/// Sleeps until 600 ms past a second: the runs of a cron firing every second (at whole seconds)
/// have ended then, so that a kill falls between runs rather than in a tool call.
fn between_ticks() {
    let past = (now_ms() % 1000) as u64;
    std::thread::sleep(Duration::from_millis((1600 - past) % 1000));
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// `client.crons` on SQLite: create (threadless and on a thread), search with its filters,
/// limit, offset, sort and select, count, update, delete; a second user's key neither sees nor
/// changes the first's crons; a bad schedule is a 422 naming the field.
#[test]
fn needs_sdk_crons_are_created_searched_updated_and_deleted_per_user() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ticker(d);
    let port = free_port();
    let mut server = serve_logged(d, port, "serve.db", &[], "serve.log");
    let out = client(d, port, &["api"], &["serve.log"]);
    stop(&mut server);
    for check in [
        "create",
        "search",
        "count",
        "update",
        "isolation",
        "bad schedule",
        "delete",
        "info",
    ] {
        assert!(out.contains(&format!("ok: {check}\n")), "{check}: {out}");
    }
    // The far-off schedules started nothing.
    assert!(!d.join("ticks.log").exists());
}

/// A cron with seconds on a thread and a threadless one start their runs: the runs are listed,
/// succeeded, and the tool ran once per run; a cron with an `end_time` takes no tick after it;
/// the threads of a threadless cron's runs are deleted after them unless it says `keep`.
#[test]
fn needs_sdk_a_seconds_cron_starts_runs_on_its_thread_and_on_threads_of_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ticker(d);
    let port = free_port();
    let mut server = serve_logged(d, port, "serve.db", &[], "serve.log");
    let out = client(d, port, &["fire", "6"], &["serve.log"]);
    let deleting = client(d, port, &["deleting"], &["serve.log"]);
    stop(&mut server);
    println!("{out}{deleting}");
    assert!(out.contains("ok: fire\n"), "{out}");
    assert!(
        deleting.contains("ok: threads of runs deleted\n"),
        "{deleting}"
    );
}

/// A cron keeps firing after its server is killed (SIGKILL) and started again on the same
/// SQLite file: the cron is in the store, and the new server takes its ticks, starting the
/// ticks missed while no server ran once (not one run per missed tick).
#[test]
fn needs_sdk_a_cron_keeps_firing_after_its_server_is_killed_and_restarted() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ticker(d);
    let port = free_port();
    let mut server = serve_logged(d, port, "serve.db", &[], "serve-0.log");
    let out = client(d, port, &["thread-cron"], &["serve-0.log"]);
    let (thread, cron) = (printed(&out, "thread"), printed(&out, "cron"));
    std::thread::sleep(Duration::from_secs(3));
    between_ticks();
    server.kill().unwrap();
    server.wait().unwrap();
    // Three ticks are missed: the next server starts one of them.
    std::thread::sleep(Duration::from_secs(3));
    let restarted = now_ms().to_string();
    let mut server = serve_logged(d, port, "serve.db", &[], "serve-1.log");
    std::thread::sleep(Duration::from_secs(4));
    let out = client(
        d,
        port,
        &["check-thread", thread, cron, &restarted],
        &["serve-0.log", "serve-1.log"],
    );
    stop(&mut server);
    println!("{out}");
    assert!(out.contains("ok: thread cron across a restart\n"), "{out}");
}

/// A tick claimed by a server that died before the tick's run was stored is not lost: once the
/// claim expired, a server takes it over and starts the tick's run. Taken over again after
/// that (as if the server that took it over died before closing the claim), the tick starts no
/// second run: its run's id is derived from the cron and the tick, and it is found stored.
#[test]
fn needs_sdk_a_tick_whose_server_died_before_its_run_was_stored_runs_once() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ticker(d);
    let port = free_port();
    let mut server = serve_logged(d, port, "serve.db", &[], "serve-0.log");
    let out = client(d, port, &["far-cron"], &["serve-0.log"]);
    let (thread, cron) = (printed(&out, "thread"), printed(&out, "cron"));
    stop(&mut server);
    let db = d.join("serve.db");
    let db = db.to_str().unwrap();
    let tick = (now_ms() / 1000 * 1000 - 60_000).to_string();
    client(d, port, &["open-claim", db, cron, &tick], &[]);
    let mut server = serve_logged(d, port, "serve.db", &[], "serve-1.log");
    let logs = ["serve-0.log", "serve-1.log"];
    let first = client(d, port, &["taken-up", thread, cron, &tick, "1"], &logs);
    client(d, port, &["open-claim", db, cron, &tick], &logs);
    let again = client(d, port, &["taken-up", thread, cron, &tick, "2"], &logs);
    stop(&mut server);
    println!("{first}{again}");
    assert!(first.contains("ok: claim taken up (1)\n"), "{first}");
    assert!(again.contains("ok: claim taken up (2)\n"), "{again}");
}

/// Twenty clients at once (`cron_client.py many`) create, update and delete crons of one
/// assistant, threadless and on one thread they share, while the crons tick, on SQLite: every
/// create returns a distinct id, a deleted cron starts no run once its delete answered, and
/// every tick of the crons kept ran once (one thread, one tool call and one run per tick counted).
#[test]
fn needs_sdk_twenty_clients_create_update_and_delete_crons_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ticker(d);
    let port = free_port();
    let mut server = serve_logged(d, port, "serve.db", &[], "serve.log");
    let out = client(d, port, &["many", "20", "6"], &["serve.log"]);
    stop(&mut server);
    println!("{out}");
    assert!(out.contains("ok: many clients\n"), "{out}");
}

/// How many ticks the server of `log` started.
fn ticks_started(d: &Path, log: &str) -> usize {
    std::fs::read_to_string(d.join(log))
        .unwrap_or_default()
        .matches("a cron's tick started its run")
        .count()
}

/// Tests that need PostgreSQL as well as the SDK.
mod needs_postgres {
    use super::*;

    /// Two servers on one PostgreSQL database and a cron every second for about 12 s, one of
    /// the servers killed (SIGKILL) and started again in the middle: every tick ran exactly
    /// once (one thread and one tool call per tick, none twice), and no tick was lost.
    #[test]
    fn needs_sdk_two_servers_start_each_tick_of_a_cron_once() {
        let db = common::Database::new("serve_crons");
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        ticker(d);
        let (pa, pb) = (free_port(), free_port());
        let mut a = serve_logged(d, pa, &db.url, &[], "a-0.log");
        let mut b = serve_logged(d, pb, &db.url, &[], "b.log");
        let out = client(d, pa, &["threadless-cron"], &["a-0.log", "b.log"]);
        let cron = printed(&out, "cron").to_owned();
        std::thread::sleep(Duration::from_secs(4));
        between_ticks();
        a.kill().unwrap();
        a.wait().unwrap();
        std::thread::sleep(Duration::from_secs(2));
        let mut a = serve_logged(d, pa, &db.url, &[], "a-1.log");
        std::thread::sleep(Duration::from_secs(6));
        let logs = ["a-0.log", "a-1.log", "b.log"];
        let out = client(d, pb, &["check-threadless", &cron], &logs);
        stop(&mut a);
        stop(&mut b);
        let started: Vec<String> = logs
            .iter()
            .map(|l| format!("{l}={}", ticks_started(d, l)))
            .collect();
        println!("{out}ticks started per server: {}", started.join(" "));
        assert!(out.contains("ok: each tick once\n"), "{out}");
    }

    /// [`super::needs_sdk_twenty_clients_create_update_and_delete_crons_at_once`] with two
    /// servers on one PostgreSQL database, every other client talking to the second: the claim
    /// of a tick is a compare-and-set, so each tick of a cron ran once across both.
    #[test]
    fn needs_sdk_twenty_clients_on_two_servers_create_update_and_delete_crons_at_once() {
        let db = common::Database::new("serve_crons_many");
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        ticker(d);
        let (pa, pb) = (free_port(), free_port());
        let mut a = serve_logged(d, pa, &db.url, &[], "a.log");
        let mut b = serve_logged(d, pb, &db.url, &[], "b.log");
        let second = format!("http://127.0.0.1:{pb}");
        let out = client(d, pa, &["many", "20", "6", &second], &["a.log", "b.log"]);
        stop(&mut a);
        stop(&mut b);
        println!(
            "{out}ticks started per server: a.log={} b.log={}",
            ticks_started(d, "a.log"),
            ticks_started(d, "b.log")
        );
        assert!(out.contains("ok: many clients\n"), "{out}");
    }
}
