//! Sessions in PostgreSQL, for many weft processes sharing one database.
//!
//! Durability is `synchronous_commit`: `full` commits with the server's own setting when it is
//! `on` or `remote_apply` and with `on` otherwise (a commit returns once its log is flushed to
//! disk, and to synchronous standbys if there are any), `normal` with `off` (a commit returns
//! before the flush; a crash of the server can lose the last few hundred milliseconds of commits,
//! never leave them half-written). The pool's connections start with the durability the store
//! was connected with; an append made after [`SessionLog::set_durability`] chose another sets it for
//! its own transaction (`SET LOCAL`).
//!
//! Appends without a snapshot, at the durability the connections started with, are written
//! together with the other sessions' appends of the moment, one statement and one commit for
//! them all ([`crate::pg_appends`]); an append the batch did not write is written alone by
//! [`PgStore::append_in_one`] (one statement), and an append with a snapshot or at another
//! durability in a transaction of its own.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Executor};
use weft_core::snapshot::Encoded;
use weft_core::{Envelope, SessionStatus};

use crate::pg_appends::{Appender, Outcome, Pending};
use crate::row;
use crate::{
    Durability, Lease, Leases, NewLog, NewSession, Owner, POSTGRES_SCHEMA_VERSION, SessionLog,
    SessionRecord, Settings, StoreError, check_batch, lease,
};

/// The schema migrations, in order: (version, SQL).
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/postgres/0001_init.sql")),
    (2, include_str!("../migrations/postgres/0002_json_text.sql")),
    (3, include_str!("../migrations/postgres/0003_leases.sql")),
    (
        4,
        include_str!("../migrations/postgres/0004_event_epochs.sql"),
    ),
    (
        5,
        include_str!("../migrations/postgres/0005_snapshot_parts.sql"),
    ),
    (6, include_str!("../migrations/postgres/0006_knowledge.sql")),
    (
        7,
        include_str!("../migrations/postgres/0007_knowledge_vectors.sql"),
    ),
    (8, include_str!("../migrations/postgres/0008_usage.sql")),
    (9, include_str!("../migrations/postgres/0009_crons.sql")),
    (
        10,
        include_str!("../migrations/postgres/0010_queued_runs.sql"),
    ),
    (
        11,
        include_str!("../migrations/postgres/0011_export_marks.sql"),
    ),
    (
        12,
        include_str!("../migrations/postgres/0012_events_deleted_with_sessions.sql"),
    ),
];

/// How long to wait for the server to answer before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long PostgreSQL lets a statement run, wait for a lock, and a transaction sit idle on the
/// store's connections, tied to the lease time (ARCHITECTURE.md, "Ownership and its failure
/// model"). An owner that freezes inside an append (a paused VM, a stall, a partition) holds
/// the session's rows, and its lease row `FOR SHARE`, until its transaction ends: PostgreSQL
/// ends it (and closes the connection) once it has been idle for half a lease, so the locks are
/// gone before the frozen owner's lease can run out (it was renewed at most a third of a lease
/// before) and the session is taken over when the lease expires. No statement waits for a lock
/// longer than half a lease either, and none runs longer than a whole lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgBounds {
    /// The longest a statement may run (`statement_timeout`).
    pub statement: Duration,
    /// The longest a statement waits for a lock (`lock_timeout`).
    pub lock: Duration,
    /// The longest a transaction may stay open and idle before the server ends its session
    /// (`idle_in_transaction_session_timeout`).
    pub idle_in_transaction: Duration,
}

impl PgBounds {
    /// The bounds for owners whose leases run `lease` without renewal.
    pub fn for_lease(lease: Duration) -> Self {
        let half = (lease / 2).max(Duration::from_millis(1));
        Self {
            statement: lease.max(Duration::from_millis(1)),
            lock: half,
            idle_in_transaction: half,
        }
    }

    /// The settings, as a connection's start-up options take them (milliseconds).
    fn options(&self) -> [(&'static str, String); 3] {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        [
            ("statement_timeout", ms(self.statement)),
            ("lock_timeout", ms(self.lock)),
            (
                "idle_in_transaction_session_timeout",
                ms(self.idle_in_transaction),
            ),
        ]
    }
}

/// The advisory lock held while migrating, so that processes starting together do not race.
const MIGRATION_LOCK: i64 = 0x7765_6674_5f6d_6967; // "weft_mig"

/// How this store reads sessions: by their ids, the last sequence number in the session row.
const POSTGRES: crate::sql_log::Dialect = crate::sql_log::Dialect {
    p: lease::dollar,
    session_cols: "id, user_id, agent, reference_id, metadata::text, parent_id, status, \
                   created_at, updated_at, last_seq",
    of_session: |n| format!("session_id = ${n}"),
    json: |n| format!("${n}::json"),
};

