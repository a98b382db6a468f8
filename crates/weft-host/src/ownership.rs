//! One owner per session. A process that drives a session (run, answer, resume, plan run) holds
//! its lease in the store, renews it while it runs and gives it up when it stops or the session
//! waits. Another process asking to drive the session is refused while the lease runs, naming
//! the holder; `weft resume --force` takes over from an owner known to be gone. On the same host,
//! an owner whose process no longer exists has no claim: its lease is taken over at once.
//!
//! Appends are fenced: the session's events are written at the lease's epoch, and the store
//! refuses a batch whose epoch is no longer the session's (see `weft_store::lease`), so a
//! process that lost its lease (stopped for longer than the lease time, then woken) cannot write
//! again.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use weft_runtime::clock::Clock;
use weft_store::{Lease, Owner, Store, StoreError};

use crate::{EXIT_FAILED, EXIT_INTERRUPTED, Host, HostError, Shutdown};

type Result<T, E = HostError> = std::result::Result<T, E>;

/// How long a lease runs without renewal (renewed every third of it). `WEFT_LEASE_SECS` sets it.
pub fn ttl() -> Duration {
    weft_store::lease_time()
}

/// [`ttl`] in milliseconds.
pub fn ttl_ms() -> i64 {
    i64::try_from(ttl().as_millis()).unwrap_or(15_000)
}

/// This process, as an owner.
pub fn me() -> &'static Owner {
    static ME: OnceLock<Owner> = OnceLock::new();
    ME.get_or_init(|| Owner {
        id: uuid::Uuid::new_v4().to_string(),
        host: host(),
        pid: std::process::id(),
    })
}

/// An owner for one driver of this process (a run of `weft serve`, one claim of its loop for
/// orphaned runs): this process's host and pid, with an id of its own (`ME.N`). Two drivers of
/// one process then never share a lease: taking a lease again as the same owner would succeed
/// at the same epoch, so each would write over the other.
pub fn driver() -> Owner {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Owner {
        id: format!("{}.{n}", me().id),
        ..me().clone()
    }
}

