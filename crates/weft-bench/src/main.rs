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
    /// What the SQLite files are written at: full (synced at every commit) or normal.
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
}

fn main() -> Result<()> {
    let cli = Cli::parse();
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
        telemetry
            .finish(std::time::Duration::from_secs(5), None)
            .await;
        let c = telemetry.counts();
        eprintln!(
            "telemetry: {} spans exported, {} dropped (queue full), {} lost",
            c.exported, c.dropped, c.failed
        );
    }
    Ok(())
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
    })
    .await?;
    print!("{}", report.table());
    println!("{}", report.to_json());
    Ok(())
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
            Workload::All { .. } | Workload::ServeLoad(_) => Vec::new(),
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
