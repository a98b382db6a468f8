//! The shell's part of quotas per user (the rules are `weft_core::quota`'s, the counters
//! `weft_store::Usage`'s): before every model call of a session whose user has a quota that
//! limits spending, the user's counters of the current day and month are read from the store and the call is not
//! made when what it may cost at most ([`weft_core::budget::call_max`]) could take one past its
//! limit; after it, what it used (its reply's or its failed attempts' tokens and cost) is added
//! to the counters in one atomic write, whether or not the quota limits anything (a user
//! without a quota has an empty one: their spending is counted all the same). Every process on the store reads and adds to the same
//! counters, so the total passes a quota by at most what the calls in flight at that moment
//! used beyond their check. A new run is checked the same way before it is accepted
//! ([`admission`]), with what its first model call may cost at most ([`first_call_max`]).

use serde_json::Value;
use weft_core::agent_loop::{self, AgentNext};
use weft_core::budget::{CallMax, Reached};
use weft_core::quota::{Period, Quota, Used};
use weft_core::{Event, State};
use weft_store::{Store, StoreError};

use crate::{Agent, Runtime, RuntimeError};

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

/// The first limit of `quota` that `used` (the user's counters, in [`Period::ALL`]'s order)
/// plus `add` would cross, with its period; with nothing to add, the first one reached already.
fn reached_in(quota: &Quota, used: &[Used], add: &Used) -> Option<(Period, Reached)> {
    Period::ALL
        .iter()
        .zip(used)
        .find_map(|(p, u)| weft_core::quota::check(quota, *p, u, add).map(|r| (*p, r)))
}

/// What a run stores before it is driven: a new session's first task, a new task for a session
/// that ended, or the answer to a session that waits.
#[derive(Clone, Copy, Debug)]
pub enum Opening<'a> {
    /// A new session (of id `id`) and its first task.
    Start {
        /// The new session's id.
        id: &'a str,
        /// The task.
        task: &'a str,
        /// The run's input.
        input: &'a Value,
    },
    /// A new task for a session that ended.
    Turn {
        /// The task.
        task: &'a str,
        /// The run's input.
        input: &'a Value,
    },
    /// The answer to the session's wait.
    Answer(&'a str),
}

/// What the first model call of a run may cost at most, as the check before that call will
/// reckon it ([`weft_core::budget::call_max`], the one estimate): the call the agent's loop asks
/// for once `opening` is stored on `state` (the session as it is; a new one's is empty), past what
/// the loop records first (memories to recall count as none found). `None` when the run's next
/// step is no model call (a tool call, the end).
pub fn first_call_max(agent: &Agent, state: &State, opening: Opening<'_>) -> Option<CallMax> {
    let mut state = state.clone();
    let events = match opening {
        Opening::Start { id, task, input } => {
            let mut e = vec![crate::session_started(
                id,
                &agent.name,
                Some(agent.config.mode),
                input.clone(),
                None,
            )];
            e.extend(agent_loop::start_turn(task, input.clone()));
            e
        }
        Opening::Turn { task, input } => agent_loop::start_turn(task, input.clone()),
        Opening::Answer(text) => agent_loop::user_replied(&state, &agent.config, text),
    };
    for e in &events {
        state.apply(e);
    }
    // Each step records something or asks for the call; a few are enough to reach it.
    for _ in 0..8 {
        let recorded: Vec<Event> = match agent_loop::decide(&state, &agent.config) {
            AgentNext::CallModel { request, .. } => {
                return Some(weft_core::budget::call_max(
                    &request,
                    &agent.config.model_costs,
                ));
            }
            AgentNext::Record(events) => events,
            AgentNext::Recall { query, .. } => {
                agent_loop::memories_recalled(&agent.config, &query, Ok(Vec::new()))
            }
            _ => return None,
        };
        for e in &recorded {
            state.apply(e);
        }
    }
    None
}

/// Why a new run of a user cannot start: a limit of their quota that is reached already, or one
/// that the run's first model call could pass; and when its period starts again (Unix ms).
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The limit, what was spent, and what the first call may take (0: reached already).
    pub reached: Reached,
    /// When the limit's period ends and its counters start again from zero (Unix ms).
    pub resets_at: i64,
}

impl Refusal {
    /// One sentence for a person: the limit, what `user` spent, what the first call may take,
    /// and when it resets.
    pub fn describe(&self, user: &str, now_ms: i64) -> String {
        let r = &self.reached;
        let call = if r.call > 0.0 {
            format!(
                ", and the run's first model call may take up to {} more",
                weft_core::budget::number(r.call)
            )
        } else {
            String::new()
        };
        format!(
            "quota reached: {} is {}, {} spent (user {user}){call}; it resets at {} (in {} s)",
            r.which,
            weft_core::budget::number(r.limit),
            weft_core::budget::number(r.spent),
            weft_core::quota::utc_text(self.resets_at),
            self.retry_after_secs(now_ms)
        )
    }

    /// Seconds until the limit's period resets (at least 1): what `Retry-After` says.
    pub fn retry_after_secs(&self, now_ms: i64) -> u64 {
        u64::try_from((self.resets_at - now_ms).max(0))
            .unwrap_or(0)
            .div_ceil(1000)
            .max(1)
    }
}

/// Whether a new run of the user of `q` may start now (`now_ms`): refused when a limit of their
/// quota is reached already, or when what is left of one cannot cover the run's first model
/// call at its most (`first`, from [`first_call_max`]), which the check before that call would
/// refuse: the run would be accepted only to fail at once. The counters are read from `store`.
pub async fn admission<S: Store + ?Sized>(
    store: &S,
    q: &UserQuota,
    now_ms: i64,
    first: Option<&CallMax>,
) -> Result<Option<Refusal>, StoreError> {
    let used = store.usage(&q.user, &period_keys(now_ms)).await?;
    let reached = reached_in(&q.quota, &used, &Used::default())
        .or_else(|| first.and_then(|m| reached_in(&q.quota, &used, &Used::at_most(m))));
    Ok(reached.map(|(period, reached)| Refusal {
        reached,
        resets_at: period.resets_at(now_ms),
    }))
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
        Ok(reached_in(&q.quota, &used, &Used::at_most(max)).map(|(_, r)| r))
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
