//! The telemetry of a process that drives sessions: one span exporter and one set of meters for
//! the whole process ([`Telemetry`], from the standard `OTEL_*` variables), and the live export
//! of each session it drives ([`Live`]): its spans and metrics (`weft-telemetry`), derived from
//! its events as they are committed. The runtime hands the committed events over (an observer
//! of the session's own events); the store is read only for what was not handed over: the log
//! before this process, and a gap (events another path of this process committed). What
//! another process commits is exported by that process, up to what the collector acknowledged:
//! each session keeps an export mark in the store (`SessionLog::exported_through`), moved
//! forward as the collector acknowledges its spans (`Marks`), and the process that drives it
//! next sends the spans closed after the mark (a process killed before its export, or whose
//! collector was away, leaves no hole in the trace).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use weft_runtime::Observer;
use weft_store::Store;
use weft_telemetry::derive::Redact;
use weft_telemetry::{Deriver, Exporter, Meters, Options, Point, Recorder, export};

/// How long the live export waits after a commit for the next ones before it derives their
/// spans (one pass for a burst of commits).
const GATHER: Duration = Duration::from_millis(100);

/// How often a process that drives sessions samples the depth of the work queue.
const QUEUE_EVERY: Duration = Duration::from_secs(5);

/// Where metric points go besides OTLP (the server's `/metrics`).
pub type PointSink = Arc<dyn Fn(&[Point]) + Send + Sync>;

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
        None => recorded_file(store, id).await,
    };
    let provider = match file {
        Some(f) => provider(&f).await,
        None => None,
    };
    options_with(provider, redact)
}

/// The agent file session `id` records.
async fn recorded_file<S: Store>(store: &S, id: &str) -> Option<PathBuf> {
    store
        .get(id)
        .await
        .ok()
        .and_then(|rec| crate::sessions::agent_file_of(&rec.metadata))
}

/// The derivation's options from the environment, with the model's `provider`.
fn options_with(provider: Option<String>, redact: Option<Redact>) -> Options {
    Options {
        capture_content: export::capture_content(),
        redact,
        provider,
        latest: export::latest_conventions(),
        ..Options::default()
    }
}

/// Which model provider a session's spans name (its events do not name it).
#[derive(Clone, Debug)]
pub enum Provider {
    /// The one of the agent file the session runs with, already read (`None`: it names no
    /// model).
    Of(Option<String>),
    /// The one of the agent file the session records, read when its export starts.
    Recorded,
}

impl Provider {
    /// The provider of agent file `spec`'s model.
    pub fn of(spec: &weft_core::agent::AgentSpec) -> Self {
        Self::Of(weft_telemetry::provider_of(spec.model.as_ref()))
    }
}

/// The model provider of an agent file (events do not name it). Reading an agent file checks
/// it against its schema, which costs more than the rest of a short session's telemetry: the
/// provider is kept per file, and read again when the file changes (its size or time).
async fn provider(path: &Path) -> Option<String> {
    type Seen = HashMap<PathBuf, (Option<std::time::SystemTime>, u64, Option<String>)>;
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let meta = tokio::fs::metadata(path).await.ok()?;
    let stamp = (meta.modified().ok(), meta.len());
    let seen = SEEN.get_or_init(Mutex::default);
    if let Ok(s) = seen.lock()
        && let Some((at, len, provider)) = s.get(path)
        && (*at, *len) == stamp
    {
        return provider.clone();
    }
    let text = tokio::fs::read_to_string(&path).await.ok()?;
    let provider = weft_core::agent::AgentSpec::parse(&path.display().to_string(), &text)
        .ok()
        .and_then(|spec| weft_telemetry::provider_of(spec.model.as_ref()));
    if let Ok(mut s) = seen.lock() {
        s.insert(path.to_owned(), (stamp.0, stamp.1, provider.clone()));
    }
    provider
}

