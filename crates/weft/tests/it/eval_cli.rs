//! `weft eval`, through the binary: the examples' datasets (plan, ReAct and workflow agents with
//! the scripted model) pass; a deliberately broken agent fails them and `weft eval compare`
//! names the regressed cases; each case is a session of the store; a dataset's mistakes are
//! named by file, line, case and field; repeats give pass@k; command and judge scorers; and,
//! against the real llama.cpp server, `--repeat 5` on 10 cases with a model as judge.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support as common;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A directory holding a copy of `examples/`, where `weft` runs with its own store.
fn workdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    common::copy_dir(&repo().join("examples"), &tmp.path().join("examples"));
    tmp
}

fn weft(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .env("WEFT_DB", "eval.db")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn results(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn summary(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn the_example_datasets_pass_and_a_broken_agent_is_caught() {
    let tmp = workdir();
    let d = tmp.path();
    let mut total = 0;
    let mut modes = Vec::new();
    for agent in ["weather-chat", "refund-desk", "support-triage"] {
        let out = weft(
            d,
            &[
                "eval",
                &format!("examples/{agent}.yaml"),
                &format!("examples/evals/{agent}.yaml"),
                "--out",
                &format!("runs/{agent}"),
                "--name",
                agent,
            ],
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{agent}: {stdout}\n{stderr}");
        let rs = results(&d.join("runs").join(agent));
        assert!(rs.len() >= 10, "{agent}: {} cases", rs.len());
        for r in &rs {
            assert_eq!(r["pass"], true, "{agent}: {r}");
            assert!(!r["scores"].as_array().unwrap().is_empty(), "{r}");
        }
        total += rs.len();
        // The table names every case and the run's totals.
        for r in &rs {
            assert!(stdout.contains(r["case"].as_str().unwrap()), "{stdout}");
        }
        assert!(
            stdout.contains(&format!("{} sessions passed (100%)", rs.len())),
            "{stdout}"
        );
        // Each case is a session of the store, which `weft sessions` opens.
        let session = rs[0]["session"].as_str().unwrap();
        assert_eq!(
            session,
            format!("{agent}-{}-r1", rs[0]["case"].as_str().unwrap())
        );
        let show = weft(d, &["sessions", "show", session]);
        assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
        let events = weft(d, &["sessions", "events", session]);
        let first: Value =
            serde_json::from_str(text(&events.stdout).lines().next().unwrap()).unwrap();
        modes.push(first["mode"].as_str().unwrap().to_owned());
        // Each scorer's verdict is recorded on the session, after the run ended...
        let events: Vec<Value> = text(&events.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let end = events
            .iter()
            .position(|e| e["type"] == "run_finished" || e["type"] == "waiting_for_user")
            .unwrap();
        let verdicts: Vec<(String, String)> = events[end + 1..]
            .iter()
            .map(|e| {
                assert_eq!(e["type"], "evaluation_result", "{e}");
                assert_eq!(e["run"], agent);
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["label"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let scored: Vec<(String, String)> = rs[0]["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["scorer"].as_str().unwrap().to_owned(), "pass".to_owned()))
            .collect();
        assert_eq!(verdicts, scored);
        // ...and its trace holds them as `gen_ai.evaluation.result` spans under the turn.
        let trace = weft(d, &["sessions", "trace", session, "--json"]);
        let spans: Vec<Value> = text(&trace.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let turn = spans
            .iter()
            .find(|s| {
                let n = s["name"].as_str().unwrap();
                n.starts_with("invoke_agent") || n.starts_with("invoke_workflow")
            })
            .unwrap();
        let evals: Vec<&Value> = spans
            .iter()
            .filter(|s| s["name"] == "gen_ai.evaluation.result")
            .collect();
        assert_eq!(evals.len(), scored.len(), "{spans:?}");
        for e in evals {
            assert_eq!(e["parent_span_id"], turn["span_id"], "{e}");
            assert_eq!(e["attributes"]["gen_ai.evaluation.score.label"], "pass");
            assert_eq!(e["attributes"]["gen_ai.evaluation.score.value"], 1.0);
        }
    }
    assert!(total >= 30, "{total} cases in all");
    modes.sort();
    assert_eq!(modes, ["plan", "react", "workflow"]);

    // The broken agent (a tool removed from a step, an instruction changed) fails the dataset...
    let out = weft(
        d,
        &[
            "eval",
            "examples/evals/broken-support-triage.yaml",
            "examples/evals/support-triage.yaml",
            "--out",
            "runs/broken",
            "--name",
            "broken",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{stderr}",
        text(&out.stdout)
    );
    assert!(stderr.contains("is below --min-pass-rate 100%"), "{stderr}");
    let failed: Vec<String> = results(&d.join("runs/broken"))
        .into_iter()
        .filter(|r| r["pass"] == false)
        .map(|r| r["case"].as_str().unwrap().to_owned())
        .collect();
    // ...exactly in the cases that refund through `resolve`.
    assert_eq!(
        failed,
        [
            "refund-a1001",
            "refund-a1001-broken",
            "refund-after-the-answer",
            "refund-confirmed-in-words"
        ]
    );
    // ...and `eval compare` names those cases first, as regressions, with what changed.
    let cmp = weft(
        d,
        &["eval", "compare", "runs/support-triage", "runs/broken"],
    );
    let report = text(&cmp.stdout);
    assert_eq!(
        cmp.status.code(),
        Some(1),
        "{report}\n{}",
        text(&cmp.stderr)
    );
    let heads: Vec<&str> = report.lines().filter(|l| !l.starts_with(' ')).collect();
    for (i, case) in failed.iter().enumerate() {
        assert_eq!(heads[i], format!("regressed  {case}"), "{report}");
    }
    assert!(report.contains("now failing: trajectory"), "{report}");
    assert!(
        report.contains("trajectory [issueRefund {\"orderId\":\"A-1001\"}] -> [none]"),
        "{report}"
    );
    assert!(report.contains("4 regressed"), "{report}");
    // The same comparison as data.
    let cmp = weft(
        d,
        &[
            "eval",
            "compare",
            "runs/support-triage",
            "runs/broken",
            "--json",
        ],
    );
    let changes: Vec<Value> = serde_json::from_str(&text(&cmp.stdout)).unwrap();
    let regressed: Vec<&str> = changes
        .iter()
        .filter(|c| c["verdict"] == "regressed")
        .map(|c| c["case"].as_str().unwrap())
        .collect();
    assert_eq!(regressed, failed);
    assert_eq!(changes[0]["a"]["passed"], 1);
    assert_eq!(changes[0]["b"]["passed"], 0);
    // A run compared with itself has no change.
    let same = weft(d, &["eval", "compare", "runs/broken", "runs/broken"]);
    assert_eq!(same.status.code(), Some(0));
    assert!(
        text(&same.stdout).contains("11 same"),
        "{}",
        text(&same.stdout)
    );
}

#[test]
fn a_dataset_mistake_names_the_file_line_case_and_field() {
    let tmp = workdir();
    let d = tmp.path();
    std::fs::write(
        d.join("bad.yaml"),
        "cases:\n  - id: fine\n    task: hello\n  - id: misspelt\n    task: hello\n    expect:\n      trajectory:\n        match: in_order\n        calls: []\n",
    )
    .unwrap();
    let out = weft(d, &["eval", "examples/weather-chat.yaml", "bad.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.yaml:"), "{stderr}");
    assert!(stderr.contains("case `misspelt` (cases[1])"), "{stderr}");
    assert!(stderr.contains("expect.trajectory.match"), "{stderr}");
    assert!(
        stderr.contains("unordered"),
        "the values it may take: {stderr}"
    );
    // Nothing ran, so no store was made.
    assert!(!d.join("eval.db").exists());

    std::fs::write(
        d.join("bad.jsonl"),
        "{\"id\": \"a\", \"task\": \"hi\"}\n{\"id\": \"b\", \"task\": \"hi\", \"expect\": {\"answer\": {\"regex\": \"([a-z\"}}}\n",
    )
    .unwrap();
    let out = weft(d, &["eval", "examples/weather-chat.yaml", "bad.jsonl"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.jsonl:2: case `b`: expect.answer.regex:"),
        "{stderr}"
    );
}

#[test]
fn repeats_give_pass_at_k_and_the_pass_rate_decides_the_exit_code() {
    let tmp = workdir();
    let d = tmp.path();
    // One case that passes, one whose command scorer fails with a reason.
    std::fs::write(
        d.join("cases.jsonl"),
        concat!(
            "{\"id\": \"sunny\", \"task\": \"Where is it sunnier, Lisbon or Oslo?\", \"expect\": {\"answer\": {\"contains\": \"Lisbon\"}}}\n",
            "{\"id\": \"picky\", \"task\": \"Where is it sunnier, Lisbon or Oslo?\", \"expect\": {\"scorers\": [{\"name\": \"picky\", \"command\": [\"sh\", \"-c\", \"cat > /dev/null; echo not today >&2; exit 3\"]}]}}\n",
        ),
    )
    .unwrap();
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-chat.yaml",
            "cases.jsonl",
            "--repeat",
            "3",
            "--concurrency",
            "3",
            "--out",
            "r1",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let s: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(s, summary(&d.join("r1")));
    assert_eq!(s["repeat"], 3);
    assert_eq!(s["sessions"]["n"], 6);
    assert_eq!(s["sessions"]["passed"], 3);
    let cases = s["per_case"].as_array().unwrap();
    assert_eq!(cases[0]["case"], "sunny");
    assert_eq!(cases[0]["stats"]["n"], 3);
    assert_eq!(cases[0]["pass_at_k"], 1.0);
    assert_eq!(cases[0]["pass_all_k"], 1.0);
    assert_eq!(cases[1]["pass_at_k"], 0.0);
    assert_eq!(cases[1]["failed"]["picky"], 3);
    assert_eq!(s["per_scorer"]["picky"]["pass_rate"], 0.0);
    let rs = results(&d.join("r1"));
    assert_eq!(rs.len(), 6);
    let picky = rs.iter().find(|r| r["case"] == "picky").unwrap();
    let score = &picky["scores"].as_array().unwrap()[1];
    assert_eq!(score["scorer"], "picky");
    assert!(
        score["detail"].as_str().unwrap().contains("not today"),
        "{score}"
    );
    // Half the sessions pass: enough for --min-pass-rate 0.5.
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-chat.yaml",
            "cases.jsonl",
            "--min-pass-rate",
            "0.5",
            "--out",
            "r2",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Every session of the runs is in the store, under its run's name.
    let list = weft(d, &["sessions", "list", "--json"]);
    let listed = text(&list.stdout);
    assert_eq!(listed.matches("-sunny-r").count(), 4, "{listed}");
}

#[test]
fn a_judge_keeps_its_reasoning() {
    let tmp = workdir();
    let d = tmp.path();
    // The judge is a scripted model here (the real one is `needs_llm_eval_*`): it approves
    // the Lisbon answer and fails the greeting.
    std::fs::write(
        d.join("judge.yaml"),
        r#"cases:
  - when: Lisbon
    script:
      judge:
        - json: { reasoning: "It compares both cities and names the sunnier one.", score: 0.9, pass: true }
  - script:
      judge:
        - json: { reasoning: "It answers no weather question.", score: 0.2, pass: false }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("cases.yaml"),
        r#"- id: compares
  task: Where is it sunnier, Lisbon or Oslo?
  expect:
    scorers:
      - judge: { rubric: "The answer names the sunnier city.", model: "scripted:judge.yaml" }
- id: greets
  task: hello there
  expect:
    scorers:
      - judge: { rubric: "The answer names the sunnier city.", model: "scripted:judge.yaml" }
"#,
    )
    .unwrap();
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-chat.yaml",
            "cases.yaml",
            "--out",
            "r",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let rs = results(&d.join("r"));
    let judge = |case: &str| {
        let r = rs.iter().find(|r| r["case"] == case).unwrap();
        r["scores"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["scorer"] == "judge")
            .unwrap()
            .clone()
    };
    let good = judge("compares");
    assert_eq!(good["pass"], true, "{good}");
    assert_eq!(good["score"], 0.9);
    assert_eq!(
        good["reasoning"],
        "It compares both cities and names the sunnier one."
    );
    let bad = judge("greets");
    assert_eq!(bad["pass"], false, "{bad}");
    assert_eq!(bad["reasoning"], "It answers no weather question.");
}

/// Ten cases for a small ReAct agent on the real llama.cpp server, five times each, with a
/// model as judge on the same server: the summary gives pass@5, pass^5 and the spread.
#[test]
fn needs_llm_eval_repeats_and_a_model_as_judge() {
    let url = common::service_var("WEFT_TEST_OPENAI_BASE_URL");
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = format!(
        r#"{{ provider: openai, name: smollm2, base_url: "{url}", api_key: none, timeout: 600s, max_tokens: 60, temperature: 0.8 }}"#
    );
    std::fs::write(
        d.join("agent.yaml"),
        format!(
            "name: tiny\nmode: react\nmodel: {model}\ninstructions: Answer in one short sentence.\nlimits: {{ max_iterations: 2, max_model_retries: 1 }}\n"
        ),
    )
    .unwrap();
    let words = [
        ("capital-france", "What is the capital of France?", "Paris"),
        (
            "sky-colour",
            "What colour is the sky on a clear day?",
            "blue",
        ),
        ("two-plus-two", "What is two plus two?", "4"),
        ("ice", "What does water turn into when it freezes?", "ice"),
        ("sun", "What star does the Earth orbit?", "Sun"),
        ("week", "How many days are in a week?", "7"),
        ("cat", "What sound does a cat make?", "meow"),
        ("grass", "What colour is grass?", "green"),
        ("hands", "How many hands does a person have?", "two"),
        ("opposite-hot", "What is the opposite of hot?", "cold"),
    ];
    let mut cases = String::new();
    for (id, task, word) in words {
        cases.push_str(
            &serde_json::to_string(&serde_json::json!({
                "id": id,
                "task": task,
                "expect": {
                    "answer": {"contains": word},
                    "scorers": [{"judge": {"rubric": format!("The answer says {word}.")}}]
                }
            }))
            .unwrap(),
        );
        cases.push('\n');
    }
    std::fs::write(d.join("cases.jsonl"), cases).unwrap();
    let out = weft(
        d,
        &[
            "eval",
            "agent.yaml",
            "cases.jsonl",
            "--repeat",
            "5",
            "--concurrency",
            "2",
            "--min-pass-rate",
            "0",
            "--out",
            "r",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    eprintln!("{stdout}");
    let s = summary(&d.join("r"));
    assert_eq!(s["repeat"], 5);
    assert_eq!(s["sessions"]["n"], 50);
    assert_eq!(s["cases"], 10);
    for c in s["per_case"].as_array().unwrap() {
        assert_eq!(c["stats"]["n"], 5, "{c}");
        let (at_k, all_k, rate) = (
            c["pass_at_k"].as_f64().unwrap(),
            c["pass_all_k"].as_f64().unwrap(),
            c["stats"]["pass_rate"].as_f64().unwrap(),
        );
        // pass^k <= pass rate <= pass@k, and pass@k is 1 exactly when some repeat passed.
        assert!(all_k <= rate && rate <= at_k, "{c}");
        assert_eq!(
            at_k == 1.0,
            c["stats"]["passed"].as_u64().unwrap() > 0,
            "{c}"
        );
    }
    assert!(stdout.contains("pass@5"), "{stdout}");
    // The judge ran on the server for every session that had an answer, and its reasoning is
    // kept.
    let rs = results(&d.join("r"));
    assert_eq!(rs.len(), 50);
    let judged: Vec<&Value> = rs
        .iter()
        .flat_map(|r| r["scores"].as_array().unwrap())
        .filter(|s| s["scorer"] == "judge")
        .collect();
    assert_eq!(judged.len(), 50);
    // Every verdict is the judge's reply (its reasoning kept) or says why the judge failed.
    for j in &judged {
        let replied = j["reasoning"]
            .as_str()
            .is_some_and(|r| !r.trim().is_empty());
        let failed = j["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("the judge"));
        assert!(replied || failed, "{j}");
    }
    let reasoned = judged
        .iter()
        .filter(|s| {
            s["reasoning"]
                .as_str()
                .is_some_and(|r| !r.trim().is_empty())
        })
        .count();
    assert!(reasoned > 0, "no judge gave its reasoning: {judged:?}");
    let on_server = rs
        .iter()
        .filter(|r| r["judge_tokens"].as_u64().unwrap_or(0) > 0)
        .count();
    assert!(
        on_server >= reasoned,
        "a judge that replied used tokens on the server"
    );
    eprintln!(
        "judge verdicts with reasoning: {reasoned}/50, judges that used the server: {on_server}/50; sessions passed {}/50; pass@5 {}; pass^5 {}; spread {}",
        s["sessions"]["passed"], s["pass_at_k"], s["pass_all_k"], s["pass_rate_stdev"]
    );
    for j in judged.iter().filter(|j| j["reasoning"].is_null()).take(3) {
        eprintln!("a judge that failed: {}", j["detail"]);
    }
}

/// The `replay` scorer's verdict of the one result in `dir`.
fn replay_score(dir: &Path) -> Value {
    let rs = results(dir);
    assert_eq!(rs.len(), 1);
    rs[0]["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scorer"] == "replay")
        .unwrap_or_else(|| panic!("no replay scorer: {}", rs[0]))
        .clone()
}

#[test]
fn recorded_sessions_replay_strictly_and_a_changed_tool_description_is_drift() {
    let tmp = workdir();
    let d = tmp.path();
    // Sessions of the three modes made by `weft run` (the workflow waits and is answered).
    let run = |args: &[&str], code: i32| {
        let out = weft(d, args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
    };
    run(
        &[
            "run",
            "examples/weather-chat.yaml",
            "Where is it sunnier, Lisbon or Oslo?",
            "--id",
            "s-react",
        ],
        0,
    );
    run(
        &[
            "run",
            "examples/support-triage.yaml",
            "I want a refund, the parcel never came.",
            "--id",
            "s-flow",
        ],
        3,
    );
    run(&["answer", "s-flow", "It is order A-2002."], 0);
    run(
        &[
            "run",
            "examples/refund-desk.yaml",
            "I'd like a refund.",
            "--input",
            r#"{"customerId": "cust_123", "amount": 50.0}"#,
            "--id",
            "s-plan",
        ],
        0,
    );
    run(
        &[
            "eval",
            "record",
            "s-react",
            "s-flow",
            "s-plan",
            "--into",
            "recorded.jsonl",
        ],
        0,
    );
    let cases: Vec<Value> = std::fs::read_to_string(d.join("recorded.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(cases.len(), 3);
    assert_eq!(
        cases[1]["replies"],
        serde_json::json!(["It is order A-2002."])
    );
    assert_eq!(cases[1]["expect"]["status"], "completed");
    assert_eq!(cases[2]["input"]["customerId"], "cust_123");
    // Strict replay with the agent files they ran with: zero drift, every expectation met.
    for (agent, case) in [
        ("weather-chat", "rec-s-react"),
        ("support-triage", "rec-s-flow"),
        ("refund-desk", "rec-s-plan"),
    ] {
        let out_dir = format!("strict-{agent}");
        let out = weft(
            d,
            &[
                "eval",
                &format!("examples/{agent}.yaml"),
                "recorded.jsonl",
                "--case",
                case,
                "--out",
                &out_dir,
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{agent}: {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let r = &results(&d.join(&out_dir))[0];
        assert_eq!(r["pass"], true, "{r}");
        let replay = replay_score(&d.join(&out_dir));
        assert_eq!(replay["pass"], true, "{replay}");
        assert!(replay.get("detail").is_none(), "no drift: {replay}");
    }
    // A changed tool description is drift: strict replay fails with the request's difference.
    let agent = std::fs::read_to_string(d.join("examples/weather-chat.yaml")).unwrap();
    let described = agent.replace(
        "description: Current weather for a city.",
        "description: Current weather for a city, in Celsius.",
    );
    assert_ne!(agent, described);
    std::fs::write(d.join("examples/weather-described.yaml"), described).unwrap();
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-described.yaml",
            "recorded.jsonl",
            "--case",
            "rec-s-react",
            "--out",
            "described",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let replay = replay_score(&d.join("described"));
    assert_eq!(replay["pass"], false);
    let detail = replay["detail"].as_str().unwrap();
    assert!(
        detail.contains(
            "request 1 differs from the recording:\n  tools[0].description: recorded \"Current weather for a city.\", now \"Current weather for a city, in Celsius.\""
        ),
        "{detail}"
    );
    assert!(
        text(&out.stderr).contains("tools[0].description"),
        "{}",
        text(&out.stderr)
    );
    // With tools live, replies are served whatever the requests; a tool whose result changed
    // is drift.
    let changed_tool = agent.replace(
        r#"command: ["python3", "tools/demo_tools.py", "weather"]"#,
        r#"command: ["python3", "-c", "import json, sys; a = json.load(sys.stdin); print(json.dumps({'city': a['city'], 'sunny': False, 'tempC': 5}))"]"#,
    );
    assert_ne!(agent, changed_tool);
    std::fs::write(d.join("examples/weather-cloudy.yaml"), changed_tool).unwrap();
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-cloudy.yaml",
            "recorded.jsonl",
            "--case",
            "rec-s-react",
            "--replay",
            "tools-live",
            "--out",
            "cloudy",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let replay = replay_score(&d.join("cloudy"));
    assert_eq!(replay["pass"], false);
    let detail = replay["detail"].as_str().unwrap();
    assert!(
        detail.contains("tool results drifted: tool call 1: ok.sunny: recorded true, now false"),
        "{detail}"
    );
    // The same agent with tools live and an unchanged tool: no drift.
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-chat.yaml",
            "recorded.jsonl",
            "--case",
            "rec-s-react",
            "--replay",
            "tools-live",
            "--out",
            "same",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn another_model_runs_the_agent_with_model() {
    let tmp = workdir();
    let d = tmp.path();
    // A model that looks both cities up but calls the wrong one sunnier.
    std::fs::write(
        d.join("wrong.yaml"),
        "- tool_calls:\n    - { name: getWeather, arguments: { city: Lisbon } }\n    - { name: getWeather, arguments: { city: Oslo } }\n- text: \"Oslo is sunnier.\"\n",
    )
    .unwrap();
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-chat.yaml",
            "examples/evals/weather-chat.yaml",
            "--case",
            "lisbon-oslo",
            "--case",
            "answer-follows-the-tools",
            "--model",
            "scripted:wrong.yaml",
            "--out",
            "r",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let rs = results(&d.join("r"));
    assert_eq!(rs.len(), 2);
    for r in &rs {
        assert_eq!(r["answer"], "Oslo is sunnier.", "{r}");
        assert_eq!(r["pass"], false, "{r}");
    }
    // The trajectory still matches; the answer and the command scorer do not.
    let failed = |r: &Value| -> Vec<String> {
        r["scores"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["pass"] == false)
            .map(|s| s["scorer"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(failed(&rs[0]), ["answer.contains"]);
    assert_eq!(failed(&rs[1]), ["grounded"]);
    let grounded = &rs[1]["scores"].as_array().unwrap()[1];
    assert!(
        grounded["detail"]
            .as_str()
            .unwrap()
            .contains("Oslo was not reported sunny"),
        "{grounded}"
    );
    // A mistyped case is named with the closest one.
    let out = weft(
        d,
        &[
            "eval",
            "examples/weather-chat.yaml",
            "examples/evals/weather-chat.yaml",
            "--case",
            "athen",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("did you mean `athens`"),
        "{}",
        text(&out.stderr)
    );
}

/// An eval killed midway is finished by the same command: the cases it finished keep their
/// results (the same lines), the case whose session was mid-run goes on from its log (its tool
/// call in flight run again), the cases it never began run, and the results hold each case once,
/// as if run once; every case passes, so it exits 0.
#[test]
fn an_eval_killed_midway_is_finished_by_the_same_command() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // The tool returns at once for the first two calls, then waits until `go` exists.
    std::fs::write(
        d.join("waiter.yaml"),
        r#"name: waiter
mode: react
model: scripted:waiter.script.yaml
tools:
  - name: wait_turn
    description: Waits for its turn.
    idempotent: true
    command: ["sh", "-c", "cat > /dev/null; echo x >> calls.log; if [ $(wc -l < calls.log) -gt 2 ]; then while [ ! -e go ]; do sleep 0.1; done; fi; echo '{\"ok\": true}'"]
    sandbox: { write: [.] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("waiter.script.yaml"),
        "- tool_calls: [ { name: wait_turn, arguments: {} } ]\n- text: Done.\n",
    )
    .unwrap();
    let cases: String = ["one", "two", "three", "four"]
        .iter()
        .map(|c| {
            format!(
                "{{\"id\": \"{c}\", \"task\": \"Wait.\", \"expect\": {{\"status\": \"completed\", \"answer\": {{\"contains\": \"Done\"}}}}}}\n"
            )
        })
        .collect();
    std::fs::write(d.join("cases.jsonl"), cases).unwrap();
    let args = [
        "eval",
        "waiter.yaml",
        "cases.jsonl",
        "--name",
        "nightly",
        "--out",
        "out",
        "--concurrency",
        "1",
    ];
    let mut first = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .current_dir(d)
        .env("WEFT_DB", "eval.db")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The third case's call has begun: two cases are finished, one is mid-run, one not begun.
    let began = std::time::Instant::now();
    while std::fs::read_to_string(d.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .count()
        < 3
    {
        assert!(
            began.elapsed() < std::time::Duration::from_secs(60),
            "the third case's call never began"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    first.kill().unwrap();
    first.wait().unwrap();
    let before = std::fs::read_to_string(d.join("out/results.jsonl")).unwrap();
    let finished: Vec<&str> = before.lines().collect();
    assert_eq!(finished.len(), 2, "{before}");
    std::fs::write(d.join("go"), "").unwrap();

    let out = weft(d, &args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let after = std::fs::read_to_string(d.join("out/results.jsonl")).unwrap();
    let lines: Vec<&str> = after.lines().collect();
    assert_eq!(lines.len(), 4, "{after}");
    // The finished cases' lines, unchanged and in the dataset's order.
    assert_eq!(&lines[..2], &finished[..], "{after}");
    let rs = results(&d.join("out"));
    let ids: Vec<&str> = rs.iter().map(|r| r["case"].as_str().unwrap()).collect();
    assert_eq!(ids, ["one", "two", "three", "four"]);
    for r in &rs {
        assert_eq!(r["pass"], true, "{r}");
        assert!(r.get("error").is_none(), "{r}");
    }
    // The interrupted case went on: its tool call ran again, and no case ran twice.
    let calls = std::fs::read_to_string(d.join("calls.log")).unwrap();
    assert_eq!(calls.lines().count(), 5, "{calls}");
    let s = summary(&d.join("out"));
    assert_eq!(s["sessions"]["n"], 4, "{s}");
    assert_eq!(s["sessions"]["passed"], 4, "{s}");
}

/// A recorded case is portable: it names its agent file relative to the dataset it is written
/// into (no absolute path), and a session already called `rec-...` is not named `rec-rec-...`.
#[test]
fn a_recorded_case_names_its_agent_file_from_its_dataset_and_its_prefix_once() {
    let tmp = workdir();
    let d = tmp.path();
    for id in ["rec-b2", "plain"] {
        let out = weft(
            d,
            &[
                "run",
                "examples/weather-chat.yaml",
                "Where is it sunnier, Lisbon or Oslo?",
                "--id",
                id,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    std::fs::create_dir(d.join("evals")).unwrap();
    let out = weft(
        d,
        &[
            "eval",
            "record",
            "rec-b2",
            "plain",
            "--into",
            "evals/recorded.jsonl",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(d.join("evals/recorded.jsonl")).unwrap();
    assert!(
        !written.contains(&d.display().to_string()),
        "an absolute path: {written}"
    );
    let cases: Vec<Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = cases.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["rec-b2", "rec-plain"]);
    assert_eq!(
        cases[0]["description"],
        "recorded from session rec-b2 of agent file ../examples/weather-chat.yaml"
    );
}
