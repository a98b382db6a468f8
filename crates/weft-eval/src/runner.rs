//! A case run as a session, the way `weft run` runs one: under the session's lease, with the
//! agent file's tools, model and limits, in the store the command was given (so the session can
//! be listed, opened in the playground, traced and forked). Cases run in parallel.
//!
//! A run stopped midway (killed, or its machine gone) is finished by the same command: a case
//! whose session is already its run's is not run again. Scored, its result is read back from
//! the session ([`stored::result_of`]); ended but not scored, it is scored; still running (its
//! process gone), it goes on from its log, as `weft resume` continues a session, then is scored.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::SessionStatus;
use weft_host::drive::{AgentFile, Watchers};
use weft_host::hosted::{Hosted, Setup};
use weft_host::{Host, load, ownership};
use weft_model::SharedModel;
use weft_runtime::{Agent, SessionInfo};
use weft_store::{Store, StoreError};

use crate::EvalError;
use crate::dataset::{Case, Dataset};
use crate::expect::{self, Score};
use crate::observed::Observed;
use crate::replay::{self, ReplayMode, ReplayModel};
use crate::results::CaseResult;
use crate::{scorer, stored};

/// What a run of a dataset is.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The run's id: its sessions are `RUN-CASE-rK`.
    pub run_id: String,
    /// How many times each case runs.
    pub repeat: u32,
    /// How many sessions run at once.
    pub concurrency: usize,
}

/// Runs an agent's cases.
pub struct Runner<S: Store> {
    host: Host,
    store: Arc<S>,
    agent: Arc<AgentFile>,
    /// Where command scorers run and scripted judges are found.
    dataset_dir: PathBuf,
    /// The judge of judge scorers that name no model.
    judge: Option<SharedModel>,
    run_id: String,
    /// How recorded cases are replayed, instead of the mode each was recorded with.
    replay_mode: Option<ReplayMode>,
    /// The user of the sessions of cases that name none.
    user: Option<String>,
    /// The dataset file, as recorded on each session.
    dataset_path: String,
    /// Each case's place in the dataset, as recorded on its sessions (readers list cases in it).
    order: std::collections::HashMap<String, usize>,
}

/// A case to run: the case and which of its repeats.
#[derive(Clone, Debug)]
pub struct Job {
    /// The case.
    pub case: Arc<Case>,
    /// The repeat, from 1.
    pub repeat: u32,
}

impl<S: Store> Runner<S> {
    /// A runner of `agent`'s sessions on `store` for run `run_id`. `judge`: the model of judge
    /// scorers that name none (`None`: the agent's model).
    pub fn new(
        host: Host,
        store: Arc<S>,
        agent: Arc<AgentFile>,
        dataset: &Dataset,
        judge: Option<SharedModel>,
        run_id: String,
    ) -> Self {
        let judge = judge.or_else(|| agent.spec.model.is_some().then(|| agent.model.clone()));
        // An evaluation's sessions are not exported live: `weft sessions trace` exports one
        // when wanted.
        let host = Host {
            telemetry: weft_host::telemetry::Telemetry::default(),
            ..host
        };
        Self {
            host,
            store,
            agent,
            dataset_dir: dataset.dir(),
            judge,
            run_id,
            replay_mode: None,
            user: None,
            dataset_path: load::absolute(&dataset.path),
            order: dataset
                .cases
                .iter()
                .enumerate()
                .map(|(i, c)| (c.id.clone(), i))
                .collect(),
        }
    }

    /// Gives the sessions of cases that name no `user` to `user` (as `weft run --user` does), so
    /// that they are that user's in `weft serve` and the playground.
    pub fn user(mut self, user: Option<String>) -> Self {
        self.user = user;
        self
    }

    /// Replays recorded cases in `mode`, whatever mode each was recorded with.
    pub fn replay_in(mut self, mode: Option<ReplayMode>) -> Self {
        self.replay_mode = mode;
        self
    }

    /// The id of the session of `case`'s repeat `k`.
    pub fn session_id(&self, case: &str, k: u32) -> String {
        format!("{}-{case}-r{k}", self.run_id)
    }

    /// Runs every job, `concurrency` at once; `done` is told of each result as it comes.
    /// Results come back in the jobs' order. Stops starting jobs once the host's shutdown is
    /// triggered (the sessions running stop at a safe point).
    pub async fn run_all(
        self: Arc<Self>,
        jobs: Vec<Job>,
        concurrency: usize,
        mut done: impl FnMut(&CaseResult),
    ) -> Vec<CaseResult> {
        let concurrency = concurrency.max(1);
        let mut slots: Vec<Option<CaseResult>> = vec![None; jobs.len()];
        let mut set = tokio::task::JoinSet::new();
        let mut queue = jobs.into_iter().enumerate();
        loop {
            while set.len() < concurrency && !self.host.shutdown.is_requested() {
                let Some((i, job)) = queue.next() else { break };
                let me = self.clone();
                set.spawn(async move { (i, me.run(&job.case, job.repeat).await) });
            }
            let Some(joined) = set.join_next().await else {
                break;
            };
            match joined {
                Ok((i, r)) => {
                    done(&r);
                    slots[i] = Some(r);
                }
                Err(e) => tracing::error!("an eval case's task failed: {e}"),
            }
        }
        slots.into_iter().flatten().collect()
    }

