//! The workloads. Each builds its agent or plan, a store, runs, checks that the session ended as
//! it must (a benchmark of a run that failed early would be meaningless) and reports figures.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::task::JoinSet;
use weft_core::agent::AgentSpec;
use weft_core::graph::{ValidateOptions, validate};
use weft_core::{Limits, Plan, SessionStatus, State};
use weft_host::telemetry::{Live, Telemetry};
use weft_model::{ScriptedModel, ScriptedReply};
use weft_runtime::{Agent, Observer, Runtime, SessionInfo};
use weft_store::{Durability, RamStore, SessionLog, SqliteStore, Store};
use weft_tools::{Echo, Registry, Tool, ToolContext};

use crate::{BenchError, Report, db_size_mb, peak_rss_mb};

/// Whether the SQLite files of the workloads are written at `full` (the default) or `normal`.
static NORMAL: AtomicBool = AtomicBool::new(false);

/// The durability every workload's SQLite store writes at from now on.
pub fn set_durability(d: Durability) {
    NORMAL.store(d == Durability::Normal, Ordering::Relaxed);
}

/// The telemetry `react` and `concurrent` export their sessions' spans and metrics with (the
/// standard `OTEL_*` variables; off when none is set).
static TELEMETRY: std::sync::OnceLock<Telemetry> = std::sync::OnceLock::new();

/// Sets the telemetry of the workloads (once).
pub fn set_telemetry(t: Telemetry) {
    let _ = TELEMETRY.set(t);
}

fn telemetry() -> Telemetry {
    TELEMETRY.get().cloned().unwrap_or_default()
}

/// ` otlp=on` when the workloads' sessions are exported (the labels are unchanged otherwise).
fn otlp_label() -> &'static str {
    if telemetry().on() { " otlp=on" } else { "" }
}

/// The runtime of a workload, the only one the benchmarks build
/// ([`weft_host::hosted::unleased`]): `store`, `tools` and `limits`, nothing counted against a
/// user's quota and no lease (a workload measures the runtime, not hosting), and `telemetry` the
/// observer of its session's live telemetry when the workload is followed (`traced`).
pub fn runtime<S: Store>(
    store: Arc<S>,
    tools: Arc<Registry>,
    limits: Limits,
    telemetry: Option<Observer>,
) -> Runtime<S> {
    weft_host::hosted::unleased(store, (tools, limits, None), telemetry).build()
}

/// A runtime for the new session `id`, followed live by the telemetry when it is on (as a
/// worker follows each session it drives).
async fn traced<S: Store + 'static>(
    store: Arc<S>,
    tools: Arc<Registry>,
    id: &str,
) -> (Runtime<S>, Option<Live>) {
    let live = Live::start(
        &telemetry(),
        Arc::clone(&store),
        id,
        (weft_host::telemetry::Provider::Of(None), true),
        None,
    )
    .await;
    let rt = runtime(
        store,
        tools,
        Limits::default(),
        live.as_ref().map(Live::observer),
    );
    (rt, live)
}

/// The durability the workloads write at.
pub fn durability() -> Durability {
    if NORMAL.load(Ordering::Relaxed) {
        Durability::Normal
    } else {
        Durability::Full
    }
}

/// The tool a ReAct workload calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolKind {
    /// The built-in `echo`: idempotent and done at once, so its start and result share one
    /// append with the model's reply (weft's best case).
    Echo,
    /// An in-process tool that is not idempotent (it appends to a ledger): its start is stored
    /// before it runs, its result in a second append.
    Ledger,
    /// A command tool (`sh -c cat`, a process per call, not idempotent).
    Command,
}

impl ToolKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Echo => "echo",
            Self::Ledger => "ledger",
            Self::Command => "command",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "echo" => Some(Self::Echo),
            "ledger" => Some(Self::Ledger),
            "command" => Some(Self::Command),
            _ => None,
        }
    }
}

/// An in-process tool that is not idempotent: it records each call in a ledger.
#[derive(Debug)]
struct Ledger {
    info: weft_core::ToolInfo,
    entries: Mutex<Vec<Value>>,
}

