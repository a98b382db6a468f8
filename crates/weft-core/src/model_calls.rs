//! A session's model calls, read from its log: what each used and how it ended, and the request
//! each sent, rebuilt rather than stored.
//!
//! A request is a pure function of the log up to its call: the runtime asks
//! [`agent_loop::decide`] over the state folded from the events so far and sends the request it
//! returns (memories recalled, compactions, budgets and workflow steps are events, so they fold
//! too). Folding the same events and asking the same `decide` with the agent's configuration
//! gives the same request, so a log holds no request: it would grow by a whole conversation per
//! call (quadratically in a long ReAct session). What the core made of the reply (the parsed
//! decision) is [`agent_loop::model_replied`] over that same state.
//!
//! A call is numbered from 1 in log order; it ends in a `model_replied` (which a following
//! `model_reply_rejected`, `plan_rejected` or `workflow_output_rejected` may refuse) or a
//! `model_failed`. Its latency and time to first token are what the runtime measured around the
//! call (kept in the reply, `ModelReply::timing`); for a failed call, or a reply recorded before
//! weft measured them, the latency is the time from the event before it (the runtime asks the
//! model right after recording that event) to the event that recorded its end.

use serde::Serialize;

use crate::agent_loop::{self, AgentConfig, AgentNext};
use crate::event::{Envelope, Event};
use crate::model::{ModelRequest, Usage};
use crate::state::State;

/// How a model call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The reply was used.
    Replied,
    /// The reply came but could not be used; `reason` says why (the model is told on its next
    /// call).
    Rejected,
    /// The call failed (after the provider's own retries); `reason` holds the error.
    Failed,
}

/// One model call of a session, as its log records it.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ModelCall {
    /// The call's number in the session, from 1.
    pub n: u32,
    /// The sequence number of the event that recorded its reply or failure.
    pub seq: u64,
    /// What the call was for (`plan`, `execute`, `review`, `respond`, `react`, ...).
    pub purpose: String,
    /// The plan step (or workflow step) it served, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The model that answered, as the provider names it (empty for a failure).
    pub model: String,
    /// How it ended.
    pub outcome: CallOutcome,
    /// Why the reply was refused, or the provider's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The try of this purpose (and step) it was: 1, or one more than the calls just before it
    /// that failed or were refused.
    pub attempt: u32,
    /// When the call was made (ms since the epoch): the time of the event before it.
    pub started_ms: i64,
    /// From the call to its reply or failure, in ms.
    pub latency_ms: u64,
    /// From the call to the first piece of its reply's text, in ms, when the text streamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<u64>,
    /// Tokens and cost of the call (a failed call's spent attempts included).
    pub usage: Usage,
    /// Why the model stopped (`stop`, `length`, `tool_calls`), when it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// The model calls of a log, in order. Their usages add up to the session's model usage
/// (`State::usage.tokens`).
pub fn calls(events: &[Envelope]) -> Vec<ModelCall> {
    let mut out: Vec<ModelCall> = Vec::new();
    let mut prev_ts: Option<i64> = None;
    // A refusal is of the reply recorded just before it (a refused plan edit, or a workflow
    // step's agent's refused answer, follows no reply).
    let mut after_reply = false;
    for e in events {
        let refusable = std::mem::replace(&mut after_reply, false);
        let started = prev_ts.unwrap_or(e.ts);
        let call = match &e.event {
            Event::ModelReplied {
                purpose,
                step,
                reply,
            } => Some(ModelCall {
                n: 0,
                seq: e.seq,
                purpose: purpose.as_str().to_owned(),
                step: step.clone(),
                model: reply.model.clone(),
                outcome: CallOutcome::Replied,
                reason: None,
                attempt: 1,
                started_ms: started,
                latency_ms: reply
                    .timing
                    .map_or_else(|| between(started, e.ts), |t| t.latency_ms),
                ttft_ms: reply.timing.and_then(|t| t.ttft_ms),
                usage: reply.usage.clone(),
                finish_reason: reply.finish_reason.clone(),
            }),
            Event::ModelFailed {
                purpose,
                error,
                usage,
                ..
            } => Some(ModelCall {
                n: 0,
                seq: e.seq,
                purpose: purpose.as_str().to_owned(),
                step: None,
                model: String::new(),
                outcome: CallOutcome::Failed,
                reason: Some(error.clone()),
                attempt: 1,
                started_ms: started,
                latency_ms: between(started, e.ts),
                ttft_ms: None,
                usage: usage.clone(),
                finish_reason: None,
            }),
            Event::ModelReplyRejected { reason, .. } if refusable => {
                refuse(&mut out, reason.clone());
                None
            }
            Event::PlanRejected { problems } if refusable => {
                let reason = problems
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                refuse(&mut out, format!("the plan was refused: {reason}"));
                None
            }
            Event::WorkflowOutputRejected { reason, .. } if refusable => {
                refuse(&mut out, reason.clone());
                None
            }
            _ => None,
        };
        if let Some(mut call) = call {
            after_reply = call.outcome == CallOutcome::Replied;
            call.n = u32::try_from(out.len() + 1).unwrap_or(u32::MAX);
            // A try after calls of the same purpose and step that did not go through.
            call.attempt = 1 + out
                .iter()
                .rev()
                .take_while(|c| {
                    c.outcome != CallOutcome::Replied
                        && c.purpose == call.purpose
                        && (c.step == call.step || c.outcome == CallOutcome::Failed)
                })
                .count() as u32;
            out.push(call);
        }
        prev_ts = Some(e.ts);
    }
    out
}

