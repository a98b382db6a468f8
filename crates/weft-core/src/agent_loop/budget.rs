//! The budget check of [`decide`](super::decide): before every model call and every tool call,
//! the budget in force ([`in_force`]) is checked with what the call may cost at most; a call
//! that could take a limit past it is not made, and the run ends or waits for a person at a safe
//! point (see [`crate::budget`] for budgets themselves).

use crate::budget::{
    Budget, OnBudget, Reached, Spent, WAIT_KIND, call_max, first_crossed, model_call_spend,
    tool_calls_spend,
};
use crate::event::{Event, InputRequest};
use crate::state::State;

use super::{AgentConfig, AgentNext};

/// The budget in force: the last one recorded in the session, else the agent file's.
pub fn in_force<'a>(state: &'a State, cfg: &'a AgentConfig) -> Option<&'a Budget> {
    state.spending.budget.as_ref().or(cfg.budget.as_ref())
}

/// The first limit of `budget` that adding `add` to what the run and the session spent would
/// cross; `None` when it fits.
pub fn check(state: &State, budget: &Budget, add: &Spent) -> Option<Reached> {
    first_crossed("run", &budget.run, &state.spending.run, add)
        .or_else(|| first_crossed("session", &budget.session, &state.spending.session, add))
}

/// The events that record `reached` and stop the run at this (safe) point: the run ends
/// (`on_budget: stop`) or the session waits for a person (`ask`).
pub fn reached(state: &State, budget: &Budget, reached: &Reached) -> Vec<Event> {
    let mut events = vec![exceeded(reached)];
    match budget.on_budget {
        OnBudget::Stop => events.extend(super::end_run_failed(
            state,
            reached.describe(),
        )),
        OnBudget::Ask => events.push(Event::WaitingForUser {
            request: InputRequest {
                kind: WAIT_KIND.into(),
                question: if reached.is_quota() {
                    format!(
                        "The {}. The user's quota counts every session of theirs and starts again with the next {}; answer to try again then, or answer `stop`.",
                        reached.describe(),
                        reached.which.split('.').nth(1).unwrap_or("period")
                    )
                } else {
                    format!(
                        "The {}. Raise the budget to go on (`weft answer {} --budget {}=N continue`, or the run's `config.budget` over HTTP), or answer `stop`.",
                        reached.describe(),
                        if state.session_id.is_empty() {
                            "ID"
                        } else {
                            &state.session_id
                        },
                        reached.which
                    )
                },
                step: None,
                tool: None,
                missing: Vec::new(),
                partial_call: serde_json::Value::Null,
                plan: None,
                call_id: None,
            },
        }),
    }
    events
}

/// The budget check of [`decide`](super::decide): `next` as it is when its call fits the
/// budget in force; otherwise the events that record the limit and stop the run, once no tool
/// call is in flight (until then, [`AgentNext::Wait`]).
pub(super) fn guard(state: &State, cfg: &AgentConfig, next: AgentNext) -> AgentNext {
    let Some(budget) = in_force(state, cfg) else {
        return next;
    };
    let over = match &next {
        AgentNext::CallModel { request, .. } => check(
            state,
            budget,
            &model_call_spend(&call_max(request, &cfg.model_costs)),
        ),
        AgentNext::Start { calls, .. } => check(
            state,
            budget,
            &tool_calls_spend(calls.iter().map(|c| c.tool.as_str())),
        ),
        _ => None,
    };
    match over {
        None => next,
        Some(_) if !state.calls.open.is_empty() => AgentNext::Wait,
        Some(r) => AgentNext::Record(reached(state, budget, &r)),
    }
}

/// What a person's answer to a budget wait means: `stop` ends the run; any other answer goes
/// on (and the budget is checked again before the next call, so an answer without a raised
/// budget is asked again).
pub(super) fn answered(state: &State, text: &str) -> Vec<Event> {
    if text.trim().eq_ignore_ascii_case("stop") {
        return super::end_run_failed(state, "stopped at its budget by a person".to_owned());
    }
    Vec::new()
}