    /// Runs repeat `k` of `case` as a session and scores it (a session of this run's scored
    /// already: its result as recorded).
    pub async fn run(&self, case: &Case, k: u32) -> CaseResult {
        let id = self.session_id(&case.id, k);
        match self.scored_already(&id).await {
            Ok(Some(r)) => return r,
            Ok(None) => {}
            Err(e) => return CaseResult::not_run(&self.run_id, case, k, &id, e.to_string()),
        }
        // A recorded case's replies are replayed (unless live).
        let replay = case.replay.as_ref().and_then(|r| {
            let mode = self.replay_mode.unwrap_or(r.mode);
            (mode != ReplayMode::Live).then(|| {
                let model = Arc::new(ReplayModel::new(
                    Arc::new(r.clone()),
                    mode == ReplayMode::Strict,
                ));
                (r, mode, model)
            })
        });
        let model: SharedModel = match &replay {
            Some((_, _, m)) => m.clone(),
            None => self.agent.model.clone(),
        };
        match self.session(case, &id, model).await {
            Ok((obs, events)) => {
                let mut r = self.score(case, k, obs, &events).await;
                if let Some((rec, mode, m)) = &replay {
                    r.scores
                        .push(replay::score(rec, *mode, &m.drift(), &events));
                    r.rescore();
                }
                if let Err(e) = self.record_scores(&id, &r.scores).await {
                    tracing::warn!(session = %id, "cannot record the evaluation on the session: {e}");
                }
                r
            }
            Err(e) => CaseResult::not_run(&self.run_id, case, k, &id, e.to_string()),
        }
    }

