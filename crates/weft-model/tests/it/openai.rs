//! Wire-level tests of the OpenAI-compatible provider against a local server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Reply, chat, config, request, serve, sink, weather_tool};
use serde_json::{Value, json};
use weft_model::{
    Message, Model, ModelError, OpenAiModel, ProviderKind, SchemaWire, ToolCall, from_spec_with_env,
};

fn completion(content: Value, tool_calls: Option<Value>, usage: Value) -> Value {
    let mut msg = json!({"role": "assistant", "content": content});
    if let Some(t) = tool_calls {
        msg["tool_calls"] = t;
    }
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}], "usage": usage})
}

fn model(url: &str) -> OpenAiModel {
    OpenAiModel::new(config(
        ProviderKind::OpenAi,
        "gpt-4o-mini",
        &format!("{url}/v1"),
    ))
    .unwrap()
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    format!(
        "data: {}",
        json!({"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

#[tokio::test]
async fn plain_reply_sends_the_expected_request_and_costs_tokens() {
    let server = serve(vec![Reply::json(completion(
        json!("Hello there"),
        None,
        json!({"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200,
            "prompt_tokens_details": {"cached_tokens": 400}}),
    ))])
    .await;
    let m = model(&server.url());
    let mut req = chat("Be brief.", "Hi");
    req.tools = vec![weather_tool()];
    req.temperature = Some(0.5);
    req.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![ToolCall {
            id: "call_a".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Oslo"}),
            provider_id: None,
        }],
    });
    req.messages.push(Message::Tool {
        call_id: "call_a".into(),
        name: "get_weather".into(),
        content: "rain".into(),
        is_error: false,
    });
    let reply = m.complete(&req, None).await.unwrap();
    assert_eq!(reply.content, "Hello there");
    assert_eq!(reply.model, "gpt-4o-mini-2024-07-18");
    assert_eq!(reply.usage.input_tokens, 1000);
    assert_eq!(reply.usage.output_tokens, 200);
    assert_eq!(reply.usage.cache_read_tokens, 400);
    // 600 plain input at 0.15, 400 cached at 0.075, 200 output at 0.60 per million.
    let expected = (600.0 * 0.15 + 400.0 * 0.075 + 200.0 * 0.60) / 1e6;
    assert!((reply.usage.cost_usd.unwrap() - expected).abs() < 1e-12);

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].headers["authorization"], "Bearer test-key");
    assert_eq!(
        seen[0].body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "call_a", "content": "rain"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "tool_choice": "auto",
            "temperature": 0.5
        })
    );
    server.stop().await;
}

#[tokio::test]
async fn several_tool_calls_in_one_reply() {
    let server = serve(vec![Reply::json(completion(
        Value::Null,
        Some(json!([
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}},
            {"id": "call_3", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}
        ])),
        json!({"prompt_tokens": 10, "completion_tokens": 5}),
    ))])
    .await;
    let reply = model(&server.url())
        .complete(&chat("s", "weather?"), None)
        .await
        .unwrap();
    assert_eq!(reply.content, "");
    let got: Vec<(&str, &str, &Value)> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        got,
        vec![
            ("call_1", "get_weather", &json!({"city": "Oslo"})),
            ("call_2", "get_weather", &json!({"city": "Rome"})),
            // Unparsable arguments are kept as text for the runtime to report.
            ("call_3", "get_weather", &json!("{not json")),
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn streamed_text_reaches_the_sink_in_order() {
    let server = serve(vec![Reply::sse(&[
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": "The "}), None),
        chunk(json!({"content": "sky "}), None),
        chunk(json!({"content": "is blue."}), None),
        chunk(json!({}), Some("stop")),
        format!(
            "data: {}",
            json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}})
        ),
        "data: [DONE]".into(),
    ])])
    .await;
    let (s, got) = sink();
    let reply = model(&server.url())
        .complete(&chat("s", "sky?"), Some(s))
        .await
        .unwrap();
    assert_eq!(*got.lock().unwrap(), vec!["The ", "sky ", "is blue."]);
    assert_eq!(reply.content, "The sky is blue.");
    assert_eq!(reply.usage.input_tokens, 7);
    assert_eq!(reply.usage.output_tokens, 4);
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    let body = &server.seen()[0].body;
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    server.stop().await;
}

