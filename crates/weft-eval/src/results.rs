//! A run's results: one JSON line per session (a case's repeat) in `results.jsonl`, and the
//! summary made from them: per case and per scorer, the pass rate, pass@k, the mean score and
//! its spread, tokens, cost and latency.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::EvalError;
use crate::dataset::Case;
use crate::expect::Score;
use crate::observed::{Observed, Outcome, Used};
use crate::trajectory::Call;

/// The results file's name in a run's directory.
pub const RESULTS_FILE: &str = "results.jsonl";
/// The summary's file name in a run's directory.
pub const SUMMARY_FILE: &str = "summary.json";
/// The longest results line read (bytes).
const MAX_LINE: u64 = 16 << 20;

/// What one session of a case came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalCaseResult")]
pub struct CaseResult {
    /// The run's id.
    pub run: String,
    /// The case's id.
    pub case: String,
    /// Which repeat, from 1.
    pub repeat: u32,
    /// The session's id (`weft sessions show ID`).
    pub session: String,
    /// Whether every scorer passed.
    pub pass: bool,
    /// The mean of the scorers' scores, from 0 to 1.
    pub score: f64,
    /// Each scorer's verdict.
    pub scores: Vec<Score>,
    /// How the session ended; `None` when it could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Outcome>,
    /// Its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The tools it called.
    #[serde(default)]
    pub calls: Vec<Call>,
    /// What it used.
    #[serde(default)]
    pub used: Used,
    /// Tokens the judges used (not the session's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub judge_tokens: u64,
    /// Why the session could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CaseResult {
    /// The result of a session that ran and was scored.
    pub fn scored(
        run: &str,
        case: &Case,
        repeat: u32,
        obs: Observed,
        scores: Vec<Score>,
        judge_tokens: u64,
    ) -> Self {
        let pass = scores.iter().all(|s| s.pass);
        let score = if scores.is_empty() {
            0.0
        } else {
            scores.iter().map(|s| s.score).sum::<f64>() / scores.len() as f64
        };
        Self {
            run: run.to_owned(),
            case: case.id.clone(),
            repeat,
            session: obs.session,
            pass,
            score,
            scores,
            status: Some(obs.status),
            answer: obs.answer,
            calls: obs.calls,
            used: obs.used,
            judge_tokens,
            error: None,
        }
    }

    /// Pass and score again after a scorer was added.
    pub fn rescore(&mut self) {
        self.pass = self.error.is_none() && self.scores.iter().all(|s| s.pass);
        self.score = if self.scores.is_empty() {
            0.0
        } else {
            self.scores.iter().map(|s| s.score).sum::<f64>() / self.scores.len() as f64
        };
    }

    /// The result of a session that could not run: it fails.
    pub fn not_run(run: &str, case: &Case, repeat: u32, session: &str, error: String) -> Self {
        Self {
            run: run.to_owned(),
            case: case.id.clone(),
            repeat,
            session: session.to_owned(),
            pass: false,
            score: 0.0,
            scores: Vec::new(),
            status: None,
            answer: None,
            calls: Vec::new(),
            used: Used::default(),
            judge_tokens: 0,
            error: Some(error),
        }
    }
}

/// Writes results as JSON lines.
pub fn write_results(path: &Path, results: &[CaseResult]) -> Result<(), EvalError> {
    let err =
        |e: std::io::Error| EvalError::Results(format!("cannot write {}: {e}", path.display()));
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(err)?);
    for r in results {
        let line = serde_json::to_string(r)
            .map_err(|e| EvalError::Results(format!("cannot write {}: {e}", path.display())))?;
        writeln!(w, "{line}").map_err(err)?;
    }
    w.flush().map_err(err)
}

/// Adds one result to a run's results file as it comes (one line, written whole), so that a run
/// stopped midway leaves the results it had.
pub fn append_result(path: &Path, r: &CaseResult) -> Result<(), EvalError> {
    let err =
        |e: std::io::Error| EvalError::Results(format!("cannot write {}: {e}", path.display()));
    let mut line = serde_json::to_string(r)
        .map_err(|e| EvalError::Results(format!("cannot write {}: {e}", path.display())))?;
    line.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    f.write_all(line.as_bytes()).map_err(err)
}

