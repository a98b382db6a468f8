//! `weft plan`: check, dry-run and run plans without a model.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use weft_core::engine::dry_run;
use weft_core::{Plan, SessionStatus};

use weft_host::hosted::Setup;
use weft_host::{Host, load};

use crate::{EXIT_FAILED, EXIT_USAGE};

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Validate a plan: exit 0, or exit 2 with every problem listed.
    Check(PlanArgs),
    /// Show the waves a plan would run in, without running any tool.
    DryRun(PlanArgs),
    /// Execute a plan; print the final State object as JSON. Exit 1 if a step failed.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The plan file (a JSON array of calls, or {"steps": [...]}).
    pub plan: PathBuf,
    /// The agent file that declares the tools.
    #[arg(long)]
    pub agent: PathBuf,
    /// The run's input: JSON text, or @FILE.
    #[arg(long)]
    pub input: Option<String>,
    /// Print machine-readable JSON.
    #[arg(long)]
    pub json: bool,
    /// Override the agent's max_parallel.
    #[arg(long)]
    pub max_parallel: Option<usize>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Print every event as a JSON line on stderr.
    #[arg(long)]
    pub events: bool,
    /// Override the agent's max_waves.
    #[arg(long)]
    pub max_waves: Option<u32>,
    /// The id of the new session (default: a new time-ordered UUID).
    #[arg(long)]
    pub id: Option<String>,
    /// The user the session belongs to (its sessions are theirs in `weft serve` and the playground).
    #[arg(long, env = "WEFT_USER")]
    pub user: Option<String>,
}

fn read_plan(
    path: &std::path::Path,
) -> Result<std::result::Result<Plan, Vec<weft_core::PlanProblem>>> {
    let text = std::fs::File::open(path)
        .and_then(weft_core::limits::read_text)
        .with_context(|| format!("cannot read plan file {}", path.display()))?;
    Ok(Plan::parse_str(&text))
}

fn report(path: &std::path::Path, problems: &[weft_core::PlanProblem]) -> u8 {
    eprintln!("plan {} has {} problem(s):", path.display(), problems.len());
    for p in problems {
        eprintln!("  - {p}");
    }
    EXIT_USAGE
}

pub async fn run<S: weft_store::Store>(host: &Host, store: Arc<S>, cmd: PlanCommand) -> Result<u8> {
    match cmd {
        PlanCommand::Check(a) => check(&a, false).await,
        PlanCommand::DryRun(a) => check(&a, true).await,
        PlanCommand::Run(a) => match prepare(a).await? {
            Ok(p) => execute(host, store, p).await,
            Err(code) => Ok(code),
        },
    }
}

/// A plan run whose agent, input and plan are read; nothing is stored yet.
pub struct Prepared {
    a: RunArgs,
    agent: load::LoadedAgent,
    input: serde_json::Value,
    plan: weft_core::Plan,
}

impl Prepared {
    /// The agent file's `durability:`.
    pub fn durability(&self) -> Option<weft_core::Durability> {
        self.agent.spec.durability
    }
}

/// Reads a plan run's agent, input and plan (before any store is opened, so a mistake leaves
/// none behind). `Err(code)`: the plan's problems were reported.
pub async fn prepare(a: RunArgs) -> Result<std::result::Result<Prepared, u8>> {
    let agent = load::agent(&a.plan.agent).await?;
    let input = crate::input::input(a.plan.input.as_deref())?;
    let plan = match read_plan(&a.plan.plan)? {
        Ok(p) => p,
        Err(problems) => return Ok(Err(report(&a.plan.plan, &problems))),
    };
    Ok(Ok(Prepared {
        a,
        agent,
        input,
        plan,
    }))
}

