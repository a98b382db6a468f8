//! `weft run` and `weft serve` end to end on the `local` provider (a GGUF model run in the
//! process; the tests are built with the `local-model` feature when `scripts/setup-local-model`
//! has exported WEFT_TEST_LOCAL_GGUF, see `scripts/test`). In each mode (ReAct, plan, workflow)
//! the model calls a tool that writes a log line, the call runs, and its result goes back in a
//! later model call. A truncated model file fails its run with a message naming the file, and
//! the same `weft serve` then runs the agent once the file is whole.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::support as common;

const LOG_WORD: &str = r#"import json, sys
args = json.load(sys.stdin)
with open("tool.log", "a") as f:
    f.write(json.dumps(args) + "\n")
print(json.dumps({"logged": args.get("word"), "receipt": "RECEIPT-4817"}))
"#;

/// The `log_word` tool (it logs its arguments to `tool.log`) and an agent file `agent.yaml` of
/// `mode` on the local model, with `extra` YAML after its tools; the directory holds both.
fn agent(dir: &Path, mode: &str, extra: &str) {
    let file = common::service_var("WEFT_TEST_LOCAL_GGUF");
    std::fs::write(dir.join("log_word.py"), LOG_WORD).unwrap();
    let agent = format!(
        r#"name: tiny-local
mode: {mode}
model: {{ provider: local, file: "{file}", max_tokens: 100, tool_choice: required }}
instructions: You are an assistant. Use the tools to answer.
limits: {{ max_iterations: 2, max_model_retries: 1 }}
tools:
  - name: log_word
    description: Write one word to the log.
    command: ["python3", "log_word.py"]
    sandbox: {{ write: [.] }}
    input_schema: {{ type: object, properties: {{ word: {{ type: string }} }}, required: [word] }}
{extra}"#
    );
    std::fs::write(dir.join("agent.yaml"), agent).unwrap();
}

/// The receipt in the tool's every result: a model call whose request holds it was given the
/// result.
const RECEIPT: &str = "RECEIPT-4817";

/// `weft run agent.yaml TASK --events` in `dir` (session `s1` of user alice), on one CPU
/// thread.
fn run(dir: &Path, task: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["run", "agent.yaml", task, "--events", "--db", "weft.db"])
        .args(["--user", "alice", "--id", "s1"])
        .env("CANDLE_NUM_THREADS", "1")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Checks that a model's call of `log_word` ran (the tool's own log holds its arguments) and
/// that a model call after it was given its result (that call's request holds the result's
/// receipt).
fn the_call_ran_and_its_result_went_back(dir: &Path, out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let events = common::events_in(&stderr);
    let of = |t: &str| events.iter().filter(|e| e["type"] == t).collect::<Vec<_>>();
    let started = of("tool_call_started")
        .into_iter()
        .find(|e| e["tool"] == "log_word")
        .unwrap_or_else(|| panic!("log_word was never called: {stderr}"));
    let finished = of("tool_call_finished")
        .into_iter()
        .find(|e| e["call_id"] == started["call_id"])
        .unwrap_or_else(|| panic!("the call did not finish: {stderr}"));
    assert_eq!(finished["outcome"]["status"], "ok", "{finished}");
    let log = std::fs::read_to_string(dir.join("tool.log")).unwrap_or_default();
    let logged: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        !logged.is_empty(),
        "the tool's log is empty, yet the call was reported: {started}"
    );
    // The requests of the session's model calls, as `weft serve`'s inspector rebuilds them
    // from the log (a request is a pure function of the log before its call).
    let calls = model_requests(dir, "s1");
    let after: Vec<&(u64, String)> = calls
        .iter()
        .filter(|(seq, _)| *seq > finished["seq"].as_u64().unwrap())
        .collect();
    assert!(
        after.iter().any(|(_, request)| request.contains(RECEIPT)),
        "no model call after the tool's result was given it: {after:?}\n{stderr}"
    );
    // And the run ended with an answer.
    assert!(out.status.success(), "the run failed: {stderr}");
    format!(
        "call {started}; {} model calls, {} after the result; log {log}",
        calls.len(),
        after.len()
    )
}

