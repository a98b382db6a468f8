//! A load generator for LangGraph-API servers (`weft serve`, `langgraph dev`): N streaming runs,
//! each doing what the official `langgraph-sdk` does for `threads.create()` then
//! `runs.stream(thread_id, assistant, input=..., stream_mode="updates")`, over plain HTTP/1.1 and
//! server-sent events.
//!
//! A run's times are taken from its own start (thread creation included), as
//! `bench/serve_stream.py` takes them: to its first `updates` event and to the end of its stream.
//! A run is good when its stream ends without an `error` event and its last `updates` event holds
//! the scripted answer. The generator runs on the caller's runtime (the binary gives it one
//! thread) and reports the CPU it used, so that its own cost is visible beside the server's.
//!
//! For a fault in the middle of a batch, [`LoadConfig::then`] runs a shell command once a given
//! fraction of the runs' streams have begun (and the batch waits for it), and the report keeps
//! every run's times ([`LoadReport::runs`]) so that a caller can compare them, run by run, with
//! a batch without the fault.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot, watch};
use weft_model::sse::{SseEvent, SseParser};

use crate::BenchError;

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Base URLs (`http://127.0.0.1:2024`), used round-robin: run k goes to `urls[k % len]`.
    pub urls: Vec<String>,
    /// Runs in all.
    pub n: usize,
    /// Runs in flight at once (each from thread creation to the end of its stream).
    pub concurrency: usize,
    /// Sent as `x-api-key`, as the SDK sends its `api_key`.
    pub api_key: Option<String>,
    /// The assistant (agent) each run streams.
    pub assistant: String,
    /// The text the last `updates` event of a good run holds.
    pub expect: String,
    /// The user message of each run.
    pub message: String,
    /// Runs not finished when this much time has passed since the batch began are cancelled and
    /// counted as unfinished.
    pub deadline: Duration,
    /// Processes whose peak memory (VmHWM) and CPU seconds during the batch are reported: the
    /// servers under load.
    pub server_pids: Vec<u32>,
    /// A command to run in the middle of the batch, if any.
    pub then: Option<Then>,
}

/// A shell command (`sh -c`) run once, when `ceil(at_fraction × n)` runs' streams have begun (a
/// run's stream has begun when the server answered `POST /threads/{id}/runs/stream` with a
/// success status: the run exists). The batch goes on meanwhile; its report waits for the
/// command (at most until the deadline, when the command is killed). The command's standard
/// output goes to the generator's standard error, so that the report's last line stays its JSON.
#[derive(Clone, Debug)]
pub struct Then {
    pub at_fraction: f64,
    pub command: String,
}

/// What became of [`Then`]'s command.
#[derive(Clone, Debug, PartialEq)]
pub struct ThenReport {
    pub command: String,
    pub at_fraction: f64,
    /// Runs whose streams had to begin before the command ran.
    pub threshold: usize,
    /// When it was started and when it ended, in seconds from the batch's start.
    pub started_s: Option<f64>,
    pub ended_s: Option<f64>,
    /// `exit 0`, `exit 1`, `killed by signal`, or why it did not run or did not end.
    pub status: String,
}

/// One run's times (seconds from the run's own start unless said otherwise) and how it ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunTimes {
    /// The run's number in the batch (it went to `urls[k % urls.len()]`).
    pub k: usize,
    /// From the batch's start to the run's start: `None` for a run cut off at the deadline.
    pub start_s: Option<f64>,
    pub thread_s: Option<f64>,
    pub head_s: Option<f64>,
    pub first_s: Option<f64>,
    /// To the end of its stream (or its failure); `None` for a run cut off at the deadline.
    pub total_s: Option<f64>,
    /// `ok`, `failed` or `unfinished`.
    pub status: &'static str,
    /// Why it failed, ids written `<id>`.
    pub error: Option<String>,
}

