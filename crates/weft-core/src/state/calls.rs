//! Calls in flight: the tool calls started and not finished, and the count of starts that
//! idempotency keys are numbered by.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A call that was started and has not finished.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenCall {
    /// The plan step (or workflow step) the call serves; `None` for the model's own call.
    pub step: Option<String>,
    /// The item of a fan-out step the call serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
    /// The tool's name.
    pub tool: String,
    /// The call's arguments.
    pub args: Value,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// The key the tool is given to recognise a repeat of the call (see [`super::call_key`]).
    pub idempotency_key: String,
}

/// The session's tool calls: those in flight, how many were ever started, and the answers a
/// person gave to approvals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calls {
    /// Calls started and not finished, by call id.
    pub open: BTreeMap<String, OpenCall>,
    /// `tool_call_started` events so far (a new call's key is numbered after them).
    pub started: u64,
    /// Answers to approvals of the model's tool calls, as `CALL_ID=ANSWER` (ReAct).
    pub approved: Vec<String>,
}

impl Calls {
    /// Call `call_id` started.
    pub(super) fn start(&mut self, call_id: &str, call: OpenCall) {
        self.started = self.started.saturating_add(1);
        self.open.insert(call_id.to_owned(), call);
    }

    /// Call `call_id` finished: its record, if it was in flight.
    pub(super) fn finish(&mut self, call_id: &str) -> Option<OpenCall> {
        self.open.remove(call_id)
    }
}
