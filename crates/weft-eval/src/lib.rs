//! Evaluations of weft agents: an agent is run over a dataset of cases, each case as a session
//! of its own in the store, and what each session did is scored against what the case expects.
//!
//! - [`dataset`]: the dataset file (YAML or JSON lines) read into [`dataset::Case`]s, every
//!   mistake named by file, line, case and field;
//! - [`observed`]: what a case's session did (status, answer, State, tool calls, usage,
//!   latency), read from its events;
//! - [`expect`]: the scorers a case's expectations make (status, answer, State, limits), each a
//!   pure function of what was observed;
//! - [`trajectory`]: the tool calls a session made matched against the expected ones (strict
//!   order, any order, subset, superset);
//! - [`scorer`]: the scorers that run outside weft: a command given the session's JSON, and a
//!   model as judge with a rubric;
//! - [`replay`]: recorded sessions as cases (`weft eval record`), their replies replayed
//!   strictly (the same requests), with tools live, or not at all (a live model);
//! - [`runner`]: a case run as a session with `weft run`'s code path, cases in parallel; a run
//!   stopped midway finished by the same command;
//! - [`results`]: a run's JSON lines and its summary (pass rates, pass@k, mean and spread);
//! - [`compare`]: what changed per case between two runs, regressions first;
//! - [`stored`]: eval runs read back from the store: each case's result rebuilt from its
//!   session (its metadata and its `evaluation_result` events), for `weft serve`.
#![warn(missing_docs, unreachable_pub)]

pub mod compare;
pub mod dataset;
pub mod expect;
pub mod observed;
pub mod replay;
pub mod results;
pub mod runner;
pub mod scorer;
pub mod stored;
pub mod trajectory;

/// What went wrong in an evaluation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The dataset cannot be read or has a mistake; the message names the file, line, case and
    /// field.
    #[error("{0}")]
    Dataset(String),
    /// A run's results cannot be read or written; the message names the file.
    #[error("{0}")]
    Results(String),
    /// A setting is out of range or a model cannot be built; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// The session store failed.
    #[error(transparent)]
    Store(#[from] weft_store::StoreError),
    /// Hosting a case's session failed.
    #[error(transparent)]
    Host(#[from] weft_host::HostError),
}