#[tokio::test]
async fn streamed_tool_call_fragments_are_assembled_by_index() {
    let tc = |index: u64, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut f = json!({"arguments": args});
        if let Some(n) = name {
            f["name"] = json!(n);
        }
        let mut c = json!({"index": index, "function": f});
        if let Some(i) = id {
            c["id"] = json!(i);
            c["type"] = json!("function");
        }
        chunk(json!({"tool_calls": [c]}), None)
    };
    let server = serve(vec![Reply::sse(&[
        tc(0, Some("call_x"), Some("get_weather"), ""),
        tc(0, None, None, "{\"ci"),
        tc(1, Some("call_y"), Some("get_weather"), "{\"city\""),
        tc(0, None, None, "ty\": \"Oslo\"}"),
        tc(1, None, None, ": \"Rome\"}"),
        chunk(json!({}), Some("tool_calls")),
        "data: [DONE]".into(),
    ])])
    .await;
    let (s, got) = sink();
    let reply = model(&server.url())
        .complete(&chat("s", "weather?"), Some(s))
        .await
        .unwrap();
    assert!(got.lock().unwrap().is_empty());
    assert_eq!(
        reply.tool_calls,
        vec![
            ToolCall {
                id: "call_x".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Oslo"}),
                provider_id: None,
            },
            ToolCall {
                id: "call_y".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Rome"}),
                provider_id: None,
            },
        ]
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    server.stop().await;
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]})
}

#[tokio::test]
async fn structured_output_retries_after_an_invalid_reply() {
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 3});
    let server = serve(vec![
        Reply::json(completion(
            json!("{\"answer\": \"four\"}"),
            None,
            usage.clone(),
        )),
        Reply::json(completion(
            json!("```json\n{\"answer\": 4}\n```"),
            None,
            usage,
        )),
    ])
    .await;
    let mut req = chat("Do sums.", "2+2?");
    req.response_schema = Some(schema());
    let reply = model(&server.url()).complete(&req, None).await.unwrap();
    assert_eq!(reply.content, "{\"answer\": 4}");
    assert_eq!(reply.usage.input_tokens, 20, "usage covers both attempts");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "reply", "schema": schema()}})
    );
    let msgs = seen[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        msgs[2],
        json!({"role": "assistant", "content": "{\"answer\": \"four\"}"})
    );
    let fix = msgs[3]["content"].as_str().unwrap();
    assert!(fix.contains("/answer") && fix.contains("integer"), "{fix}");
    server.stop().await;
}

