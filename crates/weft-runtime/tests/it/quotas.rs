//! Quotas per user in the runtime: the user's counters, in the store, are checked before each
//! model call with what the call may cost at most and added to after it; reaching a quota stops
//! the run with `budget_exceeded` naming it, a second session of the user is held by what the
//! first spent, and the next day (by the runtime's clock) starts again from zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::json;
use weft_core::Event;
use weft_core::agent::AgentSpec;
use weft_core::quota::{Period, Quota, QuotaLimits, Used};
use weft_model::{Prices, ScriptedModel, ScriptedReply};
use weft_runtime::quota::{UserQuota, period_keys};
use weft_runtime::{Agent, Clock, ManualClock, Runtime, SessionInfo};
use weft_store::{RamStore, SessionLog, Usage};

use crate::support as common;

/// 2026-11-26T23:00:00Z: an hour before a new day.
const EVENING: i64 = 1_795_734_000_000;

/// A ReAct agent whose priced model (10 output tokens at most) calls `post` forever.
fn looping_agent() -> Agent {
    let log = Arc::new(common::Log::default());
    let echo = common::Recorder::new("post", &log).behaviour(|_, _| Ok(json!({"ok": true})));
    let tools = Arc::new(common::registry(vec![echo]));
    let spec = AgentSpec::parse(
        "looper.yaml",
        "name: looper\nmode: react\nlimits: { max_iterations: 1000 }\n",
    )
    .unwrap();
    let mut call = ScriptedReply::tool_call("post", json!({}));
    call.repeat = Some(1000);
    let model = ScriptedModel::new("looper", vec![call])
        .with_prices(Prices {
            input_per_mtok: 1000.0,
            output_per_mtok: 2000.0,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
        })
        .with_max_tokens(10);
    Agent::new(&spec, tools, Arc::new(model), &json!({}), &json!({})).unwrap()
}

fn quota(cost_usd: f64) -> UserQuota {
    UserQuota {
        user: "ann".into(),
        quota: Quota {
            day: QuotaLimits {
                cost_usd: Some(cost_usd),
                ..QuotaLimits::default()
            },
            ..Quota::default()
        },
    }
}

fn quota_stop(events: &[weft_core::Envelope]) -> (String, f64, f64, f64) {
    events
        .iter()
        .find_map(|e| match &e.event {
            Event::BudgetExceeded {
                which,
                limit,
                spent,
                call,
            } => Some((which.clone(), *limit, *spent, *call)),
            _ => None,
        })
        .expect("a budget_exceeded event")
}

#[tokio::test]
async fn a_users_quota_holds_across_sessions_and_resets_with_the_day() {
    let clock = ManualClock::starting_at(EVENING);
    let a = looping_agent();
    let store = Arc::new(RamStore::new());
    let rt = Runtime::builder(
        store.clone(),
        a.tools.clone(),
        a.config.limits.clone(),
        Some(quota(0.5)),
        None,
    )
    .clock(clock.clone())
    .build();
    let info = || SessionInfo {
        user_id: Some("ann".into()),
        ..SessionInfo::default()
    };
    let first = rt.run_agent(&a, info(), "Loop.", json!({})).await.unwrap();
    let (_, events) = store.load(&first.id).await.unwrap();
    let (which, limit, spent, call) = quota_stop(&events);
    assert_eq!(which, "user.day.cost_usd");
    assert_eq!(limit, 0.5);
    assert!(
        spent <= limit && spent + call > limit,
        "{spent} + {call} vs {limit}"
    );
    assert_eq!(first.state.status(), weft_core::SessionStatus::Failed);
    // The store's counters are what the session spent, to the token.
    let counted = store.usage("ann", &period_keys(EVENING)).await.unwrap();
    let s = &first.state.spending().session;
    assert_eq!(counted[0].input_tokens, s.input_tokens);
    assert_eq!(counted[0].output_tokens, s.output_tokens);
    assert_eq!(counted[0].model_calls, s.model_calls);
    assert!((counted[0].cost_usd - s.cost_usd).abs() < 1e-9);
    assert!((counted[0].cost_usd - spent).abs() < 1e-9);
    assert_eq!(counted[0], counted[1], "the month counts the same calls");

    // A second session of the user starts from what the first spent: the quota is theirs,
    // not a session's. Its first calls (shorter requests) may still fit; the user's total
    // never passes the quota, one process making one call at a time.
    let second = rt.run_agent(&a, info(), "Loop.", json!({})).await.unwrap();
    let (_, events) = store.load(&second.id).await.unwrap();
    let (which, _, spent2, _) = quota_stop(&events);
    assert_eq!(which, "user.day.cost_usd");
    assert!(spent2 >= spent, "{spent2} < {spent}");
    let day = &store.usage("ann", &period_keys(EVENING)).await.unwrap()[0];
    assert!(day.cost_usd <= 0.5, "{}", day.cost_usd);
    assert!(
        second.state.spending().session.model_calls < first.state.spending().session.model_calls
    );

    // An hour later it is another day: its counter starts from zero and the user may spend
    // again (the month's counter goes on from what was spent).
    clock.advance(3_600_000);
    assert_ne!(Period::Day.key(EVENING), Period::Day.key(clock.now_ms()));
    let third = rt.run_agent(&a, info(), "Loop.", json!({})).await.unwrap();
    assert!(third.state.spending().session.model_calls > 0);
    let next = store
        .usage("ann", &period_keys(clock.now_ms()))
        .await
        .unwrap();
    assert!((next[0].cost_usd - third.state.spending().session.cost_usd).abs() < 1e-9);
    assert!(next[1].cost_usd > next[0].cost_usd);
    let month: Used = next[1].clone();
    assert_eq!(
        month.model_calls,
        first.state.spending().session.model_calls
            + second.state.spending().session.model_calls
            + third.state.spending().session.model_calls
    );
}

#[tokio::test]
async fn a_quota_reached_with_on_budget_ask_waits_for_a_person() {
    let a = looping_agent();
    let mut a = a;
    a.config.budget = Some(
        weft_core::budget::Budget::default()
            .with_overrides("on_budget=ask")
            .unwrap(),
    );
    let store = Arc::new(RamStore::new());
    let rt = Runtime::builder(
        store.clone(),
        a.tools.clone(),
        a.config.limits.clone(),
        Some(quota(0.2)),
        None,
    )
    .clock(ManualClock::starting_at(EVENING))
    .build();
    let s = rt
        .run_agent(&a, SessionInfo::default(), "Loop.", json!({}))
        .await
        .unwrap();
    assert_eq!(s.state.status(), weft_core::SessionStatus::WaitingForUser);
    let (_, events) = store.load(&s.id).await.unwrap();
    let Some(Event::WaitingForUser { request }) = events.last().map(|e| &e.event) else {
        panic!("the session waits");
    };
    assert_eq!(request.kind, weft_core::budget::WAIT_KIND);
    assert!(
        request.question.contains("quota reached"),
        "{}",
        request.question
    );
}