impl RunTimes {
    pub fn to_json(&self, urls: &[String]) -> Value {
        let r = |v: Option<f64>| v.map(|v| round(v, 4));
        json!({
            "k": self.k,
            "url": urls.get(self.k % urls.len().max(1)),
            "status": self.status,
            "start_s": r(self.start_s),
            "thread_s": r(self.thread_s),
            "head_s": r(self.head_s),
            "first_s": r(self.first_s),
            "total_s": r(self.total_s),
            "end_s": r(self.start_s.zip(self.total_s).map(|(a, b)| a + b)),
            "error": self.error,
        })
    }
}

/// How one run ended.
#[derive(Clone, Debug)]
struct Outcome {
    /// The run's number in the batch.
    k: usize,
    /// From the batch's start to the run's start (after its slot was free).
    start: Duration,
    /// From the run's start to the answer of `POST /threads`.
    thread: Option<Duration>,
    /// From the run's start to the response head of `POST /threads/{id}/runs/stream`.
    head: Option<Duration>,
    /// From the run's start to its first `updates` event.
    first: Option<Duration>,
    /// From the run's start to the end of its stream.
    total: Duration,
    /// Why the run failed, if it did.
    error: Option<String>,
}

/// What a server process used during the batch.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerUse {
    pub pid: u32,
    /// VmHWM at the end of the batch (the process's peak resident memory since its start).
    pub peak_mb: f64,
    /// User and system CPU seconds used during the batch.
    pub cpu_s: f64,
}

/// The figures of one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadReport {
    pub n: usize,
    pub concurrency: usize,
    pub urls: Vec<String>,
    pub ok: usize,
    pub failed: usize,
    pub unfinished: usize,
    pub wall_s: f64,
    /// Good runs per second of wall time.
    pub runs_per_s: f64,
    pub first_p50_s: Option<f64>,
    pub first_p99_s: Option<f64>,
    pub total_p50_s: Option<f64>,
    pub total_p99_s: Option<f64>,
    /// Where the first event's time goes, for the good runs: from the run's start to the answer
    /// of `POST /threads`, and to the response head of the stream (its status and headers).
    pub thread_p50_s: Option<f64>,
    pub thread_p99_s: Option<f64>,
    pub head_p50_s: Option<f64>,
    pub head_p99_s: Option<f64>,
    /// Failure reasons with how many runs failed for each (ids in them written `<id>`, so that
    /// one cause is one line).
    pub failures: BTreeMap<String, usize>,
    /// The generator's own user + system CPU seconds during the batch.
    pub client_cpu_s: f64,
    pub servers: Vec<ServerUse>,
    /// What became of the command of [`LoadConfig::then`], when one was given.
    pub then: Option<ThenReport>,
    /// Every run, in the order of `k`.
    pub runs: Vec<RunTimes>,
}

impl LoadReport {
    /// The servers' CPU seconds during the batch (all `--server-pid` processes together) divided
    /// by the runs of the batch (all `n`, failed and unfinished ones included).
    pub fn server_cpu_s_per_run(&self) -> Option<f64> {
        (!self.servers.is_empty() && self.n > 0)
            .then(|| self.servers.iter().map(|s| s.cpu_s).sum::<f64>() / self.n as f64)
    }

    /// One JSON line per run (see [`RunTimes::to_json`]).
    pub fn runs_jsonl(&self) -> String {
        let mut out = String::new();
        for r in &self.runs {
            out.push_str(&r.to_json(&self.urls).to_string());
            out.push('\n');
        }
        out
    }

