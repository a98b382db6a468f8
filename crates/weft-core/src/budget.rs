//! Budgets: what a run and a session may spend (tokens, cost, model calls, tool calls, wall
//! time). The types here are data: the agent file's `budget:` ([`Budget`]), what a scope spent
//! ([`Spent`]), what one call may cost at most ([`CallMax`]) and a limit a call would cross
//! ([`Reached`]). The check made before every model call and every tool call is the agent loop's
//! (`agent_loop::budget`).
//!
//! **Where a budget comes from.** The agent file's `budget:`; a run may replace it (`weft run
//! --budget`, a run's `config.budget` in `weft serve`, a raised budget given with an answer),
//! and the budget a run is given is recorded in the log (`budget_set`), so a resumed, taken-over
//! or forked session keeps it. The last `budget_set` wins over the agent file's.
//!
//! **What was spent** is derived from the log and never reset (`state::Spending` folds it into
//! two [`Spent`]): a *run* is the current task (from its `turn_started`, across waits, answers,
//! crashes and resumes), a *session* is every task of it. Model calls count their replies and
//! their failures (with the tokens the failed attempts used), tool calls count their starts.
//!
//! **The check** is made before a call with what the call may cost at most ([`call_max`]: the
//! request's estimated input tokens, its `max_tokens` (or the model's, else
//! [`DEFAULT_OUTPUT_CEILING`]), and the model's prices, which the shell supplies in
//! [`ModelCosts`]): a call that could take a measure past its limit ([`first_crossed`]) is not
//! made. So a limit is crossed at most by the error of the input estimate of the one call in
//! flight. Reaching a limit records `budget_exceeded {which, limit, spent, call}` and then, at a
//! safe point (no tool call in flight), either ends the run (`on_budget: stop`) or waits for a
//! person (`on_budget: ask`, a wait of kind [`WAIT_KIND`]), who answers with a raised budget to
//! go on, or `stop`.
//!
//! A per-user quota can hook in at the same two places: [`call_max`] says what a call may cost
//! at most, and `state::Spending` is the one place spending is counted.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::{ModelRequest, Usage};

/// The kind of wait (`waiting_for_user.request.kind`) of a session that reached its budget
/// with `on_budget: ask`.
pub const WAIT_KIND: &str = "budget";

/// The most output tokens a model call is taken to produce when neither the request nor the
/// model sets `max_tokens` (set `max_tokens` on the model for a tighter bound).
pub const DEFAULT_OUTPUT_CEILING: u64 = 4096;

/// The start of `which` of a quota reached (`user.day.cost_usd`, see the `quota` module): a
/// budget's `which` starts with `run.` or `session.`.
pub const QUOTA_PREFIX: &str = "user.";

/// What a run and a session may spend, and what happens when a limit is reached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Limits on the current task (from its start, across waits, answers and resumes).
    #[serde(default, skip_serializing_if = "BudgetLimits::is_empty")]
    pub run: BudgetLimits,
    /// Limits on the whole session (every task of it).
    #[serde(default, skip_serializing_if = "BudgetLimits::is_empty")]
    pub session: BudgetLimits,
    /// `stop` (the default): the run ends, failed, when a limit is reached. `ask`: the session
    /// waits for a person, who can raise the budget and continue.
    #[serde(default)]
    pub on_budget: OnBudget,
}

/// What happens when a budget is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnBudget {
    /// The run ends (failed, with the limit as its error).
    #[default]
    Stop,
    /// The session waits for a person, who can answer with a raised budget.
    Ask,
}

/// The limits of one scope (a run or a session). Every limit is optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimits {
    /// Input (prompt) tokens of model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens of model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Cost of model calls in US dollars (needs the model's prices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub cost_usd: Option<f64>,
    /// Model calls (replies and failures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    /// Tool calls started, of every tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Tool calls started, per tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_calls_per_tool: BTreeMap<String, u64>,
    /// Seconds since the scope began (the task's start; the session's first event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_secs: Option<u64>,
}

impl BudgetLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Whether a cost limit is set.
    pub fn has_cost(&self) -> bool {
        self.cost_usd.is_some()
    }
}

impl Budget {
    /// Whether a cost limit is set, in either scope.
    pub fn has_cost(&self) -> bool {
        self.run.has_cost() || self.session.has_cost()
    }

    /// Whether a wall-time limit is set, in either scope.
    pub fn has_wall_time(&self) -> bool {
        self.run.wall_time_secs.is_some() || self.session.wall_time_secs.is_some()
    }

