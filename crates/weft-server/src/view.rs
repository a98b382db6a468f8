//! What the playground shows of a session at one event of its log: the state folded up to that
//! event (with `State::apply`, as every reader of a log folds it), the plan drawn as a graph
//! (steps, the edges of `_dependsOn` and `†` references, the wave each step ran in), and the
//! history a person reads (tool calls with their results, reviews, plan versions and what
//! changed between them). Pure: a log in, typed values out (what the routes answer with).

use std::collections::{BTreeMap, HashMap};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use weft_core::agent::Mode;
use weft_core::event::{InputRequest, RecalledMemory, ReviewDecision, ToolError};
use weft_core::graph::WriteIndex;
use weft_core::model::Usage;
use weft_core::plan::{PlanProblem, RefRoot};
use weft_core::{Envelope, Event, Plan, SessionStatus, State, StepStatus, ToolOutcome};
use weft_store::SessionRecord;

use super::openapi::{self, StoredEvent};
use weft_host::sessions::fmt_time;

/// A session in the list: who, what, how it stands, what it cost.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct Summary {
    pub id: String,
    pub agent: String,
    pub mode: Option<Mode>,
    pub user: Option<String>,
    /// `running`, `waiting_for_user`, `completed` or `failed`.
    pub status: String,
    /// What the session waits for (its kind), if it waits.
    pub waiting: Option<String>,
    pub task: Option<String>,
    pub turns: u32,
    pub usage: Usage,
    pub tool_calls: u64,
    pub error: Option<String>,
    pub parent_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub last_seq: u64,
    /// Whether a run of this server drives it now (in `GET /sessions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<bool>,
}

/// A session in the list: who, what, how it stands, what it cost (from its current state).
pub(crate) fn summary(rec: &SessionRecord, st: &State) -> Summary {
    let task = st
        .turn()
        .task()
        .map(str::to_owned)
        .or_else(|| st.memory().first().map(|m| m.0.clone()));
    Summary {
        id: rec.id.clone(),
        agent: agent_of(rec, st),
        mode: st.mode(),
        user: rec.user_id.clone(),
        status: rec.status.as_str().to_owned(),
        waiting: st.turn().waiting().map(|w| w.kind.clone()),
        task,
        turns: st.turn().number(),
        usage: st.usage().tokens.clone(),
        tool_calls: st.calls().started,
        error: st.turn().error().map(str::to_owned),
        parent_id: rec.parent_id.clone(),
        created_at: fmt_time(rec.created_at),
        updated_at: fmt_time(rec.updated_at),
        last_seq: rec.last_seq,
        busy: None,
    }
}

/// The agent's name: the record's, or (for a thread created empty and given its agent by its
/// first run) the log's.
pub(crate) fn agent_of(rec: &SessionRecord, st: &State) -> String {
    if rec.agent.is_empty() {
        st.agent().to_owned()
    } else {
        rec.agent.clone()
    }
}

/// A tool call as a card: the call, its result or error, how long it took, its retries.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct Card {
    seq: u64,
    at: String,
    call_id: String,
    step: Option<String>,
    tool: String,
    #[schemars(schema_with = "openapi::any")]
    args: Value,
    attempt: u32,
    status: CardStatus,
    outcome: Option<ToolOutcome>,
    duration_ms: Option<u64>,
    retry: Option<Retry>,
    reason: Option<String>,
}

/// How a call stands.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CardStatus {
    Running,
    Ok,
    Error,
    UnknownOutcome,
    Blocked,
}

/// The retry a failed call's step waits for.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct Retry {
    next_attempt: u32,
    in_ms: u64,
    error: ToolError,
}

/// Something a person reads in the session's history: a task, an answer, a wait, a failure...
#[derive(Serialize, JsonSchema)]
pub(crate) struct Note {
    seq: u64,
    at: String,
    /// `task`, `reply`, a wait's kind, `reply_rejected`, `model_failed`, `execution_finished`,
    /// `draft`, `response_review`, `step_action` or `run_finished`.
    kind: String,
    text: String,
    step: Option<String>,
}