#[derive(Default)]
struct Inner {
    spans: Option<Exporter>,
    meters: Option<Meters>,
    sinks: Mutex<Vec<PointSink>>,
    /// Where the marks the collector acknowledged are written (set by the first session
    /// followed, with its store).
    marks: OnceLock<Arc<Marks>>,
    /// How far this process queued each session's spans, until the store holds its mark: a
    /// session driven again by this process is not sent again what is still on its way.
    queued: Arc<Mutex<HashMap<String, u64>>>,
}

/// The export marks the collector acknowledged, written to the store by a task of their own:
/// what arrived since the last write, in one write.
struct Marks {
    pending: Mutex<HashMap<String, u64>>,
    queued: Arc<Mutex<HashMap<String, u64>>>,
    wake: Notify,
    stop: AtomicBool,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Marks {
    fn start<S: Store + 'static>(
        store: Arc<S>,
        queued: Arc<Mutex<HashMap<String, u64>>>,
    ) -> Arc<Self> {
        let marks = Arc::new(Self {
            pending: Mutex::new(HashMap::new()),
            queued,
            wake: Notify::new(),
            stop: AtomicBool::new(false),
            task: Mutex::new(None),
        });
        let m = marks.clone();
        let task = tokio::spawn(async move {
            loop {
                m.wake.notified().await;
                let batch: Vec<(String, u64)> = match m.pending.lock() {
                    Ok(mut p) => p.drain().collect(),
                    Err(_) => return,
                };
                if !batch.is_empty() {
                    match store.set_exported_through(&batch).await {
                        Ok(()) => {
                            if let Ok(mut q) = m.queued.lock() {
                                for (id, seq) in &batch {
                                    if q.get(id).is_some_and(|q| q <= seq) {
                                        q.remove(id);
                                    }
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "telemetry: the export marks were not written; the spans after them are sent again by the next process that drives their sessions");
                        }
                    }
                }
                if m.stop.load(Ordering::Acquire) && m.pending.lock().is_ok_and(|p| p.is_empty()) {
                    return;
                }
            }
        });
        if let Ok(mut t) = marks.task.lock() {
            *t = Some(task);
        }
        marks
    }

    fn acknowledged(&self, acked: Vec<(String, u64)>) {
        if let Ok(mut p) = self.pending.lock() {
            for (id, seq) in acked {
                let m = p.entry(id).or_default();
                *m = (*m).max(seq);
            }
        }
        self.wake.notify_one();
    }

    /// Writes what is pending and stops, waiting at most `grace`.
    async fn finish(&self, grace: Duration) {
        self.stop.store(true, Ordering::Release);
        self.wake.notify_one();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let abort = task.abort_handle();
            if tokio::time::timeout(grace, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// The telemetry of this process: where the spans and metrics of the sessions it drives go.
/// Off (the default) unless an OTLP endpoint is configured or a sink is added. Cheap to clone
/// (clones share the exporters and sinks).
#[derive(Clone, Default)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.inner;
        f.debug_struct("Telemetry")
            .field("spans", &i.spans.as_ref().map(Exporter::url))
            .field("meters", &i.meters.as_ref().map(Meters::url))
            .field("sinks", &i.sinks.lock().map_or(0, |s| s.len()))
            .finish()
    }
}

impl Telemetry {
    /// The exporters the standard variables configure (`OTEL_EXPORTER_OTLP_ENDPOINT`, ...), and
    /// `sinks` for the metrics. A setting weft cannot follow turns that export off, said on
    /// stderr: the runs go on (the user's tracing of other services may need the setting).
    /// Must be called inside a Tokio runtime.
    pub fn from_env() -> Self {
        let spans = Exporter::from_env(None).unwrap_or_else(|e| {
            eprintln!("telemetry: spans not exported: {e}");
            None
        });
        let meters = Meters::from_env().unwrap_or_else(|e| {
            eprintln!("telemetry: metrics not exported: {e}");
            None
        });
        Self {
            inner: Arc::new(Inner {
                spans,
                meters,
                sinks: Mutex::new(Vec::new()),
                marks: OnceLock::new(),
                queued: Arc::default(),
            }),
        }
    }

    /// Sends the metrics to `sink` too (every clone of this handle).
    pub fn add_sink(&self, sink: PointSink) {
        if let Ok(mut s) = self.inner.sinks.lock() {
            s.push(sink);
        }
    }

    /// Whether anything is exported or recorded (sessions are followed only then).
    pub fn on(&self) -> bool {
        self.inner.spans.is_some()
            || self.inner.meters.is_some()
            || self.inner.sinks.lock().is_ok_and(|s| !s.is_empty())
    }

    /// Whether spans go anywhere (the trace ids then go into the logs).
    pub fn traces(&self) -> bool {
        self.inner.spans.is_some()
    }

    /// What the span exporter did so far (zero when there is none).
    pub fn counts(&self) -> weft_telemetry::Counts {
        self.inner
            .spans
            .as_ref()
            .map(Exporter::counts)
            .unwrap_or_default()
    }

    /// Queues session `id`'s spans closed by its events up to `through`, with its mark.
    fn send(&self, id: &str, through: u64, spans: Vec<weft_telemetry::Span>) {
        if let Some(ex) = &self.inner.spans
            && !spans.is_empty()
        {
            ex.send_of(id, through, spans);
            if let Ok(mut q) = self.inner.queued.lock() {
                let m = q.entry(id.to_owned()).or_default();
                *m = (*m).max(through);
            }
        }
    }

    /// How far session `id`'s spans went to the collector: its mark in `store`, or further
    /// when this process queued more of them (and lost none).
    async fn exported_through<S: Store>(&self, store: &S, id: &str) -> u64 {
        let stored = store.exported_through(id).await.unwrap_or_else(|e| {
            tracing::warn!(session = id, error = %e, "telemetry: the export mark could not be read; the spans before this process are not sent again");
            u64::MAX
        });
        let spoiled = self.inner.spans.as_ref().is_some_and(|ex| ex.lost_some(id));
        let queued = match self.inner.queued.lock() {
            Ok(q) if !spoiled => q.get(id).copied().unwrap_or(0),
            _ => 0,
        };
        stored.max(queued)
    }

    /// Keeps the marks the collector acknowledges in `store` (the first store given stays: a
    /// process drives the sessions of one store).
    fn keep_marks<S: Store + 'static>(&self, store: &Arc<S>) {
        let Some(ex) = &self.inner.spans else {
            return;
        };
        if self.inner.marks.get().is_some() {
            return;
        }
        let marks = self
            .inner
            .marks
            .get_or_init(|| Marks::start(store.clone(), self.inner.queued.clone()));
        let m = marks.clone();
        ex.on_ack(Arc::new(move |acked| m.acknowledged(acked)));
    }

    fn record(&self, points: &[Point]) {
        if points.is_empty() {
            return;
        }
        if let Some(m) = &self.inner.meters {
            m.record(points);
        }
        if let Ok(sinks) = self.inner.sinks.lock() {
            for s in sinks.iter() {
                s(points);
            }
        }
    }

    /// Samples the depth of `store`'s work queue (`weft.queue.depth`: sessions waiting for a
    /// worker) now and every few seconds while the process runs, when metrics go anywhere;
    /// `None` otherwise. A failed count is skipped (the next sample tries again).
    pub fn sample_queue<S: Store + 'static>(
        &self,
        store: Arc<S>,
        clock: weft_runtime::SharedClock,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let metrics =
            self.inner.meters.is_some() || self.inner.sinks.lock().is_ok_and(|s| !s.is_empty());
        if !metrics {
            return None;
        }
        let this = self.clone();
        Some(tokio::spawn(async move {
            let mut every = tokio::time::interval(QUEUE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                match store.waiting(clock.now_ms()).await {
                    Ok(n) => this.record(&[weft_telemetry::metrics::queue_depth(n)]),
                    Err(e) => tracing::debug!(error = %e, "the queue's depth was not sampled"),
                }
            }
        }))
    }

