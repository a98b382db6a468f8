//! The check every mode makes before a tool call starts, when the agent has `trust:` (see
//! [`crate::trust`]): where each argument's data came from, the label the call's output will
//! carry (recorded in its `tool_call_started`), and whether untrusted data would reach a
//! protected argument.
//!
//! **Where an argument's data comes from.**
//! - A model's own call (ReAct, a workflow step's turns, a workflow's delegation): the model
//!   wrote every argument after reading the conversation and this turn's results, so each
//!   argument carries everything untrusted they hold.
//! - A plan step's executor's call: the executor reads only its step (written by the planner:
//!   the plan's label), the outputs of the steps it depends on and its own calls' results
//!   (`State::executor_read`), so each argument carries their labels.
//! - A plan step's literal call: each argument carries what its references read (`†steps.X`:
//!   step X's output label; `†state.*`: what untrusted steps wrote into the State; `†item`:
//!   the fan-out's list; `†input`: nothing, the input is the user's) and, for a value written
//!   in the plan, what the plan's writer had read (nothing for the first plan of a turn: the
//!   planner sees the task and the tools; a replan has seen the results).
//!
//! **What else carries a label** (folded in `state::provenance`): a step executor's answer
//! without a call (`DIRECT_RESPONSE`, `DESIGN_INSTRUCTIONS`, the value of a step with an
//! `_outputSchema`, a quarantined step) carries what the executor had read, as its calls would;
//! a workflow step's output assigned into the State carries what its model had read, and
//! `†state` references read it.
//!
//! What a step's `_when` reads steers whether it runs, not what it sends: it is not counted.

use serde_json::Value;

use super::wait::{approval, approval_request, is_yes};
use super::{AgentConfig, AgentNext};
use crate::engine::Invocation;
use crate::event::{Event, ToolError};
use crate::plan::{RefRoot, Reference};
use crate::repeats::Policy;
use crate::state::{Sources, State};
use crate::trust::Trust;

/// Labels the calls `next` starts and stops those that would put untrusted data into a
/// protected argument (refused, or a wait for a person under `on_untrusted: ask`).
pub(super) fn guard(state: &State, cfg: &AgentConfig, next: AgentNext) -> AgentNext {
    let Some(trust) = &cfg.trust else {
        return next;
    };
    let AgentNext::Start { mut events, calls } = next else {
        return next;
    };
    let mut stopped = Vec::new();
    let mut labels: std::collections::HashMap<&str, Vec<String>> = std::collections::HashMap::new();
    for c in &calls {
        let args = arg_sources(state, c);
        let label = output_label(trust, c, &args);
        if !label.is_empty() {
            labels.insert(c.call_id.as_str(), label.to_vec());
        }
        let Some(breach) = breach(trust, c, &args) else {
            continue;
        };
        match (trust.on_untrusted, approval(state, &c.call_id)) {
            (Policy::Ask, None) => {
                let mut request = approval_request(&c.tool, &c.args, c.step.clone(), &c.call_id);
                request.question = format!(
                    "The call {} {} would put untrusted data into {}. Allow it? Reply `approve` or `deny` (with a reason).",
                    c.tool,
                    c.args,
                    breach.what(state)
                );
                return AgentNext::Record(vec![Event::WaitingForUser { request }]);
            }
            (Policy::Ask, Some(answer)) if is_yes(answer) => {}
            _ => {
                // A fan-out's items share their step: it fails once.
                let fails_step = c.step.as_deref().is_some_and(|s| {
                    !stopped
                        .iter()
                        .any(|e| matches!(e, Event::StepFailed { step, .. } if step == s))
                });
                stopped.extend(refused(state, c, &breach, fails_step));
            }
        }
    }
    if !stopped.is_empty() {
        return AgentNext::Record(stopped);
    }
    for e in &mut events {
        if let Event::ToolCallStarted {
            call_id,
            untrusted_from,
            ..
        } = e
            && let Some(label) = labels.remove(call_id.as_str())
        {
            *untrusted_from = label;
        }
    }
    AgentNext::Start { events, calls }
}

/// Untrusted data in a protected argument.
struct Breach {
    /// The argument.
    arg: String,
    /// Where its data came from.
    sources: Sources,
}

impl Breach {
    /// "`send_money.recipient` (data from call c2, `read_file`)".
    fn what(&self, state: &State) -> String {
        let from: Vec<String> = self
            .sources
            .ids()
            .map(|id| match state.provenance.tool_of(id) {
                Some(tool) => format!("call {id} (`{tool}`)"),
                None => format!("call {id}"),
            })
            .collect();
        format!(
            "the protected argument `{}`, from {}",
            self.arg,
            from.join(", ")
        )
    }
}

