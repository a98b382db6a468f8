//! Starting a session under a given id: one whose row exists without events (its creator died
//! between two writes) is taken over; one with events is refused and left as it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::{Event, SessionStatus};
use weft_model::{ScriptedModel, ScriptedReply};
use weft_runtime::{Agent, Runtime, RuntimeError, SessionInfo};
use weft_store::{NewSession, RamStore, SessionLog, StoreError};
use weft_tools::{Echo, Registry};

#[tokio::test]
async fn an_empty_session_is_taken_over_and_a_started_one_is_refused() {
    let store = Arc::new(RamStore::new());
    store
        .create(
            NewSession {
                id: "s1".into(),
                agent: "t".into(),
                metadata: json!({}),
                ..NewSession::default()
            },
            1,
        )
        .await
        .unwrap();
    let mut reg = Registry::new();
    reg.register(Echo::default()).unwrap();
    let tools = Arc::new(reg);
    let spec = AgentSpec::parse("t.yaml", "name: t\nmode: react\n").unwrap();
    let model = Arc::new(ScriptedModel::new(
        "t",
        vec![ScriptedReply::text("one"), ScriptedReply::text("two")],
    ));
    let agent = Agent::new(&spec, Arc::clone(&tools), model, &Value::Null, &Value::Null).unwrap();
    let rt = Runtime::builder(Arc::clone(&store), tools, spec.limits.clone(), None, None).build();
    let info = SessionInfo {
        id: Some("s1".into()),
        ..SessionInfo::default()
    };
    let s = rt
        .run_agent(&agent, info.clone(), "go", Value::Null)
        .await
        .unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    let (_, log) = store.load("s1").await.unwrap();
    assert!(
        matches!(&log[0].event, Event::SessionStarted { session_id, .. } if session_id == "s1")
    );
    let n = log.len();
    let again = rt.run_agent(&agent, info, "go", Value::Null).await;
    assert!(
        matches!(again, Err(RuntimeError::Store(StoreError::Exists(ref id))) if id == "s1"),
        "{:?}",
        again.err()
    );
    assert_eq!(store.load("s1").await.unwrap().1.len(), n);
}
