//! Built-in tools that need nothing outside the process.

use serde_json::{Value, json};
use weft_core::agent::BuiltinToolDecl;
use weft_core::{ToolError, ToolInfo};

use std::path::Path;

use crate::fetch::HttpGet;
use crate::workspace::{FsList, FsRead, FsWrite, Workspace};
use crate::{Registry, Tool, ToolContext, ToolsError};

/// Returns its arguments unchanged.
#[derive(Debug, Clone)]
pub struct Echo {
    info: ToolInfo,
}

impl Default for Echo {
    fn default() -> Self {
        Self {
            info: ToolInfo {
                name: "echo".into(),
                description: "Return the arguments unchanged.".into(),
                category: Some("util".into()),
                input_schema: json!({"type": "object"}),
                idempotent: true,
                parallel: true,
                requires_approval: false,
                source: "builtin".into(),
                output_schema: None,
            },
        }
    }
}

impl Tool for Echo {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Ok(args)
    }
}

/// How long the `template` built-in may render.
const TEMPLATE_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Renders a minijinja template with the other arguments as its variables.
#[derive(Debug, Clone)]
pub struct Template {
    info: ToolInfo,
}

impl Default for Template {
    fn default() -> Self {
        Self {
            info: ToolInfo {
                name: "template".into(),
                description: "Render a minijinja template (`template`) with the other arguments as variables; returns the text.".into(),
                category: Some("util".into()),
                input_schema: json!({
                    "type": "object",
                    "properties": {"template": {"type": "string", "description": "minijinja source, e.g. \"Hello {{ name }}\""}},
                    "required": ["template"]
                }),
                idempotent: true,
                parallel: true,
                requires_approval: false,
                source: "builtin".into(),
                output_schema: None,
            },
        }
    }
}

impl Tool for Template {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let source = args
            .get("template")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::new("invalid_arguments", "`template` must be a string"))?;
        // The source may come from a model, and one expression can run for minutes
        // (`{{ (() * 100000000) ~ 2 }}`): render on a blocking thread and give up after
        // TEMPLATE_TIME, so the run goes on (the thread finishes its work and is dropped).
        let source = source.to_owned();
        let render = tokio::task::spawn_blocking(move || {
            let mut env = minijinja::Environment::new();
            env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
            env.render_str(&source, &args)
                .map_err(|e| format!("could not render the template: {e:#}"))
        });
        match tokio::time::timeout(TEMPLATE_TIME, render).await {
            Ok(Ok(Ok(text))) => Ok(Value::String(text)),
            Ok(Ok(Err(message))) => Err(ToolError::new("template", message)),
            Ok(Err(e)) => Err(ToolError::new("template", format!("rendering failed: {e}"))),
            // Not `timeout`, which is retried: the same template would take as long again.
            Err(_) => Err(ToolError::new(
                "template",
                format!(
                    "the template took longer than {} s to render; simplify it",
                    TEMPLATE_TIME.as_secs()
                ),
            )),
        }
    }
}

fn customize(mut info: ToolInfo, decl: &BuiltinToolDecl) -> ToolInfo {
    if let Some(n) = &decl.name {
        info.name.clone_from(n);
    }
    if let Some(d) = &decl.description {
        info.description.clone_from(d);
    }
    if decl.category.is_some() {
        info.category.clone_from(&decl.category);
    }
    info.requires_approval |= decl.requires_approval;
    info
}

/// Keeps a to-do list: each call replaces the list and returns it whole.
#[derive(Debug, Clone)]
pub struct TodoWrite {
    info: ToolInfo,
}

impl Default for TodoWrite {
    fn default() -> Self {
        Self {
            info: ToolInfo {
                name: "todo_write".into(),
                description: "Replace the to-do list with `todos` (each {content, status: pending|in_progress|completed}); returns the whole list.".into(),
                category: Some("planning".into()),
                input_schema: json!({
                    "type": "object",
                    "properties": {"todos": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string"},
                            "status": {"enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["content", "status"]
                    }}},
                    "required": ["todos"]
                }),
                idempotent: true,
                parallel: false,
                requires_approval: false,
                source: "builtin".into(),
                output_schema: None,
            },
        }
    }
}

impl Tool for TodoWrite {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let todos = args
            .get("todos")
            .and_then(Value::as_array)
            .ok_or_else(|| ToolError::new("invalid_arguments", "`todos` must be a list"))?;
        for (i, t) in todos.iter().enumerate() {
            let ok = t.get("content").is_some_and(Value::is_string)
                && matches!(
                    t.get("status").and_then(Value::as_str),
                    Some("pending" | "in_progress" | "completed")
                );
            if !ok {
                return Err(ToolError::new(
                    "invalid_arguments",
                    format!(
                        "todos[{i}] needs `content` (text) and `status` (pending, in_progress or completed)"
                    ),
                ));
            }
        }
        let count = |s: &str| todos.iter().filter(|t| t["status"] == s).count();
        Ok(json!({
            "todos": todos,
            "pending": count("pending"),
            "in_progress": count("in_progress"),
            "completed": count("completed"),
        }))
    }
}

/// The name the runtime intercepts: a call to it becomes a durable wait for a person's answer.
pub const ASK_USER: &str = "ask_user";

/// Asks the person running the agent a question. The runtime intercepts calls named
/// [`ASK_USER`] before they run; when called directly it fails with kind `ask_user`.
#[derive(Debug, Clone)]
pub struct AskUser {
    info: ToolInfo,
}

