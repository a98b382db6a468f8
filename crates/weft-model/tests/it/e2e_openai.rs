//! End-to-end calls against a real OpenAI-compatible server. They need
//! `WEFT_TEST_OPENAI_BASE_URL` (`scripts/llm-server start` prints the line to export);
//! `WEFT_TEST_OPENAI_MODEL` names the model (default `smollm2`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use weft_model::{
    DeltaSink, Message, ModelError, ModelRequest, Purpose, SharedModel, ToolDef, from_spec_with_env,
};

fn server_model(stream: bool) -> Option<SharedModel> {
    let url = common::service_var("WEFT_TEST_OPENAI_BASE_URL");
    let name = std::env::var("WEFT_TEST_OPENAI_MODEL").unwrap_or_else(|_| "smollm2".into());
    let spec = json!({"provider": "openai", "name": name, "base_url": url, "api_key": "none",
        "stream": if stream { json!("auto") } else { json!(false) }, "timeout": 600, "max_retries": 1});
    Some(from_spec_with_env(&spec, std::path::Path::new("."), &|k| std::env::var(k).ok()).unwrap())
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        purpose: Purpose::React,
        call_index: 0,
        purpose_index: 0,
        messages: messages.into(),
        tools: vec![],
        response_schema: None,
        exact_schema: None,
        max_tokens: Some(128),
        temperature: Some(0.0),
    }
}

/// A typed error a small model may cause; anything else fails the test.
fn assert_clean_error(e: &ModelError) {
    assert!(
        matches!(
            e,
            ModelError::Malformed { .. } | ModelError::ContextLength { .. }
        ),
        "unexpected error from the server: {e:?}"
    );
}

/// The model calls the offered tool (llama.cpp shows it the tools because `tool_choice` is
/// sent; streamed, the server's empty reply makes weft fall back to a plain call), and the
/// conversation with the call and its result is accepted by the server.
#[tokio::test]
async fn needs_llm_a_tool_call_and_its_result_go_round_trip() {
    for stream in [false, true] {
        let Some(m) = server_model(stream) else {
            return;
        };
        let mut req = request(vec![
            Message::System {
                content: "You are a helpful assistant. Use tools when they help.".into(),
            },
            Message::User {
                content: "What is the weather in Paris?".into(),
            },
        ]);
        req.tools = vec![ToolDef {
            name: "get_weather".into(),
            description: "Get the current weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }];
        let seen = Arc::new(Mutex::new(String::new()));
        let s2 = seen.clone();
        let sink: DeltaSink = Arc::new(move |d: &str| s2.lock().unwrap().push_str(d));
        let started = Instant::now();
        match m.complete_boxed(&req, Some(sink)).await {
            Ok(reply) => {
                eprintln!(
                    "stream={stream}: {:.1} s, text {:?}, tool calls {:?}, usage {:?}",
                    started.elapsed().as_secs_f64(),
                    reply.content,
                    reply.tool_calls,
                    reply.usage
                );
                assert!(reply.usage.input_tokens > 0, "{:?}", reply.usage);
                assert!(reply.usage.output_tokens > 0, "{:?}", reply.usage);
                assert!(
                    !reply.tool_calls.is_empty(),
                    "the model called no tool: {reply:?}"
                );
                for c in &reply.tool_calls {
                    assert_eq!(c.name, "get_weather");
                    assert!(!c.id.is_empty());
                }
                if stream {
                    assert_eq!(*seen.lock().unwrap(), reply.content);
                } else {
                    assert!(seen.lock().unwrap().is_empty());
                }
                req.messages.push(Message::Assistant {
                    content: reply.content.clone(),
                    tool_calls: reply.tool_calls.clone(),
                });
                for c in &reply.tool_calls {
                    req.messages.push(Message::Tool {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        content: "{\"weather\": \"sunny, 21 C\"}".into(),
                        is_error: false,
                    });
                }
                let second = m.complete_boxed(&req, None).await.unwrap_or_else(|e| {
                    panic!("the server refused the conversation with the tool result: {e}")
                });
                eprintln!("stream={stream}: after the result: {second:?}");
                assert!(second.usage.input_tokens > reply.usage.input_tokens);
            }
            Err(e) => panic!("the call failed: {e}"),
        }
    }
}

#[tokio::test]
async fn needs_llm_a_structured_output_call() {
    let Some(m) = server_model(false) else { return };
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"},
        "country": {"type": "string"}}, "required": ["city", "country"]});
    let mut req = request(vec![
        Message::System {
            content: "You extract places from text.".into(),
        },
        Message::User {
            content: "I flew to Paris, France last week.".into(),
        },
    ]);
    req.purpose = Purpose::Plan;
    req.response_schema = Some(schema.clone());
    let started = Instant::now();
    match m.complete_boxed(&req, None).await {
        Ok(reply) => {
            eprintln!(
                "structured: {:.1} s, {:?}, usage {:?}",
                started.elapsed().as_secs_f64(),
                reply.content,
                reply.usage
            );
            let v: Value = serde_json::from_str(&reply.content).unwrap();
            assert!(jsonschema::is_valid(&schema, &v), "{v}");
            assert!(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0);
        }
        Err(e) => {
            eprintln!(
                "structured: clean error after {:.1} s: {e}",
                started.elapsed().as_secs_f64()
            );
            assert_clean_error(&e);
        }
    }
}

#[tokio::test]
async fn needs_llm_a_real_run_recorded_replays_the_same() {
    let url = common::service_var("WEFT_TEST_OPENAI_BASE_URL");
    let dir = tempfile::tempdir().unwrap();
    let tape = dir.path().join("real.json").display().to_string();
    let build = |mode: &str| {
        let spec = json!({"provider": "openai", "name": "smollm2", "base_url": url, "api_key": "none", "max_retries": 1});
        let cassette = format!("{mode}:{tape}");
        from_spec_with_env(&spec, std::path::Path::new("."), &move |k| match k {
            "WEFT_CASSETTE" => Some(cassette.clone()),
            _ => None,
        })
        .unwrap()
    };
    let req = request(vec![Message::User {
        content: "Say hello in French.".into(),
    }]);
    let recorded = build("record").complete_boxed(&req, None).await.unwrap();
    let replayed = build("replay").complete_boxed(&req, None).await.unwrap();
    assert_eq!(replayed, recorded);
    assert!(recorded.usage.input_tokens > 0);
}
