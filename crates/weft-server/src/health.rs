//! Whether the session store answers, known in one place.
//!
//! A task of the serving process ([`watch`]) pings the store twice a second ([`PING_EVERY`];
//! four times while it is down, so that a store that is back is seen soon) with
//! [`Leases::ping`] (PostgreSQL: `SELECT 1` on the connections lease writes use, which appends
//! and reads never fill, so that a busy store is not taken for an unreachable one), bounded by
//! [`PING_TIMEOUT`]. A ping that fails or does not answer in time marks the store
//! down; the next one that answers marks it up again. Each change is logged once, as weft's own
//! warning.
//!
//! What follows from it:
//! - `GET /ok` and `GET /health` answer 200 `{"ok": true}` while the store answers, and 503
//!   `{"ok": false, "detail": ...}` while it does not, so that a balancer stops sending traffic
//!   to a server that cannot do anything. `?check_db=1` (LangGraph's) pings the store at once
//!   (still bounded by [`PING_TIMEOUT`]) and answers from that ping.
//! - New runs and new threads are refused at once while the store is known to be down
//!   ([`refuse_while_down`]): 503 with `Retry-After` ([`RETRY_AFTER_SECS`]), instead of each
//!   request waiting for the store's pool to give up on its own (about 5 s on PostgreSQL).
//!
//! Before the first ping (and in a server that is bound but not running) the store counts as
//! up: nothing is refused on a guess. A database so slow that a ping takes longer than
//! [`PING_TIMEOUT`] reads as down too.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use weft_store::{Leases, StoreError};

use crate::{ApiError, Shared};

/// How often the store is pinged while it answers: a crash is seen within this and
/// [`PING_TIMEOUT`] (2 s).
const PING_EVERY: Duration = Duration::from_millis(500);
/// How often the store is pinged while it is down.
const PING_EVERY_WHILE_DOWN: Duration = Duration::from_millis(250);
/// The longest a ping may take before the store counts as unreachable.
const PING_TIMEOUT: Duration = Duration::from_millis(1500);
/// What a refusal while the store is down tells clients to wait (`Retry-After`, seconds).
const RETRY_AFTER_SECS: u64 = 2;

/// What the process knows of its store: reachable, or down since when and why.
#[derive(Debug, Default)]
pub(crate) struct Health {
    down: Mutex<Option<Down>>,
}

#[derive(Debug, Clone)]
struct Down {
    since: Instant,
    reason: String,
}

impl Health {
    /// Why the store is unreachable, or `None` while it answers (or before the first ping).
    pub(crate) fn down(&self) -> Option<String> {
        self.down
            .lock()
            .ok()
            .and_then(|d| d.as_ref().map(|d| d.reason.clone()))
    }

    /// Pings `store` once (bounded by [`PING_TIMEOUT`]) and records what it showed.
    pub(crate) async fn ping<S: Leases>(&self, store: &S) {
        let seen = outcome(
            tokio::time::timeout(PING_TIMEOUT, store.ping()).await,
            PING_TIMEOUT,
        );
        self.record(seen);
    }

    /// Records a ping's outcome (`Err`: why the store is unreachable), logging a change.
    fn record(&self, seen: Result<(), String>) {
        let Ok(mut down) = self.down.lock() else {
            return;
        };
        match (down.as_ref(), seen) {
            (None, Ok(())) => {}
            (Some(d), Ok(())) => {
                tracing::warn!(
                    "the session store answers again (it was unreachable for {:.1} s); new runs are accepted",
                    d.since.elapsed().as_secs_f64()
                );
                *down = None;
            }
            (None, Err(reason)) => {
                tracing::warn!(
                    "the session store is unreachable ({reason}); /ok answers 503 and new runs are refused until it answers again"
                );
                *down = Some(Down {
                    since: Instant::now(),
                    reason,
                });
            }
            (Some(_), Err(reason)) => {
                if let Some(d) = down.as_mut() {
                    d.reason = reason;
                }
            }
        }
    }
}

/// What a ping's answer says: the store answered, or why it is taken to be unreachable.
fn outcome<T>(
    answer: Result<Result<T, StoreError>, tokio::time::error::Elapsed>,
    timeout: Duration,
) -> Result<(), String> {
    match answer {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "it did not answer within {:.1} s",
            timeout.as_secs_f64()
        )),
    }
}

/// Pings the server's store for as long as the server runs (until its shutdown is requested).
pub(crate) async fn watch(app: Shared) {
    loop {
        app.health.ping(app.store.as_ref()).await;
        let pause = if app.health.down().is_some() {
            PING_EVERY_WHILE_DOWN
        } else {
            PING_EVERY
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = app.host.shutdown.requested() => return,
        }
    }
}

/// Refuses new work while the store is known to be unreachable: 503 with `Retry-After`, at
/// once. Called first by everything that starts a run or creates a thread.
pub(crate) fn refuse_while_down(app: &Shared) -> Result<(), ApiError> {
    match app.health.down() {
        None => Ok(()),
        Some(reason) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the session store is unreachable ({reason}); nothing new can start until it answers again: retry in {RETRY_AFTER_SECS} s"
            ),
        )
        .retry_after(RETRY_AFTER_SECS)),
    }
}

/// What `/ok` and `/health` answer: `ok`, and while the store is down, why.
#[derive(serde::Serialize, schemars::JsonSchema)]
#[schemars(rename = "Health")]
pub(crate) struct Answer {
    /// True while the server can reach its store.
    ok: bool,
    /// Why it cannot (only when `ok` is false).
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// The query `/ok` takes (LangGraph's).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct OkQuery {
    /// `1` (or `true`): ping the store now instead of answering from the last ping.
    #[serde(default)]
    check_db: Option<String>,
}