    /// The problems of a budget (a negative or non-finite cost), each naming its field under
    /// `at` (`budget`, `--budget`).
    pub fn problems(&self, at: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (scope, l) in [("run", &self.run), ("session", &self.session)] {
            if let Some(c) = l.cost_usd
                && !(c.is_finite() && c >= 0.0)
            {
                out.push((
                    format!("{at}.{scope}.cost_usd"),
                    format!("{c} is not a cost; give a number of US dollars, 0 or more"),
                ));
            }
        }
        out
    }

    /// The per-tool limits (`tool_calls_per_tool`, `tool_calls.TOOL`) that name none of `tools`,
    /// the tools the agent's model can call: each as its scope (`run`, `session`), the name
    /// given, and what is wrong with the name meant. A misspelt name would hold nothing and
    /// leave the tool meant without a limit.
    pub fn unknown_tools(&self, tools: &[String]) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        for (scope, l) in [("run", &self.run), ("session", &self.session)] {
            for name in l.tool_calls_per_tool.keys() {
                if tools.contains(name) {
                    continue;
                }
                out.push((
                    scope,
                    name.clone(),
                    format!(
                        "the agent has no tool `{name}`{}, so this limit would hold nothing; its tools: {}",
                        crate::diagnose::did_you_mean(name, tools.iter().map(String::as_str)),
                        if tools.is_empty() {
                            "none".to_owned()
                        } else {
                            tools.join(", ")
                        }
                    ),
                ));
            }
        }
        out
    }

    /// `self` with every limit and the `on_budget` that `text` sets replaced: `KEY=VALUE` pairs
    /// separated by commas, where KEY is `[run.|session.]LIMIT` (a run's when the scope is left
    /// out), LIMIT one of `input_tokens`, `output_tokens`, `cost_usd`, `model_calls`,
    /// `tool_calls`, `tool_calls.TOOL`, `wall_time_secs`, or KEY is `on_budget` (`stop` or
    /// `ask`). `--budget run.cost_usd=0.5,tool_calls.search=3,on_budget=ask`.
    pub fn with_overrides(mut self, text: &str) -> Result<Self, String> {
        if text.split(',').all(|p| p.trim().is_empty()) {
            return Err(format!(
                "`{text}` sets no limit; write KEY=VALUE pairs separated by commas, e.g. `cost_usd=0.5` or `session.tool_calls=100`"
            ));
        }
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!(
                    "`{pair}` is not KEY=VALUE; write e.g. `cost_usd=0.5` or `session.tool_calls=100`"
                ));
            };
            let (key, value) = (key.trim(), value.trim());
            if key == "on_budget" {
                self.on_budget = match value {
                    "stop" => OnBudget::Stop,
                    "ask" => OnBudget::Ask,
                    other => return Err(format!("on_budget={other}: write `stop` or `ask`")),
                };
                continue;
            }
            let (limits, field) = match key.split_once('.') {
                Some(("session", f)) => (&mut self.session, f),
                Some(("run", f)) => (&mut self.run, f),
                _ => (&mut self.run, key),
            };
            let count = || {
                value.parse::<u64>().map_err(|_| {
                    format!("{key}={value}: the limit must be a whole number, 0 or more")
                })
            };
            match field {
                "input_tokens" => limits.input_tokens = Some(count()?),
                "output_tokens" => limits.output_tokens = Some(count()?),
                "model_calls" => limits.model_calls = Some(count()?),
                "tool_calls" => limits.tool_calls = Some(count()?),
                "wall_time_secs" => limits.wall_time_secs = Some(count()?),
                "cost_usd" => {
                    let c = value
                        .parse::<f64>()
                        .ok()
                        .filter(|c| c.is_finite() && *c >= 0.0)
                        .ok_or_else(|| {
                            format!("{key}={value}: the limit must be US dollars, 0 or more")
                        })?;
                    limits.cost_usd = Some(c);
                }
                f => match f.strip_prefix("tool_calls.") {
                    Some(tool) if !tool.is_empty() => {
                        limits.tool_calls_per_tool.insert(tool.to_owned(), count()?);
                    }
                    _ => {
                        return Err(format!(
                            "`{key}` is not a budget limit{}; known: input_tokens, output_tokens, cost_usd, model_calls, tool_calls, tool_calls.TOOL, wall_time_secs (each after `run.` or `session.`), on_budget",
                            crate::diagnose::did_you_mean(
                                f,
                                [
                                    "input_tokens",
                                    "output_tokens",
                                    "cost_usd",
                                    "model_calls",
                                    "tool_calls",
                                    "wall_time_secs"
                                ]
                            )
                        ));
                    }
                },
            }
        }
        Ok(self)
    }
}

