//! Scorers that run outside weft's own checks: a command given the session's JSON on stdin, and
//! a model as judge that grades the session against a rubric and says why.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weft_core::Envelope;
use weft_core::model::{Message, ModelRequest, Purpose};
use weft_model::SharedModel;

use crate::dataset::{Case, JudgeSpec, ScorerSpec};
use crate::expect::{Score, cut, quote};
use crate::observed::Observed;
use crate::trajectory::show_calls;

/// A command scorer's time when its spec gives none.
const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The most bytes of a command scorer's output read.
const MAX_OUTPUT: u64 = 1 << 20;
/// The judge's pass score when its spec gives none.
const DEFAULT_PASS_SCORE: f64 = 0.5;

/// The JSON a command scorer reads on stdin: the case, what its session did, and the session's
/// events.
pub fn session_json(case: &Case, obs: &Observed, events: &[Envelope]) -> Value {
    json!({ "case": case, "observed": obs, "events": events })
}

/// The name of scorer `i` of a case in results.
pub fn name(spec: &ScorerSpec, i: usize, specs: &[ScorerSpec]) -> String {
    if let Some(n) = &spec.name {
        return n.clone();
    }
    let kind = if spec.judge.is_some() {
        "judge"
    } else {
        "command"
    };
    let same = specs
        .iter()
        .filter(|s| s.name.is_none() && s.judge.is_some() == spec.judge.is_some())
        .count();
    if same > 1 {
        format!("{kind}[{i}]")
    } else {
        kind.to_owned()
    }
}

/// Runs command scorer `cmd` in `dir` with `input` on its stdin. Exit 0 passes, any other
/// code fails; a JSON object on stdout may give `pass`, `score` (0 to 1) and `reason`.
pub async fn command(
    scorer: &str,
    cmd: &[String],
    timeout_secs: Option<u64>,
    dir: &Path,
    input: &Value,
) -> Score {
    let fail = |detail: String| Score::of(scorer, Err(detail));
    let Some((program, args)) = cmd.split_first() else {
        return fail("the command is empty".into());
    };
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return fail(format!(
                "cannot start `{program}` (in {}): {e}",
                dir.display()
            ));
        }
    };
    let body = input.to_string();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        let write = async {
            if let Some(mut s) = stdin.take() {
                // A scorer that does not read its input closes the pipe: not an error.
                let _ = s.write_all(body.as_bytes()).await;
            }
        };
        let read_out = async {
            let mut buf = Vec::new();
            if let Some(s) = stdout.take() {
                let _ = s.take(MAX_OUTPUT).read_to_end(&mut buf).await;
            }
            buf
        };
        let read_err = async {
            let mut buf = Vec::new();
            if let Some(s) = stderr.take() {
                let _ = s.take(MAX_OUTPUT).read_to_end(&mut buf).await;
            }
            buf
        };
        let ((), out, err) = tokio::join!(write, read_out, read_err);
        (child.wait().await, out, err)
    };
    let secs = timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
    let (status, out, err) = match tokio::time::timeout(Duration::from_secs(secs), work).await {
        Ok(done) => done,
        Err(_) => {
            return fail(format!(
                "`{program}` did not finish within {secs} s (timeout_secs); it was stopped"
            ));
        }
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot wait for `{program}`: {e}")),
    };
    let out = String::from_utf8_lossy(&out);
    let err = String::from_utf8_lossy(&err);
    let verdict: Option<Value> = serde_json::from_str(out.trim()).ok();
    let reason = verdict
        .as_ref()
        .and_then(|v| v.get("reason"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let pass = status.success()
        && verdict
            .as_ref()
            .and_then(|v| v.get("pass"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
    let score = verdict
        .as_ref()
        .and_then(|v| v.get("score"))
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite())
        .map(|s| s.clamp(0.0, 1.0))
        .unwrap_or(if pass { 1.0 } else { 0.0 });
    let detail = match reason {
        Some(r) => r,
        None if !status.success() => {
            let said = if err.trim().is_empty() {
                out.trim()
            } else {
                err.trim()
            };
            format!("`{program}` exited with {status}: {}", cut(said, 300))
        }
        None => String::new(),
    };
    Score {
        scorer: scorer.to_owned(),
        pass,
        score,
        detail,
        reasoning: None,
    }
}

/// The schema of a judge's reply.
pub fn judge_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["reasoning", "score", "pass"],
        "properties": {
            "reasoning": {"type": "string", "minLength": 1, "description": "Why the session meets the rubric or not, point by point."},
            "score": {"type": "number", "minimum": 0, "maximum": 1, "description": "How well it meets the rubric, from 0 to 1."},
            "pass": {"type": "boolean", "description": "Whether it meets the rubric."}
        }
    })
}

