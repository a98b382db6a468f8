//! Mistakes in an agent file are caught when it loads, through the binary: exit 2, the file and
//! the field named, nothing run. `weft check` lists every problem at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs weft in `dir` with no provider key, base URL, store or cassette from the environment.
fn weft(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .env_remove("WEFT_CASSETTE")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A directory with `agent.yaml` (the given text) and a scripted model's script.
fn agent_dir(yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("examples/scripts/weather-chat.yaml"),
        dir.path().join("script.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("agent.yaml"), yaml).unwrap();
    dir
}

/// `weft run agent.yaml TASK` must stop with exit 2 before anything runs, naming the file and
/// every `needle`.
fn refused(yaml: &str, needles: &[&str]) -> String {
    let dir = agent_dir(yaml);
    let out = weft(dir.path(), &["run", "agent.yaml", "hello"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("agent.yaml"), "the file is named: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "`{n}` in: {stderr}");
    }
    assert!(out.stdout.is_empty(), "nothing ran: {}", text(&out.stdout));
    stderr
}

const HEAD: &str = "name: a\nmode: react\nmodel: scripted:script.yaml\n";

#[test]
fn a_command_tool_whose_program_does_not_exist() {
    refused(
        &format!("{HEAD}tools:\n  - {{ name: lookup, command: [\"./tools/lookup\"] }}\n"),
        &[
            "tools[0]",
            "`lookup`",
            "program `./tools/lookup` does not exist",
        ],
    );
    refused(
        &format!("{HEAD}tools:\n  - {{ name: lookup, command: [\"no-such-program-weft\"] }}\n"),
        &["`no-such-program-weft` is not found on PATH"],
    );
}

#[test]
fn a_command_tool_whose_script_does_not_exist() {
    refused(
        &format!(
            "{HEAD}tools:\n  - builtin: echo\n  - {{ name: lookup, command: [\"python3\", \"tools/lookup.py\"] }}\n"
        ),
        &[
            "tools[1]",
            "`lookup`",
            "script `tools/lookup.py` does not exist",
        ],
    );
}

#[test]
fn an_allowed_tools_name_that_matches_no_tool() {
    refused(
        &format!("{HEAD}allowed_tools: [ecko]\ntools:\n  - builtin: echo\n"),
        &["allowed_tools", "`ecko`", "matches no tool", "echo"],
    );
}

#[test]
fn an_agent_tool_whose_file_does_not_exist() {
    refused(
        &format!("{HEAD}tools:\n  - agent: researcher.yaml\n"),
        &["tools[0]", "researcher.yaml", "does not exist"],
    );
}

#[test]
fn a_malformed_base_url() {
    refused(
        "name: a\nmode: react\nmodel: { provider: openai, name: m, base_url: \"localhost:8080/v1\", api_key: none }\n",
        &["`base_url`", "localhost:8080/v1", "http"],
    );
}

#[test]
fn openai_and_anthropic_without_a_key() {
    let e = refused(
        "name: a\nmode: react\nmodel: openai:gpt-4o-mini\n",
        &[
            "openai:gpt-4o-mini needs an API key",
            "OPENAI_API_KEY",
            "api_key: none",
        ],
    );
    assert!(!e.contains("panicked"), "{e}");
    refused(
        "name: a\nmode: react\nmodel: anthropic:claude-sonnet-4-0\n",
        &[
            "anthropic:claude-sonnet-4-0 needs an API key",
            "ANTHROPIC_API_KEY",
        ],
    );
    // A local server that needs no key says so; then it loads (and `weft check` agrees).
    let dir = agent_dir(
        "name: a\nmode: react\nmodel: { provider: openai, name: m, base_url: \"http://127.0.0.1:9/v1\", api_key: none }\n",
    );
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no problems"));
}

#[test]
fn an_undefined_template_variable_is_named() {
    refused(
        &format!("{HEAD}instructions: You work for {{{{ session.metadata.company }}}}.\n"),
        &["`instructions`", "`session.metadata.company`", "--metadata"],
    );
    // Given, or with a default, it loads.
    let dir = agent_dir(&format!(
        "{HEAD}instructions: You work for {{{{ session.metadata.company }}}}.\n"
    ));
    let out = weft(
        dir.path(),
        &[
            "check",
            "agent.yaml",
            "--metadata",
            r#"{"company": "Acme"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dir = agent_dir(&format!(
        "{HEAD}instructions: You work for {{{{ session.metadata.company | default(\"us\") }}}}.\n"
    ));
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn check_lists_every_problem_at_once() {
    let dir = agent_dir(
        "name: a\nmode: react\n\
         model: { provider: openai, name: m, base_url: \"http//x\", api_key: none }\n\
         instructions: Hi {{ input.customer }}\n\
         tools:\n  - { name: one, command: [\"./missing-one\"] }\n  - agent: missing.yaml\n",
    );
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("4 problem(s)"), "{stderr}");
    for n in [
        "tools[0]: `one`",
        "tools[1]: agent tool `missing.yaml`",
        "`base_url`",
        "`input.customer`",
    ] {
        assert!(stderr.contains(n), "`{n}` in {stderr}");
    }
    let out = weft(dir.path(), &["check", "agent.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"].as_array().unwrap().len(), 4, "{v}");
}

/// One mistake of each kind, each on a line of its own.
const EIGHT_MISTAKES: &str = "\
name: forecaster
descripton: Tells the weather.
mode: workflow
model: opanai:gpt-4o-mini
instructions: |
  You forecast the weather for {{ input.cty }}.
limits:
  max_transitions: lots
tools:
  - builtin: ehco
  - name: getWeather
    command: [python3, weather.py]
  - name: getRadar
    command: [pyhton3, radar.py]
workflow:
  initial: ask
  steps:
    ask:
      tools: [getWether]
      next:
        - { when: output.done, to: finsh }
        - to: ask
    finish: {}
";

#[test]
fn check_reports_eight_mistakes_of_eight_kinds_with_their_lines_and_the_names_meant() {
    let dir = agent_dir(EIGHT_MISTAKES);
    std::fs::write(dir.path().join("weather.py"), "print('{}')\n").unwrap();
    let out = weft(
        dir.path(),
        &["check", "agent.yaml", "--input", r#"{"city": "Oslo"}"#],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("8 problem(s)"), "{stderr}");
    for needle in [
        "agent.yaml:2:1: descripton: unknown key `descripton` (did you mean `description`?)",
        "agent.yaml:4:8: model: ",
        "unknown model provider `opanai` (did you mean `openai`?)",
        "agent.yaml:6:35: instructions: uses undefined variable(s) `input.cty` (did you mean `input.city`?)",
        "agent.yaml:8:3: limits.max_transitions: \"lots\" is not of type \"integer\"",
        "agent.yaml:10:14: tools[0]: unknown built-in `ehco` (did you mean `echo`?); the built-ins are echo, template, todo_write, ask_user, remember, recall, forget, search_documents,",
        "agent.yaml:13:11: tools[2]: `getRadar`: `command`: program `pyhton3` is not found on PATH (did you mean `python3`?)",
        "agent.yaml:19:15: workflow.steps.ask.tools: `getWether` is not a tool of this agent (did you mean `getWeather`?)",
        "agent.yaml:21:32: workflow.steps.ask.next[0].to: `finsh` is not a step (did you mean `finish`?)",
    ] {
        assert!(stderr.contains(needle), "`{needle}` in {stderr}");
    }
    // --json: the same problems on stdout, nothing on stderr.
    let out = weft(
        dir.path(),
        &[
            "check",
            "agent.yaml",
            "--json",
            "--input",
            r#"{"city": "Oslo"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 8, "{v}");
}

#[test]
fn a_load_names_every_problem_of_the_file_too() {
    let stderr = refused(
        &format!(
            "{HEAD}nmae: x\nallowed_tools: [getWether]\ntools:\n  - builtin: ehco\n  - {{ name: getWeather, builtin: echo }}\n"
        ),
        &[
            "3 problems",
            "agent.yaml:4:1: nmae: unknown key `nmae` (did you mean `name`?)",
            "agent.yaml:5:17: allowed_tools: `getWether` (did you mean `getWeather`?) matches no tool",
            "agent.yaml:7:14: tools[0]: unknown built-in `ehco` (did you mean `echo`?)",
        ],
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn check_with_a_plan_and_input() {
    let r = root();
    let ok = weft(
        &r,
        &[
            "check",
            "examples/shop.yaml",
            "examples/plans/refund.json",
            "--input",
            r#"{"customerId": "cust_123", "amount": 50.0}"#,
        ],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    // The plan's problems and the input's, with the agent's, in one list.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("plan.json"),
        r#"[{"_tool": "nope", "x": 1}, {"_tool": "echo", "_dependsOn": ["s9"]}]"#,
    )
    .unwrap();
    let plan = dir.path().join("plan.json").display().to_string();
    let out = weft(&r, &["check", "examples/shop.yaml", &plan, "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = v["problems"].as_array().unwrap();
    assert!(problems.len() >= 2, "{v}");
    assert!(
        problems
            .iter()
            .all(|p| p.as_str().unwrap().contains("plan.json")),
        "{v}"
    );
}

#[test]
fn plan_check_json_prints_problems_found_while_reading() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plan.json"), r#"[{"_id": 3}]"#).unwrap();
    let plan = dir.path().join("plan.json").display().to_string();
    let out = weft(
        &root(),
        &[
            "plan",
            "check",
            &plan,
            "--agent",
            "examples/shop.yaml",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(!v["problems"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn a_run_whose_agent_or_plan_does_not_load_leaves_no_store_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("broken.yaml"),
        "name: b\nmodel: scripted:s.yaml\ntools:\n  - name: t\n    command: [\"python3\", \"nowhere.py\"]\n",
    )
    .unwrap();
    for agent in ["missing.yaml", "broken.yaml"] {
        let o = weft(d, &["run", agent, "a task"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{agent}: {err}");
        assert!(err.contains(agent), "{agent}: {err}");
        assert!(
            !d.join(".weft").exists(),
            "{agent}: a failed load created the default store"
        );
        // The same for a plan run, and for a plan that does not parse.
        std::fs::write(d.join("p.json"), r#"[{"_tool": "t"}]"#).unwrap();
        let o = weft(d, &["plan", "run", "--agent", agent, "p.json"]);
        assert_eq!(o.status.code(), Some(2), "{agent}: {}", text(&o.stderr));
        assert!(!d.join(".weft").exists(), "plan run with {agent}");
    }
    std::fs::write(
        d.join("ok.yaml"),
        "name: ok
model: scripted:s.yaml
tools:
  - builtin: echo
",
    )
    .unwrap();
    std::fs::write(d.join("bad.json"), "[{").unwrap();
    let o = weft(d, &["plan", "run", "--agent", "ok.yaml", "bad.json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(!d.join(".weft").exists(), "a plan that does not parse");
}

/// A script keyed by purpose that holds no reply for the calls its agent's mode makes (a ReAct
/// agent given a plan-mode script) is named by `weft check`, with the purposes it has; a script
/// served in order, and one keyed for the right purpose, pass.
#[test]
fn check_names_a_script_with_no_reply_for_the_agents_mode() {
    let dir = agent_dir(HEAD);
    std::fs::copy(
        root().join("examples/scripts/refund-desk.yaml"),
        dir.path().join("script.yaml"),
    )
    .unwrap();
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("none for `react` calls, which a ReAct agent makes")
            && stderr.contains("plan, respond, response_review, review"),
        "{stderr}"
    );
    std::fs::write(dir.path().join("script.yaml"), "react:\n  - text: hi\n").unwrap();
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::fs::write(dir.path().join("script.yaml"), "- text: hi\n").unwrap();
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A plan-mode agent with a model in the process: `weft check` warns about each tool whose
/// output has no declared schema (a plan's reference to it is not typed), and only those.
#[test]
fn check_warns_about_tools_whose_output_a_local_planner_cannot_type() {
    let yaml = r#"name: library
mode: plan
model: local:smollm2.gguf
tools:
  - name: find_book
    command: [python3, -c, "print('{}')"]
    output_schema: {type: object, properties: {book_id: {type: integer}}, required: [book_id]}
  - name: reserve_copy
    command: [python3, -c, "print('{}')"]
"#;
    let dir = agent_dir(yaml);
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("warning: `reserve_copy` declares no output_schema"),
        "{err}"
    );
    assert!(
        !err.contains("`find_book` declares no output_schema"),
        "{err}"
    );
    // The same agent with a model behind a server: the grammar is not there to type anything.
    let dir = agent_dir(&yaml.replace("local:smollm2.gguf", "scripted:script.yaml"));
    let err = text(&weft(dir.path(), &["check", "agent.yaml"]).stderr);
    assert!(!err.contains("declares no output_schema"), "{err}");
}

#[test]
fn trust_naming_a_missing_tool_or_a_misspelt_argument_is_refused_with_its_field() {
    let yaml = format!(
        r#"{HEAD}trust:
  trusted_tools: [get_balanse]
  protect:
    send_money: [recipent]
tools:
  - name: send_money
    command: [python3, -c, "print('{{}}')"]
    input_schema: {{type: object, properties: {{recipient: {{type: string}}, amount: {{type: number}}}}}}
"#
    );
    refused(
        &yaml,
        &[
            "trust.trusted_tools",
            "no tool `get_balanse`",
            "trust.protect.send_money",
            "no argument `recipent`; its arguments are: recipient, amount",
        ],
    );
    let dir = agent_dir(&yaml);
    let out = weft(dir.path(), &["check", "agent.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no argument `recipent`"),
        "{}",
        text(&out.stderr)
    );
}