impl Default for AskUser {
    fn default() -> Self {
        Self {
            info: ToolInfo {
                name: ASK_USER.into(),
                description: "Ask the user a question and wait for the answer (use when you cannot go on without it).".into(),
                category: Some("interaction".into()),
                input_schema: json!({
                    "type": "object",
                    "properties": {"question": {"type": "string"}},
                    "required": ["question"]
                }),
                idempotent: true,
                parallel: false,
                requires_approval: false,
                source: "builtin".into(),
                output_schema: None,
            },
        }
    }
}

impl Tool for AskUser {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let question = args.get("question").cloned().unwrap_or(Value::Null);
        Err(ToolError::new(
            "ask_user",
            format!(
                "`ask_user` waits for a person; the runtime answers it. Question: {}",
                question.as_str().unwrap_or_default()
            ),
        )
        .with_detail(json!({"question": question})))
    }
}

/// The names of the built-in tools, as `builtin:` names them; `register` builds each.
pub const BUILTIN_NAMES: &[&str] = &[
    "echo",
    "template",
    "todo_write",
    "ask_user",
    "remember",
    "recall",
    "forget",
    "search_documents",
    "http_get",
    "fs_read",
    "fs_write",
    "fs_list",
];

fn no_config(decl: &BuiltinToolDecl) -> Result<(), ToolsError> {
    if decl.config.is_null() || decl.config.as_object().is_some_and(|m| m.is_empty()) {
        Ok(())
    } else {
        Err(ToolsError::Declaration(format!(
            "built-in `{}` takes no config",
            decl.builtin
        )))
    }
}

/// Registers the built-in a declaration names. `base_dir` is the agent file's directory.
pub(crate) fn register(
    reg: &mut Registry,
    decl: BuiltinToolDecl,
    base_dir: &Path,
) -> Result<(), ToolsError> {
    let bad = |m: String| ToolsError::Declaration(m);
    match decl.builtin.as_str() {
        "echo" => {
            no_config(&decl)?;
            let mut t = Echo::default();
            t.info = customize(t.info, &decl);
            reg.register(t)
        }
        "template" => {
            no_config(&decl)?;
            let mut t = Template::default();
            t.info = customize(t.info, &decl);
            reg.register(t)
        }
        "todo_write" => {
            no_config(&decl)?;
            let mut t = TodoWrite::default();
            t.info = customize(t.info, &decl);
            reg.register(t)
        }
        "ask_user" => {
            no_config(&decl)?;
            let mut t = AskUser::default();
            // Renaming would hide it from the runtime, which looks for this name.
            let name = t.info.name.clone();
            t.info = customize(t.info, &decl);
            t.info.name = name;
            reg.register(t)
        }
        "remember" | "recall" | "forget" | "search_documents" => {
            no_config(&decl)?;
            let Some(op) = crate::knowledge::Op::of(&decl.builtin) else {
                return Err(bad(format!("unknown built-in `{}`", decl.builtin)));
            };
            let mut t = crate::KnowledgeTool::new(op, reg.knowledge_slot(), reg.redactor());
            t.info = customize(t.info, &decl);
            reg.register(t)
        }
        "http_get" => {
            let mut t = HttpGet::from_config(&decl.config).map_err(bad)?;
            t.info = customize(t.info, &decl);
            reg.register(t)
        }
        "fs_read" | "fs_write" | "fs_list" => {
            let ws = Workspace::from_config(&decl.config, base_dir, &decl.builtin).map_err(bad)?;
            match decl.builtin.as_str() {
                "fs_read" => {
                    let mut t = FsRead::new(ws);
                    t.info = customize(t.info, &decl);
                    reg.register(t)
                }
                "fs_write" => {
                    let mut t = FsWrite::new(ws);
                    t.info = customize(t.info, &decl);
                    reg.register(t)
                }
                _ => {
                    let mut t = FsList::new(ws);
                    t.info = customize(t.info, &decl);
                    reg.register(t)
                }
            }
        }
        other => Err(bad(format!(
            "unknown built-in `{other}`{}; the built-ins are {}",
            weft_core::diagnose::did_you_mean(other, BUILTIN_NAMES.iter().copied()),
            BUILTIN_NAMES.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn echo_returns_arguments() {
        let out = Echo::default()
            .call(json!({"a": 1}), ToolContext::default())
            .await;
        assert_eq!(out.ok(), Some(json!({"a": 1})));
    }

    #[tokio::test]
    async fn template_renders_and_reports_undefined_variables() {
        let t = Template::default();
        let out = t
            .call(
                json!({"template": "Hi {{ name }}!", "name": "Ada"}),
                ToolContext::default(),
            )
            .await;
        assert_eq!(out.ok(), Some(json!("Hi Ada!")));
        let err = t
            .call(
                json!({"template": "Hi {{ nobody }}"}),
                ToolContext::default(),
            )
            .await
            .err();
        assert_eq!(err.map(|e| e.kind), Some("template".to_owned()));
    }

    fn declare(name: &str) -> BuiltinToolDecl {
        BuiltinToolDecl {
            builtin: name.to_owned(),
            name: None,
            description: None,
            category: None,
            requires_approval: false,
            config: Value::Null,
        }
    }

    #[test]
    fn every_listed_built_in_is_built_and_a_misspelt_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        for name in BUILTIN_NAMES {
            let mut decl = declare(name);
            if name.starts_with("fs_") {
                decl.config = json!({"workspace": "ws"});
            }
            let mut reg = Registry::new();
            let r = register(&mut reg, decl, dir.path());
            assert!(r.is_ok(), "{name}: {r:?}");
            assert!(reg.infos().any(|i| i.name == *name), "{name}");
        }
        let mut reg = Registry::new();
        let e = register(&mut reg, declare("ehco"), dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("unknown built-in `ehco` (did you mean `echo`?)"),
            "{e}"
        );
        for name in BUILTIN_NAMES {
            assert!(e.contains(name), "{name} missing from: {e}");
        }
    }
}