    /// Sends what is queued and stops, spans and metrics together, waiting at most
    /// `WEFT_OTLP_EXIT_TIMEOUT` (1 s) for a collector that does not answer; says on stderr what
    /// could not be sent, in every case (refused, down, or not answering). `hint`: a session
    /// whose spans `weft sessions trace` sends again.
    pub async fn finish(&self, hint: Option<&str>) {
        let i = &self.inner;
        let spans = async {
            let Some(ex) = &i.spans else {
                return;
            };
            let exit = ex.exit_timeout();
            let started = tokio::time::Instant::now();
            let (c, err) = ex.finish(exit).await;
            if let Some(m) = i.marks.get() {
                m.finish(exit.saturating_sub(started.elapsed())).await;
            }
            if c.dropped > 0 || c.failed > 0 {
                let again = match hint {
                    Some(id) => format!("`weft sessions trace {id}` exports them again"),
                    None => "`weft sessions trace ID` exports a session's spans again".to_owned(),
                };
                eprintln!(
                    "telemetry: {} spans exported to {}, {} dropped (queue full), {} lost{}; {again}",
                    c.exported,
                    ex.endpoint(),
                    c.dropped,
                    c.failed,
                    err.map(|e| format!(" ({e})")).unwrap_or_default(),
                );
            }
        };
        let metrics = async {
            if let Some(m) = &i.meters
                && let Some(e) = m.finish().await
            {
                eprintln!(
                    "telemetry: metrics not all exported to {}: {e}",
                    m.endpoint()
                );
            }
        };
        tokio::join!(spans, metrics);
    }
}

