//! Structured replies: instructions for the prompt, validation of the reply against the
//! request's schema, and bounded retries that feed the validation error back to the model.

use std::future::Future;

use serde_json::Value;

use crate::{DeltaSink, Message, Messages, ModelError, ModelReply, ModelRequest, Usage};
use weft_core::model::RefusedTry;

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

/// The line added to the system prompt when the server constrains the reply to the schema
/// itself: the model is told the form, and the schema stays out of the prompt.
pub(crate) const HINT: &str = "Reply with only a JSON value (no prose, no code fences).";

/// The text added to the system prompt when the reply must match `schema` and the server does
/// not constrain it.
pub(crate) fn instructions(schema: &Value) -> String {
    format!(
        "Reply with only a JSON value (no prose, no code fences) that matches this JSON Schema:\n{}",
        serde_json::to_string(schema).unwrap_or_default()
    )
}

/// The messages a provider sends, borrowed from the request: the schema instructions (when
/// given) appended to the first system message (or sent as a system message of their own), and,
/// for servers without a system role, the system text moved into the first user message,
/// prefixed `[System instructions]`. Only the messages that change are copied.
pub(crate) struct Prepared<'a> {
    messages: &'a Messages,
    /// A message sent before all the others.
    front: Option<Message>,
    /// A message sent instead of the one at this index.
    replaced: Option<(usize, Message)>,
    /// System messages are left out (their text is in `front` or `replaced`).
    drop_system: bool,
}

