//! Session stores. A session is a row of metadata and an append-only log of events; the log is
//! the checkpoint. Appends carry the sequence number the writer expects to follow, so two
//! writers of one session cannot interleave: one wins, the other gets [`StoreError::Conflict`].
//!
//! Backends: [`SqliteStore`] (one file, the default), [`PgStore`] (a PostgreSQL URL, for many
//! processes) and [`RamStore`]; [`AnyStore::open`] picks one from a `--db` string. The SQL
//! stores share one layout (`migrations/sqlite`, `migrations/postgres`), versioned in a
//! `weft_schema` table and brought up to date when a store is opened:
//!
//! - `sessions(id, user_id, agent, reference_id, metadata, parent_id, status, created_at,
//!   updated_at, ...)`, indexed for listing by update time, user and status;
//! - `events(session, seq, ts, v, type, payload)`, one row per event, unique by session and
//!   `seq`; `payload` is the event's JSON object without the four keys that have their own
//!   columns;
//! - `snapshots(session, seq, state, v)`, the newest snapshot's head (see
//!   [`weft_core::snapshot`]), and `snapshot_parts(session, start, part)`, the conversation's
//!   parts, each written once;
//! - `usage_counters(user_id, period, input_tokens, output_tokens, cost_usd, model_calls,
//!   updated_at)`, what each user spent per quota period ([`Usage`]);
//! - `crons(id, user_id, assistant_id, thread_id, schedule, payload, ..., next_run_at,
//!   claimed_tick, ...)`, the schedules `weft serve` starts runs by ([`Crons`]).
//!
//! **Durability.** Every store commits an append at a [`Durability`] (`full` by default): the
//! SQLite store syncs its write-ahead log at every commit with `full` (`synchronous=FULL`) and
//! not with `normal`; the PostgreSQL store commits with `synchronous_commit=on` (or the server's
//! stronger setting) or `off`. [`Settings`] reads back what is in effect. Group commit keeps
//! `full` cheap under concurrency: the SQLite store writes every append waiting at a moment in
//! one transaction, so one sync serves many sessions.
//!
//! The two differ in how a session is keyed. PostgreSQL keys events by the session's id and
//! keeps `last_seq` in the session row (schema 1). SQLite (schema 2) gives each session an
//! integer key, stores events in the order they were appended and reads a session's last
//! sequence number from its log, so that an append writes at the end of one table rather than
//! rewriting the session row and its indexes (see `migrations/sqlite/0002_append_log.sql`).
//!
//! Every store sets a session's `updated_at` by the same rule: an append records its time when
//! it changes the status, or when the stored time is [`UPDATED_AT_GRAIN_MS`] or more behind it.
//! A session busy with many appends a second thus rewrites its row about once a second.
#![warn(missing_docs, unreachable_pub)]

mod any;
pub(crate) mod cron;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod knowledge;
mod lease;
mod pg_appends;
mod postgres;
pub(crate) mod queue;
mod ram;
mod row;
mod sql_log;
mod sqlite;
mod sqlite_writer;
mod usage;

use std::future::Future;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_core::snapshot::Encoded;
use weft_core::{Envelope, SessionStatus};

pub use weft_core::Durability;

pub use any::AnyStore;
pub use knowledge::{Embedding, Hit, Kind, Knowledge, Listed, NewEntry, Scope, Shelf, fuse};
pub use lease::{DEFAULT_LEASE, time as lease_time};
pub use postgres::{PgBounds, PgStore};
pub use ram::RamStore;
pub use sqlite::SqliteStore;

/// The version of the SQLite schema this build writes and reads. A database whose schema is
/// newer is refused with [`StoreError::NewerSchema`].
pub const SQLITE_SCHEMA_VERSION: i64 = 11;

/// The version of the PostgreSQL schema this build writes and reads.
pub const POSTGRES_SCHEMA_VERSION: i64 = 12;

/// How far behind an append's time a session's `updated_at` may stay when the append does not
/// change the session's status, in milliseconds.
pub const UPDATED_AT_GRAIN_MS: i64 = 1000;

/// The `updated_at` a session has after an append at `now` that leaves it with `status`.
pub fn updated_at_after(
    stored: i64,
    stored_status: SessionStatus,
    status: SessionStatus,
    now: i64,
) -> i64 {
    if stored_status != status || stored <= now - UPDATED_AT_GRAIN_MS {
        now
    } else {
        stored
    }
}

