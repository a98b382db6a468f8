//! Declarative HTTP tools against a local server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::time::Duration;

use common::*;
use serde_json::json;
use weft_tools::ToolContext;

fn tool(url: &str, extra: &str) -> String {
    format!(
        "name: a\ntools:\n  - name: h\n    idempotent: true\n    input_schema: {{type: object}}\n    http: {{url: \"{url}\"{extra}}}\n"
    )
}

#[tokio::test]
async fn text_json_limits_and_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let text = TestServer::start_full(200, "text/plain", "plain words", Duration::ZERO).await;
    let reg = registry(
        &tool(&format!("http://127.0.0.1:{}/t", text.port), ""),
        dir.path(),
    );
    assert_eq!(ok(call(&reg, "h", json!({})).await), json!("plain words"));

    let big = TestServer::start(
        200,
        "{\"data\": \"0123456789012345678901234567890123456789\"}",
    )
    .await;
    let reg = registry(
        &tool(
            &format!("http://127.0.0.1:{}/b", big.port),
            ", max_response_bytes: 16",
        ),
        dir.path(),
    );
    assert_eq!(
        err(call(&reg, "h", json!({})).await).kind,
        "response_too_large"
    );

    let slow = TestServer::start_full(200, "application/json", "{}", Duration::from_secs(5)).await;
    let reg = registry(
        &tool(
            &format!("http://127.0.0.1:{}/s", slow.port),
            ", timeout: 300ms",
        ),
        dir.path(),
    );
    let started = std::time::Instant::now();
    let e = err(call(&reg, "h", json!({})).await);
    assert_eq!(e.kind, "timeout", "{e:?}");
    assert!(e.retryable, "an idempotent tool's timeout may be retried");
    assert!(started.elapsed() < Duration::from_secs(4));

    let missing = TestServer::start(404, "{\"error\": \"no such refund\"}").await;
    let reg = registry(
        &tool(&format!("http://127.0.0.1:{}/m", missing.port), ""),
        dir.path(),
    );
    let e = err(call(&reg, "h", json!({})).await);
    assert_eq!(e.kind, "http_status");
    assert_eq!(e.detail["status"], json!(404));
    assert!(
        e.detail["body"]
            .as_str()
            .unwrap()
            .contains("no such refund")
    );
}

#[tokio::test]
async fn arguments_are_encoded_in_urls_and_idempotency_key_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(200, "{}").await;
    let reg = registry(
        &tool(
            &format!("http://127.0.0.1:{}/r/{{{{ args.id }}}}", server.port),
            ", method: delete",
        ),
        dir.path(),
    );
    let ctx = ToolContext {
        idempotency_key: "sess-1/step-2/1".into(),
        ..ToolContext::default()
    };
    let out = reg.invoke("h", json!({"id": "../admin?x=1"}), ctx).await;
    assert_eq!(ok(out), json!({}));
    let req = &server.requests()[0];
    assert!(req.starts_with("DELETE /r/..%2Fadmin%3Fx%3D1 "), "{req}");
    assert!(
        req.to_ascii_lowercase()
            .contains("idempotency-key: sess-1/step-2/1"),
        "{req}"
    );
}

#[test]
fn bad_declarations_name_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let e = weft_tools::Registry::from_agent(
        &spec("name: a\ntools:\n  - name: h\n    http: {url: \"http://x\", method: \"NOT A METHOD\"}\n"),
        dir.path(),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("tools[0]") && e.contains("`h`"), "{e}");
    let e = weft_tools::Registry::from_agent(
        &spec("name: a\ntools:\n  - name: h\n    http: {url: \"http://x\", verb: GET}\n"),
        dir.path(),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("`h`") && e.contains("verb"), "{e}");
}

/// A tool whose request carries a secret does not follow a redirect to another origin (the secret
/// header would go to a server nobody declared); one without secrets follows it.
#[tokio::test]
async fn a_redirect_to_another_origin_never_receives_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key.txt"), "s3cret-key-value").unwrap();
    let elsewhere = TestServer::start(200, "{\"landed\": true}").await;
    let origin =
        TestServer::redirect(&format!("http://127.0.0.1:{}/landing", elsewhere.port)).await;
    let url = format!("http://127.0.0.1:{}/start", origin.port);

    let with_secret = format!(
        "name: a\nsecrets:\n  k: {{file: key.txt}}\ntools:\n  - name: h\n    idempotent: true\n    input_schema: {{type: object}}\n    http: {{url: \"{url}\", headers: {{X-Api-Key: \"{{{{ secrets.k }}}}\"}}}}\n"
    );
    let reg = registry(&with_secret, dir.path());
    let e = err(call(&reg, "h", json!({})).await);
    assert_eq!(e.kind, "http", "{e:?}");
    assert!(
        e.message.contains("redirected to another origin")
            && e.message
                .contains(&format!("http://127.0.0.1:{}", elsewhere.port)),
        "{e:?}"
    );
    assert_eq!(origin.requests().len(), 1);
    assert!(
        origin.requests()[0].contains("s3cret-key-value"),
        "the declared server got the key"
    );
    assert!(
        elsewhere.requests().is_empty(),
        "the other origin was never asked: {:?}",
        elsewhere.requests()
    );

    // Without secrets the redirect is followed.
    let reg = registry(&tool(&url, ""), dir.path());
    assert_eq!(
        ok(call(&reg, "h", json!({})).await),
        json!({"landed": true})
    );
    assert_eq!(elsewhere.requests().len(), 1);
}