/// A store in a PostgreSQL database.
#[derive(Clone, Debug)]
pub struct PgStore {
    pub(crate) pool: PgPool,
    /// Connections of their own for taking, renewing and releasing leases: an owner's renewal
    /// never waits behind the appends and reads that fill [`PgStore::pool`] under load, so a
    /// live owner does not lose its sessions because its process is busy.
    leases: PgPool,
    /// `PostgreSQL at host:port`, for messages.
    target: String,
    /// Hears `NOTIFY weft_work` for [`Leases::wait_for_work`] (connected at the first wait).
    listener: Arc<tokio::sync::Mutex<Option<PgListener>>>,
    /// The `synchronous_commit` of each durability, and the durability the pool's connections
    /// start with.
    commit: Commit,
    /// Whether appends are written at `full` now (see [`SessionLog::set_durability`]).
    full: Arc<AtomicBool>,
    /// Appends written together (see [`crate::pg_appends`]).
    appends: Appender,
}

/// What `synchronous_commit` each durability means on one server.
#[derive(Clone, Debug)]
struct Commit {
    /// `on`, or the server's stronger `remote_apply`.
    full: String,
    /// The durability the pool's connections are started with.
    start: Durability,
}

impl Commit {
    /// From the server's own `synchronous_commit` (what a connection gets without asking).
    fn new(server: &str, start: Durability) -> Self {
        let full = match server {
            "on" | "remote_apply" => server.to_owned(),
            _ => "on".to_owned(),
        };
        Self { full, start }
    }

    fn value(&self, d: Durability) -> &str {
        match d {
            Durability::Full => &self.full,
            Durability::Normal => "off",
        }
    }
}

impl PgStore {
    crate::sql_log::sql_log_rows!(POSTGRES, PgRow);