/// The event that records `reached`.
fn exceeded(reached: &Reached) -> Event {
    Event::BudgetExceeded {
        which: reached.which.clone(),
        limit: reached.limit,
        spent: reached.spent,
        call: reached.call,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::budget::{BudgetLimits, ModelCosts};

    #[test]
    fn a_call_that_could_cross_a_limit_is_refused_before_it_is_made() {
        let mut state = State::new();
        state.spending.run.cost_usd = 0.9;
        let budget = Budget {
            run: BudgetLimits {
                cost_usd: Some(1.0),
                ..BudgetLimits::default()
            },
            ..Budget::default()
        };
        let small = Spent {
            cost_usd: 0.05,
            model_calls: 1,
            ..Spent::default()
        };
        assert_eq!(check(&state, &budget, &small), None);
        let big = Spent {
            cost_usd: 0.2,
            ..small
        };
        let r = check(&state, &budget, &big).unwrap();
        assert_eq!(r.which, "run.cost_usd");
        assert!(
            r.describe().contains("run.cost_usd is 1, 0.9 spent"),
            "{}",
            r.describe()
        );
    }

    /// A ReAct agent offered `echo`, with `budget`, in a session whose first task started.
    fn react(budget: Budget) -> (State, AgentConfig) {
        use crate::agent::Mode;
        let echo: crate::tool::ToolInfo =
            serde_json::from_value(serde_json::json!({"name": "echo"})).unwrap();
        let cfg = AgentConfig {
            mode: Mode::React,
            limits: crate::limits::Limits::default(),
            instructions: String::new(),
            tools: vec![echo],
            skills: Vec::new(),
            approve_plans: false,
            review_responses: false,
            recall_memories: false,
            workflow: None,
            budget: Some(budget),
            model_costs: ModelCosts {
                input_per_mtok: Some(1.0),
                output_per_mtok: Some(1.0),
                max_output_tokens: Some(10),
            },
            repeats: crate::repeats::Rules::default(),
            trust: None,
        };
        let state = State::fold(&[
            Event::SessionStarted {
                session_id: "s".into(),
                agent: "a".into(),
                input: serde_json::Value::Null,
                mode: Some(Mode::React),
                parent_id: None,
            },
            Event::TurnStarted {
                task: "go".into(),
                input: serde_json::Value::Null,
            },
        ]);
        (state, cfg)
    }

    fn echo_reply() -> crate::model::ModelReply {
        crate::model::ModelReply {
            tool_calls: vec![crate::model::ToolCall {
                id: "c1".into(),
                name: "echo".into(),
                arguments: serde_json::json!({"text": "x"}),
                provider_id: None,
            }],
            ..crate::model::ModelReply::default()
        }
    }

    #[test]
    fn decide_stops_before_the_tool_call_past_the_limit_and_a_raise_goes_on() {
        use super::super::{decide, model_replied, user_replied};
        let budget = Budget {
            run: BudgetLimits {
                tool_calls: Some(0),
                ..BudgetLimits::default()
            },
            on_budget: OnBudget::Ask,
            ..Budget::default()
        };
        let (mut state, cfg) = react(budget);
        let AgentNext::CallModel { request, .. } = decide(&state, &cfg) else {
            panic!("the model call fits: no limit on it");
        };
        for e in model_replied(&state, &cfg, request.purpose, None, echo_reply()) {
            state.apply(&e);
        }
        let AgentNext::Record(events) = decide(&state, &cfg) else {
            panic!("the tool call is refused");
        };
        assert_eq!(events[0].kind(), "budget_exceeded");
        assert_eq!(events[1].kind(), "waiting_for_user");
        for e in &events {
            state.apply(e);
        }
        assert_eq!(decide(&state, &cfg), AgentNext::Done);
        // A raised budget recorded with the answer: the same call starts now.
        state.apply(&Event::BudgetSet {
            budget: Budget {
                run: BudgetLimits {
                    tool_calls: Some(1),
                    ..BudgetLimits::default()
                },
                ..Budget::default()
            },
        });
        for e in user_replied(&state, &cfg, "go on") {
            state.apply(&e);
        }
        let AgentNext::Start { calls, .. } = decide(&state, &cfg) else {
            panic!("the raised budget lets the call start");
        };
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].tool, "echo");
    }

    #[test]
    fn a_limit_reached_while_a_call_runs_waits_for_it() {
        let budget = Budget {
            run: BudgetLimits {
                model_calls: Some(0),
                ..BudgetLimits::default()
            },
            ..Budget::default()
        };
        let (mut state, cfg) = react(budget);
        state.apply(&Event::ToolCallStarted {
            call_id: "c0".into(),
            step: None,
            item: None,
            tool: "echo".into(),
            args: serde_json::json!({}),
            attempt: 1,
            idempotency_key: "k".into(),
            untrusted_from: Vec::new(),
        });
        let request = crate::prompts::react(&state, &cfg);
        let next = AgentNext::CallModel {
            request,
            step: None,
        };
        assert_eq!(guard(&state, &cfg, next), AgentNext::Wait);
        assert_eq!(state.spending.run.tool_calls, 1);
        assert_eq!(state.spending.run.per_tool.get("echo"), Some(&1));
    }
}