/// `GET /ok` and `GET /health`: 200 `{"ok": true}` while the store answers, 503
/// `{"ok": false, "detail": ...}` with `Retry-After` while it does not.
pub(crate) async fn ok(State(app): State<Shared>, Query(q): Query<OkQuery>) -> Response {
    let check = q
        .check_db
        .as_deref()
        .is_some_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    if check {
        app.health.ping(app.store.as_ref()).await;
    }
    match app.health.down() {
        None => Json(Answer {
            ok: true,
            detail: None,
        })
        .into_response(),
        Some(reason) => {
            let mut r = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Answer {
                    ok: false,
                    detail: Some(format!("the session store is unreachable ({reason})")),
                }),
            )
                .into_response();
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, RETRY_AFTER_SECS.into());
            r
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::HashMap;
    use std::sync::Arc;

    use axum::extract::{Extension, Query, State};
    use weft_store::{AnyStore, RamStore, SessionLog};

    use super::*;
    use crate::auth::User;
    use crate::{App, runs, threads};

    fn unavailable() -> StoreError {
        StoreError::Unavailable {
            target: "PostgreSQL at 127.0.0.1:1".into(),
            source: "pool timed out while waiting for an open connection".into(),
        }
    }

    #[test]
    fn a_store_that_answers_is_up_and_one_that_fails_or_hangs_is_down() {
        let t = Duration::from_millis(1500);
        assert_eq!(outcome::<()>(Ok(Ok(())), t), Ok(()));
        let e = outcome::<()>(Ok(Err(unavailable())), t).unwrap_err();
        assert!(
            e.contains("cannot connect to PostgreSQL at 127.0.0.1:1"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_ping_that_does_not_answer_in_time_marks_the_store_down() {
        let h = Health::default();
        assert_eq!(h.down(), None, "up until a ping says otherwise");
        // (Waiting a few milliseconds here stands for the ping's 1.5 s.)
        let hung = tokio::time::timeout(
            Duration::from_millis(5),
            std::future::pending::<Result<(), _>>(),
        );
        h.record(outcome::<()>(hung.await, PING_TIMEOUT));
        let why = h.down().expect("down after a ping that did not answer");
        assert!(why.contains("did not answer within 1.5 s"), "{why}");
        // Another failure keeps it down with the newest reason; an answer brings it back.
        h.record(outcome::<()>(Ok(Err(unavailable())), PING_TIMEOUT));
        assert!(h.down().unwrap().contains("cannot connect"));
        h.record(Ok(()));
        assert_eq!(h.down(), None);
    }

    #[tokio::test]
    async fn a_ping_of_a_store_that_answers_finds_it_up() {
        let h = Health::default();
        h.record(Err("down".into()));
        h.ping(&RamStore::new()).await;
        assert_eq!(h.down(), None);
    }

    fn app() -> Shared {
        Arc::new(App {
            store: Arc::new(AnyStore::Ram(RamStore::new())),
            host: weft_host::Host::default(),
            agents: HashMap::new(),
            runs: crate::registry::Runs::default(),
            max_runs_per_user: 10,
            metrics: Arc::default(),
            summaries: crate::sessions::Summaries::default(),
            eval_results: crate::evals::Results::default(),
            health: Health::default(),
        })
    }

    async fn body(r: Response) -> serde_json::Value {
        let b = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    #[tokio::test]
    async fn ok_answers_503_while_the_store_is_down_and_200_once_it_answers() {
        let app = app();
        let r = ok(State(app.clone()), Query(OkQuery::default())).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body(r).await, serde_json::json!({"ok": true}));

        app.health
            .record(Err("it did not answer within 1.5 s".into()));
        let r = ok(State(app.clone()), Query(OkQuery::default())).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[axum::http::header::RETRY_AFTER], "2");
        let b = body(r).await;
        assert_eq!(b["ok"], false);
        assert!(
            b["detail"]
                .as_str()
                .unwrap()
                .contains("the session store is unreachable (it did not answer"),
            "{b}"
        );
        // `check_db=0` answers from the last ping; `check_db=1` pings now (this store answers).
        let q = |v: &str| {
            Query(OkQuery {
                check_db: Some(v.into()),
            })
        };
        let r = ok(State(app.clone()), q("0")).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let r = ok(State(app.clone()), q("1")).await;
        assert_eq!(r.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn new_runs_and_threads_are_refused_at_once_while_the_store_is_down() {
        let app = app();
        app.health
            .record(Err("cannot connect to PostgreSQL at h:5432".into()));
        let user = User("alice".into());
        let body = runs::RunBody {
            assistant_id: "any".into(),
            ..runs::RunBody::default()
        };
        let Err(e) = runs::start_with_id(&app, &user, "t1", body, None).await else {
            panic!("a run started while the store is down");
        };
        assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE, "{}", e.1);
        assert_eq!(e.2, Some(RETRY_AFTER_SECS));
        assert!(
            e.1.contains(
                "the session store is unreachable (cannot connect to PostgreSQL at h:5432)"
            ) && e.1.contains("retry in 2 s"),
            "{}",
            e.1
        );
        let Err(e) = threads::create_thread(State(app.clone()), Extension(user), None).await else {
            panic!("a thread was created while the store is down");
        };
        assert_eq!((e.0, e.2), (StatusCode::SERVICE_UNAVAILABLE, Some(2)));
        // Nothing was written.
        assert!(matches!(
            app.store.get("t1").await,
            Err(StoreError::NotFound(_))
        ));
    }
}
