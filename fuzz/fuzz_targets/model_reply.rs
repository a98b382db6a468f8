//! A model's reply, for every purpose it can be asked for: turned into events (a plan, a
//! decision, tool calls, or a rejection with its reason) that the state then applies, never a
//! panic. The first byte picks the purpose and whether the rest is text or tool calls.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use weft_core::agent::Mode;
use weft_core::agent_loop::{AgentConfig, model_replied};
use weft_core::model::{ModelReply, Purpose, ToolCall};
use weft_core::{Event, Limits, Plan, State, ToolInfo};

const PURPOSES: [Purpose; 7] = [
    Purpose::Plan,
    Purpose::Execute,
    Purpose::Review,
    Purpose::Respond,
    Purpose::ResponseReview,
    Purpose::React,
    Purpose::Workflow,
];

fn config(mode: Mode) -> AgentConfig {
    let tools: Vec<ToolInfo> = serde_json::from_value(json!([
        {"name": "echo", "parallel": true, "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
        {"name": "ask_user", "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}}}
    ]))
    .unwrap_or_default();
    AgentConfig {
        mode,
        limits: Limits::default(),
        instructions: String::new(),
        tools,
        skills: Vec::new(),
        approve_plans: false,
        review_responses: true,
        workflow: None,
        // The memory search a turn starts with is the runtime's; this target feeds model replies.
        recall_memories: false,
        budget: None,
        model_costs: weft_core::budget::ModelCosts::default(),
        repeats: weft_core::repeats::Rules::default(),
        trust: None,
    }
}

fn state(mode: Mode, with_plan: bool) -> State {
    let mut events = vec![
        Event::SessionStarted {
            session_id: "fuzz".into(),
            agent: "fuzz".into(),
            input: json!({"n": 1}),
            mode: Some(mode),
            parent_id: None,
        },
        Event::TurnStarted {
            task: "do it".into(),
            input: json!({}),
        },
    ];
    if with_plan
        && let Ok(plan) = Plan::from_value(&json!([
            {"_id": "s1", "_tool": "echo", "text": "hi"},
            {"_id": "s2", "_description": "think about s1", "_dependsOn": ["s1"]}
        ]))
    {
        events.push(Event::PlanAccepted { plan });
    }
    State::fold(&events)
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest).into_owned();
    let purpose = PURPOSES[usize::from(pick & 7) % PURPOSES.len()];
    let mode = match purpose {
        Purpose::React => Mode::React,
        Purpose::Workflow => Mode::Workflow,
        _ => Mode::Plan,
    };
    let tool_calls = if pick & 8 != 0 {
        serde_json::from_str::<Vec<ToolCall>>(&text).unwrap_or_default()
    } else {
        Vec::new()
    };
    let reply = ModelReply {
        content: text,
        tool_calls,
        ..ModelReply::default()
    };
    let step = (purpose == Purpose::Execute).then_some("s2");
    let mut st = state(mode, pick & 16 != 0);
    let cfg = config(mode);
    for e in model_replied(&st, &cfg, purpose, step, reply) {
        st.apply(&e);
    }
});
