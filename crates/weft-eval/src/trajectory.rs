//! The tool calls a session made matched against the calls a case expects, in one of four ways
//! (as LangChain's agentevals names them):
//!
//! - `strict`: the same calls in the same order;
//! - `unordered`: the same calls in any order;
//! - `subset`: every call made is one of the expected ones (nothing else was called);
//! - `superset`: every expected call was made (others may have been made too).
//!
//! An expected call names its tool and, optionally, its arguments: the arguments given must be
//! in the call's (a JSON subset; see [`crate::expect::json_subset`]), others are not compared.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::expect::json_subset;

/// How calls are matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchMode {
    /// The same calls in the same order.
    #[default]
    Strict,
    /// The same calls in any order.
    Unordered,
    /// Every call made is an expected one.
    Subset,
    /// Every expected call was made.
    Superset,
}

impl MatchMode {
    /// The mode as written in datasets.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Unordered => "unordered",
            Self::Subset => "subset",
            Self::Superset => "superset",
        }
    }
}

/// A case's expected trajectory.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrajectoryExpect {
    /// How the calls are matched (default `strict`).
    #[serde(default, rename = "match")]
    pub mode: MatchMode,
    /// The calls expected.
    pub calls: Vec<ExpectedCall>,
}

impl TrajectoryExpect {
    /// Problems serde cannot see: `(field, message)`.
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        for (i, c) in self.calls.iter().enumerate() {
            if c.tool.trim().is_empty() {
                return Err((
                    format!("calls[{i}].tool"),
                    "the tool's name is empty".into(),
                ));
            }
            if let Some(a) = &c.args
                && !a.is_object()
            {
                return Err((
                    format!("calls[{i}].args"),
                    "a call's arguments are a mapping".into(),
                ));
            }
        }
        Ok(())
    }
}

/// One expected call.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCall {
    /// The tool.
    pub tool: String,
    /// Arguments the call must have (a subset of its arguments); absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// One call a session made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalCall")]
pub struct Call {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub args: Value,
}

fn fits(expected: &ExpectedCall, call: &Call) -> bool {
    expected.tool == call.tool
        && expected
            .args
            .as_ref()
            .is_none_or(|a| json_subset(a, &call.args).is_ok())
}