/// The finished results of run `run` in the results file at `path`, if any: those of sessions
/// that ran and were scored. A line cut short (the run was killed while writing it), a result
/// of another run or of a session that could not run is left out: that session runs again.
pub fn finished(path: &Path, run: &str) -> Vec<CaseResult> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<CaseResult>(l).ok())
        .filter(|r| r.run == run && r.error.is_none())
        .collect()
}

/// Reads a run's results: `path` is the run's directory (its `results.jsonl`) or the file.
pub fn read_results(path: &Path) -> Result<Vec<CaseResult>, EvalError> {
    let file = if path.is_dir() {
        path.join(RESULTS_FILE)
    } else {
        path.to_owned()
    };
    let shown = file.display().to_string();
    let f = std::fs::File::open(&file).map_err(|e| {
        EvalError::Results(format!(
            "cannot read the results {shown}: {e} (give a run's --out directory or its {RESULTS_FILE})"
        ))
    })?;
    let mut out = Vec::new();
    let mut reader = std::io::BufReader::new(f);
    let mut n = 0;
    loop {
        let mut line = String::new();
        let read = std::io::Read::take(&mut reader, MAX_LINE)
            .read_line(&mut line)
            .map_err(|e| EvalError::Results(format!("cannot read {shown}: {e}")))?;
        if read == 0 {
            break;
        }
        n += 1;
        if !line.ends_with('\n') && read as u64 == MAX_LINE {
            return Err(EvalError::Results(format!(
                "{shown}:{n}: the line is longer than {MAX_LINE} bytes"
            )));
        }
        if line.trim().is_empty() {
            continue;
        }
        let r: CaseResult = serde_json::from_str(&line).map_err(|e| {
            EvalError::Results(format!("{shown}:{n}: not a result of `weft eval` ({e})"))
        })?;
        out.push(r);
    }
    Ok(out)
}

/// A summary of many sessions (a case's repeats, a scorer's verdicts, or a whole run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalStats")]
pub struct Stats {
    /// Sessions (or verdicts).
    pub n: u32,
    /// Those that passed.
    pub passed: u32,
    /// `passed / n`.
    pub pass_rate: f64,
    /// The mean score.
    pub score_mean: f64,
    /// The scores' standard deviation (of the sample; 0 for one).
    pub score_stdev: f64,
}

impl Stats {
    fn of(pass: &[bool], scores: &[f64]) -> Self {
        let n = pass.len() as u32;
        let passed = pass.iter().filter(|p| **p).count() as u32;
        let (mean, stdev) = mean_stdev(scores);
        Self {
            n,
            passed,
            pass_rate: if n == 0 {
                0.0
            } else {
                f64::from(passed) / f64::from(n)
            },
            score_mean: mean,
            score_stdev: stdev,
        }
    }
}

/// The mean and the sample standard deviation.
pub fn mean_stdev(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The chance that at least one of `k` sessions drawn from `n`, `c` of which passed, passes:
/// `1 - C(n-c, k) / C(n, k)` (the unbiased estimator of pass@k).
pub fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    if k == 0 || n == 0 || k > n {
        return 0.0;
    }
    if n - c < k {
        return 1.0;
    }
    let mut fail = 1.0;
    for i in 0..k {
        fail *= f64::from(n - c - i) / f64::from(n - i);
    }
    1.0 - fail
}

/// The chance that all of `k` sessions drawn from `n`, `c` of which passed, pass:
/// `C(c, k) / C(n, k)` (pass^k, how reliably a case passes).
pub fn pass_all_k(n: u32, c: u32, k: u32) -> f64 {
    if k == 0 || n == 0 || k > n || c < k {
        return 0.0;
    }
    let mut all = 1.0;
    for i in 0..k {
        all *= f64::from(c - i) / f64::from(n - i);
    }
    all
}