#[tokio::test]
async fn structured_output_gives_up_after_two_fixes() {
    let usage = json!({"prompt_tokens": 1, "completion_tokens": 1});
    let server = serve(vec![
        Reply::json(completion(json!("nope"), None, usage.clone())),
        Reply::json(completion(json!("still no"), None, usage.clone())),
        Reply::json(completion(json!("{\"answer\": null}"), None, usage)),
    ])
    .await;
    let mut req = chat("s", "2+2?");
    req.response_schema = Some(schema());
    let e = model(&server.url()).complete(&req, None).await.unwrap_err();
    // The tokens of the three unusable replies are kept.
    assert_eq!(e.usage().input_tokens, 3);
    assert_eq!(e.usage().output_tokens, 3);
    match e {
        ModelError::Malformed { body, message, .. } => {
            assert_eq!(body, "{\"answer\": null}");
            assert!(message.contains("3 attempts"), "{message}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    assert_eq!(server.seen().len(), 3);
    server.stop().await;
}

#[tokio::test]
async fn rejected_response_format_falls_back_to_instructions() {
    let server = serve(vec![
        Reply::status(
            400,
            r#"{"error": {"message": "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."}}"#,
        ),
        Reply::json(completion(
            json!("{\"answer\": 4}"),
            None,
            json!({"prompt_tokens": 5, "completion_tokens": 2}),
        )),
        Reply::json(completion(
            json!("{\"answer\": 5}"),
            None,
            json!({"prompt_tokens": 5, "completion_tokens": 2}),
        )),
    ])
    .await;
    let m = model(&server.url());
    let mut req = chat("Do sums.", "2+2?");
    req.response_schema = Some(schema());
    assert_eq!(
        m.complete(&req, None).await.unwrap().content,
        "{\"answer\": 4}"
    );
    // The provider remembers: the next call goes straight to instructions.
    assert_eq!(
        m.complete(&req, None).await.unwrap().content,
        "{\"answer\": 5}"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen[0].body.get("response_format").is_some());
    for s in &seen[1..] {
        assert!(s.body.get("response_format").is_none());
        let sys = s.body["messages"][0]["content"].as_str().unwrap();
        assert!(
            sys.starts_with("Do sums.")
                && sys.contains("JSON Schema")
                && sys.contains("\"answer\""),
            "{sys}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn rate_limits_wait_for_retry_after() {
    let server = serve(vec![
        Reply::Full {
            status: 429,
            headers: vec![("retry-after", "1".into())],
            body: r#"{"error": {"message": "Rate limit reached"}}"#.into(),
        },
        Reply::json(completion(
            json!("ok"),
            None,
            json!({"prompt_tokens": 1, "completion_tokens": 1}),
        )),
    ])
    .await;
    let started = Instant::now();
    let reply = model(&server.url())
        .complete(&chat("s", "hi"), None)
        .await
        .unwrap();
    assert_eq!(reply.content, "ok");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].at.duration_since(seen[0].at) >= Duration::from_millis(950));
    assert!(started.elapsed() >= Duration::from_millis(950));
    server.stop().await;
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_with_the_body() {
    let body = r#"{"error": {"message": "The server had an error", "type": "server_error"}}"#;
    let server = serve(vec![
        Reply::status(500, body),
        Reply::status(500, body),
        Reply::status(500, body),
        Reply::json(completion(json!("never"), None, json!({}))),
    ])
    .await;
    let e = model(&server.url())
        .complete(&chat("s", "hi"), None)
        .await
        .unwrap_err();
    match &e {
        ModelError::Http {
            status, body: b, ..
        } => {
            assert_eq!(*status, 500);
            assert_eq!(b, body);
        }
        other => panic!("expected Http, got {other:?}"),
    }
    assert!(e.to_string().contains("The server had an error"));
    // max_retries is 2: one call and two retries.
    assert_eq!(server.seen().len(), 3);
    server.stop().await;
}

#[tokio::test]
async fn a_cut_stream_is_a_stream_cut() {
    let server = serve(vec![Reply::Chunks {
        chunks: vec![
            format!("{}\n\n", chunk(json!({"content": "Half a "}), None)),
            format!("{}\n\n", chunk(json!({"content": "sent"}), None)),
        ],
        cut: true,
    }])
    .await;
    let (s, got) = sink();
    let e = model(&server.url())
        .complete(&chat("s", "hi"), Some(s))
        .await
        .unwrap_err();
    assert!(matches!(e, ModelError::StreamCut { .. }), "{e:?}");
    assert_eq!(*got.lock().unwrap(), vec!["Half a ", "sent"]);
    server.stop().await;
}

#[tokio::test]
async fn a_stream_that_just_ends_is_a_stream_cut() {
    let server = serve(vec![Reply::sse(&[chunk(json!({"content": "Half"}), None)])]).await;
    let (s, _) = sink();
    let e = model(&server.url())
        .complete(&chat("s", "hi"), Some(s))
        .await
        .unwrap_err();
    assert!(matches!(e, ModelError::StreamCut { .. }), "{e:?}");
    server.stop().await;
}

#[tokio::test]
async fn malformed_json_is_reported_with_the_body() {
    let server = serve(vec![Reply::Full {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        body: "{\"choices\": [".into(),
    }])
    .await;
    let e = model(&server.url())
        .complete(&chat("s", "hi"), None)
        .await
        .unwrap_err();
    match e {
        ModelError::Malformed { body, .. } => assert_eq!(body, "{\"choices\": ["),
        other => panic!("expected Malformed, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn context_length_errors_are_typed() {
    let body = r#"{"error": {"message": "This model's maximum context length is 128000 tokens.", "code": "context_length_exceeded"}}"#;
    let server = serve(vec![Reply::status(400, body)]).await;
    let e = model(&server.url())
        .complete(&chat("s", "hi"), None)
        .await
        .unwrap_err();
    match e {
        ModelError::ContextLength { body: b, .. } => assert_eq!(b, body),
        other => panic!("expected ContextLength, got {other:?}"),
    }
    assert_eq!(server.seen().len(), 1, "not retried");
    server.stop().await;
}

#[tokio::test]
async fn without_a_system_role_instructions_go_in_the_first_user_message() {
    let server = serve(vec![Reply::json(completion(
        json!("ok"),
        None,
        json!({"prompt_tokens": 1, "completion_tokens": 1}),
    ))])
    .await;
    let mut cfg = config(
        ProviderKind::OpenAi,
        "gemma",
        &format!("{}/v1", server.url()),
    );
    cfg.system_role = false;
    cfg.api_key = None;
    let m = OpenAiModel::new(cfg).unwrap();
    let reply = m.complete(&chat("Be brief.", "Hi"), None).await.unwrap();
    assert_eq!(reply.usage.cost_usd, None, "no price known for gemma");
    let seen = server.seen();
    assert!(!seen[0].headers.contains_key("authorization"));
    assert_eq!(
        seen[0].body["messages"],
        json!([{"role": "user", "content": "[System instructions]\nBe brief.\n\nHi"}])
    );
    server.stop().await;
}

#[tokio::test]
async fn timeouts_and_refused_connections_are_typed() {
    let dropped = Arc::new(AtomicBool::new(false));
    let server = serve(vec![Reply::Hang {
        first: format!("{}\n\n", chunk(json!({"content": "thinking"}), None)),
        dropped: dropped.clone(),
    }])
    .await;
    let mut cfg = config(ProviderKind::OpenAi, "m", &format!("{}/v1", server.url()));
    cfg.timeout = Duration::from_millis(400);
    let (s, _) = sink();
    let e = OpenAiModel::new(cfg)
        .unwrap()
        .complete(&chat("s", "hi"), Some(s))
        .await
        .unwrap_err();
    assert!(matches!(e, ModelError::Timeout { .. }), "{e:?}");
    server.stop().await;

    // Nothing listens on the stopped server's port any more.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut cfg = config(
        ProviderKind::OpenAi,
        "m",
        &format!("http://127.0.0.1:{port}/v1"),
    );
    cfg.max_retries = 1;
    let e = OpenAiModel::new(cfg)
        .unwrap()
        .complete(&chat("s", "hi"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, ModelError::Transport { .. }), "{e:?}");
    assert!(e.is_retryable());
}

#[tokio::test]
async fn dropping_the_call_stops_the_request() {
    let dropped = Arc::new(AtomicBool::new(false));
    let server = serve(vec![Reply::Hang {
        first: format!("{}\n\n", chunk(json!({"content": "thinking"}), None)),
        dropped: dropped.clone(),
    }])
    .await;
    let m = model(&server.url());
    let (s, got) = sink();
    let req = chat("s", "hi");
    let call = m.complete(&req, Some(s));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err()
    );
    assert_eq!(*got.lock().unwrap(), vec!["thinking"]);
    // The server notices the closed connection and drops its body.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !dropped.load(Ordering::SeqCst) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(dropped.load(Ordering::SeqCst), "the server still streams");
    server.stop().await;
}

#[tokio::test]
async fn from_spec_builds_a_provider_from_a_mapping() {
    let server = serve(vec![Reply::json(completion(
        json!("mapped"),
        None,
        json!({"prompt_tokens": 1_000_000, "completion_tokens": 1_000_000}),
    ))])
    .await;
    let url = format!("{}/v1", server.url());
    let env = |k: &str| (k == "LOCAL_KEY").then(|| "local-secret".to_owned());
    let spec = json!({"provider": "openai", "name": "llama3", "base_url": url,
        "api_key_env": "LOCAL_KEY", "stream": false, "max_retries": 0,
        "prices": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}});
    let m = from_spec_with_env(&spec, std::path::Path::new("."), &env).unwrap();
    assert_eq!(m.name(), "openai:llama3");
    let (s, got) = sink();
    let reply = m
        .complete_boxed(
            &request(vec![Message::User {
                content: "x".into(),
            }]),
            Some(s),
        )
        .await
        .unwrap();
    assert_eq!(reply.content, "mapped");
    assert!(
        got.lock().unwrap().is_empty(),
        "stream: false sends no deltas"
    );
    assert_eq!(reply.usage.cost_usd, Some(3.0));
    let seen = server.seen();
    assert_eq!(seen[0].headers["authorization"], "Bearer local-secret");
    assert!(seen[0].body.get("stream").is_none());
    server.stop().await;

    let bad = json!({"provider": "openai", "name": "x", "base_ur": "http://x"});
    let e = from_spec_with_env(&bad, std::path::Path::new("."), &env)
        .err()
        .unwrap();
    assert!(matches!(e, ModelError::Config(_)));
    assert!(e.to_string().contains("`base_ur`"), "{e}");
    let e = from_spec_with_env(&json!("openai:"), std::path::Path::new("."), &env)
        .err()
        .unwrap();
    assert!(e.to_string().contains("model name"), "{e}");
}

#[tokio::test]
async fn a_stream_without_usage_gets_a_rough_count_and_no_cost() {
    let stream = || {
        Reply::sse(&[
            chunk(json!({"content": "twelve chars"}), None),
            chunk(json!({}), Some("stop")),
            "data: [DONE]".into(),
        ])
    };
    let server = serve(vec![stream(), stream()]).await;
    let (s, _) = sink();
    let without_tools = model(&server.url())
        .complete(&chat("s", "hi"), Some(s.clone()))
        .await
        .unwrap();
    assert_eq!(without_tools.usage.output_tokens, 3);
    assert!(without_tools.usage.input_tokens > 0);
    assert_eq!(without_tools.usage.cost_usd, None);
    assert!(without_tools.usage.estimated);
    let mut req = chat("s", "hi");
    req.tools = vec![weather_tool()];
    let with_tools = model(&server.url()).complete(&req, Some(s)).await.unwrap();
    // The tool definitions are part of the prompt estimate.
    assert!(
        with_tools.usage.input_tokens > without_tools.usage.input_tokens + 20,
        "{:?} vs {:?}",
        with_tools.usage,
        without_tools.usage
    );
    assert_eq!(
        serde_json::to_value(&with_tools.usage).unwrap()["usage_estimated"],
        true
    );
    server.stop().await;
}

#[tokio::test]
async fn a_server_error_about_response_format_also_falls_back() {
    // llama-cpp-python's answer to `type: json_schema`.
    let body = r#"{"error":{"message":"1 validation error: ('body', 'response_format', 'type') Input should be 'text' or 'json_object'","type":"internal_server_error"}}"#;
    let answer = || {
        Reply::json(completion(
            json!("{\"answer\": 1}"),
            None,
            json!({"prompt_tokens": 5, "completion_tokens": 2}),
        ))
    };
    let server = serve(vec![Reply::status(500, body), answer(), answer()]).await;
    let mut cfg = config(
        ProviderKind::OpenAi,
        "local",
        &format!("{}/v1", server.url()),
    );
    // Retries allowed, but the same request would always get the same answer.
    cfg.max_retries = 3;
    let mut req = chat("s", "1?");
    req.response_schema = Some(schema());
    let reply = OpenAiModel::new(cfg.clone())
        .unwrap()
        .complete(&req, None)
        .await
        .unwrap();
    assert_eq!(reply.content, "{\"answer\": 1}");
    // A new model of the same server starts with what was learned.
    OpenAiModel::new(cfg)
        .unwrap()
        .complete(&req, None)
        .await
        .unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "not retried, and learned once");
    assert_eq!(seen[2].body["response_format"]["type"], "json_object");
    // The server named `json_object`: ask with it and the schema, which the server enforces,
    // so the prompt carries only a hint to reply in JSON, not the schema.
    assert_eq!(
        seen[1].body["response_format"],
        json!({"type": "json_object", "schema": schema()})
    );
    let system = seen[1].body["messages"][0]["content"].as_str().unwrap();
    assert_eq!(
        system,
        "s\n\nReply with only a JSON value (no prose, no code fences)."
    );
    server.stop().await;
}

/// The schema is written into the prompt only when nothing on the wire carries it.
#[test]
fn the_schema_stays_out_of_the_prompt_when_the_server_constrains_the_reply() {
    let m = model("http://127.0.0.1:9");
    let mut req = chat("Do sums.", "2+2?");
    req.response_schema = Some(schema());
    let hint = "Do sums.\n\nReply with only a JSON value (no prose, no code fences).";
    for (wire, format) in [
        (
            SchemaWire::JsonSchema,
            json!({"type": "json_schema", "json_schema": {"name": "reply", "schema": schema()}}),
        ),
        (
            SchemaWire::JsonObject,
            json!({"type": "json_object", "schema": schema()}),
        ),
    ] {
        let body = m.request_body(&req, false, wire);
        assert_eq!(body["response_format"], format, "{wire:?}");
        assert_eq!(body["messages"][0]["content"], hint, "{wire:?}");
        assert_eq!(body["messages"][1]["content"], "2+2?", "{wire:?}");
        assert!(!body["messages"].to_string().contains("\\\"answer\\\""));
    }
    let body = m.request_body(&req, false, SchemaWire::Prompt);
    assert!(body.get("response_format").is_none(), "{body}");
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Do sums.\n\nReply with only a JSON value")
            && system.contains("JSON Schema")
            && system.contains(&serde_json::to_string(&schema()).unwrap()),
        "{system}"
    );
    // Without a schema, no hint either.
    req.response_schema = None;
    let body = m.request_body(&req, false, SchemaWire::JsonSchema);
    assert_eq!(body["messages"][0]["content"], "Do sums.");
}

/// A request larger than `context_size` is refused with what takes the room, and the server
/// never sees it; one that fits goes out.
#[tokio::test]
async fn a_request_that_cannot_fit_the_context_is_refused_before_it_is_sent() {
    let server = serve(vec![Reply::json(completion(
        json!("{\"answer\": 4}"),
        None,
        json!({"prompt_tokens": 30, "completion_tokens": 2}),
    ))])
    .await;
    let mut cfg = config(
        ProviderKind::OpenAi,
        "local",
        &format!("{}/v1", server.url()),
    );
    cfg.context_size = Some(100);
    cfg.max_tokens = Some(90);
    let mut req = chat(&"Be careful. ".repeat(10), "2+2?");
    req.tools = vec![weather_tool()];
    req.response_schema = Some(schema());
    let m = OpenAiModel::new(cfg.clone()).unwrap();
    let e = m.complete(&req, None).await.unwrap_err();
    assert!(matches!(e, ModelError::WouldNotFit { .. }), "{e:?}");
    assert!(!e.is_retryable());
    let msg = e.to_string();
    for part in [
        "the model's context is 100 (`context_size`",
        "max_tokens (kept for the reply) ~90",
        "system prompt ~44",
        "tools offered (1 tool) ~48",
        "conversation (1 message) ~1",
        "schema in prompt (the server constrains the reply to the schema) ~0",
        "raise `context_size`",
    ] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    assert!(server.seen().is_empty(), "nothing was sent");
    // With room for it, the same request goes out.
    cfg.context_size = Some(2048);
    let reply = OpenAiModel::new(cfg)
        .unwrap()
        .complete(&req, None)
        .await
        .unwrap();
    assert_eq!(reply.content, "{\"answer\": 4}");
    assert_eq!(server.seen().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn tool_choice_and_the_length_field_follow_the_configuration() {
    let ok = || {
        Reply::json(completion(
            json!("ok"),
            None,
            json!({"prompt_tokens": 1, "completion_tokens": 1}),
        ))
    };
    let server = serve(vec![ok(), ok(), ok()]).await;
    let url = format!("{}/v1", server.url());
    let mut with_tools = chat("s", "hi");
    with_tools.tools = vec![weather_tool()];
    with_tools.max_tokens = Some(64);
    for spec in [
        json!({"provider": "openai", "name": "m", "base_url": url, "api_key": "none", "tool_choice": "required", "temperature": 0,
            "max_tokens_field": "max_completion_tokens"}),
        json!({"provider": "openai", "name": "m", "base_url": url, "api_key": "none", "tool_choice": "omit"}),
    ] {
        let m = from_spec_with_env(&spec, std::path::Path::new("."), &|_| None).unwrap();
        m.complete_boxed(&with_tools, None).await.unwrap();
    }
    // Without tools no `tool_choice` is sent (servers reject one without tools).
    let m = from_spec_with_env(
        &json!({"provider": "openai", "name": "m", "base_url": url, "api_key": "none"}),
        std::path::Path::new("."),
        &|_| None,
    )
    .unwrap();
    m.complete_boxed(&chat("s", "hi"), None).await.unwrap();
    let seen = server.seen();
    assert_eq!(seen[0].body["tool_choice"], "required");
    assert_eq!(seen[0].body["max_completion_tokens"], 64);
    assert!(seen[0].body.get("max_tokens").is_none());
    // The mapping's temperature is sent when the request sets none.
    assert_eq!(seen[0].body["temperature"], 0.0);
    assert!(seen[1].body.get("temperature").is_none());
    assert!(seen[1].body.get("tool_choice").is_none());
    assert_eq!(seen[1].body["max_tokens"], 64);
    assert!(seen[2].body.get("tool_choice").is_none());
    server.stop().await;

    let e = from_spec_with_env(
        &json!({"provider": "openai", "name": "m", "tool_choice": "always"}),
        std::path::Path::new("."),
        &|_| None,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("`tool_choice`"), "{e}");
}

/// llama-cpp-python answers a streamed request that carries `tool_choice` with 200 and an
/// empty body.
fn empty_stream() -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        // It sends keep-alive comments while it works.
        body: ": ping - 2026-11-23 22:52:36\r\n\r\n".into(),
    }
}

#[tokio::test]
async fn an_empty_streamed_reply_falls_back_to_a_plain_call_learned_once() {
    let ok = |t: &str| {
        Reply::json(completion(
            json!(t),
            None,
            json!({"prompt_tokens": 1, "completion_tokens": 1}),
        ))
    };
    let server = serve(vec![empty_stream(), ok("one"), ok("two")]).await;
    let m = model(&server.url());
    let (s, _) = sink();
    let first = m.complete(&chat("s", "hi"), Some(s.clone())).await.unwrap();
    assert_eq!(first.content, "one");
    // A second model of the same server and name knows it already.
    let again = model(&server.url());
    let second = again.complete(&chat("s", "hi"), Some(s)).await.unwrap();
    assert_eq!(second.content, "two");
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].body["stream"], true);
    assert!(seen[1].body.get("stream").is_none());
    assert!(seen[2].body.get("stream").is_none(), "learned once");
    server.stop().await;

    // `stream: true` insists, and says what to change.
    let server = serve(vec![empty_stream()]).await;
    let mut cfg = config(ProviderKind::OpenAi, "m", &format!("{}/v1", server.url()));
    cfg.stream = weft_model::StreamMode::Always;
    let (s, _) = sink();
    let e = OpenAiModel::new(cfg)
        .unwrap()
        .complete(&chat("s", "hi"), Some(s))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("stream: auto"), "{e}");
    server.stop().await;
}

