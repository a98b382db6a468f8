//! Recorded sessions as cases: `weft eval record` turns a session of the store into a case whose
//! model replies are replayed and whose expectations are the session's outcome, and the model
//! that replays them.
//!
//! A recording keeps the model's replies in order and, for each, the request the agent file
//! sends at that point: the core's `decide` over the session's events folded up to the reply is
//! the request the runtime sent (requests are pure functions of the state), so nothing is run
//! again to record. Replay modes:
//!
//! - `strict`: the replies are served only to the same requests; a request that differs fails
//!   the call (and so the session) with the difference, field by field, and the `replay`
//!   scorer fails with it;
//! - `tools-live`: the replies are served whatever the requests; tools run for real, and the
//!   `replay` scorer fails where a tool's result differs from the recorded one;
//! - `live`: the agent's own model runs; the case is scored against the recorded outcome.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_core::model::{ModelReply, ModelRequest};
use weft_core::{Envelope, Event, SessionStatus, State, ToolOutcome};
use weft_host::drive::AgentFile;
use weft_host::load;
use weft_model::{DeltaSink, Model, ModelError};
use weft_runtime::Agent;
use weft_store::Store;

use crate::EvalError;
use crate::dataset::{AnswerExpect, Case, Expect, ExpectedStatus};
use crate::expect::Score;
use crate::trajectory::{ExpectedCall, MatchMode, TrajectoryExpect};

/// The most differences of one request listed.
const MAX_DIFFS: usize = 8;

/// How a recorded case is replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplayMode {
    /// The same requests must be sent; a difference fails.
    #[default]
    Strict,
    /// Replies replayed whatever the requests; tools run for real, their drift reported.
    ToolsLive,
    /// A new model run, scored against the recorded outcome.
    Live,
}

impl ReplayMode {
    /// The mode as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::ToolsLive => "tools-live",
            Self::Live => "live",
        }
    }
}

/// A recorded session's replay: its model's replies and the requests they answered.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// How it is replayed (default `strict`).
    #[serde(default)]
    pub mode: ReplayMode,
    /// The session it was recorded from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The session's metadata (what the instructions see), weft's own keys aside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// The model's replies, in order.
    pub replies: Vec<ModelReply>,
    /// The request each reply answered (as JSON), in order.
    pub requests: Vec<Value>,
    /// Each tool call's outcome, in the order the calls started.
    #[serde(default)]
    pub tool_results: Vec<Value>,
}

/// What differed between a recorded request and the one sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// The model call, from 1.
    pub call: u32,
    /// The differences, one line each: the field, what was recorded, what was sent.
    pub diff: Vec<String>,
}

impl Drift {
    /// `request N differs: ...`, the differences on lines of their own.
    pub fn message(&self) -> String {
        format!(
            "request {} differs from the recording:\n  {}",
            self.call,
            self.diff.join("\n  ")
        )
    }
}

/// The model of a replayed case: it serves the recorded replies by the session's count of
/// model calls, and in `strict` mode only to the recorded requests.
pub struct ReplayModel {
    replay: Arc<Replay>,
    strict: bool,
    drift: Mutex<Vec<Drift>>,
}

impl ReplayModel {
    /// A model replaying `replay` (strictly in `strict` mode).
    pub fn new(replay: Arc<Replay>, strict: bool) -> Self {
        Self {
            replay,
            strict,
            drift: Mutex::new(Vec::new()),
        }
    }

    /// The requests that differed from the recording so far.
    pub fn drift(&self) -> Vec<Drift> {
        self.drift.lock().map(|d| d.clone()).unwrap_or_default()
    }
}

impl Model for ReplayModel {
    fn name(&self) -> &str {
        "replay"
    }

    async fn complete(
        &self,
        req: &ModelRequest,
        _deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        let i = req.call_index as usize;
        let Some(reply) = self.replay.replies.get(i) else {
            return Err(ModelError::Config(format!(
                "the recording has {} model replies; call {} has none (the agent asks more of the model than when it was recorded)",
                self.replay.replies.len(),
                i + 1
            )));
        };
        let sent = canonical(serde_json::to_value(req).unwrap_or(Value::Null));
        let diff = match self.replay.requests.get(i) {
            Some(recorded) => json_diff(&canonical(recorded.clone()), &sent),
            None => vec!["no request was recorded for this call".to_owned()],
        };
        if !diff.is_empty() {
            let d = Drift {
                call: req.call_index + 1,
                diff,
            };
            let message = d.message();
            if let Ok(mut all) = self.drift.lock()
                && !all.iter().any(|x| x.call == d.call)
            {
                all.push(d);
            }
            if self.strict {
                return Err(ModelError::Config(format!("strict replay: {message}")));
            }
        }
        Ok(reply.clone())
    }
}

