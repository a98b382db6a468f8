//! The repeat check every mode makes before a call of a tool that is not idempotent (see
//! [`crate::repeats`] for what a repeat is): the earlier call of the run it repeats, and what
//! the model (or the step) is told in place of its result.

use serde_json::Value;

use crate::event::{Event, ToolOutcome};
use crate::model::value_text;
use crate::repeats::{Policy, Rules, call_signature};
use crate::state::{Ran, State};
use crate::tool::ToolInfo;

/// A repeat: the earlier call it repeats and what to do.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Repeat<'s> {
    /// The earlier call's number in the run, from 1.
    pub(super) n: usize,
    /// The earlier call.
    pub(super) earlier: &'s Ran,
    /// What the agent file says to do (never `allow`).
    pub(super) policy: Policy,
}

/// Whether a call of `tool` with `args` in the current run is a repeat to refuse or ask about:
/// `None` for an idempotent tool, a first call, or a tool whose policy is `allow`.
pub(super) fn check<'s>(
    state: &'s State,
    rules: &Rules,
    tool: &ToolInfo,
    args: &Value,
) -> Option<Repeat<'s>> {
    if tool.idempotent {
        return None;
    }
    let policy = rules.policy(&tool.name);
    if policy == Policy::Allow {
        return None;
    }
    let (n, earlier) = state
        .turn
        .repeats
        .earlier(&call_signature(&tool.name, args))?;
    Some(Repeat { n, earlier, policy })
}

impl Repeat<'_> {
    /// What the model (or the step) is told in place of the call's result.
    pub(super) fn note(&self, tool: &str) -> String {
        let result = match &self.earlier.outcome {
            ToolOutcome::Ok { output } => value_text(output),
            ToolOutcome::Error { error } => {
                format!("error: {}", error.bounded().to_value())
            }
        };
        format!(
            "not run again: this call repeats call {} of this run (`{tool}` with the same arguments, id {}), and `{tool}` is not idempotent. The earlier call's result: {result}",
            self.n, self.earlier.call_id
        )
    }

    /// The event that records the refusal of call `call_id` (the model's id; `None` for a plan
    /// step's call).
    pub(super) fn refused(
        &self,
        step: Option<String>,
        call_id: Option<String>,
        tool: &str,
        args: &Value,
    ) -> Event {
        Event::ToolCallBlocked {
            step,
            call_id,
            tool: tool.to_owned(),
            args: args.clone(),
            reason: self.note(tool),
            repeats: Some(self.earlier.call_id.clone()),
        }
    }

    /// The question a person is asked under `ask`.
    pub(super) fn question(&self, tool: &str, args: &Value) -> String {
        format!(
            "The call {tool} {args} repeats call {} of this run (id {}), which already ran, and `{tool}` is not idempotent. Run it again? Reply `approve` or `deny` (with a reason).",
            self.n, self.earlier.call_id
        )
    }
}
