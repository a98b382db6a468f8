//! Runs queued behind another run of their thread (`multitask_strategy: enqueue`), kept in the
//! store (`weft_store::RunQueue`) from before their client is answered until their marker is in
//! the thread's log: a server that stops or dies loses none.
//!
//! The server that queued a run starts it once the thread is free, and renews its claim on it
//! meanwhile; a run whose claim ran out (its server died) is taken over by another server, or by
//! the same one restarted, and started from its stored request. Any server finds a queued run by
//! its id (`runs.get`, a join, a stream, `runs.list`) and follows it until it begins; a cancel
//! deletes its record, so that the server holding it never starts it.
//!
//! The holder looks at where the run stands ([`standing`]) before it takes the thread and again
//! after (another server that took the run over may have begun it meanwhile): still queued, it
//! begins; begun elsewhere, it is followed; its record gone, it was cancelled. A queued run
//! decides what it does (start the session, a new turn, an answer) from the thread as it is once
//! the run before it ended, and its events begin there.

use std::sync::Arc;

use serde_json::Value;
use weft_store::{QueuedRun, RunQueue, SessionLog};

use super::registry::{self, Run, RunStatus};
use super::runs::{self, RunBody};
use super::{ApiError, Shared};

/// The claimer this process writes on its queued runs.
fn owner() -> &'static str {
    &weft_host::ownership::me().id
}

/// Stores `run`, queued with `body`, claimed by this process.
pub(crate) async fn keep(
    app: &Shared,
    run: &Run,
    body: &RunBody,
) -> Result<(), weft_store::StoreError> {
    let mut stored =
        serde_json::to_value(body).map_err(|e| weft_store::StoreError::Unstorable {
            what: format!("the request of queued run {}", run.run_id),
            reason: e.to_string(),
        })?;
    if let (Value::Object(m), Some(tp)) = (&mut stored, &run.traceparent) {
        m.insert("traceparent".into(), Value::String(tp.clone()));
    }
    let now = weft_runtime::now_ms();
    app.store
        .queue_run(&QueuedRun {
            run_id: run.run_id.clone(),
            thread_id: run.thread_id.clone(),
            user_id: run.user.clone(),
            body: stored,
            owner: owner().to_owned(),
            expires_at: now + weft_host::ownership::ttl_ms(),
            created_at: run.created_at,
        })
        .await
}

/// `run` began (its marker is stored) or ended: its record is deleted, once.
pub(crate) async fn done(app: &Shared, run: &Run) {
    if run.dequeue()
        && let Err(e) = app.store.unqueue_run(&run.run_id).await
    {
        // Its marker is in the log: whoever takes the record over finds it and deletes it.
        tracing::warn!(run = %run.run_id, "cannot delete the queued run's record: {e}");
    }
}

/// Where a queued run stands, as the store says.
pub(crate) enum Standing {
    /// Still queued: it may begin.
    Queued,
    /// Its marker is in the log: another process (that took it over) began it.
    Began,
    /// Its record is gone and it never began: it was cancelled.
    Cancelled,
}

/// Where queued `run` stands (`sure`: its marker is looked for even while its record is there,
/// as after taking the thread). A store that cannot be read leaves it queued.
pub(crate) async fn standing(app: &Shared, run: &Run, sure: bool) -> Standing {
    if run.place() != registry::Place::Queued {
        return Standing::Queued;
    }
    let queued = !matches!(app.store.queued_run(&run.run_id).await, Ok(None));
    if queued && !sure {
        return Standing::Queued;
    }
    match app.store.load(&run.thread_id).await {
        Ok((rec, log)) if registry::from_log(&rec, &log, Some(&run.run_id)).is_some() => {
            Standing::Began
        }
        _ if queued => Standing::Queued,
        _ => Standing::Cancelled,
    }
}

/// Queued `run` was begun by another process: this one follows it through the store from
/// now on, as a run found in the log (its clients' streams and joins go on).
pub(crate) fn follow(app: &Shared, run: &Arc<Run>) {
    run.began_elsewhere();
    crate::remote::follow(app, run);
}