    /// One JSON object, the shape `bench/serve_stream.py` prints plus the generator's CPU.
    pub fn to_json(&self) -> Value {
        let servers: Vec<Value> = self
            .servers
            .iter()
            .map(|s| json!({"pid": s.pid, "peak_mb": round(s.peak_mb, 1), "cpu_s": round(s.cpu_s, 2)}))
            .collect();
        let peak: f64 = self.servers.iter().map(|s| s.peak_mb).sum();
        let cpu: f64 = self.servers.iter().map(|s| s.cpu_s).sum();
        json!({
            "client": "weft-bench serve-load",
            "n": self.n,
            "concurrency": self.concurrency,
            "urls": self.urls,
            "ok": self.ok,
            "failed": self.failed,
            "unfinished": self.unfinished,
            "wall_s": round(self.wall_s, 3),
            "runs_per_s": round(self.runs_per_s, 1),
            "first_p50_s": self.first_p50_s.map(|v| round(v, 4)),
            "first_p99_s": self.first_p99_s.map(|v| round(v, 4)),
            "total_p50_s": self.total_p50_s.map(|v| round(v, 4)),
            "total_p99_s": self.total_p99_s.map(|v| round(v, 4)),
            "thread_p50_s": self.thread_p50_s.map(|v| round(v, 4)),
            "thread_p99_s": self.thread_p99_s.map(|v| round(v, 4)),
            "head_p50_s": self.head_p50_s.map(|v| round(v, 4)),
            "head_p99_s": self.head_p99_s.map(|v| round(v, 4)),
            "client_cpu_s": round(self.client_cpu_s, 2),
            "server_peak_mb": (!self.servers.is_empty()).then(|| round(peak, 1)),
            "server_cpu_s": (!self.servers.is_empty()).then(|| round(cpu, 2)),
            "server_cpu_ms_per_run": self.server_cpu_s_per_run().map(|s| round(s * 1000.0, 3)),
            "servers": servers,
            "errors": self.failures,
            "then": self.then.as_ref().map(|t| json!({
                "command": t.command,
                "at_fraction": t.at_fraction,
                "threshold": t.threshold,
                "started_s": t.started_s.map(|v| round(v, 3)),
                "ended_s": t.ended_s.map(|v| round(v, 3)),
                "status": t.status,
            })),
        })
    }

    /// A table for people.
    pub fn table(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |s| format!("{:.1} ms", s * 1000.0));
        let mut out = String::new();
        let mut row = |k: &str, v: String| out.push_str(&format!("  {k:<22} {v}\n"));
        row("urls", self.urls.join(" "));
        row(
            "runs",
            format!(
                "{} ok, {} failed, {} unfinished of {} (concurrency {})",
                self.ok, self.failed, self.unfinished, self.n, self.concurrency
            ),
        );
        row("wall", format!("{:.3} s", self.wall_s));
        row("runs/s", format!("{:.1}", self.runs_per_s));
        row("first event p50", ms(self.first_p50_s));
        row("first event p99", ms(self.first_p99_s));
        row("thread created p50", ms(self.thread_p50_s));
        row("thread created p99", ms(self.thread_p99_s));
        row("stream head p50", ms(self.head_p50_s));
        row("stream head p99", ms(self.head_p99_s));
        row("end of stream p50", ms(self.total_p50_s));
        row("end of stream p99", ms(self.total_p99_s));
        row("client CPU", format!("{:.2} s", self.client_cpu_s));
        for s in &self.servers {
            row(
                &format!("server {}", s.pid),
                format!("peak {:.1} MB, CPU {:.2} s", s.peak_mb, s.cpu_s),
            );
        }
        if let Some(per_run) = self.server_cpu_s_per_run() {
            row(
                "server CPU per run",
                format!(
                    "{:.3} ms (the servers' CPU ÷ {} runs)",
                    per_run * 1000.0,
                    self.n
                ),
            );
        }
        if let Some(t) = &self.then {
            let at = |v: Option<f64>| v.map_or("-".to_owned(), |s| format!("{s:.3} s"));
            row(
                "then",
                format!(
                    "`{}` once {} streams had begun: started at {}, ended at {}, {}",
                    t.command,
                    t.threshold,
                    at(t.started_s),
                    at(t.ended_s),
                    t.status
                ),
            );
        }
        for (reason, count) in &self.failures {
            row("failure", format!("{count} × {reason}"));
        }
        out
    }
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// The p-th percentile by nearest rank, as `bench/serve_stream.py` computes it.
fn pct(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    // Python's round() takes ties to even.
    let rank = (p / 100.0 * sorted.len() as f64 + 0.5).round_ties_even() as i64 - 1;
    let i = rank.clamp(0, sorted.len() as i64 - 1) as usize;
    Some(sorted[i])
}

