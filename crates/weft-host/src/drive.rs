//! Continuing a session this process holds the lease of: the one place where `weft resume` and
//! `weft worker` drive a session that is running but that no process drives (queued by `weft
//! submit`, or left by a process that stopped).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weft_core::model::Usage;

use weft_core::{Event, Limits, RunStatus, State};
use weft_model::SharedModel;
use weft_runtime::{Agent, Observer};
use weft_store::{SessionRecord, Store};

use crate::hosted::Hosted;
use crate::ownership::Held;
use crate::{Host, HostError, load};

type Result<T, E = HostError> = std::result::Result<T, E>;

/// What a session had used before a run continued it (to show the run's own share).
#[derive(Clone, Debug, Default)]
pub struct Before {
    /// The tokens and cost so far.
    pub usage: Usage,
    /// The tool calls so far.
    pub tool_calls: u64,
    /// Calls that were in flight when the session's last process stopped and that this run
    /// runs again (a resume): they ran in this run, though they were started before it.
    pub rerun: u64,
}

impl Before {
    /// What `st` has used.
    pub fn of(st: &State) -> Self {
        Self {
            usage: st.usage().tokens.clone(),
            tool_calls: st.calls().started,
            rerun: 0,
        }
    }

    /// What `st` has used, before a run that resumes it with `tools`: the calls in flight that
    /// recovery runs again count as this run's (those it records as unknown outcomes do not).
    pub fn resuming(st: &State, tools: &weft_tools::Registry, limits: &Limits) -> Self {
        Self {
            rerun: weft_core::recovery::recover(st, tools, limits).rerun.len() as u64,
            ..Self::of(st)
        }
    }

    /// The tool calls made since: those started, and those run again.
    pub fn tool_calls_since(&self, st: &State) -> u64 {
        st.calls()
            .started
            .saturating_sub(self.tool_calls)
            .saturating_add(self.rerun)
    }
}

/// An agent file loaded once, to drive any number of its sessions.
pub struct AgentFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// What it says.
    pub spec: weft_core::agent::AgentSpec,
    /// Its tools, built.
    pub tools: Arc<weft_tools::Registry>,
    /// Its model (one that refuses every call when the file names none).
    pub model: SharedModel,
    /// Redacts its secrets from events.
    pub redact: Option<weft_runtime::Redact>,
}

impl AgentFile {
    /// Reads the agent file and builds its tools and model.
    pub async fn load(path: &Path) -> Result<Self> {
        Self::load_with(path, true).await
    }

    /// Like [`AgentFile::load`], for continuing a session: a file without a `model` (one that
    /// declares tools for plans) can still continue its plan sessions.
    pub async fn load_to_continue(path: &Path) -> Result<Self> {
        Self::load_with(path, false).await
    }

    async fn load_with(path: &Path, needs_model: bool) -> Result<Self> {
        Self::of(path, load::agent(path).await?, needs_model)
    }

    /// An agent file read already (`path` as errors name it): its model built. Without
    /// `needs_model`, a file without a `model` gets one that refuses every call (plan
    /// sessions need none).
    pub fn of(path: &Path, loaded: load::LoadedAgent, needs_model: bool) -> Result<Self> {
        let redact = loaded.redactor();
        let model = if loaded.spec.model.is_none() && !needs_model {
            Arc::new(NoModel) as SharedModel
        } else {
            Agent::model_from_spec(&loaded.spec, load::base_dir(path))
                .map_err(|e| HostError::AgentFile(format!("agent file {}: {e}", path.display())))?
        };
        Ok(Self {
            path: path.to_owned(),
            spec: loaded.spec,
            tools: Arc::new(loaded.tools),
            model,
            redact,
        })
    }
}

/// The model of an agent file that names none: plan sessions need no model, and an agent
/// session is refused before it would call one (see [`drive`]).
struct NoModel;

impl weft_model::Model for NoModel {
    fn name(&self) -> &str {
        "none"
    }

    async fn complete(
        &self,
        _req: &weft_model::ModelRequest,
        _deltas: Option<weft_model::DeltaSink>,
    ) -> Result<weft_model::ModelReply, weft_model::ModelError> {
        Err(weft_model::ModelError::Config(
            "the agent file has no `model`".into(),
        ))
    }
}