/// Where a run began in the log.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RunMark {
    run_id: String,
    seq: u64,
    at: String,
}

/// What the review after a wave decided.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Review {
    seq: u64,
    at: String,
    decision: ReviewDecision,
    reason: String,
}

/// A version of the plan: rejected (with its problems), accepted, or revised (with why and
/// what changed).
#[derive(Serialize, JsonSchema)]
pub(crate) struct PlanVersion {
    seq: u64,
    at: String,
    kind: PlanVersionKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    problems: Option<Vec<PlanProblem>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The steps' ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    steps: Option<Vec<String>>,
    /// What a revision changed (null when there was no plan before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<Option<Changes>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PlanVersionKind {
    Rejected,
    Accepted,
    Revised,
}

/// What a replan changed: the calls it added and removed, the steps whose call changed.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Changes {
    #[schemars(schema_with = "openapi::calls")]
    added: Vec<Value>,
    #[schemars(schema_with = "openapi::calls")]
    removed: Vec<Value>,
    changed: Vec<Changed>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Changed {
    id: String,
    #[schemars(schema_with = "openapi::any")]
    before: Value,
    #[schemars(schema_with = "openapi::any")]
    after: Value,
}

/// What the page lists beside the state: collected while the log is folded.
#[derive(Default)]
struct History {
    cards: Vec<Card>,
    /// Call id → its card.
    card_of: HashMap<String, usize>,
    /// Step → the wave it last ran in.
    wave_of: HashMap<String, u32>,
    waves: BTreeMap<u32, (u64, bool)>,
    reviews: Vec<Review>,
    plans: Vec<PlanVersion>,
    notes: Vec<Note>,
    runs: Vec<RunMark>,
    /// The plan before the last revision, to say what changed.
    last_plan: Option<Plan>,
}