/// Runs the batch: every run starts as soon as a slot of `concurrency` is free (all at once by
/// default), and the batch ends when every run has ended or the deadline has passed.
pub async fn run(cfg: LoadConfig) -> Result<LoadReport, BenchError> {
    if cfg.urls.is_empty() {
        return Err(BenchError::Setup(
            "serve-load: no server: give at least one --url (e.g. --url http://127.0.0.1:2024)"
                .into(),
        ));
    }
    for u in &cfg.urls {
        if !u.starts_with("http://") {
            return Err(BenchError::Setup(format!(
                "serve-load: --url {u}: give a plain http:// base URL (the generator speaks \
                 HTTP/1.1 without TLS)"
            )));
        }
    }
    if cfg.n == 0 {
        return Err(BenchError::Setup(
            "serve-load: --n must be at least 1".into(),
        ));
    }
    if let Some(t) = &cfg.then
        && !(0.0..=1.0).contains(&t.at_fraction)
    {
        return Err(BenchError::Setup(format!(
            "serve-load: --at-fraction {}: give a fraction of the runs from 0 to 1",
            t.at_fraction
        )));
    }
    // reqwest is built with rustls but no default crypto provider (one TLS stack in weft); a
    // client cannot be built before one is installed, even for plain HTTP.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let client = reqwest::Client::builder()
        .http1_only()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| BenchError::Setup(format!("serve-load: cannot build the HTTP client: {e}")))?;
    let concurrency = if cfg.concurrency == 0 {
        cfg.n
    } else {
        cfg.concurrency.min(cfg.n)
    };
    let cfg = Arc::new(cfg);
    let slots = Arc::new(Semaphore::new(concurrency));
    let servers0: Vec<Option<f64>> = cfg.server_pids.iter().map(|p| cpu_s(*p)).collect();
    let client0 = cpu_s_self();
    let began = Instant::now();
    // How many runs' streams have begun (see `Then`).
    let (begun_tx, begun_rx) = watch::channel(0usize);
    let begun_tx = Arc::new(begun_tx);
    let (over_tx, over_rx) = oneshot::channel::<()>();
    let hook = cfg
        .then
        .clone()
        .map(|t| tokio::spawn(then_task(t, cfg.n, began, begun_rx, over_rx)));
    let mut tasks = tokio::task::JoinSet::new();
    let mut ids = std::collections::HashMap::new();
    for k in 0..cfg.n {
        let (cfg, client, slots) = (Arc::clone(&cfg), client.clone(), Arc::clone(&slots));
        let begun = Arc::clone(&begun_tx);
        let handle = tasks.spawn(async move {
            let _slot = slots.acquire_owned().await.ok();
            let base = &cfg.urls[k % cfg.urls.len()];
            one(&client, base, &cfg, k, began, &begun).await
        });
        ids.insert(handle.id(), k);
    }
    drop(begun_tx);
    let mut outcomes = Vec::with_capacity(cfg.n);
    let stop = tokio::time::sleep(cfg.deadline);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            next = tasks.join_next() => match next {
                Some(Ok(o)) => outcomes.push(o),
                Some(Err(e)) => outcomes.push(Outcome {
                    k: ids.get(&e.id()).copied().unwrap_or(usize::MAX),
                    start: Duration::ZERO,
                    thread: None,
                    head: None,
                    first: None,
                    total: began.elapsed(),
                    error: Some(format!("the run's task ended abnormally: {e}")),
                }),
                None => break,
            },
            () = &mut stop => break,
        }
    }
    let unfinished = tasks.len();
    tasks.abort_all();
    let wall = began.elapsed().as_secs_f64();
    // The batch is over: a command not yet started will not be; one running is waited for until
    // the deadline, then killed.
    let _ = over_tx.send(());
    let then = match (hook, &cfg.then) {
        (Some(mut h), Some(t)) => {
            let left = cfg.deadline.saturating_sub(began.elapsed());
            Some(match tokio::time::timeout(left, &mut h).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => then_report(t, cfg.n, None, None, format!("its task failed: {e}")),
                Err(_) => {
                    h.abort();
                    then_report(
                        t,
                        cfg.n,
                        None,
                        None,
                        format!(
                            "still running at the deadline ({:.0} s): killed",
                            cfg.deadline.as_secs_f64()
                        ),
                    )
                }
            })
        }
        _ => None,
    };
    let client_cpu = cpu_s_self().zip(client0).map_or(0.0, |(b, a)| b - a);
    let servers = cfg
        .server_pids
        .iter()
        .zip(servers0)
        .map(|(pid, before)| ServerUse {
            pid: *pid,
            peak_mb: hwm_mb(*pid).unwrap_or(0.0),
            cpu_s: cpu_s(*pid).zip(before).map_or(0.0, |(b, a)| b - a),
        })
        .collect();

    let mut firsts = Vec::new();
    let mut totals = Vec::new();
    let mut threads = Vec::new();
    let mut heads = Vec::new();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    for o in &outcomes {
        match (&o.error, o.first) {
            (None, Some(first)) => {
                firsts.push(first.as_secs_f64());
                totals.push(o.total.as_secs_f64());
                threads.extend(o.thread.map(|d| d.as_secs_f64()));
                heads.extend(o.head.map(|d| d.as_secs_f64()));
            }
            (Some(e), _) => *failures.entry(without_ids(e)).or_default() += 1,
            (None, None) => *failures.entry("no updates event".into()).or_default() += 1,
        }
    }
    firsts.sort_by(f64::total_cmp);
    totals.sort_by(f64::total_cmp);
    threads.sort_by(f64::total_cmp);
    heads.sort_by(f64::total_cmp);
    let ok = firsts.len();
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    let mut runs: Vec<RunTimes> = outcomes
        .iter()
        .map(|o| RunTimes {
            k: o.k,
            start_s: Some(o.start.as_secs_f64()),
            thread_s: secs(o.thread),
            head_s: secs(o.head),
            first_s: secs(o.first),
            total_s: Some(o.total.as_secs_f64()),
            status: if o.error.is_none() && o.first.is_some() {
                "ok"
            } else {
                "failed"
            },
            error: match (&o.error, o.first) {
                (Some(e), _) => Some(without_ids(e)),
                (None, None) => Some("no updates event".into()),
                (None, Some(_)) => None,
            },
        })
        .collect();
    let ended: BTreeSet<usize> = outcomes.iter().map(|o| o.k).collect();
    runs.extend((0..cfg.n).filter(|k| !ended.contains(k)).map(|k| RunTimes {
        k,
        start_s: None,
        thread_s: None,
        head_s: None,
        first_s: None,
        total_s: None,
        status: "unfinished",
        error: None,
    }));
    runs.sort_by_key(|r| r.k);
    Ok(LoadReport {
        n: cfg.n,
        concurrency,
        urls: cfg.urls.clone(),
        ok,
        failed: outcomes.len() - ok,
        unfinished,
        wall_s: wall,
        runs_per_s: ok as f64 / wall,
        first_p50_s: pct(&firsts, 50.0),
        first_p99_s: pct(&firsts, 99.0),
        total_p50_s: pct(&totals, 50.0),
        total_p99_s: pct(&totals, 99.0),
        thread_p50_s: pct(&threads, 50.0),
        thread_p99_s: pct(&threads, 99.0),
        head_p50_s: pct(&heads, 50.0),
        head_p99_s: pct(&heads, 99.0),
        failures,
        client_cpu_s: client_cpu,
        servers,
        then,
        runs,
    })
}

