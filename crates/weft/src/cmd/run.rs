//! `weft run`: give an agent a task (or answer a waiting session) and show what it does.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use clap::Args;
use serde_json::Value;
use weft_core::{Envelope, SessionStatus};
use weft_runtime::{Agent, Observer};
use weft_store::Store;

use weft_host::drive::Before;
use weft_host::{Host, load, task};

use crate::EXIT_FAILED;

/// Exit code: the session waits for a person.
pub const EXIT_WAITING: u8 = 3;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent file (YAML or JSON).
    pub agent: PathBuf,
    /// The task (`-`: read it from stdin); with --session, the answer to the session's question
    /// (or a new task).
    pub task: String,
    /// Continue this session.
    #[arg(long)]
    pub session: Option<String>,
    /// The run's input: JSON text, or @FILE.
    #[arg(long)]
    pub input: Option<String>,
    /// Print every event as a JSON line on stderr.
    #[arg(long)]
    pub events: bool,
    /// The user the session belongs to (its sessions are theirs in `weft serve` and the playground).
    #[arg(long, env = "WEFT_USER")]
    pub user: Option<String>,
    /// An outside reference for the session (e.g. a chat id).
    #[arg(long)]
    pub reference: Option<String>,
    /// Session metadata as a JSON object (the instructions see it as session.metadata).
    #[arg(long)]
    pub metadata: Option<String>,
    /// The id of the new session (default: a new time-ordered UUID).
    #[arg(long)]
    pub id: Option<String>,
    /// A secret for this run, NAME=VALUE (overrides the agent file's source; prefer `env:`
    /// sources, since command lines are visible to other users of the machine).
    #[arg(long)]
    pub secret: Vec<String>,
    /// The run's budget, over the agent file's (or the session's): KEY=VALUE pairs separated by
    /// commas, KEY `[run.|session.]LIMIT` with LIMIT one of input_tokens, output_tokens,
    /// cost_usd, model_calls, tool_calls, tool_calls.TOOL, wall_time_secs; or `on_budget=stop|ask`.
    /// E.g. `--budget cost_usd=0.5,session.tool_calls=100`.
    #[arg(long, value_name = "KEY=VALUE,...")]
    pub budget: Option<String>,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The session that waits.
    pub id: String,
    /// The answer (`-`: read it from stdin).
    pub answer: String,
    /// Print every event as a JSON line on stderr.
    #[arg(long)]
    pub events: bool,
    /// A secret for this run, NAME=VALUE (as for `weft run`).
    #[arg(long)]
    pub secret: Vec<String>,
    /// A new budget for the session from here on, over the one it has (as for `weft run`):
    /// answer a session that reached its budget with a raised one to go on.
    #[arg(long, value_name = "KEY=VALUE,...")]
    pub budget: Option<String>,
}

/// `weft answer ID TEXT`: `weft run AGENT --session ID TEXT` with the agent file the session
/// was started with.
pub async fn answer<S: Store>(host: &Host, store: Arc<S>, a: AnswerArgs) -> Result<u8> {
    let rec = store.get(&a.id).await?;
    let agent = crate::cmd::sessions::agent_file_of(&rec.metadata).ok_or_else(|| {
        anyhow!(
            "session {} does not record its agent file; answer with `weft run AGENT --session {} \"...\"`",
            a.id,
            a.id
        )
    })?;
    run(
        host,
        store,
        RunArgs {
            agent,
            task: a.answer,
            session: Some(a.id),
            input: None,
            events: a.events,
            user: None,
            reference: None,
            metadata: None,
            id: None,
            secret: a.secret,
            budget: a.budget,
        },
    )
    .await
}

/// The task argument; `-` reads it from stdin.
fn task_text(arg: &str) -> Result<String> {
    if arg != "-" {
        return Ok(arg.to_owned());
    }
    let text = weft_core::limits::read_text(std::io::stdin())
        .map_err(|e| anyhow!("cannot read the task from stdin: {e}"))?;
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(anyhow!("the task read from stdin (`-`) is empty"));
    }
    Ok(text)
}

