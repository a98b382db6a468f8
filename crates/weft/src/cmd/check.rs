//! `weft check`: every check an agent file (and a plan) gets when it loads, with every problem
//! listed at once instead of the first.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};
use weft_core::Plan;
use weft_core::agent::AgentSpec;
use weft_runtime::Agent;
use weft_tools::Registry;

use weft_host::load;

use crate::EXIT_USAGE;

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
    let input = match a
        .input
        .as_deref()
        .map(|i| crate::input::input(Some(i)))
        .transpose()
    {
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
    let agent = agent_problems(&a.agent, &metadata, input.as_ref().unwrap_or(&empty)).await;
    problems.extend(agent.lines());
    if let Some(plan_path) = &a.plan {
        plan_problems(
            plan_path,
            agent.tools.as_ref(),
            input.as_ref(),
            &mut problems,
        );
    }
    if let Some(t) = &agent.tools {
        t.shutdown().await;
    }
    if a.json {
        writeln!(
            std::io::stdout(),
            "{}",
            json!({"ok": problems.is_empty(), "problems": problems})
        )?;
        return Ok(if problems.is_empty() { 0 } else { EXIT_USAGE });
    }
    // What each tool's sandbox lets it do, on stderr (stdout stays the verdict).
    if let Some(spec) = &agent.spec {
        for tool in untyped_outputs(spec, agent.tools.as_ref()) {
            eprintln!(
                "warning: `{tool}` declares no output_schema: a plan's reference to its output may fill any argument, and whether it fits is only known when the step runs (docs/local-model.md, \"Typed references\")"
            );
        }
        for (tool, what, none) in weft_tools::sandbox::summaries(spec) {
            if none {
                eprintln!("warning: `{tool}` runs without a sandbox (`sandbox: none`)");
            } else {
                eprintln!("sandbox: `{tool}` {what}");
            }
        }
    }
    if problems.is_empty() {
        match &a.plan {
            Some(p) => writeln!(
                std::io::stdout(),
                "{} and {}: no problems",
                a.agent.display(),
                p.display()
            )?,
            None => writeln!(std::io::stdout(), "{}: no problems", a.agent.display())?,
        }
        return Ok(0);
    }
    eprintln!("{} problem(s):", problems.len());
    for p in &problems {
        eprintln!("  - {p}");
    }
    Ok(EXIT_USAGE)
}

/// Checks an agent file: everything a load checks (the file, each tool declaration on its own,
/// the whole set of tools with MCP servers started and listed, `allowed_tools`), then the
/// model, the instructions template and the workflow's steps.
async fn agent_problems(path: &Path, metadata: &Value, input: &Value) -> load::CheckedAgent {
    let mut c = load::check_agent(path, Default::default()).await;
    let Some(spec) = c.spec.clone() else {
        return c;
    };
    let base = load::base_dir(path);
    // A file that only declares tools for plans needs no model.
    if spec.model.is_some()
        && let Err(e) = Agent::model_from_spec(&spec, base)
    {
        c.push(&format!("model: {}", unprefixed(&spec, &e.to_string())));
    }
    // A script keyed by purpose must hold replies for the calls its agent's mode makes first.
    if let Some(Ok(script)) = spec
        .model
        .as_ref()
        .and_then(|m| weft_model::script_of(m, base))
    {
        let (purpose, mode) = match spec.mode {
            weft_core::agent::Mode::Plan => (weft_core::model::Purpose::Plan, "plan-mode"),
            weft_core::agent::Mode::React => (weft_core::model::Purpose::React, "ReAct"),
            weft_core::agent::Mode::Workflow => (weft_core::model::Purpose::Workflow, "workflow"),
        };
        for (when, has) in script.unserved(purpose) {
            let case = when.map_or_else(String::new, |w| format!(" (the case `when: {w}`)"));
            c.push(&format!(
                "model: the script{case} has replies for {} but none for `{}` calls, which a {mode} agent makes; add a `{}:` list, or list the replies in order",
                if has.is_empty() { "no purpose".to_owned() } else { has.join(", ") },
                purpose.as_str(),
                purpose.as_str()
            ));
        }
    }
    if let Err(e) = Agent::instructions(&spec, metadata, input) {
        c.push(&e.to_string());
    }
    if let Some(t) = c.tools.clone()
        && let Err(e) = Agent::workflow(&spec, &t, metadata, input)
    {
        c.push(&e.to_string());
    }
    c
}

/// The tools whose output a plan written by the model in the process can read without knowing
/// its type: in a plan-mode agent with a `local` model, those that declare no `output_schema`.
fn untyped_outputs(spec: &AgentSpec, tools: Option<&weft_tools::Registry>) -> Vec<String> {
    let local = spec.model.as_ref().and_then(weft_model::provider_of) == Some("local");
    let (true, weft_core::agent::Mode::Plan, Some(tools)) = (local, spec.mode, tools) else {
        return Vec::new();
    };
    use weft_core::ToolCatalog;
    tools
        .tool_names()
        .into_iter()
        .filter(|t| {
            tools
                .tool_info(t)
                .is_some_and(|i| i.output_schema.is_none())
        })
        .collect()
}

/// An agent-level error's text without the `agent `NAME`: ` it starts with.
fn unprefixed<'a>(spec: &AgentSpec, message: &'a str) -> &'a str {
    message
        .strip_prefix(&format!("agent `{}`: ", spec.name))
        .unwrap_or(message)
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
    let ps = weft_runtime::check_plan(&plan, tools, input);
    problems.extend(ps.iter().map(|p| format!("plan {file}: {p}")));
}