impl<'a> Prepared<'a> {
    pub(crate) fn new(
        messages: &'a Messages,
        instructions: Option<String>,
        system_role: bool,
    ) -> Self {
        let mut p = Self {
            messages,
            front: None,
            replaced: None,
            drop_system: !system_role,
        };
        if system_role {
            if let Some(text) = instructions {
                match messages.iter().enumerate().find_map(|(i, m)| match m {
                    Message::System { content } => Some((i, content)),
                    _ => None,
                }) {
                    Some((i, content)) => {
                        p.replaced = Some((
                            i,
                            Message::System {
                                content: format!("{content}\n\n{text}"),
                            },
                        ));
                    }
                    None => p.front = Some(Message::System { content: text }),
                }
            }
            return p;
        }
        let mut system: Vec<String> = Vec::new();
        let mut first_other = None;
        for (i, m) in messages.iter().enumerate() {
            match m {
                Message::System { content } => system.push(content.clone()),
                _ => {
                    first_other.get_or_insert((i, m));
                }
            }
        }
        if let Some(text) = instructions {
            match system.first_mut() {
                Some(first) => {
                    first.push_str("\n\n");
                    first.push_str(&text);
                }
                None => system.push(text),
            }
        }
        if system.is_empty() {
            return p;
        }
        let prefix = format!("[System instructions]\n{}", system.join("\n\n"));
        match first_other {
            Some((i, Message::User { content })) => {
                p.replaced = Some((
                    i,
                    Message::User {
                        content: format!("{prefix}\n\n{content}"),
                    },
                ));
            }
            _ => p.front = Some(Message::User { content: prefix }),
        }
        p
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Message> {
        self.front
            .iter()
            .chain(
                self.messages
                    .iter()
                    .enumerate()
                    .filter_map(|(i, m)| match &self.replaced {
                        Some((at, r)) if *at == i => Some(r),
                        _ if self.drop_system && matches!(m, Message::System { .. }) => None,
                        _ => Some(m),
                    }),
            )
    }
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
    let mut refused = Vec::new();
    loop {
        // An attempt that fails after earlier ones were answered keeps what they used.
        let mut reply = match wire.call_once(&attempt_req, deltas.clone()).await {
            Ok(r) => r,
            Err(e) => return Err(e.with_usage(usage)),
        };
        usage.add(&reply.usage);
        if !reply.tool_calls.is_empty() && reply.content.trim().is_empty() {
            reply.usage = usage;
            reply.refused = refused;
            return Ok(reply);
        }
        match check(&validator, &reply.content) {
            Ok(clean) => {
                reply.content = clean;
                reply.usage = usage;
                reply.refused = refused;
                return Ok(reply);
            }
            Err(problem) if attempt >= MAX_FIX_ATTEMPTS => {
                return Err(ModelError::Malformed {
                    provider: wire.provider().to_owned(),
                    message: format!("{problem} (after {} attempts)", MAX_FIX_ATTEMPTS + 1),
                    body: reply.content,
                    usage,
                });
            }
            Err(problem) => {
                refused.push(RefusedTry::new(&problem, &reply.content));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A wire whose first reply does not fit the schema (and used tokens) and whose second
    /// attempt fails.
    struct FailsSecond(std::sync::atomic::AtomicU32);

    impl Wire for FailsSecond {
        fn provider(&self) -> &str {
            "test"
        }
        async fn call_once(
            &self,
            _req: &ModelRequest,
            _deltas: Option<DeltaSink>,
        ) -> Result<ModelReply, ModelError> {
            match self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => Ok(ModelReply {
                    content: "not json".into(),
                    usage: Usage {
                        input_tokens: 100,
                        output_tokens: 7,
                        cost_usd: Some(0.25),
                        ..Usage::default()
                    },
                    ..ModelReply::default()
                }),
                _ => Err(ModelError::Http {
                    provider: "test".into(),
                    status: 503,
                    body: "overloaded".into(),
                    retry_after: None,
                }),
            }
        }
    }

    #[tokio::test]
    async fn a_call_that_fails_after_an_unusable_reply_keeps_that_replys_usage() {
        let req = ModelRequest {
            purpose: crate::Purpose::Review,
            call_index: 0,
            purpose_index: 0,
            messages: Messages::from(vec![Message::User {
                content: "hi".into(),
            }]),
            tools: Vec::new(),
            response_schema: Some(json!({"type": "object"})),
            exact_schema: None,
            max_tokens: None,
            temperature: None,
        };
        let wire = FailsSecond(std::sync::atomic::AtomicU32::new(0));
        let e = complete(&wire, &req, None).await.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(e.to_string().contains("HTTP 503"), "{e}");
        let u = e.usage();
        assert_eq!((u.input_tokens, u.output_tokens), (100, 7));
        assert_eq!(u.cost_usd, Some(0.25));
    }

    /// Replies `not json`, then a valid object.
    struct FixesSecond(std::sync::atomic::AtomicU32);

    impl Wire for FixesSecond {
        fn provider(&self) -> &str {
            "test"
        }
        async fn call_once(
            &self,
            _req: &ModelRequest,
            _deltas: Option<DeltaSink>,
        ) -> Result<ModelReply, ModelError> {
            let first = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            Ok(ModelReply {
                content: if first { "not json" } else { "{\"a\": 1}" }.into(),
                usage: Usage {
                    input_tokens: 10,
                    output_tokens: 2,
                    ..Usage::default()
                },
                ..ModelReply::default()
            })
        }
    }

    #[tokio::test]
    async fn a_reply_asked_for_again_keeps_the_refused_one_and_why() {
        let req = ModelRequest {
            purpose: crate::Purpose::Review,
            call_index: 0,
            purpose_index: 0,
            messages: Messages::from(vec![Message::User {
                content: "hi".into(),
            }]),
            tools: Vec::new(),
            response_schema: Some(json!({"type": "object"})),
            exact_schema: None,
            max_tokens: None,
            temperature: None,
        };
        let wire = FixesSecond(std::sync::atomic::AtomicU32::new(0));
        let reply = complete(&wire, &req, None).await.unwrap();
        assert_eq!(reply.content, "{\"a\": 1}");
        assert_eq!(reply.refused.len(), 1, "{:?}", reply.refused);
        assert_eq!(reply.refused[0].text, "not json");
        assert!(
            reply.refused[0]
                .reason
                .starts_with("the reply is not JSON ("),
            "{:?}",
            reply.refused[0]
        );
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.output_tokens),
            (20, 4)
        );
    }

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
        let fold = |m: &[Message], instructions: Option<&str>| -> Vec<Message> {
            let m = Messages::from(m.to_vec());
            Prepared::new(&m, instructions.map(str::to_owned), false)
                .iter()
                .cloned()
                .collect()
        };
        let m = vec![
            Message::System {
                content: "be brief".into(),
            },
            Message::User {
                content: "hi".into(),
            },
        ];
        assert_eq!(
            fold(&m, None),
            vec![Message::User {
                content: "[System instructions]\nbe brief\n\nhi".into()
            }]
        );
        assert_eq!(
            fold(&m[..1], None),
            vec![Message::User {
                content: "[System instructions]\nbe brief".into()
            }]
        );
        assert_eq!(
            fold(&m, Some("json")),
            vec![Message::User {
                content: "[System instructions]\nbe brief\n\njson\n\nhi".into()
            }]
        );
        assert_eq!(
            fold(&m[1..], Some("json")),
            vec![Message::User {
                content: "[System instructions]\njson\n\nhi".into()
            }]
        );
        assert_eq!(fold(&m[1..], None), m[1..].to_vec());
    }

    #[test]
    fn instructions_join_the_first_system_message_or_come_first() {
        let with = |m: &[Message]| -> Vec<Message> {
            let m = Messages::from(m.to_vec());
            Prepared::new(&m, Some("json".into()), true)
                .iter()
                .cloned()
                .collect()
        };
        let user = Message::User {
            content: "hi".into(),
        };
        let system = |c: &str| Message::System { content: c.into() };
        assert_eq!(
            with(&[system("a"), user.clone(), system("b")]),
            vec![system("a\n\njson"), user.clone(), system("b")]
        );
        assert_eq!(
            with(std::slice::from_ref(&user)),
            vec![system("json"), user.clone()]
        );
        let m = Messages::from(vec![system("a"), user.clone()]);
        assert_eq!(
            Prepared::new(&m, None, true)
                .iter()
                .cloned()
                .collect::<Vec<_>>(),
            m.to_vec()
        );
    }
}