/// A session to create.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewSession {
    /// The session's id, unique in the store.
    pub id: String,
    /// The user the session belongs to; None for a session without one (the command line's).
    pub user_id: Option<String>,
    /// The agent that runs the session, as its file's name.
    pub agent: String,
    /// An outside reference, e.g. a chat id.
    pub reference_id: Option<String>,
    /// Free-form JSON the caller attaches to the session (null when there is none).
    pub metadata: Value,
    /// The session this one was forked from or runs under (a sub-agent's parent).
    pub parent_id: Option<String>,
}

/// A session to create with the start of its log (see [`SessionLog::create_many`]).
#[derive(Clone, Debug)]
pub struct NewLog {
    /// The session.
    pub session: NewSession,
    /// The first events of its log, numbered from 1.
    pub events: Vec<Envelope>,
    /// Its status after them.
    pub status: SessionStatus,
}

/// A stored session's metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session's id.
    pub id: String,
    /// The user the session belongs to, as given at creation.
    pub user_id: Option<String>,
    /// The agent that runs the session.
    pub agent: String,
    /// An outside reference given at creation, e.g. a chat id.
    pub reference_id: Option<String>,
    /// The JSON given at creation.
    pub metadata: Value,
    /// The session this one was forked from or runs under; None for a top-level session.
    pub parent_id: Option<String>,
    /// The status the last append left the session in.
    pub status: SessionStatus,
    /// Unix milliseconds.
    pub created_at: i64,
    /// The time of the last append that changed the status, or of a later append at most
    /// [`UPDATED_AT_GRAIN_MS`] before the last one (see [`updated_at_after`]).
    pub updated_at: i64,
    /// The sequence number of the last event.
    pub last_seq: u64,
}

/// A stored snapshot's head: the newest of a session (see [`weft_core::snapshot`], which reads
/// it and says which parts of the conversation a load needs, [`SessionLog::snapshot_parts`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The snapshot covers the log up to this event.
    pub seq: u64,
    /// The version it was written at (0: written before snapshots had versions).
    pub version: u32,
    /// The head, as JSON text.
    pub head: String,
}

/// The durability a store writes at, and the settings behind it as the database reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// The durability the store was opened with.
    pub durability: Durability,
    /// Read back from the database, e.g. `synchronous` = `2` (FULL) for SQLite,
    /// `synchronous_commit` = `on` for PostgreSQL. Empty for a store in memory.
    pub read_back: std::collections::BTreeMap<String, String>,
}

/// Checks that a snapshot written with a batch numbered from `expected_seq + 1` is not ahead of
/// the log once the batch is written.
pub fn check_snapshot(
    id: &str,
    expected_seq: u64,
    events: &[Envelope],
    snapshot: &Encoded,
) -> Result<(), StoreError> {
    let last = expected_seq + events.len() as u64;
    if snapshot.seq > last {
        return Err(StoreError::OutOfRange {
            session: id.to_owned(),
            seq: snapshot.seq,
            last,
        });
    }
    Ok(())
}

/// Which sessions to list.
#[derive(Clone, Debug, Default)]
pub struct ListFilter {
    /// Only this user's sessions; None for every user's.
    pub user_id: Option<String>,
    /// Only sessions in this status; None for any status.
    pub status: Option<SessionStatus>,
    /// At most this many sessions; None for all of them.
    pub limit: Option<usize>,
}

