//! The exact planner schema with its stages (`prompts::planner_stages`, the grammar a local
//! model's plan is decoded under, built again as each step is written) against the engine and
//! the tools: for random tools (typed parameters, with and without a declared `output_schema`),
//! random run inputs and random candidate plans whose arguments are values or references (to
//! the input, to steps before, to paths that exist, fit, do not fit or are not there), every
//! plan the stages allow is
//! - accepted by the engine (`graph::validate`, as a planner reply is), and
//! - run with arguments its tools accept: with each step's output made to match its tool's
//!   `output_schema` (the registry fails a call whose output does not), every reference that
//!   reads the input or a step of a tool with an `output_schema` resolves to a value that the
//!   parameter's schema accepts.
//!
//! And the plan (`reserve_copy {"member_id": "†steps.s1"}`, the whole object a
//! `find_book` step gives put into an `integer`) is outside the stages, while
//! `†steps.s1.member.id` is inside.
//!
//! The seed is fixed (`PROPTEST_RNG_SEED` sets another) and the count modest (`PROPTEST_CASES`
//! sets another).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value, json};
use weft_core::graph::{self, ValidateOptions};
use weft_core::plan::{REF_MARK, RefRoot, Reference};
use weft_core::prompts::{PlanScope, exact_planner_schema};
use weft_core::{Plan, ToolInfo};

/// The kinds of value a parameter or an output field may have.
const KINDS: [&str; 6] = ["integer", "number", "string", "boolean", "object", "enum"];

fn kind_schema(kind: &str) -> Value {
    match kind {
        "enum" => json!({"type": "string", "enum": ["red", "blue"]}),
        "object" => json!({"type": "object"}),
        k => json!({"type": k}),
    }
}

/// A value of `schema`, as a tool that keeps its `output_schema` gives (required properties
/// only; the first of fixed values).
fn instance(schema: &Value) -> Value {
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return e[0].clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") => json!(7),
        Some("number") => json!(1.5),
        Some("string") => json!("text"),
        Some("boolean") => json!(true),
        Some("null") => Value::Null,
        Some("array") => json!([]),
        Some("object") => {
            let mut m = Map::new();
            let props = schema.get("properties").and_then(Value::as_object);
            for k in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let p = props.and_then(|p| p.get(k)).cloned().unwrap_or(json!({}));
                m.insert(k.to_owned(), instance(&p));
            }
            Value::Object(m)
        }
        _ => json!("anything"),
    }
}

/// A generated tool: its parameters' kinds, and its output's fields (`None`: no output schema;
/// a field's kind, whether it is required, and for an object field, its own fields).
#[derive(Clone, Debug)]
struct ToolGen {
    params: Vec<usize>,
    output: Option<Vec<(usize, bool, Vec<usize>)>>,
}

fn gen_tool() -> impl Strategy<Value = ToolGen> {
    (
        prop::collection::vec(0..KINDS.len(), 1..3),
        prop::option::of(prop::collection::vec(
            (
                0..KINDS.len(),
                any::<bool>(),
                prop::collection::vec(0..KINDS.len(), 0..3),
            ),
            0..4,
        )),
    )
        .prop_map(|(params, output)| ToolGen { params, output })
}

fn tool_info(i: usize, g: &ToolGen) -> ToolInfo {
    let mut props = Map::new();
    for (j, k) in g.params.iter().enumerate() {
        props.insert(format!("p{j}"), kind_schema(KINDS[*k]));
    }
    let required: Vec<String> = props.keys().cloned().collect();
    let output = g.output.as_ref().map(|fields| {
        let mut props = Map::new();
        let mut required = Vec::new();
        for (j, (k, req, inner)) in fields.iter().enumerate() {
            let name = format!("f{j}");
            let schema = if KINDS[*k] == "object" && !inner.is_empty() {
                let inner_props: Map<String, Value> = inner
                    .iter()
                    .enumerate()
                    .map(|(n, k)| (format!("g{n}"), kind_schema(KINDS[*k])))
                    .collect();
                let names: Vec<&String> = inner_props.keys().collect();
                json!({"type": "object", "properties": inner_props, "required": names})
            } else {
                kind_schema(KINDS[*k])
            };
            props.insert(name.clone(), schema);
            if *req {
                required.push(name);
            }
        }
        json!({"type": "object", "properties": props, "required": required})
    });
    serde_json::from_value(json!({
        "name": format!("t{i}"),
        "input_schema": {"type": "object", "properties": props, "required": required},
        "output_schema": output,
    }))
    .unwrap()
}

