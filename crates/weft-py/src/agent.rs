//! An agent for Python: read from a file or given as text, with its Python tools, on a store;
//! its runs ([`weft_host::task::run`]), resumes ([`weft_host::drive::drive`]) and plans
//! ([`weft_host::task::plan`]). Each returns its outcome as JSON, which the Python side reads
//! into a `weft.Result`.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use serde_json::{Value, json};
use weft_core::{Envelope, SessionStatus, State};
use weft_host::drive::{AgentFile, Before, Watchers};
use weft_host::task;
use weft_runtime::{Agent, Observer};
use weft_store::SessionLog;

use crate::{block_on, block_on_run, error, process, tool};

/// An agent and the store its sessions are kept in.
#[pyclass(frozen, module = "weft._weft")]
pub(crate) struct NativeAgent {
    file: Arc<AgentFile>,
    db: String,
    /// Whether it was read from a file (recorded in its sessions, so that `weft resume`
    /// and `weft sessions` name it).
    from_file: bool,
}

/// Reads `text` when given (what an application wrote in code, called `label` in errors),
/// else the file at `path`.
fn source(path: &str, text: Option<String>) -> Result<(String, String), String> {
    match text {
        Some(t) => Ok((path.to_owned(), t)),
        None => std::fs::File::open(path)
            .and_then(weft_core::limits::read_text)
            .map(|t| (path.to_owned(), t))
            .map_err(|e| format!("cannot read agent file {path}: {e}")),
    }
}

/// A JSON argument given as text, or `default` when none.
fn json_arg(what: &str, text: Option<String>, default: Value) -> PyResult<Value> {
    match text {
        None => Ok(default),
        Some(t) => serde_json::from_str(&t).map_err(|e| error(format!("{what}: {e}"))),
    }
}

/// The observers of a run: `on_event(json)` for each of the session's own events.
fn watchers(on_event: Option<Py<PyAny>>) -> Watchers {
    let Some(f) = on_event else {
        return Watchers::default();
    };
    let f = Arc::new(f);
    let observer: Observer = Arc::new(move |e: &Envelope| {
        let Ok(line) = serde_json::to_string(e) else {
            return;
        };
        Python::attach(|py| {
            if let Err(err) = f.call1(py, (line,)) {
                err.print(py);
            }
        });
    });
    Watchers {
        all: Vec::new(),
        own: vec![observer],
    }
}

/// A session's outcome as the Python side reads it.
fn outcome(st: &State, id: &str, before: Option<&Before>) -> String {
    let status = match st.status() {
        SessionStatus::Completed => "completed",
        SessionStatus::WaitingForUser => "waiting",
        SessionStatus::Failed | SessionStatus::Running => "failed",
    };
    let waiting = st.turn().waiting();
    json!({
        "status": status,
        "session_id": id,
        "answer": st.turn().answer(),
        "question": waiting.map(|w| w.question.clone()),
        "wait_kind": waiting.map(|w| w.kind.clone()),
        "error": st.turn().error(),
        "data": st.data(),
        "usage": st.usage().tokens,
        "tool_calls": before.map_or(st.calls().started, |b| b.tool_calls_since(st)),
    })
    .to_string()
}

/// The outcome of a run another process stopped, or Ctrl-C (`interrupted`).
fn stopped(id: &str, code: u8, interrupted: bool) -> String {
    json!({"status": "stopped", "session_id": id, "exit_code": code, "interrupted": interrupted})
        .to_string()
}

#[pymethods]
impl NativeAgent {
    /// Reads the agent (the file at `path`, or `text` called `path` in errors, its relative
    /// paths taken from `base`) and registers the Python `tools`.
    #[staticmethod]
    #[pyo3(signature = (db, path, text, base, tools))]
    fn load(
        py: Python<'_>,
        db: Option<String>,
        path: String,
        text: Option<String>,
        base: String,
        tools: Vec<tool::Given>,
    ) -> PyResult<Self> {
        let from_file = text.is_none();
        let (file, text) = source(&path, text).map_err(error)?;
        let db = db.unwrap_or_else(|| process::DEFAULT_DB.to_owned());
        let base = PathBuf::from(base);
        let store = db.clone();
        let loaded = block_on(py, async move {
            // The store is opened with the agent: a wrong `db` is said at once.
            process::store(&store).await?;
            weft_host::load::agent_from_source(
                weft_host::load::Source {
                    file,
                    text,
                    base: &base,
                },
                |reg| tool::register(reg, tools),
            )
            .await
            .map_err(|e| e.to_string())
        })?
        .map_err(error)?;
        let file = AgentFile::of(std::path::Path::new(&path), loaded, false).map_err(error)?;
        Ok(Self {
            file: Arc::new(file),
            db,
            from_file,
        })
    }

