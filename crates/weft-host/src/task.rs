//! A task given to an agent, or a plan run, by a front end that drives it in its own process
//! (`weft run`, `weft answer`, `weft plan run`, the Python package): the one place that decides
//! what the request means for the session (a new one, another task for one that ended, the
//! answer to one that waits), takes its lease, hosts the run ([`crate::hosted`]) and gives the
//! lease back. The front end reads the task and the agent file before, and shows the outcome
//! after.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use weft_core::budget::Budget;
use weft_core::{Event, SessionStatus, State};
use weft_runtime::{Agent, RuntimeError, SessionInfo};
use weft_store::{Store, StoreError};

use crate::drive::{Before, Watchers};
use crate::hosted::{Begin, Hosted, Setup};
use crate::{Host, HostError};

type Result<T, E = HostError> = std::result::Result<T, E>;

/// A task for an agent.
#[derive(Debug, Default)]
pub struct Task {
    /// The session it continues; `None`: a new session.
    pub session: Option<String>,
    /// The new session's id (default: a new time-ordered UUID); ignored with `session`.
    pub id: Option<String>,
    /// The task, or the answer to the session's question.
    pub task: String,
    /// The run's input.
    pub input: Value,
    /// The user the session belongs to.
    pub user: Option<String>,
    /// An outside reference for the session.
    pub reference: Option<String>,
    /// The new session's metadata (an object).
    pub metadata: Value,
    /// The run's budget over the one in force, as `KEY=VALUE,...` (`--budget`).
    pub budget: Option<String>,
}

/// How a run that was driven ended.
#[derive(Debug)]
pub enum Ran {
    /// The session completed, failed or waits: its state, its id, and what it had used before
    /// (`None` for a new session).
    Done {
        /// The session's state.
        state: State,
        /// Its id.
        id: String,
        /// What it had used when this run began.
        before: Option<Before>,
    },
    /// Another process (or this one's shutdown) asked it to stop: the exit code.
    Stopped(u8),
}

/// What an agent's run is given besides its task: the agent, what it runs with, the budget of
/// its agent file and where that file is (for the hints of errors).
pub struct Given<'a> {
    /// The agent.
    pub agent: &'a Agent,
    /// Its tools, limits, redaction and provider ([`Setup::new`] is set here).
    pub setup: Setup,
    /// The agent file's `budget:`.
    pub budget: Option<&'a Budget>,
    /// The agent file, as the hints name it; `None` for an agent an application built in code.
    pub file: Option<&'a Path>,
}

/// Runs `task` with `given` on `store`: takes the session's lease, begins or continues the
/// session, drives it until it ends, waits or is asked to stop, and gives the lease back
/// (after a store error it is left to run out: the store may not answer). `watchers` see
/// its events.
pub async fn run<S: Store + 'static>(
    host: &Host,
    store: Arc<S>,
    given: Given<'_>,
    watchers: Watchers,
    task: Task,
) -> Result<Ran> {
    let overrides = |base: Option<&Budget>| -> Result<Option<Budget>> {
        let Some(text) = &task.budget else {
            return Ok(None);
        };
        base.or(given.budget)
            .cloned()
            .unwrap_or_default()
            .with_overrides(text)
            .map(Some)
            .map_err(|e| HostError::Invalid(format!("--budget: {e}")))
    };
    let id = match &task.session {
        Some(id) => id.clone(),
        None => task
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
    };
    let held = crate::ownership::take(host, store.clone(), &id, false).await?;
    let setup = Setup {
        new: task.session.is_none(),
        ..given.setup
    };
    let hosted = Hosted::start(host, store, &held, setup, task.user.as_deref(), watchers).await;
    if let Some(id) = &task.session {
        host.shutdown.note_session(id);
    }
    let agent = given.agent;
    let rt = hosted.runtime();
    let work = async {
        let Some(id) = &task.session else {
            let info = SessionInfo {
                id: Some(id.clone()),
                user_id: task.user.clone(),
                reference_id: task.reference.clone(),
                metadata: task.metadata.clone(),
                parent_id: None,
            };
            let first = match overrides(None)? {
                Some(b) => {
                    weft_runtime::budget::warn_unpriced(agent.model.as_ref(), Some(&b));
                    vec![Event::BudgetSet { budget: b }]
                }
                None => Vec::new(),
            };
            let begin = Begin::New {
                info,
                task: task.task.clone(),
                input: task.input.clone(),
            };
            let mut session = match hosted.begin(agent, begin, first).await {
                Ok(s) => s,
                Err(RuntimeError::Store(StoreError::Exists(_))) => {
                    return Err(taken(host, rt.store().as_ref(), &id, given.file).await);
                }
                Err(e) => return Err(e.into()),
            };
            rt.drive_agent(agent, &mut session).await?;
            return Ok((session, None));
        };
        let mut session = rt.load_session(id).await?;
        let before = Before::of(&session.state);
        if session.state.agent() != agent.name {
            return Err(HostError::Refused(format!(
                "session {id} belongs to agent `{}`, not `{}`",
                session.state.agent(),
                agent.name
            )));
        }
        if let Some(b) = overrides(session.state.spending().budget.as_ref())?
            && session.state.status() != SessionStatus::Running
        {
            rt.set_budget(agent.model.as_ref(), &mut session, b).await?;
        }
        match session.state.status() {
            SessionStatus::WaitingForUser => rt.reply(agent, &mut session, &task.task).await?,
            SessionStatus::Running => {
                return Err(HostError::Refused(format!(
                    "session {id} was running when its process stopped; continue it with `weft resume{} {id}`",
                    host.db_flag
                )));
            }
            SessionStatus::Completed | SessionStatus::Failed => {
                rt.run_task(agent, &mut session, &task.task, task.input.clone())
                    .await?;
            }
        }
        Ok((session, Some(before)))
    };
    // Another process may ask this one to cancel or pause the session while it runs.
    let ran = match hosted.run(work).await {
        Ok(Ok((session, before))) => Ok(Ran::Done {
            state: session.state,
            id: session.id,
            before,
        }),
        Ok(Err(e)) => Err(e),
        Err(asked) => hosted.stopped(asked).await.map(Ran::Stopped),
    };
    hosted.end().await;
    // A refused run (a session that exists, of another agent, ...) lets the session go at
    // once, not held by this process's lease until it runs out; after a store error the lease
    // is left to run out.
    match &ran {
        Err(e) if crate::store_error_in(e).is_some() => {}
        _ => held.release().await,
    }
    ran
}

