//! OpenTelemetry export to a real collector on loopback (`scripts/setup-otel` starts rotel, which
//! prints every span it receives to its log): span names, kinds, parentage and attributes; the
//! live export of `weft run` against `weft sessions trace`; a killed and resumed session; and
//! that no secret reaches the collector with message contents on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn endpoint() -> String {
    std::env::var("WEFT_TEST_OTLP_ENDPOINT")
        .expect("WEFT_TEST_OTLP_ENDPOINT is not set: eval \"$(scripts/setup-otel)\"")
}

fn collector_log() -> PathBuf {
    PathBuf::from(
        std::env::var("WEFT_TEST_OTLP_LOG")
            .expect("WEFT_TEST_OTLP_LOG is not set: eval \"$(scripts/setup-otel)\""),
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A directory holding a copy of `examples/`, and a unique name for this test's sessions.
fn workdir(test: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-r")
        .arg(repo().join("examples"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    (dir, format!("{test}-{}-{nanos}", std::process::id()))
}

fn weft(dir: &Path, service: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.current_dir(dir.join("examples"))
        .arg("--db")
        .arg(dir.join("w.db"))
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint())
        .env("OTEL_SERVICE_NAME", service)
        .stdin(Stdio::null());
    c
}

/// A span as the collector printed it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    trace: String,
    id: String,
    parent: String,
    name: String,
    kind: String,
    status: String,
    attrs: BTreeMap<String, String>,
}

/// The spans the collector printed, by the service that sent them.
fn seen() -> HashMap<String, Vec<Seen>> {
    let raw = std::fs::read_to_string(collector_log()).unwrap_or_default();
    let mut text = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    // Without the terminal's colours.
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            text.push(c);
        }
    }
    let mut out: HashMap<String, Vec<Seen>> = HashMap::new();
    let mut service = String::new();
    let mut in_resource = false;
    let mut cur: Option<Seen> = None;
    let flush = |cur: &mut Option<Seen>, service: &str, out: &mut HashMap<String, Vec<Seen>>| {
        if let Some(s) = cur.take() {
            out.entry(service.to_owned()).or_default().push(s);
        }
    };
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("ResourceSpans #") {
            flush(&mut cur, &service, &mut out);
            in_resource = true;
        } else if t.starts_with("Span #") {
            flush(&mut cur, &service, &mut out);
            in_resource = false;
            cur = Some(Seen {
                trace: String::new(),
                id: String::new(),
                parent: String::new(),
                name: String::new(),
                kind: String::new(),
                status: String::new(),
                attrs: BTreeMap::new(),
            });
        } else if let Some(kv) = t.strip_prefix("-> ") {
            let (k, v) = kv.split_once(": ").unwrap_or((kv, ""));
            if in_resource {
                if k == "service.name" {
                    service = v
                        .trim_start_matches("Str(")
                        .trim_end_matches(')')
                        .to_owned();
                }
            } else if let Some(s) = &mut cur {
                s.attrs.insert(k.to_owned(), v.to_owned());
            }
        } else if let (Some(s), Some((k, v))) = (&mut cur, t.split_once(':')) {
            let v = v.trim().to_owned();
            match k.trim() {
                "Trace ID" => s.trace = v,
                "Parent ID" => s.parent = v,
                "ID" => s.id = v,
                "Name" => s.name = v,
                "Kind" => s.kind = v,
                "Status code" => s.status = v,
                _ => {}
            }
        } else if t.starts_with("ScopeSpans") || t.starts_with("InstrumentationScope") {
            flush(&mut cur, &service, &mut out);
        }
    }
    flush(&mut cur, &service, &mut out);
    out
}

