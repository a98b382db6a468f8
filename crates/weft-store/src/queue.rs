//! Runs queued behind another run of their thread ([`crate::RunQueue`]): the statements the SQL
//! stores share (written once, with the placeholder each database wants) and their methods
//! ([`sql_queue_methods`]).
//!
//! A queued run is stored before its client is answered and deleted once its marker is in the
//! thread's log (or it ended without one). Its process renews its claim on it while it waits;
//! a claim that expired (its process died) is taken over by another process with a
//! compare-and-set on the claimer.

/// The columns of a queued run, in the order [`queued_from_row`] reads them.
pub(crate) const COLUMNS: &str = "run_id, thread_id, user_id, body, owner, expires_at, created_at";

/// Inserts a queued run. Parameters: the columns of [`COLUMNS`], in order.
pub(crate) fn insert_sql(p: fn(usize) -> String) -> String {
    let params: Vec<String> = (1..=7).map(p).collect();
    format!(
        "INSERT INTO queued_runs ({COLUMNS}) VALUES ({})",
        params.join(", ")
    )
}

/// One queued run. Parameter: run_id.
pub(crate) fn get_sql(p: fn(usize) -> String) -> String {
    format!("SELECT {COLUMNS} FROM queued_runs WHERE run_id = {}", p(1))
}

/// The queued runs whose `column` (`thread_id`, `user_id`) is the parameter, oldest first.
pub(crate) fn of_sql(p: fn(usize) -> String, column: &str) -> String {
    format!(
        "SELECT {COLUMNS} FROM queued_runs WHERE {column} = {} ORDER BY created_at, run_id",
        p(1)
    )
}

/// Queued runs whose claim expired, oldest first. Parameters: now, limit.
pub(crate) fn stale_sql(p: fn(usize) -> String) -> String {
    format!(
        "SELECT {COLUMNS} FROM queued_runs WHERE expires_at <= {} ORDER BY created_at, run_id \
         LIMIT {}",
        p(1),
        p(2)
    )
}

/// Takes a claim over. Parameters: run_id, old owner, now, new owner, expires_at.
pub(crate) fn take_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE queued_runs SET owner = {}, expires_at = {} WHERE run_id = {} AND owner = {} \
         AND expires_at <= {}",
        p(4),
        p(5),
        p(1),
        p(2),
        p(3)
    )
}

/// Renews an owner's claims. Parameters: owner, expires_at.
pub(crate) fn renew_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE queued_runs SET expires_at = {} WHERE owner = {}",
        p(2),
        p(1)
    )
}

/// Deletes a queued run. Parameter: run_id.
pub(crate) fn delete_sql(p: fn(usize) -> String) -> String {
    format!("DELETE FROM queued_runs WHERE run_id = {}", p(1))
}

/// A queued run as read from its row (the columns of [`COLUMNS`], by name).
macro_rules! queued_from_row {
    ($row:expr) => {{
        use sqlx::Row as _;
        let r = $row;
        let get = |e: sqlx::Error| {
            $crate::StoreError::Corrupt(format!("a queued run's row cannot be read: {e}"))
        };
        let run_id: String = r.try_get("run_id").map_err(get)?;
        let body: String = r.try_get("body").map_err(get)?;
        $crate::QueuedRun {
            body: serde_json::from_str(&body).map_err(|e| {
                $crate::StoreError::Corrupt(format!(
                    "the body of queued run {run_id} is not JSON: {e}"
                ))
            })?,
            run_id,
            thread_id: r.try_get("thread_id").map_err(get)?,
            user_id: r.try_get("user_id").map_err(get)?,
            owner: r.try_get("owner").map_err(get)?,
            expires_at: r.try_get("expires_at").map_err(get)?,
            created_at: r.try_get("created_at").map_err(get)?,
        }
    }};
}
pub(crate) use queued_from_row;

/// The queued runs of rows read with [`COLUMNS`], as an `Ok` (or the first row that cannot be
/// read as an error).
macro_rules! queued_from_rows {
    ($rows:expr) => {{
        let rows = $rows;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push($crate::queue::queued_from_row!(r));
        }
        Ok(out)
    }};
}
pub(crate) use queued_from_rows;

/// The methods of [`crate::RunQueue`] for a store with a sqlx `pool` and an `err` method, with
/// placeholders written by `$p`.
macro_rules! sql_queue_methods {
    ($p:path) => {
        async fn queue_run(&self, q: &$crate::QueuedRun) -> Result<(), $crate::StoreError> {
            sqlx::query(&$crate::queue::insert_sql($p))
                .bind(&q.run_id)
                .bind(&q.thread_id)
                .bind(&q.user_id)
                .bind($crate::cron::text("the queued run's body", &q.body)?)
                .bind(&q.owner)
                .bind(q.expires_at)
                .bind(q.created_at)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot queue run {}", q.run_id), e))?;
            Ok(())
        }

        async fn queued_run(
            &self,
            run_id: &str,
        ) -> Result<Option<$crate::QueuedRun>, $crate::StoreError> {
            let row = sqlx::query(&$crate::queue::get_sql($p))
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read queued run {run_id}"), e))?;
            Ok(match row {
                Some(r) => Some($crate::queue::queued_from_row!(&r)),
                None => None,
            })
        }

        async fn queued_runs_of(
            &self,
            thread_id: &str,
        ) -> Result<Vec<$crate::QueuedRun>, $crate::StoreError> {
            let rows = sqlx::query(&$crate::queue::of_sql($p, "thread_id"))
                .bind(thread_id)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read the runs queued on {thread_id}"), e))?;
            $crate::queue::queued_from_rows!(rows)
        }

        async fn queued_runs_of_user(
            &self,
            user_id: &str,
        ) -> Result<Vec<$crate::QueuedRun>, $crate::StoreError> {
            let rows = sqlx::query(&$crate::queue::of_sql($p, "user_id"))
                .bind(user_id)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read the runs queued for {user_id}"), e))?;
            $crate::queue::queued_from_rows!(rows)
        }

        async fn stale_queued_runs(
            &self,
            now: i64,
            limit: usize,
        ) -> Result<Vec<$crate::QueuedRun>, $crate::StoreError> {
            let rows = sqlx::query(&$crate::queue::stale_sql($p))
                .bind(now)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err("cannot read the queued runs", e))?;
            $crate::queue::queued_from_rows!(rows)
        }

        async fn take_queued_run(
            &self,
            run_id: &str,
            from: &str,
            now: i64,
            owner: &str,
            expires_at: i64,
        ) -> Result<bool, $crate::StoreError> {
            let done = sqlx::query(&$crate::queue::take_sql($p))
                .bind(run_id)
                .bind(from)
                .bind(now)
                .bind(owner)
                .bind(expires_at)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot take queued run {run_id}"), e))?;
            Ok(done.rows_affected() == 1)
        }

        async fn renew_queued_runs(
            &self,
            owner: &str,
            expires_at: i64,
        ) -> Result<(), $crate::StoreError> {
            sqlx::query(&$crate::queue::renew_sql($p))
                .bind(owner)
                .bind(expires_at)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err("cannot renew the queued runs", e))?;
            Ok(())
        }

        async fn unqueue_run(&self, run_id: &str) -> Result<(), $crate::StoreError> {
            sqlx::query(&$crate::queue::delete_sql($p))
                .bind(run_id)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot unqueue run {run_id}"), e))?;
            Ok(())
        }
    };
}
pub(crate) use sql_queue_methods;