/// The ms from `a` to `b` (0 if the clock went back).
fn between(a: i64, b: i64) -> u64 {
    u64::try_from(b.saturating_sub(a)).unwrap_or(0)
}

/// Marks the last call, a reply, as refused for `reason`.
fn refuse(calls: &mut [ModelCall], reason: String) {
    if let Some(c) = calls.last_mut()
        && c.outcome == CallOutcome::Replied
    {
        c.outcome = CallOutcome::Rejected;
        c.reason = Some(reason);
    }
}

/// A model call's request, rebuilt, and what the core made of its reply.
#[derive(Clone, Debug)]
pub struct Rebuilt {
    /// The call's number in the session, from 1 (as [`ModelCall::n`]).
    pub n: u32,
    /// The sequence number of the event that recorded its reply or failure.
    pub seq: u64,
    /// The request the runtime sent.
    pub request: ModelRequest,
    /// The plan step the call served, as `decide` named it.
    pub step: Option<String>,
    /// The events the reply meant, after its `model_replied` (a plan accepted or refused, tool
    /// calls started, a review, an answer); empty for a failed call.
    pub decision: Vec<Event>,
}

/// Why a request cannot be rebuilt.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    /// The log has no call `n`.
    #[error("the session has {have} model call(s); there is no call {n}")]
    NoSuchCall {
        /// The call asked for.
        n: u32,
        /// How many the log has.
        have: u32,
    },
    /// The agent's configuration does not call the model where the log did (the agent file
    /// changed since the session ran, or belongs to another agent).
    #[error(
        "event {seq}: the agent file as it is now would not call the model here (it would {would}); it changed since the session ran, so the request cannot be rebuilt"
    )]
    Diverged {
        /// The event that recorded the call's end.
        seq: u64,
        /// What the configuration would do instead.
        would: &'static str,
    },
}

/// Rebuilds the requests of the calls `only` names (every call when `None`), in order, folding
/// `events` once, and hands each to `each` (which may serialise it: a request shares the
/// conversation with the state, so keeping many would copy it as the fold goes on).
pub fn rebuild(
    events: &[Envelope],
    cfg: &AgentConfig,
    only: Option<u32>,
    mut each: impl FnMut(Rebuilt),
) -> Result<(), RebuildError> {
    let mut state = State::new();
    let mut n = 0u32;
    for e in events {
        let purpose_step = match &e.event {
            Event::ModelReplied { purpose, step, .. } => Some((*purpose, step.as_deref())),
            Event::ModelFailed { purpose, .. } => Some((*purpose, None)),
            _ => None,
        };
        if let Some((purpose, _)) = purpose_step {
            n += 1;
            if only.is_none_or(|o| o == n) {
                let (request, step) = match agent_loop::decide(&state, cfg) {
                    AgentNext::CallModel { request, step } if request.purpose == purpose => {
                        (request, step)
                    }
                    other => {
                        return Err(RebuildError::Diverged {
                            seq: e.seq,
                            would: would(&other),
                        });
                    }
                };
                let decision = match &e.event {
                    Event::ModelReplied { reply, .. } => {
                        let mut v = agent_loop::model_replied(
                            &state,
                            cfg,
                            purpose,
                            step.as_deref(),
                            reply.clone(),
                        );
                        v.remove(0);
                        v
                    }
                    _ => Vec::new(),
                };
                each(Rebuilt {
                    n,
                    seq: e.seq,
                    request,
                    step,
                    decision,
                });
                if only == Some(n) {
                    return Ok(());
                }
            }
        }
        state.apply(&e.event);
    }
    match only {
        Some(o) => Err(RebuildError::NoSuchCall { n: o, have: n }),
        None => Ok(()),
    }
}

/// What a decision that is not the expected model call would do, in a few words.
fn would(next: &AgentNext) -> &'static str {
    match next {
        AgentNext::CallModel { .. } => "call the model for another purpose",
        AgentNext::Record(_) => "record events",
        AgentNext::Recall { .. } => "search the memories",
        AgentNext::Start { .. } => "start tool calls",
        AgentNext::Wait => "wait for tool calls",
        AgentNext::Done => "stop",
    }
}