/// A request as it is compared: the results of calls that ran at once (a run of tool messages)
/// in the order of their calls' ids, not in the order they happened to finish.
fn canonical(mut req: Value) -> Value {
    if let Some(Value::Array(msgs)) = req.get_mut("messages") {
        let mut i = 0;
        while i < msgs.len() {
            let is_tool = |m: &Value| m.get("role").and_then(Value::as_str) == Some("tool");
            if !is_tool(&msgs[i]) {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < msgs.len() && is_tool(&msgs[j]) {
                j += 1;
            }
            msgs[i..j].sort_by(|a, b| {
                let id = |m: &Value| m.get("call_id").and_then(Value::as_str).map(str::to_owned);
                id(a).cmp(&id(b))
            });
            i = j;
        }
    }
    req
}

/// The `replay` scorer: in `strict` mode no request may differ; in `tools-live` mode every tool
/// result must be the recorded one (requests that differ are listed, they do not fail).
pub fn score(replay: &Replay, mode: ReplayMode, drift: &[Drift], events: &[Envelope]) -> Score {
    match mode {
        ReplayMode::Strict => Score::of(
            "replay",
            match drift.first() {
                None => Ok(()),
                Some(d) => Err(d.message()),
            },
        ),
        ReplayMode::ToolsLive => {
            let now = tool_results(events);
            let mut problems = Vec::new();
            for (i, (was, is)) in replay.tool_results.iter().zip(&now).enumerate() {
                let d = json_diff(was, is);
                if !d.is_empty() {
                    problems.push(format!("tool call {}: {}", i + 1, d.join("; ")));
                }
            }
            if replay.tool_results.len() != now.len() {
                problems.push(format!(
                    "{} tool call(s) recorded, {} made",
                    replay.tool_results.len(),
                    now.len()
                ));
            }
            let mut s = Score::of(
                "replay",
                if problems.is_empty() {
                    Ok(())
                } else {
                    Err(format!("tool results drifted: {}", problems.join("; ")))
                },
            );
            if !drift.is_empty() && s.pass {
                s.detail = format!(
                    "{} request(s) differ (not failed in tools-live)",
                    drift.len()
                );
            }
            s
        }
        ReplayMode::Live => Score::of("replay", Ok(())),
    }
}

/// Each tool call's outcome, in the order the calls started (first attempts only).
fn tool_results(events: &[Envelope]) -> Vec<Value> {
    let mut started: Vec<String> = Vec::new();
    let mut outcomes: std::collections::HashMap<&str, Value> = std::collections::HashMap::new();
    for e in events {
        match &e.event {
            Event::ToolCallStarted {
                call_id,
                attempt: 1,
                ..
            } => started.push(call_id.clone()),
            Event::ToolCallFinished {
                call_id, outcome, ..
            } => {
                let v = match outcome {
                    ToolOutcome::Ok { output } => json!({ "ok": output }),
                    ToolOutcome::Error { error } => json!({ "error": error.kind }),
                };
                outcomes.entry(call_id.as_str()).or_insert(v);
            }
            _ => {}
        }
    }
    started
        .iter()
        .map(|id| outcomes.get(id.as_str()).cloned().unwrap_or(Value::Null))
        .collect()
}

/// The differences between two JSON values: `field: recorded X, now Y`, at most a few.
pub fn json_diff(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_at(a, b, "", &mut out);
    if out.len() > MAX_DIFFS {
        let more = out.len() - MAX_DIFFS;
        out.truncate(MAX_DIFFS);
        out.push(format!("and {more} more"));
    }
    out
}

fn diff_at(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    if out.len() > MAX_DIFFS {
        return;
    }
    let here = if at.is_empty() {
        "(the whole value)"
    } else {
        at
    };
    let join = |k: &str| {
        if at.is_empty() {
            k.to_owned()
        } else {
            format!("{at}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                match y.get(k) {
                    Some(vb) => diff_at(va, vb, &join(k), out),
                    None => out.push(format!("{}: recorded {}, now absent", join(k), show(va))),
                }
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    out.push(format!("{}: not recorded, now {}", join(k), show(vb)));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                diff_at(va, vb, &format!("{at}[{i}]"), out);
            }
            if x.len() != y.len() {
                out.push(format!(
                    "{here}: recorded {} item(s), now {}",
                    x.len(),
                    y.len()
                ));
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if a == b => {}
        _ => out.push(format!("{here}: recorded {}, now {}", show(a), show(b))),
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 200 {
        format!("{}...", crate::expect::cut(&s, 197))
    } else {
        s
    }
}

/// Session `id` of `store` as a case: its task, input, user and answers to its waits; its
/// model's replies and the requests they answered; its outcome as the expectations (`live`:
/// the status and the tools called; otherwise also the answer, the State and the calls with
/// their arguments, in order). The agent file is the one the session records; the case names it
/// relative to the directory of `dataset`, the file the case goes into, so that the dataset and
/// its agent files can be moved together. The case's id is `rec-` and the session's id (not
/// doubled for a session whose id starts with `rec-`).
pub async fn record<S: Store>(
    store: &S,
    id: &str,
    mode: ReplayMode,
    dataset: &Path,
) -> Result<Case, EvalError> {
    let (rec, events) = store.load(id).await?;
    let Some(agent_path) = weft_host::sessions::agent_file_of(&rec.metadata) else {
        return Err(EvalError::Invalid(format!(
            "session {id} does not record its agent file (it was not made by `weft run`, `weft submit` or `weft eval`)"
        )));
    };
    let agent = AgentFile::load(&agent_path).await?;
    let mut task = None;
    let mut input = Value::Null;
    let mut replies_to_waits = Vec::new();
    for e in &events {
        match &e.event {
            Event::SessionStarted { input: i, .. } => input = i.clone(),
            Event::TurnStarted { task: t, input: i } => {
                if task.is_some() {
                    return Err(EvalError::Invalid(format!(
                        "session {id} has more than one task; a case records a session of one task"
                    )));
                }
                task = Some(t.clone());
                if !i.is_null() {
                    input = i.clone();
                }
            }
            Event::UserReplied { text } => replies_to_waits.push(text.clone()),
            _ => {}
        }
    }
    let Some(task) = task else {
        return Err(EvalError::Invalid(format!(
            "session {id} has no task (a plan run is not an agent's session)"
        )));
    };
    let metadata: Map<String, Value> = rec
        .metadata
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.starts_with("weft_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let metadata = Value::Object(metadata);
    let input = if input.is_null() { json!({}) } else { input };
    let built = Agent::new(
        &agent.spec,
        agent.tools.clone(),
        agent.model.clone(),
        &metadata,
        &input,
    )
    .map_err(|e| EvalError::Invalid(format!("agent file {}: {e}", agent_path.display())))?;
    // The requests: rebuilt from the log folded up to each reply (as the inspector does).
    let (mut replies, mut requests) = (Vec::new(), Vec::new());
    let mut bad = None;
    weft_core::model_calls::rebuild(&events, &built.config, None, |r| {
        if let Some(Event::ModelReplied { reply, .. }) =
            events.iter().find(|e| e.seq == r.seq).map(|e| &e.event)
        {
            match serde_json::to_value(&r.request) {
                Ok(v) => requests.push(v),
                Err(e) => bad = Some(e.to_string()),
            }
            // A replayed reply is timed anew; the recorded call's timing is not the case's.
            replies.push(weft_core::model::ModelReply {
                timing: None,
                ..reply.clone()
            });
        }
    })
    .map_err(|e| {
        EvalError::Invalid(format!(
            "session {id}: {e}; record the session with the agent file {} it ran with",
            agent_path.display()
        ))
    })?;
    if let Some(e) = bad {
        return Err(EvalError::Invalid(format!(
            "session {id}: a request does not serialise: {e}"
        )));
    }
    let state = State::fold(events.iter().map(|e| &e.event));
    let status = match state.status() {
        SessionStatus::Completed => ExpectedStatus::Completed,
        SessionStatus::WaitingForUser => ExpectedStatus::Waiting,
        SessionStatus::Failed => ExpectedStatus::CannotComplete,
        SessionStatus::Running => {
            return Err(EvalError::Invalid(format!(
                "session {id} is still running; record it once it has ended (`weft resume {id}`)"
            )));
        }
    };
    let observed = crate::observed::Observed::of(&state, &events);
    let live = mode == ReplayMode::Live;
    let calls: Vec<ExpectedCall> = observed
        .calls
        .iter()
        .map(|c| ExpectedCall {
            tool: c.tool.clone(),
            args: (!live).then(|| c.args.clone()),
        })
        .collect();
    let expect = Expect {
        status: Some(status),
        answer: match (&observed.answer, live) {
            (Some(a), false) => Some(AnswerExpect {
                exact: Some(a.clone()),
                ..AnswerExpect::default()
            }),
            _ => None,
        },
        state: (!live && observed.state.as_object().is_some_and(|m| !m.is_empty()))
            .then(|| observed.state.clone()),
        trajectory: Some(TrajectoryExpect {
            mode: if live {
                MatchMode::Unordered
            } else {
                MatchMode::Strict
            },
            calls,
        }),
        limits: None,
        scorers: Vec::new(),
    };
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut case_id = if safe.starts_with("rec-") {
        safe
    } else {
        format!("rec-{safe}")
    };
    case_id.truncate(80);
    Ok(Case {
        id: case_id,
        description: Some(format!(
            "recorded from session {id} of agent file {}",
            relative_to(&agent_path, load::base_dir(dataset)).display()
        )),
        task,
        input: Some(input),
        user: rec.user_id.clone(),
        replies: replies_to_waits,
        expect,
        replay: Some(Replay {
            mode,
            session: Some(id.to_owned()),
            metadata: Some(metadata),
            replies,
            requests,
            tool_results: tool_results(&events),
        }),
        line: 0,
    })
}

/// `path` as seen from directory `dir` (`../agents/a.yaml`), both read as absolute paths first;
/// `path` made absolute when they share no root.
fn relative_to(path: &Path, dir: &Path) -> std::path::PathBuf {
    use std::path::{Component, PathBuf};
    fn lexical(p: &Path) -> Vec<Component<'_>> {
        let mut out: Vec<Component<'_>> = Vec::new();
        for c in p.components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                    out.pop();
                }
                c => out.push(c),
            }
        }
        out
    }
    let (Ok(path), Ok(dir)) = (std::path::absolute(path), std::path::absolute(dir)) else {
        return path.to_path_buf();
    };
    let (p, d) = (lexical(&path), lexical(&dir));
    let shared = p.iter().zip(&d).take_while(|(a, b)| a == b).count();
    if shared == 0 {
        return path;
    }
    let mut out = PathBuf::new();
    for _ in shared..d.len() {
        out.push("..");
    }
    for c in &p[shared..] {
        out.push(c.as_os_str());
    }
    out
}

