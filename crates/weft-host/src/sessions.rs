//! Sessions as a whole: a fork of one, the agent file a session records (written with
//! [`record_agent_file`] by every front end that starts one, and by sub-agents; read with
//! [`agent_file_of`]), and the time format of listings.
//!
//! A fork ([`fork`]) is shared by `weft sessions fork`, `POST /sessions/{id}/fork` and
//! `POST /threads/{id}/copy` (a fork at the last event). Its first event names its parent, and
//! it copies no snapshot: its first load folds its log.

use serde_json::{Value, json};
use weft_core::{SessionStatus, State};
use weft_runtime::now_ms;
use weft_store::{NewSession, Store};

use crate::HostError;

/// The agent file of a session's metadata: one writer and one reader (in `weft_runtime`, whose
/// sub-agents record theirs too).
pub use weft_runtime::{agent_file_of, record_agent_file};

/// A time as RFC 3339 in UTC (`2026-11-23T22:05:40Z`), in tables and JSON alike.
pub fn fmt_time(ms: i64) -> String {
    let secs = ms / 1000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since the epoch (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Forks session `id` at event `at` into a new session of the same user and agent, written at
/// once with its log (`weft_core::recovery::fork_log`: the events up to `at`, calls in flight
/// then recorded as interrupted). The original is untouched. With `run`, a fork that is running
/// ends with a `RunStarted` marker of that id, so that `weft serve` continues it as that run.
/// With `budget`, the fork gets a budget of its own (a whole one, or limits over the budget in
/// force at `at`: the session's last, else its agent file's), recorded as its last event before
/// the marker; what was spent is kept.
/// Returns the new id and the state the fork folds to.
pub async fn fork<S: Store>(
    store: &S,
    id: &str,
    at: u64,
    run: Option<String>,
    budget: Option<weft_core::budget::BudgetChange>,
) -> Result<(String, State), HostError> {
    let (rec, events) = store.load(id).await?;
    if at == 0 || at > rec.last_seq {
        return Err(HostError::Invalid(format!(
            "--at {at}: session {id} has events 1 to {}",
            rec.last_seq
        )));
    }
    let new_id = weft_runtime::new_session_id();
    let now = now_ms();
    let mut meta = rec.metadata.clone();
    if let Value::Object(m) = &mut meta {
        m.insert("forked_from".into(), json!({"session": id, "at": at}));
    }
    let (mut log, mut state) = weft_core::recovery::fork_log(events, at, &new_id, id, now);
    if let Some(change) = budget {
        let base = state
            .spending
            .budget
            .clone()
            .or_else(|| agent_budget(&rec.metadata));
        let given = change
            .over(base.as_ref())
            .map_err(|e| HostError::Invalid(format!("budget: {e}")))?;
        let event = weft_core::Event::BudgetSet { budget: given };
        state.apply(&event);
        log.push(weft_core::Envelope {
            seq: state.seq,
            ts: now,
            v: weft_core::EVENT_VERSION,
            epoch: 0,
            event,
        });
    }
    if let Some(run_id) = run
        && state.status == SessionStatus::Running
    {
        let marker = weft_core::Event::RunStarted {
            run_id,
            after: state.seq,
            traceparent: None,
            metadata: serde_json::Value::Null,
        };
        state.apply(&marker);
        log.push(weft_core::Envelope {
            seq: state.seq,
            ts: now,
            v: weft_core::EVENT_VERSION,
            epoch: 0,
            event: marker,
        });
    }
    let agent = if rec.agent.is_empty() {
        state.agent.clone()
    } else {
        rec.agent.clone()
    };
    // The new session and its log in one write.
    store
        .create_with(
            NewSession {
                id: new_id.clone(),
                user_id: rec.user_id.clone(),
                agent,
                reference_id: rec.reference_id.clone(),
                metadata: meta,
                parent_id: Some(id.to_owned()),
            },
            &log,
            state.status,
            now,
        )
        .await?;
    Ok((new_id, state))
}

/// The `budget:` of the agent file a session records, when it can be read.
fn agent_budget(metadata: &Value) -> Option<weft_core::budget::Budget> {
    let path = agent_file_of(metadata)?;
    let text = std::fs::File::open(&path)
        .and_then(weft_core::limits::read_text)
        .ok()?;
    weft_core::agent::AgentSpec::parse(&path.display().to_string(), &text)
        .ok()?
        .budget
}
