//! Where an event carries free text and data, as opposed to structure. Redaction (replacing a
//! secret's value with `[secret:NAME]`) may rewrite the former and must never touch the latter:
//! a tool name, a step or call id, an idempotency key, a purpose or an event's type stays what it
//! is even when a secret's value happens to equal it, so a redacted log still runs and reads
//! back. References inside a plan's arguments are structure too.

use serde_json::Value;

use crate::event::{Event, ToolError, ToolOutcome};
use crate::model::{Message, ModelReply};
use crate::plan::{Plan, Reference};

/// A rewrite of one piece of text in place.
pub type TextFn<'a> = &'a mut dyn FnMut(&mut String);

impl Event {
    /// Calls `f` on every piece of free text and every string (and object key) inside the data
    /// this event carries: inputs, tasks, arguments, outputs, errors, replies, answers, reasons.
    /// Never on identifiers, names or tags.
    pub fn rewrite_text(&mut self, f: TextFn<'_>) {
        match self {
            Self::SessionStarted { input, .. } => value(input, f),
            Self::TurnStarted { task, input } => {
                f(task);
                value(input, f);
            }
            Self::ModelReplied { reply, .. } => model_reply(reply, f),
            Self::ModelReplyRejected { reason, .. } => f(reason),
            Self::ModelFailed { error, .. } => f(error),
            Self::PlanRejected { problems } => problems.iter_mut().for_each(|p| f(&mut p.message)),
            Self::PlanRevised { plan, reason } => {
                self::plan(plan, f);
                f(reason);
            }
            Self::StepAction { detail, .. } => value(detail, f),
            Self::ToolCallBlocked { args, reason, .. } => {
                value(args, f);
                f(reason);
            }
            Self::ReviewDecided { reason, .. } => f(reason),
            Self::HistoryCompacted { summary, .. } => f(summary),
            Self::MemoriesRecalled {
                query,
                memories,
                error,
            } => {
                f(query);
                memories.iter_mut().for_each(|m| f(&mut m.text));
                error.iter_mut().for_each(f);
            }
            Self::AnswerDrafted { text, .. }
            | Self::UserReplied { text }
            | Self::TextDelta { text } => f(text),
            Self::ResponseReviewed { feedback, .. } => f(feedback),
            Self::WaitingForUser { request } => {
                f(&mut request.question);
                value(&mut request.partial_call, f);
                if let Some(p) = &mut request.plan {
                    plan(p, f);
                }
            }
            Self::MessagesImported { messages } => messages.iter_mut().for_each(|m| message(m, f)),
            // Ids and positions only; a budget's limits and names of tools.
            Self::RunStarted { .. } | Self::BudgetSet { .. } | Self::BudgetExceeded { .. } => {}
            Self::EvaluationResult { explanation, .. } => explanation.iter_mut().for_each(f),
            Self::PlanAccepted { plan } => self::plan(plan, f),
            Self::ToolCallStarted { args, .. } => value(args, f),
            Self::ToolCallFinished { outcome, .. } => match outcome {
                ToolOutcome::Ok { output } => value(output, f),
                ToolOutcome::Error { error } => tool_error(error, f),
            },
            Self::StepRetrying { error, .. }
            | Self::StepFailed { error, .. }
            | Self::ItemRetrying { error, .. }
            | Self::ItemFailed { error, .. } => {
                tool_error(error, f);
            }
            Self::StepCompleted {
                output, summary, ..
            } => {
                value(output, f);
                if let Some(s) = summary {
                    f(s);
                }
            }
            Self::StepSkipped { reason, .. } | Self::ExecutionFinished { reason } => f(reason),
            Self::RunFinished { error, answer, .. } => {
                error.iter_mut().chain(answer.iter_mut()).for_each(f);
            }
            Self::WorkflowOutputAccepted {
                output,
                assigned,
                reply,
                ..
            } => {
                value(output, f);
                for v in assigned.values_mut() {
                    value(v, f);
                }
                if let Some(r) = reply {
                    f(r);
                }
            }
            Self::WorkflowOutputRejected { reason, .. } => f(reason),
            Self::WorkflowTransition { rule, .. } => {
                if let crate::event::TransitionRule::OnError { error } = rule {
                    f(error);
                }
            }
            // Step names, rules and conditions are the agent file's structure.
            Self::WorkflowStepEntered { .. }
            | Self::FanOutStarted { .. }
            | Self::WaveStarted { .. }
            | Self::StepStarted { .. }
            | Self::WaveFinished { .. } => {}
        }
    }
}