/// Cancels queued `run`: its record is deleted; a run this process does not hold ends here.
pub(crate) async fn cancel(app: &Shared, run: &Run) -> Result<(), ApiError> {
    app.store.unqueue_run(&run.run_id).await?;
    if run.followed_from_store() {
        let (_, last) = *run.status.borrow();
        run.status.send_replace((RunStatus::Interrupted, last));
    }
    Ok(())
}

/// Run `rid` of thread `tid` if it is queued (by any process), as a run to follow until it
/// begins.
pub(crate) async fn pending(app: &Shared, tid: &str, rid: &str) -> Result<Option<Run>, ApiError> {
    Ok(app
        .store
        .queued_run(rid)
        .await?
        .filter(|q| q.thread_id == tid)
        .map(|q| Run::from_queue(&q, true)))
}

/// The runs queued on thread `tid`, as runs to list.
pub(crate) async fn of_thread(app: &Shared, tid: &str) -> Result<Vec<Run>, ApiError> {
    Ok(app
        .store
        .queued_runs_of(tid)
        .await?
        .iter()
        .map(|q| Run::from_queue(q, true))
        .collect())
}

/// What the loop for orphaned runs does for queued ones: renews this process's claims a few
/// times per claim's life, and takes over the runs whose claim ran out.
#[derive(Default)]
pub(crate) struct Tending {
    renewed_at: i64,
}

impl Tending {
    pub(crate) async fn tend(&mut self, app: &Shared) {
        let ttl = weft_host::ownership::ttl_ms();
        let now = weft_runtime::now_ms();
        if now - self.renewed_at >= ttl / 3 {
            match app.store.renew_queued_runs(owner(), now + ttl).await {
                Ok(()) => self.renewed_at = now,
                Err(e) => tracing::warn!("cannot renew the queued runs' claims: {e}"),
            }
        }
        let stale = match app.store.stale_queued_runs(now, 8).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot read the queued runs: {e}");
                return;
            }
        };
        for q in stale {
            // A run of an assistant this server does not serve is left to one that does.
            let assistant = q.body.get("assistant_id").and_then(Value::as_str);
            if !assistant.is_some_and(|a| app.agents.contains_key(a)) {
                continue;
            }
            match app
                .store
                .take_queued_run(&q.run_id, &q.owner, now, owner(), now + ttl)
                .await
            {
                Ok(true) => take_up(app, q).await,
                Ok(false) => {}
                Err(e) => tracing::warn!(run = %q.run_id, "cannot take the queued run over: {e}"),
            }
        }
    }
}

/// Starts queued run `q`, whose server stopped, as that server would have: it waits for its
/// thread, then begins. One that began already (its marker is in the log) or can no longer
/// begin (its thread or assistant is gone) is deleted.
async fn take_up(app: &Shared, q: QueuedRun) {
    let began = match app.store.load(&q.thread_id).await {
        Ok((rec, log)) => registry::from_log(&rec, &log, Some(&q.run_id)).is_some(),
        Err(weft_store::StoreError::NotFound(_)) => true,
        Err(e) => {
            tracing::warn!(run = %q.run_id, "cannot read the queued run's thread: {e}");
            return;
        }
    };
    if began {
        if let Err(e) = app.store.unqueue_run(&q.run_id).await {
            tracing::warn!(run = %q.run_id, "cannot delete the queued run's record: {e}");
        }
        return;
    }
    tracing::info!(thread = %q.thread_id, run = %q.run_id, "taking up a run queued by a server that stopped");
    if let Err(e) = runs::start_queued(app, &q).await {
        tracing::warn!(run = %q.run_id, "cannot take up the queued run: {}", e.1);
        let _ = app.store.unqueue_run(&q.run_id).await;
    }
}

/// Keeps `run` in the runs' map, or the one with its id kept already (followed until now).
pub(crate) fn held_here(app: &Shared, run: Run) -> Arc<Run> {
    let run = app.runs.insert(Arc::new(run));
    run.queue();
    run
}
