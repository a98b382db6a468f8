//! `weft-bench`: runs weft's benchmark workloads and prints one line of figures per workload
//! (the median over `--runs`).

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use weft_bench::Report;
use weft_bench::workloads::{self, StoreKind};

/// mimalloc: the runtime allocates many small, short-lived values on several threads at once,
/// where the system allocator spends its time on its arenas' locks (see BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "weft-bench",
    about = "weft's benchmarks, in the shapes of the LangGraph peer script"
)]
struct Cli {
    /// Runs of each workload; the figures printed are the medians.
    #[arg(long, default_value_t = 1, global = true)]
    runs: u32,
    /// Store for `react` and `concurrent` (the other workloads use what they say).
    #[arg(long, default_value = "sqlite", global = true, value_parser = ["sqlite", "memory"])]
    store: String,
    /// What the SQLite files (and `pg-capacity`'s PostgreSQL appends) are written at: full
    /// (synced at every commit) or normal.
    #[arg(long, default_value = "full", global = true)]
    durability: weft_store::Durability,
    /// The tool `react` calls: echo (built-in, idempotent), ledger (in-process, not
    /// idempotent) or command (`sh -c cat`, a process per call).
    #[arg(long, default_value = "echo", global = true, value_parser = ["echo", "ledger", "command"])]
    tool: String,
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand, Debug)]
enum Workload {
    /// One ReAct run of N echo calls then an answer.
    React { n: u32 },
    /// M sessions at once, K echo calls each, the model thinking 50 ms per call (SQLite, or `--store memory`).
    Concurrent { m: u32, k: u32 },
    /// One session, T user turns of one echo call each (SQLite).
    Growth { t: u32 },
    /// Validation and execution of a linear and a wide plan of N echo steps.
    Plan { n: u32 },
    /// Load a session of E events from SQLite and continue it by one turn.
    Resume {
        #[arg(default_value_t = 10_000)]
        events: u64,
    },
    /// Document search: ingest N generated chunks, then recall@5 and query latency on questions
    /// with known answers (SQLite, or PostgreSQL with --postgres URL).
    Retrieval {
        #[arg(default_value_t = 10_000)]
        chunks: usize,
        #[arg(long, default_value_t = 500)]
        questions: usize,
        /// A PostgreSQL URL: the benchmark runs in a schema of its own, dropped at the end.
        #[arg(long)]
        postgres: Option<String>,
        /// An OpenAI-compatible embeddings endpoint (e.g. `http://127.0.0.1:8090/v1`): the
        /// benchmark then runs twice, without embeddings and with them, each on a new store.
        #[arg(long)]
        embeddings: Option<String>,
    },
    /// N concurrent streaming runs against LangGraph-API servers (`weft serve`, `langgraph dev`),
    /// each as the SDK does it: `POST /threads`, then `POST /threads/{id}/runs/stream` in
    /// `updates` mode, read to its end. Prints a table, then the figures as one JSON line.
    /// Runs on one thread.
    ServeLoad(ServeLoadArgs),
    /// The floor under `serve-load`: serves the two requests it makes with nothing behind them
    /// (a new thread id; the benchmark agent's `updates` events, 50 ms per model turn), so that
    /// a batch against it shows what the machine and the generator allow. Runs until killed.
    ServeFloor {
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:2030")]
        addr: String,
        /// The text of the last update (what `serve-load --expect` looks for).
        #[arg(long, default_value = "done after 3 echo calls")]
        answer: String,
    },
    /// A small model's planner calls and workflow step outputs, scored as the engine reads
    /// them: in the process (`local:`, needs `--features local-model`) and behind an
    /// OpenAI-compatible server in each form of structured output. Prints a Markdown table;
    /// `--out` writes every call as JSON.
    LocalEval(LocalEvalArgs),
    /// BFCL's questions (`bench/bfcl/prepare.py`) asked of a GGUF model as a ReAct agent's
    /// first model call: in the process with the tools' grammar, and through llama.cpp's
    /// server with the same prompt and no grammar. Writes every call as a JSON line for
    /// `bench/bfcl/score.py`; prints the well-formed calls per backend (needs
    /// `--features local-model`).
    Bfcl(BfclArgs),
    /// What one PostgreSQL carries of weft's own statements through the real store: appends,
    /// lease renewals and claims per second with C callers, then W simulated workers' claim
    /// and renewal traffic; with PostgreSQL's CPU (from /proc) and what its backends wait on
    /// (pg_stat_activity). Prints Markdown tables, then the figures as one JSON line.
    PgCapacity(PgCapacityArgs),
    /// Every workload at its standard sizes (add `--full` for `concurrent 10000 3`).
    All {
        #[arg(long)]
        full: bool,
    },
}

