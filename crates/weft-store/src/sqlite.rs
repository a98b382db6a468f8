//! Sessions in a SQLite file: WAL journal, `synchronous=FULL` or `NORMAL` as the [`Durability`]
//! says, a busy timeout and foreign keys. The default store of a single weft process.
//!
//! Appends (and the snapshots written with them), leases (taken, renewed, let go) and the
//! naming of an empty session's agent go through the group-commit writer, whose durability can
//! change while the store is open ([`SessionLog::set_durability`]): a lease is written in the
//! same transaction as the appends queued beside it, never in a synced transaction of its own
//! that waits for the writer's lock. The pool's connections (pruning, metadata, queued runs,
//! crons, reads) keep the durability the store was opened with: in WAL mode a synced commit
//! makes every earlier commit durable with it.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::Executor;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use std::sync::Arc;

use rusqlite::OptionalExtension;

use tokio::sync::oneshot;
use weft_core::{Envelope, SessionStatus};

use crate::row;
pub(crate) use crate::sqlite_writer::WriteStats;
use crate::sqlite_writer::{Exec, ExecFn, Job, SnapshotRow, Work, Writer};
use crate::{
    Durability, Lease, Leases, NewSession, Owner, SQLITE_SCHEMA_VERSION, SessionLog, SessionRecord,
    Settings, StoreError, check_batch, lease,
};
use weft_core::snapshot::Encoded;

/// The schema migrations, in order: (version, SQL).
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/sqlite/0001_init.sql")),
    (2, include_str!("../migrations/sqlite/0002_append_log.sql")),
    (3, include_str!("../migrations/sqlite/0003_leases.sql")),
    (
        4,
        include_str!("../migrations/sqlite/0004_event_epochs.sql"),
    ),
    (
        5,
        include_str!("../migrations/sqlite/0005_snapshot_parts.sql"),
    ),
    (6, include_str!("../migrations/sqlite/0006_knowledge.sql")),
    (
        7,
        include_str!("../migrations/sqlite/0007_knowledge_vectors.sql"),
    ),
    (8, include_str!("../migrations/sqlite/0008_usage.sql")),
    (9, include_str!("../migrations/sqlite/0009_crons.sql")),
    (
        10,
        include_str!("../migrations/sqlite/0010_queued_runs.sql"),
    ),
    (
        11,
        include_str!("../migrations/sqlite/0011_export_marks.sql"),
    ),
];

/// How long a writer waits for another writer's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How this store reads sessions: a session's last sequence number is read from its log, and
/// its rows elsewhere are keyed by its integer key.
const SQLITE: crate::sql_log::Dialect = crate::sql_log::Dialect {
    p: lease::question,
    session_cols: "id, user_id, agent, reference_id, metadata, parent_id, status, \
         created_at, updated_at, \
         COALESCE((SELECT seq FROM events WHERE session = sessions.pk ORDER BY seq DESC LIMIT 1), 0)",
    of_session: |n| format!("session = (SELECT pk FROM sessions WHERE id = ?{n})"),
    json: |n| format!("?{n}"),
};

/// SQLite's primary result codes that mean the file is not a usable database.
const SQLITE_CORRUPT: i32 = 11;
const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;
const SQLITE_NOTADB: i32 = 26;

/// A store in one SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
    path: PathBuf,
    /// The group-commit writer (see `sqlite_writer`): every append goes through it.
    writer: Arc<Writer>,
    /// Wakes this process's workers (other processes on the file find work by polling).
    work: Arc<tokio::sync::Notify>,
}

impl SqliteStore {
    crate::sql_log::sql_log_rows!(SQLITE, SqliteRow);

