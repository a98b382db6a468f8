//! Whole agents driven end to end: scripted models, in-process tools that record their calls, a
//! memory store. Each test checks the final state and the stored event log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents as common;

use std::sync::Arc;

use common::{
    Harness, TestTool, j, only, request_text, script, step_ids, step_status, t, tool_calls,
};
use serde_json::{Value, json};
use weft_core::model::{Message, Purpose, Usage};
use weft_core::{Event, SessionStatus, StepStatus, ToolError};
use weft_model::ScriptedReply;
use weft_runtime::Runtime;

const PLAN_AGENT: &str = "name: test\nmode: plan\n";

fn refund_tools() -> Vec<TestTool> {
    vec![
        TestTool::new(
            "checkBillingHistory",
            "billing",
            json!({"type": "object", "properties": {"customerId": {"type": "string"}}, "required": ["customerId"]}),
            |a| Ok(json!({"customerId": a["customerId"], "orders": 5, "lastChargeback": "2025-09-10"})),
        ),
        TestTool::new(
            "issueRefund",
            "billing",
            json!({
                "type": "object",
                "properties": {"customerId": {"type": "string"}, "amount": {"type": "number", "exclusiveMinimum": 0}},
                "required": ["customerId", "amount"]
            }),
            |a| {
                let cents = (a["amount"].as_f64().unwrap_or(0.0) * 100.0).round();
                Ok(json!({"confirmationId": format!("refund_{}_{cents}", a["customerId"].as_str().unwrap_or("?"))}))
            },
        ),
        TestTool::new(
            "escalateToSupervisor",
            "support",
            json!({"type": "object", "properties": {"reason": {"type": "string"}}}),
            |_| Ok(json!({"ticket": "esc_1"})),
        )
        .description("Hand the case to a human supervisor. Customers with a chargeback on file should be escalated."),
    ]
}

fn with_usage(mut r: ScriptedReply, input: u64, output: u64) -> ScriptedReply {
    r.usage = Some(Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    });
    r
}

fn refund_plan() -> Value {
    json!({"plan": [
        {"_id": "billing", "_tool": "checkBillingHistory", "customerId": "†input.customerId", "_outputPath": "†state.billingHistory"},
        {"_id": "refund", "_tool": "issueRefund", "customerId": "†input.customerId", "amount": "†input.amount",
         "_dependsOn": ["billing"], "_outputPath": "†state.refund"}
    ]})
}

// 1. The refund that keeps to its plan despite a tempting escalation tool.
#[tokio::test]
async fn refund_keeps_to_its_plan() {
    let input = json!({"customerId": "cust_123", "amount": 50.0});
    let h = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        script(vec![
            (Purpose::Plan, vec![j(refund_plan())]),
            (
                Purpose::Review,
                vec![
                    j(
                        json!({"decision": "CONTINUE", "reason": "A chargeback is on file; the procedure continues."}),
                    ),
                    j(json!({"decision": "FINAL_RESPONSE", "reason": "The refund was issued."})),
                ],
            ),
            (
                Purpose::Respond,
                vec![t(
                    "Your refund of 50.00 has been processed (refund_cust_123_5000).",
                )],
            ),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT", "feedback": "grounded"}))],
            ),
        ]),
        &input,
    );
    let s = h.run("I'd like a refund for my last order.", input).await;
    let st = &s.state;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(
        st.turn().answer(),
        Some("Your refund of 50.00 has been processed (refund_cust_123_5000).")
    );
    assert_eq!(h.calls.count("escalateToSupervisor"), 0);
    let refunds = h.calls.of("issueRefund");
    assert_eq!(refunds.len(), 1);
    assert_eq!(
        refunds[0].args,
        json!({"customerId": "cust_123", "amount": 50.0})
    );
    assert_eq!(
        st.data()["refund"]["confirmationId"],
        json!("refund_cust_123_5000")
    );
    assert_eq!(step_status(st, "billing"), StepStatus::Completed);
    assert_eq!(step_status(st, "refund"), StepStatus::Completed);
    let kinds = h.kinds(&s.id).await;
    assert_eq!(
        only(
            &kinds,
            &[
                "plan_accepted",
                "wave_started",
                "step_completed",
                "wave_finished",
                "review_decided",
                "answer_drafted",
                "response_reviewed",
                "run_finished"
            ]
        ),
        vec![
            "plan_accepted",
            "wave_started",
            "step_completed",
            "wave_finished",
            "review_decided",
            "wave_started",
            "step_completed",
            "wave_finished",
            "review_decided",
            "answer_drafted",
            "response_reviewed",
            "run_finished"
        ]
    );
    // Every tool call the log records ran (started before it finished).
    let started = kinds.iter().filter(|k| **k == "tool_call_started").count();
    assert_eq!(started, 2);
    assert_eq!(st.calls().started, 2);
}

// 2. The trip replanned for a dog.
#[tokio::test]
async fn trip_replanned_for_a_dog_keeps_the_completed_step() {
    let tools = vec![
        TestTool::returning(
            "bookFlight",
            json!({"flight": "LH123", "arrives": "2026-06-01"}),
        ),
        TestTool::returning("bookHotel", json!({"hotel": "Grand"})),
        TestTool::new(
            "findPetFriendlyHotel",
            "travel",
            json!({"type": "object"}),
            |a| Ok(json!({"hotel": "Pawsome Inn", "for": a["flight"]["flight"]})),
        ),
    ];
    let h = Harness::new(
        PLAN_AGENT,
        tools,
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(json!({"plan": [
                        {"_id": "flight", "_tool": "bookFlight", "to": "Lisbon", "_outputPath": "†state.flight"},
                        {"_id": "hotel", "_tool": "bookHotel", "flight": "†state.flight", "_dependsOn": ["flight"], "_outputPath": "†state.hotel"}
                    ]})),
                    j(json!({"plan": [
                        {"_id": "petHotel", "_tool": "findPetFriendlyHotel", "flight": "†steps.flight",
                         "_dependsOn": ["flight"], "_outputPath": "†state.hotel"}
                    ]})),
                ],
            ),
            (
                Purpose::Review,
                vec![
                    j(
                        json!({"decision": "REPLAN", "reason": "The traveller brings a dog; the hotel does not allow pets."}),
                    ),
                    j(json!({"decision": "FINAL_RESPONSE", "reason": "booked"})),
                ],
            ),
            (
                Purpose::Respond,
                vec![t("Flight LH123 and the Pawsome Inn are booked.")],
            ),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h
        .run("Book my trip to Lisbon; I travel with my dog.", json!({}))
        .await;
    let st = &s.state;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(h.calls.count("bookHotel"), 0);
    assert_eq!(h.calls.count("bookFlight"), 1);
    let pet = h.calls.of("findPetFriendlyHotel");
    assert_eq!(pet.len(), 1);
    assert_eq!(pet[0].args["flight"]["flight"], json!("LH123"));
    assert_eq!(step_ids(st), vec!["flight", "petHotel"]);
    assert_eq!(step_status(st, "flight"), StepStatus::Completed);
    assert_eq!(step_status(st, "petHotel"), StepStatus::Completed);
    assert_eq!(st.data()["hotel"]["hotel"], json!("Pawsome Inn"));
    assert_eq!(st.turn().replans(), 1);
    let events = h.events(&s.id).await;
    let revised: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::PlanRevised { .. }))
        .collect();
    assert_eq!(revised.len(), 1);
    if let Event::PlanRevised { plan, reason } = revised[0] {
        assert!(reason.contains("dog"), "{reason}");
        assert_eq!(plan.steps.len(), 1);
        assert_eq!(plan.steps[0].depends_on, vec!["flight".to_owned()]);
    }
    // The flight step completed once and was never started again.
    let flight_starts = events
        .iter()
        .filter(|e| matches!(e, Event::StepStarted { step, .. } if step == "flight"))
        .count();
    assert_eq!(flight_starts, 1);
    // The replan request told the planner what was done and why.
    let plans = h.requests.of(Purpose::Plan);
    assert_eq!(plans.len(), 2);
    let replan = request_text(&plans[1]);
    assert!(replan.contains("This is a replan"), "{replan}");
    assert!(replan.contains("dog"), "{replan}");
    assert!(replan.contains("LH123"), "{replan}");
}

