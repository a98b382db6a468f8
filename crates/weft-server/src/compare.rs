//! Two sessions of the user compared, for the playground's comparison page (a fork and its
//! origin, or two runs of one agent): their tasks, inputs, statuses and totals; their steps
//! matched one to one (a plan's by step id, a workflow's by its path of steps, otherwise the
//! tool calls in order) with what differs in each (tool, arguments, status, result, and the
//! JSON paths where arguments and results differ); their answers as a word-level diff; and, for
//! a fork, the event where the two part. Pure: two logs in, a typed diff out. Behind the same
//! keys as every route: a session of another user is not found.

use std::collections::{BTreeSet, HashMap};

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use weft_core::agent::Mode;
use weft_core::{Envelope, Event, ToolOutcome};
use weft_store::SessionRecord;

use super::auth::User;
use super::openapi::{self, Route};
use super::{ApiError, Shared, threads};

/// The comparison's route.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::get(
            "/sessions/{id}/compare/{other}",
            "Two of the user's sessions compared: task, input, status and totals; each step (a plan's by id, a workflow's path, else the tool calls in order) with what differs in its tool, arguments, status and result (the JSON paths that differ); the answers as a word diff; for a fork, the event where they part",
            compare,
        )
        .json::<Comparison>("{a, b, differs, fork, aligned_by, steps, answer}"),
    ]
}

/// At most this many differing paths are listed for one value (the first ones, in order).
const MAX_PATHS: usize = 200;
/// Past their common beginning and end, answers of more than this many words are diffed as a
/// whole (removed, then added): the word diff's table grows with the product of the lengths.
const MAX_WORDS: usize = 1000;

/// Two sessions compared.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Comparison {
    a: Side,
    b: Side,
    /// What differs at the top: any of `agent`, `task`, `input`, `status`, `error`, `answer`,
    /// and the totals' names (`input_tokens`, `output_tokens`, `cost_usd`, `duration_ms`,
    /// `model_calls`, `tool_calls`).
    differs: Vec<String>,
    /// The paths (JSON pointers) where the inputs differ.
    input_paths: Vec<String>,
    /// When one session is a fork of the other: where they part.
    fork: Option<ForkPoint>,
    aligned_by: Alignment,
    /// The steps of both, matched; those that differ and those of one only included.
    steps: Vec<StepDiff>,
    answer: TextDiff,
}

/// One of the two sessions, as the comparison's header shows it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Side {
    id: String,
    agent: String,
    mode: Option<Mode>,
    /// `running`, `waiting_for_user`, `completed` or `failed`.
    status: String,
    task: Option<String>,
    #[schemars(schema_with = "openapi::any")]
    input: Value,
    answer: Option<String>,
    error: Option<String>,
    parent_id: Option<String>,
    created_at: String,
    totals: Totals,
}

/// What a session used in all.
#[derive(Serialize, JsonSchema, PartialEq)]
pub(crate) struct Totals {
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: Option<f64>,
    /// From its first event to its last.
    duration_ms: u64,
    model_calls: u32,
    tool_calls: u64,
}

/// Where a fork parts from its origin: the last event both share.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ForkPoint {
    /// `a` or `b`: which session is the fork.
    side: String,
    fork: String,
    origin: String,
    /// The last event the fork kept of its origin (its sequence number).
    at: u64,
    /// That event's type.
    event: String,
}

/// How the steps of the two sessions are matched.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Alignment {
    /// Plans: step by step id.
    Plan,
    /// Workflows: the steps entered, position by position.
    Workflow,
    /// ReAct agents (or sessions of two modes): the tool calls in order.
    Calls,
}

/// How a matched step compares.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Change {
    Same,
    /// Only session A has it.
    OnlyA,
    /// Only session B has it.
    OnlyB,
    Differs,
}

/// A step of either session, matched with the other's.
#[derive(Serialize, JsonSchema)]
pub(crate) struct StepDiff {
    /// The step's id (plans), `N. STEP` (a workflow's N-th step entered) or `#N` (the N-th tool
    /// call).
    key: String,
    change: Change,
    /// What differs: any of `step` (a workflow went to another step there), `tool`, `args`,
    /// `status`, `result`.
    differs: Vec<String>,
    a: Option<StepSide>,
    b: Option<StepSide>,
    /// The paths (JSON pointers) where the arguments differ.
    args_paths: Vec<String>,
    /// The paths (JSON pointers) where the results differ.
    result_paths: Vec<String>,
}

