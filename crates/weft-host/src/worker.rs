//! The workers' loop (`weft worker`): a process that claims sessions no process runs and drives them, as many at
//! once as `--concurrency` says. Many workers share one store (PostgreSQL, or one SQLite file on
//! one machine) and never drive one session together: each session is driven under its lease
//! (see `ownership`), and every append is fenced by the lease's epoch.
//!
//! Work is claimed, never pushed: a worker asks the store for running sessions of its agents
//! whose lease is free or expired (`Store::claim`), which covers sessions queued by `weft
//! submit`, sessions answered with `weft submit --session`, and sessions whose process (or
//! worker) stopped. `weft submit` wakes the workers (PostgreSQL `NOTIFY`); polling every
//! `--poll-secs` is the truth, so a lost notification or an expired lease is found anyway.
//!
//! SIGTERM or Ctrl-C drains: no new claims; the sessions being driven start no new call and stop
//! at their next safe point, once their calls in flight have ended and been recorded. A call
//! still running after `--drain-secs` is dropped where it stands (as a crash would drop it: every
//! committed batch stays whole, and the call is re-run or recorded as an unknown outcome by the
//! next owner). Every lease is released, so other workers take the sessions over at once. A
//! second signal stops at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_core::SessionStatus;
use weft_store::{Lease, Store};

use crate::drive::{AgentFile, Ended, drive};
use crate::{EXIT_INTERRUPTED, Host, HostError, ownership};

type Result<T, E = HostError> = std::result::Result<T, E>;

/// What a worker does: which agents' sessions, how many at once, how often it looks.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Agent files, or directories whose `.yaml`, `.yml` and `.json` agent files are all taken.
    pub agents: Vec<PathBuf>,
    /// How many sessions it drives at once (at least 1).
    pub concurrency: usize,
    /// How often it looks for work when nothing wakes it.
    pub poll: Duration,
    /// On shutdown: how long the sessions being driven get to end before they are stopped and
    /// released for other workers.
    pub drain: Duration,
    /// Stop once no session has been runnable for this long; `None`: run until shut down.
    pub exit_when_idle: Option<Duration>,
}

/// With more sessions waiting than a worker has free slots, it claims once a
/// `1/CLAIM_BATCH_PART` of its slots are free, or [`CLAIM_GATHER`] after the first one freed.
const CLAIM_BATCH_PART: usize = 4;

/// The longest a free slot waits for others before the worker claims for it alone.
const CLAIM_GATHER: Duration = Duration::from_millis(5);

/// The leases of the sessions being driven, to release them when the worker stops them.
type Driving = Arc<Mutex<HashMap<String, Lease>>>;

