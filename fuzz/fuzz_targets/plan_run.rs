//! A plan that validates is run to its end by the engine, with no I/O: every call is answered at
//! once (`echo` and `seq` give their arguments back, `flaky` fails its first attempt, `broken`
//! always fails). The run must end, every call that started must finish, and nothing may panic,
//! whatever the plan's shape, references, conditions or error paths.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use weft_core::engine::{Invocation, decide, normalize, tool_finished};
use weft_core::graph::{ValidateOptions, validate};
use weft_core::{Event, Limits, Next, Plan, State, ToolError, ToolInfo, ToolOutcome};

fn tools() -> BTreeMap<String, ToolInfo> {
    let open = json!({"type": "object"});
    let infos = json!([
        {"name": "echo", "parallel": true, "idempotent": true, "input_schema": open},
        {"name": "seq", "parallel": false, "input_schema": open},
        {"name": "flaky", "parallel": true, "idempotent": true, "input_schema": open},
        {"name": "broken", "parallel": true, "input_schema": open}
    ]);
    serde_json::from_value::<Vec<ToolInfo>>(infos)
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect()
}

fn answer(call: &Invocation) -> ToolOutcome {
    match call.tool.as_str() {
        "broken" => ToolOutcome::Error {
            error: ToolError::new("exit_status", "it always fails"),
        },
        "flaky" if call.attempt == 1 => ToolOutcome::Error {
            error: ToolError::new("timeout", "the first attempt times out").retryable(true),
        },
        _ => ToolOutcome::Ok {
            output: call.args.clone(),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut plan) = Plan::parse_str(text) else {
        return;
    };
    let catalog = tools();
    let input = json!({"city": "Paris", "n": 3, "items": [1, 2, 3]});
    let opts = ValidateOptions {
        input: Some(&input),
        initial_state: None,
        known_steps: &[],
        require_tools: true,
        ..ValidateOptions::default()
    };
    if !validate(&plan, &catalog, &opts).is_empty() {
        return;
    }
    normalize(&mut plan, &catalog);
    let steps = plan.steps.len();
    // A fan-out has at most as many items as the plan and the input hold values (the tools give
    // their arguments back).
    let values = weft_core::limits::nodes(&plan.to_value(), weft_core::limits::MAX_PLAN_NODES)
        + weft_core::limits::nodes(&input, 64);
    let mut state = State::fold(&[
        Event::SessionStarted {
            session_id: "fuzz".into(),
            agent: "fuzz".into(),
            input,
            mode: None,
            parent_id: None,
        },
        Event::PlanAccepted { plan },
    ]);
    let limits = Limits::default();
    let mut open: Vec<Invocation> = Vec::new();
    let (mut started, mut finished) = (0usize, 0usize);
    // Each step (or fan-out item) is started at most max_step_attempts times, and each decision
    // moves a step, an item or a wave on: a run that needs more decisions than this is stuck.
    let bound = 64 + 16 * (steps + values) * limits.max_step_attempts as usize;
    for _ in 0..bound {
        match decide(&state, &limits) {
            Next::Done => {
                assert!(open.is_empty(), "the run ended with calls open");
                assert_eq!(started, finished, "every started call finished");
                assert!(state.status().is_terminal(), "done but not terminal");
                return;
            }
            Next::CallExecutor { step } => panic!("a plan run has no step executor ({step})"),
            Next::Record(events) => {
                assert!(!events.is_empty(), "decide asked to record nothing");
                events.iter().for_each(|e| state.apply(e));
            }
            Next::Start { events, calls } => {
                events.iter().for_each(|e| state.apply(e));
                started += calls.len();
                open.extend(calls);
            }
            Next::Wait => {
                let call = open
                    .pop()
                    .unwrap_or_else(|| panic!("decide waits, no call is open"));
                finished += 1;
                for e in tool_finished(&state, &limits, &call.call_id, answer(&call), 1) {
                    state.apply(&e);
                }
            }
        }
    }
    panic!("a plan of {steps} steps did not end in {bound} decisions");
});
