//! The live export of a session's OpenTelemetry spans (`weft-telemetry`) while this process
//! drives it, read from the store as events are committed, and the derivation's options for a
//! session (its agent file's provider, content capture).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use weft_runtime::Observer;
use weft_store::Store;
use weft_telemetry::derive::Redact;
use weft_telemetry::{Deriver, Exporter, Options, export};

/// The derivation's options from the environment and the session's agent file (`agent_file`,
/// or the one the session records).
pub async fn options<S: Store>(
    store: &S,
    id: &str,
    agent_file: Option<PathBuf>,
    redact: Option<Redact>,
) -> Options {
    let file = match agent_file {
        Some(f) => Some(f),
        None => store
            .get(id)
            .await
            .ok()
            .and_then(|rec| crate::sessions::agent_file_of(&rec.metadata)),
    };
    let provider = match file {
        Some(f) => provider(&f).await,
        None => None,
    };
    Options {
        capture_content: export::capture_content(),
        redact,
        provider,
        ..Options::default()
    }
}

/// The model provider of an agent file (events do not name it).
async fn provider(path: &Path) -> Option<String> {
    let text = tokio::fs::read_to_string(&path).await.ok()?;
    let spec = weft_core::agent::AgentSpec::parse(&path.display().to_string(), &text).ok()?;
    weft_telemetry::provider_of(spec.model.as_ref())
}

/// The live export of one session while this process drives it.
#[derive(Debug)]
pub struct Live {
    id: String,
    wake: Arc<Notify>,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<Option<Exporter>>,
}

impl Live {
    /// Starts following session `id` when an endpoint is configured; `None` otherwise. Spans
    /// closed by events already in the log were exported by the process that wrote them.
    pub async fn start<S: Store + 'static>(
        store: Arc<S>,
        id: &str,
        agent_file: Option<PathBuf>,
        redact: Option<Redact>,
    ) -> Option<Self> {
        // A setting weft cannot follow (the user's tracing of other services may need it) turns
        // the export off; the run goes on.
        let exporter = match Exporter::from_env(None) {
            Ok(Some(e)) => e,
            Ok(None) => return None,
            Err(e) => {
                eprintln!("telemetry: not exported: {e}");
                return None;
            }
        };
        let id = id.to_owned();
        let mut deriver = Deriver::new(&id, options(store.as_ref(), &id, agent_file, redact).await);
        let mut last = 0;
        // A session that does not exist yet has nothing before this run.
        if let Ok(events) = store.events_after(&id, 0).await {
            for e in &events {
                deriver.push(e);
                last = e.seq;
            }
        }
        deriver.skip_through(last);
        let wake = Arc::new(Notify::new());
        let stop = Arc::new(Notify::new());
        let (w, s) = (wake.clone(), stop.clone());
        let session = id.clone();
        let task = tokio::spawn(async move {
            let mut stopping = false;
            loop {
                if let Ok(events) = store.events_after(&id, last).await {
                    for e in &events {
                        exporter.send(deriver.push(e));
                        last = e.seq;
                    }
                }
                if stopping {
                    return Some(exporter);
                }
                tokio::select! {
                    () = w.notified() => {}
                    () = s.notified() => stopping = true,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        });
        Some(Self {
            id: session,
            wake,
            stop,
            task,
        })
    }

    /// An observer that wakes the export when events are committed.
    pub fn observer(&self) -> Observer {
        let w = self.wake.clone();
        Arc::new(move |_| w.notify_one())
    }

    /// Exports what the log holds now and what is queued, waiting at most a few seconds; says
    /// on stderr what could not be exported.
    pub async fn finish(self) {
        self.stop.notify_one();
        let Ok(Some(exporter)) = self.task.await else {
            return;
        };
        let url = exporter.url().to_owned();
        let (c, err) = exporter.finish(Duration::from_secs(5)).await;
        if c.dropped > 0 || c.failed > 0 {
            eprintln!(
                "telemetry: {} spans exported to {url}, {} dropped (queue full), {} lost{}; `weft sessions trace {}` exports them again",
                c.exported,
                c.dropped,
                c.failed,
                err.map(|e| format!(" ({e})")).unwrap_or_default(),
                self.id
            );
        }
    }
}
