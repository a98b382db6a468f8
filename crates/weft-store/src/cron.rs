//! Crons ([`crate::Crons`]): the schedules `weft serve` starts runs by. The statements the SQL
//! stores share (written once, with the placeholder each database wants) and their methods
//! ([`sql_cron_methods`]).
//!
//! A tick is taken in two writes. The claim is a compare-and-set on the cron's next due time
//! (`UPDATE ... SET next_run_at = next, claimed_tick = due ... WHERE next_run_at = due AND
//! claimed_tick IS NULL`): of any number of processes on one database, one claims each tick.
//! The claim is closed ([`crate::Crons::finish_cron_tick`]) once the tick's run is stored. A
//! claim left open past its expiry (its process died between the two writes) is taken over by
//! another process ([`crate::Crons::reclaim_cron_tick`]), with a compare-and-set on its claimer.

/// The columns of a cron, in the order [`from_row`] reads them.
pub(crate) const COLUMNS: &str = "id, user_id, assistant_id, thread_id, schedule, payload, \
     metadata, on_run_completed, enabled, end_time, next_run_at, claimed_tick, claimed_by, \
     claim_expires, last_tick, last_run_id, last_thread_id, last_error, ticks, created_at, \
     updated_at";

/// Inserts a cron. Parameters: the columns of [`COLUMNS`] but the claim and the last tick
/// (id, user_id, assistant_id, thread_id, schedule, payload, metadata, on_run_completed,
/// enabled, end_time, next_run_at, created_at, updated_at).
pub(crate) fn insert_sql(p: fn(usize) -> String) -> String {
    let params: Vec<String> = (1..=13).map(p).collect();
    format!(
        "INSERT INTO crons (id, user_id, assistant_id, thread_id, schedule, payload, metadata, \
         on_run_completed, enabled, end_time, next_run_at, created_at, updated_at) VALUES ({})",
        params.join(", ")
    )
}

/// Rewrites what a client may change; the next due time only when rescheduled (else a claim
/// made since the cron was read keeps what it moved on). Parameters: id, schedule, payload,
/// metadata, on_run_completed, enabled, end_time, next_run_at, updated_at, reschedule.
pub(crate) fn update_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE crons SET schedule = {}, payload = {}, metadata = {}, on_run_completed = {}, \
         enabled = {}, end_time = {}, next_run_at = CASE WHEN {} THEN {} ELSE next_run_at END, \
         updated_at = {} WHERE id = {}",
        p(2),
        p(3),
        p(4),
        p(5),
        p(6),
        p(7),
        p(10),
        p(8),
        p(9),
        p(1)
    )
}

/// One cron. Parameter: id.
pub(crate) fn get_sql(p: fn(usize) -> String) -> String {
    format!("SELECT {COLUMNS} FROM crons WHERE id = {}", p(1))
}

/// A user's crons, oldest first. Parameter: user.
pub(crate) fn list_sql(p: fn(usize) -> String) -> String {
    format!(
        "SELECT {COLUMNS} FROM crons WHERE user_id = {} ORDER BY created_at, id",
        p(1)
    )
}

/// Deletes a cron without a live claim. Parameters: id, now.
pub(crate) fn delete_sql(p: fn(usize) -> String) -> String {
    format!(
        "DELETE FROM crons WHERE id = {} AND (claimed_tick IS NULL OR claim_expires <= {})",
        p(1),
        p(2)
    )
}

/// The enabled crons with a tick due, or a claim that expired, soonest first. Parameters: now,
/// limit.
pub(crate) fn due_sql(p: fn(usize) -> String) -> String {
    format!(
        "SELECT {COLUMNS} FROM crons WHERE enabled = TRUE AND \
         ((claimed_tick IS NULL AND next_run_at <= {now}) OR \
          (claimed_tick IS NOT NULL AND claim_expires <= {now})) \
         ORDER BY next_run_at LIMIT {limit}",
        now = p(1),
        limit = p(2)
    )
}

/// Claims a tick. Parameters: id, due, next, owner, expires.
pub(crate) fn claim_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE crons SET next_run_at = {}, claimed_tick = {due}, claimed_by = {}, \
         claim_expires = {} WHERE id = {} AND next_run_at = {due} AND claimed_tick IS NULL \
         AND enabled = TRUE",
        p(3),
        p(4),
        p(5),
        p(1),
        due = p(2)
    )
}

