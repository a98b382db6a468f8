//! Trust: which tools' outputs are trusted, and which arguments may not take untrusted data
//! (the agent file's `trust:`). The labels themselves are folded from the log
//! (`state::Provenance`); the check before each call is `agent_loop::flows`.
//!
//! **What is untrusted.** Every tool's output, unless the tool is listed in `trusted_tools`: a
//! web page, an e-mail, a file or an MCP server's answer may carry text written by someone
//! other than the user. The task, the run's input and a person's answers are trusted. A value
//! is untrusted when it was read from an untrusted output (a plan step's reference to it, or a
//! model's reply written after the output entered what the model reads); the label names the
//! calls it came from.
//!
//! **What is protected.** `protect` maps a tool to the arguments that may not take untrusted
//! data (`all` for every argument). A call that would put untrusted data into one meets
//! `on_untrusted`: `refuse` (the default; `tool_call_blocked` says which argument and which
//! calls) or `ask` (a person approves it, as a tool that `requires_approval`). Without `trust:`
//! nothing is protected and weft behaves as before, but the labels are still recorded.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::value_text;
use crate::repeats::Policy;
use crate::tool::ToolInfo;

/// The arguments of one tool that may not take untrusted data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protected {
    /// Every argument (a tool whose every input steers what it does, e.g. `update_password`).
    All,
    /// The arguments named.
    Args(BTreeSet<String>),
}

impl Protected {
    /// Whether argument `name` is protected.
    pub fn covers(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Args(a) => a.contains(name),
        }
    }
}

/// The agent file's `trust:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trust {
    /// Tools whose output is trusted; every other tool's output is untrusted.
    pub trusted_tools: BTreeSet<String>,
    /// The arguments, by tool, that may not take untrusted data.
    pub protect: BTreeMap<String, Protected>,
    /// What a call that would put untrusted data into a protected argument meets: `refuse`
    /// (the default) or `ask`.
    pub on_untrusted: Policy,
}

/// The shape of `trust:` in an agent file (for its JSON Schema).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
struct TrustDecl {
    /// Tools whose output is trusted (a calculator, a lookup of the user's own account); every
    /// other tool's output is untrusted.
    #[serde(default)]
    trusted_tools: Vec<String>,
    /// Arguments that may not take untrusted data, by tool: a list of argument names, or `all`.
    #[serde(default)]
    protect: BTreeMap<String, ProtectDecl>,
    /// What a call that would put untrusted data into a protected argument meets: `refuse`
    /// (the default) or `ask` (a person approves it).
    on_untrusted: Option<Policy>,
}

#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum ProtectDecl {
    /// `all`: every argument.
    All(String),
    /// The arguments named.
    Args(Vec<String>),
}

/// The JSON Schema of `trust:` in an agent file.
pub fn schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    <Option<TrustDecl> as schemars::JsonSchema>::json_schema(generator)
}

