//! The same agent scenarios on every store: in memory, a SQLite file and PostgreSQL
//! (`needs_postgres_scenarios`, which needs WEFT_TEST_POSTGRES_URL). Each session is reloaded from the store (a new `Runtime`,
//! as a new process would) to continue or to check it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents as common;

use std::sync::Arc;

use common::{TestTool, j, script, t, tool_calls};
use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::{SessionStatus, State, StepStatus};
use weft_model::{Purpose, ScriptedModel};
use weft_runtime::{Agent, SessionInfo};
use weft_store::{RamStore, SqliteStore, Store};
use weft_tools::Registry;

fn agent(
    yaml: &str,
    tools: Vec<TestTool>,
    replies: Vec<(Purpose, Vec<weft_model::ScriptedReply>)>,
) -> Agent {
    let spec = AgentSpec::parse("scenario.yaml", yaml).unwrap();
    let mut reg = Registry::new();
    for tool in tools {
        reg.register(tool).unwrap();
    }
    let model = Arc::new(ScriptedModel::keyed("scenario", script(replies)));
    Agent::new(&spec, Arc::new(reg), model, &json!({}), &json!({})).unwrap()
}

async fn reload<S: Store>(store: &Arc<S>, agent: &Agent, id: &str) -> State {
    let rt = crate::agents::runtime_of(store, agent).build();
    let s = rt.load_session(id).await.unwrap();
    s.state
}

/// The refund keeps to its plan despite a tempting escalation tool.
async fn refund_keeps_to_its_plan<S: Store>(store: Arc<S>) {
    let billing = TestTool::returning(
        "checkBillingHistory",
        json!({"orders": 5, "lastChargeback": "2025-09-10"}),
    )
    .idempotent();
    let refund = TestTool::returning("issueRefund", json!({"confirmationId": "refund_xyz789"}));
    let escalate = TestTool::returning("escalateToSupervisor", json!({"ticket": 1}));
    let (b_log, r_log, e_log) = (
        billing.log.clone(),
        refund.log.clone(),
        escalate.log.clone(),
    );
    let a = agent(
        "name: refund\nmode: plan\n",
        vec![billing, refund, escalate],
        vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "billing", "_tool": "checkBillingHistory", "customerId": "†input.customerId", "_outputPath": "†state.billing"},
                    {"_id": "refund", "_tool": "issueRefund", "customerId": "†input.customerId", "amount": "†input.amount", "_dependsOn": ["billing"], "_outputPath": "†state.refund"}
                ]}))],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                ],
            ),
            (Purpose::Respond, vec![t("Refunded: refund_xyz789.")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ],
    );
    let rt = crate::agents::runtime_of(&store, &a).build();
    let input = json!({"customerId": "cust_123", "amount": 50.0});
    let s = rt
        .run_agent(&a, SessionInfo::default(), "I'd like a refund", input)
        .await
        .unwrap();
    let id = s.id.clone();
    drop(s);
    let st = reload(&store, &a, &id).await;
    assert_eq!(st.status(), SessionStatus::Completed);
    assert_eq!(st.turn().answer(), Some("Refunded: refund_xyz789."));
    assert_eq!(
        (
            b_log.count("checkBillingHistory"),
            r_log.count("issueRefund"),
            e_log.count("escalateToSupervisor")
        ),
        (1, 1, 0)
    );
    assert_eq!(r_log.of("issueRefund")[0].args["amount"], json!(50.0));
    assert_eq!(st.data()["refund"]["confirmationId"], "refund_xyz789");
}

