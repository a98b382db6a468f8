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
        assert_eq!(c.str_attr("gen_ai.provider.name"), Some("weft.scripted"));
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
