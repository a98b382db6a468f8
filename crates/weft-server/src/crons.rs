//! Crons: LangGraph's `/runs/crons` routes (`client.crons`) and the scheduler that starts their
//! runs. A cron is a row of the store ([`weft_store::Crons`]): a schedule (cron syntax, UTC; 5
//! fields, or 6 with seconds first), the body of the runs it starts, and its next tick. A cron
//! on a thread starts a run on that thread at each tick; a cron without one starts a threadless
//! run (a thread made for it, deleted after the run unless `on_run_completed` is `keep`).
//!
//! **Each tick once, across servers and restarts.** Every server polls the store for crons
//! that are due and claims a tick with a compare-and-set on the cron's next due time: of any
//! number of servers on one database, one claims each tick. The claim stays open until the
//! tick's run is stored (its marker and first events, as every run is before it is answered),
//! then it is closed with the run's id. A server that dies between the two leaves the claim
//! open; once it expires ([`CLAIM_TTL_MS`]) another server (or the same one restarted) takes it
//! over and starts the tick's run, unless it was stored already: a tick's run and (for a cron
//! without a thread) its thread have ids derived from the cron's id and the tick, so the one
//! that takes over finds them. A tick is thus started once, and never lost silently.
//!
//! **Missed ticks.** A server that was down past several ticks starts the oldest missed tick
//! once, then goes on with the first tick after now: missed ticks are not started one by one.
//!
//! **A busy thread.** A tick on a thread that a run drives is refused as a run with the cron's
//! `multitask_strategy` would be (`reject`, the default: refused; `enqueue`: queued behind the
//! run when this server drives it, refused when another one does). A refused tick is recorded
//! on the cron (`last_tick.error`) and the next tick tries again.
//!
//! **Changes and deletes under ticks.** An update moves the next tick only when it changes the
//! schedule, the end time or enables the cron: otherwise a tick due and not yet claimed would be
//! skipped, or one claimed since the cron was read started again. A delete waits for a tick
//! being started (claimed, its run not yet stored) to be stored: no run of a cron starts after
//! its delete answered.

use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, NaiveDateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_store::{CronRecord, CronTick, Crons as _, SessionLog as _};

use super::auth::User;
use super::openapi::{self, Route};
use super::runs::{self, RunBody};
use super::{ApiError, Shared};
use weft_host::sessions::fmt_time;

/// How long a claimed tick is another server's to start: past this, a server that finds the
/// claim open takes it over (its claimer died before the tick's run was stored).
pub(crate) const CLAIM_TTL_MS: i64 = 15_000;

/// How often the scheduler looks for ticks that are due.
const POLL: Duration = Duration::from_millis(250);

/// The namespace of the ids derived from a cron's id and a tick.
const TICK_IDS: uuid::Uuid = uuid::Uuid::from_u128(0x5f0c_2b1e_8a4d_4c67_9e3b_71d2_a6c8_f104);

/// The routes of crons.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::post(
            "/runs/crons",
            "Create a cron whose runs are threadless (`crons.create`): each tick starts a run on a thread made for it (deleted after it unless `on_run_completed` is `keep`)",
            create,
        )
        .body::<CronBody>()
        .json::<CronInfo>("the cron"),
        openapi::post(
            "/threads/{tid}/runs/crons",
            "Create a cron on a thread (`crons.create_for_thread`): each tick starts a run on the thread",
            create_for_thread,
        )
        .body::<CronBody>()
        .json::<CronInfo>("the cron"),
        openapi::patch(
            "/runs/crons/{cron_id}",
            "Change a cron (`crons.update`): schedule, end_time (null clears it), enabled, the runs' input, metadata, config, on_run_completed",
            update,
        )
        .body::<CronPatch>()
        .json::<CronInfo>("the cron"),
        openapi::delete("/runs/crons/{cron_id}", "Delete a cron", delete)
            .empty(204, "deleted"),
        openapi::post(
            "/runs/crons/search",
            "The user's crons (`crons.search`): by assistant_id, thread_id, enabled, metadata; limit, offset, sort_by, sort_order, select",
            search,
        )
        .body::<CronSearch>()
        .json::<Vec<CronInfo>>("the crons"),
        openapi::post(
            "/runs/crons/count",
            "How many of the user's crons match (`crons.count`): by assistant_id, thread_id, metadata",
            count,
        )
        .body::<CronSearch>()
        .json::<u64>("the number"),
    ]
}

