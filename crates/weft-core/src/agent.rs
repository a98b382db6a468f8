//! The agent file: what an agent is made of. Parsing is pure (text in, spec out); the shell reads
//! the file and builds the tools.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diagnose::{self, Problem, Seg};
use crate::limits::Limits;

/// How an agent works.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Plan a data-flow graph of tool calls, execute it in waves, review, answer.
    Plan,
    /// Reason, call tools, observe, repeat.
    #[default]
    React,
    /// A state machine of steps, each with its own tools.
    Workflow,
}

/// A parsed agent file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "weft agent file")]
pub struct AgentSpec {
    /// The agent's name: what sessions, traces and other agents call it by.
    pub name: String,
    /// What the agent is for, for people (and for another agent that offers it as a tool).
    #[serde(default)]
    pub description: Option<String>,
    /// How the agent works: `react` (the default), `plan` or `workflow`.
    #[serde(default)]
    pub mode: Mode,
    /// `provider:model` or a mapping (`provider`, `name`, `base_url`, `api_key_env`, `script`, ...).
    #[serde(default)]
    #[schemars(schema_with = "schema::model")]
    pub model: Option<Value>,
    /// System instructions (a minijinja template).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Bounds on the agent's work: steps, attempts, replans, iterations, tokens and more.
    #[serde(default)]
    pub limits: Limits,
    /// What a run (the current task) and the session may spend: tokens, cost, model calls,
    /// tool calls (in all and per tool), wall time; and `on_budget: stop | ask`. Checked before
    /// every model call and tool call (see docs/budgets.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
    /// Secrets by name: `{env: VARIABLE}` or `{file: PATH}`.
    #[serde(default)]
    #[schemars(schema_with = "schema::secrets")]
    pub secrets: BTreeMap<String, Value>,
    /// Tool declarations, checked one by one into [`ToolDecl`]s.
    #[serde(default)]
    #[schemars(schema_with = "schema::tools")]
    pub tools: Vec<Value>,
    /// Only these tools are offered to and callable by the model (all when absent).
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// Wait for a person to approve each plan before it runs (plan mode).
    #[serde(default)]
    pub approve_plans: bool,
    /// A reviewer checks each answer before it is given (plan mode; default true).
    #[serde(default)]
    pub review_responses: Option<bool>,
    /// Search long-term memory for each new task and give the planner's, the ReAct loop's and
    /// workflow steps' requests what it finds ("What you remember"), within
    /// `limits.memory_tokens` and `limits.memory_items`. Default: true when the agent offers
    /// the built-in `recall` tool.
    #[serde(default)]
    pub recall_memories: Option<bool>,
    /// Skills: named instructions; the planner picks one per step (`_skill`), whose executor alone gets its instructions.
    #[serde(default)]
    #[schemars(with = "Vec<Skill>")]
    pub skills: Vec<Value>,
    /// The state machine of a workflow agent (`mode: workflow`): its steps, where a message
    /// enters, and how each step routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<crate::workflow::WorkflowSpec>,
    /// What a committed step survives: `full` (synced to disk before weft goes on; the
    /// default) or `normal` (survives a crash of weft, not a power cut). `--durability` overrides
    /// it; see [`Durability`](crate::Durability).
    #[serde(default)]
    pub durability: Option<crate::durability::Durability>,
    /// What a repeated call of a tool that is not idempotent (same tool, same arguments as a
    /// call the run already ran) meets: `refuse` (the default), `ask` or `allow`; or a mapping
    /// with `default` and `tools` (tool name to policy). See [`crate::repeats`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::repeats::schema")]
    pub repeats: Option<Value>,
    /// Which tools' outputs are trusted (`trusted_tools`; every other tool's output is
    /// untrusted), which arguments may not take untrusted data (`protect`: tool name to a list
    /// of arguments, or `all`) and what a call that would put it there meets (`on_untrusted`:
    /// `refuse`, the default, or `ask`). See [`crate::trust`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::trust::schema")]
    pub trust: Option<Value>,
}

/// A skill: named instructions. The planner picks one for a step (`_skill`); only that step's executor gets its instructions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Skill {
    /// What a plan step's `_skill` names (unique in the agent).
    pub name: String,
    /// What the skill is for, as the planner sees it.
    #[serde(default)]
    pub description: String,
    /// What the executor of a step that picked the skill follows.
    #[serde(default)]
    pub instructions: String,
}