/// The agent files named by `--agents`, by agent name.
pub async fn agents(paths: &[PathBuf]) -> Result<HashMap<String, Arc<AgentFile>>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| {
                HostError::Invalid(format!(
                    "--agents {}: cannot read the directory: {e}",
                    p.display()
                ))
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.extension()
                        .and_then(|x| x.to_str())
                        .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
                })
                .collect();
            found.sort();
            // A directory also holds other files (scripts, plans): those that are not agent
            // files are passed over.
            for f in found {
                if is_agent_file(&f) {
                    files.push((f, true));
                }
            }
        } else if p.exists() {
            files.push((p.clone(), false));
        } else {
            return Err(HostError::Invalid(format!(
                "--agents {}: no such file or directory",
                p.display()
            )));
        }
    }
    let mut by_name: HashMap<String, Arc<AgentFile>> = HashMap::new();
    let mut skipped = Vec::new();
    for (f, in_dir) in files {
        // A file named on its own must load; one found in a directory that cannot be run here
        // (a plan-only agent without a model, a missing key) is left out, and said so.
        let agent = match AgentFile::load(&f).await {
            Ok(a) => a,
            Err(e) if in_dir => {
                let why = e.to_string();
                eprintln!("skipped {}: {why}", f.display());
                skipped.push(why);
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some(other) = by_name.get(&agent.spec.name) {
            return Err(HostError::Invalid(format!(
                "agents {} and {} are both named `{}`; sessions are matched to agents by name, so give them different names",
                other.path.display(),
                f.display(),
                agent.spec.name
            )));
        }
        by_name.insert(agent.spec.name.clone(), Arc::new(agent));
    }
    if by_name.is_empty() {
        let named: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(HostError::Invalid(format!(
            "no agent file that can run in {}{}; name agent files or directories with --agents",
            named.join(", "),
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} skipped: {})", skipped.len(), skipped.join("; "))
            }
        )));
    }
    Ok(by_name)
}

/// Whether a file parses as an agent file.
fn is_agent_file(path: &Path) -> bool {
    std::fs::File::open(path)
        .and_then(weft_core::limits::read_text)
        .ok()
        .is_some_and(|text| {
            weft_core::agent::AgentSpec::parse(&path.display().to_string(), &text).is_ok()
        })
}

/// Who sees the events of a session being driven (besides its live telemetry, which
/// [`crate::hosted::Hosted`] sets up).
#[derive(Default)]
pub struct Watchers {
    /// Every event once it is stored: the session's and its sub-agents' sessions'.
    pub all: Vec<Observer>,
    /// The session's own events, not its sub-agents' (see
    /// [`weft_runtime::RuntimeBuilder::observe_own`]).
    pub own: Vec<Observer>,
}

/// How driving a session ended.
#[derive(Debug)]
pub enum Ended {
    /// The session completed, failed or waits for a person; what it had used before.
    Done(State, Before),
    /// Another process asked this one to cancel or pause it; the exit code.
    Stopped(u8),
}

/// Continues session `rec` (whose lease `held` is) with `agent`: calls in flight when its last
/// process stopped are re-run (idempotent tools) or recorded as unknown outcomes, then the plan
/// or the agent goes on until the session ends or waits, or another process asks to cancel or
/// pause it. The caller releases the lease. The runtime is held to the quota of the session's
/// user; `watchers` see its events.
pub async fn drive<S: Store + 'static>(
    host: &Host,
    store: Arc<S>,
    held: &Held<S>,
    rec: &SessionRecord,
    agent: &AgentFile,
    watchers: Watchers,
) -> Result<Ended> {
    let hosted = Hosted::start(
        host,
        store,
        held,
        agent.setup(),
        rec.user_id.as_deref(),
        watchers,
    )
    .await;
    let ended = continue_session(&hosted, rec, agent).await;
    hosted.end().await;
    ended
}

/// The work of [`drive`], on its hosted session.
async fn continue_session<S: Store + 'static>(
    hosted: &Hosted<'_, S>,
    rec: &SessionRecord,
    agent: &AgentFile,
) -> Result<Ended> {
    let rt = hosted.runtime();
    let mut session = rt.load_session(&rec.id).await?;
    if session.state.mode().is_some() && agent.spec.model.is_none() {
        return Err(HostError::AgentFile(format!(
            "agent file {} has no `model`, which the agent session {} needs; set one (e.g. `model: openai:gpt-4o-mini`)",
            agent.path.display(),
            rec.id
        )));
    }
    let before = Before::resuming(&session.state, &agent.tools, &agent.spec.limits);
    let work = async {
        if session.state.mode().is_none() {
            rt.resume_plan(&mut session).await
        } else {
            match Agent::new(
                &agent.spec,
                agent.tools.clone(),
                agent.model.clone(),
                &rec.metadata,
                session.state.input(),
            ) {
                Ok(a) => rt.resume_agent(&a, &mut session).await,
                // Trying again would fail the same way: the session ends here, saying why.
                Err(e) => {
                    session
                        .commit(vec![Event::RunFinished {
                            status: RunStatus::Failed,
                            error: Some(format!("agent file {}: {e}", agent.path.display())),
                            answer: None,
                        }])
                        .await
                }
            }
        }
    };
    match hosted.run(work).await {
        Ok(done) => done?,
        Err(asked) => return Ok(Ended::Stopped(hosted.stopped(asked).await?)),
    }
    Ok(Ended::Done(session.state, before))
}
