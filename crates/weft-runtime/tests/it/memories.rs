//! Long-term memories given to the model without a tool call: a turn of an agent that recalls
//! memories starts with a search of the session's shelves, recorded as `memories_recalled`, and
//! its requests carry what was found ("What you remember"). On every store: in memory, a SQLite
//! file and PostgreSQL (`needs_postgres_memories`, which needs WEFT_TEST_POSTGRES_URL).
//!
//! Also here: plan mode's requests carry the session's earlier turns, compacted when long.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents as common;

use std::sync::Arc;

use common::{RecordingModel, Requests, j, request_text, script, t};
use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::event::RecalledMemory;
use weft_core::model::Message;
use weft_core::prompts::MEMORY_INTRO;
use weft_core::{Envelope, Event, SessionStatus};
use weft_model::{ModelRequest, Purpose, ScriptedModel, ScriptedReply};
use weft_runtime::{Agent, Runtime, RuntimeError, SessionInfo};
use weft_store::{Kind, NewEntry, NewSession, RamStore, Shelf, SqliteStore, Store};
use weft_tools::Registry;

const REACT_AGENT: &str = "name: desk\nmode: react\ntools:\n  - builtin: recall\n";

/// An agent of `yaml` (built-in tools from the file) whose scripted model answers `replies` and
/// records every request.
fn agent(yaml: &str, replies: Vec<(Purpose, Vec<ScriptedReply>)>) -> (Agent, Requests) {
    let spec = AgentSpec::parse("memories.yaml", yaml).unwrap();
    let reg = Registry::from_agent(&spec, std::path::Path::new(".")).unwrap();
    let (model, requests) = RecordingModel::new(ScriptedModel::keyed("memories", script(replies)));
    let a = Agent::new(
        &spec,
        Arc::new(reg),
        Arc::new(model),
        &json!({}),
        &json!({}),
    )
    .unwrap();
    (a, requests)
}

fn runtime<S: Store>(store: &Arc<S>, a: &Agent) -> Runtime<S> {
    builder(store, a).build()
}

fn builder<S: Store>(store: &Arc<S>, a: &Agent) -> weft_runtime::RuntimeBuilder<S> {
    crate::agents::runtime_of(store, a)
}

async fn remember<S: Store>(store: &Arc<S>, shelf: &Shelf, text: &str) -> i64 {
    let entry = NewEntry {
        text: text.into(),
        source: String::new(),
        position: 0,
        embedding: None,
    };
    store
        .add(Kind::Memory, shelf, vec![entry], false, 1)
        .await
        .unwrap()[0]
}

fn user(id: &str) -> SessionInfo {
    SessionInfo {
        user_id: Some(id.into()),
        ..SessionInfo::default()
    }
}

/// The text of a request's system messages (where ReAct and workflow requests carry memories).
fn system_text(r: &ModelRequest) -> String {
    r.messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The memory lines of a request's "What you remember" section.
fn memory_lines(r: &ModelRequest) -> Vec<String> {
    let text = request_text(r);
    let Some(start) = text.find("<memories>\n") else {
        return Vec::new();
    };
    let rest = &text[start + "<memories>\n".len()..];
    let end = rest.find("</memories>").expect("the section is closed");
    rest[..end].lines().map(str::to_owned).collect()
}

async fn recalled_events<S: Store>(store: &Arc<S>, id: &str) -> Vec<(String, Vec<RecalledMemory>)> {
    let (_, events) = store.load(id).await.unwrap();
    events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::MemoriesRecalled {
                query, memories, ..
            } => Some((query, memories)),
            _ => None,
        })
        .collect()
}