/// Each model call of session `id` in `dir`'s store: the seq of the event that ended it and its
/// request's messages (as JSON text), read from a `weft serve` over the store.
fn model_requests(dir: &Path, id: &str) -> Vec<(u64, String)> {
    use crate::quotas::http;
    use crate::serve::{ALICE, free_port, serve_logged, stop};
    std::fs::write(dir.join("keys.txt"), format!("{ALICE} alice\n")).unwrap();
    let port = free_port();
    let mut server = serve_logged(dir, port, "weft.db", &[], "inspect.log");
    let (status, _, list) = http(
        port,
        "GET",
        &format!("/sessions/{id}/model-calls"),
        ALICE,
        "",
    );
    assert_eq!(status, 200, "{list}");
    let list: Value = serde_json::from_str(&list).unwrap();
    let calls = list["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let n = c["n"].as_u64().unwrap();
            let (status, _, one) = http(
                port,
                "GET",
                &format!("/sessions/{id}/model-calls/{n}"),
                ALICE,
                "",
            );
            assert_eq!(status, 200, "{one}");
            let one: Value = serde_json::from_str(&one).unwrap();
            (
                c["seq"].as_u64().unwrap(),
                one["request"]["messages"].to_string(),
            )
        })
        .collect();
    stop(&mut server);
    calls
}

#[test]
fn needs_local_model_react_run_calls_a_tool_and_sends_its_result_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    agent(dir, "react", "");
    let out = run(dir, "Log the word hello.");
    eprintln!("{}", the_call_ran_and_its_result_went_back(dir, &out));
}

#[test]
fn needs_local_model_plan_run_calls_a_tool_and_answers_from_its_result() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    agent(dir, "plan", "");
    let out = run(dir, "Log the word hello.");
    eprintln!("{}", the_call_ran_and_its_result_went_back(dir, &out));
}

#[test]
fn needs_local_model_workflow_step_calls_a_tool_and_gives_a_valid_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    agent(
        dir,
        "workflow",
        r#"workflow:
  initial: log
  steps:
    log:
      instructions: Call log_word once with the word the person gave. When it has returned, reply in one sentence that the word is logged; never call log_word twice.
      tools: [log_word]
      max_turns: 4
      next: [{ to: report }]
    report:
      instructions: Give the word that was logged.
      tools: []
      output_schema:
        type: object
        required: [logged]
        properties: { logged: { type: string } }
      next: [{ to: end }]
"#,
    );
    let out = run(dir, "Log the word hello.");
    let said = the_call_ran_and_its_result_went_back(dir, &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events = common::events_in(&stderr);
    let output = events
        .iter()
        .find(|e| e["type"] == "workflow_output_accepted")
        .unwrap_or_else(|| panic!("the step's output was never accepted: {stderr}"));
    assert!(
        output.to_string().contains("logged"),
        "the step's output has its schema's `logged`: {output}"
    );
    eprintln!("{said}; step {output}");
}

/// The model file cut at half of its length.
fn truncated_copy(to: &Path) {
    let file = common::service_var("WEFT_TEST_LOCAL_GGUF");
    let bytes = std::fs::read(file).unwrap();
    std::fs::write(to, &bytes[..bytes.len() / 2]).unwrap();
}

#[test]
fn needs_local_model_a_truncated_file_fails_the_run_with_its_name_and_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    truncated_copy(&dir.join("cut.gguf"));
    std::fs::write(
        dir.join("agent.yaml"),
        "name: cut\nmode: react\nmodel: local:cut.gguf\ninstructions: Answer.\n",
    )
    .unwrap();
    let out = run(dir, "Say hi.");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("cut.gguf") && stderr.contains("complete GGUF model"),
        "the message names the file and what to do: {stderr}"
    );
}