impl Tool for Ledger {
    fn info(&self) -> &weft_core::ToolInfo {
        &self.info
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, weft_core::ToolError> {
        let mut entries = self
            .entries
            .lock()
            .map_err(|_| weft_core::ToolError::new("io", "the ledger was poisoned"))?;
        entries.push(args.clone());
        Ok(
            json!({"entry": entries.len(), "text": args.get("text").cloned().unwrap_or(Value::Null)}),
        )
    }
}

/// The registry of a workload calling `tool`, under the name `echo` (the scripts call `echo`).
pub fn tools_for(tool: ToolKind) -> Result<Arc<Registry>, BenchError> {
    match tool {
        ToolKind::Echo => echo_tools(),
        ToolKind::Ledger => {
            let mut reg = Registry::new();
            reg.register(Ledger {
                info: weft_core::ToolInfo {
                    name: "echo".into(),
                    description: "Records the text in a ledger.".into(),
                    category: None,
                    input_schema: json!({"type": "object"}),
                    idempotent: false,
                    parallel: false,
                    requires_approval: false,
                    source: "bench".into(),
                    output_schema: None,
                },
                entries: Mutex::new(Vec::new()),
            })?;
            Ok(Arc::new(reg))
        }
        ToolKind::Command => {
            let yaml = "name: bench\ntools:\n  - name: echo\n    description: Echoes its arguments (a process).\n    command: [\"sh\", \"-c\", \"cat\"]\n";
            let spec = AgentSpec::parse("bench.yaml", yaml)
                .map_err(|e| BenchError::Setup(e.to_string()))?;
            Ok(Arc::new(Registry::from_agent(&spec, Path::new("."))?))
        }
    }
}

/// Where a workload keeps its sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    /// A SQLite file in a fresh temporary directory.
    Sqlite,
}

impl StoreKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
        }
    }
}

/// The registry every workload uses: the built-in `echo`.
pub fn echo_tools() -> Result<Arc<Registry>, BenchError> {
    let mut reg = Registry::new();
    reg.register(Echo::default())?;
    Ok(Arc::new(reg))
}

/// A ReAct agent that may take `max_iterations` model turns per task, answering from `replies`.
pub fn react_agent(
    tools: &Arc<Registry>,
    replies: Vec<ScriptedReply>,
    max_iterations: u32,
) -> Result<Agent, BenchError> {
    // The scripts repeat one call on purpose (the `ledger` and `command` tools are not
    // idempotent): `repeats: allow` lets each run, as the workloads measure.
    let yaml = format!(
        "name: bench\nmode: react\ninstructions: Call echo until told otherwise, then answer.\nrepeats: allow\nlimits:\n  max_iterations: {max_iterations}\n"
    );
    let spec =
        AgentSpec::parse("bench.yaml", &yaml).map_err(|e| BenchError::Setup(e.to_string()))?;
    let model = Arc::new(ScriptedModel::new("bench", replies));
    Ok(Agent::new(
        &spec,
        Arc::clone(tools),
        model,
        &Value::Null,
        &Value::Null,
    )?)
}

/// `n` echo calls then the answer `done`, each reply after `delay_ms` of thinking.
fn calls_then_answer(n: u32, delay_ms: u64) -> Vec<ScriptedReply> {
    let mut call = ScriptedReply::tool_call("echo", json!({"text": "step"})).delayed(delay_ms);
    call.repeat = Some(n);
    let mut out = Vec::new();
    if n > 0 {
        out.push(call);
    }
    out.push(ScriptedReply::text("done").delayed(delay_ms));
    out
}

fn expect_answer(workload: &str, state: &State) -> Result<(), BenchError> {
    if state.status() == SessionStatus::Completed && state.turn().answer() == Some("done") {
        Ok(())
    } else {
        Err(BenchError::Outcome {
            workload: workload.to_owned(),
            message: format!(
                "the session ended {:?} with answer {:?} (error: {:?}) instead of completing with `done`",
                state.status(),
                state.turn().answer(),
                state.turn().error()
            ),
        })
    }
}

/// A fresh SQLite store in a temporary directory (removed when the guard is dropped).
pub async fn temp_sqlite() -> Result<(tempfile::TempDir, PathBuf, SqliteStore), BenchError> {
    let dir = tempfile::tempdir().map_err(|e| BenchError::Io {
        what: "create a temporary directory".into(),
        source: e,
    })?;
    let path = dir.path().join("weft.db");
    let store = SqliteStore::open_with(&path, durability()).await?;
    Ok((dir, path, store))
}

