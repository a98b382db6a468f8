//! Ctrl-C and SIGTERM: the command line turns them into triggers of the host's
//! [`weft_host::Shutdown`]. A run then starts no new model or tool call, and the calls in
//! flight get a short grace to finish and be recorded; weft says which session stopped and the
//! command that continues it, and exits 130. A second signal stops at once.

use weft_host::Shutdown;

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

/// Triggers `shutdown` at every signal, for as long as the process runs (a worker and the
/// server drain on the first and stop at once on the second).
pub fn forward(shutdown: Shutdown) {
    tokio::spawn(async move {
        loop {
            signal().await;
            shutdown.trigger();
        }
    });
}

/// What to print after an interruption.
pub fn message(shutdown: &Shutdown) -> String {
    match shutdown.session() {
        Some(id) => format!(
            "interrupted: session {id} stopped; continue it with `weft resume{} {id}`",
            crate::store::db_flag()
        ),
        None => "interrupted before a session started".to_owned(),
    }
}
