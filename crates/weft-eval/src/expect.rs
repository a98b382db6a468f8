//! The scorers a case's expectations make: status, answer (exact, contains, not contains,
//! regex, JSON subset, JSON Schema), State subset, trajectory and limits. Each is a pure
//! function of what the session did ([`Observed`]) and gives a [`Score`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dataset::{Case, ExpectedStatus};
use crate::observed::{Observed, Outcome};
use crate::trajectory;

/// One scorer's verdict on one session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalScore")]
pub struct Score {
    /// The scorer (`status`, `answer.contains`, `trajectory`, `limits.tokens`, `judge`, ...).
    pub scorer: String,
    /// Whether the session passed it.
    pub pass: bool,
    /// From 0 to 1 (1 or 0 for a scorer that only passes or fails).
    pub score: f64,
    /// What was wrong, or what was found.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// A judge's reasoning, kept as it gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

impl Score {
    /// A verdict of a scorer that passes or fails.
    pub fn of(scorer: impl Into<String>, verdict: Result<(), String>) -> Self {
        let (pass, detail) = match verdict {
            Ok(()) => (true, String::new()),
            Err(d) => (false, d),
        };
        Self {
            scorer: scorer.into(),
            pass,
            score: if pass { 1.0 } else { 0.0 },
            detail,
            reasoning: None,
        }
    }
}

/// The scores of every expectation of `case` but its outside scorers (see [`crate::scorer`]).
pub fn score(case: &Case, obs: &Observed) -> Vec<Score> {
    let e = &case.expect;
    let mut out = Vec::new();
    let want = e.status.unwrap_or(ExpectedStatus::Completed);
    out.push(Score::of("status", status(want, obs)));
    if let Some(a) = &e.answer {
        let text = obs.answer.as_deref().unwrap_or_default();
        if let Some(x) = &a.exact {
            out.push(Score::of(
                "answer.exact",
                if text.trim() == x.trim() {
                    Ok(())
                } else {
                    Err(format!("the answer is {}", quote(text)))
                },
            ));
        }
        if let Some(c) = &a.contains {
            let low = text.to_lowercase();
            let missing: Vec<&str> = c
                .items()
                .into_iter()
                .filter(|s| !low.contains(&s.to_lowercase()))
                .collect();
            out.push(Score::of(
                "answer.contains",
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "the answer lacks {}: {}",
                        missing
                            .iter()
                            .map(|m| format!("\"{m}\""))
                            .collect::<Vec<_>>()
                            .join(", "),
                        quote(text)
                    ))
                },
            ));
        }
        if let Some(c) = &a.not_contains {
            let low = text.to_lowercase();
            let found: Vec<&str> = c
                .items()
                .into_iter()
                .filter(|s| low.contains(&s.to_lowercase()))
                .collect();
            out.push(Score::of(
                "answer.not_contains",
                if found.is_empty() {
                    Ok(())
                } else {
                    Err(format!("the answer holds \"{}\"", found.join("\", \"")))
                },
            ));
        }
        if let Some(r) = &a.regex {
            // Compiled when the dataset was read, so an error here cannot happen; said anyway.
            let verdict = match regex::Regex::new(r) {
                Ok(re) if re.is_match(text) => Ok(()),
                Ok(_) => Err(format!("the answer does not match /{r}/: {}", quote(text))),
                Err(e) => Err(format!("the pattern does not compile: {e}")),
            };
            out.push(Score::of("answer.regex", verdict));
        }
        if let Some(sub) = &a.json_subset {
            let verdict = answer_json(text).and_then(|v| json_subset(sub, &v));
            out.push(Score::of("answer.json_subset", verdict));
        }
        if let Some(schema) = &a.json_schema {
            let verdict = answer_json(text).and_then(|v| match jsonschema::validator_for(schema) {
                Ok(val) => match val.iter_errors(&v).next() {
                    None => Ok(()),
                    Some(e) => Err(format!(
                        "the answer does not fit the schema at `{}`: {e}",
                        e.instance_path()
                    )),
                },
                Err(e) => Err(format!("the schema does not compile: {e}")),
            });
            out.push(Score::of("answer.json_schema", verdict));
        }
    }
    if let Some(s) = &e.state {
        out.push(Score::of(
            "state",
            json_subset(s, &obs.state).map_err(|d| format!("State: {d}")),
        ));
    }
    if let Some(t) = &e.trajectory {
        out.push(Score::of("trajectory", trajectory::matches(t, &obs.calls)));
    }
    if let Some(l) = &e.limits {
        let u = &obs.used;
        let over = |what: &str, used: String, most: String| {
            Err(format!("used {used} {what}, at most {most} expected"))
        };
        if let Some(n) = l.tokens {
            out.push(Score::of(
                "limits.tokens",
                if u.tokens() <= n {
                    Ok(())
                } else {
                    over("tokens", u.tokens().to_string(), n.to_string())
                },
            ));
        }
        if let Some(c) = l.cost_usd {
            out.push(Score::of(
                "limits.cost_usd",
                match u.cost_usd {
                    Some(used) if used > c => over("dollars", format!("{used:.4}"), format!("{c}")),
                    _ => Ok(()),
                },
            ));
        }
        if let Some(n) = l.model_calls {
            out.push(Score::of(
                "limits.model_calls",
                if u.model_calls <= n {
                    Ok(())
                } else {
                    over("model calls", u.model_calls.to_string(), n.to_string())
                },
            ));
        }
        if let Some(n) = l.wall_ms {
            out.push(Score::of(
                "limits.wall_ms",
                if u.latency_ms <= n {
                    Ok(())
                } else {
                    over("ms", u.latency_ms.to_string(), n.to_string())
                },
            ));
        }
    }
    out
}

