//! What the current run ran (its calls that finished, with their signatures and outcomes),
//! kept in the [`Turn`](super::Turn): a new call with the signature of one of them is a repeat,
//! and meets the agent file's `repeats:` rules (see [`crate::repeats`]).

use serde::{Deserialize, Serialize};

use super::OpenCall;
use crate::event::ToolOutcome;
use crate::repeats::call_signature;

/// A call of the run that ran: what a repeat of it is given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ran {
    /// The call's signature ([`call_signature`]).
    pub signature: String,
    /// The call's id.
    pub call_id: String,
    /// How it ended.
    pub outcome: ToolOutcome,
}

/// The calls the current run ran, in the order they finished (call N is the N-th).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// The calls, in order.
    pub ran: Vec<Ran>,
}

impl Ledger {
    /// Whether the run ran no call yet.
    pub fn is_empty(&self) -> bool {
        self.ran.is_empty()
    }

    /// Call `call_id`, started as `call`, finished with `outcome`. A fan-out item's call is not
    /// kept (its step runs the same tool over items by design).
    pub(crate) fn finished(&mut self, call_id: &str, call: &OpenCall, outcome: &ToolOutcome) {
        if call.item.is_some() {
            return;
        }
        self.ran.push(Ran {
            signature: call_signature(&call.tool, &call.args),
            call_id: call_id.to_owned(),
            outcome: outcome.clone(),
        });
    }

    /// The first earlier call with this signature, and its number (from 1).
    pub(crate) fn earlier(&self, signature: &str) -> Option<(usize, &Ran)> {
        self.ran
            .iter()
            .enumerate()
            .find(|(_, r)| r.signature == signature)
            .map(|(i, r)| (i + 1, r))
    }
}
