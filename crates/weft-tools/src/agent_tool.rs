//! Other agents as tools: `- agent: researcher.yaml`. The registry lists them (input
//! `{task: string}`); the runtime runs them as sub-agent sessions.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::{ToolError, ToolInfo};

use crate::{Tool, ToolContext};

/// An `agent:` declaration, its path resolved against the agent file's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentToolDecl {
    /// The sub-agent's file.
    pub path: PathBuf,
    /// The tool name (default: the file name without its extension).
    pub name: String,
    /// What the model is told the tool does (default: that it hands a task to the agent).
    pub description: String,
    /// Whether each call waits for a person's approval before it runs.
    pub requires_approval: bool,
}

/// Another agent as a tool, run in its own linked session.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    agent: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    requires_approval: bool,
}

impl AgentToolDecl {
    /// Reads an `agent:` declaration, resolving its path against `base_dir` (the agent file's
    /// directory); an error names the declaration and what is wrong, e.g. a missing file.
    pub fn parse(raw: &Value, base_dir: &Path) -> Result<Self, String> {
        let r: Raw = serde_json::from_value(raw.clone()).map_err(|e| format!("agent tool: {e}"))?;
        let path = base_dir.join(&r.agent);
        if !path.is_file() {
            return Err(format!(
                "agent tool `{}`: the agent file does not exist (looked for {})",
                r.agent,
                path.display()
            ));
        }
        let name = match r.name {
            Some(n) => n,
            None => Path::new(&r.agent)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("agent tool `{}`: give it a `name`", r.agent))?,
        };
        let description = r
            .description
            .unwrap_or_else(|| format!("Hand a task to the `{name}` agent; returns its answer."));
        Ok(Self {
            path,
            name,
            description,
            requires_approval: r.requires_approval,
        })
    }

    /// The tool's name, description and category (`agents`) as the model sees them.
    pub fn info(&self) -> ToolInfo {
        ToolInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            category: Some("agents".into()),
            input_schema: json!({
                "type": "object",
                "properties": {"task": {"type": "string", "description": "what the agent should do, with everything it needs to know"}},
                "required": ["task"]
            }),
            idempotent: false,
            parallel: true,
            requires_approval: self.requires_approval,
            source: "agent".into(),
            output_schema: None,
        }
    }
}

/// The registry's stand-in for an agent tool: the runtime runs sub-agents itself, so a call
/// that reaches the registry fails with kind `agent_tool`.
pub(crate) struct AgentTool {
    pub(crate) info: ToolInfo,
    pub(crate) path: PathBuf,
}

impl Tool for AgentTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Err(ToolError::new(
            "agent_tool",
            format!(
                "`{}` is an agent ({}); the runtime runs it as a sub-agent session",
                self.info.name,
                self.path.display()
            ),
        )
        .with_detail(json!({"task": args.get("task"), "agent": self.path.display().to_string()})))
    }
}
