//! Built-ins: http_get's address checks, the workspace file tools, todos, ask_user, agent tools
//! and restricting a registry.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use common::*;
use serde_json::json;
use weft_core::ToolCatalog;

#[tokio::test]
async fn http_get_refuses_internal_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(200, "{\"hello\": \"world\"}").await;
    let reg = registry(
        "name: a\ntools:\n  - builtin: http_get\n    config: {timeout: 3s}\n",
        dir.path(),
    );
    for url in [
        format!("http://127.0.0.1:{}/", server.port),
        "http://10.0.0.1/".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://[::1]:{}/", server.port),
        format!("http://localhost:{}/", server.port),
        "http://0.0.0.0/".to_owned(),
        "http://[::ffff:127.0.0.1]/".to_owned(),
    ] {
        let e = err(call(&reg, "http_get", json!({"url": url})).await);
        assert_eq!(e.kind, "refused", "{url}: {e:?}");
        assert!(e.message.contains("allow_private"), "{}", e.message);
    }
    let e = err(call(&reg, "http_get", json!({"url": "file:///etc/passwd"})).await);
    assert_eq!(e.kind, "refused");
    assert!(
        server.requests().is_empty(),
        "no request may reach the server"
    );
}

#[tokio::test]
async fn http_get_allows_private_when_configured_and_checks_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(200, "{\"hello\": \"world\"}").await;
    let reg = registry(
        "name: a\ntools:\n  - builtin: http_get\n    config: {allow_private: true, max_bytes: 1000}\n",
        dir.path(),
    );
    for host in ["127.0.0.1", "localhost"] {
        let out = ok(call(
            &reg,
            "http_get",
            json!({"url": format!("http://{host}:{}/x", server.port)}),
        )
        .await);
        assert_eq!(out["status"], json!(200));
        assert_eq!(out["body"], json!({"hello": "world"}));
    }
    assert_eq!(server.requests().len(), 2);

    let small = registry(
        "name: a\ntools:\n  - builtin: http_get\n    config: {allow_private: true, max_bytes: 5}\n",
        dir.path(),
    );
    let e = err(call(
        &small,
        "http_get",
        json!({"url": format!("http://127.0.0.1:{}/", server.port)}),
    )
    .await);
    assert_eq!(e.kind, "response_too_large");

    let hosts = registry(
        "name: a\ntools:\n  - builtin: http_get\n    config: {allow_private: true, allow_hosts: [example.org]}\n",
        dir.path(),
    );
    let e = err(call(
        &hosts,
        "http_get",
        json!({"url": format!("http://127.0.0.1:{}/", server.port)}),
    )
    .await);
    assert_eq!(e.kind, "refused");
    assert!(e.message.contains("allow_hosts"), "{}", e.message);
}

#[tokio::test]
async fn http_get_checks_every_redirect() {
    let dir = tempfile::tempdir().unwrap();
    let target = TestServer::start(200, "{\"arrived\": true}").await;
    let hop = TestServer::redirect(&format!("http://127.0.0.1:{}/final", target.port)).await;
    let open = registry(
        "name: a\ntools:\n  - builtin: http_get\n    config: {allow_private: true}\n",
        dir.path(),
    );
    let out = ok(call(
        &open,
        "http_get",
        json!({"url": format!("http://localhost:{}/", hop.port)}),
    )
    .await);
    assert_eq!(out["body"], json!({"arrived": true}));
    assert_eq!(
        out["url"],
        json!(format!("http://127.0.0.1:{}/final", target.port))
    );
    assert_eq!(target.requests().len(), 1);

    // The redirect leaves the allowed hosts: refused before the second request.
    let hosts = registry(
        "name: a\ntools:\n  - builtin: http_get\n    config: {allow_private: true, allow_hosts: [localhost]}\n",
        dir.path(),
    );
    let e = err(call(
        &hosts,
        "http_get",
        json!({"url": format!("http://localhost:{}/", hop.port)}),
    )
    .await);
    assert_eq!(e.kind, "refused", "{e:?}");
    assert_eq!(target.requests().len(), 1);
}

