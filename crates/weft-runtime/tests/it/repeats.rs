//! Repeated calls of tools that are not idempotent (`weft_core::repeats`), in every mode: a
//! scripted model calls `refund` again with the same arguments, and the call runs once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents::{Harness, TestTool, j, request_text, script, t, tool_calls};
use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::model::Purpose;
use weft_core::{Event, SessionStatus, StepStatus};

const REACT: &str = "name: test\nmode: react\n";

/// `refund` (not idempotent), `lookup` (idempotent) and `ask_user`.
fn tools() -> Vec<TestTool> {
    vec![
        TestTool::new("refund", "billing", json!({"type": "object"}), |a| {
            Ok(json!({"refunded": a["order"], "confirmation": "r-1"}))
        }),
        TestTool::returning("lookup", json!({"orders": 2})).idempotent(),
        TestTool::returning("ask_user", Value::Null),
    ]
}

fn refund(order: &str) -> (&'static str, Value) {
    ("refund", json!({"order": order}))
}

/// The session completed (else: why it did not).
fn completed(st: &weft_core::State) {
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
}

/// The refusals of repeats in session `id`: (the call refused, the call it repeats).
async fn refusals(h: &Harness, id: &str) -> Vec<(Option<String>, String)> {
    h.events(id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            Event::ToolCallBlocked {
                call_id,
                repeats: Some(earlier),
                ..
            } => Some((call_id, earlier)),
            _ => None,
        })
        .collect()
}

