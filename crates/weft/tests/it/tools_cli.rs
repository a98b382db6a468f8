//! Tools through whole agents and the `weft` binary: real MCP servers, a canary secret that
//! must never show, and sub-agents linked to their parent session.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::Value;

fn weft(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(args).current_dir(dir).env_remove("WEFT_DB");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn events(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn env_or_skip(name: &str) -> Option<String> {
    Some(common::service_var(name))
}

#[test]
fn needs_mcp_time_and_filesystem_servers_through_an_agent() {
    let (Some(time), Some(fs), Some(node)) = (
        env_or_skip("WEFT_TEST_MCP_TIME"),
        env_or_skip("WEFT_TEST_MCP_FS"),
        env_or_skip("WEFT_TEST_NODE"),
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let files = d.join("files");
    std::fs::create_dir(&files).unwrap();
    let agent = format!(
        r#"name: mcp-user
mode: react
model: scripted:script.yaml
tools:
  - mcp: {{ name: time, command: ["{time}"] }}
  - mcp: {{ name: fs, command: ["{node}", "{fs}", "{files}"], allow: [write_file, read_text_file], sandbox: {{ read: ["{modules}"], write: ["{files}"] }} }}
"#,
        files = files.display(),
        modules = std::path::Path::new(&fs)
            .ancestors()
            .find(|a| a.ends_with("node_modules"))
            .unwrap()
            .display()
    );
    std::fs::write(d.join("agent.yaml"), agent).unwrap();
    let script = format!(
        r#"- tool_calls:
    - {{ name: time.get_current_time, arguments: {{ timezone: UTC }} }}
    - {{ name: fs.write_file, arguments: {{ path: "{f}/note.txt", content: "written through MCP" }} }}
- tool_calls:
    - {{ name: fs.read_text_file, arguments: {{ path: "{f}/note.txt" }} }}
    - {{ name: fs.read_text_file, arguments: {{ path: "/etc/hostname" }} }}
- text: "done"
"#,
        f = files.display()
    );
    std::fs::write(d.join("script.yaml"), script).unwrap();
    // The allow-list keeps other filesystem tools out.
    let listed = text(&weft(d, &["tools", "list", "agent.yaml"], &[]).stdout);
    assert!(
        listed.contains("fs.write_file") && listed.contains("time.get_current_time"),
        "{listed}"
    );
    assert!(!listed.contains("fs.move_file"), "{listed}");

    let out = weft(d, &["run", "agent.yaml", "go", "--events"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let evs = events(&text(&out.stderr));
    let finished: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "tool_call_finished")
        .collect();
    assert_eq!(finished.len(), 4);
    let time_result = &finished
        .iter()
        .find(|e| e["call_id"] == "call_1_1")
        .unwrap()["outcome"];
    assert_eq!(time_result["status"], "ok", "{time_result}");
    let out_text = time_result["output"].to_string();
    assert!(
        out_text.contains("UTC") && out_text.contains("datetime"),
        "{out_text}"
    );
    assert_eq!(
        std::fs::read_to_string(files.join("note.txt")).unwrap(),
        "written through MCP"
    );
    let read = &finished
        .iter()
        .find(|e| e["call_id"] == "call_2_1")
        .unwrap()["outcome"];
    assert!(read.to_string().contains("written through MCP"), "{read}");
    // A path outside the server's directory is the server's error, returned to the model.
    let outside = &finished
        .iter()
        .find(|e| e["call_id"] == "call_2_2")
        .unwrap()["outcome"];
    assert_eq!(outside["status"], "error", "{outside}");
}

/// A one-shot HTTP server that records the request it gets and answers with JSON.
fn http_server() -> (String, Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(String::new()));
    let seen2 = seen.clone();
    let handle = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            let req = String::from_utf8_lossy(&got).to_string();
            if let Some(head_end) = req.find("\r\n\r\n") {
                let len = req
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if got.len() >= head_end + 4 + len {
                    break;
                }
            }
        }
        *seen2.lock().unwrap() = String::from_utf8_lossy(&got).to_string();
        let body = r#"{"ok": true}"#;
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(resp.as_bytes()).unwrap();
    });
    (url, seen, handle)
}

