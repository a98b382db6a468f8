//! A run: one turn of a session (its first task, a new task once it ended, or the answer to its
//! wait) driven under the session's lease, from the write that stores its marker to how it
//! ended. What a server does with a run goes through here, in two calls: opening it ([`open`]:
//! which work the request means, whether its user's quota allows it, whether it begins now or
//! waits its turn, and the session's lease), then driving it to its end, a paused session held
//! as a wait and the lease given back ([`drive`]). A run that waited its turn takes the lease
//! with [`take`] and decides again ([`decide`]) once the run before it ended; a run whose
//! process stopped is continued with [`continue_run`]. [`Outcome`] tells a run that ended from
//! one this process could not go on with. The front end keeps only its own records of runs (ids,
//! streams, HTTP); each step here is the same whichever front end asks.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use weft_core::budget::{Budget, CallMax};
use weft_core::event::InputRequest;
use weft_core::{Event, SessionStatus, State};
use weft_runtime::{Agent, Runtime, SessionInfo};
use weft_store::{SessionRecord, Store, StoreError};

use crate::drive::{AgentFile, Ended, Watchers};
use crate::hosted::{Begin, Hosted, Setup};
use crate::ownership::{Asked, Held};
use crate::{Host, HostError};

/// What a run does to its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// A new session: its first task.
    Start(String),
    /// A new task for a session that ended.
    Turn(String),
    /// The answer to the session's wait.
    Answer(String),
}

/// What a run asked with `task` (a new message) or `resume` (an answer) does to session `id`,
/// given its state when the run starts; [`HostError::Refused`] says what to send instead.
pub fn decide(
    id: &str,
    st: &State,
    task: Option<String>,
    resume: Option<String>,
) -> Result<Work, HostError> {
    let needs_task = || {
        HostError::Refused(
            "the run needs a task: input {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}"
                .into(),
        )
    };
    if st.seq() == 0 {
        return Ok(Work::Start(task.ok_or_else(needs_task)?));
    }
    if st.status() == SessionStatus::WaitingForUser || resume.is_some() {
        if st.status() != SessionStatus::WaitingForUser {
            return Err(HostError::Refused(format!(
                "thread {id} is not waiting for an answer; send a new message instead of command.resume"
            )));
        }
        return Ok(Work::Answer(resume.or(task).ok_or_else(|| {
            HostError::Refused(
                "the thread waits for an answer: send command {\"resume\": \"...\"}".into(),
            )
        })?));
    }
    Ok(Work::Turn(task.ok_or_else(needs_task)?))
}

/// A run as a front end was asked for it: by `user`, of `agent`, on `session` (its record and
/// its state), with a new message (`task`) or an answer (`resume`) and the run's `input`.
pub struct Ask<'a> {
    /// Whose run it is.
    pub user: &'a str,
    /// Its agent file.
    pub agent: &'a AgentFile,
    /// The session's record and state when the run was asked for.
    pub session: (&'a SessionRecord, &'a State),
    /// A new message.
    pub task: Option<String>,
    /// An answer to the session's wait.
    pub resume: Option<String>,
    /// The run's input.
    pub input: &'a Value,
    /// When another run is going on the session: wait for it to end (LangGraph's
    /// `multitask_strategy` `enqueue`) rather than be refused.
    pub wait_turn: bool,
}

/// How a run [`open`] admitted begins.
pub enum Opened<S: Store> {
    /// Now: the session's lease, taken, and what the run does.
    Now {
        /// The lease, and the last event written meanwhile when it was taken after a wait.
        taken: Taken<S>,
        /// What the run does.
        work: Work,
    },
    /// Once the run going on the session ended; it takes the lease ([`take`]) and decides what
    /// it does ([`decide`]) then.
    Queued,
}