    /// Opens the database at `path`, creating the file (and its parent directories) when it is
    /// missing, and brings its schema up to date. Writes at the default durability (`full`).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::default()).await
    }

    /// [`SqliteStore::open`] writing at `durability`.
    pub async fn open_with(
        path: impl AsRef<Path>,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref();
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|source| StoreError::Io {
                    context: format!(
                        "cannot create the directory {} for the database",
                        parent.display()
                    ),
                    source,
                })?;
        }
        Self::open_inner(path, true, durability).await
    }

    /// Opens a database that must already exist, e.g. to list sessions; a missing file is
    /// [`StoreError::NoDatabase`] rather than a new, empty database.
    pub async fn open_existing(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_existing_with(path, Durability::default()).await
    }

    /// [`SqliteStore::open_existing`] writing at `durability`.
    pub async fn open_existing_with(
        path: impl AsRef<Path>,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref();
        match tokio::fs::try_exists(path).await {
            Ok(true) => Self::open_inner(path, false, durability).await,
            Ok(false) => Err(StoreError::NoDatabase(path.to_owned())),
            Err(source) => Err(StoreError::Io {
                context: format!("cannot look for the database {}", path.display()),
                source,
            }),
        }
    }

    /// Opens a `sqlite://PATH` URL (created when missing, like [`SqliteStore::open`]).
    pub async fn open_url(url: &str) -> Result<Self, StoreError> {
        Self::open(url_path(url)?).await
    }

    /// The durability appends are written at, and the writing connection's `synchronous` and
    /// `journal_mode` as it reported them when they were set (a change made with
    /// [`SessionLog::set_durability`] is read back once the next append is written).
    pub fn settings(&self) -> Settings {
        Settings {
            durability: self.writer.durability(),
            read_back: self.writer.read_back(),
        }
    }

    /// How many transactions the writer has committed, and how many appends they carried.
    pub fn write_stats(&self) -> WriteStats {
        self.writer.stats()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies the write-ahead log into the database file and empties the log
    /// (`PRAGMA wal_checkpoint(TRUNCATE)`). While another checkpoint is running (this store's
    /// own checkpointer, or another process's) SQLite refuses at once; this tries again for up
    /// to the store's busy timeout, then fails with [`StoreError::Busy`].
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(1);
        loop {
            // (blocked, pages in the log, pages checkpointed)
            let (blocked, log, done): (i64, i64, i64) =
                sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| self.err("cannot checkpoint the write-ahead log", e))?;
            if blocked == 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::Busy(format!(
                    "cannot checkpoint the write-ahead log of {}: still busy after {} s \
                     ({done} of {log} pages copied); another connection keeps it in use",
                    self.path.display(),
                    BUSY_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Closes every connection; later calls fail.
    pub async fn close(&self) {
        self.writer.close();
        self.pool.close().await;
    }

    async fn open_inner(
        path: &Path,
        create: bool,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let short = check_header(path).await?;
        let opts = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match durability {
                Durability::Full => SqliteSynchronous::Full,
                Durability::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let store_path = path.to_owned();
        // Switching a new file to WAL takes a lock without waiting for it, so processes that
        // open one new file at the same moment can find it busy: try again for a while.
        let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(5);
        let pool = loop {
            let res = SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(opts.clone())
                .await;
            match res {
                Err(e) if is_busy(&e) && tokio::time::Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                other => break other,
            }
        }
        .map_err(|e| match (&short, corruption(&e)) {
            // SQLite agrees that the short file is damaged: say how.
            (Some(reason), Some(_)) => StoreError::NotADatabase {
                path: path.to_owned(),
                reason: reason.clone(),
            },
            _ => open_err(path, e),
        })?;
        if let Some(reason) = short {
            confirm_short(&pool, path, reason).await?;
        }
        migrate(&pool, path).await?;
        let writer = Writer::open(path, BUSY_TIMEOUT, durability)?;
        Ok(Self {
            pool,
            path: store_path,
            writer,
            work: Arc::new(tokio::sync::Notify::new()),
        })
    }

    pub(crate) fn err(&self, context: &str, e: sqlx::Error) -> StoreError {
        sql_error(&self.path, context, e)
    }

    /// An append (with a snapshot), through the writer.
    async fn write(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
        snapshot: Option<SnapshotRow>,
    ) -> Result<(), StoreError> {
        check_batch(id, expected_seq, events)?;
        let rows = events
            .iter()
            .map(|e| row::encode(id, e))
            .collect::<Result<Vec<_>, _>>()?;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            create: None,
            id: id.to_owned(),
            expected_seq,
            epoch: crate::epoch_of(events),
            rows,
            status,
            now,
            snapshot,
            reply,
        };
        let closed = || StoreError::Closed {
            context: format!("cannot append to session {id}"),
            place: self.path.display().to_string(),
        };
        // Usually written by this call already; otherwise by the append that holds the writer.
        self.writer.submit(Work::Append(job));
        answer.await.map_err(|_| closed())?
    }
}

/// The lease statements, with SQLite's placeholders (for the writer's connection).
static ACQUIRE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| lease::acquire_sql(lease::question));
static RENEW: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| lease::renew_sql(lease::question));
static NAME_AGENT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::sql_log::name_agent_sql(lease::question));