#[derive(clap::Args, Debug)]
struct ServeLoadArgs {
    /// A server's base URL; repeat it for replicas (runs go to them round-robin).
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// Runs in all.
    #[arg(long, default_value_t = 100)]
    n: usize,
    /// Runs in flight at once (default: all of them).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Sent as `x-api-key` (`weft serve --keys` needs one).
    #[arg(long, env = "WEFT_BENCH_API_KEY")]
    api_key: Option<String>,
    /// The assistant each run streams.
    #[arg(long, default_value = "agent")]
    assistant: String,
    /// The text the last `updates` event of a good run must hold.
    #[arg(long, default_value = "done after 3 echo calls")]
    expect: String,
    /// The user message of each run.
    #[arg(long, default_value = "echo three times")]
    message: String,
    /// Seconds after which runs still going are cancelled and counted as unfinished.
    #[arg(long, default_value_t = 300.0)]
    deadline: f64,
    /// A server process whose peak memory and CPU seconds to report; repeatable.
    #[arg(long = "server-pid")]
    server_pids: Vec<u32>,
    /// A shell command (`sh -c`) to run once, in the middle of the batch, when `--at-fraction`
    /// of the runs' streams have begun (the server answered the stream's request); the report
    /// waits for it (until `--deadline`). Its output goes to standard error.
    #[arg(long = "then", requires = "at_fraction")]
    then: Option<String>,
    /// The fraction of the runs (0 to 1) whose streams must have begun before `--then` runs.
    #[arg(long, requires = "then")]
    at_fraction: Option<f64>,
    /// Writes one JSON line per run (its times from the batch's and its own start, how it
    /// ended) to this file.
    #[arg(long)]
    runs_out: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
struct PgCapacityArgs {
    /// A PostgreSQL URL; every phase works in a schema of its own in that database.
    #[arg(long)]
    url: String,
    /// Seconds each append, renewal and claim phase measures.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// The callers of the append, renewal and claim phases (one phase each), space-separated.
    #[arg(long, default_value = "1 4 16 64")]
    concurrency: String,
    /// The simulated workers of the simulation phases (one phase each), space-separated.
    #[arg(long, default_value = "100 300 1000")]
    workers: String,
    /// Seconds each simulation phase measures, after its warm-up.
    #[arg(long, default_value_t = 15.0)]
    sim_seconds: f64,
    /// Seconds each simulation runs before it measures.
    #[arg(long, default_value_t = 3.0)]
    warmup: f64,
    /// The most connections a phase's stores open in all (a store is one weft process: 8
    /// connections and 2 for leases); keep it below the server's max_connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Sessions per simulated worker, queued before the simulation starts.
    #[arg(long, default_value_t = 2)]
    sessions_per_worker: usize,
    /// Sessions queued for each claim phase.
    #[arg(long, default_value_t = 1000)]
    claim_sessions: usize,
    /// Ended sessions (an event and a released lease each) every phase's tables start with, as
    /// a store with a history has.
    #[arg(long, default_value_t = 1000)]
    history: usize,
    /// Simulated owners do not read their lease every 500 ms (`weft worker` does).
    #[arg(long)]
    no_looks: bool,
    /// The phases to run, space-separated: append renew claim sim.
    #[arg(long, default_value = "append renew claim sim")]
    phases: String,
}

#[derive(clap::Args, Debug)]
struct LocalEvalArgs {
    /// The task file.
    #[arg(long, default_value = "bench/local-eval/tasks.yaml")]
    tasks: std::path::PathBuf,
    /// The backends, comma-separated: local (in the process), json_object, prompt (the server).
    #[arg(
        long,
        default_value = "local,json_object,prompt",
        value_delimiter = ','
    )]
    backends: Vec<String>,
    /// Which replies: planner, workflow (comma-separated).
    #[arg(long, default_value = "planner,workflow", value_delimiter = ',')]
    kinds: Vec<String>,
    /// Calls per task, with seeds 0, 1, ...
    #[arg(long, default_value_t = 10)]
    repeat: u64,
    /// Sampling temperature of every call.
    #[arg(long, default_value_t = 0.7)]
    temperature: f64,
    /// The most output tokens of a reply.
    #[arg(long, default_value_t = 512)]
    max_tokens: u32,
    /// The GGUF file of the in-process model.
    #[arg(long, env = "WEFT_TEST_LOCAL_GGUF")]
    gguf: Option<std::path::PathBuf>,
    /// The OpenAI-compatible server's base URL (e.g. `http://127.0.0.1:8089/v1`).
    #[arg(long, env = "WEFT_TEST_OPENAI_BASE_URL")]
    server_url: Option<String>,
    /// The model name sent to the server.
    #[arg(
        long,
        env = "WEFT_TEST_OPENAI_MODEL",
        default_value = "SmolLM2-135M-Instruct"
    )]
    server_model: String,
    /// Where to write every call and the summaries as JSON (rewritten after each backend).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