// 3. The declined card.
#[tokio::test]
async fn declined_card_is_written_to_state_and_reported() {
    let tools = vec![
        TestTool::new(
            "processPayment",
            "payments",
            json!({"type": "object"}),
            |_| Err(ToolError::new("card_declined", "Your card was declined.")),
        ),
        TestTool::returning("confirmOrder", json!({"confirmed": true})),
        TestTool::new("reportFailure", "support", json!({"type": "object"}), |a| {
            Ok(json!({"status": "Failed", "reported": a["error"]["message"]}))
        }),
    ];
    let h = Harness::new(
        PLAN_AGENT,
        tools,
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(json!({"plan": [
                        {"_id": "pay", "_tool": "processPayment", "amount": 120, "_outputPath": "†state.receipt || †state.error"},
                        {"_id": "confirm", "_tool": "confirmOrder", "receipt": "†state.receipt"}
                    ]})),
                    j(json!({"plan": [
                        {"_id": "report", "_tool": "reportFailure", "error": "†state.error", "_outputPath": "†state.report"}
                    ]})),
                ],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "REPLAN", "reason": "The payment was declined."})),
                    j(json!({"decision": "FINAL_RESPONSE", "reason": "reported"})),
                ],
            ),
            (
                Purpose::Respond,
                vec![t("Your card was declined; the failure was reported.")],
            ),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Buy the order.", json!({})).await;
    let st = &s.state;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(
        st.turn().answer(),
        Some("Your card was declined; the failure was reported.")
    );
    assert_eq!(st.data()["error"]["kind"], json!("card_declined"));
    assert_eq!(
        st.data()["error"]["message"],
        json!("Your card was declined.")
    );
    assert!(st.data().get("receipt").is_none());
    assert_eq!(step_status(st, "pay"), StepStatus::Failed);
    assert_eq!(step_status(st, "confirm"), StepStatus::Skipped);
    assert_eq!(step_status(st, "report"), StepStatus::Completed);
    assert_eq!(h.calls.count("confirmOrder"), 0);
    let reports = h.calls.of("reportFailure");
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].args["error"]["kind"], json!("card_declined"));
    assert_eq!(
        reports[0].args["error"]["message"],
        json!("Your card was declined.")
    );
    let events = h.events(&s.id).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::StepFailed { step, handled: true, .. } if step == "pay"))
    );
    // The review saw the skip: it came before the first review.
    let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    let skip = kinds.iter().position(|k| *k == "step_skipped").unwrap();
    let review = kinds.iter().position(|k| *k == "review_decided").unwrap();
    assert!(skip < review, "{kinds:?}");
    assert!(kinds.contains(&"plan_revised"));
}

// 4. The schema-guided translation.
#[tokio::test]
async fn translation_is_wired_through_state_paths() {
    let tools = vec![
        TestTool::new(
            "detectLanguage",
            "language",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            |a| {
                let text = a["text"].as_str().unwrap_or_default();
                Ok(json!({"language": if text.contains("bonjour") { "fr" } else { "en" }}))
            },
        ),
        TestTool::new(
            "isEnglish",
            "language",
            json!({"type": "object", "properties": {"language": {"type": "string"}}, "required": ["language"]}),
            |a| Ok(json!({"english": a["language"] == json!("en")})),
        ),
        TestTool::new(
            "translateText",
            "language",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string"}, "from": {"type": "string"}, "to": {"type": "string"}},
                "required": ["text", "from", "to"]
            }),
            |a| {
                let out = match (a["text"].as_str(), a["from"].as_str(), a["to"].as_str()) {
                    (Some("bonjour le monde"), Some("fr"), Some("en")) => "hello world",
                    _ => "?",
                };
                Ok(json!(out))
            },
        ),
    ];
    let h = Harness::new(
        "name: test\nmode: plan\nreview_responses: false\n",
        tools,
        script(vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "detect", "_tool": "detectLanguage", "text": "†input.text", "_outputPath": "†state.detected"},
                    {"_id": "check", "_tool": "isEnglish", "language": "†state.detected.language", "_outputPath": "†state.check"},
                    {"_id": "translate", "_tool": "translateText", "text": "†input.text", "from": "†state.detected.language",
                     "to": "en", "_when": "not state.check.english", "_outputPath": "†state.translatedText"}
                ]}))],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "CONTINUE"})),
                ],
            ),
            (Purpose::Respond, vec![t("It means: hello world")]),
        ]),
        &json!({"text": "bonjour le monde"}),
    );
    let s = h
        .run(
            "Translate this to English.",
            json!({"text": "bonjour le monde"}),
        )
        .await;
    let st = &s.state;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(st.data()["translatedText"], json!("hello world"));
    assert_eq!(st.data()["detected"]["language"], json!("fr"));
    assert_eq!(st.data()["check"]["english"], json!(false));
    let translate = h.calls.of("translateText");
    assert_eq!(translate.len(), 1);
    assert_eq!(
        translate[0].args,
        json!({"text": "bonjour le monde", "from": "fr", "to": "en"})
    );
    // Each step ran after the one whose output it reads.
    let all = h.calls.all();
    let order: Vec<&str> = all.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(order, vec!["detectLanguage", "isEnglish", "translateText"]);
    assert!(all[0].end <= all[1].start && all[1].end <= all[2].start);
    // Without a response review the draft is the answer, and no reviewer was asked.
    assert_eq!(st.turn().answer(), Some("It means: hello world"));
    assert!(h.requests.of(Purpose::ResponseReview).is_empty());
}

fn missing_input_script(second: Value) -> std::collections::HashMap<Purpose, Vec<ScriptedReply>> {
    script(vec![
        (
            Purpose::Plan,
            vec![j(json!({"plan": [
                {"_id": "refund", "_description": "Refund the customer's last order", "_category": "billing",
                 "_outputPath": "†state.refund"}
            ]}))],
        ),
        (
            Purpose::Execute,
            vec![
                j(
                    json!({"action": "REQUEST_TOOL_INPUT", "tool": "issueRefund",
                         "arguments": {"customerId": "cust_123"}, "missing": ["amount"],
                         "question": "How much should be refunded?"}),
                ),
                j(second),
            ],
        ),
        (
            Purpose::Review,
            vec![j(
                json!({"decision": "FINAL_RESPONSE", "reason": "refunded"}),
            )],
        ),
        (Purpose::Respond, vec![t("Refunded 50.")]),
        (
            Purpose::ResponseReview,
            vec![j(json!({"verdict": "ACCEPT"}))],
        ),
    ])
}

fn use_refund_50() -> Value {
    json!({"action": "USE_TOOL", "tool": "issueRefund", "arguments": {"customerId": "cust_123", "amount": 50}})
}

fn assert_waiting_for_amount(st: &weft_core::State) {
    assert_eq!(st.status(), SessionStatus::WaitingForUser);
    assert_eq!(step_status(st, "refund"), StepStatus::WaitingForUser);
    let req = st.turn().waiting().expect("a request");
    assert_eq!(req.kind, "missing_input");
    assert_eq!(req.step.as_deref(), Some("refund"));
    assert_eq!(req.tool.as_deref(), Some("issueRefund"));
    assert_eq!(req.missing, vec!["amount".to_owned()]);
    assert_eq!(req.question, "How much should be refunded?");
    assert_eq!(
        req.partial_call,
        json!({"tool": "issueRefund", "arguments": {"customerId": "cust_123"}})
    );
}

// 5. A missing tool argument asks the user and resumes.
#[tokio::test]
async fn missing_argument_asks_the_user_and_resumes() {
    let input = json!({"customerId": "cust_123"});
    let h = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        missing_input_script(use_refund_50()),
        &input,
    );
    let mut s = h.run("Refund my last order.", input).await;
    assert_waiting_for_amount(&s.state);
    assert_eq!(h.calls.all().len(), 0);
    // The executor saw only the tools of the step's category, in full.
    let exec = h.requests.of(Purpose::Execute);
    let first = request_text(&exec[0]);
    assert!(
        first.contains("issueRefund") && first.contains("exclusiveMinimum"),
        "{first}"
    );
    assert!(!first.contains("escalateToSupervisor"), "{first}");

    h.reply(&mut s, "50").await;
    let st = &s.state;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(st.turn().answer(), Some("Refunded 50."));
    let exec = h.requests.of(Purpose::Execute);
    assert_eq!(exec.len(), 2);
    assert!(request_text(&exec[1]).contains("50"));
    assert!(request_text(&exec[1]).contains("user_input"));
    let refunds = h.calls.of("issueRefund");
    assert_eq!(refunds.len(), 1);
    assert_eq!(
        refunds[0].args,
        json!({"customerId": "cust_123", "amount": 50})
    );
    assert_eq!(step_status(st, "refund"), StepStatus::Completed);
    let kinds = h.kinds(&s.id).await;
    let wait = kinds.iter().position(|k| *k == "waiting_for_user").unwrap();
    let replied = kinds.iter().position(|k| *k == "user_replied").unwrap();
    let started = kinds
        .iter()
        .position(|k| *k == "tool_call_started")
        .unwrap();
    assert!(wait < replied && replied < started, "{kinds:?}");
}

