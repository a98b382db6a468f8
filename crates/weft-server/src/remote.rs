//! Runs this server does not drive: another replica of `weft serve` on the same store, a `weft
//! worker`, or no process yet (its server stopped and the run waits to be taken over). Such a
//! run is found by its marker in the thread's log ([`crate::runs::found`]); from there on its
//! status is followed through the store (the log says when it ended, the thread's lease when
//! its process let the thread go), so that a join, a stream's `end`, `runs.get` and a cancel
//! behave as for a run of this server. It is cancelled through the thread's lease, as `weft
//! sessions cancel` does it, and a run queued here behind it waits until the thread is free.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use weft_core::SessionStatus;
use weft_store::{Leases, RunQueue, SessionLog, StoreError};

use super::auth::User;
use super::registry::{Run, RunStatus, from_log};
use super::{ApiError, Shared};

/// How often a followed run's thread is looked at (as often as a stream reads the log).
const EVERY: Duration = Duration::from_millis(250);

/// Whether a live process other than a run of this server holds thread `tid`'s lease.
async fn driven_elsewhere(app: &Shared, tid: &str) -> bool {
    weft_host::ownership::driven(app.host.clock.as_ref(), app.store.as_ref(), tid)
        .await
        .unwrap_or(true)
        && !app.runs.active_on(tid)
}

/// Follows `run` (found in the log, not final) through the store until it ended and its process
/// let the thread go; nothing when it is followed already, final, or driven here.
pub(crate) fn follow(app: &Shared, run: &Arc<Run>) {
    if !run.followed_from_store()
        || run.status.borrow().0.is_final()
        || run.followed.swap(true, Ordering::AcqRel)
    {
        return;
    }
    let (app, run) = (app.clone(), run.clone());
    tokio::spawn(async move {
        watch(&app, &run).await;
        run.followed.store(false, Ordering::Release);
    });
}

async fn watch(app: &Shared, run: &Arc<Run>) {
    // The thread's record when it was last read in full.
    let mut read_at: Option<(SessionStatus, u64)> = None;
    loop {
        if run.status.borrow().0.is_final() || app.host.shutdown.is_requested() {
            return;
        }
        // No one but the runs' map and this task holds it: no one waits for it.
        if Arc::strong_count(run) <= 2 {
            return;
        }
        tokio::time::sleep(EVERY).await;
        look(app, run, &mut read_at).await;
    }
}

/// Reads `run`'s status from the store now (a run found in the log, not driven here), so that
/// `runs.get` answers with how it stands rather than how it stood when last followed.
pub(crate) async fn refresh(app: &Shared, run: &Arc<Run>) {
    if run.followed_from_store() && !run.status.borrow().0.is_final() {
        look(app, run, &mut None).await;
    }
}

/// Brings `run`'s status up to the thread's log and lease (`read_at`: the thread's record when
/// its log was last read, which is not read again while the record is the same).
async fn look(app: &Shared, run: &Arc<Run>, read_at: &mut Option<(SessionStatus, u64)>) {
    let tid = &run.thread_id;
    // Driven here now (this server took it over): its end is recorded by the driver.
    if app.runs.active_run(tid).as_deref() == Some(run.run_id.as_str()) {
        return;
    }
    let rec = match app.store.get(tid).await {
        Ok(r) => r,
        Err(StoreError::NotFound(_)) => {
            // The thread was deleted, and its runs with it.
            let (_, last) = *run.status.borrow();
            run.status.send_replace((RunStatus::Error, last));
            app.runs.waker(tid).notify_waiters();
            return;
        }
        Err(e) => {
            tracing::debug!(thread = %tid, "cannot read the thread of a followed run: {e}");
            return;
        }
    };
    if *read_at == Some((rec.status, rec.last_seq)) {
        return;
    }
    let Ok((rec, log)) = app.store.load(tid).await else {
        return;
    };
    let Some(now) = from_log(&rec, &log, Some(&run.run_id)) else {
        gone_from_queue(app, run).await;
        return;
    };
    let (status, last) = *now.status.borrow();
    // A queued run found by its record begins where its marker says.
    run.begins_after(now.start_seq());
    app.runs.waker(tid).notify_waiters();
    if status.is_final() {
        // Ended in the log; it is over once its process let the thread go (or a later run took
        // it), so that the client may start the next run at once.
        let later_run = last < rec.last_seq;
        if later_run || !driven_elsewhere(app, tid).await {
            run.status.send_replace((status, last));
            app.runs.waker(tid).notify_waiters();
        }
        return;
    }
    run.status.send_replace((status, last));
    *read_at = Some((rec.status, rec.last_seq));
}

