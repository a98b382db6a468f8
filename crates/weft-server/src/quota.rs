//! Quotas per user over HTTP: a run of a user at their quota (or with as many runs going as
//! their quota allows, or whose first model call what is left of it cannot cover) is refused
//! with 429, naming what was spent, the limit and when it resets
//! (`Retry-After`); `GET /me/usage` answers the caller's spending per period against their quota.
//! The quota file is the host's (`--quotas`); the counters are the store's, shared by every
//! server and worker on it; the check before each model call is the runtime's.

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;
use weft_core::SessionStatus;
use weft_core::budget::CallMax;
use weft_core::quota::{Period, PeriodUsage, Quota};
use weft_store::{ListFilter, SessionLog, Usage};

use crate::auth::User;
use crate::openapi::{self, Route};
use crate::{ApiError, Shared};

pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::get(
            "/me/usage",
            "The caller's spending this UTC day and month (every session of theirs, on every server and worker of the store) against their quota, with when each period resets, and their runs going",
            me_usage,
        )
        .json::<MeUsage>("{user, quota, periods: [...], runs_going}"),
    ]
}

/// What `GET /me/usage` answers.
#[derive(Serialize, JsonSchema)]
pub(crate) struct MeUsage {
    /// The key's user.
    user: String,
    /// Their quota (none: no quota file, or no entry for them and no default).
    quota: Option<Quota>,
    /// The day's and the month's spending, limits and reset times.
    periods: Vec<PeriodUsage>,
    /// Their sessions running now (queued or driven), which `runs_at_once` limits.
    runs_going: u64,
}

async fn me_usage(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
) -> Result<Json<MeUsage>, ApiError> {
    let now = app.host.clock.now_ms();
    let quota = app.host.quota_of(Some(&user.0)).map(|q| q.quota);
    let keys: Vec<String> = Period::ALL.iter().map(|p| p.key(now)).collect();
    let used = app.store.usage(&user.0, &keys).await?;
    let periods = Period::ALL
        .iter()
        .zip(keys)
        .zip(used)
        .map(|((p, key), used)| PeriodUsage {
            period: *p,
            key,
            used,
            limits: quota
                .as_ref()
                .map(|q| q.limits(*p).clone())
                .unwrap_or_default(),
            resets_at: p.resets_at(now),
        })
        .collect();
    Ok(Json(MeUsage {
        runs_going: runs_going(&app, &user.0, None).await?,
        user: user.0,
        quota,
        periods,
    }))
}

/// The user's sessions running now, on every process of the store: running, with a first event
/// (a thread made empty, or made for the run being started, has none), other than `but`.
async fn runs_going(app: &Shared, user: &str, but: Option<&str>) -> Result<u64, ApiError> {
    let running = app
        .store
        .list(&ListFilter {
            user_id: Some(user.to_owned()),
            status: Some(SessionStatus::Running),
            limit: None,
        })
        .await?;
    Ok(running
        .iter()
        .filter(|r| r.last_seq > 0 && Some(r.id.as_str()) != but)
        .count() as u64)
}

/// Refuses a new run of `user` on `thread` with 429 when they have as many runs going (on other
/// threads) as their quota's `runs_at_once`, when a limit of their quota is reached for the day
/// or the month, or when what is left of one cannot cover the run's first model call at its
/// most (`first`: the check before that call would refuse it, so the run would fail at once);
/// `Retry-After` says when the period resets.
pub(crate) async fn admit(
    app: &Shared,
    user: &str,
    thread: &str,
    first: Option<&CallMax>,
) -> Result<(), ApiError> {
    let Some(q) = app.host.quota_of(Some(user)) else {
        return Ok(());
    };
    if let Some(most) = q.quota.runs_at_once {
        let going = runs_going(app, user, Some(thread)).await?;
        if going >= most {
            app.metrics.quota_refused();
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "quota reached: user {user} has {going} runs going and runs_at_once is {most}; wait for one to end"
                ),
            )
            .retry_after(1));
        }
    }
    let now = app.host.clock.now_ms();
    if let Some(r) = weft_runtime::quota::admission(app.store.as_ref(), &q, now, first).await? {
        app.metrics.quota_refused();
        return Err(
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, r.describe(user, now))
                .retry_after(r.retry_after_secs(now)),
        );
    }
    Ok(())
}