/// Waits until the collector printed at least `n` spans of `service`.
fn spans_of(service: &str, n: usize) -> Vec<Seen> {
    let start = Instant::now();
    loop {
        let got = seen().remove(service).unwrap_or_default();
        if got.len() >= n || start.elapsed() > Duration::from_secs(30) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The spans `weft sessions trace --json` derives from the log.
fn derived(dir: &Path, id: &str) -> Vec<serde_json::Value> {
    let out = weft(dir, "unused")
        .args(["sessions", "trace", id, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn one<'a>(spans: &'a [Seen], name: &str) -> &'a Seen {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "{name}: {spans:#?}");
    found[0]
}

fn parent<'a>(spans: &'a [Seen], s: &Seen) -> &'a Seen {
    spans
        .iter()
        .find(|p| p.id == s.parent)
        .unwrap_or_else(|| panic!("{} has no parent among {spans:#?}", s.name))
}

#[test]
fn needs_otel_a_plan_run_exports_live_the_spans_sessions_trace_gives() {
    let (dir, id) = workdir("live");
    let live = format!("weft-live-{id}");
    let out = weft(dir.path(), &live)
        .args([
            "run",
            "tutorial/outing-plan.yaml",
            "What should I do today?",
            "--input",
            r#"{"city": "Oslo"}"#,
            "--id",
            &id,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = derived(dir.path(), &id);
    let spans = spans_of(&live, want.len());
    assert_eq!(spans.len(), want.len(), "{spans:#?}");

    // Names, kinds and parentage: turn > wave > step > tool call; turn > model call.
    let turn = one(&spans, "invoke_agent outing-planner");
    assert_eq!(turn.parent, "");
    assert_eq!(turn.kind, "SPAN_KIND_INTERNAL");
    assert_eq!(turn.attrs["gen_ai.operation.name"], "Str(invoke_agent)");
    assert_eq!(turn.attrs["gen_ai.conversation.id"], format!("Str({id})"));
    assert_eq!(turn.attrs["weft.session.id"], format!("Str({id})"));
    let tool = one(&spans, "execute_tool getWeather");
    assert_eq!(tool.kind, "SPAN_KIND_INTERNAL");
    assert_eq!(tool.attrs["gen_ai.tool.name"], "Str(getWeather)");
    assert_eq!(tool.attrs["gen_ai.tool.call.id"], "Str(weather#1)");
    assert_eq!(tool.attrs["weft.step.id"], "Str(weather)");
    assert_eq!(tool.attrs["weft.wave"], "Int(1)");
    let step = parent(&spans, tool);
    assert_eq!(step.name, "weft.step weather");
    let wave = parent(&spans, step);
    assert_eq!(wave.name, "weft.wave 1");
    assert_eq!(parent(&spans, wave).id, turn.id);
    let plan = spans
        .iter()
        .find(|s| {
            s.name.starts_with("chat ")
                && s.attrs.get("weft.purpose").map(String::as_str) == Some("Str(plan)")
        })
        .unwrap();
    assert_eq!(plan.parent, turn.id);
    assert_eq!(plan.attrs["gen_ai.operation.name"], "Str(chat)");
    assert!(plan.attrs["gen_ai.usage.input_tokens"].starts_with("Int("));
    assert!(plan.attrs.contains_key("gen_ai.request.model"));
    assert!(spans.iter().all(|s| s.trace == turn.trace));

    // `weft sessions trace` of the finished session gives the same spans to the collector.
    let replay = format!("weft-trace-{id}");
    let out = weft(dir.path(), &replay)
        .args(["sessions", "trace", &id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut again = spans_of(&replay, want.len());
    let mut first = spans.clone();
    first.sort();
    again.sort();
    assert_eq!(first, again);
    // And the JSON lines name the same spans.
    let ids: HashSet<String> = want
        .iter()
        .map(|s| s["span_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, spans.iter().map(|s| s.id.clone()).collect());
}

#[test]
fn needs_otel_a_killed_and_resumed_session_is_one_trace_without_a_span_twice() {
    let (dir, id) = workdir("resume");
    let live = format!("weft-live-{id}");
    let mut child = weft(dir.path(), &live)
        .args([
            "run",
            "tutorial/outing-plan.yaml",
            "What should I do today?",
            "--input",
            r#"{"city": "Oslo"}"#,
            "--id",
            &id,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the first tool call has finished (the second is still to come).
    let start = Instant::now();
    loop {
        let out = weft(dir.path(), "unused")
            .args(["sessions", "events", &id])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("tool_call_finished") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the run never called its tool"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL: no chance to flush anything.
    let _ = Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let out = weft(dir.path(), &live)
        .args(["resume", &id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = derived(dir.path(), &id);
    // Whatever the killed process had not sent yet is lost to the live export (`weft sessions
    // trace` sends it); what was sent is never sent twice, and all of it is one trace.
    let resumed_turn_at = Instant::now();
    let spans = loop {
        let s = spans_of(&live, 1);
        if s.iter().any(|x| x.name == "invoke_agent outing-planner")
            || resumed_turn_at.elapsed() > Duration::from_secs(30)
        {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut count: HashMap<&str, usize> = HashMap::new();
    for s in &spans {
        *count.entry(s.id.as_str()).or_default() += 1;
    }
    assert!(
        count.values().all(|n| *n == 1),
        "a span sent twice: {spans:#?}"
    );
    let want_ids: HashSet<&str> = want
        .iter()
        .map(|s| s["span_id"].as_str().unwrap())
        .collect();
    for s in &spans {
        assert!(
            want_ids.contains(s.id.as_str()),
            "{s:?} is not in the session's trace"
        );
        assert_eq!(s.trace, want[0]["trace_id"].as_str().unwrap());
    }
    // The turn began in the killed process and ended in the resumed one: it is one span.
    let turn = one(&spans, "invoke_agent outing-planner");
    assert_eq!(turn.attrs["weft.epoch"], "Int(1)");
    // Spans closed after the takeover came from the second process, parented in the same tree.
    let movie = one(&spans, "execute_tool findMovie");
    assert_eq!(parent(&spans, parent(&spans, movie)).name, "weft.wave 2");
    assert_eq!(
        parent(&spans, parent(&spans, parent(&spans, movie))).id,
        turn.id
    );
}

#[test]
fn needs_otel_no_secret_reaches_the_collector_with_contents_on() {
    let (dir, id) = workdir("canary");
    let canary = format!("canary-{}", id.len() * 7919 + 104_729);
    let agent = r#"name: canary
mode: react
model: scripted:canary-script.yaml
instructions: You show the token.
secrets:
  tok: { env: CANARY_TOKEN }
tools:
  - name: show_env
    description: Shows the token.
    command: [python3, -c, "import os, json; print(json.dumps({'tok': os.environ['TOK']}))"]
    env: { TOK: "{{ secrets.tok }}" }
    input_schema: { type: object, properties: {} }
"#;
    let script = "- tool_calls:\n    - { name: show_env, arguments: {} }\n- text: \"done\"\n";
    std::fs::write(dir.path().join("examples/canary.yaml"), agent).unwrap();
    std::fs::write(dir.path().join("examples/canary-script.yaml"), script).unwrap();
    let service = format!("weft-canary-{id}");
    let out = weft(dir.path(), &service)
        .env("CANARY_TOKEN", &canary)
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .args([
            "run",
            "canary.yaml",
            &format!("Show me the token; it is {canary}."),
            "--id",
            &id,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = spans_of(&service, 4);
    let tool = one(&spans, "execute_tool show_env");
    // Contents are there, redacted.
    let result = &tool.attrs["gen_ai.tool.call.result"];
    assert!(result.contains("[secret:tok]"), "{result}");
    let turn = spans
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .unwrap();
    assert!(turn.attrs.contains_key("gen_ai.input.messages"));
    let log = std::fs::read_to_string(collector_log()).unwrap();
    assert!(!log.contains(&canary), "the secret reached the collector");
}
