//! `weft submit`: queue a run (or an answer to a session that waits) for `weft worker`. The
//! session is written at once, running and held by no process, and the workers are woken; the
//! session id is printed. `weft sessions show ID` and `weft sessions events --follow ID` watch it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use clap::Args;
use weft_core::SessionStatus;
use weft_runtime::SessionInfo;
use weft_store::Store;

use weft_host::Host;

use crate::cmd::run::{self as run_cmd, RunArgs};
use crate::cmd::submit_from;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The agent file (YAML or JSON); the workers must have an agent of the same name.
    pub agent: PathBuf,
    /// The task (`-`: read it from stdin); with --session, the answer to the session's question.
    #[arg(required_unless_present = "from")]
    pub task: Option<String>,
    /// Queue many runs: one JSON object per line of FILE (`-`: stdin), e.g.
    /// `{"task": "...", "input": {...}, "user": "...", "id": "..."}`; the ids are printed in the
    /// order of the lines.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["task", "session", "input", "reference", "metadata", "id"])]
    pub from: Option<PathBuf>,
    /// Answer this session, which waits for a person; a worker continues it.
    #[arg(long)]
    pub session: Option<String>,
    /// The run's input: JSON text, or @FILE.
    #[arg(long)]
    pub input: Option<String>,
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
    /// The run's budget over the agent file's (or, with --session, the session's), as for
    /// `weft run --budget`.
    #[arg(long, value_name = "KEY=VALUE,...")]
    pub budget: Option<String>,
}

impl SubmitArgs {
    fn as_run(&self) -> RunArgs {
        RunArgs {
            agent: self.agent.clone(),
            task: self.task.clone().unwrap_or_default(),
            session: self.session.clone(),
            input: self.input.clone(),
            events: false,
            user: self.user.clone(),
            reference: self.reference.clone(),
            metadata: self.metadata.clone(),
            id: self.id.clone(),
            secret: Vec::new(),
            budget: self.budget.clone(),
        }
    }
}

/// A submission checked before the store is opened.
pub struct Prepared {
    /// The agent file and, without `--from`, the one run.
    pub run: run_cmd::Prepared,
    /// With `--from`: the file and its runs.
    from: Option<(PathBuf, Vec<submit_from::Queued>)>,
}

/// Checks the agent file and the task, or every line of `--from` (exit 2 on a mistake, before
/// the store is opened).
pub async fn prepare(a: &SubmitArgs) -> Result<Prepared> {
    let run = run_cmd::prepare(a.as_run()).await?;
    let from = match &a.from {
        Some(path) => {
            let runs = submit_from::read(path, &run, a.user.as_deref(), a.budget.as_deref()).await;
            match runs {
                Ok(runs) => Some((path.clone(), runs)),
                Err(e) => {
                    run.tools.shutdown().await;
                    return Err(e);
                }
            }
        }
        None => None,
    };
    Ok(Prepared { run, from })
}

pub async fn run<S: Store>(host: &Host, store: Arc<S>, p: Prepared) -> Result<u8> {
    host.durability
        .for_asked(store.as_ref(), [p.run.durability]);
    match p.from {
        Some((path, runs)) => submit_from::run(store, p.run, &path, runs).await,
        None => one(host, store, p.run).await,
    }
}

/// Queues one run.
async fn one<S: Store>(host: &Host, store: Arc<S>, p: run_cmd::Prepared) -> Result<u8> {
    let run_cmd::Prepared {
        args,
        limits,
        redact,
        tools,
        agent,
        input,
        metadata,
        durability: _,
        budget,
        // Submitting exports nothing (the worker that runs it does).
        provider: _,
    } = p;
    // `--budget` over the budget in force (the session's last, else the agent file's).
    let given = |base: Option<&weft_core::budget::Budget>| -> Result<Option<weft_core::Event>> {
        let Some(text) = &args.budget else {
            return Ok(None);
        };
        let b = base
            .or(budget.as_ref())
            .cloned()
            .unwrap_or_default()
            .with_overrides(text)
            .map_err(|e| anyhow!("--budget: {e}"))?;
        weft_runtime::budget::warn_unpriced(agent.model.as_ref(), Some(&b));
        Ok(Some(weft_core::Event::BudgetSet { budget: b }))
    };
    let builder = weft_host::hosted::unleased(store.clone(), (tools.clone(), limits, redact), None);
    let id = match &args.session {
        Some(id) => {
            // The answer is written under the session's lease, as any other write.
            let held = weft_host::ownership::take(host, store.clone(), id, false).await?;
            let rt = held.bind(builder).build();
            let queued = async {
                let mut session = rt.load_session(id).await?;
                if session.state.agent() != agent.name {
                    return Err(anyhow!(
                        "session {id} belongs to agent `{}`, not `{}`",
                        session.state.agent(),
                        agent.name
                    ));
                }
                if session.state.status() != SessionStatus::WaitingForUser {
                    return Err(anyhow!(
                        "session {id} is {}, not waiting for an answer",
                        session.state.status().as_str()
                    ));
                }
                if let Some(set) = given(session.state.spending().budget.as_ref())? {
                    session.commit(vec![set]).await?;
                }
                rt.queue_reply(&agent, &mut session, &args.task).await?;
                Ok(())
            }
            .await;
            held.release().await;
            queued?;
            id.clone()
        }
        None => {
            let info = SessionInfo {
                id: args.id.clone(),
                user_id: args.user.clone(),
                reference_id: args.reference.clone(),
                metadata,
                parent_id: None,
            };
            let extra = given(None)?.into_iter().collect();
            let rt = builder.build();
            match rt.queue_agent(&agent, info, &args.task, input, extra).await {
                Ok(session) => session.id.clone(),
                Err(weft_runtime::RuntimeError::Store(weft_store::StoreError::Exists(id))) => {
                    tools.shutdown().await;
                    return Err(weft_host::task::taken(
                        host,
                        store.as_ref(),
                        &id,
                        Some(&args.agent),
                    )
                    .await
                    .into());
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    tools.shutdown().await;
    // Workers poll anyway; a failed wake-up only delays the start.
    if let Err(e) = store.wake().await {
        tracing::warn!("cannot wake the workers: {e}");
    }
    println!("{id}");
    eprintln!(
        "queued: session {id} for agent `{}`; a `weft worker{}` runs it (watch it with `weft sessions events --follow{} {id}`)",
        agent.name,
        crate::store::db_flag(),
        crate::store::db_flag()
    );
    Ok(0)
}
