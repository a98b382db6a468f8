//! Group commit for the SQLite store, written by the appending task itself.
//!
//! Every append (or session creation) is queued; then whoever finds the writer's connection free
//! takes the whole queue and writes it in one transaction, checking each batch's expected
//! sequence number and answering each caller on its own. A lone append is thus written on its
//! caller's thread at once, with no hop to another thread (a hop costs more than the write on a
//! small virtual machine); appends that arrive while a transaction is being written wait and
//! share the next one. The holder of the connection looks at the queue again after letting go of
//! it, so an append queued while the connection was taken is never left behind.
//!
//! Leases (taken, renewed, let go) and the naming of an empty session's agent are queued the same
//! way, as statements ([`Exec`]) written in the group beside the appends: they share its sync
//! and never wait for its lock.
//!
//! A batch that conflicts is refused without touching the others. If a transaction fails as a
//! whole (a write error), it is rolled back and every batch is retried alone, so each caller gets
//! the answer its own batch deserves.
//!
//! The writer never waits for a lock on the caller's thread: the connection's busy timeout is
//! zero. When another connection (another process, or this store's own pool saving a snapshot
//! or pruning) holds the database's write lock, the queued batches and the connection move to a
//! thread of their own that waits for the lock (up to the store's busy timeout) and writes them
//! there.
//!
//! Durability is the writer connection's `synchronous` setting: `FULL` syncs the write-ahead log
//! at every commit, so a group of appends from many sessions shares one sync (group commit);
//! `NORMAL` syncs only at checkpoints. It is applied between transactions, so a change
//! ([`Writer::set_durability`]) takes effect from the next group on, and read back from the
//! connection when it is set. The writer counts its commits and the appends they carried.
//!
//! Write-ahead-log checkpoints (which `fsync`) are mostly not run by the writer either: automatic
//! checkpoints are off on its connection, and a checkpointer thread with its own connection runs
//! a passive checkpoint whenever the log has grown by about a thousand pages since the last. A
//! checkpoint that runs beside a busy writer never quite catches up, and the log only starts
//! again from its beginning once everything in it is checkpointed; so when the checkpointer finds
//! the log longer than [`CATCH_UP_PAGES`], the writer runs one more passive checkpoint itself,
//! right after its next commit, with nothing written meanwhile (the pages are mostly copied
//! already), and the log starts over at the next write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, mpsc as std_mpsc};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;
use weft_core::SessionStatus;

use crate::row::EventRow;
use crate::{Durability, NewSession, StoreError, UPDATED_AT_GRAIN_MS};

/// At most this many batches share a transaction.
const MAX_GROUP: usize = 1024;

/// A checkpoint is asked for when about this many pages were written since the last one
/// (SQLite's own automatic checkpoint uses the same figure).
const CHECKPOINT_PAGES: usize = 1000;

/// A log longer than this (in pages) is checkpointed by the writer itself after its next commit.
const CATCH_UP_PAGES: i64 = 4000;

/// The write-ahead log file is cut back to this size when it starts over (bytes).
const LOG_SIZE_LIMIT: i64 = 16 << 20;

/// The writer's page cache, at most (KiB; SQLite allocates it as pages are read). SQLite's
/// default of 2 MiB is smaller than the index pages that thousands of sessions appending at once
/// touch, and every page that falls out is read again on the next append (`weft-bench concurrent
/// 10000 3` took 1.1–1.5 s with the default and 0.8–0.9 s with this).
const CACHE_KIB: i64 = 64 << 10;

/// Pages a batch is taken to write: an event table page, an index page, and the session row
/// when its status or time changes. An estimate; it only paces checkpoints.
const PAGES_PER_BATCH: usize = 3;