/// Takes over an expired claim. Parameters: id, tick, old owner, owner, now, expires.
pub(crate) fn reclaim_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE crons SET claimed_by = {}, claim_expires = {} WHERE id = {} AND \
         claimed_tick = {} AND claimed_by = {} AND claim_expires <= {}",
        p(4),
        p(6),
        p(1),
        p(2),
        p(3),
        p(5)
    )
}

/// Closes a claim with what the tick did. Parameters: id, tick, owner, run id, thread id,
/// error.
pub(crate) fn finish_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE crons SET claimed_tick = NULL, claimed_by = NULL, claim_expires = NULL, \
         last_tick = {tick}, last_run_id = {}, last_thread_id = {}, last_error = {}, \
         ticks = ticks + 1 WHERE id = {} AND claimed_tick = {tick} AND claimed_by = {}",
        p(4),
        p(5),
        p(6),
        p(1),
        p(3),
        tick = p(2)
    )
}

/// A JSON column's text as a value; text that is not JSON is [`crate::StoreError::Corrupt`].
pub(crate) fn json(
    id: &str,
    what: &str,
    text: &str,
) -> Result<serde_json::Value, crate::StoreError> {
    serde_json::from_str(text).map_err(|e| {
        crate::StoreError::Corrupt(format!("the {what} of cron {id} is not JSON: {e}"))
    })
}

/// A value as a JSON column's text.
pub(crate) fn text(what: &str, v: &serde_json::Value) -> Result<String, crate::StoreError> {
    serde_json::to_string(v).map_err(|e| crate::StoreError::Unstorable {
        what: what.into(),
        reason: e.to_string(),
    })
}

/// A cron as read from its row (the columns of [`COLUMNS`], by name).
macro_rules! cron_from_row {
    ($row:expr) => {{
        use sqlx::Row as _;
        let r = $row;
        let get = |e: sqlx::Error| {
            $crate::StoreError::Corrupt(format!("a cron's row cannot be read: {e}"))
        };
        let id: String = r.try_get("id").map_err(get)?;
        let payload: String = r.try_get("payload").map_err(get)?;
        let metadata: String = r.try_get("metadata").map_err(get)?;
        $crate::CronRecord {
            payload: $crate::cron::json(&id, "payload", &payload)?,
            metadata: $crate::cron::json(&id, "metadata", &metadata)?,
            user_id: r.try_get("user_id").map_err(get)?,
            assistant_id: r.try_get("assistant_id").map_err(get)?,
            thread_id: r.try_get("thread_id").map_err(get)?,
            schedule: r.try_get("schedule").map_err(get)?,
            on_run_completed: r.try_get("on_run_completed").map_err(get)?,
            enabled: r.try_get("enabled").map_err(get)?,
            end_time: r.try_get("end_time").map_err(get)?,
            next_run_at: r.try_get("next_run_at").map_err(get)?,
            claim: match (
                r.try_get::<Option<i64>, _>("claimed_tick").map_err(get)?,
                r.try_get::<Option<String>, _>("claimed_by").map_err(get)?,
                r.try_get::<Option<i64>, _>("claim_expires").map_err(get)?,
            ) {
                (Some(tick), Some(owner), Some(expires)) => Some($crate::CronClaim {
                    tick,
                    owner,
                    expires,
                }),
                _ => None,
            },
            last: match r.try_get::<Option<i64>, _>("last_tick").map_err(get)? {
                Some(tick) => Some($crate::CronTick {
                    tick,
                    run_id: r.try_get("last_run_id").map_err(get)?,
                    thread_id: r.try_get("last_thread_id").map_err(get)?,
                    error: r.try_get("last_error").map_err(get)?,
                }),
                None => None,
            },
            ticks: r.try_get("ticks").map_err(get)?,
            created_at: r.try_get("created_at").map_err(get)?,
            updated_at: r.try_get("updated_at").map_err(get)?,
            id,
        }
    }};
}
pub(crate) use cron_from_row;