/// Checkpoints the log into the database and returns its size in MB.
async fn settled_size(store: &SqliteStore, path: &Path) -> Result<f64, BenchError> {
    store.checkpoint().await?;
    db_size_mb(path)
}

/// Runs one ReAct session of `n` echo calls; returns the elapsed seconds and the final state.
async fn react_run<S: Store + 'static>(store: Arc<S>, n: u32) -> Result<(f64, State), BenchError> {
    react_run_with(store, n, ToolKind::Echo).await
}

/// Runs one ReAct session of `n` calls of `tool`.
async fn react_run_with<S: Store + 'static>(
    store: Arc<S>,
    n: u32,
    tool: ToolKind,
) -> Result<(f64, State), BenchError> {
    let tools = tools_for(tool)?;
    let agent = react_agent(&tools, calls_then_answer(n, 0), n + 5)?;
    let id = weft_runtime::new_session_id();
    let (rt, live) = traced(store, tools, &id).await;
    let info = SessionInfo {
        id: Some(id),
        ..SessionInfo::default()
    };
    let t = Instant::now();
    let session = rt.run_agent(&agent, info, "go", Value::Null).await?;
    let secs = t.elapsed().as_secs_f64();
    if let Some(l) = live {
        l.finish().await;
    }
    expect_answer("react", &session.state)?;
    Ok((secs, session.state))
}

/// `react N`: one ReAct run of `n` echo calls then an answer.
pub async fn react(n: u32, kind: StoreKind) -> Result<Report, BenchError> {
    react_with(n, kind, ToolKind::Echo).await
}

/// `react N --tool T`: one ReAct run of `n` calls of `tool` then an answer.
pub async fn react_with(n: u32, kind: StoreKind, tool: ToolKind) -> Result<Report, BenchError> {
    let label = match tool {
        ToolKind::Echo => format!("react n={n} store={}{}", kind.name(), otlp_label()),
        t => format!(
            "react n={n} store={} tool={}{}",
            kind.name(),
            t.name(),
            otlp_label()
        ),
    };
    let (secs, state, db) = match kind {
        StoreKind::Memory => {
            let (s, st) = react_run_with(Arc::new(RamStore::new()), n, tool).await?;
            (s, st, 0.0)
        }
        StoreKind::Sqlite => {
            let (_dir, path, store) = temp_sqlite().await?;
            let store = Arc::new(store);
            let (s, st) = react_run_with(Arc::clone(&store), n, tool).await?;
            let db = settled_size(&store, &path).await?;
            (s, st, db)
        }
    };
    let per = if n == 0 { secs } else { secs / f64::from(n) };
    Ok(Report::new(label)
        .with("total_ms", secs * 1e3)
        .with("us_per_iter", per * 1e6)
        .with("db_mb", db)
        .with("events", state.seq() as f64))
}

/// `concurrent M K`: `m` sessions at once, each `k` echo calls, the model thinking 50 ms per
/// call, all in one SQLite file (or, with [`StoreKind::Memory`], in memory: the runtime's own
/// cost without storage).
pub async fn concurrent(m: u32, k: u32, kind: StoreKind) -> Result<Report, BenchError> {
    const THINK_MS: u64 = 50;
    let mut appends_per_commit = 0.0;
    let (secs, db) = match kind {
        StoreKind::Memory => (
            concurrent_run(Arc::new(RamStore::new()), m, k, THINK_MS).await?,
            0.0,
        ),
        StoreKind::Sqlite => {
            let (_dir, path, store) = temp_sqlite().await?;
            let store = Arc::new(store);
            let secs = concurrent_run(Arc::clone(&store), m, k, THINK_MS).await?;
            let w = store.write_stats();
            appends_per_commit = w.appends as f64 / w.commits.max(1) as f64;
            (secs, settled_size(&store, &path).await?)
        }
    };
    let ideal = (f64::from(k) + 1.0) * THINK_MS as f64 / 1e3;
    Ok(Report::new(format!(
        "concurrent m={m} k={k} store={}{}",
        kind.name(),
        otlp_label()
    ))
    .with("wall_s", secs)
    .with("ideal_s", ideal)
    .with("x_ideal", secs / ideal)
    .with("runs_per_s", f64::from(m) / secs)
    .with("rss_mb", peak_rss_mb().unwrap_or(0.0))
    .with("db_mb", db)
    .with("appends_per_commit", appends_per_commit))
}

