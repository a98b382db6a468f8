//! The reading side of the SQL stores' session log, written once for SQLite and PostgreSQL:
//! sessions, their events and their snapshots, and pruning. The two differ in how a session is
//! keyed (SQLite: an integer key, its last sequence number read from its log; PostgreSQL: its
//! id, `last_seq` in its row, see the crate's documentation) and in their placeholders; a
//! [`Dialect`] says how. Their append paths differ on purpose and stay in `sqlite.rs` (through
//! the group-commit writer) and `postgres.rs`.

/// How a SQL store's reads are written.
pub(crate) struct Dialect {
    /// The placeholder of parameter `n` (`?n` or `$n`).
    pub p: fn(usize) -> String,
    /// The columns of a `sessions` row as [`crate::row::SessionCols`] reads them, the metadata
    /// as JSON text and the last sequence number last.
    pub session_cols: &'static str,
    /// The condition that a row of `events`, `snapshots` or `snapshot_parts` belongs to the
    /// session whose id is parameter `n`.
    pub of_session: fn(usize) -> String,
    /// Parameter `n` as a JSON value of a `metadata` column (`?n`, `$n::json`).
    pub json: fn(usize) -> String,
}

/// The methods of a SQL store that read rows, for its inherent `impl`: `read_events` and
/// `session`. `$row` is the database's row type; the store has a `pool` and an
/// `err(context, sqlx::Error)`.
macro_rules! sql_log_rows {
    ($dialect:expr, $row:ty) => {
        /// The events numbered `after + 1` to `last`, checked to be all there.
        /// The events of session `id` after `after`, up to `last` (all of them when `None`: the
        /// log is then checked for gaps but not for its length).
        async fn read_events(
            &self,
            id: &str,
            after: u64,
            last: Option<u64>,
        ) -> Result<Vec<weft_core::Envelope>, $crate::StoreError> {
            use sqlx::Row;
            let d: &$crate::sql_log::Dialect = &$dialect;
            let ctx = || format!("cannot read the events of session {id}");
            let upto = match last {
                Some(_) => format!(" AND seq <= {}", (d.p)(3)),
                None => String::new(),
            };
            let sql = format!(
                "SELECT seq, ts, CAST(v AS BIGINT), type, CAST(payload AS TEXT), epoch FROM events \
                 WHERE {} AND seq > {}{upto} ORDER BY seq",
                (d.of_session)(1),
                (d.p)(2),
            );
            let mut q = sqlx::query(&sql)
                .bind(id)
                .bind($crate::row::to_i64("sequence number", after)?);
            if let Some(last) = last {
                q = q.bind($crate::row::to_i64("sequence number", last)?);
            }
            let rows = q
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err(&ctx(), e))?;
            let mut log = Vec::with_capacity(rows.len());
            for r in rows {
                let seq: i64 = r.try_get(0).map_err(|e| self.err(&ctx(), e))?;
                let ts: i64 = r.try_get(1).map_err(|e| self.err(&ctx(), e))?;
                let v: i64 = r.try_get(2).map_err(|e| self.err(&ctx(), e))?;
                let kind: String = r.try_get(3).map_err(|e| self.err(&ctx(), e))?;
                let payload: String = r.try_get(4).map_err(|e| self.err(&ctx(), e))?;
                let epoch: i64 = r.try_get(5).map_err(|e| self.err(&ctx(), e))?;
                let payload = $crate::row::parse_payload(id, seq, &payload)?;
                let mut e = $crate::row::decode(id, seq, ts, v, &kind, payload)?;
                e.epoch = $crate::row::epoch(id, seq, epoch)?;
                log.push(e);
            }
            $crate::row::check_contiguous(id, after, last.unwrap_or(0), &log)?;
            Ok(log)
        }

        /// A session's record from a row of the dialect's `session_cols`.
        fn session(&self, r: &$row) -> Result<$crate::SessionRecord, $crate::StoreError> {
            use sqlx::Row;
            let ctx = "cannot read a session row";
            let id: String = r.try_get(0).map_err(|e| self.err(ctx, e))?;
            let metadata: String = r.try_get(4).map_err(|e| self.err(ctx, e))?;
            let metadata = serde_json::from_str(&metadata).map_err(|e| {
                $crate::StoreError::Corrupt(format!(
                    "session {id}: the metadata is not valid JSON: {e}"
                ))
            })?;
            $crate::row::SessionCols {
                user_id: r.try_get(1).map_err(|e| self.err(ctx, e))?,
                agent: r.try_get(2).map_err(|e| self.err(ctx, e))?,
                reference_id: r.try_get(3).map_err(|e| self.err(ctx, e))?,
                metadata,
                parent_id: r.try_get(5).map_err(|e| self.err(ctx, e))?,
                status: r.try_get(6).map_err(|e| self.err(ctx, e))?,
                created_at: r.try_get(7).map_err(|e| self.err(ctx, e))?,
                updated_at: r.try_get(8).map_err(|e| self.err(ctx, e))?,
                last_seq: r.try_get(9).map_err(|e| self.err(ctx, e))?,
                id,
            }
            .into_record()
        }
    };
}
pub(crate) use sql_log_rows;

