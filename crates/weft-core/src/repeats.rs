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
//! and what it ran is folded from its events (`state::Ledger`, kept in the turn), so a run
//! resumed after a crash sees the same earlier calls.
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

use crate::model::value_text;

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

/// A call's signature: its name and canonical arguments (compact JSON, object keys sorted).
/// Signatures are stored (in snapshots, and in the digest of each call's key), so the text must
/// never change. It is written directly, without a sorted copy of the arguments: every tool call
/// makes three.
pub fn call_signature(tool: &str, args: &Value) -> String {
    let mut out = Vec::with_capacity(tool.len() + 64);
    out.extend_from_slice(tool.as_bytes());
    out.push(b':');
    write_canonical(&mut out, args);
    // Only whole UTF-8 strings and JSON's ASCII were written.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes `v` as compact JSON with each object's keys in sorted order.
fn write_canonical(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Writing to a Vec does not fail.
                serde_json::to_writer(&mut *out, k).ok();
                out.push(b':');
                write_canonical(out, v);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, v);
            }
            out.push(b']');
        }
        scalar => {
            serde_json::to_writer(&mut *out, scalar).ok();
        }
    }
}

/// Whether a step that made the calls with `signatures` makes the same call again.
pub fn in_step(signatures: &[String], tool: &str, args: &Value) -> bool {
    signatures.contains(&call_signature(tool, args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The signature as it was first written (a sorted copy of the arguments, then printed):
    /// the text stored in snapshots and digested in call keys, which must not change.
    fn signature_as_first_written(tool: &str, args: &Value) -> String {
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

    #[test]
    fn signatures_are_the_text_they_always_were() {
        let cases = [
            json!(null),
            json!({}),
            json!([]),
            json!({"text": "hello"}),
            json!({"z": 1, "a": [3, {"y": null, "b": true}], "m": {"k2": -1.5e-7, "k1": 12345678901234567890u64}}),
            json!({"quote\"d": "line\nbreak\ttab \u{1} é 漢字 🦀", "": "", "A": "upper before lower"}),
            json!([{"b": 2, "a": 1}, [], {}, "x", 0, -0.0, 1e300]),
            json!({"nested": {"deeper": {"deepest": {"c": 3, "b": 2, "a": 1}}}}),
            json!("just a string"),
            json!(42),
        ];
        for args in &cases {
            assert_eq!(
                call_signature("tool", args),
                signature_as_first_written("tool", args),
                "{args}"
            );
        }
    }

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