impl SqliteStore {
    /// Runs a statement in the writer's next group (see [`Exec`]).
    async fn exec(&self, what: String, run: ExecFn) -> Result<Option<i64>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let closed = StoreError::Closed {
            context: what.clone(),
            place: self.path.display().to_string(),
        };
        self.writer.submit(Work::Exec(Exec { what, run, reply }));
        answer.await.map_err(|_| closed)?
    }

    /// A session's creation with its first events, ready for the writer, and where its answer
    /// arrives.
    fn create_job(
        s: &NewSession,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> Result<(Work, oneshot::Receiver<Result<(), StoreError>>), StoreError> {
        check_batch(&s.id, 0, events)?;
        let rows = events
            .iter()
            .map(|e| row::encode(&s.id, e))
            .collect::<Result<Vec<_>, _>>()?;
        let metadata = row::encode_metadata(s)?;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            create: Some((s.clone(), metadata)),
            id: s.id.clone(),
            expected_seq: 0,
            epoch: crate::epoch_of(events),
            rows,
            status,
            now,
            snapshot: None,
            reply,
        };
        Ok((Work::Append(job), answer))
    }

    /// The error for a creation the writer dropped unanswered (the store was closed).
    fn closed(&self, id: &str) -> StoreError {
        StoreError::Closed {
            context: format!("cannot create session {id}"),
            place: self.path.display().to_string(),
        }
    }
}

impl SessionLog for SqliteStore {
    crate::sql_log::sql_log_reads!(SQLITE, sqlx::Sqlite);

    async fn name_agent(&self, id: &str, agent: &str) -> Result<(), StoreError> {
        let (sid, name) = (id.to_owned(), agent.to_owned());
        let changed = self
            .exec(
                format!("cannot name the agent of session {id}"),
                Box::new(move |tx| {
                    let n = tx
                        .prepare_cached(&NAME_AGENT)?
                        .execute(rusqlite::params![name, sid])?;
                    Ok(Some(i64::try_from(n).unwrap_or(i64::MAX)))
                }),
            )
            .await?;
        if changed == Some(0) {
            // Named already, or not there.
            self.get(id).await?;
        }
        Ok(())
    }

    fn set_durability(&self, durability: Durability) {
        // The appends being written now keep the durability they began with.
        self.writer.set_durability(durability);
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
        let (job, answer) = Self::create_job(&s, events, status, now)?;
        self.writer.submit(job);
        answer.await.map_err(|_| self.closed(&s.id))??;
        let mut rec = row::record(s, now, events.len() as u64);
        rec.status = status;
        Ok(rec)
    }

