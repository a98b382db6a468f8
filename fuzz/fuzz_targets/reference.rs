//! References and `_when` conditions as a plan writes them, resolved against a state: an answer
//! or an error, never a panic or a runaway.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use weft_core::Plan;
use weft_core::plan::Reference;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = Reference::parse(text) {
        let state = json!({"a": {"b": [1, {"c": "x"}]}, "steps": {"s1": {"output": {"v": 2}}}});
        let _ = weft_core::path::get(&state, &r.path);
    }
    let _ = Reference::from_arg(&Value::String(text.to_owned()));
    // The same text as a condition of a step, evaluated against a context.
    let plan = json!([{"_id": "s1", "_tool": "echo", "_when": text, "text": text}]);
    if let Ok(p) = Plan::from_value(&plan) {
        let ctx = json!({"state": {"a": 1, "b": "two"}, "input": {"n": 3}, "steps": {}});
        for step in &p.steps {
            let _ = step.reads();
            if let Some(c) = &step.when {
                let _ = c.eval(&ctx);
            }
        }
    }
});
