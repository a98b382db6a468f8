//! Bad input and hostile tools through the `weft` binary: every case ends in a clear error (or a
//! quiet stop), never a panic, a hang, unbounded memory or a session that cannot be read back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

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

fn assert_no_panic(o: &Output) {
    let err = text(&o.stderr);
    assert!(!err.contains("panicked"), "the binary panicked:\n{err}");
    assert_ne!(o.status.code(), Some(101), "exit 101:\n{err}");
}

/// An agent whose one tool `deep` is the Python program `script`.
fn agent_with_tool(dir: &Path, script: &str) {
    std::fs::write(dir.join("tool.py"), script).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        r#"name: hostile
mode: plan
model: scripted:script.yaml
tools:
  - name: deep
    command: ["python3", "tool.py"]
    idempotent: true
"#,
    )
    .unwrap();
    std::fs::write(dir.join("script.yaml"), "[]\n").unwrap();
}

#[test]
fn a_tool_output_nested_too_deep_fails_the_call_and_the_session_stays_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agent_with_tool(
        d,
        "import sys\nsys.stdin.read()\nprint('[' * 126 + ']' * 126)\n",
    );
    std::fs::write(
        d.join("plan.json"),
        r#"[{"_tool": "deep", "_outputPath": "†state.deep"}]"#,
    )
    .unwrap();
    let o = weft(
        d,
        &[
            "plan",
            "run",
            "plan.json",
            "--agent",
            "agent.yaml",
            "--id",
            "deep1",
        ],
    );
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("the output of `deep` is JSON nested 126 levels deep")
            && err.contains("at most 64"),
        "{err}"
    );
    let ev = weft(d, &["sessions", "events", "deep1"]);
    assert_no_panic(&ev);
    assert_eq!(ev.status.code(), Some(0), "{}", text(&ev.stderr));
    let events = text(&ev.stdout);
    assert!(events.contains("invalid_output"), "{events}");
}