/// A local command tool: JSON arguments on stdin, a JSON result on stdout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandToolDecl {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// What the tool does; its first line is what the planner sees.
    #[serde(default)]
    pub description: String,
    /// A group the planner's tool list shows the tool in (`general` when absent).
    #[serde(default)]
    pub category: Option<String>,
    /// The program and its arguments; never run through a shell.
    pub command: Vec<String>,
    /// JSON Schema of the arguments (default: any object).
    #[serde(default = "any_object")]
    pub input_schema: Value,
    /// JSON Schema of what the command prints (read as JSON): a call whose output does not
    /// match it fails, and a planner in the process offers a reference into the output only
    /// where it fits the parameter it fills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Safe to run twice with the same arguments: re-run after a crash, retried on failure.
    #[serde(default)]
    pub idempotent: bool,
    /// May run at the same time as other parallel calls.
    #[serde(default)]
    pub parallel: bool,
    /// A person approves each call before it runs.
    #[serde(default)]
    pub requires_approval: bool,
    /// `30s`, `500ms`, `2m`, or a number of seconds. Default 60 s.
    #[serde(default)]
    #[schemars(schema_with = "schema::duration")]
    pub timeout: Option<Value>,
    /// Environment given to the command (the rest of weft's environment is not passed on, except
    /// `PATH`, `HOME`, `LANG` and `TMPDIR`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory, relative to the agent file. Default: the agent file's directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Exit codes that mean a passing failure (e.g. 75, EX_TEMPFAIL): a call of an idempotent
    /// tool that exits with one is tried again. Any other non-zero exit is the tool's answer and
    /// is not retried.
    #[serde(default)]
    pub retry_exit_codes: Vec<i32>,
    /// What the command's process may do beyond the default sandbox, or `none` (see
    /// docs/security.md).
    #[serde(default)]
    pub sandbox: Option<crate::sandbox::SandboxDecl>,
}

/// A built-in tool, optionally renamed or re-described.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BuiltinToolDecl {
    /// Which built-in tool (`echo`, `http_get`, `fs_read`, ...).
    pub builtin: String,
    /// The name the model calls it by (default: the built-in's own).
    #[serde(default)]
    pub name: Option<String>,
    /// A description in place of the built-in's own.
    #[serde(default)]
    pub description: Option<String>,
    /// A group the planner's tool list shows the tool in (`general` when absent).
    #[serde(default)]
    pub category: Option<String>,
    /// A person approves each call before it runs.
    #[serde(default)]
    pub requires_approval: bool,
    /// Tool-specific settings (e.g. a workspace directory, an allow-list of hosts).
    #[serde(default)]
    #[schemars(schema_with = "schema::object")]
    pub config: Value,
}

/// One tool declaration of the agent file.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolDecl {
    /// A local command (a declaration with `command`).
    Command(CommandToolDecl),
    /// A built-in tool (a declaration with `builtin`).
    Builtin(BuiltinToolDecl),
    /// A kind this build knows by name but whose declaration is handled elsewhere
    /// (`http`, `mcp`, `agent`, `process`): kept raw for the tool crate.
    Other {
        /// The declaration's kind: the key that names it (`http`, `mcp`, `agent`, `process`).
        kind: &'static str,
        /// The declaration as written.
        raw: Value,
    },
}

fn any_object() -> Value {
    serde_json::json!({"type": "object"})
}

/// An error in an agent file, naming the file and the place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    /// The agent file, as the caller named it.
    pub file: String,
    /// Every problem found, each with its line and column when known.
    pub message: String,
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "agent file {}: {}", self.file, self.message)
    }
}

impl std::error::Error for AgentError {}

impl AgentError {
    /// The error of a file with these problems, each with its line and column.
    pub fn of(file: &str, problems: &[Problem]) -> Self {
        let shown = |p: &Problem| match (p.line, p.column) {
            (Some(l), Some(c)) => format!("line {l}, column {c}: {p}"),
            _ => p.to_string(),
        };
        let message = match problems {
            [one] => shown(one),
            many => format!(
                "{} problems:\n{}",
                many.len(),
                many.iter()
                    .map(|p| format!("  - {}", shown(p)))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        };
        Self {
            file: file.to_owned(),
            message,
        }
    }
}

impl AgentSpec {
    /// Parses an agent file (YAML or JSON). `file` names it in errors, which list every
    /// problem of the file ([`AgentSpec::check`]).
    pub fn parse(file: &str, text: &str) -> Result<Self, AgentError> {
        match Self::check(text) {
            (Some(spec), problems) if problems.is_empty() => Ok(spec),
            (_, problems) => Err(AgentError::of(file, &problems)),
        }
    }

