//! weft's own routes, beside LangGraph's, for what a client such as the playground needs and
//! LangGraph's API has no word for: sessions across agents with their cost, a session as it was
//! at any event (the plan as a graph, tool calls, reviews, replans), its typed events as
//! server-sent events, fork at an event, pause, cancel, the agents with their tools' schemas,
//! and a check of an edited plan before it is sent. Behind the same keys as every route; another
//! user's session answers 404.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response, Sse as SseResponse};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weft_core::graph::{ValidateOptions, validate};
use weft_core::{Plan, SessionStatus};
use weft_store::{Leases, ListFilter, SessionLog, SessionRecord};

use super::auth::User;
use super::openapi::{self, PlanCalls, Route};
use super::{ApiError, Shared, threads, view};

/// weft's own routes.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::get(
            "/agents",
            "The agents this server runs, with their tools and the tools' input schemas, and the key's user",
            agents,
        )
        .json::<Agents>("{user, agents: [...]}"),
        openapi::get(
            "/sessions",
            "The user's sessions across agents, newest first, with status, agent, task, age, usage and cost (query: status, agent, limit, offset)",
            list,
        )
        .json::<SessionList>("{sessions: [...], more}"),
        openapi::get(
            "/sessions/{id}",
            "The session as it was after event `at` (query; default the last): state, the plan as a graph with each step's state and wave, tool calls, reviews, plan versions and their changes, usage",
            get,
        )
        .json::<view::SessionView>("the session"),
        openapi::get(
            "/sessions/{id}/events",
            "The session's typed events as server-sent events after Last-Event-ID (or `after`), then live: `event` (id: sequence number), `text` (the model's text as it comes), `ready`",
            events,
        )
        .media("text/event-stream", "the session's events"),
        openapi::post(
            "/sessions/{id}/fork",
            "Fork the session at an event into a new session (a running fork is continued at once)",
            fork,
        )
        .body::<ForkBody>()
        .json::<Forked>("{id, forked_from, status, run_id}"),
        openapi::post(
            "/sessions/{id}/pause",
            "Pause the run at its next safe point; the session waits (kind `paused`) until any answer continues it",
            pause,
        )
        .json::<Stood>("{id, status}"),
        openapi::post(
            "/sessions/{id}/cancel",
            "Cancel the session: calls in flight are stopped and recorded, it ends as failed",
            cancel,
        )
        .json::<Stood>("{id, status}"),
        openapi::post(
            "/sessions/{id}/plan/check",
            "Check an edited plan as the answer to the session's plan approval: every problem, or the waves it would run in",
            check_plan,
        )
        .body::<PlanCheck>()
        .json::<Checked>("{ok, problems, waves, plan}"),
    ]
}

/// Summaries of sessions, kept until their log grows (a list polled every few seconds folds
/// only the sessions that changed). At most [`Summaries::MAX`] are kept: past that the cache
/// starts again, so that listing a store of any size holds bounded memory.
#[derive(Default)]
pub(crate) struct Summaries(Mutex<HashMap<String, (u64, view::Summary)>>);

impl Summaries {
    async fn of(&self, app: &Shared, rec: &SessionRecord) -> Result<view::Summary, ApiError> {
        if let Ok(cache) = self.0.lock()
            && let Some((seq, v)) = cache.get(&rec.id)
            && *seq == rec.last_seq
        {
            return Ok(v.clone());
        }
        let st = weft_runtime::load_state(app.store.as_ref(), &rec.id)
            .await?
            .state;
        let v = view::summary(rec, &st);
        if let Ok(mut cache) = self.0.lock() {
            if cache.len() >= Self::MAX {
                cache.clear();
            }
            cache.insert(rec.id.clone(), (rec.last_seq, v.clone()));
        }
        Ok(v)
    }

    const MAX: usize = 10_000;

    /// Forgets the summary of a deleted session.
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut cache) = self.0.lock() {
            cache.remove(id);
        }
    }
}

