//! Budgets in the runtime: the wall-time limit, the one the shell checks (it reads the clock),
//! is checked before each call with the runtime's clock, from the task's first event; a
//! session's recorded budget (`budget_set`) replaces the agent file's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::json;
use weft_core::Event;
use weft_core::agent::AgentSpec;
use weft_model::{ScriptedModel, ScriptedReply};
use weft_runtime::{Agent, ManualClock, SessionInfo};
use weft_store::{RamStore, SessionLog};

use crate::support as common;

/// A ReAct agent (with `budget`) whose model calls `wait` forever; each call of `wait` moves
/// `clock` on by 20 s.
fn agent(budget: &str, clock: &Arc<ManualClock>) -> Agent {
    let log = Arc::new(common::Log::default());
    let ticking = Arc::clone(clock);
    let wait = common::Recorder::new("wait", &log).behaviour(move |_, _| {
        ticking.advance(20_000);
        Ok(json!({"waited": "20 s"}))
    });
    let tools = Arc::new(common::registry(vec![wait]));
    let spec = AgentSpec::parse(
        "budget.yaml",
        &format!(
            "name: waiter\nmode: react\nlimits: {{ max_iterations: 100 }}\nbudget: {budget}\n"
        ),
    )
    .unwrap();
    let mut call = ScriptedReply::tool_call("wait", json!({}));
    call.repeat = Some(100);
    let model = Arc::new(ScriptedModel::new("waiter", vec![call]));
    Agent::new(&spec, tools, model, &json!({}), &json!({})).unwrap()
}

#[tokio::test]
async fn a_wall_time_limit_stops_the_run_before_the_first_call_past_it() {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let a = agent("{ run: { wall_time_secs: 60 } }", &clock);
    let store = Arc::new(RamStore::new());
    let rt = crate::agents::runtime_of(&store, &a)
        .clock(clock.clone())
        .build();
    let session = rt
        .run_agent(&a, SessionInfo::default(), "Wait a while.", json!({}))
        .await
        .unwrap();
    let (_, events) = store.load(&session.id).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    let calls = kinds.iter().filter(|k| **k == "tool_call_started").count();
    // 3 calls take the clock 60 s on; the check before the 4th model call stops the run.
    assert_eq!(calls, 3, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "model_replied").count(), 3);
    let Some(Event::BudgetExceeded {
        which,
        limit,
        spent,
        call,
    }) = events
        .iter()
        .map(|e| &e.event)
        .find(|e| e.kind() == "budget_exceeded")
    else {
        panic!("no budget_exceeded: {kinds:?}");
    };
    assert_eq!(which, "run.wall_time_secs");
    assert_eq!((*limit, *spent, *call), (60.0, 60.0, 0.0));
    assert_eq!(kinds.last(), Some(&"run_finished"));
    assert_eq!(session.state.status(), weft_core::SessionStatus::Failed);

    // A new task counts its own time; the session's budget, recorded, replaces the agent
    // file's: 100 s for the session now, 80 of them already gone (60 s and the 20 s below).
    let mut session = session;
    clock.advance(20_000);
    rt.set_budget(
        a.model.as_ref(),
        &mut session,
        weft_core::budget::Budget::default()
            .with_overrides("session.wall_time_secs=100")
            .unwrap(),
    )
    .await
    .unwrap();
    rt.run_task(&a, &mut session, "Wait again.", json!({}))
        .await
        .unwrap();
    let (_, events) = store.load(&session.id).await.unwrap();
    let reached: Vec<&Event> = events
        .iter()
        .map(|e| &e.event)
        .filter(|e| e.kind() == "budget_exceeded")
        .collect();
    let Event::BudgetExceeded { which, spent, .. } = reached[1] else {
        panic!("a second stop: {reached:?}");
    };
    assert_eq!(which, "session.wall_time_secs");
    assert_eq!(
        *spent, 100.0,
        "the session's time counts from its first event"
    );
}