/// A plan run: the plan, its input, the new session's id and user, and the agent file whose
/// tools it calls.
pub struct PlanRun {
    /// The plan (read and parsed).
    pub plan: weft_core::Plan,
    /// Its input.
    pub input: Value,
    /// The new session's id (default: a new time-ordered UUID).
    pub id: Option<String>,
    /// The user the session belongs to.
    pub user: Option<String>,
    /// The agent's name, which the session records.
    pub agent: String,
    /// The agent file (recorded in the session's metadata so that `weft resume` finds its
    /// tools); `None` for tools that no file declares.
    pub file: Option<std::path::PathBuf>,
}

/// How a plan run ended: its state, or the problems that refused the plan before anything ran.
#[derive(Debug)]
pub enum PlanRan {
    /// The session ran (completed or failed): its state.
    Done(State),
    /// The plan was refused: its problems.
    Refused(Vec<weft_core::PlanProblem>),
    /// Another process (or this one's shutdown) asked it to stop: the exit code.
    Stopped(u8),
}

/// Runs a plan with the tools and limits of `setup` in a new session: takes its lease, checks
/// the plan against the tools and the input, runs it, and gives the lease back.
pub async fn plan<S: Store + 'static>(
    host: &Host,
    store: Arc<S>,
    setup: Setup,
    watchers: Watchers,
    p: PlanRun,
) -> Result<PlanRan> {
    let id = p.id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let held = crate::ownership::take(host, store.clone(), &id, false).await?;
    let setup = Setup { new: true, ..setup };
    let hosted = Hosted::start(host, store, &held, setup, p.user.as_deref(), watchers).await;
    let rt = hosted.runtime();
    let problems = rt.check_plan(&p.plan, Some(&p.input));
    let ran = if problems.is_empty() {
        let mut metadata = serde_json::json!({});
        if let Some(file) = &p.file {
            crate::sessions::record_agent_file(&mut metadata, file);
        }
        let info = SessionInfo {
            id: Some(id.clone()),
            user_id: p.user.clone(),
            metadata,
            ..SessionInfo::default()
        };
        match hosted
            .run(rt.run_plan_in(&p.agent, p.plan, p.input, info))
            .await
        {
            Ok(Ok(done)) => Ok(PlanRan::Done(done.state)),
            Ok(Err(RuntimeError::Store(StoreError::Exists(_)))) => {
                Err(taken(host, rt.store().as_ref(), &id, None).await)
            }
            Ok(Err(e)) => Err(e.into()),
            Err(asked) => hosted.stopped(asked).await.map(PlanRan::Stopped),
        }
    } else {
        Ok(PlanRan::Refused(problems))
    };
    hosted.end().await;
    held.release().await;
    ran
}

/// The error for a new session whose id is taken, with how to go on with the session there:
/// `weft resume` when it stopped while running (its process died, or gave up on the store),
/// `weft answer` when it waits, a new task with `--session` when it has ended (an agent's
/// session: `agent` is its file; a plan's has none to give).
pub async fn taken<S: Store>(host: &Host, store: &S, id: &str, agent: Option<&Path>) -> HostError {
    let db = &host.db_flag;
    let how = match (store.get(id).await.map(|r| r.status), agent) {
        (Ok(SessionStatus::Running), _) => {
            format!("it stopped before it finished; continue it with `weft resume{db} {id}`")
        }
        (Ok(SessionStatus::WaitingForUser), _) => {
            format!("it waits for an answer; give it with `weft answer{db} {id} \"<answer>\"`")
        }
        (Ok(SessionStatus::Completed | SessionStatus::Failed), Some(agent)) => format!(
            "it has ended; give it another task with `weft run{db} {} --session {id} \"<task>\"`, or give the new session another --id",
            crate::shell_word(&agent.display().to_string())
        ),
        (Ok(SessionStatus::Completed | SessionStatus::Failed), None) => {
            "it has ended; give the new session another --id (or none, for a new one)".to_owned()
        }
        (Err(_), _) => "give the new session another --id".to_owned(),
    };
    HostError::Refused(format!("session {id} already exists: {how}"))
}