/// What `crons.create` and `crons.create_for_thread` send.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct CronBody {
    /// Cron syntax, UTC: `minute hour day-of-month month day-of-week`, or with seconds first
    /// (6 fields, a weft extension).
    pub schedule: String,
    pub assistant_id: String,
    /// `reject` (the default) or `enqueue`: what a tick does on a thread busy with a run.
    #[serde(default)]
    pub multitask_strategy: Option<String>,
    #[serde(flatten)]
    pub fields: CronFields,
}

/// What `crons.update` sends: what it names changes, the rest stays.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct CronPatch {
    #[serde(default)]
    pub schedule: Option<String>,
    #[serde(flatten)]
    pub fields: CronFields,
}

/// The fields a cron is created with and changed by.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct CronFields {
    /// The runs' input, as a run's (`{"messages": [...]}`); it must hold a task.
    #[serde(default)]
    pub input: Option<Value>,
    /// The cron's metadata, given to its runs as well.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// The runs' config (`budget`), as a run's.
    #[serde(default)]
    pub config: Option<Value>,
    /// A threadless run's thread once the run ended: `delete` (the default) or `keep`.
    #[serde(default)]
    pub on_run_completed: Option<String>,
    /// No tick after this time (ISO 8601; without an offset, UTC); in an update, null clears it.
    #[serde(default)]
    pub end_time: Option<String>,
    /// Whether ticks start runs (default true).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Only UTC (or none): weft schedules in UTC.
    #[serde(default)]
    pub timezone: Option<String>,
    /// Not supported: weft calls no webhooks.
    #[serde(default)]
    pub webhook: Option<String>,
}

impl CronFields {
    /// The checks of a create and an update: timezone, webhook, `on_run_completed` (for a cron
    /// without a thread only), the runs' input (when given; `input_required` for a create) and
    /// their budget against the agent's (`budget`, when the assistant is known).
    fn check(
        &self,
        on_thread: bool,
        input_required: bool,
        budget: Option<&weft_core::budget::Budget>,
    ) -> Result<(), ApiError> {
        check_timezone(self.timezone.as_deref())?;
        check_webhook(self.webhook.as_deref())?;
        check_on_completed(self.on_run_completed.as_deref())?;
        if on_thread && self.on_run_completed.is_some() {
            return Err(ApiError::bad(
                "on_run_completed is for crons without a thread (crons.create); a thread's runs stay on it",
            ));
        }
        if input_required || self.input.is_some() {
            check_input(self.input.as_ref())?;
        }
        runs::run_budget(self.config.as_ref(), budget, None)?;
        Ok(())
    }
}

/// What `crons.search` and `crons.count` send.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct CronSearch {
    #[serde(default)]
    pub assistant_id: Option<String>,
    #[serde(default)]
    pub thread_id: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Crons whose metadata has each of these keys with this value.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// At most this many (default 10, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
    /// `cron_id`, `assistant_id`, `thread_id`, `created_at` (the default), `updated_at`,
    /// `next_run_date`, `end_time`.
    #[serde(default)]
    pub sort_by: Option<String>,
    /// `asc` or `desc` (the default).
    #[serde(default)]
    pub sort_order: Option<String>,
    /// Only these fields of each cron.
    #[serde(default)]
    pub select: Option<Vec<String>>,
}

/// A cron as LangGraph clients read it, with what its last tick did (a weft extension).
#[derive(Serialize, JsonSchema)]
pub(crate) struct CronInfo {
    cron_id: String,
    assistant_id: String,
    thread_id: Option<String>,
    on_run_completed: Option<String>,
    end_time: Option<String>,
    schedule: String,
    /// Always null: UTC.
    timezone: Option<String>,
    created_at: String,
    updated_at: String,
    #[schemars(schema_with = "openapi::any")]
    payload: Value,
    user_id: Option<String>,
    next_run_date: Option<String>,
    #[schemars(schema_with = "openapi::any")]
    metadata: Value,
    enabled: bool,
    /// How many ticks were taken (weft).
    ticks: i64,
    /// The last tick taken: when it was due, the run it started or why it started none (weft).
    last_tick: Option<LastTick>,
}