#[tokio::test]
async fn missing_argument_resumes_in_a_new_runtime() {
    let input = json!({"customerId": "cust_123"});
    let first = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        missing_input_script(use_refund_50()),
        &input,
    );
    let id = first.run("Refund my last order.", input.clone()).await.id;
    // A new process: a fresh runtime, model and tools on the same store.
    let second = Harness::with_store(
        first.store.clone(),
        PLAN_AGENT,
        refund_tools(),
        missing_input_script(use_refund_50()),
        &input,
    );
    let runtime = Runtime::builder(
        second.store.clone(),
        second.agent.tools.clone(),
        second.agent.config.limits.clone(),
        None,
        None,
    )
    .build();
    let mut s = runtime.load_session(&id).await.unwrap();
    assert_waiting_for_amount(&s.state);
    runtime.reply(&second.agent, &mut s, "50").await.unwrap();
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(first.calls.all().len(), 0);
    assert_eq!(second.calls.count("issueRefund"), 1);
    // The new process's model continued the script: only the second executor call was its.
    let exec = second.requests.of(Purpose::Execute);
    assert_eq!(exec.len(), 1);
    assert_eq!(exec[0].purpose_index, 1);
    assert!(request_text(&exec[0]).contains("50"));
    // The stored log and the live state agree.
    let reloaded = runtime.load_session(&id).await.unwrap();
    assert_eq!(reloaded.state.status(), SessionStatus::Completed);
    assert_eq!(reloaded.state.turn().answer(), s.state.turn().answer());
}

#[tokio::test]
async fn request_tool_input_with_every_argument_is_a_call() {
    let input = json!({"customerId": "cust_123"});
    let h = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        script(vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "refund", "_description": "Refund 20", "_category": "billing"}
                ]}))],
            ),
            (
                Purpose::Execute,
                vec![j(
                    json!({"action": "REQUEST_TOOL_INPUT", "tool": "issueRefund",
                              "arguments": {"customerId": "cust_123", "amount": 20}, "missing": [],
                              "question": "Anything else?"}),
                )],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Refunded 20.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &input,
    );
    let s = h.run("Refund 20.", input).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("issueRefund"), 1);
    assert!(!h.kinds(&s.id).await.contains(&"waiting_for_user"));
}