/// One caller's batch, already encoded, or a session to create (with its metadata encoded) and
/// its first events.
pub(crate) struct Job {
    pub create: Option<(NewSession, String)>,
    pub id: String,
    pub expected_seq: u64,
    /// The lease epoch the batch is written at (see `lease::fence`).
    pub epoch: u64,
    pub rows: Vec<EventRow>,
    pub status: SessionStatus,
    pub now: i64,
    /// A snapshot to write with the batch.
    pub snapshot: Option<SnapshotRow>,
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

/// A statement for the writer's transaction other than an append: a lease taken, renewed or
/// let go. Written in the group like an append (its sync shared with theirs, never waiting for
/// the write lock against them). `run` may be called twice: when the group's transaction
/// fails as a whole, each job is written again alone.
pub(crate) struct Exec {
    /// What is being done, for the error: "cannot take the lease of session X".
    pub what: String,
    /// The statement: a value it returns (a new epoch, rows changed), if any.
    pub run: ExecFn,
    pub reply: oneshot::Sender<Reply>,
}

/// A statement for the writer's transaction.
pub(crate) type ExecFn =
    Box<dyn Fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<Option<i64>> + Send + 'static>;

/// One job's answer from a transaction: a statement's value (an append has none), or the
/// job's own refusal.
type Reply = Result<Option<i64>, StoreError>;

/// What the writer is given to write.
pub(crate) enum Work {
    Append(Job),
    Exec(Exec),
}

impl Work {
    /// Answers the caller with its statement's value, or with its own refusal.
    fn answer(self, a: Reply) {
        match self {
            Work::Append(j) => {
                let _ = j.reply.send(a.map(|_| ()));
            }
            Work::Exec(x) => {
                let _ = x.reply.send(a);
            }
        }
    }

    fn fail(self, path: &Path, e: rusqlite::Error) {
        match self {
            Work::Append(j) => {
                let err = failure(path, &j, e);
                let _ = j.reply.send(Err(err));
            }
            Work::Exec(x) => {
                let err = write_error(path, &x.what, e);
                let _ = x.reply.send(Err(err));
            }
        }
    }
}

/// A snapshot's head and the conversation's part it adds, ready to be written.
pub(crate) struct SnapshotRow {
    pub seq: i64,
    pub version: i64,
    pub head: String,
    pub part: Option<(i64, String)>,
}

/// What the writer has written since the store was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Transactions committed (with `full` durability, one sync of the log each).
    pub commits: u64,
    /// Appends and session creations they carried.
    pub appends: u64,
}

fn code(d: Durability) -> u8 {
    match d {
        Durability::Normal => 1,
        Durability::Full => 2,
    }
}

fn pragma(d: Durability) -> &'static str {
    match d {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    }
}

/// Where the writer's connection is.
enum Slot {
    Here(Connection),
    /// On a thread that waits for another connection's lock.
    Lent,
    Closed,
}

/// The writer of one SQLite file.
pub(crate) struct Writer {
    path: PathBuf,
    busy_timeout: Duration,
    queue: Mutex<Vec<Work>>,
    slot: Mutex<Slot>,
    closed: AtomicBool,
    /// Pages written since the last checkpoint was asked for (an estimate).
    pages: AtomicUsize,
    checkpoints: Mutex<Option<std_mpsc::SyncSender<()>>>,
    /// Set by the checkpointer when the log is too long (see the module's documentation).
    catch_up: Arc<AtomicBool>,
    /// The durability asked for, and the one the connection has (see [`code`]).
    wanted: AtomicU8,
    applied: AtomicU8,
    /// The connection's settings as it reported them when they were last set.
    read_back: Mutex<BTreeMap<String, String>>,
    commits: AtomicU64,
    appends: AtomicU64,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("path", &self.path).finish()
    }
}