/// What a cron's last tick did.
#[derive(Serialize, JsonSchema)]
struct LastTick {
    at: String,
    run_id: Option<String>,
    thread_id: Option<String>,
    error: Option<String>,
}

fn info(c: &CronRecord) -> CronInfo {
    CronInfo {
        cron_id: c.id.clone(),
        assistant_id: c.assistant_id.clone(),
        thread_id: c.thread_id.clone(),
        on_run_completed: c.on_run_completed.clone(),
        end_time: c.end_time.map(fmt_time),
        schedule: c.schedule.clone(),
        timezone: None,
        created_at: fmt_time(c.created_at),
        updated_at: fmt_time(c.updated_at),
        payload: c.payload.clone(),
        user_id: Some(c.user_id.clone()),
        next_run_date: if c.enabled {
            c.next_run_at.map(fmt_time)
        } else {
            None
        },
        metadata: c.metadata.clone(),
        enabled: c.enabled,
        ticks: c.ticks,
        last_tick: c.last.as_ref().map(|t| LastTick {
            at: fmt_time(t.tick),
            run_id: t.run_id.clone(),
            thread_id: t.thread_id.clone(),
            error: t.error.clone(),
        }),
    }
}

/// A schedule: cron syntax, UTC, 5 fields (minute hour day-of-month month day-of-week) or 6
/// with seconds first. A schedule that is not one is an error naming the field and what is
/// wrong.
pub(crate) fn parse_schedule(s: &str) -> Result<croner::Cron, ApiError> {
    let fields = s.split_whitespace().count();
    if !s.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
        return Err(ApiError::bad(format!(
            "schedule `{s}` has {fields} fields; give 5 (minute hour day-of-month month day-of-week, UTC), e.g. `0 9 * * *`, or 6 with seconds first, e.g. `*/2 * * * * *`"
        )));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(s)
        .map_err(|e| {
            ApiError::bad(format!(
                "schedule `{s}` is not a cron schedule: {e}; give 5 fields (minute hour day-of-month month day-of-week, UTC), e.g. `0 9 * * *`, or 6 with seconds first"
            ))
        })
}

/// The first tick of `cron` after `after` (Unix milliseconds) and not after `end`.
fn next_tick(cron: &croner::Cron, after: i64, end: Option<i64>) -> Option<i64> {
    let t = DateTime::<Utc>::from_timestamp_millis(after)?;
    let next = cron
        .find_next_occurrence(&t, false)
        .ok()?
        .timestamp_millis();
    end.is_none_or(|e| next <= e).then_some(next)
}

/// An ISO 8601 time (with an offset, or UTC without one) in Unix milliseconds.
fn parse_time(field: &str, s: &str) -> Result<i64, ApiError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    Err(ApiError::bad(format!(
        "{field} `{s}` is not a time; give ISO 8601, e.g. 2026-12-31T23:59:00+00:00"
    )))
}

fn check_timezone(tz: Option<&str>) -> Result<(), ApiError> {
    match tz {
        None | Some("UTC" | "Etc/UTC" | "utc" | "Z" | "GMT" | "Etc/GMT") => Ok(()),
        Some(other) => Err(ApiError::bad(format!(
            "timezone `{other}`: weft schedules crons in UTC only; write the schedule in UTC and leave timezone out"
        ))),
    }
}

fn check_webhook(webhook: Option<&str>) -> Result<(), ApiError> {
    match webhook {
        None => Ok(()),
        Some(_) => Err(ApiError::bad(
            "webhook: weft calls no webhooks; follow the cron's runs with runs.list or threads.search instead",
        )),
    }
}

fn check_on_completed(v: Option<&str>) -> Result<(), ApiError> {
    match v {
        None | Some("delete" | "keep") => Ok(()),
        Some(other) => Err(ApiError::bad(format!(
            "on_run_completed `{other}`: use `delete` or `keep`"
        ))),
    }
}

/// The runs' input must hold a task (a tick has no one to ask).
fn check_input(input: Option<&Value>) -> Result<(), ApiError> {
    let (task, _) = runs::task_and_input(input)?;
    if task.is_none() {
        return Err(ApiError::bad(
            "input: a cron's runs need a task, e.g. {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}",
        ));
    }
    Ok(())
}

