//! Hosting weft sessions: what a process needs to drive sessions beside other processes on one
//! store, whatever its front end (the `weft` command line, the HTTP server, an application that
//! embeds weft).
//!
//! - [`ownership`]: a session's lease and its holder ([`ownership::Held`]): renewed while a
//!   session is driven, fencing its appends, listening for cancel and pause requests;
//! - [`hosted`]: a session this process drives, from its runtime's setup to the end of its
//!   live telemetry: the one place every front end sets up the run it hosts;
//! - [`run`]: a run (one turn of a session) from its marker to how it ended: deciding what a
//!   request means, taking the lease, driving, holding a pause as a wait, and telling an end
//!   from a lost hold;
//! - [`markers`]: a session's runs as its log tells them (each begins with its marker), for
//!   whichever process reads the log;
//! - [`task`]: a task given to an agent (a new session, another task, an answer) or a plan run,
//!   by a front end that drives it in its own process;
//! - [`drive`]: continuing a session no process drives (queued, or left by a process that
//!   stopped) with its agent file;
//! - [`worker`]: the workers' loop, claiming such sessions and driving many at once;
//! - [`load`]: agent files read and their tools built, and quota files read, with errors that
//!   name the file;
//! - [`sessions`]: fork, and the time format of listings;
//! - [`Shutdown`]: a handle the front end triggers (on Ctrl-C or SIGTERM) to stop the sessions
//!   it drives at their next safe point;
//! - [`DurabilityPolicy`]: at what durability the store writes the sessions this process drives;
//! - [`telemetry`]: the process's OpenTelemetry exporters, and the live export of each session
//!   it drives;
//! - [`Host`]: those passed down together.
#![warn(missing_docs, unreachable_pub)]

pub mod drive;
pub mod hosted;
pub mod load;
pub mod markers;
pub mod ownership;
pub mod run;
pub mod sessions;
mod shutdown;
pub mod task;
pub mod telemetry;
pub mod worker;

use weft_core::Durability;
use weft_core::agent::AgentSpec;
use weft_store::Store;

pub use shutdown::Shutdown;

/// Exit code after a run failed (a step or the agent failed, or it was cancelled).
pub const EXIT_FAILED: u8 = 1;

/// Exit code after an interruption (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;

/// The store's error that `e` or one of its causes is, however it was wrapped (as is, in the
/// runtime's error or in the host's): what a front end tells apart an outage or a lost lease by.
pub fn store_error_in<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a weft_store::StoreError> {
    use weft_runtime::RuntimeError;
    std::iter::successors(Some(e), |c| c.source()).find_map(|c| {
        c.downcast_ref::<weft_store::StoreError>()
            .or(match c.downcast_ref::<RuntimeError>() {
                Some(RuntimeError::Store(s)) => Some(s),
                _ => None,
            })
            .or(match c.downcast_ref::<HostError>() {
                Some(HostError::Store(s) | HostError::Runtime(RuntimeError::Store(s))) => Some(s),
                _ => None,
            })
    })
}

