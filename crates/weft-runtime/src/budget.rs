//! The shell's part of budgets (the decisions are `weft_core::agent_loop::budget`'s): the model's prices and
//! output bound for the core's estimate, the one warning about a model without prices, giving a
//! session a budget, and the wall-time check (the core reads no clock).

use std::collections::BTreeSet;
use std::sync::Mutex;

use weft_core::agent_loop::budget::reached;
use weft_core::budget::{self, Budget, ModelCosts};
use weft_core::{Event, State};
use weft_model::DynModel;
use weft_store::Store;

use crate::{Runtime, RuntimeError, Session};

/// What the core's budget check needs to know of `model`: its prices (the highest input price,
/// so a call's most is never under-counted) and its own `max_tokens`.
pub fn costs_of(model: &dyn DynModel) -> ModelCosts {
    let prices = model.prices();
    ModelCosts {
        input_per_mtok: prices.as_ref().map(|p| {
            p.input_per_mtok
                .max(p.cache_write_per_mtok.unwrap_or(0.0))
                .max(p.cache_read_per_mtok.unwrap_or(0.0))
        }),
        output_per_mtok: prices.as_ref().map(|p| p.output_per_mtok),
        max_output_tokens: model.max_output_tokens(),
    }
}

/// The models already named by [`warn_unpriced`] in this process.
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Names `model` once per process when `budget` limits cost and the model has no prices: its
/// calls' cost is unknown (counted as 0), so the cost limit cannot be enforced. Returns whether
/// it warned now.
pub fn warn_unpriced(model: &dyn DynModel, budget: Option<&Budget>) -> bool {
    budget.is_some_and(Budget::has_cost) && warn_unpriced_cost(model)
}

/// Names `model` once per process when it has no prices and a cost limit (a budget's or a
/// user's quota's) holds its calls. Returns whether it warned now.
pub fn warn_unpriced_cost(model: &dyn DynModel) -> bool {
    if model.prices().is_some() {
        return false;
    }
    let name = model.name().to_owned();
    let first = WARNED
        .lock()
        .map(|mut w| w.insert(name.clone()))
        .unwrap_or(false);
    if first {
        tracing::warn!(
            "no prices for model {name}: cost budgets cannot be enforced; set `prices` on the model (input_per_mtok, output_per_mtok)"
        );
    }
    first
}

/// What a drive knows of the times its wall-time limits count from, read from the store once.
#[derive(Default)]
pub(crate) struct WallClock {
    /// The current task's first event: its position and time.
    run: Option<(u64, i64)>,
    /// The session's creation time.
    session: Option<i64>,
}

impl<S: Store> Runtime<S> {
    /// Gives the session `budget` from its next event on (a `budget_set` event): it replaces the
    /// agent file's and any earlier one; what was spent is kept. Warns when it limits cost and
    /// the model has no prices.
    pub async fn set_budget(
        &self,
        model: &dyn DynModel,
        session: &mut Session<'_, S>,
        budget: Budget,
    ) -> Result<(), RuntimeError> {
        warn_unpriced(model, Some(&budget));
        session.commit(vec![Event::BudgetSet { budget }]).await
    }

    /// The events that stop the run when a wall-time limit of the budget in force is reached;
    /// `None` while within it (or without one).
    pub(crate) async fn wall_time_reached(
        &self,
        budget: Option<&Budget>,
        session_id: &str,
        state: &State,
        wall: &mut WallClock,
    ) -> Result<Option<Vec<Event>>, RuntimeError> {
        let Some(budget) = budget.filter(|b| b.has_wall_time()) else {
            return Ok(None);
        };
        let now = self.clock.now_ms();
        let seq = state.spending.run_started_seq;
        if wall.run.is_none_or(|(s, _)| s != seq) {
            let ts = if seq == 0 {
                now
            } else {
                self.store
                    .events_after(session_id, seq - 1)
                    .await?
                    .first()
                    .map_or(now, |e| e.ts)
            };
            wall.run = Some((seq, ts));
        }
        if wall.session.is_none() {
            let what = format!("reading session {session_id}");
            let rec = crate::patience::patiently(&what, || self.store.get(session_id)).await?;
            wall.session = Some(rec.created_at);
        }
        let since = |t: i64| u64::try_from(now.saturating_sub(t)).unwrap_or(0);
        let run_ms = wall.run.map_or(0, |(_, t)| since(t));
        let session_ms = wall.session.map_or(0, since);
        Ok(budget::wall_time_reached(budget, run_ms, session_ms)
            .map(|r| reached(state, budget, &r)))
    }
}
