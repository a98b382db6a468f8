//! Usage: model calls made, by purpose, and the tokens (and cost) they used.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::model::{Purpose, Usage};

/// The session's model calls and what they used, across turns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelUse {
    /// Model replies recorded (a scripted model's position in its script).
    pub calls: u32,
    /// Model replies recorded, by purpose.
    pub by_purpose: BTreeMap<Purpose, u32>,
    /// Tokens and cost, failed calls' included.
    pub tokens: Usage,
}

impl ModelUse {
    pub(super) fn apply(&mut self, event: &Event) {
        match event {
            Event::ModelReplied { purpose, reply, .. } => {
                self.tokens.add(&reply.usage);
                self.calls = self.calls.saturating_add(1);
                let n = self.by_purpose.entry(*purpose).or_default();
                *n = n.saturating_add(1);
            }
            Event::ModelFailed { usage, .. } => self.tokens.add(usage),
            _ => {}
        }
    }
}