struct BfclArgs {
    /// The questions (JSON lines, from `bench/bfcl/prepare.py`).
    #[arg(long)]
    questions: std::path::PathBuf,
    /// The backends, comma-separated: local, local_required (in the process), server.
    #[arg(long, default_value = "local,server", value_delimiter = ',')]
    backends: Vec<String>,
    /// The GGUF file (the in-process model's, and the one the server was started with).
    #[arg(long)]
    gguf: std::path::PathBuf,
    /// llama.cpp's server's base URL (e.g. `http://127.0.0.1:8089/v1`), for `server`.
    #[arg(long)]
    server_url: Option<String>,
    /// The most output tokens of a reply.
    #[arg(long, default_value_t = 160)]
    max_tokens: u32,
    /// Where to append every call as a JSON line.
    #[arg(long)]
    out: std::path::PathBuf,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let durability = cli.durability;
    if let Workload::ServeLoad(args) = cli.workload {
        // One thread: the generator must cost the machine little beside the servers it loads.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        return rt.block_on(serve_load(args));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if let Workload::LocalEval(args) = cli.workload {
        return rt.block_on(local_eval(args));
    }
    if let Workload::Bfcl(args) = cli.workload {
        return rt.block_on(bfcl(args));
    }
    if let Workload::ServeFloor { addr, answer } = cli.workload {
        return rt.block_on(serve_floor(&addr, answer));
    }
    if let Workload::PgCapacity(args) = cli.workload {
        return rt.block_on(pg_capacity(args, durability));
    }
    rt.block_on(run(cli))
}

async fn run(cli: Cli) -> Result<()> {
    let kind = if cli.store == "memory" {
        StoreKind::Memory
    } else {
        StoreKind::Sqlite
    };
    let runs = cli.runs.max(1);
    workloads::set_durability(cli.durability);
    // `react` and `concurrent` export their sessions when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let telemetry = weft_host::telemetry::Telemetry::from_env();
    workloads::set_telemetry(telemetry.clone());
    let tool = workloads::ToolKind::parse(&cli.tool).unwrap_or(workloads::ToolKind::Echo);
    match cli.workload {
        Workload::All { full } => {
            for n in [10, 100, 400] {
                one(runs, Workload::React { n }, kind, tool).await?;
            }
            one(runs, Workload::Concurrent { m: 1000, k: 3 }, kind, tool).await?;
            if full {
                one(runs, Workload::Concurrent { m: 10_000, k: 3 }, kind, tool).await?;
            }
            one(runs, Workload::Growth { t: 100 }, kind, tool).await?;
            one(runs, Workload::Plan { n: 10_000 }, kind, tool).await?;
            one(runs, Workload::Resume { events: 10_000 }, kind, tool).await?;
        }
        w => one(runs, w, kind, tool).await?,
    }
    if telemetry.on() {
        telemetry.finish(None).await;
        let c = telemetry.counts();
        eprintln!(
            "telemetry: {} spans exported, {} dropped (queue full), {} lost",
            c.exported, c.dropped, c.failed
        );
    }
    Ok(())
}

#[cfg(not(feature = "local-model"))]
async fn bfcl(_: BfclArgs) -> Result<()> {
    anyhow::bail!(
        "bfcl: this weft-bench was built without the in-process model; build it with \
         `cargo build --release -p weft-bench --features local-model`"
    )
}