/// A step (or call) as one session has it.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct StepSide {
    /// The tool called (a workflow step: the step's name).
    tool: Option<String>,
    /// The arguments of its last call (a plan step not called: its call as planned; a fan-out
    /// step: each item's, in order; a workflow step: the tool calls it made, `{tool, args}`
    /// each).
    #[schemars(schema_with = "openapi::any")]
    args: Value,
    /// A plan step's status (`COMPLETED`, `FAILED`...), a call's (`ok`, `error`, `running`,
    /// `blocked`) or a workflow step's (`accepted`, `entered`).
    status: String,
    /// What the call returned (an error as `{error: {kind, message, ...}}`); a workflow step's
    /// accepted output.
    #[schemars(schema_with = "openapi::any")]
    result: Option<Value>,
    /// The event where its (last) call started, or the step was entered.
    seq: Option<u64>,
}

/// Two texts and their differences, word by word.
#[derive(Serialize, JsonSchema)]
pub(crate) struct TextDiff {
    a: Option<String>,
    b: Option<String>,
    same: bool,
    /// The words of both in order: kept, removed (A only) or added (B only).
    words: Vec<WordRun>,
}

/// A run of words that both texts have, or only one.
#[derive(Serialize, JsonSchema, PartialEq, Debug)]
pub(crate) struct WordRun {
    op: WordOp,
    text: String,
}

#[derive(Clone, Copy, Serialize, JsonSchema, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WordOp {
    Same,
    Removed,
    Added,
}

/// `GET /sessions/{id}/compare/{other}`.
pub(crate) async fn compare(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((a, b)): Path<(String, String)>,
) -> Result<Json<Comparison>, ApiError> {
    let (ra, la) = load(&app, &user, &a).await?;
    let (rb, lb) = load(&app, &user, &b).await?;
    Ok(Json(sessions(&ra, &la, &rb, &lb)))
}

async fn load(
    app: &Shared,
    user: &User,
    id: &str,
) -> Result<(SessionRecord, Vec<Envelope>), ApiError> {
    threads::load_log(app, user, id)
        .await
        .map_err(|e| match e.0 {
            StatusCode::NOT_FOUND => ApiError::new(
                StatusCode::NOT_FOUND,
                format!("session {id} not found (it does not exist, or is another user's)"),
            ),
            _ => e,
        })
}

/// A tool call as the comparison reads it.
struct Call {
    seq: u64,
    step: Option<String>,
    /// The item of a fan-out step's call.
    item: Option<usize>,
    tool: String,
    args: Value,
    status: &'static str,
    result: Option<Value>,
}

/// A workflow step entered.
struct Entered {
    seq: u64,
    step: String,
    calls: Vec<usize>,
    output: Option<Value>,
}

/// One session folded: its state and what the comparison needs beside it.
struct Folded<'r> {
    rec: &'r SessionRecord,
    st: weft_core::State,
    calls: Vec<Call>,
    path: Vec<Entered>,
    duration_ms: u64,
}

fn fold<'r>(rec: &'r SessionRecord, log: &[Envelope]) -> Folded<'r> {
    let mut st = weft_core::State::new();
    let mut calls: Vec<Call> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut path: Vec<Entered> = Vec::new();
    for env in log {
        match &env.event {
            Event::ToolCallStarted {
                call_id,
                step,
                item,
                tool,
                args,
                ..
            } => {
                index.insert(call_id.clone(), calls.len());
                if let Some(p) = path.last_mut() {
                    p.calls.push(calls.len());
                }
                calls.push(Call {
                    seq: env.seq,
                    step: step.clone(),
                    item: *item,
                    tool: tool.clone(),
                    args: args.clone(),
                    status: "running",
                    result: None,
                });
            }
            Event::ToolCallFinished {
                call_id, outcome, ..
            } => {
                if let Some(c) = index.get(call_id).and_then(|&i| calls.get_mut(i)) {
                    let (status, result) = outcome_of(outcome);
                    c.status = status;
                    c.result = Some(result);
                }
            }
            Event::ToolCallBlocked {
                step,
                tool,
                args,
                reason,
                ..
            } => calls.push(Call {
                seq: env.seq,
                step: step.clone(),
                item: None,
                tool: tool.clone(),
                args: args.clone(),
                status: "blocked",
                result: Some(serde_json::json!({ "blocked": reason })),
            }),
            Event::WorkflowStepEntered { step, .. } => path.push(Entered {
                seq: env.seq,
                step: step.clone(),
                calls: Vec::new(),
                output: None,
            }),
            Event::WorkflowOutputAccepted { step, output, .. } => {
                if let Some(p) = path.iter_mut().rev().find(|p| &p.step == step) {
                    p.output = Some(output.clone());
                }
            }
            _ => {}
        }
        st.apply(&env.event);
    }
    let duration_ms = match (log.first(), log.last()) {
        (Some(f), Some(l)) => u64::try_from(l.ts - f.ts).unwrap_or(0),
        _ => 0,
    };
    Folded {
        rec,
        st,
        calls,
        path,
        duration_ms,
    }
}

