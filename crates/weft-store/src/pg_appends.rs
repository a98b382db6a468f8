//! Group commit of the PostgreSQL store's appends: the appends that the sessions of one process
//! make at the same moment are written by one statement, so they share one round trip, one
//! transaction and one flush of the log, as the SQLite writer shares its commits.
//!
//! An append (without a snapshot, at the durability the connections started with) is handed to
//! a task that gathers what is waiting, up to [`MAX_BATCH`] appends of distinct sessions, and
//! writes it with [`APPEND_MANY`] while up to [`IN_FLIGHT`] batches are written at once: while
//! they wait for their commits, the next appends gather. Each append keeps its own guarantees:
//! its fence (the lease row, read `FOR SHARE`, must be of the append's epoch) and its
//! compare-and-set on the log's end are checked row by row, and an append that fails them is
//! simply not written, never the others.
//!
//! An append the batch did not write comes back to its caller, who writes it alone (and so
//! learns why: the fence, a conflict, a session that is not there). So does every append of a
//! batch whose statement PostgreSQL refused as a whole for a reason of its own (a unique key),
//! which was rolled back. A batch whose answer was lost with its connection, or that failed with
//! the connection or the server (a terminated backend, a deadlock between two processes'
//! batches in a takeover), may have been committed: each of its appends is told the store is
//! unavailable, which the runtime's patience answers by trying again and, if it was, finding its
//! events written.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::postgres::Columns;

/// The most appends one statement writes.
pub(crate) const MAX_BATCH: usize = 64;

/// How many batches are written at once (each holds a connection of the pool's while it runs).
pub(crate) const IN_FLIGHT: usize = 4;

/// An append waiting for its batch.
pub(crate) struct Pending {
    pub id: String,
    /// The sequence number the writer expects the log to end at.
    pub expected: i64,
    /// The sequence number of the append's last event.
    pub last: i64,
    pub epoch: i64,
    pub status: &'static str,
    pub now: i64,
    pub rows: Columns,
}

/// What became of an append handed to the batches.
pub(crate) enum Outcome {
    /// Written and committed.
    Written,
    /// Not written: the caller writes it alone (its rows come back).
    Alone(Columns),
    /// Its batch's answer was lost with the connection: it may have been committed.
    Lost(String),
}

/// The handle a store keeps: appends go to the gathering task through it.
#[derive(Clone, Debug)]
pub(crate) struct Appender {
    queue: mpsc::UnboundedSender<(Pending, oneshot::Sender<Outcome>)>,
}

impl Appender {
    /// Starts the gathering task on `pool` (within a Tokio runtime). It ends when every handle
    /// is dropped.
    pub(crate) fn start(pool: PgPool) -> Self {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(gather(pool, waiting));
        Self { queue }
    }

    /// Writes `p` with the appends waiting beside it.
    pub(crate) async fn append(&self, p: Pending) -> Outcome {
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError((p, _))) = self.queue.send((p, reply)) {
            return Outcome::Alone(p.rows);
        }
        // A dropped reply: the task is gone (its runtime is shutting down). Nothing was
        // written for this append that its caller could not learn by writing it alone.
        answer.await.unwrap_or_else(|_| {
            Outcome::Lost("the store's append task stopped before answering".to_owned())
        })
    }
}

type Waiting = (Pending, oneshot::Sender<Outcome>);

/// Takes what is waiting, a batch at a time, and writes up to [`IN_FLIGHT`] batches at once.
async fn gather(pool: PgPool, mut waiting: mpsc::UnboundedReceiver<Waiting>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // Appends of a session already in the batch being made, for the next one.
    let mut next: VecDeque<Waiting> = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let first = match next.pop_front() {
            Some(w) => w,
            None => match waiting.recv().await {
                Some(w) => w,
                None => return,
            },
        };
        let mut ids = HashSet::from([first.0.id.clone()]);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            let Ok(w) = waiting.try_recv() else { break };
            if ids.insert(w.0.id.clone()) {
                batch.push(w);
            } else {
                next.push_back(w);
            }
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            write(&pool, batch).await;
            drop(slot);
        });
    }
}