    /// The agent's name.
    #[getter]
    fn name(&self) -> String {
        self.file.spec.name.clone()
    }

    /// The store's spec.
    #[getter]
    fn db(&self) -> String {
        self.db.clone()
    }

    /// The names of its tools.
    fn tool_names(&self) -> Vec<String> {
        self.file.tools.infos().map(|i| i.name.clone()).collect()
    }

    /// Gives the agent a task (a new session, or another task for `session`), or answers the
    /// question `session` waits on; drives it until it ends or waits. The outcome as JSON.
    #[pyo3(signature = (task, session=None, id=None, input=None, user=None, reference=None, metadata=None, budget=None, on_event=None))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        task: String,
        session: Option<String>,
        id: Option<String>,
        input: Option<String>,
        user: Option<String>,
        reference: Option<String>,
        metadata: Option<String>,
        budget: Option<String>,
        on_event: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let file = self.file.clone();
        let input = json_arg("input", input, json!({}))?;
        let mut metadata = json_arg("metadata", metadata, json!({}))?;
        if !metadata.is_object() {
            return Err(error("metadata must be a JSON object"));
        }
        if self.from_file {
            weft_host::sessions::record_agent_file(&mut metadata, &file.path);
        }
        let agent = Agent::new(
            &file.spec,
            file.tools.clone(),
            file.model.clone(),
            &metadata,
            &input,
        )
        .map_err(|e| error(format!("agent file {}: {e}", file.path.display())))?;
        let host = process::host_for(&self.db);
        let db = self.db.clone();
        let from_file = self.from_file;
        let watchers = watchers(on_event);
        // Chosen here, so that a run stopped by Ctrl-C can say which session to resume.
        let id = session
            .clone()
            .or(id)
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let shutdown = host.shutdown.clone();
        let request = task::Task {
            id: session.is_none().then(|| id.clone()),
            session,
            task,
            input,
            user,
            reference,
            metadata,
            budget,
        };
        let (ran, interrupted) = block_on_run(py, &shutdown, async move {
            let store = process::store(&db).await?;
            host.durability.for_agents(store.as_ref(), [&file.spec]);
            let given = task::Given {
                agent: &agent,
                setup: file.setup(),
                budget: file.spec.budget.as_ref(),
                file: from_file.then_some(file.path.as_path()),
            };
            task::run(&host, store, given, watchers, request)
                .await
                .map_err(|e| e.to_string())
        })?;
        Ok(match ran.map_err(error)? {
            task::Ran::Done { state, id, before } => outcome(&state, &id, before.as_ref()),
            task::Ran::Stopped(code) => stopped(&id, code, interrupted),
        })
    }

    /// Continues session `session`, which was running when its process stopped: the calls in
    /// flight then run again (idempotent tools) or are recorded as unknown outcomes, and the
    /// session goes on until it ends or waits. With `force`, a lease another live process
    /// holds is taken over. The outcome as JSON.
    #[pyo3(signature = (session, force=false, on_event=None))]
    fn resume(
        &self,
        py: Python<'_>,
        session: String,
        force: bool,
        on_event: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let file = self.file.clone();
        let host = process::host_for(&self.db);
        let db = self.db.clone();
        let watchers = watchers(on_event);
        let shutdown = host.shutdown.clone();
        let (ended, interrupted) = block_on_run(py, &shutdown, async move {
            let store = process::store(&db).await?;
            let rec = store.get(&session).await.map_err(|e| e.to_string())?;
            match rec.status {
                SessionStatus::Running => {}
                SessionStatus::WaitingForUser => {
                    return Err(format!(
                        "session {session} waits for an answer; give it with `answer`"
                    ));
                }
                s => {
                    return Err(format!(
                        "session {session} has {}; there is nothing to resume",
                        s.as_str()
                    ));
                }
            }
            host.durability.for_agents(store.as_ref(), [&file.spec]);
            let held = weft_host::ownership::take(&host, store.clone(), &session, force)
                .await
                .map_err(|e| e.to_string())?;
            let ended = weft_host::drive::drive(&host, store, &held, &rec, &file, watchers).await;
            let failed_on_store =
                matches!(&ended, Err(e) if weft_host::store_error_in(e).is_some());
            if !failed_on_store {
                held.release().await;
            }
            Ok(match ended.map_err(|e| e.to_string())? {
                weft_host::drive::Ended::Done(state, before) => {
                    Ok(outcome(&state, &session, Some(&before)))
                }
                weft_host::drive::Ended::Stopped(code) => Err((session, code)),
            })
        })?;
        match ended.map_err(error)? {
            Ok(done) => Ok(done),
            Err((session, code)) => Ok(stopped(&session, code, interrupted)),
        }
    }

    /// Stops the agent's MCP servers.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let tools = self.file.tools.clone();
        block_on(py, async move { tools.shutdown().await })
    }
}