/// A budget given to a run, an answer or a fork: a whole budget that replaces the one in force,
/// or `KEY=VALUE,...` limits over it ([`Budget::with_overrides`]).
#[derive(Clone, Debug, PartialEq)]
pub enum BudgetChange {
    /// This budget, in place of the one in force.
    Replace(Budget),
    /// These limits over the budget in force.
    Over(String),
}

impl BudgetChange {
    /// The change a JSON value gives: a mapping (as the agent file's `budget:`) or a string
    /// (`KEY=VALUE,...`); `None` for `null`. `at` names the field in errors.
    pub fn from_json(v: &serde_json::Value, at: &str) -> Result<Option<Self>, String> {
        match v {
            serde_json::Value::Null => Ok(None),
            serde_json::Value::String(text) => Ok(Some(Self::Over(text.clone()))),
            serde_json::Value::Object(_) => {
                let b: Budget = serde_json::from_value(v.clone()).map_err(|e| {
                    format!(
                        "{at}: {e}; give e.g. {{\"run\": {{\"cost_usd\": 0.5}}, \"on_budget\": \"ask\"}}"
                    )
                })?;
                if let Some((field, why)) = b.problems(at).into_iter().next() {
                    return Err(format!("{field}: {why}"));
                }
                Ok(Some(Self::Replace(b)))
            }
            _ => Err(format!(
                "{at} must be a mapping (as the agent file's `budget:`) or a string KEY=VALUE,..."
            )),
        }
    }

    /// The per-tool limits this change sets that name none of `tools`, as
    /// [`Budget::unknown_tools`] finds them (the limits it keeps from the budget in force are
    /// not its own).
    pub fn unknown_tools(&self, tools: &[String]) -> Vec<(&'static str, String, String)> {
        match self {
            Self::Replace(b) => b.unknown_tools(tools),
            Self::Over(text) => Budget::default()
                .with_overrides(text)
                .map(|b| b.unknown_tools(tools))
                .unwrap_or_default(),
        }
    }

    /// The budget this change makes of `base` (the one in force; none: no limits).
    pub fn over(self, base: Option<&Budget>) -> Result<Budget, String> {
        match self {
            Self::Replace(b) => Ok(b),
            Self::Over(text) => base.cloned().unwrap_or_default().with_overrides(&text),
        }
    }
}

/// What one scope (a run or a session) has spent, as budgets measure it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spent {
    /// Input tokens of model calls, failed calls' included.
    pub input_tokens: u64,
    /// Output tokens of model calls, failed calls' included.
    pub output_tokens: u64,
    /// US dollars of model calls with known prices.
    pub cost_usd: f64,
    /// Model calls: replies and failures.
    pub model_calls: u64,
    /// Tool calls started.
    pub tool_calls: u64,
    /// Tool calls started, by tool.
    pub per_tool: BTreeMap<String, u64>,
}

impl Spent {
    /// Adds a model call (a reply or a failure) that used `usage`.
    pub(crate) fn model_call(&mut self, usage: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.cost_usd += usage.cost_usd.unwrap_or(0.0);
        self.model_calls = self.model_calls.saturating_add(1);
    }

    /// Adds the start of a call of `tool`.
    pub(crate) fn tool_call(&mut self, tool: &str) {
        self.tool_calls = self.tool_calls.saturating_add(1);
        let n = self.per_tool.entry(tool.to_owned()).or_default();
        *n = n.saturating_add(1);
    }
}

/// A model's prices and output bound, as the shell knows them (from the model's settings).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelCosts {
    /// US dollars per million input tokens (the highest of the model's input prices, cache
    /// writes included); `None` when the model has no prices.
    pub input_per_mtok: Option<f64>,
    /// US dollars per million output tokens; `None` when the model has no prices.
    pub output_per_mtok: Option<f64>,
    /// The model's own `max_tokens`, used when a request sets none.
    pub max_output_tokens: Option<u32>,
}

/// What one model call may cost at most.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallMax {
    /// Input tokens (estimated from the request's bytes, as compaction estimates them).
    pub input_tokens: u64,
    /// Output tokens: the request's `max_tokens`, else the model's, else
    /// [`DEFAULT_OUTPUT_CEILING`].
    pub output_tokens: u64,
    /// Cost of both at the model's prices; `None` without prices.
    pub cost_usd: Option<f64>,
}