/// One case's repeats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalCaseSummary")]
pub struct CaseSummary {
    /// The case.
    pub case: String,
    /// Its sessions.
    pub stats: Stats,
    /// pass@k with k = the repeats.
    pub pass_at_k: f64,
    /// pass^k with k = the repeats: all of them pass.
    pub pass_all_k: f64,
    /// Mean tokens per session.
    pub tokens_mean: f64,
    /// Mean cost per session, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_mean: Option<f64>,
    /// Mean latency per session (ms).
    pub latency_ms_mean: f64,
    /// The scorers that failed at least once, with how many times.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<String, u32>,
}

/// A run's summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalSummary")]
pub struct Summary {
    /// The run's id.
    pub run: String,
    /// Repeats per case (k).
    pub repeat: u32,
    /// Every session.
    pub sessions: Stats,
    /// Cases all of whose repeats passed.
    pub cases_passed: u32,
    /// Cases.
    pub cases: u32,
    /// The mean over cases of pass@k.
    pub pass_at_k: f64,
    /// The mean over cases of pass^k.
    pub pass_all_k: f64,
    /// The spread over cases of each case's pass rate (standard deviation).
    pub pass_rate_stdev: f64,
    /// Tokens of every session.
    pub tokens: u64,
    /// Cost of every session whose cost is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Per case, in the dataset's order.
    pub per_case: Vec<CaseSummary>,
    /// Per scorer, by name.
    pub per_scorer: BTreeMap<String, Stats>,
}

/// Summarises `results` of run `run` with `repeat` sessions per case.
pub fn summarise(run: &str, repeat: u32, results: &[CaseResult]) -> Summary {
    let mut order: Vec<&str> = Vec::new();
    let mut by_case: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        if !by_case.contains_key(r.case.as_str()) {
            order.push(&r.case);
        }
        by_case.entry(&r.case).or_default().push(r);
    }
    let mut per_case = Vec::new();
    for case in order {
        let rs = &by_case[case];
        let pass: Vec<bool> = rs.iter().map(|r| r.pass).collect();
        let scores: Vec<f64> = rs.iter().map(|r| r.score).collect();
        let stats = Stats::of(&pass, &scores);
        let k = stats.n;
        let n = rs.len() as f64;
        let costs: Vec<f64> = rs.iter().filter_map(|r| r.used.cost_usd).collect();
        let mut failed = BTreeMap::new();
        for r in rs {
            for s in r.scores.iter().filter(|s| !s.pass) {
                *failed.entry(s.scorer.clone()).or_insert(0) += 1;
            }
            if r.error.is_some() {
                *failed.entry("run".to_owned()).or_insert(0) += 1;
            }
        }
        per_case.push(CaseSummary {
            case: case.to_owned(),
            pass_at_k: pass_at_k(stats.n, stats.passed, k),
            pass_all_k: pass_all_k(stats.n, stats.passed, k),
            stats,
            tokens_mean: rs.iter().map(|r| r.used.tokens() as f64).sum::<f64>() / n,
            cost_mean: (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64),
            latency_ms_mean: rs.iter().map(|r| r.used.latency_ms as f64).sum::<f64>() / n,
            failed,
        });
    }
    let mut per_scorer: BTreeMap<String, (Vec<bool>, Vec<f64>)> = BTreeMap::new();
    for r in results {
        for s in &r.scores {
            let e = per_scorer.entry(s.scorer.clone()).or_default();
            e.0.push(s.pass);
            e.1.push(s.score);
        }
    }
    let cases = per_case.len() as u32;
    let mean_of = |f: &dyn Fn(&CaseSummary) -> f64| {
        if per_case.is_empty() {
            0.0
        } else {
            per_case.iter().map(f).sum::<f64>() / f64::from(cases)
        }
    };
    let costs: Vec<f64> = results.iter().filter_map(|r| r.used.cost_usd).collect();
    let rates: Vec<f64> = per_case.iter().map(|c| c.stats.pass_rate).collect();
    Summary {
        run: run.to_owned(),
        repeat,
        sessions: Stats::of(
            &results.iter().map(|r| r.pass).collect::<Vec<_>>(),
            &results.iter().map(|r| r.score).collect::<Vec<_>>(),
        ),
        cases_passed: per_case
            .iter()
            .filter(|c| c.stats.passed == c.stats.n)
            .count() as u32,
        cases,
        pass_at_k: mean_of(&|c| c.pass_at_k),
        pass_all_k: mean_of(&|c| c.pass_all_k),
        pass_rate_stdev: mean_stdev(&rates).1,
        tokens: results.iter().map(|r| r.used.tokens()).sum(),
        cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
        per_case,
        per_scorer: per_scorer
            .into_iter()
            .map(|(k, (p, s))| (k, Stats::of(&p, &s)))
            .collect(),
    }
}