#[tokio::test]
async fn workspace_tools_stay_inside() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(
        "name: a\ntools:\n  - {builtin: fs_read, config: {workspace: ws}}\n  - {builtin: fs_write, config: {workspace: ws}}\n  - {builtin: fs_list, config: {workspace: ws}}\n",
        dir.path(),
    );
    let ws = dir.path().join("ws");
    std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", ws.join("host")).unwrap();

    // Normal use.
    let out = ok(call(
        &reg,
        "fs_write",
        json!({"path": "notes/a.txt", "content": "hello"}),
    )
    .await);
    assert_eq!(out, json!({"path": "notes/a.txt", "bytes": 5}));
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/a.txt")).unwrap(),
        "hello"
    );
    let out = ok(call(&reg, "fs_read", json!({"path": "./notes/../notes/a.txt"})).await);
    assert_eq!(out["content"], json!("hello"));
    let out = ok(call(&reg, "fs_list", json!({})).await);
    let names: Vec<&str> = out["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["etc", "host", "notes"]);
    let abs_inside = ws.canonicalize().unwrap().join("notes/a.txt");
    let out = ok(call(&reg, "fs_read", json!({"path": abs_inside})).await);
    assert_eq!(out["content"], json!("hello"));

    // Escapes.
    for (tool, path) in [
        ("fs_read", "../secret.txt"),
        ("fs_read", "notes/../../secret.txt"),
        ("fs_read", "/etc/passwd"),
        ("fs_read", "etc/passwd"),
        ("fs_read", "host"),
        ("fs_list", "etc"),
        ("fs_list", ".."),
        ("fs_write", "../evil.txt"),
        ("fs_write", "/tmp/weft-evil.txt"),
        ("fs_write", "etc/evil.conf"),
    ] {
        let mut args = json!({"path": path});
        if tool == "fs_write" {
            args["content"] = json!("x");
        }
        let e = err(call(&reg, tool, args).await);
        assert_eq!(e.kind, "refused", "{tool} {path}: {e:?}");
    }
    assert!(!dir.path().join("evil.txt").exists());
    let e = err(call(&reg, "fs_read", json!({"path": "missing.txt"})).await);
    assert_eq!(e.kind, "not_found");
}

#[tokio::test]
async fn todos_ask_user_and_agent_tools() {
    let dir = tempfile::tempdir().unwrap();
    // Agent tools' files must exist when the registry is built.
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/researcher.yaml"), "name: researcher\n").unwrap();
    std::fs::write(dir.path().join("w.yaml"), "name: writer\n").unwrap();
    let reg = registry(
        "name: a\ntools:\n  - builtin: todo_write\n  - builtin: ask_user\n  - agent: sub/researcher.yaml\n  - {agent: w.yaml, name: writer, description: Writes things.}\n",
        dir.path(),
    );
    let todos =
        json!([{"content": "a", "status": "completed"}, {"content": "b", "status": "pending"}]);
    let out = ok(call(&reg, "todo_write", json!({"todos": todos})).await);
    assert_eq!(out["todos"], todos);
    assert_eq!(
        (out["completed"].clone(), out["pending"].clone()),
        (json!(1), json!(1))
    );
    let e = err(call(
        &reg,
        "todo_write",
        json!({"todos": [{"content": "a", "status": "done"}]}),
    )
    .await);
    assert_eq!(e.kind, "invalid_arguments");

    let e = err(call(&reg, "ask_user", json!({"question": "Which account?"})).await);
    assert_eq!(e.kind, "ask_user");
    assert_eq!(e.detail["question"], json!("Which account?"));
    assert!(!e.retryable);

    let agents: Vec<_> = reg.agent_tools().cloned().collect();
    assert_eq!(agents.len(), 2);
    assert_eq!(agents[0].name, "researcher");
    assert_eq!(agents[0].path, dir.path().join("sub/researcher.yaml"));
    assert_eq!(agents[1].name, "writer");
    let info = reg.tool_info("writer").unwrap();
    assert_eq!(
        (info.source.as_str(), info.description.as_str()),
        ("agent", "Writes things.")
    );
    assert_eq!(info.input_schema["required"], json!(["task"]));
    let e = err(call(&reg, "researcher", json!({})).await);
    assert_eq!(e.kind, "invalid_arguments");
}

#[tokio::test]
async fn restrict_refuses_other_tools() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(
        "name: a\ntools:\n  - builtin: echo\n  - builtin: template\n",
        dir.path(),
    );
    let only_echo = reg.restrict(&["echo".to_owned()]);
    assert_eq!(only_echo.tool_names(), vec!["echo".to_owned()]);
    assert!(only_echo.tool_info("template").is_none());
    assert_eq!(
        ok(call(&only_echo, "echo", json!({"x": 1})).await),
        json!({"x": 1})
    );
    let e = err(call(&only_echo, "template", json!({"template": "hi"})).await);
    assert_eq!(e.kind, "refused");
    assert!(e.message.contains("echo"), "{}", e.message);
    // The original registry is unchanged.
    assert_eq!(
        ok(call(&reg, "template", json!({"template": "hi"})).await),
        json!("hi")
    );

    // allowed_tools in the agent file does the same.
    let reg = registry(
        "name: a\nallowed_tools: [template]\ntools:\n  - builtin: echo\n  - builtin: template\n",
        dir.path(),
    );
    assert_eq!(reg.tool_names(), vec!["template".to_owned()]);
    assert_eq!(err(call(&reg, "echo", json!({})).await).kind, "refused");
}