#[tokio::test]
async fn learned_capabilities_are_read_from_their_file() {
    let server = serve(vec![Reply::json(completion(
        json!("{\"answer\": 1}"),
        None,
        json!({"prompt_tokens": 1, "completion_tokens": 1}),
    ))])
    .await;
    let url = format!("{}/v1", server.url());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("provider-capabilities.json");
    // What an earlier process wrote.
    std::fs::write(
        &file,
        json!({"providers": {weft_model::capabilities::key(&url, "m"):
            {"no_stream": true, "structured": "json_object"}}})
        .to_string(),
    )
    .unwrap();
    weft_model::capabilities::use_file(&file);
    let m = OpenAiModel::new(config(ProviderKind::OpenAi, "m", &url)).unwrap();
    let (s, _) = sink();
    let mut req = chat("s", "hi");
    req.response_schema = Some(schema());
    let reply = m.complete(&req, Some(s)).await.unwrap();
    assert_eq!(reply.content, "{\"answer\": 1}");
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].body.get("stream").is_none(), "no stream tried");
    assert_eq!(seen[0].body["response_format"]["type"], "json_object");
    server.stop().await;
}

#[tokio::test]
async fn an_empty_streamed_reply_whose_connection_breaks_also_falls_back() {
    let server = serve(vec![
        Reply::Chunks {
            chunks: vec![],
            cut: true,
        },
        Reply::json(completion(
            json!("plain"),
            None,
            json!({"prompt_tokens": 1, "completion_tokens": 1}),
        )),
    ])
    .await;
    let (s, _) = sink();
    let reply = model(&server.url())
        .complete(&chat("s", "hi"), Some(s))
        .await
        .unwrap();
    assert_eq!(reply.content, "plain");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].body.get("stream").is_none());
    server.stop().await;
}

