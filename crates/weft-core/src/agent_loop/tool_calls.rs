//! The model's own tool calls (ReAct, and the turns inside a workflow step): which calls of the
//! last reply have no result yet, and how they start. A call of a tool outside the offered set
//! is refused, `ask_user` becomes a wait, a repeat of a call of the run that is not idempotent
//! is refused or asked about ([`crate::repeats`]), a call that needs approval waits for it, and
//! the rest run in rounds as a plan's steps run in waves (a call of a tool that is not
//! `parallel` alone, calls of parallel tools together, up to `max_parallel`). The model is asked
//! again once every call of the reply has its result.

use serde_json::Value;

use super::wait::{approval, approval_request, is_yes, question};
use super::{ASK_USER, AgentNext};
use crate::engine::Invocation;
use crate::event::Event;
use crate::model::{Message, ToolCall};
use crate::repeats::{Policy, Rules};
use crate::state::{State, call_key};
use crate::tool::ToolInfo;

/// The tool calls of the last assistant message that have no result yet.
pub(crate) fn unanswered(state: &State) -> Vec<&ToolCall> {
    let mut answered = std::collections::HashSet::new();
    for m in state.history.iter().rev() {
        match m {
            Message::Tool { call_id, .. } => {
                answered.insert(call_id.as_str());
            }
            Message::Assistant { tool_calls, .. } => {
                return tool_calls
                    .iter()
                    .filter(|c| !answered.contains(c.id.as_str()))
                    .collect();
            }
            _ => return Vec::new(),
        }
    }
    Vec::new()
}

/// What to do with the calls of the last reply that have no result: `None` when there are
/// none. `tools` are those offered; `rules` say what a repeat of an earlier call of the run
/// meets ([`crate::repeats`]); `scope` names who may use them in a refusal ("this agent").
pub(crate) fn start(
    state: &State,
    tools: &[ToolInfo],
    rules: &Rules,
    max_parallel: usize,
    scope: &str,
) -> Option<AgentNext> {
    let pending = unanswered(state);
    if pending.is_empty() {
        return None;
    }
    let mut record = Vec::new();
    let mut events = Vec::new();
    let mut calls = Vec::new();
    let mut wave_parallel: Option<bool> = None;
    for c in pending {
        let blocked = |reason: String| Event::ToolCallBlocked {
            step: None,
            call_id: Some(c.id.clone()),
            tool: c.name.clone(),
            args: c.arguments.clone(),
            reason,
            repeats: None,
        };
        let Some(info) = tools.iter().find(|t| t.name == c.name) else {
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            let available = if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            };
            record.push(blocked(format!(
                "`{}` is not a tool {scope} may use; available: {available}",
                c.name
            )));
            continue;
        };
        if c.name == ASK_USER {
            let text = c
                .arguments
                .get("question")
                .and_then(Value::as_str)
                .unwrap_or("The agent has a question.");
            record.push(Event::WaitingForUser {
                request: question(
                    text.to_owned(),
                    None,
                    Some(ASK_USER.into()),
                    Some(c.id.clone()),
                ),
            });
            break;
        }
        if let Some(rep) = super::repeats::check(state, rules, info, &c.arguments) {
            match (rep.policy, approval(state, &c.id)) {
                (Policy::Ask, None) => {
                    let mut request = approval_request(&c.name, &c.arguments, None, &c.id);
                    request.question = rep.question(&c.name, &c.arguments);
                    record.push(Event::WaitingForUser { request });
                    break;
                }
                (Policy::Ask, Some(answer)) if is_yes(answer) => {}
                _ => {
                    record.push(rep.refused(None, Some(c.id.clone()), &c.name, &c.arguments));
                    continue;
                }
            }
        }
        if info.requires_approval {
            match approval(state, &c.id) {
                None => {
                    record.push(Event::WaitingForUser {
                        request: approval_request(&c.name, &c.arguments, None, &c.id),
                    });
                    break;
                }
                Some(answer) if !is_yes(answer) => {
                    record.push(blocked(format!("the user denied this call: {answer}")));
                    continue;
                }
                Some(_) => {}
            }
        }
        // The calls of one reply run in rounds, as a plan's steps run in waves: a call of a
        // tool that is not `parallel` runs alone; calls of parallel tools run together, up to
        // `max_parallel`. The rest wait for the next round.
        match wave_parallel {
            None => wave_parallel = Some(info.parallel),
            Some(together) => {
                if !together || !info.parallel || calls.len() >= max_parallel.max(1) {
                    continue;
                }
            }
        }
        let inv = Invocation {
            call_id: c.id.clone(),
            step: None,
            item: None,
            tool: c.name.clone(),
            args: c.arguments.clone(),
            attempt: 1,
            idempotency_key: call_key(
                &state.session_id,
                state.calls.started + calls.len() as u64 + 1,
                &c.name,
                &c.arguments,
            ),
            delay_ms: 0,
        };
        events.push(Event::ToolCallStarted {
            call_id: inv.call_id.clone(),
            step: None,
            item: None,
            tool: inv.tool.clone(),
            args: inv.args.clone(),
            attempt: 1,
            idempotency_key: inv.idempotency_key.clone(),
            untrusted_from: Vec::new(),
        });
        calls.push(inv);
    }
    if !record.is_empty() {
        return Some(AgentNext::Record(record));
    }
    Some(AgentNext::Start { events, calls })
}