/// A call's status and result as the comparison shows them.
fn outcome_of(outcome: &ToolOutcome) -> (&'static str, Value) {
    match outcome {
        ToolOutcome::Ok { output } => ("ok", output.clone()),
        ToolOutcome::Error { error } => (
            "error",
            serde_json::json!({ "error": serde_json::to_value(error).unwrap_or(Value::Null) }),
        ),
    }
}

impl Folded<'_> {
    fn side(&self) -> Side {
        let st = &self.st;
        Side {
            id: self.rec.id.clone(),
            agent: super::view::agent_of(self.rec, st),
            mode: st.mode(),
            status: self.rec.status.as_str().to_owned(),
            task: st
                .turn()
                .task()
                .map(str::to_owned)
                .or_else(|| st.memory().first().map(|m| m.0.clone())),
            input: st.input().clone(),
            answer: st.turn().answer().map(str::to_owned),
            error: st.turn().error().map(str::to_owned),
            parent_id: self.rec.parent_id.clone(),
            created_at: weft_host::sessions::fmt_time(self.rec.created_at),
            totals: Totals {
                input_tokens: st.usage().tokens.input_tokens,
                output_tokens: st.usage().tokens.output_tokens,
                cost_usd: st.usage().tokens.cost_usd,
                duration_ms: self.duration_ms,
                model_calls: st.usage().calls,
                tool_calls: st.calls().started,
            },
        }
    }

    /// A plan's steps by id, in the plan's order.
    fn plan_steps(&self) -> Vec<(String, StepSide)> {
        let Some(p) = &self.st.plan() else {
            return Vec::new();
        };
        p.plan
            .steps
            .iter()
            .zip(&p.steps)
            .map(|(s, r)| {
                let mine: Vec<&Call> = self
                    .calls
                    .iter()
                    .filter(|c| c.step.as_deref() == Some(s.id.as_str()))
                    .collect();
                let last = mine.last().copied();
                // A fan-out step's arguments: each item's last call's, in item order.
                let items: std::collections::BTreeMap<usize, &Call> =
                    mine.iter().filter_map(|c| Some((c.item?, *c))).collect();
                let args = if items.is_empty() {
                    last.map_or_else(|| s.to_call(), |c| c.args.clone())
                } else {
                    Value::Array(items.values().map(|c| c.args.clone()).collect())
                };
                let status = serde_json::to_value(r.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let result = match (last, &r.output) {
                    (_, Some(out)) => Some(out.clone()),
                    (Some(c), None) => c.result.clone(),
                    (None, None) => r.error.as_ref().map(|e| {
                        serde_json::json!({ "error": serde_json::to_value(e).unwrap_or(Value::Null) })
                    }),
                };
                (
                    s.id.clone(),
                    StepSide {
                        tool: s.tool.clone(),
                        args,
                        status,
                        result,
                        seq: last.map(|c| c.seq),
                    },
                )
            })
            .collect()
    }

    /// The tool calls in order.
    fn call_steps(&self) -> Vec<(String, StepSide)> {
        self.calls
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("#{}", i + 1), call_side(c)))
            .collect()
    }

    /// The workflow's steps entered, in order.
    fn path_steps(&self) -> Vec<(String, StepSide)> {
        self.path
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let calls: Vec<Value> = p
                    .calls
                    .iter()
                    .filter_map(|&k| self.calls.get(k))
                    .map(|c| serde_json::json!({ "tool": c.tool, "args": c.args }))
                    .collect();
                (
                    format!("{}. {}", i + 1, p.step),
                    StepSide {
                        tool: Some(p.step.clone()),
                        args: Value::Array(calls),
                        status: if p.output.is_some() {
                            "accepted"
                        } else {
                            "entered"
                        }
                        .to_owned(),
                        result: p.output.clone(),
                        seq: Some(p.seq),
                    },
                )
            })
            .collect()
    }
}

fn call_side(c: &Call) -> StepSide {
    StepSide {
        tool: Some(c.tool.clone()),
        args: c.args.clone(),
        status: c.status.to_owned(),
        result: c.result.clone(),
        seq: Some(c.seq),
    }
}

