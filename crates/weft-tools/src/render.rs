//! Templates in tool declarations: minijinja over `args` and `secrets`, rendered when the tool
//! runs.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_core::ToolError;

use crate::secrets::Secrets;

/// The variables a declaration's templates see.
pub(crate) struct Vars {
    args: Value,
    secrets: BTreeMap<String, String>,
}

impl Vars {
    /// Resolves the secrets now (only when some template of the tool uses them).
    pub(crate) fn new(
        args: Value,
        secrets: Option<&Secrets>,
        needs_secrets: bool,
    ) -> Result<Self, ToolError> {
        let secrets = match secrets {
            Some(s) if needs_secrets => s.resolve_all()?,
            _ => BTreeMap::new(),
        };
        Ok(Self { args, secrets })
    }

    /// Renders one template string. `what` names it in errors (`url`, `headers.Authorization`).
    pub(crate) fn render(&self, tool: &str, what: &str, source: &str) -> Result<String, ToolError> {
        self.render_with(tool, what, source, &self.args)
    }

    /// Renders a URL template: text from the arguments is percent-encoded (so `../admin` or
    /// `a&b=c` stays one path segment or query value); secrets are inserted as they are.
    pub(crate) fn render_url(
        &self,
        tool: &str,
        what: &str,
        source: &str,
    ) -> Result<String, ToolError> {
        self.render_with(tool, what, source, &encode_leaves(&self.args))
    }

    fn render_with(
        &self,
        tool: &str,
        what: &str,
        source: &str,
        args: &Value,
    ) -> Result<String, ToolError> {
        if !source.contains("{{") && !source.contains("{%") {
            return Ok(source.to_owned());
        }
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        let ctx = minijinja::context! {
            args => minijinja::Value::from_serialize(args),
            secrets => minijinja::Value::from_serialize(&self.secrets),
        };
        env.render_str(source, ctx).map_err(|e| {
            ToolError::new(
                "template",
                format!("`{tool}`: could not render {what} (`{source}`): {e:#}"),
            )
        })
    }

    /// Renders a JSON template: every string leaf is a template; a leaf that is exactly
    /// `{{ args }}` or `{{ args.a.b }}` inserts that JSON value itself (not its text).
    pub(crate) fn render_json(
        &self,
        tool: &str,
        what: &str,
        template: &Value,
    ) -> Result<Value, ToolError> {
        Ok(match template {
            Value::String(s) => {
                if let Some(v) = self.whole_args_ref(s) {
                    v
                } else {
                    Value::String(self.render(tool, what, s)?)
                }
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.render_json(tool, &format!("{what}[{i}]"), v))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        Ok((
                            k.clone(),
                            self.render_json(tool, &format!("{what}.{k}"), v)?,
                        ))
                    })
                    .collect::<Result<_, ToolError>>()?,
            ),
            other => other.clone(),
        })
    }

    fn whole_args_ref(&self, s: &str) -> Option<Value> {
        let inner = s.trim().strip_prefix("{{")?.strip_suffix("}}")?.trim();
        let path = inner.strip_prefix("args")?;
        if path.is_empty() {
            return Some(self.args.clone());
        }
        let mut cur = &self.args;
        for part in path.strip_prefix('.')?.split('.') {
            if part.is_empty() || !part.chars().all(|c| c.is_alphanumeric() || c == '_') {
                return None;
            }
            cur = cur.get(part)?;
        }
        Some(cur.clone())
    }
}

/// Every string leaf percent-encoded (all but `A-Z a-z 0-9 - . _ ~`).
fn encode_leaves(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(percent_encode(s)),
        Value::Array(a) => Value::Array(a.iter().map(encode_leaves).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), encode_leaves(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_args_and_secrets() {
        let s = Secrets::from_values(BTreeMap::from([("tok".to_owned(), "abcd1234".to_owned())]))
            .expect("long enough");
        let v = Vars::new(json!({"id": 7, "o": {"x": [1]}}), Some(&s), true).expect("vars");
        assert_eq!(
            v.render("t", "url", "https://x/{{ args.id }}?k={{ secrets.tok }}")
                .ok(),
            Some("https://x/7?k=abcd1234".to_owned())
        );
        let body = v
            .render_json(
                "t",
                "body",
                &json!({"all": "{{ args }}", "o": "{{ args.o }}", "s": "n={{ args.id }}", "n": 3}),
            )
            .expect("body");
        assert_eq!(
            body,
            json!({"all": {"id": 7, "o": {"x": [1]}}, "o": {"x": [1]}, "s": "n=7", "n": 3})
        );
        let v2 = Vars::new(json!({"id": "../admin?x=1&y"}), None, false).expect("vars");
        assert_eq!(
            v2.render_url("t", "url", "https://x/r/{{ args.id }}").ok(),
            Some("https://x/r/..%2Fadmin%3Fx%3D1%26y".to_owned())
        );
        let e = v.render("t", "url", "{{ args.missing }}").err();
        assert_eq!(e.map(|e| e.kind), Some("template".to_owned()));
    }
}