/// The request's JSON as an object without its nulls (what the SDK leaves out), and as `T`.
fn read<T: serde::de::DeserializeOwned>(body: Value) -> Result<(Map<String, Value>, T), ApiError> {
    let Value::Object(mut m) = body else {
        return Err(ApiError::bad("the body must be a JSON object"));
    };
    let typed = serde_json::from_value(Value::Object(m.clone()))
        .map_err(|e| ApiError::bad(format!("the body: {e}")))?;
    m.retain(|_, v| !v.is_null());
    Ok((m, typed))
}

async fn create(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Json(body): Json<Value>,
) -> Result<Json<CronInfo>, ApiError> {
    make(&app, &user, None, body).await.map(Json)
}

async fn create_for_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    Json(body): Json<Value>,
) -> Result<Json<CronInfo>, ApiError> {
    super::threads::load(&app, &user, &tid).await?;
    make(&app, &user, Some(tid), body).await.map(Json)
}

async fn make(
    app: &Shared,
    user: &User,
    thread: Option<String>,
    body: Value,
) -> Result<CronInfo, ApiError> {
    let (payload, b) = read::<CronBody>(body)?;
    let agent = app.assistant(&b.assistant_id)?;
    let cron = parse_schedule(&b.schedule)?;
    match b.multitask_strategy.as_deref() {
        None | Some("reject" | "enqueue" | "interrupt" | "rollback") => {}
        Some(other) => {
            return Err(ApiError::bad(format!(
                "multitask_strategy `{other}`: use `reject` or `enqueue`"
            )));
        }
    }
    b.fields
        .check(thread.is_some(), true, agent.spec.budget.as_ref())?;
    let f = b.fields;
    let end_time = f
        .end_time
        .as_deref()
        .map(|t| parse_time("end_time", t))
        .transpose()?;
    let now = weft_runtime::now_ms();
    let rec = CronRecord {
        id: uuid::Uuid::now_v7().to_string(),
        user_id: user.0.clone(),
        assistant_id: agent.spec.name.clone(),
        thread_id: thread,
        schedule: b.schedule.clone(),
        payload: Value::Object(payload),
        metadata: f.metadata.unwrap_or_else(|| json!({})),
        on_run_completed: f.on_run_completed,
        enabled: f.enabled.unwrap_or(true),
        end_time,
        next_run_at: next_tick(&cron, now, end_time),
        claim: None,
        last: None,
        ticks: 0,
        created_at: now,
        updated_at: now,
    };
    app.store.create_cron(&rec).await?;
    Ok(info(&rec))
}

/// Cron `id` of `user`, or 404 (another user's cron is not found either).
async fn mine(app: &Shared, user: &User, id: &str) -> Result<CronRecord, ApiError> {
    match app.store.cron(id).await? {
        Some(c) if c.user_id == user.0 => Ok(c),
        _ => Err(ApiError::not_found("cron")),
    }
}

