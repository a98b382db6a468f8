//! The `weft` command-line tool.

#[cfg(test)]
mod cli_tests;
mod cmd;
mod input;
mod signals;
mod store;
mod telemetry;
mod view;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cmd::{
    batch, check, docs as docs_cmd, eval as eval_cmd, memory as memory_cmd, new as new_cmd,
    plan as plan_cmd, run as run_cmd, schema as schema_cmd, serve, sessions as sessions_cmd,
    submit as submit_cmd, tools as tools_cmd, worker,
};

/// mimalloc: the runtime allocates many small, short-lived values on several threads at once,
/// where the system allocator spends its time on its arenas' locks (see BENCHMARKS.md). Built
/// without transparent huge pages (`no_thp`, in the workspace's Cargo.toml).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// weft: a durable agent runtime. Plans data-flow graphs of tool calls, runs them in parallel
/// waves, checkpoints every step, and streams a typed event for everything it does.
#[derive(Debug, Parser)]
#[command(name = "weft", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Where sessions are stored: a SQLite file (default .weft/weft.db) or a postgres:// URL.
    #[arg(long, global = true, env = "WEFT_DB", help_heading = GLOBAL)]
    db: Option<String>,
    /// What a committed step survives: `full` (synced to disk at every commit; survives a power
    /// cut) or `normal` (survives a crash of weft, not of the machine). Overrides the agent
    /// file's `durability:` (default full).
    #[arg(
        long,
        global = true,
        env = "WEFT_DURABILITY",
        value_name = "full|normal",
        help_heading = GLOBAL
    )]
    durability: Option<weft_core::Durability>,
    /// What weft logs on stderr: error, warn, info, debug or trace, or a filter such as
    /// `weft=debug,sqlx=warn` (default: RUST_LOG, else warnings only).
    #[arg(long, global = true, value_name = "LEVEL", help_heading = GLOBAL)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a starter agent, NAME.yaml (a ReAct agent with a scripted model and a command
    /// tool, which `weft check` passes and `weft run` runs), and its model's script,
    /// NAME.script.yaml. Existing files are never overwritten.
    #[command(alias = "init")]
    New(new_cmd::NewArgs),
    /// Validate, dry-run or execute a plan with no model involved.
    #[command(subcommand)]
    Plan(plan_cmd::PlanCommand),
    /// Give an agent a task, or answer a session that waits (--session).
    Run(run_cmd::RunArgs),
    /// Answer a session that waits for a person (the agent file is the one it was started with).
    Answer(run_cmd::AnswerArgs),
    /// Continue a session whose process stopped while it was running.
    Resume(sessions_cmd::ResumeArgs),
    /// Queue a run (or an answer, --session) for `weft worker`; prints the session id.
    Submit(submit_cmd::SubmitArgs),
    /// Claim and drive queued and orphaned sessions, many at once, beside other workers on
    /// the same store (PostgreSQL, or one SQLite file on one machine).
    Worker(worker::WorkerArgs),
    /// Run an agent once per record of a JSON-lines file, N at a time; a re-run continues the
    /// batch and runs no finished record again. Exit 0 all done, 1 some failed, 130 interrupted.
    Batch(batch::BatchArgs),
    /// Run an agent over a dataset of cases, each as a session, and score what it did (exit 1
    /// below --min-pass-rate); `weft eval compare A B` compares two runs.
    Eval(eval_cmd::EvalArgs),
    /// Serve the agents over HTTP with LangGraph Server's API (assistants, threads, runs,
    /// streaming), for the langgraph-sdk clients; API keys required.
    Serve(serve::ServeArgs),
    /// List, inspect, follow, fork and prune sessions.
    #[command(subcommand)]
    Sessions(sessions_cmd::SessionsCommand),
    /// Add documents to search (text, Markdown, HTML, PDF) and search them.
    #[command(subcommand)]
    Docs(docs_cmd::DocsCommand),
    /// Add, list, search and forget long-term memories (a user's, an agent's, public ones).
    #[command(subcommand)]
    Memory(memory_cmd::MemoryCommand),
    /// List an agent's tools with their source and schema.
    #[command(subcommand)]
    Tools(tools_cmd::ToolsCommand),
    /// Check an agent file (and a plan) without running anything: every problem, at once,
    /// with its line and column. Exit 0 when there is none, 2 otherwise.
    Check(check::CheckArgs),
    /// Print the JSON Schema of agent files (published as schema/agent.schema.json).
    Schema {
        /// The schema of process files instead (plans reused as tools; published as
        /// schema/process.schema.json).
        #[arg(long)]
        process: bool,
    },
    /// Print a shell completion script: `weft completions bash > ~/.local/share/bash-completion/completions/weft`.
    Completions {
        /// The shell the script is for.
        shell: clap_complete::Shell,
    },
}

