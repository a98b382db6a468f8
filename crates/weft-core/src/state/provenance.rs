//! Where the untrusted data of a session came from (see [`crate::trust`]): folded from the
//! labels that `tool_call_started` records (`untrusted_from`: the calls the output's untrusted
//! data comes from), so a resume, a fork, a worker and a replica see the labels the first
//! process saw, whatever the agent file says now.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// At most this many sources are kept in one label; a label that reached it stays untrusted
/// (only the list of where from is cut).
pub const MAX_SOURCES: usize = 32;

/// The calls (by id) that untrusted data came from; empty when the data is trusted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sources(BTreeSet<String>);

impl Sources {
    /// Whether the data is trusted (it came from no untrusted call).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds the sources of `other`, up to [`MAX_SOURCES`].
    pub fn extend(&mut self, other: &Self) {
        for s in &other.0 {
            self.add(s);
        }
    }

    /// Adds one source, up to [`MAX_SOURCES`].
    pub fn add(&mut self, call_id: &str) {
        if self.0.len() < MAX_SOURCES {
            self.0.insert(call_id.to_owned());
        }
    }

    /// The call ids, in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// The label as `tool_call_started` records it.
    pub fn to_vec(&self) -> Vec<String> {
        self.0.iter().cloned().collect()
    }

    /// A label recorded by `tool_call_started`.
    pub fn from_ids(ids: &[String]) -> Self {
        let mut s = Self::default();
        for id in ids {
            s.add(id);
        }
        s
    }
}

/// The labels of a session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// This turn's calls whose output is untrusted, by call id, and the tool each called.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) calls: BTreeMap<String, (String, Sources)>,
    /// This turn's plan steps whose output is untrusted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) steps: BTreeMap<String, Sources>,
    /// The untrusted outputs that ended this turn (what its later model calls may have read).
    #[serde(default, skip_serializing_if = "Sources::is_empty")]
    pub(crate) turn: Sources,
    /// The untrusted data the session's conversation holds: every later model call reads it.
    #[serde(default, skip_serializing_if = "Sources::is_empty")]
    pub(crate) conversation: Sources,
    /// The untrusted data written into the State (`_outputPath`), for `†state` references.
    #[serde(default, skip_serializing_if = "Sources::is_empty")]
    pub(crate) state: Sources,
    /// What the writer of the current plan had read: the label of its literal values.
    #[serde(default, skip_serializing_if = "Sources::is_empty")]
    pub(crate) plan: Sources,
}

impl Provenance {
    /// Whether nothing untrusted was seen (the serialised State leaves it out then).
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// A call started with the label `untrusted_from`.
    pub(crate) fn started(&mut self, call_id: &str, tool: &str, untrusted_from: &[String]) {
        if !untrusted_from.is_empty() {
            self.calls.insert(
                call_id.to_owned(),
                (tool.to_owned(), Sources::from_ids(untrusted_from)),
            );
        }
    }

    /// A call ended, or a refused repeat answered with its output: where its untrusted data
    /// went. `step` is the plan step it served (`None` for a model's own call or outside a
    /// plan); `to_state` when the step writes its output into the State.
    pub(crate) fn output_read(&mut self, call_id: &str, step: Option<&str>, to_state: bool) {
        let Some((_, sources)) = self.calls.get(call_id) else {
            return;
        };
        let sources = sources.clone();
        self.turn.extend(&sources);
        match step {
            Some(s) => {
                self.steps.entry(s.to_owned()).or_default().extend(&sources);
                if to_state {
                    self.state.extend(&sources);
                }
            }
            None => self.conversation.extend(&sources),
        }
    }

    /// A plan step's executor answered without a call (`DIRECT_RESPONSE`,
    /// `DESIGN_INSTRUCTIONS`, a quarantined step's value): the step's output carries `label`,
    /// what the executor had read (`State::executor_read`), as its calls' arguments do.
    pub(crate) fn step_answered(&mut self, step: &str, label: &Sources, to_state: bool) {
        if label.is_empty() {
            return;
        }
        if to_state {
            self.state.extend(label);
        }
        self.steps.entry(step.to_owned()).or_default().extend(label);
    }