/// A candidate argument: a value of some kind, or a reference to one of a few roots and paths.
#[derive(Clone, Debug)]
enum ArgGen {
    /// A value of the parameter's own kind.
    Own,
    /// The input's key of the parameter's own kind.
    InputOwn,
    Value(usize),
    Input(Option<usize>),
    Step(usize, Vec<String>),
}

fn gen_arg() -> impl Strategy<Value = ArgGen> {
    let seg = prop_oneof![
        3 => Just("f0".to_owned()),
        2 => Just("f1".to_owned()),
        2 => Just("g0".to_owned()),
        1 => Just("zz".to_owned()),
    ];
    prop_oneof![
        3 => Just(ArgGen::Own),
        1 => Just(ArgGen::InputOwn),
        1 => (0..KINDS.len()).prop_map(ArgGen::Value),
        1 => prop::option::of(0..KINDS.len()).prop_map(ArgGen::Input),
        4 => (0usize..2, prop::collection::vec(seg, 0..3)).prop_map(|(s, p)| ArgGen::Step(s, p)),
    ]
}

/// A candidate step: a tool (by index) and an argument for each parameter it might have.
type StepGen = (usize, Vec<ArgGen>);

fn gen_plan() -> impl Strategy<Value = Vec<StepGen>> {
    prop::collection::vec((0usize..4, prop::collection::vec(gen_arg(), 3)), 1..5)
}

/// The run's input: one key per kind (`k0`, ...), each a value of that kind.
fn input() -> Value {
    let m: Map<String, Value> = KINDS
        .iter()
        .enumerate()
        .map(|(i, k)| (format!("k{i}"), instance(&kind_schema(k))))
        .collect();
    Value::Object(m)
}

fn plan_value(tools: &[ToolInfo], steps: &[StepGen]) -> Vec<Value> {
    steps
        .iter()
        .enumerate()
        .map(|(i, (t, args))| {
            let tool = &tools[t % tools.len()];
            let mut step = Map::new();
            step.insert("_id".into(), json!(format!("s{}", i + 1)));
            step.insert("_tool".into(), json!(tool.name));
            let params = tool.input_schema["properties"].as_object().unwrap();
            for ((name, param), arg) in params.iter().zip(args) {
                let own = KINDS
                    .iter()
                    .position(|k| kind_schema(k) == *param)
                    .unwrap_or(0);
                let v = match arg {
                    ArgGen::Own => instance(param),
                    ArgGen::InputOwn => json!(format!("{REF_MARK}input.k{own}")),
                    ArgGen::Value(k) => instance(&kind_schema(KINDS[*k])),
                    ArgGen::Input(None) => json!(format!("{REF_MARK}input")),
                    ArgGen::Input(Some(k)) => json!(format!("{REF_MARK}input.k{k}")),
                    ArgGen::Step(s, path) => {
                        let mut r = format!("{REF_MARK}steps.s{}", s + 1);
                        for p in path {
                            r.push('.');
                            r.push_str(p);
                        }
                        json!(r)
                    }
                };
                step.insert(name.clone(), v);
            }
            Value::Object(step)
        })
        .collect()
}

/// Whether the stages allow `steps`: each step as the schema built from the steps before it
/// allows it (the last stage, given them all, types each position by the steps before it).
fn staged_allows(tools: &[ToolInfo], scope: &PlanScope, steps: &[Value]) -> bool {
    let schema = exact_planner_schema(tools, &[], scope, steps);
    jsonschema::validator_for(&schema)
        .unwrap()
        .is_valid(&json!({"plan": steps}))
}