/// The session's record, if it is this user's; another user's session is not found.
async fn owned(app: &Shared, user: &User, id: &str) -> Result<SessionRecord, ApiError> {
    match app.store.get(id).await {
        Ok(rec) if rec.user_id.as_deref() == Some(user.0.as_str()) => Ok(rec),
        Ok(_) | Err(weft_store::StoreError::NotFound(_)) => Err(ApiError::not_found("session")),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct ListQuery {
    /// `running`, `waiting_for_user`, `completed` or `failed`.
    #[serde(default)]
    status: Option<String>,
    /// Only this agent's sessions.
    #[serde(default)]
    agent: Option<String>,
    /// At most this many (default 50, at most 500).
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
}

/// A page of the user's sessions, and whether more follow.
#[derive(Serialize, JsonSchema)]
pub(crate) struct SessionList {
    sessions: Vec<view::Summary>,
    more: bool,
}

/// `GET /sessions`: the user's sessions across agents, newest first, each with its status,
/// agent, task, age, usage and cost.
pub(crate) async fn list(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Query(q): Query<ListQuery>,
) -> Result<Json<SessionList>, ApiError> {
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(SessionStatus::parse(s).ok_or_else(|| {
            ApiError::bad(format!(
                "status `{s}`: use running, waiting_for_user, completed or failed"
            ))
        })?),
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let offset = q.offset.unwrap_or(0);
    let agent = q.agent.filter(|a| !a.is_empty());
    let recs = app
        .store
        .list(&ListFilter {
            user_id: Some(user.0.clone()),
            status,
            limit: if agent.is_some() {
                None
            } else {
                Some(offset + limit + 1)
            },
        })
        .await?;
    let mut out = Vec::new();
    let mut more = false;
    let mut skipped = 0;
    for rec in recs {
        // A thread created empty has its agent in its log only.
        if let Some(a) = &agent
            && !rec.agent.is_empty()
            && &rec.agent != a
        {
            continue;
        }
        let mut s = app.summaries.of(&app, &rec).await?;
        if agent.as_ref().is_some_and(|a| &s.agent != a) {
            continue;
        }
        if skipped < offset {
            skipped += 1;
            continue;
        }
        if out.len() == limit {
            more = true;
            break;
        }
        s.busy = Some(app.runs.active_on(&rec.id));
        out.push(s);
    }
    Ok(Json(SessionList {
        sessions: out,
        more,
    }))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct AtQuery {
    /// The event to show the session at (default: the last).
    #[serde(default)]
    at: Option<u64>,
}

/// `GET /sessions/{id}`: the session as it was after event `at` (the last by default).
pub(crate) async fn get(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    Query(q): Query<AtQuery>,
) -> Result<Json<view::SessionView>, ApiError> {
    let (rec, log) = load(&app, &user, &id).await?;
    let agent_budget = |name: &str| app.agents.get(name).and_then(|a| a.spec.budget.clone());
    Ok(Json(view::session(
        &rec,
        &log,
        q.at,
        app.runs.active_on(&id),
        &agent_budget,
    )))
}

async fn load(
    app: &Shared,
    user: &User,
    id: &str,
) -> Result<(SessionRecord, Vec<weft_core::Envelope>), ApiError> {
    threads::load_log(app, user, id)
        .await
        .map_err(|e| match e.0 {
            StatusCode::NOT_FOUND => ApiError::not_found("session"),
            _ => e,
        })
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct AfterQuery {
    /// Send the events after this one (`Last-Event-ID` does the same and wins).
    #[serde(default)]
    after: Option<u64>,
}

/// `GET /sessions/{id}/events`: the session's typed events as server-sent events (`event`,
/// with the sequence number as id), after `Last-Event-ID` (or `?after=`), then live for as
/// long as the client listens: the model's text as it is generated (`text`, no id: it is never
/// stored), and `ready` once the events stored so far were sent.
pub(crate) async fn events(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    Query(q): Query<AfterQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    owned(&app, &user, &id).await?;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(q.after)
        .unwrap_or(0);
    struct Cursor {
        app: Shared,
        id: String,
        seq: u64,
        texts: tokio::sync::broadcast::Receiver<super::registry::Piece>,
        queue: std::collections::VecDeque<Sse>,
        ready: bool,
        done: bool,
    }
    let cursor = Cursor {
        texts: app.runs.texts(&id).0,
        app,
        id,
        seq: after,
        queue: std::collections::VecDeque::new(),
        ready: false,
        done: false,
    };
    let stream = futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(e) = c.queue.pop_front() {
                return Some((Ok::<_, Infallible>(e), c));
            }
            if c.done || c.app.host.shutdown.is_requested() {
                return None;
            }
            let waker = c.app.runs.waker(&c.id);
            let notified = waker.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match c.app.store.events_after(&c.id, c.seq).await {
                Ok(events) => {
                    // Text generated before these events were stored goes first (a reply's
                    // pieces all come before the reply is stored).
                    if !events.is_empty() {
                        while let Ok(piece) = c.texts.try_recv() {
                            c.queue.push_back(
                                Sse::default()
                                    .event("text")
                                    .data(json!({ "text": piece.text }).to_string()),
                            );
                        }
                    }
                    for env in events {
                        c.seq = env.seq;
                        if let Ok(data) = serde_json::to_string(&env) {
                            c.queue.push_back(
                                Sse::default()
                                    .event("event")
                                    .id(env.seq.to_string())
                                    .data(data),
                            );
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(session = %c.id, "cannot read the session's events: {e}");
                    c.queue.push_back(
                        Sse::default().event("error").data(
                            json!({"detail": "the session store failed; reconnect to go on"})
                                .to_string(),
                        ),
                    );
                    c.done = true;
                    continue;
                }
            }
            if !c.ready {
                c.ready = true;
                c.queue.push_back(
                    Sse::default()
                        .event("ready")
                        .data(json!({"seq": c.seq}).to_string()),
                );
            }
            if !c.queue.is_empty() {
                continue;
            }
            // Woken when this server stores an event of the session; polled otherwise (a
            // worker or another server may drive it).
            let wait = tokio::time::timeout(Duration::from_millis(500), &mut notified);
            tokio::select! {
                _ = wait => {}
                got = c.texts.recv() => {
                    if let Ok(piece) = got {
                        c.queue.push_back(Sse::default().event("text").data(json!({"text": piece.text}).to_string()));
                    }
                }
            }
        }
    });
    Ok(SseResponse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct ForkBody {
    /// The last event the fork keeps.
    at: u64,
    /// A budget of the fork's own: a mapping as the agent file's `budget:` (it replaces the one
    /// in force at `at`) or a string `KEY=VALUE,...` (over it). What was spent is kept.
    #[serde(default)]
    budget: Option<serde_json::Value>,
}

/// A fork: the new session, where it came from, how it stands, and the run that continues it
/// (when it is running).
#[derive(Serialize, JsonSchema)]
pub(crate) struct Forked {
    id: String,
    forked_from: ForkedFrom,
    status: String,
    run_id: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct ForkedFrom {
    session: String,
    at: u64,
}

/// A session and how it stands after a pause or a cancel.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Stood {
    id: String,
    /// `running`, `waiting_for_user`, `completed` or `failed`.
    status: String,
}

/// `POST /sessions/{id}/fork`: a new session with the events up to `at` (calls in flight then
/// are recorded as interrupted). A fork that is running then is continued by this server at
/// once; one that waits gets its answer; a finished one a new task.
pub(crate) async fn fork(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    Json(body): Json<ForkBody>,
) -> Result<Json<Forked>, ApiError> {
    let rec = owned(&app, &user, &id).await?;
    if body.at == 0 || body.at > rec.last_seq {
        return Err(ApiError::bad(format!(
            "at: session {id} has events 1 to {}; fork at one of them",
            rec.last_seq
        )));
    }
    let budget = match &body.budget {
        Some(v) => {
            weft_core::budget::BudgetChange::from_json(v, "budget").map_err(ApiError::bad)?
        }
        None => None,
    };
    // A per-tool limit names a tool of the session's assistant (when this server has it).
    if let (Some(change), Some(agent)) = (&budget, app.agents.get(&rec.agent))
        && let Some((scope, tool, why)) = change
            .unknown_tools(&weft_core::ToolCatalog::tool_names(agent.tools.as_ref()))
            .into_iter()
            .next()
    {
        return Err(ApiError::bad(format!(
            "budget: {scope}.tool_calls.{tool}: {why}"
        )));
    }
    let run_id = uuid::Uuid::now_v7().to_string();
    let (new_id, state) = weft_host::sessions::fork(
        app.store.as_ref(),
        &id,
        body.at,
        Some(run_id.clone()),
        budget,
    )
    .await
    .map_err(|e| {
        if let weft_host::HostError::Invalid(why) = &e {
            return ApiError::bad(why.clone());
        }
        tracing::warn!(session = %id, "cannot fork: {e}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the session store failed; try again".into(),
        )
    })?;
    // A running fork is claimed by this server's loop for orphaned sessions; wake it.
    let _ = app.store.wake().await;
    Ok(Json(Forked {
        id: new_id,
        forked_from: ForkedFrom {
            session: id,
            at: body.at,
        },
        status: state.status.as_str().to_owned(),
        run_id: (state.status == SessionStatus::Running).then_some(run_id),
    }))
}

/// `POST /sessions/{id}/pause`: the run stops at its next safe point (no new model or tool
/// call; calls in flight finish and are recorded) and the session waits (kind `paused`) until a
/// person continues it with any answer.
pub(crate) async fn pause(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Result<Json<Stood>, ApiError> {
    let rec = owned(&app, &user, &id).await?;
    if rec.status != SessionStatus::Running {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "session {id} is {}; only a running session can be paused",
                rec.status.as_str()
            ),
        ));
    }
    let stopped = weft_host::ownership::request_and_wait(
        app.host.clock.as_ref(),
        app.store.as_ref(),
        &id,
        "pause",
    )
    .await
    .map_err(|e| ApiError::new(StatusCode::GATEWAY_TIMEOUT, crate::message(&e.into())))?;
    if !stopped {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("no process runs session {id} at the moment; there is nothing to pause"),
        ));
    }
    let status = app.store.get(&id).await?.status.as_str().to_owned();
    Ok(Json(Stood { id, status }))
}

/// `POST /sessions/{id}/cancel`: stops the session for good: calls in flight are stopped and
/// recorded as cancelled, and it ends as failed. A session that waits, or that no process
/// runs, is cancelled here.
pub(crate) async fn cancel(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Result<Json<Stood>, ApiError> {
    let rec = owned(&app, &user, &id).await?;
    if rec.status.is_terminal() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "session {id} is {} already; there is nothing to cancel",
                rec.status.as_str()
            ),
        ));
    }
    let stopped = weft_host::ownership::request_and_wait(
        app.host.clock.as_ref(),
        app.store.as_ref(),
        &id,
        "cancel",
    )
    .await
    .map_err(|e| ApiError::new(StatusCode::GATEWAY_TIMEOUT, crate::message(&e.into())))?;
    if !stopped {
        weft_host::ownership::cancel_unowned(&app.host, app.store.clone(), &id)
            .await
            .map_err(|e| ApiError::new(StatusCode::CONFLICT, crate::message(&e.into())))?;
    }
    app.runs.waker(&id).notify_waiters();
    let status = app.store.get(&id).await?.status.as_str().to_owned();
    Ok(Json(Stood { id, status }))
}

