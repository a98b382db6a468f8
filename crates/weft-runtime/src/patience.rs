//! Riding out a store that is briefly away. A write or read that fails with an error that may
//! pass by itself ([`StoreError::is_transient`]: the database restarting, a dropped connection,
//! a pool with no connection free in time) is asked again, with a growing pause, for as long as
//! a lease runs ([`weft_store::lease_time`]) from the first try. Past that the owner's lease
//! may have run out and another process may be driving the session; the error is returned.
//!
//! Asking again is safe for the session's appends because they are fenced: an append carries
//! the lease's epoch and the store refuses it once another owner took the session over, so a
//! write that waited out an outage lands only if this process still owns the session. An append
//! whose answer was lost with the connection (it may have been committed) is recognised when
//! asked again (see `Session::append`).

use std::future::Future;
use std::time::Duration;

use weft_store::StoreError;

/// The first pause after a failure; each next one is twice as long, up to [`LONGEST`].
const FIRST: Duration = Duration::from_millis(50);
/// The longest pause between two tries.
const LONGEST: Duration = Duration::from_secs(1);

/// How long to go on asking, and how long to pause before the next try.
pub(crate) struct Patience {
    /// When the first try began.
    began: tokio::time::Instant,
    /// Whether a try failed yet.
    failed: bool,
    pause: Duration,
    within: Duration,
}

impl Patience {
    /// Patience for one request made now: a lease's time from its first try.
    pub(crate) fn new() -> Self {
        Self::within(weft_store::lease_time())
    }

    /// Patience that lasts `within` from now (the first try's start: a try that waited for a
    /// connection before it failed counts).
    pub(crate) fn within(within: Duration) -> Self {
        Self {
            began: tokio::time::Instant::now(),
            failed: false,
            pause: FIRST,
            within,
        }
    }

    /// After `e` (from a request about `what`): true once the pause before the next try is
    /// over, false when `e` will not pass by itself or the patience ran out (the caller then
    /// returns `e`).
    pub(crate) async fn again(&mut self, e: &StoreError, what: &str) -> bool {
        if !e.is_transient() {
            return false;
        }
        let now = tokio::time::Instant::now();
        let until = self.began + self.within;
        if !self.failed && now < until {
            tracing::warn!(
                "{what}: the store is unreachable ({e}); trying again for up to {:.1} s",
                (until - now).as_secs_f64()
            );
        }
        self.failed = true;
        if now >= until {
            tracing::warn!("{what}: the store stayed unreachable; giving up: {e}");
            return false;
        }
        tokio::time::sleep(self.pause.min(until - now)).await;
        self.pause = (self.pause * 2).min(LONGEST);
        true
    }

    /// Whether a try failed already (an append asked again may have been committed the first
    /// time, its answer lost with the connection).
    pub(crate) fn tried(&self) -> bool {
        self.failed
    }
}

/// `request` until it succeeds, fails with an error that will not pass by itself, or a lease's
/// time went by since its first try.
pub(crate) async fn patiently<T, F, Fut>(what: &str, mut request: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut patience = Patience::new();
    loop {
        match request().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                if !patience.again(&e, what).await {
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> StoreError {
        StoreError::Unavailable {
            target: "PostgreSQL at 127.0.0.1:1".into(),
            source: "connection refused".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_error_is_asked_again_until_it_passes() {
        let mut failures = 3;
        let got = patiently("reading", || {
            let fail = failures > 0;
            failures -= 1;
            async move { if fail { Err(down()) } else { Ok(7) } }
        })
        .await;
        assert_eq!(got.unwrap(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_returned_at_once() {
        let mut asked = 0;
        let got: Result<(), _> = patiently("appending", || {
            asked += 1;
            async { Err(StoreError::LeaseLost("s".into())) }
        })
        .await;
        assert!(matches!(got, Err(StoreError::LeaseLost(_))));
        assert_eq!(asked, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn patience_runs_out_after_its_time() {
        let began = tokio::time::Instant::now();
        let mut p = Patience::within(Duration::from_secs(3));
        let mut tries = 0;
        while p.again(&down(), "appending").await {
            tries += 1;
        }
        let took = began.elapsed();
        assert!(
            took >= Duration::from_secs(3) && took < Duration::from_secs(4),
            "{took:?}"
        );
        assert!(tries > 3 && p.tried());
    }
}