// 6. A repeated tool call is blocked.
#[tokio::test]
async fn repeated_tool_call_in_a_step_is_blocked() {
    let tools = vec![TestTool::new(
        "lookup",
        "general",
        json!({"type": "object"}),
        |_| Err(ToolError::new("unavailable", "the directory is down")),
    )];
    let h = Harness::new(
        "name: test\nmode: plan\nlimits: { max_step_attempts: 4 }\n",
        tools,
        script(vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "find", "_description": "Find the phone number"}]}),
                )],
            ),
            (
                Purpose::Execute,
                vec![
                    j(
                        json!({"action": "USE_TOOL", "tool": "lookup", "arguments": {"name": "Ada", "city": "Paris"}}),
                    ),
                    j(
                        json!({"action": "USE_TOOL", "tool": "lookup", "arguments": {"city": "Paris", "name": "Ada"}}),
                    ),
                    j(
                        json!({"action": "DIRECT_RESPONSE", "response": "The directory is unavailable."}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("I could not find the number.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Find Ada's number.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("lookup"), 1);
    let events = h.events(&s.id).await;
    let blocked: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::ToolCallBlocked { .. }))
        .collect();
    assert_eq!(blocked.len(), 1);
    if let Event::ToolCallBlocked {
        step, tool, reason, ..
    } = blocked[0]
    {
        assert_eq!(step.as_deref(), Some("find"));
        assert_eq!(tool, "lookup");
        assert!(reason.contains("already made"), "{reason}");
    }
    // The executor learned of the refusal.
    let exec = h.requests.of(Purpose::Execute);
    assert_eq!(exec.len(), 3);
    assert!(request_text(&exec[2]).contains("already made"));
    assert_eq!(step_status(&s.state, "find"), StepStatus::Completed);
}

// 7. The replan limit.
#[tokio::test]
async fn replan_limit_fails_pending_steps_and_answers() {
    let tools = vec![
        TestTool::returning("a", json!("A")),
        TestTool::returning("b", json!("B")),
        TestTool::returning("c", json!("C")),
        TestTool::returning("d", json!("D")),
    ];
    let h = Harness::new(
        "name: test\nmode: plan\nlimits: { max_replans: 1 }\n",
        tools,
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(
                        json!({"plan": [{"_id": "s1", "_tool": "a"}, {"_id": "s2", "_tool": "b", "_dependsOn": ["s1"]}]}),
                    ),
                    j(
                        json!({"plan": [{"_id": "s3", "_tool": "c"}, {"_id": "s4", "_tool": "d", "_dependsOn": ["s3"]}]}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "REPLAN", "reason": "first"})),
                    j(json!({"decision": "REPLAN", "reason": "second"})),
                ],
            ),
            (Purpose::Respond, vec![t("Partly done.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Do it.", json!({})).await;
    let st = &s.state;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(st.turn().answer(), Some("Partly done."));
    assert_eq!(h.requests.of(Purpose::Plan).len(), 2);
    assert_eq!(h.calls.count("b"), 0);
    assert_eq!(h.calls.count("d"), 0);
    assert_eq!(h.calls.count("c"), 1);
    assert_eq!(step_status(st, "s4"), StepStatus::Failed);
    let err = st
        .plan()
        .as_ref()
        .unwrap()
        .step("s4")
        .unwrap()
        .1
        .error
        .clone()
        .unwrap();
    assert_eq!(err.kind, "replan_limit");
    assert!(err.message.contains("replan limit (1)"), "{}", err.message);
    let kinds = h.kinds(&s.id).await;
    assert_eq!(kinds.iter().filter(|k| **k == "plan_revised").count(), 1);
    let failed = kinds.iter().position(|k| *k == "step_failed").unwrap();
    let drafted = kinds.iter().position(|k| *k == "answer_drafted").unwrap();
    assert!(failed < drafted);
}

fn one_step_plan() -> Value {
    json!({"plan": [{"_id": "s1", "_tool": "fact", "_outputPath": "†state.fact"}]})
}

fn refine_harness(yaml: &str) -> Harness {
    Harness::new(
        yaml,
        vec![TestTool::returning("fact", json!({"capital": "Lisbon"}))],
        script(vec![
            (Purpose::Plan, vec![j(one_step_plan())]),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (
                Purpose::Respond,
                vec![t("Lisbon."), t("The capital of Portugal is Lisbon.")],
            ),
            (
                Purpose::ResponseReview,
                vec![
                    j(json!({"verdict": "REFINE", "feedback": "Answer in a full sentence."})),
                    j(json!({"verdict": "ACCEPT"})),
                ],
            ),
        ]),
        &json!({}),
    )
}

// 8. A reviewer asking for refinement.
#[tokio::test]
async fn response_reviewer_refinement_gives_the_second_draft() {
    let h = refine_harness(PLAN_AGENT);
    let s = h.run("What is the capital of Portugal?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(
        s.state.turn().answer(),
        Some("The capital of Portugal is Lisbon.")
    );
    let respond = h.requests.of(Purpose::Respond);
    assert_eq!(respond.len(), 2);
    let second = request_text(&respond[1]);
    assert!(second.contains("Answer in a full sentence."), "{second}");
    assert!(second.contains("Lisbon."), "{second}");
    let kinds = h.kinds(&s.id).await;
    assert_eq!(
        only(
            &kinds,
            &["answer_drafted", "response_reviewed", "run_finished"]
        ),
        vec![
            "answer_drafted",
            "response_reviewed",
            "answer_drafted",
            "response_reviewed",
            "run_finished"
        ]
    );
}

#[tokio::test]
async fn refinement_out_of_rounds_keeps_the_first_draft() {
    let h = refine_harness("name: test\nmode: plan\nlimits: { max_response_rounds: 1 }\n");
    let s = h.run("What is the capital of Portugal?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(s.state.turn().answer(), Some("Lisbon."));
    assert_eq!(h.requests.of(Purpose::Respond).len(), 1);
    assert_eq!(h.requests.of(Purpose::ResponseReview).len(), 1);
}

const REACT_AGENT: &str = "name: test\nmode: react\n";

// 9. ReAct with parallel calls.
#[tokio::test]
async fn react_runs_parallel_calls_at_once() {
    let tools = vec![
        TestTool::new("getWeather", "weather", json!({"type": "object"}), |a| {
            Ok(json!({"city": a["city"], "sunny": a["city"] == json!("Lisbon")}))
        })
        .sleeping(200)
        .parallel(),
    ];
    let h = Harness::new(
        REACT_AGENT,
        tools,
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[
                    ("getWeather", json!({"city": "Lisbon"})),
                    ("getWeather", json!({"city": "Oslo"})),
                ]),
                t("Lisbon is sunnier."),
            ],
        )]),
        &json!({}),
    );
    let s = h
        .run("Where is it sunnier, Lisbon or Oslo?", json!({}))
        .await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(s.state.turn().answer(), Some("Lisbon is sunnier."));
    let calls = h.calls.of("getWeather");
    assert_eq!(calls.len(), 2);
    let (x, y) = (&calls[0], &calls[1]);
    assert!(
        x.start < y.end && y.start < x.end,
        "the calls did not overlap: {calls:?}"
    );
    let reqs = h.requests.of(Purpose::React);
    assert_eq!(reqs.len(), 2);
    let results: Vec<(&str, &str)> = reqs[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                call_id, content, ..
            } => Some((call_id.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{:?}", reqs[1].messages);
    let ids: Vec<&str> = results.iter().map(|r| r.0).collect();
    assert!(
        ids.contains(&"call_1_1") && ids.contains(&"call_1_2"),
        "{ids:?}"
    );
    let text: String = results.iter().map(|r| r.1).collect();
    assert!(text.contains("Lisbon") && text.contains("Oslo"), "{text}");
    // The tools the model was offered.
    assert_eq!(reqs[0].tools.len(), 1);
    assert_eq!(reqs[0].tools[0].name, "getWeather");
}

#[tokio::test]
async fn react_stops_at_max_iterations() {
    let mut always = tool_calls(&[("ping", json!({}))]);
    always.repeat = Some(20);
    let h = Harness::new(
        "name: test\nmode: react\nlimits: { max_iterations: 3 }\n",
        // `ping` is idempotent: calls repeated with the same arguments run (see `repeats`).
        vec![TestTool::returning("ping", json!("pong")).idempotent()],
        script(vec![(Purpose::React, vec![always])]),
        &json!({}),
    );
    let s = h.run("Keep pinging.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(err.contains("max_iterations (3)"), "{err}");
    assert!(err.starts_with("CANNOT_COMPLETE"), "{err}");
    assert_eq!(h.requests.of(Purpose::React).len(), 3);
    assert_eq!(h.calls.count("ping"), 3);
    assert!(s.state.turn().answer().is_none());
}

// 10. Garbage from the model.
#[tokio::test]
async fn planner_garbage_three_times_ends_as_cannot_complete() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![(
            Purpose::Plan,
            vec![
                t("Sure! I will help you."),
                t("Here is my plan: do it"),
                t("Hmm."),
                t("unused"),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Do it.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(err.starts_with("CANNOT_COMPLETE"), "{err}");
    assert!(err.contains("not JSON"), "{err}");
    let plans = h.requests.of(Purpose::Plan);
    assert_eq!(plans.len(), 3);
    assert!(!request_text(&plans[0]).contains("could not be used"));
    assert!(request_text(&plans[1]).contains("Sure! I will help you."));
    assert!(request_text(&plans[2]).contains("Here is my plan"));
    let kinds = h.kinds(&s.id).await;
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "model_reply_rejected")
            .count(),
        3
    );
    assert_eq!(kinds.last(), Some(&"run_finished"));
}

async fn plan_rejected_then_valid(bad: Value, expect: &[&str]) {
    let h = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(bad),
                    j(
                        json!({"plan": [{"_id": "ok", "_tool": "checkBillingHistory", "customerId": "c1"}]}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("done")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Check the billing of c1.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("checkBillingHistory"), 1);
    let events = h.events(&s.id).await;
    let problems: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::PlanRejected { problems } => Some(
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let plans = h.requests.of(Purpose::Plan);
    assert_eq!(plans.len(), 2);
    let retry = request_text(&plans[1]);
    for e in expect {
        assert!(problems[0].contains(e), "`{e}` not in {}", problems[0]);
        assert!(
            retry.contains(e),
            "the feedback `{e}` did not reach the planner"
        );
    }
    let kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    let rejected = kinds.iter().position(|k| *k == "plan_rejected").unwrap();
    let accepted = kinds.iter().position(|k| *k == "plan_accepted").unwrap();
    assert!(rejected < accepted);
}

#[tokio::test]
async fn plan_with_an_unknown_tool_is_rejected_then_a_valid_one_runs() {
    plan_rejected_then_valid(
        json!({"plan": [{"_id": "x", "_tool": "teleportCustomer", "to": "moon"}]}),
        &["unknown tool `teleportCustomer`"],
    )
    .await;
}

#[tokio::test]
async fn cyclic_plan_is_rejected_naming_the_cycle() {
    plan_rejected_then_valid(
        json!({"plan": [
            {"_id": "a", "_tool": "checkBillingHistory", "customerId": "†state.b", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "checkBillingHistory", "customerId": "†state.a", "_outputPath": "†state.b"}
        ]}),
        &["cycle", "a -> b"],
    )
    .await;
}

#[tokio::test]
async fn plan_with_wrong_literal_argument_types_is_rejected() {
    plan_rejected_then_valid(
        json!({"plan": [{"_id": "r", "_tool": "issueRefund", "customerId": "c1", "amount": "fifty"}]}),
        &["step `r`, field `amount`"],
    )
    .await;
}

#[tokio::test]
async fn empty_react_reply_is_fed_back() {
    let h = Harness::new(
        REACT_AGENT,
        vec![],
        script(vec![(Purpose::React, vec![t("   "), t("Hello!")])]),
        &json!({}),
    );
    let s = h.run("Say hello.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(s.state.turn().answer(), Some("Hello!"));
    let reqs = h.requests.of(Purpose::React);
    assert_eq!(reqs.len(), 2);
    assert!(request_text(&reqs[1]).contains("the reply was empty"));
    assert!(h.kinds(&s.id).await.contains(&"model_reply_rejected"));
}

#[tokio::test]
async fn react_call_to_an_unknown_tool_is_blocked() {
    let h = Harness::new(
        REACT_AGENT,
        vec![TestTool::returning("getWeather", json!("sunny"))],
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[("launchRocket", json!({"target": "moon"}))]),
                t("I cannot do that."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Launch a rocket.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(s.state.turn().answer(), Some("I cannot do that."));
    assert!(h.calls.all().is_empty());
    let events = h.events(&s.id).await;
    assert!(events.iter().any(|e| matches!(
        e,
        Event::ToolCallBlocked { tool, call_id: Some(_), .. } if tool == "launchRocket"
    )));
    let reqs = h.requests.of(Purpose::React);
    let err = reqs[1]
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .expect("a tool result for the blocked call");
    assert!(err.1);
    assert!(err.0.contains("`launchRocket` is not a tool"), "{}", err.0);
    assert!(err.0.contains("getWeather"), "{}", err.0);
}

#[tokio::test]
async fn executor_reply_with_an_unknown_action_is_fed_back() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "think", "_description": "Think about it"}]}),
                )],
            ),
            (
                Purpose::Execute,
                vec![
                    j(json!({"action": "DANCE"})),
                    j(json!({"action": "DIRECT_RESPONSE", "response": "thought"})),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Thought about it.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Think.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(step_status(&s.state, "think"), StepStatus::Completed);
    let exec = h.requests.of(Purpose::Execute);
    assert_eq!(exec.len(), 2);
    assert!(request_text(&exec[1]).contains("unknown action `DANCE`"));
    let events = h.events(&s.id).await;
    assert!(events.iter().any(|e| matches!(
        e,
        Event::ModelReplyRejected { purpose: Purpose::Execute, step: Some(st), .. } if st == "think"
    )));
}

#[tokio::test]
async fn review_reply_with_an_unknown_decision_is_fed_back() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!({"capital": "Lisbon"}))],
        script(vec![
            (Purpose::Plan, vec![j(one_step_plan())]),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "MAYBE", "reason": "unsure"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                ],
            ),
            (Purpose::Respond, vec![t("Lisbon.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Capital?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let reviews = h.requests.of(Purpose::Review);
    assert_eq!(reviews.len(), 2);
    let second = request_text(&reviews[1]);
    assert!(second.contains("MAYBE"), "{second}");
    assert!(
        second.contains("CONTINUE, REPLAN, FINAL_RESPONSE"),
        "{second}"
    );
}

// 11. Plan approval.
fn approval_harness() -> Harness {
    Harness::new(
        "name: test\nmode: plan\napprove_plans: true\n",
        refund_tools(),
        script(vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "refund", "_tool": "issueRefund", "customerId": "c1", "amount": 500}
                ]}))],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("done")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    )
}