/// The id the first `tool_call_started` of `tool` in session `id` gave its call.
async fn first_call(h: &Harness, id: &str, tool: &str) -> String {
    h.events(id)
        .await
        .into_iter()
        .find_map(|e| match e {
            Event::ToolCallStarted {
                call_id, tool: t, ..
            } if t == tool => Some(call_id),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn react_refund_three_times_runs_once_and_the_run_ends() {
    let h = Harness::new(
        REACT,
        tools(),
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[refund("o1")]),
                tool_calls(&[refund("o1")]),
                tool_calls(&[refund("o1")]),
                t("Refunded once."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Refund order o1.", json!({})).await;
    completed(&s.state);
    assert_eq!(s.state.turn().answer(), Some("Refunded once."));
    assert_eq!(h.calls.count("refund"), 1);
    let first = first_call(&h, &s.id, "refund").await;
    let refused = refusals(&h, &s.id).await;
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused.iter().all(|(c, e)| c.is_some() && e == &first),
        "{refused:?}"
    );
    // The model got the earlier result as the repeat's result, with the note.
    let reqs = h.requests.of(Purpose::React);
    assert_eq!(reqs.len(), 4);
    let seen = request_text(&reqs[2]);
    assert!(
        seen.contains("not run again") && seen.contains("repeats call 1") && seen.contains("r-1"),
        "{seen}"
    );
}

#[tokio::test]
async fn an_idempotent_tool_is_not_affected() {
    let h = Harness::new(
        REACT,
        tools(),
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[("lookup", json!({"order": "o1"}))]),
                tool_calls(&[("lookup", json!({"order": "o1"}))]),
                t("Looked twice."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Look twice.", json!({})).await;
    completed(&s.state);
    assert_eq!(h.calls.count("lookup"), 2);
    assert!(refusals(&h, &s.id).await.is_empty());
}

#[tokio::test]
async fn different_arguments_run_and_key_order_does_not_make_a_difference() {
    let h = Harness::new(
        REACT,
        tools(),
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[("refund", json!({"order": "o1", "amount": 5}))]),
                tool_calls(&[("refund", json!({"order": "o2", "amount": 5}))]),
                tool_calls(&[("refund", json!({"amount": 5, "order": "o1"}))]),
                t("Two refunds."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Refund o1 and o2.", json!({})).await;
    completed(&s.state);
    let orders: Vec<Value> = h
        .calls
        .of("refund")
        .iter()
        .map(|c| c.args["order"].clone())
        .collect();
    assert_eq!(orders, vec![json!("o1"), json!("o2")]);
    assert_eq!(refusals(&h, &s.id).await.len(), 1);
}

#[tokio::test]
async fn allow_lets_a_tool_repeat_and_a_new_run_starts_afresh() {
    let h = Harness::new(
        "name: test\nmode: react\nrepeats:\n  default: refuse\n  tools: { refund: allow }\n",
        tools(),
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[refund("o1")]),
                tool_calls(&[refund("o1")]),
                t("Twice, as allowed."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Refund o1 twice.", json!({})).await;
    completed(&s.state);
    assert_eq!(h.calls.count("refund"), 2);
    assert!(refusals(&h, &s.id).await.is_empty());

    // Under `refuse`, a call repeats only calls of its own run: the next task may make it.
    let h = Harness::new(
        REACT,
        tools(),
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[refund("o1")]),
                t("Refunded."),
                tool_calls(&[refund("o1")]),
                t("Refunded again."),
            ],
        )]),
        &json!({}),
    );
    let mut s = h.run("Refund o1.", json!({})).await;
    h.runtime
        .run_task(&h.agent, &mut s, "Refund o1 again, please.", json!({}))
        .await
        .unwrap();
    completed(&s.state);
    assert_eq!(h.calls.count("refund"), 2);
    assert!(refusals(&h, &s.id).await.is_empty());
}

#[tokio::test]
async fn a_workflow_step_refuses_a_repeat() {
    let h = Harness::new(
        "name: test\nmode: workflow\nworkflow:\n  initial: pay\n  steps:\n    pay: { tools: [refund], next: [{ to: end }] }\n",
        tools(),
        script(vec![(
            Purpose::Workflow,
            vec![
                tool_calls(&[refund("o1")]),
                tool_calls(&[refund("o1")]),
                t("Refunded."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Refund o1.", json!({})).await;
    completed(&s.state);
    assert_eq!(h.calls.count("refund"), 1);
    assert_eq!(refusals(&h, &s.id).await.len(), 1);
    let reqs = h.requests.of(Purpose::Workflow);
    let seen = request_text(&reqs[2]);
    assert!(
        seen.contains("not run again") && seen.contains("r-1"),
        "{seen}"
    );
}

fn plan_harness(yaml: &str) -> Harness {
    Harness::new(
        yaml,
        tools(),
        script(vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "first", "_tool": "refund", "order": "o1", "_outputPath": "†state.first"},
                    {"_id": "again", "_tool": "refund", "order": "o1", "_dependsOn": ["first"], "_outputPath": "†state.again"}
                ]}))],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                ],
            ),
            (Purpose::Respond, vec![t("Refunded.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    )
}

#[tokio::test]
async fn a_plan_step_that_repeats_a_call_gets_its_result() {
    let h = plan_harness("name: test\nmode: plan\n");
    let s = h.run("Refund o1.", json!({})).await;
    completed(&s.state);
    assert_eq!(h.calls.count("refund"), 1);
    let run = s.state.plan().unwrap();
    assert_eq!(run.step("again").unwrap().1.status, StepStatus::Completed);
    assert_eq!(s.state.data()["again"], s.state.data()["first"]);
    assert_eq!(s.state.data()["again"]["confirmation"], json!("r-1"));
    let first = first_call(&h, &s.id, "refund").await;
    assert_eq!(refusals(&h, &s.id).await, vec![(None, first)]);
}

#[tokio::test]
async fn ask_waits_durably_and_an_approval_runs_the_repeat() {
    const ASK: &str = "name: test\nmode: react\nrepeats: ask\n";
    let replies = || {
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[refund("o1")]),
                tool_calls(&[refund("o1")]),
                t("Refunded twice."),
            ],
        )])
    };
    let first = Harness::new(ASK, tools(), replies(), &json!({}));
    let s = first.run("Refund o1 twice.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    let req = s.state.turn().waiting().cloned().unwrap();
    assert_eq!(req.kind, "tool_approval");
    assert_eq!(req.tool.as_deref(), Some("refund"));
    assert!(req.question.contains("repeats call 1"), "{}", req.question);
    assert_eq!(first.calls.count("refund"), 1);
    // A new process on the same store finds the wait and runs the call once approved.
    let second = Harness::with_store(first.store.clone(), ASK, tools(), replies(), &json!({}));
    let mut s = second.runtime.load_session(&s.id).await.unwrap();
    assert_eq!(s.state.turn().waiting().unwrap().kind, "tool_approval");
    second.reply(&mut s, "approve").await;
    completed(&s.state);
    assert_eq!(second.calls.count("refund"), 1);
    assert!(refusals(&second, &s.id).await.is_empty());
}