    /// Connects to `postgres://...` and brings the schema up to date. Fails after about five
    /// seconds when the server does not answer. Writes at the default durability (`full`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_durable(url, None, Durability::default()).await
    }

    /// Like [`PgStore::connect`], but keeps weft's tables in `schema` (created when missing),
    /// e.g. to give each tenant or test its own tables in one database. `schema` must be letters,
    /// digits and underscores.
    pub async fn connect_in_schema(url: &str, schema: &str) -> Result<Self, StoreError> {
        Self::connect_durable(url, Some(schema), Durability::default()).await
    }

    /// Connects to `url` (in `schema`, if given) writing at `durability`.
    pub async fn connect_durable(
        url: &str,
        schema: Option<&str>,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let opts = parse(url)?;
        let opts = match schema {
            Some(schema) => {
                create_schema(&opts, schema).await?;
                opts.options([("search_path", schema)])
            }
            None => opts,
        };
        Self::connect_with_durability(opts, durability).await
    }

    /// Connects with options built by the caller.
    pub async fn connect_with(opts: PgConnectOptions) -> Result<Self, StoreError> {
        Self::connect_with_durability(opts, Durability::default()).await
    }

    /// Connects with options built by the caller, writing at `durability`, with its connections
    /// bounded for this process's lease time ([`crate::lease_time`]).
    pub async fn connect_with_durability(
        opts: PgConnectOptions,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        Self::connect_bounded(opts, durability, PgBounds::for_lease(crate::lease_time())).await
    }

    /// Connects with options built by the caller, writing at `durability`, with its connections'
    /// statements, lock waits and idle transactions bounded by `bounds`.
    pub async fn connect_bounded(
        opts: PgConnectOptions,
        durability: Durability,
        bounds: PgBounds,
    ) -> Result<Self, StoreError> {
        let target = target(&opts);
        let server = server_settings(&opts, &target).await?;
        if server.fsync == "off" {
            tracing::warn!(
                "{target} runs with fsync=off: a crash of its machine can lose or corrupt \
                 committed sessions whatever the durability"
            );
        }
        let commit = Commit::new(&server.synchronous_commit, durability);
        let opts = opts
            .options([("synchronous_commit", commit.value(durability))])
            .options(bounds.options());
        let leases = pool(&opts, LEASE_POOL_SIZE);
        let pool = pool(&opts, POOL_SIZE);
        migrate(&pool, &target).await?;
        Ok(Self {
            appends: Appender::start(pool.clone()),
            pool,
            leases,
            target,
            listener: Arc::new(tokio::sync::Mutex::new(None)),
            commit,
            full: Arc::new(AtomicBool::new(durability == Durability::Full)),
        })
    }

    /// The durability appends are written at.
    pub fn durability(&self) -> Durability {
        if self.full.load(Ordering::Acquire) {
            Durability::Full
        } else {
            Durability::Normal
        }
    }

    /// The durability appends are written at, with `synchronous_commit` as an append's
    /// transaction sees it and the server's `fsync`, read back from the server.
    pub async fn settings(&self) -> Result<Settings, StoreError> {
        let ctx = "cannot read the durability settings";
        let mut tx = self.pool.begin().await.map_err(|e| self.err(ctx, e))?;
        self.commit_at(&mut tx).await?;
        let mut read_back = BTreeMap::new();
        for name in [
            "synchronous_commit",
            "fsync",
            "statement_timeout",
            "lock_timeout",
            "idle_in_transaction_session_timeout",
        ] {
            let v: String = sqlx::query_scalar(&format!("SHOW {name}"))
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| self.err(ctx, e))?;
            read_back.insert(name.to_owned(), v);
        }
        tx.rollback().await.map_err(|e| self.err(ctx, e))?;
        Ok(Settings {
            durability: self.durability(),
            read_back,
        })
    }

    /// Sets the transaction's `synchronous_commit` when the durability is not the one the
    /// connection started with.
    async fn commit_at(&self, tx: &mut PgConnection) -> Result<(), StoreError> {
        let d = self.durability();
        if d == self.commit.start {
            return Ok(());
        }
        sqlx::query("SELECT set_config('synchronous_commit', $1, true)")
            .bind(self.commit.value(d))
            .execute(tx)
            .await
            .map_err(|e| self.err("cannot set the durability of a commit", e))?;
        Ok(())
    }

    /// Closes every connection; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
        self.leases.close().await;
    }

    /// The connections lease writes use (see [`PgStore::leases`]).
    fn lease_pool(&self) -> &PgPool {
        &self.leases
    }

    /// An append, with a snapshot, in one transaction.
    async fn write(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
        snapshot: Option<&Encoded>,
    ) -> Result<(), StoreError> {
        check_batch(id, expected_seq, events)?;
        let columns = Columns::of(id, events)?;
        let expected = row::to_i64("sequence number", expected_seq)?;
        let last = row::to_i64("sequence number", expected_seq + events.len() as u64)?;
        let ctx = || format!("cannot append to session {id}");
        if snapshot.is_none() && self.durability() == self.commit.start {
            let epoch = crate::epoch_of(events);
            let pending = Pending {
                id: id.to_owned(),
                expected,
                last,
                epoch: row::to_i64("epoch", epoch)?,
                status: status.as_str(),
                now,
                rows: columns,
            };
            return match self.appends.append(pending).await {
                Outcome::Written => Ok(()),
                // Refused in the batch: written alone, it says why (or is written now).
                Outcome::Alone(rows) => {
                    let append = OneAppend {
                        id,
                        expected,
                        last,
                        epoch,
                        status,
                        now,
                    };
                    self.append_in_one(append, &rows).await
                }
                Outcome::Lost(why) => Err(StoreError::Unavailable {
                    target: self.target.clone(),
                    source: why.into(),
                }),
            };
        }
        let mut tx = self.pool.begin().await.map_err(|e| self.err(&ctx(), e))?;
        self.commit_at(&mut tx).await?;
        self.fence(id, crate::epoch_of(events), now, &mut tx)
            .await?;
        let updated = sqlx::query(
            "UPDATE sessions SET last_seq = $1, status = $2, \
             updated_at = CASE WHEN status <> $2 OR updated_at <= $3 - $6 THEN $3 ELSE updated_at END \
             WHERE id = $4 AND last_seq = $5",
        )
        .bind(last)
        .bind(status.as_str())
        .bind(now)
        .bind(id)
        .bind(expected)
        .bind(crate::UPDATED_AT_GRAIN_MS)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.err(&ctx(), e))?;
        if updated.rows_affected() == 0 {
            let actual: Option<i64> =
                sqlx::query_scalar("SELECT last_seq FROM sessions WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| self.err(&ctx(), e))?;
            return Err(match actual {
                None => StoreError::NotFound(id.to_owned()),
                Some(a) => StoreError::Conflict {
                    session: id.to_owned(),
                    expected: expected_seq,
                    actual: u64::try_from(a).map_err(|_| {
                        StoreError::Corrupt(format!("session {id}: its last event is numbered {a}"))
                    })?,
                },
            });
        }
        if !events.is_empty() {
            columns.insert(id, &mut tx).await.map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict {
                        session: id.to_owned(),
                        expected: expected_seq,
                        actual: expected_seq + events.len() as u64,
                    }
                } else {
                    self.err(&ctx(), e)
                }
            })?;
        }
        if let Some(snap) = snapshot {
            write_snapshot(id, snap, &mut tx)
                .await
                .map_err(|e| self.err(&ctx(), e))?;
        }
        tx.commit().await.map_err(|e| self.err(&ctx(), e))?;
        Ok(())
    }

    /// An append that its batch did not write (see [`crate::pg_appends`]), alone: one
    /// statement, so one round trip and PostgreSQL's own transaction around it. It does what the
    /// transaction of [`PgStore::write`] does, in the same order: the lease row is read `FOR
    /// SHARE` (the fence), the session's row is moved on only if the fence passes and the log
    /// ends where the writer expects, and the events are inserted only if it was. On a refusal
    /// the lease row read comes back and the reason is worked out here.
    async fn append_in_one(&self, a: OneAppend<'_>, columns: &Columns) -> Result<(), StoreError> {
        let ctx = || format!("cannot append to session {}", a.id);
        let epoch = row::to_i64("epoch", a.epoch)?;
        let answer: OneAnswer = sqlx::query_as(APPEND_IN_ONE)
            .bind(a.id)
            .bind(a.last)
            .bind(a.status.as_str())
            .bind(a.now)
            .bind(a.expected)
            .bind(crate::UPDATED_AT_GRAIN_MS)
            .bind(epoch)
            .bind(&columns.seqs)
            .bind(&columns.tss)
            .bind(&columns.vs)
            .bind(&columns.kinds)
            .bind(&columns.payloads)
            .bind(&columns.epochs)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict {
                        session: a.id.to_owned(),
                        expected: a.expected.unsigned_abs(),
                        actual: a.last.unsigned_abs(),
                    }
                } else {
                    self.err(&ctx(), e)
                }
            })?;
        let (updated, owner, host, pid, lease_epoch, expires_at, request) = answer;
        if updated > 0 {
            return Ok(());
        }
        let lease = match (owner, host, pid, lease_epoch, expires_at) {
            (Some(owner), Some(host), Some(pid), Some(e), Some(x)) => {
                Some(lease::from_row(a.id, (owner, host, pid, e, x, request))?)
            }
            _ => None,
        };
        lease::fence(a.id, a.epoch, lease.as_ref(), a.now)?;
        let actual: Option<i64> = sqlx::query_scalar("SELECT last_seq FROM sessions WHERE id = $1")
            .bind(a.id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.err(&ctx(), e))?;
        Err(match actual {
            None => StoreError::NotFound(a.id.to_owned()),
            Some(n) => StoreError::Conflict {
                session: a.id.to_owned(),
                expected: a.expected.unsigned_abs(),
                actual: u64::try_from(n).map_err(|_| {
                    StoreError::Corrupt(format!("session {}: its last event is numbered {n}", a.id))
                })?,
            },
        })
    }

    pub(crate) fn err(&self, context: &str, e: sqlx::Error) -> StoreError {
        match e {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
                StoreError::Unavailable {
                    target: self.target.clone(),
                    source: Box::new(e),
                }
            }
            e => StoreError::sql(format!("{context} ({})", self.target), e),
        }
    }

    /// Checks, inside an append's transaction, that a batch written at `epoch` may be appended
    /// (see `lease::fence`). The lease row is locked for the rest of the transaction, so a
    /// process taking the session over waits for this append and then sees it.
    async fn fence(
        &self,
        id: &str,
        epoch: u64,
        now: i64,
        tx: &mut PgConnection,
    ) -> Result<(), StoreError> {
        let row: Option<lease::Row> =
            sqlx::query_as(&format!("{} FOR SHARE", lease::select_sql(lease::dollar)))
                .bind(id)
                .fetch_optional(tx)
                .await
                .map_err(|e| self.err(&format!("cannot read the lease of session {id}"), e))?;
        let current = row.map(|r| lease::from_row(id, r)).transpose()?;
        lease::fence(id, epoch, current.as_ref(), now)
    }
}

