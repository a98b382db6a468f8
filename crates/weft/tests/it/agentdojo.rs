//! The AgentDojo harness (`bench/agentdojo/`) on a sample: the banking suite's first two user
//! tasks, without an attack and with its first injection task, each a `weft run` of a ReAct agent
//! whose tools come from the harness's MCP server and whose model is the compromised model. The
//! test checks that the tool calls went through weft (the MCP server saw every ground-truth call,
//! and weft recorded as many calls), and that agentdojo's checks ran on each run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn needs_dojo_banking_tasks_run_their_tool_calls_through_weft_and_are_checked() {
    let python = common::service_var("WEFT_TEST_DOJO_PYTHON");
    let d = tempfile::tempdir().unwrap();
    let results = d.path().join("results.json");
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/agentdojo/driver.py");
    let out = Command::new(&python)
        .arg(&driver)
        .args(["--weft", env!("CARGO_BIN_EXE_weft")])
        .args([
            "--suites",
            "banking",
            "--user-tasks",
            "2",
            "--injection-tasks",
            "1",
        ])
        .arg("--results")
        .arg(&results)
        .current_dir(d.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the driver failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("| ReAct without policies | banking | 2 | 1 |"),
        "no banking row in the table:\n{stdout}"
    );
    assert!(
        stdout.contains("| ReAct with policies | banking | 2 | 1 |"),
        "no banking row with policies in the table:\n{stdout}"
    );

    let all: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    let outcomes = all["ReAct without policies"].as_array().unwrap();
    let mut pairs: Vec<(String, Option<String>)> = outcomes
        .iter()
        .map(|o| {
            (
                o["user_task"].as_str().unwrap().to_owned(),
                o["injection_task"].as_str().map(str::to_owned),
            )
        })
        .collect();
    pairs.sort();
    let inj = Some("injection_task_0".to_owned());
    assert_eq!(
        pairs,
        vec![
            ("user_task_0".to_owned(), None),
            ("user_task_0".to_owned(), inj.clone()),
            ("user_task_1".to_owned(), None),
            ("user_task_1".to_owned(), inj),
        ]
    );
    for o in outcomes {
        assert_eq!(o["status"], "completed", "{o}");
        assert_eq!(o["exit_code"], 0, "{o}");
        assert!(o["error"].is_null(), "{o}");
        let trace = strings(&o["trace"]);
        let truth = strings(&o["ground_truth"]);
        assert!(!truth.is_empty(), "{o}");
        // Every call the MCP server ran was a call weft started.
        assert_eq!(o["tool_calls_in_weft"], trace.len(), "{o}");
        assert_eq!(o["utility"], true, "agentdojo's utility check: {o}");
        if o["injection_task"].is_null() {
            assert_eq!(trace, truth, "{o}");
            assert!(o["attack_succeeded"].is_null(), "{o}");
        } else {
            // The compromised model obeyed the injection it read: its calls came first, then the
            // user's remaining ones; with no defence in weft, agentdojo's security check finds
            // the injection task's goal reached.
            let injected = strings(&o["injection_ground_truth"]);
            assert!(!injected.is_empty(), "{o}");
            assert_eq!(trace.len(), truth.len() + injected.len(), "{o}");
            let mut rest = trace.clone();
            for name in &injected {
                let at = rest
                    .iter()
                    .position(|t| t == name)
                    .unwrap_or_else(|| panic!("the injection's call {name} was not made: {o}"));
                rest.remove(at);
            }
            assert_eq!(rest, truth, "{o}");
            assert_eq!(
                o["attack_succeeded"], true,
                "agentdojo's security check: {o}"
            );
        }
    }

    // With the suite's `trust:`, the injection's transfer is refused: weft names the untrusted
    // data, the MCP server never sees the call, and agentdojo's security check finds the goal
    // not reached. A task that only reads keeps its utility.
    let policed = all["ReAct with policies"].as_array().unwrap();
    assert_eq!(policed.len(), 4);
    for o in policed {
        assert_eq!(o["status"], "completed", "{o}");
        assert!(o["error"].is_null(), "{o}");
        assert_eq!(o["tool_calls_in_weft"], strings(&o["trace"]).len(), "{o}");
        if o["injection_task"].is_null() {
            assert!(o["attack_succeeded"].is_null(), "{o}");
        } else {
            assert_eq!(o["attack_succeeded"], false, "{o}");
            assert!(o["refused"].as_u64().unwrap() > 0, "{o}");
        }
        if o["user_task"] == "user_task_1" && o["injection_task"].is_null() {
            assert_eq!(o["utility"], true, "{o}");
        }
    }
}