/// Runs a plan (JSON text) with the Python `tools` and the tools of the agent file at `agent`
/// (when given) in a new session: no model is called. The outcome as JSON (a refused plan:
/// `{"status": "refused", "problems": [...]}`).
#[pyfunction]
#[pyo3(signature = (plan, tools, db=None, agent=None, input=None, id=None, user=None, on_event=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_plan(
    py: Python<'_>,
    plan: String,
    tools: Vec<tool::Given>,
    db: Option<String>,
    agent: Option<String>,
    input: Option<String>,
    id: Option<String>,
    user: Option<String>,
    on_event: Option<Py<PyAny>>,
) -> PyResult<String> {
    let plan = match weft_core::Plan::parse_str(&plan) {
        Ok(p) => p,
        Err(problems) => return Ok(json!({"status": "refused", "problems": problems}).to_string()),
    };
    let input = json_arg("input", input, json!({}))?;
    let db = db.unwrap_or_else(|| process::DEFAULT_DB.to_owned());
    let host = process::host_for(&db);
    let watchers = watchers(on_event);
    let shutdown = host.shutdown.clone();
    let id = id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let session = id.clone();
    let (ran, interrupted) = block_on_run(py, &shutdown, async move {
        let (text, label, base) = match &agent {
            Some(path) => {
                let (label, text) = source(path, None)?;
                let base = weft_host::load::base_dir(std::path::Path::new(path)).to_owned();
                (text, label, base)
            }
            None => (
                "{\"name\": \"python\"}".to_owned(),
                "<plan tools>".to_owned(),
                PathBuf::from("."),
            ),
        };
        let loaded = weft_host::load::agent_from_source(
            weft_host::load::Source {
                file: label,
                text,
                base: &base,
            },
            |reg| tool::register(reg, tools),
        )
        .await
        .map_err(|e| e.to_string())?;
        let store = process::store(&db).await?;
        host.durability.for_agents(store.as_ref(), [&loaded.spec]);
        let redact = loaded.redactor();
        let setup = weft_host::hosted::Setup {
            provider: weft_host::telemetry::Provider::of(&loaded.spec),
            new: true,
            limits: loaded.spec.limits.clone(),
            tools: Arc::new(loaded.tools),
            redact,
        };
        let tools = setup.tools.clone();
        let run = task::PlanRun {
            plan,
            input,
            id: Some(id),
            user,
            agent: loaded.spec.name.clone(),
            file: agent.map(PathBuf::from),
        };
        let ran = task::plan(&host, store, setup, watchers, run).await;
        tools.shutdown().await;
        Ok::<_, String>(match ran.map_err(|e| e.to_string())? {
            task::PlanRan::Done(state) => Ok(outcome(&state, state.session_id(), None)),
            task::PlanRan::Refused(problems) => {
                Ok(json!({"status": "refused", "problems": problems}).to_string())
            }
            task::PlanRan::Stopped(code) => Err(code),
        })
    })?;
    match ran.map_err(error)? {
        Ok(done) => Ok(done),
        Err(code) => Ok(stopped(&session, code, interrupted)),
    }
}
