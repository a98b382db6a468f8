//! `weft-bench pg-capacity`: what one PostgreSQL carries of weft's own statements, through the
//! real store ([`PgStore`], its statements, its pools, at durability `full` unless told
//! otherwise), and how a fleet of workers' claim and renewal traffic loads it.
//!
//! Four kinds of phase, each in a schema of its own (fresh tables, no rows or dead tuples left by
//! the phase before):
//!
//! - `append`: C callers, each appending one-event batches (a `tool_call_finished` of a few
//!   hundred bytes) to its own session under its own lease, as a session's owner does.
//! - `renew`: C callers, each holding a lease (`Leases::acquire`) and renewing it in a loop.
//! - `claim`: sessions queued as `weft submit` leaves them (running, one `session_started`
//!   event, no lease); C callers each claiming up to 8 (`Leases::claim`) and releasing what they
//!   got, so that claims keep finding work.
//! - `sim`: W simulated workers, each doing what `weft worker` does on a store with no
//!   `NOTIFY`: claim up to its free slots (8 at most) every poll interval (1 s) and again when
//!   one of its sessions ends; for each lease it holds, renew every third of the lease time and
//!   read the lease every 500 ms (the owner's look for `cancel`/`pause`), then release it after
//!   a simulated run time.
//!
//! A store is one weft process: its pool of 8 connections, and 2 more for leases. Each caller
//! gets a connection of its own where the budget (`--connections`, 64) allows: C callers are
//! spread over `ceil(C / 8)` stores (`ceil(C / 2)` for renewals, which take the lease
//! connections), at most as many as the budget holds (10 connections a store; 3 for renewals:
//! the 2 lease connections and the one left open by the migration). The simulated workers share
//! as many stores as the budget holds: 1,000 real workers would open up to 10 connections each
//! (the pool's 8, one of which a worker keeps for `LISTEN`, and 2 for leases), which no
//! PostgreSQL with a default `max_connections` takes.
//!
//! While a phase runs, `pg_stat_activity` is sampled every 100 ms (the statement each busy
//! backend of the database runs and what it waits for), and at its ends the CPU seconds of every
//! process of the PostgreSQL cluster (the postmaster and its children, from `/proc`, when the
//! server runs on this machine), of this process and of the machine are read, and
//! `pg_stat_user_tables` of the phase's tables.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, Row};
use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus, ToolOutcome};
use weft_store::{Durability, Lease, Leases, NewSession, Owner, PgStore, SessionLog, StoreError};

use crate::BenchError;

/// Connections of a store's pool for appends, reads and claims (`POOL_SIZE` in
/// `weft_store::postgres`).
const POOL: usize = 8;

/// Connections of a store's own for lease writes (`LEASE_POOL_SIZE` there).
const LEASE_POOL: usize = 2;

/// How many sessions a claim takes at most, as the brief of the phase says (a worker with 8 free
/// slots).
const CLAIM_LIMIT: usize = 8;

/// How often a simulated worker polls, as `weft worker --poll-secs` does by default.
const POLL: Duration = Duration::from_secs(1);

/// How often an owner reads its lease for requests (`weft_host::ownership`'s `LOOK_EVERY`).
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// A simulated run holds its lease for a time drawn evenly from this range.
const RUN_TIME: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(25));

/// The agent of the sessions the bench creates.
const AGENT: &str = "bench";

/// How often `pg_stat_activity` is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// A PostgreSQL URL; each phase makes a schema of its own in its database.
    pub url: String,
    /// How long each `append`, `renew` and `claim` phase measures.
    pub seconds: f64,
    /// The callers of the `append`, `renew` and `claim` phases, one phase each.
    pub concurrency: Vec<usize>,
    /// The simulated workers of the `sim` phases, one phase each.
    pub workers: Vec<usize>,
    /// How long each `sim` phase measures, after its warm-up.
    pub sim_seconds: f64,
    /// How long a `sim` phase runs before it measures (the first claims of every worker).
    pub warmup: f64,
    /// The most connections a phase's stores may open in all (each store is a process's pools).
    pub connections: usize,
    /// Sessions per simulated worker.
    pub sessions_per_worker: usize,
    /// Sessions queued for the `claim` phases.
    pub claim_sessions: usize,
    /// Ended sessions (with an event and a released lease) each phase's tables start with.
    pub history: usize,
    /// Whether simulated owners read their lease every 500 ms, as `weft worker` does.
    pub looks: bool,
    /// The durability of appends.
    pub durability: Durability,
    /// The phases to run: `append`, `renew`, `claim`, `sim`.
    pub phases: Vec<String>,
}

/// The figures of one `append`, `renew` or `claim` phase.
#[derive(Clone, Debug)]
pub struct PhaseReport {
    pub kind: &'static str,
    pub callers: usize,
    pub stores: usize,
    pub wall_s: f64,
    /// Calls completed (appends, renewals, claim calls).
    pub ops: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Sessions taken by the claims (`claim` only).
    pub claimed: u64,
    pub errors: BTreeMap<String, u64>,
    pub usage: Usage,
    pub activity: Activity,
    pub tables: Vec<TableStats>,
}

/// The figures of one `sim` phase.
#[derive(Clone, Debug)]
pub struct SimReport {
    pub workers: usize,
    pub stores: usize,
    pub sessions: usize,
    pub looks: bool,
    pub wall_s: f64,
    /// One claim per worker per poll.
    pub claims_nominal_per_s: f64,
    /// Claims the workers' polls asked for per second: a worker with a free slot claims at each
    /// poll; a poll that came while its claim still ran is counted here and not in
    /// [`SimReport::claims_per_s`] (a worker with every slot taken does not poll).
    pub claims_offered_per_s: f64,
    /// Claims made on a poll per second.
    pub claims_per_s: f64,
    /// Claims made because a session ended and a slot freed, per second.
    pub extra_claims_per_s: f64,
    pub claim_p50_ms: Option<f64>,
    pub claim_p99_ms: Option<f64>,
    pub sessions_claimed_per_s: f64,
    /// Leases held on average.
    pub held: f64,
    /// Renewals due per second (leases held ÷ a third of the lease time).
    pub renewals_offered_per_s: f64,
    pub renewals_per_s: f64,
    pub renew_p50_ms: Option<f64>,
    pub renew_p99_ms: Option<f64>,
    /// Renewals that completed after the lease they renewed had run out.
    pub late_renewals: u64,
    /// Renewals that found the lease taken by another worker.
    pub leases_lost: u64,
    /// Lease reads due per second (leases held ÷ 500 ms), when owners look.
    pub looks_offered_per_s: f64,
    pub looks_per_s: f64,
    pub look_p50_ms: Option<f64>,
    pub look_p99_ms: Option<f64>,
    /// Lease reads given up after 500 ms, as the owner gives them up.
    pub look_timeouts: u64,
    /// Failed calls (a look given up after 500 ms is in [`SimReport::look_timeouts`]), by cause.
    pub errors: BTreeMap<String, u64>,
    /// Failed calls by kind: `claim`, `renew`, `look`, `release`.
    pub errors_by_call: BTreeMap<&'static str, u64>,
    pub usage: Usage,
    pub activity: Activity,
    pub tables: Vec<TableStats>,
}

/// CPU used during a phase.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    /// Every process of the PostgreSQL cluster (None when the server is not on this machine).
    pub pg_cpu_s: Option<f64>,
    /// This process.
    pub bench_cpu_s: Option<f64>,
    /// The whole machine (all cores), from `/proc/stat`.
    pub machine_busy_s: Option<f64>,
    pub machine_iowait_s: Option<f64>,
}

