//! Budgets, end to end through the `weft` command: a ReAct agent whose scripted model calls a
//! tool forever is stopped by its cost budget before the call that could pass it; a run killed
//! with SIGKILL and resumed keeps what it spent; `on_budget: ask` answered with a raised budget
//! goes on and stops at the new limit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn weft(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.current_dir(dir);
    c
}

/// A ReAct agent whose model (a script with prices) calls `tick` on every turn, forever; each
/// call of `tick` appends a line to `ticks.txt`, and from the third on waits while a file `hold`
/// exists (so a test can kill the process in the middle of a call). `budget` is the agent
/// file's `budget:`.
fn write_agent(dir: &Path, budget: &str) {
    let agent = format!(
        r#"name: spender
mode: react
model: {{ provider: scripted, script: script.yaml, max_tokens: 40, prices: {{ input_per_mtok: 1000, output_per_mtok: 2000 }} }}
limits: {{ max_iterations: 1000 }}
budget: {budget}
tools:
  - name: tick
    description: Count one tick.
    command: ["sh", "-c", "cat > /dev/null; echo tick >> ticks.txt; if [ -f hold ] && [ $(wc -l < ticks.txt) -ge 3 ]; then while [ -f hold ]; do sleep 0.01; done; fi; echo '{{\"ok\": true}}'"]
    sandbox: {{ write: [.] }}
    idempotent: true
"#
    );
    std::fs::write(dir.join("agent.yaml"), agent).unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "react:\n  - { tool_calls: [{ name: tick, arguments: {} }], repeat: 1000 }\n",
    )
    .unwrap();
}