/// A missing argument: the session waits, a new runtime (a new process) continues the same plan.
async fn missing_input_waits_and_resumes<S: Store>(store: Arc<S>) {
    let refund = TestTool::new(
        "issueRefund",
        "billing",
        json!({"type": "object", "properties": {"customerId": {"type": "string"}, "amount": {"type": "number"}}, "required": ["customerId", "amount"]}),
        |a| Ok(json!({"refunded": a["amount"]})),
    );
    let log = refund.log.clone();
    let a = agent(
        "name: asker\nmode: plan\nreview_responses: false\n",
        vec![refund],
        vec![
            (
                Purpose::Plan,
                vec![j(
                    json!({"plan": [{"_id": "refund", "_description": "Issue the refund", "_category": "billing"}]}),
                )],
            ),
            (
                Purpose::Execute,
                vec![
                    j(
                        json!({"action": "REQUEST_TOOL_INPUT", "tool": "issueRefund", "arguments": {"customerId": "c1"}, "missing": ["amount"], "question": "How much?"}),
                    ),
                    j(
                        json!({"action": "USE_TOOL", "tool": "issueRefund", "arguments": {"customerId": "c1", "amount": 50}}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![j(json!({"decision": "FINAL_RESPONSE"}))],
            ),
            (Purpose::Respond, vec![t("Refunded 50.")]),
        ],
    );
    let id = {
        let rt = crate::agents::runtime_of(&store, &a).build();
        let s = rt
            .run_agent(&a, SessionInfo::default(), "refund", json!({}))
            .await
            .unwrap();
        assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
        s.id.clone()
    };
    let st = reload(&store, &a, &id).await;
    assert_eq!(st.status(), SessionStatus::WaitingForUser);
    let w = st.turn().waiting().cloned().unwrap();
    assert_eq!(
        (w.step.as_deref(), w.tool.as_deref(), w.missing.clone()),
        (
            Some("refund"),
            Some("issueRefund"),
            vec!["amount".to_owned()]
        )
    );
    assert_eq!(log.count("issueRefund"), 0);
    // A new runtime, as a new process would have.
    let rt = crate::agents::runtime_of(&store, &a).build();
    let mut s = rt.load_session(&id).await.unwrap();
    rt.reply(&a, &mut s, "50").await.unwrap();
    drop(s);
    let st = reload(&store, &a, &id).await;
    assert_eq!(st.status(), SessionStatus::Completed);
    assert_eq!(st.turn().answer(), Some("Refunded 50."));
    assert_eq!(log.count("issueRefund"), 1);
    assert_eq!(
        st.plan().unwrap().step("refund").unwrap().1.status,
        StepStatus::Completed
    );
}

/// The trip replanned for a dog: completed steps stay, pending ones are replaced.
async fn trip_is_replanned<S: Store>(store: Arc<S>) {
    let flight = TestTool::returning("bookFlight", json!({"flight": "LH123"}));
    let hotel = TestTool::returning("bookHotel", json!({"hotel": "Grand"}));
    let pets = TestTool::returning("findPetFriendlyHotel", json!({"hotel": "Paws Inn"}));
    let (f_log, h_log, p_log) = (flight.log.clone(), hotel.log.clone(), pets.log.clone());
    let a = agent(
        "name: trips\nmode: plan\nreview_responses: false\n",
        vec![flight, hotel, pets],
        vec![
            (
                Purpose::Plan,
                vec![
                    j(json!({"plan": [
                        {"_id": "flight", "_tool": "bookFlight", "destination": "†input.destination", "_outputPath": "†state.flight"},
                        {"_id": "hotel", "_tool": "bookHotel", "destination": "†input.destination", "_dependsOn": ["flight"], "_outputPath": "†state.hotel"}
                    ]})),
                    j(
                        json!({"plan": [{"_id": "petHotel", "_tool": "findPetFriendlyHotel", "destination": "†input.destination", "_dependsOn": ["flight"], "_outputPath": "†state.hotel"}]}),
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "REPLAN", "reason": "the traveller brings a dog"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                ],
            ),
            (Purpose::Respond, vec![t("Booked LH123 and Paws Inn.")]),
        ],
    );
    let rt = crate::agents::runtime_of(&store, &a).build();
    let s = rt
        .run_agent(
            &a,
            SessionInfo::default(),
            "Berlin, with my dog",
            json!({"destination": "Berlin"}),
        )
        .await
        .unwrap();
    let id = s.id.clone();
    drop(s);
    let st = reload(&store, &a, &id).await;
    assert_eq!(st.status(), SessionStatus::Completed);
    assert_eq!(
        (
            f_log.count("bookFlight"),
            h_log.count("bookHotel"),
            p_log.count("findPetFriendlyHotel")
        ),
        (1, 0, 1)
    );
    let run = st.plan().unwrap();
    let ids: Vec<&str> = run.plan.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, vec!["flight", "petHotel"]);
    assert_eq!(st.data()["hotel"]["hotel"], "Paws Inn");
    assert_eq!(st.turn().replans(), 1);
}

/// ReAct with two tool calls in one reply: they overlap, and both results precede the answer.
async fn react_runs_calls_concurrently<S: Store>(store: Arc<S>) {
    let weather = TestTool::new("getWeather", "weather", json!({"type": "object"}), |a| {
        Ok(json!({"city": a["city"], "sunny": a["city"] == "Lisbon"}))
    })
    .sleeping(200)
    .parallel();
    let log = weather.log.clone();
    let a = agent(
        "name: chat\nmode: react\n",
        vec![weather],
        vec![(
            Purpose::React,
            vec![
                tool_calls(&[
                    ("getWeather", json!({"city": "Lisbon"})),
                    ("getWeather", json!({"city": "Oslo"})),
                ]),
                t("Lisbon is sunnier."),
            ],
        )],
    );
    let rt = crate::agents::runtime_of(&store, &a).build();
    let s = rt
        .run_agent(&a, SessionInfo::default(), "sun?", Value::Null)
        .await
        .unwrap();
    let id = s.id.clone();
    drop(s);
    let st = reload(&store, &a, &id).await;
    assert_eq!(st.status(), SessionStatus::Completed);
    assert_eq!(st.turn().answer(), Some("Lisbon is sunnier."));
    let calls = log.all();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[0].start < calls[1].end && calls[1].start < calls[0].end,
        "the two calls overlapped"
    );
    assert_eq!(st.calls().started, 2);
    assert!(st.usage().tokens.input_tokens > 0);
}

/// A 200-turn ReAct conversation with a context budget: older turns are summarised (`compact`
/// calls), every ReAct request stays within the budget, the model sees the latest summary, and
/// the stored log (reloaded as a new process would) keeps every message.
async fn long_conversation_is_compacted<S: Store>(store: Arc<S>) {
    const TURNS: usize = 200;
    const BUDGET: u64 = 800;
    let echo = TestTool::new("echo", "util", json!({"type": "object"}), |a| {
        Ok(json!({"echoed": a["text"]}))
    });
    let mut react: Vec<weft_model::ScriptedReply> = (0..TURNS)
        .map(|k| {
            tool_calls(&[(
                "echo",
                json!({"text": format!("note number {k} for the record")}),
            )])
        })
        .collect();
    react.push(t("All notes echoed."));
    let summaries = (0..TURNS)
        .map(|k| t(&format!("SUMMARY-{k}: notes were echoed")))
        .collect();
    let spec = AgentSpec::parse(
        "scenario.yaml",
        &format!("name: notes\nmode: react\nlimits: {{ max_iterations: 1000, max_context_tokens: {BUDGET} }}\n"),
    )
    .unwrap();
    let mut reg = Registry::new();
    reg.register(echo).unwrap();
    let (model, requests) = common::RecordingModel::new(ScriptedModel::keyed(
        "scenario",
        script(vec![(Purpose::React, react), (Purpose::Compact, summaries)]),
    ));
    let a = Agent::new(
        &spec,
        Arc::new(reg),
        Arc::new(model),
        &json!({}),
        &json!({}),
    )
    .unwrap();
    let rt = crate::agents::runtime_of(&store, &a).build();
    let s = rt
        .run_agent(&a, SessionInfo::default(), "echo the notes", Value::Null)
        .await
        .unwrap();
    let id = s.id.clone();
    drop(s);
    let st = reload(&store, &a, &id).await;
    assert_eq!(
        st.status(),
        SessionStatus::Completed,
        "{:?}",
        st.turn().error()
    );
    assert_eq!(st.turn().answer(), Some("All notes echoed."));
    // Compaction changes what is sent, not what is kept.
    assert_eq!(st.history().len(), 1 + 2 * TURNS + 1);
    let compactions = requests.of(Purpose::Compact);
    assert!(compactions.len() >= 5, "{} compactions", compactions.len());
    let reacts = requests.of(Purpose::React);
    assert_eq!(reacts.len(), TURNS + 1);
    for (k, r) in reacts.iter().enumerate() {
        let tokens: u64 = r
            .messages
            .iter()
            .map(weft_core::history::estimate_tokens)
            .sum::<u64>()
            + r.tools
                .iter()
                .map(|d| {
                    ((d.name.len() + d.description.len() + d.parameters.to_string().len()) as u64)
                        .div_ceil(4)
                })
                .sum::<u64>();
        assert!(tokens <= BUDGET, "request {k} carries {tokens} tokens");
    }
    let last = common::request_text(reacts.last().unwrap());
    let latest = st.compaction().unwrap();
    assert!(latest.summary.starts_with("SUMMARY-"));
    assert!(
        last.contains(&latest.summary),
        "the last request carries the latest summary"
    );
    assert!(
        !last.contains("note number 0 "),
        "the first turns are summarised away"
    );
    // Each compaction after the first is given the previous summary.
    assert!(common::request_text(&compactions[1]).contains("SUMMARY-0"));
    // With its summary in place, every request still alternates roles.
    requests.assert_alternate();
}

/// An agent with the built-in memory and document tools, run for `user` with `react` replies.
/// Returns the tool results the model saw, in order.
async fn run_for<S: Store>(
    store: &Arc<S>,
    user: &str,
    react: Vec<weft_model::ScriptedReply>,
) -> Vec<String> {
    common::react_tool_results(
        store,
        user,
        "name: desk\nmode: react\ntools:\n  - builtin: remember\n  - builtin: recall\n  - builtin: forget\n  - builtin: search_documents\n",
        react,
        None,
    )
    .await
}

/// Documents added to the store are found by an agent's `search_documents`, each result citing
/// its file and line; a user's memories (`remember`) are recalled in their later sessions and
/// never in another user's, and a secret never reaches the store.
async fn documents_and_memories_through_an_agent<S: Store>(store: Arc<S>) {
    use weft_tools::documents::chunks;
    let guide = "# Refunds\n\nRefunds are paid within 14 days of the return.\n\n\n\n# Shipping\n\nParcels to Norway take a week.";
    let entries: Vec<weft_store::NewEntry> = chunks(guide)
        .into_iter()
        .map(|c| weft_store::NewEntry {
            text: c.text,
            source: "guide.md".into(),
            position: c.line as i64,
            embedding: None,
        })
        .collect();
    assert_eq!(entries.len(), 1, "one chunk of two sections");
    store
        .add(
            weft_store::Kind::Document,
            &weft_store::Shelf::public(),
            entries,
            true,
            1,
        )
        .await
        .unwrap();
    let seen = run_for(
        &store,
        "alice",
        vec![
            tool_calls(&[(
                "search_documents",
                json!({"query": "how many days for a refund"}),
            )]),
            tool_calls(&[("remember", json!({"text": "Alice's locker code is 4417"}))]),
            t("Refunds take 14 days (guide.md:1)."),
        ],
    )
    .await;
    let results: Value = serde_json::from_str(&seen[0]).unwrap();
    assert_eq!(results["results"][0]["source"], "guide.md:1");
    assert!(
        results["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("14 days")
    );
    let remembered: Value = serde_json::from_str(&seen[1]).unwrap();
    assert!(remembered["id"].as_i64().is_some());
    // Another user's session: the memory is not there, and cannot be deleted.
    let seen = run_for(
        &store,
        "bob",
        vec![
            tool_calls(&[("recall", json!({"query": "locker code"}))]),
            tool_calls(&[("forget", json!({"id": remembered["id"]}))]),
            t("I know of no locker code."),
        ],
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&seen[0]).unwrap(),
        json!({"memories": []})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&seen[1]).unwrap(),
        json!({"forgotten": false})
    );
    // Alice's next session finds it.
    let seen = run_for(
        &store,
        "alice",
        vec![
            tool_calls(&[("recall", json!({"query": "what is my locker code"}))]),
            t("4417."),
        ],
    )
    .await;
    let found: Value = serde_json::from_str(&seen[0]).unwrap();
    assert_eq!(found["memories"][0]["text"], "Alice's locker code is 4417");
    assert_eq!(found["memories"][0]["scope"], "user");
}

async fn all_scenarios<S: Store>(make: impl AsyncFn() -> Arc<S>) {
    refund_keeps_to_its_plan(make().await).await;
    missing_input_waits_and_resumes(make().await).await;
    trip_is_replanned(make().await).await;
    react_runs_calls_concurrently(make().await).await;
    long_conversation_is_compacted(make().await).await;
    documents_and_memories_through_an_agent(make().await).await;
}

#[tokio::test]
async fn scenarios_in_memory() {
    all_scenarios(async || Arc::new(RamStore::new())).await;
}

#[tokio::test]
async fn scenarios_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    all_scenarios(async || store.clone()).await;
}

#[tokio::test]
async fn needs_postgres_scenarios() {
    let mut pg = common::PgSchemas::new("weft_scen");
    let store = pg.store().await;
    all_scenarios(async || store.clone()).await;
}