    /// Every problem of an agent file's text, found in one pass, each with its YAML line and
    /// column and, for a misspelt key, the key meant; and the agent the rest of the file makes
    /// (what is wrong left out), so that what is built from it can be checked too. `None` when
    /// nothing can be made of the file (not YAML, not a mapping, no `name`).
    pub fn check(text: &str) -> (Option<Self>, Vec<Problem>) {
        let mut out = Vec::new();
        let spec = Self::read(text, &mut out);
        if let Some(spec) = &spec {
            spec.rules(&mut out);
        }
        let out = out.into_iter().map(|p| p.located(text)).collect();
        (spec, out)
    }

    fn read(text: &str, out: &mut Vec<Problem>) -> Option<Self> {
        if let Err(e) = crate::limits::check_text_depth(text, "the agent file") {
            out.push(Problem::new("", e));
            return None;
        }
        let mut value: Value = match serde_yaml_ng::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                out.push(Problem::yaml(&e));
                return None;
            }
        };
        if !value.is_object() {
            out.push(Problem::new(
                "",
                "an agent file is a mapping with at least a `name` (e.g. `name: support`)",
            ));
            return None;
        }
        // `.nan` and `.inf` read into JSON as `null`: the field would read as not given (a
        // budget's limit gone), so each is a problem of its own, and the schema's word on the
        // `null` is left out.
        let non_finite = diagnose::non_finite_numbers(text);
        let mut schema_problems = Vec::new();
        diagnose::against_schema(
            &mut value,
            &schema::of::<AgentSpec>(),
            &[],
            &mut schema_problems,
        );
        schema_problems.retain(|p| !non_finite.iter().any(|n| n.path == p.path));
        out.extend(non_finite);
        out.extend(schema_problems);
        if let Some(Value::Array(tools)) = value.get_mut("tools") {
            for (i, t) in tools.iter_mut().enumerate() {
                // A declaration of the wrong type was named by the schema's check.
                if t.is_null() {
                    continue;
                }
                if let Err(p) = tool_decl_problems(t, i) {
                    out.extend(p);
                    // Checked: what is built from the file later skips it.
                    *t = Value::Null;
                }
            }
        }
        match serde_json::from_value::<AgentSpec>(value) {
            Ok(s) => Some(s),
            Err(e) => {
                if out.is_empty() {
                    // What the schema let through and the reader refuses, where the reader is.
                    match serde_yaml_ng::from_str::<AgentSpec>(text) {
                        Err(e) => out.push(Problem::yaml(&e)),
                        Ok(_) => out.push(Problem::new("", e.to_string())),
                    }
                }
                None
            }
        }
    }

    /// The rules across fields, each problem found.
    fn rules(&self, out: &mut Vec<Problem>) {
        if self.name.trim().is_empty() {
            out.push(Problem::new(
                "name",
                "`name` is empty; give the agent a name",
            ));
        }
        if self.limits.max_parallel == 0 || self.limits.max_step_attempts == 0 {
            out.push(Problem::new(
                "limits",
                "max_parallel and max_step_attempts must be at least 1",
            ));
        }
        if let Some(b) = &self.budget {
            for (at, why) in b.problems("budget") {
                out.push(Problem::new(&at, why));
            }
        }
        out.extend(self.check_mode().iter().map(|m| Problem::from_message(m)));
        if let Some(r) = &self.repeats
            && let Err(problems) = crate::repeats::Rules::parse(r)
        {
            out.extend(problems.iter().map(|m| Problem::from_message(m)));
        }
        if let Some(t) = &self.trust
            && let Err(problems) = crate::trust::Trust::parse(t)
        {
            out.extend(problems.iter().map(|m| Problem::from_message(m)));
        }
    }

    /// The mode and what it needs agree: `mode: workflow` comes with a sound `workflow:`, and
    /// only it.
    fn check_mode(&self) -> Vec<String> {
        match (&self.mode, &self.workflow) {
            (Mode::Workflow, None) => vec![
                "mode: `mode: workflow` needs a `workflow:` with `initial` and `steps` (see docs/workflows.md)".into(),
            ],
            (Mode::Plan | Mode::React, Some(_)) => vec![
                "workflow: `workflow:` belongs to `mode: workflow`; set the mode or remove the workflow".into(),
            ],
            (Mode::Workflow, Some(wf)) => {
                let mut problems = Vec::new();
                if self.allowed_tools.is_some() {
                    problems.push("allowed_tools: `allowed_tools` does not apply to a workflow: each step lists its own `tools`; remove it".to_owned());
                }
                if self.limits.max_transitions == 0 {
                    problems.push("limits.max_transitions: must be at least 1".to_owned());
                }
                problems.extend(wf.problems());
                problems
            }
            _ => Vec::new(),
        }
    }

    /// The tool declarations, each checked; errors name the entry (`tools[2]`).
    pub fn tool_decls(&self) -> Result<Vec<ToolDecl>, String> {
        let mut out = Vec::with_capacity(self.tools.len());
        for (i, raw) in self.tools.iter().enumerate() {
            out.push(parse_tool_decl(raw).map_err(|e| format!("tools[{i}]: {e}"))?);
        }
        Ok(out)
    }
}