/// What `request` may cost at most with a model of `costs`: the one estimate every budget check
/// (and a quota) uses.
pub fn call_max(request: &ModelRequest, costs: &ModelCosts) -> CallMax {
    let input_tokens = crate::history::request_tokens(request);
    let output_tokens = request
        .max_tokens
        .or(costs.max_output_tokens)
        .map_or(DEFAULT_OUTPUT_CEILING, u64::from);
    let cost_usd = match (costs.input_per_mtok, costs.output_per_mtok) {
        (Some(i), Some(o)) => {
            Some((input_tokens as f64 * i + output_tokens as f64 * o) / 1_000_000.0)
        }
        _ => None,
    };
    CallMax {
        input_tokens,
        output_tokens,
        cost_usd,
    }
}

/// A limit that a call would cross: `which` (`run.cost_usd`, `session.tool_calls.search`), the
/// limit, what was spent, and what the call may add at most.
#[derive(Clone, Debug, PartialEq)]
pub struct Reached {
    /// The limit's name, scope first.
    pub which: String,
    /// The limit.
    pub limit: f64,
    /// What the scope has spent of it.
    pub spent: f64,
    /// What the call about to be made may add at most.
    pub call: f64,
}

impl Reached {
    /// Whether it is a limit of the user's quota (`user.day.cost_usd`), not of a budget.
    pub fn is_quota(&self) -> bool {
        self.which.starts_with(QUOTA_PREFIX)
    }

    /// One sentence for a person: the limit, what was spent, what the next call may take.
    pub fn describe(&self) -> String {
        format!(
            "{} reached: {} is {}, {} spent, and the next call may take up to {} more",
            if self.is_quota() { "quota" } else { "budget" },
            self.which,
            number(self.limit),
            number(self.spent),
            number(self.call)
        )
    }
}

/// A number as a person reads it: whole numbers without a fraction, costs with up to 6 places.
pub fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        let s = format!("{n:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Serializes a measure as a whole number when it is one (`150`, not `150.0`: tokens and calls
/// read as counts), else as a number with a fraction (a cost).
pub fn whole_if_whole<S: serde::Serializer>(n: &f64, s: S) -> Result<S::Ok, S::Error> {
    if n.fract() == 0.0 && *n >= 0.0 && *n < 9.0e15 {
        s.serialize_u64(*n as u64)
    } else {
        s.serialize_f64(*n)
    }
}

/// The first limit of `limits` (scope `scope`: `run`, `session`) that spending `spent` plus
/// `add` would cross.
pub fn first_crossed(
    scope: &str,
    limits: &BudgetLimits,
    spent: &Spent,
    add: &Spent,
) -> Option<Reached> {
    let measures: [(&str, Option<f64>, f64, f64); 5] = [
        (
            "input_tokens",
            limits.input_tokens.map(|l| l as f64),
            spent.input_tokens as f64,
            add.input_tokens as f64,
        ),
        (
            "output_tokens",
            limits.output_tokens.map(|l| l as f64),
            spent.output_tokens as f64,
            add.output_tokens as f64,
        ),
        ("cost_usd", limits.cost_usd, spent.cost_usd, add.cost_usd),
        (
            "model_calls",
            limits.model_calls.map(|l| l as f64),
            spent.model_calls as f64,
            add.model_calls as f64,
        ),
        (
            "tool_calls",
            limits.tool_calls.map(|l| l as f64),
            spent.tool_calls as f64,
            add.tool_calls as f64,
        ),
    ];
    for (name, limit, s, a) in measures {
        if let Some(limit) = limit
            && a > 0.0
            && s + a > limit
        {
            return Some(Reached {
                which: format!("{scope}.{name}"),
                limit,
                spent: s,
                call: a,
            });
        }
    }
    for (tool, n) in &add.per_tool {
        if let Some(&limit) = limits.tool_calls_per_tool.get(tool) {
            let s = spent.per_tool.get(tool).copied().unwrap_or(0);
            if s.saturating_add(*n) > limit {
                return Some(Reached {
                    which: format!("{scope}.tool_calls.{tool}"),
                    limit: limit as f64,
                    spent: s as f64,
                    call: *n as f64,
                });
            }
        }
    }
    None
}

/// What a model call may add, as spending.
pub fn model_call_spend(max: &CallMax) -> Spent {
    Spent {
        input_tokens: max.input_tokens,
        output_tokens: max.output_tokens,
        cost_usd: max.cost_usd.unwrap_or(0.0),
        model_calls: 1,
        ..Spent::default()
    }
}

/// What starting calls of `tools` adds, as spending.
pub fn tool_calls_spend<'a>(tools: impl IntoIterator<Item = &'a str>) -> Spent {
    let mut add = Spent::default();
    for t in tools {
        add.tool_calls = add.tool_calls.saturating_add(1);
        *add.per_tool.entry(t.to_owned()).or_default() += 1;
    }
    add
}