/// The [`crate::Crons`] methods of the SQL stores, written once, for a store with a `pool` and
/// an `err(context, sqlx::Error)` and the placeholders `$p` makes (`question` or `dollar`).
macro_rules! sql_cron_methods {
    ($p:path) => {
        async fn create_cron(&self, c: &$crate::CronRecord) -> Result<(), $crate::StoreError> {
            sqlx::query(&$crate::cron::insert_sql($p))
                .bind(&c.id)
                .bind(&c.user_id)
                .bind(&c.assistant_id)
                .bind(&c.thread_id)
                .bind(&c.schedule)
                .bind($crate::cron::text("the cron's payload", &c.payload)?)
                .bind($crate::cron::text("the cron's metadata", &c.metadata)?)
                .bind(&c.on_run_completed)
                .bind(c.enabled)
                .bind(c.end_time)
                .bind(c.next_run_at)
                .bind(c.created_at)
                .bind(c.updated_at)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot create cron {}", c.id), e))?;
            Ok(())
        }

        async fn update_cron(
            &self,
            c: &$crate::CronRecord,
            reschedule: bool,
        ) -> Result<bool, $crate::StoreError> {
            let done = sqlx::query(&$crate::cron::update_sql($p))
                .bind(&c.id)
                .bind(&c.schedule)
                .bind($crate::cron::text("the cron's payload", &c.payload)?)
                .bind($crate::cron::text("the cron's metadata", &c.metadata)?)
                .bind(&c.on_run_completed)
                .bind(c.enabled)
                .bind(c.end_time)
                .bind(c.next_run_at)
                .bind(c.updated_at)
                .bind(reschedule)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot update cron {}", c.id), e))?;
            Ok(done.rows_affected() == 1)
        }

        async fn cron(&self, id: &str) -> Result<Option<$crate::CronRecord>, $crate::StoreError> {
            let row = sqlx::query(&$crate::cron::get_sql($p))
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read cron {id}"), e))?;
            Ok(match row {
                Some(r) => Some($crate::cron::cron_from_row!(&r)),
                None => None,
            })
        }

        async fn crons_of(
            &self,
            user: &str,
        ) -> Result<Vec<$crate::CronRecord>, $crate::StoreError> {
            let rows = sqlx::query(&$crate::cron::list_sql($p))
                .bind(user)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot list the crons of user {user}"), e))?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push($crate::cron::cron_from_row!(r));
            }
            Ok(out)
        }

        async fn delete_cron(&self, id: &str, now: i64) -> Result<bool, $crate::StoreError> {
            let done = sqlx::query(&$crate::cron::delete_sql($p))
                .bind(id)
                .bind(now)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot delete cron {id}"), e))?;
            Ok(done.rows_affected() == 1)
        }

        async fn due_crons(
            &self,
            now: i64,
            limit: usize,
        ) -> Result<Vec<$crate::CronRecord>, $crate::StoreError> {
            let rows = sqlx::query(&$crate::cron::due_sql($p))
                .bind(now)
                .bind($crate::row::to_i64("a number of crons", limit as u64)?)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err("cannot read the crons that are due", e))?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push($crate::cron::cron_from_row!(r));
            }
            Ok(out)
        }

        async fn claim_cron_tick(
            &self,
            id: &str,
            due: i64,
            next: Option<i64>,
            owner: &str,
            expires: i64,
        ) -> Result<bool, $crate::StoreError> {
            let done = sqlx::query(&$crate::cron::claim_sql($p))
                .bind(id)
                .bind(due)
                .bind(next)
                .bind(owner)
                .bind(expires)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot claim a tick of cron {id}"), e))?;
            Ok(done.rows_affected() == 1)
        }

        async fn reclaim_cron_tick(
            &self,
            id: &str,
            claim: &$crate::CronClaim,
            owner: &str,
            now: i64,
            expires: i64,
        ) -> Result<bool, $crate::StoreError> {
            let done = sqlx::query(&$crate::cron::reclaim_sql($p))
                .bind(id)
                .bind(claim.tick)
                .bind(&claim.owner)
                .bind(owner)
                .bind(now)
                .bind(expires)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot take over a tick of cron {id}"), e))?;
            Ok(done.rows_affected() == 1)
        }

        async fn finish_cron_tick(
            &self,
            id: &str,
            owner: &str,
            done: &$crate::CronTick,
        ) -> Result<bool, $crate::StoreError> {
            let res = sqlx::query(&$crate::cron::finish_sql($p))
                .bind(id)
                .bind(done.tick)
                .bind(owner)
                .bind(&done.run_id)
                .bind(&done.thread_id)
                .bind(&done.error)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot record a tick of cron {id}"), e))?;
            Ok(res.rows_affected() == 1)
        }
    };
}
pub(crate) use sql_cron_methods;