pub fn json_lines() -> Observer {
    Arc::new(|e: &Envelope| {
        if let Ok(line) = serde_json::to_string(e) {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    })
}

/// A run whose task, agent, input and metadata are read and checked; nothing is stored yet, so a
/// mistake found here leaves no store behind.
pub struct Prepared {
    pub args: RunArgs,
    pub limits: weft_core::Limits,
    pub redact: Option<weft_runtime::Redact>,
    pub tools: Arc<weft_tools::Registry>,
    pub agent: Agent,
    pub input: Value,
    pub metadata: Value,
    /// The agent file's `durability:`.
    pub durability: Option<weft_core::Durability>,
    /// The agent file's `budget:`.
    pub budget: Option<weft_core::budget::Budget>,
    /// Its model's provider (the spans name it).
    pub provider: weft_host::telemetry::Provider,
}

pub async fn run<S: Store>(host: &Host, store: Arc<S>, args: RunArgs) -> Result<u8> {
    let prepared = prepare(args).await?;
    execute(host, store, prepared).await
}

/// Reads the task and the agent file and builds the agent (exit 2 on a mistake).
pub async fn prepare(mut args: RunArgs) -> Result<Prepared> {
    args.task = task_text(&args.task)?;
    // Checked before anything is stored; applied over the session's budget when it runs.
    let overrides = args
        .budget
        .as_deref()
        .map(|b| weft_core::budget::Budget::default().with_overrides(b))
        .transpose()
        .map_err(|e| anyhow!("--budget: {e}"))?;
    let loaded = load::agent_with_secrets(&args.agent, &args.secret).await?;
    if let Some(b) = &overrides {
        let names = weft_core::ToolCatalog::tool_names(&loaded.tools);
        if let Some((scope, tool, why)) = b.unknown_tools(&names).into_iter().next() {
            loaded.tools.shutdown().await;
            return Err(anyhow!("--budget: {scope}.tool_calls.{tool}: {why}"));
        }
    }
    let input = crate::input::input(args.input.as_deref())?;
    let mut metadata: Value = match &args.metadata {
        None => Value::Object(serde_json::Map::new()),
        Some(m) => {
            serde_json::from_str(m).map_err(|e| anyhow!("--metadata is not valid JSON: {e}"))?
        }
    };
    if !metadata.is_object() {
        return Err(anyhow!("--metadata must be a JSON object"));
    }
    // Recorded so that `weft resume ID` knows the agent.
    weft_host::sessions::record_agent_file(&mut metadata, &args.agent);
    let in_file =
        |e: weft_runtime::RuntimeError| anyhow!("agent file {}: {e}", args.agent.display());
    let model =
        Agent::model_from_spec(&loaded.spec, load::base_dir(&args.agent)).map_err(in_file)?;
    let redact = loaded.redactor();
    let tools = Arc::new(loaded.tools);
    let agent =
        Agent::new(&loaded.spec, tools.clone(), model, &metadata, &input).map_err(in_file)?;
    Ok(Prepared {
        limits: loaded.spec.limits.clone(),
        args,
        redact,
        tools,
        agent,
        input,
        metadata,
        durability: loaded.spec.durability,
        budget: loaded.spec.budget.clone(),
        provider: weft_host::telemetry::Provider::of(&loaded.spec),
    })
}

/// Runs a prepared run on `store`.
pub async fn execute<S: Store>(host: &Host, store: Arc<S>, p: Prepared) -> Result<u8> {
    let Prepared {
        args,
        limits,
        redact,
        tools,
        agent,
        input,
        metadata,
        durability,
        budget,
        provider,
    } = p;
    host.durability.for_asked(store.as_ref(), [durability]);
    let watchers = weft_host::drive::Watchers {
        all: vec![
            if args.events {
                json_lines()
            } else {
                crate::view::observer(&limits)
            },
            host.shutdown.observer(),
        ],
        own: Vec::new(),
    };
    let given = task::Given {
        agent: &agent,
        setup: weft_host::hosted::Setup {
            provider,
            new: args.session.is_none(),
            tools: tools.clone(),
            limits,
            redact,
        },
        budget: budget.as_ref(),
        file: Some(&args.agent),
    };
    let request = task::Task {
        session: args.session.clone(),
        id: args.id.clone(),
        task: args.task.clone(),
        input,
        user: args.user.clone(),
        reference: args.reference.clone(),
        metadata,
        budget: args.budget.clone(),
    };
    let ran = task::run(host, store, given, watchers, request).await;
    tools.shutdown().await;
    match ran? {
        task::Ran::Done { state, id, before } => report(&state, &id, &args.agent, before.as_ref()),
        task::Ran::Stopped(code) => Ok(code),
    }
}

fn usage_text(input: u64, output: u64, cost: Option<f64>, tool_calls: u64) -> String {
    let cost = cost.map(|c| format!(", ${c:.4}")).unwrap_or_default();
    format!("{input} input + {output} output tokens{cost} · {tool_calls} tool call(s)")
}

/// The usage line. A new session's run is the whole session; a run that continues a session
/// (a follow-up task, an answer, a resume) shows its own share and the session's total.
pub fn usage_line(st: &weft_core::State, id: &str, before: Option<&Before>) -> String {
    let total = &st.usage().tokens;
    let whole = usage_text(
        total.input_tokens,
        total.output_tokens,
        total.cost_usd,
        st.calls().started,
    );
    match before {
        None => format!("usage: {whole} · session {id}"),
        Some(b) => {
            let cost = match (total.cost_usd, b.usage.cost_usd) {
                (Some(now), Some(then)) => Some((now - then).max(0.0)),
                (now, _) => now,
            };
            let run = usage_text(
                total.input_tokens.saturating_sub(b.usage.input_tokens),
                total.output_tokens.saturating_sub(b.usage.output_tokens),
                cost,
                b.tool_calls_since(st),
            );
            format!("usage: this run {run} · session total {whole} · session {id}")
        }
    }
}

/// Prints a session's outcome: the answer on stdout (last, after everything the view showed),
/// usage on stderr; the question and how to answer when it waits. `before`: what the session
/// had used when this run began, for a run that continues a session. Returns the exit code.
pub fn report(
    st: &weft_core::State,
    id: &str,
    agent: &std::path::Path,
    before: Option<&Before>,
) -> Result<u8> {
    let mut err = std::io::stderr().lock();
    let summary = usage_line(st, id, before);
    match st.status() {
        SessionStatus::Completed => {
            let answer = st.turn().answer().unwrap_or_default().to_owned();
            writeln!(std::io::stdout(), "{answer}")?;
            writeln!(err, "{summary}")?;
            Ok(0)
        }
        SessionStatus::WaitingForUser => {
            let q = st
                .turn()
                .waiting()
                .map(|w| w.question.clone())
                .unwrap_or_default();
            writeln!(std::io::stdout(), "{q}")?;
            let db = crate::store::db_flag();
            writeln!(
                err,
                "waiting for your answer (session {id}); continue with:"
            )?;
            let at_budget = st
                .turn()
                .waiting()
                .is_some_and(|w| w.kind == weft_core::budget::WAIT_KIND);
            if at_budget {
                writeln!(
                    err,
                    "  weft answer{db} {id} --budget KEY=VALUE \"go on\"   (a raised limit; or answer `stop`)"
                )?;
            } else {
                writeln!(err, "  weft answer{db} {id} \"<answer>\"")?;
            }
            writeln!(
                err,
                "  (or: weft run{db} {} --session {id} \"<answer>\")",
                crate::store::shell_word(&agent.display().to_string())
            )?;
            writeln!(err, "{summary}")?;
            Ok(EXIT_WAITING)
        }
        SessionStatus::Failed | SessionStatus::Running => {
            if let Some(a) = &st.turn().answer() {
                writeln!(std::io::stdout(), "{a}")?;
            }
            writeln!(
                err,
                "could not complete: {}",
                st.turn().error().unwrap_or("unknown reason")
            )?;
            writeln!(err, "{summary}")?;
            Ok(EXIT_FAILED)
        }
    }
}