/// A word a POSIX shell reads back as itself (for the commands that hints suggest).
pub fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// What went wrong while hosting a session.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The session store refused or failed.
    #[error(transparent)]
    Store(#[from] weft_store::StoreError),
    /// The runtime failed while driving the session.
    #[error(transparent)]
    Runtime(#[from] weft_runtime::RuntimeError),
    /// Another live process holds the session's lease; the message says who and what to do.
    #[error("{0}")]
    Leased(String),
    /// An agent file cannot be read or run; the message names the file and the problems.
    #[error("{0}")]
    AgentFile(String),
    /// A setting given to the host is out of range; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// A run was refused as asked; the message says what to send instead.
    #[error("{0}")]
    Refused(String),
    /// Asked a process to stop a session and it did not in time.
    #[error("{0}")]
    Timeout(String),
    /// A run was asked for on a session another run is going on, and may not wait its turn.
    #[error("{0}")]
    Busy(String),
    /// A run its user's quota does not admit; the message names what was spent and the limit.
    #[error("{why}")]
    OverQuota {
        /// What was reached.
        why: String,
        /// When a run may be admitted again, in seconds from now.
        retry_after_secs: u64,
    },
}

/// What the code that hosts sessions needs of its process, passed down instead of kept in
/// process-wide globals.
#[derive(Clone, Debug)]
pub struct Host {
    /// Triggered to stop the sessions being driven at their next safe point.
    pub shutdown: Shutdown,
    /// At what durability the store writes.
    pub durability: DurabilityPolicy,
    /// How a suggested command names the store: ` --db SPEC`, or empty for the default store.
    pub db_flag: String,
    /// Where leases read the time: when they are taken, until when they run, whether they ran
    /// out. The system's clock, or a [`weft_runtime::clock::ManualClock`] in tests.
    pub clock: weft_runtime::clock::SharedClock,
    /// Where the spans and metrics of the sessions this process drives go.
    pub telemetry: telemetry::Telemetry,
    /// The users' quotas (`--quotas`) the sessions this process drives are held to; none: no
    /// quota. The counters are in the store, shared by every process on it.
    pub quotas: Option<std::sync::Arc<weft_core::quota::QuotaFile>>,
}

impl Host {
    /// The quota the sessions of `user` are held to, if the quota file gives them one.
    pub fn quota_of(&self, user: Option<&str>) -> Option<weft_runtime::quota::UserQuota> {
        let (file, user) = (self.quotas.as_ref()?, user?);
        file.for_user(user).map(|q| weft_runtime::quota::UserQuota {
            user: user.to_owned(),
            quota: q.clone(),
        })
    }

    /// Whose counters the model calls of `user`'s sessions add to, and the quota they are held
    /// to: the quota file's, or none (no limit) for a user without one, whose spending is
    /// counted all the same (`GET /me/usage` reports it). `None` only without a user.
    pub fn counted_as(&self, user: Option<&str>) -> Option<weft_runtime::quota::UserQuota> {
        self.quota_of(user).or_else(|| {
            user.map(|u| weft_runtime::quota::UserQuota {
                user: u.to_owned(),
                quota: weft_core::quota::Quota::default(),
            })
        })
    }
}

impl Default for Host {
    fn default() -> Self {
        Self {
            shutdown: Shutdown::default(),
            durability: DurabilityPolicy::default(),
            db_flag: String::new(),
            clock: weft_runtime::clock::system_clock(),
            telemetry: telemetry::Telemetry::default(),
            quotas: None,
        }
    }
}

/// At what durability the store writes the sessions this process drives: what the user chose
/// (`--durability`), else what the agent files ask for (`durability:`; the strongest when they
/// differ, `full` when one says nothing).
#[derive(Clone, Copy, Debug, Default)]
pub struct DurabilityPolicy {
    chosen: Option<Durability>,
}

impl DurabilityPolicy {
    /// A policy where `chosen` (when given) overrides what agent files ask for.
    pub fn new(chosen: Option<Durability>) -> Self {
        Self { chosen }
    }

    /// What the user chose, if anything.
    pub fn chosen(&self) -> Option<Durability> {
        self.chosen
    }

    /// Makes `store` write at what the agent files `specs` ask for, unless the user chose.
    pub fn for_agents<'a, S: Store>(
        &self,
        store: &S,
        specs: impl IntoIterator<Item = &'a AgentSpec>,
    ) {
        self.for_asked(store, specs.into_iter().map(|s| s.durability));
    }

    /// [`DurabilityPolicy::for_agents`] from what each agent file says (`None`: nothing).
    pub fn for_asked<S: Store>(
        &self,
        store: &S,
        asked: impl IntoIterator<Item = Option<Durability>>,
    ) {
        if self.chosen.is_some() {
            return;
        }
        if let Some(d) = Durability::strongest(asked.into_iter().map(Option::unwrap_or_default)) {
            store.set_durability(d);
        }
    }
}
