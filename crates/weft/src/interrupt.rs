//! Ctrl-C and SIGTERM during a run. The run stops where it is, as a process that dies does: every
//! batch of events it committed is whole, a call in flight is dropped (a command tool's process
//! is killed), and `weft resume` recovers the session exactly as after a crash (an idempotent
//! call is run again, any other is recorded with an unknown outcome, never repeated). What weft
//! adds is the last word: which session stopped and the command that continues it. Exit 130.

use std::sync::{Arc, Mutex, OnceLock};

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
