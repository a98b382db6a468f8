//! Two runs compared case by case: what changed in the score, the answer, the trajectory, the
//! cost and the latency, regressions first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::expect::quote;
use crate::results::CaseResult;
use crate::trajectory::show_calls;

/// What happened to a case between run A and run B, in the order they are listed.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[schemars(rename = "EvalVerdict")]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It passes less often in B.
    Regressed,
    /// It is in A only.
    Removed,
    /// It is in B only.
    Added,
    /// It passes more often in B.
    Improved,
    /// It passes as often, but its answer, trajectory or score changed.
    Changed,
    /// Nothing that is compared changed.
    Same,
}

impl Verdict {
    /// The verdict as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Regressed => "regressed",
            Self::Removed => "removed",
            Self::Added => "added",
            Self::Improved => "improved",
            Self::Changed => "changed",
            Self::Same => "same",
        }
    }
}

/// One side of a case: its repeats in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalSide")]
pub struct Side {
    /// Sessions that passed.
    pub passed: u32,
    /// Sessions.
    pub n: u32,
    /// The mean score.
    pub score: f64,
    /// The first repeat's answer.
    pub answer: Option<String>,
    /// The first repeat's tool calls, as text.
    pub trajectory: String,
    /// Mean cost, when known.
    pub cost_usd: Option<f64>,
    /// Mean tokens.
    pub tokens: f64,
    /// Mean latency (ms).
    pub latency_ms: f64,
    /// The scorers that failed (any repeat).
    pub failed: Vec<String>,
    /// The first repeat's session.
    pub session: String,
}

impl Side {
    fn of(rs: &[&CaseResult]) -> Self {
        let n = rs.len() as f64;
        let costs: Vec<f64> = rs.iter().filter_map(|r| r.used.cost_usd).collect();
        let mut failed: Vec<String> = rs
            .iter()
            .flat_map(|r| {
                r.scores
                    .iter()
                    .filter(|s| !s.pass)
                    .map(|s| s.scorer.clone())
                    .chain(r.error.as_ref().map(|_| "run".to_owned()))
            })
            .collect();
        failed.sort();
        failed.dedup();
        let first = rs.iter().min_by_key(|r| r.repeat);
        Self {
            passed: rs.iter().filter(|r| r.pass).count() as u32,
            n: rs.len() as u32,
            score: rs.iter().map(|r| r.score).sum::<f64>() / n,
            answer: first.and_then(|r| r.answer.clone()),
            trajectory: first.map(|r| show_calls(&r.calls)).unwrap_or_default(),
            cost_usd: (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64),
            tokens: rs.iter().map(|r| r.used.tokens() as f64).sum::<f64>() / n,
            latency_ms: rs.iter().map(|r| r.used.latency_ms as f64).sum::<f64>() / n,
            failed,
            session: first.map(|r| r.session.clone()).unwrap_or_default(),
        }
    }

    fn rate(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            f64::from(self.passed) / f64::from(self.n)
        }
    }
}

/// One case compared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalCaseChange")]
pub struct CaseChange {
    /// The case.
    pub case: String,
    /// What happened to it.
    pub verdict: Verdict,
    /// In run A.
    pub a: Option<Side>,
    /// In run B.
    pub b: Option<Side>,
    /// What changed, one line each.
    pub changes: Vec<String>,
}

/// A run's results by case, and the cases in the order they first appear.
type Grouped<'a> = (BTreeMap<String, Vec<&'a CaseResult>>, Vec<String>);

fn group(rs: &[CaseResult]) -> Grouped<'_> {
    let mut m: BTreeMap<String, Vec<&CaseResult>> = BTreeMap::new();
    let mut order = Vec::new();
    for r in rs {
        if !m.contains_key(&r.case) {
            order.push(r.case.clone());
        }
        m.entry(r.case.clone()).or_default().push(r);
    }
    (m, order)
}

/// Compares run `a` with run `b`: every case of either, regressions first, then cases removed,
/// added, improved, changed, and those that stayed the same.
pub fn compare(a: &[CaseResult], b: &[CaseResult]) -> Vec<CaseChange> {
    let ((ga, oa), (gb, ob)) = (group(a), group(b));
    let mut names = oa;
    names.extend(ob.into_iter().filter(|c| !ga.contains_key(c)));
    let mut out: Vec<(usize, CaseChange)> = names
        .into_iter()
        .enumerate()
        .map(|(i, case)| {
            let sa = ga.get(&case).map(|rs| Side::of(rs));
            let sb = gb.get(&case).map(|rs| Side::of(rs));
            let (verdict, changes) = judge(sa.as_ref(), sb.as_ref());
            (
                i,
                CaseChange {
                    case,
                    verdict,
                    a: sa,
                    b: sb,
                    changes,
                },
            )
        })
        .collect();
    out.sort_by_key(|(i, c)| (c.verdict, *i));
    out.into_iter().map(|(_, c)| c).collect()
}