    async fn create_many(
        &self,
        batch: &[crate::NewLog],
        now: i64,
    ) -> Result<Vec<Option<StoreError>>, StoreError> {
        // Every creation is made ready first (a bad one refuses the batch before anything is
        // written), then handed to the writer at once, so they share its transactions and
        // syncs: queued one by one, each would find the writer free and be committed alone.
        let mut jobs = Vec::with_capacity(batch.len());
        let mut waiting = Vec::with_capacity(batch.len());
        for n in batch {
            let (job, answer) = Self::create_job(&n.session, &n.events, n.status, now)?;
            jobs.push(job);
            waiting.push(answer);
        }
        self.writer.submit_many(jobs);
        let mut answers = Vec::with_capacity(batch.len());
        for (n, answer) in batch.iter().zip(waiting) {
            match answer.await.map_err(|_| self.closed(&n.session.id))? {
                Ok(()) => answers.push(None),
                Err(e @ (StoreError::Exists(_) | StoreError::Leased { .. })) => {
                    answers.push(Some(e));
                }
                Err(e) => return Err(e),
            }
        }
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
        let row = SnapshotRow {
            seq: row::to_i64("sequence number", snapshot.seq)?,
            version: i64::from(snapshot.version),
            head: snapshot.head.clone(),
            part: match &snapshot.part {
                Some(p) => Some((row::to_i64("message number", p.start)?, p.text.clone())),
                None => None,
            },
        };
        self.write(id, expected_seq, events, status, now, Some(row))
            .await
    }
}

impl crate::Usage for SqliteStore {
    crate::usage::sql_usage_methods!(lease::question);
}

impl crate::Crons for SqliteStore {
    crate::cron::sql_cron_methods!(lease::question);
}

impl crate::RunQueue for SqliteStore {
    crate::queue::sql_queue_methods!(lease::question);
}

impl Leases for SqliteStore {
    lease::sql_lease_reads!(lease::question);

    async fn acquire(
        &self,
        id: &str,
        owner: &Owner,
        now: i64,
        ttl_ms: i64,
        force: bool,
    ) -> Result<Lease, StoreError> {
        let what = format!("cannot take the lease of session {id}");
        let expires_at = now.saturating_add(ttl_ms);
        let (sid, o) = (id.to_owned(), owner.clone());
        let epoch = self
            .exec(
                what.clone(),
                Box::new(move |tx| {
                    tx.prepare_cached(&ACQUIRE)?
                        .query_row(
                            rusqlite::params![
                                sid,
                                o.id,
                                o.host,
                                i64::from(o.pid),
                                expires_at,
                                now,
                                i64::from(force)
                            ],
                            |r| r.get::<_, i64>(0),
                        )
                        .optional()
                }),
            )
            .await?;
        match epoch {
            Some(epoch) => Ok(Lease {
                session: id.to_owned(),
                owner: owner.clone(),
                epoch: lease::read_epoch(id, epoch)?,
                expires_at,
                request: None,
            }),
            // The upsert wrote nothing: a lease row is there, held by another owner.
            None => match self.lease(id).await? {
                Some(l) => Err(lease::held(&l, now)),
                None => Err(StoreError::Corrupt(format!(
                    "{what}: the lease was neither taken nor found"
                ))),
            },
        }
    }

    async fn renew(&self, l: &Lease, expires_at: i64) -> Result<(), StoreError> {
        let epoch = row::to_i64("epoch", l.epoch)?;
        let (sid, oid) = (l.session.clone(), l.owner.id.clone());
        let changed = self
            .exec(
                format!("cannot renew the lease of session {}", l.session),
                Box::new(move |tx| {
                    let n = tx
                        .prepare_cached(&RENEW)?
                        .execute(rusqlite::params![expires_at, sid, oid, epoch])?;
                    Ok(Some(i64::try_from(n).unwrap_or(i64::MAX)))
                }),
            )
            .await?;
        if changed == Some(0) {
            return Err(StoreError::LeaseLost(l.session.clone()));
        }
        Ok(())
    }

    async fn release(&self, l: &Lease) -> Result<(), StoreError> {
        match self.renew(l, 0).await {
            Err(StoreError::LeaseLost(_)) => Ok(()),
            other => other,
        }
    }