/// The arguments of `step` with each reference read from `input` and the `outputs` so far;
/// `None` when a reference reads a step whose tool declares no output schema (nothing is
/// promised of it).
fn resolved(
    step: &Value,
    input: &Value,
    outputs: &BTreeMap<String, (Value, bool)>,
) -> Option<Map<String, Value>> {
    let mut args = Map::new();
    for (k, v) in step.as_object().unwrap() {
        if k.starts_with('_') {
            continue;
        }
        let value = match v.as_str().and_then(|s| s.strip_prefix(REF_MARK)) {
            None => v.clone(),
            Some(text) => {
                let r = Reference::parse(text).unwrap();
                let root = match &r.root {
                    RefRoot::Input => input,
                    RefRoot::Step(id) => match outputs.get(id) {
                        Some((out, true)) => out,
                        _ => return None,
                    },
                    other => panic!("a reference to {other:?} in {step}"),
                };
                weft_core::path::get(root, &r.path)
                    .unwrap_or_else(|| panic!("{v} reads nothing in {step}"))
                    .clone()
            }
        };
        args.insert(k.clone(), value);
    }
    Some(args)
}

fn config() -> Config {
    let mut cfg = Config::with_cases(
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(96),
    );
    cfg.rng_seed = RngSeed::Fixed(
        std::env::var("PROPTEST_RNG_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(51),
    );
    cfg.failure_persistence = None;
    cfg
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_plan_the_stages_allow_is_accepted_and_runs_with_arguments_that_fit(
        tool_gens in prop::collection::vec(gen_tool(), 1..4),
        plans in prop::collection::vec(gen_plan(), 6),
    ) {
        let tools: Vec<ToolInfo> = tool_gens.iter().enumerate().map(|(i, g)| tool_info(i, g)).collect();
        let catalog: BTreeMap<String, ToolInfo> =
            tools.iter().map(|t| (t.name.clone(), t.clone())).collect();
        let input = input();
        let scope = PlanScope {
            input: true,
            input_keys: input.as_object().unwrap().keys().cloned().collect(),
            input_value: input.clone(),
            ..PlanScope::default()
        };
        for candidate in &plans {
            let steps = plan_value(&tools, candidate);
            if !staged_allows(&tools, &scope, &steps) {
                continue;
            }
            let plan = Plan::from_value(&json!(steps)).unwrap();
            let opts = ValidateOptions { input: Some(&input), ..ValidateOptions::default() };
            let problems = graph::validate(&plan, &catalog, &opts);
            prop_assert!(problems.is_empty(), "the engine refuses {steps:?}: {problems:?}");
            let mut outputs = BTreeMap::new();
            for step in &steps {
                let tool = &catalog[step["_tool"].as_str().unwrap()];
                if let Some(args) = resolved(step, &input, &outputs) {
                    let validator = jsonschema::validator_for(&tool.input_schema).unwrap();
                    let args = Value::Object(args);
                    prop_assert!(
                        validator.is_valid(&args),
                        "{step} runs with {args}, which {} refuses", tool.name
                    );
                }
                let out = tool.output_schema.as_ref().map(instance);
                let known = out.is_some();
                outputs.insert(
                    step["_id"].as_str().unwrap().to_owned(),
                    (out.unwrap_or(json!("untyped")), known),
                );
            }
        }
    }
}

#[test]
fn a_whole_output_object_cannot_fill_an_integer_but_its_field_can() {
    let tools: Vec<ToolInfo> = [
        json!({"name": "find_book", "input_schema": {"type": "object",
            "properties": {"title": {"type": "string"}}, "required": ["title"]},
            "output_schema": {"type": "object", "properties": {
                "title": {"type": "string"},
                "member": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
              "required": ["title", "member"]}}),
        json!({"name": "reserve_copy", "input_schema": {"type": "object",
            "properties": {"member_id": {"type": "integer"}}, "required": ["member_id"]}}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let scope = PlanScope::default();
    let plan = |member: &str| {
        vec![
            json!({"_id": "s1", "_tool": "find_book", "title": "Dune"}),
            json!({"_id": "s2", "_tool": "reserve_copy", "member_id": member}),
        ]
    };
    assert!(!staged_allows(&tools, &scope, &plan("†steps.s1")));
    assert!(!staged_allows(&tools, &scope, &plan("†steps.s1.title")));
    assert!(!staged_allows(
        &tools,
        &scope,
        &plan("†steps.s1.member.name")
    ));
    assert!(staged_allows(&tools, &scope, &plan("†steps.s1.member.id")));
    // Before the first step is written, its tool is not known, and nothing is promised.
    let unstaged = exact_planner_schema(&tools, &[], &scope, &[]);
    assert!(
        jsonschema::validator_for(&unstaged)
            .unwrap()
            .is_valid(&json!({"plan": plan("†steps.s1")}))
    );
}
