//! Eval runs read back from the session store, for a reader that has the store but not the
//! run's results file (`weft serve`'s `/evals`, the playground's Evals view). A case's session
//! carries the run's id, its case and its dataset in its metadata, and after its run one
//! `evaluation_result` event per verdict; its [`CaseResult`] is rebuilt from that and from what
//! its log says it did ([`Observed`]), so the store and `results.jsonl` tell the same story.

use std::collections::BTreeMap;

use weft_core::{Envelope, Event, SessionStatus, State};
use weft_store::SessionRecord;

use crate::expect::Score;
use crate::observed::Observed;
use crate::results::CaseResult;

/// The session metadata key that holds the eval run's id.
pub const RUN_KEY: &str = "weft_eval";
/// The session metadata key that holds the case's id.
pub const CASE_KEY: &str = "weft_eval_case";
/// The session metadata key that holds the dataset file the case was read from.
pub const DATASET_KEY: &str = "weft_eval_dataset";
/// The session metadata key that holds the case's place in its dataset (from 0).
pub const ORDER_KEY: &str = "weft_eval_order";

/// The eval run and case a session was run for, if it was one of a run's sessions.
pub fn case_of(rec: &SessionRecord) -> Option<(&str, &str)> {
    let run = rec.metadata.get(RUN_KEY)?.as_str()?;
    let case = rec.metadata.get(CASE_KEY)?.as_str()?;
    Some((run, case))
}

/// The result of a case's session `rec`, rebuilt from its state and log; `None` when the
/// session is not an eval run's. A session whose verdicts are not recorded (still running, or
/// its `weft eval` stopped before scoring it) fails, with the reason as its error.
pub fn result_of(rec: &SessionRecord, state: &State, events: &[Envelope]) -> Option<CaseResult> {
    let (run, case) = case_of(rec)?;
    // Sessions are named `RUN-CASE-rK`.
    let repeat = rec
        .id
        .strip_prefix(&format!("{run}-{case}-r"))
        .and_then(|k| k.parse().ok())
        .unwrap_or(1);
    let scores: Vec<Score> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::EvaluationResult {
                name,
                score,
                label,
                explanation,
                run: of,
            } if of == run => Some(Score {
                scorer: name.clone(),
                pass: label == "pass",
                score: *score,
                detail: explanation.clone().unwrap_or_default(),
                reasoning: None,
            }),
            _ => None,
        })
        .collect();
    // What the session did, without the verdicts added after it ran (they would stretch its
    // latency by the time scoring took).
    let ran: Vec<Envelope> = events
        .iter()
        .filter(|e| !matches!(e.event, Event::EvaluationResult { .. }))
        .cloned()
        .collect();
    let obs = Observed::of(state, &ran);
    let mut r = CaseResult {
        run: run.to_owned(),
        case: case.to_owned(),
        repeat,
        session: rec.id.clone(),
        pass: false,
        score: 0.0,
        scores,
        status: Some(obs.status),
        answer: obs.answer,
        calls: obs.calls,
        used: obs.used,
        judge_tokens: 0,
        error: None,
    };
    if r.scores.is_empty() {
        r.error = Some(if state.status() == SessionStatus::Running {
            "not scored yet: the session is still running".to_owned()
        } else {
            "not scored: its `weft eval` stopped before scoring it".to_owned()
        });
    }
    r.rescore();
    Some(r)
}

/// An eval run as its sessions in the store tell it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRun {
    /// The run's id (`weft eval --name`).
    pub id: String,
    /// The agents its sessions ran (one, unless sessions of two runs share a name).
    pub agents: Vec<String>,
    /// The dataset file, when its sessions say (runs of older versions do not).
    pub dataset: Option<String>,
    /// When its first session was created (Unix ms).
    pub created_at: i64,
    /// When its last session last changed (Unix ms).
    pub updated_at: i64,
    /// Its sessions still running.
    pub running: u32,
    /// Repeats per case (the highest repeat seen).
    pub repeat: u32,
    /// Each session's result: the cases in the dataset's order, each case's repeats in order
    /// (sessions that do not say their case's place last).
    pub results: Vec<CaseResult>,
}