fn judge(a: Option<&Side>, b: Option<&Side>) -> (Verdict, Vec<String>) {
    let (a, b) = match (a, b) {
        (Some(a), Some(b)) => (a, b),
        (Some(_), None) => return (Verdict::Removed, vec!["not in run B".into()]),
        (None, Some(_)) => return (Verdict::Added, vec!["not in run A".into()]),
        (None, None) => return (Verdict::Same, Vec::new()),
    };
    let mut changes = Vec::new();
    let rate = (a.rate(), b.rate());
    if rate.0 != rate.1 {
        let newly: Vec<&String> = b.failed.iter().filter(|f| !a.failed.contains(f)).collect();
        changes.push(format!(
            "passed {}/{} -> {}/{}{}",
            a.passed,
            a.n,
            b.passed,
            b.n,
            if newly.is_empty() {
                String::new()
            } else {
                format!(
                    " (now failing: {})",
                    newly
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
    }
    if (a.score - b.score).abs() > 1e-9 {
        changes.push(format!("score {:.2} -> {:.2}", a.score, b.score));
    }
    if a.answer != b.answer {
        changes.push(format!(
            "answer {} -> {}",
            quote(a.answer.as_deref().unwrap_or("(none)")),
            quote(b.answer.as_deref().unwrap_or("(none)"))
        ));
    }
    if a.trajectory != b.trajectory {
        changes.push(format!(
            "trajectory [{}] -> [{}]",
            a.trajectory, b.trajectory
        ));
    }
    if let (Some(ca), Some(cb)) = (a.cost_usd, b.cost_usd)
        && (ca - cb).abs() > 1e-9
    {
        changes.push(format!("cost ${ca:.4} -> ${cb:.4}"));
    }
    if (a.tokens - b.tokens).abs() > 0.5 {
        changes.push(format!("tokens {:.0} -> {:.0}", a.tokens, b.tokens));
    }
    let verdict = if rate.1 < rate.0 {
        Verdict::Regressed
    } else if rate.1 > rate.0 {
        Verdict::Improved
    } else if changes.is_empty() {
        Verdict::Same
    } else {
        Verdict::Changed
    };
    // Latency is shown, never a change by itself: it moves on every run.
    if (a.latency_ms - b.latency_ms).abs() >= 1.0 && verdict != Verdict::Same {
        changes.push(format!(
            "latency {:.0} ms -> {:.0} ms",
            a.latency_ms, b.latency_ms
        ));
    }
    (verdict, changes)
}

/// The comparison for people: a line per case that is not the same (with what changed), then
/// the counts.
pub fn report(changes: &[CaseChange]) -> String {
    let mut out = String::new();
    let mut counts: BTreeMap<Verdict, u32> = BTreeMap::new();
    for c in changes {
        *counts.entry(c.verdict).or_default() += 1;
        if c.verdict == Verdict::Same {
            continue;
        }
        out.push_str(&format!("{:<9}  {}\n", c.verdict.as_str(), c.case));
        for line in &c.changes {
            out.push_str(&format!("           {line}\n"));
        }
        if let Some(b) = &c.b {
            out.push_str(&format!("           session {}\n", b.session));
        }
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(v, n)| format!("{n} {}", v.as_str()))
        .collect();
    out.push_str(&format!(
        "{} case(s): {}\n",
        changes.len(),
        summary.join(", ")
    ));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::expect::Score;
    use crate::observed::Used;

    fn r(case: &str, pass: bool, answer: &str) -> CaseResult {
        CaseResult {
            run: "x".into(),
            case: case.into(),
            repeat: 1,
            session: format!("x-{case}-r1"),
            pass,
            score: if pass { 1.0 } else { 0.5 },
            scores: vec![Score::of(
                "trajectory",
                if pass { Ok(()) } else { Err("no".into()) },
            )],
            status: None,
            answer: Some(answer.into()),
            calls: vec![],
            used: Used::default(),
            judge_tokens: 0,
            error: None,
        }
    }

    #[test]
    fn regressions_come_first() {
        let a = vec![
            r("one", true, "a"),
            r("two", true, "b"),
            r("three", false, "c"),
        ];
        let b = vec![
            r("one", true, "a2"),
            r("two", false, "b"),
            r("three", true, "c"),
            r("four", true, "d"),
        ];
        let c = compare(&a, &b);
        let order: Vec<(&str, Verdict)> = c.iter().map(|c| (c.case.as_str(), c.verdict)).collect();
        assert_eq!(
            order,
            vec![
                ("two", Verdict::Regressed),
                ("four", Verdict::Added),
                ("three", Verdict::Improved),
                ("one", Verdict::Changed),
            ]
        );
        assert!(
            c[0].changes[0].contains("now failing: trajectory"),
            "{:?}",
            c[0].changes
        );
    }
}