async fn update(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Result<Json<CronInfo>, ApiError> {
    let clears_end = body.get("end_time").is_some_and(Value::is_null);
    let (fields, p) = read::<CronPatch>(body)?;
    let mut c = mine(&app, &user, &id).await?;
    let before = (c.schedule.clone(), c.end_time, c.enabled);
    let budget = app
        .assistant(&c.assistant_id)
        .ok()
        .and_then(|agent| agent.spec.budget.clone());
    p.fields
        .check(c.thread_id.is_some(), false, budget.as_ref())?;
    if let Some(s) = &p.schedule {
        parse_schedule(s)?;
        c.schedule.clone_from(s);
    }
    let f = p.fields;
    if let Some(t) = &f.end_time {
        c.end_time = Some(parse_time("end_time", t)?);
    } else if clears_end {
        c.end_time = None;
    }
    if let Some(e) = f.enabled {
        c.enabled = e;
    }
    if let Some(m) = f.metadata {
        c.metadata = m;
    }
    if f.on_run_completed.is_some() {
        c.on_run_completed = f.on_run_completed;
    }
    // The runs' body takes what was sent, as `create` keeps it.
    if let Value::Object(payload) = &mut c.payload {
        for (k, v) in fields {
            payload.insert(k, v);
        }
        if clears_end {
            payload.remove("end_time");
        }
    }
    let now = weft_runtime::now_ms();
    let cron = parse_schedule(&c.schedule)?;
    // A new schedule, end time or enabling starts from now; any other change keeps the next
    // tick, which may be due already (not yet claimed: moving it on would skip it) or moved on
    // by a claim since the cron was read (moving it back would start it again).
    let reschedule = before != (c.schedule.clone(), c.end_time, c.enabled) && c.enabled;
    c.next_run_at = next_tick(&cron, now, c.end_time);
    c.updated_at = now;
    if !app.store.update_cron(&c, reschedule).await? {
        return Err(ApiError::not_found("cron"));
    }
    Ok(Json(info(&mine(&app, &user, &id).await?)))
}

async fn delete(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    mine(&app, &user, &id).await?;
    remove(&app, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes cron `id` once no tick of it is being started: a tick claimed before the delete has
/// its run stored first (a few milliseconds; at most until the claim expires, when its server
/// died), so that no run of the cron starts after the delete answered.
async fn remove(app: &Shared, id: &str) -> Result<(), ApiError> {
    loop {
        if app.store.delete_cron(id, weft_runtime::now_ms()).await? {
            return Ok(());
        }
        match app.store.cron(id).await? {
            None => return Ok(()),
            Some(c) if c.claim.is_some() => tokio::time::sleep(Duration::from_millis(20)).await,
            Some(_) => {}
        }
    }
}

/// The user's crons that match `q`'s filters.
async fn matching(app: &Shared, user: &User, q: &CronSearch) -> Result<Vec<CronRecord>, ApiError> {
    let all = app.store.crons_of(&user.0).await?;
    Ok(all
        .into_iter()
        .filter(|c| q.assistant_id.as_ref().is_none_or(|a| &c.assistant_id == a))
        .filter(|c| {
            q.thread_id
                .as_ref()
                .is_none_or(|t| c.thread_id.as_ref() == Some(t))
        })
        .filter(|c| q.enabled.is_none_or(|e| c.enabled == e))
        .filter(|c| {
            q.metadata
                .as_ref()
                .is_none_or(|m| m.iter().all(|(k, v)| c.metadata.get(k) == Some(v)))
        })
        .collect())
}

/// The fields `select` may name.
const FIELDS: &[&str] = &[
    "cron_id",
    "assistant_id",
    "thread_id",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "user_id",
    "payload",
    "next_run_date",
    "metadata",
    "now",
    "on_run_completed",
    "enabled",
    "ticks",
    "last_tick",
];

async fn search(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Json(q): Json<CronSearch>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let mut found = matching(&app, &user, &q).await?;
    let desc = match q.sort_order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "sort_order `{other}`: use `asc` or `desc`"
            )));
        }
    };
    type Key = fn(&CronRecord) -> (Option<i64>, Option<String>);
    let key: Key = match q.sort_by.as_deref() {
        None | Some("created_at") => |c| (Some(c.created_at), None),
        Some("updated_at") => |c| (Some(c.updated_at), None),
        Some("next_run_date") => |c| (c.next_run_at, None),
        Some("end_time") => |c| (c.end_time, None),
        Some("cron_id") => |c| (None, Some(c.id.clone())),
        Some("assistant_id") => |c| (None, Some(c.assistant_id.clone())),
        Some("thread_id") => |c| (None, c.thread_id.clone()),
        Some(other) => {
            return Err(ApiError::bad(format!(
                "sort_by `{other}`: use cron_id, assistant_id, thread_id, created_at, updated_at, next_run_date or end_time"
            )));
        }
    };
    found.sort_by(|a, b| {
        let o = key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id));
        if desc { o.reverse() } else { o }
    });
    if let Some(select) = &q.select
        && let Some(bad) = select.iter().find(|f| !FIELDS.contains(&f.as_str()))
    {
        return Err(ApiError::bad(format!(
            "select: `{bad}` is not a field of a cron; use {}",
            FIELDS.join(", ")
        )));
    }
    let now = fmt_time(weft_runtime::now_ms());
    let out = found
        .iter()
        .skip(q.offset.unwrap_or(0))
        .take(q.limit.unwrap_or(10).min(1000))
        .map(|c| {
            let mut v = serde_json::to_value(info(c)).unwrap_or(Value::Null);
            if let (Some(select), Value::Object(m)) = (&q.select, &mut v) {
                m.insert("now".into(), json!(now));
                m.retain(|k, _| select.contains(k));
            }
            v
        })
        .collect();
    Ok(Json(out))
}