/// `GET /agents`: the agents this server runs, with their tools (name, description, input
/// schema, whether a person approves each call): what a client needs to start a run; and the
/// user the key belongs to.
/// The agents of this server, and the key's user.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Agents {
    user: String,
    agents: Vec<AgentInfo>,
}

/// An agent: what a client needs to start a run of it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct AgentInfo {
    name: String,
    mode: weft_core::agent::Mode,
    description: Option<String>,
    approve_plans: bool,
    limits: weft_core::limits::Limits,
    tools: Vec<weft_core::ToolInfo>,
}

pub(crate) async fn agents(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
) -> Json<Agents> {
    let mut names: Vec<&String> = app.agents.keys().collect();
    names.sort();
    let list: Vec<AgentInfo> = names
        .into_iter()
        .map(|n| {
            let a = &app.agents[n];
            let tools: Vec<weft_core::ToolInfo> = a
                .tools
                .infos()
                .filter(|t| {
                    a.spec
                        .allowed_tools
                        .as_ref()
                        .is_none_or(|allowed| allowed.iter().any(|x| x == &t.name))
                })
                .cloned()
                .collect();
            AgentInfo {
                name: n.clone(),
                mode: a.spec.mode,
                description: a.spec.description.clone(),
                approve_plans: a.spec.approve_plans,
                limits: a.spec.limits.clone(),
                tools,
            }
        })
        .collect();
    Json(Agents {
        user: user.0,
        agents: list,
    })
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct PlanCheck {
    /// The plan: an array of calls, or `{"steps": [...]}`.
    plan: Value,
}

/// What the check of an edited plan found: every problem, or (when there is none) the waves the
/// plan would run in and the plan as it would be accepted (tool flags filled in).
#[derive(Serialize, JsonSchema)]
pub(crate) struct Checked {
    ok: bool,
    problems: Vec<weft_core::plan::PlanProblem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waves: Option<Vec<weft_core::engine::DryWave>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<PlanCalls>,
}

/// `POST /sessions/{id}/plan/check`: whether an edited plan would be accepted as the answer to
/// the session's plan approval (the checks the agent runs on it: shape, tools, arguments,
/// references, cycles), with every problem, and the waves it would run in.
pub(crate) async fn check_plan(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    Json(body): Json<PlanCheck>,
) -> Result<Json<Checked>, ApiError> {
    let (rec, st) = threads::load(&app, &user, &id)
        .await
        .map_err(|e| match e.0 {
            StatusCode::NOT_FOUND => ApiError::not_found("session"),
            _ => e,
        })?;
    let name = view::agent_of(&rec, &st);
    let agent = app.agents.get(&name).ok_or_else(|| {
        ApiError::bad(format!(
            "session {id} belongs to agent `{name}`, which this server does not run"
        ))
    })?;
    let built = weft_runtime::Agent::new(
        &agent.spec,
        agent.tools.clone(),
        agent.model.clone(),
        &rec.metadata,
        &st.input,
    )
    .map_err(|e| ApiError::bad(format!("agent `{name}`: {e}")))?;
    let catalog: std::collections::BTreeMap<String, weft_core::ToolInfo> = built
        .config
        .tools
        .iter()
        .map(|t| (t.name.clone(), t.clone()))
        .collect();
    let skills = built.config.skill_names();
    let checked = Plan::from_value(&body.plan).and_then(|mut plan| {
        let problems = validate(
            &plan,
            &catalog,
            &ValidateOptions {
                input: Some(&st.input),
                skills: &skills,
                ..ValidateOptions::default()
            },
        );
        if problems.is_empty() {
            weft_core::engine::normalize(&mut plan, &catalog);
            Ok(plan)
        } else {
            Err(problems)
        }
    });
    Ok(Json(match checked {
        Ok(plan) => Checked {
            ok: true,
            problems: Vec::new(),
            waves: Some(weft_core::engine::dry_run(&plan, &built.config.limits)),
            plan: Some(PlanCalls(plan)),
        },
        Err(problems) => Checked {
            ok: false,
            problems,
            waves: None,
            plan: None,
        },
    }))
}