impl SessionLog for PgStore {
    crate::sql_log::sql_log_reads!(POSTGRES, sqlx::Postgres);
    crate::sql_log::sql_name_agent!(POSTGRES);

    fn set_durability(&self, durability: Durability) {
        self.full
            .store(durability == Durability::Full, Ordering::Release);
    }

    async fn create(&self, s: NewSession, now: i64) -> Result<SessionRecord, StoreError> {
        self.create_with(s, &[], SessionStatus::Running, now).await
    }

    async fn create_with(
        &self,
        s: NewSession,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> Result<SessionRecord, StoreError> {
        check_batch(&s.id, 0, events)?;
        let columns = Columns::of(&s.id, events)?;
        let metadata = row::encode_metadata(&s)?;
        let last = row::to_i64("sequence number", events.len() as u64)?;
        let ctx = || format!("cannot create session {}", s.id);
        let mut tx = self.pool.begin().await.map_err(|e| self.err(&ctx(), e))?;
        self.commit_at(&mut tx).await?;
        self.fence(&s.id, crate::epoch_of(events), now, &mut tx)
            .await?;
        match insert_session(&s, &metadata, status, now, last)
            .execute(&mut *tx)
            .await
        {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(StoreError::Exists(s.id)),
            Err(e) => return Err(self.err(&ctx(), e)),
        }
        if !events.is_empty() {
            columns
                .insert(&s.id, &mut tx)
                .await
                .map_err(|e| self.err(&ctx(), e))?;
        }
        tx.commit().await.map_err(|e| self.err(&ctx(), e))?;
        let mut rec = row::record(s, now, events.len() as u64);
        rec.status = status;
        Ok(rec)
    }

    async fn create_many(
        &self,
        batch: &[NewLog],
        now: i64,
    ) -> Result<Vec<Option<StoreError>>, StoreError> {
        let ctx = || format!("cannot create a batch of {} sessions", batch.len());
        let mut answers: Vec<Option<StoreError>> = Vec::with_capacity(batch.len());
        let mut seen = std::collections::HashSet::new();
        for n in batch {
            check_batch(&n.session.id, 0, &n.events)?;
            answers.push(
                (!seen.insert(n.session.id.as_str()))
                    .then(|| StoreError::Exists(n.session.id.clone())),
            );
        }
        let ids: Vec<&str> = batch.iter().map(|n| n.session.id.as_str()).collect();
        let mut tx = self.pool.begin().await.map_err(|e| self.err(&ctx(), e))?;
        self.commit_at(&mut tx).await?;
        // The fence of each, as `create_with` checks it: the lease rows stay locked until the
        // commit.
        let leases: Vec<SessionLease> = sqlx::query_as(
            "SELECT session, owner, host, pid, epoch, expires_at, request FROM leases \
                 WHERE session = ANY($1) FOR SHARE",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.err(&ctx(), e))?;
        let mut held = BTreeMap::new();
        for (session, owner, host, pid, epoch, expires_at, request) in leases {
            let l = lease::from_row(&session, (owner, host, pid, epoch, expires_at, request))?;
            held.insert(session, l);
        }
        let mut rows = SessionColumns::default();
        for (n, answer) in batch.iter().zip(answers.iter_mut()) {
            if answer.is_some() {
                continue;
            }
            let id = &n.session.id;
            if let Err(e) = lease::fence(id, crate::epoch_of(&n.events), held.get(id), now) {
                *answer = Some(e);
                continue;
            }
            rows.push(n)?;
        }
        let created: Vec<String> = sqlx::query_scalar(
            "INSERT INTO sessions (id, user_id, agent, reference_id, metadata, parent_id, status, \
             created_at, updated_at, last_seq) \
             SELECT u.id, u.user_id, u.agent, u.reference_id, u.metadata::json, u.parent_id, \
             u.status, $9, $9, u.last_seq \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
             $7::text[], $8::int8[]) AS u(id, user_id, agent, reference_id, metadata, parent_id, \
             status, last_seq) \
             ON CONFLICT (id) DO NOTHING RETURNING id",
        )
        .bind(&rows.ids)
        .bind(&rows.users)
        .bind(&rows.agents)
        .bind(&rows.references)
        .bind(&rows.metadata)
        .bind(&rows.parents)
        .bind(&rows.statuses)
        .bind(&rows.lasts)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.err(&ctx(), e))?;
        let created: std::collections::HashSet<String> = created.into_iter().collect();
        let mut events = Columns::default();
        let mut owners: Vec<&str> = Vec::new();
        for (n, answer) in batch.iter().zip(answers.iter_mut()) {
            if answer.is_some() {
                continue;
            }
            if !created.contains(&n.session.id) {
                *answer = Some(StoreError::Exists(n.session.id.clone()));
                continue;
            }
            events.extend(&n.session.id, &n.events)?;
            owners.extend(std::iter::repeat_n(n.session.id.as_str(), n.events.len()));
        }
        if !owners.is_empty() {
            events
                .insert_of(&owners, &mut tx)
                .await
                .map_err(|e| self.err(&ctx(), e))?;
        }
        tx.commit().await.map_err(|e| self.err(&ctx(), e))?;
        Ok(answers)
    }

    async fn append(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> Result<(), StoreError> {
        self.write(id, expected_seq, events, status, now, None)
            .await
    }

    async fn append_with_snapshot(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
        snapshot: &Encoded,
    ) -> Result<(), StoreError> {
        crate::check_snapshot(id, expected_seq, events, snapshot)?;
        self.write(id, expected_seq, events, status, now, Some(snapshot))
            .await
    }
}

