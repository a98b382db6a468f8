//! Whether a request fits the model's context window (`context_size` in the model mapping).
//!
//! Before a request is sent, its prompt is estimated part by part (the system prompt, the tools
//! offered, the conversation, the reply schema when it is written into the prompt) at one token
//! per four bytes, and `max_tokens` is added: when the sum is larger than the context, the call
//! is refused with an error that lists each part with its estimate, largest first, and what to do.
//! A quarter of the bytes is a rough count: a server's tokenizer often counts more (JSON and
//! code split into short tokens), so the check refuses only requests that cannot fit; one it lets
//! through may still be refused by the server.

use crate::{Message, ModelError, ModelRequest};

/// Tokens estimated for `bytes` of text: a quarter of the bytes, rounded up.
pub(crate) fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// What a request's prompt is made of, in bytes, and the room kept for the reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Room {
    /// The system messages (and a one-line reply-format hint, when one is added).
    pub(crate) system: usize,
    /// The reply schema written into the prompt as instructions (0 when the server holds it).
    pub(crate) schema_in_prompt: usize,
    /// Whether the request has a reply schema.
    pub(crate) has_schema: bool,
    /// The tool definitions as sent.
    pub(crate) tools: usize,
    /// How many tools are offered.
    pub(crate) tool_count: usize,
    /// The other messages: the task, replies, tool calls and results.
    pub(crate) conversation: usize,
    /// How many other messages.
    pub(crate) messages: usize,
    /// The reply's limit, when one is sent.
    pub(crate) max_tokens: Option<u32>,
}