/// Sessions `a` and `b` (records and logs) compared.
pub(crate) fn sessions(
    ra: &SessionRecord,
    la: &[Envelope],
    rb: &SessionRecord,
    lb: &[Envelope],
) -> Comparison {
    let fa = fold(ra, la);
    let fb = fold(rb, lb);
    let (a, b) = (fa.side(), fb.side());
    let mut differs: Vec<String> = Vec::new();
    let mut note = |name: &str, same: bool| {
        if !same {
            differs.push(name.to_owned());
        }
    };
    note("agent", a.agent == b.agent);
    note("task", a.task == b.task);
    note("input", a.input == b.input);
    note("status", a.status == b.status);
    note("error", a.error == b.error);
    note("answer", a.answer == b.answer);
    let (ta, tb) = (&a.totals, &b.totals);
    note("input_tokens", ta.input_tokens == tb.input_tokens);
    note("output_tokens", ta.output_tokens == tb.output_tokens);
    note("cost_usd", ta.cost_usd == tb.cost_usd);
    note("duration_ms", ta.duration_ms == tb.duration_ms);
    note("model_calls", ta.model_calls == tb.model_calls);
    note("tool_calls", ta.tool_calls == tb.tool_calls);
    let input_paths = json_paths(&a.input, &b.input);
    let aligned_by = match (fa.st.mode(), fb.st.mode()) {
        (Some(Mode::Plan), Some(Mode::Plan)) => Alignment::Plan,
        (Some(Mode::Workflow), Some(Mode::Workflow)) => Alignment::Workflow,
        _ => Alignment::Calls,
    };
    let (sa, sb) = match aligned_by {
        Alignment::Plan => (fa.plan_steps(), fb.plan_steps()),
        Alignment::Workflow => (fa.path_steps(), fb.path_steps()),
        Alignment::Calls => (fa.call_steps(), fb.call_steps()),
    };
    let steps = match aligned_by {
        Alignment::Plan => by_key(sa, sb),
        Alignment::Workflow | Alignment::Calls => by_position(sa, sb),
    };
    let fork = fork_point(ra, la, rb, lb);
    let answer = text_diff(a.answer.as_deref(), b.answer.as_deref());
    Comparison {
        a,
        b,
        differs,
        input_paths,
        fork,
        aligned_by,
        steps,
        answer,
    }
}

/// Steps matched by key: A's in its order, each with B's of the same key, then B's own.
fn by_key(a: Vec<(String, StepSide)>, b: Vec<(String, StepSide)>) -> Vec<StepDiff> {
    let mut b: Vec<Option<(String, StepSide)>> = b.into_iter().map(Some).collect();
    let mut out = Vec::new();
    for (key, sa) in a {
        let other = b
            .iter_mut()
            .find(|x| x.as_ref().is_some_and(|(k, _)| *k == key))
            .and_then(Option::take);
        out.push(step_diff(key, Some(sa), other.map(|(_, s)| s), false));
    }
    for (key, sb) in b.into_iter().flatten() {
        out.push(step_diff(key, None, Some(sb), false));
    }
    out
}

/// Steps matched by position (a workflow's path, calls in order); the key is A's (B's past
/// A's end), and a position whose step differs says so.
fn by_position(a: Vec<(String, StepSide)>, b: Vec<(String, StepSide)>) -> Vec<StepDiff> {
    let n = a.len().max(b.len());
    let mut a = a.into_iter();
    let mut b = b.into_iter();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (x, y) = (a.next(), b.next());
        let key = match (&x, &y) {
            (Some((ka, _)), Some((kb, _))) if ka != kb => format!("{ka} / {kb}"),
            (Some((k, _)), _) | (None, Some((k, _))) => k.clone(),
            (None, None) => break,
        };
        let named = matches!((&x, &y), (Some((ka, _)), Some((kb, _))) if ka != kb);
        out.push(step_diff(key, x.map(|s| s.1), y.map(|s| s.1), named));
    }
    out
}