/// Appends `cases` to the JSON-lines dataset at `path` (made if absent).
pub fn append(path: &Path, cases: &[Case]) -> Result<(), EvalError> {
    use std::io::Write;
    if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
        return Err(EvalError::Invalid(format!(
            "--into {}: recorded cases are appended to a JSON-lines dataset; name a .jsonl file",
            path.display()
        )));
    }
    let err =
        |e: std::io::Error| EvalError::Results(format!("cannot write {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    for c in cases {
        let line = serde_json::to_string(c)
            .map_err(|e| EvalError::Results(format!("cannot write {}: {e}", path.display())))?;
        writeln!(f, "{line}").map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_file_is_named_from_the_datasets_directory() {
        let rel = |p: &str, d: &str| {
            relative_to(Path::new(p), Path::new(d))
                .display()
                .to_string()
        };
        assert_eq!(rel("/w/examples/a.yaml", "/w/evals"), "../examples/a.yaml");
        assert_eq!(rel("/w/evals/a.yaml", "/w/evals"), "a.yaml");
        assert_eq!(rel("/w/evals/./x/../a.yaml", "/w/evals/"), "a.yaml");
        assert_eq!(rel("/w/a.yaml", "/w/evals/deep"), "../../a.yaml");
    }

    #[test]
    fn a_diff_names_each_field() {
        let a =
            json!({"tools": [{"name": "getWeather", "description": "Current weather."}], "n": 1});
        let b = json!({"tools": [{"name": "getWeather", "description": "Weather now."}], "n": 1.0, "x": true});
        let d = json_diff(&a, &b);
        assert_eq!(
            d,
            vec![
                "tools[0].description: recorded \"Current weather.\", now \"Weather now.\""
                    .to_owned(),
                "x: not recorded, now true".to_owned(),
            ]
        );
        assert!(json_diff(&a, &a).is_empty());
    }
}
