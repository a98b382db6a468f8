//! `weft batch AGENT RECORDS.jsonl`: one session per record, `--concurrency` at a time, in this
//! process. The batch is durable because its sessions are: record N of batch NAME is session
//! `NAME-N`, so a re-run (after Ctrl-C, a crash, or to read the results again) finds what each
//! record came to and runs only what is not done:
//! - no session yet: it is started;
//! - running (its process stopped): it is continued, as `weft resume` would;
//! - completed, failed or waiting for a person: its outcome is reported again, not re-run
//!   (`--retry-failed` gives each failed record's session its task again, as a new turn).
//!
//! Each run rewrites `--out` (one JSON line per record that completed or waits: line, session,
//! status, answer) and `--dead-letter` (one per record that failed or could not be read: line,
//! session, error, and the record). A record whose text changed since its session was started
//! is refused: that session belongs to other work (give the batch a new `--name`).
//!
//! A record is a JSON object `{"task": "...", "input": {...}}` (`input` optional), or a JSON
//! string, the task.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow};
use clap::Args;
use serde_json::{Value, json};
use weft_core::{SessionStatus, State};
use weft_runtime::{Agent, Runtime, SessionInfo};
use weft_store::{Store, StoreError};

use crate::drive::{AgentFile, Ended};
use crate::{load, ownership};

/// The longest record line read (bytes).
const MAX_RECORD: usize = 1 << 20;

#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The agent file (YAML or JSON).
    pub agent: PathBuf,
    /// The records: JSON lines, each `{"task": ..., "input": {...}}` or a JSON string.
    pub records: PathBuf,
    /// How many records run at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Where the results go (default: RECORDS with `.results.jsonl`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where failed records go, with their reasons (default: RECORDS with `.failed.jsonl`).
    #[arg(long)]
    pub dead_letter: Option<PathBuf>,
    /// The batch's name: record N is session NAME-N (default: `batch-` and the records file's
    /// name without its extension).
    #[arg(long)]
    pub name: Option<String>,
    /// Give the records whose session failed their task again (a new turn of the session).
    #[arg(long)]
    pub retry_failed: bool,
}

/// What a record came to.
enum Outcome {
    Done(Value),
    Dead(Value),
}

pub async fn run<S: Store>(store: Arc<S>, a: BatchArgs) -> Result<u8> {
    if a.concurrency == 0 {
        return Err(anyhow!("--concurrency must be at least 1"));
    }
    let stem = a
        .records
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("records")
        .to_owned();
    let name = a.name.clone().unwrap_or_else(|| format!("batch-{stem}"));
    let beside = |suffix: &str| a.records.with_file_name(format!("{stem}.{suffix}"));
    let out_path = a.out.clone().unwrap_or_else(|| beside("results.jsonl"));
    let dead_path = a
        .dead_letter
        .clone()
        .unwrap_or_else(|| beside("failed.jsonl"));
    let file = std::fs::File::open(&a.records)
        .with_context(|| format!("cannot read records file {}", a.records.display()))?;
    let agent = Arc::new(AgentFile::load(&a.agent).await?);
    crate::store::agent_durability(store.as_ref(), [&agent.spec]);
    crate::interrupt::set_quiet();
    let total = count_lines(&a.records)?;
    let out = Arc::new(Mutex::new(create(&out_path)?));
    let dead = Arc::new(Mutex::new(create(&dead_path)?));
    let bar = progress(total);
    let mut tasks = tokio::task::JoinSet::new();
    let (mut done, mut failed) = (0_u64, 0_u64);
    let mut tally = |o: Outcome| -> Result<()> {
        match o {
            Outcome::Done(v) => {
                done += 1;
                write_line(&out, &v)?;
            }
            Outcome::Dead(v) => {
                failed += 1;
                write_line(&dead, &v)?;
            }
        }
        bar.inc(1);
        bar.set_message(format!("{done} done, {failed} failed"));
        Ok(())
    };
    let mut lines = std::io::BufReader::new(file).split(b'\n');
    let mut line_no = 0_u64;
    loop {
        if crate::interrupt::is_requested() {
            break;
        }
        while tasks.len() >= a.concurrency {
            if let Some(r) = tasks.join_next().await {
                tally(r?)?;
            }
        }
        let Some(line) = lines.next() else { break };
        let line = line.with_context(|| format!("cannot read {}", a.records.display()))?;
        line_no += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let id = format!("{name}-{line_no}");
        let record = match parse_record(&line) {
            Ok(r) => r,
            Err(why) => {
                let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
                tally(Outcome::Dead(json!({
                    "line": line_no, "error": format!("{}:{line_no}: {why}", a.records.display()), "record": shown,
                })))?;
                continue;
            }
        };
        tasks.spawn(one(
            store.clone(),
            agent.clone(),
            id,
            line_no,
            record,
            a.retry_failed,
        ));
    }
    while let Some(r) = tasks.join_next().await {
        tally(r?)?;
    }
    bar.finish_and_clear();
    agent.tools.shutdown().await;
    let interrupted = crate::interrupt::is_requested();
    eprintln!(
        "batch {name}: {done} done, {failed} failed{} · results {} · failures {}",
        if interrupted {
            format!(", {} not finished", total.saturating_sub(done + failed))
        } else {
            String::new()
        },
        out_path.display(),
        dead_path.display()
    );
    if interrupted {
        eprintln!(
            "interrupted: run the same command again to finish the batch (records already done are not run again)"
        );
        return Ok(crate::interrupt::EXIT_INTERRUPTED);
    }
    Ok(if failed > 0 { crate::EXIT_FAILED } else { 0 })
}