/// The problems of one tool declaration (`tools[i]`) that the file itself shows: its kind, keys
/// and their types, for the kinds this crate reads.
fn tool_decl_problems(raw: &mut Value, i: usize) -> Result<(), Vec<Problem>> {
    let at = [Seg::Key("tools".into()), Seg::Index(i)];
    let mut out = Vec::new();
    if let Value::Object(map) = &*raw
        && !TOOL_KINDS.iter().any(|k| map.contains_key(*k))
    {
        let hint = map
            .keys()
            .find_map(|k| diagnose::closest(k, TOOL_KINDS.iter().copied()).map(|c| (k, c)))
            .map(|(k, c)| format!(" (`{k}`: did you mean `{c}`?)"))
            .unwrap_or_default();
        let e = parse_tool_decl(raw).err().unwrap_or_default();
        out.push(Problem::new(diagnose::show_path(&at), format!("{e}{hint}")));
        return Err(out);
    }
    // `sandbox:` (of a command or a stdio MCP server) is read by hand, each problem at its field.
    let sandbox_at: Option<&[&str]> = match &*raw {
        Value::Object(m) if m.contains_key("command") => Some(&["sandbox"]),
        Value::Object(m) if m.get("mcp").is_some_and(Value::is_object) => Some(&["mcp", "sandbox"]),
        _ => None,
    };
    if let Some(keys) = sandbox_at {
        let mut at_sandbox = at.to_vec();
        at_sandbox.extend(keys.iter().map(|k| Seg::Key((*k).into())));
        let value = keys.iter().try_fold(&*raw, |v, k| v.get(*k));
        if let Some(v) = value.filter(|v| !v.is_null())
            && let Err(problems) = crate::sandbox::SandboxDecl::from_value(v)
        {
            for (sub, m) in problems {
                let mut full = at_sandbox.clone();
                full.extend(sub);
                out.push(Problem::new(diagnose::show_path(&full), m));
            }
            return Err(out);
        }
    }
    let schema = match &*raw {
        Value::Object(m) if m.contains_key("command") => schema::of::<CommandToolDecl>(),
        Value::Object(m) if m.contains_key("builtin") => schema::of::<BuiltinToolDecl>(),
        _ => serde_json::json!({}),
    };
    diagnose::against_schema(raw, &schema, &at, &mut out);
    if out.is_empty()
        && let Err(e) = parse_tool_decl(raw)
    {
        out.push(Problem::new(diagnose::show_path(&at), e));
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// The keys that say what kind of tool a declaration is.
const TOOL_KINDS: [&str; 6] = ["command", "builtin", "http", "mcp", "agent", "process"];

fn parse_tool_decl(raw: &Value) -> Result<ToolDecl, String> {
    let Value::Object(map) = raw else {
        return Err(
            "a tool is a mapping with `command`, `builtin`, `http`, `mcp`, `agent` or `process`"
                .into(),
        );
    };
    let label = map
        .get("name")
        .and_then(Value::as_str)
        .map(|n| format!(" (`{n}`)"))
        .unwrap_or_default();
    let decode = |e: serde_json::Error| format!("{label} {e}").trim().to_owned();
    if map.contains_key("command") {
        return serde_json::from_value(raw.clone())
            .map(ToolDecl::Command)
            .map_err(decode);
    }
    if map.contains_key("builtin") {
        return serde_json::from_value(raw.clone())
            .map(ToolDecl::Builtin)
            .map_err(decode);
    }
    for kind in ["http", "mcp", "agent", "process"] {
        if map.contains_key(kind) {
            return Ok(ToolDecl::Other {
                kind,
                raw: raw.clone(),
            });
        }
    }
    let keys: Vec<&str> = map.keys().map(String::as_str).collect();
    Err(format!(
        "{label} has none of `command`, `builtin`, `http`, `mcp`, `agent`, `process` (keys: {})",
        keys.join(", ")
    )
    .trim()
    .to_owned())
}

/// Parses a duration: `500ms`, `30s`, `2m`, `1h`, `7d`, or a bare number of seconds.
pub fn parse_duration(v: &Value) -> Result<std::time::Duration, String> {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.is_finite() && f >= 0.0 => bounded_duration(f, &n.to_string()),
            _ => Err(format!("{n} is not a duration; write e.g. \"30s\"")),
        },
        Value::String(s) => parse_duration_str(s),
        other => Err(format!("{other} is not a duration; write e.g. \"30s\"")),
    }
}