impl History {
    /// Notes `e`, before it is applied to `st`.
    fn note(&mut self, env: &Envelope, st: &State) {
        let (seq, ts) = (env.seq, env.ts);
        let at = fmt_time(ts);
        let mut note = |kind: &str, text: String, step: Option<&String>| {
            self.notes.push(Note {
                seq,
                at: at.clone(),
                kind: kind.to_owned(),
                text,
                step: step.cloned(),
            });
        };
        match &env.event {
            Event::TurnStarted { task, .. } => note("task", task.clone(), None),
            Event::UserReplied { text } => note("reply", text.clone(), None),
            Event::WaitingForUser { request } => note(
                &request.kind,
                request.question.clone(),
                request.step.as_ref(),
            ),
            Event::ModelReplyRejected { reason, step, .. } => {
                note("reply_rejected", reason.clone(), step.as_ref())
            }
            Event::ModelFailed { error, .. } => note("model_failed", error.clone(), None),
            Event::BudgetExceeded {
                which,
                limit,
                spent,
                call,
            } => note(
                "budget_exceeded",
                weft_core::budget::Reached {
                    which: which.clone(),
                    limit: *limit,
                    spent: *spent,
                    call: *call,
                }
                .describe(),
                None,
            ),
            Event::ExecutionFinished { reason } => note("execution_finished", reason.clone(), None),
            Event::AnswerDrafted { text, round } => {
                note("draft", format!("draft {round}: {text}"), None)
            }
            Event::ResponseReviewed { verdict, feedback } => {
                note("response_review", format!("{verdict:?}: {feedback}"), None)
            }
            Event::StepAction {
                step,
                action,
                detail,
            } => note(
                "step_action",
                format!("{action} {}", compact(detail)),
                Some(step),
            ),
            Event::RunFinished { status, error, .. } => note(
                "run_finished",
                match error {
                    Some(e) => format!("{status:?}: {e}"),
                    None => format!("{status:?}"),
                },
                None,
            ),
            _ => {}
        }
        match &env.event {
            Event::RunStarted { run_id, .. } => {
                self.runs.push(RunMark {
                    run_id: run_id.clone(),
                    seq,
                    at: at.clone(),
                });
            }
            Event::WaveStarted { wave, steps } => {
                for s in steps {
                    self.wave_of.insert(s.clone(), *wave);
                }
                self.waves.insert(*wave, (seq, false));
            }
            Event::WaveFinished { wave } => {
                if let Some(w) = self.waves.get_mut(wave) {
                    w.1 = true;
                }
            }
            Event::ToolCallStarted {
                call_id,
                step,
                tool,
                args,
                attempt,
                ..
            } => {
                self.card_of.insert(call_id.clone(), self.cards.len());
                self.cards.push(Card {
                    seq,
                    at: at.clone(),
                    call_id: call_id.clone(),
                    step: step.clone(),
                    tool: tool.clone(),
                    args: args.clone(),
                    attempt: *attempt,
                    status: CardStatus::Running,
                    outcome: None,
                    duration_ms: None,
                    retry: None,
                    reason: None,
                });
            }
            Event::ToolCallFinished {
                call_id,
                outcome,
                duration_ms,
            } => {
                if let Some(&i) = self.card_of.get(call_id) {
                    let c = &mut self.cards[i];
                    c.status = match outcome {
                        ToolOutcome::Ok { .. } => CardStatus::Ok,
                        ToolOutcome::Error { error } if error.kind == "unknown_outcome" => {
                            CardStatus::UnknownOutcome
                        }
                        ToolOutcome::Error { .. } => CardStatus::Error,
                    };
                    c.outcome = Some(outcome.clone());
                    c.duration_ms = Some(*duration_ms);
                }
            }
            Event::ToolCallBlocked {
                step,
                call_id,
                tool,
                args,
                reason,
                ..
            } => self.cards.push(Card {
                seq,
                at: at.clone(),
                call_id: call_id.clone().unwrap_or_default(),
                step: step.clone(),
                tool: tool.clone(),
                args: args.clone(),
                attempt: 0,
                status: CardStatus::Blocked,
                outcome: None,
                duration_ms: None,
                retry: None,
                reason: Some(reason.clone()),
            }),
            Event::StepRetrying {
                step,
                attempt,
                error,
                delay_ms,
            } => {
                let last = self
                    .cards
                    .iter_mut()
                    .rev()
                    .find(|c| c.step.as_deref() == Some(step.as_str()));
                if let Some(c) = last {
                    c.retry = Some(Retry {
                        next_attempt: attempt + 1,
                        in_ms: *delay_ms,
                        error: error.clone(),
                    });
                }
            }
            Event::ReviewDecided { decision, reason } => {
                self.reviews.push(Review {
                    seq,
                    at,
                    decision: *decision,
                    reason: reason.clone(),
                });
            }
            Event::PlanRejected { problems } => self.plans.push(PlanVersion {
                seq,
                at,
                kind: PlanVersionKind::Rejected,
                problems: Some(problems.clone()),
                reason: None,
                steps: None,
                changes: None,
            }),
            Event::PlanAccepted { plan } => {
                self.plans.push(PlanVersion {
                    seq,
                    at,
                    kind: PlanVersionKind::Accepted,
                    problems: None,
                    reason: None,
                    steps: Some(plan.steps.iter().map(|s| s.id.clone()).collect()),
                    changes: None,
                });
                self.last_plan = Some(plan.clone());
            }
            Event::PlanRevised { plan, reason } => {
                let before = st.plan().map(|p| (&p.plan, &p.steps));
                self.plans.push(PlanVersion {
                    seq,
                    at,
                    kind: PlanVersionKind::Revised,
                    problems: None,
                    reason: Some(reason.clone()),
                    steps: Some(plan.steps.iter().map(|s| s.id.clone()).collect()),
                    changes: Some(before.map(|(p, runs)| changes(p, runs, plan))),
                });
                self.last_plan = Some(plan.clone());
            }
            _ => {}
        }
    }
}

