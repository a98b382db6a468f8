//! Where a workflow session stands (`mode: workflow`): its step, the transitions and turns
//! taken, and each step's accepted output. The agent file's workflow (its steps and routes) is
//! `crate::workflow`'s; the loop that runs it is `agent_loop::workflow`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::ToolOutcome;

/// The run-time record of a workflow session (part of [`State`](super::State)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRun {
    /// The step the session is in; `None` before a message enters and after `end` or `wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) step: Option<String>,
    /// Whether a step was entered before in this session (a later message uses `reentry`).
    #[serde(default)]
    pub(crate) entered: bool,
    /// Transitions taken since the last message came in (bounded by `max_transitions`).
    #[serde(default)]
    pub(crate) transitions: u32,
    /// Model turns in the current step.
    #[serde(default)]
    pub(crate) turns: u32,
    /// Outputs of the current step refused so far.
    #[serde(default)]
    pub(crate) rejected: u32,
    /// The reason the last output was refused (the delegated agent's next task says it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) feedback: Option<String>,
    /// The outcome of the current step's agent, once it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delegated: Option<ToolOutcome>,
    /// Whether the current step's agent is running.
    #[serde(default)]
    pub(crate) delegating: bool,
    /// Each step's last accepted output (`steps.<name>.output`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) outputs: BTreeMap<String, Value>,
    /// The last text given to the user since the last message came in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reply: Option<String>,
    /// The steps entered since the last message came in, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) path: Vec<String>,
}

impl WorkflowRun {
    /// The step the session is in; `None` before a message enters and after `end` or `wait`.
    pub fn step(&self) -> Option<&str> {
        self.step.as_deref()
    }

    /// Each step's last accepted output (`steps.<name>.output`).
    pub fn outputs(&self) -> &BTreeMap<String, Value> {
        &self.outputs
    }

    /// The steps entered since the last message came in, in order.
    pub fn path(&self) -> &[String] {
        &self.path
    }

    /// A new message came in (a new task, or the answer to a `wait`): no step yet.
    pub fn message_in(&mut self) {
        self.step = None;
        self.transitions = 0;
        self.reply = None;
        self.path.clear();
        self.leave();
    }

    /// Forgets what belonged to the step that was current.
    fn leave(&mut self) {
        self.turns = 0;
        self.rejected = 0;
        self.feedback = None;
        self.delegated = None;
        self.delegating = false;
    }

    /// The session entered `step`: it goes on the path, and what belonged to the step before
    /// is forgotten.
    pub fn enter(&mut self, step: &str) {
        self.step = Some(step.to_owned());
        self.entered = true;
        self.path.push(step.to_owned());
        self.leave();
    }

    /// `steps` as expressions see it: `steps.<name>.output`.
    pub fn steps_value(&self) -> Value {
        Value::Object(
            self.outputs
                .iter()
                .map(|(k, v)| {
                    let mut m = Map::new();
                    m.insert("output".into(), v.clone());
                    (k.clone(), Value::Object(m))
                })
                .collect(),
        )
    }
}