fn create(path: &Path) -> Result<std::io::BufWriter<std::fs::File>> {
    Ok(std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
    ))
}

fn write_line(to: &Mutex<std::io::BufWriter<std::fs::File>>, v: &Value) -> Result<()> {
    let mut w = to
        .lock()
        .map_err(|_| anyhow!("a batch output was poisoned"))?;
    writeln!(w, "{v}")?;
    // Flushed per record: what an interrupted batch did is on disk.
    w.flush()?;
    Ok(())
}

fn count_lines(path: &Path) -> Result<u64> {
    let f = std::fs::File::open(path)
        .with_context(|| format!("cannot read records file {}", path.display()))?;
    let mut n = 0;
    for line in std::io::BufReader::new(f).split(b'\n') {
        let line = line?;
        if !line.iter().all(u8::is_ascii_whitespace) {
            n += 1;
        }
    }
    Ok(n)
}

/// A progress bar on a terminal; hidden otherwise.
fn progress(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr_with_hz(10),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:30} {pos}/{len} records · {msg} · {elapsed} (about {eta} left)",
    ) {
        bar.set_style(style);
    }
    bar
}

/// A record's task and input, and the record as it will be remembered.
struct Record {
    task: String,
    input: Value,
    raw: Value,
}

fn parse_record(line: &[u8]) -> Result<Record, String> {
    if line.len() > MAX_RECORD {
        return Err(format!(
            "the record is {} bytes; at most {MAX_RECORD} are read",
            line.len()
        ));
    }
    let raw: Value = serde_json::from_slice(line).map_err(|e| format!("not a JSON line ({e})"))?;
    weft_core::limits::check_depth(&raw, "the record").map_err(|e| e.to_string())?;
    let (task, input) = match &raw {
        Value::String(t) => (t.clone(), json!({})),
        Value::Object(m) => {
            let task = m.get("task").and_then(Value::as_str).ok_or(
                "the record has no \"task\" string; write {\"task\": \"...\", \"input\": {...}}",
            )?;
            let input = m.get("input").cloned().unwrap_or_else(|| json!({}));
            if !input.is_object() {
                return Err("the record's \"input\" must be a JSON object".into());
            }
            (task.to_owned(), input)
        }
        _ => {
            return Err(
                "a record is a JSON object {\"task\": \"...\", \"input\": {...}} or a JSON string"
                    .into(),
            );
        }
    };
    if task.trim().is_empty() {
        return Err("the record's task is empty".into());
    }
    Ok(Record { task, input, raw })
}