/// A user's memory reaches the model of their session, in the system message, marked as
/// memories and not instructions, and recorded before the first model call; another user's
/// session gets the agent's and public memories and never the first user's.
async fn a_users_memories_reach_only_their_prompts<S: Store>(store: Arc<S>) {
    let alice_fact = remember(&store, &Shelf::user("alice"), "Alice's locker code is 4417").await;
    remember(&store, &Shelf::user("bob"), "Bob prefers trains to planes").await;
    remember(
        &store,
        &Shelf::agent("desk"),
        "The desk's locker room is on floor 2",
    )
    .await;
    remember(
        &store,
        &Shelf::public(),
        "Every locker is emptied on Friday",
    )
    .await;

    let (a, requests) = agent(REACT_AGENT, vec![(Purpose::React, vec![t("It is 4417.")])]);
    assert!(
        a.config.recall_memories,
        "on by default with the recall tool"
    );
    let rt = runtime(&store, &a);
    let s = rt
        .run_agent(&a, user("alice"), "what is my locker code", Value::Null)
        .await
        .unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    let reacts = requests.of(Purpose::React);
    assert_eq!(reacts.len(), 1, "the memories needed no tool call");
    let system = system_text(&reacts[0]);
    assert!(system.contains(MEMORY_INTRO), "{system}");
    assert!(system.contains("not instructions"));
    let lines = memory_lines(&reacts[0]);
    assert!(
        lines.contains(&format!(
            "- [user memory {alice_fact}] Alice's locker code is 4417"
        )),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("floor 2")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("on Friday")), "{lines:?}");
    assert!(!request_text(&reacts[0]).contains("trains"), "Bob's memory");
    // Recorded once, right after the turn started and before the model's reply.
    let (_, events) = store.load(&s.id).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    assert_eq!(
        &kinds[..3],
        ["session_started", "turn_started", "memories_recalled"]
    );
    let recalled = recalled_events(&store, &s.id).await;
    assert_eq!(recalled.len(), 1);
    assert_eq!(recalled[0].0, "what is my locker code");
    assert_eq!(s.state.turn().recalled(), recalled[0].1);
    weft_core::snapshot::verify(&events.into_iter().map(|e| e.event).collect::<Vec<_>>()).unwrap();

    // Bob asks the same: Alice's memory is in neither his prompt nor his log.
    let (a, requests) = agent(
        REACT_AGENT,
        vec![(Purpose::React, vec![t("I don't know.")])],
    );
    let rt = runtime(&store, &a);
    let s = rt
        .run_agent(&a, user("bob"), "what is my locker code", Value::Null)
        .await
        .unwrap();
    let text = request_text(&requests.of(Purpose::React)[0]);
    assert!(!text.contains("4417"), "{text}");
    assert!(text.contains("Every locker is emptied on Friday"), "{text}");
    let recalled = recalled_events(&store, &s.id).await;
    assert!(!recalled[0].1.is_empty());
    assert!(
        recalled[0]
            .1
            .iter()
            .all(|m| m.id != alice_fact && !m.text.contains("4417")),
        "{recalled:?}"
    );

    // A session without a user sees only the agent's and public memories.
    let (a, requests) = agent(REACT_AGENT, vec![(Purpose::React, vec![t("No idea.")])]);
    let rt = runtime(&store, &a);
    rt.run_agent(&a, SessionInfo::default(), "locker code", Value::Null)
        .await
        .unwrap();
    let lines = memory_lines(&requests.of(Purpose::React)[0]);
    assert!(!lines.is_empty());
    assert!(
        lines.iter().all(|l| !l.contains("[user memory")),
        "{lines:?}"
    );
}

