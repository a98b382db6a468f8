//! Group commit for the SQLite store: one writer task owns a connection, takes every append
//! waiting in its channel and writes them in one transaction, checking each batch's expected
//! sequence number and answering each caller on its own. Many sessions appending small batches
//! at once then share one transaction (and one write of the log) instead of queueing for the
//! database's single write lock one transaction at a time.
//!
//! A batch that conflicts is refused without touching the others. If the group's transaction
//! fails as a whole (a write error), it is rolled back and every batch is retried alone, so each
//! caller gets the answer its own batch deserves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot};
use weft_core::SessionStatus;

use crate::row::EventRow;
use crate::{NewSession, StoreError};

/// At most this many batches share a transaction.
const MAX_GROUP: usize = 1024;

/// One caller's batch, already encoded, or a session to create (with its metadata encoded).
pub(crate) struct Job {
    pub create: Option<(NewSession, String)>,
    pub id: String,
    pub expected_seq: u64,
    pub expected: i64,
    pub last: i64,
    pub rows: Vec<EventRow>,
    pub status: SessionStatus,
    pub now: i64,
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

pub(crate) enum Msg {
    Append(Job),
    /// Stop writing and close the connection.
    Close(oneshot::Sender<()>),
}

/// Opens the writer's own connection (the schema must exist) and starts its thread. The writer
/// runs on a thread of its own with a plain SQLite connection: each statement is a function
/// call, not a round trip to another thread.
pub(crate) fn start(
    path: &Path,
    busy_timeout: Duration,
    rx: mpsc::UnboundedReceiver<Msg>,
) -> Result<(), StoreError> {
    let conn = Connection::open(path)
        .map_err(|e| write_error(path, "cannot open the database for writing", e))?;
    let setup = || -> rusqlite::Result<()> {
        conn.busy_timeout(busy_timeout)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        Ok(())
    };
    setup().map_err(|e| write_error(path, "cannot set up the database for writing", e))?;
    let owned = path.to_owned();
    std::thread::Builder::new()
        .name("weft-sqlite-writer".into())
        .spawn(move || run(conn, owned, rx))
        .map_err(|e| {
            StoreError::Backend(format!(
                "cannot start the writer of {}: {e}",
                path.display()
            ))
        })?;
    Ok(())
}

/// Runs until every sender is gone or `Close` arrives.
fn run(mut conn: Connection, path: PathBuf, mut rx: mpsc::UnboundedReceiver<Msg>) {
    let mut jobs: Vec<Job> = Vec::new();
    let mut closing = None;
    while let Some(msg) = rx.blocking_recv() {
        match msg {
            Msg::Append(j) => jobs.push(j),
            Msg::Close(done) => closing = Some(done),
        }
        while closing.is_none() && jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(Msg::Append(j)) => jobs.push(j),
                Ok(Msg::Close(done)) => closing = Some(done),
                Err(_) => break,
            }
        }
        if !jobs.is_empty() {
            write_group(&mut conn, &path, std::mem::take(&mut jobs));
        }
        if let Some(done) = closing.take() {
            drop(conn);
            let _ = done.send(());
            return;
        }
    }
}

fn write_group(conn: &mut Connection, path: &Path, jobs: Vec<Job>) {
    // When the group's transaction fails as a whole it is rolled back (dropped), and each batch
    // is retried alone below.
    if jobs.len() > 1
        && let Ok(answers) = try_group(conn, &jobs)
    {
        for (job, answer) in jobs.into_iter().zip(answers) {
            let _ = job.reply.send(answer);
        }
        return;
    }
    for job in jobs {
        let answer = match try_group(conn, std::slice::from_ref(&job)) {
            Ok(mut a) => a.pop().unwrap_or(Ok(())),
            Err(e) => Err(failure(path, &job, e)),
        };
        let _ = job.reply.send(answer);
    }
}

/// Writes `jobs` in one transaction. The outer error is a failure that spoils the transaction
/// (it is rolled back); the inner results are each batch's own refusals (conflict, no session).
fn try_group(conn: &mut Connection, jobs: &[Job]) -> rusqlite::Result<Vec<Result<(), StoreError>>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut answers = Vec::with_capacity(jobs.len());
    {
        let mut update = tx.prepare_cached(
            "UPDATE sessions SET last_seq = ?1, status = ?2, updated_at = ?3 WHERE id = ?4 AND last_seq = ?5",
        )?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO events (session_id, seq, ts, v, type, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        let mut current = tx.prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")?;
        let mut insert_session = tx.prepare_cached(
            "INSERT INTO sessions (id, user_id, agent, reference_id, metadata, parent_id, status, \
             created_at, updated_at, last_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, 0) \
             ON CONFLICT (id) DO NOTHING",
        )?;
        for job in jobs {
            if let Some((s, metadata)) = &job.create {
                let added = insert_session.execute(params![
                    s.id,
                    s.user_id,
                    s.agent,
                    s.reference_id,
                    metadata,
                    s.parent_id,
                    SessionStatus::Running.as_str(),
                    job.now
                ])?;
                answers.push(if added == 0 {
                    Err(StoreError::Exists(s.id.clone()))
                } else {
                    Ok(())
                });
                continue;
            }
            let updated = update.execute(params![
                job.last,
                job.status.as_str(),
                job.now,
                job.id,
                job.expected
            ])?;
            if updated == 0 {
                let actual: Option<i64> = current
                    .query_row(params![job.id], |r| r.get(0))
                    .optional()?;
                answers.push(Err(match actual {
                    None => StoreError::NotFound(job.id.clone()),
                    Some(a) => StoreError::Conflict {
                        session: job.id.clone(),
                        expected: job.expected_seq,
                        actual: u64::try_from(a).unwrap_or_default(),
                    },
                }));
                continue;
            }
            for r in &job.rows {
                insert.execute(params![job.id, r.seq, r.ts, r.v, r.kind, r.payload])?;
            }
            answers.push(Ok(()));
        }
    }
    tx.commit()?;
    Ok(answers)
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
    StoreError::Write {
        context: format!("{} ({})", context, path.display()),
        source: e,
    }
}
