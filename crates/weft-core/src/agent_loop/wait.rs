//! Waiting for a person: the requests a run makes (a question, the approval of a tool call) and
//! how an answer to an approval is read. Shared by every mode.

use serde_json::{Value, json};

use crate::event::InputRequest;
use crate::state::State;

/// Whether a person's answer says yes.
pub(crate) fn is_yes(text: &str) -> bool {
    let t = text.trim().to_ascii_lowercase();
    matches!(
        t.as_str(),
        "y" | "yes" | "approve" | "approved" | "ok" | "okay" | "allow" | "go" | "go ahead"
    )
}

/// The answer a person gave to the approval of call `call_id`, if they gave one.
pub(crate) fn approval<'s>(state: &'s State, call_id: &str) -> Option<&'s str> {
    let prefix = format!("{call_id}=");
    state
        .calls
        .approved
        .iter()
        .find_map(|a| a.strip_prefix(&prefix))
}

/// Asks a person to approve a call of a tool that `requires_approval`.
pub(crate) fn approval_request(
    tool: &str,
    args: &Value,
    step: Option<String>,
    call_id: &str,
) -> InputRequest {
    InputRequest {
        kind: "tool_approval".into(),
        question: format!(
            "Allow the call {tool} {args}? Reply `approve` or `deny` (with a reason)."
        ),
        step,
        tool: Some(tool.to_owned()),
        missing: Vec::new(),
        partial_call: json!({"tool": tool, "arguments": args}),
        plan: None,
        call_id: Some(call_id.to_owned()),
    }
}

/// Asks a person a question (the model's `ask_user`, a review's or a reviewer's question).
pub(crate) fn question(
    question: String,
    step: Option<String>,
    tool: Option<String>,
    call_id: Option<String>,
) -> InputRequest {
    InputRequest {
        kind: "question".into(),
        question,
        step,
        tool,
        missing: Vec::new(),
        partial_call: Value::Null,
        plan: None,
        call_id,
    }
}