impl Trust {
    /// Reads `trust:` as written. Every problem names its field and what to write instead.
    pub fn parse(value: &Value) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let mut trust = Self::default();
        let m = match value {
            Value::Null => return Ok(trust),
            Value::Object(m) => m,
            _ => {
                return Err(vec![
                    "trust: must be a mapping with `trusted_tools`, `protect` and `on_untrusted`"
                        .into(),
                ]);
            }
        };
        let names = |at: &str, v: &Value, problems: &mut Vec<String>| -> BTreeSet<String> {
            let mut out = BTreeSet::new();
            match v {
                Value::Array(a) => {
                    for (i, n) in a.iter().enumerate() {
                        match n.as_str() {
                            Some(s) if !s.trim().is_empty() => {
                                out.insert(s.to_owned());
                            }
                            _ => problems.push(format!(
                                "{at}[{i}]: `{}` is not a name; write a list of names",
                                value_text(n)
                            )),
                        }
                    }
                }
                _ => problems.push(format!("{at}: must be a list of names")),
            }
            out
        };
        for (k, v) in m {
            match k.as_str() {
                "trusted_tools" => trust.trusted_tools = names("trust.trusted_tools", v, &mut problems),
                "protect" => match v {
                    Value::Object(tools) => {
                        for (tool, args) in tools {
                            let at = format!("trust.protect.{tool}");
                            let p = match args {
                                Value::String(s) if s == "all" => Protected::All,
                                Value::Array(_) => {
                                    let a = names(&at, args, &mut problems);
                                    if a.is_empty() {
                                        problems.push(format!(
                                            "{at}: names no argument; list the arguments or write `all`"
                                        ));
                                    }
                                    Protected::Args(a)
                                }
                                _ => {
                                    problems.push(format!(
                                        "{at}: `{}` is neither `all` nor a list of argument names",
                                        value_text(args)
                                    ));
                                    continue;
                                }
                            };
                            trust.protect.insert(tool.clone(), p);
                        }
                    }
                    _ => problems.push(
                        "trust.protect: must map tool names to their protected arguments (`send_money: [recipient]`, or `all`)"
                            .into(),
                    ),
                },
                "on_untrusted" => match v.as_str() {
                    Some("refuse") => trust.on_untrusted = Policy::Refuse,
                    Some("ask") => trust.on_untrusted = Policy::Ask,
                    _ => problems.push(format!(
                        "trust.on_untrusted: `{}` is not a policy; use `refuse` (the default) or `ask` (to let untrusted data through, leave the argument out of `trust.protect`)",
                        value_text(v)
                    )),
                },
                other => problems.push(format!(
                    "trust.{other}: unknown field; `trust:` takes `trusted_tools`, `protect` and `on_untrusted`"
                )),
            }
        }
        if problems.is_empty() {
            Ok(trust)
        } else {
            Err(problems)
        }
    }

    /// Whether `tool`'s output is trusted.
    pub fn trusts(&self, tool: &str) -> bool {
        self.trusted_tools.contains(tool)
    }

    /// The protected arguments of `tool`, if any.
    pub fn protected(&self, tool: &str) -> Option<&Protected> {
        self.protect.get(tool)
    }

    /// What `trust:` names that the agent's `tools` lack: a tool, or an argument its input
    /// schema does not list (a misspelt argument would protect nothing). Each as (field, what
    /// is wrong).
    pub fn problems(&self, tools: &[&ToolInfo]) -> Vec<(String, String)> {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let unknown = |at: String, tool: &str| {
            (
                at,
                format!(
                    "the agent has no tool `{tool}`; its tools are: {}",
                    names.join(", ")
                ),
            )
        };
        let mut out = Vec::new();
        for t in &self.trusted_tools {
            if !names.contains(&t.as_str()) {
                out.push(unknown("trust.trusted_tools".to_owned(), t));
            }
        }
        for (tool, protected) in &self.protect {
            let at = format!("trust.protect.{tool}");
            let Some(info) = tools.iter().find(|t| &t.name == tool) else {
                out.push(unknown(at, tool));
                continue;
            };
            let (Protected::Args(args), Some(Value::Object(props))) =
                (protected, info.input_schema.get("properties"))
            else {
                continue;
            };
            for a in args.iter().filter(|a| !props.contains_key(*a)) {
                let known: Vec<&str> = props.keys().map(String::as_str).collect();
                out.push((
                    at.clone(),
                    format!(
                        "`{tool}` has no argument `{a}`; its arguments are: {}",
                        known.join(", ")
                    ),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn trust_parses_with_clear_errors() {
        let t = Trust::parse(&json!({
            "trusted_tools": ["get_balance"],
            "protect": {"send_money": ["recipient"], "update_password": "all"},
            "on_untrusted": "ask"
        }))
        .unwrap();
        assert!(t.trusts("get_balance") && !t.trusts("read_file"));
        assert!(t.protected("send_money").unwrap().covers("recipient"));
        assert!(!t.protected("send_money").unwrap().covers("amount"));
        assert!(t.protected("update_password").unwrap().covers("anything"));
        assert_eq!(t.on_untrusted, Policy::Ask);
        assert_eq!(Trust::parse(&Value::Null).unwrap(), Trust::default());

        let e = Trust::parse(&json!({
            "protect": {"send_money": "recipient", "x": []},
            "on_untrusted": "allow",
            "trusted": ["a"]
        }))
        .unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e.iter()
                .any(|p| p.starts_with("trust.protect.send_money: `recipient` is neither")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|p| p.starts_with("trust.protect.x: names no argument")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|p| p.starts_with("trust.on_untrusted: `allow`")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|p| p.starts_with("trust.trusted: unknown field")),
            "{e:?}"
        );
        assert!(Trust::parse(&json!("on")).unwrap_err()[0].starts_with("trust: must be"));
    }

    #[test]
    fn problems_name_unknown_tools_and_misspelt_arguments() {
        let send: ToolInfo = serde_json::from_value(json!({"name": "send_money",
            "input_schema": {"type": "object", "properties": {"recipient": {}, "amount": {}}}}))
        .unwrap();
        let t = Trust::parse(&json!({
            "trusted_tools": ["get_balanse"],
            "protect": {"send_money": ["recipent", "amount"], "wire": "all"}
        }))
        .unwrap();
        let p = t.problems(&[&send]);
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(p[0].0, "trust.trusted_tools");
        assert!(
            p[0].1
                .contains("no tool `get_balanse`; its tools are: send_money")
        );
        assert_eq!(p[1].0, "trust.protect.send_money");
        assert!(
            p[1].1
                .contains("no argument `recipent`; its arguments are: recipient, amount"),
            "{p:?}"
        );
        assert_eq!(p[2].0, "trust.protect.wire");
    }
}
