//! weft's tools: the [`Tool`] trait, the [`Registry`] that validates and dispatches calls, and
//! the first kinds of tools (built-ins and local commands).

mod builtin;
mod command;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use weft_core::agent::{AgentSpec, ToolDecl};
use weft_core::{ToolCatalog, ToolError, ToolInfo, ToolOutcome};

pub use builtin::{Echo, Template};
pub use command::CommandTool;

/// What a tool knows about the call it is serving.
#[derive(Clone, Debug, Default)]
pub struct ToolContext {
    pub session_id: String,
    pub step: Option<String>,
    pub call_id: String,
    /// Stable for the same session, step and attempt, also when a call is re-run after a crash.
    pub idempotency_key: String,
    pub attempt: u32,
}

/// A tool: metadata and a call.
pub trait Tool: Send + Sync + 'static {
    fn info(&self) -> &ToolInfo;
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
    #[error("tool `{0}` is declared twice; tool names must be unique")]
    Duplicate(String),
    #[error("tool `{name}`: input_schema is not a valid JSON Schema: {message}")]
    BadSchema { name: String, message: String },
    #[error("{0}")]
    Declaration(String),
}

struct Entry {
    tool: Arc<dyn DynTool>,
    validator: Option<jsonschema::Validator>,
}

/// The tools an agent has, by name. Validates every call's arguments before it runs.
#[derive(Default, Clone)]
pub struct Registry {
    entries: BTreeMap<String, Arc<Entry>>,
    infos: BTreeMap<String, ToolInfo>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.infos.keys())
            .finish()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
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
                    name: info.name.clone(),
                    message: e.to_string(),
                })?,
            )
        };
        self.entries.insert(
            info.name.clone(),
            Arc::new(Entry {
                tool: Arc::new(tool),
                validator,
            }),
        );
        self.infos.insert(info.name.clone(), info);
        Ok(())
    }

    /// Builds the registry an agent file declares. `base_dir` is the agent file's directory.
    pub fn from_agent(spec: &AgentSpec, base_dir: &Path) -> Result<Self, ToolsError> {
        let mut reg = Self::new();
        let decls = spec.tool_decls().map_err(ToolsError::Declaration)?;
        for (i, decl) in decls.into_iter().enumerate() {
            match decl {
                ToolDecl::Command(c) => reg.register(
                    CommandTool::from_decl(c, base_dir)
                        .map_err(|e| ToolsError::Declaration(format!("tools[{i}]: {e}")))?,
                )?,
                ToolDecl::Builtin(b) => builtin::register(&mut reg, b).map_err(|e| match e {
                    ToolsError::Declaration(m) => {
                        ToolsError::Declaration(format!("tools[{i}]: {m}"))
                    }
                    other => other,
                })?,
                ToolDecl::Other { kind, .. } => {
                    return Err(ToolsError::Declaration(format!(
                        "tools[{i}]: `{kind}` tools are not supported by this build of weft yet"
                    )));
                }
            }
        }
        Ok(reg)
    }

    /// Checks arguments against the tool's input schema.
    pub fn check_args(&self, name: &str, args: &Value) -> Result<(), ToolError> {
        let Some(entry) = self.entries.get(name) else {
            return Err(ToolError::new(
                "unknown_tool",
                format!(
                    "no tool named `{name}`; known tools: {}",
                    self.tool_names().join(", ")
                ),
            ));
        };
        if let Some(v) = &entry.validator {
            let errors: Vec<String> = v
                .iter_errors(args)
                .map(|e| {
                    let at = e.instance_path().to_string();
                    if at.is_empty() {
                        e.to_string()
                    } else {
                        format!("{at}: {e}")
                    }
                })
                .collect();
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

    /// Runs a call: validates the arguments (a call that fails validation never runs), calls
    /// the tool, and marks whether a failure may be retried.
    pub async fn invoke(&self, name: &str, args: Value, ctx: ToolContext) -> ToolOutcome {
        if let Err(error) = self.check_args(name, &args) {
            return ToolOutcome::Error { error };
        }
        let Some(entry) = self.entries.get(name).cloned() else {
            return ToolOutcome::Error {
                error: ToolError::new("unknown_tool", format!("no tool named `{name}`")),
            };
        };
        let idempotent = entry.tool.info().idempotent;
        match entry.tool.call_boxed(args, ctx).await {
            Ok(output) => ToolOutcome::Ok { output },
            Err(error) => {
                let retryable = match error.kind.as_str() {
                    "spawn" => true,
                    "invalid_arguments" | "unknown_tool" | "refused" => false,
                    _ => idempotent,
                };
                ToolOutcome::Error {
                    error: error.retryable(retryable),
                }
            }
        }
    }

    pub fn infos(&self) -> impl Iterator<Item = &ToolInfo> {
        self.infos.values()
    }
}

impl ToolCatalog for Registry {
    fn tool_info(&self, name: &str) -> Option<&ToolInfo> {
        self.infos.get(name)
    }
    fn tool_names(&self) -> Vec<String> {
        self.infos.keys().cloned().collect()
    }
}