fn step_diff(key: String, a: Option<StepSide>, b: Option<StepSide>, other_step: bool) -> StepDiff {
    let (change, differs, args_paths, result_paths) = match (&a, &b) {
        (Some(x), Some(y)) => {
            let mut d = Vec::new();
            if other_step {
                d.push("step".to_owned());
            }
            if x.tool != y.tool {
                d.push("tool".to_owned());
            }
            let args_paths = json_paths(&x.args, &y.args);
            if x.args != y.args {
                d.push("args".to_owned());
            }
            if x.status != y.status {
                d.push("status".to_owned());
            }
            let null = Value::Null;
            let result_paths = json_paths(
                x.result.as_ref().unwrap_or(&null),
                y.result.as_ref().unwrap_or(&null),
            );
            if x.result != y.result {
                d.push("result".to_owned());
            }
            let change = if d.is_empty() {
                Change::Same
            } else {
                Change::Differs
            };
            (change, d, args_paths, result_paths)
        }
        (Some(_), None) => (Change::OnlyA, Vec::new(), Vec::new(), Vec::new()),
        (None, _) => (Change::OnlyB, Vec::new(), Vec::new(), Vec::new()),
    };
    StepDiff {
        key,
        change,
        differs,
        a,
        b,
        args_paths,
        result_paths,
    }
}

/// When one session is a fork of the other (its parent, or the session its `forked_from`
/// names): the last event the fork kept.
fn fork_point(
    ra: &SessionRecord,
    la: &[Envelope],
    rb: &SessionRecord,
    lb: &[Envelope],
) -> Option<ForkPoint> {
    let of = |fork: &SessionRecord, origin: &SessionRecord| -> Option<u64> {
        let from = fork.metadata.get("forked_from")?;
        let named = from.get("session").and_then(Value::as_str) == Some(origin.id.as_str())
            || fork.parent_id.as_deref() == Some(origin.id.as_str());
        named.then(|| from.get("at").and_then(Value::as_u64))?
    };
    let (side, fork, origin, at, log) = if let Some(at) = of(rb, ra) {
        ("b", rb, ra, at, la)
    } else if let Some(at) = of(ra, rb) {
        ("a", ra, rb, at, lb)
    } else {
        return None;
    };
    let event = log
        .iter()
        .find(|e| e.seq == at)
        .map(|e| e.event.kind().to_owned())
        .unwrap_or_default();
    Some(ForkPoint {
        side: side.to_owned(),
        fork: fork.id.clone(),
        origin: origin.id.clone(),
        at,
        event,
    })
}

/// The paths (JSON pointers, `""` for the whole value) where `a` and `b` differ: a key or an
/// item one has and the other not, or a value that is not the same; at most [`MAX_PATHS`].
pub(crate) fn json_paths(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(Some(a), Some(b), &mut String::new(), &mut out);
    out
}

fn walk(a: Option<&Value>, b: Option<&Value>, at: &mut String, out: &mut Vec<String>) {
    if out.len() >= MAX_PATHS || a == b {
        return;
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                walk(x.get(k), y.get(k), at, out);
                at.truncate(len);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            for i in 0..x.len().max(y.len()) {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                walk(x.get(i), y.get(i), at, out);
                at.truncate(len);
            }
        }
        _ => out.push(at.clone()),
    }
}

