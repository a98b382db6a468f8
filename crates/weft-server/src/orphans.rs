//! The threads of this server that no process drives (their server stopped, or died mid-run):
//! claimed as a worker would claim them, and their runs finished here, which clients find by
//! id and stream on from their last event id. A claim never takes a lease that runs, this
//! process's included: each claim is an owner of its own ([`weft_host::ownership::driver`]), and
//! a thread that never had a run has no events and is not claimed. Runs queued by a server that
//! stopped are taken up on the same rounds ([`crate::queue::Tending`]).

use std::sync::Arc;
use std::time::Duration;

use weft_core::SessionStatus;
use weft_host::ownership::{self, Held};
use weft_store::{AnyStore, Leases, SessionLog};

use crate::Shared;
use crate::registry::{RunStatus, from_log};
use crate::runs::{finish, watchers};

/// Adopts orphaned threads until the server stops: at start, those whose lease a process of this
/// host holds that no longer exists (a server killed with SIGKILL), at once rather than after
/// their lease runs out; then whatever a claim finds, each time the store has work or a second
/// passed.
pub(crate) async fn adopt_all(app: Shared) {
    let mut agents: Vec<String> = app.agents.keys().cloned().collect();
    // A thread created empty (`POST /threads`) has no agent name on its record.
    agents.push(String::new());
    for held in ownership::take_over_dead(&app.host, app.store.clone(), &agents).await {
        app.runs.spawn(adopt(app.clone(), held)).await;
    }
    let mut queue = crate::queue::Tending::default();
    loop {
        if app.host.shutdown.is_requested() {
            return;
        }
        queue.tend(&app).await;
        match ownership::claim_orphans(&app.host, app.store.clone(), &agents, 8).await {
            Ok(claimed) => {
                for held in claimed {
                    app.runs.spawn(adopt(app.clone(), held)).await;
                }
            }
            Err(e) => tracing::warn!("cannot claim orphaned threads: {}", crate::message_of(&e)),
        }
        app.store.wait_for_work(Duration::from_secs(1)).await;
    }
}

/// Goes on with the last run of the thread `held` holds, as `weft resume` would, and records how
/// it ended; releases the thread.
async fn adopt(app: Shared, held: Held<AnyStore>) {
    let tid = held.fence().0;
    let result: anyhow::Result<()> = async {
        let (rec, log) = app.store.load(&tid).await?;
        if rec.status != SessionStatus::Running {
            return Ok(());
        }
        let st = weft_runtime::load_state(app.store.as_ref(), &tid)
            .await?
            .state;
        let Some(agent) = app.agents.get(st.agent()).cloned() else {
            return Ok(());
        };
        let run = match from_log(&rec, &log, None) {
            Some(r) => app.runs.insert(Arc::new(r)),
            None => return Ok(()),
        };
        run.status.send_replace((RunStatus::Running, st.seq()));
        // Driven here from now on, though it may have been followed through the store.
        run.driven_here();
        app.runs.activate(&run);
        app.runs.text_after(&tid, st.seq());
        // Its spans continue the run's trace (under the `traceparent` its marker recorded).
        tracing::info!(thread = %tid, run = %run.run_id, "continuing a run whose server stopped");
        let outcome = weft_host::run::continue_run(
            &app.host,
            app.store.clone(),
            &held,
            (&rec, &agent),
            || watchers(&app, &tid),
        )
        .await;
        finish(&app, &run, outcome.into()).await;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(thread = %tid, "cannot continue the thread: {}", crate::message(&e));
    }
    held.release().await;
}
