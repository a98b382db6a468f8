//! Processes: plans reused as tools. A process file holds a plan with an input schema, a State
//! schema (the slots its plan fills; their values are its result) and the tools its plan calls.
//! Declared in an agent file (`- process: order-status.json`), it is a tool like any other:
//! plans, planners and other processes call it, and it runs as a session of its own, linked to
//! the caller's. Parsing and checks are here; the shell builds its tools and runs it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::agent::{AgentSpec, Mode};
use crate::limits::Limits;
use crate::plan::Plan;

/// A process file (YAML or JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "weft process file")]
pub struct ProcessSpec {
    /// The tool's name (default: the file's name without its extension).
    #[serde(default)]
    pub name: Option<String>,
    /// What the process does; its first line is what a planner sees.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the tool's arguments, which are the plan's input (`†input.*`).
    pub input_schema: Value,
    /// The JSON Schema of the State the plan fills: an object whose `properties` are the slots.
    /// Their values, once the plan has run, are the tool's result.
    pub state_schema: Value,
    /// The tools the plan calls (declared as in an agent file; paths from the process file).
    #[serde(default)]
    #[schemars(schema_with = "crate::agent::schema::tools")]
    pub tools: Vec<Value>,
    /// Secrets the tools use (as in an agent file).
    #[serde(default)]
    #[schemars(schema_with = "crate::agent::schema::secrets")]
    pub secrets: BTreeMap<String, Value>,
    /// Bounds on the plan's run (steps, attempts, waves), as in an agent file.
    #[serde(default)]
    pub limits: Limits,
    /// The plan: an array of calls, or `{"steps": [...]}`.
    #[schemars(with = "Value")]
    pub plan: Value,
}

impl ProcessSpec {
    /// Parses and checks a process file; errors name the file and the field (and the plan's
    /// step). `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Self, String> {
        let err = |m: String| format!("process file {file}: {m}");
        crate::limits::check_text_depth(text, "the process file").map_err(err)?;
        let spec: Self = serde_yaml_ng::from_str(text).map_err(|e| err(e.to_string()))?;
        for (field, schema) in [
            ("input_schema", &spec.input_schema),
            ("state_schema", &spec.state_schema),
        ] {
            if let Err(e) = jsonschema::validator_for(schema) {
                return Err(err(format!("`{field}` is not a valid JSON Schema: {e}")));
            }
            if schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(err(format!(
                    "`{field}` must describe an object (`type: object`)"
                )));
            }
        }
        if spec.slots().is_empty() {
            return Err(err(
                "`state_schema` declares no `properties`: name the slots the plan fills (they are the result)".into(),
            ));
        }
        let plan = Plan::from_value(&spec.plan).map_err(|problems| {
            err(format!(
                "`plan`: {}",
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        })?;
        let written: Vec<&str> = plan
            .steps
            .iter()
            .flat_map(|s| s.writes())
            .filter_map(|p| p.first().map(String::as_str))
            .collect();
        let required: Vec<&str> = spec
            .state_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for slot in required {
            if !written.contains(&slot) {
                return Err(err(format!(
                    "`state_schema` requires `{slot}`, which no step of the plan writes; add `\"_outputPath\": \"†state.{slot}\"` to the step that produces it"
                )));
            }
        }
        Ok(spec)
    }

    /// The plan (checked when the file was parsed).
    pub fn plan(&self) -> Result<Plan, Vec<crate::plan::PlanProblem>> {
        Plan::from_value(&self.plan)
    }

    /// The slots of the State schema, with their schemas.
    pub fn slots(&self) -> Map<String, Value> {
        self.state_schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    /// What a planner is told the process returns: `Returns {order: object, summary: string}.`
    pub fn returns(&self) -> String {
        let slots: Vec<String> = self
            .slots()
            .iter()
            .map(|(k, v)| {
                let ty = v
                    .get("type")
                    .map(|t| match t {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .unwrap_or_else(|| "any".into());
                format!("{k}: {ty}")
            })
            .collect();
        format!("Returns {{{}}}.", slots.join(", "))
    }

    /// The result of a run: the declared slots of its State, checked against the State schema.
    pub fn result(&self, data: &Value) -> Result<Value, String> {
        let mut out = Map::new();
        for k in self.slots().keys() {
            if let Some(v) = data.get(k) {
                out.insert(k.clone(), v.clone());
            }
        }
        let out = Value::Object(out);
        let validator = jsonschema::validator_for(&self.state_schema)
            .map_err(|e| format!("`state_schema` is not a valid JSON Schema: {e}"))?;
        let errors: Vec<String> = validator
            .iter_errors(&out)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(format!(
                "the State it filled does not match its state_schema: {}",
                errors.join("; ")
            ))
        }
    }

    /// The process as an agent file without a model, so that its tools are built (and checked)
    /// as an agent's are.
    pub fn as_agent(&self, name: &str) -> AgentSpec {
        AgentSpec {
            name: name.to_owned(),
            description: Some(self.description.clone()),
            mode: Mode::Plan,
            model: None,
            instructions: None,
            limits: self.limits.clone(),
            secrets: self.secrets.clone(),
            tools: self.tools.clone(),
            allowed_tools: None,
            approve_plans: false,
            review_responses: None,
            recall_memories: None,
            skills: Vec::new(),
            workflow: None,
            durability: None,
            budget: None,
            repeats: None,
            trust: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    const GOOD: &str = r#"{
      "description": "Status of an order.",
      "input_schema": {"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]},
      "state_schema": {"type": "object", "properties": {"order": {"type": "object"}, "summary": {"type": "string"}}, "required": ["summary"]},
      "tools": [{"builtin": "echo"}],
      "plan": [{"_id": "a", "_tool": "echo", "text": "†input.orderId", "_outputPath": "†state.summary"}]
    }"#;

    #[test]
    fn a_process_returns_its_declared_slots() {
        let p = ProcessSpec::parse("p.json", GOOD).unwrap();
        assert_eq!(p.returns(), "Returns {order: object, summary: string}.");
        let r = p.result(&json!({"summary": "ok", "scratch": 1}));
        assert_eq!(r, Ok(json!({"summary": "ok"})));
        let e = p.result(&json!({"summary": 3})).unwrap_err();
        assert!(e.contains("/summary"), "{e}");
    }

    #[test]
    fn mistakes_name_the_file_and_the_field() {
        let bad = GOOD.replace("\"required\": [\"summary\"]", "\"required\": [\"total\"]");
        let e = ProcessSpec::parse("p.json", &bad).unwrap_err();
        assert!(
            e.contains("p.json") && e.contains("requires `total`, which no step"),
            "{e}"
        );
        let bad = GOOD.replace("\"_tool\": \"echo\"", "\"_tool\": \"echo\", \"_bogus\": 1");
        let e = ProcessSpec::parse("p.json", &bad).unwrap_err();
        assert!(e.contains("`plan`: step `a`, field `_bogus`"), "{e}");
        let bad = GOOD.replace("\"properties\": {\"order\"", "\"propertiez\": {\"order\"");
        assert!(ProcessSpec::parse("p.json", &bad).is_err());
    }
}