    /// A workflow step's output was assigned into the State: the model that wrote it had read
    /// the conversation and this turn's results, and `†state` references now read them too.
    pub(crate) fn assigned(&mut self) {
        let mut label = self.conversation.clone();
        label.extend(&self.turn);
        self.state.extend(&label);
    }

    /// Everything a model of this turn may have read: the conversation, this turn's results and
    /// what the current plan's writer had read (a step executor reads less:
    /// `State::executor_read`).
    pub(crate) fn read(&self) -> Sources {
        let mut label = self.conversation.clone();
        label.extend(&self.turn);
        label.extend(&self.plan);
        label
    }

    /// A plan was accepted or revised: its literal values carry what its writer had read.
    pub(crate) fn plan_written(&mut self) {
        let mut label = self.conversation.clone();
        label.extend(&self.turn);
        self.plan = label;
    }

    /// A new turn. In plan mode the last turn's answer joins the conversation, so what it was
    /// written from does too.
    pub(crate) fn turn_started(&mut self, plan_mode: bool) {
        if plan_mode {
            let turn = std::mem::take(&mut self.turn);
            self.conversation.extend(&turn);
        }
        self.turn = Sources::default();
        self.calls.clear();
        self.steps.clear();
        self.plan = Sources::default();
    }

    /// The untrusted data the session's conversation holds (every later model call reads it).
    pub fn conversation(&self) -> &Sources {
        &self.conversation
    }

    /// The label of plan step `step`'s output in this turn (empty: trusted).
    pub fn step(&self, step: &str) -> Sources {
        self.steps.get(step).cloned().unwrap_or_default()
    }

    /// The tool call `call_id` that data came from, for messages.
    pub fn tool_of(&self, call_id: &str) -> Option<&str> {
        self.calls.get(call_id).map(|(t, _)| t.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::event::Event;
    use crate::state::State;

    /// A workflow session that read an untrusted inbox (`c1`), then accepted a step's output.
    fn workflow(assigned: Value) -> Result<State, serde_json::Error> {
        let mut state = State::new();
        for e in [
            json!({"type": "session_started", "session_id": "w", "agent": "a", "input": {}, "mode": "workflow"}),
            json!({"type": "turn_started", "task": "pay", "input": {}}),
            json!({"type": "tool_call_started", "call_id": "c1", "tool": "read_inbox", "args": {},
                   "attempt": 1, "idempotency_key": "w:1", "untrusted_from": ["c1"]}),
            json!({"type": "tool_call_finished", "call_id": "c1", "duration_ms": 1,
                   "outcome": {"status": "ok", "output": {"iban": "XX00ATTACKER"}}}),
            json!({"type": "workflow_output_accepted", "step": "read", "output": {"iban": "XX00ATTACKER"},
                   "assigned": assigned}),
        ] {
            state.apply(&serde_json::from_value::<Event>(e)?);
        }
        Ok(state)
    }

    /// What a workflow step's `assign` writes into the State was written by a model that had
    /// read the inbox: `†state` references carry the inbox's label; a step that assigned nothing
    /// leaves the State's label as it was.
    #[test]
    fn a_workflow_steps_assigned_output_carries_what_its_model_read()
    -> Result<(), serde_json::Error> {
        let assigned = workflow(json!({"account": "XX00ATTACKER"}))?;
        let label: Vec<&str> = assigned.provenance().state.ids().collect();
        assert_eq!(label, ["c1"]);
        let none = workflow(json!({}))?;
        assert!(none.provenance().state.is_empty());
        assert_eq!(
            none.provenance().conversation().ids().collect::<Vec<_>>(),
            ["c1"]
        );
        Ok(())
    }
}
