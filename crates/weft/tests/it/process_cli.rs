//! Plans reused as tools (`process:`) and fan-out (`_forEach`) through `weft plan run`: the
//! example's fan-out over orders, each looked up by a process in a linked session; a process
//! that calls another process; load-time mistakes in a process file; and SIGKILL while a
//! process runs, after which `weft resume` continues the child session instead of starting its
//! plan over.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn weft(dir: &Path, db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("--db")
        .arg(db)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn events(dir: &Path, db: &Path, id: &str) -> Vec<Value> {
    let out = weft(dir, db, &["sessions", "events", id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_example_fans_out_over_orders_each_looked_up_by_a_process() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("weft.db");
    let ex = root().join("examples");
    let out = weft(
        &ex,
        &db,
        &[
            "plan",
            "run",
            "plans/orders.json",
            "--agent",
            "shop.yaml",
            "--input",
            r#"{"orders": ["A-1001", "A-1002", "A-1003", "A-9999"]}"#,
            "--id",
            "orders",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    let statuses = state["statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 4);
    assert_eq!(
        statuses[0],
        json!({"order": {"id": "A-1001", "status": "delivered", "total": 42.5},
               "summary": "Order A-1001 is delivered (42.5 EUR)."})
    );
    assert_eq!(
        statuses[2]["summary"],
        json!("Order A-1003 is refunded (99.9 EUR).")
    );
    // The unknown order failed in its process; `_onItemError: collect` keeps its error in place.
    let e = statuses[3]["error"]["message"].as_str().unwrap();
    assert!(
        e.contains("the process `orderStatus`") && e.contains("no order A-9999"),
        "{e}"
    );
    assert!(
        state["report"]
            .as_str()
            .unwrap()
            .starts_with("Order A-1001 is delivered (42.5 EUR).\nOrder A-1002 is in transit")
    );

    // Each item's call ran a process in a session of its own, linked to the plan's, whose
    // State's declared slots were the call's result.
    let ev = events(&ex, &db, "orders");
    let starts: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == "tool_call_started")
        .collect();
    assert_eq!(starts.len(), 5, "four items and the report");
    let key = starts[0]["idempotency_key"].as_str().unwrap();
    let child = format!("{key}/process");
    let out = weft(&ex, &db, &["sessions", "show", &child, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["parent_id"], json!("orders"), "{shown}");
    let child_events = events(&ex, &db, &child);
    assert!(child_events.iter().any(|e| e["type"] == "plan_accepted"));
    let item_of = |k: usize| -> Value { json!(k) };
    let items: Vec<Value> = starts[..4].iter().map(|s| s["item"].clone()).collect();
    let mut sorted = items.clone();
    sorted.sort_by_key(|v| v.as_u64());
    assert_eq!(sorted, (0..4).map(item_of).collect::<Vec<_>>());
    let fan = ev.iter().find(|e| e["type"] == "fan_out_started").unwrap();
    assert_eq!(fan["items"], json!(4));
}

/// A fresh directory with a process that calls another process, and the agent and plan that
/// call the outer one.
fn nested(dir: &Path, ledger: &Path, slow: bool) {
    let sleep = if slow { "sleep 2; " } else { "" };
    let tool = |name: &str, idempotent: bool, sleep: &str| {
        json!({
            "name": name,
            "command": ["sh", "-c", format!("cat > /dev/null; printf '%s\\n' \"{name} $WEFT_STEP_ID\" >> \"$LEDGER\"; {sleep}echo '\"{name} done\"'")],
            "env": {"LEDGER": ledger.display().to_string()},
            // It appends to the ledger, which its sandbox lets it write.
            "sandbox": {"write": [ledger.parent().unwrap().display().to_string()]},
            "idempotent": idempotent,
        })
    };
    let inner = json!({
        "name": "inner",
        "description": "Appends the second line.",
        "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        "state_schema": {"type": "object", "properties": {"second": {"type": "string"}}, "required": ["second"]},
        "tools": [tool("appendTwice", true, sleep)],
        "plan": [{"_id": "two", "_tool": "appendTwice", "word": "†input.word", "_outputPath": "†state.second"}]
    });
    let outer = json!({
        "name": "outer",
        "description": "Appends a line once, then calls the inner process.",
        "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        "state_schema": {"type": "object", "properties": {"first": {"type": "string"}, "inner": {"type": "object"}}, "required": ["first", "inner"]},
        "tools": [tool("appendOnce", false, ""), {"process": "inner.json"}],
        "plan": [
            {"_id": "one", "_tool": "appendOnce", "_outputPath": "†state.first"},
            {"_id": "nested", "_tool": "inner", "word": "†input.word", "_dependsOn": ["one"], "_outputPath": "†state.inner"}
        ]
    });
    std::fs::write(dir.join("inner.json"), inner.to_string()).unwrap();
    std::fs::write(dir.join("outer.json"), outer.to_string()).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        "name: caller\nmode: plan\ntools:\n  - process: outer.json\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("plan.json"),
        r#"[{"_id": "call", "_tool": "outer", "word": "†input.word", "_outputPath": "†state.result"}]"#,
    )
    .unwrap();
}

fn ledger(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_process_calls_a_process() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let led = d.join("ledger.txt");
    nested(d, &led, false);
    let db = d.join("weft.db");
    let out = weft(
        d,
        &db,
        &[
            "plan",
            "run",
            "plan.json",
            "--agent",
            "agent.yaml",
            "--input",
            r#"{"word": "hi"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        state,
        json!({"result": {"first": "appendOnce done", "inner": {"second": "appendTwice done"}}})
    );
    assert_eq!(ledger(&led), ["appendOnce one", "appendTwice two"]);
    // What a planner sees of the process: its first line and the slots it fills.
    let out = weft(d, &db, &["tools", "list", "agent.yaml"]);
    assert!(
        text(&out.stdout).contains("Appends a line once, then calls the inner process. Returns {first: string, inner: object}."),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn mistakes_in_a_process_file_exit_2_naming_the_file_and_step() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    nested(d, &d.join("ledger.txt"), false);
    let db = d.join("weft.db");
    let outer = std::fs::read_to_string(d.join("outer.json")).unwrap();
    for (from, to, expected) in [
        (
            r#""_tool":"appendOnce""#,
            r#""_tool":"appendMore""#,
            "step `one`, field `_tool`: unknown tool `appendMore`",
        ),
        (
            r#""required":["first","inner"]"#,
            r#""required":["first","inner","third"]"#,
            "`state_schema` requires `third`, which no step of the plan writes",
        ),
        (
            r#"{"process":"inner.json"}"#,
            r#"{"process":"outer.json"}"#,
            "process files call each other in a loop",
        ),
    ] {
        assert!(outer.contains(from), "{from} not in {outer}");
        std::fs::write(d.join("outer.json"), outer.replacen(from, to, 1)).unwrap();
        let out = weft(
            d,
            &db,
            &[
                "plan",
                "run",
                "plan.json",
                "--agent",
                "agent.yaml",
                "--input",
                r#"{"word": "x"}"#,
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.contains("outer.json") && err.contains(expected),
            "expected {expected:?} in {err}"
        );
    }
}

#[test]
fn a_process_killed_mid_run_is_continued_not_started_over() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let led = d.join("ledger.txt");
    nested(d, &led, true);
    let db = d.join("weft.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("--db")
        .arg(&db)
        .args([
            "plan",
            "run",
            "plan.json",
            "--agent",
            "agent.yaml",
            "--input",
            r#"{"word": "hi"}"#,
            "--id",
            "top",
        ])
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill once the inner process's (slow) tool has started: the outer process's first step,
    // which is not idempotent, has run.
    let began = Instant::now();
    while !ledger(&led).iter().any(|l| l.starts_with("appendTwice")) {
        assert!(began.elapsed() < Duration::from_secs(30), "no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let out = weft(d, &db, &["resume", "top", "--agent", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        state["result"],
        json!({"first": "appendOnce done", "inner": {"second": "appendTwice done"}})
    );
    // The outer process was continued: its non-idempotent first step ran once. The inner
    // process's idempotent step, in flight at the kill, ran again.
    assert_eq!(
        ledger(&led),
        ["appendOnce one", "appendTwice two", "appendTwice two"]
    );
}