/// The summary as tables for people: per case, then per scorer, then the run's totals.
pub fn table(s: &Summary) -> String {
    let mut out = String::new();
    let k = s.repeat;
    let width = s
        .per_case
        .iter()
        .map(|c| c.case.len())
        .chain(s.per_scorer.keys().map(String::len))
        .max()
        .unwrap_or(4)
        .max(6);
    out.push_str(&format!(
        "{:<width$}  {:>6}  {:>7}  {:>7}  {:>13}  {:>8}  {:>9}  {:>9}  failed\n",
        "case",
        "passed",
        format!("pass@{k}"),
        format!("pass^{k}"),
        "score (sd)",
        "tokens",
        "cost",
        "latency"
    ));
    for c in &s.per_case {
        let failed = c
            .failed
            .iter()
            .map(|(n, t)| {
                if k > 1 {
                    format!("{n}×{t}")
                } else {
                    n.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "{:<width$}  {:>6}  {:>7.2}  {:>7.2}  {:>13}  {:>8.0}  {:>9}  {:>9}  {}\n",
            c.case,
            format!("{}/{}", c.stats.passed, c.stats.n),
            c.pass_at_k,
            c.pass_all_k,
            format!("{:.2} ({:.2})", c.stats.score_mean, c.stats.score_stdev),
            c.tokens_mean,
            c.cost_mean
                .map(|x| format!("${x:.4}"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.0} ms", c.latency_ms_mean),
            failed
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "{:<width$}  {:>7}  {:>9}  {:>13}\n",
        "scorer", "passed", "pass rate", "score (sd)"
    ));
    for (name, st) in &s.per_scorer {
        out.push_str(&format!(
            "{:<width$}  {:>7}  {:>8.0}%  {:>13}\n",
            name,
            format!("{}/{}", st.passed, st.n),
            st.pass_rate * 100.0,
            format!("{:.2} ({:.2})", st.score_mean, st.score_stdev)
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "run {}: {}/{} sessions passed ({:.0}%), {}/{} cases passed every time; pass@{k} {:.2}, pass^{k} {:.2}, spread of case pass rates {:.2}; {} tokens{}\n",
        s.run,
        s.sessions.passed,
        s.sessions.n,
        s.sessions.pass_rate * 100.0,
        s.cases_passed,
        s.cases,
        s.pass_at_k,
        s.pass_all_k,
        s.pass_rate_stdev,
        s.tokens,
        s.cost_usd
            .map(|c| format!(", ${c:.4}"))
            .unwrap_or_default()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_is_the_unbiased_estimate() {
        assert_eq!(pass_at_k(5, 0, 5), 0.0);
        assert_eq!(pass_at_k(5, 1, 5), 1.0);
        assert!((pass_at_k(5, 1, 1) - 0.2).abs() < 1e-12);
        // 1 - C(3,2)/C(5,2) = 1 - 3/10
        assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
        // C(3,2)/C(5,2) = 3/10
        assert!((pass_all_k(5, 3, 2) - 0.3).abs() < 1e-12);
        assert_eq!(pass_all_k(5, 4, 5), 0.0);
        assert_eq!(pass_all_k(5, 5, 5), 1.0);
    }

    #[test]
    fn the_spread_is_the_sample_standard_deviation() {
        let (m, s) = mean_stdev(&[1.0, 0.0, 1.0, 0.0]);
        assert!((m - 0.5).abs() < 1e-12);
        assert!((s - (1.0_f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_stdev(&[0.3]), (0.3, 0.0));
    }
}
