//! Recovery after a crash, and repair of forked sessions. Pure: given the folded state, what
//! to record and which calls to run again.
//!
//! A tool call recorded as started but not finished either completed or not before the process
//! died; nobody knows which. A call of an idempotent tool is run again with the same
//! idempotency key. A call of any other tool is never silently repeated: it is recorded as
//! finished with an `unknown_outcome` error, which goes to the step's failure handling (and in
//! an agent, to the review or the model, which may ask the person).

use crate::engine::{self, Invocation, Limits};
use crate::event::{Event, ToolError, ToolOutcome};
use crate::state::State;
use crate::tool::ToolCatalog;

/// What recovery decided.
#[derive(Debug, Default, PartialEq)]
pub struct Recovery {
    /// Record these first.
    pub events: Vec<Event>,
    /// Then run these again (idempotent calls, with their original ids and keys).
    pub rerun: Vec<Invocation>,
}

/// Decides what to do with the calls that were in flight when the process stopped.
pub fn recover(state: &State, tools: &dyn ToolCatalog, limits: &Limits) -> Recovery {
    let mut out = Recovery::default();
    for (call_id, c) in &state.open_calls {
        let idempotent = tools.tool_info(&c.tool).is_some_and(|t| t.idempotent);
        if idempotent {
            out.rerun.push(Invocation {
                call_id: call_id.clone(),
                step: c.step.clone(),
                tool: c.tool.clone(),
                args: c.args.clone(),
                attempt: c.attempt,
                idempotency_key: c.idempotency_key.clone(),
                delay_ms: 0,
            });
        } else {
            let error = ToolError::new(
                "unknown_outcome",
                format!(
                    "the process stopped while `{}` was running; it may or may not have taken effect, and it is not idempotent, so it was not run again",
                    c.tool
                ),
            )
            .with_detail(serde_json::json!({"idempotency_key": c.idempotency_key, "args": c.args}));
            out.events.extend(engine::tool_finished(
                state,
                limits,
                call_id,
                ToolOutcome::Error { error },
                0,
            ));
        }
    }
    out
}

/// For a fork taken mid-run: every call in flight at the fork point is recorded as interrupted
/// (the fork must never repeat or await the original's side effects).
pub fn interrupt_open_calls(state: &State, limits: &Limits) -> Vec<Event> {
    let mut events = Vec::new();
    for call_id in state.open_calls.keys() {
        let error = ToolError::new(
            "interrupted",
            "the session was forked while this call was running; its result belongs to the original session",
        );
        events.extend(engine::tool_finished(
            state,
            limits,
            call_id,
            ToolOutcome::Error { error },
            0,
        ));
    }
    events
}