#[test]
fn a_canary_secret_never_shows_in_events_the_database_logs_or_model_requests() {
    let canary = format!(
        "canary-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (url, seen, server) = http_server();
    let agent = format!(
        r#"name: secretive
mode: react
model: scripted:script.yaml
secrets:
  token: {{ env: WEFT_CANARY }}
tools:
  - name: callCrm
    description: Call the CRM.
    http: {{ method: POST, url: "{url}/refunds", headers: {{ Authorization: "Bearer {{{{ secrets.token }}}}" }}, body: {{ note: "{{{{ args.note }}}}" }} }}
    input_schema: {{ type: object, properties: {{ note: {{ type: string }} }}, required: [note] }}
  - name: showEnv
    description: Prints the token it was given (a leaky tool).
    command: ["sh", "-c", "cat > /dev/null; printf '{{\"token\": \"%s\"}}' \"$TOKEN\""]
    env: {{ TOKEN: "{{{{ secrets.token }}}}" }}
"#
    );
    std::fs::write(d.join("agent.yaml"), agent).unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls:\n    - { name: callCrm, arguments: { note: refund } }\n    - { name: showEnv, arguments: {} }\n- text: \"done\"\n",
    )
    .unwrap();
    let trace = d.join("requests.jsonl");
    let out = weft(
        d,
        &[
            "run",
            "agent.yaml",
            "refund please",
            "--events",
            "--db",
            "weft.db",
        ],
        &[
            ("WEFT_CANARY", &canary),
            ("WEFT_SCRIPT_TRACE", trace.to_str().unwrap()),
            ("RUST_LOG", "debug"),
        ],
    );
    server.join().unwrap();
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The secret was really used...
    assert!(
        seen.lock().unwrap().contains(&format!("Bearer {canary}")),
        "the server got the token"
    );
    // ...and is nowhere else: not in events, logs or output,
    assert!(
        !stdout.contains(&canary) && !stderr.contains(&canary),
        "leaked to the terminal"
    );
    assert!(
        stderr.contains("[secret:token]"),
        "the leaky tool's result is redacted: {stderr}"
    );
    // not in the model's requests,
    let requests = std::fs::read_to_string(&trace).unwrap();
    assert!(requests.lines().count() >= 2);
    assert!(!requests.contains(&canary), "leaked to the model");
    assert!(requests.contains("[secret:token]"));
    // not in any stored row (the database and its write-ahead log, byte for byte).
    for f in ["weft.db", "weft.db-wal"] {
        if let Ok(bytes) = std::fs::read(d.join(f)) {
            let hay = String::from_utf8_lossy(&bytes);
            assert!(!hay.contains(&canary), "leaked to {f}");
        }
    }
    let id = events(&stderr)[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = weft(d, &["sessions", "events", &id, "--db", "weft.db"], &[]);
    assert!(!text(&shown.stdout).contains(&canary));
    // A secret that cannot be resolved fails at start, naming it.
    let out = weft(d, &["run", "agent.yaml", "again", "--db", "weft.db"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("token") && err.contains("WEFT_CANARY"),
        "{err}"
    );
}

#[test]
fn a_sub_agent_runs_in_its_own_session_linked_to_the_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("parent.yaml"),
        "name: parent\nmode: react\nmodel: scripted:parent.script.yaml\ntools:\n  - agent: child.yaml\n    name: researcher\n",
    )
    .unwrap();
    std::fs::write(
        d.join("parent.script.yaml"),
        "- tool_calls: [ { name: researcher, arguments: { task: \"find the capital of France\" } } ]\n- text: \"The researcher says Paris.\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("child.yaml"),
        "name: child\nmode: react\nmodel: scripted:child.script.yaml\n",
    )
    .unwrap();
    std::fs::write(d.join("child.script.yaml"), "- text: \"Paris\"\n").unwrap();
    let out = weft(
        d,
        &["run", "parent.yaml", "ask the researcher", "--events"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let evs = events(&stderr);
    let parent_id = evs[0]["session_id"].as_str().unwrap().to_owned();
    let result = evs
        .iter()
        .find(|e| e["type"] == "tool_call_finished")
        .unwrap();
    assert_eq!(result["outcome"]["output"]["answer"], "Paris", "{result}");
    let child_id = result["outcome"]["output"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(child_id, parent_id);
    // The child's own events carry the parent.
    let child_events = text(&weft(d, &["sessions", "events", &child_id], &[]).stdout);
    let first: Value = serde_json::from_str(child_events.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "session_started");
    assert_eq!(first["parent_id"], parent_id.as_str());
    let show: Value =
        serde_json::from_slice(&weft(d, &["sessions", "show", &child_id, "--json"], &[]).stdout)
            .unwrap();
    assert_eq!(show["parent_id"], parent_id.as_str());
    assert_eq!(show["answer"], "Paris");
    assert_eq!(show["task"], "find the capital of France");
}

#[test]
fn a_secret_equal_to_a_tool_name_or_a_common_word_redacts_text_and_keeps_structure() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        r#"name: names
mode: react
model: scripted:script.yaml
secrets:
  tool_word: { env: WEFT_TOOL_WORD }
  plain_word: { env: WEFT_PLAIN_WORD }
tools:
  - name: lookup
    description: Looks a thing up.
    command: ["sh", "-c", "cat > /dev/null; printf '{\"found\": \"the state of lookup\"}'"]
    env: { KEY: "{{ secrets.tool_word }}{{ secrets.plain_word }}" }
    input_schema: { type: object, properties: { q: { type: string } }, required: [q] }
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls:\n    - { name: lookup, arguments: { q: \"lookup the state\" } }\n- text: \"the state is known\"\n",
    )
    .unwrap();
    let envs = [("WEFT_TOOL_WORD", "lookup"), ("WEFT_PLAIN_WORD", "state")];
    let out = weft(
        d,
        &[
            "run",
            "agent.yaml",
            "what is the state?",
            "--events",
            "--db",
            "w.db",
        ],
        &envs,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let evs = events(&stderr);
    let started = evs
        .iter()
        .find(|e| e["type"] == "tool_call_started")
        .expect("the tool ran");
    // The tool's name is structure: it stays, and the call ran under it.
    assert_eq!(started["tool"], "lookup");
    // The arguments and the output are text: both secrets are redacted there.
    assert_eq!(
        started["args"]["q"],
        "[secret:tool_word] the [secret:plain_word]"
    );
    let finished = evs
        .iter()
        .find(|e| e["type"] == "tool_call_finished")
        .unwrap();
    assert_eq!(
        finished["outcome"]["output"]["found"],
        "the [secret:plain_word] of [secret:tool_word]"
    );
    assert_eq!(evs.last().unwrap()["type"], "run_finished");
    assert_eq!(evs.last().unwrap()["status"], "completed");
    // What was stored reads back, with the same structure.
    let id = evs[0]["session_id"].as_str().unwrap().to_owned();
    let shown = weft(d, &["sessions", "events", &id, "--db", "w.db"], &envs);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    assert!(text(&shown.stdout).contains("\"tool\":\"lookup\""));
}

#[test]
fn a_secret_shorter_than_four_bytes_is_refused_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("agent.yaml"),
        "name: pin\nmode: react\nmodel: scripted:script.yaml\nsecrets:\n  pin: { env: WEFT_PIN }\ntools:\n  - name: t\n    command: [\"true\"]\n    env: { PIN: \"{{ secrets.pin }}\" }\n",
    )
    .unwrap();
    std::fs::write(d.join("script.yaml"), "- text: hi\n").unwrap();
    let out = weft(d, &["run", "agent.yaml", "x"], &[("WEFT_PIN", "123")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("secret `pin`")
            && err.contains("WEFT_PIN")
            && err.contains("3 bytes")
            && err.contains("shorter than 4 bytes"),
        "{err}"
    );
    assert!(!d.join(".weft").exists() || err.contains("pin"));
    // The same for a value given on the command line.
    let out = weft(
        d,
        &["run", "agent.yaml", "x", "--secret", "pin=12"],
        &[("WEFT_PIN", "1234")],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("2 bytes") && err.contains("given for this session"),
        "{err}"
    );
}

/// `WEFT_SANDBOX=off` in weft's environment: a tool that writes outside the agent file's
/// directory, which the default sandbox stops (the call fails with kind `sandbox`), writes there,
/// and weft says once that tools run without a sandbox.
#[test]
#[cfg(target_os = "linux")]
fn weft_sandbox_off_runs_tools_unsandboxed_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("agent");
    std::fs::create_dir(&d).unwrap();
    let outside = tmp.path().join("outside.txt");
    std::fs::write(
        d.join("agent.yaml"),
        format!(
            "name: writer\nmode: react\nmodel: scripted:script.yaml\nrepeats: allow\ntools:\n  - name: scribble\n    description: Writes beside the agent's directory.\n    command: [\"sh\", \"-c\", \"cat > /dev/null; echo x > '{}' && echo '{{}}'\"]\n",
            outside.display()
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("script.yaml"),
        "- tool_calls: [ { name: scribble, arguments: {} } ]\n- text: Done.\n",
    )
    .unwrap();
    let finished = |out: &Output| -> Value {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        events(&err)
            .into_iter()
            .find(|e| e["type"] == "tool_call_finished")
            .unwrap_or_else(|| panic!("no tool call finished: {err}"))
    };

    let sandboxed = weft(&d, &["run", "agent.yaml", "go", "--events"], &[]);
    let call = finished(&sandboxed);
    assert_eq!(call["outcome"]["error"]["kind"], "sandbox", "{call}");
    assert!(!outside.exists());
    assert!(!text(&sandboxed.stderr).contains("WEFT_SANDBOX=off:"));

    let off = weft(
        &d,
        &["run", "agent.yaml", "go", "--events"],
        &[("WEFT_SANDBOX", "off")],
    );
    let call = finished(&off);
    assert_eq!(call["outcome"]["output"], serde_json::json!({}), "{call}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "x\n");
    let said = text(&off.stderr).matches("WEFT_SANDBOX=off:").count();
    assert_eq!(said, 1, "{}", text(&off.stderr));
}
