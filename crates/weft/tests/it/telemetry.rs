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
    weft_to(dir, service, &endpoint())
}

/// `weft` in `dir`'s copy of the examples, exporting to `collector` as `service`.
fn weft_to(dir: &Path, service: &str, collector: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.current_dir(dir.join("examples"))
        .arg("--db")
        .arg(dir.join("w.db"))
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
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
    // Metrics are printed in the same log: their blocks are skipped.
    let mut in_metrics = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("ResourceMetrics #") {
            flush(&mut cur, &service, &mut out);
            in_metrics = true;
        } else if t.starts_with("ResourceSpans #") {
            flush(&mut cur, &service, &mut out);
            in_metrics = false;
            in_resource = true;
        } else if in_metrics {
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

/// A run SIGKILLed before it exported anything (its spans wait a minute for a batch) and
/// resumed: the resuming process sends what the killed one never had acknowledged (the
/// session's export mark is still at 0), so the collector holds the whole trace, each span
/// once, without `weft sessions trace`.
#[test]
fn needs_otel_a_session_killed_before_its_export_is_whole_at_the_collector_once_resumed() {
    let (dir, id) = workdir("resume");
    let live = format!("weft-live-{id}");
    let mut child = weft(dir.path(), &live)
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
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
    let before_resume = derived(dir.path(), &id);
    assert!(
        !before_resume.is_empty(),
        "the killed run closed no span before it died"
    );
    assert!(
        seen().remove(&live).unwrap_or_default().is_empty(),
        "the killed run exported before it died"
    );
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
    let spans = spans_of(&live, want.len());
    // The whole trace, each span once: those closed before the kill too.
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
    assert_eq!(
        count.keys().copied().collect::<HashSet<&str>>(),
        want_ids,
        "the collector's trace has holes: {spans:#?}"
    );
    for s in &spans {
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

/// A collector on loopback that accepts connections and never answers (held until the test
/// ends); its base URL.
fn silent_collector() -> (String, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        l.set_nonblocking(true).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(40) {
            match l.accept() {
                Ok((c, _)) => conns.push(c),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (url, held)
}

/// `weft run` of the tutorial's plan exporting to `collector`, with `env`: its stderr (the
/// session's id as `ID`) and how long it took.
fn run_against(collector: &str, env: &[(&str, &str)]) -> (String, Duration) {
    let (dir, id) = workdir("hang");
    run_in(dir.path(), &id, collector, env)
}

/// [`run_against`] in `dir`, as session `id`.
fn run_in(dir: &Path, id: &str, collector: &str, env: &[(&str, &str)]) -> (String, Duration) {
    let start = Instant::now();
    let out = weft_to(dir, "weft-hang", collector)
        .envs(env.iter().copied())
        .args([
            "run",
            "tutorial/outing-plan.yaml",
            "What should I do today?",
            "--input",
            r#"{"city": "Oslo"}"#,
            "--id",
            id,
        ])
        .output()
        .unwrap();
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (err.replace(id, "ID"), took)
}

/// A collector that accepts the connection and never answers costs the end of a run at most
/// `WEFT_OTLP_EXIT_TIMEOUT` (1 s), spans and metrics together, not the request's 10 s.
#[test]
fn a_collector_that_never_answers_delays_the_end_of_a_run_by_the_exit_timeout_at_most() {
    let (collector, held) = silent_collector();
    let (_, took) = run_against(&collector, &[]);
    assert!(took < Duration::from_secs(4), "the run took {took:?}");
    let (err, took) = run_against(&collector, &[("WEFT_OTLP_EXIT_TIMEOUT", "200")]);
    assert!(took < Duration::from_secs(3), "the run took {took:?}");
    assert!(
        err.contains("within 200 ms (WEFT_OTLP_EXIT_TIMEOUT)"),
        "{err}"
    );
    let (err, _) = run_against(&collector, &[("WEFT_OTLP_EXIT_TIMEOUT", "soon")]);
    assert!(
        err.contains("WEFT_OTLP_EXIT_TIMEOUT=soon: not a positive whole number"),
        "{err}"
    );
    drop(held);
}

/// The spans a collector that never answers did not take are reported when the run ends, as
/// those of a collector that is down are: how many, the endpoint and its variable, the wait,
/// and the command that sends them again.
#[test]
fn the_spans_a_silent_collector_never_took_are_reported_lost() {
    let (collector, held) = silent_collector();
    let (err, _) = run_against(&collector, &[]);
    let line = err
        .lines()
        .find(|l| l.starts_with("telemetry: ") && l.contains("spans exported"))
        .unwrap_or_else(|| panic!("no report of the spans: {err}"));
    assert!(
        line.starts_with(&format!(
            "telemetry: 0 spans exported to {collector}/v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT), 0 dropped (queue full), "
        )),
        "{line}"
    );
    assert!(
        line.contains(" lost (the collector did not answer within 1000 ms (WEFT_OTLP_EXIT_TIMEOUT)); `weft sessions trace ID` exports them again"),
        "{line}"
    );
    assert!(!line.contains(" 0 lost"), "{line}");
    assert!(
        err.contains(&format!(
            "telemetry: metrics not all exported to {collector}/v1/metrics (OTEL_EXPORTER_OTLP_ENDPOINT): the collector did not answer within 1000 ms"
        )),
        "{err}"
    );
    drop(held);
}

/// An endpoint that is not an `http` or `https` URL is refused when the process starts, naming
/// the variable (or `--otlp`) and the scheme, not reported later as a network error.
#[test]
fn an_endpoint_with_another_scheme_is_refused_naming_its_variable() {
    let (err, _) = run_against("ftp://127.0.0.1:4318", &[]);
    assert!(
        err.contains("telemetry: spans not exported: OTEL_EXPORTER_OTLP_ENDPOINT=ftp://127.0.0.1:4318: the scheme `ftp` is not one OTLP over HTTP uses"),
        "{err}"
    );
    assert!(
        err.contains("telemetry: metrics not exported: OTEL_EXPORTER_OTLP_ENDPOINT=ftp://127.0.0.1:4318: the scheme `ftp`"),
        "{err}"
    );
    assert!(!err.contains("network error"), "{err}");
    let (err, _) = run_against(
        "http://127.0.0.1:9",
        &[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "localhost:4318/v1/traces",
        )],
    );
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=localhost:4318/v1/traces: the scheme"),
        "{err}"
    );
    let (dir, id) = workdir("scheme");
    run_in(dir.path(), &id, "ftp://127.0.0.1:4318", &[]);
    let out = weft_to(dir.path(), "unused", "http://127.0.0.1:9")
        .args(["sessions", "trace", &id, "--otlp", "ftp://127.0.0.1:4318"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--otlp=ftp://127.0.0.1:4318: the scheme `ftp`"),
        "{err}"
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

const KEY: &str = "otel-key-0123456789abcdef";
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A ReAct agent for `weft serve` whose one tool call waits for the file `release` in the
/// server's directory when `gate` (idempotent: run again after a takeover), then answers.
fn served_agent(dir: &Path, gate: bool) {
    let wait = if gate {
        "touch started; while [ ! -e release ]; do sleep 0.05; done; "
    } else {
        ""
    };
    std::fs::write(
        dir.join("shouter.yaml"),
        format!(
            r#"name: shouter
mode: react
model: scripted:shouter.script.yaml
tools:
  - name: shout
    description: Shouts.
    idempotent: true
    command: ["sh", "-c", "cat > /dev/null; {wait}echo '{{\"shouted\": \"LOUD\"}}'"]
    sandbox: {{ write: [.] }}
"#
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("shouter.script.yaml"),
        "- tool_calls: [ { name: shout, arguments: {} } ]\n- text: \"Shouted: LOUD\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("keys.txt"), format!("{KEY} otel\n")).unwrap();
}

/// Starts `weft serve` in `dir` exporting as `service`, and waits until it answers.
fn serve(dir: &Path, port: u16, service: &str, extra_env: &[(&str, &str)]) -> std::process::Child {
    let log = std::fs::File::create(dir.join(format!("{service}.log"))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(dir)
        .args([
            "--db", "serve.db", "serve", "--agents", ".", "--keys", "keys.txt",
        ])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env_remove("WEFT_DB")
        .env_remove("WEFT_API_KEYS")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint())
        .env("OTEL_SERVICE_NAME", service)
        .env(
            "OTEL_SEMCONV_STABILITY_OPT_IN",
            "gen_ai_latest_experimental",
        )
        .env("RUST_LOG", "weft=info")
        .envs(extra_env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://127.0.0.1:{port}/health"))
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout) == "200" {
            return child;
        }
        if start.elapsed() > Duration::from_secs(30) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "weft serve did not come up: {}",
                std::fs::read_to_string(dir.join(format!("{service}.log"))).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A request to the server with its API key; the body it answered with.
fn http(port: u16, method: &str, path: &str, headers: &[&str], body: Option<&str>) -> String {
    let mut c = Command::new("curl");
    c.args(["-sS", "--fail-with-body", "-X", method])
        .args(["-H", &format!("x-api-key: {KEY}")])
        .args(["-H", "content-type: application/json"]);
    for h in headers {
        c.args(["-H", h]);
    }
    if let Some(b) = body {
        c.args(["--data", b]);
    }
    let out = c
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{method} {path}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The spans `weft sessions trace --json` derives from the log of a server's store.
fn derived_in(dir: &Path, id: &str) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(dir)
        .args(["--db", "serve.db", "sessions", "trace", id, "--json"])
        .env(
            "OTEL_SEMCONV_STABILITY_OPT_IN",
            "gen_ai_latest_experimental",
        )
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

fn stop(mut child: std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn ids(spans: &[serde_json::Value]) -> HashSet<String> {
    spans
        .iter()
        .map(|s| s["span_id"].as_str().unwrap().to_owned())
        .collect()
}

/// A `traceparent` sent with a run to `weft serve` parents the run's spans, which the server
/// exports live as it drives the run; its metrics go to the collector and to `/metrics`, with
/// the conventions' names and buckets.
#[test]
fn needs_otel_a_traceparent_sent_to_weft_serve_parents_the_runs_spans() {
    let (tmp, id) = (tempfile::tempdir().unwrap(), workdir("serve").1);
    let dir = tmp.path();
    served_agent(dir, false);
    let port = free_port();
    let service = format!("weft-serve-{id}");
    let server = serve(
        dir,
        port,
        &service,
        &[("RUST_LOG", "weft=info,weft_runtime=debug")],
    );
    http(
        port,
        "POST",
        "/threads",
        &[],
        Some(&format!(r#"{{"thread_id": "{id}"}}"#)),
    );
    let caller_span = "00f067aa0ba902b7";
    let values = http(
        port,
        "POST",
        &format!("/threads/{id}/runs/wait"),
        &[&format!("traceparent: 00-{CALLER_TRACE}-{caller_span}-01")],
        Some(
            r#"{"assistant_id": "shouter", "input": {"messages": [{"role": "user", "content": "Shout."}]}}"#,
        ),
    );
    assert!(values.contains("Shouted: LOUD"), "{values}");
    let want = derived_in(dir, &id);
    let spans = spans_of(&service, want.len());
    assert_eq!(ids(&want), spans.iter().map(|s| s.id.clone()).collect());
    // The run's turn is a child of the caller's span, in the caller's trace, and so is all of it.
    let turn = one(&spans, "invoke_agent shouter");
    assert_eq!(turn.parent, caller_span);
    assert!(spans.iter().all(|s| s.trace == CALLER_TRACE), "{spans:#?}");
    let tool = one(&spans, "execute_tool shout");
    assert_eq!(tool.parent, turn.id);
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .collect();
    assert_eq!(chats.len(), 2);
    for c in chats {
        assert_eq!(c.parent, turn.id);
        // The latest conventions were asked for.
        assert_eq!(c.attrs["gen_ai.provider.name"], "Str(weft.scripted)");
        assert!(!c.attrs.contains_key("gen_ai.system"));
    }
    // The same metrics on /metrics, with the conventions' buckets.
    let text = http(port, "GET", "/metrics", &[], None);
    for line in [
        r#"gen_ai_client_token_usage_bucket{le="4.0",gen_ai_operation_name="chat",gen_ai_provider_name="weft.scripted""#,
        r#"gen_ai_client_token_usage_bucket{le="67108864.0",gen_ai_operation_name="chat",gen_ai_provider_name="weft.scripted""#,
        r#"gen_ai_client_operation_duration_seconds_bucket{le="0.01",gen_ai_operation_name="execute_tool",gen_ai_tool_name="shout"}"#,
        r#"gen_ai_client_operation_duration_seconds_bucket{le="81.92",gen_ai_operation_name="execute_tool",gen_ai_tool_name="shout"} 1"#,
        r#"weft_turns_total{weft_turn_outcome="completed"} 1.0"#,
        r#"weft_telemetry_spans_total{outcome="dropped"} 0"#,
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    stop(server);
    // And over OTLP, the instruments with their units and the conventions' bucket boundaries.
    let tokens = metrics_of(&service, "gen_ai.client.token.usage");
    assert!(tokens.contains("-> Unit: {token}\n"), "{tokens}");
    assert!(tokens.contains("-> DataType: Histogram\n"), "{tokens}");
    assert!(
        tokens.contains("-> gen_ai.token.type: Str(input)"),
        "{tokens}"
    );
    let token_bounds = [
        "1", "4", "16", "64", "256", "1024", "4096", "16384", "65536", "262144", "1048576",
        "4194304", "16777216", "67108864",
    ];
    for (i, b) in token_bounds.iter().enumerate() {
        let line = format!("ExplicitBounds #{i}: {b}\n");
        assert!(tokens.contains(&line), "{line} not in {tokens}");
    }
    let durations = metrics_of(&service, "gen_ai.client.operation.duration");
    assert!(durations.contains("-> Unit: s\n"), "{durations}");
    let duration_bounds = [
        "0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56", "5.12", "10.24",
        "20.48", "40.96", "81.92",
    ];
    for (i, b) in duration_bounds.iter().enumerate() {
        let line = format!("ExplicitBounds #{i}: {b}\n");
        assert!(durations.contains(&line), "{line} not in {durations}");
    }
    for op in ["chat", "execute_tool", "invoke_agent"] {
        assert!(
            durations.contains(&format!("-> gen_ai.operation.name: Str({op})")),
            "{op}: {durations}"
        );
    }
    let turns = metrics_of(&service, "weft.turns");
    assert!(
        turns.contains("-> weft.turn.outcome: Str(completed)"),
        "{turns}"
    );
    assert!(turns.contains("Value: 1\n"), "{turns}");
    // The server's logs of the run carry the caller's trace and the turn's span.
    let log = std::fs::read_to_string(dir.join(format!("{service}.log"))).unwrap();
    let ids = format!("trace_id={CALLER_TRACE} span_id={}", turn.id);
    assert!(
        log.lines()
            .any(|l| l.contains(&ids) && l.contains("committed")),
        "no log line with {ids}:\n{log}"
    );
}

/// A run whose server is SIGKILLed mid-run and taken over by the next server on the store is
/// one trace, under the `traceparent` the first server received (stored with the run), with no
/// span sent twice; the second server counts the takeover.
#[test]
fn needs_otel_a_run_taken_over_by_another_server_is_one_trace_without_a_span_twice() {
    let (tmp, id) = (tempfile::tempdir().unwrap(), workdir("takeover").1);
    let dir = tmp.path();
    served_agent(dir, true);
    let port = free_port();
    let first = format!("weft-first-{id}");
    // Spans go out at once, so that the first server has sent what it closed before it dies.
    let server = serve(dir, port, &first, &[("OTEL_BSP_SCHEDULE_DELAY", "20")]);
    http(
        port,
        "POST",
        "/threads",
        &[],
        Some(&format!(r#"{{"thread_id": "{id}"}}"#)),
    );
    let caller_span = "b7ad6b7169203331";
    http(
        port,
        "POST",
        &format!("/threads/{id}/runs"),
        &[&format!("traceparent: 00-{CALLER_TRACE}-{caller_span}-01")],
        Some(
            r#"{"assistant_id": "shouter", "input": {"messages": [{"role": "user", "content": "Shout."}]}}"#,
        ),
    );
    weft_testkit::wait_for_file(&dir.join("started"), Duration::from_secs(30));
    // The model's first reply (its span closed) reached the collector from the first server.
    let sent = spans_of(&first, 1);
    assert_eq!(sent.len(), 1, "{sent:#?}");
    // And its acknowledgement was kept with the session (else the next process sends it again).
    wait_for_mark(&dir.join("serve.db"), &id);
    let mut server = server;
    let _ = Command::new("kill")
        .args(["-KILL", &server.id().to_string()])
        .status();
    let _ = server.wait();
    std::fs::write(dir.join("release"), "").unwrap();
    let second = format!("weft-second-{id}");
    let server = serve(dir, port, &second, &[]);
    // The next server takes the run over at once (its owner's process is gone) and finishes it.
    let want = finished_by(dir, &id, &second);
    let later = spans_of(&second, want.len() - sent.len());
    let metrics = http(port, "GET", "/metrics", &[], None);
    stop(server);
    let all = each_once(&sent, &later, &want);
    assert!(all.iter().all(|s| s.trace == CALLER_TRACE), "{all:#?}");
    // The turn began in the first server and ended in the second: one span, the caller's child.
    let turn = one(&later, "invoke_agent shouter");
    assert_eq!(turn.parent, caller_span);
    assert_eq!(turn.attrs["weft.epoch"], "Int(1)");
    assert_eq!(one(&later, "execute_tool shout").parent, turn.id);
    assert!(
        metrics.contains("weft_lease_takeovers_total{} 1.0"),
        "{metrics}"
    );
}

/// Waits until session `id`'s export mark in the SQLite store `db` has moved from 0: the
/// collector acknowledged some of its spans and the exporting process kept that.
fn wait_for_mark(db: &Path, id: &str) {
    let start = Instant::now();
    loop {
        let mark: i64 = rusqlite::Connection::open(db)
            .and_then(|c| {
                c.query_row(
                    "SELECT exported_seq FROM sessions WHERE id = ?1",
                    [id],
                    |r| r.get(0),
                )
            })
            .unwrap_or(0);
        if mark > 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "session {id}'s export mark never moved"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The spans `weft sessions trace` derives from session `id` once its turn has ended, waiting
/// for the process exporting as `second` (which took it over) to finish it.
fn finished_by(dir: &Path, id: &str, second: &str) -> Vec<serde_json::Value> {
    let start = Instant::now();
    loop {
        let d = derived_in(dir, id);
        if d.iter().any(|s| s["name"] == "invoke_agent shouter") {
            return d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the session was not finished by {second}: {}",
            std::fs::read_to_string(dir.join(format!("{second}.log"))).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The spans two processes sent for one session (`sent` before a takeover, `later` after it):
/// each of the log's spans (`want`) exactly once between them.
fn each_once(sent: &[Seen], later: &[Seen], want: &[serde_json::Value]) -> Vec<Seen> {
    let all: Vec<Seen> = sent.iter().chain(later).cloned().collect();
    let mut count: HashMap<&str, usize> = HashMap::new();
    for s in &all {
        *count.entry(s.id.as_str()).or_default() += 1;
    }
    assert!(
        count.values().all(|n| *n == 1),
        "a span sent twice: {all:#?}"
    );
    assert_eq!(ids(want), all.iter().map(|s| s.id.clone()).collect());
    all
}

/// The collector's log text of `metric` as `service` sent it last (waits until it came).
fn metrics_of(service: &str, metric: &str) -> String {
    let start = Instant::now();
    loop {
        let raw = std::fs::read_to_string(collector_log()).unwrap_or_default();
        let text = strip_colours(&raw);
        let mut found = None;
        for resource in text.split("ResourceMetrics #").skip(1) {
            if !resource.contains(&format!("service.name: Str({service})")) {
                continue;
            }
            for m in resource.split("Metric #").skip(1) {
                if m.contains(&format!("-> Name: {metric}\n")) {
                    found = Some(m.to_owned());
                }
            }
        }
        if let Some(m) = found {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{service} sent no {metric} to the collector"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn strip_colours(raw: &str) -> String {
    let mut text = String::with_capacity(raw.len());
    let mut chars = raw.chars();
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
    text
}

/// The span ids `weft sessions trace --json` derives from a session's log.
fn derived_ids(dir: &Path, id: &str) -> HashSet<String> {
    derived(dir, id)
        .iter()
        .map(|s| s["span_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Runs `weft` with `args` in `dir`'s copy of the examples, exporting as `service`; fails the
/// test on a non-zero exit.
fn run_ok(dir: &Path, service: &str, args: &[&str]) -> String {
    let out = weft(dir, service).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "weft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `weft plan run` exports its session's spans as it runs: each span `weft sessions trace`
/// derives from the log, once, in the session's trace.
#[test]
fn needs_otel_a_plan_run_of_a_plan_file_exports_its_spans_live() {
    let (dir, id) = workdir("planrun");
    let live = format!("weft-live-{id}");
    run_ok(
        dir.path(),
        &live,
        &[
            "plan",
            "run",
            "plans/payment.json",
            "--agent",
            "shop.yaml",
            "--input",
            r#"{"amount": 500}"#,
            "--id",
            &id,
        ],
    );
    let want = derived_ids(dir.path(), &id);
    assert!(want.len() >= 3, "{want:?}");
    let spans = spans_of(&live, want.len());
    let got: Vec<String> = spans.iter().map(|s| s.id.clone()).collect();
    assert_eq!(got.len(), want.len(), "a span twice or missing: {spans:#?}");
    assert_eq!(got.into_iter().collect::<HashSet<_>>(), want);
    assert!(spans.iter().any(|s| s.name.starts_with("execute_tool ")));
    assert!(spans.iter().all(|s| s.trace == spans[0].trace));
}

/// `weft batch` exports the spans of every record's session as it runs, each session in a
/// trace of its own.
#[test]
fn needs_otel_a_batch_exports_each_records_spans_live() {
    let (dir, id) = workdir("batch");
    let live = format!("weft-live-{id}");
    run_ok(
        dir.path(),
        &live,
        &[
            "batch",
            "refund-desk.yaml",
            "records/refunds.jsonl",
            "--name",
            &id,
            "--concurrency",
            "2",
            "--out",
            "results.jsonl",
        ],
    );
    let results = std::fs::read_to_string(dir.path().join("examples/results.jsonl")).unwrap();
    let sessions: Vec<String> = results
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["session"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(sessions.len(), 3, "{results}");
    let mut want = HashSet::new();
    for s in &sessions {
        want.extend(derived_ids(dir.path(), s));
    }
    let spans = spans_of(&live, want.len());
    let got: Vec<String> = spans.iter().map(|s| s.id.clone()).collect();
    assert_eq!(got.len(), want.len(), "a span twice or missing: {spans:#?}");
    assert_eq!(got.into_iter().collect::<HashSet<_>>(), want);
    let traces: HashSet<&str> = spans.iter().map(|s| s.trace.as_str()).collect();
    assert_eq!(traces.len(), 3, "one trace per record's session");
}

/// Starts `weft worker` in `dir` (store `serve.db`) exporting as `service`, with a lease of
/// two seconds so that a killed worker's session is taken over soon.
fn worker(dir: &Path, service: &str) -> std::process::Child {
    let log = std::fs::File::create(dir.join(format!("{service}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(dir)
        .args(["--db", "serve.db", "worker", "--agents", "."])
        .args(["--poll-secs", "0.2"])
        .env_remove("WEFT_DB")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint())
        .env("OTEL_SERVICE_NAME", service)
        // Spans go out at once, so that the first worker has sent what it closed before it dies.
        .env("OTEL_BSP_SCHEDULE_DELAY", "20")
        .env("WEFT_LEASE_SECS", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// A session queued with `weft submit`, begun by one worker that is SIGKILLed during its tool
/// call and finished by another worker once the lease ran out: the two workers' spans are the
/// spans of one trace that the log derives, none sent twice.
#[test]
fn needs_otel_a_session_taken_over_by_another_worker_is_one_trace_without_a_span_twice() {
    let (tmp, id) = (tempfile::tempdir().unwrap(), workdir("workers").1);
    let dir = tmp.path();
    served_agent(dir, true);
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .current_dir(dir)
        .args([
            "--db",
            "serve.db",
            "submit",
            "shouter.yaml",
            "Shout.",
            "--id",
            &id,
        ])
        .env_remove("WEFT_DB")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = format!("weft-worker-1-{id}");
    let mut a = worker(dir, &first);
    weft_testkit::wait_for_file(&dir.join("started"), Duration::from_secs(30));
    // The model's first reply (its span closed) reached the collector from the first worker.
    let sent = spans_of(&first, 1);
    assert_eq!(sent.len(), 1, "{sent:#?}");
    // And its acknowledgement was kept with the session (else the next process sends it again).
    wait_for_mark(&dir.join("serve.db"), &id);
    let _ = Command::new("kill")
        .args(["-KILL", &a.id().to_string()])
        .status();
    let _ = a.wait();
    std::fs::write(dir.join("release"), "").unwrap();
    let second = format!("weft-worker-2-{id}");
    let mut b = worker(dir, &second);
    let want = finished_by(dir, &id, &second);
    let later = spans_of(&second, want.len() - sent.len());
    let _ = Command::new("kill")
        .args(["-TERM", &b.id().to_string()])
        .status();
    let _ = b.wait();
    let all = each_once(&sent, &later, &want);
    assert!(all.iter().all(|s| s.trace == all[0].trace), "{all:#?}");
    // The turn (begun by `weft submit`) ended under the second worker: one span. Its tool call,
    // started under the first worker's lease (epoch 1) and finished by the second worker, is
    // one span too, the turn's child, sent by the second worker.
    let turn = one(&later, "invoke_agent shouter");
    let tool = one(&later, "execute_tool shout");
    assert_eq!(tool.parent, turn.id);
    assert_eq!(
        tool.attrs.get("weft.epoch").map(String::as_str),
        Some("Int(1)"),
        "{tool:#?}"
    );
}

/// The depth of the work queue (sessions waiting for a worker) is sampled from the store by
/// `weft serve`: on `/metrics` as `weft_queue_depth` and over OTLP as the gauge
/// `weft.queue.depth`.
#[test]
fn needs_otel_the_queue_depth_is_sampled_for_metrics_and_the_collector() {
    let (tmp, id) = (tempfile::tempdir().unwrap(), workdir("queue").1);
    let dir = tmp.path();
    served_agent(dir, false);
    // Sessions of an agent this server does not serve wait in the queue for a worker.
    std::fs::create_dir(dir.join("queued")).unwrap();
    let shouter = std::fs::read_to_string(dir.join("shouter.yaml")).unwrap();
    std::fs::write(
        dir.join("queued/waiter.yaml"),
        shouter.replace("name: shouter", "name: waiter"),
    )
    .unwrap();
    std::fs::copy(
        dir.join("shouter.script.yaml"),
        dir.join("queued/shouter.script.yaml"),
    )
    .unwrap();
    for k in 0..2 {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .current_dir(dir)
            .args(["--db", "serve.db", "submit", "queued/waiter.yaml"])
            .arg(format!("Wait {k}."))
            .env_remove("WEFT_DB")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let port = free_port();
    let service = format!("weft-queue-{id}");
    let server = serve(dir, port, &service, &[]);
    let start = Instant::now();
    loop {
        let text = http(port, "GET", "/metrics", &[], None);
        if text.lines().any(|l| l == "weft_queue_depth{} 2.0") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no weft_queue_depth 2 on /metrics:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(server);
    let depth = metrics_of(&service, "weft.queue.depth");
    assert!(depth.contains("-> DataType: Gauge\n"), "{depth}");
    assert!(depth.contains("-> Unit: {session}\n"), "{depth}");
    assert!(depth.contains("Value: 2\n"), "{depth}");
}