#[cfg(feature = "local-model")]
async fn bfcl(a: BfclArgs) -> Result<()> {
    use std::io::Write;
    use weft_bench::bfcl::{self, Backend};
    let mut backends = Vec::new();
    for b in &a.backends {
        backends.push(Backend::parse(b.trim()).with_context(|| {
            format!("--backends: unknown backend `{b}`; give local, local_required and/or server")
        })?);
    }
    let server = if backends.contains(&Backend::Server) {
        let url = a.server_url.as_deref().context(
            "bfcl: the `server` backend needs --server-url URL (llama.cpp's server started with the same --gguf file)",
        )?;
        Some(bfcl::Server::new(url, 0.0, a.max_tokens)?)
    } else {
        None
    };
    let cases = bfcl::load(&a.questions)?;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.out)
        .with_context(|| format!("cannot open --out {}", a.out.display()))?;
    let mut records = Vec::new();
    for backend in backends {
        let mut local = bfcl::local(a.gguf.clone(), backend, a.max_tokens);
        let total = cases.len();
        for (i, case) in cases.iter().enumerate() {
            let r = bfcl::call(backend, local.as_mut(), server.as_ref(), &a.gguf, case).await;
            eprintln!(
                "[{} {}/{total}] {}: {:.2} s, {} calls{}",
                backend.as_str(),
                i + 1,
                r.id,
                r.ms / 1000.0,
                r.calls.len(),
                r.problem
                    .as_deref()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            );
            writeln!(out, "{}", serde_json::to_string(&r)?)
                .with_context(|| format!("cannot write --out {}", a.out.display()))?;
            records.push(r);
        }
    }
    print!("{}", bfcl::table(&records));
    Ok(())
}