/// Parses `500ms`, `30s`, `2m`, `1h`, `7d`, or a bare number of seconds.
pub fn parse_duration_str(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; write e.g. 500ms, 30s, 2m, 1h or 7d"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return Err(format!("`{s}` has an unknown unit; use ms, s, m, h or d")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{s}` is not a duration"));
    }
    bounded_duration(secs, &format!("`{s}`"))
}

/// The longest duration weft accepts (a timeout, a prune age): 100 years. Longer values would
/// overflow the clock arithmetic they feed.
pub const MAX_DURATION_SECS: f64 = 100.0 * 365.0 * 86400.0;

fn bounded_duration(secs: f64, shown: &str) -> Result<std::time::Duration, String> {
    if secs > MAX_DURATION_SECS {
        return Err(format!(
            "{shown} is longer than the longest duration weft accepts (36500d, 100 years)"
        ));
    }
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("{shown}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_yaml_with_tools() {
        let spec = AgentSpec::parse(
            "a.yaml",
            "name: a\nmode: plan\nlimits: { max_parallel: 2 }\ntools:\n  - builtin: echo\n  - name: t\n    command: [\"python3\", \"t.py\"]\n    idempotent: true\n",
        );
        let spec = spec.map_err(|e| e.to_string());
        assert!(spec.is_ok(), "{spec:?}");
        let spec = spec.unwrap_or_else(|_| unreachable_spec());
        assert_eq!(spec.mode, Mode::Plan);
        assert_eq!(spec.limits.max_parallel, 2);
        assert_eq!(spec.limits.max_step_attempts, 3);
        let decls = spec.tool_decls().unwrap_or_default();
        assert!(
            matches!(&decls[1], ToolDecl::Command(c) if c.idempotent && c.command[0] == "python3")
        );
    }

    fn unreachable_spec() -> AgentSpec {
        AgentSpec::parse("x", "name: x").unwrap_or_else(|_| AgentSpec {
            name: String::new(),
            description: None,
            mode: Mode::React,
            model: None,
            instructions: None,
            limits: Limits::default(),
            secrets: BTreeMap::new(),
            tools: vec![],
            allowed_tools: None,
            approve_plans: false,
            review_responses: None,
            recall_memories: None,
            skills: vec![],
            workflow: None,
            durability: None,
            budget: None,
            repeats: None,
            trust: None,
        })
    }

    #[test]
    fn errors_name_the_file_and_the_tool() {
        let e = AgentSpec::parse("b.yaml", "name: b\ntools:\n  - name: t\n    comand: [x]\n").err();
        let text = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.contains("b.yaml") && text.contains("tools[0]") && text.contains("`t`"),
            "{text}"
        );
        let e = AgentSpec::parse("c.yaml", "name: c\nlimitz: {}\n").err();
        let text = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("c.yaml") && text.contains("limitz"), "{text}");
    }

    /// YAML's `.nan` and `.inf` read into JSON as `null`, which would read as a limit not given:
    /// each is refused where it is written, as a negative limit is.
    #[test]
    fn a_limit_that_is_not_a_finite_number_is_refused_where_it_is_written() {
        let text = "name: n\nbudget:\n  run: { cost_usd: .nan, model_calls: .NaN }\n  session: { tool_calls: .inf, input_tokens: -1 }\nlimits: { max_iterations: -.inf }\n";
        let (_, problems) = AgentSpec::check(text);
        let shown: Vec<String> = problems.iter().map(|p| p.in_file("n.yaml")).collect();
        for (at, what) in [
            (
                "n.yaml:3:10: budget.run.cost_usd",
                ".nan is not a finite number",
            ),
            (
                "n.yaml:3:26: budget.run.model_calls",
                ".nan is not a finite number",
            ),
            (
                "n.yaml:4:14: budget.session.tool_calls",
                ".inf is not a finite number",
            ),
            (
                "n.yaml:4:32: budget.session.input_tokens",
                "less than the minimum of 0",
            ),
            (
                "n.yaml:5:11: limits.max_iterations",
                "-.inf is not a finite number",
            ),
        ] {
            assert!(
                shown.iter().any(|s| s.starts_with(at) && s.contains(what)),
                "{at}: {what} in {shown:#?}"
            );
        }
        assert_eq!(shown.len(), 5, "one problem a field: {shown:#?}");
        assert!(
            AgentSpec::parse("n.yaml", "name: n\nbudget: { run: { cost_usd: 1e999 } }\n").is_err()
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_str("500ms").map(|d| d.as_millis()), Ok(500));
        assert_eq!(parse_duration_str("2m").map(|d| d.as_secs()), Ok(120));
        assert_eq!(parse_duration_str("7d").map(|d| d.as_secs()), Ok(604_800));
        assert!(parse_duration_str("5 parsecs").is_err());
        let e = parse_duration_str("18446744073709551615d").unwrap_err();
        assert!(e.contains("longer than the longest duration"), "{e}");
        assert!(parse_duration(&serde_json::json!(1e300)).is_err());
        assert!(parse_duration(&serde_json::json!(-1)).is_err());
        assert_eq!(
            parse_duration_str("36500d").map(|d| d.as_secs()),
            Ok(3_153_600_000)
        );
    }
}

