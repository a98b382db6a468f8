//! The `weft` command-line tool.

mod load;
mod plan_cmd;
mod run_cmd;
mod sessions_cmd;
mod store;
mod tools_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc: the runtime allocates many small, short-lived values on several threads at once,
/// where the system allocator spends its time on its arenas' locks (see BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// weft: a durable agent runtime. Plans data-flow graphs of tool calls, runs them in parallel
/// waves, checkpoints every step, and streams a typed event for everything it does.
#[derive(Debug, Parser)]
#[command(name = "weft", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Where sessions are stored: a SQLite file (default .weft/weft.db) or a postgres:// URL.
    #[arg(long, global = true, env = "WEFT_DB")]
    db: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate, dry-run or execute a plan with no model involved.
    #[command(subcommand)]
    Plan(plan_cmd::PlanCommand),
    /// Give an agent a task, or answer a session that waits (--session). Exit 0 answered,
    /// 1 could not complete, 3 waiting for your answer.
    Run(run_cmd::RunArgs),
    /// Continue a session whose process stopped while it was running.
    Resume(sessions_cmd::ResumeArgs),
    /// List, inspect, follow, fork and prune sessions.
    #[command(subcommand)]
    Sessions(sessions_cmd::SessionsCommand),
    /// List an agent's tools with their source and schema.
    #[command(subcommand)]
    Tools(tools_cmd::ToolsCommand),
}

/// Exit codes: 0 success, 1 the run failed, 2 bad input (a file, a plan, an argument), 3 the
/// session waits for a person.
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let result = rt.block_on(async {
        let read_only = matches!(cli.command, Command::Sessions(_) | Command::Resume(_));
        let needs_store = !matches!(
            cli.command,
            Command::Plan(plan_cmd::PlanCommand::Check(_) | plan_cmd::PlanCommand::DryRun(_))
                | Command::Tools(_)
        );
        let store = if needs_store {
            store::open(cli.db.as_deref(), read_only).await?
        } else {
            std::sync::Arc::new(weft_store::AnyStore::Memory(weft_store::MemoryStore::new()))
        };
        match cli.command {
            Command::Plan(c) => plan_cmd::run(store, c).await,
            Command::Run(a) => run_cmd::run(store, a).await,
            Command::Resume(a) => sessions_cmd::resume(store, a).await,
            Command::Sessions(c) => sessions_cmd::run(store, c).await,
            Command::Tools(c) => tools_cmd::run(c).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader of stdout went away (`weft run ... | head`): stop quietly, as a program
        // killed by SIGPIPE would (weft forbids the unsafe code that resetting it would take).
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// True when `e` comes from writing to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