/// A new run (of an agent or a plan) whose files were read before the store was opened.
enum Prepared {
    Run(run_cmd::Prepared),
    Plan(plan_cmd::Prepared),
    Submit(submit_cmd::Prepared),
    Eval(Box<eval_cmd::Prepared>),
    Serve(Box<serve::Prepared>),
    Worker(worker::Prepared),
}

/// What weft logs when neither `--log-level` nor `RUST_LOG` says: warnings, but only errors of
/// the database driver (`sqlx`, and by prefix `sqlx_core`, `sqlx_postgres`...), whose warnings
/// on a lost connection ("error occurred while testing the connection on-release") would
/// otherwise come ahead of weft's own message about the store.
const DEFAULT_LOG_FILTER: &str = "warn,sqlx=error";

/// What is logged: `--log-level` (`level`), else `RUST_LOG` (`env`, when it is a filter), else
/// [`DEFAULT_LOG_FILTER`]. Either one given replaces the default whole (`RUST_LOG=sqlx=debug`
/// shows the driver's lines again).
fn log_filter(
    level: Option<&str>,
    env: Option<&str>,
) -> Result<tracing_subscriber::EnvFilter, String> {
    use tracing_subscriber::EnvFilter;
    if let Some(l) = level {
        return EnvFilter::try_new(l).map_err(|e| format!("--log-level {l}: {e}"));
    }
    Ok(env
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_LOG_FILTER)))
}

/// Logs on stderr, as [`log_filter`] says.
fn init_logging(level: Option<&str>) -> Result<(), String> {
    let env = std::env::var(tracing_subscriber::EnvFilter::DEFAULT_ENV).ok();
    let filter = log_filter(level, env.as_deref())?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .with_target(true)
        .try_init()
        .map_err(|e| format!("cannot set up logging: {e}"))
}

/// The heading the options every command takes are shown under.
const GLOBAL: &str = "Global options";

/// The exit codes, as `--help` shows them (the constants below and `weft_host::EXIT_INTERRUPTED`
/// are the codes themselves).
pub const EXIT_CODES: &str = "\
Exit codes:
  0    done (answered, or nothing wrong)
  1    the run could not complete (a step or the agent failed)
  2    bad input: a file, a field or an argument (named in the message)
  3    the session waits for a person (answer with `weft answer ID TEXT`)
  4    the session store failed (unreachable, connection dropped, write refused): once it is back,
       `weft resume ID` continues the session it names (or run the command again if none started)
  130  interrupted (Ctrl-C or SIGTERM): the run stopped at a safe point; `weft resume ID` continues it
";

/// Exit codes: 0 success, 1 the run failed, 2 bad input (a file, a plan, an argument), 3 the
/// session waits for a person; see [`EXIT_CODES`].
pub const EXIT_FAILED: u8 = weft_host::EXIT_FAILED;
pub const EXIT_USAGE: u8 = 2;
/// The session store failed (its server unreachable, a connection dropped, a write refused):
/// not the input's fault, so it has its own code. Once the store is back, `weft resume ID`
/// continues a session that had started (the message names it).
pub const EXIT_STORE: u8 = 4;