#[tokio::test]
async fn approved_plan_runs() {
    let h = approval_harness();
    let mut s = h.run("Refund c1.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    let req = s.state.turn().waiting().cloned().unwrap();
    assert_eq!(req.kind, "plan_approval");
    let plan = req.plan.expect("the plan awaiting approval");
    assert_eq!(plan.steps[0].tool.as_deref(), Some("issueRefund"));
    assert!(h.calls.all().is_empty());
    h.reply(&mut s, "approve").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let refunds = h.calls.of("issueRefund");
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].args["amount"], json!(500));
}

#[tokio::test]
async fn rejected_plan_ends_the_run() {
    let h = approval_harness();
    let mut s = h.run("Refund c1.", json!({})).await;
    h.reply(&mut s, "reject").await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    assert!(
        s.state
            .turn()
            .error()
            .unwrap_or_default()
            .contains("rejected"),
        "{:?}",
        s.state.turn().error()
    );
    assert!(h.calls.all().is_empty());
}

#[tokio::test]
async fn edited_plan_is_validated_before_it_runs() {
    let h = approval_harness();
    let mut s = h.run("Refund c1.", json!({})).await;
    let bad = json!([{"_id": "x", "_tool": "wireMoney", "to": "me"}]).to_string();
    h.reply(&mut s, &bad).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    let q = s.state.turn().waiting().cloned().unwrap().question;
    assert!(q.contains("invalid") && q.contains("wireMoney"), "{q}");
    assert!(h.calls.all().is_empty());
    let good = json!([{"_id": "small", "_tool": "issueRefund", "customerId": "c1", "amount": 5}])
        .to_string();
    h.reply(&mut s, &good).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let refunds = h.calls.of("issueRefund");
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].args["amount"], json!(5));
    assert_eq!(step_ids(&s.state), vec!["small"]);
}

// 12. Tool approval in ReAct.
fn tool_approval_harness() -> Harness {
    Harness::new(
        REACT_AGENT,
        vec![TestTool::returning("transferMoney", json!({"ok": true})).requiring_approval()],
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[("transferMoney", json!({"amount": 5}))]),
                t("Finished."),
            ],
        )]),
        &json!({}),
    )
}

#[tokio::test]
async fn approved_tool_call_runs() {
    let h = tool_approval_harness();
    let mut s = h.run("Send 5.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    let req = s.state.turn().waiting().cloned().unwrap();
    assert_eq!(req.kind, "tool_approval");
    assert_eq!(req.tool.as_deref(), Some("transferMoney"));
    assert_eq!(req.partial_call["arguments"], json!({"amount": 5}));
    assert!(h.calls.all().is_empty());
    h.reply(&mut s, "approve").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("transferMoney"), 1);
    assert_eq!(s.state.turn().answer(), Some("Finished."));
}

#[tokio::test]
async fn denied_tool_call_is_refused_to_the_model() {
    let h = tool_approval_harness();
    let mut s = h.run("Send 5.", json!({})).await;
    h.reply(&mut s, "deny: not today").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("transferMoney"), 0);
    let reqs = h.requests.of(Purpose::React);
    assert_eq!(reqs.len(), 2);
    let refusal = request_text(&reqs[1]);
    assert!(
        refusal.contains("denied") && refusal.contains("not today"),
        "{refusal}"
    );
    assert!(h.kinds(&s.id).await.contains(&"tool_call_blocked"));
}

// 13. Usage and tool invocation counts are summed in the state.
#[tokio::test]
async fn usage_and_tool_counts_are_summed() {
    let input = json!({"customerId": "cust_123", "amount": 50.0});
    let h = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        script(vec![
            (Purpose::Plan, vec![with_usage(j(refund_plan()), 100, 40)]),
            (
                Purpose::Review,
                vec![
                    with_usage(j(json!({"decision": "CONTINUE"})), 80, 5),
                    with_usage(j(json!({"decision": "FINAL_RESPONSE"})), 90, 6),
                ],
            ),
            (Purpose::Respond, vec![with_usage(t("Refunded."), 120, 10)]),
            (
                Purpose::ResponseReview,
                vec![with_usage(j(json!({"verdict": "ACCEPT"})), 70, 3)],
            ),
        ]),
        &input,
    );
    let s = h.run("Refund.", input).await;
    let st = &s.state;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(st.usage().tokens.input_tokens, 100 + 80 + 90 + 120 + 70);
    assert_eq!(st.usage().tokens.output_tokens, 40 + 5 + 6 + 10 + 3);
    assert_eq!(st.usage().calls, 5);
    assert_eq!(st.calls().started, 2);
    assert_eq!(st.calls().started as usize, h.calls.all().len());
    // The fold of the stored log gives the same sums.
    let folded = weft_core::State::fold(h.events(&s.id).await.iter());
    assert_eq!(folded.usage(), st.usage());
    assert_eq!(folded.calls().started, 2);
}

#[tokio::test]
async fn observers_see_every_stored_event() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let input = json!({"customerId": "cust_123", "amount": 50.0});
    let mut h = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        script(vec![
            (Purpose::Plan, vec![j(refund_plan())]),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "CONTINUE"})),
                ],
            ),
            (Purpose::Respond, vec![t("Refunded.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &input,
    );
    h.runtime = Runtime::builder(
        h.store.clone(),
        h.agent.tools.clone(),
        h.agent.config.limits.clone(),
        None,
        None,
    )
    .observe(Arc::new(move |e| {
        if !matches!(e.event, Event::TextDelta { .. }) {
            sink.lock().unwrap().push(e.seq);
        }
    }))
    .build();
    let s = h.run("Refund.", input).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let stored = h.events(&s.id).await.len() as u64;
    assert_eq!(*seen.lock().unwrap(), (1..=stored).collect::<Vec<u64>>());
    // CONTINUE after the last wave: nothing is left, so the run goes on to its answer.
    assert!(h.kinds(&s.id).await.contains(&"execution_finished"));
}

// More garbage: each kind, repeated, ends the run with a clear reason.
#[tokio::test]
async fn cyclic_plans_three_times_end_as_cannot_complete() {
    let cyclic = json!({"plan": [
        {"_id": "a", "_tool": "fact", "x": "†state.b", "_outputPath": "†state.a"},
        {"_id": "b", "_tool": "fact", "x": "†state.a", "_outputPath": "†state.b"}
    ]});
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![(
            Purpose::Plan,
            vec![j(cyclic.clone()), j(cyclic.clone()), j(cyclic)],
        )]),
        &json!({}),
    );
    let s = h.run("Loop.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(
        err.starts_with("CANNOT_COMPLETE: the planner gave no valid plan in 3 attempts"),
        "{err}"
    );
    assert!(err.contains("cycle"), "{err}");
    assert!(h.calls.all().is_empty());
    let kinds = h.kinds(&s.id).await;
    assert_eq!(kinds.iter().filter(|k| **k == "plan_rejected").count(), 3);
}

#[tokio::test]
async fn executor_garbage_three_times_ends_as_cannot_complete() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "think", "_description": "Think"}]}),
                )],
            ),
            (
                Purpose::Execute,
                vec![
                    t("I think so."),
                    j(json!({"nothing": 1})),
                    j(json!({"action": "WAVE"})),
                ],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Think.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(err.starts_with("CANNOT_COMPLETE"), "{err}");
    assert!(err.contains("unknown action `WAVE`"), "{err}");
    assert_eq!(step_status(&s.state, "think"), StepStatus::Failed);
    let exec = h.requests.of(Purpose::Execute);
    assert_eq!(exec.len(), 3);
    assert!(request_text(&exec[1]).contains("not JSON"));
    assert!(request_text(&exec[2]).contains("no `action`"));
}