/// Groups the results of eval sessions into their runs, the newest run first.
pub fn runs(sessions: Vec<(SessionRecord, CaseResult)>) -> Vec<StoredRun> {
    let mut by_run: BTreeMap<String, Vec<(SessionRecord, CaseResult)>> = BTreeMap::new();
    for (rec, r) in sessions {
        by_run.entry(r.run.clone()).or_default().push((rec, r));
    }
    let mut out: Vec<StoredRun> = by_run
        .into_iter()
        .map(|(id, mut ss)| {
            let place = |rec: &SessionRecord| {
                rec.metadata
                    .get(ORDER_KEY)
                    .and_then(|o| o.as_u64())
                    .unwrap_or(u64::MAX)
            };
            ss.sort_by(|(a, ra), (b, rb)| {
                (place(a), ra.repeat, a.created_at, &a.id).cmp(&(
                    place(b),
                    rb.repeat,
                    b.created_at,
                    &b.id,
                ))
            });
            let mut agents: Vec<String> = ss.iter().map(|(rec, _)| rec.agent.clone()).collect();
            agents.sort();
            agents.dedup();
            StoredRun {
                id,
                agents,
                dataset: ss.iter().find_map(|(rec, _)| {
                    rec.metadata
                        .get(DATASET_KEY)
                        .and_then(|d| d.as_str())
                        .map(str::to_owned)
                }),
                created_at: ss.iter().map(|(rec, _)| rec.created_at).min().unwrap_or(0),
                updated_at: ss.iter().map(|(rec, _)| rec.updated_at).max().unwrap_or(0),
                running: ss
                    .iter()
                    .filter(|(rec, _)| rec.status == SessionStatus::Running)
                    .count() as u32,
                repeat: ss.iter().map(|(_, r)| r.repeat).max().unwrap_or(1),
                results: ss.into_iter().map(|(_, r)| r).collect(),
            }
        })
        .collect();
    out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_core::EVENT_VERSION;

    use super::*;

    fn record(id: &str, run: &str, case: &str, order: u64, created_at: i64) -> SessionRecord {
        SessionRecord {
            id: id.to_owned(),
            user_id: Some("alice".into()),
            agent: "desk".into(),
            reference_id: None,
            metadata: json!({RUN_KEY: run, CASE_KEY: case, ORDER_KEY: order, DATASET_KEY: "/d/cases.yaml"}),
            parent_id: None,
            status: SessionStatus::Completed,
            created_at,
            updated_at: created_at + 5,
            last_seq: 1,
        }
    }

    fn verdict(seq: u64, run: &str, name: &str, pass: bool, why: Option<&str>) -> Envelope {
        Envelope {
            seq,
            ts: 1_000 + seq as i64 * 1_000,
            v: EVENT_VERSION,
            epoch: 1,
            event: Event::EvaluationResult {
                name: name.into(),
                score: if pass { 1.0 } else { 0.0 },
                label: if pass { "pass" } else { "fail" }.into(),
                explanation: why.map(str::to_owned),
                run: run.into(),
            },
        }
    }

    /// A session that started and is `running`, or whose run ended (`done`).
    fn session(done: bool) -> State {
        let mut events = vec![Event::SessionStarted {
            session_id: "s".into(),
            agent: "a".into(),
            input: serde_json::Value::Null,
            mode: None,
            parent_id: None,
        }];
        if done {
            events.push(Event::RunFinished {
                status: weft_core::RunStatus::Completed,
                error: None,
                answer: None,
            });
        }
        State::fold(&events)
    }

    fn done() -> State {
        session(true)
    }

    #[test]
    fn a_sessions_verdicts_of_its_run_make_its_result() {
        let rec = record("r1-c1-r2", "r1", "c1", 0, 10);
        let events = vec![
            verdict(1, "r1", "status", true, None),
            verdict(
                2,
                "r1",
                "trajectory",
                false,
                Some("expected call 1 was not made"),
            ),
            // A verdict of another run (a session recorded twice under two names) is not this
            // run's.
            verdict(3, "r0", "answer", false, Some("other run")),
        ];
        let r = result_of(&rec, &done(), &events).unwrap();
        assert_eq!((r.run.as_str(), r.case.as_str(), r.repeat), ("r1", "c1", 2));
        assert!(!r.pass);
        assert_eq!(r.score, 0.5);
        let names: Vec<&str> = r.scores.iter().map(|s| s.scorer.as_str()).collect();
        assert_eq!(names, ["status", "trajectory"]);
        assert_eq!(r.scores[1].detail, "expected call 1 was not made");
        assert_eq!(r.error, None);
        // The verdicts, written after the run, are not part of its latency.
        assert_eq!(r.used.latency_ms, 0);
    }

    #[test]
    fn a_session_without_verdicts_fails_and_says_why() {
        let rec = record("r1-c1-r1", "r1", "c1", 0, 10);
        let r = result_of(&rec, &done(), &[]).unwrap();
        assert!(!r.pass);
        assert!(r.error.unwrap().contains("stopped before scoring"));
        let running = session(false);
        assert_eq!(running.status(), SessionStatus::Running);
        let r = result_of(&rec, &running, &[]).unwrap();
        assert!(r.error.unwrap().contains("still running"));
        let mut plain = rec.clone();
        plain.metadata = json!({});
        assert_eq!(result_of(&plain, &done(), &[]), None);
    }

    #[test]
    fn sessions_group_into_runs_newest_first_with_cases_in_the_datasets_order() {
        let pass = |rec: &SessionRecord| {
            result_of(
                rec,
                &done(),
                &[verdict(
                    1,
                    rec.metadata[RUN_KEY].as_str().unwrap(),
                    "status",
                    true,
                    None,
                )],
            )
            .unwrap()
        };
        let recs = [
            record("old-b-r1", "old", "b", 1, 1),
            record("old-a-r1", "old", "a", 0, 2),
            record("new-b-r2", "new", "b", 1, 20),
            record("new-b-r1", "new", "b", 1, 21),
            record("new-a-r1", "new", "a", 0, 22),
        ];
        let runs = runs(recs.iter().map(|r| (r.clone(), pass(r))).collect());
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["new", "old"]);
        let order: Vec<(&str, u32)> = runs[0]
            .results
            .iter()
            .map(|r| (r.case.as_str(), r.repeat))
            .collect();
        assert_eq!(order, [("a", 1), ("b", 1), ("b", 2)]);
        assert_eq!(runs[0].repeat, 2);
        assert_eq!((runs[0].created_at, runs[0].updated_at), (20, 27));
        assert_eq!(runs[0].agents, ["desk"]);
        assert_eq!(runs[0].dataset.as_deref(), Some("/d/cases.yaml"));
        assert_eq!(runs[1].results.len(), 2);
    }
}