/// Examples for the long help of each main command (`--help`, and `weft help` with the command).
const EXAMPLES: &[(&str, &str)] = &[
    (
        "new",
        "weft new helper
  weft check helper.yaml
  weft run helper.yaml \"What time is it?\"",
    ),
    (
        "run",
        "weft run examples/weather-chat.yaml \"Where is it sunnier, Lisbon or Oslo?\"\n  \
         weft run examples/refund-desk.yaml \"I'd like a refund.\" --input '{\"customerId\": \"cust_123\"}'\n  \
         echo \"a task\" | weft run examples/weather-chat.yaml -",
    ),
    ("answer", "weft answer SESSION \"It is order A-2002.\""),
    (
        "resume",
        "weft resume SESSION\n  weft resume SESSION --force",
    ),
    (
        "check",
        "weft check examples/refund-desk.yaml\n  \
         weft check examples/shop.yaml examples/plans/refund.json --input '{\"customerId\": \"c1\", \"amount\": 5}'",
    ),
    (
        "plan",
        "weft plan check examples/plans/refund.json --agent examples/shop.yaml\n  \
         weft plan run examples/plans/refund.json --agent examples/shop.yaml --input @input.json",
    ),
    (
        "sessions",
        "weft sessions list --status waiting_for_user\n  weft sessions show SESSION\n  \
         weft sessions events --follow SESSION\n  weft sessions fork SESSION --at 12\n  \
         weft sessions prune --older-than 30d --dry-run",
    ),
    (
        "submit",
        "weft submit examples/weather-chat.yaml \"Is it sunny in Oslo?\"\n  weft worker --agent examples/weather-chat.yaml",
    ),
    ("worker", "weft worker --agent examples/weather-chat.yaml"),
    (
        "eval",
        "weft eval examples/support-triage.yaml examples/evals/support-triage.yaml --out runs/a\n  \
         weft eval examples/weather-chat.yaml cases.jsonl --model openai:qwen --repeat 5 --min-pass-rate 0.8\n  \
         weft eval compare runs/a runs/b",
    ),
    (
        "docs",
        "weft docs add guide.md handbook.pdf --scope public\n  weft docs search \"refund policy\"",
    ),
    (
        "memory",
        "weft memory add \"prefers email\" --user alice\n  weft memory search \"contact\" --user alice",
    ),
];

/// The commands (with the commands under them) that open no session store: `--db` and
/// `--durability` do nothing there, so their help does not list them.
const WITHOUT_STORE: &[&[&str]] = &[
    &["new"],
    &["plan", "check"],
    &["plan", "dry-run"],
    &["eval", "compare"],
    &["tools"],
    &["check"],
    &["schema"],
    &["completions"],
];

/// The commands that log nothing: `--log-level` is not listed on them either.
const WITHOUT_LOGS: &[&[&str]] = &[&["new"], &["schema"], &["completions"]];

/// The command line's definition as `--help` shows it: examples and exit codes on the main
/// commands; the global options only on the commands they apply to (they are still accepted
/// before or after any command, `weft --db X run` as `weft run --db X`).
fn cli() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    for (name, examples) in EXAMPLES {
        let codes = matches!(*name, "run" | "answer" | "resume");
        cmd = cmd.mut_subcommand(*name, |c| {
            let mut text = format!("Examples:\n  {examples}\n");
            if codes {
                text.push('\n');
                text.push_str(EXIT_CODES);
            }
            c.after_long_help(text)
        });
    }
    // Global options are given to every subcommand when the command is built.
    cmd.build();
    for path in WITHOUT_STORE {
        cmd = hide_under(cmd, path, &["db", "durability"]);
    }
    for path in WITHOUT_LOGS {
        cmd = hide_under(cmd, path, &["log_level"]);
    }
    cmd
}

/// `cmd` with the options `ids` hidden from the help of the command at `path` below it and of
/// every command under that one.
fn hide_under(cmd: clap::Command, path: &[&str], ids: &[&str]) -> clap::Command {
    match path.split_first() {
        Some((first, rest)) => cmd.mut_subcommand(*first, |c| hide_under(c, rest, ids)),
        None => {
            let subs: Vec<String> = cmd
                .get_subcommands()
                .map(|s| s.get_name().to_owned())
                .collect();
            let mut cmd = cmd.mut_args(|a| {
                if ids.contains(&a.get_id().as_str()) {
                    a.hide(true)
                } else {
                    a
                }
            });
            for s in subs {
                cmd = cmd.mut_subcommand(s, |c| hide_under(c, &[], ids));
            }
            cmd
        }
    }
}