/// Writes one batch and answers each of its appends.
async fn write(pool: &PgPool, batch: Vec<Waiting>) {
    let mut ids = Vec::with_capacity(batch.len());
    let mut lasts = Vec::with_capacity(batch.len());
    let mut statuses = Vec::with_capacity(batch.len());
    let mut nows = Vec::with_capacity(batch.len());
    let mut expected = Vec::with_capacity(batch.len());
    let mut epochs = Vec::with_capacity(batch.len());
    let mut rows = Columns::default();
    let mut owners: Vec<&str> = Vec::new();
    for (p, _) in &batch {
        ids.push(p.id.as_str());
        lasts.push(p.last);
        statuses.push(p.status);
        nows.push(p.now);
        expected.push(p.expected);
        epochs.push(p.epoch);
        owners.extend(std::iter::repeat_n(p.id.as_str(), p.rows.len()));
        rows.append(&p.rows);
    }
    let written: Result<Vec<String>, sqlx::Error> = sqlx::query_scalar(APPEND_MANY)
        .bind(&ids)
        .bind(&lasts)
        .bind(&statuses)
        .bind(&nows)
        .bind(&expected)
        .bind(&epochs)
        .bind(crate::UPDATED_AT_GRAIN_MS)
        .bind(&owners)
        .bind(&rows.seqs)
        .bind(&rows.tss)
        .bind(&rows.vs)
        .bind(&rows.kinds)
        .bind(&rows.payloads)
        .bind(&rows.epochs)
        .fetch_all(pool)
        .await;
    match written {
        Ok(written) => {
            let written: HashSet<String> = written.into_iter().collect();
            for (p, reply) in batch {
                let outcome = if written.contains(&p.id) {
                    Outcome::Written
                } else {
                    Outcome::Alone(p.rows)
                };
                let _ = reply.send(outcome);
            }
        }
        // Never sent, or refused by the server (and rolled back) for a reason of the batch's
        // own (a unique key, a value): each is written alone, and says why.
        Err(e) if uncommitted(&e) => {
            for (p, reply) in batch {
                let _ = reply.send(Outcome::Alone(p.rows));
            }
        }
        // The connection or the server failed (an answer lost, a backend terminated, even
        // after its commit; a deadlock): the batch may have been committed, so each writer is
        // told the store is unavailable and asks again.
        Err(e) => {
            let why = e.to_string();
            for (_, reply) in batch {
                let _ = reply.send(Outcome::Lost(why.clone()));
            }
        }
    }
}

/// Whether a batch that failed with `e` was certainly not committed, for a reason of its own:
/// it was never sent (no connection), or the server refused it for what it holds, not because
/// the connection or the server failed.
fn uncommitted(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(_) => !crate::transient_sqlx(e),
        _ => false,
    }
}

/// The appends of a batch in one statement. Parameters, one element per append: sessions, the
/// last sequence number after the append, status, now, the sequence number the writer expects
/// the log to end at, the append's epoch; then the `updated_at` grain; then the events' rows,
/// each with its session. The fence is [`crate::lease::fence`]'s rule, append by append: at
/// epoch 0 no lease may be live, at any other epoch the lease must be of that epoch. It returns
/// the sessions written.
const APPEND_MANY: &str = "\
WITH a AS (
    SELECT * FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], $6::int8[])
        AS a(id, last, status, now, expected, epoch)
), l AS (
    SELECT session, epoch, expires_at FROM leases WHERE session = ANY($1::text[]) FOR SHARE
), fenced AS (
    SELECT a.* FROM a
    WHERE CASE WHEN a.epoch = 0
               THEN NOT EXISTS (SELECT 1 FROM l WHERE l.session = a.id AND l.expires_at > a.now)
               ELSE EXISTS (SELECT 1 FROM l WHERE l.session = a.id AND l.epoch = a.epoch) END
), u AS (
    UPDATE sessions s SET last_seq = f.last, status = f.status,
        updated_at = CASE WHEN s.status <> f.status OR s.updated_at <= f.now - $7
                          THEN f.now ELSE s.updated_at END
    FROM fenced f
    WHERE s.id = f.id AND s.last_seq = f.expected
    RETURNING s.id
), i AS (
    INSERT INTO events (session_id, seq, ts, v, type, payload, epoch)
    SELECT e.session_id, e.seq, e.ts, e.v, e.type, e.payload::json, e.epoch
    FROM UNNEST($8::text[], $9::int8[], $10::int8[], $11::int4[], $12::text[], $13::text[],
                $14::int8[]) AS e(session_id, seq, ts, v, type, payload, epoch)
    WHERE e.session_id IN (SELECT id FROM u)
)
SELECT id FROM u";
