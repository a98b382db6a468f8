//! Wire-level tests of the Anthropic provider against a local server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use common::{Reply, chat, config, serve, sink, weather_tool};
use serde_json::{Value, json};
use weft_model::{AnthropicModel, Message, Model, ModelError, ProviderKind, ToolCall};

fn model(url: &str, name: &str) -> AnthropicModel {
    AnthropicModel::new(config(ProviderKind::Anthropic, name, url)).unwrap()
}

fn message(content: Value, usage: Value, stop: &str) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}")
}

#[tokio::test]
async fn plain_reply_sends_the_expected_request() {
    let server = serve(vec![Reply::json(message(
        json!([{"type": "text", "text": "Checking."},
               {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
               {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]),
        json!({"input_tokens": 100, "output_tokens": 20}),
        "tool_use",
    ))])
    .await;
    let m = model(&server.url(), "claude-sonnet-4-20250514");
    let mut req = chat("Be brief.", "Weather?");
    req.tools = vec![weather_tool()];
    req.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![
            ToolCall {
                id: "toolu_a".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Oslo"}),
                provider_id: None,
            },
            ToolCall {
                id: "toolu_b".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Nowhere"}),
                provider_id: None,
            },
        ],
    });
    req.messages.push(Message::Tool {
        call_id: "toolu_a".into(),
        name: "get_weather".into(),
        content: "rain".into(),
        is_error: false,
    });
    req.messages.push(Message::Tool {
        call_id: "toolu_b".into(),
        name: "get_weather".into(),
        content: "unknown city".into(),
        is_error: true,
    });
    let reply = m.complete(&req, None).await.unwrap();
    assert_eq!(reply.content, "Checking.");
    assert_eq!(
        reply
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.arguments.clone()))
            .collect::<Vec<_>>(),
        vec![
            ("toolu_1", json!({"city": "Oslo"})),
            ("toolu_2", json!({"city": "Rome"}))
        ]
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_use"));
    let cost = reply.usage.cost_usd.unwrap();
    assert!(
        (cost - (100.0 * 3.0 + 20.0 * 15.0) / 1e6).abs() < 1e-12,
        "{cost}"
    );

    let seen = server.seen();
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen[0].headers["x-api-key"], "test-key");
    assert!(!seen[0].headers.contains_key("authorization"));
    assert_eq!(
        seen[0].body,
        json!({
            "model": "claude-sonnet-4-20250514",
            "max_tokens": 4096,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Nowhere"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "rain"},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "unknown city", "is_error": true}]}
            ],
            "tools": [{"name": "get_weather", "description": "Current weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
        })
    );
    server.stop().await;
}

#[tokio::test]
async fn streaming_assembles_text_tools_and_cache_usage() {
    let server = serve(vec![Reply::sse(&[
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "model": "claude-3-5-haiku-20241022", "content": [], "stop_reason": null,
                "usage": {"input_tokens": 50, "cache_read_input_tokens": 1000,
                          "cache_creation_input_tokens": 200, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        "event: ping\ndata: {\"type\": \"ping\"}".to_owned(),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block":
                {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Os"}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "lo\"}"}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 40}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ])])
    .await;
    let m = model(&server.url(), "claude-3-5-haiku-20241022");
    let (s, got) = sink();
    let reply = m.complete(&chat("s", "Weather?"), Some(s)).await.unwrap();
    assert_eq!(*got.lock().unwrap(), vec!["Let me ", "check."]);
    assert_eq!(reply.content, "Let me check.");
    assert_eq!(
        reply.tool_calls,
        vec![ToolCall {
            id: "toolu_9".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Oslo"}),
            provider_id: None,
        }]
    );
    assert_eq!(reply.usage.input_tokens, 1250);
    assert_eq!(reply.usage.cache_read_tokens, 1000);
    assert_eq!(reply.usage.cache_write_tokens, 200);
    assert_eq!(reply.usage.output_tokens, 40);
    assert_eq!(reply.model, "claude-3-5-haiku-20241022");
    // Haiku 3.5: 0.80 in, 4.00 out, 0.08 cache read, 1.00 cache write per million.
    let expected = (50.0 * 0.80 + 1000.0 * 0.08 + 200.0 * 1.0 + 40.0 * 4.0) / 1e6;
    assert!((reply.usage.cost_usd.unwrap() - expected).abs() < 1e-12);
    assert_eq!(server.seen()[0].body["stream"], json!(true));
    server.stop().await;
}

#[tokio::test]
async fn stream_errors_and_cuts_are_typed() {
    let server = serve(vec![
        Reply::sse(&[
            event(
                "message_start",
                json!({"type": "message_start", "message": {"model": "claude", "usage": {"input_tokens": 5, "output_tokens": 0}}}),
            ),
            event(
                "error",
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
        ]),
        Reply::sse(&[
            event(
                "message_start",
                json!({"type": "message_start", "message": {"model": "claude", "usage": {"input_tokens": 5, "output_tokens": 0}}}),
            ),
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hal"}}),
            ),
        ]),
    ])
    .await;
    let m = model(&server.url(), "claude-sonnet-4-0");
    let (s, _) = sink();
    let e = m
        .complete(&chat("s", "hi"), Some(s.clone()))
        .await
        .unwrap_err();
    match &e {
        ModelError::Http { status, body, .. } => {
            assert_eq!(*status, 529);
            assert!(body.contains("Overloaded"));
        }
        other => panic!("expected Http, got {other:?}"),
    }
    assert!(e.is_retryable());
    let e = m.complete(&chat("s", "hi"), Some(s)).await.unwrap_err();
    assert!(matches!(e, ModelError::StreamCut { .. }), "{e:?}");
    server.stop().await;
}

