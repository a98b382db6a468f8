//! One owner per session. A process that drives a session (run, answer, resume, plan run) holds
//! its lease in the store, renews it while it runs and gives it up when it stops or the session
//! waits. Another process asking to drive the session is refused while the lease runs, naming
//! the holder; `weft resume --force` takes over from an owner known to be gone. On the same host,
//! an owner whose process no longer exists has no claim: its lease is taken over at once.
//!
//! What a lease does not do yet: fence appends. A process that lost its lease (stopped for longer
//! than the lease time, then woken) is still stopped by the sequence-number check on its next
//! append, not by its epoch.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Result, anyhow};
use weft_store::{Lease, Owner, Store, StoreError};

/// How long a lease runs without renewal (renewed every third of it). `WEFT_LEASE_SECS` sets it.
fn ttl() -> Duration {
    std::env::var("WEFT_LEASE_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.1 && *s <= 3600.0)
        .map_or(Duration::from_secs(15), Duration::from_secs_f64)
}

fn ttl_ms() -> i64 {
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

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Whether a process of this host with this pid exists (Linux; elsewhere, assume it does).
fn alive_here(pid: u32) -> bool {
    if !std::path::Path::new("/proc/self").exists() {
        return true;
    }
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A lease this process holds, renewed in the background until it is released or dropped.
pub struct Held<S: Store> {
    store: Arc<S>,
    lease: Lease,
    beat: tokio::task::JoinHandle<()>,
}

/// Takes the lease of session `id` (see the module's documentation), or says who holds it.
pub async fn take<S: Store>(store: Arc<S>, id: &str, force: bool) -> Result<Held<S>> {
    let now = weft_runtime::now_ms();
    let lease = match store.acquire(id, me(), now, ttl_ms(), force).await {
        Ok(l) => l,
        Err(StoreError::Leased { host, pid, .. }) if host == me().host && !alive_here(pid) => {
            tracing::info!(
                session = id,
                pid,
                "the session's owner is gone; taking it over"
            );
            store.acquire(id, me(), now, ttl_ms(), true).await?
        }
        Err(e @ StoreError::Leased { .. }) => {
            return Err(anyhow!(
                "{e}; wait for it to finish, or if that process is gone, take the session over with `weft resume{} {id} --force`",
                crate::store::db_flag()
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let beat = {
        let store = store.clone();
        let lease = lease.clone();
        tokio::spawn(async move {
            let every = ttl() / 3;
            loop {
                tokio::time::sleep(every).await;
                let until = weft_runtime::now_ms().saturating_add(ttl_ms());
                if let Err(e) = store.renew(&lease, until).await {
                    tracing::warn!(session = %lease.session, "cannot renew the session's lease: {e}");
                    if matches!(e, StoreError::LeaseLost(_)) {
                        return;
                    }
                }
            }
        })
    };
    Ok(Held { store, lease, beat })
}

impl<S: Store> Held<S> {
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