/// The wall-time limit of `budget` that `run_ms` (milliseconds since the task began) or
/// `session_ms` (since the session's first event) crossed.
pub fn wall_time_reached(budget: &Budget, run_ms: u64, session_ms: u64) -> Option<Reached> {
    for (scope, limit, spent) in [
        ("run", budget.run.wall_time_secs, run_ms),
        ("session", budget.session.wall_time_secs, session_ms),
    ] {
        if let Some(limit) = limit
            && spent >= limit.saturating_mul(1000)
        {
            return Some(Reached {
                which: format!("{scope}.wall_time_secs"),
                limit: limit as f64,
                spent: spent as f64 / 1000.0,
                call: 0.0,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn overrides_name_their_scope_and_limit() {
        let b = Budget::default()
            .with_overrides("cost_usd=0.5, session.tool_calls=10,tool_calls.search=3,on_budget=ask")
            .unwrap();
        assert_eq!(b.run.cost_usd, Some(0.5));
        assert_eq!(b.session.tool_calls, Some(10));
        assert_eq!(b.run.tool_calls_per_tool.get("search"), Some(&3));
        assert_eq!(b.on_budget, OnBudget::Ask);
        let e = Budget::default().with_overrides("cost_ud=1").unwrap_err();
        assert!(e.contains("did you mean `cost_usd`"), "{e}");
        let e = Budget::default()
            .with_overrides("tool_calls=-1")
            .unwrap_err();
        assert!(e.contains("whole number"), "{e}");
        let e = Budget::default().with_overrides("cost_usd").unwrap_err();
        assert!(e.contains("KEY=VALUE"), "{e}");
        for nothing in [",,,", "", " , "] {
            let e = Budget::default().with_overrides(nothing).unwrap_err();
            assert!(e.contains("sets no limit"), "{nothing}: {e}");
        }
    }

    #[test]
    fn a_per_tool_limit_must_name_a_tool_of_the_agent() {
        let b = Budget::default()
            .with_overrides(
                "tool_calls.serch=3,session.tool_calls.echo=1,session.tool_calls.nosuch=2",
            )
            .unwrap();
        let tools = ["search".to_owned(), "echo".to_owned()];
        let unknown = b.unknown_tools(&tools);
        assert_eq!(unknown.len(), 2, "{unknown:?}");
        assert_eq!((unknown[0].0, unknown[0].1.as_str()), ("run", "serch"));
        assert!(
            unknown[0].2.contains("did you mean `search`?")
                && unknown[0].2.contains("its tools: search, echo"),
            "{}",
            unknown[0].2
        );
        assert_eq!((unknown[1].0, unknown[1].1.as_str()), ("session", "nosuch"));
        let known = Budget::default()
            .with_overrides("tool_calls.search=1,session.tool_calls.echo=2")
            .unwrap();
        assert!(known.unknown_tools(&tools).is_empty());
    }

    #[test]
    fn the_estimate_uses_max_tokens_and_prices() {
        let req = ModelRequest {
            purpose: crate::model::Purpose::React,
            call_index: 0,
            purpose_index: 0,
            messages: vec![crate::model::Message::User {
                content: "x".repeat(400),
            }]
            .into(),
            tools: Vec::new(),
            response_schema: None,
            exact_schema: None,
            max_tokens: Some(100),
            temperature: None,
        };
        let costs = ModelCosts {
            input_per_mtok: Some(1.0),
            output_per_mtok: Some(2.0),
            max_output_tokens: Some(7),
        };
        let m = call_max(&req, &costs);
        assert_eq!(m.output_tokens, 100);
        assert!(m.input_tokens >= 100, "{}", m.input_tokens);
        let cost = m.cost_usd.unwrap();
        assert!((cost - (m.input_tokens as f64 + 200.0) / 1e6).abs() < 1e-12);
        let none = call_max(&req, &ModelCosts::default());
        assert_eq!(none.cost_usd, None);
    }
}
