//! `weft batch AGENT RECORDS.jsonl`: one session per record, `--concurrency` at a time, in this
//! process. The batch is durable because its sessions are. A record is known by an identity that
//! does not move with its line: the digest of its content (JSON with keys sorted), or the value
//! of the field `--id-field` names. Record K of batch NAME is session `NAME-c<digest>` (or
//! `NAME-id-<value>`), so a re-run (after Ctrl-C, a crash, an edit of the file, or to read the
//! results again) finds what each record came to and runs only what is not done:
//! - no session yet: it is started;
//! - running (its process stopped): it is continued, as `weft resume` would;
//! - completed, failed or waiting for a person: its outcome is reported again, not re-run
//!   (`--retry-failed` gives each failed record's session its task again, as a new turn).
//!
//! A record is refused (not run) when its session was started for other content (an id whose
//! record changed), or when it repeats a record of an earlier line (it runs once). Sessions of
//! the batch made by an older weft, keyed by line (`NAME-N`), are found by their content: a
//! record equal to one of them is that session's, wherever its line now is.
//!
//! Each run rewrites `--out` (one JSON line per record that completed or waits: line, session,
//! status, answer, and what this run did with it) and `--dead-letter` (one per record that
//! failed, was refused or could not be read: line, session, error, and the record).
//!
//! A record is a JSON object `{"task": "...", "input": {...}}` (`input` optional), or a JSON
//! string, the task.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow};
use clap::Args;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use weft_core::{SessionStatus, State};
use weft_runtime::{Agent, SessionInfo};
use weft_store::{ListFilter, Store, StoreError};

use weft_host::drive::{AgentFile, Ended};
use weft_host::hosted::{Hosted, Setup};
use weft_host::{Host, ownership};

/// The longest record line read (bytes).
const MAX_RECORD: usize = 1 << 20;
/// The longest `--id-field` value put in a session id as it is (longer ones are digested).
const MAX_PLAIN_ID: usize = 64;
/// How many line numbers the summary names per kind of record.
const SHOWN_LINES: usize = 10;

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
    /// The batch's name: its sessions are `NAME-c<digest of the record>` (or `NAME-id-<id>`)
    /// (default: `batch-` and the records file's name without its extension).
    #[arg(long)]
    pub name: Option<String>,
    /// Know each record by this field of it (a string or an integer, unique in the file)
    /// instead of by the digest of its content: a record whose content changed under the same
    /// id is refused, not run again.
    #[arg(long, value_name = "FIELD")]
    pub id_field: Option<String>,
    /// Give the records whose session failed their task again (a new turn of the session).
    #[arg(long)]
    pub retry_failed: bool,
    /// The user the new sessions belong to (its sessions are theirs in `weft serve` and the playground).
    #[arg(long, env = "WEFT_USER")]
    pub user: Option<String>,
}

/// What this run did with a record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Did {
    /// Its session was started.
    Started,
    /// Its session was running (its process stopped) and was continued.
    Continued,
    /// Its session had failed and was given its task again (`--retry-failed`).
    Retried,
    /// It had ended in an earlier run: its outcome is reported again.
    Earlier,
    /// It was not run: it could not be read, or it was refused.
    Refused,
    /// It was not run: its session could not be read.
    NotRun,
}

impl Did {
    fn as_str(self) -> &'static str {
        match self {
            Did::Started => "started",
            Did::Continued => "continued",
            Did::Retried => "retried",
            Did::Earlier => "earlier",
            Did::Refused => "refused",
            Did::NotRun => "not_run",
        }
    }
}

/// What a record came to.
struct Outcome {
    line: u64,
    did: Did,
    /// Its line of the results (`Ok`) or of the dead-letter file (`Err`).
    entry: Result<Value, Value>,
}

/// A session of this batch found in the store before the run.
struct Known {
    /// The digest of the record it was started for.
    digest: String,
}