/// Locks a mutex; a panic while it was held leaves data that is still usable here (a
/// connection whose transaction was rolled back, or a queue).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl Writer {
    /// Opens the writer's connection and the checkpointer's (the schema must exist).
    pub(crate) fn open(
        path: &Path,
        busy_timeout: Duration,
        durability: Durability,
    ) -> Result<Arc<Self>, StoreError> {
        let conn = Connection::open(path)
            .map_err(|e| write_error(path, "cannot open the database for writing", e))?;
        let setup = || -> rusqlite::Result<()> {
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            conn.pragma_update(None, "wal_autocheckpoint", 0)?;
            conn.pragma_update(None, "journal_size_limit", LOG_SIZE_LIMIT)?;
            conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
            conn.busy_timeout(Duration::ZERO)?;
            // Compiled now rather than at the first append, which is then as quick as the rest.
            for sql in [HEAD, INSERT_EVENT, TOUCH, INSERT_SESSION, LEASE.as_str()] {
                conn.prepare_cached(sql)?;
            }
            Ok(())
        };
        setup().map_err(|e| write_error(path, "cannot set up the database for writing", e))?;
        let read_back = set_synchronous(&conn, durability)
            .map_err(|e| write_error(path, "cannot set the database's durability", e))?;
        let catch_up = Arc::new(AtomicBool::new(false));
        let checkpoints = start_checkpointer(path, busy_timeout, Arc::clone(&catch_up))?;
        Ok(Arc::new(Self {
            path: path.to_owned(),
            busy_timeout,
            queue: Mutex::new(Vec::new()),
            slot: Mutex::new(Slot::Here(conn)),
            closed: AtomicBool::new(false),
            pages: AtomicUsize::new(0),
            checkpoints: Mutex::new(Some(checkpoints)),
            catch_up,
            wanted: AtomicU8::new(code(durability)),
            applied: AtomicU8::new(code(durability)),
            read_back: Mutex::new(read_back),
            commits: AtomicU64::new(0),
            appends: AtomicU64::new(0),
        }))
    }

    /// Writes from the next group on at `d`.
    pub(crate) fn set_durability(&self, d: Durability) {
        self.wanted.store(code(d), Ordering::Release);
    }

    pub(crate) fn durability(&self) -> Durability {
        if self.wanted.load(Ordering::Acquire) == code(Durability::Normal) {
            Durability::Normal
        } else {
            Durability::Full
        }
    }

    /// The connection's settings as it reported them when they were last set.
    pub(crate) fn read_back(&self) -> BTreeMap<String, String> {
        lock(&self.read_back).clone()
    }

    pub(crate) fn stats(&self) -> WriteStats {
        WriteStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.appends.load(Ordering::Relaxed),
        }
    }

    /// Brings the connection to the durability asked for, between two transactions. A failure
    /// leaves the setting as it was: the next group tries again.
    fn apply_durability(&self, conn: &Connection) {
        let wanted = self.wanted.load(Ordering::Acquire);
        if wanted == self.applied.load(Ordering::Relaxed) {
            return;
        }
        let d = if wanted == code(Durability::Normal) {
            Durability::Normal
        } else {
            Durability::Full
        };
        if let Ok(read_back) = set_synchronous(conn, d) {
            *lock(&self.read_back) = read_back;
            self.applied.store(wanted, Ordering::Relaxed);
        }
    }

    /// Counts a written group.
    fn count(&self, written: Written) {
        self.commits.fetch_add(written.commits, Ordering::Relaxed);
        self.appends.fetch_add(written.appends, Ordering::Relaxed);
    }

    /// Queues a job and writes the queue if the connection is free. The job's answer arrives on
    /// its `reply` (already, when this call wrote it).
    pub(crate) fn submit(self: &Arc<Self>, job: Work) {
        self.submit_many(std::iter::once(job));
    }

    /// Queues several jobs together and writes the queue if the connection is free: they share
    /// its transactions (at most [`MAX_GROUP`] jobs each), where queued one by one each would
    /// find the connection free and be committed alone.
    pub(crate) fn submit_many(self: &Arc<Self>, jobs: impl IntoIterator<Item = Work>) {
        if self.closed.load(Ordering::Acquire) {
            // Dropping the jobs drops their replies: the callers hear that the store is closed.
            return;
        }
        lock(&self.queue).extend(jobs);
        self.pump();
    }

    /// Stops writing: queued jobs fail as closed, and the connections are closed.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let old = std::mem::replace(&mut *lock(&self.slot), Slot::Closed);
        drop(old);
        drop(std::mem::take(&mut *lock(&self.queue)));
        drop(lock(&self.checkpoints).take());
    }

    /// Writes queued jobs for as long as there are any and the connection is free here.
    fn pump(self: &Arc<Self>) {
        loop {
            {
                let Some(mut slot) = try_lock(&self.slot) else {
                    // Its holder looks at the queue again after letting go.
                    return;
                };
                let mut conn = match std::mem::replace(&mut *slot, Slot::Lent) {
                    Slot::Here(conn) => conn,
                    Slot::Lent => return,
                    Slot::Closed => {
                        *slot = Slot::Closed;
                        drop(std::mem::take(&mut *lock(&self.queue)));
                        return;
                    }
                };
                let mut jobs = take_group(&self.queue);
                while !jobs.is_empty() {
                    self.apply_durability(&conn);
                    match write_group(&mut conn, &self.path, jobs, false) {
                        Ok(written) => self.wrote(&conn, written),
                        Err(waiting) => {
                            // Another connection holds the write lock: wait for it elsewhere.
                            drop(slot);
                            self.lend(conn, waiting);
                            return;
                        }
                    }
                    jobs = take_group(&self.queue);
                }
                *slot = Slot::Here(conn);
            }
            if lock(&self.queue).is_empty() {
                return;
            }
        }
    }

    /// Counts pages written and asks for a checkpoint when enough have been; catches up when
    /// the checkpointer says the log is too long.
    fn wrote(&self, conn: &Connection, written: Written) {
        self.count(written);
        let batches = written.batches;
        if self.catch_up.swap(false, Ordering::Relaxed) {
            // A failed checkpoint leaves the log longer; the checkpointer will ask again.
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
        let pages = self
            .pages
            .fetch_add(batches * PAGES_PER_BATCH, Ordering::Relaxed)
            + batches * PAGES_PER_BATCH;
        if pages >= CHECKPOINT_PAGES {
            self.pages.store(0, Ordering::Relaxed);
            if let Some(tx) = lock(&self.checkpoints).as_ref() {
                // Full: a checkpoint is asked for already.
                let _ = tx.try_send(());
            }
        }
    }

    /// Moves the connection and `jobs` to a thread that waits for the write lock. If no thread
    /// can be started, waits here.
    fn lend(self: &Arc<Self>, conn: Connection, jobs: Vec<Work>) {
        let work = Arc::new(Mutex::new(Some((conn, jobs))));
        let me = Arc::clone(self);
        let theirs = Arc::clone(&work);
        let started = std::thread::Builder::new()
            .name("weft-sqlite-wait".into())
            .spawn(move || {
                if let Some((conn, jobs)) = lock(&theirs).take() {
                    me.write_waiting(conn, jobs);
                }
            });
        if started.is_err()
            && let Some((conn, jobs)) = lock(&work).take()
        {
            self.write_waiting(conn, jobs);
        }
    }

    /// Writes `jobs` and whatever queues up meanwhile, waiting for locks; then puts the
    /// connection back and looks at the queue once more.
    fn write_waiting(self: &Arc<Self>, mut conn: Connection, mut jobs: Vec<Work>) {
        let _ = conn.busy_timeout(self.busy_timeout);
        while !jobs.is_empty() {
            self.apply_durability(&conn);
            if let Ok(written) = write_group(&mut conn, &self.path, jobs, true) {
                self.wrote(&conn, written);
            }
            jobs = take_group(&self.queue);
        }
        let _ = conn.busy_timeout(Duration::ZERO);
        {
            let mut slot = lock(&self.slot);
            if matches!(*slot, Slot::Lent) {
                *slot = Slot::Here(conn);
            }
        }
        self.pump();
    }
}

