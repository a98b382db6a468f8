//! What the core knows of tools: their metadata, never their implementation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's metadata: what the planner, the validator and the step executor see.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolInfo {
    /// The tool's name, as plans and models call it.
    pub name: String,
    /// What the tool does; its first line is what the planner sees.
    #[serde(default)]
    pub description: String,
    /// A group the planner's tool list shows the tool in; `None` shows as `general`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// JSON Schema of the arguments (`{}` accepts anything).
    #[serde(default = "empty_object")]
    pub input_schema: Value,
    /// JSON Schema of what the tool gives back, when it declares one (a call whose output
    /// does not match it fails); a planner in the process then offers a reference into the
    /// output only where it fits the parameter it fills ([`crate::fits`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Safe to run twice with the same arguments (re-run after a crash).
    #[serde(default)]
    pub idempotent: bool,
    /// May run at the same time as other parallel steps.
    #[serde(default)]
    pub parallel: bool,
    /// A person approves each call before it runs.
    #[serde(default)]
    pub requires_approval: bool,
    /// Where the tool comes from (`builtin`, `command`, `http`, `mcp:<server>`, `agent`).
    #[serde(default)]
    pub source: String,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl ToolInfo {
    /// The first line of the description: what the planner sees.
    pub fn one_line(&self) -> &str {
        self.description.lines().next().unwrap_or_default().trim()
    }
}

/// Looks tools up by name.
pub trait ToolCatalog {
    /// The tool called `name`; `None` when there is none.
    fn tool_info(&self, name: &str) -> Option<&ToolInfo>;
    /// The names of every tool, in the catalog's order.
    fn tool_names(&self) -> Vec<String>;
}

impl ToolCatalog for BTreeMap<String, ToolInfo> {
    fn tool_info(&self, name: &str) -> Option<&ToolInfo> {
        self.get(name)
    }
    fn tool_names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}