/// The sessions of batch `name` in the store: those of this weft (metadata `weft_batch`) and
/// those of an older one, keyed by line (`NAME-N`), with the record each was started for.
struct Earlier {
    by_session: HashMap<String, Known>,
    /// The first session (by id) started for each content.
    by_digest: HashMap<String, String>,
    /// With `--id-field`: the session started for each id value.
    by_id: HashMap<String, String>,
}

impl Earlier {
    async fn read<S: Store>(store: &S, name: &str, id_field: Option<&str>) -> Result<Self> {
        let legacy = |id: &str| {
            id.strip_prefix(name)
                .and_then(|r| r.strip_prefix('-'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        let mut sessions: Vec<(String, Value)> = store
            .list(&ListFilter::default())
            .await
            .context("cannot list the sessions to find this batch's")?
            .into_iter()
            .filter_map(|mut rec| {
                let ours = rec.metadata.get("weft_batch").and_then(Value::as_str) == Some(name)
                    || legacy(&rec.id);
                let record = rec.metadata.get_mut("weft_batch_record")?.take();
                ours.then_some((rec.id, record))
            })
            .collect();
        // The lowest line first among an older weft's sessions of one content.
        sessions.sort_by_key(|(id, _)| {
            let n: Option<u64> = id.rsplit('-').next().and_then(|n| n.parse().ok());
            (n.is_none(), n, id.clone())
        });
        let mut e = Self {
            by_session: HashMap::new(),
            by_digest: HashMap::new(),
            by_id: HashMap::new(),
        };
        for (id, record) in sessions {
            let digest = content_digest(&record);
            e.by_digest
                .entry(digest.clone())
                .or_insert_with(|| id.clone());
            if let Some(v) = id_field.and_then(|f| id_value(&record, f)) {
                e.by_id.entry(v).or_insert_with(|| id.clone());
            }
            e.by_session.insert(id, Known { digest });
        }
        Ok(e)
    }
}

/// The lines of one kind of record, for the summary.
#[derive(Default)]
struct Lines(Vec<(u64, String)>);

impl Lines {
    fn add(&mut self, line: u64, why: &str) {
        self.0.push((line, why.to_owned()));
    }

    /// The first lines, in order, each with its reason if it has one.
    fn list(&mut self) -> String {
        self.0.sort();
        let mut s: Vec<String> = self
            .0
            .iter()
            .take(SHOWN_LINES)
            .map(|(l, why)| {
                if why.is_empty() {
                    format!("line {l}")
                } else {
                    format!("line {l}: {why}")
                }
            })
            .collect();
        if self.0.len() > SHOWN_LINES {
            s.push(format!("and {} more", self.0.len() - SHOWN_LINES));
        }
        s.join("; ")
    }
}

pub async fn run<S: Store>(host: &Host, store: Arc<S>, a: BatchArgs) -> Result<u8> {
    if a.concurrency == 0 {
        return Err(anyhow!("--concurrency must be at least 1"));
    }
    if a.id_field.as_deref().is_some_and(str::is_empty) {
        return Err(anyhow!(
            "--id-field is empty; name the field of each record that identifies it (e.g. --id-field id)"
        ));
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
    host.durability.for_agents(store.as_ref(), [&agent.spec]);
    host.shutdown.set_quiet();
    let total = count_lines(&a.records)?;
    let earlier = Earlier::read(store.as_ref(), &name, a.id_field.as_deref()).await?;
    let out = Arc::new(Mutex::new(create(&out_path)?));
    let dead = Arc::new(Mutex::new(create(&dead_path)?));
    let bar = progress(total);
    let mut tasks = tokio::task::JoinSet::new();
    let (mut done, mut failed) = (0_u64, 0_u64);
    let (mut new, mut refused) = (Lines::default(), Lines::default());
    let mut did_count: HashMap<&'static str, u64> = HashMap::new();
    let mut tally = |o: Outcome| -> Result<()> {
        *did_count.entry(o.did.as_str()).or_default() += 1;
        match o.did {
            Did::Started => new.add(o.line, ""),
            Did::Refused => {
                let why = o
                    .entry
                    .as_ref()
                    .err()
                    .and_then(|v| v.get("refused"))
                    .and_then(Value::as_str)
                    .unwrap_or("refused");
                refused.add(o.line, why);
            }
            _ => {}
        }
        match o.entry {
            Ok(mut v) => {
                done += 1;
                v["this_run"] = json!(o.did.as_str());
                write_line(&out, &v)?;
            }
            Err(mut v) => {
                failed += 1;
                v["this_run"] = json!(o.did.as_str());
                write_line(&dead, &v)?;
            }
        }
        bar.inc(1);
        bar.set_message(format!("{done} done, {failed} failed"));
        Ok(())
    };
    // Each identity's first line and content in this file, and the earlier sessions claimed.
    let mut seen: HashMap<String, (u64, String)> = HashMap::new();
    let mut claimed: HashSet<String> = HashSet::new();
    let mut lines = std::io::BufReader::new(file).split(b'\n');
    let mut line_no = 0_u64;
    loop {
        if host.shutdown.is_requested() {
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
        let at = format!("{}:{line_no}", a.records.display());
        let refuse = |session: Option<&str>, short: &str, why: String, record: Value| Outcome {
            line: line_no,
            did: Did::Refused,
            entry: Err(json!({
                "line": line_no, "session": session, "refused": short,
                "error": format!("{at}: {why}"), "record": record,
            })),
        };
        let record = match parse_record(&line) {
            Ok(r) => r,
            Err(why) => {
                let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
                tally(refuse(None, "unreadable", why, json!(shown)))?;
                continue;
            }
        };
        let (key, id) = match &a.id_field {
            None => (record.digest.clone(), format!("{name}-c{}", record.digest)),
            Some(f) => match id_value(&record.raw, f) {
                Some(v) => {
                    let id = if v.len() <= MAX_PLAIN_ID
                        && v.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                    {
                        format!("{name}-id-{v}")
                    } else {
                        format!("{name}-id-~{}", digest(v.as_bytes()))
                    };
                    (v, id)
                }
                None => {
                    let why = format!(
                        "the record has no \"{f}\" (--id-field {f}): give every record one, a non-empty string or an integer"
                    );
                    tally(refuse(None, "no id", why, record.raw))?;
                    continue;
                }
            },
        };
        if let Some((first, first_digest)) = seen.get(&key) {
            let (short, why) = if *first_digest == record.digest {
                (
                    "repeats an earlier line",
                    format!(
                        "the same record as line {first} (session {id}), which runs once; to run it again, make the copies differ (a field such as \"n\") or give each its own id (--id-field)"
                    ),
                )
            } else {
                (
                    "id of an earlier line",
                    format!(
                        "the same id as line {first} but another record; give each record its own id"
                    ),
                )
            };
            tally(refuse(Some(&id), short, why, record.raw))?;
            continue;
        }
        seen.insert(key.clone(), (line_no, record.digest.clone()));
        // The session this record is: its own; else one of this batch started for the same
        // content (by an older weft, keyed by line, or under the other kind of identity).
        let session = match earlier.by_session.get(&id) {
            Some(k) if k.digest != record.digest => {
                claimed.insert(id.clone());
                let why = format!(
                    "session {id} was started for another version of this record; the records file changed since. Restore the record, give it a new id, or give this batch a new --name"
                );
                tally(refuse(Some(&id), "changed", why, record.raw))?;
                continue;
            }
            Some(_) => id,
            None => match earlier.by_digest.get(&record.digest) {
                Some(found) if !claimed.contains(found) => found.clone(),
                _ => match a.id_field.as_ref().and_then(|_| earlier.by_id.get(&key)) {
                    Some(other) => {
                        claimed.insert(other.clone());
                        let why = format!(
                            "session {other} was started for another version of the record with this id; the records file changed since. Restore the record, give it a new id, or give this batch a new --name"
                        );
                        tally(refuse(Some(other), "changed", why, record.raw))?;
                        continue;
                    }
                    None => id,
                },
            },
        };
        claimed.insert(session.clone());
        tasks.spawn(one(
            (host.clone(), store.clone()),
            agent.clone(),
            (name.clone(), a.user.clone()),
            session,
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
    let interrupted = host.shutdown.is_requested();
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
    let count = |d: Did| did_count.get(d.as_str()).copied().unwrap_or(0);
    if !new.0.is_empty() {
        eprintln!("  started (new records): {} ({})", new.0.len(), new.list());
    }
    if count(Did::Continued) + count(Did::Retried) > 0 {
        eprintln!(
            "  continued: {}, retried: {}",
            count(Did::Continued),
            count(Did::Retried)
        );
    }
    if count(Did::Earlier) > 0 {
        eprintln!(
            "  ended in an earlier run (reported again, not run): {}",
            count(Did::Earlier)
        );
    }
    if !refused.0.is_empty() {
        eprintln!(
            "  refused (not run; reasons in the failures file): {} ({})",
            refused.0.len(),
            refused.list()
        );
    }
    let gone = earlier
        .by_session
        .keys()
        .filter(|s| !claimed.contains(*s))
        .count();
    if gone > 0 && !interrupted {
        eprintln!(
            "  {gone} session(s) of this batch have no record in the file now (records removed or changed)"
        );
    }
    if interrupted {
        eprintln!(
            "interrupted: run the same command again to finish the batch (records already done are not run again)"
        );
        return Ok(weft_host::EXIT_INTERRUPTED);
    }
    Ok(if failed > 0 { crate::EXIT_FAILED } else { 0 })
}

/// The first 16 hex digits of the SHA-256 of `bytes`.
fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A record's identity by content: the digest of its JSON with object keys sorted, so that
/// spacing and key order do not make another record.
fn content_digest(raw: &Value) -> String {
    digest(weft_core::state::call_signature("record", raw).as_bytes())
}

/// The value of a record's `field` as an identity: a non-empty string, or an integer.
fn id_value(raw: &Value, field: &str) -> Option<String> {
    match raw.get(field)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
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

/// A record's task and input, the record as it will be remembered, and its content's digest.
struct Record {
    task: String,
    input: Value,
    raw: Value,
    digest: String,
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
    let digest = content_digest(&raw);
    Ok(Record {
        task,
        input,
        raw,
        digest,
    })
}

/// Runs (or reports) one record.
async fn one<S: Store>(
    (host, store): (Host, Arc<S>),
    agent: Arc<AgentFile>,
    batch: (String, Option<String>),
    id: String,
    line: u64,
    record: Record,
    retry_failed: bool,
) -> Outcome {
    let raw = record.raw.clone();
    let batch = (batch.0.as_str(), batch.1.as_deref());
    match drive_record(&host, store, &agent, batch, &id, record, retry_failed).await {
        (did, Ok(state)) => report(&id, line, did, &state, raw),
        (did, Err(e)) => {
            let mut entry = json!({
                "line": line, "session": id, "error": crate::message(&e), "record": raw,
            });
            if did == Did::Refused {
                entry["refused"] = json!("changed");
            }
            Outcome {
                line,
                did,
                entry: Err(entry),
            }
        }
    }
}

fn report(id: &str, line: u64, did: Did, st: &State, raw: Value) -> Outcome {
    let entry = match st.status {
        SessionStatus::Completed => Ok(json!({
            "line": line, "session": id, "status": "completed", "answer": st.turn.answer(), "data": st.data,
        })),
        SessionStatus::WaitingForUser => Ok(json!({
            "line": line, "session": id, "status": "waiting_for_user",
            "question": st.turn.waiting().map(|w| w.question.clone()),
        })),
        SessionStatus::Failed => Err(json!({
            "line": line, "session": id,
            "error": st.turn.error().map(str::to_owned).unwrap_or_else(|| "unknown reason".into()), "record": raw,
        })),
        SessionStatus::Running => Err(json!({
            "line": line, "session": id, "error": "interrupted before it finished", "record": raw,
        })),
    };
    Outcome { line, did, entry }
}

/// Brings record `record`'s session `id` as far as it goes and returns its state and what was
/// done with it.
async fn drive_record<S: Store>(
    host: &Host,
    store: Arc<S>,
    agent: &AgentFile,
    batch: (&str, Option<&str>),
    id: &str,
    record: Record,
    retry_failed: bool,
) -> (Did, Result<State>) {
    let existing = match store.get(id).await {
        Ok(rec) => Some(rec),
        Err(StoreError::NotFound(_)) => None,
        Err(e) => return (Did::NotRun, Err(e.into())),
    };
    let did = match &existing {
        None => Did::Started,
        Some(rec) => {
            if rec.metadata.get("weft_batch_record") != Some(&record.raw) {
                return (
                    Did::Refused,
                    Err(anyhow!(
                        "session {id} was started for another record; the records file changed since. Give this batch a new --name"
                    )),
                );
            }
            match rec.status {
                SessionStatus::Running => Did::Continued,
                SessionStatus::Failed if retry_failed => Did::Retried,
                _ => {
                    let state = load_state(store.as_ref(), id).await.map_err(Into::into);
                    return (Did::Earlier, state);
                }
            }
        }
    };
    (
        did,
        run_record(host, store, agent, batch, id, record, existing).await,
    )
}

/// Starts record `record`'s session `id` (for the batch's user), continues it (running), or
/// gives it its task again. `batch` is the batch's name and the user of its sessions.
async fn run_record<S: Store>(
    host: &Host,
    store: Arc<S>,
    agent: &AgentFile,
    (batch, user): (&str, Option<&str>),
    id: &str,
    record: Record,
    existing: Option<weft_store::SessionRecord>,
) -> Result<State> {
    let held = ownership::take(host, store.clone(), id, false).await?;
    let result = async {
        if let Some(rec) = &existing
            && rec.status == SessionStatus::Running
        {
            return match weft_host::drive::drive(
                host,
                store.clone(),
                &held,
                rec,
                agent,
                weft_host::drive::Watchers::default(),
            )
            .await?
            {
                Ended::Done(state, _) => Ok(state),
                Ended::Stopped(_) => Ok(load_state(store.as_ref(), id).await?),
            };
        }
        let mut metadata = json!({
            "weft_batch": batch,
            "weft_batch_record": record.raw,
        });
        weft_host::sessions::record_agent_file(&mut metadata, &agent.path);
        let built = Agent::new(
            &agent.spec,
            agent.tools.clone(),
            agent.model.clone(),
            &metadata,
            &record.input,
        )
        .map_err(|e| anyhow!("agent file {}: {e}", agent.path.display()))?;
        let hosted = Hosted::start(
            host,
            store.clone(),
            &held,
            Setup {
                new: existing.is_none(),
                ..agent.setup()
            },
            user,
            weft_host::drive::Watchers::default(),
        )
        .await;
        let rt = hosted.runtime();
        let work = async {
            if existing.is_some() {
                let mut session = rt.load_session(id).await?;
                rt.run_task(&built, &mut session, &record.task, record.input.clone())
                    .await?;
                Ok::<_, anyhow::Error>(session.state)
            } else {
                let info = SessionInfo {
                    id: Some(id.to_owned()),
                    user_id: user.map(str::to_owned),
                    metadata,
                    ..SessionInfo::default()
                };
                let session = rt
                    .run_agent(&built, info, &record.task, record.input.clone())
                    .await?;
                Ok(session.state)
            }
        };
        let state = match hosted.run(work).await {
            Ok(state) => state,
            Err(asked) => match hosted.stopped(asked).await {
                Ok(_) => Ok(load_state(store.as_ref(), id).await?),
                Err(e) => Err(e.into()),
            },
        };
        hosted.end().await;
        state
    }
    .await;
    held.release().await;
    result
}

async fn load_state<S: Store>(store: &S, id: &str) -> Result<State, StoreError> {
    Ok(weft_runtime::load_state(store, id).await?.state)
}