/// What the observer follows as events are committed: the first piece of text of each model
/// call (pieces are never stored), and the turn the logs name.
#[derive(Default)]
struct Chunks {
    /// A `traceparent` recorded with the run, for the turn it starts.
    run_trace: Option<[u8; 16]>,
    /// The event that started the current turn.
    turn: u64,
    /// The ids of the turn just started, named in the logs from the next event on (its run's
    /// marker may follow it in the same write and move it to the caller's trace).
    pending: Option<([u8; 16], [u8; 8])>,
    /// The last stored event seen: its sequence number and time.
    last: (u64, i64),
    /// A first piece was seen after `last` already.
    seen: bool,
    /// (event the call followed, seconds to its first piece), for the export task.
    found: Vec<(u64, f64)>,
    /// The committed events handed over by the observer and not derived yet, in order.
    handed: Vec<weft_core::Envelope>,
}

/// The events after `last` to derive: those handed over when they follow on from `last`;
/// otherwise (a gap: events committed by another path of this process) the store's, which
/// holds every committed one.
async fn events_after<S: Store>(
    store: &S,
    id: &str,
    last: u64,
    handed: Vec<weft_core::Envelope>,
) -> Vec<weft_core::Envelope> {
    let handed: Vec<_> = handed.into_iter().filter(|e| e.seq > last).collect();
    let follows = handed
        .iter()
        .enumerate()
        .all(|(i, e)| e.seq == last + 1 + i as u64);
    if follows {
        return handed;
    }
    match store.events_after(id, last).await {
        Ok(all) => all,
        Err(e) => {
            tracing::warn!(session = id, error = %e, "telemetry: the log could not be read; `weft sessions trace` exports it again");
            handed
        }
    }
}

