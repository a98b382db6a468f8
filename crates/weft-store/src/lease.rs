//! Leases, shared by the stores: the statements (written once, with the placeholder each
//! database wants), how a lease row reads back, and the lease methods of the SQL stores
//! ([`sql_lease_methods`]).

use std::time::Duration;

use crate::{Lease, Owner, StoreError};

/// Takes the lease unless another owner holds it unexpired; returns the new epoch. Parameters:
/// session, owner, host, pid, expires_at, now, force (0 or 1).
pub(crate) fn acquire_sql(p: fn(usize) -> String) -> String {
    format!(
        "INSERT INTO leases (session, owner, host, pid, epoch, expires_at) \
         VALUES ({s}, {o}, {h}, {pid}, 1, {exp}) \
         ON CONFLICT (session) DO UPDATE SET owner = excluded.owner, host = excluded.host, \
         pid = excluded.pid, expires_at = excluded.expires_at, request = NULL, \
         epoch = CASE WHEN leases.owner = excluded.owner THEN leases.epoch ELSE leases.epoch + 1 END \
         WHERE leases.expires_at <= {now} OR leases.owner = excluded.owner OR {force} = 1 \
         RETURNING epoch",
        s = p(1),
        o = p(2),
        h = p(3),
        pid = p(4),
        exp = p(5),
        now = p(6),
        force = p(7),
    )
}

/// Extends the lease if it is still this owner's at this epoch. Parameters: expires_at,
/// session, owner, epoch.
pub(crate) fn renew_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE leases SET expires_at = {} WHERE session = {} AND owner = {} AND epoch = {}",
        p(1),
        p(2),
        p(3),
        p(4)
    )
}

/// Reads a lease. Parameter: session.
pub(crate) fn select_sql(p: fn(usize) -> String) -> String {
    format!(
        "SELECT owner, host, pid, epoch, expires_at, request FROM leases WHERE session = {}",
        p(1)
    )
}

/// Forgets leases that ran out before `before` of sessions that no longer exist (pruned). A lease
/// that still runs is kept even without its session: a new run takes its lease first. Parameter:
/// before.
pub(crate) fn prune_sql(p: fn(usize) -> String) -> String {
    format!(
        "DELETE FROM leases WHERE expires_at < {} AND session NOT IN (SELECT id FROM sessions)",
        p(1)
    )
}

/// The sessions a worker may claim (see `Leases::claim`): running, with events (a session with
/// none, such as a thread created empty, has nothing to drive), of one of the agents, with no
/// lease or an expired one; those whose owner stopped first (they were started already, and a
/// backlog of new sessions must not delay their takeover), then the least recently updated.
/// Parameters: agents, now, limit; `agents` is the condition on the agent's name and
/// `has_events` the condition that session `s` has an event. (SQLite: its claim is one write
/// transaction; PostgreSQL claims in two parts, `expired_sql` and `unleased_sql`, in the same
/// order.)
pub(crate) fn claimable_sql(p: fn(usize) -> String, agents: &str, has_events: &str) -> String {
    format!(
        "SELECT s.id FROM sessions s LEFT JOIN leases l ON l.session = s.id \
         WHERE s.status = 'running' AND s.agent {agents} AND {has_events} \
         AND (l.session IS NULL OR l.expires_at <= {now}) \
         ORDER BY (l.session IS NULL), s.updated_at, s.id LIMIT {limit}",
        now = p(2),
        limit = p(3),
    )
}

/// How many sessions wait for a process to run them (see `Leases::waiting`): running, with
/// events, of any agent, with no lease or an expired one. Parameter: now.
pub(crate) fn waiting_sql(p: fn(usize) -> String, has_events: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM sessions s LEFT JOIN leases l ON l.session = s.id \
         WHERE s.status = 'running' AND {has_events} \
         AND (l.session IS NULL OR l.expires_at <= {now})",
        now = p(1),
    )
}

/// PostgreSQL's claim, first part: running sessions of one of the agents whose lease ran out,
/// least recently updated first. `lock` (`FOR UPDATE OF l SKIP LOCKED`) locks their *lease*
/// rows and only reads their session rows: a session row held by an owner's open transaction
/// (frozen, or cut off) does not hide the session; its lease row, held `FOR SHARE` by an append
/// in progress, is passed over without waiting, and PostgreSQL ends such a transaction within
/// the connection's bounds (see `PgBounds`). Parameters: agents, now, limit.
pub(crate) fn expired_sql(
    p: fn(usize) -> String,
    agents: &str,
    has_events: &str,
    lock: &str,
) -> String {
    format!(
        "SELECT s.id FROM leases l JOIN sessions s ON s.id = l.session \
         WHERE s.status = 'running' AND s.agent {agents} AND {has_events} \
         AND l.expires_at <= {now} \
         ORDER BY s.updated_at, s.id LIMIT {limit} {lock}",
        now = p(2),
        limit = p(3),
    )
}