/// The error behind a failed query, connection or write, boxed so that no database driver's
/// types are part of this crate's API.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An append expected the log to end at another event: another writer appended first.
    #[error(
        "session {session} was changed by another writer (expected to append after event {expected}, but the log ends at {actual}); reload the session and try again"
    )]
    Conflict {
        /// The session's id.
        session: String,
        /// The sequence number the append expected the log to end at.
        expected: u64,
        /// The sequence number the log ends at.
        actual: u64,
    },
    /// No session has this id.
    #[error("no session {0}; `weft sessions list` shows the sessions there are")]
    NotFound(String),
    /// A session with this id was already created.
    #[error("session {0} already exists")]
    Exists(String),
    /// A value read back from the store is not one this build could have written (a negative
    /// epoch or sequence number, a lease naming no process, JSON that does not parse...). Never
    /// read as a default.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A query or a write failed; `context` says what was being done and where.
    #[error("{context}: {source}")]
    Query {
        /// What was being done and where.
        context: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// A write broke a rule the database enforces (a reference to a row that is not there, a
    /// value a column does not take), other than the conflicts that have their own variants.
    #[error("{context}: {source}")]
    Constraint {
        /// What was being written and where.
        context: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// A value that cannot be stored: a number too large for its column, an event or metadata
    /// that does not encode as JSON.
    #[error("cannot store {what}: {reason}")]
    Unstorable {
        /// The value, e.g. `sequence number 18446744073709551615`.
        what: String,
        /// Why it cannot be stored.
        reason: String,
    },
    /// A file the store needs could not be made or read.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The store was closed (by [`SqliteStore::close`] or [`PgStore::close`]) before the request
    /// was answered.
    #[error("{context}: the store {place} is closed")]
    Closed {
        /// What was being asked of the store.
        context: String,
        /// The store, e.g. its file's path.
        place: String,
    },
    /// The database stayed busy with another connection's work for longer than the store waits.
    #[error("{0}")]
    Busy(String),
    /// A lock of the in-RAM store was poisoned by a panic in another thread.
    #[error("the in-RAM store's {0} were left inconsistent by a panic; start again")]
    Poisoned(&'static str),
    /// The database server could not be reached.
    #[error(
        "cannot connect to {target}: {source}; check that the server is running and the URL is right"
    )]
    Unavailable {
        /// What was being connected to, e.g. `PostgreSQL at 127.0.0.1:5432`.
        target: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The database server answered and refused the URL: its database or role does not exist, or
    /// the password is wrong. A mistake in the URL, not an outage: trying again cannot help.
    #[error("{target} refused the connection: {reason}; {fix}")]
    Refused {
        /// What was being connected to, e.g. `PostgreSQL at 127.0.0.1:5432`.
        target: String,
        /// The server's own words.
        reason: String,
        /// What to do about it.
        fix: &'static str,
    },
    /// The file is not a SQLite database, or it is damaged.
    #[error("{} is not a weft database or is corrupt: {reason}; move it aside or pass another --db", path.display())]
    NotADatabase {
        /// The file's path.
        path: PathBuf,
        /// SQLite's error.
        reason: String,
    },
    /// A database that must already exist does not.
    #[error("no database at {}; run a session first or pass --db", .0.display())]
    NoDatabase(PathBuf),
    /// The database was migrated by a newer build.
    #[error(
        "{place} was written by a newer weft (schema {found}, this build knows {known}); upgrade weft"
    )]
    NewerSchema {
        /// The database, e.g. its file's path.
        place: String,
        /// The schema version the database has.
        found: i64,
        /// The newest schema version this build knows.
        known: i64,
    },
    /// An event in the log has a version this build cannot read.
    #[error(
        "session {session}: event {seq} was written by a newer weft (event version {v}, this build reads up to {known}); upgrade weft"
    )]
    NewerEvent {
        /// The session's id.
        session: String,
        /// The event's sequence number.
        seq: u64,
        /// The event's version.
        v: u32,
        /// The newest event version this build reads.
        known: u32,
    },
    /// A sequence number past the end of a session's log.
    #[error("session {session} has no event {seq} (its log ends at event {last})")]
    OutOfRange {
        /// The session's id.
        session: String,
        /// The sequence number asked for.
        seq: u64,
        /// The sequence number of the log's last event.
        last: u64,
    },
    /// Another process drives the session and its lease has not expired.
    #[error(
        "session {session} is being run by pid {pid} on {host} (its lease runs for {seconds_left} s more, renewed while it runs)"
    )]
    Leased {
        /// The session's id.
        session: String,
        /// The host name of the process that holds the lease.
        host: String,
        /// The process id of the process that holds the lease.
        pid: u32,
        /// Seconds until the lease expires unless it is renewed.
        seconds_left: u64,
    },
    /// This process's lease on the session was taken over (it expired, or was forced).
    #[error("session {0}: this process no longer owns it (its lease was taken over)")]
    LeaseLost(String),
    /// A store specification (`--db`) that names no known store.
    #[error("cannot use {spec:?} as a store: {reason}")]
    BadSpec {
        /// The specification as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl StoreError {
    /// True when the store itself failed (its server unreachable, a query or a write that the
    /// database refused, a dropped connection), as opposed to a request about data that is not
    /// there or not this build's. The CLI gives these their own exit code.
    pub fn is_infrastructure(&self) -> bool {
        matches!(
            self,
            Self::Query { .. } | Self::Constraint { .. } | Self::Unavailable { .. }
        )
    }

    /// True when the same request may well succeed if asked again shortly: the database could
    /// not be reached or dropped the connection (restarted, crashed, shut down by an
    /// administrator), the pool had no connection free in time, a statement was cancelled by
    /// its time bound, or SQLite stayed busy. A refusal about the data (a conflict, a lost
    /// lease, a broken constraint, corrupt rows) is never transient: asking again gets the same
    /// answer.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::Busy(_) => true,
            Self::Query { source, .. } => source
                .downcast_ref::<sqlx::Error>()
                .is_some_and(transient_sqlx),
            _ => false,
        }
    }
}

