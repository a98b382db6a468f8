//! Where the runtime and the lease holder read the time: a [`Clock`], passed down, so that a
//! test can move time on by hand ([`ManualClock`]) instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in Unix milliseconds: the timestamps of events and memories, and the
/// deadlines of leases.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time now, in Unix milliseconds.
    fn now_ms(&self) -> i64;
}

/// A shared clock, as the runtime and the lease holder keep it.
pub type SharedClock = Arc<dyn Clock>;

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// The system's clock, shared.
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock that stands still until it is moved: for tests of what depends on time (lease
/// expiry, timestamps) without sleeping.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock that reads `start_ms`.
    pub fn starting_at(start_ms: i64) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(start_ms)))
    }

    /// Moves the clock on by `ms` milliseconds.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms`.
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let c = ManualClock::starting_at(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(250);
        assert_eq!(c.now_ms(), 1_250);
        c.set(5);
        assert_eq!(c.now_ms(), 5);
    }

    #[test]
    fn the_system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
