//! weft's tools: the [`Tool`] trait, the [`Registry`] that validates and dispatches calls, and
//! the kinds of tools: built-ins, local commands, declarative HTTP calls, MCP servers and other
//! agents. Secrets are resolved only when a tool runs, and the registry redacts them from
//! everything it returns.
//!
//! # Declarations (the `tools:` list of an agent file)
//!
//! ```yaml
//! secrets:
//!   crm_token: {env: CRM_TOKEN}          # or {file: path/relative/to/the/agent/file}
//! tools:
//!   - builtin: http_get                  # config: {allow_hosts: [..], allow_private, max_bytes, timeout}
//!   - {builtin: fs_read, config: {workspace: ws}}   # also fs_write, fs_list
//!   - builtin: todo_write
//!   - builtin: ask_user                  # the runtime turns calls into a wait for an answer
//!   - name: lookup                       # a local command: JSON on stdin, JSON on stdout
//!     command: [python3, lookup.py]
//!     env: {TOKEN: "{{ secrets.crm_token }}"}
//!   - name: issueRefund                  # an HTTP call
//!     input_schema: {type: object, properties: {id: {type: string}}}
//!     requires_approval: true
//!     http:
//!       method: POST
//!       url: "https://crm.example/refunds/{{ args.id }}"   # argument text is percent-encoded
//!       headers: {Authorization: "Bearer {{ secrets.crm_token }}"}
//!       body: {refund: "{{ args }}"}     # a whole-string "{{ args }}"/"{{ args.x }}" inserts JSON
//!       timeout: 10s
//!       max_response_bytes: 1048576
//!   - mcp: {name: time, command: [mcp-server-time], allow: [get_current_time], timeout: 30s}
//!   - mcp: {name: fs, url: "http://127.0.0.1:8000/mcp",
//!           headers: {Authorization: "Bearer {{ secrets.crm_token }}"}, prefix: ""}
//!   - {agent: researcher.yaml, name: researcher, description: Finds things out.}
//!   - {process: order-status.json}       # a plan reused as a tool (see weft_core::process)
//! ```
//!
//! MCP tools are named `prefix.tool` (the prefix defaults to the server name; `""` means
//! none). [`Registry::from_agent`] records MCP servers without starting them; their tools are
//! listed by [`Registry::load_mcp_tools`] or [`Registry::from_agent_async`], which start the
//! servers. Call [`Registry::shutdown`] to stop them (dropping the last clone of the registry
//! inside the tokio runtime stops them too).
#![warn(missing_docs, unreachable_pub)]

mod agent_tool;
mod builtin;
mod command;
pub mod documents;
mod fetch;
mod http;
mod knowledge;
mod mcp;
mod owned;
mod process_tool;
mod render;
pub mod sandbox;
mod secrets;
mod workspace;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use weft_core::agent::{AgentSpec, ToolDecl};
use weft_core::{ToolCatalog, ToolError, ToolInfo, ToolOutcome};

pub use agent_tool::AgentToolDecl;
pub use builtin::{ASK_USER, AskUser, BUILTIN_NAMES, Echo, Template, TodoWrite};
pub use command::CommandTool;
pub use fetch::{HttpGet, is_internal};
pub use http::HttpTool;
pub use knowledge::{KnowledgeBase, KnowledgeTool, MAX_MEMORY_BYTES, memory_text};
pub use mcp::McpServerDecl;
pub use process_tool::ProcessDecl;
pub use secrets::{Redactor, SecretSource, Secrets, SecretsError};
pub use workspace::{FsList, FsRead, FsWrite, Workspace};

/// What a tool knows about the call it is serving.
#[derive(Clone, Debug, Default)]
pub struct ToolContext {
    /// The id of the session that makes the call.
    pub session_id: String,
    /// The id of the plan step that makes the call; None for a call an agent's model makes.
    pub step: Option<String>,
    /// The call's id, as the model or the plan gave it.
    pub call_id: String,
    /// Stable for the same session, step and attempt, also when a call is re-run after a crash.
    pub idempotency_key: String,
    /// Which attempt at the call this is: 1 for the first, one more for each retry.
    pub attempt: u32,
}

