//! Repeated calls: a call of a tool that is not idempotent, with the same tool name and the
//! same canonical arguments (JSON with object keys sorted) as an earlier call of the same run
//! that already ran, is a *repeat*. Every mode applies the one rule here: the model's own calls
//! (ReAct, the turns inside a workflow step) and a plan's steps.
//!
//! **What counts as "already ran".** A call whose `tool_call_finished` is in the run's log, ok
//! or error alike: an error of a tool that is not idempotent does not say the side effect did
//! not happen (a timeout, a crash recorded as an unknown outcome), so running it again is as
//! unsafe as after a success. A call still in flight, a call that was refused, and a call of an
//! item of a fan-out step are not counted. A run is one task (`turn_started` begins the next),
//! and what it ran is folded from its events ([`Ledger`], kept in the turn), so a run resumed
//! after a crash sees the same earlier calls.
//!
//! **What happens to a repeat** is the tool's [`Policy`] in the agent file's `repeats:`
//! ([`Rules`]): `refuse` (the default) does not run it and gives the model (or the step) the
//! earlier call's result as the call's result, with a note that it was not run again
//! (`tool_call_blocked` with `repeats` records it); `ask` waits for a person's approval, as a
//! tool that `requires_approval` does (an approval runs it, a denial is a refusal); `allow` runs
//! it.
//!
//! A plan step's executor is also kept from making the same call twice within its step, for
//! any tool ([`in_step`]): that guards the executor's loop, not side effects.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Event, ToolOutcome};
use crate::state::{OpenCall, State, value_text};
use crate::tool::ToolInfo;

/// What happens to a repeated call of a tool that is not idempotent.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// The call does not run; the earlier call's result stands for it.
    #[default]
    Refuse,
    /// A person approves the call before it runs again.
    Ask,
    /// The call runs again (for tools where repeating is intended).
    Allow,
}

impl Policy {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "refuse" => Some(Self::Refuse),
            "ask" => Some(Self::Ask),
            "allow" => Some(Self::Allow),
            _ => None,
        }
    }
}

/// The agent file's `repeats:`: the agent's policy and each tool's own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// The policy of every tool not named in `tools`.
    pub default: Policy,
    /// Policies by tool name.
    pub tools: BTreeMap<String, Policy>,
}

/// The shapes `repeats:` may take in an agent file (for its JSON Schema).
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum RepeatsDecl {
    /// One policy for every tool.
    One(Policy),
    /// The agent's policy and each tool's own.
    Each {
        /// The policy of every tool not named in `tools` (default `refuse`).
        default: Option<Policy>,
        /// Policies by tool name.
        #[serde(default)]
        tools: BTreeMap<String, Policy>,
    },
}

/// The JSON Schema of `repeats:` in an agent file.
pub fn schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    <Option<RepeatsDecl> as schemars::JsonSchema>::json_schema(generator)
}

const POLICIES: &str = "use `refuse` (the default), `ask` or `allow`";

impl Rules {
    /// Reads `repeats:` as written: `refuse | ask | allow`, or a mapping with `default` and
    /// `tools` (tool name to policy). Every problem names its field.
    pub fn parse(value: &Value) -> Result<Self, Vec<String>> {
        let policy = |at: &str, v: &Value| -> Result<Policy, String> {
            v.as_str().and_then(Policy::parse).ok_or_else(|| {
                format!(
                    "{at}: `{}` is not a policy for repeated calls; {POLICIES}",
                    value_text(v)
                )
            })
        };
        match value {
            Value::Null => Ok(Self::default()),
            Value::String(_) => Ok(Self {
                default: policy("repeats", value).map_err(|e| vec![e])?,
                tools: BTreeMap::new(),
            }),
            Value::Object(m) => {
                let mut problems = Vec::new();
                let mut rules = Self::default();
                for (k, v) in m {
                    match k.as_str() {
                        "default" => match policy("repeats.default", v) {
                            Ok(p) => rules.default = p,
                            Err(e) => problems.push(e),
                        },
                        "tools" => match v {
                            Value::Object(tools) => {
                                for (name, v) in tools {
                                    match policy(&format!("repeats.tools.{name}"), v) {
                                        Ok(p) => {
                                            rules.tools.insert(name.clone(), p);
                                        }
                                        Err(e) => problems.push(e),
                                    }
                                }
                            }
                            _ => problems.push(
                                "repeats.tools: must map tool names to policies (`refund: ask`)"
                                    .into(),
                            ),
                        },
                        other => problems.push(format!(
                            "repeats.{other}: unknown field; `repeats:` takes `default` and `tools`"
                        )),
                    }
                }
                if problems.is_empty() {
                    Ok(rules)
                } else {
                    Err(problems)
                }
            }
            _ => Err(vec![format!(
                "repeats: must be a policy ({POLICIES}) or a mapping with `default` and `tools`"
            )]),
        }
    }