#[tokio::test]
async fn call_ids_are_handed_over_as_the_server_sent_them() {
    let server = serve(vec![Reply::json(completion(
        Value::Null,
        Some(json!([
            {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
            {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}},
            {"id": "", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Bern\"}"}}
        ])),
        json!({"prompt_tokens": 10, "completion_tokens": 5}),
    ))])
    .await;
    let mut req = chat("s", "weather?");
    req.tools = vec![weather_tool()];
    let reply = model(&server.url()).complete(&req, None).await.unwrap();
    let ids: Vec<&str> = reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
    // The core gives each call its own id when it records the reply (weft-core's
    // `model_replied`); the provider hands over what the server sent.
    assert_eq!(ids, ["call_0", "call_0", ""]);
    assert_eq!(reply.tool_calls[1].arguments, json!({"city": "Rome"}));
    server.stop().await;
}

#[tokio::test]
async fn dotted_tool_names_go_out_valid_and_come_back_as_they_were() {
    let server = serve(vec![Reply::json(completion(
        Value::Null,
        Some(json!([
            {"id": "c1", "type": "function", "function": {"name": "time_now", "arguments": "{}"}}
        ])),
        json!({"prompt_tokens": 10, "completion_tokens": 5}),
    ))])
    .await;
    let mut req = chat("s", "time?");
    let mut tool = weather_tool();
    tool.name = "time.now".into();
    req.tools = vec![tool];
    req.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![ToolCall {
            id: "c0".into(),
            name: "time.now".into(),
            arguments: json!({}),
            provider_id: None,
        }],
    });
    req.messages.push(Message::Tool {
        call_id: "c0".into(),
        name: "time.now".into(),
        content: "noon".into(),
        is_error: false,
    });
    let reply = model(&server.url()).complete(&req, None).await.unwrap();
    assert_eq!(reply.tool_calls[0].name, "time.now");
    let seen = server.seen();
    assert_eq!(seen[0].body["tools"][0]["function"]["name"], "time_now");
    assert_eq!(
        seen[0].body["messages"][2]["tool_calls"][0]["function"]["name"],
        "time_now"
    );
    server.stop().await;
}