async fn check(a: &PlanArgs, show_waves: bool) -> Result<u8> {
    let agent = load::agent(&a.agent).await?;
    let input = a
        .input
        .as_deref()
        .map(|i| crate::input::input(Some(i)))
        .transpose()?;
    let mut plan = match read_plan(&a.plan)? {
        Ok(p) => p,
        Err(problems) => {
            if a.json {
                writeln!(
                    std::io::stdout(),
                    "{}",
                    serde_json::json!({"ok": false, "problems": problems})
                )?;
            }
            return Ok(report(&a.plan, &problems));
        }
    };
    let mut limits = agent.spec.limits.clone();
    if let Some(p) = a.max_parallel {
        limits.max_parallel = p.max(1);
    }
    let problems = weft_runtime::check_plan(&plan, &agent.tools, input.as_ref());
    if !problems.is_empty() {
        if a.json {
            writeln!(
                std::io::stdout(),
                "{}",
                serde_json::json!({"ok": false, "problems": problems})
            )?;
        }
        return Ok(report(&a.plan, &problems));
    }
    weft_core::engine::normalize(&mut plan, &agent.tools);
    let waves = dry_run(&plan, &limits);
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"ok": true, "steps": plan.steps.len(), "waves": waves})
        )?;
        return Ok(0);
    }
    if !show_waves {
        writeln!(
            out,
            "plan {} is valid: {} step(s) in {} wave(s)",
            a.plan.display(),
            plan.steps.len(),
            waves.len()
        )?;
        return Ok(0);
    }
    for w in &waves {
        let parallel = w.steps.len() > 1;
        writeln!(
            out,
            "wave {}{}:",
            w.wave,
            if parallel { " (parallel)" } else { "" }
        )?;
        for s in &w.steps {
            match &s.conditional {
                Some(c) => writeln!(out, "  {} {}  [conditional: {c}]", s.id, s.tool)?,
                None => writeln!(out, "  {} {}", s.id, s.tool)?,
            }
        }
    }
    Ok(0)
}

pub async fn execute<S: weft_store::Store>(host: &Host, store: Arc<S>, p: Prepared) -> Result<u8> {
    let Prepared {
        a,
        agent,
        input,
        plan,
    } = p;
    host.durability.for_agents(store.as_ref(), [&agent.spec]);
    let mut limits = agent.spec.limits.clone();
    if let Some(p) = a.plan.max_parallel {
        limits.max_parallel = p.max(1);
    }
    if let Some(w) = a.max_waves {
        limits.max_waves = w;
    }
    let redact = agent.redactor();
    let tools = Arc::new(agent.tools);
    let observer = if a.events {
        crate::cmd::run::json_lines()
    } else {
        crate::view::observer(&limits)
    };
    let watchers = weft_host::drive::Watchers {
        all: vec![observer, host.shutdown.observer()],
        own: Vec::new(),
    };
    let setup = Setup {
        provider: weft_host::telemetry::Provider::of(&agent.spec),
        new: true,
        tools,
        limits,
        redact,
    };
    let run = weft_host::task::PlanRun {
        plan,
        input,
        id: a.id.clone(),
        user: a.user.clone(),
        agent: agent.spec.name.clone(),
        file: Some(a.plan.agent.clone()),
    };
    let state = match weft_host::task::plan(host, store, setup, watchers, run).await? {
        weft_host::task::PlanRan::Done(state) => state,
        weft_host::task::PlanRan::Refused(problems) => return Ok(report(&a.plan.plan, &problems)),
        weft_host::task::PlanRan::Stopped(code) => return Ok(code),
    };
    let state = &state;
    writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(state.data())?
    )?;
    if state.status() == SessionStatus::Completed {
        return Ok(0);
    }
    report_failure(state);
    Ok(EXIT_FAILED)
}

/// Says on stderr why a plan run did not complete: each failed step (not handled by an error
/// path) with its error, and the run's own error.
pub fn report_failure(state: &weft_core::State) {
    if let Some(run) = state.plan() {
        for (s, r) in run.plan.steps.iter().zip(&run.steps) {
            if let Some(e) = r
                .error
                .as_ref()
                .filter(|_| r.status == weft_core::StepStatus::Failed && !r.handled)
            {
                eprintln!("step `{}` failed: {e}", s.id);
                if !e.detail.is_null() {
                    eprintln!("  detail: {}", e.detail);
                }
            }
        }
    }
    if let Some(e) = &state.turn().error() {
        eprintln!("run failed: {e}");
    }
}