async fn local_eval(a: LocalEvalArgs) -> Result<()> {
    use weft_bench::local_eval::{self as le, Backend, Kind};
    let mut backends = Vec::new();
    for b in &a.backends {
        let backend = Backend::parse(b.trim()).with_context(|| {
            format!("--backends: unknown backend `{b}`; give local, json_object and/or prompt")
        })?;
        backends.push(backend);
    }
    let mut kinds = Vec::new();
    for k in &a.kinds {
        kinds.push(match k.trim() {
            "planner" => Kind::Planner,
            "workflow" => Kind::Workflow,
            other => anyhow::bail!("--kinds: unknown kind `{other}`; give planner and/or workflow"),
        });
    }
    if backends.contains(&Backend::Local) {
        if !cfg!(feature = "local-model") {
            anyhow::bail!(
                "local-eval: this weft-bench was built without the in-process model; build it with \
                 `cargo build --release -p weft-bench --features local-model`, or leave `local` out of --backends"
            );
        }
        if a.gguf.is_none() {
            anyhow::bail!(
                "local-eval: the `local` backend needs a GGUF file: --gguf PATH or WEFT_TEST_LOCAL_GGUF \
                 (`eval \"$(scripts/setup-local-model)\"` installs SmolLM2-135M-Instruct and sets it)"
            );
        }
    }
    let server = if backends.iter().any(|b| *b != Backend::Local) {
        let url = a.server_url.as_deref().context(
            "local-eval: the server backends need --server-url URL or WEFT_TEST_OPENAI_BASE_URL \
             (`scripts/llm-server start` prints it)",
        )?;
        Some(le::Server::new(
            url,
            &a.server_model,
            a.temperature,
            a.max_tokens,
        )?)
    } else {
        None
    };
    let cases: Vec<le::Case> = le::load(&a.tasks)
        .await?
        .into_iter()
        .filter(|c| kinds.contains(&c.kind))
        .collect();
    let mut out = serde_json::json!({
        "tasks": a.tasks.display().to_string(),
        "repeat": a.repeat,
        "temperature": a.temperature,
        "max_tokens": a.max_tokens,
        "gguf": a.gguf.as_ref().map(|p| p.display().to_string()),
        "server_url": a.server_url,
        "server_model": a.server_model,
        "candle_num_threads": std::env::var("CANDLE_NUM_THREADS").ok(),
        "started_unix_s": unix_now(),
        "load_average_at_start": le::load_average(),
    });
    if let Some(s) = &server
        && let Some(first) = cases.first()
    {
        let probe = le::probe_json_schema(s, first).await;
        eprintln!(
            "json_schema: {} ({}); the provider settled on: {}",
            probe.outcome,
            probe.detail,
            probe.provider_learned.as_deref().unwrap_or("nothing")
        );
        out["json_schema"] = serde_json::to_value(&probe)?;
    }
    let mut local = a
        .gguf
        .clone()
        .map(|f| le::Local::new(f, a.temperature, a.max_tokens));
    let mut records: Vec<le::CallRecord> = Vec::new();
    for backend in backends {
        if backend == Backend::Local
            && let (Some(l), Some(first)) = (local.as_mut(), cases.first())
        {
            // The file is loaded on the first call: that call is not one of the measured ones.
            let began = std::time::Instant::now();
            let warm = l.generate(&first.request, 1_000_000).await;
            let s = began.elapsed().as_secs_f64();
            if let Err(e) = &warm {
                anyhow::bail!("local-eval: the in-process model failed its first call: {e}");
            }
            eprintln!("local: load and first call {s:.2} s");
            out["local_load_and_first_call_s"] = serde_json::json!(s);
        }
        let total = cases.len() as u64 * a.repeat;
        let mut done = 0;
        for case in &cases {
            for seed in 0..a.repeat {
                let r = le::call(backend, local.as_mut(), server.as_ref(), case, seed).await;
                done += 1;
                eprintln!(
                    "[{} {done}/{total}] {} {} seed {seed}: {:.2} s, {} tokens out: {}",
                    backend.as_str(),
                    case.id,
                    case.agent,
                    r.ms / 1000.0,
                    r.output_tokens,
                    if r.score.sensible {
                        "sensible".to_owned()
                    } else {
                        r.score.problem.clone().unwrap_or_default()
                    }
                );
                records.push(r);
            }
        }
        let summaries = le::summarize(&records);
        out["load_average_at_end"] = serde_json::json!(le::load_average());
        out["ended_unix_s"] = serde_json::json!(unix_now());
        out["summaries"] = serde_json::to_value(&summaries)?;
        out["records"] = serde_json::to_value(&records)?;
        if let Some(path) = &a.out {
            std::fs::write(path, serde_json::to_string_pretty(&out)?)
                .with_context(|| format!("cannot write --out {}", path.display()))?;
        }
    }
    print!("{}", le::table(&le::summarize(&records)));
    Ok(())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn serve_load(a: ServeLoadArgs) -> Result<()> {
    if !(a.deadline.is_finite() && a.deadline > 0.0) {
        anyhow::bail!("serve-load: --deadline must be a positive number of seconds");
    }
    let report = weft_bench::serve_load::run(weft_bench::serve_load::LoadConfig {
        urls: a.urls,
        n: a.n,
        concurrency: a.concurrency.unwrap_or(0),
        api_key: a.api_key,
        assistant: a.assistant,
        expect: a.expect,
        message: a.message,
        deadline: std::time::Duration::from_secs_f64(a.deadline),
        server_pids: a.server_pids,
        then: a.then.zip(a.at_fraction).map(|(command, at_fraction)| {
            weft_bench::serve_load::Then {
                at_fraction,
                command,
            }
        }),
    })
    .await?;
    if let Some(path) = &a.runs_out {
        std::fs::write(path, report.runs_jsonl())
            .with_context(|| format!("serve-load: --runs-out {}", path.display()))?;
    }
    print!("{}", report.table());
    println!("{}", report.to_json());
    Ok(())
}

/// Numbers separated by spaces or commas, for `--concurrency` and `--workers`.
fn numbers(flag: &str, text: &str) -> Result<Vec<usize>> {
    text.split([' ', ','])
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .with_context(|| format!("{flag}: `{t}` is not a positive whole number"))
        })
        .collect()
}

async fn pg_capacity(a: PgCapacityArgs, durability: weft_store::Durability) -> Result<()> {
    let phases: Vec<String> = a.phases.split_whitespace().map(str::to_owned).collect();
    if let Some(p) = phases
        .iter()
        .find(|p| !["append", "renew", "claim", "sim"].contains(&p.as_str()))
    {
        anyhow::bail!("--phases: unknown phase `{p}`; the phases are append, renew, claim and sim");
    }
    for (flag, v) in [("--seconds", a.seconds), ("--sim-seconds", a.sim_seconds)] {
        if !(v.is_finite() && v > 0.0 && v <= 3600.0) {
            anyhow::bail!("{flag}: give a number of seconds above 0 and at most 3600");
        }
    }
    if !(a.warmup.is_finite() && (0.0..=600.0).contains(&a.warmup)) {
        anyhow::bail!("--warmup: give a number of seconds from 0 to 600");
    }
    let report = weft_bench::pg_capacity::run(weft_bench::pg_capacity::Config {
        url: a.url,
        seconds: a.seconds,
        concurrency: numbers("--concurrency", &a.concurrency)?,
        workers: numbers("--workers", &a.workers)?,
        sim_seconds: a.sim_seconds,
        warmup: a.warmup,
        connections: a.connections,
        sessions_per_worker: a.sessions_per_worker,
        claim_sessions: a.claim_sessions,
        history: a.history,
        looks: !a.no_looks,
        durability,
        phases,
    })
    .await?;
    print!("{}", report.table());
    println!("{}", report.to_json());
    Ok(())
}