/// Whether `owner` is this process or one of its [`driver`]s.
pub fn mine(owner: &Owner) -> bool {
    let me = me();
    owner.id == me.id
        || owner
            .id
            .strip_prefix(me.id.as_str())
            .is_some_and(|rest| rest.starts_with('.'))
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Whether the owner `pid` on `host` is known to be gone: a process of this host that no longer
/// exists. An owner on another host is never known to be gone (its lease runs out instead).
fn gone(host: &str, pid: u32) -> bool {
    host == me().host && !alive_here(pid)
}

/// Whether `owner` is known to be gone: a process of this host that no longer exists, or an earlier process of this host that had
/// this process's pid (a restarted container's server often gets the same pid again).
pub fn owner_gone(owner: &Owner) -> bool {
    gone(&owner.host, owner.pid)
        || (owner.host == me().host && owner.pid == me().pid && !mine(owner))
}

/// Whether a process of this host with this pid exists (Linux; elsewhere, assume it does).
fn alive_here(pid: u32) -> bool {
    if !std::path::Path::new("/proc/self").exists() {
        return true;
    }
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A lease this process holds, renewed in the background until it is released or dropped. The
/// same task reads, twice a second, what another process asks of the owner.
pub struct Held<S: Store> {
    store: Arc<S>,
    lease: Lease,
    beat: tokio::task::JoinHandle<()>,
    asked: tokio::sync::watch::Receiver<Option<Asked>>,
    /// Tells the run to stop at its next safe point ([`weft_runtime::RuntimeBuilder::stop_on`]).
    stop: tokio::sync::watch::Sender<bool>,
    shutdown: Shutdown,
}

/// Why a run stopped before its end: another process asked (`weft sessions cancel` / `pause`),
/// or this one got SIGINT or SIGTERM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// `weft sessions cancel`: the session ends as failed, its calls in flight cancelled.
    Cancel,
    /// `weft sessions pause`: the session stops at a safe point, for `weft resume`.
    Pause,
    /// This process was asked to stop ([`Shutdown`]).
    Interrupt,
}

/// How often the owner looks for a request.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Takes the lease of session `id` (see the module's documentation), or says who holds it.
pub async fn take<S: Store>(host: &Host, store: Arc<S>, id: &str, force: bool) -> Result<Held<S>> {
    take_as(host, store, id, force, me()).await
}

/// [`take`] as `owner` (this process, or one of its [`driver`]s).
pub async fn take_as<S: Store>(
    host: &Host,
    store: Arc<S>,
    id: &str,
    force: bool,
    owner: &Owner,
) -> Result<Held<S>> {
    let now = host.clock.now_ms();
    let lease = match store.acquire(id, owner, now, ttl_ms(), force).await {
        Ok(l) => l,
        Err(StoreError::Leased { .. }) if held_by_gone(store.as_ref(), id).await => {
            tracing::info!(session = id, "the session's owner is gone; taking it over");
            store.acquire(id, owner, now, ttl_ms(), true).await?
        }
        Err(e @ StoreError::Leased { .. }) => {
            return Err(HostError::Leased(format!(
                "{e}; wait for it to finish, or if that process is gone, take the session over with `weft resume{} {id} --force`",
                host.db_flag
            )));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(hold(host, store, lease))
}

/// Whether session `id`'s lease is held by an owner known to be gone ([`owner_gone`]).
async fn held_by_gone<S: Store>(store: &S, id: &str) -> bool {
    matches!(store.lease(id).await, Ok(Some(l)) if owner_gone(&l.owner))
}

/// The running sessions of `agents` whose lease is held by a process of this host that no
/// longer exists (one killed with SIGKILL), each taken over at once by a [`driver`] of its own
/// rather than after its lease runs out. A session with no events yet is left alone. What could
/// not be read or taken is logged and passed over: another look (a claim once the lease ran
/// out) finds it.
pub async fn take_over_dead<S: Store>(
    host: &Host,
    store: Arc<S>,
    agents: &[String],
) -> Vec<Held<S>> {
    let filter = weft_store::ListFilter {
        user_id: None,
        status: Some(weft_core::SessionStatus::Running),
        limit: None,
    };
    let running = match store.list(&filter).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("cannot list the running sessions: {e}");
            return Vec::new();
        }
    };
    let now = host.clock.now_ms();
    let mut taken = Vec::new();
    for rec in running {
        if rec.last_seq == 0 || !agents.contains(&rec.agent) {
            continue;
        }
        let dead = matches!(
            store.lease(&rec.id).await,
            Ok(Some(l)) if l.expires_at > now && owner_gone(&l.owner)
        );
        if !dead {
            continue;
        }
        match take_as(host, store.clone(), &rec.id, false, &driver()).await {
            Ok(held) => taken.push(held),
            Err(e) => tracing::info!(session = %rec.id, "not taken over: {e}"),
        }
    }
    taken
}

/// Claims at most `n` sessions of `agents` that no process drives (queued, or their lease ran
/// out), each held by a [`driver`] of its own, so that a claim never takes a lease a run of this
/// process holds.
pub async fn claim_orphans<S: Store>(
    host: &Host,
    store: Arc<S>,
    agents: &[String],
    n: usize,
) -> Result<Vec<Held<S>>> {
    let leases = store
        .claim(&driver(), agents, host.clock.now_ms(), ttl_ms(), n)
        .await?;
    Ok(leases
        .into_iter()
        .map(|lease| hold(host, store.clone(), lease))
        .collect())
}

/// Keeps a lease this process has just taken: renews it and listens for requests until it is
/// released or dropped. Triggering the host's shutdown stops the run it drives (see
/// [`Held::until_asked`]); a renewal runs until the host's clock reads now plus [`ttl`].
pub fn hold<S: Store>(host: &Host, store: Arc<S>, lease: Lease) -> Held<S> {
    let (tell, asked) = tokio::sync::watch::channel(None);
    let beat = {
        let store = store.clone();
        let lease = lease.clone();
        let clock = host.clock.clone();
        tokio::spawn(async move {
            let renew_every = ttl() / 3;
            let mut renewed = tokio::time::Instant::now();
            let mut failing = false;
            loop {
                tokio::time::sleep(LOOK_EVERY.min(renew_every)).await;
                // The renewal first, and again at the next look after a failure: it must never
                // wait behind the look for requests, which may be slow on a busy store.
                if renewed.elapsed() >= renew_every {
                    let until = clock.now_ms().saturating_add(ttl_ms());
                    match store.renew(&lease, until).await {
                        Ok(()) => {
                            renewed = tokio::time::Instant::now();
                            failing = false;
                        }
                        Err(StoreError::LeaseLost(_)) => {
                            tracing::warn!(session = %lease.session, "the session's lease was taken over");
                            return;
                        }
                        Err(e) if !failing => {
                            failing = true;
                            tracing::warn!(session = %lease.session, "cannot renew the session's lease (trying again every {} ms): {e}", LOOK_EVERY.as_millis());
                        }
                        Err(e) => {
                            tracing::debug!(session = %lease.session, "cannot renew the session's lease: {e}");
                        }
                    }
                }
                let look = tokio::time::timeout(LOOK_EVERY, store.lease(&lease.session)).await;
                if let Ok(Ok(Some(now))) = look {
                    let what = match now.request.as_deref() {
                        Some("cancel") => Some(Asked::Cancel),
                        Some("pause") => Some(Asked::Pause),
                        _ => None,
                    };
                    if what.is_some() && now.epoch == lease.epoch {
                        let _ = tell.send(what);
                    }
                }
            }
        })
    };
    Held {
        store,
        lease,
        beat,
        asked,
        stop: tokio::sync::watch::channel(false).0,
        shutdown: host.shutdown.clone(),
    }
}

impl<S: Store> Held<S> {
    /// The session and epoch this lease fences (for [`weft_runtime::RuntimeBuilder::fence`]).
    pub fn fence(&self) -> (String, u64) {
        (self.lease.session.clone(), self.lease.epoch)
    }

    /// Makes the runtime being built write this session at the lease's epoch and stop when
    /// asked to.
    pub fn bind<T: Store>(
        &self,
        rt: weft_runtime::RuntimeBuilder<T>,
    ) -> weft_runtime::RuntimeBuilder<T> {
        let (id, epoch) = self.fence();
        rt.fence(id, epoch).stop_on(self.stop.subscribe())
    }

    /// Runs `work` (on a runtime [`Held::bind`] bound) until it ends, or until it must stop:
    /// - cancel (another process): `work` is dropped where it stands, its calls killed;
    /// - pause (another process): `work` starts nothing new and ends at its next safe point,
    ///   once the calls in flight finished and were recorded;
    /// - SIGINT or SIGTERM: the same, but calls still running after [`Shutdown::grace`]
    ///   are dropped where they stand.
    pub async fn until_asked<F: std::future::Future>(&self, work: F) -> Result<F::Output, Asked> {
        let work = std::pin::pin!(work);
        let mut work = work;
        let mut asked = self.asked.clone();
        let request = async move {
            loop {
                if let Some(a) = *asked.borrow_and_update() {
                    return a;
                }
                if asked.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let why = tokio::select! {
            out = &mut work => return Ok(out),
            a = request => a,
            () = self.shutdown.requested() => Asked::Interrupt,
        };
        match why {
            Asked::Cancel => {}
            Asked::Pause => {
                self.stop.send_replace(true);
                let _ = work.await;
            }
            Asked::Interrupt => {
                self.stop.send_replace(true);
                let _ = tokio::time::timeout(self.shutdown.grace(), work).await;
            }
        }
        Err(why)
    }

    /// Stops renewing and gives the lease up.
    pub async fn release(self) {
        self.beat.abort();
        if let Err(e) = self.store.release(&self.lease).await {
            tracing::warn!(session = %self.lease.session, "cannot release the session's lease: {e}");
        }
    }
}

impl<S: Store> Drop for Held<S> {
    fn drop(&mut self) {
        self.beat.abort();
    }
}

/// Ends a run that another process asked to stop: a cancelled session records its calls in
/// flight as cancelled and ends as failed; a paused one is left as a stopped process leaves it,
/// for `weft resume`. The caller then gives the lease up. Returns the exit code.
pub async fn stopped<S: Store>(
    host: &Host,
    rt: &weft_runtime::Runtime<S>,
    id: &str,
    asked: Asked,
) -> Result<u8> {
    match asked {
        Asked::Cancel => {
            let mut session = rt.load_session(id).await?;
            let ran = running_for(rt.store().as_ref(), id, &session.state).await?;
            let events = weft_core::recovery::cancel(&session.state, rt.limits(), &ran);
            session.commit(events).await?;
            eprintln!("cancelled: session {id} (weft sessions cancel)");
            Ok(EXIT_FAILED)
        }
        Asked::Pause => {
            let status = rt.store().get(id).await?.status;
            if status != weft_core::SessionStatus::Running {
                eprintln!(
                    "session {id} is {} (it got there before it could pause)",
                    status.as_str()
                );
                return Ok(0);
            }
            eprintln!(
                "paused: session {id}; continue it with `weft resume{} {id}`",
                host.db_flag
            );
            Ok(EXIT_INTERRUPTED)
        }
        Asked::Interrupt => {
            if !host.shutdown.is_quiet() {
                eprintln!(
                    "interrupted: session {id} stopped; continue it with `weft resume{} {id}`",
                    host.db_flag
                );
            }
            Ok(EXIT_INTERRUPTED)
        }
    }
}

/// How long each call in flight in `st` (session `id`) has run, in ms: from the time its start
/// was recorded to now. A cancelled call is recorded with it, not with a duration of 0.
async fn running_for<S: Store + ?Sized>(
    store: &S,
    id: &str,
    st: &weft_core::State,
) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
    let mut out = std::collections::BTreeMap::new();
    if st.calls().open.is_empty() {
        return Ok(out);
    }
    let (_, events) = store.load(id).await?;
    let now = weft_runtime::now_ms();
    for env in &events {
        if let weft_core::Event::ToolCallStarted { call_id, .. } = &env.event
            && st.calls().open.contains_key(call_id)
        {
            out.insert(
                call_id.clone(),
                u64::try_from(now.saturating_sub(env.ts)).unwrap_or(0),
            );
        }
    }
    Ok(out)
}

/// Cancels a session that no process runs (one that waits for a person, or was queued): takes
/// its lease, records the cancellation (calls in flight as cancelled, the session failed) and
/// lets it go.
pub async fn cancel_unowned<S: Store + 'static>(
    host: &Host,
    store: Arc<S>,
    id: &str,
) -> Result<()> {
    let held = take(host, store.clone(), id, false).await?;
    // Recording a cancellation calls no model: no quota to hold it to.
    let hosted = crate::hosted::Hosted::start(
        host,
        store.clone(),
        &held,
        crate::hosted::Setup::bare(),
        None,
        crate::drive::Watchers::default(),
    )
    .await;
    let rt = hosted.runtime();
    let result = async {
        let mut session = rt.load_session(id).await?;
        let ran = running_for(store.as_ref(), id, &session.state).await?;
        let events = weft_core::recovery::cancel(&session.state, rt.limits(), &ran);
        session.commit(events).await
    }
    .await;
    hosted.end().await;
    held.release().await;
    Ok(result?)
}

/// Whether a live process holds session `id`'s lease: its lease has not run out and its owner,
/// if on this host, still exists (by `clock`).
pub async fn driven<S: Store>(clock: &dyn Clock, store: &S, id: &str) -> Result<bool> {
    let now = clock.now_ms();
    Ok(store
        .lease(id)
        .await?
        .is_some_and(|l| l.expires_at > now && !owner_gone(&l.owner)))
}

/// Asks the live process that holds session `id`'s lease for `verb` (`cancel`, `pause`) and
/// waits (up to 30 s) until it has let the session go. False when no live process holds it.
pub async fn request_and_wait<S: Store>(
    clock: &dyn Clock,
    store: &S,
    id: &str,
    verb: &str,
) -> Result<bool> {
    let now = clock.now_ms();
    if !driven(clock, store, id).await? || !store.request(id, verb, now).await? {
        return Ok(false);
    }
    let began = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let done = store
            .lease(id)
            .await?
            .is_none_or(|l| l.expires_at <= clock.now_ms() || l.request.is_none());
        if done {
            return Ok(true);
        }
        if began.elapsed() > Duration::from_secs(30) {
            return Err(HostError::Timeout(format!(
                "asked the process running session {id} to {verb}, and it has not stopped in 30 s; it may be busy in a call that does not end"
            )));
        }
    }
}