/// Runs a worker until `host.shutdown` is triggered (then drains, and returns
/// [`EXIT_INTERRUPTED`]) or, with [`WorkerConfig::exit_when_idle`], until there was no work for
/// that long (then returns 0).
pub async fn run<S: Store>(host: &Host, store: Arc<S>, a: WorkerConfig) -> Result<u8> {
    if a.concurrency == 0 {
        return Err(HostError::Invalid(
            "--concurrency must be at least 1".to_owned(),
        ));
    }
    let poll = a.poll.max(Duration::from_millis(10));
    let drain = a.drain;
    host.shutdown.set_grace(drain);
    host.shutdown.set_quiet();
    let idle_exit = a.exit_when_idle;
    let agents = Arc::new(crate::drive::agents(&a.agents).await?);
    host.durability
        .for_agents(store.as_ref(), agents.values().map(|f| &f.spec));
    // The depth of the queue this worker works down, while it runs (when metrics go anywhere).
    let _sampling = host
        .telemetry
        .sample_queue(store.clone(), host.clock.clone())
        .map(AbortOnDrop);
    let names: Vec<String> = agents.keys().cloned().collect();
    let mut listed: Vec<String> = agents
        .values()
        .map(|f| format!("{} ({})", f.spec.name, f.path.display()))
        .collect();
    listed.sort();
    eprintln!(
        "worker {} (pid {}): up to {} sessions at once of {}",
        &ownership::me().id[..8],
        std::process::id(),
        a.concurrency,
        listed.join(", ")
    );
    let driving: Driving = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    let stop = host.shutdown.requested();
    tokio::pin!(stop);
    let mut idle_since = Instant::now();
    // Sessions driven to an end (completed, failed, waiting), and sessions let go unfinished
    // (stopped, or a store error) for other workers.
    let mut done = 0_u64;
    let mut released = 0_u64;
    let mut count = |left: Option<Result<Let, tokio::task::JoinError>>| match left {
        Some(Ok(Let::Released)) => released += 1,
        Some(_) => done += 1,
        None => {}
    };
    let stopped = 'work: loop {
        let free = a.concurrency.saturating_sub(tasks.len());
        let mut claimed = 0;
        if free > 0 {
            let now = host.clock.now_ms();
            match store
                .claim(ownership::me(), &names, now, ownership::ttl_ms(), free)
                .await
            {
                Ok(leases) => {
                    claimed = leases.len();
                    for lease in leases {
                        if let Ok(mut d) = driving.lock() {
                            d.insert(lease.session.clone(), lease.clone());
                        }
                        tasks.spawn(one(
                            host.clone(),
                            store.clone(),
                            lease,
                            agents.clone(),
                            driving.clone(),
                        ));
                    }
                }
                // The store is unreachable for now (a restarted server, a dropped
                // connection): the sessions wait; look again after the poll interval.
                Err(e) => tracing::warn!("cannot claim sessions: {e}"),
            }
        }
        if claimed > 0 || !tasks.is_empty() {
            idle_since = Instant::now();
        } else if idle_exit.is_some_and(|d| idle_since.elapsed() >= d) {
            break false;
        }
        if claimed > 0 && claimed == free {
            // There may be more: claim again once a slot frees, without waiting for a poll. A
            // claim costs the store about as much for several sessions as for one, so the
            // worker waits a moment (at most `CLAIM_GATHER`) for more slots to free first.
            tokio::select! {
                left = tasks.join_next() => count(left),
                () = &mut stop => break true,
            }
            let want = (a.concurrency / CLAIM_BATCH_PART).max(1);
            let until = tokio::time::Instant::now() + CLAIM_GATHER;
            while a.concurrency.saturating_sub(tasks.len()) < want {
                tokio::select! {
                    left = tasks.join_next() => count(left),
                    () = tokio::time::sleep_until(until) => break,
                    () = &mut stop => break 'work true,
                }
            }
            continue;
        }
        tokio::select! {
            left = tasks.join_next(), if !tasks.is_empty() => count(left),
            () = store.wait_for_work(poll) => {}
            () = &mut stop => break true,
        }
    };
    if stopped {
        // Every session being driven stops at its next safe point; calls in flight get the
        // drain time to finish (see `Held::until_asked`).
        eprintln!(
            "worker: stopping; {} session(s) being driven stop once their calls in flight end (at most {} s)",
            tasks.len(),
            drain.as_secs_f64()
        );
        let deadline = tokio::time::Instant::now() + drain + Duration::from_secs(5);
        let again = host.shutdown.forced();
        tokio::pin!(again);
        loop {
            tokio::select! {
                next = tasks.join_next() => match next {
                    Some(left) => count(Some(left)),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
                () = &mut again => break,
            }
        }
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        let left: Vec<Lease> = driving
            .lock()
            .map(|mut d| d.drain().map(|(_, l)| l).collect())
            .unwrap_or_default();
        for lease in &left {
            if let Err(e) = store.release(lease).await {
                tracing::warn!(session = %lease.session, "cannot release the session's lease: {e}");
            }
        }
        released += left.len() as u64;
        eprintln!("worker: stopped after {done} session(s); {released} released for other workers");
        return Ok(EXIT_INTERRUPTED);
    }
    // Sessions it let go unfinished (taken over by another process, or left after a store
    // error) went back to the queue: saying only how many ended would hide them.
    let left = if released > 0 {
        format!("; {released} let go unfinished for other workers")
    } else {
        String::new()
    };
    eprintln!("worker: no work for a while; stopped after {done} session(s){left}");
    Ok(0)
}

/// How a worker let a session go.
enum Let {
    /// It ended, or waits for a person.
    Ended,
    /// It is still running, for any worker to claim: stopped at a safe point, or left after an
    /// error.
    Released,
}

/// Drives one claimed session until it ends, waits or is stopped, then releases it.
async fn one<S: Store>(
    host: Host,
    store: Arc<S>,
    lease: Lease,
    agents: Arc<HashMap<String, Arc<AgentFile>>>,
    driving: Driving,
) -> Let {
    let id = lease.session.clone();
    let held = ownership::hold(&host, store.clone(), lease);
    let began = Instant::now();
    let outcome: Result<(String, Let)> = async {
        let rec = store.get(&id).await?;
        if rec.status != SessionStatus::Running {
            // It ended between the claim and now.
            return Ok((format!("already {}", rec.status.as_str()), Let::Ended));
        }
        let agent = agents.get(&rec.agent).ok_or_else(|| {
            HostError::AgentFile(format!("no agent file for agent `{}`", rec.agent))
        })?;
        // Its spans, when an OTLP endpoint is configured, go on in the one trace across
        // takeovers (see `Hosted`).
        let ended = drive(
            &host,
            store.clone(),
            &held,
            &rec,
            agent,
            crate::drive::Watchers::default(),
        )
        .await;
        Ok(match ended? {
            Ended::Done(state, _) => match state.status() {
                SessionStatus::Failed => (
                    format!(
                        "failed: {}",
                        state.turn().error().unwrap_or("unknown reason")
                    ),
                    Let::Ended,
                ),
                s => (s.as_str().to_owned(), Let::Ended),
            },
            Ended::Stopped(_) => (
                "stopped; released for other workers".to_owned(),
                Let::Released,
            ),
        })
    }
    .await;
    let how = match outcome {
        Ok((what, how)) => {
            eprintln!(
                "session {id}: {what} ({:.1} s)",
                began.elapsed().as_secs_f64()
            );
            how
        }
        // Left running: it is claimed again (by this worker or another) once released, after a
        // pause so that a session that fails this way every time does not spin.
        Err(e) => {
            eprintln!("session {id}: not finished: {e}");
            tokio::time::sleep(Duration::from_secs(1)).await;
            Let::Released
        }
    };
    if let Ok(mut d) = driving.lock() {
        d.remove(&id);
    }
    held.release().await;
    how
}

/// Stops a background task when dropped (when the worker returns).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