impl crate::Usage for PgStore {
    crate::usage::sql_usage_methods!(lease::dollar);
}

impl crate::Crons for PgStore {
    crate::cron::sql_cron_methods!(lease::dollar);
}

impl crate::RunQueue for PgStore {
    crate::queue::sql_queue_methods!(lease::dollar);
}

impl Leases for PgStore {
    lease::sql_lease_methods!(lease::dollar);

    async fn claim(
        &self,
        owner: &Owner,
        agents: &[String],
        now: i64,
        ttl_ms: i64,
        limit: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        let ctx = "cannot claim sessions to run";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut tx = self.pool.begin().await.map_err(|e| self.err(ctx, e))?;
        // The candidates stay locked until the leases are taken: another worker claiming at the
        // same moment skips them rather than waiting or taking them too. Sessions whose owner
        // stopped come first, by their lease rows (see `lease::expired_sql`), then sessions that
        // never had a lease, by their session rows.
        let agents_sql = "= ANY($1::text[])";
        let mut ids: Vec<String> = sqlx::query_scalar(&lease::expired_sql(
            lease::dollar,
            agents_sql,
            "s.last_seq > 0",
            "FOR UPDATE OF l SKIP LOCKED",
        ))
        .bind(agents)
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.err(ctx, e))?;
        let left = limit.saturating_sub(i64::try_from(ids.len()).unwrap_or(i64::MAX));
        if left > 0 {
            let unleased: Vec<String> = sqlx::query_scalar(&lease::unleased_sql(
                lease::dollar,
                agents_sql,
                "s.last_seq > 0",
                "FOR UPDATE OF s SKIP LOCKED",
            ))
            .bind(agents)
            .bind(left)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.err(ctx, e))?;
            ids.extend(unleased);
        }
        let mut got = Vec::with_capacity(ids.len());
        let expires_at = now.saturating_add(ttl_ms);
        for id in ids {
            let epoch = lease::acquire_query!(lease::dollar, &id, owner, expires_at, now, false)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.err(ctx, e))?;
            // None: a process that is not a worker (`weft resume`) took it meanwhile.
            if let Some(epoch) = epoch {
                got.push(Lease {
                    epoch: lease::read_epoch(&id, epoch)?,
                    session: id,
                    owner: owner.clone(),
                    expires_at,
                    request: None,
                });
            }
        }
        tx.commit().await.map_err(|e| self.err(ctx, e))?;
        Ok(got)
    }

    async fn waiting(&self, now: i64) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(&lease::waiting_sql(lease::dollar, "s.last_seq > 0"))
            .bind(now)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.err("cannot count the sessions waiting for a worker", e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn wake(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(lease::WORK_CHANNEL)
            .execute(&self.pool)
            .await
            .map_err(|e| self.err("cannot tell the workers about new work", e))?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // A connection lent unchecked (see `CHECK_AFTER_REST`) may be one the server dropped
        // since: it is closed on its failure, and the next one is tried, so that a server that
        // is up is said to be up.
        let mut dead = 0;
        loop {
            match sqlx::query("SELECT 1").execute(self.lease_pool()).await {
                Ok(_) => return Ok(()),
                Err(e) if crate::connection_lost(&e) && dead < LEASE_POOL_SIZE => dead += 1,
                Err(e) => return Err(self.err("cannot reach the store", e)),
            }
        }
    }

    async fn wait_for_work(&self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        let mut slot = self.listener.lock().await;
        if slot.is_none() {
            let listening = async {
                let mut l = PgListener::connect_with(&self.pool).await?;
                l.listen(lease::WORK_CHANNEL).await?;
                Ok::<_, sqlx::Error>(l)
            };
            match tokio::time::timeout(max, listening).await {
                Ok(Ok(l)) => *slot = Some(l),
                // Without a listener, the wait is a plain poll.
                _ => {
                    tokio::time::sleep_until(deadline).await;
                    return;
                }
            }
        }
        if let Some(l) = slot.as_mut() {
            match tokio::time::timeout_at(deadline, l.recv()).await {
                Ok(Ok(_)) | Err(_) => {}
                // A dropped connection: listen again next time.
                Ok(Err(_)) => *slot = None,
            }
        }
    }
}

