//! Usage: model calls made, by purpose, and the tokens (and cost) they used.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::budget::Spent;
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

/// What the current run and the session have spent, derived from the log (never reset by a
/// resume, a takeover or a fork), and the budget the session was given last (`budget_set`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spending {
    /// Spent by the current task, from its `turn_started`.
    pub run: Spent,
    /// Spent by the whole session.
    pub session: Spent,
    /// The position of the current task's `turn_started` in the log (0 before any task).
    pub run_started_seq: u64,
    /// The budget recorded last (it replaces the agent file's); `None` when none was.
    pub budget: Option<crate::budget::Budget>,
}

impl Spending {
    /// Applies an event; `seq` is its position in the log.
    pub(super) fn apply(&mut self, event: &Event, seq: u64) {
        match event {
            Event::TurnStarted { .. } => {
                self.run = Spent::default();
                self.run_started_seq = seq;
            }
            Event::ModelReplied { reply, .. } => {
                self.run.model_call(&reply.usage);
                self.session.model_call(&reply.usage);
            }
            Event::ModelFailed { usage, .. } => {
                self.run.model_call(usage);
                self.session.model_call(usage);
            }
            Event::ToolCallStarted { tool, .. } => {
                self.run.tool_call(tool);
                self.session.tool_call(tool);
            }
            Event::BudgetSet { budget } => self.budget = Some(budget.clone()),
            _ => {}
        }
    }
}
