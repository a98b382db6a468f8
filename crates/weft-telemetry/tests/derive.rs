//! Spans derived from logs that weft's own examples wrote (`tests/logs/`, made with the
//! tutorial's scripted agents).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};

use weft_core::Envelope;
use weft_telemetry::{Attr, Deriver, Kind, Options, Span};

fn log(name: &str) -> Vec<Envelope> {
    let path = format!("{}/tests/logs/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn spans(name: &str) -> Vec<Span> {
    Deriver::derive(name, Options::default(), &log(name))
}

fn by_name<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn parent_of<'a>(spans: &'a [Span], s: &Span) -> Option<&'a Span> {
    spans.iter().find(|p| Some(p.span_id) == s.parent)
}

#[test]
fn a_plan_run_nests_tool_calls_in_steps_in_waves_in_the_turn() {
    let s = spans("plan-1");
    let turns = by_name(&s, "invoke_agent outing-planner");
    assert_eq!(turns.len(), 1);
    let turn = turns[0];
    assert_eq!(turn.parent, None);
    assert_eq!(turn.kind, Kind::Internal);
    assert_eq!(turn.str_attr("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(turn.str_attr("gen_ai.conversation.id"), Some("plan-1"));
    assert_eq!(turn.str_attr("weft.session.id"), Some("plan-1"));
    assert_eq!(turn.attr("weft.epoch"), Some(&Attr::Int(1)));
    assert!(matches!(turn.attr("gen_ai.usage.input_tokens"), Some(Attr::Int(n)) if *n > 0));

    let tool = by_name(&s, "execute_tool getWeather")[0];
    assert_eq!(tool.kind, Kind::Internal);
    assert_eq!(tool.str_attr("gen_ai.tool.name"), Some("getWeather"));
    assert_eq!(tool.str_attr("gen_ai.tool.call.id"), Some("weather#1"));
    assert_eq!(tool.str_attr("weft.step.id"), Some("weather"));
    assert_eq!(tool.attr("weft.wave"), Some(&Attr::Int(1)));
    assert!(tool.end_ms - tool.start_ms >= 400, "{tool:?}");
    let step = parent_of(&s, tool).unwrap();
    assert_eq!(step.name, "weft.step weather");
    assert_eq!(step.str_attr("weft.step.status"), Some("completed"));
    let wave = parent_of(&s, step).unwrap();
    assert_eq!(wave.name, "weft.wave 1");
    assert_eq!(parent_of(&s, wave).unwrap().span_id, turn.span_id);

    // Every model call is a `chat` span under the turn, or under the review it served.
    let chats: Vec<_> = s.iter().filter(|x| x.name.starts_with("chat ")).collect();
    assert_eq!(chats.len(), 5);
    for c in &chats {
        assert_eq!(c.str_attr("gen_ai.operation.name"), Some("chat"));
        // v1.36's name unless the latest conventions are asked for.
        assert_eq!(c.str_attr("gen_ai.system"), Some("weft.scripted"));
        assert_eq!(c.attr("gen_ai.provider.name"), None);
        assert!(c.str_attr("gen_ai.request.model").is_some());
        assert!(
            matches!(c.attr("gen_ai.response.finish_reasons"), Some(Attr::StrList(v)) if v == &["stop"])
        );
        let p = parent_of(&s, c).unwrap();
        match c.str_attr("weft.purpose") {
            Some("review") => assert_eq!(p.name, "weft.review"),
            _ => assert_eq!(p.span_id, turn.span_id),
        }
    }
    let reviews = by_name(&s, "weft.review");
    assert_eq!(reviews.len(), 2);
    assert_eq!(
        reviews[1].str_attr("weft.review.decision"),
        Some("FINAL_RESPONSE")
    );
    // The skipped step is there, marked so, in its wave.
    let park = by_name(&s, "weft.step park")[0];
    assert_eq!(park.str_attr("weft.step.status"), Some("skipped"));
    // Nothing is left without its parent, and every span is in the session's trace.
    for x in &s {
        assert_eq!(x.trace_id, turn.trace_id);
        if let Some(p) = x.parent {
            assert!(s.iter().any(|y| y.span_id == p), "{} has no parent", x.name);
        }
        assert!(x.end_ms >= x.start_ms);
    }
}

#[test]
fn a_react_turn_has_its_model_calls_and_tool_calls_side_by_side() {
    let s = spans("react-1");
    let turn = by_name(&s, "invoke_agent weather-chat")[0];
    let tools = by_name(&s, "execute_tool getWeather");
    assert_eq!(tools.len(), 2);
    for t in &tools {
        assert_eq!(t.parent, Some(turn.span_id));
    }
    let chats: Vec<_> = s.iter().filter(|x| x.name.starts_with("chat ")).collect();
    assert_eq!(chats.len(), 2);
    assert!(chats.iter().all(|c| c.parent == Some(turn.span_id)));
    assert_eq!(s.len(), 5);
}

#[test]
fn a_workflow_is_invoke_workflow_with_its_steps_and_the_wait_between_turns() {
    let s = spans("wf-1");
    let turns = by_name(&s, "invoke_workflow outing-desk");
    assert_eq!(
        turns.len(),
        2,
        "{:#?}",
        s.iter().map(|x| &x.name).collect::<Vec<_>>()
    );
    assert_eq!(
        turns[0].str_attr("gen_ai.workflow.name"),
        Some("outing-desk")
    );
    assert_eq!(turns[1].attr("weft.epoch"), Some(&Attr::Int(2)));
    let wait = by_name(&s, "weft.wait")[0];
    assert_eq!(wait.parent, Some(turns[0].span_id));
    assert_eq!(wait.str_attr("weft.wait.kind"), Some("message"));
    let suggest = by_name(&s, "weft.workflow_step suggest")[0];
    assert_eq!(suggest.parent, Some(turns[1].span_id));
    for t in by_name(&s, "execute_tool findPark")
        .into_iter()
        .chain(by_name(&s, "execute_tool getWeather"))
    {
        assert_eq!(t.parent, Some(suggest.span_id));
    }
}

#[test]
fn ids_depend_on_the_session_and_the_event_only() {
    for name in ["plan-1", "react-1", "wf-1", "refund-1"] {
        let a = spans(name);
        let b = spans(name);
        assert_eq!(a, b);
        let ids: HashSet<_> = a.iter().map(|s| s.span_id).collect();
        assert_eq!(ids.len(), a.len(), "{name}: a span id given twice");
    }
    let other = Deriver::derive("another", Options::default(), &log("react-1"));
    assert_ne!(other[0].trace_id, spans("react-1")[0].trace_id);
}

/// A process that takes a session over at any event feeds the log before it without giving
/// out those spans: the two processes together give every span once.
#[test]
fn a_session_continued_at_any_event_gives_each_span_once() {
    for name in ["plan-1", "react-1", "wf-1", "refund-1"] {
        let events = log(name);
        let whole = spans(name);
        for cut in 0..events.len() {
            let mut first = Deriver::new(name, Options::default());
            let mut got: Vec<Span> = events[..cut].iter().flat_map(|e| first.push(e)).collect();
            let mut second = Deriver::new(name, Options::default());
            second.skip_through(events[cut.saturating_sub(1)].seq * u64::from(cut > 0));
            got.extend(events.iter().flat_map(|e| second.push(e)));
            let count: HashMap<_, usize> = got.iter().fold(HashMap::new(), |mut m, s| {
                *m.entry(s.span_id).or_default() += 1;
                m
            });
            assert!(count.values().all(|n| *n == 1), "{name} cut at {cut}");
            assert_eq!(got.len(), whole.len(), "{name} cut at {cut}");
        }
    }
}

#[test]
fn contents_only_when_switched_on_and_through_the_redactor() {
    let off = spans("react-1");
    assert!(
        off.iter()
            .all(|s| s.attr("gen_ai.output.messages").is_none()
                && s.attr("gen_ai.tool.call.arguments").is_none()
                && s.attr("gen_ai.input.messages").is_none())
    );
    let opts = Options {
        capture_content: true,
        redact: Some(std::sync::Arc::new(|s: &mut String| {
            *s = s.replace("Lisbon", "[REDACTED]");
        })),
        ..Options::default()
    };
    let on = Deriver::derive("react-1", opts, &log("react-1"));
    let text = format!("{on:?}");
    assert!(!text.contains("Lisbon"), "{text}");
    assert!(text.contains("[REDACTED]"));
    let tool = on
        .iter()
        .find(|s| s.name == "execute_tool getWeather")
        .unwrap();
    assert!(tool.str_attr("gen_ai.tool.call.arguments").is_some());
    assert!(tool.str_attr("gen_ai.tool.call.result").is_some());
    let turn = on
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .unwrap();
    assert!(
        turn.str_attr("gen_ai.input.messages")
            .unwrap()
            .contains("sunnier")
    );
}

#[test]
fn the_provider_comes_from_the_agent_files_model() {
    use serde_json::json;
    use weft_telemetry::provider_of;
    assert_eq!(
        provider_of(Some(&json!("openai:gpt-4o-mini"))).as_deref(),
        Some("openai")
    );
    assert_eq!(
        provider_of(Some(&json!({"provider": "anthropic", "name": "claude"}))).as_deref(),
        Some("anthropic")
    );
    assert_eq!(provider_of(Some(&json!("scripted:x.yaml"))), None);
    assert_eq!(provider_of(None), None);
}

#[test]
fn the_latest_conventions_name_the_provider_gen_ai_provider_name() {
    let opts = Options {
        latest: true,
        ..Options::default()
    };
    let s = Deriver::derive("react-1", opts, &log("react-1"));
    let chat = s.iter().find(|x| x.name.starts_with("chat ")).unwrap();
    assert_eq!(chat.str_attr("gen_ai.provider.name"), Some("weft.scripted"));
    assert_eq!(chat.attr("gen_ai.system"), None);
}

/// A run created with a `traceparent` (its `RunStarted` marker records it, before the turn it
/// starts, or just after it for a new session) puts its turn in the caller's trace, under the
/// caller's span, and everything in the turn with it.
#[test]
fn a_runs_traceparent_parents_its_turn_and_only_that_turn() {
    let mut events = log("wf-1");
    let second_turn = events
        .iter()
        .position(|e| matches!(e.event, weft_core::Event::UserReplied { .. }))
        .unwrap();
    let mut marker = events[second_turn].clone();
    marker.event = weft_core::Event::RunStarted {
        run_id: "r2".into(),
        after: marker.seq - 1,
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        metadata: serde_json::Value::Null,
    };
    events.insert(second_turn, marker);
    // The first run's marker follows the turn it starts, as a new session's does.
    let mut first = events[1].clone();
    assert!(matches!(first.event, weft_core::Event::TurnStarted { .. }));
    first.event = weft_core::Event::RunStarted {
        run_id: "r1".into(),
        after: 0,
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
        metadata: serde_json::Value::Null,
    };
    events.insert(2, first);
    for (k, e) in events.iter_mut().enumerate() {
        e.seq = k as u64 + 1;
    }
    let s = Deriver::derive("wf-1", Options::default(), &events);
    let turns = by_name(&s, "invoke_workflow outing-desk");
    assert_eq!(turns.len(), 2);
    let caller = [
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47,
        0x36,
    ];
    assert_eq!(turns[1].trace_id, caller);
    assert_eq!(
        turns[1].parent,
        Some([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
    );
    assert!(turns[1].parent_remote);
    let first_caller = [
        0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31,
        0x9c,
    ];
    assert_eq!(turns[0].trace_id, first_caller);
    assert_eq!(
        turns[0].parent,
        Some([0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31])
    );
    // The first turn's wait is in the first turn's trace; the second turn's spans in the second
    // caller's.
    assert_eq!(by_name(&s, "weft.wait")[0].trace_id, turns[0].trace_id);
    let suggest = by_name(&s, "weft.workflow_step suggest")[0];
    assert_eq!(suggest.trace_id, caller);
    assert!(
        s.iter()
            .filter(|x| x.first_seq > turns[1].first_seq)
            .all(|x| x.trace_id == caller)
    );
    // How each turn ended.
    assert_eq!(turns[0].str_attr("weft.turn.outcome"), Some("waiting"));
    assert_eq!(turns[1].str_attr("weft.turn.outcome"), Some("completed"));
}

/// The points a whole log gives, as one process would record them.
fn points(name: &str, events: &[Envelope], latest: bool) -> Vec<weft_telemetry::Point> {
    let opts = Options {
        latest,
        ..Options::default()
    };
    let mut d = Deriver::new(name, opts);
    let mut r = weft_telemetry::Recorder::new(latest);
    events
        .iter()
        .flat_map(|e| {
            let closed = d.push(e);
            r.push(e, &closed)
        })
        .collect()
}

#[test]
fn metrics_come_from_the_spans_with_the_conventions_names() {
    use weft_telemetry::Instrument;
    let p = points("plan-1", &log("plan-1"), true);
    let of = |i: Instrument| p.iter().filter(|x| x.instrument == i).collect::<Vec<_>>();
    // Two token points (input, output) per model call, typed.
    let tokens = of(Instrument::TokenUsage);
    assert_eq!(tokens.len(), 10);
    assert!(tokens.iter().all(|t| {
        t.attributes
            .iter()
            .any(|(k, v)| *k == "gen_ai.token.type" && (v == "input" || v == "output"))
    }));
    assert!(tokens.iter().all(|t| {
        t.attributes
            .iter()
            .any(|(k, v)| *k == "gen_ai.provider.name" && v == "weft.scripted")
    }));
    // Durations of model calls, tool calls and the turn, by operation.
    let durations = of(Instrument::OperationDuration);
    let ops = |op: &str| {
        durations
            .iter()
            .filter(|d| {
                d.attributes
                    .iter()
                    .any(|(k, v)| *k == "gen_ai.operation.name" && v == op)
            })
            .count()
    };
    assert_eq!(ops("chat"), 5);
    assert_eq!(ops("invoke_agent"), 1);
    assert!(ops("execute_tool") >= 2);
    let tool = durations
        .iter()
        .find(|d| {
            d.attributes
                .contains(&("gen_ai.tool.name", "getWeather".into()))
        })
        .unwrap();
    assert!(tool.value >= 0.4, "{tool:?}");
    assert_eq!(of(Instrument::Turns).len(), 1);
    assert_eq!(
        of(Instrument::Turns)[0].attributes,
        vec![("weft.turn.outcome", "completed".to_owned())]
    );
    assert!(of(Instrument::Takeovers).is_empty());
    // The same log recorded by v1.36's names.
    let old = points("plan-1", &log("plan-1"), false);
    assert!(
        old.iter()
            .filter(|x| x.instrument == Instrument::TokenUsage)
            .all(|t| t.attributes.iter().any(|(k, _)| *k == "gen_ai.system"))
    );
}

/// A wait is counted when it begins; an answer taken by a new lease holder is no takeover,
/// but a running session continued under a new epoch is one, counted once.
#[test]
fn waits_and_takeovers_are_counted_from_the_events() {
    use weft_telemetry::Instrument;
    let wf = points("wf-1", &log("wf-1"), false);
    let waits: Vec<_> = wf
        .iter()
        .filter(|p| p.instrument == Instrument::Waits)
        .collect();
    assert_eq!(waits.len(), 1);
    assert_eq!(
        waits[0].attributes,
        vec![("weft.wait.kind", "message".to_owned())]
    );
    assert!(wf.iter().all(|p| p.instrument != Instrument::Takeovers));
    // react-1 taken over after its model's first reply: its later events carry epoch 2.
    let mut events = log("react-1");
    let cut = events
        .iter()
        .position(|e| matches!(e.event, weft_core::Event::ModelReplied { .. }))
        .unwrap()
        + 1;
    for e in &mut events[cut..] {
        e.epoch = 2;
    }
    let p = points("react-1", &events, false);
    assert_eq!(
        p.iter()
            .filter(|x| x.instrument == Instrument::Takeovers)
            .count(),
        1
    );
    // The second process, which fed the log before it without recording, counts it too, once;
    // the first process did not.
    let mut d = Deriver::new("react-1", Options::default());
    let mut r = weft_telemetry::Recorder::new(false);
    let first: Vec<_> = events[..cut]
        .iter()
        .flat_map(|e| {
            let c = d.push(e);
            r.push(e, &c)
        })
        .collect();
    assert!(first.iter().all(|x| x.instrument != Instrument::Takeovers));
    let mut d = Deriver::new("react-1", Options::default());
    let mut r = weft_telemetry::Recorder::new(false);
    d.skip_through(events[cut - 1].seq);
    r.skip_through(events[cut - 1].seq);
    let second: Vec<_> = events
        .iter()
        .flat_map(|e| {
            let c = d.push(e);
            r.push(e, &c)
        })
        .collect();
    assert_eq!(
        second
            .iter()
            .filter(|x| x.instrument == Instrument::Takeovers)
            .count(),
        1
    );
    // Between them, every model call's tokens once.
    let tokens = |v: &[weft_telemetry::Point]| {
        v.iter()
            .filter(|x| x.instrument == Instrument::TokenUsage)
            .count()
    };
    assert_eq!(tokens(&first) + tokens(&second), tokens(&p));
}