/// What a replan changed: the pending steps it dropped, the steps it added, and the steps it
/// kept under the same id with other arguments. Steps that ran stay as they were.
fn changes(before: &Plan, runs: &[weft_core::state::StepRun], after: &Plan) -> Changes {
    let pending: Vec<(&weft_core::PlanStep, bool)> = before
        .steps
        .iter()
        .zip(runs)
        .map(|(s, r)| {
            (
                s,
                !r.status.is_terminal() && r.status != StepStatus::Running,
            )
        })
        .collect();
    let mut added = Vec::new();
    let mut changed = Vec::new();
    for s in &after.steps {
        match pending.iter().find(|(p, _)| p.id == s.id) {
            Some((p, _)) if p.to_call() != s.to_call() => changed.push(Changed {
                id: s.id.clone(),
                before: p.to_call(),
                after: s.to_call(),
            }),
            Some(_) => {}
            None => added.push(s.to_call()),
        }
    }
    let removed: Vec<Value> = pending
        .iter()
        .filter(|(p, open)| *open && !after.steps.iter().any(|s| s.id == p.id))
        .map(|(p, _)| p.to_call())
        .collect();
    Changes {
        added,
        removed,
        changed,
    }
}

/// JSON of a value on one line, cut for a note.
fn compact(v: &Value) -> String {
    if v.is_null() {
        return String::new();
    }
    let s = v.to_string();
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s
    }
}

/// A session as the playground draws it, at one event of its log.
#[derive(Serialize, JsonSchema)]
pub(crate) struct SessionView {
    id: String,
    agent: String,
    mode: Option<Mode>,
    user: Option<String>,
    parent_id: Option<String>,
    /// `{session, at}` for a fork.
    #[schemars(schema_with = "openapi::any")]
    forked_from: Option<Value>,
    created_at: String,
    updated_at: String,
    /// The event shown.
    seq: u64,
    last_seq: u64,
    /// Whether the event shown is the last.
    latest: bool,
    /// The event shown, as stored.
    event: Option<StoredEvent>,
    /// `running`, `waiting_for_user`, `completed` or `failed`.
    status: String,
    busy: bool,
    #[schemars(with = "String")]
    phase: weft_core::state::Phase,
    turn: u32,
    task: Option<String>,
    #[schemars(schema_with = "openapi::any")]
    input: Value,
    #[schemars(schema_with = "openapi::any")]
    data: Value,
    answer: Option<String>,
    drafts: Vec<String>,
    error: Option<String>,
    waiting: Option<InputRequest>,
    usage: Usage,
    model_calls: u32,
    tool_calls: u64,
    /// The budget in force and what the run and the session spent against it.
    spending: Spending,
    earlier_turns: Vec<EarlierTurn>,
    #[schemars(schema_with = "openapi::messages")]
    conversation: Vec<weft_core::model::Message>,
    memories: Vec<RecalledMemory>,
    plan: Option<PlanGraph>,
    calls: Vec<Card>,
    reviews: Vec<Review>,
    plans: Vec<PlanVersion>,
    notes: Vec<Note>,
    runs: Vec<RunMark>,
}

/// The budget in force (the session's last `budget_set`, else the agent file's; none: no
/// budget) and what the current task (`run`) and the whole session spent, as budgets count it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Spending {
    budget: Option<weft_core::budget::Budget>,
    run: weft_core::budget::Spent,
    session: weft_core::budget::Spent,
}

/// An earlier turn of the session: its task and answer.
#[derive(Serialize, JsonSchema)]
pub(crate) struct EarlierTurn {
    task: String,
    answer: Option<String>,
}