/// Many matching memories: the section holds at most `memory_items`, within `memory_tokens`,
/// each cut to its bound; `recall_memories: false` turns it off, as does `memory_tokens: 0`.
async fn memories_stay_within_their_budget<S: Store>(store: Arc<S>) {
    for i in 0..30 {
        let text = format!(
            "Carol's note {i} about the garden: {}",
            "tomatoes need water ".repeat(20 + i)
        );
        remember(&store, &Shelf::user("carol"), &text).await;
    }
    for (yaml, tokens, items) in [
        (REACT_AGENT.to_owned(), 400u64, 5usize),
        (
            format!("{REACT_AGENT}limits: {{ memory_tokens: 150, memory_items: 10 }}\n"),
            150,
            10,
        ),
        (
            format!("{REACT_AGENT}limits: {{ memory_tokens: 2000, memory_items: 3 }}\n"),
            2000,
            3,
        ),
    ] {
        let (a, requests) = agent(&yaml, vec![(Purpose::React, vec![t("ok")])]);
        runtime(&store, &a)
            .run_agent(&a, user("carol"), "what does the garden need", Value::Null)
            .await
            .unwrap();
        let lines = memory_lines(&requests.of(Purpose::React)[0]);
        assert!(
            !lines.is_empty() && lines.len() <= items,
            "{}: {lines:?}",
            lines.len()
        );
        let used: u64 = lines.iter().map(|l| (l.len() as u64 + 1).div_ceil(4)).sum();
        assert!(used <= tokens, "{used} tokens of memories, budget {tokens}");
        for l in &lines {
            assert!(
                l.len() <= weft_core::agent_loop::MEMORY_ITEM_BYTES + 40,
                "{l}"
            );
        }
    }
    for off in [
        format!("{REACT_AGENT}recall_memories: false\n"),
        format!("{REACT_AGENT}limits: {{ memory_tokens: 0 }}\n"),
    ] {
        let (a, requests) = agent(&off, vec![(Purpose::React, vec![t("ok")])]);
        let rt = runtime(&store, &a);
        let s = rt
            .run_agent(&a, user("carol"), "what does the garden need", Value::Null)
            .await
            .unwrap();
        assert!(!request_text(&requests.of(Purpose::React)[0]).contains(MEMORY_INTRO));
        assert!(recalled_events(&store, &s.id).await.is_empty(), "{off}");
    }
    // Without the recall tool an agent recalls nothing unless it asks to.
    let (a, _) = agent("name: plain\nmode: react\n", vec![]);
    assert!(!a.config.recall_memories);
    let (a, _) = agent("name: plain\nmode: react\nrecall_memories: true\n", vec![]);
    assert!(a.config.recall_memories);
}

/// A session stopped after its memories were recorded and continued by a fresh runtime (a new
/// process) does not search again: its request carries the memories recorded, even though the
/// store changed since. A fork made after the event keeps them too.
async fn a_resumed_or_forked_turn_does_not_search_again<S: Store>(store: Arc<S>) {
    remember(&store, &Shelf::user("dora"), "Dora's cat is called Miso").await;
    let (a, before) = agent(REACT_AGENT, vec![(Purpose::React, vec![t("Miso.")])]);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(true);
    let rt = builder(&store, &a).stop_on(stop_rx).build();
    let s = rt
        .queue_agent(
            &a,
            user("dora"),
            "what is my cat called",
            Value::Null,
            Vec::new(),
        )
        .await
        .unwrap();
    let id = s.id.clone();
    drop(s);
    let mut s = rt.load_session(&id).await.unwrap();
    let stopped = rt.drive_agent(&a, &mut s).await;
    assert!(matches!(stopped, Err(RuntimeError::Stopped)), "{stopped:?}");
    drop(stop_tx);
    assert!(
        before.all().is_empty(),
        "stopped before the model was called"
    );
    // The prompt the turn would have sent had it not stopped.
    let due = weft_core::prompts::react(&s.state, &a.config)
        .messages
        .to_vec();
    drop(s);
    let first = recalled_events(&store, &id).await;
    assert_eq!(first.len(), 1);
    assert!(first[0].1.iter().any(|m| m.text.contains("Miso")));

    // The store changes: a fresh search would find the new memory first.
    remember(
        &store,
        &Shelf::user("dora"),
        "Dora's cat is called Pepper now, her cat was renamed",
    )
    .await;

    let (a, requests) = agent(REACT_AGENT, vec![(Purpose::React, vec![t("Miso.")])]);
    let rt = runtime(&store, &a);
    let mut s = rt.load_session(&id).await.unwrap();
    rt.resume_agent(&a, &mut s).await.unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    assert_eq!(
        recalled_events(&store, &id).await,
        first,
        "no second search"
    );
    let resumed = requests.of(Purpose::React);
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].messages.to_vec(), due, "the same prompt");
    assert!(request_text(&resumed[0]).contains("Miso"));
    assert!(!request_text(&resumed[0]).contains("Pepper"));

    // A fork at the event: its turn carries the same memories and searches no more.
    let (rec, events) = store.load(&id).await.unwrap();
    let at = events
        .iter()
        .find(|e| matches!(e.event, Event::MemoriesRecalled { .. }))
        .unwrap()
        .seq;
    let fork_id = format!("{id}-fork");
    let (log, state) = weft_core::recovery::fork_log(events, at, &fork_id, &id, 2);
    store
        .create_with(
            NewSession {
                id: fork_id.clone(),
                agent: rec.agent.clone(),
                user_id: rec.user_id.clone(),
                reference_id: None,
                metadata: Value::Null,
                parent_id: Some(id.clone()),
            },
            &log,
            state.status(),
            2,
        )
        .await
        .unwrap();
    let (a, requests) = agent(REACT_AGENT, vec![(Purpose::React, vec![t("Miso.")])]);
    let rt = runtime(&store, &a);
    let mut f = rt.load_session(&fork_id).await.unwrap();
    rt.resume_agent(&a, &mut f).await.unwrap();
    assert_eq!(recalled_events(&store, &fork_id).await, first);
    let forked = requests.of(Purpose::React);
    assert_eq!(
        system_text(&forked[0]),
        system_text(&resumed[0]),
        "the fork sends the same memories"
    );
    let envelopes: Vec<Envelope> = store.load(&fork_id).await.unwrap().1;
    weft_core::snapshot::verify(&envelopes.into_iter().map(|e| e.event).collect::<Vec<_>>())
        .unwrap();
}

