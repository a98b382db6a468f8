//! `weft submit AGENT --from FILE`: many runs queued at once, one JSON object per line of FILE
//! (`-`: stdin). Every line is read and checked before anything is written; the sessions are
//! then written [`BATCH`] at a time, each batch in one write of the store (one transaction on
//! PostgreSQL), and their ids printed in the order of the lines.
//!
//! A line is `{"task": "…"}` with, optionally, `input` (an object), `metadata` (an object),
//! `user`, `reference`, `id` and `budget` (`KEY=VALUE,...`, as `--budget`); `--user` and
//! `--budget` apply to the lines that do not say. Blank lines are skipped. A line whose session
//! the store refuses (its id is taken) is named on stderr and the others are queued; the exit
//! status is then 1.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use serde::Deserialize;
use serde_json::Value;
use weft_runtime::{NewRun, SessionInfo};
use weft_store::Store;

use crate::cmd::run as run_cmd;

/// How many sessions one write of the store creates.
pub const BATCH: usize = 1000;

/// One line of the file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    task: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    reference: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    budget: Option<String>,
}

/// A checked line: its number in the file and its run.
pub struct Queued {
    line: usize,
    run: NewRun,
}

/// Reads and checks every line of `path` (`-`: stdin) against the prepared agent: exit 2 on
/// the first mistake, naming the file, the line and the field, before the store is opened.
pub async fn read(
    path: &Path,
    p: &run_cmd::Prepared,
    user: Option<&str>,
    budget: Option<&str>,
) -> Result<Vec<Queued>> {
    let name = path.display().to_string();
    let text = if name == "-" {
        weft_core::limits::read_text(std::io::stdin())
            .map_err(|e| anyhow!("cannot read the runs from stdin: {e}"))?
    } else {
        std::fs::File::open(path)
            .and_then(weft_core::limits::read_text)
            .map_err(|e| anyhow!("cannot read the runs file {name}: {e}"))?
    };
    let tools = weft_core::ToolCatalog::tool_names(&*p.tools);
    let mut ids = HashSet::new();
    let mut runs = Vec::new();
    for (k, raw) in text.lines().enumerate() {
        let n = k + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let at = |what: &str| format!("{name} line {n}: {what}");
        let line: Line = serde_json::from_str(raw).map_err(|e| {
            anyhow!(at(&format!(
                "{e} (a line is a JSON object such as {{\"task\": \"...\", \"input\": {{}}}})"
            )))
        })?;
        if line.task.trim().is_empty() {
            return Err(anyhow!(at("`task` is empty")));
        }
        let input = line
            .input
            .unwrap_or_else(|| Value::Object(Default::default()));
        weft_core::limits::check_depth(&input, &at("`input`")).map_err(|e| anyhow!(e))?;
        if !input.is_object() {
            return Err(anyhow!(at("`input` must be a JSON object")));
        }
        let mut metadata = line
            .metadata
            .unwrap_or_else(|| Value::Object(Default::default()));
        if !metadata.is_object() {
            return Err(anyhow!(at("`metadata` must be a JSON object")));
        }
        weft_host::sessions::record_agent_file(&mut metadata, &p.args.agent);
        if let Some(id) = &line.id
            && !ids.insert(id.clone())
        {
            return Err(anyhow!(at(&format!(
                "`id` {id} is given to an earlier line too"
            ))));
        }
        let extra = match line.budget.as_deref().or(budget) {
            None => Vec::new(),
            Some(text) => {
                let b = p
                    .budget
                    .clone()
                    .unwrap_or_default()
                    .with_overrides(text)
                    .map_err(|e| anyhow!(at(&format!("`budget`: {e}"))))?;
                if let Some((scope, tool, why)) = b.unknown_tools(&tools).into_iter().next() {
                    return Err(anyhow!(at(&format!(
                        "`budget`: {scope}.tool_calls.{tool}: {why}"
                    ))));
                }
                vec![weft_core::Event::BudgetSet { budget: b }]
            }
        };
        runs.push(Queued {
            line: n,
            run: NewRun {
                info: SessionInfo {
                    id: line.id,
                    user_id: line.user.or_else(|| user.map(str::to_owned)),
                    reference_id: line.reference,
                    metadata,
                    parent_id: None,
                },
                task: line.task,
                input,
                extra,
            },
        });
    }
    if runs.is_empty() {
        return Err(anyhow!("{name} holds no runs (one JSON object per line)"));
    }
    Ok(runs)
}

/// Queues the checked runs, [`BATCH`] at a time, printing each session's id as its batch is
/// written.
pub async fn run<S: Store>(
    store: Arc<S>,
    p: run_cmd::Prepared,
    path: &Path,
    runs: Vec<Queued>,
) -> Result<u8> {
    let run_cmd::Prepared {
        args,
        limits,
        redact,
        tools,
        agent,
        ..
    } = p;
    let rt =
        weft_host::hosted::unleased(store.clone(), (tools.clone(), limits, redact), None).build();
    let total = runs.len();
    let mut queued = 0_usize;
    let mut refused = 0_usize;
    let mut runs = runs.into_iter().peekable();
    // The lines of the batch being written (when the store fails, it may have been committed).
    let mut writing = (0, 0);
    let written = async {
        while runs.peek().is_some() {
            let batch: Vec<Queued> = runs.by_ref().take(BATCH).collect();
            writing = (
                batch.first().map_or(0, |q| q.line),
                batch.last().map_or(0, |q| q.line),
            );
            let lines: Vec<usize> = batch.iter().map(|q| q.line).collect();
            let answers = rt
                .queue_agents(&agent, batch.into_iter().map(|q| q.run).collect())
                .await?;
            for (line, answer) in lines.into_iter().zip(answers) {
                match answer {
                    Ok(id) => {
                        println!("{id}");
                        queued += 1;
                    }
                    Err(e) => {
                        eprintln!("{} line {line}: not queued: {e}", path.display());
                        refused += 1;
                    }
                }
            }
            // The workers start on the first batch while the next is written.
            if let Err(e) = store.wake().await {
                tracing::warn!("cannot wake the workers: {e}");
            }
        }
        anyhow::Ok(())
    }
    .await;
    tools.shutdown().await;
    if let Err(e) = written {
        let (first, last) = writing;
        return Err(anyhow!(
            "{e} ({queued} of {total} runs are queued, their ids printed above; the runs of lines \
             {first} to {last} may have been queued too, as the store failed while writing them: \
             `weft sessions list` shows what it holds)"
        ));
    }
    eprintln!(
        "queued: {queued} session(s) for agent `{}` from {}; `weft worker{}` runs them",
        agent.name,
        args.agent.display(),
        crate::store::db_flag(),
    );
    Ok(u8::from(refused > 0))
}