/// The session as it was after event `at` (the last one when `None`, or when `at` is past it);
/// `agent_budget` gives an agent's file's budget, in force unless the session recorded another.
pub(crate) fn session(
    rec: &SessionRecord,
    log: &[Envelope],
    at: Option<u64>,
    busy: bool,
    agent_budget: &dyn Fn(&str) -> Option<weft_core::budget::Budget>,
) -> SessionView {
    let at = at.unwrap_or(rec.last_seq).min(rec.last_seq);
    let mut st = State::new();
    let mut h = History::default();
    let mut at_event = None;
    for env in log.iter().take_while(|e| e.seq <= at) {
        h.note(env, &st);
        st.apply(&env.event);
        if env.seq == at {
            at_event = Some(StoredEvent(env.clone()));
        }
    }
    let latest = at == rec.last_seq;
    let plan = graph(&st, &h);
    let agent = agent_of(rec, &st);
    SessionView {
        id: rec.id.clone(),
        mode: st.mode(),
        user: rec.user_id.clone(),
        parent_id: rec.parent_id.clone(),
        forked_from: rec.metadata.get("forked_from").cloned(),
        created_at: fmt_time(rec.created_at),
        updated_at: fmt_time(rec.updated_at),
        seq: at,
        last_seq: rec.last_seq,
        latest,
        event: at_event,
        status: st.status().as_str().to_owned(),
        busy: busy && latest,
        phase: st.phase(),
        turn: st.turn().number(),
        task: st.turn().task().map(str::to_owned),
        input: st.input().clone(),
        data: st.data().clone(),
        answer: st.turn().answer().map(str::to_owned),
        drafts: st.turn().drafts().to_vec(),
        error: st.turn().error().map(str::to_owned),
        waiting: st.turn().waiting().cloned(),
        usage: st.usage().tokens.clone(),
        model_calls: st.usage().calls,
        tool_calls: st.calls().started,
        spending: Spending {
            budget: st
                .spending()
                .budget
                .clone()
                .or_else(|| agent_budget(&agent)),
            run: st.spending().run.clone(),
            session: st.spending().session.clone(),
        },
        agent,
        earlier_turns: st
            .memory()
            .iter()
            .map(|(t, a)| EarlierTurn {
                task: t.clone(),
                answer: a.clone(),
            })
            .collect(),
        conversation: st.history().iter().cloned().collect(),
        memories: st.turn().recalled().to_vec(),
        plan,
        calls: h.cards,
        reviews: h.reviews,
        plans: h.plans,
        notes: h.notes,
        runs: h.runs,
    }
}

/// The plan as a graph.
#[derive(Serialize, JsonSchema)]
pub(crate) struct PlanGraph {
    /// A plan that waits for approval (its steps all `PROPOSED`).
    proposed: bool,
    /// How many plans were accepted or revised.
    version: usize,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    waves: Vec<WaveMark>,
    open_wave: Option<u32>,
    finished: bool,
}

/// A step of the plan: its call, its state, the wave it ran (or would run) in.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Node {
    id: String,
    tool: Option<String>,
    description: Option<String>,
    category: Option<String>,
    #[schemars(schema_with = "openapi::any")]
    call: Value,
    /// The step's status (`PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `SKIPPED`,
    /// `WAITING_FOR_USER`), or `PROPOSED`.
    status: String,
    retrying: bool,
    attempts: u32,
    wave: u32,
    /// The wave is where the step would run, not where it ran.
    projected: bool,
    error: Option<ToolError>,
    handled: bool,
    reason: Option<String>,
    #[schemars(schema_with = "openapi::any")]
    output: Option<Value>,
    /// The ids of the step's calls.
    calls: Vec<String>,
}

/// An edge between two steps: `order` (`_dependsOn`) or `data` (the references read).
#[derive(Serialize, JsonSchema)]
pub(crate) struct Edge {
    from: String,
    to: String,
    kind: EdgeKind,
    reads: Vec<String>,
}

#[derive(Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EdgeKind {
    Order,
    Data,
}

/// A wave that began: at which event, and whether it finished.
#[derive(Serialize, JsonSchema)]
pub(crate) struct WaveMark {
    wave: u32,
    seq: u64,
    finished: bool,
}