/// Opens the run `ask` describes. It is held to its user's quota, which refuses it
/// ([`HostError::OverQuota`]) when the user has as many runs going on other sessions (on every
/// process of `store`) as the quota's `runs_at_once`, when a limit of the quota is reached for
/// the day or the month, or when what is left of one cannot cover the run's first model call at
/// its most (the check before that call would refuse it, so the run would fail at once). A
/// session another run is going on (`runs_here` says whether one runs in this process; the
/// session's status whether one runs anywhere) refuses it ([`HostError::Busy`]) unless it waits
/// its turn ([`Opened::Queued`]). What the request means must be a run the session can take
/// ([`decide`], else [`HostError::Refused`]). Then the session's lease is taken ([`take`]).
pub async fn open<S: Store>(
    host: &Host,
    store: Arc<S>,
    ask: Ask<'_>,
    runs_here: impl Fn() -> bool,
) -> Result<Opened<S>, HostError> {
    let (rec, st) = ask.session;
    let wait_turn = ask.wait_turn;
    let work = admit(host, store.as_ref(), ask).await?;
    let busy = runs_here() || (st.seq() > 0 && st.status() == SessionStatus::Running);
    if busy {
        return if wait_turn {
            work.map(|_| Opened::Queued)
        } else {
            Err(HostError::Busy(format!(
                "thread {} is busy with a run",
                rec.id
            )))
        };
    }
    let work = work?;
    let taken = take(host, store, &rec.id, runs_here).await?;
    Ok(Opened::Now { taken, work })
}

/// Holds the run `ask` describes to its user's quota (see [`open`]); what it does, as
/// [`decide`] says.
async fn admit<S: Store + ?Sized>(
    host: &Host,
    store: &S,
    ask: Ask<'_>,
) -> Result<Result<Work, HostError>, HostError> {
    let (rec, st) = ask.session;
    let work = decide(&rec.id, st, ask.task, ask.resume);
    let Some(q) = host.quota_of(Some(ask.user)) else {
        return Ok(work);
    };
    if let Some(most) = q.quota.runs_at_once {
        let going = runs_going(store, ask.user, Some(&rec.id)).await?;
        if going >= most {
            return Err(HostError::OverQuota {
                why: format!(
                    "quota reached: user {} has {going} runs going and runs_at_once is {most}; wait for one to end",
                    ask.user
                ),
                retry_after_secs: 1,
            });
        }
    }
    let first = work
        .as_ref()
        .ok()
        .and_then(|w| first_call_max(host, ask.user, ask.agent, ask.session, w, ask.input));
    let now = host.clock.now_ms();
    if let Some(r) = weft_runtime::quota::admission(store, &q, now, first.as_ref()).await? {
        return Err(HostError::OverQuota {
            why: r.describe(ask.user, now),
            retry_after_secs: r.retry_after_secs(now),
        });
    }
    Ok(work)
}

/// `user`'s sessions running now, on every process of `store`: running, with a first event (a
/// session made empty, or made for the run being admitted, has none), other than `but`.
pub async fn runs_going<S: Store + ?Sized>(
    store: &S,
    user: &str,
    but: Option<&str>,
) -> Result<u64, StoreError> {
    let running = store
        .list(&weft_store::ListFilter {
            user_id: Some(user.to_owned()),
            status: Some(SessionStatus::Running),
            limit: None,
        })
        .await?;
    Ok(running
        .iter()
        .filter(|r| r.last_seq > 0 && Some(r.id.as_str()) != but)
        .count() as u64)
}

/// What the first model call of a run of `agent` doing `work` on session `rec` (in state `st`)
/// may cost at most, for the check of `user`'s quota before the run is accepted
/// ([`weft_runtime::quota::first_call_max`]); `None` when the user has no quota (nothing is
/// estimated then) or the run begins with no model call.
fn first_call_max(
    host: &Host,
    user: &str,
    agent: &AgentFile,
    (rec, st): (&SessionRecord, &State),
    work: &Work,
    input: &Value,
) -> Option<CallMax> {
    use weft_runtime::quota::Opening;
    host.quota_of(Some(user))?;
    // An agent that cannot be built fails its run as it would have, with its reason.
    let built = Agent::new(
        &agent.spec,
        agent.tools.clone(),
        agent.model.clone(),
        &rec.metadata,
        input,
    )
    .ok()?;
    let opening = match work {
        Work::Start(task) => Opening::Start {
            id: &rec.id,
            task,
            input,
        },
        Work::Turn(task) => Opening::Turn { task, input },
        Work::Answer(text) => Opening::Answer(text),
    };
    weft_runtime::quota::first_call_max(&built, st, opening)
}

/// How long [`take`] waits for a lease this process holds with no run on the session.
const BRIEF_HOLD: Duration = Duration::from_secs(2);

/// The lease of a run's session, taken.
pub struct Taken<S: Store> {
    /// The lease.
    pub held: Held<S>,
    /// The session's last event when the lease was taken after a wait: what was written
    /// meanwhile comes before the run. `None` when it was taken at once.
    pub after: Option<u64>,
}

