//! One behavioural suite for every store: memory, SQLite (a temporary file) and PostgreSQL
//! (tests `needs_postgres::*`, which need `WEFT_TEST_POSTGRES_URL`; each gets its own schema).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, json};
use weft_core::{
    EVENT_VERSION, Envelope, Event, Plan, PlanStep, RunStatus, SessionStatus, ToolError,
    ToolOutcome,
};
use weft_store::{Kind, Knowledge, ListFilter, NewEntry, NewSession, Shelf, Store, StoreError};

fn env(seq: u64, event: Event) -> Envelope {
    Envelope {
        epoch: 0,
        seq,
        ts: 1_700_000_000_000 + seq as i64,
        v: EVENT_VERSION,
        event,
    }
}

fn new_session(id: &str, user: Option<&str>) -> NewSession {
    NewSession {
        id: id.into(),
        user_id: user.map(str::to_owned),
        agent: "researcher".into(),
        reference_id: Some(format!("chat-{id}")),
        metadata: json!({"tags": ["a", "b"], "n": 3}),
        parent_id: None,
    }
}

/// A log with one event of every kind.
fn every_kind(from: u64) -> Vec<Envelope> {
    let mut args = Map::new();
    args.insert("q".into(), json!("{{ input.q }}"));
    let plan = Plan {
        steps: vec![PlanStep {
            id: "s1".into(),
            tool: Some("search".into()),
            description: Some("look it up".into()),
            category: None,
            skill: None,
            output_schema: None,
            args,
            output: None,
            depends_on: vec![],
            parallel: None,
            when: None,
            for_each: None,
        }],
    };
    let err = ToolError::new("timeout", "took too long")
        .with_detail(json!({"after_ms": 30000}))
        .retryable(true);
    let events = vec![
        Event::SessionStarted {
            session_id: "x".into(),
            agent: "researcher".into(),
            input: json!({"q": "ünïcödé \"quoted\" \n newline"}),
            mode: None,
            parent_id: None,
        },
        Event::PlanAccepted { plan },
        Event::WaveStarted {
            wave: 1,
            steps: vec!["s1".into()],
        },
        Event::StepStarted {
            step: "s1".into(),
            attempt: 1,
        },
        Event::ToolCallStarted {
            call_id: "c1".into(),
            step: Some("s1".into()),
            item: None,
            tool: "search".into(),
            args: json!({"q": "rust", "seq": 99, "type": "shadowed?"}),
            attempt: 1,
            idempotency_key: "x:s1:1".into(),
            untrusted_from: Vec::new(),
        },
        Event::ToolCallFinished {
            call_id: "c1".into(),
            outcome: ToolOutcome::Error { error: err.clone() },
            duration_ms: 30001,
        },
        Event::StepRetrying {
            step: "s1".into(),
            attempt: 1,
            error: err.clone(),
            delay_ms: 250,
        },
        Event::ToolCallFinished {
            call_id: "c2".into(),
            outcome: ToolOutcome::Ok {
                output: json!({"hits": [1, 2, 3], "big": 12345678901234i64, "f": 1.5}),
            },
            duration_ms: 12,
        },
        Event::StepCompleted {
            step: "s1".into(),
            output: json!({"hits": [1, 2, 3]}),
            summary: Some("3 hits".into()),
        },
        Event::StepFailed {
            step: "s2".into(),
            error: err,
            handled: true,
        },
        Event::StepSkipped {
            step: "s3".into(),
            reason: "condition was false".into(),
        },
        Event::WaveFinished { wave: 1 },
        Event::RunFinished {
            status: RunStatus::Completed,
            error: None,
            answer: Some("done".into()),
        },
    ];
    events
        .into_iter()
        .enumerate()
        .map(|(k, e)| env(from + k as u64, e))
        .collect()
}

fn small_batch(from: u64, n: u64) -> Vec<Envelope> {
    (0..n)
        .map(|k| {
            env(
                from + k,
                Event::WaveFinished {
                    wave: (from + k) as u32,
                },
            )
        })
        .collect()
}

// ---- behaviours ----------------------------------------------------------------------------