fn then_report(
    t: &Then,
    n: usize,
    started_s: Option<f64>,
    ended_s: Option<f64>,
    status: String,
) -> ThenReport {
    ThenReport {
        command: t.command.clone(),
        at_fraction: t.at_fraction,
        threshold: then_threshold(t.at_fraction, n),
        started_s,
        ended_s,
        status,
    }
}

/// The runs whose streams must have begun before the command of [`Then`] runs.
fn then_threshold(at_fraction: f64, n: usize) -> usize {
    ((at_fraction * n as f64).ceil() as usize).min(n)
}

/// Waits until enough streams have begun (or the batch is over: then the command does not run),
/// then runs the command to its end.
async fn then_task(
    t: Then,
    n: usize,
    began: Instant,
    mut begun: watch::Receiver<usize>,
    over: oneshot::Receiver<()>,
) -> ThenReport {
    let threshold = then_threshold(t.at_fraction, n);
    let reached = tokio::select! {
        r = begun.wait_for(|c| *c >= threshold) => r.is_ok(),
        _ = over => false,
    };
    if !reached {
        let seen = *begun.borrow();
        return then_report(
            &t,
            n,
            None,
            None,
            format!("not run: the batch ended with {seen} of {threshold} streams begun"),
        );
    }
    let started = began.elapsed().as_secs_f64();
    let stdout = match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::null(),
    };
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&t.command)
        .stdin(Stdio::null())
        .stdout(stdout)
        .kill_on_drop(true)
        .status()
        .await;
    let ended = began.elapsed().as_secs_f64();
    let status = match status {
        Ok(s) => match s.code() {
            Some(c) => format!("exit {c}"),
            None => "killed by a signal".to_owned(),
        },
        Err(e) => format!("could not be started: {e}"),
    };
    then_report(&t, n, Some(started), Some(ended), status)
}

