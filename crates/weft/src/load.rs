//! Reading the files the user names, with errors that name them.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use serde_json::Value;
use weft_core::agent::AgentSpec;
use weft_tools::Registry;

/// An agent file, parsed, with its tools built.
pub struct LoadedAgent {
    pub spec: AgentSpec,
    pub tools: Registry,
}

pub fn agent(path: &Path) -> Result<LoadedAgent> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read agent file {}", path.display()))?;
    let spec = AgentSpec::parse(&path.display().to_string(), &text)?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tools = Registry::from_agent(&spec, base)
        .map_err(|e| anyhow!("agent file {}: {e}", path.display()))?;
    Ok(LoadedAgent { spec, tools })
}

/// `--input`: JSON text, or `@FILE` for a JSON file. Absent: `{}`.
pub fn input(arg: Option<&str>) -> Result<Value> {
    let Some(arg) = arg else {
        return Ok(Value::Object(serde_json::Map::new()));
    };
    let (text, origin) = match arg.strip_prefix('@') {
        Some(file) => (
            std::fs::read_to_string(file)
                .with_context(|| format!("cannot read input file {file}"))?,
            format!("input file {file}"),
        ),
        None => (arg.to_owned(), "--input".to_owned()),
    };
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{origin} is not valid JSON"))?;
    if !v.is_object() {
        return Err(anyhow!(
            "{origin} must be a JSON object, e.g. '{{\"customerId\": \"c1\"}}'"
        ));
    }
    Ok(v)
}

/// A path made absolute (for recording where an agent file is).
pub fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}
