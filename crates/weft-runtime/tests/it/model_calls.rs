//! A session's model calls read back from its log (`weft_core::model_calls`): each request the
//! model received is the one rebuilt by folding the log, the parsed decision is what the log
//! recorded after the reply, refusals are attributed to their call, and the calls' tokens add
//! up to the session's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents::{Harness, TestTool, j, script, t};
use serde_json::{Value, json};
use weft_core::Event;
use weft_core::model::{Purpose, Usage};
use weft_core::model_calls::{self, CallOutcome, RebuildError};
use weft_model::ScriptedReply;
use weft_store::SessionLog;

fn used(mut r: ScriptedReply, input: u64, output: u64, cost: f64) -> ScriptedReply {
    r.usage = Some(Usage {
        input_tokens: input,
        output_tokens: output,
        cost_usd: Some(cost),
        ..Usage::default()
    });
    r
}

fn lookup() -> TestTool {
    TestTool::new(
        "lookupOrder",
        "orders",
        json!({"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]}),
        |a| Ok(json!({"orderId": a["orderId"], "status": "shipped"})),
    )
}

/// A plan session whose first plan is refused (an unknown tool), then planned again, run,
/// reviewed and answered: six model calls.
fn harness() -> Harness {
    Harness::new(
        "name: test\nmode: plan\n",
        vec![lookup()],
        script(vec![
            (
                Purpose::Plan,
                vec![
                    used(
                        j(json!({"plan": [{"_id": "a", "_tool": "lookupOrdr", "orderId": "o1"}]})),
                        120,
                        30,
                        0.002,
                    ),
                    used(
                        j(
                            json!({"plan": [{"_id": "a", "_tool": "lookupOrder", "orderId": "o1", "_outputPath": "†state.order"}]}),
                        ),
                        180,
                        35,
                        0.003,
                    ),
                ],
            ),
            (
                Purpose::Review,
                vec![used(
                    j(json!({"decision": "FINAL_RESPONSE"})),
                    220,
                    10,
                    0.001,
                )],
            ),
            (
                Purpose::Respond,
                vec![used(
                    t("Order o1 has shipped.").delayed(150),
                    260,
                    12,
                    0.004,
                )],
            ),
            (
                Purpose::ResponseReview,
                vec![used(j(json!({"verdict": "ACCEPT"})), 300, 5, 0.001)],
            ),
        ]),
        &json!({}),
    )
}

#[tokio::test]
async fn each_rebuilt_request_equals_the_one_the_model_received() {
    let h = harness();
    let s = h.run("Where is order o1?", json!({})).await;
    assert_eq!(s.state.status(), weft_core::SessionStatus::Completed);
    let (_, envs) = h.store.load(&s.id).await.unwrap();
    let sent: Vec<Value> = h
        .requests
        .all()
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let mut rebuilt = Vec::new();
    model_calls::rebuild(&envs, &h.agent.config, None, |r| rebuilt.push(r)).unwrap();
    assert_eq!(sent.len(), 5, "the calls of the script");
    assert_eq!(rebuilt.len(), sent.len());
    for (r, s) in rebuilt.iter().zip(&sent) {
        assert_eq!(
            &serde_json::to_value(&r.request).unwrap(),
            s,
            "call {}",
            r.n
        );
    }
    // One call asked for alone is the same request, folded only up to it.
    let mut third = None;
    model_calls::rebuild(&envs, &h.agent.config, Some(3), |r| third = Some(r)).unwrap();
    let third = third.unwrap();
    assert_eq!(serde_json::to_value(&third.request).unwrap(), sent[2]);
    assert_eq!(third.request.purpose, Purpose::Review);
}

#[tokio::test]
async fn a_decision_is_what_the_log_recorded_after_the_reply() {
    let h = harness();
    let s = h.run("Where is order o1?", json!({})).await;
    let (_, envs) = h.store.load(&s.id).await.unwrap();
    let mut all = Vec::new();
    model_calls::rebuild(&envs, &h.agent.config, None, |r| all.push(r)).unwrap();
    for r in &all {
        let at = envs.iter().position(|e| e.seq == r.seq).unwrap();
        let logged: Vec<&Event> = envs[at + 1..at + 1 + r.decision.len()]
            .iter()
            .map(|e| &e.event)
            .collect();
        assert_eq!(
            logged,
            r.decision.iter().collect::<Vec<_>>(),
            "call {}",
            r.n
        );
    }
    // The first plan is refused, the second accepted with its step.
    assert!(matches!(all[0].decision[0], Event::PlanRejected { .. }));
    let Event::PlanAccepted { plan } = &all[1].decision[0] else {
        panic!("{:?}", all[1].decision);
    };
    assert_eq!(plan.steps[0].tool.as_deref(), Some("lookupOrder"));
}

#[tokio::test]
async fn calls_name_refusals_and_retries_and_add_up_to_the_session() {
    let h = harness();
    let s = h.run("Where is order o1?", json!({})).await;
    let (_, envs) = h.store.load(&s.id).await.unwrap();
    let calls = model_calls::calls(&envs);
    let purposes: Vec<&str> = calls.iter().map(|c| c.purpose.as_str()).collect();
    assert_eq!(
        purposes,
        ["plan", "plan", "review", "respond", "response_review"]
    );
    assert_eq!(calls[0].outcome, CallOutcome::Rejected);
    let reason = calls[0].reason.as_deref().unwrap();
    assert!(reason.contains("lookupOrdr"), "{reason}");
    assert_eq!((calls[0].attempt, calls[1].attempt), (1, 2));
    assert_eq!(calls[1].outcome, CallOutcome::Replied);
    assert_eq!(
        calls.iter().map(|c| c.n).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    let mut sum = Usage::default();
    for c in &calls {
        sum.add(&c.usage);
        assert!(c.started_ms <= envs.iter().find(|e| e.seq == c.seq).unwrap().ts);
    }
    assert_eq!(sum.input_tokens, s.state.usage().tokens.input_tokens);
    assert_eq!(sum.output_tokens, s.state.usage().tokens.output_tokens);
    assert_eq!(
        (sum.input_tokens, sum.output_tokens),
        (1080, 92),
        "the script's tokens"
    );
    assert!((sum.cost_usd.unwrap() - s.state.usage().tokens.cost_usd.unwrap()).abs() < 1e-12);
}

#[tokio::test]
async fn a_call_the_agent_file_no_longer_makes_is_not_rebuilt() {
    let h = harness();
    let s = h.run("Where is order o1?", json!({})).await;
    let (_, envs) = h.store.load(&s.id).await.unwrap();
    let mut react = h.agent.config.clone();
    react.mode = weft_core::agent::Mode::React;
    let e = model_calls::rebuild(&envs, &react, Some(1), |_| {}).unwrap_err();
    assert!(matches!(e, RebuildError::Diverged { .. }), "{e}");
    let e = model_calls::rebuild(&envs, &h.agent.config, Some(9), |_| {}).unwrap_err();
    assert_eq!(e, RebuildError::NoSuchCall { n: 9, have: 5 });
    assert_eq!(
        e.to_string(),
        "the session has 5 model call(s); there is no call 9"
    );
}

#[tokio::test]
async fn a_calls_latency_and_first_token_are_measured_around_it() {
    let mut h = harness();
    // With an observer the answer's text streams, so its first piece is timed.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    h.runtime = weft_runtime::Runtime::builder(
        h.store.clone(),
        h.agent.tools.clone(),
        h.agent.config.limits.clone(),
        None,
        None,
    )
    .observe(std::sync::Arc::new(move |e: &weft_core::Envelope| {
        if matches!(e.event, Event::TextDelta { .. }) {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }))
    .build();
    let s = h.run("Where is order o1?", json!({})).await;
    assert!(
        seen.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the answer streamed"
    );
    let (_, envs) = h.store.load(&s.id).await.unwrap();
    let calls = model_calls::calls(&envs);
    let respond = calls.iter().find(|c| c.purpose == "respond").unwrap();
    assert!(respond.latency_ms >= 150, "{respond:?}");
    let ttft = respond.ttft_ms.expect("the answer's first token is timed");
    assert!((150..=respond.latency_ms).contains(&ttft), "{respond:?}");
    // The stored reply holds the timing the list reads.
    let stored = envs
        .iter()
        .find_map(|e| match &e.event {
            Event::ModelReplied { reply, .. } if e.seq == respond.seq => reply.timing,
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (stored.latency_ms, stored.ttft_ms),
        (respond.latency_ms, Some(ttft))
    );
    // A plan's reply does not stream: no first token, a latency all the same.
    let plan = &calls[1];
    assert_eq!((plan.purpose.as_str(), plan.ttft_ms), ("plan", None));
}
