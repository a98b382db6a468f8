//! The agent loops' bounds and bookkeeping, driven end to end with a scripted model: one retry
//! bound per purpose, replans that leave out ids, how a run that cannot complete settles its
//! steps, non-parallel tools in ReAct, and idempotency keys over a session's whole life.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents as common;

use common::{Harness, TestTool, j, script, t, tool_calls};
use serde_json::json;
use weft_core::model::Purpose;
use weft_core::{Event, SessionStatus};

const PLAN_AGENT: &str = "name: test\nmode: plan\n";

/// Prose and rejected plans are one kind of trouble: `max_model_retries` (3) bounds them
/// together, and the message gives the number of replies that were refused.
#[tokio::test]
async fn prose_and_rejected_plans_share_one_retry_bound() {
    let cyclic = json!({"plan": [
        {"_id": "a", "_tool": "fact", "x": "†state.b", "_outputPath": "†state.a"},
        {"_id": "b", "_tool": "fact", "x": "†state.a", "_outputPath": "†state.b"}
    ]});
    let h = Harness::new(
        PLAN_AGENT,
        vec![TestTool::returning("fact", json!(1))],
        script(vec![(
            Purpose::Plan,
            vec![
                t("Sure, I will plan."),
                j(cyclic.clone()),
                t("Here it is: nothing."),
                j(cyclic),
                t("unused"),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Loop.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    assert_eq!(h.requests.of(Purpose::Plan).len(), 3);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(
        err.starts_with("CANNOT_COMPLETE: the planner gave no valid plan in 3 attempts"),
        "{err}"
    );
    assert!(err.contains("not JSON"), "the last reason is given: {err}");
    let kinds = h.kinds(&s.id).await;
    let refused = kinds
        .iter()
        .filter(|k| **k == "model_reply_rejected" || **k == "plan_rejected")
        .count();
    assert_eq!(refused, 3);
}

/// The same bound when rejected plans come first: the third unusable reply ends the run.
#[tokio::test]
async fn rejected_plans_then_prose_end_at_the_bound() {
    let h = Harness::new(
        "name: test\nmode: plan\nlimits: { max_model_retries: 2 }\n",
        vec![TestTool::returning("fact", json!(1))],
        script(vec![(
            Purpose::Plan,
            vec![
                j(json!({"plan": [{"_id": "x", "_tool": "nope"}]})),
                t("no JSON here"),
                t("unused"),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Do it.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    assert_eq!(h.requests.of(Purpose::Plan).len(), 2);
    let err = s.state.turn().error().unwrap_or_default().to_owned();
    assert!(err.contains("in 2 attempts"), "{err}");
    assert!(
        !h.events(&s.id)
            .await
            .iter()
            .any(|e| matches!(e, Event::PlanAccepted { .. }))
    );
}

/// A replan whose new steps have no `_id` numbers them after the steps that already exist,
/// instead of giving them `s1`, `s2`, ... again (which a completed step holds).
#[tokio::test]
async fn replanned_steps_without_ids_are_numbered_after_the_existing_ones() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![
            TestTool::returning("a", json!("A")),
            TestTool::returning("b", json!("B")),
            TestTool::returning("c", json!("C")),
        ],
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(json!({"plan": [{"_tool": "a"}]})),
                    j(json!({"plan": [{"_tool": "b"}, {"_tool": "c", "_dependsOn": ["s1"]}]})),
                ],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "REPLAN", "reason": "more to do"})),
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "CONTINUE"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                ],
            ),
            (Purpose::Respond, vec![t("done")]),
            (
                Purpose::ResponseReview,
                vec![j(json!({"verdict": "ACCEPT"}))],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Do it.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(common::step_ids(&s.state), ["s1", "s2", "s3"]);
    for id in ["s1", "s2", "s3"] {
        assert_eq!(
            common::step_status(&s.state, id),
            weft_core::StepStatus::Completed
        );
    }
    assert_eq!(
        (h.calls.count("a"), h.calls.count("b"), h.calls.count("c")),
        (1, 1, 1)
    );
    let kinds = h.kinds(&s.id).await;
    assert!(!kinds.contains(&"plan_rejected"), "{kinds:?}");
}

/// A review that gives up skips the steps that have not run, with the reason, as every other
/// ending does: no step of a finished session is left pending.
#[tokio::test]
async fn cannot_complete_review_skips_the_pending_steps() {
    let h = Harness::new(
        PLAN_AGENT,
        vec![
            TestTool::returning("a", json!("A")),
            TestTool::returning("b", json!("B")),
        ],
        script(vec![
            (
                Purpose::Plan,
                vec![j(json!({"plan": [
                    {"_id": "first", "_tool": "a"},
                    {"_id": "second", "_tool": "b", "_dependsOn": ["first"]}
                ]}))],
            ),
            (
                Purpose::Review,
                vec![j(
                    json!({"decision": "CANNOT_COMPLETE", "reason": "the shop is closed"}),
                )],
            ),
        ]),
        &json!({}),
    );
    let s = h.run("Do it.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Failed);
    assert_eq!(
        common::step_status(&s.state, "first"),
        weft_core::StepStatus::Completed
    );
    assert_eq!(
        common::step_status(&s.state, "second"),
        weft_core::StepStatus::Skipped
    );
    let run = s.state.plan().unwrap();
    let reason = run.step("second").unwrap().1.reason.clone().unwrap();
    assert!(reason.contains("the shop is closed"), "{reason}");
    assert_eq!(h.calls.count("b"), 0);
    let kinds = h.kinds(&s.id).await;
    let skipped = kinds.iter().position(|k| *k == "step_skipped").unwrap();
    let end = kinds.iter().position(|k| *k == "run_finished").unwrap();
    assert!(skipped < end, "{kinds:?}");
}

/// The idempotency keys recorded in a session's tool call starts, in order.
async fn keys(h: &Harness, id: &str) -> Vec<String> {
    h.events(id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            Event::ToolCallStarted {
                idempotency_key, ..
            } => Some(idempotency_key),
            _ => None,
        })
        .collect()
}

fn all_distinct(keys: &[String]) -> bool {
    keys.iter().collect::<std::collections::BTreeSet<_>>().len() == keys.len()
}

/// A ReAct session's second turn makes the same call as its first (the same tool, the same
/// arguments, the same call id from the model): a new logical call, so a new key. Two equal
/// calls in one reply get two keys too.
#[tokio::test]
async fn react_turns_and_equal_calls_get_distinct_idempotency_keys() {
    let charge = || tool_calls(&[("charge", json!({"amount": 10}))]);
    // Repeating the call is intended here (`repeats: allow`).
    let h = Harness::new(
        "name: test\nmode: react\nrepeats: allow\n",
        vec![TestTool::returning("charge", json!({"ok": true}))],
        script(vec![(
            Purpose::React,
            vec![
                charge(),
                t("Charged."),
                charge(),
                t("Charged again."),
                tool_calls(&[
                    ("charge", json!({"amount": 10})),
                    ("charge", json!({"amount": 10})),
                ]),
                t("Twice."),
            ],
        )]),
        &json!({}),
    );
    let mut s = h.run("Charge 10.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::Completed);
    h.runtime
        .run_task(&h.agent, &mut s, "Charge 10 again.", json!({}))
        .await
        .unwrap();
    h.runtime
        .run_task(&h.agent, &mut s, "Charge 10 twice.", json!({}))
        .await
        .unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    assert_eq!(h.calls.count("charge"), 4);
    let ks = keys(&h, &s.id).await;
    assert_eq!(ks.len(), 4);
    assert!(all_distinct(&ks), "{ks:?}");
    assert!(
        ks.iter().all(|k| k.starts_with(&format!("{}:", s.id))),
        "{ks:?}"
    );
}

/// Plan steps keep their ids across turns and replans (`s1` again in a second task, a replan's
/// step in place of one that never ran): each call still gets its own key.
#[tokio::test]
async fn plan_turns_and_replans_get_distinct_idempotency_keys() {
    // Repeating the call is intended here (`repeats: allow`).
    let h = Harness::new(
        "name: test\nmode: plan\nrepeats: allow\n",
        vec![TestTool::returning("a", json!("A"))],
        script(vec![
            (
                Purpose::Plan,
                vec![
                    j(json!({"plan": [{"_id": "s1", "_tool": "a", "x": 1}]})),
                    j(json!({"plan": [{"_id": "s2", "_tool": "a", "x": 1}]})),
                    j(json!({"plan": [{"_id": "s1", "_tool": "a", "x": 1}]})),
                ],
            ),
            (
                Purpose::Review,
                vec![
                    j(json!({"decision": "REPLAN", "reason": "once more"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                    j(json!({"decision": "FINAL_RESPONSE"})),
                ],
            ),
            (Purpose::Respond, vec![t("one"), t("two")]),
            (
                Purpose::ResponseReview,
                vec![
                    j(json!({"verdict": "ACCEPT"})),
                    j(json!({"verdict": "ACCEPT"})),
                ],
            ),
        ]),
        &json!({}),
    );
    let mut s = h.run("Do a.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    h.runtime
        .run_task(&h.agent, &mut s, "Do a again.", json!({}))
        .await
        .unwrap();
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("a"), 3);
    let ks = keys(&h, &s.id).await;
    assert_eq!(ks.len(), 3);
    assert!(all_distinct(&ks), "{ks:?}");
}

/// ReAct honours `parallel: false`: the calls of one reply to a tool that is not parallel run
/// one at a time, while calls of a parallel tool still run together (in their own round, as
/// a plan's waves do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_runs_calls_of_a_non_parallel_tool_one_at_a_time() {
    let h = Harness::new(
        "name: test\nmode: react\n",
        vec![
            TestTool::returning("book", json!({"booked": true})).sleeping(150),
            TestTool::returning("look", json!({"free": true}))
                .sleeping(150)
                .parallel(),
        ],
        script(vec![(
            Purpose::React,
            vec![
                tool_calls(&[
                    ("look", json!({"room": 1})),
                    ("look", json!({"room": 2})),
                    ("book", json!({"room": 1})),
                    ("book", json!({"room": 2})),
                ]),
                t("Booked both."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Book rooms 1 and 2.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    let books = h.calls.of("book");
    let looks = h.calls.of("look");
    assert_eq!((books.len(), looks.len()), (2, 2));
    let overlap =
        |x: &common::CallRecord, y: &common::CallRecord| x.start < y.end && y.start < x.end;
    assert!(
        !overlap(&books[0], &books[1]),
        "book ran twice at once: {books:?}"
    );
    assert!(
        overlap(&looks[0], &looks[1]),
        "the parallel calls did not overlap: {looks:?}"
    );
    for b in &books {
        for l in &looks {
            assert!(!overlap(b, l), "book ran beside look: {b:?} {l:?}");
        }
    }
    // Every call's result went back to the model in the one conversation.
    let reqs = h.requests.of(Purpose::React);
    assert_eq!(reqs.len(), 2);
    let results = reqs[1]
        .messages
        .iter()
        .filter(|m| matches!(m, weft_core::model::Message::Tool { .. }))
        .count();
    assert_eq!(results, 4);
}

/// A command tool that dies with a long Python traceback: the model gets the error bounded
/// (the message and the last lines of stderr, a few KB at most), the stored event keeps the
/// whole stderr for people.
#[tokio::test]
async fn a_failing_command_goes_back_to_the_model_bounded() {
    use std::sync::Arc;
    use weft_core::ToolOutcome;
    use weft_core::agent::{AgentSpec, CommandToolDecl};
    use weft_core::model::Message;
    use weft_model::{ScriptedModel, ScriptedReply};
    use weft_runtime::{Agent, Runtime, SessionInfo};
    use weft_store::RamStore;

    let decl: CommandToolDecl = serde_json::from_value(json!({
        "name": "convert",
        "command": ["python3", "-c",
            // 150 distinct frames: a traceback of about 5 KB.
            "code = ''.join(f'def f{i}(): f{i + 1}()\\n' for i in range(150))\ncode += 'def f150(): raise ValueError(\"the input has no field amount\")\\n'\nexec(code)\nf0()"],
    }))
    .unwrap();
    let mut reg = weft_tools::Registry::new();
    reg.register(weft_tools::CommandTool::from_decl(decl, std::path::Path::new(".")).unwrap())
        .unwrap();
    let reg = Arc::new(reg);
    let spec = AgentSpec::parse("t.yaml", "name: t\nmode: react\n").unwrap();
    let model = Arc::new(ScriptedModel::new(
        "t",
        vec![
            ScriptedReply::tool_call("convert", json!({"x": 1})),
            ScriptedReply::text("It failed."),
        ],
    ));
    let agent = Agent::new(&spec, Arc::clone(&reg), model, &json!({}), &json!({})).unwrap();
    let rt = Runtime::builder(
        Arc::new(RamStore::new()),
        reg,
        spec.limits.clone(),
        None,
        None,
    )
    .build();
    let s = rt
        .run_agent(&agent, SessionInfo::default(), "Convert.", json!({}))
        .await
        .unwrap();
    assert_eq!(s.state.status(), SessionStatus::Completed);
    let to_model = s
        .state
        .history()
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap();
    let (content, is_error) = to_model;
    assert!(is_error);
    assert!(
        content.len() <= 2560,
        "{} bytes to the model: {content}",
        content.len()
    );
    assert!(
        content.contains("ValueError: the input has no field amount"),
        "{content}"
    );
    assert!(
        !content.contains("Traceback (most recent call last)"),
        "{content}"
    );
    // The event keeps the whole stderr.
    let (_, events) = weft_store::SessionLog::load(rt.store().as_ref(), &s.id)
        .await
        .unwrap();
    let stderr = events
        .iter()
        .find_map(|e| match &e.event {
            Event::ToolCallFinished {
                outcome: ToolOutcome::Error { error },
                ..
            } => error.detail["stderr"].as_str().map(str::to_owned),
            _ => None,
        })
        .unwrap();
    assert!(
        stderr.contains("Traceback (most recent call last)"),
        "{stderr}"
    );
    assert!(
        stderr.len() > 4 * content.len(),
        "{} vs {}",
        stderr.len(),
        content.len()
    );
}

/// A reply of calls with the given provider ids, each a `look` at `n`.
fn calls_with_ids(calls: &[(&str, u64)]) -> weft_model::ScriptedReply {
    let calls: Vec<serde_json::Value> = calls
        .iter()
        .map(|(id, n)| json!({"id": id, "name": "look", "arguments": {"n": n}}))
        .collect();
    serde_json::from_value(json!({ "tool_calls": calls })).unwrap()
}

/// Models send repeated and empty call ids: two calls of one reply named `same`, one named
/// nothing, and a later reply repeating `same`. Every call still runs once, gets its own id and
/// its own result, and each result goes back to the model beside its own call; the provider's
/// id is kept beside weft's.
#[tokio::test]
async fn repeated_and_empty_call_ids_each_get_their_own_result() {
    use weft_core::model::Message;
    let h = Harness::new(
        "name: test\nmode: react\n",
        vec![TestTool::new(
            "look",
            "general",
            json!({"type": "object"}),
            |args| Ok(json!({"seen": args["n"]})),
        )],
        script(vec![(
            Purpose::React,
            vec![
                calls_with_ids(&[("same", 1), ("same", 2), ("", 3)]),
                calls_with_ids(&[("same", 4), ("", 5)]),
                t("Looked five times."),
            ],
        )]),
        &json!({}),
    );
    let s = h.run("Look.", json!({})).await;
    assert_eq!(
        s.state.status(),
        SessionStatus::Completed,
        "{:?}",
        s.state.turn().error()
    );
    assert_eq!(h.calls.count("look"), 5);
    let events = h.events(&s.id).await;
    let mut started = Vec::new();
    let mut finished = Vec::new();
    let mut replied = Vec::new();
    for e in &events {
        match e {
            Event::ToolCallStarted { call_id, .. } => started.push(call_id.clone()),
            Event::ToolCallFinished { call_id, .. } => finished.push(call_id.clone()),
            Event::ModelReplied { reply, .. } => replied.extend(reply.tool_calls.clone()),
            _ => {}
        }
    }
    assert_eq!(started.len(), 5, "{started:?}");
    let distinct: std::collections::BTreeSet<&String> = started.iter().collect();
    assert_eq!(distinct.len(), 5, "{started:?}");
    let mut f = finished.clone();
    f.sort();
    let mut st = started.clone();
    st.sort();
    assert_eq!(f, st, "every started call finished exactly once");
    // The provider's ids are recorded beside weft's: a usable one is kept as the call's id.
    let providers: Vec<(&str, Option<&str>)> = replied
        .iter()
        .map(|c| (c.id.as_str(), c.provider_id.as_deref()))
        .collect();
    assert_eq!(providers[0], ("same", None));
    for (k, want) in [(1, "same"), (2, ""), (3, "same"), (4, "")] {
        assert_eq!(providers[k].1, Some(want), "{providers:?}");
        assert!(!providers[k].0.is_empty());
    }
    // Each result went back to the model under its call's id, beside that call.
    let reqs = h.requests.of(Purpose::React);
    assert_eq!(reqs.len(), 3);
    let last: Vec<Message> = reqs[2].messages.iter().cloned().collect();
    let mut answered = 0;
    for m in &last {
        if let Message::Assistant { tool_calls, .. } = m {
            for c in tool_calls {
                let results: Vec<&String> = last
                    .iter()
                    .filter_map(|r| match r {
                        Message::Tool {
                            call_id, content, ..
                        } if *call_id == c.id => Some(content),
                        _ => None,
                    })
                    .collect();
                assert_eq!(results.len(), 1, "call {} has {results:?}", c.id);
                let seen: serde_json::Value = serde_json::from_str(results[0]).unwrap();
                assert_eq!(seen["seen"], c.arguments["n"], "call {}", c.id);
                answered += 1;
            }
        }
    }
    assert_eq!(answered, 5);
    assert!(
        !request_has_interrupted(&reqs[2]),
        "no call was shown as interrupted"
    );
}

fn request_has_interrupted(r: &weft_core::model::ModelRequest) -> bool {
    common::request_text(r).contains("interrupted")
}

/// A person's approval belongs to one call: a later call that repeats its id (a server that
/// numbers every reply's calls from `call_0`) is asked about again.
#[tokio::test]
async fn a_repeated_call_id_does_not_inherit_an_approval() {
    let h = Harness::new(
        "name: test\nmode: react\n",
        vec![TestTool::returning("pay", json!({"paid": true})).requiring_approval()],
        script(vec![(
            Purpose::React,
            vec![
                serde_json::from_value(json!({"tool_calls": [
                    {"id": "call_0", "name": "pay", "arguments": {"amount": 1}}]}))
                .unwrap(),
                serde_json::from_value(json!({"tool_calls": [
                    {"id": "call_0", "name": "pay", "arguments": {"amount": 1000}}]}))
                .unwrap(),
                t("Paid."),
            ],
        )]),
        &json!({}),
    );
    let mut s = h.run("Pay.", json!({})).await;
    assert_eq!(s.state.status(), SessionStatus::WaitingForUser);
    h.reply(&mut s, "approve").await;
    assert_eq!(
        s.state.status(),
        SessionStatus::WaitingForUser,
        "the second payment ran without an approval"
    );
    assert_eq!(h.calls.count("pay"), 1);
    h.reply(&mut s, "deny: too much").await;
    assert_eq!(s.state.status(), SessionStatus::Completed);
    assert_eq!(h.calls.count("pay"), 1);
}
