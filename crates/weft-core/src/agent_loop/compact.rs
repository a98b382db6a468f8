//! Compaction: a conversation that outgrew its token budget has its older turns summarised by
//! the model (a `compact` call) before the call that would have overflowed. Every mode's model
//! calls pass through [`before_call`]; a request that carries no conversation (a step
//! executor's, a review's) is never the reason for one. Plan mode's conversation is its earlier
//! turns (each task and its answer), which the planner's and the resolver's requests carry.
//!
//! The summary is recorded as [`Event::HistoryCompacted`] and later requests carry it in place of
//! the messages it covers ([`crate::prompts::conversation`]); the messages themselves stay in the
//! log and in a folded [`State::history`] (a state loaded from a snapshot holds them from its
//! window on: [`crate::history::History::window`]). A cut is only ever made before a user or assistant message, so
//! a tool call and its result are always on the same side of it. Each compaction summarises the
//! previous summary and the messages after it, at most a budget's worth at a time, and keeps the
//! most recent messages within half the budget, so a conversation of any length stays bounded.
//!
//! The budget is the agent's `limits.max_context_tokens` (so per model, as an agent has one),
//! counted with [`crate::history::estimate_tokens`] (a quarter of the bytes and a few per
//! message): weft knows no model's tokenizer, and the estimate errs on the safe side for English
//! text. An empty summary is refused and fed back like any unusable reply.

use super::reply::rejected;
use super::{AgentConfig, AgentNext};
use crate::event::Event;
use crate::history::request_tokens;
use crate::model::{Message, ModelReply, ModelRequest, Purpose};
use crate::state::State;

/// What the compaction call is told.
const COMPACT_ROLE: &str = "You compress conversations between a user and an assistant that uses tools. \
Write a concise summary of the conversation below: keep every fact, name, number, decision, \
tool result and open question that a later turn may need, and drop pleasantries. \
Reply with the summary only.";

/// Whether requests of `purpose` carry the session's conversation ([`crate::prompts::conversation`]):
/// only those can be made smaller by compacting it. A step executor's or a review's request
/// carries the current turn's work only.
fn carries_conversation(purpose: Purpose) -> bool {
    matches!(
        purpose,
        Purpose::React | Purpose::Workflow | Purpose::Plan | Purpose::Respond
    )
}

/// Where the next compaction cuts the conversation: the messages `from..cut` are summarised.
/// `None` when nothing can be cut (no user or assistant message after `from` but the last).
fn cut(state: &State, budget: u64) -> Option<(usize, usize)> {
    let history = &state.history;
    let from = state.compaction.as_ref().map_or(0, |c| c.upto);
    let len = history.len();
    let boundary = |i: usize| !matches!(history.get(i), Some(Message::Tool { .. }) | None);
    // The last user or assistant message and what follows it are always carried.
    let last = (from + 1..len).rev().find(|&i| boundary(i))?;
    let keep = budget / 2;
    let mut chosen = None;
    for b in (from + 1..=last).filter(|&i| boundary(i)) {
        if chosen.is_some() && history.tokens_between(from, b) > budget {
            break;
        }
        chosen = Some(b);
        if history.tokens_between(b, len) <= keep {
            break;
        }
    }
    chosen.map(|b| (from, b))
}

/// The messages `from..to` as a transcript, at most `max_bytes` long.
fn transcript(history: &[Message], max_bytes: usize) -> String {
    let mut out = String::new();
    for m in history {
        let line = match m {
            Message::System { content } => format!("system: {content}"),
            Message::User { content } => format!("user: {content}"),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut s = format!("assistant: {content}");
                for c in tool_calls {
                    s.push_str(&format!("\n  calls {}({})", c.name, c.arguments));
                }
                s
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => format!(
                "tool {name}{}: {content}",
                if *is_error { " (error)" } else { "" }
            ),
        };
        out.push_str(&line);
        out.push('\n');
        if out.len() > max_bytes {
            let mut end = max_bytes;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out.push_str("\n[... the rest of this part was too long to include]\n");
            break;
        }
    }
    out
}

/// A `compact` call when `request` (the call a mode is about to make) would exceed the agent's
/// `max_context_tokens` and part of the conversation can be summarised; `None` otherwise.
pub(super) fn before_call(
    state: &State,
    cfg: &AgentConfig,
    request: &ModelRequest,
) -> Option<AgentNext> {
    let budget = u64::from(cfg.limits.max_context_tokens?);
    if !carries_conversation(request.purpose) || request_tokens(request) <= budget {
        return None;
    }
    let (from, to) = cut(state, budget)?;
    let part = state.history.range(from, to)?;
    let mut text = String::new();
    if let Some(c) = &state.compaction {
        text.push_str("Summary so far:\n");
        text.push_str(&c.summary);
        text.push_str("\n\n");
    }
    text.push_str("Conversation to add to the summary:\n");
    let max_bytes = usize::try_from(budget.saturating_mul(3)).unwrap_or(usize::MAX);
    text.push_str(&transcript(part, max_bytes));
    if let Some(f) = &state.turn.feedback {
        text.push_str(&format!("\nYour last summary could not be used: {f}\n"));
    }
    let messages = vec![
        Message::System {
            content: COMPACT_ROLE.to_owned(),
        },
        Message::User { content: text },
    ];
    Some(AgentNext::CallModel {
        request: ModelRequest {
            purpose: Purpose::Compact,
            call_index: state.usage.calls,
            purpose_index: state
                .usage
                .by_purpose
                .get(&Purpose::Compact)
                .copied()
                .unwrap_or(0),
            messages: messages.into(),
            tools: Vec::new(),
            response_schema: None,
            exact_schema: None,
            max_tokens: u32::try_from(budget / 4).ok().filter(|&n| n > 0),
            temperature: None,
        },
        step: None,
    })
}

