//! `weft check`: every check an agent file (and a plan) gets when it loads, with every problem
//! listed at once instead of the first.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};
use weft_core::Plan;
use weft_core::agent::AgentSpec;
use weft_runtime::{Agent, Runtime};
use weft_store::MemoryStore;
use weft_tools::Registry;

use crate::{EXIT_USAGE, load};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The agent file (YAML or JSON).
    pub agent: PathBuf,
    /// A plan file to check against the agent's tools.
    pub plan: Option<PathBuf>,
    /// The run's input (JSON text, or @FILE): the plan's arguments that read it are checked
    /// against the tools' schemas, and the instructions template is rendered with it.
    #[arg(long)]
    pub input: Option<String>,
    /// Session metadata (a JSON object) the instructions template sees as session.metadata.
    #[arg(long)]
    pub metadata: Option<String>,
    /// Print {"ok": ..., "problems": [...]} on stdout.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(a: CheckArgs) -> Result<u8> {
    let mut problems = Vec::new();
    let input = match a.input.as_deref().map(|i| load::input(Some(i))).transpose() {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("{e:#}"));
            None
        }
    };
    let metadata = match &a.metadata {
        None => json!({}),
        Some(m) => match serde_json::from_str::<Value>(m) {
            Ok(v) if v.is_object() => v,
            _ => {
                problems.push("--metadata must be a JSON object".into());
                json!({})
            }
        },
    };
    let empty = json!({});
    let tools = agent_problems(
        &a.agent,
        &metadata,
        input.as_ref().unwrap_or(&empty),
        &mut problems,
    )
    .await;
    if let Some(plan_path) = &a.plan {
        plan_problems(plan_path, tools.as_ref(), input.as_ref(), &mut problems);
    }
    if let Some(t) = &tools {
        t.shutdown().await;
    }
    if a.json {
        writeln!(
            std::io::stdout(),
            "{}",
            json!({"ok": problems.is_empty(), "problems": problems})
        )?;
    }
    if problems.is_empty() {
        if !a.json {
            match &a.plan {
                Some(p) => writeln!(
                    std::io::stdout(),
                    "{} and {}: no problems",
                    a.agent.display(),
                    p.display()
                )?,
                None => writeln!(std::io::stdout(), "{}: no problems", a.agent.display())?,
            }
        }
        return Ok(0);
    }
    eprintln!("{} problem(s):", problems.len());
    for p in &problems {
        eprintln!("  - {p}");
    }
    Ok(EXIT_USAGE)
}

/// Checks an agent file: its syntax, each tool declaration on its own, the whole set of tools
/// (MCP servers started and listed, `allowed_tools`), the model and the instructions template.
/// Returns the tools when they could be built.
async fn agent_problems(
    path: &Path,
    metadata: &Value,
    input: &Value,
    problems: &mut Vec<String>,
) -> Option<Registry> {
    let file = path.display().to_string();
    let text = match std::fs::File::open(path).and_then(weft_core::limits::read_text) {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("cannot read agent file {file}: {e}"));
            return None;
        }
    };
    let spec = match AgentSpec::parse(&file, &text) {
        Ok(s) => s,
        Err(e) => {
            problems.push(e.to_string());
            return None;
        }
    };
    let base = load::base_dir(path);
    let before = problems.len();
    // Each declaration alone, so that every bad one is named.
    for (i, t) in spec.tools.iter().enumerate() {
        let one = AgentSpec {
            tools: vec![t.clone()],
            allowed_tools: None,
            secrets: spec.secrets.clone(),
            ..spec.clone()
        };
        if let Err(e) = Registry::from_agent(&one, base) {
            let msg = e.to_string();
            let msg = msg
                .strip_prefix("tools[0]: ")
                .map_or(msg.clone(), |m| format!("tools[{i}]: {m}"));
            problems.push(format!("agent file {file}: {msg}"));
        }
    }
    let tools = if problems.len() == before {
        match Registry::from_agent_async(&spec, base, Default::default()).await {
            Ok(r) => Some(r),
            Err(e) => {
                problems.push(format!("agent file {file}: {e}"));
                None
            }
        }
    } else {
        None
    };
    // A file that only declares tools for plans needs no model.
    if spec.model.is_some()
        && let Err(e) = Agent::model_from_spec(&spec, base)
    {
        problems.push(format!("agent file {file}: {e}"));
    }
    if let Err(e) = Agent::instructions(&spec, metadata, input) {
        problems.push(format!("agent file {file}: {e}"));
    }
    if let Some(t) = &tools
        && let Err(e) = Agent::workflow(&spec, t, metadata, input)
    {
        problems.push(format!("agent file {file}: {e}"));
    }
    tools
}

/// Checks a plan file against the agent's tools (and the input, when given).
fn plan_problems(
    path: &Path,
    tools: Option<&Registry>,
    input: Option<&Value>,
    problems: &mut Vec<String>,
) {
    let file = path.display().to_string();
    let text = match std::fs::File::open(path).and_then(weft_core::limits::read_text) {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("cannot read plan file {file}: {e}"));
            return;
        }
    };
    let plan = match Plan::parse_str(&text) {
        Ok(p) => p,
        Err(ps) => {
            problems.extend(ps.iter().map(|p| format!("plan {file}: {p}")));
            return;
        }
    };
    let Some(tools) = tools else {
        problems.push(format!(
            "plan {file}: not checked against the tools (the agent's tools could not be built)"
        ));
        return;
    };
    let rt = Runtime::new(
        Arc::new(MemoryStore::new()),
        Arc::new(tools.clone()),
        Default::default(),
    );
    let ps = rt.check_plan(&plan, input);
    problems.extend(ps.iter().map(|p| format!("plan {file}: {p}")));
}