/// Whether a driver's error says the connection or the server failed rather than the request.
pub(crate) fn transient_sqlx(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| transient_sqlstate(&c)),
        _ => false,
    }
}

/// Whether `e` says that the connection was lost (the server ended it, restarted, or the
/// network dropped it): another connection may work at once.
pub(crate) fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| lost_sqlstate(&c)),
        _ => false,
    }
}

/// PostgreSQL's codes for a connection that is gone: a failed connection (class 08), an
/// operator's or a crash's shutdown of its backend (57P01, 57P02).
fn lost_sqlstate(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02")
}

/// PostgreSQL's codes for a lost connection ([`lost_sqlstate`]), a server that cannot take
/// connections yet (57P03), a statement cancelled by its time bound (57014), too many
/// connections (53300) and a serialization failure or deadlock (40001, 40P01): each can pass
/// by itself.
fn transient_sqlstate(code: &str) -> bool {
    lost_sqlstate(code) || matches!(code, "57P03" | "57014" | "53300" | "40001" | "40P01")
}

impl StoreError {
    /// A failed query: a broken constraint as [`StoreError::Constraint`], the rest as
    /// [`StoreError::Query`].
    pub(crate) fn sql(context: String, e: sqlx::Error) -> Self {
        use sqlx::error::ErrorKind;
        let constraint =
            matches!(&e, sqlx::Error::Database(db) if !matches!(db.kind(), ErrorKind::Other));
        if constraint {
            Self::Constraint {
                context,
                source: Box::new(e),
            }
        } else {
            Self::Query {
                context,
                source: Box::new(e),
            }
        }
    }

    /// A failed write of the SQLite writer, as [`StoreError::sql`] sorts a query's.
    pub(crate) fn write(context: String, e: rusqlite::Error) -> Self {
        let constraint = matches!(
            &e,
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation
        );
        if constraint {
            Self::Constraint {
                context,
                source: Box::new(e),
            }
        } else {
            Self::Query {
                context,
                source: Box::new(e),
            }
        }
    }

    /// A number too large for its column.
    pub(crate) fn too_large(what: &str, n: impl std::fmt::Display) -> Self {
        Self::Unstorable {
            what: format!("{what} {n}"),
            reason: "it is too large for the database".into(),
        }
    }
}

/// A process that drives sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Unique per process run.
    pub id: String,
    /// The host name of the machine the process runs on.
    pub host: String,
    /// The operating system's process id.
    pub pid: u32,
}

/// The right to drive one session until `expires_at` (Unix ms). Each new owner of a session gets
/// the next `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The session's id.
    pub session: String,
    /// The process that holds the lease.
    pub owner: Owner,
    /// Counts the session's owners: one more each time another process takes the lease.
    pub epoch: u64,
    /// When the lease expires unless renewed, Unix milliseconds.
    pub expires_at: i64,
    /// What another process asked of the owner (`cancel`, `pause`), if anything.
    pub request: Option<String>,
}

/// Where sessions live: everything a store does. Implemented for every type that implements
/// the five concerns, [`SessionLog`], [`Leases`], [`Knowledge`], [`Usage`] and [`Crons`]; code
/// that needs only one of them (the runtime needs the log and snapshots) can ask for that one
/// alone.
pub trait Store: SessionLog + Leases + Knowledge + Usage + Crons + RunQueue {}

impl<T: SessionLog + Leases + Knowledge + Usage + Crons + RunQueue> Store for T {}

