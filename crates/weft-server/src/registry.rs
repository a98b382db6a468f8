//! The runs this server knows, in memory: each run's record (who started it, on which thread,
//! from which event on, how it stands, and where: queued, driven here, followed through the
//! store, handed over), which thread each drives, the wakers of threads' streams, and the live
//! text the model generates on each thread. A run's events live in its session's log; a run
//! found there rather than started here is built from its marker ([`weft_host::markers`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value, json};
use weft_host::markers::{Logged, Standing};
use weft_host::sessions::fmt_time;
use weft_store::{SessionLog, SessionRecord};

use crate::openapi;

/// A run as LangGraph clients read it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RunInfo {
    run_id: String,
    thread_id: String,
    assistant_id: String,
    created_at: String,
    updated_at: String,
    pub(crate) status: RunStatus,
    #[schemars(schema_with = "openapi::any")]
    metadata: Value,
    multitask_strategy: String,
    kwargs: Map<String, Value>,
}

/// A run's status, as LangGraph names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RunStatus {
    Pending,
    Running,
    Success,
    Error,
    Interrupted,
}

impl RunStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Success => "success",
            Self::Error => "error",
            Self::Interrupted => "interrupted",
        }
    }
    pub(crate) fn is_final(self) -> bool {
        !matches!(self, Self::Pending | Self::Running)
    }

    /// The status of a run that stands as `s` in its session's log. A cancelled run is
    /// `interrupted`, as LangGraph's server reports a run cancelled by request; a failed one is
    /// `error`; one that waits for an answer is `interrupted`.
    pub(crate) fn of(s: Standing) -> Self {
        match s {
            Standing::Completed => Self::Success,
            Standing::Cancelled | Standing::Waiting => Self::Interrupted,
            Standing::Failed => Self::Error,
            Standing::Running => Self::Running,
        }
    }
}

/// A run's status as the session's state `st` says it ([`RunStatus::of`]).
pub(crate) fn ended_as(st: &weft_core::State) -> RunStatus {
    RunStatus::of(Standing::of(st))
}

/// Run `rid` (the last run when `None`) of thread `rec` as the thread's log tells it: where it
/// began, and how it stands ([`weft_host::markers::find`]).
pub(crate) fn from_log(
    rec: &SessionRecord,
    log: &[weft_core::Envelope],
    rid: Option<&str>,
) -> Option<Run> {
    weft_host::markers::find(log, rid).map(|l| Run::logged(rec, l))
}

/// A run: who started it, on which thread, from which event on, and how it stands.
pub(crate) struct Run {
    pub run_id: String,
    pub thread_id: String,
    pub assistant_id: String,
    pub user: String,
    pub created_at: i64,
    /// The session's last event before the run: the run's events come after it (set again
    /// when a queued run starts).
    start_seq: std::sync::atomic::AtomicU64,
    pub metadata: Value,
    pub multitask_strategy: String,
    /// The trace context the request that created the run carried (`traceparent`): the run's
    /// spans are its children. Stored with the run's marker.
    pub traceparent: Option<String>,
    /// The status, and the session's last event when the run ended.
    pub status: tokio::sync::watch::Sender<(RunStatus, u64)>,
    /// A queued run was cancelled before it began.
    pub cancelled: std::sync::atomic::AtomicBool,
    /// Where the run stands in this process: queued, driven here, followed through the store,
    /// or handed over ([`Place`]).
    place: Mutex<Place>,
    /// A task follows its status through the store.
    pub followed: std::sync::atomic::AtomicBool,
}

/// Where a run stands in this process; it moves as the run does, each move one method of
/// [`Run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Queued behind another run, and stored so (in the run queue, `queue.rs`) until it begins or ends.
    Queued,
    /// Driven by this process (or about to be).
    Here,
    /// Found in the thread's log rather than started here, or begun by another process:
    /// another process (a replica, a worker, a server before a restart) may drive it, and its
    /// status is followed through the store (`remote.rs`).
    Elsewhere,
    /// Stopped at a safe point because this server stops: the next process goes on with it.
    /// The API then says `pending` (as LangGraph's server says of a run it will pick up again),
    /// so that a client whose stream closed asks again rather than taking the run as ended.
    HandedOver,
}