/// The plan as a graph: a node per step with its state and wave, an edge per dependency. While
/// a plan waits for approval it is the proposed plan, every step pending.
fn graph(st: &State, h: &History) -> Option<PlanGraph> {
    let proposed = st.plan().is_none();
    let (plan, runs): (&Plan, Vec<weft_core::state::StepRun>) =
        match (st.plan(), &st.turn().waiting()) {
            (Some(p), _) => (&p.plan, p.steps.clone()),
            (None, Some(w)) if w.plan.is_some() => match &w.plan {
                Some(p) => (p, vec![Default::default(); p.steps.len()]),
                None => return None,
            },
            _ => return None,
        };
    let index = plan.index();
    let writers = WriteIndex::new(plan);
    // Edges, merged per pair of steps: `order` for `_dependsOn`, `data` with the paths read.
    let mut edges: BTreeMap<(usize, usize), (bool, Vec<String>)> = BTreeMap::new();
    for (i, s) in plan.steps.iter().enumerate() {
        for d in &s.depends_on {
            if let Some(&j) = index.get(d.as_str())
                && j != i
            {
                edges.entry((j, i)).or_default().0 = true;
            }
        }
        for r in s.reads() {
            let from: Vec<usize> = match &r.root {
                RefRoot::Input | RefRoot::Item => Vec::new(),
                RefRoot::Step(id) => index.get(id.as_str()).copied().into_iter().collect(),
                RefRoot::State => writers.writers_of(&r.path),
            };
            for j in from.into_iter().filter(|&j| j != i) {
                let label = r.to_string();
                let e = edges.entry((j, i)).or_default();
                if !e.1.contains(&label) {
                    e.1.push(label);
                }
            }
        }
    }
    // Columns: the wave a step ran in; a step that has not run goes one wave after the latest
    // of its dependencies (and after the waves that ran).
    let last_wave = h.waves.keys().next_back().copied().unwrap_or(0);
    let mut column: Vec<u32> = vec![0; plan.steps.len()];
    let mut projected: Vec<bool> = vec![false; plan.steps.len()];
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); plan.steps.len()];
    for &(j, i) in edges.keys() {
        deps[i].push(j);
    }
    for i in topological(&deps) {
        match h.wave_of.get(&plan.steps[i].id) {
            Some(&w) if !proposed => column[i] = w,
            _ => {
                let after = deps[i].iter().map(|&j| column[j]).max().unwrap_or(0);
                // A step settled without running (skipped, or failed before it could start)
                // has no wave to come: it stays beside what it needed, within the waves run.
                let settled = !proposed
                    && matches!(
                        runs[i].status,
                        weft_core::state::StepStatus::Skipped
                            | weft_core::state::StepStatus::Failed
                    );
                if settled && last_wave > 0 {
                    column[i] = (after + 1).min(last_wave);
                } else {
                    column[i] = after.max(last_wave) + 1;
                    projected[i] = true;
                }
            }
        }
    }
    let nodes: Vec<Node> = plan
        .steps
        .iter()
        .zip(&runs)
        .enumerate()
        .map(|(i, (s, r))| {
            let status = if proposed {
                "PROPOSED".to_owned()
            } else {
                serde_json::to_value(r.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            };
            let retrying = st.plan().is_some_and(|p| p.retrying().contains(&i));
            Node {
                id: s.id.clone(),
                tool: s.tool.clone(),
                description: s.description.clone(),
                category: s.category.clone(),
                call: s.to_call(),
                status,
                retrying,
                attempts: r.attempts,
                wave: column[i],
                projected: projected[i],
                error: r.error.clone(),
                handled: r.handled,
                reason: r.reason.clone(),
                output: r.output.clone(),
                calls: h
                    .cards
                    .iter()
                    .filter(|c| c.step.as_deref() == Some(s.id.as_str()))
                    .map(|c| c.call_id.clone())
                    .collect(),
            }
        })
        .collect();
    let edges: Vec<Edge> = edges
        .iter()
        .map(|(&(j, i), (order, reads))| Edge {
            from: plan.steps[j].id.clone(),
            to: plan.steps[i].id.clone(),
            kind: if reads.is_empty() && *order {
                EdgeKind::Order
            } else {
                EdgeKind::Data
            },
            reads: reads.clone(),
        })
        .collect();
    let waves: Vec<WaveMark> = h
        .waves
        .iter()
        .map(|(&wave, &(seq, finished))| WaveMark {
            wave,
            seq,
            finished,
        })
        .collect();
    Some(PlanGraph {
        proposed,
        version: h
            .plans
            .iter()
            .filter(|p| p.kind != PlanVersionKind::Rejected)
            .count(),
        nodes,
        edges,
        waves,
        open_wave: st.waves().open,
        finished: st.status() != SessionStatus::Running
            || st.phase() != weft_core::state::Phase::Executing,
    })
}