/// Takes up to [`MAX_GROUP`] queued jobs, oldest first.
fn take_group(queue: &Mutex<Vec<Work>>) -> Vec<Work> {
    let mut q = lock(queue);
    if q.len() <= MAX_GROUP {
        std::mem::take(&mut *q)
    } else {
        q.drain(..MAX_GROUP).collect()
    }
}

/// Starts the checkpointer: a thread with its own connection that runs a passive checkpoint
/// each time it is asked, until the writer is gone, and sets `catch_up` when the log it finds is
/// too long.
fn start_checkpointer(
    path: &Path,
    busy_timeout: Duration,
    catch_up: Arc<AtomicBool>,
) -> Result<std_mpsc::SyncSender<()>, StoreError> {
    let conn = Connection::open(path)
        .map_err(|e| write_error(path, "cannot open the database for checkpoints", e))?;
    conn.busy_timeout(busy_timeout)
        .map_err(|e| write_error(path, "cannot set up the database for checkpoints", e))?;
    let (tx, rx) = std_mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("weft-sqlite-checkpoint".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                // (blocked, pages in the log, pages checkpointed); a failed checkpoint leaves
                // the log longer, and the next one tries again.
                let log: rusqlite::Result<i64> =
                    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1));
                if log.is_ok_and(|pages| pages > CATCH_UP_PAGES) {
                    catch_up.store(true, Ordering::Relaxed);
                }
            }
        })
        .map_err(|source| StoreError::Io {
            context: format!("cannot start the checkpointer of {}", path.display()),
            source,
        })?;
    Ok(tx)
}

