//! The scoring of `weft-bench local-eval`, without a model: replies written here are read as the
//! engine reads them, against the example agents' real tools.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use weft_bench::local_eval::{self, Backend, CallRecord, Case, Kind, Score};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A task file in a temporary directory naming the examples by absolute path.
fn task_file(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("tasks.yaml");
    let text = yaml.replace("EXAMPLES", &examples().display().to_string());
    std::fs::write(&path, text).unwrap();
    path
}

async fn cases() -> Vec<Case> {
    let dir = tempfile::tempdir().unwrap();
    let path = task_file(
        dir.path(),
        r#"
planner:
  - agent: EXAMPLES/refund-desk.yaml
    task: I'd like a refund for my last order.
    input: { customerId: cust_123, amount: 50.0 }
    check: { calls: [issueRefund] }
workflow:
  - agent: EXAMPLES/support-triage.yaml
    task: I want a refund for order A-1001.
    check: { equals: { category: refund, orderId: A-1001 } }
"#,
    );
    local_eval::load(&path).await.unwrap()
}

#[tokio::test]
async fn the_request_is_the_engines_planner_call_with_the_agents_tools() {
    let cases = cases().await;
    let plan = &cases[0];
    assert_eq!(plan.kind, Kind::Planner);
    assert_eq!(plan.agent, "refund-desk");
    assert_eq!(
        plan.request.response_schema,
        Some(weft_core::prompts::planner_schema(&plan.config.tools, &[]))
    );
    let user = plan.request.messages.iter().last().unwrap();
    let text = format!("{user:?}");
    assert!(text.contains("issueRefund"), "{text}");
    assert!(text.contains("I'd like a refund"), "{text}");
    let wf = &cases[1];
    assert_eq!(wf.kind, Kind::Workflow);
    assert_eq!(
        wf.request.response_schema.as_ref().unwrap()["required"],
        serde_json::json!(["category", "orderId"])
    );
}

#[tokio::test]
async fn a_valid_sensible_plan_scores_on_every_count() {
    let cases = cases().await;
    let s = local_eval::score(
        &cases[0],
        r#"{"plan": [{"_id": "s1", "_tool": "checkBillingHistory", "customerId": "†input.customerId"},
                     {"_id": "s2", "_tool": "issueRefund", "customerId": "†input.customerId", "amount": "†input.amount", "_dependsOn": ["s1"]}]}"#,
    );
    assert_eq!(
        s,
        Score {
            parsed: true,
            schema_valid: true,
            accepted: true,
            arguments_fit: true,
            direct: false,
            sensible: true,
            problem: None
        }
    );
}

#[tokio::test]
async fn a_reference_that_does_not_fit_its_parameter_is_counted_apart() {
    let cases = cases().await;
    // The engine takes it (the input has the key); the run would refuse `amount`, a number
    // given the customer's id, a string.
    let s = local_eval::score(
        &cases[0],
        r#"{"plan": [{"_id": "s1", "_tool": "issueRefund", "customerId": "†input.customerId", "amount": "†input.customerId"}]}"#,
    );
    assert!(s.accepted && !s.arguments_fit, "{s:?}");
    assert_eq!(
        s.problem.as_deref(),
        Some("arguments that do not fit: s1.amount = \"†input.customerId\"")
    );
}

#[tokio::test]
async fn a_plan_the_engine_refuses_is_not_accepted_and_says_why() {
    let cases = cases().await;
    // Fits the planner's schema, but names a step that does not exist: the engine's validation
    // (not the schema) refuses it.
    let s = local_eval::score(
        &cases[0],
        r#"{"plan": [{"_id": "s1", "_tool": "issueRefund", "customerId": "†steps.s9", "amount": 5}]}"#,
    );
    assert!(s.parsed && s.schema_valid, "{s:?}");
    assert!(!s.accepted && !s.sensible, "{s:?}");
    assert!(
        s.problem.as_deref().unwrap().starts_with("plan rejected: "),
        "{s:?}"
    );
    assert!(s.problem.as_deref().unwrap().contains("s9"), "{s:?}");
    // An unknown tool fails both.
    let s = local_eval::score(
        &cases[0],
        r#"{"plan": [{"_id": "s1", "_tool": "refundEverything"}]}"#,
    );
    assert!(s.parsed && !s.schema_valid && !s.accepted, "{s:?}");
    assert!(
        s.problem
            .as_deref()
            .unwrap()
            .contains("unknown tool `refundEverything`"),
        "{s:?}"
    );
}