/// Runs `m` sessions at once on `store`; returns the elapsed seconds.
async fn concurrent_run<S: Store + 'static>(
    store: Arc<S>,
    m: u32,
    k: u32,
    think_ms: u64,
) -> Result<f64, BenchError> {
    let tools = echo_tools()?;
    let agent = Arc::new(react_agent(&tools, calls_then_answer(k, think_ms), k + 5)?);
    let t = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..m {
        let agent = Arc::clone(&agent);
        let store = Arc::clone(&store);
        let tools = Arc::clone(&tools);
        // A runtime per session, as a worker has: it carries the session's telemetry.
        set.spawn(async move {
            let id = weft_runtime::new_session_id();
            let (rt, live) = traced(store, tools, &id).await;
            let info = SessionInfo {
                id: Some(id),
                ..SessionInfo::default()
            };
            let s = rt.run_agent(&agent, info, "go", Value::Null).await?;
            if let Some(l) = live {
                l.finish().await;
            }
            expect_answer("concurrent", &s.state)
        });
    }
    while let Some(done) = set.join_next().await {
        done.map_err(|e| BenchError::Setup(format!("a session task failed: {e}")))??;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The script of `turns` turns of one echo call and an answer each.
fn turns_script(turns: u32) -> Vec<ScriptedReply> {
    (0..turns).flat_map(|_| calls_then_answer(1, 0)).collect()
}

/// A user message like the peer's: `turn i ` and 200 `x`.
fn turn_message(i: u32) -> String {
    format!("turn {i} {}", "x".repeat(200))
}

/// `growth T`: one session, `turns` user turns of one echo call each, in SQLite.
pub async fn growth(turns: u32) -> Result<Report, BenchError> {
    let (_dir, path, store) = temp_sqlite().await?;
    let store = Arc::new(store);
    let tools = echo_tools()?;
    let agent = react_agent(&tools, turns_script(turns), 5)?;
    let rt = runtime(Arc::clone(&store), tools, Limits::default(), None);
    let t = Instant::now();
    let mut last_turn = 0.0;
    let mut session = None;
    for i in 0..turns {
        let ti = Instant::now();
        match session.as_mut() {
            None => {
                session = Some(
                    rt.run_agent(
                        &agent,
                        SessionInfo::default(),
                        &turn_message(i),
                        Value::Null,
                    )
                    .await?,
                );
            }
            Some(s) => {
                rt.run_task(&agent, s, &turn_message(i), Value::Null)
                    .await?
            }
        }
        last_turn = ti.elapsed().as_secs_f64();
        if let Some(s) = &session {
            expect_answer("growth", &s.state)?;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let events = session.as_ref().map_or(0, |s| s.state.seq());
    let db = settled_size(&store, &path).await?;
    Ok(Report::new(format!("growth turns={turns} store=sqlite"))
        .with("db_mb", db)
        .with("ms_per_turn", secs / f64::from(turns.max(1)) * 1e3)
        .with("last_turn_ms", last_turn * 1e3)
        .with("events", events as f64))
}

/// A plan of `n` echo steps: linear (each reads the one before through `†state`) or wide (all
/// independent).
pub fn echo_plan(n: u32, linear: bool) -> Result<Plan, BenchError> {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            let text = if !linear || i == 0 {
                "†input.text".to_owned()
            } else {
                format!("†state.v{}.text", i - 1)
            };
            json!({"_id": format!("s{i}"), "_tool": "echo", "text": text, "_outputPath": format!("†state.v{i}")})
        })
        .collect();
    Plan::from_value(&Value::Array(steps)).map_err(|problems| {
        BenchError::Setup(format!(
            "the generated plan is invalid: {}",
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ))
    })
}

/// Limits that let a plan of `n` steps run to its end: a wave per step, and a wide wave.
pub fn plan_limits(n: u32) -> Limits {
    Limits {
        max_waves: n + 10,
        max_parallel: usize::try_from(n).unwrap_or(usize::MAX).max(1),
        ..Limits::default()
    }
}

async fn run_plan_on<S: Store>(store: Arc<S>, plan: Plan, n: u32) -> Result<f64, BenchError> {
    let rt = runtime(store, echo_tools()?, plan_limits(n), None);
    let t = Instant::now();
    let session = rt.run_plan("bench", plan, json!({"text": "hello"})).await?;
    let secs = t.elapsed().as_secs_f64();
    let done = session
        .state
        .plan()
        .as_ref()
        .map_or(0, |p| p.steps.iter().filter(|s| s.output.is_some()).count());
    if session.state.status() != SessionStatus::Completed || done != n as usize {
        return Err(BenchError::Outcome {
            workload: "plan".into(),
            message: format!(
                "the plan run ended {:?} with {done} of {n} steps done (error: {:?})",
                session.state.status(),
                session.state.turn().error()
            ),
        });
    }
    Ok(secs)
}

/// `plan N`: validation and execution of a linear and a wide plan of `n` echo steps, with the
/// memory store and with SQLite.
pub async fn plan(n: u32) -> Result<Vec<Report>, BenchError> {
    let tools = echo_tools()?;
    let input = json!({"text": "hello"});
    let mut out = Vec::new();
    for linear in [true, false] {
        let shape = if linear { "linear" } else { "wide" };
        let plan = echo_plan(n, linear)?;
        let t = Instant::now();
        let problems = validate(
            &plan,
            tools.as_ref(),
            &ValidateOptions {
                input: Some(&input),
                require_tools: true,
                ..ValidateOptions::default()
            },
        );
        let validate_s = t.elapsed().as_secs_f64();
        if !problems.is_empty() {
            return Err(BenchError::Outcome {
                workload: "plan".into(),
                message: format!("validation found {} problems", problems.len()),
            });
        }
        let mem_s = run_plan_on(Arc::new(RamStore::new()), plan.clone(), n).await?;
        let (_dir, _path, store) = temp_sqlite().await?;
        let sql_s = run_plan_on(Arc::new(store), plan, n).await?;
        let per = |s: f64| s / f64::from(n.max(1)) * 1e6;
        out.push(
            Report::new(format!("plan n={n} shape={shape}"))
                .with("validate_us_per_step", per(validate_s))
                .with("memory_us_per_step", per(mem_s))
                .with("sqlite_us_per_step", per(sql_s))
                .with("sqlite_total_ms", sql_s * 1e3),
        );
    }
    Ok(out)
}

/// The context budget of `resume`'s agent (`limits.max_context_tokens`): its conversation is
/// compacted as it grows, as a long session's must be for a model to take it.
pub const RESUME_CONTEXT_TOKENS: u32 = 8000;

/// `resume`'s agent: `react_agent` with a context budget, whose compactions the scripted model
/// answers with a short summary.
fn compacting_agent(
    tools: &Arc<Registry>,
    replies: Vec<ScriptedReply>,
    max_iterations: u32,
) -> Result<Agent, BenchError> {
    let yaml = format!(
        "name: bench\nmode: react\ninstructions: Call echo until told otherwise, then answer.\nlimits:\n  max_iterations: {max_iterations}\n  max_context_tokens: {RESUME_CONTEXT_TOKENS}\n"
    );
    let spec =
        AgentSpec::parse("bench.yaml", &yaml).map_err(|e| BenchError::Setup(e.to_string()))?;
    let mut summary = ScriptedReply::text("Summary: echo was called with `step`, again and again.");
    summary.repeat = Some(max_iterations);
    let model = Arc::new(ScriptedModel::keyed(
        "bench",
        [
            (weft_model::Purpose::React, replies),
            (weft_model::Purpose::Compact, vec![summary]),
        ]
        .into_iter()
        .collect(),
    ));
    Ok(Agent::new(
        &spec,
        Arc::clone(tools),
        model,
        &Value::Null,
        &Value::Null,
    )?)
}

/// `resume E`: a ReAct session of at least `events` events in SQLite (its conversation
/// compacted within [`RESUME_CONTEXT_TOKENS`]), loaded afresh (a new store handle) three ways,
/// and continued by one more turn of one tool call.
pub async fn resume(events: u64) -> Result<Report, BenchError> {
    // Events per iteration of a ReAct turn, measured rather than assumed.
    let (_, small) = react_run(Arc::new(RamStore::new()), 10).await?;
    let (_, big) = react_run(Arc::new(RamStore::new()), 20).await?;
    let per_iter = (big.seq().saturating_sub(small.seq()) / 10).max(1);
    let fixed = small.seq().saturating_sub(per_iter * 10);
    let n = u32::try_from(events.saturating_sub(fixed).div_ceil(per_iter)).unwrap_or(u32::MAX);

    // Built at `normal` (how it was written does not change how it loads).
    let dir = tempfile::tempdir().map_err(|e| BenchError::Io {
        what: "create a temporary directory".into(),
        source: e,
    })?;
    let path = dir.path().join("weft.db");
    let store = SqliteStore::open_with(&path, Durability::Normal).await?;
    let tools = echo_tools()?;
    let mut script = calls_then_answer(n, 0);
    script.extend(calls_then_answer(1, 0));
    let agent = compacting_agent(&tools, script, n + 5)?;
    let id = {
        let rt = runtime(
            Arc::new(store.clone()),
            Arc::clone(&tools),
            Limits::default(),
            None,
        );
        let s = rt
            .run_agent(&agent, SessionInfo::default(), "go", Value::Null)
            .await?;
        expect_answer("resume", &s.state)?;
        s.id.clone()
    };
    store.checkpoint().await?;
    store.close().await;
    drop(store);

    let store = Arc::new(SqliteStore::open_with(&path, durability()).await?);
    // Before snapshots: the whole log read and folded. Then: the newest snapshot with the whole
    // conversation, and the events after it. Now: the snapshot with the conversation from its
    // window on. Each twice, in turn, the second of each reported (all then read a database the
    // first reads brought into memory).
    let (mut fold_s, mut whole_s, mut load_s) = (0.0, 0.0, 0.0);
    let mut loaded = None;
    let mismatch = |what: &str| BenchError::Outcome {
        workload: "resume".into(),
        message: format!("the state loaded {what} is not the fold of the log"),
    };
    for _ in 0..2 {
        let t = Instant::now();
        let (_, log) = store.load(&id).await?;
        let mut folded = State::fold(log.iter().map(|e| &e.event));
        fold_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let w = weft_runtime::load_state_holding(store.as_ref(), &id, weft_runtime::Hold::Whole)
            .await?;
        whole_s = t.elapsed().as_secs_f64();
        if w.state != folded {
            return Err(mismatch("from the snapshot, whole,"));
        }
        let t = Instant::now();
        let l = weft_runtime::load_state(store.as_ref(), &id).await?;
        load_s = t.elapsed().as_secs_f64();
        folded.forget_history_before(l.state.history().start());
        if l.state != folded {
            return Err(mismatch("from the snapshot's window"));
        }
        loaded = Some(l);
    }
    let (snapshot_at, tail, held, total) = loaded.map_or((0, 0, 0, 0), |l| {
        (
            l.snapshot.unwrap_or(0),
            l.folded,
            l.state.history().held().len(),
            l.state.history().len(),
        )
    });
    let rt = runtime(store, tools, agent.config.limits.clone(), None);
    let mut session = rt.load_session(&id).await?;
    let stored = session.state.seq();
    let t = Instant::now();
    rt.run_task(&agent, &mut session, "once more", Value::Null)
        .await?;
    let turn_s = t.elapsed().as_secs_f64();
    expect_answer("resume", &session.state)?;
    Ok(Report::new(format!("resume events={events} store=sqlite"))
        .with("events", stored as f64)
        .with("fold_ms", fold_s * 1e3)
        .with("whole_ms", whole_s * 1e3)
        .with("load_ms", load_s * 1e3)
        .with("snapshot_at", snapshot_at as f64)
        .with("events_after_snapshot", tail as f64)
        .with("messages", total as f64)
        .with("messages_held", held as f64)
        .with("load_us_per_event", load_s / stored.max(1) as f64 * 1e6)
        .with("next_turn_ms", turn_s * 1e3))
}