async fn count(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Json(q): Json<CronSearch>,
) -> Result<Json<u64>, ApiError> {
    let n = matching(&app, &user, &q).await?.len();
    Ok(Json(u64::try_from(n).unwrap_or(u64::MAX)))
}

/// Deletes the crons of thread `tid` (of `user`), which is gone.
pub(crate) async fn forget_thread(app: &Shared, user: &User, tid: &str) -> Result<(), ApiError> {
    for c in app.store.crons_of(&user.0).await? {
        if c.thread_id.as_deref() == Some(tid) {
            remove(app, &c.id).await?;
        }
    }
    Ok(())
}

/// The scheduler: until the server stops, takes the ticks that are due (and the claims whose
/// server died) and starts their runs.
pub(crate) async fn schedule(app: Shared) {
    let owner = format!("{}:{}", std::process::id(), uuid::Uuid::now_v7());
    loop {
        if app.host.shutdown.is_requested() {
            return;
        }
        let now = weft_runtime::now_ms();
        match app.store.due_crons(now, 32).await {
            Ok(due) => {
                for c in due {
                    if app.host.shutdown.is_requested() {
                        return;
                    }
                    tick(&app, &owner, c, now).await;
                }
            }
            Err(e) => tracing::warn!("cannot read the crons that are due: {e}"),
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = app.host.shutdown.requested() => return,
        }
    }
}

/// Claims the tick of `c` that is due (or takes over its expired claim) and starts its run.
async fn tick(app: &Shared, owner: &str, c: CronRecord, now: i64) {
    let expires = now + CLAIM_TTL_MS;
    let (due, again) = match &c.claim {
        Some(claim) => {
            match app
                .store
                .reclaim_cron_tick(&c.id, claim, owner, now, expires)
                .await
            {
                Ok(true) => {
                    tracing::info!(cron = %c.id, tick = %fmt_time(claim.tick), "taking up a tick whose server stopped before its run was stored");
                    (claim.tick, true)
                }
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(cron = %c.id, "cannot take over a tick: {e}");
                    return;
                }
            }
        }
        None => {
            let Some(due) = c.next_run_at else { return };
            // The next tick is the first after now: missed ticks are started once, not each.
            let next = parse_schedule(&c.schedule)
                .ok()
                .and_then(|cron| next_tick(&cron, now.max(due), c.end_time));
            match app
                .store
                .claim_cron_tick(&c.id, due, next, owner, expires)
                .await
            {
                Ok(true) => (due, false),
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(cron = %c.id, "cannot claim a tick: {e}");
                    return;
                }
            }
        }
    };
    let done = start_tick(app, &c, due, again).await;
    match (&done.error, &done.run_id) {
        (Some(e), _) => {
            tracing::warn!(cron = %c.id, tick = %fmt_time(due), "the tick started no run: {e}")
        }
        (None, Some(run)) => {
            tracing::info!(cron = %c.id, tick = %fmt_time(due), run = %run, "a cron's tick started its run")
        }
        (None, None) => {}
    }
    match app.store.finish_cron_tick(&c.id, owner, &done).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(cron = %c.id, "the tick's claim was taken over (or the cron deleted)")
        }
        Err(e) => tracing::warn!(cron = %c.id, "cannot record a tick: {e}"),
    }
}