/// The first protected argument of call `c` that would take untrusted data.
fn breach(trust: &Trust, c: &Invocation, args: &ArgSources) -> Option<Breach> {
    let protected = trust.protected(&c.tool)?;
    let present = c.args.as_object()?;
    present
        .keys()
        .filter(|k| protected.covers(k))
        .find_map(|k| {
            let sources = args.of(k);
            (!sources.is_empty()).then(|| Breach {
                arg: k.clone(),
                sources,
            })
        })
}

/// What a refused call records: its refusal (the model, or the step's executor, reads the
/// reason), and for a plan step's literal call or a fan-out's item, the step's failure (unless
/// `fails_step` is false: an earlier item's refusal failed it).
fn refused(state: &State, c: &Invocation, breach: &Breach, fails_step: bool) -> Vec<Event> {
    let reason = format!(
        "untrusted data may not reach {} of `{}` (the agent file's `trust.protect`); the call was not made",
        breach.what(state),
        c.tool
    );
    let own_call = c.step.is_none();
    let mut v = vec![Event::ToolCallBlocked {
        step: c.step.clone(),
        call_id: own_call.then(|| c.call_id.clone()),
        tool: c.tool.clone(),
        args: c.args.clone(),
        reason: reason.clone(),
        repeats: None,
    }];
    if let Some(step) = &c.step
        && fails_step
        && literal_step(state, step)
    {
        v.push(Event::StepFailed {
            step: step.clone(),
            error: ToolError::new("untrusted_data", reason),
            handled: false,
        });
    }
    v
}

/// Whether `step` is a plan step with a literal call (not one its executor carries out).
fn literal_step(state: &State, step: &str) -> bool {
    state.plan.as_ref().is_some_and(|p| {
        p.step(step)
            .is_some_and(|(i, _)| p.plan.steps[i].tool.is_some())
    })
}

/// The label of call `c`'s output: its arguments' and, unless its tool is trusted, its own.
fn output_label(trust: &Trust, c: &Invocation, args: &ArgSources) -> Sources {
    let mut label = args.all();
    if !trust.trusts(&c.tool) {
        label.add(&c.call_id);
    }
    label
}

/// Where each argument of a call came from.
enum ArgSources {
    /// Every argument carries the same label (the model wrote them).
    Every(Sources),
    /// Per argument (a plan step's literal call), with the label of the fan-out's item.
    Each(Vec<(String, Sources)>),
}

impl ArgSources {
    fn of(&self, arg: &str) -> Sources {
        match self {
            Self::Every(s) => s.clone(),
            Self::Each(v) => v
                .iter()
                .find(|(k, _)| k == arg)
                .map(|(_, s)| s.clone())
                .unwrap_or_default(),
        }
    }

    fn all(&self) -> Sources {
        match self {
            Self::Every(s) => s.clone(),
            Self::Each(v) => {
                let mut all = Sources::default();
                for (_, s) in v {
                    all.extend(s);
                }
                all
            }
        }
    }
}

/// Where each argument of call `c` came from.
fn arg_sources(state: &State, c: &Invocation) -> ArgSources {
    let p = &state.provenance;
    let plan_step = c.step.as_deref().and_then(|s| {
        let run = state.plan.as_ref()?;
        let (i, _) = run.step(s)?;
        Some(&run.plan.steps[i])
    });
    let Some(step) = plan_step.filter(|s| s.tool.is_some()) else {
        // A model wrote the call: a step's executor after reading its step's inputs, any other
        // after reading the conversation and this turn's results.
        return ArgSources::Every(match (plan_step, c.step.as_deref()) {
            (Some(_), Some(id)) => state.executor_read(id),
            _ => p.read(),
        });
    };
    let mut item = Sources::default();
    if let Some(f) = &step.for_each {
        item.extend(&reference_sources(state, &f.list, &Sources::default()));
    }
    ArgSources::Each(
        step.args
            .iter()
            .map(|(k, v)| (k.clone(), value_sources(state, v, &item)))
            .collect(),
    )
}

/// Where a value written in a plan step's arguments came from.
fn value_sources(state: &State, v: &Value, item: &Sources) -> Sources {
    if let Some(r) = Reference::from_arg(v) {
        return match r {
            Ok(r) => reference_sources(state, &r, item),
            Err(_) => state.provenance.plan.clone(),
        };
    }
    match v {
        Value::Object(m) => {
            let mut s = Sources::default();
            for v in m.values() {
                s.extend(&value_sources(state, v, item));
            }
            s
        }
        Value::Array(a) => {
            let mut s = Sources::default();
            for v in a {
                s.extend(&value_sources(state, v, item));
            }
            s
        }
        // A value written in the plan.
        _ => state.provenance.plan.clone(),
    }
}

/// Where what a reference reads came from.
fn reference_sources(state: &State, r: &Reference, item: &Sources) -> Sources {
    let p = &state.provenance;
    match &r.root {
        RefRoot::Input => Sources::default(),
        RefRoot::State => p.state.clone(),
        RefRoot::Step(id) => p.steps.get(id).cloned().unwrap_or_default(),
        RefRoot::Item => item.clone(),
    }
}
