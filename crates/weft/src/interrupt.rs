//! Ctrl-C and SIGTERM during a run. The run starts no new model or tool call, and the calls in
//! flight get a short grace ([`grace`], 2 s; a worker's `--drain-secs`) to finish and be
//! recorded. A call still running after it is dropped where it stands, as a process that dies
//! drops it: every batch of events committed is whole, the call's process is killed, and `weft
//! resume` recovers the session exactly as after a crash (an idempotent call is run again, any
//! other is recorded with an unknown outcome, never repeated). weft then says which session
//! stopped and the command that continues it, and exits 130. A second signal stops at once.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use weft_core::{Envelope, Event};
use weft_runtime::Observer;

/// Exit code after an interruption (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;

fn current() -> &'static Mutex<Option<String>> {
    static CURRENT: OnceLock<Mutex<Option<String>>> = OnceLock::new();
    CURRENT.get_or_init(|| Mutex::new(None))
}

/// The session this process drives, when it is known before the run starts.
pub fn note_session(id: &str) {
    if let Ok(mut c) = current().lock() {
        *c = Some(id.to_owned());
    }
}

/// An observer that notes the session a run starts.
pub fn observer() -> Observer {
    Arc::new(|e: &Envelope| {
        if let Event::SessionStarted { session_id, .. } = &e.event {
            note_session(session_id);
        }
    })
}

fn flag() -> &'static tokio::sync::watch::Sender<bool> {
    static FLAG: OnceLock<tokio::sync::watch::Sender<bool>> = OnceLock::new();
    FLAG.get_or_init(|| tokio::sync::watch::channel(false).0)
}

/// Records that the process was asked to stop: runs stop at their next safe point.
pub fn begin() {
    flag().send_replace(true);
}

/// Whether [`begin`] was called.
pub fn is_requested() -> bool {
    *flag().borrow()
}

fn quiet_flag() -> &'static std::sync::atomic::AtomicBool {
    static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    &QUIET
}

/// For commands that drive many sessions (`weft batch`, `weft worker`): they say once what an
/// interruption means, rather than once per session.
pub fn set_quiet() {
    quiet_flag().store(true, std::sync::atomic::Ordering::Relaxed);
}

pub fn is_quiet() -> bool {
    quiet_flag().load(std::sync::atomic::Ordering::Relaxed)
}

/// Resolves once [`begin`] was called.
pub async fn requested() {
    let mut rx = flag().subscribe();
    let _ = rx.wait_for(|v| *v).await;
}

fn grace_ms() -> &'static std::sync::atomic::AtomicU64 {
    static GRACE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(2_000);
    &GRACE
}

/// How long calls in flight get to finish after a signal.
pub fn grace() -> Duration {
    Duration::from_millis(grace_ms().load(std::sync::atomic::Ordering::Relaxed))
}

/// Sets [`grace`] (a worker's `--drain-secs`).
pub fn set_grace(d: Duration) {
    grace_ms().store(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// What to print after an interruption.
pub fn message() -> String {
    let id = current().lock().ok().and_then(|c| c.clone());
    match id {
        Some(id) => format!(
            "interrupted: session {id} stopped; continue it with `weft resume{} {id}`",
            crate::store::db_flag()
        ),
        None => "interrupted before a session started".to_owned(),
    }
}