/// What `pg_stat_activity` showed during a phase.
#[derive(Clone, Debug, Default)]
pub struct Activity {
    pub samples: u64,
    /// (statement, wait) → backends of the database seen busy with it, summed over samples.
    pub busy: BTreeMap<(String, String), u64>,
    /// Most backends of the database seen at once (busy or idle).
    pub max_backends: u64,
    /// Busy backends of other databases, summed over samples.
    pub others_busy: u64,
}

/// Counters of one table over a phase (`pg_stat_user_tables`, differences; dead tuples at the end).
#[derive(Clone, Debug, Default)]
pub struct TableStats {
    pub table: String,
    pub seq_scan: i64,
    pub seq_tup_read: i64,
    pub idx_scan: i64,
    pub idx_tup_fetch: i64,
    pub n_tup_ins: i64,
    pub n_tup_upd: i64,
    pub n_tup_hot_upd: i64,
    pub n_dead_tup: i64,
    pub n_live_tup: i64,
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct Report {
    pub server: BTreeMap<String, String>,
    pub machine: BTreeMap<String, String>,
    pub phases: Vec<PhaseReport>,
    pub sims: Vec<SimReport>,
}

/// Runs the phases the config names, in order: `append`, `renew`, `claim` for each concurrency,
/// then `sim` for each number of workers.
pub async fn run(cfg: Config) -> Result<Report, BenchError> {
    if cfg.connections < POOL + LEASE_POOL {
        return Err(BenchError::Setup(format!(
            "pg-capacity: --connections must be at least {} (one store's pools)",
            POOL + LEASE_POOL
        )));
    }
    let mut probe = connect(&cfg.url).await?;
    let server = server_settings(&mut probe).await?;
    let postmaster = postmaster_pid(&mut probe).await;
    let _ = probe.close().await;
    let mut report = Report {
        server,
        machine: machine(),
        phases: Vec::new(),
        sims: Vec::new(),
    };
    if postmaster.is_none() {
        eprintln!(
            "pg-capacity: the PostgreSQL server is not a process of this machine: its CPU is not measured"
        );
    }
    let has = |p: &str| cfg.phases.iter().any(|x| x == p);
    for kind in ["append", "renew", "claim"] {
        if !has(kind) {
            continue;
        }
        for &c in &cfg.concurrency {
            let c = c.max(1);
            eprintln!("pg-capacity: {kind}, {c} callers ...");
            let r = phase(&cfg, kind, c, postmaster).await?;
            eprintln!(
                "pg-capacity: {kind}, {c} callers: {:.0}/s, p50 {} ms, p99 {} ms",
                r.ops as f64 / r.wall_s,
                ms(r.p50_ms),
                ms(r.p99_ms)
            );
            report.phases.push(r);
        }
    }
    if has("sim") {
        for &w in &cfg.workers {
            let w = w.max(1);
            eprintln!("pg-capacity: sim, {w} workers ...");
            let r = sim(&cfg, w, postmaster).await?;
            eprintln!(
                "pg-capacity: sim, {w} workers: claims {:.0}/s of {:.0}/s offered (p99 {} ms), renewals {:.0}/s of {:.0}/s (p99 {} ms)",
                r.claims_per_s,
                r.claims_offered_per_s,
                ms(r.claim_p99_ms),
                r.renewals_per_s,
                r.renewals_offered_per_s,
                ms(r.renew_p99_ms)
            );
            report.sims.push(r);
        }
    }
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// Setting up a phase.

async fn connect(url: &str) -> Result<PgConnection, BenchError> {
    PgConnection::connect(url)
        .await
        .map_err(|e| BenchError::Setup(format!("pg-capacity: cannot connect to {url}: {e}")))
}

fn sql_err(what: &str) -> impl Fn(sqlx::Error) -> BenchError + '_ {
    move |e| BenchError::Setup(format!("pg-capacity: cannot {what}: {e}"))
}

async fn server_settings(c: &mut PgConnection) -> Result<BTreeMap<String, String>, BenchError> {
    let mut out = BTreeMap::new();
    let version: String = sqlx::query_scalar("SELECT version()")
        .fetch_one(&mut *c)
        .await
        .map_err(sql_err("read the server's version"))?;
    out.insert("version".to_owned(), version);
    for name in [
        "max_connections",
        "superuser_reserved_connections",
        "shared_buffers",
        "synchronous_commit",
        "fsync",
        "wal_sync_method",
        "commit_delay",
        "autovacuum",
        "max_wal_size",
    ] {
        let v: String = sqlx::query_scalar(&format!("SHOW {name}"))
            .fetch_one(&mut *c)
            .await
            .map_err(sql_err("read the server's settings"))?;
        out.insert(name.to_owned(), v);
    }
    Ok(out)
}

/// The postmaster of the server `c` is connected to: the parent of its backend, when that
/// backend is a process of this machine.
async fn postmaster_pid(c: &mut PgConnection) -> Option<u32> {
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *c)
        .await
        .ok()?;
    let backend = u32::try_from(backend).ok()?;
    let (ppid, _, _) = proc_stat(backend)?;
    // A backend is the postmaster's child; check it is a postgres process at all.
    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).ok()?;
    comm.trim().starts_with("postgres").then_some(ppid)
}

fn machine() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    out.insert("cores".to_owned(), cores.to_string());
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo")
        && let Some(model) = info
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
    {
        out.insert("cpu".to_owned(), model.trim().to_owned());
    }
    if let Ok(mem) = std::fs::read_to_string("/proc/meminfo")
        && let Some(kb) = mem
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
    {
        out.insert(
            "memory_gb".to_owned(),
            format!("{:.1}", kb / 1024.0 / 1024.0),
        );
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        out.insert(
            "load_at_start".to_owned(),
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    out
}

/// `n` stores on a new schema of the database (its tables created by the first).
async fn stores(cfg: &Config, schema: &str, n: usize) -> Result<Vec<Arc<PgStore>>, BenchError> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let s = PgStore::connect_durable(&cfg.url, Some(schema), cfg.durability).await?;
        out.push(Arc::new(s));
    }
    Ok(out)
}

fn schema_name(kind: &str, n: usize) -> String {
    format!("weft_cap_{kind}_{n}_{}", std::process::id())
}