/// One run: create a thread, stream a run on it, read the stream to its end.
async fn one(
    client: &reqwest::Client,
    base: &str,
    cfg: &LoadConfig,
    k: usize,
    batch: Instant,
    begun: &watch::Sender<usize>,
) -> Outcome {
    let start = Instant::now();
    let mut stream = SseRun::default();
    let error = match drive(client, base, cfg, start, &mut stream, begun).await {
        Err(e) => Some(e),
        Ok(()) => stream.verdict(&cfg.expect),
    };
    Outcome {
        k,
        start: start.duration_since(batch),
        thread: stream.thread,
        head: stream.head,
        first: stream.first,
        total: start.elapsed(),
        error,
    }
}

fn post(
    client: &reqwest::Client,
    url: String,
    cfg: &LoadConfig,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut req = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    if let Some(k) = &cfg.api_key {
        req = req.header("x-api-key", k);
    }
    req
}

async fn drive(
    client: &reqwest::Client,
    base: &str,
    cfg: &LoadConfig,
    start: Instant,
    stream: &mut SseRun,
    begun: &watch::Sender<usize>,
) -> Result<(), String> {
    let base = base.trim_end_matches('/');
    let resp = post(client, format!("{base}/threads"), cfg, &json!({}))
        .send()
        .await
        .map_err(|e| format!("POST /threads: {}", describe(&e)))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| format!("POST /threads: reading the answer: {}", describe(&e)))?;
    if !status.is_success() {
        return Err(format!("POST /threads: HTTP {status}: {}", snippet(&body)));
    }
    stream.thread = Some(start.elapsed());
    let thread: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("POST /threads: the answer is not JSON: {e}"))?;
    let Some(id) = thread.get("thread_id").and_then(Value::as_str) else {
        return Err("POST /threads: the answer has no thread_id".into());
    };
    let run = json!({
        "assistant_id": cfg.assistant,
        "input": {"messages": [{"role": "user", "content": cfg.message}]},
        "stream_mode": "updates",
    });
    let mut resp = post(
        client,
        format!("{base}/threads/{id}/runs/stream"),
        cfg,
        &run,
    )
    .header(reqwest::header::ACCEPT, "text/event-stream")
    .send()
    .await
    .map_err(|e| format!("POST /threads/{{id}}/runs/stream: {}", describe(&e)))?;
    stream.head = Some(start.elapsed());
    let status = resp.status();
    if !status.is_success() {
        let body = resp.bytes().await.unwrap_or_default();
        return Err(format!(
            "POST /threads/{{id}}/runs/stream: HTTP {status}: {}",
            snippet(&body)
        ));
    }
    begun.send_modify(|c| *c += 1);
    loop {
        match resp.chunk().await {
            Ok(Some(bytes)) => stream.feed(&bytes, start),
            Ok(None) => break,
            Err(e) => return Err(format!("the stream broke: {}", describe(&e))),
        }
    }
    stream.finish(start);
    Ok(())
}