#[tokio::test]
async fn a_valid_plan_that_misses_the_tasks_check_is_accepted_but_not_sensible() {
    let cases = cases().await;
    let s = local_eval::score(
        &cases[0],
        r#"{"plan": [{"_id": "s1", "_tool": "checkBillingHistory", "customerId": "cust_123"}]}"#,
    );
    assert!(s.accepted && !s.sensible, "{s:?}");
    assert!(
        s.problem.as_deref().unwrap().contains("wants issueRefund"),
        "{s:?}"
    );
    let s = local_eval::score(&cases[0], r#"{"direct_response": "Done."}"#);
    assert!(
        s.parsed && s.schema_valid && s.direct && !s.accepted,
        "{s:?}"
    );
}

#[tokio::test]
async fn an_unparseable_reply_scores_nothing() {
    let cases = cases().await;
    for case in &cases {
        let s = local_eval::score(case, "Sure! I will refund your order right away.");
        assert!(
            !s.parsed && !s.schema_valid && !s.accepted && !s.sensible,
            "{s:?}"
        );
        assert!(s.problem.as_deref().unwrap().contains("not JSON"), "{s:?}");
    }
}

#[tokio::test]
async fn workflow_outputs_are_checked_against_the_steps_schema_then_the_task() {
    let cases = cases().await;
    let wf = &cases[1];
    let s = local_eval::score(wf, r#"{"category": "refund", "orderId": "A-1001"}"#);
    assert!(s.accepted && s.sensible, "{s:?}");
    let s = local_eval::score(wf, r#"{"category": "question", "orderId": null}"#);
    assert!(s.accepted && !s.sensible, "{s:?}");
    let s = local_eval::score(wf, r#"{"category": "maybe", "orderId": null}"#);
    assert!(s.parsed && !s.schema_valid && !s.accepted, "{s:?}");
    assert!(
        s.problem
            .as_deref()
            .unwrap()
            .starts_with("output refused: "),
        "{s:?}"
    );
}

#[tokio::test]
async fn a_check_naming_a_tool_the_agent_lacks_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = task_file(
        dir.path(),
        r#"
planner:
  - agent: EXAMPLES/refund-desk.yaml
    task: x
    check: { calls: [getWeather] }
"#,
    );
    let e = local_eval::load(&path).await.err().unwrap().to_string();
    assert!(e.contains("planner[0].check.calls: `getWeather`"), "{e}");
    let path = task_file(
        dir.path(),
        r#"
workflow:
  - agent: EXAMPLES/refund-desk.yaml
    task: x
    check: { equals: { a: 1 } }
"#,
    );
    let e = local_eval::load(&path).await.err().unwrap().to_string();
    assert!(e.contains("workflow[0].agent:"), "{e}");
    assert!(e.contains("need a Workflow agent"), "{e}");
}

#[tokio::test]
async fn summaries_count_what_the_scores_say() {
    let cases = cases().await;
    let replies = [
        r#"{"plan": [{"_id": "s1", "_tool": "issueRefund", "customerId": "c", "amount": 5}]}"#,
        r#"{"plan": [{"_id": "s1", "_tool": "checkBillingHistory", "customerId": "c"}]}"#,
        "no",
    ];
    let records: Vec<CallRecord> = replies
        .iter()
        .enumerate()
        .map(|(i, text)| CallRecord {
            backend: Backend::Prompt,
            kind: Kind::Planner,
            case: cases[0].id.clone(),
            agent: cases[0].agent.clone(),
            seed: i as u64,
            ms: 1000.0 * (i + 1) as f64,
            input_tokens: 100,
            output_tokens: 10 * (i as u64 + 1),
            score: local_eval::score(&cases[0], text),
            error: None,
            reply: (*text).to_owned(),
        })
        .collect();
    let s = local_eval::summarize(&records);
    assert_eq!(s.len(), 1);
    let s = &s[0];
    assert_eq!(
        (
            s.calls,
            s.parsed,
            s.schema_valid,
            s.accepted,
            s.arguments_fit,
            s.sensible
        ),
        (3, 2, 2, 2, 2, 1)
    );
    assert_eq!(s.median_s, 2.0);
    assert_eq!(s.mean_output_tokens, 20.0);
    let table = local_eval::table(std::slice::from_ref(s));
    assert!(table.contains("| planner | server, schema in the prompt | 3 | 2 (67%) | 2 (67%) | 2 (67%) | 2 (67%) | 0 (0%) | 1 (33%) | 2.00 |"), "{table}");
}
