//! A plan as text (a file, `--plan`, a model's reply): parsing and validation end in a plan or in
//! problems, and a plan that is accepted reads back as itself once written.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use weft_core::graph::{ValidateOptions, validate};
use weft_core::{Plan, ToolInfo};

fn tools() -> BTreeMap<String, ToolInfo> {
    let infos = json!([
        {"name": "echo", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        {"name": "fetch", "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}
    ]);
    serde_json::from_value::<Vec<ToolInfo>>(infos)
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(plan) = Plan::parse_str(text) else {
        return;
    };
    let input = json!({"city": "Paris", "n": 3});
    let opts = ValidateOptions {
        input: Some(&input),
        initial_state: None,
        known_steps: &[],
        require_tools: false,
        ..ValidateOptions::default()
    };
    let problems = validate(&plan, &tools(), &opts);
    let written = plan.to_value();
    let back = Plan::from_value(&written)
        .unwrap_or_else(|p| panic!("a parsed plan does not read back: {p:?}\n{written}"));
    assert_eq!(back.to_value(), written, "a plan changed when read back");
    if problems.is_empty() {
        for step in &plan.steps {
            let _ = step.reads();
            let _ = step.writes();
        }
    }
});