    /// The result of session `id` when it is this run's and its verdicts are recorded (a run
    /// that stopped after scoring it); `None` when it is not there or not scored.
    async fn scored_already(&self, id: &str) -> Result<Option<CaseResult>, EvalError> {
        let rec = match self.store.get(id).await {
            Ok(rec) => rec,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if stored::case_of(&rec).map(|(run, _)| run) != Some(self.run_id.as_str()) {
            return Ok(None);
        }
        let (rec, events) = self.store.load(id).await?;
        let scored = events.iter().any(|e| {
            matches!(&e.event, weft_core::Event::EvaluationResult { run, .. } if run == &self.run_id)
        });
        if !scored {
            return Ok(None);
        }
        let state = weft_runtime::load_state(self.store.as_ref(), id)
            .await?
            .state;
        Ok(stored::result_of(&rec, &state, &events))
    }

    /// Runs the session of a case to its end (or wait, after the case's replies). A session of
    /// this run's case that exists already (its run was stopped) goes on from where it is.
    async fn session(
        &self,
        case: &Case,
        id: &str,
        model: SharedModel,
    ) -> Result<(Observed, Vec<weft_core::Envelope>), EvalError> {
        let existing = match self.store.get(id).await {
            Ok(rec) if stored::case_of(&rec) == Some((self.run_id.as_str(), case.id.as_str())) => {
                Some(rec)
            }
            Ok(_) => {
                return Err(EvalError::Invalid(format!(
                    "session {id} exists already and is not a session of run {} for case {}; give this run another --name",
                    self.run_id, case.id
                )));
            }
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        // The case's replies its session was given already.
        let replied = match &existing {
            Some(_) => self
                .store
                .load(id)
                .await?
                .1
                .iter()
                .filter(|e| matches!(e.event, weft_core::Event::UserReplied { .. }))
                .count(),
            None => 0,
        };
        let input = case.input.clone().unwrap_or_else(|| json!({}));
        // A recorded case's metadata (what its instructions saw), and the run's own keys.
        let mut metadata = case
            .replay
            .as_ref()
            .and_then(|r| r.metadata.clone())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        weft_host::sessions::record_agent_file(&mut metadata, &self.agent.path);
        metadata[stored::RUN_KEY] = json!(self.run_id);
        metadata[stored::CASE_KEY] = json!(case.id);
        metadata[stored::DATASET_KEY] = json!(self.dataset_path);
        if let Some(i) = self.order.get(&case.id) {
            metadata[stored::ORDER_KEY] = json!(i);
        }
        // A session going on keeps the metadata it was made with.
        if let Some(rec) = &existing {
            metadata = rec.metadata.clone();
        }
        let agent = Agent::new(
            &self.agent.spec,
            self.agent.tools.clone(),
            model,
            &metadata,
            &input,
        )
        .map_err(|e| {
            EvalError::Invalid(format!("agent file {}: {e}", self.agent.path.display()))
        })?;
        let held = ownership::take(&self.host, self.store.clone(), id, false).await?;
        let user = case.user.clone().or_else(|| self.user.clone());
        // A case is held to its user's quota as any run of theirs is.
        let hosted = Hosted::start(
            &self.host,
            self.store.clone(),
            &held,
            Setup {
                new: existing.is_none(),
                ..self.agent.setup()
            },
            user.as_deref(),
            Watchers::default(),
        )
        .await;
        let rt = hosted.runtime();
        let work = async {
            let info = SessionInfo {
                id: Some(id.to_owned()),
                user_id: user,
                metadata,
                ..SessionInfo::default()
            };
            let mut session = match &existing {
                None => rt.run_agent(&agent, info, &case.task, input).await?,
                Some(_) => {
                    let mut session = rt.load_session(id).await?;
                    if session.state.status == SessionStatus::Running {
                        rt.resume_agent(&agent, &mut session).await?;
                    }
                    session
                }
            };
            for reply in case.replies.iter().skip(replied) {
                if session.state.status != SessionStatus::WaitingForUser {
                    break;
                }
                rt.reply(&agent, &mut session, reply).await?;
            }
            Ok::<_, weft_runtime::RuntimeError>(session.state)
        };
        let state = match hosted.run(work).await {
            Ok(r) => r.map_err(weft_host::HostError::from),
            Err(asked) => match hosted.stopped(asked).await {
                Ok(_) => weft_runtime::load_state(self.store.as_ref(), id)
                    .await
                    .map(|l| l.state)
                    .map_err(Into::into),
                Err(e) => Err(e),
            },
        };
        hosted.end().await;
        held.release().await;
        let state = state?;
        // Stopped at a safe point (this process was interrupted): not scored, so that the same
        // command goes on with it.
        if state.status == SessionStatus::Running {
            return Err(EvalError::Invalid(format!(
                "session {id} was stopped before it ended; run the same command again to finish it"
            )));
        }
        let (_, events) = self.store.load(id).await?;
        Ok((Observed::of(&state, &events), events))
    }

    /// Records each verdict on the case's session as an `evaluation_result` event (OpenTelemetry's
    /// `gen_ai.evaluation.result`), under the session's lease.
    async fn record_scores(&self, id: &str, scores: &[Score]) -> Result<(), EvalError> {
        let events: Vec<weft_core::Event> = scores
            .iter()
            .map(|s| weft_core::Event::EvaluationResult {
                name: s.scorer.clone(),
                score: s.score,
                label: if s.pass { "pass" } else { "fail" }.to_owned(),
                explanation: s
                    .reasoning
                    .clone()
                    .or_else(|| (!s.detail.is_empty()).then(|| s.detail.clone())),
                run: self.run_id.clone(),
            })
            .collect();
        let held = ownership::take(&self.host, self.store.clone(), id, false).await?;
        // Recording verdicts calls no model: no quota to hold it to.
        let hosted = Hosted::start(
            &self.host,
            self.store.clone(),
            &held,
            self.agent.setup(),
            None,
            Watchers::default(),
        )
        .await;
        let rt = hosted.runtime();
        let done = async {
            let mut session = rt.load_session(id).await?;
            session.commit(events).await
        }
        .await;
        hosted.end().await;
        held.release().await;
        done.map_err(|e| EvalError::Host(e.into()))
    }

    /// Scores a session: the case's expectations, then its command and judge scorers.
    async fn score(
        &self,
        case: &Case,
        k: u32,
        obs: Observed,
        events: &[weft_core::Envelope],
    ) -> CaseResult {
        let mut scores = expect::score(case, &obs);
        let mut judge_tokens = 0;
        let specs = &case.expect.scorers;
        let mut doc: Option<Value> = None;
        for (i, spec) in specs.iter().enumerate() {
            let name = scorer::name(spec, i, specs);
            if let Some(cmd) = &spec.command {
                let input = doc.get_or_insert_with(|| scorer::session_json(case, &obs, events));
                scores.push(
                    scorer::command(&name, cmd, spec.timeout_secs, &self.dataset_dir, input).await,
                );
            } else if let Some(j) = &spec.judge {
                let model = match &j.model {
                    Some(m) => weft_model::from_spec(m, &self.dataset_dir).map_err(|e| {
                        format!(
                            "the judge's model {m} cannot be used: {e} (expect.scorers[{i}].judge.model)"
                        )
                    }),
                    None => self.judge.clone().ok_or_else(|| {
                        "the judge names no model and the agent has none; give it `model:` or run with --judge-model".to_owned()
                    }),
                };
                match model {
                    Ok(m) => {
                        let (s, used) = scorer::judge(&name, &m, j, case, &obs).await;
                        judge_tokens += used.input_tokens + used.output_tokens;
                        scores.push(s);
                    }
                    Err(e) => scores.push(Score::of(name, Err(e))),
                }
            }
        }
        CaseResult::scored(&self.run_id, case, k, obs, scores, judge_tokens)
    }
}