/// The [`crate::SessionLog`] methods that read (and prune, delete and set metadata), for a SQL
/// store's `impl`: `get`, `load`, `events_after`, `list`, `prune`, `delete`, `set_metadata`,
/// `latest_snapshot` and `snapshot_parts`, over the
/// methods [`sql_log_rows`] makes.
macro_rules! sql_log_reads {
    ($dialect:expr, $db:ty) => {
        async fn get(&self, id: &str) -> Result<$crate::SessionRecord, $crate::StoreError> {
            let d: &$crate::sql_log::Dialect = &$dialect;
            let sql = format!("SELECT {} FROM sessions WHERE id = {}", d.session_cols, (d.p)(1));
            let row = sqlx::query(&sql)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read session {id}"), e))?;
            match row {
                Some(r) => self.session(&r),
                None => Err($crate::StoreError::NotFound(id.to_owned())),
            }
        }

        async fn load(
            &self,
            id: &str,
        ) -> Result<($crate::SessionRecord, Vec<weft_core::Envelope>), $crate::StoreError> {
            let rec = self.get(id).await?;
            let log = self.read_events(id, 0, Some(rec.last_seq)).await?;
            Ok((rec, log))
        }

        async fn events_after(
            &self,
            id: &str,
            after_seq: u64,
        ) -> Result<Vec<weft_core::Envelope>, $crate::StoreError> {
            // One query when there are events (a stream's reads, once per append it is woken
            // by); the session's record only when there are none, to tell an unknown session
            // or a log shorter than the record from a log with nothing new.
            let log = self.read_events(id, after_seq, None).await?;
            if !log.is_empty() {
                return Ok(log);
            }
            let rec = self.get(id).await?;
            if after_seq >= rec.last_seq {
                return Ok(Vec::new());
            }
            // Appended between the two reads (or missing: the check says so).
            self.read_events(id, after_seq, Some(rec.last_seq)).await
        }

        async fn list(
            &self,
            filter: &$crate::ListFilter,
        ) -> Result<Vec<$crate::SessionRecord>, $crate::StoreError> {
            let d: &$crate::sql_log::Dialect = &$dialect;
            let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                "SELECT {} FROM sessions WHERE TRUE",
                d.session_cols
            ));
            if let Some(u) = &filter.user_id {
                q.push(" AND user_id = ").push_bind(u.clone());
            }
            if let Some(s) = filter.status {
                q.push(" AND status = ").push_bind(s.as_str());
            }
            q.push(" ORDER BY updated_at DESC, id DESC");
            if let Some(n) = filter.limit {
                q.push(" LIMIT ").push_bind(i64::try_from(n).unwrap_or(i64::MAX));
            }
            let rows = q
                .build()
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err("cannot list sessions", e))?;
            rows.iter().map(|r| self.session(r)).collect()
        }

        async fn prune(&self, before: i64, active: bool) -> Result<u64, $crate::StoreError> {
            let d: &$crate::sql_log::Dialect = &$dialect;
            let sql = format!(
                "DELETE FROM sessions WHERE updated_at < {} AND ({} OR status IN ('completed', 'failed'))",
                (d.p)(1),
                (d.p)(2)
            );
            let res = sqlx::query(&sql)
                .bind(before)
                .bind(active)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err("cannot prune sessions", e))?;
            sqlx::query(&$crate::lease::prune_sql(d.p))
                .bind(before)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err("cannot prune the leases of pruned sessions", e))?;
            Ok(res.rows_affected())
        }

        async fn delete(&self, id: &str) -> Result<(), $crate::StoreError> {
            let d: &$crate::sql_log::Dialect = &$dialect;
            let mut tx = self
                .pool
                .begin()
                .await
                .map_err(|e| self.err(&format!("cannot delete session {id}"), e))?;
            let sql = format!("DELETE FROM sessions WHERE id = {}", (d.p)(1));
            let res = sqlx::query(&sql)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err(&format!("cannot delete session {id}"), e))?;
            if res.rows_affected() == 0 {
                return Err($crate::StoreError::NotFound(id.to_owned()));
            }
            let sql = format!("DELETE FROM leases WHERE session = {}", (d.p)(1));
            sqlx::query(&sql)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err(&format!("cannot delete the lease of session {id}"), e))?;
            tx.commit()
                .await
                .map_err(|e| self.err(&format!("cannot delete session {id}"), e))
        }

        async fn set_metadata(
            &self,
            id: &str,
            metadata: &serde_json::Value,
            now: i64,
        ) -> Result<(), $crate::StoreError> {
            let d: &$crate::sql_log::Dialect = &$dialect;
            let sql = format!(
                "UPDATE sessions SET metadata = {}, updated_at = {} WHERE id = {}",
                (d.json)(1),
                (d.p)(2),
                (d.p)(3)
            );
            let res = sqlx::query(&sql)
                .bind(metadata.to_string())
                .bind(now)
                .bind(id)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot change the metadata of session {id}"), e))?;
            if res.rows_affected() == 0 {
                return Err($crate::StoreError::NotFound(id.to_owned()));
            }
            Ok(())
        }

        async fn exported_through(&self, id: &str) -> Result<u64, $crate::StoreError> {
            let d: &$crate::sql_log::Dialect = &$dialect;
            let sql = format!("SELECT exported_seq FROM sessions WHERE id = {}", (d.p)(1));
            let seq: Option<i64> = sqlx::query_scalar(&sql)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read the export mark of session {id}"), e))?;
            Ok(seq.map_or(0, |s| u64::try_from(s).unwrap_or(0)))
        }

        async fn set_exported_through(
            &self,
            marks: &[(String, u64)],
        ) -> Result<(), $crate::StoreError> {
            if marks.is_empty() {
                return Ok(());
            }
            let d: &$crate::sql_log::Dialect = &$dialect;
            let sql = format!(
                "UPDATE sessions SET exported_seq = {} WHERE id = {} AND exported_seq < {}",
                (d.p)(1),
                (d.p)(2),
                (d.p)(1)
            );
            let ctx = "cannot write the export marks of sessions";
            let mut tx = self.pool.begin().await.map_err(|e| self.err(ctx, e))?;
            for (id, seq) in marks {
                sqlx::query(&sql)
                    .bind(i64::try_from(*seq).unwrap_or(i64::MAX))
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.err(ctx, e))?;
            }
            tx.commit().await.map_err(|e| self.err(ctx, e))
        }

        async fn latest_snapshot(
            &self,
            id: &str,
        ) -> Result<Option<$crate::Snapshot>, $crate::StoreError> {
            self.get(id).await?;
            let d: &$crate::sql_log::Dialect = &$dialect;
            let sql = format!(
                "SELECT seq, CAST(v AS BIGINT), state FROM snapshots WHERE {} \
                 ORDER BY seq DESC LIMIT 1",
                (d.of_session)(1)
            );
            let head: Option<(i64, i64, String)> = sqlx::query_as(&sql)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read the snapshot of session {id}"), e))?;
            let Some((seq, version, head)) = head else {
                return Ok(None);
            };
            $crate::row::snapshot(id, seq, version, head)
        }

        async fn snapshot_parts(
            &self,
            id: &str,
            from: u64,
        ) -> Result<Vec<(u64, String)>, $crate::StoreError> {
            self.get(id).await?;
            let d: &$crate::sql_log::Dialect = &$dialect;
            let sql = format!(
                "SELECT start, part FROM snapshot_parts WHERE {mine} \
                 AND start >= coalesce((SELECT max(start) FROM snapshot_parts \
                     WHERE {mine} AND start <= {from}), 0) ORDER BY start",
                mine = (d.of_session)(1),
                from = (d.p)(2)
            );
            let parts: Vec<(i64, String)> = sqlx::query_as(&sql)
                .bind(id)
                .bind($crate::row::to_i64("a message position", from)?)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read the snapshot of session {id}"), e))?;
            $crate::row::parts(id, parts)
        }
    };
}
pub(crate) use sql_log_reads;

/// Names the agent of a session created without one. Parameters: agent, id.
pub(crate) fn name_agent_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE sessions SET agent = {} WHERE id = {} AND agent = ''",
        p(1),
        p(2)
    )
}

/// [`crate::SessionLog::name_agent`] through a store's pool (SQLite writes it through its
/// writer instead).
macro_rules! sql_name_agent {
    ($dialect:expr) => {
        async fn name_agent(&self, id: &str, agent: &str) -> Result<(), $crate::StoreError> {
            let d: &$crate::sql_log::Dialect = &$dialect;
            let res = sqlx::query(&$crate::sql_log::name_agent_sql(d.p))
                .bind(agent)
                .bind(id)
                .execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot name the agent of session {id}"), e))?;
            if res.rows_affected() == 0 {
                // Named already, or not there.
                self.get(id).await?;
            }
            Ok(())
        }
    };
}
pub(crate) use sql_name_agent;
