//! Eval runs (`weft eval`) as the store holds them, for the playground's Evals view: the user's
//! runs with their summary, one run's cases with each scorer's verdict and the case's session,
//! and two runs compared case by case. A run is read from its sessions (`weft_eval::stored`),
//! summarised and compared by `weft-eval` itself (`results::summarise`, `compare::compare`, as
//! `weft eval` and `weft eval compare` do). Behind the same keys as every route: a user sees the
//! sessions of a run that are theirs, and a run none of whose sessions is theirs is not found.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::Json;
use axum::extract::{Extension, Path, State};
use schemars::JsonSchema;
use serde::Serialize;
use weft_eval::compare::{self, CaseChange};
use weft_eval::results::{self, CaseResult};
use weft_eval::stored::{self, StoredRun};
use weft_host::sessions::fmt_time;
use weft_store::{ListFilter, SessionLog, SessionRecord};

use super::auth::User;
use super::openapi::{self, Route};
use super::{ApiError, Shared};

/// The eval routes.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::get(
            "/evals",
            "The user's eval runs (`weft eval`), newest first: agent, dataset, when, cases passed, pass rates and mean scores per scorer",
            list,
        )
        .json::<EvalRuns>("{runs: [...]}"),
        openapi::get(
            "/evals/{id}",
            "An eval run: its summary and each session's result (case, repeat, session id, pass, each scorer's verdict and reason, answer, tool calls, usage)",
            get,
        )
        .json::<EvalRunView>("{run, results: [...]}"),
        openapi::get(
            "/evals/{a}/compare/{b}",
            "Two eval runs compared case by case as `weft eval compare` does: what changed (pass rate, score, answer, trajectory, cost, latency), regressions first",
            compare_runs,
        )
        .json::<EvalComparison>("{a, b, cases: [...]}"),
    ]
}

/// Each eval session's result, kept until its log grows (a list asked for again reads only the
/// sessions that changed). At most [`Results::MAX`] are kept: past that the cache starts again.
#[derive(Default)]
pub(crate) struct Results(Mutex<HashMap<String, (u64, CaseResult)>>);

impl Results {
    const MAX: usize = 10_000;

    async fn of(&self, app: &Shared, rec: &SessionRecord) -> Result<Option<CaseResult>, ApiError> {
        if let Ok(cache) = self.0.lock()
            && let Some((seq, r)) = cache.get(&rec.id)
            && *seq == rec.last_seq
        {
            return Ok(Some(r.clone()));
        }
        let (rec, events) = app.store.load(&rec.id).await?;
        let state = weft_runtime::load_state(app.store.as_ref(), &rec.id)
            .await?
            .state;
        let Some(r) = stored::result_of(&rec, &state, &events) else {
            return Ok(None);
        };
        if let Ok(mut cache) = self.0.lock() {
            if cache.len() >= Self::MAX {
                cache.clear();
            }
            cache.insert(rec.id.clone(), (rec.last_seq, r.clone()));
        }
        Ok(Some(r))
    }

    /// Forgets the result of a deleted session.
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut cache) = self.0.lock() {
            cache.remove(id);
        }
    }
}

/// The user's eval runs (only `run`'s, when given), newest first.
async fn runs(app: &Shared, user: &User, run: Option<&str>) -> Result<Vec<StoredRun>, ApiError> {
    let recs = app
        .store
        .list(&ListFilter {
            user_id: Some(user.0.clone()),
            status: None,
            limit: None,
        })
        .await?;
    let mut sessions = Vec::new();
    for rec in recs {
        let Some((of, _)) = stored::case_of(&rec) else {
            continue;
        };
        if run.is_some_and(|r| r != of) {
            continue;
        }
        if let Some(r) = app.eval_results.of(app, &rec).await? {
            sessions.push((rec, r));
        }
    }
    Ok(stored::runs(sessions))
}

/// An eval run: who ran what, when, and its summary.
#[derive(Serialize, JsonSchema)]
pub(crate) struct EvalRun {
    /// The run's id (`weft eval --name`); its sessions are `ID-CASE-rK`.
    id: String,
    /// The agents its sessions ran.
    agents: Vec<String>,
    /// The dataset file, when the sessions say.
    dataset: Option<String>,
    /// When its first session was created.
    created_at: String,
    /// When its last session last changed.
    updated_at: String,
    /// Sessions still running (the run is not over).
    running: u32,
    /// Pass rates, pass@k, mean scores and their spread, per case and per scorer, tokens and
    /// cost, as `weft eval` writes them to `summary.json`.
    summary: results::Summary,
}

impl EvalRun {
    fn of(r: &StoredRun) -> Self {
        Self {
            id: r.id.clone(),
            agents: r.agents.clone(),
            dataset: r.dataset.clone(),
            created_at: fmt_time(r.created_at),
            updated_at: fmt_time(r.updated_at),
            running: r.running,
            summary: results::summarise(&r.id, r.repeat, &r.results),
        }
    }
}

/// The user's eval runs.
#[derive(Serialize, JsonSchema)]
pub(crate) struct EvalRuns {
    runs: Vec<EvalRun>,
}

/// `GET /evals`: the user's eval runs, newest first.
pub(crate) async fn list(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
) -> Result<Json<EvalRuns>, ApiError> {
    let runs = runs(&app, &user, None).await?;
    Ok(Json(EvalRuns {
        runs: runs.iter().map(EvalRun::of).collect(),
    }))
}

/// One eval run and its sessions' results.
#[derive(Serialize, JsonSchema)]
pub(crate) struct EvalRunView {
    run: EvalRun,
    /// One per session (a case's repeat), in the order they were created.
    results: Vec<CaseResult>,
}

async fn one(app: &Shared, user: &User, id: &str) -> Result<StoredRun, ApiError> {
    runs(app, user, Some(id))
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found("eval run"))
}

/// `GET /evals/{id}`: the run's summary and each of its sessions' results.
pub(crate) async fn get(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Result<Json<EvalRunView>, ApiError> {
    let r = one(&app, &user, &id).await?;
    Ok(Json(EvalRunView {
        run: EvalRun::of(&r),
        results: r.results,
    }))
}

/// Two eval runs compared.
#[derive(Serialize, JsonSchema)]
pub(crate) struct EvalComparison {
    a: EvalRun,
    b: EvalRun,
    /// Every case of either run: regressions first, then cases removed, added, improved,
    /// changed, and those that stayed the same.
    cases: Vec<CaseChange>,
}

/// `GET /evals/{a}/compare/{b}`: run `a` and run `b` compared case by case.
pub(crate) async fn compare_runs(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((a, b)): Path<(String, String)>,
) -> Result<Json<EvalComparison>, ApiError> {
    let ra = one(&app, &user, &a).await?;
    let rb = one(&app, &user, &b).await?;
    Ok(Json(EvalComparison {
        cases: compare::compare(&ra.results, &rb.results),
        a: EvalRun::of(&ra),
        b: EvalRun::of(&rb),
    }))
}