/// Plan mode: the planner's request carries the memories and the earlier turns (each task and
/// its answer), and a later turn searches again for its own task.
async fn the_planner_sees_memories_and_earlier_turns<S: Store>(store: Arc<S>) {
    remember(
        &store,
        &Shelf::user("erin"),
        "Erin's budget for trips is 800 euros",
    )
    .await;
    remember(&store, &Shelf::user("erin"), "Erin is allergic to cats").await;
    let yaml = "name: trips\nmode: plan\nrecall_memories: true\nreview_responses: false\n";
    let (a, requests) = agent(
        yaml,
        vec![(
            Purpose::Plan,
            vec![
                j(json!({"direct_response": "Lisbon fits a budget of 800 euros."})),
                j(json!({"direct_response": "A hotel without cats: Casa Azul."})),
                j(json!({"direct_response": "Book it for June."})),
            ],
        )],
    );
    let rt = runtime(&store, &a);
    let mut s = rt
        .run_agent(
            &a,
            user("erin"),
            "plan a trip within my budget",
            Value::Null,
        )
        .await
        .unwrap();
    rt.run_task(
        &a,
        &mut s,
        "find a hotel, I am allergic to cats",
        Value::Null,
    )
    .await
    .unwrap();
    rt.run_task(&a, &mut s, "when should I go", Value::Null)
        .await
        .unwrap();
    let plans = requests.of(Purpose::Plan);
    assert_eq!(plans.len(), 3);
    assert!(
        memory_lines(&plans[0])
            .iter()
            .any(|l| l.contains("800 euros"))
    );
    assert!(
        memory_lines(&plans[1])
            .iter()
            .any(|l| l.contains("allergic to cats"))
    );
    // The first turn's planner sees no earlier turn; the second sees the first, the third both,
    // as messages of the conversation before the task.
    assert_eq!(plans[0].messages.len(), 2);
    let second: Vec<&Message> = plans[1].messages.iter().collect();
    assert!(
        matches!(second[1], Message::User { content } if content == "plan a trip within my budget")
    );
    assert!(
        matches!(second[2], Message::Assistant { content, .. } if content == "Lisbon fits a budget of 800 euros.")
    );
    assert!(
        matches!(second.last(), Some(Message::User { content }) if content.contains("Task: find a hotel"))
    );
    let third = request_text(&plans[2]);
    for earlier in [
        "plan a trip within my budget",
        "Lisbon fits a budget of 800 euros.",
        "find a hotel, I am allergic to cats",
        "A hotel without cats: Casa Azul.",
    ] {
        assert!(third.contains(earlier), "{earlier} in {third}");
    }
    let recalled = recalled_events(&store, &s.id).await;
    assert_eq!(recalled.len(), 3, "one search per turn");
    assert_eq!(recalled[1].0, "find a hotel, I am allergic to cats");
    let (_, events) = store.load(&s.id).await.unwrap();
    weft_core::snapshot::verify(&events.into_iter().map(|e| e.event).collect::<Vec<_>>()).unwrap();
}

