//! What each user spent per quota period ([`crate::Usage`]): the statements the SQL stores share
//! (written once, with the placeholder each database wants) and their methods
//! ([`sql_usage_methods`]). A counter is one row per (user, period key); an add is one upsert
//! that adds to the row's columns in the database, so adds from many processes at once are
//! never lost, and a period's first add creates its row (nothing is ever reset).

use weft_core::quota::Used;

use crate::StoreError;

/// Adds to the counters of `rows` periods of one user, creating the rows that are missing.
/// Parameters: user, updated_at, then per row: period, input_tokens, output_tokens, cost_usd,
/// model_calls.
pub(crate) fn add_sql(p: fn(usize) -> String, rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|k| {
            let at = 3 + k * 5;
            format!(
                "({}, {}, {}, {}, {}, {}, {})",
                p(1),
                p(at),
                p(at + 1),
                p(at + 2),
                p(at + 3),
                p(at + 4),
                p(2)
            )
        })
        .collect();
    format!(
        "INSERT INTO usage_counters \
         (user_id, period, input_tokens, output_tokens, cost_usd, model_calls, updated_at) \
         VALUES {} \
         ON CONFLICT (user_id, period) DO UPDATE SET \
         input_tokens = usage_counters.input_tokens + excluded.input_tokens, \
         output_tokens = usage_counters.output_tokens + excluded.output_tokens, \
         cost_usd = usage_counters.cost_usd + excluded.cost_usd, \
         model_calls = usage_counters.model_calls + excluded.model_calls, \
         updated_at = excluded.updated_at",
        values.join(", ")
    )
}

/// Reads one counter. Parameters: user, period.
pub(crate) fn select_sql(p: fn(usize) -> String) -> String {
    format!(
        "SELECT input_tokens, output_tokens, cost_usd, model_calls FROM usage_counters \
         WHERE user_id = {} AND period = {}",
        p(1),
        p(2)
    )
}

/// A counter's row: (input_tokens, output_tokens, cost_usd, model_calls).
pub(crate) type Row = (i64, i64, f64, i64);

/// A counter as read from its row; a negative count is [`StoreError::Corrupt`].
pub(crate) fn from_row(user: &str, period: &str, (i, o, c, m): Row) -> Result<Used, StoreError> {
    let count = |what: &str, n: i64| {
        u64::try_from(n).map_err(|_| {
            StoreError::Corrupt(format!(
                "the usage of user {user} in {period} has {what} {n}"
            ))
        })
    };
    Ok(Used {
        input_tokens: count("input_tokens", i)?,
        output_tokens: count("output_tokens", o)?,
        cost_usd: c,
        model_calls: count("model_calls", m)?,
    })
}

/// The [`crate::Usage`] methods of the SQL stores, written once, for a store with a `pool` and
/// an `err(context, sqlx::Error)` and the placeholders `$p` makes (`question` or `dollar`).
macro_rules! sql_usage_methods {
    ($p:path) => {
        async fn add_usage(
            &self,
            user: &str,
            periods: &[String],
            used: &weft_core::quota::Used,
            now: i64,
        ) -> Result<(), $crate::StoreError> {
            if periods.is_empty() || used.is_zero() {
                return Ok(());
            }
            let sql = $crate::usage::add_sql($p, periods.len());
            let mut q = sqlx::query(&sql).bind(user).bind(now);
            for period in periods {
                q = q
                    .bind(period)
                    .bind($crate::row::to_i64("input tokens", used.input_tokens)?)
                    .bind($crate::row::to_i64("output tokens", used.output_tokens)?)
                    .bind(used.cost_usd)
                    .bind($crate::row::to_i64("model calls", used.model_calls)?);
            }
            q.execute(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot add to the usage of user {user}"), e))?;
            Ok(())
        }

        async fn usage(
            &self,
            user: &str,
            periods: &[String],
        ) -> Result<Vec<weft_core::quota::Used>, $crate::StoreError> {
            let sql = $crate::usage::select_sql($p);
            let mut out = Vec::with_capacity(periods.len());
            for period in periods {
                let row: Option<$crate::usage::Row> = sqlx::query_as(&sql)
                    .bind(user)
                    .bind(period)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| self.err(&format!("cannot read the usage of user {user}"), e))?;
                out.push(match row {
                    Some(r) => $crate::usage::from_row(user, period, r)?,
                    None => weft_core::quota::Used::default(),
                });
            }
            Ok(out)
        }
    };
}
pub(crate) use sql_usage_methods;