async fn round_trip<S: Store>(st: &Arc<S>) {
    let rec = st
        .create(new_session("rt", Some("u1")), 1000)
        .await
        .unwrap();
    assert_eq!(rec.status, SessionStatus::Running);
    assert_eq!(rec.last_seq, 0);
    let log = every_kind(1);
    st.append("rt", 0, &log[..5], SessionStatus::Running, 1001)
        .await
        .unwrap();
    st.append("rt", 5, &log[5..], SessionStatus::Completed, 1002)
        .await
        .unwrap();
    let (rec, back) = st.load("rt").await.unwrap();
    assert_eq!(back, log);
    assert_eq!(rec.last_seq, log.len() as u64);
    assert_eq!(rec.agent, "researcher");
    assert_eq!(rec.user_id.as_deref(), Some("u1"));
    assert_eq!(rec.reference_id.as_deref(), Some("chat-rt"));
    assert_eq!(rec.metadata, json!({"tags": ["a", "b"], "n": 3}));
    assert_eq!(rec.created_at, 1000);
    assert_eq!(st.get("rt").await.unwrap(), rec);
    assert!(matches!(
        st.create(new_session("rt", None), 5).await,
        Err(StoreError::Exists(id)) if id == "rt"
    ));
    assert!(matches!(
        st.load("nope").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(st.get("nope").await, Err(StoreError::NotFound(_))));
    assert!(matches!(
        st.events_after("nope", 0).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        st.append("nope", 0, &small_batch(1, 1), SessionStatus::Running, 1)
            .await,
        Err(StoreError::NotFound(_))
    ));
}

async fn stale_append_conflicts<S: Store>(st: &Arc<S>) {
    st.create(new_session("c", None), 1).await.unwrap();
    st.append("c", 0, &small_batch(1, 3), SessionStatus::Running, 2000)
        .await
        .unwrap();
    let err = st
        .append("c", 1, &small_batch(2, 2), SessionStatus::Failed, 3)
        .await
        .unwrap_err();
    match err {
        StoreError::Conflict {
            session,
            expected,
            actual,
        } => {
            assert_eq!(session, "c");
            assert_eq!(expected, 1);
            assert_eq!(actual, 3);
        }
        other => panic!("expected a conflict, got {other}"),
    }
    let (rec, log) = st.load("c").await.unwrap();
    assert_eq!(log, small_batch(1, 3));
    assert_eq!(rec.last_seq, 3);
    assert_eq!(rec.status, SessionStatus::Running);
    assert_eq!(rec.updated_at, 2000);
}

async fn concurrent_appenders<S: Store>(st: &Arc<S>) {
    for round in 0..5u64 {
        let id = format!("race{round}");
        st.create(new_session(&id, None), 1).await.unwrap();
        st.append(&id, 0, &small_batch(1, 2), SessionStatus::Running, 2)
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for writer in 0..2i64 {
            let st = Arc::clone(st);
            let id = id.clone();
            tasks.push(tokio::spawn(async move {
                let batch: Vec<Envelope> = (3..7)
                    .map(|s| {
                        env(
                            s,
                            Event::StepStarted {
                                step: format!("w{writer}"),
                                attempt: 1,
                            },
                        )
                    })
                    .collect();
                st.append(&id, 2, &batch, SessionStatus::Running, 10 + writer)
                    .await
                    .map(|()| writer)
            }));
        }
        let mut winners = Vec::new();
        let mut conflicts = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(w) => winners.push(w),
                Err(StoreError::Conflict { actual, .. }) => {
                    assert_eq!(actual, 6);
                    conflicts += 1;
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one writer wins");
        assert_eq!(conflicts, 1);
        let (rec, log) = st.load(&id).await.unwrap();
        assert_eq!(rec.last_seq, 6);
        assert_eq!(log.len(), 6);
        let want = format!("w{}", winners[0]);
        for e in &log[2..] {
            assert!(matches!(&e.event, Event::StepStarted { step, .. } if *step == want));
        }
    }
}

async fn batches_are_atomic<S: Store>(st: &Arc<S>) {
    st.create(new_session("atom", None), 1).await.unwrap();
    st.append("atom", 0, &small_batch(1, 2), SessionStatus::Running, 2)
        .await
        .unwrap();
    // Third event numbered 6 instead of 5.
    let mut bad = small_batch(3, 3);
    bad[2].seq = 6;
    let err = st
        .append("atom", 2, &bad, SessionStatus::Completed, 3)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    let (rec, log) = st.load("atom").await.unwrap();
    assert_eq!(log, small_batch(1, 2));
    assert_eq!(rec.last_seq, 2);
    assert_eq!(rec.status, SessionStatus::Running);
    // The store still takes the right batch afterwards.
    st.append("atom", 2, &small_batch(3, 3), SessionStatus::Completed, 4)
        .await
        .unwrap();
    assert_eq!(st.load("atom").await.unwrap().1, small_batch(1, 5));
}

async fn list_filters_and_order<S: Store>(st: &Arc<S>) {
    // (id, user, created, final status, updated), appends seconds after creation
    let rows = [
        ("l1", Some("ann"), 10, SessionStatus::Completed, 50_000),
        ("l2", Some("bob"), 11, SessionStatus::Running, 40_000),
        ("l3", Some("ann"), 12, SessionStatus::Failed, 60_000),
        ("l4", None, 13, SessionStatus::WaitingForUser, 30_000),
        ("l5", Some("ann"), 14, SessionStatus::Completed, 20_000),
    ];
    for (id, user, created, status, updated) in rows {
        st.create(new_session(id, user), created).await.unwrap();
        st.append(id, 0, &small_batch(1, 1), status, updated)
            .await
            .unwrap();
    }
    let ids = |v: Vec<weft_store::SessionRecord>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let all = st.list(&ListFilter::default()).await.unwrap();
    assert_eq!(ids(all), ["l3", "l1", "l2", "l4", "l5"]);
    let ann = st
        .list(&ListFilter {
            user_id: Some("ann".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(ann), ["l3", "l1", "l5"]);
    let done = st
        .list(&ListFilter {
            status: Some(SessionStatus::Completed),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(done), ["l1", "l5"]);
    let ann_done_one = st
        .list(&ListFilter {
            user_id: Some("ann".into()),
            status: Some(SessionStatus::Completed),
            limit: Some(1),
        })
        .await
        .unwrap();
    assert_eq!(ids(ann_done_one), ["l1"]);
    let two = st
        .list(&ListFilter {
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(two), ["l3", "l1"]);
    let nobody = st
        .list(&ListFilter {
            user_id: Some("zed".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(nobody.is_empty());
}

async fn events_after_returns_the_tail<S: Store>(st: &Arc<S>) {
    st.create(new_session("tail", None), 1).await.unwrap();
    let log = every_kind(1);
    st.append("tail", 0, &log, SessionStatus::Running, 2)
        .await
        .unwrap();
    assert_eq!(st.events_after("tail", 0).await.unwrap(), log);
    assert_eq!(st.events_after("tail", 10).await.unwrap(), log[10..]);
    assert!(
        st.events_after("tail", log.len() as u64)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(st.events_after("tail", 1000).await.unwrap().is_empty());
}

async fn prune_deletes_old_sessions<S: Store>(st: &Arc<S>) {
    for (id, updated) in [("p1", 100), ("p2", 200), ("p3", 300)] {
        st.create(new_session(id, None), 50).await.unwrap();
        st.append(id, 0, &small_batch(1, 3), SessionStatus::Completed, updated)
            .await
            .unwrap();
    }
    // An old session that still waits for a person is kept unless asked.
    st.create(new_session("w", None), 50).await.unwrap();
    st.append(
        "w",
        0,
        &small_batch(1, 3),
        SessionStatus::WaitingForUser,
        150,
    )
    .await
    .unwrap();
    assert_eq!(st.prune(100, false).await.unwrap(), 0);
    assert_eq!(st.prune(250, false).await.unwrap(), 2);
    assert_eq!(st.list(&ListFilter::default()).await.unwrap().len(), 2);
    assert_eq!(st.prune(250, true).await.unwrap(), 1);
    let left = st.list(&ListFilter::default()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id, "p3");
    assert!(matches!(st.load("p1").await, Err(StoreError::NotFound(_))));
    // The id is free again, and no old events come back with it.
    st.create(new_session("p1", None), 400).await.unwrap();
    let (rec, log) = st.load("p1").await.unwrap();
    assert!(log.is_empty());
    assert_eq!(rec.last_seq, 0);
    st.append("p1", 0, &small_batch(1, 1), SessionStatus::Running, 401)
        .await
        .unwrap();
}

async fn append_updates_status_and_time<S: Store>(st: &Arc<S>) {
    st.create(new_session("st", None), 7).await.unwrap();
    let r = st.get("st").await.unwrap();
    assert_eq!(
        (r.status, r.created_at, r.updated_at),
        (SessionStatus::Running, 7, 7)
    );
    st.append(
        "st",
        0,
        &small_batch(1, 1),
        SessionStatus::WaitingForUser,
        9,
    )
    .await
    .unwrap();
    let r = st.get("st").await.unwrap();
    assert_eq!(
        (r.status, r.created_at, r.updated_at, r.last_seq),
        (SessionStatus::WaitingForUser, 7, 9, 1)
    );
    // An empty batch still records the status change.
    st.append("st", 1, &[], SessionStatus::Failed, 12)
        .await
        .unwrap();
    let r = st.get("st").await.unwrap();
    assert_eq!(
        (r.status, r.updated_at, r.last_seq),
        (SessionStatus::Failed, 12, 1)
    );
}

/// A session created with its first events has them as its log; creating it again writes
/// nothing.
async fn create_with_starts_the_log<S: Store>(st: &Arc<S>) {
    let rec = st
        .create_with(
            new_session("cw", Some("u")),
            &small_batch(1, 3),
            SessionStatus::WaitingForUser,
            40,
        )
        .await
        .unwrap();
    assert_eq!(
        (rec.last_seq, rec.status, rec.created_at),
        (3, SessionStatus::WaitingForUser, 40)
    );
    let (stored, log) = st.load("cw").await.unwrap();
    assert_eq!(stored, rec);
    assert_eq!(log, small_batch(1, 3));
    let again = st
        .create_with(
            new_session("cw", None),
            &small_batch(1, 1),
            SessionStatus::Running,
            50,
        )
        .await;
    assert!(matches!(again, Err(StoreError::Exists(_))), "{again:?}");
    assert_eq!(st.load("cw").await.unwrap(), (stored, small_batch(1, 3)));
    // Misnumbered first events are refused, and leave no session behind.
    let bad = st
        .create_with(
            new_session("cw2", None),
            &small_batch(2, 1),
            SessionStatus::Running,
            60,
        )
        .await;
    assert!(matches!(bad, Err(StoreError::Corrupt(_))), "{bad:?}");
    assert!(matches!(st.get("cw2").await, Err(StoreError::NotFound(_))));
    st.append("cw", 3, &small_batch(4, 1), SessionStatus::Completed, 70)
        .await
        .unwrap();
    assert_eq!(st.get("cw").await.unwrap().last_seq, 4);
}

/// `create_many` creates each session as `create_with` would and refuses, one by one, an id that
/// is taken (in the store or earlier in the batch) or held by a live lease.
async fn create_many_refuses_one_by_one<S: Store>(st: &Arc<S>) {
    st.create_with(
        new_session("m-old", None),
        &small_batch(1, 1),
        SessionStatus::Running,
        10,
    )
    .await
    .unwrap();
    let owner = weft_store::Owner {
        id: "o".into(),
        host: "h".into(),
        pid: 7,
    };
    st.acquire("m-held", &owner, 20, 60_000, false)
        .await
        .unwrap();
    let log = |id: &str, n: u64, status| weft_store::NewLog {
        session: new_session(id, Some("u")),
        events: small_batch(1, n),
        status,
    };
    let batch = vec![
        log("m1", 3, SessionStatus::Running),
        log("m-old", 1, SessionStatus::Running),
        log("m2", 2, SessionStatus::WaitingForUser),
        log("m1", 1, SessionStatus::Running),
        log("m-held", 1, SessionStatus::Running),
        log("m3", 0, SessionStatus::Running),
    ];
    let answers = st.create_many(&batch, 40).await.unwrap();
    let kinds: Vec<&str> = answers
        .iter()
        .map(|a| match a {
            None => "created",
            Some(StoreError::Exists(_)) => "exists",
            Some(StoreError::Leased { .. }) => "leased",
            Some(_) => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "created", "exists", "created", "exists", "leased", "created"
        ],
        "{answers:?}"
    );
    let (m1, log1) = st.load("m1").await.unwrap();
    assert_eq!(
        (m1.last_seq, m1.status, m1.created_at, m1.user_id.as_deref()),
        (3, SessionStatus::Running, 40, Some("u"))
    );
    assert_eq!(log1, small_batch(1, 3));
    let (m2, log2) = st.load("m2").await.unwrap();
    assert_eq!(
        (m2.status, log2),
        (SessionStatus::WaitingForUser, small_batch(1, 2))
    );
    assert_eq!(st.load("m3").await.unwrap().1, Vec::new());
    assert_eq!(st.load("m-old").await.unwrap().1, small_batch(1, 1));
    // Refused, it has no events (the memory store, which creates and then appends as
    // `create_with` does, leaves the session without them, as after a crash between the two).
    match st.load("m-held").await {
        Err(StoreError::NotFound(_)) => {}
        Ok((rec, log)) => assert!(log.is_empty() && rec.last_seq == 0, "{rec:?} {log:?}"),
        Err(e) => panic!("{e}"),
    }
    // Created sessions are written as any other: they take appends.
    st.append("m1", 3, &small_batch(4, 1), SessionStatus::Completed, 50)
        .await
        .unwrap();
}

/// Appends of many sessions at the same moment (which the PostgreSQL store writes together) are
/// each written or refused on their own: an append whose lease was taken over is refused as
/// lost, one that expects another end of the log as a conflict, and the others are written.
async fn simultaneous_appends_stand_alone<S: Store>(st: &Arc<S>) {
    let owner = |id: &str| weft_store::Owner {
        id: id.into(),
        host: "h".into(),
        pid: 7,
    };
    let ids: Vec<String> = (0..24).map(|k| format!("sim{k}")).collect();
    for id in &ids {
        st.create_with(
            new_session(id, None),
            &small_batch(1, 1),
            SessionStatus::Running,
            10,
        )
        .await
        .unwrap();
        assert_eq!(
            st.acquire(id, &owner("a"), 20, 60_000, false)
                .await
                .unwrap()
                .epoch,
            1
        );
    }
    // sim5 is taken over by another process.
    st.acquire("sim5", &owner("b"), 30, 60_000, true)
        .await
        .unwrap();
    let at_epoch = |from: u64, n: u64| -> Vec<Envelope> {
        small_batch(from, n)
            .into_iter()
            .map(|mut e| {
                e.epoch = 1;
                e
            })
            .collect()
    };
    let appends = ids.iter().enumerate().map(|(k, id)| {
        // sim7's writer thinks its log ends at event 2.
        let (expected, events) = if k == 7 {
            (2, at_epoch(3, 2))
        } else {
            (1, at_epoch(2, 3))
        };
        let st = st.clone();
        async move {
            st.append(id, expected, &events, SessionStatus::Running, 40)
                .await
        }
    });
    let answers = futures::future::join_all(appends).await;
    for (k, (id, answer)) in ids.iter().zip(&answers).enumerate() {
        let log = st.load(id).await.unwrap().1;
        match k {
            5 => {
                assert!(
                    matches!(answer, Err(StoreError::LeaseLost(_))),
                    "{id}: {answer:?}"
                );
                assert_eq!(log.len(), 1, "{id}");
            }
            7 => {
                assert!(
                    matches!(answer, Err(StoreError::Conflict { actual: 1, .. })),
                    "{id}: {answer:?}"
                );
                assert_eq!(log.len(), 1, "{id}");
            }
            _ => {
                assert!(answer.is_ok(), "{id}: {answer:?}");
                assert_eq!(log.len(), 4, "{id}");
                assert_eq!(log[1..], at_epoch(2, 3)[..], "{id}");
            }
        }
    }
}

/// Text with a NUL character (tools and models do return them) is kept as it is, in events,
/// in metadata and in snapshots, by `append` and by `create_with`.
async fn nul_characters_round_trip<S: Store>(st: &Arc<S>) {
    let text = "before\u{0}after";
    let mut s = new_session("nul", None);
    s.metadata = json!({"note": text});
    let first = vec![env(1, Event::UserReplied { text: text.into() })];
    st.create_with(s, &first, SessionStatus::Running, 1)
        .await
        .unwrap();
    let more = vec![env(
        2,
        Event::ToolCallFinished {
            call_id: "c1".into(),
            outcome: ToolOutcome::Ok {
                output: json!({"stdout": text, "list": [text]}),
            },
            duration_ms: 1,
        },
    )];
    st.append("nul", 1, &more, SessionStatus::Running, 2)
        .await
        .unwrap();
    let (rec, log) = st.load("nul").await.unwrap();
    assert_eq!(rec.metadata, json!({"note": text}));
    assert_eq!(log, [first, more].concat());
    let head = json!({"last": text}).to_string();
    let part = json!([{"role": "user", "content": text}]).to_string();
    st.append_with_snapshot(
        "nul",
        2,
        &small_batch(3, 1),
        SessionStatus::Running,
        3,
        &snapshot(3, &head, Some((0, &part))),
    )
    .await
    .unwrap();
    let back = st.latest_snapshot("nul").await.unwrap().unwrap();
    assert_eq!(back.head, head);
    assert_eq!(st.snapshot_parts("nul", 0).await.unwrap(), vec![(0, part)]);
}

/// A snapshot to write: its head and the part it adds.
fn snapshot(seq: u64, head: &str, part: Option<(u64, &str)>) -> weft_core::snapshot::Encoded {
    weft_core::snapshot::Encoded {
        seq,
        version: weft_core::SNAPSHOT_VERSION,
        head: head.to_owned(),
        part: part.map(|(start, text)| weft_core::snapshot::Part {
            start,
            text: text.to_owned(),
        }),
        history_len: 0,
    }
}

/// An append that keeps the status moves `updated_at` only once it is a second or more behind.
async fn updated_at_moves_by_the_second<S: Store>(st: &Arc<S>) {
    st.create(new_session("grain", None), 10_000).await.unwrap();
    let mut seq = 0;
    let mut at = |now: i64, status: SessionStatus| {
        seq += 1;
        let from = seq;
        async move {
            st.append("grain", from - 1, &small_batch(from, 1), status, now)
                .await
                .unwrap();
            st.get("grain").await.unwrap().updated_at
        }
    };
    assert_eq!(at(10_500, SessionStatus::Running).await, 10_000);
    assert_eq!(at(10_999, SessionStatus::Running).await, 10_000);
    assert_eq!(at(11_000, SessionStatus::Running).await, 11_000);
    assert_eq!(at(11_200, SessionStatus::Running).await, 11_000);
    // A change of status is always recorded with its time.
    assert_eq!(at(11_300, SessionStatus::WaitingForUser).await, 11_300);
    assert_eq!(at(11_400, SessionStatus::Running).await, 11_400);
    let rec = st.get("grain").await.unwrap();
    assert_eq!((rec.status, rec.last_seq), (SessionStatus::Running, 6));
}

/// A snapshot is written with a batch, in its transaction: the newest head replaces the last,
/// a part replaces the parts from its start on, and a snapshot ahead of the log or of a batch
/// that is refused is not written.
async fn snapshots_go_with_their_batch<S: Store>(st: &Arc<S>) {
    st.create(new_session("snap", None), 1).await.unwrap();
    assert_eq!(st.latest_snapshot("snap").await.unwrap(), None);
    st.append_with_snapshot(
        "snap",
        0,
        &small_batch(1, 4),
        SessionStatus::Running,
        2,
        &snapshot(4, "{\"at\":4}", Some((0, "[1,2]"))),
    )
    .await
    .unwrap();
    st.append_with_snapshot(
        "snap",
        4,
        &small_batch(5, 3),
        SessionStatus::Running,
        3,
        &snapshot(6, "{\"at\":6}", Some((2, "[3]"))),
    )
    .await
    .unwrap();
    let got = st.latest_snapshot("snap").await.unwrap().unwrap();
    assert_eq!(
        (got.seq, got.version, got.head.as_str()),
        (6, weft_core::SNAPSHOT_VERSION, "{\"at\":6}")
    );
    let parts = |from: u64| st.snapshot_parts("snap", from);
    assert_eq!(
        parts(0).await.unwrap(),
        vec![(0, "[1,2]".into()), (2, "[3]".into())]
    );
    // From a message on: the part that holds it and every later one.
    assert_eq!(
        parts(1).await.unwrap(),
        vec![(0, "[1,2]".into()), (2, "[3]".into())]
    );
    assert_eq!(parts(2).await.unwrap(), vec![(2, "[3]".into())]);
    assert_eq!(parts(7).await.unwrap(), vec![(2, "[3]".into())]);
    // A snapshot without a new part keeps the parts; one whose part starts earlier replaces
    // those from its start on.
    st.append_with_snapshot(
        "snap",
        7,
        &small_batch(8, 1),
        SessionStatus::Running,
        4,
        &snapshot(8, "{\"at\":8}", None),
    )
    .await
    .unwrap();
    assert_eq!(parts(0).await.unwrap().len(), 2);
    st.append_with_snapshot(
        "snap",
        8,
        &small_batch(9, 1),
        SessionStatus::Running,
        5,
        &snapshot(9, "{\"at\":9}", Some((1, "[9,9]"))),
    )
    .await
    .unwrap();
    let got = st.latest_snapshot("snap").await.unwrap().unwrap();
    assert_eq!((got.seq, got.head.as_str()), (9, "{\"at\":9}"));
    assert_eq!(
        parts(0).await.unwrap(),
        vec![(0, "[1,2]".into()), (1, "[9,9]".into())]
    );
    // Ahead of the log once the batch is written: refused, and nothing is written.
    assert!(matches!(
        st.append_with_snapshot(
            "snap",
            9,
            &small_batch(10, 1),
            SessionStatus::Running,
            6,
            &snapshot(11, "{}", None)
        )
        .await,
        Err(StoreError::OutOfRange {
            seq: 11,
            last: 10,
            ..
        })
    ));
    assert_eq!(st.get("snap").await.unwrap().last_seq, 9);
    // A batch that conflicts takes its snapshot down with it.
    assert!(matches!(
        st.append_with_snapshot(
            "snap",
            3,
            &small_batch(4, 1),
            SessionStatus::Running,
            6,
            &snapshot(4, "{\"stale\":true}", Some((0, "[]")))
        )
        .await,
        Err(StoreError::Conflict { .. })
    ));
    let got = st.latest_snapshot("snap").await.unwrap().unwrap();
    assert_eq!((got.seq, parts(0).await.unwrap().len()), (9, 2));
    assert!(matches!(
        st.latest_snapshot("nope").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        st.snapshot_parts("nope", 0).await,
        Err(StoreError::NotFound(_))
    ));
    // Pruning a session takes its snapshot with it.
    assert_eq!(st.prune(10, true).await.unwrap(), 1);
    st.create(new_session("snap", None), 11).await.unwrap();
    assert_eq!(st.latest_snapshot("snap").await.unwrap(), None);
    assert!(parts(0).await.unwrap().is_empty());
}

// ---- backends ------------------------------------------------------------------------------

async fn sqlite_store() -> (tempfile::TempDir, weft_store::SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let st = weft_store::SqliteStore::open(dir.path().join("nested/dir/weft.db"))
        .await
        .unwrap();
    (dir, st)
}

fn entry(text: &str) -> NewEntry {
    NewEntry {
        text: text.into(),
        source: String::new(),
        position: 0,
        embedding: None,
    }
}

/// Memories are found by their words, on the shelves asked for only: one user's memories never
/// appear in another user's search, and another user cannot delete them.
async fn memories_are_searched_per_user<S: Knowledge>(st: &Arc<S>) {
    let (alice, bob) = (Shelf::user("alice"), Shelf::user("bob"));
    let a = st
        .add(
            Kind::Memory,
            &alice,
            vec![
                entry("Alice's favourite colour is teal"),
                entry("Alice flies to Lisbon on Friday"),
            ],
            false,
            1,
        )
        .await
        .unwrap();
    st.add(
        Kind::Memory,
        &bob,
        vec![entry("Bob's favourite colour is red")],
        false,
        1,
    )
    .await
    .unwrap();
    st.add(
        Kind::Memory,
        &Shelf::public(),
        vec![entry("The office colour scheme is grey")],
        false,
        1,
    )
    .await
    .unwrap();
    let mine = [alice.clone(), Shelf::public()];
    let hits = st
        .search(Kind::Memory, &mine, "what is my favourite colour?", 5)
        .await
        .unwrap();
    let texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
    assert_eq!(
        texts.first(),
        Some(&"Alice's favourite colour is teal"),
        "{texts:?}"
    );
    assert!(texts.contains(&"The office colour scheme is grey"));
    assert!(!texts.iter().any(|t| t.contains("Bob")), "{texts:?}");
    let hits = st
        .search(
            Kind::Memory,
            std::slice::from_ref(&bob),
            "Lisbon teal colour",
            5,
        )
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].text, "Bob's favourite colour is red");
    // Query syntax of the databases is not interpreted.
    assert!(
        st.search(Kind::Memory, &mine, "\"* NEAR( OR ' --", 5)
            .await
            .unwrap()
            .is_empty()
    );
    // Documents are another kind: a memory search does not return them, and back.
    assert!(
        st.search(Kind::Document, &mine, "colour", 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!st.forget(Kind::Memory, &[bob], a[0]).await.unwrap());
    assert!(
        st.forget(Kind::Memory, std::slice::from_ref(&alice), a[0])
            .await
            .unwrap()
    );
    let hits = st
        .search(Kind::Memory, &[alice], "favourite colour", 5)
        .await
        .unwrap();
    assert!(hits.is_empty(), "{hits:?}");
}

/// Adding a document again replaces its chunks; each hit says where it comes from.
async fn documents_are_replaced_by_source<S: Knowledge>(st: &Arc<S>) {
    let shelf = Shelf::agent("helpdesk");
    let chunk = |source: &str, position: i64, text: &str| NewEntry {
        text: text.into(),
        source: source.into(),
        position,
        embedding: None,
    };
    st.add(
        Kind::Document,
        &shelf,
        vec![
            chunk("guide.md", 0, "Refunds are paid within 14 days"),
            chunk("guide.md", 1, "Shipping to Norway takes a week"),
        ],
        true,
        1,
    )
    .await
    .unwrap();
    st.add(
        Kind::Document,
        &shelf,
        vec![chunk("other.md", 0, "Refunds need a receipt")],
        true,
        1,
    )
    .await
    .unwrap();
    st.add(
        Kind::Document,
        &shelf,
        vec![chunk("guide.md", 0, "Refunds are paid within 30 days")],
        true,
        2,
    )
    .await
    .unwrap();
    let hits = st
        .search(
            Kind::Document,
            std::slice::from_ref(&shelf),
            "how long do refunds take",
            10,
        )
        .await
        .unwrap();
    let mut got: Vec<(String, i64, String)> = hits
        .into_iter()
        .map(|h| (h.source, h.position, h.text))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                "guide.md".into(),
                0,
                "Refunds are paid within 30 days".into()
            ),
            ("other.md".into(), 0, "Refunds need a receipt".into()),
        ]
    );
    assert!(
        st.search(Kind::Document, &[shelf], "Norway shipping", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A listing shows the entries of the shelves asked for only, newest first, a page at a time.
async fn memories_are_listed_per_shelf<S: Knowledge>(st: &Arc<S>) {
    let (alice, bob) = (Shelf::user("alice"), Shelf::user("bob"));
    let mut ids = Vec::new();
    for (at, text) in [(10, "first"), (20, "second"), (20, "third"), (30, "fourth")] {
        ids.extend(
            st.add(Kind::Memory, &alice, vec![entry(text)], false, at)
                .await
                .unwrap(),
        );
    }
    st.add(Kind::Memory, &bob, vec![entry("Bob's only one")], false, 40)
        .await
        .unwrap();
    st.add(
        Kind::Document,
        &alice,
        vec![entry("a document, not a memory")],
        false,
        50,
    )
    .await
    .unwrap();
    let list = |shelves: Vec<Shelf>, limit, offset| {
        let st = Arc::clone(st);
        async move {
            st.list_entries(Kind::Memory, &shelves, limit, offset)
                .await
                .unwrap()
                .into_iter()
                .map(|l| (l.id, l.text, l.created_at, l.owner))
                .collect::<Vec<_>>()
        }
    };
    let all = list(vec![alice.clone()], 10, 0).await;
    let texts: Vec<&str> = all.iter().map(|(_, t, _, _)| t.as_str()).collect();
    // Newest first; two stored at once: the later one (higher id) first.
    assert_eq!(texts, ["fourth", "third", "second", "first"]);
    assert_eq!(all[0].0, ids[3]);
    assert!(all.iter().all(|(_, _, _, owner)| owner == "alice"));
    assert_eq!(all[0].2, 30);
    // Pages.
    let page = list(vec![alice.clone()], 2, 1).await;
    let texts: Vec<&str> = page.iter().map(|(_, t, _, _)| t.as_str()).collect();
    assert_eq!(texts, ["third", "second"]);
    assert!(list(vec![alice.clone()], 10, 4).await.is_empty());
    assert!(list(vec![alice.clone()], 0, 0).await.is_empty());
    // Another user's listing holds nothing of Alice's, and no shelf lists nothing.
    let theirs = list(vec![bob.clone()], 10, 0).await;
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].1, "Bob's only one");
    assert!(list(vec![], 10, 0).await.is_empty());
    // Both shelves asked for: both listed.
    assert_eq!(list(vec![alice, bob], 10, 0).await.len(), 5);
}

/// A deleted session is gone with its events, snapshots and lease; its id is free again, and
/// another session is untouched. Deleting what is not there is `NotFound`.
async fn delete_removes_a_session_and_its_lease<S: Store>(st: &Arc<S>) {
    for id in ["d1", "d2"] {
        st.create(new_session(id, Some("u")), 10).await.unwrap();
        st.append_with_snapshot(
            id,
            0,
            &small_batch(1, 3),
            SessionStatus::Running,
            11,
            &snapshot(3, "{}", Some((0, "[]"))),
        )
        .await
        .unwrap();
    }
    let owner = weft_store::Owner {
        id: "o".into(),
        host: "h".into(),
        pid: 1,
    };
    st.acquire("d1", &owner, 20, 1_000, false).await.unwrap();
    st.delete("d1").await.unwrap();
    assert!(matches!(st.get("d1").await, Err(StoreError::NotFound(_))));
    assert!(st.lease("d1").await.unwrap().is_none());
    assert!(matches!(
        st.delete("d1").await,
        Err(StoreError::NotFound(_))
    ));
    let (rec, log) = st.load("d2").await.unwrap();
    assert_eq!((rec.last_seq, log.len()), (3, 3));
    // The id is free again: a new session of that id has no old events or snapshot.
    st.create(new_session("d1", None), 30).await.unwrap();
    let (rec, log) = st.load("d1").await.unwrap();
    assert!(log.is_empty() && rec.last_seq == 0);
    assert!(st.latest_snapshot("d1").await.unwrap().is_none());
    assert!(st.snapshot_parts("d1", 0).await.unwrap().is_empty());
    assert_eq!(
        st.acquire("d1", &owner, 40, 1_000, false)
            .await
            .unwrap()
            .epoch,
        1
    );
}

/// Metadata is replaced whole, and the session's `updated_at` moves to the change.
async fn set_metadata_replaces_it<S: Store>(st: &Arc<S>) {
    let mut s = new_session("m", None);
    s.metadata = json!({"a": 1, "b": "x"});
    st.create(s, 10).await.unwrap();
    st.set_metadata("m", &json!({"b": "y", "c": [1, 2]}), 20)
        .await
        .unwrap();
    let rec = st.get("m").await.unwrap();
    assert_eq!(rec.metadata, json!({"b": "y", "c": [1, 2]}));
    assert_eq!(rec.updated_at, 20);
    assert!(matches!(
        st.set_metadata("none", &json!({}), 20).await,
        Err(StoreError::NotFound(_))
    ));
}

/// A session's export mark starts at 0, moves forward only, is written for several sessions at
/// once, passes over a session that is gone, and goes with its session.
async fn export_marks_move_forward_only<S: Store>(st: &Arc<S>) {
    st.create(new_session("x1", None), 10).await.unwrap();
    st.create(new_session("x2", None), 10).await.unwrap();
    assert_eq!(st.exported_through("x1").await.unwrap(), 0);
    st.set_exported_through(&[("x1".into(), 5), ("x2".into(), 3), ("gone".into(), 9)])
        .await
        .unwrap();
    st.set_exported_through(&[("x1".into(), 4)]).await.unwrap();
    assert_eq!(st.exported_through("x1").await.unwrap(), 5);
    assert_eq!(st.exported_through("x2").await.unwrap(), 3);
    assert_eq!(st.exported_through("gone").await.unwrap(), 0);
    st.delete("x1").await.unwrap();
    st.create(new_session("x1", None), 20).await.unwrap();
    assert_eq!(st.exported_through("x1").await.unwrap(), 0);
}

/// A session made without an agent is named by `name_agent`, once: a named one keeps its name.
async fn name_agent_names_a_session_without_one<S: Store>(st: &Arc<S>) {
    let mut s = new_session("empty", None);
    s.agent = String::new();
    st.create(s, 10).await.unwrap();
    st.name_agent("empty", "banker").await.unwrap();
    assert_eq!(st.get("empty").await.unwrap().agent, "banker");
    st.name_agent("empty", "other").await.unwrap();
    assert_eq!(st.get("empty").await.unwrap().agent, "banker");
    assert!(matches!(
        st.name_agent("none", "banker").await,
        Err(StoreError::NotFound(_))
    ));
}

/// `find` reads the entries of one source, on the shelves asked for only.
async fn entries_are_found_by_source<S: Knowledge>(st: &Arc<S>) {
    let (alice, bob) = (Shelf::user("alice"), Shelf::user("bob"));
    let with_source = |text: &str, source: &str| NewEntry {
        source: source.into(),
        ..entry(text)
    };
    st.add(
        Kind::Memory,
        &alice,
        vec![with_source("one", "s1")],
        false,
        10,
    )
    .await
    .unwrap();
    st.add(
        Kind::Memory,
        &alice,
        vec![with_source("two", "s2")],
        false,
        20,
    )
    .await
    .unwrap();
    st.add(
        Kind::Memory,
        &bob,
        vec![with_source("bob's", "s1")],
        false,
        30,
    )
    .await
    .unwrap();
    // Replaced by source: the newer entry alone is found.
    st.add(
        Kind::Memory,
        &alice,
        vec![with_source("one again", "s1")],
        true,
        40,
    )
    .await
    .unwrap();
    let found = st
        .find(Kind::Memory, std::slice::from_ref(&alice), "s1")
        .await
        .unwrap();
    let texts: Vec<&str> = found.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(texts, ["one again"]);
    assert_eq!(found[0].created_at, 40);
    let theirs = st.find(Kind::Memory, &[bob], "s1").await.unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].text, "bob's");
    assert!(
        st.find(Kind::Memory, std::slice::from_ref(&alice), "s3")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        st.find(Kind::Document, std::slice::from_ref(&alice), "s1")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(st.find(Kind::Memory, &[], "s1").await.unwrap().is_empty());
}

static SCHEMA_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A store in a fresh schema, or `None` (and a note) when no server is configured.
async fn pg_store(test: &str) -> Option<(String, String, weft_store::PgStore)> {
    let url = common::service_var("WEFT_TEST_POSTGRES_URL");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let schema = format!(
        "weft_test_{test}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000,
        SCHEMA_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let st = weft_store::PgStore::connect_in_schema(&url, &schema)
        .await
        .unwrap();
    Some((url, schema, st))
}

async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&std::sync::Arc::new(weft_store::RamStore::new())).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let (_dir, st) = super::sqlite_store().await;
                    super::$name(&std::sync::Arc::new(st)).await;
                }
            )*
        }
        mod needs_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some((url, schema, st)) = super::pg_store(stringify!($name)).await else {
                        return;
                    };
                    let st = std::sync::Arc::new(st);
                    super::$name(&st).await;
                    st.close().await;
                    super::drop_schema(&url, &schema).await;
                }
            )*
        }
    };
}

suite!(
    round_trip,
    stale_append_conflicts,
    concurrent_appenders,
    batches_are_atomic,
    list_filters_and_order,
    events_after_returns_the_tail,
    prune_deletes_old_sessions,
    append_updates_status_and_time,
    updated_at_moves_by_the_second,
    create_with_starts_the_log,
    create_many_refuses_one_by_one,
    simultaneous_appends_stand_alone,
    nul_characters_round_trip,
    snapshots_go_with_their_batch,
    memories_are_searched_per_user,
    documents_are_replaced_by_source,
    memories_are_listed_per_shelf,
    delete_removes_a_session_and_its_lease,
    set_metadata_replaces_it,
    export_marks_move_forward_only,
    name_agent_names_a_session_without_one,
    entries_are_found_by_source,
);