impl Run {
    /// A run of this server started now by `user` on thread `thread` of `agent`, after the
    /// thread's event `after`: pending, queued behind another run when `queued`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        run_id: String,
        (thread, agent, user): (&str, &str, &str),
        after: u64,
        metadata: Value,
        multitask_strategy: String,
        traceparent: Option<String>,
        queued: bool,
    ) -> Self {
        Self {
            run_id,
            thread_id: thread.to_owned(),
            assistant_id: agent.to_owned(),
            user: user.to_owned(),
            created_at: weft_runtime::now_ms(),
            start_seq: after.into(),
            metadata,
            multitask_strategy,
            traceparent,
            status: tokio::sync::watch::channel((RunStatus::Pending, after)).0,
            cancelled: false.into(),
            place: Mutex::new(if queued { Place::Queued } else { Place::Here }),
            followed: false.into(),
        }
    }

    /// A run found in the log of thread `rec` ([`weft_host::markers`]): followed through the
    /// store, standing as the log says.
    pub(crate) fn logged(rec: &SessionRecord, l: Logged) -> Self {
        Self {
            run_id: l.run_id,
            thread_id: rec.id.clone(),
            assistant_id: l.agent,
            user: rec.user_id.clone().unwrap_or_default(),
            created_at: l.ts,
            start_seq: l.after.into(),
            metadata: match l.metadata {
                Value::Null => json!({}),
                v => v,
            },
            multitask_strategy: "reject".into(),
            traceparent: l.traceparent,
            status: tokio::sync::watch::channel((RunStatus::of(l.status), l.seq)).0,
            cancelled: false.into(),
            place: Mutex::new(Place::Elsewhere),
            followed: false.into(),
        }
    }

    /// Queued run `q` as a run of this server (`elsewhere`: followed through the store, as a
    /// run another process holds): pending, beginning after the thread's events as they are
    /// when it starts.
    pub(crate) fn from_queue(q: &weft_store::QueuedRun, elsewhere: bool) -> Self {
        let body = q.body.as_object();
        let field = |k: &str| body.and_then(|b| b.get(k));
        Self {
            run_id: q.run_id.clone(),
            thread_id: q.thread_id.clone(),
            assistant_id: field("assistant_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            user: q.user_id.clone(),
            created_at: q.created_at,
            start_seq: 0.into(),
            metadata: field("metadata")
                .filter(|m| !m.is_null())
                .cloned()
                .unwrap_or_else(|| json!({})),
            multitask_strategy: "enqueue".into(),
            traceparent: field("traceparent")
                .and_then(Value::as_str)
                .map(str::to_owned),
            status: tokio::sync::watch::channel((RunStatus::Pending, 0)).0,
            cancelled: false.into(),
            place: Mutex::new(if elsewhere {
                Place::Elsewhere
            } else {
                Place::Here
            }),
            followed: false.into(),
        }
    }

    pub(crate) fn start_seq(&self) -> u64 {
        self.start_seq.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Where the run stands in this process.
    pub(crate) fn place(&self) -> Place {
        self.place.lock().map_or(Place::Here, |p| *p)
    }

    fn move_to(&self, place: Place) {
        if let Ok(mut p) = self.place.lock() {
            *p = place;
        }
    }

    /// Found in the thread's log (or the queue) rather than driven here: followed through the
    /// store.
    pub(crate) fn followed_from_store(&self) -> bool {
        self.place() == Place::Elsewhere
    }

    /// Followed through the store from now on: a queued run another process began, or a run
    /// this process could not go on with.
    pub(crate) fn began_elsewhere(&self) {
        self.move_to(Place::Elsewhere);
    }

    /// Driven by this process from now on: a run it took over.
    pub(crate) fn driven_here(&self) {
        self.move_to(Place::Here);
    }

    /// Queued here (and stored so) from now on.
    pub(crate) fn queue(&self) {
        self.move_to(Place::Queued);
    }

    /// No longer queued (it began here, or ended before it began): whether it was, so that its
    /// stored record is deleted once.
    pub(crate) fn dequeue(&self) -> bool {
        self.place.lock().is_ok_and(|mut p| {
            *p == Place::Queued && {
                *p = Place::Here;
                true
            }
        })
    }

    /// Stopped at a safe point because this server stops ([`Place::HandedOver`]).
    pub(crate) fn hand_over(&self) {
        self.move_to(Place::HandedOver);
    }

    /// The run begins after the thread's event `seq` (a queued run, once it starts).
    pub(crate) fn begins_after(&self, seq: u64) {
        self.start_seq
            .store(seq, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn json(&self) -> RunInfo {
        let (status, _) = *self.status.borrow();
        let status = if self.place() == Place::HandedOver {
            RunStatus::Pending
        } else {
            status
        };
        RunInfo {
            run_id: self.run_id.clone(),
            thread_id: self.thread_id.clone(),
            assistant_id: self.assistant_id.clone(),
            created_at: fmt_time(self.created_at),
            updated_at: fmt_time(weft_runtime::now_ms()),
            status,
            metadata: self.metadata.clone(),
            multitask_strategy: self.multitask_strategy.clone(),
            kwargs: Map::new(),
        }
    }

    /// Waits until the run has ended; its final status and last event.
    pub(crate) async fn finished(&self) -> (RunStatus, u64) {
        let mut rx = self.status.subscribe();
        match rx.wait_for(|(s, _)| s.is_final()).await {
            Ok(v) => *v,
            Err(_) => *self.status.borrow(),
        }
    }
}

/// A piece of the model's text, and where it stands: it was generated after the session's event
/// `after`, at byte `offset` of the text generated since that event. A stream gives each piece
/// that position as its id, so a reconnection goes on from the next byte.
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub after: u64,
    pub offset: usize,
    pub text: String,
}

/// A thread's pieces of text as they come, and the text generated since its last stored event.
struct TextFeed {
    tx: tokio::sync::broadcast::Sender<Piece>,
    after: u64,
    so_far: String,
}

impl Default for TextFeed {
    fn default() -> Self {
        Self {
            tx: tokio::sync::broadcast::channel(1024).0,
            after: 0,
            so_far: String::new(),
        }
    }
}

/// The runs of this process, and which thread each drives.
#[derive(Default)]
pub(crate) struct Runs {
    runs: Mutex<HashMap<String, Arc<Run>>>,
    /// Thread → the run driving it.
    active: Mutex<HashMap<String, String>>,
    /// Thread → woken after every event stored for it, and when its run ends.
    wakers: Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
    /// Thread → the text the model is generating, piece by piece (never stored: live only).
    texts: Mutex<HashMap<String, TextFeed>>,
    /// Thread → the events its runs stored lately through this process (see `tail`).
    pub(crate) tails: crate::tail::Tails,
    tasks: tokio::sync::Mutex<tokio::task::JoinSet<()>>,
}

impl Runs {
    /// The run this process drives on `thread`, if any.
    pub(crate) fn active_run(&self, thread: &str) -> Option<String> {
        self.active.lock().ok()?.get(thread).cloned()
    }

    pub(crate) fn active_on(&self, thread: &str) -> bool {
        self.active
            .lock()
            .map(|a| a.contains_key(thread))
            .unwrap_or(false)
    }

    /// The runs kept that `keep` says yes to.
    pub(crate) fn matching(&self, keep: impl Fn(&Run) -> bool) -> Vec<Arc<Run>> {
        self.runs
            .lock()
            .map(|r| r.values().filter(|r| keep(r)).cloned().collect())
            .unwrap_or_default()
    }

    /// Whether a run with id `id` is kept.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.runs.lock().is_ok_and(|r| r.contains_key(id))
    }

    /// `run` drives its thread from now on.
    pub(crate) fn activate(&self, run: &Run) {
        if let Ok(mut a) = self.active.lock() {
            a.insert(run.thread_id.clone(), run.run_id.clone());
        }
    }

    /// Runs `task` (a run's or a claim's) among this process's tasks, which [`Self::wait_all`]
    /// waits for when the server stops.
    pub(crate) async fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.lock().await.spawn(task);
    }

    /// The runs driven for `user` now.
    pub(crate) fn active_for(&self, user: &str) -> usize {
        let runs = self.runs.lock();
        let active = self.active.lock();
        match (runs, active) {
            (Ok(r), Ok(a)) => a
                .values()
                .filter(|id| r.get(*id).is_some_and(|run| run.user == user))
                .count(),
            _ => 0,
        }
    }

    /// Keeps `run`, or the one with its id kept already.
    pub(crate) fn insert(&self, run: Arc<Run>) -> Arc<Run> {
        match self.runs.lock() {
            Ok(mut runs) => runs.entry(run.run_id.clone()).or_insert(run).clone(),
            Err(_) => run,
        }
    }

    /// Runs being driven, and runs waiting for their thread.
    pub(crate) fn counts(&self) -> (i64, i64) {
        let active = self.active.lock().map(|a| a.len()).unwrap_or(0);
        let pending = self
            .runs
            .lock()
            .map(|r| {
                r.values()
                    .filter(|run| run.status.borrow().0 == RunStatus::Pending)
                    .count()
            })
            .unwrap_or(0);
        (
            i64::try_from(active).unwrap_or(i64::MAX),
            i64::try_from(pending).unwrap_or(i64::MAX),
        )
    }

    pub(crate) fn get(&self, thread: &str, run: &str) -> Option<Arc<Run>> {
        self.runs
            .lock()
            .ok()?
            .get(run)
            .filter(|r| r.thread_id == thread)
            .cloned()
    }

    /// The pieces of text a model generates on `thread`, as they come, and the text generated
    /// since the thread's last stored event as one piece (empty when there is none), taken
    /// together so that no piece falls between them.
    pub(crate) fn texts(&self, thread: &str) -> (tokio::sync::broadcast::Receiver<Piece>, Piece) {
        match self.texts.lock() {
            Ok(mut t) => {
                let feed = t.entry(thread.to_owned()).or_default();
                let so_far = Piece {
                    after: feed.after,
                    offset: 0,
                    text: feed.so_far.clone(),
                };
                (feed.tx.subscribe(), so_far)
            }
            Err(_) => (
                tokio::sync::broadcast::channel(1).1,
                Piece {
                    after: 0,
                    offset: 0,
                    text: String::new(),
                },
            ),
        }
    }

    /// Notes an event of `thread`: a piece of text is sent to its streams; a stored event
    /// (`seq` > 0) begins the text after it.
    pub(crate) fn text_observed(&self, thread: &str, e: &weft_core::Envelope) {
        let Ok(mut t) = self.texts.lock() else {
            return;
        };
        let feed = t.entry(thread.to_owned()).or_default();
        match &e.event {
            weft_core::Event::TextDelta { text } => {
                let piece = Piece {
                    after: feed.after,
                    offset: feed.so_far.len(),
                    text: text.clone(),
                };
                feed.so_far.push_str(text);
                let _ = feed.tx.send(piece);
            }
            _ if e.seq > 0 => {
                feed.after = feed.after.max(e.seq);
                feed.so_far.clear();
            }
            _ => {}
        }
    }

    /// The text `thread`'s model generates next comes after event `seq` (a run begins there).
    pub(crate) fn text_after(&self, thread: &str, seq: u64) {
        if let Ok(mut t) = self.texts.lock() {
            let feed = t.entry(thread.to_owned()).or_default();
            if feed.after != seq {
                feed.after = seq;
                feed.so_far.clear();
            }
        }
    }

    /// `run` does not drive its thread (any more).
    pub(crate) fn let_go(&self, run: &Run) {
        if let Ok(mut a) = self.active.lock()
            && a.get(&run.thread_id) == Some(&run.run_id)
        {
            a.remove(&run.thread_id);
        }
    }

    /// Forgets run `id` (it was never answered).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.remove(id);
        }
    }

    /// Forgets what this process keeps of a deleted thread: its runs, its waker, its text.
    pub(crate) fn forget_thread(&self, thread: &str) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.retain(|_, r| r.thread_id != thread);
        }
        if let Ok(mut w) = self.wakers.lock() {
            w.remove(thread);
        }
        if let Ok(mut t) = self.texts.lock() {
            t.remove(thread);
        }
        self.tails.forget(thread);
    }

    pub(crate) fn waker(&self, thread: &str) -> Arc<tokio::sync::Notify> {
        match self.wakers.lock() {
            Ok(mut w) => w.entry(thread.to_owned()).or_default().clone(),
            Err(_) => Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Waits for the runs still going, at most `grace` plus a little (they stop at their next
    /// safe point once `interrupt::begin` was called).
    pub(crate) async fn wait_all(&self, grace: Duration) {
        let mut tasks = self.tasks.lock().await;
        let _ = tokio::time::timeout(grace + Duration::from_secs(2), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.abort_all();
    }
}

/// The thread made for a threadless run, deleted once the run has ended and whoever holds
/// this (the request's answer, its stream) has let it go, unless `keep`. A run that waits for
/// a person, or stopped with its server, keeps its thread (it can still be answered or
/// continued).
pub(crate) struct Temporary {
    app: crate::Shared,
    run: Arc<Run>,
}

impl Temporary {
    /// The thread of `run`, made for it.
    pub(crate) fn new(app: &crate::Shared, run: Arc<Run>) -> Self {
        Self {
            app: app.clone(),
            run,
        }
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let (app, run) = (self.app.clone(), self.run.clone());
        tokio::spawn(async move {
            run.finished().await;
            if app.host.shutdown.is_requested() {
                return;
            }
            let tid = &run.thread_id;
            let ended = matches!(
                app.store.get(tid).await,
                Ok(r) if r.status.is_terminal()
            );
            if ended && !app.runs.active_on(tid) {
                if let Err(e) = app.store.delete(tid).await {
                    tracing::warn!(thread = %tid, "cannot delete a threadless run's thread: {e}");
                }
                app.runs.forget_thread(tid);
            }
        });
    }
}
