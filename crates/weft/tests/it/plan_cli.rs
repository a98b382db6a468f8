//! `weft plan` driven through the real binary: validation errors, malformed files, and the example
//! plans end to end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shop() -> PathBuf {
    root().join("examples/shop.yaml")
}

fn example(name: &str) -> PathBuf {
    root().join("examples/plans").join(name)
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    /// Exit 2, a readable message, no panic.
    fn assert_usage_error(&self) {
        assert_eq!(
            self.code, 2,
            "expected exit 2\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self.assert_no_panic();
        assert!(
            !self.stderr.trim().is_empty(),
            "exit 2 without a message on stderr"
        );
    }

    fn assert_no_panic(&self) {
        assert!(
            !self.stderr.contains("panicked"),
            "the binary panicked:\n{}",
            self.stderr
        );
        assert!(!self.stderr.contains("RUST_BACKTRACE"), "{}", self.stderr);
    }
}

fn weft(args: &[&str]) -> Out {
    // Runs in the crate's directory: a store in memory, unless the test names one, so nothing
    // is left behind in the source tree.
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .env("WEFT_DB", "memory:")
        .output()
        .expect("the weft binary runs");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A plan file in a fresh temporary directory (kept alive by the returned guard).
fn plan_file(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("plan.json");
    std::fs::write(&p, bytes).unwrap();
    (dir, p)
}

/// `weft plan check` of a plan given as JSON, against the shop agent.
fn check_value(plan: &Value, input: Option<&Value>) -> Out {
    let (_dir, p) = plan_file(plan.to_string().as_bytes());
    check_path(&p, input)
}

fn check_path(p: &Path, input: Option<&Value>) -> Out {
    let input_text = input.map(Value::to_string);
    let mut args = vec![
        "plan",
        "check",
        p.to_str().unwrap(),
        "--agent",
        shop().to_str().unwrap(),
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    if let Some(i) = input_text {
        args.push("--input".into());
        args.push(i);
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    weft(&refs)
}

/// Asserts exit 2 and a problem line naming the step and the field, with `needle` in it.
fn assert_problem(out: &Out, step: &str, field: Option<&str>, needle: &str) {
    out.assert_usage_error();
    let want_prefix = match field {
        Some(f) => format!("step `{step}`, field `{f}`"),
        None => format!("step `{step}`"),
    };
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains(&want_prefix) && l.contains(needle)),
        "no problem line with `{want_prefix}` and `{needle}` in:\n{}",
        out.stderr
    );
}

fn problem_lines(out: &Out) -> Vec<&str> {
    out.stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("- "))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Validation errors: exit 2, naming step and field.

#[test]
fn a_valid_plan_checks_ok() {
    let out = check_path(
        &example("refund.json"),
        Some(&json!({"customerId": "c1", "amount": 5})),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("is valid: 2 step(s)"), "{}", out.stdout);
}

#[test]
fn a_cycle_is_printed() {
    let out = check_value(
        &json!([
            {"_id": "a", "_tool": "echo", "x": "†state.b", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "echo", "x": "†state.a", "_outputPath": "†state.b"}
        ]),
        None,
    );
    out.assert_usage_error();
    assert!(
        out.stderr.contains("a -> b -> a") || out.stderr.contains("b -> a -> b"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("cycle"), "{}", out.stderr);
}

#[test]
fn a_three_step_cycle_through_depends_on_is_printed_whole() {
    let out = check_value(
        &json!([
            {"_id": "a", "_tool": "echo", "_dependsOn": ["c"]},
            {"_id": "b", "_tool": "echo", "_dependsOn": ["a"]},
            {"_id": "c", "_tool": "echo", "_dependsOn": ["b"]},
            {"_id": "free", "_tool": "echo"}
        ]),
        None,
    );
    out.assert_usage_error();
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("cycle"))
        .unwrap_or_else(|| panic!("no cycle line in {}", out.stderr));
    let chain = line
        .split("cycle: ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap();
    let ids: Vec<&str> = chain.split(" -> ").collect();
    assert_eq!(ids.len(), 4, "{line}");
    assert_eq!(ids[0], ids[3], "{line}");
    let mut inner = ids[..3].to_vec();
    inner.sort_unstable();
    assert_eq!(inner, ["a", "b", "c"], "{line}");
    assert!(!line.contains("free"), "{line}");
}

#[test]
fn a_self_dependency_is_reported() {
    let out = check_value(
        &json!([{"_id": "a", "_tool": "echo", "_dependsOn": "a"}]),
        None,
    );
    assert_problem(&out, "a", Some("_dependsOn"), "itself");
}

#[test]
fn duplicate_ids_are_reported() {
    let out = check_value(
        &json!([
            {"_id": "same", "_tool": "echo"},
            {"_id": "same", "_tool": "echo"}
        ]),
        None,
    );
    assert_problem(&out, "same", Some("_id"), "duplicate id");
}

#[test]
fn an_unknown_tool_is_reported_with_the_known_ones() {
    let out = check_value(&json!([{"_id": "x", "_tool": "launchRocket"}]), None);
    assert_problem(&out, "x", Some("_tool"), "unknown tool `launchRocket`");
    assert!(out.stderr.contains("getWeather"), "{}", out.stderr);
}

#[test]
fn a_missing_tool_is_reported() {
    let out = check_value(&json!([{"_id": "x", "a": 1}]), None);
    assert_problem(&out, "x", Some("_tool"), "missing");
}

#[test]
fn a_state_path_no_step_writes_is_reported() {
    let out = check_value(
        &json!([
            {"_id": "w", "_tool": "echo", "_outputPath": "†state.written"},
            {"_id": "r", "_tool": "echo", "v": "†state.nowhere.deep"}
        ]),
        None,
    );
    assert_problem(&out, "r", Some("v"), "written by no step");
}

#[test]
fn an_input_reference_missing_from_the_input_is_reported() {
    let out = check_value(
        &json!([{"_id": "w", "_tool": "getWeather", "city": "†input.city"}]),
        Some(&json!({"town": "Lisbon"})),
    );
    assert_problem(&out, "w", Some("city"), "not in the input");
}

#[test]
fn a_literal_argument_of_the_wrong_type_is_reported() {
    let out = check_value(
        &json!([{"_id": "w", "_tool": "getWeather", "city": 42}]),
        None,
    );
    assert_problem(&out, "w", Some("city"), "input_schema");
    assert!(out.stderr.contains("string"), "{}", out.stderr);
}

#[test]
fn a_missing_required_argument_is_reported() {
    let out = check_value(
        &json!([{"_id": "r", "_tool": "issueRefund", "amount": 3}]),
        None,
    );
    assert_problem(&out, "r", Some("arguments"), "customerId");
}

#[test]
fn a_literal_violating_a_constraint_is_reported() {
    let out = check_value(
        &json!([{"_id": "r", "_tool": "issueRefund", "customerId": "c", "amount": -5}]),
        None,
    );
    assert_problem(&out, "r", Some("amount"), "input_schema");
}

#[test]
fn a_required_argument_given_by_reference_is_not_a_problem() {
    let out = check_value(
        &json!([{"_id": "w", "_tool": "getWeather", "city": "†input.city"}]),
        Some(&json!({"city": "Oslo"})),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn depends_on_an_unknown_id_is_reported() {
    let out = check_value(
        &json!([{"_id": "a", "_tool": "echo", "_dependsOn": ["ghost"]}]),
        None,
    );
    assert_problem(&out, "a", Some("_dependsOn"), "unknown step `ghost`");
}

#[test]
fn a_steps_reference_to_an_unknown_id_is_reported() {
    let out = check_value(
        &json!([{"_id": "a", "_tool": "echo", "v": "†steps.ghost.x"}]),
        None,
    );
    assert_problem(&out, "a", Some("v"), "unknown step `ghost`");
}

#[test]
fn malformed_references_are_reported() {
    for (arg, needle) in [
        (json!("†stat.x"), "malformed reference"),
        (json!("†steps."), "malformed reference"),
        (json!("†steps"), "malformed reference"),
        (json!("†state"), "malformed reference"),
        (json!("†state.a..b"), "malformed reference"),
        (json!({"$ref": 5}), "malformed reference"),
        (json!({"$ref": "nowhere.x"}), "malformed reference"),
    ] {
        let out = check_value(&json!([{"_id": "m", "_tool": "echo", "v": arg}]), None);
        assert_problem(&out, "m", Some("v"), needle);
    }
}

#[test]
fn a_malformed_reference_deep_in_an_argument_names_its_place() {
    let out = check_value(
        &json!([{"_id": "m", "_tool": "echo", "v": {"list": [1, "†stat.x"]}}]),
        None,
    );
    assert_problem(&out, "m", Some("v.list[1]"), "malformed reference");
}

#[test]
fn an_unknown_meta_field_is_reported() {
    let out = check_value(&json!([{"_id": "m", "_tool": "echo", "_retries": 3}]), None);
    assert_problem(&out, "m", Some("_retries"), "unknown meta field");
}

#[test]
fn a_bad_condition_is_reported() {
    for when in ["state.x ==", "os.system"] {
        let out = check_value(
            &json!([
                {"_id": "w", "_tool": "echo", "_outputPath": "†state.x"},
                {"_id": "m", "_tool": "echo", "_when": when}
            ]),
            None,
        );
        assert_problem(&out, "m", Some("_when"), "");
    }
}

#[test]
fn a_bad_output_path_is_reported() {
    for path in ["†input.x", "†state.a || †state.b || †state.c", "†state"] {
        let out = check_value(
            &json!([{"_id": "m", "_tool": "echo", "_outputPath": path}]),
            None,
        );
        assert_problem(&out, "m", Some("_outputPath"), "");
    }
}

#[test]
fn check_lists_every_problem_of_a_plan() {
    let out = check_value(
        &json!([
            {"_id": "a", "_tool": "nope"},
            {"_id": "a", "_tool": "echo"},
            {"_id": "c", "_tool": "echo", "_dependsOn": ["ghost"]},
            {"_id": "d", "_tool": "echo", "v": "†state.never"},
            {"_id": "e", "_tool": "getWeather", "city": 1},
            {"_id": "f", "_tool": "echo", "v": "†input.missing"}
        ]),
        Some(&json!({})),
    );
    out.assert_usage_error();
    let lines = problem_lines(&out);
    assert_eq!(lines.len(), 6, "{}", out.stderr);
    assert!(out.stderr.contains("has 6 problem(s)"), "{}", out.stderr);
    for needle in [
        "step `a`, field `_tool`: unknown tool",
        "step `a`, field `_id`: duplicate id",
        "step `c`, field `_dependsOn`",
        "step `d`, field `v`",
        "step `e`, field `city`",
        "step `f`, field `v`",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "missing `{needle}` in:\n{}",
            out.stderr
        );
    }
}

#[test]
fn shape_problems_of_several_calls_are_all_listed() {
    let out = check_value(
        &json!([
            {"_id": "a", "_tool": "echo", "_bogus": 1},
            {"_id": "b", "_tool": "echo", "v": "†stat.x"},
            {"_id": "c", "_tool": "echo", "_parallel": "yes"}
        ]),
        None,
    );
    out.assert_usage_error();
    assert_eq!(problem_lines(&out).len(), 3, "{}", out.stderr);
}

#[test]
fn check_json_lists_problems_as_data() {
    let (_dir, p) = plan_file(
        json!([{"_id": "a", "_tool": "nope"}, {"_id": "b", "_tool": "echo", "_dependsOn": ["zz"]}])
            .to_string()
            .as_bytes(),
    );
    let out = weft(&[
        "plan",
        "check",
        p.to_str().unwrap(),
        "--agent",
        shop().to_str().unwrap(),
        "--json",
    ]);
    out.assert_usage_error();
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["ok"], json!(false));
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2);
    assert_eq!(problems[0]["step"], json!("a"));
    assert_eq!(problems[0]["field"], json!("_tool"));
    assert_eq!(problems[1]["field"], json!("_dependsOn"));
}

#[test]
fn run_and_dry_run_refuse_an_invalid_plan_too() {
    let (_dir, p) = plan_file(
        json!([{"_id": "a", "_tool": "nope"}])
            .to_string()
            .as_bytes(),
    );
    for cmd in ["run", "dry-run"] {
        let out = weft(&[
            "plan",
            cmd,
            p.to_str().unwrap(),
            "--agent",
            shop().to_str().unwrap(),
        ]);
        assert_problem(&out, "a", Some("_tool"), "unknown tool");
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed plan files.

fn check_bytes(bytes: &[u8]) -> Out {
    let (_dir, p) = plan_file(bytes);
    check_path(&p, None)
}

#[test]
fn malformed_plan_files_give_exit_2_and_a_message() {
    let mut garbage: Vec<u8> = (0..=255u8).cycle().take(2048).collect();
    garbage.extend_from_slice(&[0xff, 0xfe, 0x00, 0x9f]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"this is not json".to_vec(), "not valid JSON"),
        ("empty", Vec::new(), "not valid JSON"),
        ("whitespace", b"  \n\t ".to_vec(), "not valid JSON"),
        ("binary", garbage, "plan"),
        ("number", b"42".to_vec(), "a plan is a JSON array"),
        ("string", b"\"steps\"".to_vec(), "a plan is a JSON array"),
        ("null", b"null".to_vec(), "a plan is a JSON array"),
        ("no steps", br#"{"name": "x"}"#.to_vec(), "`steps` array"),
        (
            "steps not array",
            br#"{"steps": {"a": 1}}"#.to_vec(),
            "`steps` array",
        ),
        (
            "array of strings",
            br#"["a", "b"]"#.to_vec(),
            "must be a JSON object",
        ),
        (
            "array of numbers",
            b"[1, [2]]".to_vec(),
            "must be a JSON object",
        ),
        (
            "truncated",
            br#"[{"_tool": "echo""#.to_vec(),
            "not valid JSON",
        ),
        ("trailing", br#"[] []"#.to_vec(), "not valid JSON"),
    ];
    for (what, bytes, needle) in cases {
        let out = check_bytes(&bytes);
        out.assert_usage_error();
        assert!(
            out.stderr.contains(needle),
            "{what}: `{needle}` not in:\n{}",
            out.stderr
        );
    }
}

#[test]
fn an_array_of_strings_names_each_call() {
    let out = check_bytes(br#"["a", "b"]"#);
    out.assert_usage_error();
    assert!(out.stderr.contains("step `#1`"), "{}", out.stderr);
    assert!(out.stderr.contains("step `#2`"), "{}", out.stderr);
}

#[test]
fn wrong_types_for_every_meta_field_are_reported() {
    let cases = [
        ("_id", json!(5)),
        ("_id", json!("has space")),
        ("_id", json!("")),
        ("_tool", json!(5)),
        ("_tool", json!("")),
        ("_description", json!(["x"])),
        ("_category", json!({"a": 1})),
        ("_outputPath", json!(true)),
        ("_outputPath", json!("not a ref")),
        ("_dependsOn", json!(5)),
        ("_dependsOn", json!([1, 2])),
        ("_dependsOn", json!({"a": "b"})),
        ("_parallel", json!("yes")),
        ("_parallel", json!(1)),
        ("_when", json!(true)),
        ("_when", json!(["a"])),
    ];
    for (field, value) in cases {
        let mut call = serde_json::Map::new();
        call.insert("_id".into(), json!("m"));
        call.insert("_tool".into(), json!("echo"));
        call.insert(field.into(), value.clone());
        let out = check_value(&Value::Array(vec![Value::Object(call)]), None);
        out.assert_usage_error();
        assert!(
            out.stderr.contains(&format!("field `{field}`")),
            "{field} = {value}: field not named in:\n{}",
            out.stderr
        );
    }
}

#[test]
fn a_missing_plan_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("does-not-exist.json");
    let out = check_path(&p, None);
    out.assert_usage_error();
    assert!(
        out.stderr.contains("cannot read plan file"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("does-not-exist.json"), "{}", out.stderr);
}

#[test]
fn a_directory_as_plan_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let out = check_path(dir.path(), None);
    out.assert_usage_error();
    assert!(
        out.stderr.contains("cannot read plan file"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_deeply_nested_plan_does_not_crash() {
    let depth = 10_000;
    let mut text = "[".repeat(depth);
    text.push_str(&"]".repeat(depth));
    let out = check_bytes(text.as_bytes());
    out.assert_usage_error();
    // Refused before parsing, from the text's bracket depth (weft_core::limits).
    assert!(
        out.stderr
            .contains("nests brackets 10000 levels deep; weft reads at most 128 levels"),
        "{}",
        out.stderr
    );

    // Nested objects inside an argument.
    let mut arg = String::new();
    for _ in 0..depth {
        arg.push_str("{\"a\":");
    }
    arg.push('1');
    arg.push_str(&"}".repeat(depth));
    let text = format!(r#"[{{"_tool": "echo", "v": {arg}}}]"#);
    let out = check_bytes(text.as_bytes());
    out.assert_usage_error();
}

#[test]
fn a_plan_nested_within_the_limit_is_accepted() {
    // 60 levels in an argument (62 with the plan's array and the step's object) is under the
    // 64 levels weft accepts: the plan parses, runs, and its output is stored and read back.
    let depth = 60;
    let mut arg = String::new();
    for _ in 0..depth {
        arg.push('[');
    }
    arg.push('7');
    arg.push_str(&"]".repeat(depth));
    let text = format!(r#"[{{"_tool": "echo", "v": {arg}, "_outputPath": "†state.out"}}]"#);
    let (_dir, p) = plan_file(text.as_bytes());
    let out = weft(&[
        "plan",
        "run",
        p.to_str().unwrap(),
        "--agent",
        shop().to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let state: Value = serde_json::from_str(&out.stdout).unwrap();
    let mut v = &state["out"]["v"];
    for _ in 0..depth {
        v = &v[0];
    }
    assert_eq!(v, &json!(7));
}

fn check_with_agent(agent: &Path) -> Out {
    weft(&[
        "plan",
        "check",
        example("refund.json").to_str().unwrap(),
        "--agent",
        agent.to_str().unwrap(),
    ])
}

#[test]
fn a_missing_agent_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let out = check_with_agent(&dir.path().join("nobody.yaml"));
    out.assert_usage_error();
    assert!(
        out.stderr.contains("cannot read agent file"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("nobody.yaml"), "{}", out.stderr);
}

#[test]
fn malformed_agent_files_are_reported() {
    let cases: Vec<(&str, &[u8])> = vec![
        ("not yaml", b"name: [unclosed"),
        ("empty", b""),
        ("a list", b"- a\n- b\n"),
        ("no name", b"mode: plan\ntools: []\n"),
        ("unknown key", b"name: x\nfrobnicate: 1\n"),
        ("bad limits", b"name: x\nlimits: { max_parallel: many }\n"),
        ("bad tool", b"name: x\ntools:\n  - builtin: teleport\n"),
        ("tool without command", b"name: x\ntools:\n  - name: t\n"),
        (
            "duplicate tools",
            b"name: x\ntools:\n  - builtin: echo\n  - builtin: echo\n",
        ),
        ("binary", &[0xff, 0xfe, 0x00, 0x01, 0x80]),
    ];
    for (what, bytes) in cases {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("agent.yaml");
        std::fs::write(&p, bytes).unwrap();
        let out = check_with_agent(&p);
        out.assert_usage_error();
        assert!(
            out.stderr.contains("agent") || out.stderr.contains("agent.yaml"),
            "{what}: message does not name the agent file:\n{}",
            out.stderr
        );
    }
}

#[test]
fn malformed_input_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("input.json");
    std::fs::write(&bad_file, "{oops").unwrap();
    let missing = dir.path().join("missing.json");
    let cases = [
        ("{not json".to_owned(), "--input is not valid JSON"),
        ("[1, 2]".to_owned(), "must be a JSON object"),
        ("42".to_owned(), "must be a JSON object"),
        (String::new(), "not valid JSON"),
        (format!("@{}", bad_file.display()), "is not valid JSON"),
        (format!("@{}", missing.display()), "cannot read input file"),
    ];
    for cmd in ["check", "run"] {
        for (input, needle) in &cases {
            let out = weft(&[
                "plan",
                cmd,
                example("refund.json").to_str().unwrap(),
                "--agent",
                shop().to_str().unwrap(),
                "--input",
                input,
            ]);
            out.assert_usage_error();
            assert!(
                out.stderr.contains(needle),
                "{cmd} --input {input:?}: `{needle}` not in:\n{}",
                out.stderr
            );
        }
    }
}

#[test]
fn input_from_a_file_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("input.json");
    std::fs::write(&f, r#"{"city": "Athens"}"#).unwrap();
    let arg = format!("@{}", f.display());
    let out = weft(&[
        "plan",
        "run",
        example("weather.json").to_str().unwrap(),
        "--agent",
        shop().to_str().unwrap(),
        "--input",
        &arg,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let state: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(state["weather"]["city"], json!("Athens"));
}

// ---------------------------------------------------------------------------------------------
// Execution of the example plans.

fn run_example(name: &str, input: &Value, extra: &[&str]) -> (Out, Value) {
    let input = input.to_string();
    let agent = shop();
    let path = example(name);
    let mut args = vec![
        "plan",
        "run",
        path.to_str().unwrap(),
        "--agent",
        agent.to_str().unwrap(),
        "--input",
        &input,
    ];
    args.extend_from_slice(extra);
    let out = weft(&args);
    out.assert_no_panic();
    let state = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", out.stdout));
    (out, state)
}

#[test]
fn refund_plan_refunds() {
    let (out, state) = run_example(
        "refund.json",
        &json!({"customerId": "cust_123", "amount": 50.0}),
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(state["billingHistory"]["customerId"], json!("cust_123"));
    assert_eq!(
        state["refund"]["confirmationId"],
        json!("refund_cust_123_5000")
    );
}

#[test]
fn weather_plan_suggests_a_park_when_sunny() {
    let (out, state) = run_example("weather.json", &json!({"city": "Lisbon"}), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(state["weather"]["sunny"], json!(true));
    assert_eq!(state["suggestion"], json!("A walk in the park in Lisbon"));
    assert_eq!(
        state["presented"]["suggestion"],
        json!("A walk in the park in Lisbon")
    );
}

#[test]
fn weather_plan_suggests_a_film_when_not_sunny() {
    let (out, state) = run_example("weather.json", &json!({"city": "Oslo"}), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(state["weather"]["sunny"], json!(false));
    assert_eq!(state["suggestion"], json!("A film at the cinema in Oslo"));
    assert_eq!(
        state["presented"]["suggestion"],
        json!("A film at the cinema in Oslo")
    );
}

#[test]
fn a_declined_payment_takes_the_error_path_and_is_reported() {
    let (out, state) = run_example("payment.json", &json!({"amount": 500}), &["--events"]);
    assert_eq!(
        out.code, 0,
        "a handled failure is a success: {}",
        out.stderr
    );
    assert_eq!(state["error"]["kind"], json!("exit_status"));
    assert!(
        state["error"]["message"]
            .as_str()
            .unwrap()
            .contains("card_declined")
    );
    assert_eq!(state["failure"]["status"], json!("Failed"));
    assert!(state.get("receipt").is_none(), "{state}");
    assert!(state.get("order").is_none(), "{state}");
    let events = events_of(&out);
    let failed = events
        .iter()
        .find(|e| e["type"] == "step_failed" && e["step"] == "pay")
        .unwrap();
    assert_eq!(failed["handled"], json!(true));
    let skipped = events
        .iter()
        .find(|e| e["type"] == "step_skipped" && e["step"] == "confirm")
        .unwrap();
    assert!(
        skipped["reason"].as_str().unwrap().contains("receipt"),
        "{skipped}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "step_completed" && e["step"] == "report")
    );
    assert_eq!(events.last().unwrap()["status"], json!("completed"));
}

#[test]
fn an_accepted_payment_confirms_the_order() {
    let (out, state) = run_example("payment.json", &json!({"amount": 50}), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(state["receipt"]["receiptId"], json!("rcpt_42"));
    assert_eq!(state["order"]["confirmed"], json!(true));
    assert!(state.get("error").is_none(), "{state}");
    assert!(state.get("failure").is_none(), "{state}");
}

#[test]
fn the_translation_plan_translates() {
    let (out, state) = run_example("translate.json", &json!({"text": "bonjour le monde"}), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(state["language"], json!("fr"));
    assert_eq!(state["isEnglish"], json!(false));
    assert_eq!(state["translatedText"], json!("Hello the world"));

    let (out, state) = run_example("translate.json", &json!({"text": "hello there"}), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(state["isEnglish"], json!(true));
    assert_eq!(state["translatedText"], json!("hello there"));
}

fn events_of(out: &Out) -> Vec<Value> {
    out.stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line ({e}): {l}")))
        .collect()
}

#[test]
fn events_are_json_lines_with_increasing_seq() {
    let (out, _) = run_example("weather.json", &json!({"city": "Lisbon"}), &["--events"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().filter(|l| !l.is_empty()).collect();
    assert!(lines.len() > 5, "{}", out.stderr);
    let mut last = 0;
    for line in &lines {
        let e: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("not a JSON line ({err}): {line}"));
        let seq = e["seq"].as_u64().unwrap();
        assert_eq!(seq, last + 1, "{line}");
        last = seq;
        assert!(e["type"].is_string(), "{line}");
        assert!(e["ts"].is_i64(), "{line}");
    }
    let first: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(first["type"], json!("session_started"));
    let last: Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(last["type"], json!("run_finished"));
    assert_eq!(last["status"], json!("completed"));
}

#[test]
fn a_failed_step_gives_exit_1_and_blocks_its_dependants() {
    // `processPayment` is not idempotent: a declined charge fails for good, with no error path.
    let (_dir, p) = plan_file(
        json!([
            {"_id": "pay", "_tool": "processPayment", "amount": 500, "_outputPath": "†state.receipt"},
            {"_id": "confirm", "_tool": "confirmOrder", "receipt": "†state.receipt", "_outputPath": "†state.order"}
        ])
        .to_string()
        .as_bytes(),
    );
    let out = weft(&[
        "plan",
        "run",
        p.to_str().unwrap(),
        "--agent",
        shop().to_str().unwrap(),
        "--events",
    ]);
    out.assert_no_panic();
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("step `pay` failed"), "{}", out.stderr);
    let events = events_of(&out);
    let skipped = events
        .iter()
        .find(|e| e["type"] == "step_skipped" && e["step"] == "confirm")
        .unwrap();
    assert!(
        skipped["reason"]
            .as_str()
            .unwrap()
            .starts_with("blocked: step `pay` failed"),
        "{skipped}"
    );
    assert_eq!(events.last().unwrap()["status"], json!("failed"));
}

/// A fan-out under `_onItemError: fail`: item 0 fails for good (its argument is refused) while
/// item 1 runs, then item 1 fails with an error that could be retried. The step has failed, so
/// nothing is retried: the step fails, its dependant is blocked and the run exits 1.
#[test]
fn a_fan_out_failed_for_good_retries_nothing_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.yaml");
    std::fs::write(
        &agent,
        r#"name: fan
mode: plan
limits: { max_step_attempts: 3 }
tools:
  - name: check
    description: Checks an order; slow, and fails.
    command: ["sh", "-c", "cat >/dev/null; sleep 0.3; echo slow >&2; exit 1"]
    input_schema: { type: object, properties: { n: { type: integer, minimum: 1 } }, required: [n] }
    idempotent: true
    parallel: true
  - builtin: echo
"#,
    )
    .unwrap();
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        json!([
            {"_id": "each", "_tool": "check", "_forEach": "†input.orders", "_maxParallel": 2,
             "n": "†item", "_outputPath": "†state.out"},
            {"_id": "after", "_tool": "echo", "out": "†state.out"}
        ])
        .to_string(),
    )
    .unwrap();
    let out = weft(&[
        "plan",
        "run",
        plan.to_str().unwrap(),
        "--agent",
        agent.to_str().unwrap(),
        "--input",
        r#"{"orders": [0, 1]}"#,
        "--events",
    ]);
    out.assert_no_panic();
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("step `each` failed"), "{}", out.stderr);
    let events = events_of(&out);
    assert!(
        !events.iter().any(|e| e["type"] == "item_retrying"),
        "{}",
        out.stderr
    );
    let each_failed = events
        .iter()
        .any(|e| e["type"] == "step_failed" && e["step"] == "each");
    assert!(each_failed, "{}", out.stderr);
    let skipped = events
        .iter()
        .find(|e| e["type"] == "step_skipped" && e["step"] == "after")
        .unwrap_or_else(|| panic!("`after` was not skipped:\n{}", out.stderr));
    assert_eq!(skipped["reason"], json!("blocked: step `each` failed"));
    assert_eq!(events.last().unwrap()["status"], json!("failed"));
}

#[test]
fn max_waves_from_the_command_line_ends_the_run() {
    let (out, _) = run_example(
        "translate.json",
        &json!({"text": "hola mundo"}),
        &["--max-waves", "1"],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("max_waves (1)"), "{}", out.stderr);
}

#[test]
fn dry_run_shows_waves_and_conditional_steps() {
    let out = weft(&[
        "plan",
        "dry-run",
        example("weather.json").to_str().unwrap(),
        "--agent",
        shop().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let waves = v["waves"].as_array().unwrap();
    let ids: Vec<Vec<&str>> = waves
        .iter()
        .map(|w| {
            w["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(
        ids,
        vec![vec!["weather"], vec!["park", "movie"], vec!["present"]]
    );
    assert!(waves[1]["steps"][0]["conditional"].is_string());
    assert!(waves[2]["steps"][0]["conditional"].is_string());
    assert!(waves[0]["steps"][0].get("conditional").is_none());
}

/// A command that exits non-zero gave its answer: an idempotent tool's call is not tried again,
/// unless the tool declares the code passing (`retry_exit_codes`), when it is tried
/// `max_step_attempts` times in all.
#[test]
fn a_non_zero_exit_is_tried_again_only_when_the_tool_declares_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tool = |name: &str, code: i32, extra: &str| {
        format!(
            "  - name: {name}\n    description: Counts its attempts, then exits {code}.\n    command: [\"sh\", \"-c\", \"cat > /dev/null; echo x >> {name}.txt; exit {code}\"]\n    sandbox: {{ write: [.] }}\n    idempotent: true\n{extra}"
        )
    };
    let agent = d.join("agent.yaml");
    std::fs::write(
        &agent,
        format!(
            "name: exits\nmode: plan\nlimits: {{ max_step_attempts: 3 }}\ntools:\n{}{}",
            tool("answers", 1, ""),
            tool("passing", 75, "    retry_exit_codes: [75]\n")
        ),
    )
    .unwrap();
    for name in ["answers", "passing"] {
        let plan = d.join(format!("{name}.json"));
        std::fs::write(&plan, json!([{"_id": "s", "_tool": name}]).to_string()).unwrap();
        let out = weft(&[
            "plan",
            "run",
            plan.to_str().unwrap(),
            "--agent",
            agent.to_str().unwrap(),
        ]);
        out.assert_no_panic();
        assert_eq!(out.code, 1, "{}", out.stderr);
    }
    let attempts = |name: &str| {
        std::fs::read_to_string(d.join(format!("{name}.txt")))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(attempts("answers"), 1);
    assert_eq!(attempts("passing"), 3);
}

/// The library example: each step's output matches its tool's `output_schema`, and the last
/// step reads two typed fields of the steps before it (`†steps.s1.member.id`,
/// `†steps.s2.book_id`) into integer parameters.
#[test]
fn the_library_plan_reads_typed_outputs_into_integer_arguments() {
    let out = weft(&[
        "plan",
        "run",
        example("reserve.json").to_str().unwrap(),
        "--agent",
        root().join("examples/library.yaml").to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.assert_no_panic();
    assert!(
        out.stderr
            .contains(r#"reserve_copy {"member_id":41,"book_id":7}"#),
        "{}",
        out.stderr
    );
}