fn events(dir: &Path, id: &str) -> Vec<Value> {
    let out = weft(dir)
        .args(["sessions", "events", id, "--db", "weft.db"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// The cost of every model call recorded (replies and failures).
fn cost(events: &[Value]) -> f64 {
    events
        .iter()
        .filter_map(|e| match e["type"].as_str() {
            Some("model_replied") => e["reply"]["usage"]["cost_usd"].as_f64(),
            Some("model_failed") => e["usage"]["cost_usd"].as_f64(),
            _ => None,
        })
        .sum()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_cost_budget_stops_a_tool_loop_before_the_call_that_could_pass_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(dir, "{ run: { cost_usd: 0.5 } }");
    let out = weft(dir)
        .args([
            "run",
            "agent.yaml",
            "Tick forever.",
            "--id",
            "s1",
            "--db",
            "weft.db",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("budget reached: run.cost_usd is 0.5"), "{err}");
    let ev = events(dir, "s1");
    let exceeded = of_type(&ev, "budget_exceeded");
    assert_eq!(exceeded.len(), 1, "{ev:?}");
    let e = exceeded[0];
    assert_eq!(e["which"], "run.cost_usd");
    assert_eq!(e["limit"].as_f64(), Some(0.5));
    let spent = cost(&ev);
    let call = e["call"].as_f64().unwrap();
    // What the check counted is what the log says was spent; the call it refused would have
    // crossed the limit; and what was spent is within the budget plus one call's most.
    assert!(
        (e["spent"].as_f64().unwrap() - spent).abs() < 1e-9,
        "{e} vs {spent}"
    );
    assert!(spent + call > 0.5, "{spent} + {call}");
    assert!(
        spent <= 0.5 + call,
        "spent {spent}, limit 0.5, one call's most {call}"
    );
    let calls = of_type(&ev, "model_replied").len();
    assert!(
        calls >= 3,
        "the loop ran a while before the budget: {calls} calls"
    );
    // The run stopped at a safe point: every tool call that started finished, and nothing
    // came after the end.
    assert_eq!(
        of_type(&ev, "tool_call_started").len(),
        of_type(&ev, "tool_call_finished").len()
    );
    assert_eq!(ev.last().unwrap()["type"], "run_finished");
    eprintln!(
        "cost budget 0.5: {calls} model calls, spent {spent:.6}, the refused call's most {call:.6}"
    );
}

/// Waits until `ticks.txt` holds at least `n` lines (the tool ran n times).
fn wait_for_ticks(dir: &Path, n: usize, child: &mut std::process::Child) {
    let start = Instant::now();
    loop {
        let lines = std::fs::read_to_string(dir.join("ticks.txt"))
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if lines >= n {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("weft ended ({status}) after {lines} ticks, before {n}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{n} ticks did not happen within a minute"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_run_killed_and_resumed_keeps_what_it_spent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(dir, "{ session: { cost_usd: 0.5 } }");
    std::fs::write(dir.join("hold"), "").unwrap();
    let mut child = weft(dir)
        .args([
            "run",
            "agent.yaml",
            "Tick forever.",
            "--id",
            "s2",
            "--db",
            "weft.db",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The third call of the tool holds: the process is killed while it runs.
    wait_for_ticks(dir, 3, &mut child);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    std::fs::remove_file(dir.join("hold")).unwrap();
    let before = events(dir, "s2");
    assert!(
        of_type(&before, "tool_call_started").len() > of_type(&before, "tool_call_finished").len(),
        "killed with a call in flight"
    );
    let spent_before = cost(&before);
    assert!(spent_before > 0.0, "calls were recorded before the kill");
    assert!(
        of_type(&before, "budget_exceeded").is_empty(),
        "killed mid-run"
    );
    let out = weft(dir)
        .args(["resume", "s2", "--db", "weft.db"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let ev = events(dir, "s2");
    let exceeded = of_type(&ev, "budget_exceeded");
    assert_eq!(exceeded.len(), 1, "{err}");
    let e = exceeded[0];
    assert_eq!(e["which"], "session.cost_usd");
    let spent = cost(&ev);
    let call = e["call"].as_f64().unwrap();
    // Spending is the log's: the calls before the kill count, the resumed run added to them.
    assert!(
        (e["spent"].as_f64().unwrap() - spent).abs() < 1e-9,
        "{e} vs {spent}"
    );
    assert!(spent > spent_before, "{spent} after, {spent_before} before");
    assert!(
        spent <= 0.5 + call,
        "spent {spent}, limit 0.5, one call's most {call}"
    );
    // Had the resumed run started from zero, it would have spent about the whole budget again.
    let after_kill: f64 = cost(&ev[before.len()..]);
    assert!(after_kill < 0.5, "the resumed run spent {after_kill} more");
    eprintln!(
        "killed after {spent_before:.6} spent, resumed, stopped at {spent:.6} (limit 0.5, call {call:.6})"
    );
}

#[test]
fn on_budget_ask_waits_and_a_raised_budget_goes_on_to_the_new_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(dir, "{ run: { cost_usd: 0.2 }, on_budget: ask }");
    let out = weft(dir)
        .args([
            "run",
            "agent.yaml",
            "Tick forever.",
            "--id",
            "s3",
            "--db",
            "weft.db",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let question = String::from_utf8_lossy(&out.stdout);
    assert!(
        question.contains("budget reached: run.cost_usd is 0.2"),
        "{question}"
    );
    let first = events(dir, "s3");
    let spent_first = cost(&first);
    assert!(spent_first <= 0.2, "{spent_first}");
    // An answer without a raised budget is asked again, spending nothing.
    let out = weft(dir)
        .args(["answer", "s3", "go on", "--db", "weft.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(cost(&events(dir, "s3")), spent_first);
    // Raised: the run goes on and stops (asks) again at the new limit.
    let out = weft(dir)
        .args([
            "answer",
            "s3",
            "go on",
            "--budget",
            "run.cost_usd=0.6",
            "--db",
            "weft.db",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let ev = events(dir, "s3");
    let exceeded = of_type(&ev, "budget_exceeded");
    assert_eq!(exceeded.len(), 3, "{ev:?}");
    let last = exceeded[2];
    assert_eq!(last["limit"].as_f64(), Some(0.6));
    let set = of_type(&ev, "budget_set");
    assert_eq!(set.len(), 1);
    assert_eq!(
        set[0]["budget"]["on_budget"], "ask",
        "the raise kept on_budget"
    );
    let spent = cost(&ev);
    let call = last["call"].as_f64().unwrap();
    assert!(spent > spent_first, "it went on: {spent} > {spent_first}");
    assert!(
        spent <= 0.6 + call,
        "spent {spent}, limit 0.6, one call's most {call}"
    );
    // `stop` ends it.
    let out = weft(dir)
        .args(["answer", "s3", "stop", "--db", "weft.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stopped at its budget"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bad_budget_is_refused_naming_the_file_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(dir, "{ run: { cost_usd: 0.5, tool_callz: 3 } }");
    let out = weft(dir)
        .args(["run", "agent.yaml", "Tick.", "--db", "weft.db"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agent.yaml") && err.contains("tool_callz"),
        "{err}"
    );
    assert!(!dir.join("weft.db").exists(), "nothing was stored");
    write_agent(dir, "{ run: { cost_usd: 0.5 } }");
    let out = weft(dir)
        .args([
            "run",
            "agent.yaml",
            "Tick.",
            "--budget",
            "run.cost_usd=lots",
            "--db",
            "weft.db",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--budget: run.cost_usd=lots"), "{err}");
}

#[test]
fn a_model_without_prices_is_named_when_a_cost_budget_is_set() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(dir, "{ run: { cost_usd: 0.5, model_calls: 2 } }");
    let agent = std::fs::read_to_string(dir.join("agent.yaml"))
        .unwrap()
        .replace(
            ", max_tokens: 40, prices: { input_per_mtok: 1000, output_per_mtok: 2000 }",
            "",
        );
    std::fs::write(dir.join("agent.yaml"), agent).unwrap();
    let out = weft(dir)
        .args(["run", "agent.yaml", "Tick.", "--db", "weft.db"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(
        err.matches("no prices for model scripted:").count(),
        1,
        "named once: {err}"
    );
    assert!(err.contains("cost budgets cannot be enforced"), "{err}");
    // The other limits still hold: two model calls, then the stop.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("budget reached: run.model_calls is 2"),
        "{err}"
    );
}

/// `.nan` and `.inf` read as "no limit" once the file is JSON: a runaway loop with
/// `cost_usd: .nan` spent without a stop. Each is refused by `weft check` and `weft run`, naming
/// the file, line and field, before anything is stored.
#[test]
fn a_limit_that_is_not_a_finite_number_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(
        dir,
        "{ run: { cost_usd: .nan, model_calls: .nan }, session: { tool_calls: .inf } }",
    );
    let out = weft(dir).args(["check", "agent.yaml"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for field in [
        "agent.yaml:5:18: budget.run.cost_usd: .nan is not a finite number",
        "budget.run.model_calls: .nan is not a finite number",
        "budget.session.tool_calls: .inf is not a finite number",
    ] {
        assert!(err.contains(field), "{field}: {err}");
    }
    let out = weft(dir)
        .args(["run", "agent.yaml", "Tick.", "--db", "weft.db"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("budget.run.cost_usd: .nan"), "{err}");
    assert!(!dir.join("ticks.txt").exists(), "the tool never ran");
    assert!(!dir.join("weft.db").exists(), "nothing was stored");
}

/// A per-tool limit on a tool the agent does not have would hold nothing (the tool meant stays
/// unlimited): refused in the file, in `--budget`, with the name meant; `--budget` that sets no
/// limit at all is refused too.
#[test]
fn a_per_tool_limit_on_an_unknown_tool_and_an_empty_budget_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(dir, "{ run: { tool_calls_per_tool: { tik: 3 } } }");
    let out = weft(dir).args(["check", "agent.yaml"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agent.yaml:5:41: budget.run.tool_calls_per_tool.tik: the agent has no tool `tik` (did you mean `tick`?)"),
        "{err}"
    );
    write_agent(dir, "{ run: { tool_calls_per_tool: { tick: 3 } } }");
    let out = weft(dir).args(["check", "agent.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (budget, said) in [
        (
            "tool_calls.nosuch=3",
            "--budget: run.tool_calls.nosuch: the agent has no tool `nosuch`",
        ),
        (
            "session.tool_calls.tik=3",
            "--budget: session.tool_calls.tik: the agent has no tool `tik` (did you mean `tick`?)",
        ),
        (",,,", "--budget: `,,,` sets no limit"),
    ] {
        let out = weft(dir)
            .args(["run", "agent.yaml", "Tick.", "--budget", budget])
            .args(["--db", "weft.db"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{budget}: {err}");
        assert!(err.contains(said), "{budget}: {err}");
        assert!(!dir.join("weft.db").exists(), "nothing was stored");
    }
}