/// A long plan-mode session: every planner request stays within `max_context_tokens`, the
/// earlier turns are summarised by `compact` calls, and later planners see the summary and the
/// recent turns.
async fn a_long_plan_session_is_compacted<S: Store>(store: Arc<S>) {
    const BUDGET: u64 = 800;
    const TURNS: usize = 14;
    let answers: Vec<ScriptedReply> = (0..TURNS)
        .map(|k| {
            j(json!({"direct_response": format!("Answer {k}: {}", "the weather will be mild and dry ".repeat(6))}))
        })
        .collect();
    let summaries = (0..TURNS)
        .map(|k| t(&format!("SUMMARY-{k}: the user asked about the weather")))
        .collect();
    let yaml = format!(
        "name: weather\nmode: plan\nreview_responses: false\nlimits: {{ max_context_tokens: {BUDGET} }}\n"
    );
    let (a, requests) = agent(
        &yaml,
        vec![(Purpose::Plan, answers), (Purpose::Compact, summaries)],
    );
    let rt = runtime(&store, &a);
    let mut s = rt
        .run_agent(&a, SessionInfo::default(), "weather on day 0", Value::Null)
        .await
        .unwrap();
    for k in 1..TURNS {
        rt.run_task(&a, &mut s, &format!("weather on day {k}"), Value::Null)
            .await
            .unwrap();
        assert_eq!(
            s.state.status(),
            SessionStatus::Completed,
            "{:?}",
            s.state.turn().error()
        );
    }
    let plans = requests.of(Purpose::Plan);
    assert_eq!(plans.len(), TURNS);
    for (k, r) in plans.iter().enumerate() {
        let tokens: u64 = r
            .messages
            .iter()
            .map(weft_core::history::estimate_tokens)
            .sum();
        assert!(
            tokens <= BUDGET,
            "planner request {k} carries {tokens} tokens"
        );
    }
    let compactions = requests.of(Purpose::Compact);
    assert!(compactions.len() >= 2, "{} compactions", compactions.len());
    let latest = s.state.compaction().cloned().unwrap();
    assert!(latest.summary.starts_with("SUMMARY-"));
    let last = request_text(plans.last().unwrap());
    assert!(
        last.contains(&latest.summary),
        "the last planner sees the summary"
    );
    assert!(
        !last.contains("weather on day 0\n"),
        "the first turn is summarised away"
    );
    assert!(
        last.contains(&format!("Answer {}:", TURNS - 2)),
        "the turn before is kept"
    );
    // The second compaction summarised the first summary with the turns after it.
    assert!(request_text(&compactions[1]).contains("SUMMARY-0"));
    // The whole conversation is kept: two messages per earlier turn.
    assert_eq!(s.state.history().len(), 2 * (TURNS - 1));
    // With its summary in place, every request still alternates roles.
    requests.assert_alternate();
}

async fn all<S: Store>(mut make: impl AsyncFnMut() -> Arc<S>) {
    a_users_memories_reach_only_their_prompts(make().await).await;
    memories_stay_within_their_budget(make().await).await;
    a_resumed_or_forked_turn_does_not_search_again(make().await).await;
    the_planner_sees_memories_and_earlier_turns(make().await).await;
    a_long_plan_session_is_compacted(make().await).await;
}

#[tokio::test]
async fn memories_in_memory() {
    all(async || Arc::new(RamStore::new())).await;
}

#[tokio::test]
async fn memories_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    all(async || {
        n += 1;
        Arc::new(
            SqliteStore::open(&dir.path().join(format!("weft-{n}.db")))
                .await
                .unwrap(),
        )
    })
    .await;
}

#[tokio::test]
async fn needs_postgres_memories() {
    let mut pg = common::PgSchemas::new("weft_mem");
    all(async || pg.store().await).await;
}
