//! ReAct: reason, call tools, observe, repeat until the model answers in text.

use super::end::finished;
use super::reply::rejected;
use super::{AgentConfig, AgentNext, ModeLoop, tool_calls};
use crate::event::{Event, RunStatus};
use crate::model::{ModelReply, Purpose};
use crate::prompts;
use crate::state::{Phase, State};

/// The ReAct loop.
pub(crate) struct React;

impl ModeLoop for React {
    fn decide(state: &State, cfg: &AgentConfig) -> AgentNext {
        if !state.calls.open.is_empty() {
            return AgentNext::Wait;
        }
        if let Some(next) = tool_calls::start(
            state,
            &cfg.tools,
            &cfg.repeats,
            cfg.limits.max_parallel,
            "this agent",
        ) {
            return next;
        }
        if state.phase != Phase::React {
            return AgentNext::Done;
        }
        if state.turn.iterations >= cfg.limits.max_iterations {
            return AgentNext::Record(vec![finished(
                RunStatus::Failed,
                Some(format!(
                    "CANNOT_COMPLETE: reached max_iterations ({}) without an answer",
                    cfg.limits.max_iterations
                )),
                None,
            )]);
        }
        AgentNext::CallModel {
            request: prompts::react(state, cfg),
            step: None,
        }
    }

    fn replied(
        _state: &State,
        _cfg: &AgentConfig,
        _purpose: Purpose,
        _step: Option<&str>,
        reply: &ModelReply,
    ) -> Vec<Event> {
        if !reply.tool_calls.is_empty() {
            return Vec::new();
        }
        if reply.content.trim().is_empty() {
            return vec![rejected(
                Purpose::React,
                None,
                "the reply was empty; answer the user or call a tool",
            )];
        }
        vec![finished(
            RunStatus::Completed,
            None,
            Some(reply.content.trim().to_owned()),
        )]
    }
}