/// Reads the command line as [`cli`] defines it. A mistyped command gets the closest one as a
/// tip even when clap's own measure finds it too far (`rn` for `run`).
fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let mut cmd = cli();
    let matches = match cmd.try_get_matches_from_mut(&args) {
        Ok(m) => m,
        Err(mut e) => {
            if e.kind() == ErrorKind::InvalidSubcommand
                && e.get(ContextKind::SuggestedSubcommand).is_none()
                && let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidSubcommand)
            {
                let word = word.clone();
                // The command the mistyped word was given to.
                let mut at = &cmd;
                for a in args.iter().skip(1).filter_map(|a| a.to_str()) {
                    if a == word {
                        break;
                    }
                    if let Some(s) = at.find_subcommand(a) {
                        at = s;
                    }
                }
                let names: Vec<&str> = at.get_subcommands().map(|s| s.get_name()).collect();
                if let Some(c) = weft_core::diagnose::closest(&word, names) {
                    e.insert(
                        ContextKind::SuggestedSubcommand,
                        ContextValue::Strings(vec![c.to_owned()]),
                    );
                }
            }
            return Err(e);
        }
    };
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

fn main() -> ExitCode {
    // A tool's process, started through `weft __sandbox POLICY -- PROGRAM ...`: sets up its
    // sandbox and becomes PROGRAM. First, while the process has one thread (a user namespace
    // cannot be entered by a process with more).
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "__sandbox") {
        #[cfg(target_os = "linux")]
        return weft_tools::sandbox::launch::main(args);
        #[cfg(not(target_os = "linux"))]
        {
            eprintln!("weft-sandbox: setup: unsupported: the sandbox needs Linux");
            return ExitCode::from(125);
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        weft_tools::sandbox::set_launcher(exe, vec!["__sandbox".into()]);
    }
    let cli = match parse_from(std::env::args_os()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if let Command::Completions { shell } = cli.command {
        use clap::CommandFactory;
        clap_complete::generate(shell, &mut Cli::command(), "weft", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    if let Err(e) = init_logging(cli.log_level.as_deref()) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
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
    // A worker drains on a signal itself; every other command stops where it is.
    let own_signals = matches!(cli.command, Command::Worker(_) | Command::Serve(_));
    // Commands that drive sessions stop them at a safe point on a signal; the rest stop at once.
    let graceful = matches!(
        cli.command,
        Command::Run(_)
            | Command::Answer(_)
            | Command::Resume(_)
            | Command::Batch(_)
            | Command::Eval(_)
            | Command::Plan(plan_cmd::PlanCommand::Run(_))
    );
    // The commands that drive one session: when the store fails under them, weft says how to
    // go on with it.
    let one_session = matches!(
        cli.command,
        Command::Run(_)
            | Command::Answer(_)
            | Command::Resume(_)
            | Command::Plan(plan_cmd::PlanCommand::Run(_))
    );
    let shutdown = weft_host::Shutdown::new();
    // The commands that drive sessions export their spans and metrics when OTLP is configured.
    let drives = graceful || own_signals;
    let telemetry = if drives {
        rt.block_on(async { weft_host::telemetry::Telemetry::from_env() })
    } else {
        weft_host::telemetry::Telemetry::default()
    };
    let work = async {
        // Commands about an existing session never create a store (a mistyped --db or a
        // lookup in the wrong directory must not leave an empty .weft/weft.db behind).
        let read_only = matches!(
            cli.command,
            Command::Sessions(_)
                | Command::Resume(_)
                | Command::Answer(_)
                | Command::Docs(docs_cmd::DocsCommand::Search { .. })
                | Command::Memory(
                    memory_cmd::MemoryCommand::List { .. }
                        | memory_cmd::MemoryCommand::Search { .. }
                        | memory_cmd::MemoryCommand::Forget { .. }
                )
        ) || matches!(&cli.command, Command::Run(a) if a.session.is_some())
            || matches!(&cli.command, Command::Eval(a) if eval_cmd::reads_only(a));
        // A store named by WEFT_DB needs no --db in hints (and a URL may hold a password).
        if std::env::var("WEFT_DB").ok() != cli.db {
            store::remember(cli.db.as_deref());
        }
        let host = weft_host::Host {
            shutdown: shutdown.clone(),
            durability: weft_host::DurabilityPolicy::new(cli.durability),
            db_flag: store::db_flag(),
            clock: weft_runtime::clock::system_clock(),
            telemetry: telemetry.clone(),
            quotas: None,
        };
        let host = &host;
        let needs_store = !matches!(
            cli.command,
            Command::Plan(plan_cmd::PlanCommand::Check(_) | plan_cmd::PlanCommand::DryRun(_))
                | Command::Tools(_)
                | Command::Check(_)
                | Command::New(_)
                | Command::Completions { .. }
                | Command::Schema { .. }
        ) && !matches!(&cli.command, Command::Eval(a) if !eval_cmd::needs_store(a));
        // A wrong embeddings setting (WEFT_EMBEDDINGS_URL, ...) is reported before anything runs.
        if needs_store {
            weft_runtime::retrieval::configured_embedder().map_err(anyhow::Error::msg)?;
        }
        // A new run reads its task, agent file and plan before the store is opened, and a
        // server or a worker its quota file, keys and agent files: a mistake there leaves no
        // `.weft/weft.db` behind.
        let command = match cli.command {
            Command::Run(a) if a.session.is_none() => {
                Err(Prepared::Run(run_cmd::prepare(a).await?))
            }
            Command::Submit(a) => Err(Prepared::Submit(submit_cmd::prepare(&a).await?)),
            Command::Eval(a) if eval_cmd::is_run(&a) => {
                Err(Prepared::Eval(Box::new(eval_cmd::prepare(a).await?)))
            }
            Command::Plan(plan_cmd::PlanCommand::Run(a)) => match plan_cmd::prepare(a).await? {
                Ok(p) => Err(Prepared::Plan(p)),
                Err(code) => return Ok(code),
            },
            Command::Serve(a) => match serve::prepare(host, a).await? {
                Some(p) => Err(Prepared::Serve(Box::new(p))),
                // `--openapi`: printed, and no store needed.
                None => return Ok(0),
            },
            Command::Worker(a) => Err(Prepared::Worker(worker::prepare(host, a)?)),
            other => Ok(other),
        };
        let store = if needs_store {
            tracing::debug!(
                db = cli.db.as_deref().unwrap_or(store::DEFAULT_DB),
                "opening the session store"
            );
            {
                // A new run's agent file is read already: its durability is the store's from
                // the start (its schema and lease writes included).
                let agent = match &command {
                    Err(Prepared::Run(p)) => p.durability,
                    Err(Prepared::Submit(p)) => p.run.durability,
                    Err(Prepared::Plan(p)) => p.durability(),
                    Err(Prepared::Eval(p)) => p.agent.spec.durability,
                    Err(Prepared::Serve(_) | Prepared::Worker(_)) | Ok(_) => None,
                };
                store::open(cli.db.as_deref(), read_only, cli.durability, agent).await?
            }
        } else {
            std::sync::Arc::new(weft_store::AnyStore::Ram(weft_store::RamStore::new()))
        };
        let command = match command {
            Ok(c) => c,
            Err(Prepared::Run(p)) => return run_cmd::execute(host, store, p).await,
            Err(Prepared::Plan(p)) => return plan_cmd::execute(host, store, p).await,
            Err(Prepared::Submit(p)) => return submit_cmd::run(host, store, p).await,
            Err(Prepared::Eval(p)) => return eval_cmd::execute(host, store, *p).await,
            Err(Prepared::Serve(p)) => return serve::run(*p, store).await,
            Err(Prepared::Worker(p)) => return worker::run(p, store).await,
        };
        match command {
            Command::Plan(c) => plan_cmd::run(host, store, c).await,
            Command::Run(a) => run_cmd::run(host, store, a).await,
            Command::Answer(a) => run_cmd::answer(host, store, a).await,
            Command::Resume(a) => sessions_cmd::resume(host, store, a).await,
            Command::Submit(_) => Ok(0),
            Command::Worker(_) | Command::Serve(_) => Ok(0),
            Command::Batch(a) => batch::run(host, store, a).await,
            Command::Eval(a) => eval_cmd::other(store, a).await,
            Command::Sessions(c) => sessions_cmd::run(host, store, c).await,
            Command::Tools(c) => tools_cmd::run(c).await,
            Command::Docs(c) => docs_cmd::run(store, c).await,
            Command::Memory(c) => memory_cmd::run(store, c).await,
            Command::Check(a) => check::run(a).await,
            Command::New(a) => new_cmd::run(&a),
            Command::Completions { .. } => Ok(0),
            Command::Schema { process } => schema_cmd::run(process),
        }
    };
    let result = rt.block_on(async {
        if own_signals {
            signals::forward(shutdown.clone());
            return Some(work.await);
        }
        let mut work = std::pin::pin!(work);
        tokio::select! {
            r = &mut work => return Some(r),
            () = signals::signal() => {}
        }
        if !graceful {
            return None;
        }
        // The run stops at its next safe point; calls in flight get a grace to finish.
        shutdown.trigger();
        tokio::select! {
            r = &mut work => Some(r),
            () = tokio::time::sleep(shutdown.grace() + std::time::Duration::from_millis(500)) => None,
            () = signals::signal() => None,
        }
    });
    // What is queued for the collector is sent (a collector that is down or does not answer
    // costs `WEFT_OTLP_EXIT_TIMEOUT`, 1 s, at most, and is reported).
    rt.block_on(telemetry.finish(shutdown.session().as_deref()));
    // Everything the command needed is done and stored. Work left on a blocking thread (a
    // template that ran past its time) is not waited for.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    let Some(result) = result else {
        eprintln!("{}", signals::message(&shutdown));
        return ExitCode::from(weft_host::EXIT_INTERRUPTED);
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader of stdout went away (`weft run ... | head`): stop quietly, as a program
        // killed by SIGPIPE would (weft forbids the unsafe code that resetting it would take).
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if store_failed(&e) => {
            eprintln!("error: {}", message(&e));
            if one_session {
                eprintln!("{}", store_hint(shutdown.session().as_deref()));
            }
            ExitCode::from(EXIT_STORE)
        }
        Err(e) => {
            eprintln!("error: {}", message(&e));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// What to do after the store failed under a command that drives one session: continue the
/// session (`session`, once it was started) with `weft resume`, or run the command again, once
/// the database is back.
fn store_hint(session: Option<&str>) -> String {
    match session {
        Some(id) => format!(
            "session {id} is kept as far as it was stored; continue it with `weft resume{} {id}` once the database is back",
            store::db_flag()
        ),
        None => "no session was started: run the same command again once the database is back"
            .to_owned(),
    }
}

/// The error and its causes, each said once: a cause whose text its wrapper already holds
/// (a database error quoted in the store's message) is not repeated.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// True when the session store itself failed, anywhere in the error's chain.
fn store_failed(e: &anyhow::Error) -> bool {
    weft_host::store_error_in(e.as_ref()).is_some_and(weft_store::StoreError::is_infrastructure)
}

/// True when `e` comes from writing to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::{Arc, Mutex};

    /// What `filter` lets through of a warning and an error from weft and from the database
    /// driver (as sqlx names its targets: `sqlx_core::pool::connection`, `sqlx::query`).
    fn logged(filter: tracing_subscriber::EnvFilter) -> String {
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || Writer(sink.clone()))
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "sqlx_core::pool::connection", "error occurred while testing the connection on-release");
            tracing::warn!(target: "sqlx::query", "slow statement");
            tracing::error!(target: "sqlx_core::pool::inner", "error returned from after_connect");
            tracing::warn!(target: "weft_server::health", "the session store is unreachable");
            tracing::debug!(target: "weft_store::postgres", "a debug line");
        });
        String::from_utf8(out.lock().unwrap().clone()).unwrap()
    }

    struct Writer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Writer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn by_default_the_database_driver_says_only_its_errors() {
        let out = logged(super::log_filter(None, None).unwrap());
        assert!(out.contains("the session store is unreachable"), "{out}");
        assert!(out.contains("error returned from after_connect"), "{out}");
        assert!(!out.contains("on-release"), "{out}");
        assert!(!out.contains("slow statement"), "{out}");
        assert!(!out.contains("a debug line"), "{out}");
        // An empty or unreadable RUST_LOG is the default too.
        let out = logged(super::log_filter(None, Some(" ")).unwrap());
        assert!(!out.contains("on-release"), "{out}");
    }

    #[test]
    fn rust_log_and_log_level_replace_the_default() {
        let out = logged(super::log_filter(None, Some("warn")).unwrap());
        assert!(out.contains("on-release"), "{out}");
        let out = logged(super::log_filter(Some("debug"), Some("error")).unwrap());
        assert!(
            out.contains("on-release") && out.contains("a debug line"),
            "{out}"
        );
        let out = logged(super::log_filter(Some("sqlx=warn"), None).unwrap());
        assert!(
            out.contains("on-release") && !out.contains("the session store is unreachable"),
            "{out}"
        );
        let e = super::log_filter(Some("weft=loud"), None).unwrap_err();
        assert!(e.starts_with("--log-level weft=loud"), "{e}");
    }
}