#[tokio::test]
async fn prompt_too_long_is_a_context_length_error() {
    let body = r#"{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}"#;
    let server = serve(vec![Reply::status(400, body)]).await;
    let e = model(&server.url(), "claude-sonnet-4-0")
        .complete(&chat("s", "hi"), None)
        .await
        .unwrap_err();
    match e {
        ModelError::ContextLength { body: b, provider } => {
            assert_eq!(b, body);
            assert_eq!(provider, "anthropic");
        }
        other => panic!("expected ContextLength, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn structured_output_uses_instructions_and_retries() {
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    let server = serve(vec![
        Reply::json(message(
            json!([{"type": "text", "text": "Here you go: {\"answer\": 4}"}]),
            usage.clone(),
            "end_turn",
        )),
        Reply::json(message(
            json!([{"type": "text", "text": "{\"answer\": 4}"}]),
            usage,
            "end_turn",
        )),
    ])
    .await;
    let mut req = chat("Do sums.", "2+2?");
    req.response_schema = Some(
        json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}),
    );
    req.max_tokens = Some(256);
    let reply = model(&server.url(), "claude-haiku-4-5")
        .complete(&req, None)
        .await
        .unwrap();
    assert_eq!(reply.content, "{\"answer\": 4}");
    assert_eq!(reply.usage.output_tokens, 10);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body["max_tokens"], json!(256));
    let system = seen[0].body["system"].as_str().unwrap();
    assert!(
        system.starts_with("Do sums.") && system.contains("JSON Schema"),
        "{system}"
    );
    let msgs = seen[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1]["role"], "assistant");
    assert!(msgs[2]["content"].as_str().unwrap().contains("not JSON"));
    server.stop().await;
}

#[tokio::test]
async fn without_a_system_role_there_is_no_system_field() {
    let server = serve(vec![Reply::json(message(
        json!([{"type": "text", "text": "ok"}]),
        json!({"input_tokens": 1, "output_tokens": 1}),
        "end_turn",
    ))])
    .await;
    let mut cfg = config(ProviderKind::Anthropic, "claude-sonnet-4-0", &server.url());
    cfg.system_role = false;
    AnthropicModel::new(cfg)
        .unwrap()
        .complete(&chat("Be brief.", "Hi"), None)
        .await
        .unwrap();
    let body = &server.seen()[0].body;
    assert!(body.get("system").is_none());
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "[System instructions]\nBe brief.\n\nHi"}])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_missing_key_for_the_public_api_is_a_config_error() {
    let mut cfg = weft_model::ProviderConfig::new(ProviderKind::Anthropic, "claude-sonnet-4-0");
    cfg.api_key_env = "WEFT_TEST_NO_SUCH_KEY".into();
    let e = AnthropicModel::new(cfg)
        .unwrap()
        .complete(&chat("s", "hi"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, ModelError::Config(_)));
    assert!(e.to_string().contains("WEFT_TEST_NO_SUCH_KEY"), "{e}");
}

#[tokio::test]
async fn dotted_tool_names_go_out_valid_and_come_back_as_they_were() {
    let server = serve(vec![Reply::json(message(
        json!([{"type": "tool_use", "id": "toolu_1", "name": "time_now", "input": {}}]),
        json!({"input_tokens": 10, "output_tokens": 5}),
        "tool_use",
    ))])
    .await;
    let mut req = chat("s", "time?");
    let mut tool = weather_tool();
    tool.name = "time.now".into();
    req.tools = vec![tool];
    let reply = model(&server.url(), "claude-sonnet-4-0")
        .complete(&req, None)
        .await
        .unwrap();
    assert_eq!(reply.tool_calls[0].name, "time.now");
    assert_eq!(server.seen()[0].body["tools"][0]["name"], "time_now");
    server.stop().await;
}

/// `context_size` applies to Anthropic too: the schema is in its prompt, and the default
/// `max_tokens` (4096) counts.
#[tokio::test]
async fn a_request_that_cannot_fit_the_context_is_refused_before_it_is_sent() {
    let server = serve(vec![]).await;
    let mut cfg = config(ProviderKind::Anthropic, "claude-haiku-4-5", &server.url());
    cfg.context_size = Some(4000);
    let mut req = chat("Do sums.", "2+2?");
    req.response_schema = Some(json!({"type": "object"}));
    let e = AnthropicModel::new(cfg)
        .unwrap()
        .complete(&req, None)
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ModelError::WouldNotFit { .. }), "{e:?}");
    assert!(
        msg.starts_with("anthropic: the request cannot fit the model's context"),
        "{msg}"
    );
    assert!(
        msg.contains("max_tokens (kept for the reply) ~4096"),
        "{msg}"
    );
    assert!(msg.contains("schema in prompt ~"), "{msg}");
    assert!(!msg.contains("schema in prompt ~0"), "{msg}");
    assert!(server.seen().is_empty());
    server.stop().await;
}