    /// The policy for a repeated call of `tool`.
    pub fn policy(&self, tool: &str) -> Policy {
        self.tools.get(tool).copied().unwrap_or(self.default)
    }
}

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
    fn earlier(&self, signature: &str) -> Option<(usize, &Ran)> {
        self.ran
            .iter()
            .enumerate()
            .find(|(_, r)| r.signature == signature)
            .map(|(i, r)| (i + 1, r))
    }
}

/// A call's signature: its name and canonical arguments (object keys sorted).
pub fn call_signature(tool: &str, args: &Value) -> String {
    fn canon(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> =
                    m.iter().map(|(k, v)| (k, canon(v))).collect();
                serde_json::to_value(sorted).unwrap_or(Value::Null)
            }
            Value::Array(a) => Value::Array(a.iter().map(canon).collect()),
            other => other.clone(),
        }
    }
    format!("{tool}:{}", canon(args))
}

/// Whether a step that made the calls with `signatures` makes the same call again.
pub fn in_step(signatures: &[String], tool: &str, args: &Value) -> bool {
    signatures.contains(&call_signature(tool, args))
}

/// A repeat: the earlier call it repeats and what to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Repeat<'s> {
    /// The earlier call's number in the run, from 1.
    pub n: usize,
    /// The earlier call.
    pub earlier: &'s Ran,
    /// What the agent file says to do (never `allow`).
    pub policy: Policy,
}

/// Whether a call of `tool` with `args` in the current run is a repeat to refuse or ask about:
/// `None` for an idempotent tool, a first call, or a tool whose policy is `allow`.
pub fn check<'s>(
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
    pub fn note(&self, tool: &str) -> String {
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
    pub fn refused(
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
    pub fn question(&self, tool: &str, args: &Value) -> String {
        format!(
            "The call {tool} {args} repeats call {} of this run (id {}), which already ran, and `{tool}` is not idempotent. Run it again? Reply `approve` or `deny` (with a reason).",
            self.n, self.earlier.call_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn signatures_ignore_key_order() {
        assert_eq!(
            call_signature("refund", &json!({"a": 1, "b": {"y": 2, "x": 1}})),
            call_signature("refund", &json!({"b": {"x": 1, "y": 2}, "a": 1}))
        );
        assert_ne!(
            call_signature("refund", &json!({"a": 1})),
            call_signature("refund", &json!({"a": 2}))
        );
    }

    #[test]
    fn rules_parse_a_policy_or_a_mapping_with_clear_errors() {
        assert_eq!(Rules::parse(&Value::Null).unwrap(), Rules::default());
        assert_eq!(Rules::parse(&json!("ask")).unwrap().default, Policy::Ask);
        let r = Rules::parse(&json!({"default": "allow", "tools": {"refund": "ask"}})).unwrap();
        assert_eq!(r.policy("refund"), Policy::Ask);
        assert_eq!(r.policy("other"), Policy::Allow);
        let e = Rules::parse(&json!("sometimes")).unwrap_err();
        assert!(
            e[0].starts_with("repeats: `sometimes`") && e[0].contains("`ask`"),
            "{e:?}"
        );
        let e = Rules::parse(&json!({"tools": {"refund": "twice"}, "defualt": "ask"})).unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e.iter()
                .any(|p| p.starts_with("repeats.defualt: unknown field")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|p| p.starts_with("repeats.tools.refund: `twice`")),
            "{e:?}"
        );
        assert!(Rules::parse(&json!(3)).unwrap_err()[0].starts_with("repeats: must be"));
    }
}