/// A reqwest error with its causes (reqwest's own message is often only "error sending request").
fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// `text` with every UUID (8-4-4-4-12 hexadecimal digits) written `<id>`.
fn without_ids(text: &str) -> String {
    const SHAPE: [usize; 5] = [8, 4, 4, 4, 12];
    let b = text.as_bytes();
    let uuid_at = |i: usize| -> bool {
        let mut j = i;
        for (k, len) in SHAPE.iter().enumerate() {
            if k > 0 {
                if b.get(j) != Some(&b'-') {
                    return false;
                }
                j += 1;
            }
            if j + len > b.len() || !b[j..j + len].iter().all(u8::is_ascii_hexdigit) {
                return false;
            }
            j += len;
        }
        true
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if uuid_at(i) {
            out.push_str("<id>");
            i += 36;
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    out
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.chars().take(200).collect()
}

/// The state of one run's event stream: when the thread was created and the stream's head came,
/// the stream's events read so far, the first `updates` event's time, the last `updates` event's
/// data, the first `error` event's data.
#[derive(Debug, Default)]
struct SseRun {
    thread: Option<Duration>,
    head: Option<Duration>,
    events: SseParser,
    first: Option<Duration>,
    last_update: Option<String>,
    error: Option<String>,
}

impl SseRun {
    /// Adds bytes from the stream and handles every event they complete.
    fn feed(&mut self, bytes: &[u8], start: Instant) {
        for e in self.events.feed_bytes(bytes) {
            self.event(e, start);
        }
    }

    /// The end of the stream: a last event without its blank line still counts.
    fn finish(&mut self, start: Instant) {
        if let Some(e) = self.events.finish() {
            self.event(e, start);
        }
    }

    fn event(&mut self, e: SseEvent, start: Instant) {
        match e.event.as_deref().unwrap_or("message") {
            "updates" => {
                if self.first.is_none() {
                    self.first = Some(start.elapsed());
                }
                self.last_update = Some(e.data);
            }
            "error" if self.error.is_none() => self.error = Some(e.data),
            _ => {}
        }
    }

    /// Why the run failed, or `None` when it is good: no `error` event, and the last `updates`
    /// event holds `expect` once its JSON is written out again (as the Python client checks
    /// `final in json.dumps(last_update)`).
    fn verdict(&self, expect: &str) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(format!("error event: {}", snippet(e.as_bytes())));
        }
        let Some(last) = &self.last_update else {
            return Some("the stream ended without an updates event".into());
        };
        let text = match serde_json::from_str::<Value>(last) {
            Ok(v) => v.to_string(),
            Err(e) => return Some(format!("the last updates event is not JSON: {e}")),
        };
        if text.contains(expect) {
            None
        } else {
            Some(format!(
                "the last updates event does not hold the answer {expect:?}"
            ))
        }
    }
}