/// With `RUST_BACKTRACE=1` (candle then captures a backtrace into its errors), a file that is
/// not a GGUF model of a version weft reads fails with a message of one line: no frames.
#[test]
fn needs_local_model_a_bad_files_error_carries_no_backtrace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut bad = b"GGUF".to_vec();
    bad.extend(99u32.to_le_bytes());
    bad.extend([0u8; 64]);
    std::fs::write(dir.join("bad.gguf"), bad).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        "name: bad\nmode: react\nmodel: local:bad.gguf\ninstructions: Answer.\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["run", "agent.yaml", "Say hi.", "--db", "weft.db"])
        .env("RUST_BACKTRACE", "1")
        .current_dir(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("bad.gguf")).collect();
    assert!(
        said.iter().any(|l| l.contains("complete GGUF model")),
        "the message names the file and what to do: {stderr}"
    );
    for frame in [
        "backtrace",
        "at /",
        "rust_begin_unwind",
        " 0: ",
        "candle_core::",
    ] {
        assert!(!stderr.contains(frame), "a backtrace ({frame}): {stderr}");
    }
}

#[test]
fn needs_local_model_serve_fails_a_run_on_a_cut_file_and_runs_once_it_is_whole() {
    use crate::serve::{ALICE, free_port, logs, serve_with, stop};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    truncated_copy(&dir.join("model.gguf"));
    std::fs::write(
        dir.join("tiny.yaml"),
        "name: tiny\nmode: react\nmodel: { provider: local, file: model.gguf, max_tokens: 16 }\ninstructions: Answer in one word.\n",
    )
    .unwrap();
    std::fs::write(dir.join("keys.txt"), format!("{ALICE} alice\n")).unwrap();
    let port = free_port();
    let mut server = serve_with(dir, port, "weft.db", &[]);
    let wait = |what: &str| {
        let (status, _, thread) = crate::quotas::http(port, "POST", "/threads", ALICE, "{}");
        assert_eq!(status, 200, "{thread}");
        let tid = serde_json::from_str::<Value>(&thread).unwrap()["thread_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let body = serde_json::json!({
            "assistant_id": "tiny",
            "input": {"messages": [{"role": "user", "content": what}]},
        });
        let (status, _, answer) = crate::quotas::http(
            port,
            "POST",
            &format!("/threads/{tid}/runs/wait"),
            ALICE,
            &body.to_string(),
        );
        let (_, _, runs) =
            crate::quotas::http(port, "GET", &format!("/threads/{tid}/runs"), ALICE, "");
        (status, answer, runs)
    };
    let (status, answer, runs) = wait("Say hi.");
    let failed = format!("{status} {answer} {runs}");
    assert!(
        failed.contains("model.gguf") && failed.contains("complete GGUF model"),
        "the failed run names the file and what to do: {failed}\n{}",
        logs(dir, &["serve.log"])
    );
    assert!(runs.contains("\"error\""), "the run failed: {runs}");
    // The file is made whole; the same server loads it on the next run.
    std::fs::copy(
        common::service_var("WEFT_TEST_LOCAL_GGUF"),
        dir.join("model.gguf"),
    )
    .unwrap();
    let (status, answer, runs) = wait("Say hi.");
    stop(&mut server);
    assert_eq!(status, 200, "{answer}\n{}", logs(dir, &["serve.log"]));
    assert!(
        runs.contains("\"success\""),
        "the second run succeeded: {runs}\n{answer}"
    );
    assert!(
        !answer.contains("complete GGUF model"),
        "the second run used the whole file: {answer}"
    );
    eprintln!("failed: {failed}\nthen: {answer}");
}

/// The library's tools, each declaring what it gives (an `output_schema`): `reserve_copy`
/// takes integers, which `find_member` and `find_book` give inside objects; each logs its
/// arguments to `tool.log`.
const LIBRARY: &str = r#"import json, sys
tool, args = sys.argv[1], json.load(sys.stdin)
with open("tool.log", "a") as f:
    f.write(json.dumps({"tool": tool, "args": args}) + "\n")