#[tokio::test]
async fn ask_denied_is_a_refusal_with_the_earlier_result() {
    let h = Harness::new(
        "name: test\nmode: react\nrepeats: { tools: { refund: ask } }\n",
        tools(),
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[refund("o1")]),
                tool_calls(&[refund("o1")]),
                t("Refunded once."),
            ],
        )]),
        &json!({}),
    );
    let mut s = h.run("Refund o1.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    h.reply(&mut s, "deny").await;
    completed(&s.state);
    assert_eq!(h.calls.count("refund"), 1);
    assert_eq!(refusals(&h, &s.id).await.len(), 1);
}

#[tokio::test]
async fn a_run_continued_from_its_log_still_refuses() {
    // A scripted model answers by the position of the call in the session, so both processes
    // are given the whole script.
    let replies = || {
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[refund("o1")]),
                tool_calls(&[("ask_user", json!({"question": "Anything else?"}))]),
                tool_calls(&[refund("o1")]),
                t("Done."),
            ],
        )])
    };
    let first = Harness::new(REACT, tools(), replies(), &json!({}));
    let id = first.run("Refund o1.", json!({})).await.id;
    assert_eq!(first.calls.count("refund"), 1);
    // A new process: the run's earlier call is known from the log alone.
    let second = Harness::with_store(first.store.clone(), REACT, tools(), replies(), &json!({}));
    let mut s = second.runtime.load_session(&id).await.unwrap();
    second.reply(&mut s, "No, refund it again.").await;
    completed(&s.state);
    assert_eq!(second.calls.count("refund"), 0);
    assert_eq!(refusals(&second, &id).await.len(), 1);
}

#[test]
fn bad_repeats_settings_are_named() {
    let e = AgentSpec::parse("a.yaml", "name: a\nrepeats: sometimes\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("a.yaml") && e.contains("repeats") && e.contains("sometimes"),
        "{e}"
    );
    let e = AgentSpec::parse("a.yaml", "name: a\nrepeats: { tools: { refund: twice } }\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("repeats.tools.refund") && e.contains("twice"),
        "{e}"
    );
}

#[test]
fn repeats_of_a_tool_the_agent_lacks_is_an_error() {
    let spec = AgentSpec::parse("a.yaml", "name: a\nrepeats: { tools: { nope: ask } }\n").unwrap();
    let mut registry = weft_tools::Registry::new();
    for t in tools() {
        registry.register(t).unwrap();
    }
    let model: weft_model::SharedModel = std::sync::Arc::new(weft_model::ScriptedModel::keyed(
        "s",
        std::collections::HashMap::new(),
    ));
    let Err(e) = weft_runtime::Agent::new(
        &spec,
        std::sync::Arc::new(registry),
        model,
        &json!({}),
        &json!({}),
    ) else {
        panic!("an agent whose `repeats.tools` names no tool of its own was built");
    };
    let e = e.to_string();
    assert!(
        e.contains("repeats.tools.nope") && e.contains("refund"),
        "{e}"
    );
}