/// What a group's writing did: batches handled, transactions committed, and the appends those
/// carried.
#[derive(Clone, Copy, Default)]
struct Written {
    batches: usize,
    commits: u64,
    appends: u64,
}

/// Writes a group and answers its callers. `Err` gives the jobs back, unanswered, when the
/// database is locked by another connection and `wait` is false.
fn write_group(
    conn: &mut Connection,
    path: &Path,
    jobs: Vec<Work>,
    wait: bool,
) -> Result<Written, Vec<Work>> {
    let n = jobs.len();
    let mut written = Written {
        batches: n,
        ..Written::default()
    };
    // What `WriteStats::appends` counts: appends (and creations) written, not statements.
    let accepted = |jobs: &[Work], a: &[Reply]| {
        jobs.iter()
            .zip(a)
            .filter(|(j, r)| matches!(j, Work::Append(_)) && r.is_ok())
            .count() as u64
    };
    // When the group's transaction fails as a whole it is rolled back (dropped), and each
    // batch is retried alone below.
    if n > 1 {
        match try_group(conn, &jobs) {
            Ok(answers) => {
                written.commits = 1;
                written.appends = accepted(&jobs, &answers);
                for (job, answer) in jobs.into_iter().zip(answers) {
                    job.answer(answer);
                }
                return Ok(written);
            }
            Err(e) if !wait && is_busy(&e) => return Err(jobs),
            Err(_) => {}
        }
    }
    let mut left = jobs.into_iter();
    while let Some(job) = left.next() {
        match try_group(conn, std::slice::from_ref(&job)) {
            Ok(mut a) => {
                written.commits += 1;
                written.appends += accepted(std::slice::from_ref(&job), &a);
                job.answer(a.pop().unwrap_or(Ok(None)));
            }
            Err(e) if !wait && is_busy(&e) => {
                let mut back = vec![job];
                back.extend(left);
                return Err(back);
            }
            Err(e) => job.fail(path, e),
        }
    }
    Ok(written)
}

/// Sets the connection's `synchronous` and reads back what is in effect (with the journal
/// mode): `0` OFF, `1` NORMAL, `2` FULL, `3` EXTRA.
fn set_synchronous(conn: &Connection, d: Durability) -> rusqlite::Result<BTreeMap<String, String>> {
    conn.pragma_update(None, "synchronous", pragma(d))?;
    let synchronous: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    let journal: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    Ok(BTreeMap::from([
        ("synchronous".to_owned(), synchronous.to_string()),
        ("journal_mode".to_owned(), journal),
    ]))
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The session's key and the sequence number its log ends at.
const HEAD: &str = "SELECT pk, (SELECT seq FROM events WHERE session = sessions.pk ORDER BY seq DESC LIMIT 1) \
     FROM sessions WHERE id = ?1";
const INSERT_EVENT: &str = "INSERT INTO events (session, seq, ts, v, type, payload, epoch) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
/// The session's lease, which fences the batch.
static LEASE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::lease::select_sql(crate::lease::question));
/// The session row is rewritten only as `crate::updated_at_after` says (status changed, or a
/// second on).
const TOUCH: &str = "UPDATE sessions SET status = ?2, updated_at = ?3 \
     WHERE pk = ?1 AND (status <> ?2 OR updated_at <= ?3 - ?4)";
const DROP_HEAD: &str = "DELETE FROM snapshots WHERE session = ?1";
const INSERT_HEAD: &str = "INSERT INTO snapshots (session, seq, state, v) VALUES (?1, ?2, ?3, ?4)";
const DROP_PARTS: &str = "DELETE FROM snapshot_parts WHERE session = ?1 AND start >= ?2";
const INSERT_PART: &str = "INSERT INTO snapshot_parts (session, start, part) VALUES (?1, ?2, ?3)";
const INSERT_SESSION: &str = "INSERT INTO sessions (id, user_id, agent, reference_id, metadata, parent_id, status, \
     created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8) \
     ON CONFLICT (id) DO NOTHING";