fn owner(name: String) -> Owner {
    Owner {
        id: name,
        host: "weft-bench".to_owned(),
        pid: std::process::id(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn envelope(seq: u64, epoch: u64, event: Event) -> Envelope {
    Envelope {
        seq,
        ts: now_ms(),
        v: EVENT_VERSION,
        epoch,
        event,
    }
}

/// A tool call's result, as a run records one: a few hundred bytes of JSON.
fn tool_call_finished(n: u64) -> Event {
    Event::ToolCallFinished {
        call_id: format!("call_{n:08}"),
        outcome: ToolOutcome::Ok {
            output: json!({
                "status": 200,
                "url": "https://api.example.com/v1/orders/12345",
                "body": {
                    "order": "12345",
                    "state": "shipped",
                    "items": [{"sku": "A-100", "qty": 2}, {"sku": "B-220", "qty": 1}],
                    "note": "left at the front desk; signed for by the receptionist",
                },
            }),
        },
        duration_ms: 42,
    }
}

/// Fills a phase's new tables with `n` ended sessions, each with one event and a released lease
/// (as a store that has run sessions keeps them until they are pruned), written in SQL at once:
/// lookups by id then go through the indexes, and the claims' scans meet the leases of ended
/// sessions, as on a store with a history.
async fn history(url: &str, schema: &str, n: usize) -> Result<(), BenchError> {
    if n == 0 {
        return Ok(());
    }
    let mut c = connect(url).await?;
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let now = now_ms();
    let statements = [
        format!(
            "INSERT INTO \"{schema}\".sessions (id, agent, status, created_at, updated_at, last_seq) \
             SELECT 'ended-' || g, '{AGENT}', 'completed', $2 - g, $2 - g, 1 \
             FROM generate_series(1, $1::int8) g"
        ),
        format!(
            "INSERT INTO \"{schema}\".events (session_id, seq, ts, v, type, payload, epoch) \
             SELECT 'ended-' || g, 1, $2 - g, 1, 'session_started', \
             json_build_object('type', 'session_started', 'session_id', 'ended-' || g, 'agent', '{AGENT}', 'input', NULL), 1 \
             FROM generate_series(1, $1::int8) g"
        ),
        format!(
            "INSERT INTO \"{schema}\".leases (session, owner, host, pid, epoch, expires_at) \
             SELECT 'ended-' || g, 'ended', 'weft-bench', 1, 1, 0 \
             FROM generate_series(1, $1::int8) g"
        ),
    ];
    for sql in &statements {
        sqlx::query(sql)
            .bind(n)
            .bind(now)
            .execute(&mut c)
            .await
            .map_err(sql_err("write the ended sessions"))?;
    }
    let _ = c.close().await;
    Ok(())
}

/// Creates `n` sessions as `weft submit` leaves them: running, a `session_started` event, no
/// lease.
async fn queue_sessions(
    stores: &[Arc<PgStore>],
    prefix: &str,
    n: usize,
) -> Result<Vec<String>, BenchError> {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:06}")).collect();
    let results: Vec<Result<(), StoreError>> = futures::stream::iter(ids.iter().enumerate())
        .map(|(i, id)| {
            let store = Arc::clone(&stores[i % stores.len()]);
            let id = id.clone();
            async move {
                let started = Event::SessionStarted {
                    session_id: id.clone(),
                    agent: AGENT.to_owned(),
                    input: Value::Null,
                    mode: None,
                    parent_id: None,
                };
                store
                    .create_with(
                        NewSession {
                            id,
                            agent: AGENT.to_owned(),
                            ..NewSession::default()
                        },
                        &[envelope(1, 0, started)],
                        SessionStatus::Running,
                        now_ms(),
                    )
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(ids)
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// Latencies (ms) and errors, shared by a phase's callers.
#[derive(Default)]
struct Calls {
    ms: std::sync::Mutex<Vec<f64>>,
    errors: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl Calls {
    fn ok(&self, started: Instant) {
        let v = started.elapsed().as_secs_f64() * 1000.0;
        if let Ok(mut m) = self.ms.lock() {
            m.push(v);
        }
    }

    fn err(&self, e: &StoreError) {
        if let Ok(mut m) = self.errors.lock() {
            *m.entry(error_label(e)).or_default() += 1;
        }
    }

    fn count(&self) -> u64 {
        self.ms.lock().map_or(0, |m| m.len() as u64)
    }

    fn percentiles(&self) -> (Option<f64>, Option<f64>) {
        let mut v = self.ms.lock().map(|m| m.clone()).unwrap_or_default();
        v.sort_by(f64::total_cmp);
        (pct(&v, 50.0), pct(&v, 99.0))
    }

    fn errors(&self) -> BTreeMap<String, u64> {
        self.errors.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// An error as one line per cause: digits written `N`, so that ids do not split a cause.
fn error_label(e: &StoreError) -> String {
    let kind = match e {
        StoreError::Unavailable { .. } => "unavailable",
        StoreError::LeaseLost(_) => "lease lost",
        StoreError::Leased { .. } => "leased",
        StoreError::Conflict { .. } => "conflict",
        StoreError::Query { .. } => "query",
        _ => "other",
    };
    let text: String = e
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_digit() { 'N' } else { c })
        .collect();
    let mut short: String = text.chars().take(160).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    format!("{kind}: {short}")
}

/// The p-th percentile by nearest rank.
fn pct(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// CPU counters at one moment.
#[derive(Clone, Copy, Debug)]
struct Cpu {
    pg: Option<f64>,
    bench: Option<f64>,
    busy: Option<f64>,
    iowait: Option<f64>,
}

impl Cpu {
    fn now(postmaster: Option<u32>) -> Self {
        let (busy, iowait) = machine_cpu().map_or((None, None), |(b, w)| (Some(b), Some(w)));
        Self {
            pg: postmaster.and_then(cluster_cpu_s),
            bench: crate::serve_load::cpu_s_self(),
            busy,
            iowait,
        }
    }

    fn since(self, before: Self) -> Usage {
        let d = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
        Usage {
            pg_cpu_s: d(self.pg, before.pg),
            bench_cpu_s: d(self.bench, before.bench),
            machine_busy_s: d(self.busy, before.busy),
            machine_iowait_s: d(self.iowait, before.iowait),
        }
    }
}

const TICKS_PER_S: f64 = 100.0;

/// (parent pid, own user + system ticks, waited-for children's user + system ticks) of a process.
fn proc_stat(pid: u32) -> Option<(u32, f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    let ppid: u32 = f.get(1)?.parse().ok()?;
    Some((ppid, num(11)? + num(12)?, num(13)? + num(14)?))
}

/// The CPU seconds of a PostgreSQL cluster: its postmaster, the children it has reaped (their
/// ticks are added to its own when they exit) and the children alive now.
fn cluster_cpu_s(postmaster: u32) -> Option<f64> {
    let (_, own, reaped) = proc_stat(postmaster)?;
    let mut ticks = own + reaped;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == postmaster {
            continue;
        }
        if let Some((ppid, own, _)) = proc_stat(pid)
            && ppid == postmaster
        {
            ticks += own;
        }
    }
    Some(ticks / TICKS_PER_S)
}

/// The machine's busy and iowait CPU seconds (all cores) since boot, from `/proc/stat`.
fn machine_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some(((total - idle) / TICKS_PER_S, v.get(4)? / TICKS_PER_S))
}

/// Samples `pg_stat_activity` until `stop` is set.
async fn sample_activity(url: String, stop: Arc<AtomicBool>) -> Activity {
    let mut act = Activity::default();
    let Ok(mut c) = PgConnection::connect(&url).await else {
        return act;
    };
    let sql = "SELECT datname = current_database(), state, \
               coalesce(wait_event_type, ''), coalesce(wait_event, ''), left(query, 200) \
               FROM pg_stat_activity \
               WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !stop.load(Ordering::Acquire) {
        tick.tick().await;
        let Ok(rows) = sqlx::query(sql).fetch_all(&mut c).await else {
            continue;
        };
        act.samples += 1;
        let mut ours = 0;
        for r in rows {
            let mine: Option<bool> = r.try_get(0).ok();
            let state: Option<String> = r.try_get(1).ok().flatten();
            let state = state.unwrap_or_default();
            if mine != Some(true) {
                if state != "idle" && !state.is_empty() {
                    act.others_busy += 1;
                }
                continue;
            }
            ours += 1;
            if state == "idle" {
                continue;
            }
            let wtype: String = r.try_get(2).unwrap_or_default();
            let wevent: String = r.try_get(3).unwrap_or_default();
            let query: String = r.try_get(4).unwrap_or_default();
            let wait = if state.starts_with("idle in transaction") {
                "client: idle in transaction".to_owned()
            } else if wtype.is_empty() {
                "CPU".to_owned()
            } else {
                format!("{wtype}:{wevent}")
            };
            *act.busy.entry((statement(&query), wait)).or_default() += 1;
        }
        act.max_backends = act.max_backends.max(ours);
    }
    let _ = c.close().await;
    act
}

/// The weft statement a query's text is (the statements of `weft_store::postgres` and `lease`).
fn statement(q: &str) -> String {
    let q = q.trim_start();
    let known = [
        (
            "SELECT s.id FROM leases l JOIN sessions s",
            "claim: expired leases",
        ),
        (
            "SELECT s.id FROM sessions s WHERE",
            "claim: never-leased sessions",
        ),
        ("INSERT INTO leases", "take a lease (upsert)"),
        ("UPDATE leases SET expires_at", "renew / release"),
        ("UPDATE sessions SET last_seq", "append: session row"),
        ("INSERT INTO events", "append: events"),
        ("INSERT INTO sessions", "create a session"),
        ("COMMIT", "COMMIT"),
        ("BEGIN", "BEGIN"),
        ("ROLLBACK", "ROLLBACK"),
    ];
    if q.starts_with("SELECT owner, host, pid, epoch, expires_at, request FROM leases") {
        return if q.contains("FOR SHARE") {
            "append: fence (lease FOR SHARE)".to_owned()
        } else {
            "read a lease (look)".to_owned()
        };
    }
    for (prefix, name) in known {
        if q.starts_with(prefix) {
            return name.to_owned();
        }
    }
    q.chars().take(40).collect()
}

/// Gives the planner statistics of the phase's tables as they are when it starts measuring, as
/// autovacuum's analyze would on a server that runs it (the server measured may not).
async fn analyze(url: &str, schema: &str) {
    let Ok(mut c) = PgConnection::connect(url).await else {
        return;
    };
    let tables = ["sessions", "events", "leases"]
        .map(|t| format!("\"{schema}\".{t}"))
        .join(", ");
    if let Err(e) = sqlx::query(&format!("ANALYZE {tables}"))
        .execute(&mut c)
        .await
    {
        eprintln!("pg-capacity: cannot analyze the tables of {schema}: {e}");
    }
    let _ = c.close().await;
}

async fn table_stats(url: &str, schema: &str) -> Vec<TableStats> {
    let Ok(mut c) = PgConnection::connect(url).await else {
        return Vec::new();
    };
    let rows = sqlx::query(
        "SELECT relname::text, seq_scan, seq_tup_read, coalesce(idx_scan, 0), \
         coalesce(idx_tup_fetch, 0), n_tup_ins, n_tup_upd, n_tup_hot_upd, n_dead_tup, n_live_tup \
         FROM pg_stat_user_tables WHERE schemaname = $1 \
         AND relname IN ('sessions', 'events', 'leases') ORDER BY relname",
    )
    .bind(schema)
    .fetch_all(&mut c)
    .await
    .unwrap_or_default();
    let _ = c.close().await;
    rows.iter()
        .map(|r| TableStats {
            table: r.try_get(0).unwrap_or_default(),
            seq_scan: r.try_get(1).unwrap_or_default(),
            seq_tup_read: r.try_get(2).unwrap_or_default(),
            idx_scan: r.try_get(3).unwrap_or_default(),
            idx_tup_fetch: r.try_get(4).unwrap_or_default(),
            n_tup_ins: r.try_get(5).unwrap_or_default(),
            n_tup_upd: r.try_get(6).unwrap_or_default(),
            n_tup_hot_upd: r.try_get(7).unwrap_or_default(),
            n_dead_tup: r.try_get(8).unwrap_or_default(),
            n_live_tup: r.try_get(9).unwrap_or_default(),
        })
        .collect()
}

/// The counters of `after` less those of `before` (dead and live tuples as they are at the end).
fn table_delta(before: &[TableStats], after: Vec<TableStats>) -> Vec<TableStats> {
    after
        .into_iter()
        .map(|mut a| {
            if let Some(b) = before.iter().find(|b| b.table == a.table) {
                a.seq_scan -= b.seq_scan;
                a.seq_tup_read -= b.seq_tup_read;
                a.idx_scan -= b.idx_scan;
                a.idx_tup_fetch -= b.idx_tup_fetch;
                a.n_tup_ins -= b.n_tup_ins;
                a.n_tup_upd -= b.n_tup_upd;
                a.n_tup_hot_upd -= b.n_tup_hot_upd;
            }
            a
        })
        .collect()
}

/// What a phase's measured window saw of the server: activity, CPU, table counters.
struct Watch {
    url: String,
    schema: String,
    postmaster: Option<u32>,
    stop: Arc<AtomicBool>,
    sampler: tokio::task::JoinHandle<Activity>,
    cpu: Cpu,
    tables: Vec<TableStats>,
    started: Instant,
}

impl Watch {
    async fn start(url: &str, schema: &str, postmaster: Option<u32>) -> Self {
        analyze(url, schema).await;
        let tables = table_stats(url, schema).await;
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = tokio::spawn(sample_activity(url.to_owned(), Arc::clone(&stop)));
        Self {
            url: url.to_owned(),
            schema: schema.to_owned(),
            postmaster,
            stop,
            sampler,
            cpu: Cpu::now(postmaster),
            tables,
            started: Instant::now(),
        }
    }

    /// Ends the window: (wall seconds, CPU, activity); the table counters come with
    /// [`Watch::tables`] once the stores are closed (a backend's counters reach the statistics
    /// when it is idle or exits).
    async fn stop(self) -> (f64, Usage, Activity, Pending) {
        let wall = self.started.elapsed().as_secs_f64();
        let usage = Cpu::now(self.postmaster).since(self.cpu);
        self.stop.store(true, Ordering::Release);
        let act = self.sampler.await.unwrap_or_default();
        (
            wall,
            usage,
            act,
            Pending {
                url: self.url,
                schema: self.schema,
                before: self.tables,
            },
        )
    }
}

/// Table counters to read once the phase's stores are closed.
struct Pending {
    url: String,
    schema: String,
    before: Vec<TableStats>,
}

impl Pending {
    async fn read(self, stores: Vec<Arc<PgStore>>) -> Vec<TableStats> {
        for s in &stores {
            s.close().await;
        }
        drop(stores);
        tokio::time::sleep(Duration::from_millis(300)).await;
        table_delta(&self.before, table_stats(&self.url, &self.schema).await)
    }
}

// ---------------------------------------------------------------------------------------------
// The `append`, `renew` and `claim` phases.

async fn phase(
    cfg: &Config,
    kind: &'static str,
    callers: usize,
    postmaster: Option<u32>,
) -> Result<PhaseReport, BenchError> {
    // A connection for each caller, within the budget: renewals use a store's 2 lease
    // connections (and keep the one its migration opened), the others its pool of 8 (and its 2
    // lease connections for releases).
    let (per_store, conns) = match kind {
        "renew" => (LEASE_POOL, LEASE_POOL + 1),
        _ => (POOL, POOL + LEASE_POOL),
    };
    let n_stores = callers
        .div_ceil(per_store)
        .min(cfg.connections / conns)
        .max(1);
    let schema = schema_name(kind, callers);
    let stores = stores(cfg, &schema, n_stores).await?;
    history(&cfg.url, &schema, cfg.history).await?;
    let calls = Arc::new(Calls::default());
    let claimed = Arc::new(AtomicU64::new(0));
    // Each caller's setup: its session (append) or its lease (renew); the claim phase queues
    // its sessions first.
    let ttl_ms = i64::try_from(weft_store::lease_time().as_millis()).unwrap_or(15_000);
    let long_ttl = 3_600_000;
    let mut setups = Vec::with_capacity(callers);
    match kind {
        "append" => {
            for i in 0..callers {
                let store = &stores[i % n_stores];
                let id = format!("append-{i:04}");
                let who = owner(format!("appender-{i}"));
                let lease = store.acquire(&id, &who, now_ms(), long_ttl, false).await?;
                let started = Event::SessionStarted {
                    session_id: id.clone(),
                    agent: AGENT.to_owned(),
                    input: Value::Null,
                    mode: None,
                    parent_id: None,
                };
                store
                    .create_with(
                        NewSession {
                            id: id.clone(),
                            agent: AGENT.to_owned(),
                            ..NewSession::default()
                        },
                        &[envelope(1, lease.epoch, started)],
                        SessionStatus::Running,
                        now_ms(),
                    )
                    .await?;
                setups.push(Some(lease));
            }
        }
        "renew" => {
            for i in 0..callers {
                let store = &stores[i % n_stores];
                let id = format!("renew-{i:04}");
                let who = owner(format!("renewer-{i}"));
                setups.push(Some(
                    store.acquire(&id, &who, now_ms(), ttl_ms, false).await?,
                ));
            }
        }
        _ => {
            queue_sessions(&stores, "queued", cfg.claim_sessions).await?;
            setups.resize(callers, None);
        }
    }
    let seconds = Duration::from_secs_f64(cfg.seconds.max(0.1));
    let watch = Watch::start(&cfg.url, &schema, postmaster).await;
    let deadline = Instant::now() + seconds;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, lease) in setups.into_iter().enumerate() {
        let store = Arc::clone(&stores[i % n_stores]);
        let calls = Arc::clone(&calls);
        let claimed = Arc::clone(&claimed);
        tasks.spawn(async move {
            match (kind, lease) {
                ("append", Some(lease)) => append_loop(&store, &lease, deadline, &calls).await,
                ("renew", Some(lease)) => {
                    renew_loop(&store, &lease, ttl_ms, deadline, &calls).await
                }
                _ => claim_loop(&store, i, ttl_ms, deadline, &calls, &claimed).await,
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let (wall, usage, activity, pending) = watch.stop().await;
    let tables = pending.read(stores).await;
    let (p50, p99) = calls.percentiles();
    Ok(PhaseReport {
        kind,
        callers,
        stores: n_stores,
        wall_s: wall,
        ops: calls.count(),
        p50_ms: p50,
        p99_ms: p99,
        claimed: claimed.load(Ordering::Relaxed),
        errors: calls.errors(),
        usage,
        activity,
        tables,
    })
}

async fn append_loop(store: &PgStore, lease: &Lease, deadline: Instant, calls: &Calls) {
    let mut seq = 1_u64;
    while Instant::now() < deadline {
        let batch = [envelope(seq + 1, lease.epoch, tool_call_finished(seq))];
        let t = Instant::now();
        match store
            .append(
                &lease.session,
                seq,
                &batch,
                SessionStatus::Running,
                now_ms(),
            )
            .await
        {
            Ok(()) => {
                calls.ok(t);
                seq += 1;
            }
            Err(e) => {
                calls.err(&e);
                // Where the log ends now, if the append went through after all.
                if let Ok(rec) = store.get(&lease.session).await {
                    seq = rec.last_seq;
                }
            }
        }
    }
}

async fn renew_loop(store: &PgStore, lease: &Lease, ttl_ms: i64, deadline: Instant, calls: &Calls) {
    while Instant::now() < deadline {
        let t = Instant::now();
        match store.renew(lease, now_ms().saturating_add(ttl_ms)).await {
            Ok(()) => calls.ok(t),
            Err(e) => calls.err(&e),
        }
    }
}

async fn claim_loop(
    store: &PgStore,
    i: usize,
    ttl_ms: i64,
    deadline: Instant,
    calls: &Calls,
    claimed: &AtomicU64,
) {
    let who = owner(format!("claimer-{i}"));
    let agents = [AGENT.to_owned()];
    while Instant::now() < deadline {
        let t = Instant::now();
        match store
            .claim(&who, &agents, now_ms(), ttl_ms, CLAIM_LIMIT)
            .await
        {
            Ok(leases) => {
                calls.ok(t);
                claimed.fetch_add(leases.len() as u64, Ordering::Relaxed);
                for l in &leases {
                    if let Err(e) = store.release(l).await {
                        calls.err(&e);
                    }
                }
            }
            Err(e) => {
                calls.err(&e);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The simulation of W workers.

/// What a simulation's workers share.
struct Sim {
    ttl_ms: i64,
    renew_every: Duration,
    looks: bool,
    /// The measured window.
    from: Instant,
    until: Instant,
    stop: AtomicBool,
    claims: Calls,
    extra_claims: AtomicU64,
    /// Polls a worker let pass because its claim was still running.
    missed_polls: AtomicU64,
    claimed: AtomicU64,
    renewals: Calls,
    late: AtomicU64,
    lost: AtomicU64,
    looks_done: Calls,
    look_timeouts: AtomicU64,
    held: AtomicUsize,
    held_sum: AtomicU64,
    held_samples: AtomicU64,
    other_errors: Calls,
}

impl Sim {
    fn measuring(&self, t: Instant) -> bool {
        t >= self.from && t < self.until
    }
}

/// A small deterministic generator (splitmix64), for start offsets and run times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A duration drawn evenly from `lo..hi`.
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_millis().max(1) as u64;
        lo + Duration::from_millis(self.next() % span)
    }
}

async fn sim(
    cfg: &Config,
    workers: usize,
    postmaster: Option<u32>,
) -> Result<SimReport, BenchError> {
    let n_stores = (cfg.connections / (POOL + LEASE_POOL)).min(workers).max(1);
    let schema = schema_name("sim", workers);
    let stores = stores(cfg, &schema, n_stores).await?;
    history(&cfg.url, &schema, cfg.history).await?;
    let sessions = workers * cfg.sessions_per_worker.max(1);
    queue_sessions(&stores, "sim", sessions).await?;
    let ttl = weft_store::lease_time();
    let warmup = Duration::from_secs_f64(cfg.warmup.max(0.0));
    let window = Duration::from_secs_f64(cfg.sim_seconds.max(0.1));
    let t0 = Instant::now();
    let sim = Arc::new(Sim {
        ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(15_000),
        renew_every: ttl / 3,
        looks: cfg.looks,
        from: t0 + warmup,
        until: t0 + warmup + window,
        stop: AtomicBool::new(false),
        claims: Calls::default(),
        extra_claims: AtomicU64::new(0),
        missed_polls: AtomicU64::new(0),
        claimed: AtomicU64::new(0),
        renewals: Calls::default(),
        late: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        looks_done: Calls::default(),
        look_timeouts: AtomicU64::new(0),
        held: AtomicUsize::new(0),
        held_sum: AtomicU64::new(0),
        held_samples: AtomicU64::new(0),
        other_errors: Calls::default(),
    });
    let mut rng = Rng(0x5eed ^ workers as u64);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..workers {
        let store = Arc::clone(&stores[i % n_stores]);
        let offset = rng.between(Duration::ZERO, POLL);
        let seed = rng.next();
        tasks.spawn(sim_worker(Arc::clone(&sim), store, i, offset, seed));
    }
    // How many leases are held, sampled through the window.
    let counter = {
        let sim = Arc::clone(&sim);
        tokio::spawn(async move {
            tokio::time::sleep_until(sim.from.into()).await;
            while Instant::now() < sim.until {
                sim.held_sum
                    .fetch_add(sim.held.load(Ordering::Relaxed) as u64, Ordering::Relaxed);
                sim.held_samples.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        })
    };
    tokio::time::sleep_until(sim.from.into()).await;
    let watch = Watch::start(&cfg.url, &schema, postmaster).await;
    tokio::time::sleep_until(sim.until.into()).await;
    let (wall, usage, activity, pending) = watch.stop().await;
    sim.stop.store(true, Ordering::Release);
    let _ = counter.await;
    while tasks.join_next().await.is_some() {}
    let tables = pending.read(stores).await;
    let secs = window.as_secs_f64();
    let held = sim.held_sum.load(Ordering::Relaxed) as f64
        / sim.held_samples.load(Ordering::Relaxed).max(1) as f64;
    let (claim_p50, claim_p99) = sim.claims.percentiles();
    let (renew_p50, renew_p99) = sim.renewals.percentiles();
    let (look_p50, look_p99) = sim.looks_done.percentiles();
    let mut errors = BTreeMap::new();
    let mut errors_by_call = BTreeMap::new();
    for (call, calls) in [
        ("claim", &sim.claims),
        ("renew", &sim.renewals),
        ("look", &sim.looks_done),
        ("release", &sim.other_errors),
    ] {
        for (k, v) in calls.errors() {
            *errors.entry(k).or_default() += v;
            *errors_by_call.entry(call).or_default() += v;
        }
    }
    let extra = sim.extra_claims.load(Ordering::Relaxed);
    let poll_claims = sim.claims.count().saturating_sub(extra);
    let missed = sim.missed_polls.load(Ordering::Relaxed);
    Ok(SimReport {
        workers,
        stores: n_stores,
        sessions,
        looks: cfg.looks,
        wall_s: wall,
        claims_nominal_per_s: workers as f64 / POLL.as_secs_f64(),
        claims_offered_per_s: (poll_claims + missed) as f64 / secs,
        claims_per_s: poll_claims as f64 / secs,
        extra_claims_per_s: extra as f64 / secs,
        claim_p50_ms: claim_p50,
        claim_p99_ms: claim_p99,
        sessions_claimed_per_s: sim.claimed.load(Ordering::Relaxed) as f64 / secs,
        held,
        renewals_offered_per_s: held / sim.renew_every.as_secs_f64(),
        renewals_per_s: sim.renewals.count() as f64 / secs,
        renew_p50_ms: renew_p50,
        renew_p99_ms: renew_p99,
        late_renewals: sim.late.load(Ordering::Relaxed),
        leases_lost: sim.lost.load(Ordering::Relaxed),
        looks_offered_per_s: if cfg.looks {
            held / LOOK_EVERY.as_secs_f64()
        } else {
            0.0
        },
        looks_per_s: sim.looks_done.count() as f64 / secs,
        look_p50_ms: look_p50,
        look_p99_ms: look_p99,
        look_timeouts: sim.look_timeouts.load(Ordering::Relaxed),
        errors,
        errors_by_call,
        usage,
        activity,
        tables,
    })
}

/// Why a simulated worker claims.
#[derive(Clone, Copy, PartialEq)]
enum Trigger {
    Poll,
    SlotFreed,
}

/// One simulated `weft worker --concurrency 8` (see `weft_host::worker::run`), polling every
/// second: it claims up to its free slots on each poll and again as soon as a session ends.
async fn sim_worker(sim: Arc<Sim>, store: Arc<PgStore>, i: usize, offset: Duration, seed: u64) {
    let who = owner(format!("sim-worker-{i}"));
    let agents = [AGENT.to_owned()];
    let mut rng = Rng(seed);
    let mut holders = tokio::task::JoinSet::new();
    tokio::time::sleep(offset).await;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + POLL, POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut trigger = Trigger::Poll;
    while !sim.stop.load(Ordering::Acquire) {
        let free = CLAIM_LIMIT.saturating_sub(holders.len());
        let mut claimed = 0;
        if free > 0 {
            let t = Instant::now();
            let measured = sim.measuring(t);
            let result = store.claim(&who, &agents, now_ms(), sim.ttl_ms, free).await;
            if measured && trigger == Trigger::Poll {
                let missed = (t.elapsed().as_secs_f64() / POLL.as_secs_f64()).floor() as u64;
                sim.missed_polls.fetch_add(missed, Ordering::Relaxed);
            }
            match result {
                Ok(leases) => {
                    claimed = leases.len();
                    if measured {
                        sim.claims.ok(t);
                        sim.claimed
                            .fetch_add(leases.len() as u64, Ordering::Relaxed);
                        if trigger == Trigger::SlotFreed {
                            sim.extra_claims.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    for lease in leases {
                        let run = rng.between(RUN_TIME.0, RUN_TIME.1);
                        holders.spawn(hold(Arc::clone(&sim), Arc::clone(&store), lease, run));
                    }
                }
                Err(e) if measured => sim.claims.err(&e),
                Err(_) => {}
            }
        }
        // As `weft worker`: with every free slot filled, wait for a session to end; otherwise
        // for the next poll or a session's end, whichever comes first.
        let full = free > 0 && claimed == free;
        tokio::select! {
            _ = tick.tick(), if !full => trigger = Trigger::Poll,
            Some(_) = holders.join_next(), if !holders.is_empty() => trigger = Trigger::SlotFreed,
            () = tokio::time::sleep_until(sim.until.into()) => break,
        }
    }
    while holders.join_next().await.is_some() {}
}

/// Holds a lease as `weft_host::ownership::hold` does for `run`, then releases it: every 500 ms
/// it renews the lease if a third of the lease time has passed since the last renewal, then reads
/// the lease (when owners look).
async fn hold(sim: Arc<Sim>, store: Arc<PgStore>, lease: Lease, run: Duration) {
    sim.held.fetch_add(1, Ordering::Relaxed);
    let end = Instant::now() + run;
    let mut renewed = Instant::now();
    let mut expires_at = lease.expires_at;
    let mut lost = false;
    loop {
        let wake = (Instant::now() + LOOK_EVERY.min(sim.renew_every)).min(end);
        tokio::time::sleep_until(wake.into()).await;
        if Instant::now() >= end || sim.stop.load(Ordering::Acquire) {
            break;
        }
        if renewed.elapsed() >= sim.renew_every {
            let until = now_ms().saturating_add(sim.ttl_ms);
            let t = Instant::now();
            let measured = sim.measuring(t);
            match store.renew(&lease, until).await {
                Ok(()) => {
                    if measured {
                        sim.renewals.ok(t);
                        if now_ms() > expires_at {
                            sim.late.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    expires_at = until;
                    renewed = Instant::now();
                }
                Err(StoreError::LeaseLost(_)) => {
                    if measured {
                        sim.lost.fetch_add(1, Ordering::Relaxed);
                    }
                    lost = true;
                    break;
                }
                Err(e) if measured => sim.renewals.err(&e),
                Err(_) => {}
            }
        }
        if sim.looks {
            let t = Instant::now();
            let measured = sim.measuring(t);
            match tokio::time::timeout(LOOK_EVERY, store.lease(&lease.session)).await {
                Ok(Ok(_)) if measured => sim.looks_done.ok(t),
                Ok(Err(e)) if measured => sim.looks_done.err(&e),
                Err(_) if measured => {
                    sim.look_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    }
    if !lost
        && let Err(e) = store.release(&lease).await
        && sim.measuring(Instant::now())
    {
        sim.other_errors.err(&e);
    }
    sim.held.fetch_sub(1, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// Printing.

fn ms(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| {
        if v < 10.0 {
            format!("{v:.2}")
        } else {
            format!("{v:.0}")
        }
    })
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

fn opt(v: Option<f64>, digits: i32) -> Value {
    v.map_or(Value::Null, |v| json!(round(v, digits)))
}

impl Usage {
    fn cores(v: Option<f64>, wall: f64) -> Option<f64> {
        v.map(|s| s / wall)
    }

    fn to_json(&self, wall: f64) -> Value {
        json!({
            "pg_cpu_s": opt(self.pg_cpu_s, 2),
            "pg_cores": opt(Self::cores(self.pg_cpu_s, wall), 2),
            "bench_cpu_s": opt(self.bench_cpu_s, 2),
            "bench_cores": opt(Self::cores(self.bench_cpu_s, wall), 2),
            "machine_busy_cores": opt(Self::cores(self.machine_busy_s, wall), 2),
            "machine_iowait_cores": opt(Self::cores(self.machine_iowait_s, wall), 2),
        })
    }
}

impl Activity {
    /// Busy backends of the database on average.
    fn busy_avg(&self) -> f64 {
        self.busy.values().sum::<u64>() as f64 / self.samples.max(1) as f64
    }

    /// Shares of the busy samples by `key` (0: statement, 1: wait), largest first.
    fn shares(&self, by_wait: bool) -> Vec<(String, f64)> {
        let total = self.busy.values().sum::<u64>().max(1) as f64;
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for ((stmt, wait), n) in &self.busy {
            *m.entry(if by_wait { wait.clone() } else { stmt.clone() })
                .or_default() += n;
        }
        let mut v: Vec<(String, f64)> = m
            .into_iter()
            .map(|(k, n)| (k, n as f64 / total * 100.0))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }

    fn top(&self, by_wait: bool, n: usize) -> String {
        if self.busy.is_empty() {
            return "-".to_owned();
        }
        self.shares(by_wait)
            .into_iter()
            .take(n)
            .map(|(k, p)| format!("{k} {p:.0}%"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn to_json(&self) -> Value {
        let total = self.busy.values().sum::<u64>().max(1) as f64;
        let mut pairs: Vec<(&(String, String), &u64)> = self.busy.iter().collect();
        pairs.sort_by(|a, b| b.1.cmp(a.1));
        let share = |v: Vec<(String, f64)>| -> Value {
            v.into_iter()
                .map(|(k, p)| json!({"name": k, "pct": round(p, 1)}))
                .collect()
        };
        json!({
            "samples": self.samples,
            "busy_backends_avg": round(self.busy_avg(), 2),
            "max_backends": self.max_backends,
            "other_databases_busy_avg": round(self.others_busy as f64 / self.samples.max(1) as f64, 2),
            "waits": share(self.shares(true)),
            "statements": share(self.shares(false)),
            "statement_waits": pairs.iter().take(12).map(|((s, w), n)| json!({
                "statement": s, "wait": w, "pct": round(**n as f64 / total * 100.0, 1)
            })).collect::<Vec<_>>(),
        })
    }
}

fn tables_json(t: &[TableStats]) -> Value {
    t.iter()
        .map(|t| {
            json!({
                "table": t.table, "seq_scan": t.seq_scan, "seq_tup_read": t.seq_tup_read,
                "idx_scan": t.idx_scan, "idx_tup_fetch": t.idx_tup_fetch, "n_tup_ins": t.n_tup_ins,
                "n_tup_upd": t.n_tup_upd, "n_tup_hot_upd": t.n_tup_hot_upd,
                "n_dead_tup": t.n_dead_tup, "n_live_tup": t.n_live_tup,
            })
        })
        .collect()
}

/// Rows of `sessions` and `leases` read per call (sequential and by index).
fn rows_read(t: &[TableStats], calls: f64) -> Option<f64> {
    let read: i64 = t
        .iter()
        .filter(|t| t.table == "sessions" || t.table == "leases")
        .map(|t| t.seq_tup_read + t.idx_tup_fetch)
        .sum();
    (calls > 0.0 && !t.is_empty()).then(|| read as f64 / calls)
}

impl PhaseReport {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.wall_s
    }

    fn per_core(&self) -> Option<f64> {
        self.usage
            .pg_cpu_s
            .filter(|s| *s > 0.0)
            .map(|s| self.ops as f64 / s)
    }

    fn to_json(&self) -> Value {
        json!({
            "phase": self.kind,
            "callers": self.callers,
            "stores": self.stores,
            "wall_s": round(self.wall_s, 2),
            "ops": self.ops,
            "ops_per_s": round(self.rate(), 1),
            "p50_ms": opt(self.p50_ms, 3),
            "p99_ms": opt(self.p99_ms, 3),
            "sessions_claimed": (self.kind == "claim").then_some(self.claimed),
            "ops_per_pg_cpu_s": opt(self.per_core(), 1),
            "rows_read_per_op": opt(rows_read(&self.tables, self.ops as f64), 1),
            "errors": self.errors,
            "cpu": self.usage.to_json(self.wall_s),
            "activity": self.activity.to_json(),
            "tables": tables_json(&self.tables),
        })
    }
}

impl SimReport {
    fn to_json(&self) -> Value {
        let claims = (self.claims_per_s + self.extra_claims_per_s) * self.wall_s;
        json!({
            "workers": self.workers,
            "stores": self.stores,
            "sessions": self.sessions,
            "looks": self.looks,
            "wall_s": round(self.wall_s, 2),
            "claims_nominal_per_s": round(self.claims_nominal_per_s, 1),
            "claims_offered_per_s": round(self.claims_offered_per_s, 1),
            "claims_per_s": round(self.claims_per_s, 1),
            "extra_claims_per_s": round(self.extra_claims_per_s, 1),
            "claim_p50_ms": opt(self.claim_p50_ms, 3),
            "claim_p99_ms": opt(self.claim_p99_ms, 3),
            "sessions_claimed_per_s": round(self.sessions_claimed_per_s, 1),
            "held_avg": round(self.held, 1),
            "renewals_offered_per_s": round(self.renewals_offered_per_s, 1),
            "renewals_per_s": round(self.renewals_per_s, 1),
            "renew_p50_ms": opt(self.renew_p50_ms, 3),
            "renew_p99_ms": opt(self.renew_p99_ms, 3),
            "late_renewals": self.late_renewals,
            "leases_lost": self.leases_lost,
            "looks_offered_per_s": round(self.looks_offered_per_s, 1),
            "looks_per_s": round(self.looks_per_s, 1),
            "look_p50_ms": opt(self.look_p50_ms, 3),
            "look_p99_ms": opt(self.look_p99_ms, 3),
            "look_timeouts": self.look_timeouts,
            "errors_by_call": self.errors_by_call,
            "rows_read_per_claim": opt(rows_read(&self.tables, claims), 1),
            "errors": self.errors,
            "cpu": self.usage.to_json(self.wall_s),
            "activity": self.activity.to_json(),
            "tables": tables_json(&self.tables),
        })
    }
}

impl Report {
    /// One JSON object with every figure.
    pub fn to_json(&self) -> Value {
        json!({
            "bench": "weft-bench pg-capacity",
            "server": self.server,
            "machine": self.machine,
            "phases": self.phases.iter().map(PhaseReport::to_json).collect::<Vec<_>>(),
            "sims": self.sims.iter().map(SimReport::to_json).collect::<Vec<_>>(),
        })
    }

    /// Markdown tables for people.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let s = |k: &str| self.server.get(k).map_or("?", String::as_str);
        out.push_str(&format!(
            "{}; max_connections {}, shared_buffers {}, synchronous_commit {}, fsync {} ({}), \
             commit_delay {}, autovacuum {}\n\n",
            s("version").split(" on ").next().unwrap_or("PostgreSQL"),
            s("max_connections"),
            s("shared_buffers"),
            s("synchronous_commit"),
            s("fsync"),
            s("wal_sync_method"),
            s("commit_delay"),
            s("autovacuum"),
        ));
        let cores =
            |u: Option<f64>, wall: f64| u.map_or("-".to_owned(), |v| format!("{:.2}", v / wall));
        if !self.phases.is_empty() {
            out.push_str(
                "| phase | callers | stores | backends | ops/s | p50 ms | p99 ms | errors \
                 | PG cores | ops per PG CPU-s | bench cores | machine busy | rows read/op \
                 | PG busy on (pg_stat_activity) |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
            );
            for p in &self.phases {
                let label = match p.kind {
                    "append" => "append (1 event)",
                    "renew" => "renew a lease",
                    _ => "claim ≤8 + release",
                };
                out.push_str(&format!(
                    "| {label} | {} | {} | {} | {:.0}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    p.callers,
                    p.stores,
                    p.activity.max_backends,
                    p.rate(),
                    if p.kind == "claim" {
                        format!(" ({:.0} sessions/s)", p.claimed as f64 / p.wall_s)
                    } else {
                        String::new()
                    },
                    ms(p.p50_ms),
                    ms(p.p99_ms),
                    p.errors.values().sum::<u64>(),
                    cores(p.usage.pg_cpu_s, p.wall_s),
                    p.per_core().map_or("-".to_owned(), |v| format!("{v:.0}")),
                    cores(p.usage.bench_cpu_s, p.wall_s),
                    cores(p.usage.machine_busy_s, p.wall_s),
                    rows_read(&p.tables, p.ops as f64).map_or("-".to_owned(), |v| format!("{v:.1}")),
                    p.activity.top(true, 3),
                ));
            }
            out.push('\n');
        }
        if !self.sims.is_empty() {
            out.push_str(
                "| workers | stores | sessions | claims/s offered → made (+ on a freed slot) \
                 | claim p50 / p99 ms | leases held | renewals/s due → made | renew p50 / p99 ms \
                 | late / lost | looks/s due → made | look p50 / p99 ms | errors: claim / renew / release (+ looks given up) | PG cores \
                 | machine busy | rows read/claim |\n\
                 |---:|---:|---:|---|---|---:|---|---|---|---|---|---:|---:|---:|---:|\n",
            );
            for r in &self.sims {
                let claims = (r.claims_per_s + r.extra_claims_per_s) * r.wall_s;
                out.push_str(&format!(
                    "| {} | {} | {} | {:.0} → {:.0} (+ {:.0}) | {} / {} | {:.0} | {:.0} → {:.0} \
                     | {} / {} | {} / {} | {:.0} → {:.0} | {} / {} | {} / {} / {} (+ {}) | {} | {} | {} |\n",
                    r.workers,
                    r.stores,
                    r.sessions,
                    r.claims_offered_per_s,
                    r.claims_per_s,
                    r.extra_claims_per_s,
                    ms(r.claim_p50_ms),
                    ms(r.claim_p99_ms),
                    r.held,
                    r.renewals_offered_per_s,
                    r.renewals_per_s,
                    ms(r.renew_p50_ms),
                    ms(r.renew_p99_ms),
                    r.late_renewals,
                    r.leases_lost,
                    r.looks_offered_per_s,
                    r.looks_per_s,
                    ms(r.look_p50_ms),
                    ms(r.look_p99_ms),
                    r.errors_by_call.get("claim").copied().unwrap_or(0),
                    r.errors_by_call.get("renew").copied().unwrap_or(0),
                    r.errors_by_call.get("release").copied().unwrap_or(0),
                    r.look_timeouts,
                    cores(r.usage.pg_cpu_s, r.wall_s),
                    cores(r.usage.machine_busy_s, r.wall_s),
                    rows_read(&r.tables, claims).map_or("-".to_owned(), |v| format!("{v:.0}")),
                ));
            }
            out.push('\n');
            out.push_str(
                "| workers | busy backends (avg / most connected) | PG busy on: statements \
                 | PG busy on: waits |\n|---:|---|---|---|\n",
            );
            for r in &self.sims {
                out.push_str(&format!(
                    "| {} | {:.1} / {} | {} | {} |\n",
                    r.workers,
                    r.activity.busy_avg(),
                    r.activity.max_backends,
                    r.activity.top(false, 4),
                    r.activity.top(true, 4),
                ));
            }
            out.push('\n');
        }
        let mut errors: BTreeMap<&str, u64> = BTreeMap::new();
        for (k, v) in self
            .phases
            .iter()
            .flat_map(|p| p.errors.iter())
            .chain(self.sims.iter().flat_map(|r| r.errors.iter()))
        {
            *errors.entry(k.as_str()).or_default() += v;
        }
        for (k, v) in errors {
            out.push_str(&format!("error: {v} × {k}\n"));
        }
        let others: u64 = self
            .phases
            .iter()
            .map(|p| p.activity.others_busy)
            .chain(self.sims.iter().map(|r| r.activity.others_busy))
            .sum();
        if others > 0 {
            out.push_str(&format!(
                "note: backends of other databases on the server were seen busy in {others} samples (their CPU is in \"PG cores\")\n"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn statements_are_named_as_the_store_writes_them() {
        assert_eq!(
            statement(
                "SELECT owner, host, pid, epoch, expires_at, request FROM leases WHERE session = $1 FOR SHARE"
            ),
            "append: fence (lease FOR SHARE)"
        );
        assert_eq!(
            statement(
                "SELECT owner, host, pid, epoch, expires_at, request FROM leases WHERE session = $1"
            ),
            "read a lease (look)"
        );
        assert_eq!(
            statement("UPDATE leases SET expires_at = $1 WHERE session = $2"),
            "renew / release"
        );
        assert_eq!(statement("SELECT 1"), "SELECT 1");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(pct(&v, 50.0), Some(50.0));
        assert_eq!(pct(&v, 99.0), Some(99.0));
        assert_eq!(pct(&[], 50.0), None);
    }

    #[test]
    fn own_process_is_read_from_proc() {
        let (ppid, own, _) = proc_stat(std::process::id()).unwrap();
        assert!(ppid > 0);
        assert!(own >= 0.0);
        assert!(machine_cpu().is_some());
    }

    #[test]
    fn run_times_stay_in_their_range() {
        let mut r = Rng(1);
        for _ in 0..1000 {
            let d = r.between(RUN_TIME.0, RUN_TIME.1);
            assert!(d >= RUN_TIME.0 && d < RUN_TIME.1);
        }
    }
}
