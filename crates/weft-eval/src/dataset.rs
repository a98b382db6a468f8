//! The dataset file: the cases an agent is evaluated on, each with a task, its input, its user
//! and what is expected of the session it runs as.
//!
//! Two forms: JSON lines (`.jsonl`, one case object per line), or YAML / JSON (a list of cases,
//! or a mapping whose `cases` is that list). Every mistake is reported with the file, the line,
//! the case (its `id` and position) and the field.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_core::diagnose::{Problem, did_you_mean, locate, parse_path};

use crate::EvalError;
use crate::replay::Replay;
use crate::trajectory::TrajectoryExpect;

/// The largest dataset file read (bytes).
const MAX_FILE: u64 = 32 << 20;
/// The longest case id (it is part of the session's id).
const MAX_ID: usize = 80;

/// A dataset read and checked.
#[derive(Debug)]
pub struct Dataset {
    /// The file it was read from.
    pub path: PathBuf,
    /// Its cases, in the file's order.
    pub cases: Vec<Case>,
}

impl Dataset {
    /// The directory command scorers run in and scripted judges are found from.
    pub fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        }
    }
}

/// One case: a task for the agent and what is expected of its session.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The case's name, unique in the dataset (letters, digits, `.`, `_` and `-`): results and
    /// comparisons know the case by it, and its sessions are named after it.
    pub id: String,
    /// What the case is about, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The task the session begins with.
    pub task: String,
    /// The run's input (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The user the session belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Answers given, in order, each time the session waits for a person.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replies: Vec<String>,
    /// What is expected of the session.
    #[serde(default)]
    pub expect: Expect,
    /// A recorded session's model replies, replayed (`weft eval record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Replay>,
    /// The line of the file the case starts on.
    #[serde(skip)]
    pub line: usize,
}

/// What a case expects. Every expectation given is a scorer of its own; `status` is expected
/// to be `completed` unless it says otherwise.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// How the session ends (default `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ExpectedStatus>,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<AnswerExpect>,
    /// A subset of the final State (`data`): every field given must be there with this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// The tools called, with their arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<TrajectoryExpect>,
    /// The most the session may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsExpect>,
    /// Scorers run outside weft: commands and models as judges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scorers: Vec<ScorerSpec>,
}

/// How a session is expected to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedStatus {
    /// With an answer.
    Completed,
    /// Waiting for a person (after the case's `replies`, if any).
    Waiting,
    /// The agent could not complete the task (the session failed).
    CannotComplete,
}

impl ExpectedStatus {
    /// The status as written in datasets and results.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Waiting => "waiting",
            Self::CannotComplete => "cannot_complete",
        }
    }
}

/// Expectations of the answer; each given is a scorer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerExpect {
    /// The whole answer, exactly (surrounding white space aside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Text the answer holds (a list: every one of them), ignoring case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<OneOrMany>,
    /// Text the answer must not hold (a list: none of them), ignoring case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_contains: Option<OneOrMany>,
    /// A regular expression the answer matches (somewhere; anchor it with `^...$`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// The answer is JSON holding this value (objects: at least these fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_subset: Option<Value>,
    /// The answer is JSON valid against this JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<Value>,
}

/// One text or a list of texts.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One text.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The texts.
    pub fn items(&self) -> Vec<&str> {
        match self {
            Self::One(s) => vec![s.as_str()],
            Self::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// The most a session may use; each given is a scorer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsExpect {
    /// Input and output tokens together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost in US dollars (a session whose cost is unknown passes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u32>,
    /// Milliseconds from the session's first event to its last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
}

/// A scorer run outside weft: exactly one of `command` and `judge`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScorerSpec {
    /// The scorer's name in results (default `command` or `judge`, numbered when repeated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A program given the session's JSON on stdin (run in the dataset's directory): exit 0
    /// passes; it may print `{"pass": bool, "score": 0..1, "reason": "..."}` on stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The most seconds the command may take (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// A model grading the session against a rubric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgeSpec>,
}

/// A model as judge.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    /// What a good session does, in words the judge reads.
    pub rubric: String,
    /// The judge's model, as an agent file names one (`openai:NAME`, a mapping with
    /// `base_url`, `scripted:PATH` relative to the dataset); default: `weft eval --judge-model`,
    /// else the agent's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Value>,
    /// The lowest score (0 to 1) that passes (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_score: Option<f64>,
}

