//! `weft run` end to end on the `local` provider (a GGUF model run in the process, built with
//! the `local-model` feature; `scripts/setup-local-model` exports WEFT_TEST_LOCAL_GGUF): a
//! ReAct agent's model calls a tool that writes a log line, the call runs, and its result goes
//! back in the next model call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use serde_json::Value;

use crate::support as common;

const LOG_WORD: &str = r#"import json, sys
args = json.load(sys.stdin)
with open("tool.log", "a") as f:
    f.write(json.dumps(args) + "\n")
print(json.dumps({"logged": args.get("word")}))
"#;

#[test]
fn needs_local_model_react_run_calls_a_tool_and_sends_its_result_back() {
    let file = common::service_var("WEFT_TEST_LOCAL_GGUF");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("log_word.py"), LOG_WORD).unwrap();
    let agent = format!(
        r#"name: tiny-local
mode: react
model: {{ provider: local, file: "{file}", max_tokens: 100 }}
instructions: You are an assistant. Use the tools to answer.
limits: {{ max_iterations: 2, max_model_retries: 1 }}
tools:
  - name: log_word
    description: Write one word to the log.
    command: ["python3", "log_word.py"]
    input_schema: {{ type: object, properties: {{ word: {{ type: string }} }}, required: [word] }}
"#
    );
    std::fs::write(dir.join("agent.yaml"), agent).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "run",
            "agent.yaml",
            "Log the word hello.",
            "--events",
            "--db",
            "weft.db",
        ])
        .env("CANDLE_NUM_THREADS", "1")
        .current_dir(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let events = common::events_in(&stderr);
    let of = |t: &str| events.iter().filter(|e| e["type"] == t).collect::<Vec<_>>();
    let replies = of("model_replied");
    let asked = replies
        .iter()
        .find(|e| {
            e["reply"]["tool_calls"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["name"] == "log_word"))
        })
        .unwrap_or_else(|| panic!("no reply called log_word: {stderr}"));
    let call = &asked["reply"]["tool_calls"][0];
    let finished = of("tool_call_finished")
        .into_iter()
        .find(|e| e["call_id"] == call["id"])
        .unwrap_or_else(|| panic!("the call did not finish: {stderr}"));
    assert_eq!(finished["outcome"]["status"], "ok", "{finished}");
    let log = std::fs::read_to_string(dir.join("tool.log")).unwrap_or_default();
    let logged: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        logged.iter().any(|l| *l == call["arguments"]),
        "the tool log {logged:?} shows the call {call}"
    );
    // The result went back: a later model call whose prompt holds the call and its result
    // (it is longer than the first call's by at least the result's tokens).
    let first_input = asked["reply"]["usage"]["input_tokens"].as_u64().unwrap();
    let later = replies
        .iter()
        .find(|e| e["seq"].as_u64() > finished["seq"].as_u64())
        .unwrap_or_else(|| panic!("no model call after the tool result: {stderr}"));
    let later_input = later["reply"]["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        later_input > first_input + 10,
        "the next prompt ({later_input} tokens) holds the result (first: {first_input})"
    );
    eprintln!("call {call}; prompts {first_input} then {later_input} tokens; log {log}");
}
