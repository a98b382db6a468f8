//! `weft sessions` and `weft resume`: list, inspect, follow, fork, prune and resume sessions.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use serde_json::json;
use weft_core::SessionStatus;
use weft_core::agent::parse_duration_str;
use weft_runtime::now_ms;
use weft_store::{ListFilter, Store};

use weft_host::Host;
use weft_host::ownership::{self, Asked};

use crate::cmd::run as run_cmd;
use weft_host::sessions::{fmt_time, fork};

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first.
    List {
        /// Only the sessions of this user (the `--user` they were started with).
        #[arg(long)]
        user: Option<String>,
        /// running, waiting_for_user, completed or failed.
        #[arg(long)]
        status: Option<String>,
        /// The most sessions listed.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Show a session: task, plan with statuses, answer, usage.
    Show {
        /// The session's id.
        id: String,
        /// Print the session's state as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's events as JSON lines.
    Events {
        /// The session's id.
        id: String,
        /// Keep printing new events until the session completes, fails or waits.
        #[arg(long)]
        follow: bool,
        /// Print JSON: what this command always prints (a JSON line per event); accepted as the
        /// other commands' `--json` is.
        #[arg(long)]
        json: bool,
    },
    /// Export a session's trace (OpenTelemetry GenAI spans derived from its events) over
    /// OTLP HTTP/protobuf, or print its spans as JSON lines.
    Trace {
        /// The session's id.
        id: String,
        /// The collector's OTLP HTTP endpoint (default: OTEL_EXPORTER_OTLP_ENDPOINT).
        #[arg(long, value_name = "URL")]
        otlp: Option<String>,
        /// Print the spans as JSON lines instead of exporting them.
        #[arg(long, conflicts_with = "otlp")]
        json: bool,
    },
    /// Start a new session from a session's state at event SEQ (the original is untouched).
    Fork {
        /// The session to fork.
        id: String,
        /// The event (its sequence number, as `weft sessions events` prints it) the fork starts
        /// after.
        #[arg(long)]
        at: u64,
        /// A budget of the fork's own, over the one in force at SEQ (KEY=VALUE,... as `weft run
        /// --budget` takes it); what the session spent until SEQ is kept.
        #[arg(long, value_name = "KEY=VALUE,...")]
        budget: Option<String>,
    },
    /// Delete completed and failed sessions not updated for DURATION (e.g. 30d, 12h).
    Prune {
        /// How long ago a session was last updated: `30d`, `12h`, `90m`, `500ms`.
        #[arg(long)]
        older_than: String,
        /// Also delete running sessions and sessions waiting for a person.
        #[arg(long)]
        include_active: bool,
        /// Only say which sessions would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
    /// Cancel a session: the process running it stops within a second, records its calls in
    /// flight as cancelled and ends the session as failed (a session no process runs is
    /// cancelled at once).
    Cancel {
        /// The session's id.
        id: String,
    },
    /// Pause a running session: the process running it stops within a second and lets go of
    /// it; `weft resume` continues it later, from any process.
    Pause {
        /// The session's id.
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session to continue.
    pub id: String,
    /// The agent file (default: the one the session was started with).
    #[arg(long)]
    pub agent: Option<PathBuf>,
    /// Print every event as a JSON line on stderr.
    #[arg(long)]
    pub events: bool,
    /// Take the session over even if another process holds its lease (only when that process
    /// is known to be gone: two processes driving one session fail each other's writes).
    #[arg(long)]
    pub force: bool,
}

pub async fn run<S: Store>(host: &Host, store: Arc<S>, cmd: SessionsCommand) -> Result<u8> {
    let mut out = std::io::stdout().lock();
    match cmd {
        SessionsCommand::List {
            user,
            status,
            limit,
            json,
        } => list(store.as_ref(), &mut out, user, status, limit, json).await,
        SessionsCommand::Show { id, json } => show(host, store.as_ref(), &mut out, id, json).await,
        SessionsCommand::Events { id, follow, .. } => {
            let mut after = 0;
            loop {
                let events = store.events_after(&id, after).await?;
                for e in &events {
                    writeln!(out, "{}", serde_json::to_string(e)?)?;
                    after = e.seq;
                }
                out.flush()?;
                if !follow {
                    return Ok(0);
                }
                let (rec, _) = store.load(&id).await?;
                let done = rec.status != SessionStatus::Running && rec.last_seq <= after;
                if done {
                    return Ok(0);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        SessionsCommand::Trace { id, otlp, json } => {
            crate::telemetry::trace(store.as_ref(), &id, otlp.as_deref(), json, &mut out).await
        }
        SessionsCommand::Cancel { id } => {
            drop(out);
            ask(host, store, &id, Asked::Cancel).await
        }
        SessionsCommand::Pause { id } => {
            drop(out);
            ask(host, store, &id, Asked::Pause).await
        }
        SessionsCommand::Fork { id, at, budget } => {
            let budget = budget.map(weft_core::budget::BudgetChange::Over);
            let (new_id, state) = fork(store.as_ref(), &id, at, None, budget).await?;
            let rec = store.get(&id).await?;
            writeln!(out, "{new_id}")?;
            // The hint names the one command that accepts the fork in its state.
            let db = crate::store::db_flag();
            let agent = agent_file_of(&rec.metadata)
                .map(|p| crate::store::shell_word(&p.display().to_string()))
                .unwrap_or_else(|| "AGENT".into());
            let next = match state.status() {
                SessionStatus::Running => format!("weft resume{db} {new_id}"),
                SessionStatus::WaitingForUser => format!("weft answer{db} {new_id} \"<answer>\""),
                SessionStatus::Completed | SessionStatus::Failed => {
                    format!("weft run{db} {agent} --session {new_id} \"<a new task>\"")
                }
            };
            writeln!(
                std::io::stderr(),
                "forked {id} at event {at} into {new_id} ({}); continue it with `{next}`",
                state.status().as_str()
            )?;
            Ok(0)
        }
        SessionsCommand::Prune {
            older_than,
            include_active,
            dry_run,
        } => {
            let d = parse_duration_str(&older_than).map_err(|e| anyhow!("--older-than: {e}"))?;
            let cutoff = now_ms().saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let which = if include_active {
                "session(s)"
            } else {
                "completed or failed session(s)"
            };
            if dry_run {
                let rows = store.list(&ListFilter::default()).await?;
                let mut n = 0;
                for r in rows
                    .iter()
                    .filter(|r| r.updated_at < cutoff && (include_active || r.status.is_terminal()))
                {
                    writeln!(
                        out,
                        "{}  {}  {}",
                        r.id,
                        r.status.as_str(),
                        fmt_time(r.updated_at)
                    )?;
                    n += 1;
                }
                writeln!(
                    std::io::stderr(),
                    "would prune {n} {which} not updated since {} (dry run: nothing deleted)",
                    fmt_time(cutoff)
                )?;
                return Ok(0);
            }
            let n = store.prune(cutoff, include_active).await?;
            writeln!(
                out,
                "pruned {n} {which} not updated since {}",
                fmt_time(cutoff)
            )?;
            Ok(0)
        }
    }
}

/// `weft sessions list`: the sessions, newest first, as aligned columns or JSON lines.
async fn list<S: Store>(
    store: &S,
    out: &mut impl Write,
    user: Option<String>,
    status: Option<String>,
    limit: usize,
    json: bool,
) -> Result<u8> {
    let status = match status {
        None => None,
        Some(s) => Some(SessionStatus::parse(&s).ok_or_else(|| {
            anyhow!("--status {s}: use running, waiting_for_user, completed or failed")
        })?),
    };
    let rows = store
        .list(&ListFilter {
            user_id: user,
            status,
            limit: Some(limit),
        })
        .await?;
    // Each session's current task, read from its state (from the newest snapshot).
    let mut tasks = Vec::with_capacity(rows.len());
    for r in &rows {
        let task = weft_runtime::load_state(store, &r.id)
            .await?
            .state
            .turn()
            .task()
            .map(str::to_owned);
        tasks.push(task);
    }
    if json {
        for (r, task) in rows.iter().zip(&tasks) {
            let mut v = serde_json::to_value(r)?;
            v["created_at"] = json!(fmt_time(r.created_at));
            v["updated_at"] = json!(fmt_time(r.updated_at));
            v["task"] = json!(task);
            writeln!(out, "{v}")?;
        }
        return Ok(0);
    }
    if rows.is_empty() {
        writeln!(std::io::stderr(), "no sessions")?;
        return Ok(0);
    }
    // Columns as wide as their widest value (a child session's id is long).
    // The task comes last, on one line and cut to a screen's width.
    let cells: Vec<[String; 7]> = rows
        .iter()
        .zip(&tasks)
        .map(|(r, task)| {
            [
                r.id.clone(),
                r.agent.clone(),
                r.status.as_str().to_owned(),
                r.user_id.clone().unwrap_or_else(|| "-".to_owned()),
                fmt_time(r.updated_at),
                r.last_seq.to_string(),
                task.as_deref().map_or_else(|| "-".to_owned(), one_line),
            ]
        })
        .collect();
    let head = ["id", "agent", "status", "user", "updated", "events", "task"].map(str::to_owned);
    let mut widths = head.clone().map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    for row in std::iter::once(&head).chain(&cells) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    Ok(0)
}

/// `weft sessions show`: a session's record and state, for a person or as JSON.
async fn show<S: Store>(
    host: &Host,
    store: &S,
    out: &mut impl Write,
    id: String,
    json: bool,
) -> Result<u8> {
    let rec = store.get(&id).await?;
    let state = weft_runtime::load_state(store, &id).await?.state;
    // A running session that no live process drives was paused, or its process died:
    // it goes on only when something continues it.
    let stopped = rec.status == SessionStatus::Running
        && !ownership::driven(host.clock.as_ref(), store, &id).await?;
    let view = json!({
        "id": rec.id,
        "agent": rec.agent,
        "status": rec.status.as_str(),
        "driven": rec.status == SessionStatus::Running && !stopped,
        "user_id": rec.user_id,
        "reference_id": rec.reference_id,
        "parent_id": rec.parent_id,
        "created_at": fmt_time(rec.created_at),
        "updated_at": fmt_time(rec.updated_at),
        "events": rec.last_seq,
        "task": state.turn().task(),
        "plan": state.plan().map(|p| p.view()),
        "workflow": (state.mode() == Some(weft_core::agent::Mode::Workflow)).then(|| json!({
            "step": state.workflow().step(),
            "path": state.workflow().path(),
            "outputs": state.workflow().outputs(),
        })),
        "state": state.data(),
        "answer": state.turn().answer(),
        "waiting": state.turn().waiting(),
        "error": state.turn().error(),
        "usage": state.usage().tokens,
        "model_calls": state.usage().calls,
        "tool_calls": state.calls().started,
    });
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&view)?)?;
        return Ok(0);
    }
    writeln!(
        out,
        "session  {}  ({}, agent {})",
        rec.id,
        rec.status.as_str(),
        rec.agent
    )?;
    if stopped {
        writeln!(
            out,
            "stopped  no process drives it (paused, or its process stopped); continue it with `weft resume{} {}`",
            crate::store::db_flag(),
            rec.id
        )?;
    }
    if let Some(p) = &rec.parent_id {
        writeln!(out, "parent   {p}")?;
    }
    writeln!(
        out,
        "created  {}   updated {}   events {}",
        fmt_time(rec.created_at),
        fmt_time(rec.updated_at),
        rec.last_seq
    )?;
    if let Some(t) = state.turn().task() {
        writeln!(out, "task     {t}")?;
    }
    if let Some(run) = state.plan() {
        writeln!(out, "plan")?;
        for (s, r) in run.plan.steps.iter().zip(&run.steps) {
            let what = s
                .tool
                .clone()
                .or_else(|| s.description.clone())
                .unwrap_or_default();
            let status = serde_json::to_value(r.status)?
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let extra = r
                .reason
                .clone()
                .or_else(|| r.error.as_ref().map(|e| e.message.clone()))
                .map(|x| format!("  ({x})"))
                .unwrap_or_default();
            writeln!(out, "  {:<16} {:<12} {what}{extra}", s.id, status)?;
        }
    }
    if state.mode() == Some(weft_core::agent::Mode::Workflow) && !state.workflow().path().is_empty()
    {
        // The steps since the last message came in (where the session stands now).
        let now = match state.workflow().step() {
            Some(s) => format!("  (in `{s}`)"),
            None => String::new(),
        };
        writeln!(
            out,
            "steps    {}{now}",
            state.workflow().path().join(" -> ")
        )?;
    }
    if let Some(w) = &state.turn().waiting() {
        writeln!(out, "waiting  {}", w.question)?;
    }
    if let Some(a) = &state.turn().answer() {
        writeln!(out, "answer   {a}")?;
    }
    if let Some(e) = &state.turn().error() {
        writeln!(out, "error    {e}")?;
    }
    let u = &state.usage().tokens;
    let cost = u.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
    writeln!(
        out,
        "usage    {} input + {} output tokens{cost}, {} model call(s), {} tool call(s)",
        u.input_tokens,
        u.output_tokens,
        state.usage().calls,
        state.calls().started
    )?;
    Ok(0)
}

/// A task as one line of at most [`TASK_WIDTH`] characters (`…` where it was cut).
fn one_line(task: &str) -> String {
    let flat = task.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= TASK_WIDTH {
        return flat;
    }
    let mut cut: String = flat.chars().take(TASK_WIDTH - 1).collect();
    cut.push('…');
    cut
}

/// How many characters of a task `weft sessions list` shows.
const TASK_WIDTH: usize = 48;

pub use weft_host::sessions::agent_file_of;

pub async fn resume<S: Store>(host: &Host, store: Arc<S>, args: ResumeArgs) -> Result<u8> {
    let rec = store.get(&args.id).await?;
    let path = match args.agent.clone().or_else(|| agent_file_of(&rec.metadata)) {
        Some(p) => p,
        None => {
            return Err(anyhow!(
                "session {} does not record its agent file; pass --agent FILE",
                args.id
            ));
        }
    };
    match rec.status {
        SessionStatus::Running => {}
        SessionStatus::WaitingForUser => {
            return Err(anyhow!(
                "session {} waits for an answer; give it with `weft answer{} {} \"<answer>\"`",
                args.id,
                crate::store::db_flag(),
                args.id
            ));
        }
        s => {
            return Err(anyhow!(
                "session {} has {}; there is nothing to resume",
                args.id,
                s.as_str()
            ));
        }
    }
    let held = ownership::take(host, store.clone(), &args.id, args.force).await?;
    let result: Result<u8> = async {
        let agent = weft_host::drive::AgentFile::load_to_continue(&path).await?;
        host.durability.for_agents(store.as_ref(), [&agent.spec]);
        let observer = if args.events {
            run_cmd::json_lines()
        } else {
            // The calls in flight when the session stopped run again (or are recorded as
            // unknown) in this run: their cards name their tool and arguments.
            let open = weft_runtime::load_state(store.as_ref(), &args.id)
                .await
                .map(|l| l.state.calls().open.clone())
                .unwrap_or_default();
            crate::view::resuming(&agent.spec.limits, &open)
        };
        host.shutdown.note_session(&args.id);
        let watchers = weft_host::drive::Watchers {
            all: vec![observer],
            own: Vec::new(),
        };
        let ended = weft_host::drive::drive(host, store, &held, &rec, &agent, watchers).await;
        let (state, before) = match ended? {
            weft_host::drive::Ended::Done(state, before) => (state, before),
            weft_host::drive::Ended::Stopped(code) => return Ok(code),
        };
        agent.tools.shutdown().await;
        if state.mode().is_none() {
            writeln!(
                std::io::stdout(),
                "{}",
                serde_json::to_string_pretty(state.data())?
            )?;
            if state.status() == SessionStatus::Completed {
                return Ok(0);
            }
            crate::cmd::plan::report_failure(&state);
            return Ok(crate::EXIT_FAILED);
        }
        run_cmd::report(&state, &args.id, &path, Some(&before))
    }
    .await;
    held.release().await;
    result
}

/// `weft sessions cancel ID` / `weft sessions pause ID`: asks the process that runs the session,
/// and waits (up to 30 s) until it has stopped. A session no process runs is cancelled here; it
/// has nothing to pause.
async fn ask<S: Store>(host: &Host, store: Arc<S>, id: &str, what: Asked) -> Result<u8> {
    let verb = match what {
        Asked::Cancel => "cancel",
        Asked::Pause | Asked::Interrupt => "pause",
    };
    let rec = store.get(id).await?;
    if rec.status.is_terminal() {
        return Err(anyhow!(
            "session {id} has {}; there is nothing to {verb}",
            rec.status.as_str()
        ));
    }
    if ownership::request_and_wait(host.clock.as_ref(), store.as_ref(), id, verb).await? {
        println!("{verb}: session {id} stopped");
        if what == Asked::Pause {
            println!("continue it with `weft resume{} {id}`", host.db_flag);
        }
        return Ok(0);
    }
    match what {
        Asked::Pause | Asked::Interrupt => Err(anyhow!(
            "session {id} is not being run by any process; there is nothing to pause (`weft resume{} {id}` continues it)",
            host.db_flag
        )),
        Asked::Cancel => {
            ownership::cancel_unowned(host, store, id).await?;
            println!("cancel: session {id} cancelled");
            Ok(0)
        }
    }
}