/// The live export of one session while this process drives it.
pub struct Live {
    id: String,
    wake: Arc<Notify>,
    stop: Arc<Notify>,
    chunks: Arc<Mutex<Chunks>>,
    log_span: tracing::Span,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// A live export dropped without [`Live::finish`] (its run's future dropped where it stood)
/// still derives and sends what the log holds, then ends.
impl Drop for Live {
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").finish_non_exhaustive()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Names a turn's trace and span in the logs' context.
fn name_turn(log_span: &tracing::Span, trace: [u8; 16], span: [u8; 8]) {
    log_span.record("trace_id", tracing::field::display(hex(&trace)));
    log_span.record("span_id", tracing::field::display(hex(&span)));
}

impl Live {
    /// Starts following session `id` when `telemetry` is on; `None` otherwise. Its spans name
    /// `provider`'s model; `new`: the run creates the session (nothing is in its log before).
    /// Points of
    /// events already in the log were sent by the process that wrote them, and so were their
    /// spans up to the session's export mark; the spans closed after it are sent now.
    pub async fn start<S: Store + 'static>(
        telemetry: &Telemetry,
        store: Arc<S>,
        id: &str,
        (provider, new): (Provider, bool),
        redact: Option<Redact>,
    ) -> Option<Self> {
        if !telemetry.on() {
            return None;
        }
        let telemetry = telemetry.clone();
        let id = id.to_owned();
        let session = id.clone();
        // What the log holds before this process drives it: nothing for a session the run
        // creates (`new`), nor for one that does not exist yet.
        let before = if new {
            Vec::new()
        } else {
            store.events_after(&id, 0).await.unwrap_or_default()
        };
        let provider = match provider {
            Provider::Of(p) => p,
            Provider::Recorded if before.is_empty() => None,
            Provider::Recorded => match recorded_file(store.as_ref(), &id).await {
                Some(f) => self::provider(&f).await,
                None => None,
            },
        };
        let opts = options_with(provider, redact);
        let latest = opts.latest;
        let mut deriver = Deriver::new(&id, opts);
        let mut recorder = Recorder::new(latest);
        let mut last = 0;
        // The spans the collector never acknowledged (closed after the session's mark: a
        // process killed before its export, or whose collector was away) are sent now; the
        // metrics were counted by the process that committed the events.
        let mut unsent = Vec::new();
        if telemetry.traces() {
            telemetry.keep_marks(&store);
        }
        let mark = if before.is_empty() || !telemetry.traces() {
            0
        } else {
            telemetry.exported_through(store.as_ref(), &id).await
        };
        for e in &before {
            let spans = deriver.push(e);
            recorder.push(e, &spans);
            if e.seq > mark {
                unsent.extend(spans);
            }
            last = e.seq;
        }
        deriver.skip_through(last);
        recorder.skip_through(last);
        telemetry.send(&id, last, unsent);
        // The logs of the work on this session carry its trace and the current turn's span
        // (recorded once the turn is known: here for a turn a process before this one began).
        let log_span = if telemetry.traces() {
            tracing::info_span!(
                "session",
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty
            )
        } else {
            tracing::Span::none()
        };
        if let Some((t, s)) = deriver.turn() {
            name_turn(&log_span, t, s);
        }
        let wake = Arc::new(Notify::new());
        let stop = Arc::new(Notify::new());
        let chunks = Arc::new(Mutex::new(Chunks {
            last: (last, 0),
            ..Chunks::default()
        }));
        let (w, s, c) = (wake.clone(), stop.clone(), chunks.clone());
        let task = tokio::spawn(async move {
            let mut stopping = false;
            loop {
                let handed = match c.lock() {
                    Ok(mut c) => {
                        for (after, secs) in c.found.drain(..) {
                            recorder.first_chunk(after, secs);
                        }
                        std::mem::take(&mut c.handed)
                    }
                    Err(_) => Vec::new(),
                };
                let events = events_after(store.as_ref(), &id, last, handed).await;
                let mut spans = Vec::new();
                let mut points = Vec::new();
                for e in &events {
                    let closed = deriver.push(e);
                    points.extend(recorder.push(e, &closed));
                    spans.extend(closed);
                    last = e.seq;
                }
                telemetry.send(&id, last, spans);
                telemetry.record(&points);
                if stopping {
                    return;
                }
                tokio::select! {
                    () = w.notified() => {
                        // The commits of the next moments are derived together: one pass for
                        // a burst of commits, not one each.
                        tokio::select! {
                            () = s.notified() => stopping = true,
                            () = tokio::time::sleep(GATHER) => {}
                        }
                    }
                    () = s.notified() => stopping = true,
                }
            }
        });
        Some(Self {
            id: session,
            wake,
            stop,
            chunks,
            log_span,
            task: Some(task),
        })
    }