/// A tool: metadata and a call.
pub trait Tool: Send + Sync + 'static {
    /// The tool's name, description, category and argument schema.
    fn info(&self) -> &ToolInfo;
    /// Runs the tool with `args` (already validated against its schema by the registry): its
    /// result as JSON, or an error the model is shown.
    fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send;
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe form of [`Tool`], used only inside the registry.
trait DynTool: Send + Sync {
    fn info(&self) -> &ToolInfo;
    fn call_boxed(&self, args: Value, ctx: ToolContext) -> BoxFuture<'_, Result<Value, ToolError>>;
}

impl<T: Tool> DynTool for T {
    fn info(&self) -> &ToolInfo {
        Tool::info(self)
    }
    fn call_boxed(&self, args: Value, ctx: ToolContext) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(self.call(args, ctx))
    }
}

/// Errors building a registry.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    /// Two tools have the same name.
    #[error("tool `{0}` is declared twice; tool names must be unique")]
    Duplicate(String),
    /// A tool's `input_schema` (or `output_schema`, as `field` says) does not compile as a
    /// JSON Schema.
    #[error("tool `{name}`: {field} is not a valid JSON Schema: {message}")]
    BadSchema {
        /// `input_schema` or `output_schema`.
        field: &'static str,
        /// The tool's name.
        name: String,
        /// The schema compiler's error.
        message: String,
    },
    /// A tool declaration is wrong; the message names it (`tools[i]`) and what to change.
    #[error("{0}")]
    Declaration(String),
    /// A secret the tools use is not declared or does not resolve.
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    /// An MCP server could not be started or connected to, or would not list its tools.
    #[error("{0}")]
    Mcp(ToolError),
}

struct Entry {
    tool: Arc<dyn DynTool>,
    validator: Option<jsonschema::Validator>,
    /// The check of the tool's declared `output_schema`.
    output: Option<jsonschema::Validator>,
}