/// Takes the lease of session `id` for a new run, as an owner of its own (a second run of this
/// process on the session is refused). A lease this process holds for a moment with no run on
/// the session (`runs_here` says whether one runs here: an update of its state being written, a
/// run letting it go) is waited for, briefly: the run begins once the session is free instead of
/// being refused. Otherwise the error says who holds it ([`HostError::Leased`]) or that the
/// store could not be asked ([`HostError::Store`], an outage: the session may well be free).
pub async fn take<S: Store>(
    host: &Host,
    store: Arc<S>,
    id: &str,
    runs_here: impl Fn() -> bool,
) -> Result<Taken<S>, HostError> {
    let owner = crate::ownership::driver();
    let until = tokio::time::Instant::now() + BRIEF_HOLD;
    let mut waited = false;
    loop {
        match crate::ownership::take_as(host, store.clone(), id, false, &owner).await {
            Ok(held) if !waited => return Ok(Taken { held, after: None }),
            Ok(held) => {
                return match store.get(id).await {
                    Ok(rec) => Ok(Taken {
                        held,
                        after: Some(rec.last_seq),
                    }),
                    Err(e) => {
                        held.release().await;
                        Err(e.into())
                    }
                };
            }
            Err(e) => {
                // Held by this process with no run here, or let go since: try again.
                let brief = tokio::time::Instant::now() < until
                    && !runs_here()
                    && match store.lease(id).await {
                        Ok(Some(l)) => {
                            crate::ownership::mine(&l.owner)
                                || l.expires_at <= weft_runtime::now_ms()
                        }
                        Ok(None) => true,
                        Err(_) => false,
                    };
                if !brief {
                    return Err(e);
                }
                waited = true;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// The run's own record in its session's log, stored in the same write as its first events.
pub struct Marker {
    /// The run's id.
    pub run_id: String,
    /// The session's last event before the run.
    pub after: u64,
    /// The trace the run's spans continue.
    pub traceparent: Option<String>,
    /// What the client attached to the run (`{}` is not recorded).
    pub metadata: Value,
    /// The run's budget, set before its task or answer.
    pub budget: Option<Budget>,
}

impl Marker {
    fn events(self) -> Vec<Event> {
        let mut first = vec![Event::RunStarted {
            run_id: self.run_id,
            after: self.after,
            traceparent: self.traceparent,
            metadata: match self.metadata {
                Value::Object(m) if m.is_empty() => Value::Null,
                m => m,
            },
        }];
        if let Some(budget) = self.budget {
            first.push(Event::BudgetSet { budget });
        }
        first
    }
}

/// A new run to drive.
pub struct Start<'a> {
    /// Its agent file.
    pub agent: &'a AgentFile,
    /// Its session's record when the run was asked for.
    pub rec: &'a SessionRecord,
    /// Whose run it is (its quota, and a new session's user).
    pub user: &'a str,
    /// What it does.
    pub work: Work,
    /// The run's input.
    pub input: Value,
    /// Its marker.
    pub marker: Marker,
}

/// Drives a new run on the session whose lease `held` is, to its end: stores its marker with its
/// first events, then tells `stored` (with why, if they could not be stored), then goes on until
/// the session ends or waits, or another process (or this one's shutdown) asks it to stop; a run
/// paused at a safe point is held as a wait (of kind [`PAUSED`]); then the lease is given back.
/// An agent that cannot be built fails the run before anything is stored (`stored` is not
/// told). A session made empty has no agent name on its record; its first run names it, so that
/// workers (which claim their agents' sessions) can take the run over as well as servers.
/// `watchers` gives who sees the events (asked once for the run, once for a wait).
pub async fn drive<S, F, Fut>(
    host: &Host,
    store: Arc<S>,
    held: Held<S>,
    start: Start<'_>,
    watchers: impl Fn() -> Watchers,
    stored: F,
) -> Outcome
where
    S: Store + 'static,
    F: FnOnce(Result<(), String>) -> Fut,
    Fut: Future<Output = ()>,
{
    let out = drive_run(host, store.clone(), &held, start, watchers(), stored).await;
    let out = hold_if_paused(host, store, &held, out, watchers()).await;
    held.release().await;
    Outcome::from(out)
}

/// [`drive`] up to the run's end, the lease still held.
async fn drive_run<S, F, Fut>(
    host: &Host,
    store: Arc<S>,
    held: &Held<S>,
    start: Start<'_>,
    watchers: Watchers,
    stored: F,
) -> Result<SessionStatus, HostError>
where
    S: Store + 'static,
    F: FnOnce(Result<(), String>) -> Fut,
    Fut: Future<Output = ()>,
{
    let Start {
        agent,
        rec,
        user,
        work,
        input,
        marker,
    } = start;
    let id = held.fence().0;
    let mut metadata = rec.metadata.clone();
    crate::sessions::record_agent_file(&mut metadata, &agent.path);
    let built = Agent::new(
        &agent.spec,
        agent.tools.clone(),
        agent.model.clone(),
        &metadata,
        &input,
    )?;
    let hosted = Hosted::start(
        host,
        store.clone(),
        held,
        Setup {
            new: matches!(work, Work::Start(_)),
            ..agent.setup()
        },
        Some(user),
        watchers,
    )
    .await;
    let rt = hosted.runtime();
    let go = async {
        let begin = match work {
            Work::Start(task) => Begin::New {
                info: SessionInfo {
                    id: Some(id.clone()),
                    user_id: Some(user.to_owned()),
                    metadata,
                    ..SessionInfo::default()
                },
                task,
                input,
            },
            Work::Turn(task) => Begin::Task { task, input },
            Work::Answer(text) => Begin::Answer(text),
        };
        let mut session = match hosted.begin(&built, begin, marker.events()).await {
            Ok(s) => s,
            Err(e) => {
                stored(Err(e.to_string())).await;
                return Err(e.into());
            }
        };
        if rec.agent.is_empty()
            && let Err(e) = store.name_agent(&id, &agent.spec.name).await
        {
            tracing::warn!(thread = %id, "cannot name the thread's agent: {e}");
        }
        stored(Ok(())).await;
        rt.drive_agent(&built, &mut session).await?;
        Ok::<_, HostError>(session.state.status())
    };
    let out = match hosted.run(go).await {
        Ok(r) => r,
        Err(asked) => {
            // A pause is recorded as a wait ([`hold_if_paused`]), not left for `weft resume`
            // as a pause of the command line is.
            let stopped = match asked {
                Asked::Pause => Ok(0),
                asked => hosted.stopped(asked).await,
            };
            match stopped {
                Ok(_) => store.get(&id).await.map(|r| r.status).map_err(Into::into),
                Err(e) => Err(e),
            }
        }
    };
    hosted.end().await;
    out
}

/// Continues the run of session `rec` whose process stopped, as [`crate::drive::drive`] does,
/// and holds it as a wait if it was paused (of kind [`PAUSED`]). `watchers` gives who sees its
/// events (asked once for the run, once for the wait).
pub async fn continue_run<S: Store + 'static>(
    host: &Host,
    store: Arc<S>,
    held: &Held<S>,
    (rec, agent): (&SessionRecord, &AgentFile),
    watchers: impl Fn() -> Watchers,
) -> Result<SessionStatus, HostError> {
    let outcome = crate::drive::drive(host, store.clone(), held, rec, agent, watchers())
        .await
        .map(|ended| match ended {
            Ended::Done(state, _) => state.status(),
            Ended::Stopped(_) => SessionStatus::Running,
        });
    hold_if_paused(host, store, held, outcome, watchers()).await
}

/// The kind of wait a paused session is in.
pub const PAUSED: &str = "paused";

/// A run that stopped at a safe point while its session still runs was paused (`POST
/// /sessions/{id}/pause`), unless this process is stopping. A paused session waits for a person
/// (a wait of kind [`PAUSED`], recorded while the run's lease is still held): no server or
/// worker claims it, and an answer (`continue`) continues it where it stopped.
async fn hold_if_paused<S: Store + 'static>(
    host: &Host,
    store: Arc<S>,
    held: &Held<S>,
    outcome: Result<SessionStatus, HostError>,
    watchers: Watchers,
) -> Result<SessionStatus, HostError> {
    if !matches!(outcome, Ok(SessionStatus::Running)) || host.shutdown.is_requested() {
        return outcome;
    }
    // The wait closes the turn's spans: they are exported as the run's others. Recording it
    // calls no model: no quota to hold it to.
    let hosted = Hosted::start(host, store, held, Setup::bare(), None, watchers).await;
    let committed = record_pause(hosted.runtime(), &held.fence().0).await;
    hosted.end().await;
    committed
}

/// Records that session `id`, still running, waits for a person to go on; its status then.
async fn record_pause<S: Store + 'static>(
    rt: &Runtime<S>,
    id: &str,
) -> Result<SessionStatus, HostError> {
    let mut session = rt.load_session(id).await?;
    if session.state.status() != SessionStatus::Running {
        return Ok(session.state.status());
    }
    session
        .commit(vec![Event::WaitingForUser {
            request: InputRequest {
                kind: PAUSED.into(),
                question:
                    "Paused. Answer anything (e.g. `continue`) to go on from where it stopped."
                        .into(),
                step: None,
                tool: None,
                missing: Vec::new(),
                partial_call: Value::Null,
                plan: None,
                call_id: None,
            },
        }])
        .await?;
    Ok(session.state.status())
}