/// The fields of a case, for "did you mean".
const CASE_FIELDS: &[&str] = &[
    "id",
    "description",
    "task",
    "input",
    "user",
    "replies",
    "expect",
    "replay",
];

/// Reads and checks the dataset at `path`.
pub fn load(path: &Path) -> Result<Dataset, EvalError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path)
        .map_err(|e| EvalError::Dataset(format!("cannot read dataset {shown}: {e}")))?;
    if meta.len() > MAX_FILE {
        return Err(EvalError::Dataset(format!(
            "dataset {shown} is {} bytes; at most {MAX_FILE} are read (split it in several files)",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| EvalError::Dataset(format!("cannot read dataset {shown}: {e}")))?;
    let jsonl = path.extension().and_then(|e| e.to_str()) == Some("jsonl");
    let cases = if jsonl {
        parse_jsonl(&shown, &text)?
    } else {
        parse_yaml(&shown, &text)?
    };
    if cases.is_empty() {
        return Err(EvalError::Dataset(format!(
            "dataset {shown} has no cases; write one per line (JSON lines) or a list under `cases:`"
        )));
    }
    let mut seen = HashSet::new();
    for c in &cases {
        if !seen.insert(c.id.clone()) {
            return Err(EvalError::Dataset(format!(
                "{shown}:{}: case `{}`: id: another case has this id; give each case its own",
                c.line, c.id
            )));
        }
    }
    Ok(Dataset {
        path: path.to_owned(),
        cases,
    })
}

/// Parses a JSON-lines dataset: one case per non-empty line.
pub fn parse_jsonl(file: &str, text: &str) -> Result<Vec<Case>, EvalError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with("//") {
            continue;
        }
        let value: Value = serde_json::from_str(t).map_err(|e| {
            EvalError::Dataset(format!(
                "{file}:{n}:{}: not a JSON object ({e}); each line is one case",
                e.column()
            ))
        })?;
        let at = |p: Problem| {
            let name = value
                .get("id")
                .and_then(Value::as_str)
                .map(|id| format!("case `{id}`"))
                .unwrap_or_else(|| format!("case {}", out.len() + 1));
            EvalError::Dataset(format!("{file}:{n}: {name}: {p}"))
        };
        let mut case = one_case(value.clone()).map_err(at)?;
        case.line = n;
        out.push(case);
    }
    Ok(out)
}

/// Parses a YAML (or JSON) dataset: a list of cases or `{cases: [...]}`.
pub fn parse_yaml(file: &str, text: &str) -> Result<Vec<Case>, EvalError> {
    let value: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| EvalError::Dataset(Problem::yaml(&e).in_file(file)))?;
    // `.nan` and `.inf` read as `null`: an expected limit would be gone.
    if let Some(p) = weft_core::diagnose::non_finite_numbers(text)
        .into_iter()
        .next()
    {
        return Err(EvalError::Dataset(p.located(text).in_file(file)));
    }
    weft_core::limits::check_depth(&value, "the dataset")
        .map_err(|e| EvalError::Dataset(format!("{file}: {e}")))?;
    let (list, prefix) = match value {
        Value::Array(a) => (a, ""),
        Value::Object(mut m) => {
            if let Some(k) = m.keys().find(|k| *k != "cases") {
                let p = Problem::new(
                    k.clone(),
                    format!(
                        "unknown key; a dataset is a list of cases or a mapping with `cases`{}",
                        did_you_mean(k, ["cases"])
                    ),
                )
                .located(text);
                return Err(EvalError::Dataset(p.in_file(file)));
            }
            match m.remove("cases") {
                Some(Value::Array(a)) => (a, "cases"),
                _ => {
                    return Err(EvalError::Dataset(format!(
                        "{file}: `cases` must be a list of cases"
                    )));
                }
            }
        }
        Value::Null => (Vec::new(), ""),
        _ => {
            return Err(EvalError::Dataset(format!(
                "{file}: a dataset is a list of cases or a mapping with `cases`"
            )));
        }
    };
    let mut out = Vec::new();
    for (i, value) in list.into_iter().enumerate() {
        let base = format!("{prefix}[{i}]");
        let line = locate(text, &parse_path(&base))
            .map(|(l, _)| l)
            .unwrap_or(0);
        let name = value
            .get("id")
            .and_then(Value::as_str)
            .map(|id| format!("case `{id}` ({base})"))
            .unwrap_or_else(|| format!("case {base}"));
        let mut case = one_case(value).map_err(|mut p| {
            let field = p.path.clone();
            p.path = if field.is_empty() {
                base.clone()
            } else {
                format!("{base}.{field}")
            };
            let p = p.located(text);
            let at = match (p.line, p.column) {
                (Some(l), Some(c)) => format!("{file}:{l}:{c}"),
                _ => format!("{file}:{line}"),
            };
            let field = if field.is_empty() {
                String::new()
            } else {
                format!("{field}: ")
            };
            EvalError::Dataset(format!("{at}: {name}: {field}{}", p.message))
        })?;
        case.line = line;
        out.push(case);
    }
    Ok(out)
}

