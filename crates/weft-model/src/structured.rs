//! Structured replies: instructions for the prompt, validation of the reply against the
//! request's schema, and bounded retries that feed the validation error back to the model.

use std::future::Future;

use serde_json::Value;

use crate::{DeltaSink, Message, ModelError, ModelReply, ModelRequest, Usage};

/// How many times an invalid structured reply is asked for again.
pub(crate) const MAX_FIX_ATTEMPTS: u32 = 2;

/// One call on the wire, as a provider makes it.
pub(crate) trait Wire: Sync {
    fn provider(&self) -> &str;
    fn call_once(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> impl Future<Output = Result<ModelReply, ModelError>> + Send;
}

/// The text added to the system prompt when the reply must match `schema`.
pub(crate) fn instructions(schema: &Value) -> String {
    format!(
        "Reply with only a JSON value (no prose, no code fences) that matches this JSON Schema:\n{}",
        serde_json::to_string(schema).unwrap_or_default()
    )
}

/// `messages` with the schema instructions appended to the (first) system message.
pub(crate) fn with_instructions(messages: &[Message], schema: &Value) -> Vec<Message> {
    let text = instructions(schema);
    let mut out = messages.to_vec();
    match out.iter_mut().find_map(|m| match m {
        Message::System { content } => Some(content),
        _ => None,
    }) {
        Some(content) => {
            content.push_str("\n\n");
            content.push_str(&text);
        }
        None => out.insert(0, Message::System { content: text }),
    }
    out
}

/// The JSON inside a reply: trimmed, without a surrounding Markdown code fence.
pub(crate) fn extract_json(text: &str) -> &str {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let rest = rest.strip_prefix("json").unwrap_or(rest);
        if let Some(inner) = rest.trim_end().strip_suffix("```") {
            return inner.trim();
        }
    }
    t
}

/// Checks a reply text; gives the cleaned JSON text, or what is wrong.
fn check(validator: &jsonschema::Validator, text: &str) -> Result<String, String> {
    let json = extract_json(text);
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("the reply is not JSON ({e})"))?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(json.to_owned())
    } else {
        Err(format!(
            "the reply does not match the schema: {}",
            errors.join("; ")
        ))
    }
}

/// A call that, when the request has a reply schema, validates the reply and asks again (at
/// most [`MAX_FIX_ATTEMPTS`] times) with the validation error. Usage covers all attempts.
pub(crate) async fn complete<W: Wire>(
    wire: &W,
    req: &ModelRequest,
    deltas: Option<DeltaSink>,
) -> Result<ModelReply, ModelError> {
    let Some(schema) = &req.response_schema else {
        return wire.call_once(req, deltas).await;
    };
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        ModelError::Config(format!(
            "the reply schema of this `{}` call is not a valid JSON Schema: {e}",
            req.purpose.as_str()
        ))
    })?;
    let mut attempt_req = req.clone();
    let mut usage = Usage::default();
    let mut attempt = 0;
    loop {
        let mut reply = wire.call_once(&attempt_req, deltas.clone()).await?;
        usage.add(&reply.usage);
        if !reply.tool_calls.is_empty() && reply.content.trim().is_empty() {
            reply.usage = usage;
            return Ok(reply);
        }
        match check(&validator, &reply.content) {
            Ok(clean) => {
                reply.content = clean;
                reply.usage = usage;
                return Ok(reply);
            }
            Err(problem) if attempt >= MAX_FIX_ATTEMPTS => {
                return Err(ModelError::Malformed {
                    provider: wire.provider().to_owned(),
                    message: format!("{problem} (after {} attempts)", MAX_FIX_ATTEMPTS + 1),
                    body: reply.content,
                });
            }
            Err(problem) => {
                attempt_req.messages.push(Message::Assistant {
                    content: reply.content,
                    tool_calls: vec![],
                });
                attempt_req.messages.push(Message::User {
                    content: format!(
                        "Your reply was not accepted: {problem}. Reply again with only a JSON value that matches the schema."
                    ),
                });
                attempt += 1;
            }
        }
    }
}

/// Moves system instructions into the first user message, prefixed `[System instructions]`,
/// for servers without a system role. Returns the messages without system messages.
pub(crate) fn fold_system(messages: &[Message]) -> Vec<Message> {
    let system: Vec<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let mut rest: Vec<Message> = messages
        .iter()
        .filter(|m| !matches!(m, Message::System { .. }))
        .cloned()
        .collect();
    if system.is_empty() {
        return rest;
    }
    let prefix = format!("[System instructions]\n{}", system.join("\n\n"));
    match rest.first_mut() {
        Some(Message::User { content }) => {
            *content = format!("{prefix}\n\n{content}");
        }
        _ => rest.insert(0, Message::User { content: prefix }),
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fences_are_stripped_and_errors_named() {
        assert_eq!(extract_json("```json\n{\"a\": 1}\n```"), "{\"a\": 1}");
        assert_eq!(extract_json("  [1] "), "[1]");
        let schema =
            json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}});
        let v = jsonschema::validator_for(&schema).unwrap();
        assert_eq!(check(&v, "```\n{\"a\": 2}\n```").unwrap(), "{\"a\": 2}");
        let e = check(&v, "{\"a\": \"x\"}").unwrap_err();
        assert!(e.contains("/a"), "{e}");
        assert!(check(&v, "sure!").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn system_folds_into_the_first_user_message() {
        let m = vec![
            Message::System {
                content: "be brief".into(),
            },
            Message::User {
                content: "hi".into(),
            },
        ];
        let f = fold_system(&m);
        assert_eq!(
            f,
            vec![Message::User {
                content: "[System instructions]\nbe brief\n\nhi".into()
            }]
        );
        let only = fold_system(&m[..1]);
        assert_eq!(
            only,
            vec![Message::User {
                content: "[System instructions]\nbe brief".into()
            }]
        );
    }
}