/// Writes `jobs` in one transaction. The outer error is a failure that spoils the transaction
/// (it is rolled back); the inner results are each batch's own refusals (conflict, no session).
fn try_group(conn: &mut Connection, jobs: &[Work]) -> rusqlite::Result<Vec<Reply>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut answers = Vec::with_capacity(jobs.len());
    {
        let mut head = tx.prepare_cached(HEAD)?;
        let mut insert = tx.prepare_cached(INSERT_EVENT)?;
        let mut touch = tx.prepare_cached(TOUCH)?;
        let mut insert_session = tx.prepare_cached(INSERT_SESSION)?;
        let mut lease = tx.prepare_cached(&LEASE)?;
        for work in jobs {
            let job = match work {
                Work::Append(job) => job,
                Work::Exec(x) => {
                    answers.push(Ok((x.run)(&tx)?));
                    continue;
                }
            };
            let current: Option<crate::lease::Row> = lease
                .query_row(params![job.id], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                })
                .optional()?;
            let fenced = current
                .map(|r| crate::lease::from_row(&job.id, r))
                .transpose()
                .and_then(|l| crate::lease::fence(&job.id, job.epoch, l.as_ref(), job.now));
            if let Err(e) = fenced {
                answers.push(Err(e));
                continue;
            }
            if let Some((s, metadata)) = &job.create {
                let added = insert_session.execute(params![
                    s.id,
                    s.user_id,
                    s.agent,
                    s.reference_id,
                    metadata,
                    s.parent_id,
                    job.status.as_str(),
                    job.now
                ])?;
                if added == 0 {
                    answers.push(Err(StoreError::Exists(s.id.clone())));
                    continue;
                }
                // The session's first events, in the same transaction.
                let pk = tx.last_insert_rowid();
                for r in &job.rows {
                    insert.execute(params![pk, r.seq, r.ts, r.v, r.kind, r.payload, r.epoch])?;
                }
                answers.push(Ok(None));
                continue;
            }
            let found: Option<(i64, Option<i64>)> = head
                .query_row(params![job.id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let Some((pk, last)) = found else {
                answers.push(Err(StoreError::NotFound(job.id.clone())));
                continue;
            };
            let last = last.unwrap_or(0);
            let Ok(last) = u64::try_from(last) else {
                answers.push(Err(StoreError::Corrupt(format!(
                    "session {}: its last event is numbered {last}",
                    job.id
                ))));
                continue;
            };
            if last != job.expected_seq {
                answers.push(Err(StoreError::Conflict {
                    session: job.id.clone(),
                    expected: job.expected_seq,
                    actual: last,
                }));
                continue;
            }
            for r in &job.rows {
                insert.execute(params![pk, r.seq, r.ts, r.v, r.kind, r.payload, r.epoch])?;
            }
            touch.execute(params![
                pk,
                job.status.as_str(),
                job.now,
                UPDATED_AT_GRAIN_MS
            ])?;
            if let Some(snap) = &job.snapshot {
                write_snapshot(&tx, pk, snap)?;
            }
            answers.push(Ok(None));
        }
    }
    tx.commit()?;
    Ok(answers)
}

/// Replaces a session's snapshot head and the conversation's parts from the new part on.
fn write_snapshot(
    tx: &rusqlite::Transaction<'_>,
    pk: i64,
    snap: &SnapshotRow,
) -> rusqlite::Result<()> {
    tx.prepare_cached(DROP_HEAD)?.execute(params![pk])?;
    tx.prepare_cached(INSERT_HEAD)?
        .execute(params![pk, snap.seq, snap.head, snap.version])?;
    if let Some((start, part)) = &snap.part {
        tx.prepare_cached(DROP_PARTS)?.execute(params![pk, start])?;
        tx.prepare_cached(INSERT_PART)?
            .execute(params![pk, start, part])?;
    }
    Ok(())
}

/// The error a caller gets when its batch alone could not be written.
fn failure(path: &Path, job: &Job, e: rusqlite::Error) -> StoreError {
    if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) {
        return StoreError::Conflict {
            session: job.id.clone(),
            expected: job.expected_seq,
            actual: job.expected_seq + job.rows.len() as u64,
        };
    }
    let what = if job.create.is_some() {
        "create"
    } else {
        "append to"
    };
    write_error(path, &format!("cannot {what} session {}", job.id), e)
}

/// A failed write as a store error: corruption as [`StoreError::NotADatabase`], the rest with
/// what was being done and the database's path.
fn write_error(path: &Path, context: &str, e: rusqlite::Error) -> StoreError {
    if matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    ) {
        return StoreError::NotADatabase {
            path: path.to_owned(),
            reason: e.to_string(),
        };
    }
    StoreError::write(format!("{} ({})", context, path.display()), e)
}