/// Replaces a session's snapshot head, and its conversation's parts from the new part on.
async fn write_snapshot(
    id: &str,
    snap: &Encoded,
    tx: &mut PgConnection,
) -> Result<(), sqlx::Error> {
    let seq = i64::try_from(snap.seq).unwrap_or(i64::MAX);
    sqlx::query("DELETE FROM snapshots WHERE session_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO snapshots (session_id, seq, state, v) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(seq)
        .bind(&snap.head)
        .bind(i32::try_from(snap.version).unwrap_or(i32::MAX))
        .execute(&mut *tx)
        .await?;
    if let Some(part) = &snap.part {
        let start = i64::try_from(part.start).unwrap_or(i64::MAX);
        sqlx::query("DELETE FROM snapshot_parts WHERE session_id = $1 AND start >= $2")
            .bind(id)
            .bind(start)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO snapshot_parts (session_id, start, part) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(start)
            .bind(&part.text)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Inserts a session row. JSON goes in as text (`$5::json`): a `jsonb` parameter could not hold
/// a NUL character.
fn insert_session<'q>(
    s: &'q NewSession,
    metadata: &'q str,
    status: SessionStatus,
    now: i64,
    last_seq: i64,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(
        "INSERT INTO sessions (id, user_id, agent, reference_id, metadata, parent_id, status, \
         created_at, updated_at, last_seq) VALUES ($1, $2, $3, $4, $5::json, $6, $7, $8, $8, $9)",
    )
    .bind(&s.id)
    .bind(&s.user_id)
    .bind(&s.agent)
    .bind(&s.reference_id)
    .bind(metadata)
    .bind(&s.parent_id)
    .bind(status.as_str())
    .bind(now)
    .bind(last_seq)
}

/// Sessions' rows as the columns `UNNEST` takes (see [`PgStore::create_many`]).
#[derive(Default)]
struct SessionColumns {
    ids: Vec<String>,
    users: Vec<Option<String>>,
    agents: Vec<String>,
    references: Vec<Option<String>>,
    metadata: Vec<String>,
    parents: Vec<Option<String>>,
    statuses: Vec<&'static str>,
    lasts: Vec<i64>,
}

impl SessionColumns {
    fn push(&mut self, n: &NewLog) -> Result<(), StoreError> {
        let s = &n.session;
        self.metadata.push(row::encode_metadata(s)?);
        self.lasts
            .push(row::to_i64("sequence number", n.events.len() as u64)?);
        self.ids.push(s.id.clone());
        self.users.push(s.user_id.clone());
        self.agents.push(s.agent.clone());
        self.references.push(s.reference_id.clone());
        self.parents.push(s.parent_id.clone());
        self.statuses.push(n.status.as_str());
        Ok(())
    }
}

/// A batch's rows as the columns `UNNEST` takes.
#[derive(Default)]
pub(crate) struct Columns {
    pub(crate) seqs: Vec<i64>,
    pub(crate) tss: Vec<i64>,
    pub(crate) vs: Vec<i32>,
    pub(crate) kinds: Vec<&'static str>,
    pub(crate) payloads: Vec<String>,
    pub(crate) epochs: Vec<i64>,
}

impl Columns {
    fn of(id: &str, events: &[Envelope]) -> Result<Self, StoreError> {
        let mut c = Self::default();
        c.extend(id, events)?;
        Ok(c)
    }

    /// How many rows.
    pub(crate) fn len(&self) -> usize {
        self.seqs.len()
    }

    /// Adds another batch's rows after these.
    pub(crate) fn append(&mut self, other: &Columns) {
        self.seqs.extend_from_slice(&other.seqs);
        self.tss.extend_from_slice(&other.tss);
        self.vs.extend_from_slice(&other.vs);
        self.kinds.extend_from_slice(&other.kinds);
        self.payloads.extend_from_slice(&other.payloads);
        self.epochs.extend_from_slice(&other.epochs);
    }

    /// Adds the rows of session `id`'s `events`.
    fn extend(&mut self, id: &str, events: &[Envelope]) -> Result<(), StoreError> {
        for e in events {
            let r = row::encode(id, e)?;
            self.seqs.push(r.seq);
            self.tss.push(r.ts);
            self.vs.push(r.v);
            self.kinds.push(r.kind);
            self.payloads.push(r.payload);
            self.epochs.push(r.epoch);
        }
        Ok(())
    }

    /// Inserts the rows as events of the sessions `sessions` names, row by row, in one
    /// statement.
    async fn insert_of(
        &self,
        sessions: &[&str],
        conn: &mut PgConnection,
    ) -> Result<sqlx::postgres::PgQueryResult, sqlx::Error> {
        sqlx::query(
            "INSERT INTO events (session_id, seq, ts, v, type, payload, epoch) \
             SELECT u.session_id, u.seq, u.ts, u.v, u.type, u.payload::json, u.epoch \
             FROM UNNEST($1::text[], $2::int8[], $3::int8[], $4::int4[], $5::text[], $6::text[], \
             $7::int8[]) AS u(session_id, seq, ts, v, type, payload, epoch)",
        )
        .bind(sessions)
        .bind(&self.seqs)
        .bind(&self.tss)
        .bind(&self.vs)
        .bind(&self.kinds)
        .bind(&self.payloads)
        .bind(&self.epochs)
        .execute(conn)
        .await
    }

    /// Inserts the rows as events of session `id`, in one statement.
    async fn insert(
        &self,
        id: &str,
        conn: &mut PgConnection,
    ) -> Result<sqlx::postgres::PgQueryResult, sqlx::Error> {
        self.insert_of(&vec![id; self.len()], conn).await
    }
}

/// What an append in one statement writes (see [`PgStore::append_in_one`]).
struct OneAppend<'a> {
    id: &'a str,
    /// The last sequence number the writer has seen.
    expected: i64,
    /// The sequence number of the batch's last event.
    last: i64,
    epoch: u64,
    status: SessionStatus,
    now: i64,
}

/// A lease row with its session: the session, then the columns of [`lease::Row`].
type SessionLease = (String, String, String, i64, i64, i64, Option<String>);

/// What [`APPEND_IN_ONE`] returns: the session rows moved on, then the lease row's columns.
type OneAnswer = (
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

/// An append in one statement (see [`PgStore::append_in_one`]). Parameters: session, last
/// sequence number after the append, status, now, expected last sequence number, the
/// `updated_at` grain, the batch's epoch, then the event columns as in [`Columns::insert`].
/// The fence is [`lease::fence`]'s rule: at epoch 0 no lease may be live, at any other epoch the
/// lease must be of that epoch. It returns the number of session rows moved on (0 or 1) and the
/// lease row it read (all null without one).
const APPEND_IN_ONE: &str = "\
WITH l AS (
    SELECT owner, host, pid, epoch, expires_at, request FROM leases WHERE session = $1 FOR SHARE
), u AS (
    UPDATE sessions SET last_seq = $2, status = $3,
        updated_at = CASE WHEN status <> $3 OR updated_at <= $4 - $6 THEN $4 ELSE updated_at END
    WHERE id = $1 AND last_seq = $5
      AND CASE WHEN $7 = 0 THEN NOT EXISTS (SELECT 1 FROM l WHERE l.expires_at > $4)
               ELSE EXISTS (SELECT 1 FROM l WHERE l.epoch = $7) END
    RETURNING 1
), i AS (
    INSERT INTO events (session_id, seq, ts, v, type, payload, epoch)
    SELECT $1, e.seq, e.ts, e.v, e.type, e.payload::json, e.epoch
    FROM UNNEST($8::int8[], $9::int8[], $10::int4[], $11::text[], $12::text[], $13::int8[])
        AS e(seq, ts, v, type, payload, epoch)
    WHERE EXISTS (SELECT 1 FROM u)
)
SELECT (SELECT count(*) FROM u), l.owner, l.host, l.pid, l.epoch, l.expires_at, l.request
FROM (SELECT 1) AS one LEFT JOIN l ON true";

fn parse(url: &str) -> Result<PgConnectOptions, StoreError> {
    PgConnectOptions::from_str(url).map_err(|e| StoreError::BadSpec {
        spec: url.to_owned(),
        reason: e.to_string(),
    })
}

fn target(opts: &PgConnectOptions) -> String {
    format!("PostgreSQL at {}:{}", opts.get_host(), opts.get_port())
}

/// One connection, or [`StoreError::Unavailable`] with the reason (refused, timed out, ...).
async fn open_conn(opts: &PgConnectOptions, target: &str) -> Result<PgConnection, StoreError> {
    let unavailable = |source: sqlx::Error| StoreError::Unavailable {
        target: target.to_owned(),
        source: Box::new(source),
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(opts)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(refused(&e, target).unwrap_or_else(|| unavailable(e))),
        Err(_) => Err(unavailable(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {} seconds", CONNECT_TIMEOUT.as_secs()),
        )))),
    }
}

