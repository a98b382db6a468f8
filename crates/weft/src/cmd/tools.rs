//! `weft tools list AGENT`: every tool an agent has, with its source and schema.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::Subcommand;

use weft_host::load;

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List every tool of an agent (MCP servers are started to list theirs).
    List {
        /// The agent file.
        agent: PathBuf,
        /// Print one JSON object per tool.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(cmd: ToolsCommand) -> Result<u8> {
    let ToolsCommand::List { agent, json } = cmd;
    let text = std::fs::File::open(&agent)
        .and_then(weft_core::limits::read_text)
        .map_err(|e| anyhow!("cannot read agent file {}: {e}", agent.display()))?;
    let spec = weft_core::agent::AgentSpec::parse(&agent.display().to_string(), &text)?;
    let infos = weft_tools::list_agent_tools(&spec, load::base_dir(&agent))
        .await
        .map_err(|e| anyhow!("agent file {}: {e}", agent.display()))?;
    let mut out = std::io::stdout().lock();
    for t in &infos {
        if json {
            writeln!(out, "{}", serde_json::to_string(t)?)?;
            continue;
        }
        let mut flags = Vec::new();
        if t.idempotent {
            flags.push("idempotent");
        }
        if t.parallel {
            flags.push("parallel");
        }
        if t.requires_approval {
            flags.push("requires approval");
        }
        writeln!(
            out,
            "{}  [{}]  category: {}{}",
            t.name,
            t.source,
            t.category.as_deref().unwrap_or("-"),
            if flags.is_empty() {
                String::new()
            } else {
                format!("  ({})", flags.join(", "))
            }
        )?;
        if !t.description.is_empty() {
            writeln!(
                out,
                "    {}",
                t.description.lines().next().unwrap_or_default()
            )?;
        }
        writeln!(out, "    input: {}", t.input_schema)?;
    }
    if infos.is_empty() {
        writeln!(std::io::stderr(), "agent {} has no tools", spec.name)?;
    }
    Ok(0)
}