/// How a run driven here came out, for what its front end tells its clients.
#[derive(Debug)]
pub enum Outcome {
    /// The session completed, failed or waits for a person; or it still runs, stopped at a
    /// safe point for another process to continue (this one stops).
    Ended(SessionStatus),
    /// This process could not go on driving the run, which has not failed: the store stayed
    /// unreachable past the runtime's patience (an error that would pass by itself,
    /// [`StoreError::is_transient`]), or another process took the session over (this one froze
    /// or was cut off past its lease). The session goes on wherever it is driven next; from
    /// here it can only be followed through the store. Any other store error (a broken
    /// constraint, a refused query) is a failure.
    Lost(HostError),
    /// The run failed, or could not begin; why.
    Failed(HostError),
}

impl From<Result<SessionStatus, HostError>> for Outcome {
    fn from(r: Result<SessionStatus, HostError>) -> Self {
        match r {
            Ok(status) => Self::Ended(status),
            Err(e)
                if crate::store_error_in(&e)
                    .is_some_and(|s| s.is_transient() || matches!(s, StoreError::LeaseLost(_))) =>
            {
                Self::Lost(e)
            }
            Err(e) => Self::Failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session whose first turn ended in `status` (a new session's state is `State::new()`).
    fn state(status: SessionStatus) -> State {
        let mut events = vec![
            Event::SessionStarted {
                session_id: "t".into(),
                agent: "a".into(),
                input: Value::Null,
                mode: None,
                parent_id: None,
            },
            Event::TurnStarted {
                task: "hi".into(),
                input: Value::Null,
            },
        ];
        let ended = |status| Event::RunFinished {
            status,
            error: None,
            answer: None,
        };
        match status {
            SessionStatus::Running => {}
            SessionStatus::WaitingForUser => events.push(Event::WaitingForUser {
                request: InputRequest {
                    kind: "question".into(),
                    question: "Go on?".into(),
                    step: None,
                    tool: None,
                    missing: Vec::new(),
                    partial_call: Value::Null,
                    plan: None,
                    call_id: None,
                },
            }),
            SessionStatus::Completed => events.push(ended(weft_core::RunStatus::Completed)),
            SessionStatus::Failed => events.push(ended(weft_core::RunStatus::Failed)),
        }
        let st = State::fold(&events);
        assert_eq!(st.status(), status);
        st
    }

    #[test]
    fn a_run_on_a_new_session_starts_it_and_needs_a_task() {
        let st = State::new();
        assert_eq!(
            decide("t", &st, Some("hi".into()), None).unwrap(),
            Work::Start("hi".into())
        );
        let e = decide("t", &st, None, None).unwrap_err().to_string();
        assert!(e.contains("needs a task"), "{e}");
    }

    #[test]
    fn an_answer_goes_only_to_a_session_that_waits() {
        let waits = state(SessionStatus::WaitingForUser);
        assert_eq!(
            decide("t", &waits, Some("yes".into()), None).unwrap(),
            Work::Answer("yes".into())
        );
        assert_eq!(
            decide("t", &waits, None, Some("ok".into())).unwrap(),
            Work::Answer("ok".into())
        );
        let ended = state(SessionStatus::Completed);
        let e = decide("t", &ended, None, Some("ok".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not waiting for an answer"), "{e}");
        assert_eq!(
            decide("t", &ended, Some("next".into()), None).unwrap(),
            Work::Turn("next".into())
        );
    }

    #[test]
    fn an_outage_or_a_lost_lease_is_not_a_failure() {
        let lost = Outcome::from(Err(HostError::Store(StoreError::LeaseLost("t".into()))));
        assert!(matches!(lost, Outcome::Lost(_)), "{lost:?}");
        let refused = Outcome::from(Err(HostError::Refused("no".into())));
        assert!(matches!(refused, Outcome::Failed(_)), "{refused:?}");
        assert!(matches!(
            Outcome::from(Ok(SessionStatus::Completed)),
            Outcome::Ended(SessionStatus::Completed)
        ));
    }
}