/// The server's refusal of the URL itself (no such database or role, a wrong password), which
/// is the user's to fix, told from an outage, which waiting may fix.
fn refused(e: &sqlx::Error, target: &str) -> Option<StoreError> {
    let db = e.as_database_error()?;
    let fix = match db.code()?.as_ref() {
        // invalid_catalog_name
        "3D000" => "create the database (`createdb NAME`) or name one that exists in the URL",
        // invalid_authorization_specification, invalid_password
        "28000" | "28P01" => {
            "name a role that exists in the URL (`postgres://ROLE@HOST/DB`) and its password"
        }
        _ => return None,
    };
    Some(StoreError::Refused {
        target: target.to_owned(),
        reason: db.message().to_owned(),
        fix,
    })
}

/// What the server does without being asked, read on one connection (which also shows that the
/// server answers: a pool alone would retry a refused connection until its timeout and then
/// report only the timeout).
struct ServerSettings {
    synchronous_commit: String,
    fsync: String,
}

async fn server_settings(
    opts: &PgConnectOptions,
    target: &str,
) -> Result<ServerSettings, StoreError> {
    let mut conn = open_conn(opts, target).await?;
    let sql_err = |e| StoreError::sql(format!("cannot read the server's settings ({target})"), e);
    let synchronous_commit: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut conn)
        .await
        .map_err(sql_err)?;
    let fsync: String = sqlx::query_scalar("SHOW fsync")
        .fetch_one(&mut conn)
        .await
        .map_err(sql_err)?;
    let _ = conn.close().await;
    Ok(ServerSettings {
        synchronous_commit,
        fsync,
    })
}