/// The request a judge is sent. The user message begins with the case's task, so a scripted
/// judge's `cases` can tell cases apart.
pub fn judge_request(spec: &JudgeSpec, case: &Case, obs: &Observed) -> ModelRequest {
    let system = "You grade the work of an AI agent against a rubric. Read the task, what the agent \
        did and its answer, then judge only what the rubric asks. Give your reasoning first, \
        then a score from 0 (fails the rubric) to 1 (meets it fully), and whether it passes.";
    let answer = match (&obs.answer, &obs.question, &obs.error) {
        (Some(a), _, _) => a.clone(),
        (None, Some(q), _) => format!("(no answer; the agent asks the person: {q})"),
        (None, None, Some(e)) => format!("(no answer; the agent could not complete: {e})"),
        _ => "(no answer)".into(),
    };
    let input = case
        .input
        .as_ref()
        .map(|i| format!("\nInput: {i}"))
        .unwrap_or_default();
    let user = format!(
        "Task: {}{input}\n\nThe agent ended: {}\nTools it called: {}\nIts answer:\n{answer}\n\nRubric:\n{}",
        case.task,
        obs.status.as_str(),
        show_calls(&obs.calls),
        spec.rubric
    );
    ModelRequest {
        purpose: Purpose::Judge,
        call_index: 0,
        purpose_index: 0,
        messages: vec![
            Message::System {
                content: system.into(),
            },
            Message::User { content: user },
        ]
        .into(),
        tools: Vec::new(),
        response_schema: Some(judge_schema()),
        exact_schema: None,
        max_tokens: None,
        temperature: Some(0.0),
    }
}

/// Asks `model` to grade the session against `spec`'s rubric. The judge's reasoning is kept in
/// the score; a reply that is not the verdict's JSON fails the scorer, saying so.
pub async fn judge(
    scorer: &str,
    model: &SharedModel,
    spec: &JudgeSpec,
    case: &Case,
    obs: &Observed,
) -> (Score, weft_core::model::Usage) {
    let req = judge_request(spec, case, obs);
    let fail = |detail: String| Score::of(scorer, Err(detail));
    let reply = match model.complete_boxed(&req, None).await {
        Ok(r) => r,
        Err(e) => {
            return (
                fail(format!("the judge ({}) failed: {e}", model.name())),
                Default::default(),
            );
        }
    };
    let usage = reply.usage.clone();
    let verdict: Value = match parse_verdict(&reply.content) {
        Ok(v) => v,
        Err(e) => return (fail(e), usage),
    };
    // A verdict without its reasoning is not a verdict: the reasoning is what a person reads to
    // trust or overrule the score.
    let Some(reasoning) = verdict
        .get("reasoning")
        .and_then(Value::as_str)
        .filter(|r| !r.trim().is_empty())
        .map(str::to_owned)
    else {
        return (
            fail(format!(
                "the judge's reply gives no reasoning: {}",
                quote(&reply.content)
            )),
            usage,
        );
    };
    let reasoning = Some(reasoning);
    let score = verdict
        .get("score")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite())
        .map(|s| s.clamp(0.0, 1.0));
    let Some(score) = score else {
        return (
            fail(format!(
                "the judge's reply has no score from 0 to 1: {}",
                quote(&reply.content)
            )),
            usage,
        );
    };
    let threshold = spec.pass_score.unwrap_or(DEFAULT_PASS_SCORE);
    // The score decides; a judge whose `pass` contradicts its own score is noted.
    let pass = score >= threshold;
    let said = verdict.get("pass").and_then(Value::as_bool);
    let detail = match said {
        Some(p) if p != pass => format!(
            "the judge said pass: {p} with score {score}; the score decides (pass_score {threshold})"
        ),
        _ => format!("score {score} (pass_score {threshold})"),
    };
    (
        Score {
            scorer: scorer.to_owned(),
            pass,
            score,
            detail,
            reasoning,
        },
        usage,
    )
}

/// The verdict's JSON object from a judge's reply (inside a code fence too).
fn parse_verdict(text: &str) -> Result<Value, String> {
    let t = text.trim();
    let inner = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|r| r.strip_suffix("```"))
        .unwrap_or(t)
        .trim();
    match serde_json::from_str::<Value>(inner) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(format!(
            "the judge's reply is not a JSON verdict {{reasoning, score, pass}}: {}",
            quote(text)
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_verdict_is_read_from_a_fence() {
        let v =
            parse_verdict("```json\n{\"score\": 1, \"pass\": true, \"reasoning\": \"ok\"}\n```")
                .unwrap();
        assert_eq!(v["score"], 1);
        assert!(parse_verdict("I think it passes.").is_err());
    }
}
