//! Reading the files the user names, with errors that name them.

use std::collections::BTreeMap;
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

impl LoadedAgent {
    /// Redacts every declared secret's value from events (as `[secret:NAME]`); `None` when the
    /// agent declares no secret (events then skip the redaction pass).
    pub fn redactor(&self) -> Option<weft_runtime::Redact> {
        if self.spec.secrets.is_empty() {
            return None;
        }
        let r = self.tools.redactor();
        Some(std::sync::Arc::new(move |s: &mut String| {
            r.redact_in_place(s)
        }))
    }
}

/// Reads an agent file and builds its tools (MCP servers are started and listed). Secrets
/// given with `--secret NAME=VALUE` override the declared sources for this run.
pub async fn agent(path: &Path) -> Result<LoadedAgent> {
    agent_with_secrets(path, &[]).await
}

pub async fn agent_with_secrets(path: &Path, secrets: &[String]) -> Result<LoadedAgent> {
    let text = std::fs::File::open(path)
        .and_then(weft_core::limits::read_text)
        .with_context(|| format!("cannot read agent file {}", path.display()))?;
    let spec = AgentSpec::parse(&path.display().to_string(), &text)?;
    let base = base_dir(path);
    let mut overrides = BTreeMap::new();
    for s in secrets {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("--secret {s}: write NAME=VALUE"))?;
        overrides.insert(k.to_owned(), v.to_owned());
    }
    let tools = Registry::from_agent_async(&spec, base, overrides)
        .await
        .map_err(|e| anyhow!("agent file {}: {e}", path.display()))?;
    tracing::info!(
        file = %path.display(),
        agent = %spec.name,
        tools = tools.infos().count(),
        "agent loaded"
    );
    Ok(LoadedAgent { spec, tools })
}

/// The directory relative paths of an agent file are taken from.
pub fn base_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `--input`: JSON text, or `@FILE` for a JSON file. Absent: `{}`.
pub fn input(arg: Option<&str>) -> Result<Value> {
    let Some(arg) = arg else {
        return Ok(Value::Object(serde_json::Map::new()));
    };
    let (text, origin) = match arg.strip_prefix('@') {
        Some(file) => (
            std::fs::File::open(file)
                .and_then(weft_core::limits::read_text)
                .with_context(|| format!("cannot read input file {file}"))?,
            format!("input file {file}"),
        ),
        None => (arg.to_owned(), "--input".to_owned()),
    };
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{origin} is not valid JSON"))?;
    weft_core::limits::check_depth(&v, &origin).map_err(|e| anyhow!(e))?;
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