#[tokio::test]
async fn review_garbage_three_times_ends_as_cannot_complete() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!({"capital": "Lisbon"}))],
        script(vec![
            (Purpose::Plan, vec![j(one_step_plan())]),
            (
                Purpose::Review,
                vec![t("looks good"), t(""), j(json!({"decision": 7}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Capital?", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(err.starts_with("CANNOT_COMPLETE"), "{err}");
    assert!(err.contains("`decision`"), "{err}");
    assert_eq!(h.calls.count("fact"), 1);
}

#[tokio::test]
async fn a_failing_model_ends_the_run_with_its_error() {
    // The script has no reply for the review: the model call fails and cannot be retried.
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![(Purpose::Plan, vec![j(one_step_plan())])]),
        &json!({}),
    );
    let s = h.run("Capital?", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(err.contains("the model call (review) failed"), "{err}");
    assert!(err.contains("no reply left"), "{err}");
    let kinds = h.kinds(&s.id).await;
    assert!(kinds.contains(&"model_failed"));
    assert_eq!(kinds.last(), Some(&"run_finished"));
}

// Tool approval of a literal plan step.
fn plan_approval_tool_harness() -> Harness {
    Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("transferMoney", json!({"ok": true})).requiring_approval()],
        script(vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "pay", "_tool": "transferMoney", "amount": 5}]}),
                )],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Handled.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    )
}

#[tokio::test]
async fn plan_step_with_an_approved_tool_runs_after_approval() {
    let h = plan_approval_tool_harness();
    let mut s = h.run("Pay 5.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    let req = s.state.turn().waiting().cloned().unwrap();
    assert_eq!(req.kind, "tool_approval");
    assert_eq!(req.step.as_deref(), Some("pay"));
    assert_eq!(step_status(&s.state, "pay"), StepStatus::WaitingForUser);
    assert!(h.calls.all().is_empty());
    h.reply(&mut s, "yes").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("transferMoney"), 1);
    assert_eq!(step_status(&s.state, "pay"), StepStatus::Completed);
}

#[tokio::test]
async fn plan_step_with_a_denied_tool_fails_without_running() {
    let h = plan_approval_tool_harness();
    let mut s = h.run("Pay 5.", json!({})).await;
    h.reply(&mut s, "no, too much").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("transferMoney"), 0);
    assert_eq!(step_status(&s.state, "pay"), StepStatus::Failed);
    let err = s
        .state
        .plan()
        .as_ref()
        .unwrap()
        .step("pay")
        .unwrap()
        .1
        .error
        .clone()
        .unwrap();
    assert!(err.message.contains("no, too much"), "{}", err.message);
    // The answer is written from what happened.
    let respond = h.requests.of(Purpose::Respond);
    assert!(request_text(&respond[0]).contains("denied"));
}

// The review asks the person, and reviews again with the answer.
#[tokio::test]
async fn review_asks_the_user_and_reviews_again() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning(
            "fact",
            json!({"accounts": ["savings", "checking"]}),
        )],
        script(vec![
            (Purpose::Plan, vec![j(one_step_plan())]),
            (
                Purpose::Review,
                vec![
                    j(
                        json!({"decision": "ASK_USER", "reason": "two accounts", "question": "Which account?"}),
                    ),
                    j(json!({"decision": "FINAL_RESPONSE", "reason": "the user chose"})),
                ],
            ),
            (Purpose::Respond, vec![t("Using savings.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let mut s = h.run("Pick my account.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    assert_eq!(s.state.turn().waiting().unwrap().question, "Which account?");
    h.reply(&mut s, "the savings one").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let reviews = h.requests.of(Purpose::Review);
    assert_eq!(reviews.len(), 2);
    assert!(request_text(&reviews[1]).contains("the savings one"));
    assert_eq!(h.calls.count("fact"), 1);
}

// Parallel plan steps share a wave and overlap in time.
#[tokio::test]
async fn parallel_plan_steps_run_in_one_wave() {
    let tools = vec![
        TestTool::returning("weather", json!("sunny"))
            .sleeping(200)
            .parallel(),
        TestTool::returning("events", json!("concert"))
            .sleeping(200)
            .parallel(),
    ];
    let h = Harness::new(
        PLAN_AGENT,
        tools,
        script(vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "w", "_tool": "weather", "_outputPath": "†state.weather"},
                    {"_id": "e", "_tool": "events", "_outputPath": "†state.events"}
                ]}))],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Sunny, with a concert.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("What's on today?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let all = h.calls.all();
    assert_eq!(all.len(), 2);
    assert!(
        all[0].start < all[1].end && all[1].start < all[0].end,
        "{all:?}"
    );
    let events = h.events(&s.id).await;
    let waves: Vec<&Vec<String>> = events
        .iter()
        .filter_map(|e| match e {
            Event::WaveStarted { steps, .. } => Some(steps),
            _ => None,
        })
        .collect();
    assert_eq!(waves, vec![&vec!["w".to_owned(), "e".to_owned()]]);
    assert_eq!(h.requests.of(Purpose::Review).len(), 1);
    assert_eq!(
        *s.state.data(),
        json!({"weather": "sunny", "events": "concert"})
    );
}

// A retryable failure of an idempotent tool is retried within the step's attempts.
#[tokio::test]
async fn retryable_tool_failure_is_retried() {
    let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = n.clone();
    let mut flaky = TestTool::new("flaky", "general", json!({"type": "object"}), move |_| {
        if counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            Err(ToolError::new("timeout", "the service timed out"))
        } else {
            Ok(json!("ok"))
        }
    });
    flaky = flaky.idempotent();
    let h = Harness::new(
        "name: test\nmode: plan\nlimits: { retry_backoff_ms: 10 }\n",
        vec![flaky],
        script(vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "f", "_tool": "flaky", "_outputPath": "†state.f"}]}),
                )],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("ok")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Try.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("flaky"), 2);
    assert_eq!(s.state.data()["f"], json!("ok"));
    let kinds = h.kinds(&s.id).await;
    assert_eq!(
        only(
            &kinds,
            &["tool_call_started", "step_retrying", "step_completed"]
        ),
        vec![
            "tool_call_started",
            "step_retrying",
            "tool_call_started",
            "step_completed"
        ]
    );
}

// A replan that needs no more steps answers from what was done.
#[tokio::test]
async fn replan_with_a_direct_response_answers() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![
            TestTool::returning("fact", json!({"capital": "Lisbon"})),
            TestTool::returning("more", json!("unused")),
        ],
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(json!({"plan": [
                        {"_id": "s1", "_tool": "fact", "_outputPath": "†state.fact"},
                        {"_id": "s2", "_tool": "more", "_dependsOn": ["s1"]}
                    ]})),
                    j(json!({"direct_response": "Lisbon is the capital."})),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "REPLAN", "reason": "enough already"}))],
            ),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Capital of Portugal?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(s.state.turn().answer(), Some("Lisbon is the capital."));
    assert_eq!(h.calls.count("more"), 0);
    assert!(h.requests.of(Purpose::Respond).is_empty());
    assert_eq!(h.requests.of(Purpose::ResponseReview).len(), 1);
}

// A second task in the same session sees the first one's task and answer.
#[tokio::test]
async fn second_turn_remembers_the_first() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!({"capital": "Lisbon"}))],
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(one_step_plan()),
                    j(json!({"direct_response": "About 550,000 people live in Lisbon."})),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Lisbon.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let mut s = h.run("Capital of Portugal?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    h.runtime
        .run_task(&h.agent, &mut s, "How many people live there?", json!({}))
        .await
        .unwrap();
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(
        s.state.turn().answer(),
        Some("About 550,000 people live in Lisbon.")
    );
    let plans = h.requests.of(Purpose::Plan);
    assert_eq!(plans.len(), 2);
    let second = request_text(&plans[1]);
    assert!(
        second.contains("Capital of Portugal?") && second.contains("Lisbon."),
        "{second}"
    );
    assert_eq!(s.state.turn().number(), 2);
}

