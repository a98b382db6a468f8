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

use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Sqlite, Transaction};
use tokio::sync::{mpsc, oneshot};
use weft_core::SessionStatus;

use crate::StoreError;
use crate::row::EventRow;

/// At most this many batches share a transaction.
const MAX_GROUP: usize = 1024;
/// Rows per `INSERT` statement (6 parameters each, well under SQLite's limit of parameters).
const ROWS_PER_INSERT: usize = 256;

/// One caller's batch, already encoded.
pub(crate) struct Job {
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

/// Runs until every sender is gone or `Close` arrives.
pub(crate) async fn run(
    mut conn: SqliteConnection,
    path: PathBuf,
    mut rx: mpsc::UnboundedReceiver<Msg>,
) {
    let mut jobs: Vec<Job> = Vec::new();
    let mut closing = None;
    while let Some(msg) = rx.recv().await {
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
            write_group(&mut conn, &path, std::mem::take(&mut jobs)).await;
        }
        if let Some(done) = closing.take() {
            let _ = conn.close().await;
            let _ = done.send(());
            return;
        }
    }
    let _ = conn.close().await;
}

async fn write_group(conn: &mut SqliteConnection, path: &Path, jobs: Vec<Job>) {
    // When the group's transaction fails as a whole it is rolled back (dropped), and each batch
    // is retried alone below.
    if jobs.len() > 1
        && let Ok(answers) = try_group(conn, &jobs).await
    {
        for (job, answer) in jobs.into_iter().zip(answers) {
            let _ = job.reply.send(answer);
        }
        return;
    }
    for job in jobs {
        let answer = match try_group(conn, std::slice::from_ref(&job)).await {
            Ok(mut a) => a.pop().unwrap_or(Ok(())),
            Err(e) => Err(failure(path, &job, e)),
        };
        let _ = job.reply.send(answer);
    }
}

/// Writes `jobs` in one transaction. The outer error is a failure that spoils the transaction
/// (it is rolled back); the inner results are each batch's own refusals (conflict, no session).
async fn try_group(
    conn: &mut SqliteConnection,
    jobs: &[Job],
) -> Result<Vec<Result<(), StoreError>>, sqlx::Error> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let mut answers = Vec::with_capacity(jobs.len());
    for job in jobs {
        answers.push(apply(&mut tx, job).await?);
    }
    tx.commit().await?;
    Ok(answers)
}

async fn apply(
    tx: &mut Transaction<'_, Sqlite>,
    job: &Job,
) -> Result<Result<(), StoreError>, sqlx::Error> {
    let updated = sqlx::query(
        "UPDATE sessions SET last_seq = ?, status = ?, updated_at = ? WHERE id = ? AND last_seq = ?",
    )
    .bind(job.last)
    .bind(job.status.as_str())
    .bind(job.now)
    .bind(&job.id)
    .bind(job.expected)
    .execute(&mut **tx)
    .await?;
    if updated.rows_affected() == 0 {
        let actual: Option<i64> = sqlx::query_scalar("SELECT last_seq FROM sessions WHERE id = ?")
            .bind(&job.id)
            .fetch_optional(&mut **tx)
            .await?;
        return Ok(Err(match actual {
            None => StoreError::NotFound(job.id.clone()),
            Some(a) => StoreError::Conflict {
                session: job.id.clone(),
                expected: job.expected_seq,
                actual: u64::try_from(a).unwrap_or_default(),
            },
        }));
    }
    for chunk in job.rows.chunks(ROWS_PER_INSERT) {
        let mut sql =
            String::from("INSERT INTO events (session_id, seq, ts, v, type, payload) VALUES ");
        for i in 0..chunk.len() {
            sql.push_str(if i == 0 {
                "(?, ?, ?, ?, ?, ?)"
            } else {
                ", (?, ?, ?, ?, ?, ?)"
            });
        }
        let mut q = sqlx::query(&sql);
        for r in chunk {
            q = q
                .bind(&job.id)
                .bind(r.seq)
                .bind(r.ts)
                .bind(r.v)
                .bind(r.kind)
                .bind(&r.payload);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(Ok(()))
}

/// The error a caller gets when its batch alone could not be written.
fn failure(path: &Path, job: &Job, e: sqlx::Error) -> StoreError {
    if matches!(&e, sqlx::Error::Database(db) if db.is_unique_violation()) {
        return StoreError::Conflict {
            session: job.id.clone(),
            expected: job.expected_seq,
            actual: job.expected_seq + job.rows.len() as u64,
        };
    }
    crate::sqlite::sql_error(path, &format!("cannot append to session {}", job.id), e)
}