/// Starts the run of tick `tick` of `c` (`again`: a tick taken over, whose run may be stored
/// already). The run's id, and the thread's of a cron without one, derive from the cron's id
/// and the tick.
async fn start_tick(app: &Shared, c: &CronRecord, tick: i64, again: bool) -> CronTick {
    let run_id =
        uuid::Uuid::new_v5(&TICK_IDS, format!("{}:{tick}:run", c.id).as_bytes()).to_string();
    let user = User(c.user_id.clone());
    let mut metadata = match c.payload.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    metadata.insert("cron_id".into(), json!(c.id));
    let body = RunBody {
        assistant_id: c.assistant_id.clone(),
        input: c.payload.get("input").cloned(),
        metadata: Some(Value::Object(metadata)),
        config: c.payload.get("config").cloned(),
        multitask_strategy: c
            .payload
            .get("multitask_strategy")
            .and_then(Value::as_str)
            .map(str::to_owned),
        on_completion: c.on_run_completed.clone(),
        ..RunBody::default()
    };
    let (thread, started) = match &c.thread_id {
        Some(tid) => {
            let started = if again && stored(app, tid, &run_id).await {
                Ok(())
            } else {
                runs::start_with_id(app, &user, tid, body, Some(run_id.clone()))
                    .await
                    .map(drop)
            };
            (tid.clone(), started)
        }
        None => {
            let tid = uuid::Uuid::new_v5(&TICK_IDS, format!("{}:{tick}:thread", c.id).as_bytes())
                .to_string();
            let started = if again && stored(app, &tid, &run_id).await {
                Ok(())
            } else {
                // The thread goes once the run ended, unless `keep`.
                crate::threadless::start_threadless_on(app, &user, body, &tid, Some(run_id.clone()))
                    .await
                    .map(drop)
            };
            (tid, started)
        }
    };
    match started {
        Ok(()) => CronTick {
            tick,
            run_id: Some(run_id),
            thread_id: Some(thread),
            error: None,
        },
        Err(e) => CronTick {
            tick,
            run_id: None,
            thread_id: Some(thread),
            error: Some(e.1),
        },
    }
}

/// Whether run `run_id` is stored on thread `tid` (its marker is in the log).
async fn stored(app: &Shared, tid: &str, run_id: &str) -> bool {
    match app.store.load(tid).await {
        Ok((_, log)) => log.iter().any(
            |e| matches!(&e.event, weft_core::Event::RunStarted { run_id: r, .. } if r == run_id),
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-26T10:00:00.400Z, in Unix milliseconds.
    const AT: i64 = 1_795_687_200_400;

    #[test]
    fn five_fields_tick_on_minutes_and_six_on_seconds() {
        let minute = parse_schedule("*/15 * * * *").unwrap();
        assert_eq!(next_tick(&minute, AT, None), Some(1_795_688_100_000));
        let daily = parse_schedule("0 9 * * *").unwrap();
        assert_eq!(
            next_tick(&daily, AT, None).map(fmt_time).as_deref(),
            Some("2026-11-27T09:00:00Z")
        );
        let seconds = parse_schedule("*/2 * * * * *").unwrap();
        assert_eq!(next_tick(&seconds, AT, None), Some(1_795_687_202_000));
        // A tick is after the time given, never at it.
        assert_eq!(
            next_tick(&seconds, 1_795_687_202_000, None),
            Some(1_795_687_204_000)
        );
    }

    #[test]
    fn no_tick_after_the_end_time() {
        let seconds = parse_schedule("* * * * * *").unwrap();
        assert_eq!(next_tick(&seconds, AT, Some(AT + 600)), Some(AT + 600));
        assert_eq!(next_tick(&seconds, AT, Some(AT + 500)), None);
    }

    #[test]
    fn a_bad_schedule_names_the_field_and_what_is_wrong() {
        for (s, words) in [
            ("61 * * * *", "schedule `61 * * * *` is not a cron schedule"),
            ("* * *", "has 3 fields; give 5"),
            ("0 0 0 * * * 2026", "has 7 fields"),
            ("* * * 13 *", "is not a cron schedule"),
            ("", "has 0 fields"),
        ] {
            let e = parse_schedule(s).err().unwrap();
            assert_eq!(e.0, StatusCode::UNPROCESSABLE_ENTITY);
            assert!(e.1.contains(words), "{s}: {}", e.1);
        }
    }

    #[test]
    fn end_times_are_iso_8601_with_an_offset_or_utc() {
        let utc = parse_time("end_time", "2026-11-26T10:00:00+00:00").unwrap();
        assert_eq!(utc, AT - 400);
        assert_eq!(
            parse_time("end_time", "2026-11-26T11:00:00+01:00").unwrap(),
            utc
        );
        assert_eq!(parse_time("end_time", "2026-11-26T10:00:00").unwrap(), utc);
        assert_eq!(parse_time("end_time", "2026-11-26T10:00:00Z").unwrap(), utc);
        let e = parse_time("end_time", "tomorrow").err().unwrap();
        assert!(
            e.1.starts_with("end_time `tomorrow` is not a time"),
            "{}",
            e.1
        );
    }
}
