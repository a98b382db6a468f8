//! A session driven on a PostgreSQL that crashes under it (a cluster of the test's own, stopped
//! with `pg_ctl -m immediate` and started again): the appends wait for it, so a tool call that
//! finished while the database was away is recorded with its result once it is back, never as
//! an unknown outcome, and the session goes on to its end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use weft_core::agent::AgentSpec;
use weft_core::{Event, SessionStatus, ToolOutcome};
use weft_model::{ScriptedModel, ScriptedReply};
use weft_runtime::{Agent, Runtime, SessionInfo};
use weft_store::{PgStore, SessionLog};
use weft_testkit::PgCluster;

use crate::support::{Log, Recorder, registry};

/// A ReAct run whose two non-idempotent calls each take 1.5 s; the database crashes 0.5 s into
/// the first and is started again 8 s later (longer than the store waits for a connection,
/// shorter than a lease): both calls run once and
/// are recorded with their results, and the session completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_postgres_a_call_that_finished_while_the_database_was_down_is_recorded_with_its_result()
 {
    let cluster = Arc::new(PgCluster::start("runtime_outage"));
    let store = Arc::new(PgStore::connect(&cluster.url).await.unwrap());
    let log = Arc::new(Log::default());
    let tools = Arc::new(registry(vec![
        Recorder::new("charge", &log)
            .idempotent(false)
            .sleep_ms(1500),
    ]));
    let spec = AgentSpec::parse("t.yaml", "name: t\nmode: react\n").unwrap();
    let model = Arc::new(ScriptedModel::new(
        "t",
        vec![
            ScriptedReply::tool_call("charge", json!({"amount": 1})),
            ScriptedReply::tool_call("charge", json!({"amount": 2})),
            ScriptedReply::text("Charged twice."),
        ],
    ));
    let agent = Agent::new(&spec, Arc::clone(&tools), model, &json!({}), &json!({})).unwrap();
    let rt = Runtime::builder(store.clone(), tools, spec.limits.clone(), None, None).build();
    let outage = {
        let cluster = cluster.clone();
        let log = log.clone();
        tokio::task::spawn_blocking(move || {
            // Crash once the first call has started (its start is stored), 0.5 s into it.
            let began = std::time::Instant::now();
            while !log.any_began() {
                assert!(began.elapsed() < Duration::from_secs(30), "no call began");
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(500));
            cluster.crash();
            std::thread::sleep(Duration::from_secs(8));
            cluster.start_again();
        })
    };
    let s = rt
        .run_agent(&agent, SessionInfo::default(), "Charge twice.", json!({}))
        .await
        .expect("the run rides out an 8 s crash of its database");
    outage.await.unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    assert_eq!(log.calls().len(), 2, "each call ran once");
    let (_, events) = store.load(&s.id).await.unwrap();
    let finished: Vec<&ToolOutcome> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallFinished { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 2, "{finished:?}");
    assert!(
        finished.iter().all(|o| matches!(o, ToolOutcome::Ok { .. })),
        "every call is recorded with its result: {finished:?}"
    );
    // One log, written once: no event is stored twice after an append asked again.
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
}
