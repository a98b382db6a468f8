//! The shell's part of quotas per user (the rules are `weft_core::quota`'s, the counters
//! `weft_store::Usage`'s): before every model call of a session whose user has a quota that
//! limits spending, the user's counters of the current day and month are read from the store and the call is not
//! made when what it may cost at most ([`weft_core::budget::call_max`]) could take one past its
//! limit; after it, what it used (its reply's or its failed attempts' tokens and cost) is added
//! to the counters in one atomic write, whether or not the quota limits anything (a user
//! without a quota has an empty one: their spending is counted all the same). Every process on the store reads and adds to the same
//! counters, so the total passes a quota by at most what the calls in flight at that moment
//! used beyond their check.

use weft_core::budget::{CallMax, Reached};
use weft_core::quota::{Period, Quota, Used};
use weft_store::Store;

use crate::{Runtime, RuntimeError};

/// The quota the sessions a runtime drives are held to, and whose it is.
#[derive(Clone, Debug, PartialEq)]
pub struct UserQuota {
    /// The user whose counters are read and added to.
    pub user: String,
    /// Their limits (empty: none; the counters are added to all the same).
    pub quota: Quota,
}

/// The period keys of `now_ms`, in [`Period::ALL`]'s order.
pub fn period_keys(now_ms: i64) -> Vec<String> {
    Period::ALL.iter().map(|p| p.key(now_ms)).collect()
}

impl<S: Store> Runtime<S> {
    /// The first limit of the user's quota that a call costing at most `max` could cross, read
    /// against the store's counters now; `None` without a quota, with one that limits no
    /// spending (the counters are not read), or when it fits.
    pub(crate) async fn quota_reached(
        &self,
        max: &CallMax,
    ) -> Result<Option<Reached>, RuntimeError> {
        let Some(q) = self.quota.as_ref().filter(|q| q.quota.limits_spending()) else {
            return Ok(None);
        };
        let now = self.clock.now_ms();
        let keys = period_keys(now);
        let used = crate::patience::patiently("reading the user's quota counters", || {
            self.store.usage(&q.user, &keys)
        })
        .await?;
        let add = Used::at_most(max);
        Ok(Period::ALL
            .iter()
            .zip(&used)
            .find_map(|(p, u)| weft_core::quota::check(&q.quota, *p, u, &add)))
    }

    /// Adds what a model call used to the user's counters (nothing without a user). A store
    /// that is briefly away is waited for; an addition whose answer was lost with the
    /// connection and is asked again may count twice (the quota then errs on the safe side).
    pub(crate) async fn quota_spent(&self, used: &Used) -> Result<(), RuntimeError> {
        let Some(q) = &self.quota else {
            return Ok(());
        };
        let now = self.clock.now_ms();
        let keys = period_keys(now);
        crate::patience::patiently("adding to the user's quota counters", || {
            self.store.add_usage(&q.user, &keys, used, now)
        })
        .await?;
        Ok(())
    }
}
