//! When a call's start is stored: before a tool that is not idempotent runs; with its outcome,
//! in one append, for an idempotent tool that finishes on its first poll; and while it runs,
//! for an idempotent tool that goes on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::{Event, SessionStatus, ToolError, ToolInfo};
use weft_model::{ScriptedModel, ScriptedReply};
use weft_runtime::{Agent, Runtime, SessionInfo};
use weft_store::{RamStore, SessionLog};
use weft_tools::{Registry, Tool, ToolContext};

/// A tool that looks in the store, when it starts and again after `wait_ms`, for the start of
/// the call it serves.
struct Probe {
    info: ToolInfo,
    store: Arc<RamStore>,
    wait_ms: u64,
    /// (start stored when the call began, start stored after the wait)
    seen: Arc<Mutex<Vec<(bool, bool)>>>,
}

impl Probe {
    async fn start_stored(&self, session: &str, call_id: &str) -> bool {
        let (_, log) = self.store.load(session).await.unwrap();
        log.iter()
            .any(|e| matches!(&e.event, Event::ToolCallStarted { call_id: c, .. } if c == call_id))
    }
}

impl Tool for Probe {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    async fn call(&self, _args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let before = self.start_stored(&ctx.session_id, &ctx.call_id).await;
        if self.wait_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.wait_ms)).await;
        }
        let after = self.start_stored(&ctx.session_id, &ctx.call_id).await;
        self.seen.lock().unwrap().push((before, after));
        Ok(json!({"ok": true}))
    }
}

/// Runs a ReAct agent that calls the probe twice, then answers; returns what the probe saw
/// and the stored log.
async fn run(idempotent: bool, wait_ms: u64) -> (Vec<(bool, bool)>, Vec<Event>) {
    let store = Arc::new(RamStore::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut reg = Registry::new();
    reg.register(Probe {
        info: ToolInfo {
            name: "probe".into(),
            description: "Looks for its own start in the store.".into(),
            category: None,
            input_schema: json!({"type": "object"}),
            idempotent,
            parallel: true,
            requires_approval: false,
            source: "test".into(),
            output_schema: None,
        },
        store: Arc::clone(&store),
        wait_ms,
        seen: Arc::clone(&seen),
    })
    .unwrap();
    let tools = Arc::new(reg);
    let spec = AgentSpec::parse("t.yaml", "name: t\nmode: react\nrepeats: allow\n").unwrap();
    let mut call = ScriptedReply::tool_call("probe", json!({}));
    call.repeat = Some(2);
    let model = Arc::new(ScriptedModel::new(
        "t",
        vec![call, ScriptedReply::text("done")],
    ));
    let agent = Agent::new(&spec, Arc::clone(&tools), model, &Value::Null, &Value::Null).unwrap();
    let rt = Runtime::builder(Arc::clone(&store), tools, spec.limits.clone(), None, None).build();
    let session = rt
        .run_agent(&agent, SessionInfo::default(), "go", Value::Null)
        .await
        .unwrap();
    assert_eq!(session.state.status(), SessionStatus::Completed);
    let (_, log) = store.load(&session.id).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (seen, log.into_iter().map(|e| e.event).collect())
}

/// Every call's start, then its finish, each once, in the stored log.
fn assert_bracketed(log: &[Event]) {
    let mut open = Vec::new();
    let mut finished = 0;
    for e in log {
        match e {
            Event::ToolCallStarted { call_id, .. } => open.push(call_id.clone()),
            Event::ToolCallFinished { call_id, .. } => {
                assert!(
                    open.contains(call_id),
                    "{call_id} finished before it started"
                );
                finished += 1;
            }
            _ => {}
        }
    }
    assert_eq!((open.len(), finished), (2, 2), "{log:?}");
}

#[tokio::test]
async fn a_tool_that_is_not_idempotent_runs_only_once_its_start_is_stored() {
    let (seen, log) = run(false, 0).await;
    assert_eq!(seen, [(true, true), (true, true)]);
    assert_bracketed(&log);
}

#[tokio::test]
async fn a_quick_idempotent_call_is_stored_with_its_outcome() {
    let (seen, log) = run(true, 0).await;
    // It ran before its start was stored, and finished on its first poll: the start went to
    // the store with the outcome.
    assert_eq!(seen, [(false, false), (false, false)]);
    assert_bracketed(&log);
}

#[tokio::test]
async fn an_idempotent_call_that_goes_on_has_its_start_stored_while_it_runs() {
    let (seen, log) = run(true, 30).await;
    assert_eq!(seen, [(false, true), (false, true)]);
    assert_bracketed(&log);
}