/// Two texts compared word by word (the longest common sequence of words kept, the rest
/// removed or added); runs of one kind are joined with single spaces.
pub(crate) fn text_diff(a: Option<&str>, b: Option<&str>) -> TextDiff {
    let wa: Vec<&str> = a.unwrap_or("").split_whitespace().collect();
    let wb: Vec<&str> = b.unwrap_or("").split_whitespace().collect();
    // The words both begin and end with are kept as they are; the middles are diffed.
    let head = wa.iter().zip(&wb).take_while(|(x, y)| x == y).count();
    let tail = wa[head..]
        .iter()
        .rev()
        .zip(wb[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&wa[head..wa.len() - tail], &wb[head..wb.len() - tail]);
    let mut ops: Vec<(WordOp, &str)> = wa[..head].iter().map(|w| (WordOp::Same, *w)).collect();
    if ma.len() > MAX_WORDS || mb.len() > MAX_WORDS {
        ops.extend(ma.iter().map(|w| (WordOp::Removed, *w)));
        ops.extend(mb.iter().map(|w| (WordOp::Added, *w)));
    } else {
        // lcs[i][j]: the longest common sequence of ma[i..] and mb[j..].
        let (n, m) = (ma.len(), mb.len());
        let mut lcs = vec![vec![0u32; m + 1]; n + 1];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i][j] = if ma[i] == mb[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && ma[i] == mb[j] {
                ops.push((WordOp::Same, ma[i]));
                i += 1;
                j += 1;
            } else if j < m && (i == n || lcs[i][j + 1] > lcs[i + 1][j]) {
                ops.push((WordOp::Added, mb[j]));
                j += 1;
            } else {
                ops.push((WordOp::Removed, ma[i]));
                i += 1;
            }
        }
    }
    ops.extend(wa[wa.len() - tail..].iter().map(|w| (WordOp::Same, *w)));
    let mut words: Vec<WordRun> = Vec::new();
    for (op, w) in ops {
        match words.last_mut() {
            Some(last) if last.op == op => {
                last.text.push(' ');
                last.text.push_str(w);
            }
            _ => words.push(WordRun {
                op,
                text: w.to_owned(),
            }),
        }
    }
    TextDiff {
        a: a.map(str::to_owned),
        b: b.map(str::to_owned),
        same: a == b,
        words,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weft_core::{Plan, SessionStatus};

    fn env(seq: u64, event: Event) -> Envelope {
        Envelope {
            seq,
            ts: 1_700_000_000_000 + 10 * seq as i64,
            v: weft_core::EVENT_VERSION,
            epoch: 0,
            event,
        }
    }

    fn record(id: &str, last_seq: u64, forked_from: Option<(&str, u64)>) -> SessionRecord {
        SessionRecord {
            id: id.into(),
            user_id: Some("alice".into()),
            agent: "desk".into(),
            reference_id: None,
            metadata: match forked_from {
                Some((s, at)) => json!({"forked_from": {"session": s, "at": at}}),
                None => json!({}),
            },
            parent_id: forked_from.map(|(s, _)| s.to_owned()),
            status: SessionStatus::Completed,
            created_at: 0,
            updated_at: 0,
            last_seq,
        }
    }

    fn start(mode: Mode, task: &str) -> Vec<Envelope> {
        vec![
            env(
                1,
                Event::SessionStarted {
                    session_id: "s".into(),
                    agent: "desk".into(),
                    input: json!({"customer": {"id": "c-42"}}),
                    mode: Some(mode),
                    parent_id: None,
                },
            ),
            env(
                2,
                Event::TurnStarted {
                    task: task.into(),
                    input: Value::Null,
                },
            ),
        ]
    }

    /// A call of `tool` with `args` that returned `output`, as events `seq` and `seq + 1`.
    fn call(seq: u64, step: Option<&str>, tool: &str, args: Value, output: Value) -> [Envelope; 2] {
        let id = format!("k{seq}");
        [
            env(
                seq,
                Event::ToolCallStarted {
                    call_id: id.clone(),
                    step: step.map(str::to_owned),
                    tool: tool.into(),
                    args,
                    attempt: 1,
                    idempotency_key: format!("s:{seq}"),
                    item: None,
                    untrusted_from: Vec::new(),
                },
            ),
            env(
                seq + 1,
                Event::ToolCallFinished {
                    call_id: id,
                    outcome: ToolOutcome::Ok { output },
                    duration_ms: 5,
                },
            ),
        ]
    }

    fn diff(a: &[Envelope], b: &[Envelope]) -> Value {
        let ra = record("a", a.len() as u64, None);
        let rb = record("b", b.len() as u64, None);
        serde_json::to_value(sessions(&ra, a, &rb, b)).unwrap_or_default()
    }

    fn changes(c: &Value) -> Vec<(String, String, Value)> {
        c["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["key"].as_str().unwrap_or_default().to_owned(),
                    s["change"].as_str().unwrap_or_default().to_owned(),
                    s["differs"].clone(),
                )
            })
            .collect()
    }

    /// A plan of steps `look` and `pay` (refunding `amount`), and `tell` when `extra`, accepted.
    fn plan_log(amount: u64, extra: bool) -> Vec<Envelope> {
        let mut steps = vec![
            json!({"_id": "look", "_tool": "lookup", "id": "c-42"}),
            json!({"_id": "pay", "_tool": "refund", "amount": amount}),
        ];
        if extra {
            steps.push(json!({"_id": "tell", "_tool": "notify"}));
        }
        let mut log = start(Mode::Plan, "Refund");
        log.push(env(
            3,
            Event::PlanAccepted {
                plan: Plan::from_value(&Value::Array(steps)).unwrap_or_default(),
            },
        ));
        log
    }

    /// A plan's fan-out step `each` over two items, notifying `ada` (twice: a retry) and `second`.
    fn fan_log(second: &str) -> Vec<Envelope> {
        let mut log = start(Mode::Plan, "Tell both");
        log.push(env(
            3,
            Event::PlanAccepted {
                plan: Plan::from_value(&json!([{"_id": "each", "_tool": "notify"}]))
                    .unwrap_or_default(),
            },
        ));
        log.push(env(
            4,
            Event::FanOutStarted {
                step: "each".into(),
                items: 2,
            },
        ));
        for (seq, item, attempt, to) in [(5, 0, 1, "ada"), (6, 1, 1, second), (7, 0, 2, "ada")] {
            log.push(env(
                seq,
                Event::ToolCallStarted {
                    call_id: format!("each#{item}.{attempt}"),
                    step: Some("each".into()),
                    item: Some(item),
                    tool: "notify".into(),
                    args: json!({"to": to}),
                    attempt,
                    idempotency_key: format!("s:each:{item}:{attempt}"),
                    untrusted_from: Vec::new(),
                },
            ));
        }
        log
    }

    /// A ReAct session's calls, each `(tool, city, degrees)`.
    fn react_log(calls: &[(&str, &str, i64)]) -> Vec<Envelope> {
        let mut log = start(Mode::React, "Weather?");
        for (i, (tool, city, c)) in calls.iter().enumerate() {
            log.extend(call(
                3 + 2 * i as u64,
                None,
                tool,
                json!({"city": city}),
                json!({"c": c}),
            ));
        }
        log
    }

    /// A workflow that entered `triage`, which answered `category`, then `next`.
    fn workflow_log(category: &str, next: &str) -> Vec<Envelope> {
        let mut log = start(Mode::Workflow, "Where is my parcel?");
        for (seq, step) in [(3, "triage"), (5, next)] {
            log.push(env(
                seq,
                Event::WorkflowStepEntered {
                    step: step.into(),
                    via: weft_core::event::StepEntry::Initial,
                },
            ));
            if step == "triage" {
                log.push(env(
                    4,
                    Event::WorkflowOutputAccepted {
                        step: step.into(),
                        output: json!({"category": category}),
                        assigned: serde_json::Map::new(),
                        reply: None,
                    },
                ));
            }
        }
        log
    }

    /// Two sessions' steps matched by plan step id, workflow path or call order: how they are
    /// aligned, each step's change and what differs in it, and further values of the comparison
    /// (at JSON pointers).
    #[test]
    fn steps_are_matched_by_id_path_or_order_with_what_differs_in_each() {
        /// A step's key, its change and what differs in it.
        type Row = (&'static str, &'static str, Value);
        /// What is compared, the two logs, the alignment, the steps, values at JSON pointers.
        type Case = (
            &'static str,
            [Vec<Envelope>; 2],
            &'static str,
            Vec<Row>,
            Vec<(&'static str, Value)>,
        );
        let cases: Vec<Case> = vec![
            (
                "plans by step id",
                [plan_log(50, false), plan_log(70, true)],
                "plan",
                vec![
                    ("look", "same", json!([])),
                    ("pay", "differs", json!(["args"])),
                    ("tell", "only_b", json!([])),
                ],
                vec![
                    ("/steps/1/args_paths", json!(["/amount"])),
                    ("/steps/1/a/status", json!("PENDING")),
                    ("/fork", Value::Null),
                    // Same task, input, status and totals: nothing differs at the top.
                    ("/differs", json!([])),
                ],
            ),
            (
                "a fan-out step's arguments: each item's last call",
                [fan_log("bob"), fan_log("eve")],
                "plan",
                vec![("each", "differs", json!(["args"]))],
                vec![
                    ("/steps/0/a/args", json!([{"to": "ada"}, {"to": "bob"}])),
                    ("/steps/0/args_paths", json!(["/1/to"])),
                ],
            ),
            (
                "ReAct calls in order",
                [
                    react_log(&[("weather", "Lisbon", 21), ("weather", "Oslo", 4)]),
                    react_log(&[
                        ("weather", "Lisbon", 22),
                        ("forecast", "Oslo", 4),
                        ("weather", "Bergen", 2),
                    ]),
                ],
                "calls",
                vec![
                    ("#1", "differs", json!(["result"])),
                    ("#2", "differs", json!(["tool"])),
                    ("#3", "only_b", json!([])),
                ],
                vec![
                    ("/steps/0/result_paths", json!(["/c"])),
                    ("/steps/2/b/args/city", json!("Bergen")),
                    ("/differs", json!(["duration_ms", "tool_calls"])),
                ],
            ),
            (
                "a workflow's path position by position",
                [
                    workflow_log("question", "answer"),
                    workflow_log("refund", "refund"),
                ],
                "workflow",
                vec![
                    ("1. triage", "differs", json!(["result"])),
                    ("2. answer / 2. refund", "differs", json!(["step", "tool"])),
                ],
                vec![("/steps/0/result_paths", json!(["/category"]))],
            ),
        ];
        for (what, [a, b], aligned_by, rows, values) in cases {
            let c = diff(&a, &b);
            assert_eq!(c["aligned_by"], aligned_by, "{what}");
            let want: Vec<(String, String, Value)> = rows
                .into_iter()
                .map(|(k, ch, d)| (k.to_owned(), ch.to_owned(), d))
                .collect();
            assert_eq!(changes(&c), want, "{what}");
            for (at, v) in values {
                assert_eq!(c.pointer(at).unwrap_or(&Value::Null), &v, "{what}: {at}");
            }
        }
    }

    #[test]
    fn a_fork_names_the_event_where_it_parts() {
        let mut a = start(Mode::React, "Weather?");
        a.extend(call(
            3,
            None,
            "weather",
            json!({"city": "Lisbon"}),
            json!({"c": 21}),
        ));
        let b = a.clone();
        let ra = record("origin", 4, None);
        let rb = record("fork", 4, Some(("origin", 3)));
        let c = serde_json::to_value(sessions(&ra, &a, &rb, &b)).unwrap_or_default();
        assert_eq!(
            c["fork"],
            json!({"side": "b", "fork": "fork", "origin": "origin", "at": 3, "event": "tool_call_started"})
        );
        let back = serde_json::to_value(sessions(&rb, &b, &ra, &a)).unwrap_or_default();
        assert_eq!(back["fork"]["side"], "a");
        assert_eq!(changes(&c), [("#1".into(), "same".into(), json!([]))]);
        assert_eq!(c["differs"], json!([]));
    }

    #[test]
    fn json_paths_name_each_difference_as_a_pointer() {
        let a = json!({"x": 1, "list": [1, 2], "a/b": {"k": true}, "gone": 0});
        let b = json!({"x": 2, "list": [1, 2, 3], "a/b": {"k": false}, "new": 0});
        assert_eq!(
            json_paths(&a, &b),
            ["/a~1b/k", "/gone", "/list/2", "/new", "/x"]
        );
        assert_eq!(json_paths(&json!(1), &json!("1")), [""]);
        assert!(json_paths(&a, &a).is_empty());
    }

    #[test]
    fn answers_are_diffed_word_by_word() {
        let d = text_diff(
            Some("the cat sat on the mat"),
            Some("the dog sat on a mat today"),
        );
        let runs: Vec<(WordOp, &str)> = d.words.iter().map(|w| (w.op, w.text.as_str())).collect();
        assert_eq!(
            runs,
            [
                (WordOp::Same, "the"),
                (WordOp::Removed, "cat"),
                (WordOp::Added, "dog"),
                (WordOp::Same, "sat on"),
                (WordOp::Removed, "the"),
                (WordOp::Added, "a"),
                (WordOp::Same, "mat"),
                (WordOp::Added, "today"),
            ]
        );
        assert!(!d.same);
        let none = text_diff(None, Some("hello"));
        assert_eq!(
            none.words,
            [WordRun {
                op: WordOp::Added,
                text: "hello".into()
            }]
        );
        assert!(text_diff(Some("a b"), Some("a b")).same);
    }

    #[test]
    fn long_answers_are_diffed_past_their_common_ends_and_as_a_whole_past_the_limit() {
        let words = |prefix: &str, n: usize| -> Vec<String> {
            (0..n).map(|i| format!("{prefix}{i}")).collect()
        };
        // 3000 words alike on each side of one that changed: only that word is marked.
        let (head, tail) = (words("h", 3000).join(" "), words("t", 3000).join(" "));
        let d = text_diff(
            Some(&format!("{head} old {tail}")),
            Some(&format!("{head} new {tail}")),
        );
        let ops: Vec<(WordOp, usize)> = d
            .words
            .iter()
            .map(|w| (w.op, w.text.split(' ').count()))
            .collect();
        assert_eq!(
            ops,
            [
                (WordOp::Same, 3000),
                (WordOp::Removed, 1),
                (WordOp::Added, 1),
                (WordOp::Same, 3000)
            ]
        );
        // Middles past the limit: one removed run, one added run.
        let (a, b) = (words("a", MAX_WORDS + 1), words("b", MAX_WORDS + 1));
        let d = text_diff(Some(&a.join(" ")), Some(&b.join(" ")));
        let ops: Vec<WordOp> = d.words.iter().map(|w| w.op).collect();
        assert_eq!(ops, [WordOp::Removed, WordOp::Added]);
    }
}
