//! End to end against a real OpenAI-compatible server (llama.cpp's server with SmolLM2-135M,
//! started by `scripts/llm-server start`, which prints WEFT_TEST_OPENAI_BASE_URL). The model is
//! tiny and often wrong: these tests assert a clean end, valid events and usage, not wisdom.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn base_url() -> Option<String> {
    Some(common::service_var("WEFT_TEST_OPENAI_BASE_URL"))
}

fn write_agent(dir: &Path, mode: &str, url: &str) {
    let agent = format!(
        r#"name: tiny-{mode}
mode: {mode}
model: {{ provider: openai, name: smollm2, base_url: "{url}", api_key: none, timeout: 120s, max_tokens: 256 }}
instructions: You are a terse assistant. Use the echo tool to repeat words when asked.
limits: {{ max_iterations: 3, max_model_retries: 2, max_replans: 1, max_waves: 4, max_response_rounds: 1 }}
review_responses: false
tools:
  - builtin: echo
"#
    );
    std::fs::write(dir.join("agent.yaml"), agent).unwrap();
}

/// Runs the agent and checks what any run must satisfy, whatever the model said.
fn run_and_check(mode: &str) {
    let Some(url) = base_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_agent(dir, mode, &url);
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "run",
            "agent.yaml",
            "Repeat the word hello with the echo tool, then say done.",
            "--events",
            "--db",
            "weft.db",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "a terminal state (answered or could not complete), got {code:?}: {stderr}"
    );
    let events: Vec<Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event: {l}: {e}")))
        .collect();
    let stored: Vec<&Value> = events
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap_or(0) > 0)
        .collect();
    assert_eq!(
        stored.first().map(|e| e["type"].clone()),
        Some("session_started".into())
    );
    assert_eq!(
        stored.last().map(|e| e["type"].clone()),
        Some("run_finished".into()),
        "{stderr}"
    );
    for (k, e) in stored.iter().enumerate() {
        assert_eq!(
            e["seq"].as_u64(),
            Some(k as u64 + 1),
            "gapless sequence numbers"
        );
        assert_eq!(e["v"], 1);
    }
    let replies: Vec<&&Value> = stored
        .iter()
        .filter(|e| e["type"] == "model_replied")
        .collect();
    assert!(!replies.is_empty(), "the model was called: {stderr}");
    for r in &replies {
        assert!(
            r["reply"]["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0,
            "usage on every reply: {r}"
        );
    }
    // Every tool call that started finished, with a result the model saw.
    let started = stored
        .iter()
        .filter(|e| e["type"] == "tool_call_started")
        .count();
    let finished = stored
        .iter()
        .filter(|e| e["type"] == "tool_call_finished")
        .count();
    assert_eq!(started, finished);
    let id = stored[0]["session_id"].as_str().unwrap();
    let show = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["sessions", "show", id, "--json", "--db", "weft.db"])
        .current_dir(dir)
        .output()
        .unwrap();
    let show: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert!(show["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0);
    assert!(
        matches!(show["status"].as_str(), Some("completed" | "failed")),
        "{show}"
    );
    eprintln!(
        "{mode}: exit {code:?}, {} events, {} model calls, {} tool calls, status {}",
        stored.len(),
        replies.len(),
        started,
        show["status"]
    );
}

#[test]
fn needs_llm_react_agent_reaches_a_terminal_state_against_a_real_server() {
    run_and_check("react");
}

#[test]
fn needs_llm_plan_agent_reaches_a_terminal_state_against_a_real_server() {
    run_and_check("plan");
}
