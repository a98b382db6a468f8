//! Reading agent files and quota files, with errors that name them.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use weft_core::agent::AgentSpec;
use weft_core::diagnose::Problem;
use weft_tools::Registry;

use crate::HostError;

type Result<T, E = HostError> = std::result::Result<T, E>;

/// An agent file, parsed, with its tools built.
pub struct LoadedAgent {
    /// What the file says.
    pub spec: AgentSpec,
    /// Its tools, built.
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

/// [`agent`] with secrets given as `NAME=VALUE` (`--secret`), which override the declared
/// sources.
pub async fn agent_with_secrets(path: &Path, secrets: &[String]) -> Result<LoadedAgent> {
    let mut overrides = BTreeMap::new();
    for s in secrets {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| HostError::Invalid(format!("--secret {s}: write NAME=VALUE")))?;
        overrides.insert(k.to_owned(), v.to_owned());
    }
    let loaded = check_agent(path, overrides).await.loaded().await?;
    tracing::info!(
        file = %path.display(),
        agent = %loaded.spec.name,
        tools = loaded.tools.infos().count(),
        "agent loaded"
    );
    Ok(loaded)
}

/// What reading an agent file and building its tools found: every problem, each with its line
/// and column, and what could be made of the rest (for `weft check` to go on checking).
pub struct CheckedAgent {
    /// The file's path, as given.
    pub file: String,
    /// The file's text.
    pub text: String,
    /// What it says, when it parses.
    pub spec: Option<AgentSpec>,
    /// The tools, a declaration that has a problem standing in as an `echo` under its name (so
    /// that what names it is not reported again). Its MCP servers run: shut it down.
    pub tools: Option<Registry>,
    /// Every problem found.
    pub problems: Vec<Problem>,
}

impl CheckedAgent {
    /// Adds a problem written as `PATH: message` (an agent-level error's `agent `NAME`: `
    /// left out), located in the file; the first name in backticks is where it points.
    pub fn push(&mut self, message: &str) {
        let name = self.spec.as_ref().map(|s| s.name.as_str()).unwrap_or("");
        let message = message
            .strip_prefix(&format!("agent `{name}`: "))
            .unwrap_or(message);
        // "`instructions` uses ...": the field in backticks leads.
        let unquoted;
        let message = match message.strip_prefix('`').and_then(|m| m.split_once("` ")) {
            Some((path, rest)) if !path.contains(' ') => {
                unquoted = format!("{path}: {rest}");
                unquoted.as_str()
            }
            _ => message,
        };
        let mut p = Problem::from_message(message);
        p.needle = p
            .message
            .split('`')
            .nth(1)
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let p = p.located(&self.text);
        if !self.problems.contains(&p) {
            self.problems.push(p);
        }
    }

    /// Every problem, one a line, as `FILE:LINE:COLUMN: PATH: message`, in the file's order.
    pub fn lines(&self) -> Vec<String> {
        let mut ps: Vec<&Problem> = self.problems.iter().collect();
        ps.sort_by_key(|p| (p.line.unwrap_or(usize::MAX), p.column));
        ps.iter().map(|p| p.in_file(&self.file)).collect()
    }

    /// The agent, when no problem was found; else the error that lists them (its MCP servers
    /// are stopped).
    pub async fn loaded(self) -> Result<LoadedAgent> {
        match (&self.spec, &self.tools, self.problems.is_empty()) {
            (Some(spec), Some(tools), true) => Ok(LoadedAgent {
                spec: spec.clone(),
                tools: tools.clone(),
            }),
            _ => {
                if let Some(t) = &self.tools {
                    t.shutdown().await;
                }
                Err(self.error())
            }
        }
    }

    /// The error that lists every problem.
    pub fn error(&self) -> HostError {
        HostError::AgentFile(match self.lines().as_slice() {
            [one] => format!("agent file {one}"),
            many => format!(
                "agent file {}: {} problems:\n  {}",
                self.file,
                many.len(),
                many.join("\n  ")
            ),
        })
    }
}

/// Reads an agent file and builds its tools (MCP servers started and listed), finding every
/// problem on the way: the file's own ([`AgentSpec::check`]), each tool declaration's on its
/// own, then the whole set's (MCP servers, `allowed_tools`, workflow steps' agents).
pub async fn check_agent(path: &Path, overrides: BTreeMap<String, String>) -> CheckedAgent {
    let file = path.display().to_string();
    match std::fs::File::open(path).and_then(weft_core::limits::read_text) {
        Ok(text) => {
            let source = Source {
                file,
                text,
                base: base_dir(path),
            };
            check_source(source, overrides, |_| Ok(())).await
        }
        Err(e) => CheckedAgent {
            problems: vec![Problem::new(
                "",
                format!("cannot read agent file {file}: {e}"),
            )],
            file,
            text: String::new(),
            spec: None,
            tools: None,
        },
    }
}

/// An agent file's text, read from a file or given by an application.
pub struct Source<'a> {
    /// How errors name it: the file's path, or what the application calls it.
    pub file: String,
    /// Its text (YAML or JSON).
    pub text: String,
    /// The directory its relative paths are taken from.
    pub base: &'a Path,
}

