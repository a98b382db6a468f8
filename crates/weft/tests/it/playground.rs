//! The playground in a real browser, against a real `weft serve` with the agents of
//! `tests/fixtures/playground/` (a scripted model, local command tools): the page in headless
//! Chromium through WebDriver (`tests/playground/browser.py`, selenium and Debian's chromium from
//! `scripts/setup-browser`), `needs_browser_*`; and the eval runs of real `weft eval` runs
//! listed and compared as `weft eval compare` compares them. The routes from an HTTP client are
//! tested in weft-server's own tests (`crates/weft-server/tests/it/playground.rs`).
//!
//! `WEFT_PLAYGROUND_SCREENSHOTS=DIR` makes the browser tests write the pictures of the docs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ALICE: &str = "alice-key-0123456789abcdef";
const BOB: &str = "bob-key-0123456789abcdef00";

/// A `weft serve` on a free port over a copy of the playground's agents, stopped when dropped.
struct Server {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Server {
    /// A server whose directory `prepare` was given first (to put sessions into its store,
    /// `serve.db`, or agent files beside the fixtures, before it serves them).
    fn start_with(prepare: impl FnOnce(&Path)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/playground");
        for f in std::fs::read_dir(&fixtures).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
        prepare(dir.path());
        std::fs::write(
            dir.path().join("keys.txt"),
            format!("{ALICE} alice\n{BOB} bob\n"),
        )
        .unwrap();
        // alice has a quota (the page shows her spending against it); bob has none.
        std::fs::create_dir(dir.path().join("limits")).unwrap();
        std::fs::write(
            dir.path().join("limits/quotas.yaml"),
            "users:\n  alice: { day: { cost_usd: 100 }, month: { tokens: 10000000 } }\n",
        )
        .unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["--db", "serve.db", "serve", "--agents", "."])
            .args([
                "--keys",
                "keys.txt",
                "--quotas",
                "limits/quotas.yaml",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .current_dir(dir.path())
            .env_remove("WEFT_DB")
            .env_remove("WEFT_API_KEYS")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let mut s = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let began = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if began.elapsed() > Duration::from_secs(30) || s.child.try_wait().unwrap().is_some() {
                panic!("weft serve did not come up: {}", s.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path().join("serve.log")).unwrap_or_default()
    }

    /// The tools' calls, in order (`tools.py` appends each to `calls.log`).
    fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let began = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if began.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.wait();
    }
}

/// An HTTP client of the API, with one user's key.
struct Client {
    http: reqwest::Client,
    base: String,
    key: &'static str,
}

/// An HTTP client (reqwest on rustls with `ring`, as weft's own clients are built).
fn http() -> reqwest::Client {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

impl Client {
    fn new(server: &Server, key: &'static str) -> Self {
        Self {
            http: http(),
            base: server.url.clone(),
            key,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", self.key);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> Value {
        let (status, v) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }
}

fn desk_input() -> Value {
    json!({"customerId": "c-42", "amount": 50})
}

/// A desk session `origin` of alice's, run by `weft run` before the server starts; then the world
/// changes: the refund tool's receipt (`receipt.txt`) and the model's answer (its script) are
/// new, so that a fork of `origin` after its lookups refunds with another receipt and says so.
fn origin_then_the_world_changes(dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["--db", "serve.db", "run", "desk.yaml", "Refund c-42."])
        .args(["--input", &desk_input().to_string()])
        .args(["--user", "alice", "--id", "origin"])
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weft run: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.join("receipt.txt"), "r-77777").unwrap();
    let script = dir.join("desk.script.yaml");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("(receipt r-20931)"));
    std::fs::write(
        &script,
        text.replace("(receipt r-20931)", "(receipt r-77777)"),
    )
    .unwrap();
}

// --- The page in a real browser ---------------------------------------------------------------

/// Runs one scenario of `tests/playground/browser.py` against a fresh server; the checks it
/// passed.
fn browser(scenario: &str, expect: &[&str]) -> Server {
    browser_with(scenario, expect, |_| {})
}

/// [`browser`] against a server whose directory `prepare` was given first.
fn browser_with(scenario: &str, expect: &[&str], prepare: impl FnOnce(&Path)) -> Server {
    let python = common::service_var("WEFT_TEST_BROWSER_PYTHON");
    common::service_var("WEFT_TEST_CHROMIUM");
    common::service_var("WEFT_TEST_CHROMEDRIVER");
    let server = Server::start_with(prepare);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/playground/browser.py");
    let shots: Option<PathBuf> = std::env::var_os("WEFT_PLAYGROUND_SCREENSHOTS").map(PathBuf::from);
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .args([scenario, &format!("{}/", server.url), ALICE])
        .arg(server.path())
        // Selenium is given the driver and the browser; it must never look for them online.
        .env("SE_OFFLINE", "true");
    if let Some(dir) = &shots {
        std::fs::create_dir_all(dir).unwrap();
        cmd.arg(dir);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser scenario `{scenario}` failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    for check in expect {
        assert!(
            stdout.contains(&format!("ok: {check}\n")),
            "{check}: {stdout}"
        );
    }
    // What a scenario measured (`figure: ...`) is shown with `--no-capture`.
    for line in stdout.lines().filter(|l| l.starts_with("figure: ")) {
        println!("{line}");
    }
    server
}

#[test]
fn needs_browser_start_a_run_and_watch_its_nodes_turn_completed() {
    let server = browser(
        "run",
        &[
            "the plan is drawn by wave with its data and order edges",
            "nodes run live",
            "every node turned completed",
            "the answer, usage and cost are shown",
            "a run started from the page is listed at once",
            "the sessions list updates live",
            "the list filters by status and agent",
            "tool call cards show arguments, results and durations",
            "JSON values fold, long ones show all on request, and copy whole",
            "the reviews and the plan version are listed",
        ],
    );
    assert_eq!(server.calls().len(), 4, "each tool ran once");
}

#[test]
fn needs_browser_spending_against_the_budget_and_the_users_quota() {
    browser(
        "spending",
        &[
            "the user's quota is shown from the start",
            "the run's spending is shown against its budget",
            "the user's spending against their quota follows the run",
        ],
    );
}

#[test]
fn needs_browser_answer_a_question_with_the_keyboard_on_a_narrow_window() {
    let server = browser(
        "question",
        &[
            "the question is shown",
            "the question is answered with the keyboard alone",
            "nothing overflows a narrow window",
            "a step's details open from the keyboard",
        ],
    );
    assert_eq!(
        server.calls(),
        [json!({"tool": "refund", "args": {"customerId": "c1", "amount": 75}})]
    );
}

#[test]
fn needs_browser_approve_a_tool_call() {
    browser(
        "tool",
        &[
            "the tool call waits for approval, with its arguments",
            "the approved call ran once and the agent answered",
        ],
    );
}

#[test]
fn needs_browser_reject_and_edit_a_plan() {
    browser(
        "plan",
        &[
            "the proposed plan is drawn",
            "a rejected plan ends the run and runs nothing",
            "an edit that is not JSON is caught before it is sent",
            "an invalid edit shows the step, field and problem, and cannot be sent",
            "the edited plan ran instead of the proposed one",
        ],
    );
}

#[test]
fn needs_browser_scrub_the_slider_and_fork() {
    browser(
        "fork",
        &[
            "the slider redraws the session as it was at an event",
            "the fork continued from the event and ran only what came after it",
        ],
    );
}

#[test]
fn needs_browser_compare_a_fork_with_its_origin() {
    browser_with(
        "compare",
        &[
            "a fork's page offers its origin first and opens the comparison",
            "the event where the fork parts is named",
            "the differing step and its result's receipt are marked, the others alike",
            "the answers' differing words are struck and underlined",
            "the comparison opens from its address",
        ],
        origin_then_the_world_changes,
    );
}

#[test]
fn needs_browser_see_a_failed_steps_error() {
    browser(
        "failed",
        &[
            "the failed step, its error, stderr and what to do are shown",
            "the first click on the failed step keeps its error open",
        ],
    );
}

#[test]
fn needs_browser_sign_out_stops_the_polls_and_sign_in_polls_once() {
    browser(
        "signout",
        &[
            "after signing out nothing polls and the form keeps what is typed",
            "signing in again polls the list once",
        ],
    );
}

#[test]
fn needs_browser_a_key_refused_at_sign_in_is_said_in_the_form() {
    browser(
        "wrongkey",
        &[
            "a refused key is said in the sign-in form and not kept",
            "a valid key then signs in",
        ],
    );
}

#[test]
fn needs_browser_a_react_sessions_tool_bars_open_their_calls_from_the_keyboard() {
    browser(
        "reacttimeline",
        &[
            "a ReAct session's tool call bars are buttons",
            "a tool call's bar opens its card with the keyboard",
        ],
    );
}

#[test]
fn needs_browser_answer_ask_user_on_a_narrow_window() {
    let server = browser(
        "ask",
        &[
            "a question without missing arguments shows no undefined",
            "an answered ask_user call is not pending",
            "the conversation fits a narrow window",
        ],
    );
    assert_eq!(server.calls().len(), 1, "the transfer ran once");
}

#[test]
fn needs_browser_a_step_that_needs_a_failed_step_is_skipped() {
    browser(
        "skipped",
        &["a step that needs a failed step is skipped, not pending in a wave to come"],
    );
}

#[test]
fn needs_browser_a_denied_step_is_failed_in_its_wave_and_named() {
    browser(
        "denied",
        &["a denied step is failed in its wave and named, the step after it skipped"],
    );
}

#[test]
fn needs_browser_event_counts_agree_whichever_tab_is_open() {
    browser(
        "counts",
        &["the Events tab, the header and the slider count the same events"],
    );
}

#[test]
fn needs_browser_the_timeline_shows_the_session_on_one_time_axis() {
    browser(
        "timeline",
        &[
            "the timeline shows the waves' calls on one time axis",
            "a bar selects its step in the plan, and a node its row",
        ],
    );
}

// --- Large plans --------------------------------------------------------------------------------

/// A plan of `waves` waves of `per` steps `s0000`, `s0001`…: a step after the first wave runs
/// after the step in its row of the wave before (`_dependsOn`); `step(i)` gives step `i` its call.
fn wide_plan(waves: usize, per: usize, step: impl Fn(usize) -> Value) -> Vec<Value> {
    (0..waves * per)
        .map(|i| {
            let mut s = step(i);
            s["_id"] = json!(format!("s{i:04}"));
            if i >= per {
                s["_dependsOn"] = json!([format!("s{:04}", i - per)]);
            }
            s
        })
        .collect()
}

/// The scripted model's reviews (`CONTINUE` after each wave), answer and check of it.
fn wide_script(plan: Vec<Value>) -> Value {
    json!({
        "plan": [{ "usage": { "input_tokens": 52000, "output_tokens": 9000, "cost_usd": 0.0123 }, "json": { "plan": plan } }],
        "execute": [{ "repeat": 2, "usage": { "input_tokens": 800, "output_tokens": 40, "cost_usd": 0.0002 },
                      "json": { "action": "USE_TOOL", "tool": "echo", "arguments": { "text": "summary" } } }],
        "review": [{ "repeat": 40, "usage": { "input_tokens": 3000, "output_tokens": 30, "cost_usd": 0.0005 },
                     "json": { "decision": "CONTINUE", "reason": "On to the next wave." } }],
        "respond": [{ "usage": { "input_tokens": 1000, "output_tokens": 20, "cost_usd": 0.0001 }, "text": "Every step ran." }],
        "response_review": [{ "usage": { "input_tokens": 500, "output_tokens": 10, "cost_usd": 0.0001 },
                              "json": { "verdict": "ACCEPT", "feedback": "Grounded in the steps." } }],
    })
}

/// Puts into the server's store a finished session of alice's with 1,000 steps in 22 waves:
/// 20 waves of 50 `echo` steps (`s0000`…`s0999`), of which `s0950` and `s0951` are carried out by
/// the model (`execute`, so they have model calls, tokens and cost of their own, and each runs in
/// a wave of its own), run by `weft run` before the server starts.
fn wide_session(dir: &Path) {
    let plan = wide_plan(20, 50, |i| {
        if i == 950 || i == 951 {
            json!({ "_description": "Say what the waves did" })
        } else {
            json!({ "_tool": "echo", "text": format!("step {i}") })
        }
    });
    std::fs::write(dir.join("wide.script.json"), wide_script(plan).to_string()).unwrap();
    std::fs::write(
        dir.join("wide.yaml"),
        "name: wide\nmode: plan\ndescription: A thousand echo steps in waves.\n\
         model: scripted:wide.script.json\nlimits: { max_parallel: 50 }\ntools:\n  - builtin: echo\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "--db",
            "serve.db",
            "--durability",
            "normal",
            "run",
            "wide.yaml",
        ])
        .args(["Echo a thousand steps.", "--user", "alice"])
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weft run of the 1,000-step plan: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An agent `slow200` whose plan is 200 steps in 10 waves of 20, each a shell command that sleeps
/// a second (long enough that a loaded machine's page sees each wave running) and logs its call;
/// 20 run at once. The command is `sh`, not `tools.py`: twenty
/// Python interpreters starting at each wave took the page's two cores for about half a second,
/// which the browser measured as its own long tasks.
fn slow_agent(dir: &Path) {
    slow_agent_of(dir, "1");
}

/// [`slow_agent`], its steps sleeping `sleep` seconds.
fn slow_agent_of(dir: &Path, sleep: &str) {
    let plan = wide_plan(10, 20, |i| json!({ "_tool": "slow", "n": i }));
    std::fs::write(
        dir.join("slow200.script.json"),
        wide_script(plan).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("slow.sh"),
        "a=$(cat)\nsleep SECONDS\nprintf '{\"tool\":\"slow\",\"args\":%s}\\n' \"$a\" >> calls.log\n\
         printf '{\"echo\":%s}' \"$a\"\n"
            .replace("SECONDS", sleep),
    )
    .unwrap();
    std::fs::write(
        dir.join("slow200.yaml"),
        "name: slow200\nmode: plan\ndescription: Two hundred slow steps in ten waves.\n\
         model: scripted:slow200.script.json\nlimits: { max_parallel: 20 }\ntools:\n  \
         - name: slow\n    description: Wait a moment.\n    \
         command: [\"sh\", \"slow.sh\"]\n    \
         sandbox: { write: [.] }\n    \
         input_schema: { type: object, properties: { n: { type: integer } }, required: [n] }\n    \
         idempotent: true\n    parallel: true\n",
    )
    .unwrap();
}

#[test]
fn needs_browser_a_1000_step_plan_opens_fast_and_zooms_pans_finds_and_folds() {
    browser_with(
        "graph1000",
        &[
            "the 1,000-step session is drawn, its first paint measured",
            "tokens and cost are shown per wave and on a step with its own model call",
            "searching s0777 puts it in view, selects it and highlights its edges",
            "the minimap shows the viewport and moves it",
            "fit, zoom and pan do what they say, with the mouse and the keyboard",
            "finished waves fold into one box with their counts, tokens and cost",
        ],
        wide_session,
    );
}

#[test]
fn needs_browser_a_live_200_step_run_is_drawn_from_its_events() {
    let server = browser_with(
        "live200",
        &[
            "the running wave stays in the panel",
            "what the page drew from the events matches the server's view at the same event",
            "the live run is drawn from its events with few full fetches and no long stall",
            "the live run's final page equals a fresh load's",
        ],
        slow_agent,
    );
    assert_eq!(server.calls().len(), 200, "each step ran once");
}

/// The live run's connection drops twice (a proxy between the page and the server closes every
/// connection): the stream reconnects and the page fetches the session whole; at a gap in the
/// event seqs it asks again for the events it missed; its final page equals a fresh load's.
#[test]
fn needs_browser_a_live_run_through_dropped_connections_ends_as_a_fresh_load() {
    let server = browser_with(
        "livedrop",
        &[
            "the page fetches the session whole after a dropped stream",
            "the page fetches the session whole after a gap in the event seqs",
            "the page has every event after the gap",
            "the live run's final page equals a fresh load's after drops and a gap",
        ],
        |d| slow_agent_of(d, "2"),
    );
    assert_eq!(server.calls().len(), 200, "each step ran once");
}

// --- Eval runs ---------------------------------------------------------------------------------

/// Puts two real `weft eval` runs of three cases of `examples/evals/support-triage.yaml` into
/// the server's store, as alice (`WEFT_USER`): `good` (the example agent: all pass) and then
/// `broken` (the deliberately broken agent: `refund-a1001` fails its trajectory). Their results
/// files are in `runs/good` and `runs/broken`.
fn two_eval_runs(dir: &Path) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    common::copy_dir(&repo.join("examples"), &dir.join("examples"));
    for (name, agent, code) in [
        ("good", "examples/support-triage.yaml", 0),
        ("broken", "examples/evals/broken-support-triage.yaml", 1),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["--db", "serve.db", "eval", agent])
            .arg("examples/evals/support-triage.yaml")
            .args(["--name", name, "--out", &format!("runs/{name}")])
            .args(["--case", "delivery-address", "--case", "refund-a1001"])
            .args(["--case", "refund-asks-for-the-order"])
            .current_dir(dir)
            .env_remove("WEFT_DB")
            .env("WEFT_USER", "alice")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "weft eval {name}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A run's `results.jsonl`, by case.
fn results_file(dir: &Path, run: &str) -> Vec<Value> {
    let mut rs: Vec<Value> = std::fs::read_to_string(dir.join(format!("runs/{run}/results.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rs.sort_by_key(|r| r["case"].as_str().unwrap().to_owned());
    rs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_runs_are_listed_with_their_cases_and_compared_for_their_user_only() {
    let server = Server::start_with(two_eval_runs);
    let alice = Client::new(&server, ALICE);
    let doc = alice.get("/openapi.json").await;

    // The list: both runs, newest first, with what ran, on what, and how it went.
    let list = alice.get("/evals").await;
    conforms(&doc, "get", "/evals", &list);
    let runs = list["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["broken", "good"], "{list:#}");
    for r in runs {
        assert_eq!(r["agents"], json!(["support-triage"]), "{r:#}");
        assert!(
            r["dataset"]
                .as_str()
                .unwrap()
                .ends_with("examples/evals/support-triage.yaml"),
            "{r:#}"
        );
        assert_eq!(r["running"], 0);
        assert_eq!(r["summary"]["cases"], 3);
    }
    assert_eq!(runs[0]["summary"]["cases_passed"], 2);
    assert_eq!(runs[1]["summary"]["cases_passed"], 3);
    let trajectory = &runs[0]["summary"]["per_scorer"]["trajectory"];
    assert_eq!(
        (&trajectory["passed"], &trajectory["n"]),
        (&json!(2), &json!(3))
    );

    // One run: what the store holds is what `weft eval` wrote, summary and every result.
    for run in ["good", "broken"] {
        let view = alice.get(&format!("/evals/{run}")).await;
        conforms(&doc, "get", "/evals/{id}", &view);
        let file: Value = serde_json::from_str(
            &std::fs::read_to_string(server.path().join(format!("runs/{run}/summary.json")))
                .unwrap(),
        )
        .unwrap();
        // The file lists cases in the dataset's order, the store in the sessions' order.
        let by_case = |mut s: Value| {
            s["per_case"]
                .as_array_mut()
                .unwrap()
                .sort_by_key(|c| c["case"].as_str().unwrap().to_owned());
            s
        };
        let (summary, file) = (by_case(view["run"]["summary"].clone()), by_case(file));
        assert_eq!(
            summary, file,
            "{run}: the summary differs from summary.json"
        );
        let mut results = view["results"].as_array().unwrap().clone();
        results.sort_by_key(|r| r["case"].as_str().unwrap().to_owned());
        assert_eq!(
            results,
            results_file(server.path(), run),
            "{run}: the results differ from results.jsonl"
        );
        // Each case opens its session, alice's.
        for r in &results {
            let session = alice
                .get(&format!("/sessions/{}", r["session"].as_str().unwrap()))
                .await;
            assert_eq!(session["user"], "alice", "{session:#}");
        }
    }
    let broken = alice.get("/evals/broken").await;
    let failed: Vec<&Value> = broken["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pass"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "{broken:#}");
    assert_eq!(failed[0]["case"], "refund-a1001");
    assert_eq!(failed[0]["session"], "broken-refund-a1001-r1");
    let verdict = failed[0]["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scorer"] == "trajectory")
        .unwrap();
    assert_eq!(verdict["pass"], false);
    assert!(
        verdict["detail"].as_str().unwrap().contains("issueRefund"),
        "{verdict:#}"
    );

    // Two runs compared, as `weft eval compare` compares their results files.
    let cmp = alice.get("/evals/good/compare/broken").await;
    conforms(&doc, "get", "/evals/{a}/compare/{b}", &cmp);
    assert_eq!(cmp["a"]["id"], "good");
    assert_eq!(cmp["b"]["id"], "broken");
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["eval", "compare", "runs/good", "runs/broken", "--json"])
        .current_dir(server.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a case regressed");
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    let verdicts = |v: &Value| -> Vec<(String, String, Value)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["case"].as_str().unwrap().to_owned(),
                    c["verdict"].as_str().unwrap().to_owned(),
                    c["changes"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(verdicts(&cmp["cases"]), verdicts(&cli));
    assert_eq!(cmp["cases"][0]["case"], "refund-a1001");
    assert_eq!(cmp["cases"][0]["verdict"], "regressed");

    // Bob sees none of alice's runs.
    let bob = Client::new(&server, BOB);
    assert_eq!(bob.get("/evals").await, json!({"runs": []}));
    for path in ["/evals/good", "/evals/good/compare/broken"] {
        let (status, _) = bob.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 404, "bob: GET {path}");
    }
    let (status, _) = alice
        .call(reqwest::Method::GET, "/evals/no-such-run", None)
        .await;
    assert_eq!(status, 404);
    // And no key, no runs.
    let resp = http()
        .get(format!("{}/evals", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

#[test]
fn needs_browser_the_evals_view_lists_runs_their_cases_and_opens_a_cases_session() {
    browser_with(
        "evals",
        &[
            "the Evals view lists both runs with their cases passed",
            "a run shows each case's verdict and each scorer's reason",
            "a case opens its session",
            "two ticked runs are compared, regressions first",
        ],
        two_eval_runs,
    );
}

#[test]
fn needs_browser_a_plan_request_opens_in_the_model_call_inspector() {
    browser(
        "inspector",
        &[
            "a plan request shows the task and the tool list",
            "the raw reply holds the plan and the parsed decision accepts it",
            "the calls' tokens add up to the session's totals",
            "a call opens from its row and from its event",
            "each wave shows the tokens of the review after it",
        ],
    );
}

// --- The OpenAPI document against real answers -------------------------------------------------

/// The schema `/openapi.json` declares for a route's answer (`200`), made a document of its own
/// (the named schemas beside it), compiled.
fn answer_schema(doc: &Value, method: &str, path: &str) -> jsonschema::Validator {
    let op = &doc["paths"][path][method];
    let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} declares no JSON answer: {op:#}"
    );
    let mut root = schema.clone();
    root["components"] = doc["components"].clone();
    jsonschema::draft202012::new(&root)
        .unwrap_or_else(|e| panic!("{method} {path}: the schema does not compile: {e}"))
}

/// Asserts that `answer`, what `method path` answered, is valid against its declared schema.
fn conforms(doc: &Value, method: &str, path: &str, answer: &Value) {
    let v = answer_schema(doc, method, path);
    let errors: Vec<String> = v
        .iter_errors(answer)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path}: the answer does not match its schema:\n{}\nthe answer: {answer:#}",
        errors.join("\n")
    );
}
