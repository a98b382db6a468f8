//! Record a run against a local server, stop the server, replay it from the cassette.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use common::{Reply, chat, config, serve, sink};
use serde_json::json;
use weft_model::{
    AnthropicModel, CassetteFile, CassetteMode, Model, ModelError, OpenAiModel, ProviderKind,
};

#[tokio::test]
async fn a_recorded_run_replays_without_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.json");
    let completion = json!({"id": "c1", "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "recorded"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}});
    let server = serve(vec![
        Reply::Full {
            status: 429,
            headers: vec![("retry-after", "0".into())],
            body: "slow down".into(),
        },
        Reply::json(completion),
        Reply::sse(&[
            format!("data: {}", json!({"choices": [{"index": 0, "delta": {"content": "stre"}, "finish_reason": null}]})),
            format!("data: {}", json!({"choices": [{"index": 0, "delta": {"content": "amed"}, "finish_reason": "stop"}]})),
            "data: [DONE]".to_owned(),
        ]),
        Reply::json(json!({"type": "message", "model": "claude-sonnet-4-0",
            "content": [{"type": "text", "text": "from claude"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 4, "output_tokens": 2}})),
    ])
    .await;
    let url = server.url();
    let run = |mode: CassetteMode| {
        let url = url.clone();
        async move {
            let mut oc = config(ProviderKind::OpenAi, "gpt-4o-mini", &format!("{url}/v1"));
            oc.cassette = Some(mode.clone());
            let mut ac = config(ProviderKind::Anthropic, "claude-sonnet-4-0", &url);
            ac.cassette = Some(mode);
            let o = OpenAiModel::new(oc).unwrap();
            let a = AnthropicModel::new(ac).unwrap();
            let first = o.complete(&chat("s", "one"), None).await.unwrap();
            let (s, got) = sink();
            let second = o.complete(&chat("s", "two"), Some(s)).await.unwrap();
            let third = a.complete(&chat("s", "three"), None).await.unwrap();
            let deltas = got.lock().unwrap().clone();
            (first, second, third, deltas)
        }
    };
    let recorded = run(CassetteMode::Record(path.clone())).await;
    assert_eq!(recorded.0.content, "recorded");
    assert_eq!(recorded.1.content, "streamed");
    assert_eq!(recorded.2.content, "from claude");
    assert_eq!(server.seen().len(), 4);
    server.stop().await;

    let file: CassetteFile =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file.exchanges.len(), 4);
    assert_eq!(file.exchanges[0].status, 429);
    assert_eq!(file.exchanges[0].headers["retry-after"], "0");
    assert_eq!(file.exchanges[1].path, "/v1/chat/completions");
    assert_eq!(file.exchanges[1].request["messages"][1]["content"], "one");
    assert!(file.exchanges[2].body.contains("data: [DONE]"));
    assert_eq!(file.exchanges[3].path, "/v1/messages");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("test-key"), "credentials are not recorded");

    let replayed = run(CassetteMode::Replay(path.clone())).await;
    assert_eq!(replayed, recorded);
}

#[tokio::test]
async fn replay_names_a_mismatching_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.json");
    std::fs::write(
        &path,
        serde_json::to_string(
            &json!({"exchanges": [{"method": "POST", "path": "/v1/messages",
            "request": {}, "status": 200, "headers": {}, "body": "{}"}]}),
        )
        .unwrap(),
    )
    .unwrap();
    let mut c = config(ProviderKind::OpenAi, "m", "http://127.0.0.1:9/v1");
    c.cassette = Some(CassetteMode::Replay(path));
    let e = OpenAiModel::new(c)
        .unwrap()
        .complete(&chat("s", "x"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, ModelError::Config(_)));
    let msg = e.to_string();
    assert!(
        msg.contains("/v1/messages") && msg.contains("/v1/chat/completions"),
        "{msg}"
    );
}

#[tokio::test]
async fn replay_follows_the_recording_not_the_output_mode_and_refuses_a_changed_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("streamed.json");
    let server = serve(vec![Reply::sse(&[
        format!("data: {}", json!({"choices": [{"index": 0, "delta": {"content": "stre"}, "finish_reason": null}]})),
        format!("data: {}", json!({"choices": [{"index": 0, "delta": {"content": "amed"}, "finish_reason": "stop"}]})),
        "data: [DONE]".to_owned(),
    ])])
    .await;
    let model = |mode: CassetteMode| {
        let mut c = config(
            ProviderKind::OpenAi,
            "gpt-4o-mini",
            &format!("{}/v1", server.url()),
        );
        c.cassette = Some(mode);
        OpenAiModel::new(c).unwrap()
    };
    let (s, _) = sink();
    let recorded = model(CassetteMode::Record(path.clone()))
        .complete(&chat("s", "one"), Some(s))
        .await
        .unwrap();
    assert_eq!(recorded.content, "streamed");
    // Replayed without a delta sink (piped output): the recorded stream is read all the same.
    let replay = model(CassetteMode::Replay(path.clone()));
    let e = replay
        .complete(&chat("s", "a different task"), None)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("differs at `/messages/1/content`"),
        "{e}"
    );
    let replayed = replay.complete(&chat("s", "one"), None).await.unwrap();
    assert_eq!(replayed.content, "streamed");
    server.stop().await;
}

#[tokio::test]
async fn an_api_key_echoed_by_the_server_is_not_stored_printed_or_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let key = "sk-live-echoed-0123456789";
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let path = dir.path().join(format!("{}.json", kind.as_str()));
        // A server that quotes the key it was sent in its 401 body, as some do.
        let body = format!(r#"{{"error": {{"message": "Incorrect API key provided: {key}"}}}}"#);
        let server = serve(vec![Reply::status(401, &body)]).await;
        let mut c = config(kind, "m", &format!("{}/v1", server.url()));
        c.api_key = Some(key.to_owned());
        c.api_key_env = "PROVIDER_KEY".into();
        c.cassette = Some(CassetteMode::Record(path.clone()));
        let e = match kind {
            ProviderKind::OpenAi => {
                OpenAiModel::new(c)
                    .unwrap()
                    .complete(&chat("s", "hi"), None)
                    .await
            }
            _ => {
                AnthropicModel::new(c)
                    .unwrap()
                    .complete(&chat("s", "hi"), None)
                    .await
            }
        }
        .unwrap_err();
        // The key reached the server (it was sent), and nothing weft keeps or shows holds it.
        assert_eq!(server.seen().len(), 1);
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(key), "{shown}");
        assert!(
            shown.contains("Incorrect API key provided: [secret:PROVIDER_KEY]"),
            "{shown}"
        );
        assert!(matches!(e, ModelError::Http { status: 401, .. }), "{e:?}");
        let recorded = std::fs::read_to_string(&path).unwrap();
        assert!(!recorded.contains(key), "{recorded}");
        assert!(recorded.contains("[secret:PROVIDER_KEY]"), "{recorded}");
        server.stop().await;
    }
}