async fn serve_floor(addr: &str, answer: String) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("serve-floor: cannot listen on {addr}"))?;
    eprintln!(
        "serve-floor: listening on http://{}",
        listener.local_addr()?
    );
    axum::serve(listener, weft_bench::serve_floor::router(answer))
        .await
        .context("serve-floor: the server stopped")
}

/// The retrieval benchmark without embeddings and, given an endpoint, with them.
async fn retrieval(
    chunks: usize,
    questions: usize,
    postgres: Option<&str>,
    embeddings: Option<&str>,
) -> Result<Vec<Report>> {
    let mut out = retrieval_once(chunks, questions, postgres, None).await?;
    if let Some(url) = embeddings {
        let embedder = weft_model::Embedder::new(url, "all-MiniLM-L6-v2", None)?;
        out.extend(
            retrieval_once(
                chunks,
                questions,
                postgres,
                Some(std::sync::Arc::new(embedder)),
            )
            .await?,
        );
    }
    Ok(out)
}

/// The retrieval benchmark on a new SQLite file, or in a new PostgreSQL schema.
async fn retrieval_once(
    chunks: usize,
    questions: usize,
    postgres: Option<&str>,
    embedder: Option<std::sync::Arc<weft_model::Embedder>>,
) -> Result<Vec<Report>> {
    use weft_runtime::retrieval::Retriever;
    match postgres {
        None => {
            let dir = tempfile::tempdir()?;
            let store = weft_store::SqliteStore::open(&dir.path().join("weft.db")).await?;
            let r = Retriever::new(std::sync::Arc::new(store), embedder);
            weft_bench::retrieval::retrieval(&r, "store=sqlite", chunks, questions).await
        }
        Some(url) => {
            let schema = format!("weft_bench_retrieval_{}", std::process::id());
            let store =
                std::sync::Arc::new(weft_store::PgStore::connect_in_schema(url, &schema).await?);
            let r = Retriever::new(std::sync::Arc::clone(&store), embedder);
            let out =
                weft_bench::retrieval::retrieval(&r, "store=postgres", chunks, questions).await;
            store.close().await;
            let _ = std::process::Command::new("psql")
                .args([
                    url,
                    "-qc",
                    &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
                ])
                .stderr(std::process::Stdio::null())
                .status();
            out
        }
    }
}

/// Runs a workload `runs` times and prints the medians (one line per report it makes).
async fn one(runs: u32, w: Workload, kind: StoreKind, tool: workloads::ToolKind) -> Result<()> {
    let mut all: Vec<Vec<Report>> = Vec::new();
    for _ in 0..runs {
        let reports = match &w {
            Workload::React { n } => vec![workloads::react_with(*n, kind, tool).await?],
            Workload::Concurrent { m, k } => vec![workloads::concurrent(*m, *k, kind).await?],
            Workload::Growth { t } => vec![workloads::growth(*t).await?],
            Workload::Plan { n } => workloads::plan(*n).await?,
            Workload::Resume { events } => vec![workloads::resume(*events).await?],
            Workload::Retrieval {
                chunks,
                questions,
                postgres,
                embeddings,
            } => {
                retrieval(
                    *chunks,
                    *questions,
                    postgres.as_deref(),
                    embeddings.as_deref(),
                )
                .await?
            }
            Workload::All { .. }
            | Workload::ServeLoad(_)
            | Workload::ServeFloor { .. }
            | Workload::PgCapacity(_)
            | Workload::LocalEval(_)
            | Workload::Bfcl(_) => Vec::new(),
        };
        all.push(reports);
    }
    let width = all.first().map_or(0, Vec::len);
    for i in 0..width {
        let column: Vec<Report> = all.iter().filter_map(|r| r.get(i).cloned()).collect();
        if let Some(m) = Report::median(&column) {
            let suffix = if runs > 1 {
                format!(" (median of {runs})")
            } else {
                String::new()
            };
            println!("{m}{suffix}");
        }
    }
    Ok(())
}