fn status(want: ExpectedStatus, obs: &Observed) -> Result<(), String> {
    let same = matches!(
        (want, obs.status),
        (ExpectedStatus::Completed, Outcome::Completed)
            | (ExpectedStatus::Waiting, Outcome::Waiting)
            | (ExpectedStatus::CannotComplete, Outcome::CannotComplete)
    );
    if same {
        return Ok(());
    }
    let why = match obs.status {
        Outcome::CannotComplete => {
            format!(": {}", obs.error.as_deref().unwrap_or("no reason recorded"))
        }
        Outcome::Waiting => format!(
            ", asking {}",
            quote(obs.question.as_deref().unwrap_or_default())
        ),
        _ => String::new(),
    };
    Err(format!(
        "expected {}, the session ended {}{why}",
        want.as_str(),
        obs.status.as_str()
    ))
}

/// The answer read as JSON (inside a Markdown code fence too, as models often write it).
fn answer_json(text: &str) -> Result<Value, String> {
    let t = text.trim();
    let inner = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|r| r.strip_suffix("```"))
        .unwrap_or(t);
    serde_json::from_str(inner.trim())
        .map_err(|e| format!("the answer is not JSON ({e}): {}", quote(text)))
}

/// Whether `actual` holds `expected`: an object holds at least the expected fields (each held
/// in turn), a list has as many items, each held, any other value is equal (numbers by value).
/// `Err` names the first path that differs.
pub fn json_subset(expected: &Value, actual: &Value) -> Result<(), String> {
    subset_at(expected, actual, "")
}

fn subset_at(expected: &Value, actual: &Value, at: &str) -> Result<(), String> {
    let here = if at.is_empty() { "the value" } else { at };
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match a.get(k) {
                    None => return Err(format!("`{path}` is missing")),
                    Some(av) => subset_at(ev, av, &path)?,
                }
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!(
                    "`{here}` has {} item(s), {} expected",
                    a.len(),
                    e.len()
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                subset_at(ev, av, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => Ok(()),
        (e, a) if e == a => Ok(()),
        (e, a) => Err(format!("`{here}` is {}, {} expected", short(a), short(e))),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        format!("{}...", cut(&s, 117))
    } else {
        s
    }
}

/// The first `n` bytes of `s` at most, cut at a character's boundary.
pub(crate) fn cut(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A text in quotes, cut to a readable length.
pub(crate) fn quote(text: &str) -> String {
    if text.len() > 160 {
        format!("\"{}...\"", cut(text, 157))
    } else {
        format!("\"{text}\"")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::dataset::parse_yaml;
    use crate::observed::Used;
    use serde_json::json;

    fn obs(answer: &str) -> Observed {
        Observed {
            session: "s".into(),
            status: Outcome::Completed,
            answer: Some(answer.into()),
            question: None,
            error: None,
            state: json!({"refund": {"id": "r1", "amount": 50}, "n": [1, 2]}),
            calls: vec![],
            used: Used {
                input_tokens: 10,
                output_tokens: 5,
                cost_usd: None,
                model_calls: 2,
                latency_ms: 40,
            },
        }
    }

    fn scores(yaml: &str, o: &Observed) -> Vec<Score> {
        let cases = parse_yaml("d.yaml", yaml).unwrap();
        score(&cases[0], o)
    }

    fn verdict(s: &[Score], name: &str) -> bool {
        s.iter().find(|x| x.scorer == name).unwrap().pass
    }

    #[test]
    fn answers_are_checked_each_way() {
        let o = obs("{\"total\": 50, \"ok\": true}");
        let s = scores(
            "- id: a\n  task: t\n  expect:\n    answer:\n      contains: TOTAL\n      not_contains: error\n      regex: '\"total\": \\d+'\n      json_subset: {total: 50.0}\n      json_schema: {type: object, required: [ok]}\n      exact: nope\n",
            &o,
        );
        assert!(verdict(&s, "status"));
        assert!(verdict(&s, "answer.contains"));
        assert!(verdict(&s, "answer.not_contains"));
        assert!(verdict(&s, "answer.regex"));
        assert!(verdict(&s, "answer.json_subset"));
        assert!(verdict(&s, "answer.json_schema"));
        assert!(!verdict(&s, "answer.exact"));
    }

    #[test]
    fn state_subset_names_the_path_that_differs() {
        let s = scores(
            "- id: a\n  task: t\n  expect:\n    state: {refund: {amount: 40}}\n",
            &obs("x"),
        );
        let st = s.iter().find(|x| x.scorer == "state").unwrap();
        assert!(!st.pass);
        assert!(
            st.detail.contains("`refund.amount` is 50, 40 expected"),
            "{}",
            st.detail
        );
    }

    #[test]
    fn limits_and_status() {
        let s = scores(
            "- id: a\n  task: t\n  expect:\n    status: waiting\n    limits: {tokens: 14, model_calls: 2, wall_ms: 40}\n",
            &obs("x"),
        );
        assert!(!verdict(&s, "status"));
        assert!(!verdict(&s, "limits.tokens"));
        assert!(verdict(&s, "limits.model_calls"));
        assert!(verdict(&s, "limits.wall_ms"));
    }

    #[test]
    fn subset_of_lists_needs_the_same_length() {
        assert!(json_subset(&json!([1]), &json!([1, 2])).is_err());
        assert!(
            json_subset(
                &json!({"a": [1, {"b": 2}]}),
                &json!({"a": [1, {"b": 2, "c": 3}]})
            )
            .is_ok()
        );
    }
}