#[tokio::test]
async fn react_second_turn_keeps_the_conversation() {
    let h = Harness::new(
        REACT_AGENT,
        vec![],
        script(vec![(
            Purpose::React,
            vec![t("Hi Ada."), t("Your name is Ada.")],
        )]),
        &json!({}),
    );
    let mut s = h.run("I am Ada.", json!({})).await;
    h.runtime
        .run_task(&h.agent, &mut s, "What is my name?", json!({}))
        .await
        .unwrap();
    assert_eq!(s.state.turn().answer(), Some("Your name is Ada."));
    let reqs = h.requests.of(Purpose::React);
    let second = request_text(&reqs[1]);
    assert!(
        second.contains("I am Ada.") && second.contains("Hi Ada."),
        "{second}"
    );
}

// Answering a session that waits for nobody is refused; the session is left as it was.
#[tokio::test]
async fn reply_to_a_finished_session_is_refused() {
    let h = tool_approval_harness();
    let mut s = h.run("Send 5.", json!({})).await;
    h.reply(&mut s, "approve").await;
    assert_eq!(s.state.status(), SessionStatus::Completed);
    let before = h.events(&s.id).await.len();
    let err = h
        .runtime
        .reply(&h.agent, &mut s, "approve")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not waiting"), "{err}");
    assert_eq!(s.state.status(), SessionStatus::Completed);
    assert_eq!(h.events(&s.id).await.len(), before);
    assert_eq!(h.calls.count("transferMoney"), 1);
}

// `allowed_tools`: a registered tool outside the list can never run, whoever asks for it.
fn restricted_tools() -> Vec<TestTool> {
    vec![
        TestTool::returning("getWeather", json!("sunny")),
        TestTool::returning("deleteEverything", json!("gone")),
    ]
}

const RESTRICTED: &str = "allowed_tools: [getWeather]\n";

#[tokio::test]
async fn allowed_tools_bound_react_calls() {
    let h = Harness::new(
        &format!("{REACT_AGENT}{RESTRICTED}"),
        restricted_tools(),
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[("deleteEverything", json!({}))]),
                t("I may not do that."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Delete everything.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("deleteEverything"), 0);
    let reqs = h.requests.of(Purpose::React);
    let offered: Vec<&str> = reqs[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, vec!["getWeather"]);
    assert!(request_text(&reqs[1]).contains("`deleteEverything` is not a tool"));
}

#[tokio::test]
async fn allowed_tools_bound_plans_and_the_step_executor() {
    let h = Harness::new(
        &format!("{PLAN_AGENT}{RESTRICTED}"),
        restricted_tools(),
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(json!({"plan": [{"_id": "d", "_tool": "deleteEverything"}]})),
                    j(json!({"plan": [{"_id": "x", "_description": "Clean up"}]})),
                ],
            ),
            (
                Purpose::Execute,
                vec![
                    j(json!({"action": "USE_TOOL", "tool": "deleteEverything", "arguments": {}})),
                    j(json!({"action": "DIRECT_RESPONSE", "response": "Nothing I may delete."})),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("I cannot delete things.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Delete everything.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("deleteEverything"), 0);
    let plan_req = request_text(&h.requests.of(Purpose::Plan)[0]);
    assert!(!plan_req.contains("deleteEverything"), "{plan_req}");
    let events = h.events(&s.id).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::PlanRejected { problems }
        if problems.iter().any(|p| p.message.contains("unknown tool `deleteEverything`"))))
    );
    assert!(events.iter().any(
        |e| matches!(e, Event::ToolCallBlocked { tool, step: Some(_), .. }
        if tool == "deleteEverything")
    ));
}

// The step executor sees a tool's argument error in its log and corrects the call.
#[tokio::test]
async fn executor_corrects_a_call_rejected_by_the_schema() {
    let input = json!({"customerId": "cust_123"});
    let h = Harness::new(
        PLAN_AGENT,
        refund_tools(),
        script(vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "refund", "_description": "Refund 20", "_category": "billing"}]}),
                )],
            ),
            (
                Purpose::Execute,
                vec![
                    j(
                        json!({"action": "USE_TOOL", "tool": "issueRefund", "arguments": {"customerId": "cust_123", "amount": "twenty"}}),
                    ),
                    j(
                        json!({"action": "USE_TOOL", "tool": "issueRefund", "arguments": {"customerId": "cust_123", "amount": 20}}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Refunded 20.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &input,
    );
    let s = h.run("Refund 20.", input).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    // The invalid call never reached the tool.
    let refunds = h.calls.of("issueRefund");
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].args["amount"], json!(20));
    let exec = h.requests.of(Purpose::Execute);
    let second = request_text(&exec[1]);
    assert!(second.contains("invalid_arguments"), "{second}");
}

// An executor step whose tool keeps failing fails after max_step_attempts; the review sees it.
#[tokio::test]
async fn executor_step_fails_after_its_attempts() {
    let tools = vec![TestTool::new(
        "lookup",
        "general",
        json!({"type": "object"}),
        |_| Err(ToolError::new("unavailable", "the directory is down")),
    )];
    let h = Harness::new(
        "name: test\nmode: plan\nlimits: { max_step_attempts: 2 }\n",
        tools,
        script(vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "find", "_description": "Find the number"}]}),
                )],
            ),
            (
                Purpose::Execute,
                vec![
                    j(
                        json!({"action": "USE_TOOL", "tool": "lookup", "arguments": {"name": "Ada"}}),
                    ),
                    j(
                        json!({"action": "USE_TOOL", "tool": "lookup", "arguments": {"name": "Ada L."}}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![j(
                    json!({"decision": "CANNOT_COMPLETE", "reason": "The directory is down."}),
                )],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Find Ada's number.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    assert_eq!(h.calls.count("lookup"), 2);
    assert_eq!(step_status(&s.state, "find"), StepStatus::Failed);
    assert_eq!(
        s.state.turn().error(),
        Some("CANNOT_COMPLETE: The directory is down.")
    );
    assert_eq!(s.state.turn().answer(), Some("The directory is down."));
    let review = request_text(&h.requests.of(Purpose::Review)[0]);
    assert!(
        review.contains("FAILED") && review.contains("the directory is down"),
        "{review}"
    );
}

// The response reviewer asks the person; the answer is written again with their reply.
#[tokio::test]
async fn response_reviewer_asks_the_user() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!({"capital": "Lisbon"}))],
        script(vec![
            (Purpose::Plan, vec![j(one_step_plan())]),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Lisbon."), t("Lisboa.")]),
            (
                Purpose::ResponseReview,
                vec![
                    j(json!({"verdict": "ASK_USER", "feedback": "In which language?"})),
                    j(json!({"verdict": "ACCEPT"})),
                ],
            ),
        ]),
        &json!({}),
    );
    let mut s = h.run("Capital of Portugal?", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    assert_eq!(
        s.state.turn().waiting().unwrap().question,
        "In which language?"
    );
    h.reply(&mut s, "Portuguese").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(s.state.turn().answer(), Some("Lisboa."));
    let respond = h.requests.of(Purpose::Respond);
    assert_eq!(respond.len(), 2);
    assert!(request_text(&respond[1]).contains("Portuguese"));
}

#[tokio::test]
async fn response_reviewer_cannot_complete_fails_with_the_draft() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!({}))],
        script(vec![
            (Purpose::Plan, vec![j(one_step_plan())]),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("I could not find it.")]),
            (
                Purpose::ResponseReview,
                vec![j(
                    json!({"verdict": "CANNOT_COMPLETE", "feedback": "No evidence was found."}),
                )],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Capital of Atlantis?", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    assert_eq!(
        s.state.turn().error(),
        Some("CANNOT_COMPLETE: No evidence was found.")
    );
    assert_eq!(s.state.turn().answer(), Some("I could not find it."));
}