/// A cron: a schedule on which runs are started, on its thread or on a thread made for each.
#[derive(Clone, Debug, PartialEq)]
pub struct CronRecord {
    /// The cron's id.
    pub id: String,
    /// The user it belongs to; its runs are that user's.
    pub user_id: String,
    /// The assistant (agent) its runs use.
    pub assistant_id: String,
    /// The thread its runs go to; None: a new thread for each run.
    pub thread_id: Option<String>,
    /// The schedule, as given (cron syntax, UTC).
    pub schedule: String,
    /// The body each run is started with, as given.
    pub payload: serde_json::Value,
    /// The cron's own metadata.
    pub metadata: serde_json::Value,
    /// What becomes of a thread made for a run once the run ended (`delete`, `keep`).
    pub on_run_completed: Option<String>,
    /// Whether ticks start runs.
    pub enabled: bool,
    /// No tick after this time (Unix milliseconds).
    pub end_time: Option<i64>,
    /// The next tick (Unix milliseconds); None when there is none.
    pub next_run_at: Option<i64>,
    /// A tick claimed whose run is not stored yet.
    pub claim: Option<CronClaim>,
    /// The last tick taken and what it did.
    pub last: Option<CronTick>,
    /// How many ticks were taken.
    pub ticks: i64,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
}

/// A claimed tick of a cron whose run is not stored yet.
#[derive(Clone, Debug, PartialEq)]
pub struct CronClaim {
    /// The tick (its due time, Unix milliseconds).
    pub tick: i64,
    /// Who claimed it.
    pub owner: String,
    /// Until when the claim holds; another process may take it over after.
    pub expires: i64,
}

/// What a tick did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CronTick {
    /// The tick (its due time, Unix milliseconds).
    pub tick: i64,
    /// The run it started.
    pub run_id: Option<String>,
    /// The thread of that run.
    pub thread_id: Option<String>,
    /// Why it started none (the thread was busy, gone...).
    pub error: Option<String>,
}