/// Schemas of the agent file's fields that are read as raw JSON (checked by hand when loaded).
/// The weft binary completes `model` and `tools` with the providers' and tools' own schemas.
pub mod schema {
    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

    /// `provider:name`, `scripted:PATH`, or a mapping.
    pub fn model(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "`provider:name` (`openai:gpt-4o-mini`), `scripted:PATH`, or a mapping with `provider` and `name`",
            "anyOf": [{"type": "string"}, {"type": "object"}]
        })
    }

    /// Secrets by name: each `{env: VARIABLE}` or `{file: PATH}`.
    pub fn secrets(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "additionalProperties": {
                "oneOf": [
                    {"type": "object", "properties": {"env": {"type": "string", "description": "an environment variable"}}, "required": ["env"], "additionalProperties": false},
                    {"type": "object", "properties": {"file": {"type": "string", "description": "a file, relative to the agent file"}}, "required": ["file"], "additionalProperties": false}
                ]
            }
        })
    }

    /// A list of tool declarations, each a mapping (the weft binary fills in their kinds).
    pub fn tools(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "array", "items": {"type": "object"}})
    }

    /// A mapping of settings, or nothing.
    pub fn object(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": ["object", "null"]})
    }

    /// `30s`, `500ms`, `2m`, `1h`, `1d`, or a number of seconds.
    pub fn duration(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "`30s`, `500ms`, `2m`, `1h`, `1d`, or a number of seconds",
            "anyOf": [{"type": "string", "pattern": "^\\s*[0-9]+(\\.[0-9]+)?\\s*(ms|s|m|h|d)?\\s*$"}, {"type": "number", "minimum": 0}, {"type": "null"}]
        })
    }

    /// The schema of one type with every type it uses inlined (no `$defs`), without `$schema`.
    pub fn of<T: JsonSchema>() -> serde_json::Value {
        let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
            s.inline_subschemas = true;
        });
        let mut v = settings
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value();
        if let Some(m) = v.as_object_mut() {
            m.remove("$schema");
        }
        v
    }
}