/// Every string and object key inside a data value.
pub fn value(v: &mut Value, f: TextFn<'_>) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter_mut().for_each(|x| value(x, f)),
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (mut k, mut x) in old {
                f(&mut k);
                value(&mut x, f);
                map.insert(k, x);
            }
        }
        _ => {}
    }
}

/// A tool error's message and detail (its kind is structure).
pub fn tool_error(e: &mut ToolError, f: TextFn<'_>) {
    f(&mut e.message);
    value(&mut e.detail, f);
}

fn model_reply(r: &mut ModelReply, f: TextFn<'_>) {
    f(&mut r.content);
    for c in &mut r.tool_calls {
        value(&mut c.arguments, f);
    }
    for t in &mut r.refused {
        f(&mut t.reason);
        f(&mut t.text);
    }
}

fn message(m: &mut Message, f: TextFn<'_>) {
    match m {
        Message::System { content } | Message::User { content } | Message::Tool { content, .. } => {
            f(content);
        }
        Message::Assistant {
            content,
            tool_calls,
        } => {
            f(content);
            for c in tool_calls {
                value(&mut c.arguments, f);
            }
        }
    }
}

/// A plan's descriptions and arguments; references stay as written.
fn plan(p: &mut Plan, f: TextFn<'_>) {
    for step in &mut p.steps {
        if let Some(d) = &mut step.description {
            f(d);
        }
        for (_, a) in step.args.iter_mut() {
            plan_arg(a, f);
        }
    }
}

fn plan_arg(v: &mut Value, f: TextFn<'_>) {
    if Reference::from_arg(v).is_some() {
        return;
    }
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter_mut().for_each(|x| plan_arg(x, f)),
        Value::Object(map) => map.values_mut().for_each(|x| plan_arg(x, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redact(e: &mut Event, secret: &str) {
        e.rewrite_text(&mut |s: &mut String| {
            if s.contains(secret) {
                *s = s.replace(secret, "[secret:x]");
            }
        });
    }

    #[test]
    fn identifiers_stay_and_data_is_rewritten() {
        let mut e = Event::ToolCallStarted {
            call_id: "echo".into(),
            step: Some("echo".into()),
            item: None,
            tool: "echo".into(),
            args: json!({"text": "say echo", "echo": ["echo"]}),
            attempt: 1,
            idempotency_key: "s:1:echo".into(),
            untrusted_from: Vec::new(),
        };
        redact(&mut e, "echo");
        assert_eq!(
            e,
            Event::ToolCallStarted {
                call_id: "echo".into(),
                step: Some("echo".into()),
                item: None,
                tool: "echo".into(),
                args: json!({"text": "say [secret:x]", "[secret:x]": ["[secret:x]"]}),
                attempt: 1,
                idempotency_key: "s:1:echo".into(),
                untrusted_from: Vec::new(),
            }
        );
        let mut e = Event::ToolCallFinished {
            call_id: "c".into(),
            outcome: ToolOutcome::Error {
                error: ToolError::new("state", "state is bad").with_detail(json!("state")),
            },
            duration_ms: 1,
        };
        redact(&mut e, "state");
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(v["outcome"]["error"]["kind"], "state");
        assert_eq!(v["outcome"]["error"]["message"], "[secret:x] is bad");
        assert_eq!(v["outcome"]["error"]["detail"], "[secret:x]");
    }

    #[test]
    fn a_refused_try_of_a_reply_is_rewritten() {
        let mut e = Event::ModelReplied {
            purpose: crate::model::Purpose::Review,
            step: None,
            reply: ModelReply {
                content: "{}".into(),
                refused: vec![crate::model::RefusedTry::new(
                    "the reply is not JSON (tok-123)",
                    "here is tok-123",
                )],
                ..ModelReply::default()
            },
        };
        redact(&mut e, "tok-123");
        let Event::ModelReplied { reply, .. } = e else {
            unreachable!()
        };
        assert_eq!(
            reply.refused[0].reason,
            "the reply is not JSON ([secret:x])"
        );
        assert_eq!(reply.refused[0].text, "here is [secret:x]");
    }
}
