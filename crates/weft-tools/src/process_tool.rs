//! Plans reused as tools: `- process: order-status.json`. The process file is read and checked
//! when the agent loads: its schemas, its plan, and its plan against its own tools (built as an
//! agent's are). The registry lists it (its input schema, and what it returns on the first line
//! of its description, for planners); the runtime runs it as a linked child session.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::graph::{ValidateOptions, validate};
use weft_core::process::ProcessSpec;
use weft_core::{ToolError, ToolInfo};

use crate::{Registry, Tool, ToolContext};

/// A `process:` declaration, its file read and checked.
#[derive(Clone, Debug)]
pub struct ProcessDecl {
    /// The process file.
    pub path: PathBuf,
    /// The tool name (default: the process's `name`, else the file name without extension).
    pub name: String,
    /// The process file's plan, parsed and checked.
    pub spec: Arc<ProcessSpec>,
    /// Whether each call waits for a person's approval before it runs.
    pub requires_approval: bool,
    description: Option<String>,
}

/// A plan reused as a tool, run as a session of its own linked to the caller's.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    process: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    requires_approval: bool,
}

thread_local! {
    /// The process files being loaded on this thread, outermost first: a process that calls
    /// itself, directly or not, is refused instead of loading forever.
    static LOADING: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
}

impl ProcessDecl {
    /// Reads a `process:` declaration and the process file it names (resolved against
    /// `base_dir`, the agent file's directory); an error names the file and what is wrong,
    /// including a process that calls itself.
    pub fn parse(raw: &Value, base_dir: &Path) -> Result<Self, String> {
        let r: Raw =
            serde_json::from_value(raw.clone()).map_err(|e| format!("process tool: {e}"))?;
        let path = base_dir.join(&r.process);
        let text = std::fs::File::open(&path)
            .and_then(weft_core::limits::read_text)
            .map_err(|e| {
                format!(
                    "process tool `{}`: cannot read the process file {}: {e}",
                    r.process,
                    path.display()
                )
            })?;
        let file = path.display().to_string();
        let spec = ProcessSpec::parse(&file, &text)?;
        let name = r
            .name
            .or_else(|| spec.name.clone())
            .or_else(|| {
                Path::new(&r.process)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .filter(|s| !s.is_empty())
            })
            .ok_or_else(|| format!("process tool `{}`: give it a `name`", r.process))?;
        let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
        let cycle = LOADING.with(|l| {
            let l = l.borrow();
            l.contains(&canonical).then(|| {
                let mut chain: Vec<String> = l.iter().map(|p| p.display().to_string()).collect();
                chain.push(canonical.display().to_string());
                chain.join(" -> ")
            })
        });
        if let Some(chain) = cycle {
            return Err(format!(
                "process files call each other in a loop ({chain}); a plan must end (use a fan-out or a sub-run for repetition)"
            ));
        }
        LOADING.with(|l| l.borrow_mut().push(canonical));
        let checked = check_plan(&spec, &name, &path);
        LOADING.with(|l| l.borrow_mut().pop());
        checked?;
        Ok(Self {
            path,
            name,
            spec: Arc::new(spec),
            requires_approval: r.requires_approval,
            description: r.description,
        })
    }

    /// The tool's name, description (what the process does and the slots it fills) and
    /// argument schema as a model or planner sees them.
    pub fn info(&self) -> ToolInfo {
        // A planner sees the first line: what the process does, and the slots it fills.
        let what = self
            .description
            .clone()
            .unwrap_or_else(|| self.spec.description.clone());
        let mut lines = what.lines();
        let first = lines.next().unwrap_or_default().trim();
        let first = if first.is_empty() {
            format!("Run the `{}` process.", self.name)
        } else {
            first.to_owned()
        };
        let mut description = format!("{first} {}", self.spec.returns());
        for l in lines {
            description.push('\n');
            description.push_str(l);
        }
        ToolInfo {
            name: self.name.clone(),
            description,
            category: Some("processes".into()),
            input_schema: self.spec.input_schema.clone(),
            // A call run again with its idempotency key continues the same child session.
            idempotent: true,
            parallel: true,
            requires_approval: self.requires_approval,
            source: "process".into(),
            output_schema: None,
        }
    }

    /// The directory the process's tools are found from.
    pub fn base_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }
}

/// The process's plan checked against its own tools (those of MCP servers are known only once
/// the servers run, so a process with MCP servers has its plan checked when it runs).
fn check_plan(spec: &ProcessSpec, name: &str, path: &Path) -> Result<(), String> {
    let file = path.display();
    let base = path.parent().unwrap_or(Path::new("."));
    let tools = Registry::from_agent(&spec.as_agent(name), base)
        .map_err(|e| format!("process file {file}: {e}"))?;
    if !tools.mcp_servers().is_empty() {
        return Ok(());
    }
    let plan = spec.plan().map_err(|p| {
        let list: Vec<String> = p.iter().map(ToString::to_string).collect();
        format!("process file {file}: `plan`: {}", list.join("; "))
    })?;
    let declared_in = format!(
        "the `tools` of the process file {file} (a process has the tools it declares, not those of the agent that calls it)"
    );
    let problems = validate(
        &plan,
        &tools,
        &ValidateOptions {
            require_tools: true,
            tools_declared_in: Some(&declared_in),
            ..ValidateOptions::default()
        },
    );
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "process file {file}: `plan`: {}",
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

/// The registry's stand-in for a process: the runtime runs processes itself, so a call that
/// reaches the registry fails with kind `process_tool`.
pub(crate) struct ProcessTool {
    pub(crate) info: ToolInfo,
    pub(crate) path: PathBuf,
}

impl Tool for ProcessTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, _args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Err(ToolError::new(
            "process_tool",
            format!(
                "`{}` is a process ({}); the runtime runs it as a linked session",
                self.info.name,
                self.path.display()
            ),
        )
        .with_detail(json!({"process": self.path.display().to_string()})))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_tool_of_a_process_is_to_be_declared_in_the_process_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("lookup.json");
        let process = json!({
            "description": "Looks an order up.",
            "input_schema": {"type": "object"},
            "state_schema": {"type": "object", "properties": {"order": {"type": "object"}}},
            "tools": [{"builtin": "echo"}],
            "plan": [{"_id": "find", "_tool": "findOrder", "_outputPath": "†state.order"}],
        });
        std::fs::write(&file, process.to_string()).expect("write");
        let e = ProcessDecl::parse(&json!({"process": "lookup.json"}), dir.path())
            .err()
            .unwrap_or_default();
        let path = file.display().to_string();
        assert!(
            e.contains(&format!(
                "declare it in the `tools` of the process file {path}"
            )),
            "{e}"
        );
        assert!(!e.contains("the agent file"), "{e}");
        assert!(e.contains("(known: echo)"), "{e}");
    }
}