/// The events a `compact` reply stands for: the summary, and where it cuts the conversation
/// (the same cut [`before_call`] made: nothing changes the conversation while the call runs).
pub(super) fn replied(state: &State, cfg: &AgentConfig, reply: &ModelReply) -> Vec<Event> {
    let summary = reply.content.trim();
    if summary.is_empty() {
        return vec![rejected(
            Purpose::Compact,
            None,
            "the summary was empty; reply with the summary as text",
        )];
    }
    let budget = cfg.limits.max_context_tokens.map_or(0, u64::from);
    match cut(state, budget) {
        Some((_, upto)) => vec![Event::HistoryCompacted {
            upto: upto as u64,
            summary: summary.to_owned(),
        }],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Mode;
    use crate::event::ToolOutcome;
    use crate::limits::Limits;
    use crate::model::{ToolCall, Usage};
    use crate::tool::ToolInfo;
    use serde_json::{Value, json};

    fn cfg(budget: u32) -> AgentConfig {
        let echo: ToolInfo =
            serde_json::from_value(json!({"name": "echo", "idempotent": true})).unwrap();
        AgentConfig {
            mode: Mode::React,
            limits: Limits {
                max_context_tokens: Some(budget),
                max_iterations: 10_000,
                ..Limits::default()
            },
            instructions: String::new(),
            tools: vec![echo],
            skills: Vec::new(),
            approve_plans: false,
            review_responses: false,
            recall_memories: false,
            workflow: None,
            budget: None,
            model_costs: crate::budget::ModelCosts::default(),
            repeats: crate::repeats::Rules::default(),
            trust: None,
        }
    }

    /// A ReAct session of `turns` echo calls with `budget`: every request the loop makes stays
    /// within the budget, the summaries reach the model, and no cut parts a call from its result.
    #[test]
    fn a_long_conversation_stays_within_its_budget() {
        let budget = 600;
        let cfg = cfg(budget);
        let mut state = super::super::react_session_started();
        let mut compactions = 0;
        let mut k = 0;
        while k < 200 {
            let next = super::super::decide(&state, &cfg);
            let AgentNext::CallModel { request, .. } = next else {
                panic!("a model call is due, got {next:?}");
            };
            let reply = if request.purpose == Purpose::Compact {
                compactions += 1;
                assert!(request_tokens(&request) <= u64::from(budget) * 2);
                ModelReply {
                    content: format!("summary {compactions}: echoed up to {k}"),
                    ..ModelReply::default()
                }
            } else {
                assert!(
                    request_tokens(&request) <= u64::from(budget),
                    "turn {k}: {} tokens",
                    request_tokens(&request)
                );
                if compactions > 0 {
                    let shown: Vec<&Message> = request.messages.iter().collect();
                    assert!(shown.iter().any(|m| matches!(m, Message::System { content } | Message::User { content } if content.contains(&format!("summary {compactions}:")))));
                    assert!(
                        !matches!(shown.get(2), Some(Message::Tool { .. })),
                        "the carried part starts with a call's result"
                    );
                }
                k += 1;
                ModelReply {
                    tool_calls: vec![ToolCall {
                        id: format!("c{k}"),
                        name: "echo".into(),
                        arguments: json!({"text": "some words to echo back, turn after turn"}),
                        provider_id: None,
                    }],
                    usage: Usage::default(),
                    ..ModelReply::default()
                }
            };
            let purpose = request.purpose;
            drop(request);
            for e in super::super::model_replied(&state, &cfg, purpose, None, reply) {
                state.apply(&e);
            }
            if purpose == Purpose::Compact {
                continue;
            }
            let AgentNext::Start { events, calls } = super::super::decide(&state, &cfg) else {
                panic!("the echo call starts");
            };
            for e in &events {
                state.apply(e);
            }
            for c in calls {
                state.apply(&Event::ToolCallFinished {
                    call_id: c.call_id,
                    outcome: ToolOutcome::Ok {
                        output: json!("some words to echo back, turn after turn"),
                    },
                    duration_ms: 0,
                });
            }
        }
        assert!(compactions > 5, "{compactions} compactions");
        // The whole conversation is kept.
        assert_eq!(state.history.len(), 1 + 2 * 200);
    }

    #[test]
    fn without_a_budget_nothing_is_compacted() {
        let mut cfg = cfg(1);
        cfg.limits.max_context_tokens = None;
        let mut state = State::new();
        state.apply(&Event::SessionStarted {
            session_id: "s".into(),
            agent: "a".into(),
            input: Value::Null,
            mode: Some(Mode::React),
            parent_id: None,
        });
        state.apply(&Event::TurnStarted {
            task: "a long task ".repeat(100),
            input: Value::Null,
        });
        let AgentNext::CallModel { request, .. } = super::super::decide(&state, &cfg) else {
            panic!("a model call is due");
        };
        assert_eq!(request.purpose, Purpose::React);
    }
}