    async fn claim(
        &self,
        owner: &Owner,
        agents: &[String],
        now: i64,
        ttl_ms: i64,
        limit: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        let names = serde_json::to_string(agents).map_err(|e| StoreError::Unstorable {
            what: "the agents' names".into(),
            reason: e.to_string(),
        })?;
        let sql = lease::claimable_sql(
            lease::question,
            "IN (SELECT value FROM json_each(?1))",
            "EXISTS (SELECT 1 FROM events e WHERE e.session = s.pk)",
        );
        let ids: Vec<String> = sqlx::query_scalar(&sql)
            .bind(names)
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.err("cannot look for sessions to run", e))?;
        // Another process may take one first: then it is not this one's.
        crate::take_each(self, ids, owner, now, ttl_ms, limit).await
    }

    async fn waiting(&self, now: i64) -> Result<u64, StoreError> {
        let sql = lease::waiting_sql(
            lease::question,
            "EXISTS (SELECT 1 FROM events e WHERE e.session = s.pk)",
        );
        let n: i64 = sqlx::query_scalar(&sql)
            .bind(now)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.err("cannot count the sessions waiting for a worker", e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn wake(&self) -> Result<(), StoreError> {
        self.work.notify_waiters();
        Ok(())
    }

    async fn wait_for_work(&self, max: Duration) {
        let _ = tokio::time::timeout(max, self.work.notified()).await;
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|e| self.err("cannot reach the store", e))?;
        Ok(())
    }
}

/// The file is shorter than its header says. That is a truncated file, unless another
/// connection is part-way through copying its write-ahead log into the file; SQLite's own
/// check tells the two apart.
async fn confirm_short(pool: &SqlitePool, path: &Path, reason: String) -> Result<(), StoreError> {
    let res: Result<Vec<String>, _> = sqlx::query_scalar("PRAGMA quick_check")
        .fetch_all(pool)
        .await;
    match res {
        Ok(rows) if rows.iter().all(|r| r == "ok") => Ok(()),
        _ => {
            pool.close().await;
            Err(StoreError::NotADatabase {
                path: path.to_owned(),
                reason,
            })
        }
    }
}

async fn migrate(pool: &SqlitePool, path: &Path) -> Result<(), StoreError> {
    let ctx = "cannot bring the database schema up to date";
    let err = |context: &str, e: sqlx::Error| sql_error(path, context, e);
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(|e| err(ctx, e))?;
    let has_table: Option<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'weft_schema'",
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(|e| err(ctx, e))?;
    let current: i64 = if has_table.is_some() {
        sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(version) FROM weft_schema")
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| err(ctx, e))?
            .unwrap_or(0)
    } else {
        let others: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| err(ctx, e))?;
        if others > 0 {
            return Err(StoreError::NotADatabase {
                path: path.to_owned(),
                reason: format!("it is a SQLite database with {others} tables of another program"),
            });
        }
        tx.execute(
            "CREATE TABLE weft_schema (version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )
        .await
        .map_err(|e| err(ctx, e))?;
        0
    };
    if current > SQLITE_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            place: path.display().to_string(),
            found: current,
            known: SQLITE_SCHEMA_VERSION,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.execute(*sql)
            .await
            .map_err(|e| err(&format!("cannot apply schema migration {version}"), e))?;
        sqlx::query(
            "INSERT INTO weft_schema (version, applied_at) VALUES (?, strftime('%s','now') * 1000)",
        )
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(|e| err(ctx, e))?;
    }
    tx.commit().await.map_err(|e| err(ctx, e))?;
    Ok(())
}

/// The path in a `sqlite:` URL.
pub(crate) fn url_path(url: &str) -> Result<PathBuf, StoreError> {
    let bad = |reason: String| StoreError::BadSpec {
        spec: url.to_owned(),
        reason,
    };
    let opts = SqliteConnectOptions::from_str(url).map_err(|e| bad(e.to_string()))?;
    let path = opts.get_filename();
    if path.as_os_str().is_empty() || url.contains(":memory:") || url.contains("mode=memory") {
        return Err(bad(
            "it names no file; give a path like sqlite://.weft/weft.db, or use memory: for a store in memory"
                .into(),
        ));
    }
    Ok(path.to_owned())
}

/// Refuses files that are not SQLite databases, or that are shorter than their header says,
/// before SQLite sees them.
async fn check_header(path: &Path) -> Result<Option<String>, StoreError> {
    use tokio::io::AsyncReadExt;
    let cannot = |source: std::io::Error| StoreError::Io {
        context: format!("cannot read the database {}", path.display()),
        source,
    };
    let mut file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cannot(e)),
    };
    let len = file.metadata().await.map_err(cannot)?.len();
    let mut head = Vec::with_capacity(100);
    (&mut file)
        .take(100)
        .read_to_end(&mut head)
        .await
        .map_err(cannot)?;
    match header(&head, len) {
        Header::Fine => Ok(None),
        Header::Short(reason) => Ok(Some(reason)),
        Header::Broken(reason) => Err(StoreError::NotADatabase {
            path: path.to_owned(),
            reason,
        }),
    }
}