/// The steps in an order where each comes after its dependencies (a valid plan has no cycle;
/// steps on one, if any, come last in plan order).
fn topological(deps: &[Vec<usize>]) -> Vec<usize> {
    let n = deps.len();
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut open: Vec<usize> = deps.iter().map(Vec::len).collect();
    for (i, ds) in deps.iter().enumerate() {
        for &j in ds {
            dependants[j].push(i);
        }
    }
    let mut ready: std::collections::VecDeque<usize> = (0..n).filter(|&i| open[i] == 0).collect();
    let mut out = Vec::with_capacity(n);
    let mut done = vec![false; n];
    while let Some(i) = ready.pop_front() {
        out.push(i);
        done[i] = true;
        for &d in &dependants[i] {
            open[d] -= 1;
            if open[d] == 0 {
                ready.push_back(d);
            }
        }
    }
    out.extend((0..n).filter(|&i| !done[i]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The view as JSON, as the route sends it.
    fn view(rec: &SessionRecord, log: &[Envelope], at: Option<u64>) -> Value {
        serde_json::to_value(session(rec, log, at, false, &|_| None)).unwrap_or_default()
    }

    fn env(seq: u64, event: Event) -> Envelope {
        Envelope {
            seq,
            ts: 1_700_000_000_000 + seq as i64,
            v: weft_core::EVENT_VERSION,
            epoch: 0,
            event,
        }
    }

    fn record(last_seq: u64) -> SessionRecord {
        SessionRecord {
            id: "s".into(),
            user_id: Some("alice".into()),
            agent: "desk".into(),
            reference_id: None,
            metadata: json!({}),
            parent_id: None,
            status: SessionStatus::Running,
            created_at: 0,
            updated_at: 0,
            last_seq,
        }
    }

    fn plan() -> Plan {
        Plan::from_value(&json!([
            {"_id": "a", "_tool": "t", "_outputPath": "†state.x"},
            {"_id": "b", "_tool": "t", "v": "†state.x", "_outputPath": "†state.y"},
            {"_id": "c", "_tool": "t", "_dependsOn": ["a"]},
        ]))
        .unwrap_or_default()
    }

    fn log() -> Vec<Envelope> {
        vec![
            env(
                1,
                Event::SessionStarted {
                    session_id: "s".into(),
                    agent: "desk".into(),
                    input: json!({}),
                    mode: Some(weft_core::agent::Mode::Plan),
                    parent_id: None,
                },
            ),
            env(
                2,
                Event::TurnStarted {
                    task: "go".into(),
                    input: Value::Null,
                },
            ),
            env(3, Event::PlanAccepted { plan: plan() }),
            env(
                4,
                Event::WaveStarted {
                    wave: 1,
                    steps: vec!["a".into()],
                },
            ),
            env(
                5,
                Event::StepStarted {
                    step: "a".into(),
                    attempt: 1,
                },
            ),
            env(
                6,
                Event::ToolCallStarted {
                    call_id: "k1".into(),
                    step: Some("a".into()),
                    tool: "t".into(),
                    args: json!({}),
                    attempt: 1,
                    idempotency_key: "s:1:0".into(),
                    item: None,
                    untrusted_from: Vec::new(),
                },
            ),
            env(
                7,
                Event::ToolCallFinished {
                    call_id: "k1".into(),
                    outcome: ToolOutcome::Error {
                        error: ToolError::new("unknown_outcome", "the process stopped"),
                    },
                    duration_ms: 12,
                },
            ),
            env(
                8,
                Event::StepFailed {
                    step: "a".into(),
                    error: ToolError::new("unknown_outcome", "the process stopped"),
                    handled: false,
                },
            ),
        ]
    }

    fn node<'v>(v: &'v Value, id: &str) -> &'v Value {
        v["plan"]["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["id"] == id))
            .unwrap_or(&Value::Null)
    }

    #[test]
    fn the_graph_has_data_and_order_edges_and_waves() {
        let log = log();
        let v = view(&record(8), &log, None);
        let edges = v["plan"]["edges"].as_array().cloned().unwrap_or_default();
        assert!(
            edges.contains(&json!({"from": "a", "to": "b", "kind": "data", "reads": ["†state.x"]})),
            "{edges:?}"
        );
        assert!(
            edges.contains(&json!({"from": "a", "to": "c", "kind": "order", "reads": []})),
            "{edges:?}"
        );
        assert_eq!(node(&v, "a")["status"], "FAILED");
        assert_eq!(node(&v, "a")["wave"], 1);
        assert_eq!(node(&v, "a")["projected"], false);
        // Steps that have not run are drawn one wave after their dependencies.
        assert_eq!(node(&v, "b")["wave"], 2);
        assert_eq!(node(&v, "b")["projected"], true);
        let card = &v["calls"][0];
        assert_eq!(
            (card["status"].as_str(), card["duration_ms"].as_u64()),
            (Some("unknown_outcome"), Some(12))
        );
    }

    #[test]
    fn the_view_at_an_earlier_event_is_the_state_then() {
        let log = log();
        let v = view(&record(8), &log, Some(5));
        assert_eq!(node(&v, "a")["status"], "RUNNING");
        assert_eq!(v["calls"].as_array().map(Vec::len), Some(0));
        assert_eq!(v["event"]["type"], "step_started");
        assert_eq!(v["latest"], false);
        let v = view(&record(8), &log, Some(2));
        assert!(v["plan"].is_null());
        assert_eq!(v["task"], "go");
    }

    #[test]
    fn a_plan_waiting_for_approval_is_drawn_as_proposed() {
        let mut log = log();
        log.truncate(2);
        log.push(env(
            3,
            Event::WaitingForUser {
                request: InputRequest {
                    kind: "plan_approval".into(),
                    question: "Approve?".into(),
                    step: None,
                    tool: None,
                    missing: Vec::new(),
                    partial_call: Value::Null,
                    plan: Some(plan()),
                    call_id: None,
                },
            },
        ));
        let v = view(&record(3), &log, None);
        assert_eq!(v["plan"]["proposed"], true);
        assert_eq!(node(&v, "a")["status"], "PROPOSED");
        assert_eq!(node(&v, "b")["wave"], 2);
        assert_eq!(v["waiting"]["kind"], "plan_approval");
    }

    #[test]
    fn a_replan_says_what_it_changed() {
        let mut log = log();
        let revised = Plan::from_value(&json!([
            {"_id": "b", "_tool": "t", "v": 1},
            {"_id": "d", "_tool": "t"},
        ]))
        .unwrap_or_default();
        log.push(env(
            9,
            Event::PlanRevised {
                plan: revised,
                reason: "a failed".into(),
            },
        ));
        let v = view(&record(9), &log, None);
        let changes = &v["plans"][1]["changes"];
        assert_eq!(changes["added"][0]["_id"], "d", "{changes}");
        assert_eq!(changes["removed"][0]["_id"], "c", "{changes}");
        assert_eq!(changes["changed"][0]["id"], "b", "{changes}");
        assert_eq!(v["plan"]["version"], 2);
    }
}