/// Matches `calls` against `expect`; `Err` says what did not match.
pub fn matches(expect: &TrajectoryExpect, calls: &[Call]) -> Result<(), String> {
    let want = &expect.calls;
    match expect.mode {
        MatchMode::Strict => {
            for (i, w) in want.iter().enumerate() {
                match calls.get(i) {
                    None => {
                        return Err(format!(
                            "expected call {} ({}) was not made; the session made {} call(s): {}",
                            i + 1,
                            show_expected(w),
                            calls.len(),
                            show_calls(calls)
                        ));
                    }
                    Some(c) if !fits(w, c) => {
                        return Err(format!(
                            "call {} was {}, expected {}",
                            i + 1,
                            show_call(c),
                            show_expected(w)
                        ));
                    }
                    Some(_) => {}
                }
            }
            if calls.len() > want.len() {
                return Err(format!(
                    "{} call(s) more than expected: {}",
                    calls.len() - want.len(),
                    show_calls(&calls[want.len()..])
                ));
            }
            Ok(())
        }
        MatchMode::Unordered | MatchMode::Subset | MatchMode::Superset => {
            let pairs = matching(want, calls);
            let unmatched_want: Vec<&ExpectedCall> = want
                .iter()
                .enumerate()
                .filter(|(i, _)| !pairs.iter().any(|(w, _)| w == i))
                .map(|(_, w)| w)
                .collect();
            let extra: Vec<Call> = calls
                .iter()
                .enumerate()
                .filter(|(j, _)| !pairs.iter().any(|(_, c)| c == j))
                .map(|(_, c)| c.clone())
                .collect();
            let missing = || {
                format!(
                    "not made: {}",
                    unmatched_want
                        .iter()
                        .map(|w| show_expected(w))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let unexpected = || format!("not expected: {}", show_calls(&extra));
            let need_all_expected = expect.mode != MatchMode::Subset;
            let need_no_extra = expect.mode != MatchMode::Superset;
            let mut problems = Vec::new();
            if need_all_expected && !unmatched_want.is_empty() {
                problems.push(missing());
            }
            if need_no_extra && !extra.is_empty() {
                problems.push(unexpected());
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(problems.join("; "))
            }
        }
    }
}

/// The most pairs (expected index, call index) where the call fits the expectation: a maximum
/// bipartite matching (augmenting paths; trajectories are short).
fn matching(want: &[ExpectedCall], calls: &[Call]) -> Vec<(usize, usize)> {
    let mut owner: Vec<Option<usize>> = vec![None; calls.len()];
    fn augment(
        w: usize,
        want: &[ExpectedCall],
        calls: &[Call],
        owner: &mut Vec<Option<usize>>,
        seen: &mut Vec<bool>,
    ) -> bool {
        for j in 0..calls.len() {
            if seen[j] || !fits(&want[w], &calls[j]) {
                continue;
            }
            seen[j] = true;
            let free = match owner[j] {
                None => true,
                Some(o) => augment(o, want, calls, owner, seen),
            };
            if free {
                owner[j] = Some(w);
                return true;
            }
        }
        false
    }
    for w in 0..want.len() {
        let mut seen = vec![false; calls.len()];
        augment(w, want, calls, &mut owner, &mut seen);
    }
    owner
        .iter()
        .enumerate()
        .filter_map(|(j, o)| o.map(|w| (w, j)))
        .collect()
}

/// `tool {args}` of a call made.
pub fn show_call(c: &Call) -> String {
    format!("{} {}", c.tool, c.args)
}

fn show_expected(w: &ExpectedCall) -> String {
    match &w.args {
        Some(a) => format!("{} {a}", w.tool),
        None => w.tool.clone(),
    }
}

/// The calls, comma-separated (`none` for none).
pub fn show_calls(calls: &[Call]) -> String {
    if calls.is_empty() {
        return "none".into();
    }
    calls.iter().map(show_call).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn call(t: &str, a: Value) -> Call {
        Call {
            tool: t.into(),
            args: a,
        }
    }

    fn want(mode: MatchMode, calls: Value) -> TrajectoryExpect {
        TrajectoryExpect {
            mode,
            calls: serde_json::from_value(calls).unwrap(),
        }
    }

    fn made() -> Vec<Call> {
        vec![
            call("getWeather", json!({"city": "Lisbon"})),
            call("getWeather", json!({"city": "Oslo"})),
        ]
    }

    #[test]
    fn strict_needs_the_order() {
        let ok = want(
            MatchMode::Strict,
            json!([{"tool": "getWeather", "args": {"city": "Lisbon"}}, {"tool": "getWeather"}]),
        );
        assert!(matches(&ok, &made()).is_ok());
        let swapped = want(
            MatchMode::Strict,
            json!([{"tool": "getWeather", "args": {"city": "Oslo"}}, {"tool": "getWeather"}]),
        );
        let e = matches(&swapped, &made()).unwrap_err();
        assert!(e.contains("call 1 was getWeather"), "{e}");
    }

    #[test]
    fn unordered_takes_any_order_but_not_extra_calls() {
        let w = want(
            MatchMode::Unordered,
            json!([{"tool": "getWeather", "args": {"city": "Oslo"}}, {"tool": "getWeather", "args": {"city": "Lisbon"}}]),
        );
        assert!(matches(&w, &made()).is_ok());
        let one = want(
            MatchMode::Unordered,
            json!([{"tool": "getWeather", "args": {"city": "Oslo"}}]),
        );
        let e = matches(&one, &made()).unwrap_err();
        assert!(
            e.contains("not expected: getWeather {\"city\":\"Lisbon\"}"),
            "{e}"
        );
    }

    #[test]
    fn subset_and_superset() {
        let one = want(
            MatchMode::Superset,
            json!([{"tool": "getWeather", "args": {"city": "Oslo"}}]),
        );
        assert!(matches(&one, &made()).is_ok());
        let three = want(
            MatchMode::Subset,
            json!([{"tool": "getWeather"}, {"tool": "getWeather"}, {"tool": "other"}]),
        );
        assert!(matches(&three, &made()).is_ok());
        let sub = want(MatchMode::Subset, json!([{"tool": "getWeather"}]));
        assert!(matches(&sub, &made()).is_err());
        let sup = want(MatchMode::Superset, json!([{"tool": "issueRefund"}]));
        let e = matches(&sup, &made()).unwrap_err();
        assert!(e.contains("not made: issueRefund"), "{e}");
    }

    #[test]
    fn the_matching_finds_a_pairing_a_greedy_pass_misses() {
        // The first expectation fits both calls; only one pairing covers both.
        let w = want(
            MatchMode::Unordered,
            json!([{"tool": "t"}, {"tool": "t", "args": {"x": 1}}]),
        );
        let calls = vec![call("t", json!({"x": 1})), call("t", json!({"x": 2}))];
        assert!(matches(&w, &calls).is_ok());
    }
}