    /// An observer of the session's own events (give it to [`weft_runtime::Runtime::builder`] as its telemetry:
    /// it must not see a sub-agent's) that hands the committed events over to the export and
    /// wakes it, times the first piece of text of each model call, and names the turn in the
    /// logs' context as it starts (its ids are derived as the spans' are).
    pub fn observer(&self) -> Observer {
        let w = self.wake.clone();
        let chunks = self.chunks.clone();
        let log_span = self.log_span.clone();
        let id = self.id.clone();
        Arc::new(move |e| {
            if e.seq == 0 {
                if let weft_core::Event::TextDelta { .. } = e.event
                    && let Ok(mut c) = chunks.lock()
                    && !c.seen
                {
                    c.seen = true;
                    let (after, at) = c.last;
                    if at > 0 {
                        c.found.push((after, (e.ts - at).max(0) as f64 / 1000.0));
                    }
                }
                return;
            }
            if let Ok(mut c) = chunks.lock() {
                c.handed.push(e.clone());
                c.last = (e.seq, e.ts);
                c.seen = false;
                match &e.event {
                    // As the spans' derivation does: the marker precedes the turn it starts,
                    // or follows it in a new session's first write.
                    weft_core::Event::RunStarted {
                        traceparent: Some(tp),
                        after,
                        ..
                    } => {
                        let trace = export::parse_traceparent(tp).map(|(t, _)| t);
                        let this_turn = c.turn > *after;
                        match (trace, c.pending.as_mut()) {
                            (Some(t), Some(p)) if this_turn => p.0 = t,
                            _ => c.run_trace = trace,
                        }
                    }
                    weft_core::Event::TurnStarted { .. } | weft_core::Event::UserReplied { .. }
                        if !log_span.is_disabled() =>
                    {
                        c.turn = e.seq;
                        let trace = c
                            .run_trace
                            .take()
                            .unwrap_or_else(|| weft_telemetry::trace_id(&id));
                        c.pending = Some((trace, weft_telemetry::span_id(&id, e.seq, "turn")));
                    }
                    _ => {
                        if let Some((t, s)) = c.pending.take() {
                            name_turn(&log_span, t, s);
                        }
                    }
                }
            }
            w.notify_one();
        })
    }

    /// The span the work on this session runs in, so that its logs carry the trace and span
    /// ids (a disabled span when no spans are exported).
    pub fn log_span(&self) -> tracing::Span {
        self.log_span.clone()
    }

    /// Exports what the log holds now; the process's exporters send it (see
    /// [`Telemetry::finish`]).
    pub async fn finish(mut self) {
        self.stop.notify_one();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The provider kept for an agent file is read again once the file changes.
    #[tokio::test]
    async fn an_agent_files_provider_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        std::fs::write(&path, "name: a\nmode: react\nmodel: openai:gpt-4o\n").unwrap();
        assert_eq!(provider(&path).await.as_deref(), Some("openai"));
        assert_eq!(provider(&path).await.as_deref(), Some("openai"));
        std::fs::write(
            &path,
            "name: a\nmode: react\nmodel: anthropic:claude-sonnet-4-0\n",
        )
        .unwrap();
        assert_eq!(provider(&path).await.as_deref(), Some("anthropic"));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(provider(&path).await, None);
    }
}