/// A queued run (not in the log yet) whose record is gone either began since the log was read
/// or was cancelled: read again, it is in the log, or it ended.
async fn gone_from_queue(app: &Shared, run: &Arc<Run>) {
    let (status, last) = *run.status.borrow();
    if status != RunStatus::Pending || !matches!(app.store.queued_run(&run.run_id).await, Ok(None))
    {
        return;
    }
    if let Ok((rec, log)) = app.store.load(&run.thread_id).await
        && from_log(&rec, &log, Some(&run.run_id)).is_none()
    {
        run.status.send_replace((RunStatus::Interrupted, last));
        app.runs.waker(&run.thread_id).notify_waiters();
    }
}

/// Whether thread `tid` is free for a run queued here: its session does not run, and no live
/// process holds its lease.
pub(crate) async fn free(app: &Shared, tid: &str) -> bool {
    let running = match app.store.get(tid).await {
        Ok(r) => r.last_seq > 0 && r.status == SessionStatus::Running,
        // Deleted: taking it fails, and the queued run with it, saying so.
        Err(StoreError::NotFound(_)) => false,
        Err(_) => true,
    };
    !running && !driven_elsewhere(app, tid).await
}

/// Cancels `run`, which another process drives (asked through the thread's lease, as `weft
/// sessions cancel` asks), or which no process drives (cancelled here: its calls in flight
/// recorded as cancelled, the session failed). The caller waits for its end.
pub(crate) async fn cancel(app: &Shared, run: &Arc<Run>) -> Result<(), ApiError> {
    let tid = &run.thread_id;
    let now = weft_runtime::now_ms();
    if driven_elsewhere(app, tid).await && app.store.request(tid, "cancel", now).await? {
        follow(app, run);
        return Ok(());
    }
    let running = app
        .store
        .get(tid)
        .await
        .is_ok_and(|r| r.status == SessionStatus::Running);
    if running {
        weft_host::ownership::cancel_unowned(&app.host, app.store.clone(), tid)
            .await
            .map_err(|e| {
                ApiError::new(
                    axum::http::StatusCode::CONFLICT,
                    format!(
                        "run {} could not be cancelled: {}",
                        run.run_id,
                        crate::message(&e.into())
                    ),
                )
            })?;
    }
    follow(app, run);
    Ok(())
}

/// The user's runs that the store shows going (their thread's session runs), wherever they are
/// driven, each as [`crate::runs::found`] gives it.
pub(crate) async fn running(app: &Shared, user: &User) -> Result<Vec<Arc<Run>>, ApiError> {
    let filter = weft_store::ListFilter {
        user_id: Some(user.0.clone()),
        status: Some(SessionStatus::Running),
        limit: None,
    };
    let mut out = Vec::new();
    for rec in app.store.list(&filter).await? {
        if rec.last_seq == 0 {
            continue;
        }
        let Ok((rec, log)) = app.store.load(&rec.id).await else {
            continue;
        };
        let Some(last) = from_log(&rec, &log, None) else {
            continue;
        };
        if last.status.borrow().0.is_final() {
            continue;
        }
        match super::runs::found(app, user, &rec.id, &last.run_id).await {
            Ok(run) => out.push(run),
            Err(e) if e.0 == axum::http::StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