/// The tools an agent has, by name. Validates every call's arguments before it runs, refuses
/// tools outside the allowed set, and redacts secrets from results and errors.
///
/// Clones share tools, MCP connections and secrets; [`Registry::restrict`] makes a clone that
/// offers fewer tools.
#[derive(Default, Clone)]
pub struct Registry {
    entries: BTreeMap<String, Arc<Entry>>,
    infos: BTreeMap<String, ToolInfo>,
    allowed: Option<Arc<BTreeSet<String>>>,
    secrets: Secrets,
    mcp: Vec<Arc<mcp::McpServer>>,
    agents: Vec<AgentToolDecl>,
    /// The store behind the memory and document tools, once a runtime attaches it.
    knowledge: knowledge::Slot,
    processes: Vec<ProcessDecl>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.tool_names())
            .field(
                "mcp_servers",
                &self.mcp.iter().map(|s| &s.decl.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A schema check's error, with where in the value it is.
fn at_path(e: &jsonschema::ValidationError<'_>) -> String {
    let at = e.instance_path().to_string();
    if at.is_empty() {
        e.to_string()
    } else {
        format!("{at}: {e}")
    }
}

fn at(i: usize) -> impl Fn(String) -> ToolsError {
    move |m| ToolsError::Declaration(format!("tools[{i}]: {m}"))
}

impl Registry {
    /// An empty registry without secrets.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry whose tools (and redactor) use these secrets.
    pub fn with_secrets(secrets: Secrets) -> Self {
        Self {
            secrets,
            ..Self::default()
        }
    }

    /// Adds a tool. Its name must be new and its input schema valid.
    pub fn register<T: Tool>(&mut self, tool: T) -> Result<(), ToolsError> {
        let info = Tool::info(&tool).clone();
        if self.entries.contains_key(&info.name) {
            return Err(ToolsError::Duplicate(info.name));
        }
        let schema = &info.input_schema;
        let validator = if schema.as_object().is_some_and(|o| o.is_empty()) || schema.is_null() {
            None
        } else {
            Some(
                jsonschema::validator_for(schema).map_err(|e| ToolsError::BadSchema {
                    field: "input_schema",
                    name: info.name.clone(),
                    message: e.to_string(),
                })?,
            )
        };
        let output = match &info.output_schema {
            Some(schema) => {
                Some(
                    jsonschema::validator_for(schema).map_err(|e| ToolsError::BadSchema {
                        field: "output_schema",
                        name: info.name.clone(),
                        message: e.to_string(),
                    })?,
                )
            }
            None => None,
        };
        self.entries.insert(
            info.name.clone(),
            Arc::new(Entry {
                tool: Arc::new(tool),
                validator,
                output,
            }),
        );
        self.infos.insert(info.name.clone(), self.shown(info));
        Ok(())
    }

    /// A tool's metadata as the model, the output and the logs see it: a secret value inside
    /// its description or its schema (a default, an example, an enum; an MCP server may put one
    /// there) is redacted. Property names stay as they are (they are the call's structure);
    /// arguments are still validated against the schema as the tool declared it.
    fn shown(&self, mut info: ToolInfo) -> ToolInfo {
        let r = self.redactor();
        r.redact_in_place(&mut info.description);
        redact_schema(&r, &mut info.input_schema);
        if let Some(schema) = &mut info.output_schema {
            redact_schema(&r, schema);
        }
        info
    }

    /// Builds the registry an agent file declares. `base_dir` is the agent file's directory.
    /// Secrets come from the environment and files as declared (see [`Secrets::from_spec`]).
    ///
    /// MCP servers are recorded but not started, so their tools are not listed yet: call
    /// [`Registry::load_mcp_tools`] (or build with [`Registry::from_agent_async`]).
    pub fn from_agent(spec: &AgentSpec, base_dir: &Path) -> Result<Self, ToolsError> {
        let secrets = Secrets::from_spec(&spec.secrets, base_dir, BTreeMap::new())?;
        Self::from_agent_with_secrets(spec, base_dir, secrets)
    }

    /// Like [`Registry::from_agent`], with secrets made by the caller (e.g. with session
    /// overrides).
    pub fn from_agent_with_secrets(
        spec: &AgentSpec,
        base_dir: &Path,
        secrets: Secrets,
    ) -> Result<Self, ToolsError> {
        let mut reg = Self::with_secrets(secrets);
        let decls = spec.tool_decls().map_err(ToolsError::Declaration)?;
        for (i, decl) in decls.into_iter().enumerate() {
            match decl {
                ToolDecl::Command(c) => reg.register(
                    CommandTool::from_decl(c, base_dir)
                        .and_then(|t| t.with_secrets(reg.secrets.clone()))
                        .map_err(at(i))?,
                )?,
                ToolDecl::Builtin(b) => {
                    builtin::register(&mut reg, b, base_dir).map_err(|e| match e {
                        ToolsError::Declaration(m) => at(i)(m),
                        other => other,
                    })?
                }
                ToolDecl::Other { kind: "http", raw } => reg.register(
                    HttpTool::from_decl(&raw, Some(reg.secrets.clone())).map_err(at(i))?,
                )?,
                ToolDecl::Other { kind: "mcp", raw } => {
                    let decl = McpServerDecl::parse(&raw).map_err(at(i))?;
                    if reg.mcp.iter().any(|s| s.decl.name == decl.name) {
                        return Err(at(i)(format!(
                            "mcp server `{}` is declared twice; server names must be unique",
                            decl.name
                        )));
                    }
                    let server = mcp::McpServer::new(decl, base_dir, Some(reg.secrets.clone()))
                        .map_err(at(i))?;
                    reg.mcp.push(Arc::new(server));
                }
                ToolDecl::Other { kind: "agent", raw } => {
                    let decl = AgentToolDecl::parse(&raw, base_dir).map_err(at(i))?;
                    reg.register(agent_tool::AgentTool {
                        info: decl.info(),
                        path: decl.path.clone(),
                    })?;
                    reg.agents.push(decl);
                }
                ToolDecl::Other {
                    kind: "process",
                    raw,
                } => {
                    let decl = ProcessDecl::parse(&raw, base_dir).map_err(at(i))?;
                    reg.register(process_tool::ProcessTool {
                        info: decl.info(),
                        path: decl.path.clone(),
                    })?;
                    reg.processes.push(decl);
                }
                ToolDecl::Other { kind, .. } => {
                    return Err(at(i)(format!(
                        "`{kind}` tools are not supported by this build of weft"
                    )));
                }
            }
        }
        if let Some(wf) = &spec.workflow {
            for (name, step) in &wf.steps {
                let Some(file) = &step.agent else { continue };
                let at = |m: String| {
                    ToolsError::Declaration(format!("workflow.steps.{name}.agent: {m}"))
                };
                let decl = AgentToolDecl::parse(
                    &serde_json::json!({
                        "agent": file,
                        "name": weft_core::workflow::delegate_tool(name),
                        "description": format!("The agent the workflow step `{name}` hands its work to."),
                    }),
                    base_dir,
                )
                .map_err(at)?;
                reg.register(agent_tool::AgentTool {
                    info: decl.info(),
                    path: decl.path.clone(),
                })?;
                reg.agents.push(decl);
            }
        }
        if let Some(allowed) = &spec.allowed_tools {
            reg = reg.restrict(allowed);
        }
        Ok(reg)
    }

    /// Builds the registry an agent file declares and lists the tools of its MCP servers
    /// (starting them). `session_overrides` give secret values for this session.
    pub async fn from_agent_async(
        spec: &AgentSpec,
        base_dir: &Path,
        session_overrides: BTreeMap<String, String>,
    ) -> Result<Self, ToolsError> {
        let secrets = Secrets::from_spec(&spec.secrets, base_dir, session_overrides)?;
        let mut reg = Self::from_agent_with_secrets(spec, base_dir, secrets)?;
        if let Err(e) = reg.load_mcp_tools().await {
            reg.shutdown().await;
            return Err(e);
        }
        if let Err(e) = reg.check_allowed() {
            reg.shutdown().await;
            return Err(e);
        }
        Ok(reg)
    }

    /// Every name of the allowed set must be a tool (MCP tools included, so call this once they
    /// are listed): a misspelt name would otherwise silently take tools away from the model.
    pub fn check_allowed(&self) -> Result<(), ToolsError> {
        let Some(allowed) = &self.allowed else {
            return Ok(());
        };
        let unknown: Vec<String> = allowed
            .iter()
            .filter(|n| !self.entries.contains_key(*n))
            .map(|n| {
                match weft_core::diagnose::closest(n, self.entries.keys().map(String::as_str)) {
                    Some(c) => format!("`{n}` (did you mean `{c}`?)"),
                    None => format!("`{n}`"),
                }
            })
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(ToolsError::Declaration(format!(
            "allowed_tools: {} {} no tool; the tools are: {}",
            unknown.join(", "),
            if unknown.len() == 1 {
                "matches"
            } else {
                "match"
            },
            self.entries.keys().cloned().collect::<Vec<_>>().join(", ")
        )))
    }

    /// Connects to every MCP server (those not connected yet), lists its tools and registers
    /// the allowed ones as `prefix.name` (replacing what an earlier listing registered). Errors
    /// name the server.
    pub async fn load_mcp_tools(&mut self) -> Result<(), ToolsError> {
        for server in self.mcp.clone() {
            let redactor = self.redactor();
            let infos = server.list().await.map_err(|mut e| {
                redactor.redact_error(&mut e);
                ToolsError::Mcp(e)
            })?;
            let source = format!("mcp:{}", server.decl.name);
            let old: Vec<String> = self
                .infos
                .values()
                .filter(|i| i.source == source)
                .map(|i| i.name.clone())
                .collect();
            for name in old {
                self.entries.remove(&name);
                self.infos.remove(&name);
            }
            for (remote, info) in infos {
                self.register(mcp::McpTool {
                    info,
                    remote,
                    server: server.clone(),
                })?;
            }
        }
        Ok(())
    }

    /// Stops every MCP server this registry (and its clones) started.
    pub async fn shutdown(&self) {
        for s in &self.mcp {
            s.shutdown().await;
        }
    }

    /// A view that lists and runs only the named tools (and those this registry already
    /// allows); a call to any other tool is refused with kind `refused`.
    #[must_use]
    pub fn restrict(&self, allowed: &[String]) -> Self {
        let mut set: BTreeSet<String> = allowed.iter().cloned().collect();
        if let Some(prev) = &self.allowed {
            set.retain(|n| prev.contains(n));
        }
        Self {
            allowed: Some(Arc::new(set)),
            ..self.clone()
        }
    }

    fn is_allowed(&self, name: &str) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(name))
    }

    /// Gives the memory and document tools (`remember`, `recall`, `forget`,
    /// `search_documents`) their store. The first one attached stays.
    pub fn attach_knowledge(&self, kb: Arc<dyn KnowledgeBase>) {
        let _ = self.knowledge.set(kb);
    }

    pub(crate) fn knowledge_slot(&self) -> knowledge::Slot {
        Arc::clone(&self.knowledge)
    }

    /// The redactor that knows every secret value this registry's tools resolved.
    pub fn redactor(&self) -> Redactor {
        self.secrets.redactor()
    }

    /// The agent tools declared (`- agent: file.yaml`), for the runtime to run as sub-agents.
    pub fn agent_tools(&self) -> impl Iterator<Item = &AgentToolDecl> {
        self.agents.iter().filter(|a| self.is_allowed(&a.name))
    }

    /// The processes declared (`- process: file.json`), for the runtime to run as linked
    /// sessions.
    pub fn process_tools(&self) -> impl Iterator<Item = &ProcessDecl> {
        self.processes.iter().filter(|p| self.is_allowed(&p.name))
    }

    /// The MCP servers that sent `notifications/tools/list_changed` since their tools were last
    /// loaded. Calls already use the server's new list (a removed tool fails as
    /// `unknown_tool`); call [`Registry::load_mcp_tools`] to offer new tools too.
    pub fn mcp_servers_changed(&self) -> Vec<String> {
        self.mcp
            .iter()
            .filter(|s| s.list_changed())
            .map(|s| s.decl.name.clone())
            .collect()
    }

    /// The declared MCP servers' names.
    pub fn mcp_servers(&self) -> Vec<String> {
        self.mcp.iter().map(|s| s.decl.name.clone()).collect()
    }

    /// Checks that the tool is allowed and the arguments match its input schema.
    pub fn check_args(&self, name: &str, args: &Value) -> Result<(), ToolError> {
        if self.entries.contains_key(name) && !self.is_allowed(name) {
            return Err(ToolError::new(
                "refused",
                format!(
                    "`{name}` is not allowed here; allowed tools: {}",
                    self.tool_names().join(", ")
                ),
            ));
        }
        let Some(entry) = self.entries.get(name).filter(|_| self.is_allowed(name)) else {
            return Err(ToolError::new(
                "unknown_tool",
                format!(
                    "no tool named `{name}`; known tools: {}",
                    self.tool_names().join(", ")
                ),
            ));
        };
        if let Some(v) = &entry.validator {
            let errors: Vec<String> = v.iter_errors(args).map(|e| at_path(&e)).collect();
            if !errors.is_empty() {
                return Err(ToolError::new(
                    "invalid_arguments",
                    format!(
                        "arguments for `{name}` do not match its input schema: {}",
                        errors.join("; ")
                    ),
                )
                .with_detail(args.clone()));
            }
        }
        Ok(())
    }

    /// Runs a call: refuses tools outside the allowed set, validates the arguments (a call that
    /// fails validation never runs), calls the tool, redacts secrets from what it returns, and
    /// marks whether a failure may be retried.
    pub async fn invoke(&self, name: &str, args: Value, ctx: ToolContext) -> ToolOutcome {
        let redactor = self.redactor();
        if let Err(mut error) = self.check_args(name, &args) {
            redactor.redact_error(&mut error);
            return ToolOutcome::Error { error };
        }
        let Some(entry) = self.entries.get(name).cloned() else {
            return ToolOutcome::Error {
                error: ToolError::new("unknown_tool", format!("no tool named `{name}`")),
            };
        };
        let idempotent = entry.tool.info().idempotent;
        match entry.tool.call_boxed(args, ctx).await {
            Ok(mut output) => {
                // What weft accepts it must be able to read back (see weft_core::limits).
                if let Err(message) =
                    weft_core::limits::check_depth(&output, &format!("the output of `{name}`"))
                {
                    return ToolOutcome::Error {
                        error: ToolError::new("invalid_output", message),
                    };
                }
                if let Some(v) = &entry.output {
                    let errors: Vec<String> = v.iter_errors(&output).map(|e| at_path(&e)).collect();
                    if !errors.is_empty() {
                        let mut error = ToolError::new(
                            "invalid_output",
                            format!(
                                "the output of `{name}` does not match its output_schema: {}",
                                errors.join("; ")
                            ),
                        )
                        .with_detail(output);
                        redactor.redact_error(&mut error);
                        return ToolOutcome::Error { error };
                    }
                }
                redactor.redact_value(&mut output);
                ToolOutcome::Ok { output }
            }
            Err(mut error) => {
                if weft_core::limits::depth(&error.detail) > weft_core::limits::MAX_VALUE_DEPTH {
                    error.detail = Value::String(format!(
                        "(the detail was dropped: it nests deeper than {} levels)",
                        weft_core::limits::MAX_VALUE_DEPTH
                    ));
                }
                redactor.redact_error(&mut error);
                let retryable = match error.kind.as_str() {
                    "spawn" => true,
                    // A command's exit code is its answer unless the tool declared it passing.
                    "exit_status" => idempotent && error.retryable,
                    "invalid_arguments" | "unknown_tool" | "refused" | "ask_user"
                    | "agent_tool" | "process_tool" | "secret" | "template" | "tool_error"
                    // The same sandbox stops the same call again.
                    | "sandbox" => false,
                    _ => idempotent,
                };
                ToolOutcome::Error {
                    error: error.retryable(retryable),
                }
            }
        }
    }

    /// The metadata of every allowed tool, by name.
    pub fn infos(&self) -> impl Iterator<Item = &ToolInfo> {
        self.infos.values().filter(|i| self.is_allowed(&i.name))
    }
}