#[test]
fn an_output_path_too_long_is_refused_by_the_plan_check() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agent_with_tool(d, "print('{}')\n");
    let path = vec!["a"; 200].join(".");
    std::fs::write(
        d.join("plan.json"),
        format!(r#"[{{"_tool": "deep", "_outputPath": "†state.{path}"}}]"#),
    )
    .unwrap();
    let o = weft(d, &["plan", "check", "plan.json", "--agent", "agent.yaml"]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("has 200 path segments; weft accepts at most 32"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn an_input_nested_too_deep_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agent_with_tool(d, "print('{}')\n");
    std::fs::write(d.join("plan.json"), r#"[{"_tool": "deep"}]"#).unwrap();
    let input = format!(r#"{{"a": {}1{}}}"#, "[".repeat(100), "]".repeat(100));
    let o = weft(
        d,
        &[
            "plan",
            "run",
            "plan.json",
            "--agent",
            "agent.yaml",
            "--input",
            &input,
        ],
    );
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("--input is JSON nested 101 levels deep"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_plan_argument_nested_too_deep_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    agent_with_tool(d, "print('{}')\n");
    let deep = format!("{}1{}", "[".repeat(120), "]".repeat(120));
    std::fs::write(
        d.join("plan.json"),
        format!(r#"[{{"_tool": "deep", "x": {deep}}}]"#),
    )
    .unwrap();
    let o = weft(d, &["plan", "run", "plan.json", "--agent", "agent.yaml"]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("the plan is JSON nested 122 levels deep"),
        "{}",
        text(&o.stderr)
    );
}

/// Runs weft with its stdout a pipe whose reading end is closed at once (as `| head -c 0`
/// does): weft must stop quietly, exit 0, and print no panic.
fn with_closed_stdout(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

#[test]
fn a_closed_stdout_stops_weft_run_and_plan_run_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let ex = examples();
    let agent = ex.join("weather-chat.yaml");
    let o = with_closed_stdout(
        d,
        &[
            "run",
            agent.to_str().unwrap(),
            "Where is it sunnier, Lisbon or Oslo?",
        ],
    );
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let plan = ex.join("plans/refund.json");
    let shop = ex.join("shop.yaml");
    let o = with_closed_stdout(
        d,
        &[
            "plan",
            "run",
            plan.to_str().unwrap(),
            "--agent",
            shop.to_str().unwrap(),
            "--input",
            r#"{"customerId": "cust_123", "amount": 50.0}"#,
        ],
    );
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // The view of the run is on stderr; nothing there complains about the closed stdout.
    let err = text(&o.stderr);
    assert!(
        !err.to_lowercase().contains("broken pipe") && !err.contains("error"),
        "{err}"
    );
}

#[test]
fn huge_durations_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A store to prune: one session of a plan of one built-in call.
    std::fs::write(
        d.join("echo.yaml"),
        "name: e\nmode: plan\nmodel: scripted:s.yaml\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(d.join("echo.json"), r#"[{"_tool": "echo", "x": 1}]"#).unwrap();
    let o = weft(d, &["plan", "run", "echo.json", "--agent", "echo.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = weft(
        d,
        &["sessions", "prune", "--older-than", "18446744073709551615d"],
    );
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("--older-than: `18446744073709551615d` is longer than"),
        "{}",
        text(&o.stderr)
    );
    for timeout in ["1e300", "\"1e30s\"", "\"5 fortnights\""] {
        std::fs::write(
            d.join("agent.yaml"),
            format!(
                "name: t\nmode: plan\nmodel: scripted:s.yaml\ntools:\n  - name: slow\n    command: [\"true\"]\n    timeout: {timeout}\n"
            ),
        )
        .unwrap();
        std::fs::write(d.join("plan.json"), r#"[{"_tool": "slow"}]"#).unwrap();
        let o = weft(d, &["plan", "check", "plan.json", "--agent", "agent.yaml"]);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(2), "{timeout}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(
            err.contains("agent.yaml") && err.contains("`slow`: timeout:"),
            "{timeout}: {err}"
        );
    }
}

/// Runs weft and checks it refused the input with exit 2 and a message containing `want`,
/// within `secs` seconds.
fn refused_fast(d: &Path, args: &[&str], want: &str, secs: u64) {
    let start = std::time::Instant::now();
    let o = weft(d, args);
    let took = start.elapsed();
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(want),
        "{args:?}: {}",
        text(&o.stderr)
    );
    assert!(took.as_secs() < secs, "{args:?} took {took:?}");
}

#[test]
fn deep_and_huge_inputs_are_refused_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    std::fs::write(d.join("plan.json"), r#"[{"_tool": "echo"}]"#).unwrap();
    // An agent file nesting 100,000 levels (the YAML parser took minutes on it).
    std::fs::write(
        d.join("deep-agent.yaml"),
        format!("name: a\nmode: plan\nmodel: scripted:s.yaml\ninstructions: {deep}\n"),
    )
    .unwrap();
    refused_fast(
        d,
        &["plan", "check", "plan.json", "--agent", "deep-agent.yaml"],
        "deep-agent.yaml: the agent file nests brackets 100000 levels deep; weft reads at most 128",
        10,
    );
    // A scripted model as deep, and one whose `repeat` would take gigabytes.
    std::fs::write(
        d.join("agent.yaml"),
        "name: a\nmode: react\nmodel: scripted:s.yaml\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(d.join("s.yaml"), format!("- text: {deep}\n")).unwrap();
    refused_fast(
        d,
        &["run", "agent.yaml", "hi"],
        "nests brackets 100000 levels deep",
        10,
    );
    std::fs::write(d.join("s.yaml"), "- { text: hi, repeat: 4000000000 }\n").unwrap();
    refused_fast(
        d,
        &["run", "agent.yaml", "hi"],
        "reply #1 (repeat: 4000000000) takes the script past 100000 replies",
        10,
    );
    // A plan of a million references.
    std::fs::write(
        d.join("echo.yaml"),
        "name: e\nmode: plan\nmodel: scripted:s.yaml\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    let refs = vec![r#""†input.a""#; 1_000_000].join(",");
    std::fs::write(
        d.join("big.json"),
        format!(r#"[{{"_tool": "echo", "x": [{refs}]}}]"#),
    )
    .unwrap();
    refused_fast(
        d,
        &["plan", "check", "big.json", "--agent", "echo.yaml"],
        "the plan holds more than 100000 JSON values",
        10,
    );
}

#[test]
fn files_and_streams_past_the_size_limit_are_refused_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        "name: a\nmode: plan\nmodel: scripted:s.yaml\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(d.join("s.yaml"), "[]\n").unwrap();
    std::fs::write(d.join("plan.json"), r#"[{"_tool": "echo"}]"#).unwrap();
    // `@/dev/zero` never ends: reading stops at the limit instead of growing to gigabytes.
    refused_fast(
        d,
        &[
            "plan",
            "run",
            "plan.json",
            "--agent",
            "agent.yaml",
            "--input",
            "@/dev/zero",
        ],
        "larger than 16 MiB",
        20,
    );
    refused_fast(
        d,
        &["plan", "check", "/dev/zero", "--agent", "agent.yaml"],
        "larger than 16 MiB",
        20,
    );
    refused_fast(
        d,
        &["plan", "check", "plan.json", "--agent", "/dev/zero"],
        "larger than 16 MiB",
        20,
    );
    // A task on stdin without end.
    let start = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["run", "agent.yaml", "-", "--db", "w.db"])
        .current_dir(d)
        .env_remove("WEFT_DB")
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .output()
        .unwrap();
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("cannot read the task from stdin")
            && text(&o.stderr).contains("larger than 16 MiB"),
        "{}",
        text(&o.stderr)
    );
    assert!(start.elapsed().as_secs() < 20);
}

/// Found by fuzzing: the expression compiler panicked ("empty lexer stack") on a template's
/// closing marker inside a `_when` condition, and a condition could build a value for minutes.
#[test]
fn a_condition_with_a_template_marker_or_a_value_builder_is_a_plan_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        "name: a\nmode: plan\nmodel: scripted:s.yaml\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    std::fs::write(d.join("s.yaml"), "[]\n").unwrap();
    let cases = [
        ("}}}}", "not a template"),
        ("{{ †state.a }}", "not a template"),
        ("x %} y", "not a template"),
        ("#}", "not a template"),
        // Ran for minutes before (found by fuzzing): a condition may not build values.
        ("(() * 100000000) ~ 2", "builds values"),
        ("'x' | indent(1000000000) == ''", "filter `indent`"),
        ("range(100000000) | length > 0", "calls `range(...)`"),
        // The expression engine overflowed on this slice (found by fuzzing).
        ("†state.l[6:][:][6:6:-6] == []", "uses `:`"),
    ];
    for (cond, says) in cases {
        let plan = serde_json::json!([{"_id": "s1", "_tool": "echo", "_when": cond, "text": "x"}]);
        std::fs::write(d.join("p.json"), plan.to_string()).unwrap();
        for cmd in [
            &["plan", "check", "--agent", "agent.yaml", "p.json"][..],
            &["plan", "run", "--agent", "agent.yaml", "p.json"][..],
        ] {
            let o = weft(d, cmd);
            assert_no_panic(&o);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{cmd:?} {cond}: {err}");
            assert!(
                err.contains("step `s1`, field `_when`") && err.contains(says),
                "{cmd:?} {cond}: {err}"
            );
        }
    }
}

/// A model can hand the `template` built-in a template that renders for minutes: the call fails
/// after its time, once (it would take as long again), and weft exits without waiting for it.
#[test]
fn a_template_that_renders_for_minutes_fails_its_call_in_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        "name: t\nmode: plan\nmodel: scripted:s.yaml\ntools:\n  - builtin: template\n",
    )
    .unwrap();
    std::fs::write(d.join("s.yaml"), "[]\n").unwrap();
    let plan = serde_json::json!([{"_id": "s1", "_tool": "template", "template": "{{ (() * 100000000000) ~ 2 }}"}]);
    std::fs::write(d.join("p.json"), plan.to_string()).unwrap();
    let began = std::time::Instant::now();
    let o = weft(
        d,
        &[
            "plan",
            "run",
            "--agent",
            "agent.yaml",
            "p.json",
            "--db",
            "w.db",
        ],
    );
    assert_no_panic(&o);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the template took longer than 5 s"), "{err}");
    assert!(!err.contains("retry"), "not retried: {err}");
    // One attempt of 5 s, not three, and no wait for the abandoned render at exit.
    assert!(
        began.elapsed() < std::time::Duration::from_secs(60),
        "{err}"
    );
}