/// What a database file's first 100 bytes say about it.
#[derive(Debug, PartialEq)]
enum Header {
    /// A SQLite file of the size its header gives (or an empty file: a new database).
    Fine,
    /// Not a SQLite file at all.
    Broken(String),
    /// Shorter than its header gives: truncated, or being written by a checkpoint.
    Short(String),
}

fn header(bytes: &[u8], len: u64) -> Header {
    const MAGIC: &[u8] = b"SQLite format 3\0";
    if len == 0 {
        return Header::Fine;
    }
    if bytes.len() < 100 || !bytes.starts_with(MAGIC) {
        return Header::Broken("the file does not start with a SQLite header".into());
    }
    let be16 = |at: usize| u32::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]));
    let be32 =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let page_size = match be16(16) {
        1 => 65536,
        n if n.is_power_of_two() && (512..=32768).contains(&n) => n,
        n => return Header::Broken(format!("the header gives an impossible page size {n}")),
    };
    let change_counter = be32(24);
    let pages = be32(28);
    let valid_for = be32(92);
    if valid_for == change_counter && pages > 0 {
        let want = u64::from(pages) * u64::from(page_size);
        if len < want {
            return Header::Short(format!(
                "the file is truncated: it is {len} bytes long but its header says {want}"
            ));
        }
    }
    Header::Fine
}

fn corruption(e: &sqlx::Error) -> Option<String> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    let code: i32 = db.code()?.parse().ok()?;
    matches!(code & 0xff, SQLITE_CORRUPT | SQLITE_NOTADB).then(|| db.message().to_owned())
}

fn is_busy(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    db.code()
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| matches!(c & 0xff, SQLITE_BUSY | SQLITE_LOCKED))
}

/// A failed query as a store error: corruption as [`StoreError::NotADatabase`], the rest with
/// what was being done and the database's path.
pub(crate) fn sql_error(path: &Path, context: &str, e: sqlx::Error) -> StoreError {
    if let Some(reason) = corruption(&e) {
        return StoreError::NotADatabase {
            path: path.to_owned(),
            reason,
        };
    }
    StoreError::sql(format!("{} ({})", context, path.display()), e)
}

fn open_err(path: &Path, e: sqlx::Error) -> StoreError {
    if let Some(reason) = corruption(&e) {
        return StoreError::NotADatabase {
            path: path.to_owned(),
            reason,
        };
    }
    StoreError::sql(format!("cannot open the database {}", path.display()), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_checked() {
        assert_eq!(header(b"", 0), Header::Fine);
        assert!(matches!(header(b"garbage", 7), Header::Broken(_)));
        let mut h = vec![0u8; 100];
        h[..16].copy_from_slice(b"SQLite format 3\0");
        h[16..18].copy_from_slice(&4096u16.to_be_bytes());
        h[24..28].copy_from_slice(&7u32.to_be_bytes());
        h[28..32].copy_from_slice(&2u32.to_be_bytes());
        h[92..96].copy_from_slice(&7u32.to_be_bytes());
        let Header::Short(short) = header(&h, 5000) else {
            panic!("a short file passed")
        };
        assert!(short.contains("truncated"), "{short}");
        assert_eq!(header(&h, 8192), Header::Fine);
    }

    #[test]
    fn urls_name_files() {
        assert_eq!(
            url_path("sqlite://some/dir/w.db").unwrap(),
            PathBuf::from("some/dir/w.db")
        );
        assert_eq!(url_path("sqlite:rel.db").unwrap(), PathBuf::from("rel.db"));
        assert!(url_path("sqlite::memory:").is_err());
        assert!(url_path("sqlite://").is_err());
    }
}