// A tool error in ReAct goes back to the model as an error result.
#[tokio::test]
async fn react_tool_error_is_an_error_result() {
    let h = Harness::new(
        REACT_AGENT,
        vec![
            TestTool::new("getWeather", "weather", json!({"type": "object"}), |a| {
                if a["city"] == json!("Atlantis") {
                    Err(ToolError::new("not_found", "no such city: Atlantis"))
                } else {
                    Ok(json!("sunny"))
                }
            })
            .parallel(),
        ],
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[
                    ("getWeather", json!({"city": "Atlantis"})),
                    ("getWeather", json!({"city": "Lisbon"})),
                ]),
                t("Lisbon is sunny; Atlantis does not exist."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Weather in Atlantis and Lisbon?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let reqs = h.requests.of(Purpose::React);
    let results: Vec<(String, bool)> = reqs[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .any(|(c, e)| *e && c.contains("no such city: Atlantis"))
    );
    assert!(results.iter().any(|(c, e)| !*e && c == "sunny"));
}

// The answer streams to observers as deltas that add up to it.
#[tokio::test]
async fn react_answer_streams_as_deltas() {
    let deltas = Arc::new(std::sync::Mutex::new(String::new()));
    let sink = deltas.clone();
    let mut h = Harness::new(
        REACT_AGENT,
        vec![],
        script(vec![(
            Purpose::React,
            vec![t("The quick brown fox jumps over the lazy dog.")],
        )]),
        &json!({}),
    );
    h.runtime = Runtime::builder(
        h.store.clone(),
        h.agent.tools.clone(),
        h.agent.config.limits.clone(),
        None,
        None,
    )
    .observe(Arc::new(move |e| {
        if let Event::TextDelta { text } = &e.event {
            sink.lock().unwrap().push_str(text);
        }
    }))
    .build();
    let s = h.run("Say the pangram.", json!({})).await;
    assert_eq!(
        s.state.turn().answer(),
        Some(deltas.lock().unwrap().as_str())
    );
    // Deltas are live only: none is stored.
    assert!(!h.kinds(&s.id).await.contains(&"text_delta"));
}

// A plan awaiting approval is durable: a new runtime on the same store approves it.
#[tokio::test]
async fn plan_approval_survives_a_restart() {
    let first = approval_harness();
    let id = first.run("Refund c1.", json!({})).await.id;
    let second = Harness::with_store(
        first.store.clone(),
        "name: test\nmode: plan\napprove_plans: true\n",
        refund_tools(),
        script(vec![
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("done")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let mut s = second.runtime.load_session(&id).await.unwrap();
    assert_eq!(s.state.turn().waiting().unwrap().kind, "plan_approval");
    second.reply(&mut s, "approve").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(second.calls.count("issueRefund"), 1);
    assert_eq!(first.calls.all().len(), 0);
    // The restarted model was never asked to plan again.
    assert!(second.requests.of(Purpose::Plan).is_empty());
}

// One reply with a call that needs approval and one that does not: both end with a result
// before the model is asked again, and the free call runs once.
#[tokio::test]
async fn react_mixed_approval_calls_each_get_one_result() {
    let h = Harness::new(
        REACT_AGENT,
        vec![
            TestTool::returning("balance", json!({"eur": 100})),
            TestTool::returning("transferMoney", json!({"ok": true})).requiring_approval(),
        ],
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[
                    ("balance", json!({})),
                    ("transferMoney", json!({"amount": 5})),
                ]),
                t("Sent 5 of your 100."),
            ],
        )]),
        &json!({}),
    );
    let mut s = h.run("Send 5 if I can afford it.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    h.reply(&mut s, "ok").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("balance"), 1);
    assert_eq!(h.calls.count("transferMoney"), 1);
    let reqs = h.requests.of(Purpose::React);
    assert_eq!(reqs.len(), 2);
    let results = reqs[1]
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    assert_eq!(results, 2, "{:?}", reqs[1].messages);
}

// Skills: the planner sees their names and descriptions and picks one per step (`_skill`); each
// step's executor gets only the instructions of its step's skill, none for a step without one;
// the instructions template sees the input.
#[tokio::test]
async fn skills_and_instructions_reach_the_right_calls() {
    let yaml = "name: test\nmode: plan\n\
instructions: \"You serve {{ input.company }}.\"\n\
skills:\n\
- { name: refund-policy, description: How refunds are decided., instructions: Refunds over 100 need a manager. }\n\
- { name: tone, description: How to write to customers., instructions: Write warmly and briefly. }\n\
- { name: shipping, description: Delivery times., instructions: Parcels take three days. }\n";
    let input = json!({"company": "Acme"});
    let h = Harness::new(
        yaml,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "policy", "_description": "Apply the refund policy", "_skill": "refund-policy"},
                    {"_id": "letter", "_description": "Draft the reply", "_skill": "tone", "_dependsOn": ["policy"]},
                    {"_id": "plain", "_description": "Sum up", "_dependsOn": ["letter"]}
                ]}))],
            ),
            (
                Purpose::Execute,
                vec![
                    j(
                        json!({"action": "DESIGN_INSTRUCTIONS", "instructions": "Ask a manager for refunds over 100."}),
                    ),
                    j(
                        json!({"action": "DIRECT_RESPONSE", "response": "Dear customer, a manager decides."}),
                    ),
                    // A step without a skill cannot draw instructions from one: refused, then
                    // answered.
                    j(json!({"action": "DESIGN_INSTRUCTIONS", "instructions": "x"})),
                    j(json!({"action": "DIRECT_RESPONSE", "response": "A manager decides."})),
                ],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                ],
            ),
            (
                Purpose::Respond,
                vec![t("A manager approves refunds over 100.")],
            ),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &input,
    );
    let s = h.run("What is the refund policy?", input).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let plan_req = &h.requests.of(Purpose::Plan)[0];
    let plan = request_text(plan_req);
    assert!(plan.contains("You serve Acme."), "{plan}");
    for line in [
        "refund-policy: How refunds are decided.",
        "tone: How to write to customers.",
        "shipping: Delivery times.",
    ] {
        assert!(plan.contains(line), "{plan}");
    }
    assert!(!plan.contains("need a manager"), "{plan}");
    // The planner's schema offers the skills by name.
    let schema = plan_req.response_schema.as_ref().unwrap().to_string();
    assert!(
        schema.contains(r#""_skill":{"enum":["refund-policy","tone","shipping"]}"#),
        "{schema}"
    );
    let execs: Vec<String> = h
        .requests
        .of(Purpose::Execute)
        .iter()
        .map(request_text)
        .collect();
    assert_eq!(execs.len(), 4);
    let all = [
        "Refunds over 100 need a manager.",
        "Write warmly and briefly.",
        "Parcels take three days.",
    ];
    let seen =
        |text: &str| -> Vec<&str> { all.iter().copied().filter(|i| text.contains(i)).collect() };
    assert_eq!(
        seen(&execs[0]),
        ["Refunds over 100 need a manager."],
        "{}",
        execs[0]
    );
    assert!(execs[0].contains("Current step `policy`"), "{}", execs[0]);
    assert_eq!(
        seen(&execs[1]),
        ["Write warmly and briefly."],
        "{}",
        execs[1]
    );
    assert!(execs[1].contains("Current step `letter`"), "{}", execs[1]);
    assert!(seen(&execs[2]).is_empty(), "{}", execs[2]);
    assert!(seen(&execs[3]).is_empty(), "{}", execs[3]);
    assert!(execs[3].contains("has no `_skill`"), "{}", execs[3]);
    let run = s.state.plan().unwrap();
    assert_eq!(
        run.step("policy").unwrap().1.output,
        Some(json!({"instructions": "Ask a manager for refunds over 100."}))
    );
    // The choice is in the events: the accepted plan names each step's skill, and the
    // instructions drawn from one name it.
    let events = h.events(&s.id).await;
    let accepted = events
        .iter()
        .find_map(|e| match e {
            Event::PlanAccepted { plan } => Some(plan.clone()),
            _ => None,
        })
        .unwrap();
    let skills: Vec<Option<&str>> = accepted.steps.iter().map(|s| s.skill.as_deref()).collect();
    assert_eq!(skills, [Some("refund-policy"), Some("tone"), None]);
    assert!(events.iter().any(|e| matches!(e,
        Event::StepAction { step, action, detail }
            if step == "policy" && action == "DESIGN_INSTRUCTIONS" && detail == &json!({"skill": "refund-policy"}))));
}

// A skill the planner names that the agent does not have is refused with the closest name, and
// the planner is asked again.
#[tokio::test]
async fn a_plan_naming_an_unknown_skill_is_refused_with_the_closest_name() {
    let yaml = "name: test\nmode: plan\n\
skills:\n  - name: refund-policy\n    description: How refunds are decided.\n    instructions: Refunds over 100 need a manager.\n";
    let h = Harness::new(
        yaml,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(
                        json!({"plan": [{"_id": "p", "_description": "Apply it", "_skill": "refund-polcy"}]}),
                    ),
                    j(json!({"direct_response": "Ask a manager."})),
                ],
            ),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Refund policy?", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let again = request_text(&h.requests.of(Purpose::Plan)[1]);
    assert!(
        again.contains("unknown skill `refund-polcy` (did you mean `refund-policy`?)"),
        "{again}"
    );
}