if tool == "find_member":
    print(json.dumps({"member": {"id": 41, "name": str(args.get("name"))}}))
elif tool == "find_book":
    print(json.dumps({"book_id": 7, "title": str(args.get("title"))}))
else:
    print(json.dumps({"reserved": True}))
"#;

/// A plan-mode agent on the model in the process whose steps read each other's outputs
/// (`member_id: †steps.s1.member.id`), run with three seeds at temperature 0.7: no plan is refused and no call's
/// arguments are (the issue's `"member_id": "†steps.s1"`, a whole object in an integer, was a
/// plan that failed as it ran), and at least one `reserve_copy` ran with a member's id read
/// from a step before it.
#[test]
fn needs_local_model_typed_plans_run_without_an_argument_refused() {
    let file = common::service_var("WEFT_TEST_LOCAL_GGUF");
    let mut read_by_reference = 0;
    for seed in [1, 2, 3] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("library.py"), LIBRARY).unwrap();
        let tool = |name: &str, description: &str, input: &str, output: &str| {
            format!(
                "  - name: {name}\n    description: {description}\n    command: [python3, library.py, {name}]\n    sandbox: {{ write: [.] }}\n    input_schema: {input}\n{output}"
            )
        };
        let agent = format!(
            "name: library\nmode: plan\nmodel: {{ provider: local, file: \"{file}\", max_tokens: 160, temperature: 0.7, seed: {seed} }}\nlimits: {{ max_iterations: 2, max_model_retries: 1 }}\ntools:\n{}{}{}",
            tool(
                "find_member",
                "Finds a library member by name.",
                "{ type: object, properties: { name: { type: string } }, required: [name] }",
                "    output_schema: { type: object, properties: { member: { type: object, properties: { id: { type: integer }, name: { type: string } }, required: [id, name] } }, required: [member] }\n",
            ),
            tool(
                "find_book",
                "Finds a book by its title.",
                "{ type: object, properties: { title: { type: string } }, required: [title] }",
                "    output_schema: { type: object, properties: { book_id: { type: integer }, title: { type: string } }, required: [book_id, title] }\n",
            ),
            tool(
                "reserve_copy",
                "Reserves a copy of a book for a member.",
                "{ type: object, properties: { member_id: { type: integer }, book_id: { type: integer } }, required: [member_id, book_id] }",
                "    output_schema: { type: object, properties: { reserved: { type: boolean } }, required: [reserved] }\n",
            ),
        );
        std::fs::write(dir.join("agent.yaml"), agent).unwrap();
        let out = run(
            dir,
            "Find member Bob and the book Emma, then reserve Emma for Bob.",
        );
        // `--events` writes them on stderr.
        let events: Vec<Value> = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let seen = |t: &'static str| events.iter().filter(move |e| e["type"] == t);
        assert_eq!(
            seen("plan_rejected").count(),
            0,
            "seed {seed}: a plan was refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for failed in seen("tool_call_finished").chain(seen("step_failed")) {
            assert!(
                !failed.to_string().contains("invalid_arguments"),
                "seed {seed}: {failed}"
            );
        }
        let log = std::fs::read_to_string(dir.join("tool.log")).unwrap_or_default();
        let plans: Vec<&Value> = seen("plan_accepted").map(|e| &e["plan"]).collect();
        assert!(
            !plans.is_empty(),
            "seed {seed}: no plan ran: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("seed {seed}: plans {plans:?}\ntool log:\n{log}");
        for line in log.lines() {
            let call: Value = serde_json::from_str(line).unwrap();
            if call["tool"] == "reserve_copy" && call["args"]["member_id"] == 41 {
                read_by_reference += 1;
            }
        }
    }
    assert!(
        read_by_reference > 0,
        "no reserve_copy ran with a member id read from a step before it: the test showed nothing"
    );
}