/// Reads an agent file's text and builds its tools, with `extra` tools that an application
/// gives in code (registered before the checks that name tools: `allowed_tools`, budgets,
/// `repeats`, workflow steps). Every problem is an error naming the file.
pub async fn agent_from_source(
    source: Source<'_>,
    extra: impl FnOnce(&mut Registry) -> Result<(), weft_tools::ToolsError>,
) -> Result<LoadedAgent> {
    check_source(source, BTreeMap::new(), extra)
        .await
        .loaded()
        .await
}

/// [`check_agent`] of a text, with `extra` tools given in code (see [`agent_from_source`]).
pub async fn check_source(
    source: Source<'_>,
    overrides: BTreeMap<String, String>,
    extra: impl FnOnce(&mut Registry) -> Result<(), weft_tools::ToolsError>,
) -> CheckedAgent {
    let mut c = CheckedAgent {
        file: source.file,
        text: source.text,
        spec: None,
        tools: None,
        problems: Vec::new(),
    };
    let (spec, problems) = AgentSpec::check(&c.text);
    c.problems = problems;
    let Some(spec) = spec else { return c };
    c.spec = Some(spec.clone());
    let base = source.base;
    let mut tools = Vec::new();
    for (i, t) in spec.tools.iter().enumerate() {
        // A declaration the file's own check refused is left out (and named already).
        if t.is_null() {
            continue;
        }
        let one = AgentSpec {
            tools: vec![t.clone()],
            allowed_tools: None,
            workflow: None,
            ..spec.clone()
        };
        match Registry::from_agent(&one, base) {
            Ok(_) => tools.push(t.clone()),
            Err(e) => {
                let msg = e.to_string();
                match msg.strip_prefix("tools[0]") {
                    Some(rest) => c.push(&format!("tools[{i}]{rest}")),
                    None => c.push(&msg),
                }
                if let Some(name) = t.get("name").and_then(Value::as_str) {
                    tools.push(serde_json::json!({"builtin": "echo", "name": name}));
                }
            }
        }
    }
    let all = AgentSpec {
        tools,
        allowed_tools: None,
        ..spec.clone()
    };
    let built = match Registry::from_agent_async(&all, base, overrides).await {
        Ok(mut reg) => match extra(&mut reg) {
            Ok(()) => Ok(reg),
            Err(e) => {
                reg.shutdown().await;
                Err(e)
            }
        },
        Err(e) => Err(e),
    };
    match built {
        Ok(reg) => {
            let reg = match &spec.allowed_tools {
                Some(allowed) => {
                    let reg = reg.restrict(allowed);
                    if let Err(e) = reg.check_allowed() {
                        c.push(&e.to_string());
                    }
                    reg
                }
                None => reg,
            };
            // A per-tool budget names a tool the model can call.
            if let Some(b) = &spec.budget {
                let names = weft_core::ToolCatalog::tool_names(&reg);
                for (scope, tool, why) in b.unknown_tools(&names) {
                    let p = Problem::new(format!("budget.{scope}.tool_calls_per_tool.{tool}"), why);
                    c.problems.push(p.located(&c.text));
                }
            }
            // `repeats.tools` names tools of the agent.
            if let Some(Ok(rules)) = spec.repeats.as_ref().map(weft_core::repeats::Rules::parse) {
                let names = weft_core::ToolCatalog::tool_names(&reg);
                for tool in rules.tools.keys().filter(|t| !names.contains(t)) {
                    let p = Problem::new(
                        format!("repeats.tools.{tool}"),
                        format!(
                            "the agent has no tool `{tool}`; its tools are: {}",
                            names.join(", ")
                        ),
                    );
                    c.problems.push(p.located(&c.text));
                }
            }
            // `trust:` names tools of the agent.
            if let Some(Ok(trust)) = spec.trust.as_ref().map(weft_core::trust::Trust::parse) {
                let infos: Vec<&weft_core::ToolInfo> = reg.infos().collect();
                for (at, why) in trust.problems(&infos) {
                    c.problems.push(Problem::new(at, why).located(&c.text));
                }
            }
            c.tools = Some(reg);
        }
        Err(e) => c.push(&e.to_string()),
    }
    c
}

/// The directory relative paths of an agent file are taken from.
pub fn base_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// A path made absolute (for recording where an agent file is).
pub fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Reads a quota file (`--quotas`, YAML): the default quota and users' own. A mistake is an
/// error naming the file, the line and the field, with what to write instead.
pub fn quotas(path: &Path) -> Result<weft_core::quota::QuotaFile> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        HostError::Invalid(format!(
            "cannot read the quota file {}: {e}; give the path of a YAML file (see docs/budgets.md, \"Quotas per user\")",
            path.display()
        ))
    })?;
    weft_core::quota::QuotaFile::parse(&text).map_err(|problems| {
        let shown = path.display().to_string();
        HostError::Invalid(format!(
            "the quota file {shown} has {} problem{}:\n{}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            problems
                .iter()
                .map(|p| format!("  {}", p.in_file(&shown)))
                .collect::<Vec<_>>()
                .join("\n")
        ))
    })
}
