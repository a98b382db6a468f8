//! Quotas per user over HTTP: a run of a user at their quota (or with as many runs going as
//! their quota allows, or whose first model call what is left of it cannot cover) is refused
//! with 429, naming what was spent, the limit and when it resets
//! (`Retry-After`); `GET /me/usage` answers the caller's spending per period against their quota.
//! The quota file is the host's (`--quotas`), and so is the admission of a run
//! ([`weft_host::run::admit`], refused as 429 at the edge); the counters are the store's, shared
//! by every server and worker on it; the check before each model call is the runtime's.

use axum::Json;
use axum::extract::{Extension, State};
use schemars::JsonSchema;
use serde::Serialize;
use weft_core::quota::{Period, PeriodUsage, Quota};
use weft_store::Usage;

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
        runs_going: weft_host::run::runs_going(app.store.as_ref(), &user.0, None).await?,
        user: user.0,
        quota,
        periods,
    }))
}
