//! Secrets reach the tools that use them and never come back out of the registry.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use common::*;
use serde_json::json;
use weft_tools::Registry;

/// The canary lives in an environment variable; the test re-runs itself with it set.
const CANARY_VAR: &str = "WEFT_TEST_CANARY_SECRET";

#[tokio::test]
async fn canary_secret_is_used_but_never_returned() {
    let Ok(secret) = std::env::var(CANARY_VAR) else {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "secrets::canary_secret_is_used_but_never_returned",
                "--nocapture",
            ])
            .env(CANARY_VAR, canary())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "child run failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let good = TestServer::start(200, &format!("{{\"echo\": \"got {secret}\"}}")).await;
    let bad = TestServer::start(500, &format!("{{\"error\": \"bad token {secret}\"}}")).await;
    let yaml = format!(
        r#"
name: canary
secrets:
  tok: {{env: {CANARY_VAR}}}
tools:
  - name: refund
    input_schema: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
    http:
      method: POST
      url: "http://127.0.0.1:{good}/refunds/{{{{ args.id }}}}?key={{{{ secrets.tok }}}}"
      headers: {{Authorization: "Bearer {{{{ secrets.tok }}}}"}}
      body: {{request: "{{{{ args }}}}", note: "id {{{{ args.id }}}}"}}
      timeout: 10s
  - name: failing
    http: {{url: "http://127.0.0.1:{bad}/x", headers: {{X-Key: "{{{{ secrets.tok }}}}"}}}}
  - name: show_env
    command: [python3, -c, "import os, json; print(json.dumps({{'tok': os.environ['TOK']}}))"]
    env: {{TOK: "{{{{ secrets.tok }}}}"}}
  - name: fail_env
    command: [python3, -c, "import os, sys; sys.stderr.write('denied ' + os.environ['TOK']); sys.exit(2)"]
    env: {{TOK: "{{{{ secrets.tok }}}}"}}
"#,
        good = good.port,
        bad = bad.port
    );
    let reg = registry(&yaml, dir.path());

    // HTTP: the server gets the real value in the URL and the header; the result is redacted.
    let out = ok(call(&reg, "refund", json!({"id": "r-17"})).await);
    let reqs = good.requests();
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert!(
        req.starts_with(&format!("POST /refunds/r-17?key={secret} ")),
        "{req}"
    );
    assert!(
        req.to_ascii_lowercase()
            .contains(&format!("authorization: bearer {secret}").to_ascii_lowercase()),
        "{req}"
    );
    let body = req.split("\r\n\r\n").nth(1).unwrap();
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body, json!({"request": {"id": "r-17"}, "note": "id r-17"}));
    assert_eq!(out, json!({"echo": "got [secret:tok]"}));

    // A non-2xx answer is an http_status error whose body is redacted too.
    let e = err(call(&reg, "failing", json!({})).await);
    assert_eq!(e.kind, "http_status");
    assert_eq!(e.detail["status"], json!(500));
    let text = serde_json::to_string(&e).unwrap();
    assert!(
        text.contains("[secret:tok]") && !text.contains(&secret),
        "{text}"
    );
    assert!(bad.requests()[0].contains(&secret));

    // Command tools get the value in their environment; their output is redacted.
    let out = ok(call(&reg, "show_env", json!({})).await);
    assert_eq!(out, json!({"tok": "[secret:tok]"}));
    let e = err(call(&reg, "fail_env", json!({})).await);
    let text = serde_json::to_string(&e).unwrap();
    assert!(
        text.contains("denied [secret:tok]") && !text.contains(&secret),
        "{text}"
    );

    // The registry's redactor knows the value for the runtime's own use.
    assert_eq!(
        reg.redactor().redact_str(&format!("x{secret}x")),
        "x[secret:tok]x"
    );
}

#[test]
fn unresolvable_secret_is_a_start_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = Registry::from_agent(
        &spec("name: a\nsecrets:\n  crm_token: {env: WEFT_TEST_NEVER_SET_VARIABLE}\n"),
        dir.path(),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        e.contains("crm_token") && e.contains("WEFT_TEST_NEVER_SET_VARIABLE"),
        "{e}"
    );

    let e = Registry::from_agent(
        &spec("name: a\nsecrets:\n  key: {file: no-such-file}\n"),
        dir.path(),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("`key`") && e.contains("no-such-file"), "{e}");

    // Referenced but not declared.
    let e = Registry::from_agent(
        &spec("name: a\ntools:\n  - name: h\n    http: {url: \"http://x/{{ secrets.nope }}\"}\n"),
        dir.path(),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("`nope`") && e.contains("`h`"), "{e}");
}

#[tokio::test]
async fn file_secret_and_session_override() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key.txt"), "file-secret-value\n").unwrap();
    let server = TestServer::start(200, "{\"ok\": true}").await;
    let yaml = format!(
        "name: a\nsecrets:\n  k: {{file: key.txt}}\n  o: {{env: WEFT_TEST_NEVER_SET_VARIABLE}}\ntools:\n  - name: h\n    http: {{url: \"http://127.0.0.1:{}/?a={{{{ secrets.k }}}}&b={{{{ secrets.o }}}}\"}}\n",
        server.port
    );
    let reg = Registry::from_agent_async(
        &spec(&yaml),
        dir.path(),
        [("o".to_owned(), "override-value".to_owned())].into(),
    )
    .await
    .unwrap();
    assert_eq!(ok(call(&reg, "h", json!({})).await), json!({"ok": true}));
    assert!(
        server.requests()[0].starts_with("GET /?a=file-secret-value&b=override-value "),
        "{}",
        server.requests()[0]
    );
}