/// One case from its value, checked; a problem names the field (relative to the case).
fn one_case(value: Value) -> Result<Case, Problem> {
    let Value::Object(m) = &value else {
        return Err(Problem::new(
            "",
            "a case is a mapping with `id`, `task` and `expect`",
        ));
    };
    if let Some(k) = m.keys().find(|k| !CASE_FIELDS.contains(&k.as_str())) {
        return Err(Problem::new(
            k.clone(),
            format!(
                "unknown field{}; a case has {}",
                did_you_mean(k, CASE_FIELDS.iter().copied()),
                CASE_FIELDS.join(", ")
            ),
        ));
    }
    let case: Case = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        Problem::new(path, e.into_inner().to_string())
    })?;
    check(&case)?;
    Ok(case)
}

/// What serde cannot check: ids, non-empty tasks, patterns and schemas that compile, scorers
/// that name one thing.
fn check(c: &Case) -> Result<(), Problem> {
    if c.id.is_empty()
        || c.id.len() > MAX_ID
        || !c
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(Problem::new(
            "id",
            format!(
                "`{}` is not a case id: use 1 to {MAX_ID} letters, digits, `.`, `_` or `-`",
                c.id
            ),
        ));
    }
    if c.task.trim().is_empty() {
        return Err(Problem::new("task", "the task is empty"));
    }
    if let Some(input) = &c.input
        && !input.is_object()
    {
        return Err(Problem::new("input", "the input must be a JSON object"));
    }
    if let Some(r) = &c.replay
        && r.replies.len() != r.requests.len()
    {
        return Err(Problem::new(
            "replay",
            format!(
                "{} replies but {} requests; record the session again with `weft eval record`",
                r.replies.len(),
                r.requests.len()
            ),
        ));
    }
    let e = &c.expect;
    if let Some(a) = &e.answer {
        if let Some(r) = &a.regex {
            regex::Regex::new(r)
                .map_err(|err| Problem::new("expect.answer.regex", format!("{err}")))?;
        }
        if let Some(s) = &a.json_schema {
            jsonschema::validator_for(s).map_err(|err| {
                Problem::new(
                    "expect.answer.json_schema",
                    format!("not a valid JSON Schema: {err}"),
                )
            })?;
        }
    }
    if let Some(s) = &e.state
        && !s.is_object()
    {
        return Err(Problem::new(
            "expect.state",
            "a subset of the State is a mapping of its fields",
        ));
    }
    if let Some(l) = &e.limits
        && l.cost_usd.is_some_and(|c| !c.is_finite() || c < 0.0)
    {
        return Err(Problem::new(
            "expect.limits.cost_usd",
            "the cost must be a number of dollars, 0 or more",
        ));
    }
    if let Some(t) = &e.trajectory {
        t.check().map_err(|(f, m)| {
            Problem::new(
                if f.is_empty() {
                    "expect.trajectory".to_owned()
                } else {
                    format!("expect.trajectory.{f}")
                },
                m,
            )
        })?;
    }
    for (i, s) in e.scorers.iter().enumerate() {
        let at = |f: &str| format!("expect.scorers[{i}]{f}");
        match (&s.command, &s.judge) {
            (Some(cmd), None) => {
                if cmd.is_empty() || cmd[0].is_empty() {
                    return Err(Problem::new(
                        at(".command"),
                        "the command is empty; write the program and its arguments, e.g. [python3, check.py]",
                    ));
                }
            }
            (None, Some(j)) => {
                if j.rubric.trim().is_empty() {
                    return Err(Problem::new(at(".judge.rubric"), "the rubric is empty"));
                }
                if j.pass_score
                    .is_some_and(|p| !p.is_finite() || !(0.0..=1.0).contains(&p))
                {
                    return Err(Problem::new(
                        at(".judge.pass_score"),
                        "the pass score is a number from 0 to 1",
                    ));
                }
            }
            (Some(_), Some(_)) => {
                return Err(Problem::new(
                    at(""),
                    "a scorer has `command` or `judge`, not both",
                ));
            }
            (None, None) => {
                return Err(Problem::new(
                    at(""),
                    "a scorer needs `command: [PROGRAM, ARGS...]` or `judge: {rubric: ...}`",
                ));
            }
        }
        if s.timeout_secs == Some(0) {
            return Err(Problem::new(
                at(".timeout_secs"),
                "the timeout must be at least 1 second",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn err(r: Result<Vec<Case>, EvalError>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(_) => panic!("expected an error"),
        }
    }

    #[test]
    fn a_yaml_mistake_names_file_line_case_and_field() {
        let text = "cases:\n  - id: one\n    task: hi\n  - id: two\n    task: hi\n    expect:\n      answer:\n        contians: x\n";
        let e = err(parse_yaml("d.yaml", text));
        assert!(e.starts_with("d.yaml:"), "{e}");
        assert!(e.contains("case `two` (cases[1])"), "{e}");
        assert!(e.contains("expect.answer"), "{e}");
        assert!(e.contains("contians"), "{e}");
        // The line of the field in error (8) or of its case (4) is given.
        assert!(
            e.starts_with("d.yaml:8:") || e.starts_with("d.yaml:4:"),
            "{e}"
        );
    }

    /// `.nan` reads as `null` in JSON: an expected limit written so would be no limit at all.
    #[test]
    fn an_expected_limit_that_is_not_a_finite_number_is_refused() {
        let text = "- id: a\n  task: hi\n  expect:\n    limits: { cost_usd: .nan }\n";
        let e = err(parse_yaml("d.yaml", text));
        assert!(
            e.starts_with("d.yaml:4:")
                && e.contains("[0].expect.limits.cost_usd: .nan is not a finite number"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_case_field_gets_the_closest_name() {
        let e = err(parse_yaml("d.yaml", "- id: a\n  tsak: hi\n"));
        assert!(e.contains("did you mean `task`"), "{e}");
        assert!(e.starts_with("d.yaml:2:"), "{e}");
    }

    #[test]
    fn a_jsonl_mistake_names_the_line_and_case() {
        let text = "{\"id\":\"a\",\"task\":\"t\"}\n\n{\"id\":\"b\",\"task\":\"t\",\"expect\":{\"answer\":{\"regex\":\"(\"}}}\n";
        let e = err(parse_jsonl("d.jsonl", text));
        assert!(
            e.starts_with("d.jsonl:3: case `b`: expect.answer.regex:"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_status_names_the_values() {
        let e = err(parse_jsonl(
            "d.jsonl",
            "{\"id\":\"a\",\"task\":\"t\",\"expect\":{\"status\":\"done\"}}",
        ));
        assert!(e.contains("expect.status"), "{e}");
        assert!(e.contains("cannot_complete"), "{e}");
    }

    #[test]
    fn a_scorer_must_name_one_thing() {
        let e = err(parse_yaml(
            "d.yaml",
            "- id: a\n  task: t\n  expect:\n    scorers:\n      - name: x\n",
        ));
        assert!(e.contains("expect.scorers[0]"), "{e}");
    }

    #[test]
    fn ids_are_checked() {
        let e = err(parse_yaml("d.yaml", "- id: a b\n  task: t\n"));
        assert!(e.contains("id: `a b` is not a case id"), "{e}");
    }

    #[test]
    fn a_good_case_reads() {
        let cases = parse_yaml(
            "d.yaml",
            "- id: a\n  task: t\n  input: {x: 1}\n  expect:\n    status: waiting\n    answer: {contains: [a, b]}\n    trajectory: {match: unordered, calls: [{tool: t, args: {x: 1}}]}\n",
        )
        .unwrap();
        assert_eq!(cases.len(), 1);
        assert_eq!(cases[0].line, 1);
        assert_eq!(cases[0].expect.status, Some(ExpectedStatus::Waiting));
    }
}
