//! Built-in tools that need nothing outside the process.

use serde_json::{Value, json};
use weft_core::agent::BuiltinToolDecl;
use weft_core::{ToolError, ToolInfo};

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
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        let text = env.render_str(source, &args).map_err(|e| {
            ToolError::new("template", format!("could not render the template: {e:#}"))
        })?;
        Ok(Value::String(text))
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

/// Registers the built-in a declaration names.
pub(crate) fn register(reg: &mut Registry, decl: BuiltinToolDecl) -> Result<(), ToolsError> {
    match decl.builtin.as_str() {
        "echo" => {
            let mut t = Echo::default();
            t.info = customize(t.info, &decl);
            reg.register(t)
        }
        "template" => {
            let mut t = Template::default();
            t.info = customize(t.info, &decl);
            reg.register(t)
        }
        other => Err(ToolsError::Declaration(format!(
            "unknown built-in `{other}`; available: echo, template"
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
}
