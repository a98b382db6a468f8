//! The built-in tools over long-term memory and documents: `remember`, `recall`, `forget` and
//! `search_documents`. They reach the session store through a [`KnowledgeBase`] the runtime
//! attaches to the registry ([`Registry::attach_knowledge`](crate::Registry::attach_knowledge)),
//! which decides whose memories a call may see from the session (its user and agent), never
//! from the model's arguments. A model stores memories for the session's user only; agent and
//! public memories and documents are added by people (`weft memory add`, `weft docs add`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use weft_core::{ToolError, ToolInfo};

use crate::{Redactor, Tool, ToolContext};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The most results one call returns.
pub(crate) const MAX_RESULTS: usize = 20;

/// The longest memory, in bytes: a fact in a few sentences, not a document (documents are added
/// with `weft docs add`).
pub const MAX_MEMORY_BYTES: usize = 2000;

/// The text a memory is stored with: trimmed, with every secret value `redactor` knows replaced
/// by `[secret:NAME]`, so no secret reaches the store. The one place a memory's text is made,
/// for the `remember` tool and `weft memory add` alike. An empty or too long text is refused
/// with the reason.
pub fn memory_text(redactor: &Redactor, text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("a memory needs some text".into());
    }
    let text = redactor.redact_str(text).into_owned();
    if text.len() > MAX_MEMORY_BYTES {
        return Err(format!(
            "a memory is at most {MAX_MEMORY_BYTES} bytes (this one is {}): keep one short fact per memory, and add longer texts as documents",
            text.len()
        ));
    }
    Ok(text)
}

/// Long-term memory and documents as the tools see them: every call names its session, and the
/// base reads only what that session's user and agent may read.
pub trait KnowledgeBase: Send + Sync {
    /// Stores `text` as a memory of the session's user; its id.
    fn remember<'a>(&'a self, session: &'a str, text: String)
    -> BoxFuture<'a, Result<i64, String>>;
    /// The best memories for `query` (the user's, the agent's and public ones), as JSON hits.
    fn recall<'a>(
        &'a self,
        session: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Value, String>>;
    /// Deletes the user's memory `id`; whether there was one.
    fn forget<'a>(&'a self, session: &'a str, id: i64) -> BoxFuture<'a, Result<bool, String>>;
    /// The best document chunks for `query`, as JSON hits citing `source:position`.
    fn search_documents<'a>(
        &'a self,
        session: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Value, String>>;
}

/// Where a registry's knowledge tools find the base, once the runtime attaches one.
pub(crate) type Slot = Arc<OnceLock<Arc<dyn KnowledgeBase>>>;

/// Which of the four tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Remember,
    Recall,
    Forget,
    SearchDocuments,
}

impl Op {
    pub(crate) fn of(name: &str) -> Option<Self> {
        match name {
            "remember" => Some(Self::Remember),
            "recall" => Some(Self::Recall),
            "forget" => Some(Self::Forget),
            "search_documents" => Some(Self::SearchDocuments),
            _ => None,
        }
    }
}

/// One of the knowledge tools.
pub struct KnowledgeTool {
    pub(crate) info: ToolInfo,
    op: Op,
    slot: Slot,
    redactor: Redactor,
}

impl KnowledgeTool {
    pub(crate) fn new(op: Op, slot: Slot, redactor: Redactor) -> Self {
        let query = json!({"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for, in a few words"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "description": "the most results (default 5)"}
        }, "required": ["query"]});
        let (name, description, schema, idempotent) = match op {
            Op::Remember => (
                "remember",
                "Remember a fact about the user for later conversations.",
                json!({"type": "object", "properties": {"text": {"type": "string", "description": "the fact, in one or two sentences"}}, "required": ["text"]}),
                false,
            ),
            Op::Recall => (
                "recall",
                "Search long-term memory (the user's, the agent's and public facts).",
                query.clone(),
                true,
            ),
            Op::Forget => (
                "forget",
                "Forget one of the user's memories, by the id recall gave.",
                json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}),
                true,
            ),
            Op::SearchDocuments => (
                "search_documents",
                "Search the documents; each result cites its source as file:position (a line; a PDF's page).",
                query,
                true,
            ),
        };
        Self {
            info: ToolInfo {
                name: name.into(),
                description: description.into(),
                category: Some("memory".into()),
                input_schema: schema,
                idempotent,
                parallel: true,
                requires_approval: false,
                source: "builtin".into(),
                output_schema: None,
            },
            op,
            slot,
            redactor,
        }
    }
}

fn limit(args: &Value) -> usize {
    args.get("limit")
        .and_then(Value::as_u64)
        .map_or(5, |n| usize::try_from(n).unwrap_or(MAX_RESULTS))
        .clamp(1, MAX_RESULTS)
}

fn failed(message: String) -> ToolError {
    ToolError::new("knowledge", message).retryable(true)
}

impl Tool for KnowledgeTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let Some(kb) = self.slot.get() else {
            return Err(ToolError::new(
                "refused",
                format!(
                    "`{}` needs the session store, and this run has none attached",
                    self.info.name
                ),
            ));
        };
        let s = ctx.session_id.as_str();
        let text = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    ToolError::new(
                        "invalid_arguments",
                        format!("`{key}` must be a non-empty string"),
                    )
                })
        };
        match self.op {
            Op::Remember => {
                // Secrets never reach the store.
                let fact = memory_text(&self.redactor, text("text")?)
                    .map_err(|e| ToolError::new("invalid_arguments", e))?;
                let id = kb.remember(s, fact.clone()).await.map_err(failed)?;
                Ok(json!({"id": id, "remembered": fact}))
            }
            Op::Recall => {
                let hits = kb
                    .recall(s, text("query")?, limit(&args))
                    .await
                    .map_err(failed)?;
                Ok(json!({"memories": hits}))
            }
            Op::Forget => {
                let id = args.get("id").and_then(Value::as_i64).ok_or_else(|| {
                    ToolError::new("invalid_arguments", "`id` must be an integer (from recall)")
                })?;
                let gone = kb.forget(s, id).await.map_err(failed)?;
                Ok(json!({"forgotten": gone}))
            }
            Op::SearchDocuments => {
                let hits = kb
                    .search_documents(s, text("query")?, limit(&args))
                    .await
                    .map_err(failed)?;
                Ok(json!({"results": hits}))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::Secrets;

    #[test]
    fn a_memory_is_trimmed_redacted_and_bounded() {
        let secrets =
            Secrets::from_values(BTreeMap::from([("crm".to_owned(), "tok-1234".to_owned())]))
                .unwrap_or_default();
        let r = secrets.redactor();
        assert_eq!(
            memory_text(&r, "  the key is tok-1234 \n"),
            Ok("the key is [secret:crm]".to_owned())
        );
        assert!(memory_text(&r, " \n ").is_err_and(|e| e.contains("needs some text")));
        let long = "a".repeat(MAX_MEMORY_BYTES + 1);
        assert!(memory_text(&r, &long).is_err_and(|e| e.contains("at most 2000 bytes")));
        assert!(memory_text(&r, &long[1..]).is_ok());
    }
}