/// How many connections the store's appends and reads share.
const POOL_SIZE: u32 = 8;

/// How many connections the store's lease writes have to themselves (see [`PgStore::leases`]).
const LEASE_POOL_SIZE: u32 = 2;

/// A connection that rested in the pool for longer than this is checked (a round trip) before
/// it is lent. One that rested less was checked when it came back (sqlx pings each connection
/// as it is returned), so checking it again would cost every statement a second round trip for
/// a connection the server would have had to drop in that moment; a statement on such a one
/// fails as a dropped connection, which the callers treat as an outage that may pass (and
/// [`crate::Leases::ping`] tries again at once).
const CHECK_AFTER_REST: Duration = Duration::from_secs(1);

/// A pool of `size` connections, connecting lazily with `opts`.
fn pool(opts: &PgConnectOptions, size: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(CONNECT_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for < CHECK_AFTER_REST {
                    return Ok(true);
                }
                // A failed check closes the connection; the pool lends or opens another.
                Ok(conn.ping().await.is_ok())
            })
        })
        .connect_lazy_with(opts.clone())
}

/// Creates `schema` when it is missing (under the migration lock: two processes creating one
/// schema at once would collide).
async fn create_schema(opts: &PgConnectOptions, schema: &str) -> Result<(), StoreError> {
    if schema.is_empty()
        || !schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(StoreError::BadSpec {
            spec: schema.to_owned(),
            reason: "a schema name must be letters, digits and underscores".into(),
        });
    }
    let target = target(opts);
    let mut conn = open_conn(opts, &target).await?;
    let sql_err = |e| StoreError::sql(format!("cannot create the schema {schema} ({target})"), e);
    let mut tx = conn.begin().await.map_err(sql_err)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(sql_err)?;
    tx.execute(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"").as_str())
        .await
        .map_err(sql_err)?;
    tx.commit().await.map_err(sql_err)?;
    let _ = conn.close().await;
    Ok(())
}

async fn migrate(pool: &PgPool, target: &str) -> Result<(), StoreError> {
    let sql_err = |context: String| {
        let target = target.to_owned();
        move |e| StoreError::sql(format!("{context} ({target})"), e)
    };
    let ctx = || "cannot bring the database schema up to date".to_owned();
    let mut tx = pool.begin().await.map_err(sql_err(ctx()))?;
    // A migration may take long, and others starting meanwhile wait for its lock: the bounds of
    // owners' statements (see `PgBounds`) do not apply to it.
    tx.execute(
        "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; \
         SET LOCAL idle_in_transaction_session_timeout = 0",
    )
    .await
    .map_err(sql_err(ctx()))?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(sql_err(ctx()))?;
    tx.execute(
        "CREATE TABLE IF NOT EXISTS weft_schema (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )
    .await
    .map_err(sql_err(ctx()))?;
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM weft_schema")
        .fetch_one(&mut *tx)
        .await
        .map_err(sql_err(ctx()))?;
    if current > POSTGRES_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            place: format!("the database ({target})"),
            found: current,
            known: POSTGRES_SCHEMA_VERSION,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.execute(*sql)
            .await
            .map_err(sql_err(format!("cannot apply schema migration {version}")))?;
        sqlx::query(
            "INSERT INTO weft_schema (version, applied_at) \
             VALUES ($1, (EXTRACT(EPOCH FROM now()) * 1000)::bigint)",
        )
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(sql_err(ctx()))?;
    }
    tx.commit().await.map_err(sql_err(ctx()))?;
    Ok(())
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}