/// A process's user + system CPU seconds, from `/proc/PID/stat` (fields 14 and 15, in clock
/// ticks of 1/100 s on Linux).
pub fn cpu_s(pid: u32) -> Option<f64> {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process's user + system CPU seconds: the kernel's figure `getrusage(RUSAGE_SELF)`
/// returns (all threads), read from `/proc/self/stat` since weft forbids unsafe code.
pub fn cpu_s_self() -> Option<f64> {
    stat_cpu(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

const CLOCK_TICKS_PER_S: f64 = 100.0;

fn stat_cpu(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces and parentheses: fields are counted after the
    // last `)`, where field 3 (state) is the first.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / CLOCK_TICKS_PER_S)
}

/// A process's peak resident memory (VmHWM) in MB.
pub fn hwm_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_split_across_chunks_and_line_endings_are_read() {
        let start = Instant::now();
        let mut s = SseRun::default();
        s.feed(
            b"event: metadata\ndata: {\"run_id\": \"r\"}\n\nevent: upd",
            start,
        );
        assert!(s.first.is_none());
        s.feed(b"ates\ndata: {\"agent\": 1}\n\n: keep-alive\n\n", start);
        assert!(s.first.is_some());
        s.feed(
            b"event: updates\r\ndata: {\"agent\": {\"messages\": \r\n",
            start,
        );
        s.feed(b"data: [\"done\"]}}\r\n\r\n", start);
        s.finish(start);
        assert_eq!(
            s.last_update.as_deref(),
            Some("{\"agent\": {\"messages\": \n[\"done\"]}}")
        );
        assert_eq!(s.verdict("done"), None);
        assert!(s.verdict("other").unwrap().contains("does not hold"));
    }

    #[test]
    fn an_error_event_fails_the_run_even_after_the_answer() {
        let start = Instant::now();
        let mut s = SseRun::default();
        s.feed(b"event: updates\ndata: {\"a\": \"done\"}\n\n", start);
        s.feed(b"event: error\ndata: {\"error\": \"boom\"}", start);
        s.finish(start);
        assert!(s.verdict("done").unwrap().contains("boom"));
    }

    #[test]
    fn ids_in_failure_reasons_are_written_id() {
        assert_eq!(
            without_ids("HTTP 404: thread 0195f3a2-7c1e-7abc-8def-0123456789ab é not found"),
            "HTTP 404: thread <id> é not found"
        );
        assert_eq!(without_ids("no id 0195f3a2-7c1e"), "no id 0195f3a2-7c1e");
    }

    #[test]
    fn percentiles_match_the_python_client() {
        let xs: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(pct(&xs, 50.0), Some(500.0));
        assert_eq!(pct(&xs, 99.0), Some(990.0));
        assert_eq!(pct(&[3.0], 99.0), Some(3.0));
        assert_eq!(pct(&[], 50.0), None);
    }

    fn unreachable(n: usize, then: Option<Then>) -> LoadConfig {
        // A port nobody listens on: every run fails at `POST /threads`, no stream begins.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        LoadConfig {
            urls: vec![format!("http://127.0.0.1:{port}")],
            n,
            concurrency: 0,
            api_key: None,
            assistant: "agent".into(),
            expect: "x".into(),
            message: "x".into(),
            deadline: Duration::from_secs(20),
            server_pids: vec![std::process::id()],
            then,
        }
    }

    #[tokio::test]
    async fn the_then_command_runs_once_its_fraction_of_streams_began_or_not_at_all() {
        // At 0: at once, even though no stream begins; its exit status is reported.
        let r = run(unreachable(
            3,
            Some(Then {
                at_fraction: 0.0,
                command: "exit 3".into(),
            }),
        ))
        .await
        .unwrap();
        let t = r.then.clone().unwrap();
        assert_eq!((t.threshold, t.status.as_str()), (0, "exit 3"), "{t:?}");
        assert!(t.started_s.is_some() && t.ended_s >= t.started_s, "{t:?}");
        assert_eq!(r.to_json()["then"]["status"], "exit 3");
        // Every run is in `runs`, failed with its reason.
        assert_eq!(r.runs.len(), 3);
        assert!(r.runs.iter().all(|run| {
            run.status == "failed"
                && run
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("POST /threads"))
        }));
        assert_eq!(r.runs_jsonl().lines().count(), 3);
        let line: Value = serde_json::from_str(r.runs_jsonl().lines().next().unwrap()).unwrap();
        assert_eq!(
            (line["k"].as_u64(), line["status"].as_str()),
            (Some(0), Some("failed"))
        );
        // CPU per run: the servers' CPU over n.
        let per_run = r.server_cpu_s_per_run().unwrap();
        assert!((per_run * 3.0 - r.servers[0].cpu_s).abs() < 1e-9);

        // At 1: no stream begins, so the batch ends without running it.
        let r = run(unreachable(
            2,
            Some(Then {
                at_fraction: 1.0,
                command: "exit 0".into(),
            }),
        ))
        .await
        .unwrap();
        let t = r.then.unwrap();
        assert_eq!(t.started_s, None, "{t:?}");
        assert!(
            t.status.contains("not run") && t.status.contains("0 of 2"),
            "{t:?}"
        );

        let e = run(unreachable(
            2,
            Some(Then {
                at_fraction: 1.5,
                command: "true".into(),
            }),
        ))
        .await
        .unwrap_err();
        assert!(e.to_string().contains("--at-fraction"), "{e}");
    }

    #[test]
    fn own_cpu_and_memory_are_read() {
        assert!(cpu_s_self().is_some());
        assert!(hwm_mb(std::process::id()).unwrap() > 0.0);
    }
}