impl Room {
    /// The parts of `req`. `tools` is the byte length of the tool definitions as sent;
    /// `instructions` the text added to the system prompt and whether it is the schema itself
    /// (`true`) or only a hint to reply in JSON (`false`).
    pub(crate) fn of(
        req: &ModelRequest,
        tools: usize,
        instructions: Option<(&str, bool)>,
        max_tokens: Option<u32>,
    ) -> Self {
        let mut room = Self {
            has_schema: req.response_schema.is_some(),
            tools,
            tool_count: req.tools.len(),
            max_tokens,
            ..Self::default()
        };
        for m in req.messages.iter() {
            match m {
                Message::System { content } => room.system += content.len(),
                Message::User { content } => {
                    room.conversation += content.len();
                    room.messages += 1;
                }
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    room.conversation += content.len()
                        + tool_calls
                            .iter()
                            .map(|c| c.name.len() + c.arguments.to_string().len())
                            .sum::<usize>();
                    room.messages += 1;
                }
                Message::Tool { content, .. } => {
                    room.conversation += content.len();
                    room.messages += 1;
                }
            }
        }
        match instructions {
            Some((text, true)) => room.schema_in_prompt = text.len(),
            Some((text, false)) => room.system += text.len(),
            None => {}
        }
        room
    }

    /// The estimated prompt tokens plus `max_tokens`.
    pub(crate) fn needed(&self) -> u64 {
        tokens(self.system)
            + tokens(self.schema_in_prompt)
            + tokens(self.tools)
            + tokens(self.conversation)
            + u64::from(self.max_tokens.unwrap_or(0))
    }

    /// `Ok` when the request may fit a context of `context` tokens; otherwise the error that
    /// says what takes the room and what to do.
    pub(crate) fn check(&self, provider: &str, context: Option<u32>) -> Result<(), ModelError> {
        let Some(context) = context else {
            return Ok(());
        };
        if self.needed() <= u64::from(context) {
            return Ok(());
        }
        Err(ModelError::WouldNotFit {
            provider: provider.to_owned(),
            message: self.message(context),
        })
    }

    fn message(&self, context: u32) -> String {
        let plural = |n: usize, one: &str| {
            if n == 1 {
                format!("1 {one}")
            } else {
                format!("{n} {one}s")
            }
        };
        let schema_note = if !self.has_schema {
            " (no reply schema)"
        } else if self.schema_in_prompt == 0 {
            " (the server constrains the reply to the schema)"
        } else {
            ""
        };
        let mut parts: Vec<(u64, String)> = vec![
            (tokens(self.system), "system prompt".to_owned()),
            (
                tokens(self.tools),
                format!("tools offered ({})", plural(self.tool_count, "tool")),
            ),
            (
                tokens(self.conversation),
                format!("conversation ({})", plural(self.messages, "message")),
            ),
            (
                tokens(self.schema_in_prompt),
                format!("schema in prompt{schema_note}"),
            ),
        ];
        let reply = match self.max_tokens {
            Some(n) => (u64::from(n), "max_tokens (kept for the reply)".to_owned()),
            None => (0, "max_tokens (not set)".to_owned()),
        };
        parts.push(reply);
        // Largest first; the order above among equals.
        parts.sort_by_key(|p| std::cmp::Reverse(p.0));
        let listed: Vec<String> = parts
            .iter()
            .map(|(n, what)| format!("{what} ~{n}"))
            .collect();
        format!(
            "about {} tokens are needed and the model's context is {context} (`context_size` in the \
             model mapping); what takes the room, largest first (prompt parts estimated as a quarter \
             of their bytes): {}. To make it fit: raise `context_size` if the server's context is \
             larger (start the server with a larger context), lower `max_tokens`, offer fewer \
             tools, shorten the instructions, or set `limits.max_context_tokens` so that older \
             turns are summarised",
            self.needed(),
            listed.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Messages, Purpose, ToolDef};
    use serde_json::json;

    fn request(tools: usize) -> ModelRequest {
        ModelRequest {
            purpose: Purpose::Plan,
            call_index: 0,
            purpose_index: 0,
            messages: Messages::from(vec![
                Message::System {
                    content: "s".repeat(400),
                },
                Message::User {
                    content: "u".repeat(40),
                },
            ]),
            tools: (0..tools)
                .map(|i| ToolDef {
                    name: format!("t{i}"),
                    description: "d".into(),
                    parameters: json!({"type": "object"}),
                })
                .collect(),
            response_schema: Some(json!({"type": "object"})),
            exact_schema: None,
            max_tokens: None,
            temperature: None,
        }
    }

    #[test]
    fn a_request_that_fits_passes_and_no_context_means_no_check() {
        let room = Room::of(&request(0), 0, Some(("reply in JSON", false)), Some(100));
        // 400 + 13 bytes of system, 40 of conversation: 104 + 10 + 100.
        assert_eq!(room.needed(), 214);
        assert!(room.check("openai", Some(214)).is_ok());
        assert!(room.check("openai", None).is_ok());
    }

    #[test]
    fn the_refusal_names_each_part_with_its_estimate_largest_first_and_what_to_do() {
        let req = request(2);
        let schema_text = "x".repeat(800);
        let room = Room::of(&req, 120, Some((&schema_text, true)), Some(300));
        let e = room.check("openai", Some(500)).unwrap_err();
        assert!(matches!(e, ModelError::WouldNotFit { .. }), "{e:?}");
        assert!(!e.is_retryable());
        let m = e.to_string();
        assert!(
            m.starts_with("openai: the request cannot fit the model's context: about 640 tokens are needed and the model's context is 500"),
            "{m}"
        );
        assert!(m.contains("a quarter of their bytes"), "{m}");
        let parts = "max_tokens (kept for the reply) ~300, schema in prompt ~200, \
                     system prompt ~100, tools offered (2 tools) ~30, conversation (1 message) ~10";
        assert!(m.contains(parts), "{m}");
        for advice in [
            "raise `context_size`",
            "lower `max_tokens`",
            "fewer tools",
            "`limits.max_context_tokens`",
        ] {
            assert!(m.contains(advice), "{advice}: {m}");
        }
    }

    #[test]
    fn a_schema_the_server_holds_takes_no_room_and_the_refusal_says_why() {
        let room = Room::of(&request(0), 0, Some(("Reply in JSON.", false)), None);
        assert_eq!(room.schema_in_prompt, 0);
        let m = room.check("openai", Some(10)).unwrap_err().to_string();
        assert!(
            m.contains("schema in prompt (the server constrains the reply to the schema) ~0"),
            "{m}"
        );
        assert!(m.contains("max_tokens (not set) ~0"), "{m}");
    }
}