/// What `weft tools list AGENT` shows: every tool of the agent file at `agent_file` (MCP
/// servers are started to list theirs, then stopped), with name, source, description,
/// category, flags and input schema. Secrets must resolve (as for a run).
pub async fn list_agent_tools(
    spec: &AgentSpec,
    base_dir: &Path,
) -> Result<Vec<ToolInfo>, ToolsError> {
    let reg = Registry::from_agent_async(spec, base_dir, BTreeMap::new()).await?;
    let infos = reg.infos().cloned().collect();
    reg.shutdown().await;
    Ok(infos)
}

impl ToolCatalog for Registry {
    fn tool_info(&self, name: &str) -> Option<&ToolInfo> {
        self.infos.get(name).filter(|_| self.is_allowed(name))
    }
    fn tool_names(&self) -> Vec<String> {
        self.infos().map(|i| i.name.clone()).collect()
    }
}

/// The schema of one entry of an agent file's `tools`: a command, a built-in, an HTTP endpoint,
/// an MCP server or another agent.
pub fn declaration_schema() -> Value {
    use weft_core::agent::{BuiltinToolDecl, CommandToolDecl, schema::of};
    serde_json::json!({
        "anyOf": [
            of::<CommandToolDecl>(),
            of::<BuiltinToolDecl>(),
            of::<http::HttpToolDecl>(),
            of::<mcp::McpDeclOuter>(),
            of::<agent_tool::Raw>(),
            of::<process_tool::Raw>(),
        ]
    })
}

/// Redacts the string values inside a JSON Schema, leaving its keys (keywords and property
/// names) as they are.
fn redact_schema(r: &Redactor, schema: &mut Value) {
    match schema {
        Value::String(s) => r.redact_in_place(s),
        Value::Array(items) => items.iter_mut().for_each(|v| redact_schema(r, v)),
        Value::Object(map) => map.values_mut().for_each(|v| redact_schema(r, v)),
        _ => {}
    }
}