/// Runs (or reports) one record.
async fn one<S: Store>(
    store: Arc<S>,
    agent: Arc<AgentFile>,
    id: String,
    line: u64,
    record: Record,
    retry_failed: bool,
) -> Outcome {
    let raw = record.raw.clone();
    match drive_record(store, &agent, &id, line, record, retry_failed).await {
        Ok(state) => report(&id, line, &state, raw),
        Err(e) => Outcome::Dead(json!({
            "line": line, "session": id, "error": crate::message(&e), "record": raw,
        })),
    }
}

fn report(id: &str, line: u64, st: &State, raw: Value) -> Outcome {
    match st.status {
        SessionStatus::Completed => Outcome::Done(json!({
            "line": line, "session": id, "status": "completed", "answer": st.answer, "data": st.data,
        })),
        SessionStatus::WaitingForUser => Outcome::Done(json!({
            "line": line, "session": id, "status": "waiting_for_user",
            "question": st.waiting.as_ref().map(|w| w.question.clone()),
        })),
        SessionStatus::Failed => Outcome::Dead(json!({
            "line": line, "session": id,
            "error": st.error.clone().unwrap_or_else(|| "unknown reason".into()), "record": raw,
        })),
        SessionStatus::Running => Outcome::Dead(json!({
            "line": line, "session": id, "error": "interrupted before it finished", "record": raw,
        })),
    }
}

/// Brings record `line`'s session as far as it goes and returns its state.
async fn drive_record<S: Store>(
    store: Arc<S>,
    agent: &AgentFile,
    id: &str,
    line: u64,
    record: Record,
    retry_failed: bool,
) -> Result<State> {
    let existing = match store.get(id).await {
        Ok(rec) => Some(rec),
        Err(StoreError::NotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(rec) = &existing {
        if rec.metadata.get("weft_batch_record") != Some(&record.raw) {
            return Err(anyhow!(
                "session {id} was started for another record at line {line}; the records file changed since. Give this batch a new --name"
            ));
        }
        let retry = retry_failed && rec.status == SessionStatus::Failed;
        if rec.status != SessionStatus::Running && !retry {
            return Ok(load_state(store.as_ref(), id).await?);
        }
    }
    let held = ownership::take(store.clone(), id, false).await?;
    let result = async {
        if let Some(rec) = &existing
            && rec.status == SessionStatus::Running
        {
            return match crate::drive::drive(store.clone(), &held, rec, agent, Vec::new()).await? {
                Ended::Done(state, _) => Ok(state),
                Ended::Stopped(_) => Ok(load_state(store.as_ref(), id).await?),
            };
        }
        let metadata = json!({
            "weft_agent_file": load::absolute(&agent.path),
            "weft_batch_record": record.raw,
        });
        let built = Agent::new(
            &agent.spec,
            agent.tools.clone(),
            agent.model.clone(),
            &metadata,
            &record.input,
        )
        .map_err(|e| anyhow!("agent file {}: {e}", agent.path.display()))?;
        let mut rt = Runtime::new(
            store.clone(),
            agent.tools.clone(),
            agent.spec.limits.clone(),
        );
        rt.redact = agent.redact.clone();
        held.bind(&mut rt);
        let work = async {
            if existing.is_some() {
                let mut session = rt.load_session(id).await?;
                rt.run_task(&built, &mut session, &record.task, record.input.clone())
                    .await?;
                Ok::<_, anyhow::Error>(session.state)
            } else {
                let info = SessionInfo {
                    id: Some(id.to_owned()),
                    metadata,
                    ..SessionInfo::default()
                };
                let session = rt
                    .run_agent(&built, info, &record.task, record.input.clone())
                    .await?;
                Ok(session.state)
            }
        };
        match held.until_asked(work).await {
            Ok(state) => state,
            Err(asked) => {
                crate::ownership::stopped(&rt, id, asked).await?;
                Ok(load_state(store.as_ref(), id).await?)
            }
        }
    }
    .await;
    held.release().await;
    result
}

async fn load_state<S: Store>(store: &S, id: &str) -> Result<State, StoreError> {
    Ok(weft_runtime::load_state(store, id).await?.state)
}