/// Crons, shared by every process on the store: each tick of a cron is claimed by one of them
/// (a compare-and-set on the cron's next due time), and the claim is closed once the tick's run
/// is stored.
pub trait Crons: Send + Sync + 'static {
    /// Stores a new cron.
    fn create_cron(&self, c: &CronRecord) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Rewrites what a client may change of cron `c.id` (schedule, payload, metadata,
    /// on_run_completed, enabled, end_time, updated_at); false when there is none. Its next due
    /// time is written only when `reschedule` (its schedule, end time or enabling changed):
    /// otherwise the stored one stays, since a process may have moved it on by claiming a tick
    /// since `c` was read (writing `c`'s back would start that tick again, or skip one due).
    fn update_cron(
        &self,
        c: &CronRecord,
        reschedule: bool,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Cron `id`, if there is one.
    fn cron(&self, id: &str)
    -> impl Future<Output = Result<Option<CronRecord>, StoreError>> + Send;
    /// The crons of `user`, oldest first.
    fn crons_of(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Vec<CronRecord>, StoreError>> + Send;
    /// Deletes cron `id` unless a tick of it is claimed and the claim has not expired at `now`
    /// (its run is being started: deleting it then would let the run start after the delete);
    /// false when it was not deleted (there was none, or a live claim).
    fn delete_cron(
        &self,
        id: &str,
        now: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// At most `limit` enabled crons with a tick due at `now` (and no open claim), or with a
    /// claim that expired, soonest first.
    fn due_crons(
        &self,
        now: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<CronRecord>, StoreError>> + Send;
    /// Claims the tick `due` of cron `id` for `owner` until `expires`, moving its next tick to
    /// `next`: true for the one caller whose compare-and-set on `next_run_at = due` (with no
    /// claim open) succeeded, false for every other.
    fn claim_cron_tick(
        &self,
        id: &str,
        due: i64,
        next: Option<i64>,
        owner: &str,
        expires: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Takes over `claim`, expired at `now`, for `owner` until `expires`: true for the one
    /// caller whose compare-and-set on the claimer succeeded.
    fn reclaim_cron_tick(
        &self,
        id: &str,
        claim: &CronClaim,
        owner: &str,
        now: i64,
        expires: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Closes `owner`'s claim of tick `done.tick` with what it did; false when the claim is not
    /// `owner`'s any more (another process took it over) or the cron is gone.
    fn finish_cron_tick(
        &self,
        id: &str,
        owner: &str,
        done: &CronTick,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A run queued behind another run of its thread (`multitask_strategy: enqueue`), stored before
/// its client is answered so that no process's end loses it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuedRun {
    /// The run's id, as its client was given it.
    pub run_id: String,
    /// The thread it waits for.
    pub thread_id: String,
    /// The user it belongs to.
    pub user_id: String,
    /// What it was started with (the request's body, as the server keeps it).
    pub body: serde_json::Value,
    /// The process that starts it once its thread is free.
    pub owner: String,
    /// When that claim runs out unless renewed (Unix milliseconds): then another process takes
    /// the run over.
    pub expires_at: i64,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// Runs queued behind another run of their thread, shared by every process on the store. A run
/// is claimed by the process that queued it, which renews the claim while it waits; a claim
/// that expired is taken over by another process (a compare-and-set on the claimer), so a run
/// is started once.
pub trait RunQueue: Send + Sync + 'static {
    /// Stores a queued run.
    fn queue_run(&self, q: &QueuedRun) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Queued run `run_id`, if it is still queued.
    fn queued_run(
        &self,
        run_id: &str,
    ) -> impl Future<Output = Result<Option<QueuedRun>, StoreError>> + Send;
    /// The runs queued on `thread_id`, oldest first.
    fn queued_runs_of(
        &self,
        thread_id: &str,
    ) -> impl Future<Output = Result<Vec<QueuedRun>, StoreError>> + Send;
    /// The runs queued for `user_id`, on any thread, oldest first.
    fn queued_runs_of_user(
        &self,
        user_id: &str,
    ) -> impl Future<Output = Result<Vec<QueuedRun>, StoreError>> + Send;
    /// At most `limit` queued runs whose claim expired at `now`, oldest first.
    fn stale_queued_runs(
        &self,
        now: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<QueuedRun>, StoreError>> + Send;
    /// Takes queued run `run_id` over from `from`, whose claim expired at `now`, for `owner`
    /// until `expires_at`: true for the one caller whose compare-and-set succeeded.
    fn take_queued_run(
        &self,
        run_id: &str,
        from: &str,
        now: i64,
        owner: &str,
        expires_at: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Renews every claim of `owner` until `expires_at`.
    fn renew_queued_runs(
        &self,
        owner: &str,
        expires_at: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes queued run `run_id` (it began, ended or was cancelled); nothing when it is gone.
    fn unqueue_run(&self, run_id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// What each user spent per quota period (`weft_core::quota`): one counter per user and period
/// key (`day:2026-11-26`, `month:2026-11`), shared by every process on the store.
pub trait Usage: Send + Sync + 'static {
    /// Adds `used` to `user`'s counter of each of `periods` (period keys), in one atomic write:
    /// adds made at once by many processes are all counted, and a period's first add starts
    /// its counter.
    fn add_usage(
        &self,
        user: &str,
        periods: &[String],
        used: &weft_core::quota::Used,
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// `user`'s counters of `periods`, in their order (zero for a period with no counter yet).
    fn usage(
        &self,
        user: &str,
        periods: &[String],
    ) -> impl Future<Output = Result<Vec<weft_core::quota::Used>, StoreError>> + Send;
}

/// Leases on sessions and the queue of work: who drives a session, and which sessions wait for
/// a worker.
pub trait Leases: Send + Sync + 'static {
    /// Takes the lease on session `id` for `owner` until `now + ttl_ms`: when no one holds it,
    /// when its holder's lease expired (or was released), when `owner` holds it already, or
    /// with `force`. Otherwise [`StoreError::Leased`], naming the holder. The session need not
    /// exist yet (a new run takes its lease before creating it).
    fn acquire(
        &self,
        id: &str,
        owner: &Owner,
        now: i64,
        ttl_ms: i64,
        force: bool,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;
    /// Extends a lease held by `lease.owner` at `lease.epoch`; [`StoreError::LeaseLost`] when
    /// another owner took it.
    fn renew(
        &self,
        lease: &Lease,
        expires_at: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Gives a lease up (it expires now), if it is still this one.
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Asks the process that holds the session's running lease for `what` (`cancel`, `pause`);
    /// false when no process holds it. The owner reads it with [`Leases::lease`].
    fn request(
        &self,
        id: &str,
        what: &str,
        now: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// The session's lease, expired or not, if it ever had one.
    fn lease(&self, id: &str) -> impl Future<Output = Result<Option<Lease>, StoreError>> + Send;
    /// Takes the leases of up to `limit` sessions that no process runs, for a worker: running
    /// sessions (new ones queued by `weft submit`, answered ones, and those whose owner stopped)
    /// of one of `agents`, with no lease or an expired one, least recently updated first. Each
    /// lease comes with the session's next epoch. On PostgreSQL, workers claiming at once skip
    /// each other's candidates (`FOR UPDATE SKIP LOCKED`) instead of waiting for them; every
    /// store takes each lease with the same check as [`Leases::acquire`], so a session is never
    /// claimed twice.
    fn claim(
        &self,
        owner: &Owner,
        agents: &[String],
        now: i64,
        ttl_ms: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Lease>, StoreError>> + Send;
    /// How many sessions wait for a process to run them at `now`: running sessions with events,
    /// of any agent, whose lease ran out or that never had one (new ones queued by `weft
    /// submit`, answered ones, those whose owner stopped). The depth of the queue workers
    /// work down; what [`Leases::claim`] would find for every agent.
    fn waiting(&self, now: i64) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Tells waiting workers that there is work (PostgreSQL: `NOTIFY`; other stores: the
    /// workers of this process). It only shortens their wait: polling finds the work anyway.
    fn wake(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Waits until [`Leases::wake`] is called or `max` has passed.
    fn wait_for_work(&self, max: std::time::Duration) -> impl Future<Output = ()> + Send;
    /// Whether the store answers, asked on the connections lease writes use (PostgreSQL: not
    /// the pool that appends and reads fill under load), so that a busy store is not taken
    /// for an unreachable one.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Sessions, their logs and their snapshots: what the runtime needs.
pub trait SessionLog: Send + Sync + 'static {
    /// Creates a session with no events.
    fn create(
        &self,
        s: NewSession,
        now: i64,
    ) -> impl Future<Output = Result<SessionRecord, StoreError>> + Send;
    /// Creates a session whose log begins with `events` (numbered from 1), leaving it with
    /// `status`. [`StoreError::Exists`] if the id is taken, and then nothing is written. The
    /// SQLite and PostgreSQL stores write both in one transaction; the default checks the
    /// numbering, creates, then appends (a failure between the two leaves a session with no
    /// events, which `weft_runtime` takes over when the same id is started again).
    fn create_with(
        &self,
        s: NewSession,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> impl Future<Output = Result<SessionRecord, StoreError>> + Send {
        async move {
            let id = s.id.clone();
            check_batch(&id, 0, events)?;
            let mut rec = self.create(s, now).await?;
            if !events.is_empty() || status != rec.status {
                self.append(&id, 0, events, status, now).await?;
                rec.last_seq = events.len() as u64;
                rec.updated_at = updated_at_after(rec.updated_at, rec.status, status, now);
                rec.status = status;
            }
            Ok(rec)
        }
    }
    /// Creates many sessions, each as [`SessionLog::create_with`] creates one, and says for
    /// each, in order, whether it was refused: `None` created, `Some` refused (its id is taken,
    /// [`StoreError::Exists`], or a live lease holds it, [`StoreError::Leased`]). A refusal
    /// does not stop the others. `Err` is a failure of the store: the PostgreSQL store, which
    /// writes the whole batch in one transaction, then wrote none of it; the SQLite store, which
    /// hands the batch to its writer at once (up to 1,024 creations to a commit), and the
    /// memory store may have created some (given again, they are refused as taken).
    fn create_many(
        &self,
        batch: &[NewLog],
        now: i64,
    ) -> impl Future<Output = Result<Vec<Option<StoreError>>, StoreError>> + Send {
        async move {
            let mut answers = Vec::with_capacity(batch.len());
            for n in batch {
                match self
                    .create_with(n.session.clone(), &n.events, n.status, now)
                    .await
                {
                    Ok(_) => answers.push(None),
                    Err(e @ (StoreError::Exists(_) | StoreError::Leased { .. })) => {
                        answers.push(Some(e));
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(answers)
        }
    }
    /// Appends a batch atomically. `expected_seq` is the last sequence number the writer has
    /// seen; the batch's events must be numbered from `expected_seq + 1`. `status` is the
    /// session's status after the batch.
    fn append(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A session's metadata.
    fn get(&self, id: &str) -> impl Future<Output = Result<SessionRecord, StoreError>> + Send;
    /// A session's metadata and its whole log.
    fn load(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<(SessionRecord, Vec<Envelope>), StoreError>> + Send;
    /// The events after `after_seq`.
    fn events_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> impl Future<Output = Result<Vec<Envelope>, StoreError>> + Send;
    /// Sessions, newest first.
    fn list(
        &self,
        filter: &ListFilter,
    ) -> impl Future<Output = Result<Vec<SessionRecord>, StoreError>> + Send;
    /// Deletes sessions last updated before `before` (Unix ms), with their events and
    /// snapshots; returns how many sessions. Running and waiting sessions are kept unless
    /// `active` is true (a session waiting for a person may wait for weeks).
    fn prune(
        &self,
        before: i64,
        active: bool,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Deletes session `id` with its events, snapshots and lease ([`StoreError::NotFound`] if
    /// there is none). The caller makes sure no process drives it.
    fn delete(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Replaces session `id`'s metadata and sets its `updated_at` to `now`
    /// ([`StoreError::NotFound`] if there is none).
    fn set_metadata(
        &self,
        id: &str,
        metadata: &serde_json::Value,
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// How far session `id`'s spans were acknowledged by the OTLP collector: the spans closed
    /// by its events up to this sequence number (0 when none were, or there is no session `id`).
    fn exported_through(&self, id: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Moves the export marks of the sessions named forward to the sequence numbers given (a
    /// mark never moves back; a session that is gone is passed over).
    fn set_exported_through(
        &self,
        marks: &[(String, u64)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Names session `id`'s agent when its record has none (a thread made empty over HTTP, then
    /// named by its first run), so that workers, which claim the sessions of their agents, find
    /// it; a record that names an agent is left as it is ([`StoreError::NotFound`] if there is
    /// no session `id`).
    fn name_agent(
        &self,
        id: &str,
        agent: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Appends a batch as [`SessionLog::append`] does and, in the same transaction, a snapshot of
    /// the session's state: its head replaces the session's last one, and its part (the
    /// conversation from `part.start` on) replaces every part from that start on. The snapshot
    /// may not be ahead of the log once the batch is written ([`StoreError::OutOfRange`]).
    /// Snapshots only shorten loading: the log stays the truth.
    #[allow(clippy::too_many_arguments)]
    fn append_with_snapshot(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
        snapshot: &Encoded,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes every append from now on at `durability` (a store with nothing to choose, such
    /// as the in-RAM store, ignores it).
    fn set_durability(&self, durability: Durability) {
        let _ = durability;
    }
    /// The newest snapshot's head; its conversation is in [`SessionLog::snapshot_parts`], and
    /// `events_after(seq)` fold on top of it.
    fn latest_snapshot(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Snapshot>, StoreError>> + Send;
    /// The parts of the conversation that hold its messages from `from` on, `(start, JSON
    /// text)` in order of `start`: the last part that starts at or before `from` (or the first
    /// part, if none does) and every part after it. `from` 0: every part.
    fn snapshot_parts(
        &self,
        id: &str,
        from: u64,
    ) -> impl Future<Output = Result<Vec<(u64, String)>, StoreError>> + Send;
}

/// Checks that a batch is numbered to follow `expected_seq` and written at one epoch.
pub fn check_batch(id: &str, expected_seq: u64, events: &[Envelope]) -> Result<(), StoreError> {
    let epoch = epoch_of(events);
    for (k, e) in events.iter().enumerate() {
        if e.epoch != epoch {
            return Err(StoreError::Corrupt(format!(
                "session {id}: event {} written at epoch {} in a batch written at epoch {epoch}",
                e.seq, e.epoch
            )));
        }
        let want = expected_seq + 1 + k as u64;
        if e.seq != want {
            return Err(StoreError::Corrupt(format!(
                "session {id}: event numbered {} where {want} was expected",
                e.seq
            )));
        }
    }
    Ok(())
}

/// The lease epoch a batch is written at (0: by a writer that holds no lease).
pub fn epoch_of(events: &[Envelope]) -> u64 {
    events.first().map_or(0, |e| e.epoch)
}

/// Takes the leases of `candidates` in order, up to `limit`, passing over those another owner
/// took meanwhile: the second half of [`Leases::claim`] for stores that pick candidates first.
pub(crate) async fn take_each<S: Leases + ?Sized>(
    store: &S,
    candidates: impl IntoIterator<Item = String>,
    owner: &Owner,
    now: i64,
    ttl_ms: i64,
    limit: usize,
) -> Result<Vec<Lease>, StoreError> {
    let mut got = Vec::new();
    for id in candidates {
        if got.len() >= limit {
            break;
        }
        match store.acquire(&id, owner, now, ttl_ms, false).await {
            Ok(l) => got.push(l),
            Err(StoreError::Leased { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
