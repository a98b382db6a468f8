//! `weft worker`: its arguments; the workers' loop is `weft_host::worker`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::Args;
use weft_host::Host;
use weft_host::worker::WorkerConfig;
use weft_store::Store;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The agent files whose sessions this worker runs: files, or directories whose `.yaml`,
    /// `.yml` and `.json` agent files are all taken (default: the current directory).
    #[arg(long, default_value = ".")]
    pub agents: Vec<PathBuf>,
    /// How many sessions this worker drives at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// How often to look for work when nothing wakes the worker (seconds).
    #[arg(long, default_value_t = 1.0)]
    pub poll_secs: f64,
    /// On SIGTERM or Ctrl-C: how long the sessions being driven get to end before they are
    /// stopped and released for other workers (seconds).
    #[arg(long, default_value_t = 10.0)]
    pub drain_secs: f64,
    /// Exit once no session has been runnable for this long (seconds); default: run until
    /// stopped.
    #[arg(long)]
    pub exit_when_idle: Option<f64>,
    /// A quota file (YAML: a `default` quota and `users`' own): the sessions of each user are
    /// held to their quota, counted in the store across every worker and server on it (see
    /// docs/budgets.md).
    #[arg(long)]
    pub quotas: Option<PathBuf>,
}

fn secs(what: &str, v: f64) -> Result<Duration> {
    if v.is_finite() && (0.0..=86_400.0).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(anyhow!(
            "--{what} {v}: give a number of seconds from 0 to 86400"
        ))
    }
}

/// A worker's quota file and flags, read and checked before the session store is opened.
pub struct Prepared {
    host: Host,
    config: WorkerConfig,
}

/// Reads the quota file and checks the flags (a mistake leaves no store behind).
pub fn prepare(host: &Host, a: WorkerArgs) -> Result<Prepared> {
    let host = crate::cmd::serve::with_quotas(host, a.quotas.as_deref())?;
    let config = WorkerConfig {
        agents: a.agents,
        concurrency: a.concurrency,
        poll: secs("poll-secs", a.poll_secs)?,
        drain: secs("drain-secs", a.drain_secs)?,
        exit_when_idle: a
            .exit_when_idle
            .map(|v| secs("exit-when-idle", v))
            .transpose()?,
    };
    Ok(Prepared { host, config })
}

/// Runs a worker until SIGTERM or Ctrl-C (it drains), or until it was idle for
/// `--exit-when-idle`.
pub async fn run<S: Store>(p: Prepared, store: Arc<S>) -> Result<u8> {
    Ok(weft_host::worker::run(&p.host, store, p.config).await?)
}