/// PostgreSQL's claim, second part: running sessions of one of the agents that never had a
/// lease, least recently updated first; `lock` (`FOR UPDATE OF s SKIP LOCKED`) locks their
/// session rows, the only rows they have, until their leases are inserted. Parameters: agents,
/// limit.
pub(crate) fn unleased_sql(
    p: fn(usize) -> String,
    agents: &str,
    has_events: &str,
    lock: &str,
) -> String {
    format!(
        "SELECT s.id FROM sessions s WHERE s.status = 'running' AND s.agent {agents} \
         AND {has_events} \
         AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session = s.id) \
         ORDER BY s.updated_at, s.id LIMIT {limit} {lock}",
        limit = p(2),
    )
}

/// How long a lease runs without renewal unless `WEFT_LEASE_SECS` says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// How long a lease of this process runs without renewal: `WEFT_LEASE_SECS` (0.1 to 3600
/// seconds), else [`DEFAULT_LEASE`]. Owners renew every third of it, and the PostgreSQL store
/// bounds its connections' statements, lock waits and idle transactions by it.
pub fn time() -> Duration {
    std::env::var("WEFT_LEASE_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.1 && *s <= 3600.0)
        .map_or(DEFAULT_LEASE, Duration::from_secs_f64)
}

/// The name a worker's `NOTIFY` and `LISTEN` use.
pub(crate) const WORK_CHANNEL: &str = "weft_work";

pub(crate) fn dollar(n: usize) -> String {
    format!("${n}")
}

pub(crate) fn question(n: usize) -> String {
    format!("?{n}")
}

/// Asks the owner of a running lease for something. Parameters: request, session, now.
pub(crate) fn request_sql(p: fn(usize) -> String) -> String {
    format!(
        "UPDATE leases SET request = {} WHERE session = {} AND expires_at > {}",
        p(1),
        p(2),
        p(3)
    )
}

/// A lease row: (owner, host, pid, epoch, expires_at, request).
pub(crate) type Row = (String, String, i64, i64, i64, Option<String>);

/// A lease as read from its row. A pid or an epoch that this build cannot have written is
/// [`StoreError::Corrupt`], never read as 0 (which would mean "no lease" to the fence).
pub(crate) fn from_row(
    session: &str,
    (owner, host, pid, epoch, expires_at, request): Row,
) -> Result<Lease, StoreError> {
    Ok(Lease {
        session: session.to_owned(),
        owner: Owner {
            id: owner,
            host,
            pid: u32::try_from(pid).map_err(|_| {
                StoreError::Corrupt(format!(
                    "session {session}: the lease names process id {pid}"
                ))
            })?,
        },
        epoch: read_epoch(session, epoch)?,
        expires_at,
        request,
    })
}

/// A lease's epoch as stored: at least 1 (every lease row is written with epoch 1 or more).
pub(crate) fn read_epoch(session: &str, epoch: i64) -> Result<u64, StoreError> {
    u64::try_from(epoch).ok().filter(|e| *e > 0).ok_or_else(|| {
        StoreError::Corrupt(format!("session {session}: the lease has epoch {epoch}"))
    })
}

/// [`acquire_sql`] with its parameters bound, for `$p`'s placeholders; fetch it for the new epoch.
macro_rules! acquire_query {
    ($p:path, $id:expr, $owner:expr, $expires_at:expr, $now:expr, $force:expr) => {
        sqlx::query_scalar::<_, i64>(&$crate::lease::acquire_sql($p))
            .bind($id)
            .bind(&$owner.id)
            .bind(&$owner.host)
            .bind(i64::from($owner.pid))
            .bind($expires_at)
            .bind($now)
            .bind(i64::from($force))
    };
}
pub(crate) use acquire_query;

/// The [`crate::Leases`] methods that the SQL stores share, written once: `acquire`, `renew`,
/// `release`, `request` and `lease`, for a store with a `pool`, a `lease_pool()` (the
/// connections its lease writes use) and an `err(context, sqlx::Error)`
/// and the placeholders `$p` makes (`dollar`; SQLite writes its leases through its writer and
/// takes only [`sql_lease_reads`]). Each store writes its own `claim`, `wake` and
/// `wait_for_work`.
macro_rules! sql_lease_methods {
    ($p:path) => {
        async fn acquire(
            &self,
            id: &str,
            owner: &$crate::Owner,
            now: i64,
            ttl_ms: i64,
            force: bool,
        ) -> Result<$crate::Lease, $crate::StoreError> {
            let ctx = || format!("cannot take the lease of session {id}");
            let expires_at = now.saturating_add(ttl_ms);
            let epoch = $crate::lease::acquire_query!($p, id, owner, expires_at, now, force)
                .fetch_optional(self.lease_pool())
                .await
                .map_err(|e| self.err(&ctx(), e))?;
            match epoch {
                Some(epoch) => Ok($crate::Lease {
                    session: id.to_owned(),
                    owner: owner.clone(),
                    epoch: $crate::lease::read_epoch(id, epoch)?,
                    expires_at,
                    request: None,
                }),
                // The upsert wrote nothing: a lease row is there, held by another owner.
                None => match self.lease(id).await? {
                    Some(l) => Err($crate::lease::held(&l, now)),
                    None => Err($crate::StoreError::Corrupt(format!(
                        "{}: the lease was neither taken nor found",
                        ctx()
                    ))),
                },
            }
        }

        async fn renew(
            &self,
            l: &$crate::Lease,
            expires_at: i64,
        ) -> Result<(), $crate::StoreError> {
            let done = sqlx::query(&$crate::lease::renew_sql($p))
                .bind(expires_at)
                .bind(&l.session)
                .bind(&l.owner.id)
                .bind($crate::row::to_i64("epoch", l.epoch)?)
                .execute(self.lease_pool())
                .await
                .map_err(|e| {
                    self.err(
                        &format!("cannot renew the lease of session {}", l.session),
                        e,
                    )
                })?;
            if done.rows_affected() == 0 {
                return Err($crate::StoreError::LeaseLost(l.session.clone()));
            }
            Ok(())
        }

        async fn release(&self, l: &$crate::Lease) -> Result<(), $crate::StoreError> {
            match self.renew(l, 0).await {
                Err($crate::StoreError::LeaseLost(_)) => Ok(()),
                other => other,
            }
        }

        $crate::lease::sql_lease_reads!($p);
    };
}
pub(crate) use sql_lease_methods;

/// The lease methods `request` and `lease` of [`sql_lease_methods`], for a store that writes
/// its leases its own way (SQLite: through its writer).
macro_rules! sql_lease_reads {
    ($p:path) => {
        async fn request(
            &self,
            id: &str,
            what: &str,
            now: i64,
        ) -> Result<bool, $crate::StoreError> {
            let done = sqlx::query(&$crate::lease::request_sql($p))
                .bind(what)
                .bind(id)
                .bind(now)
                .execute(&self.pool)
                .await
                .map_err(|e| {
                    self.err(
                        &format!("cannot ask the owner of session {id} to {what}"),
                        e,
                    )
                })?;
            Ok(done.rows_affected() > 0)
        }

        async fn lease(&self, id: &str) -> Result<Option<$crate::Lease>, $crate::StoreError> {
            let row: Option<$crate::lease::Row> = sqlx::query_as(&$crate::lease::select_sql($p))
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.err(&format!("cannot read the lease of session {id}"), e))?;
            row.map(|r| $crate::lease::from_row(id, r)).transpose()
        }
    };
}
pub(crate) use sql_lease_reads;

/// Whether a batch written at `epoch` may be appended to a session whose lease is `lease`
/// (checked in the append's own transaction). A batch at an epoch is accepted only while that
/// epoch is the session's current one: a process whose lease was taken over can never write
/// again, even after the new owner released it. A batch at epoch 0 (a writer that holds no
/// lease) is accepted unless another process holds a lease that has not expired.
pub(crate) fn fence(
    session: &str,
    epoch: u64,
    lease: Option<&Lease>,
    now: i64,
) -> Result<(), StoreError> {
    match (epoch, lease) {
        (0, Some(l)) if l.expires_at > now => Err(held(l, now)),
        (0, _) => Ok(()),
        (e, Some(l)) if l.epoch == e => Ok(()),
        _ => Err(StoreError::LeaseLost(session.to_owned())),
    }
}

/// The error for a lease another owner holds.
pub(crate) fn held(lease: &Lease, now: i64) -> StoreError {
    StoreError::Leased {
        session: lease.session.clone(),
        host: lease.owner.host.clone(),
        pid: lease.owner.pid,
        seconds_left: u64::try_from((lease.expires_at - now).max(0)).unwrap_or_default() / 1000 + 1,
    }
}
