//! `weft-bench serve-load`, the load generator of `bench/serve.sh`, against debug `weft serve`
//! processes on the benchmark's agent (`bench/serve-agent`): it counts every run, each run's
//! stream ends with the scripted answer, runs go round-robin over several servers, and a run whose
//! stream lacks the answer is counted as failed with the reason. No timing is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use weft_bench::serve_load::{LoadConfig, LoadReport, Then, run};

use crate::serve::{free_port, serve_with};

const KEY: &str = "load-key-0123456789abcdef";

fn agent_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/serve-agent");
    crate::support::copy_dir(&agent, d.path());
    std::fs::write(d.path().join("keys.txt"), format!("{KEY} bench\n")).unwrap();
    d
}

fn load(urls: Vec<String>, n: usize, expect: &str, pids: Vec<u32>) -> LoadReport {
    load_then(urls, n, expect, pids, None)
}

fn load_then(
    urls: Vec<String>,
    n: usize,
    expect: &str,
    pids: Vec<u32>,
    then: Option<Then>,
) -> LoadReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(LoadConfig {
        urls,
        n,
        concurrency: 0,
        api_key: Some(KEY.into()),
        assistant: "agent".into(),
        expect: expect.into(),
        message: "echo three times".into(),
        deadline: Duration::from_secs(120),
        server_pids: pids,
        then,
    }))
    .unwrap()
}

/// How many threads a server holds, as `POST /threads/count` answers.
fn thread_count(url: &str) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{url}/threads/count"))
            .header("x-api-key", KEY)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        r.text().await.unwrap().trim().parse().unwrap()
    })
}

#[test]
fn the_load_generator_streams_every_run_to_its_answer_round_robin() {
    let (d1, d2) = (agent_dir(), agent_dir());
    let (p1, p2) = (free_port(), free_port());
    let mut s1 = serve_with(d1.path(), p1, "weft.db", &[]);
    let mut s2 = serve_with(d2.path(), p2, "memory:", &[]);
    let urls = vec![
        format!("http://127.0.0.1:{p1}"),
        format!("http://127.0.0.1:{p2}"),
    ];

    let r = load(
        urls.clone(),
        12,
        "done after 3 echo calls",
        vec![s1.id(), s2.id()],
    );
    let json = r.to_json();
    assert_eq!(
        (r.n, r.ok, r.failed, r.unfinished),
        (12, 12, 0, 0),
        "{json}"
    );
    assert!(r.failures.is_empty(), "{json}");
    assert!(r.first_p50_s.is_some() && r.total_p99_s.is_some(), "{json}");
    assert!(r.first_p50_s <= r.total_p50_s, "{json}");
    assert_eq!(r.servers.len(), 2);
    assert!(r.servers.iter().all(|s| s.peak_mb > 0.0), "{json}");
    assert_eq!(json["ok"], 12);
    assert!(r.table().contains("12 ok, 0 failed, 0 unfinished of 12"));
    let per_run = r.server_cpu_s_per_run().unwrap();
    let cpu: f64 = r.servers.iter().map(|s| s.cpu_s).sum();
    assert!((per_run * 12.0 - cpu).abs() < 1e-9, "{json}");
    assert!(json["server_cpu_ms_per_run"].is_number(), "{json}");
    assert!(r.table().contains("server CPU per run"), "{}", r.table());
    // Every run's times, in the order of k, each run ending after it started.
    assert_eq!(r.runs.len(), 12);
    for (k, run) in r.runs.iter().enumerate() {
        assert_eq!((run.k, run.status), (k, "ok"), "{json}");
        assert!(
            run.first_s <= run.total_s && run.start_s.is_some(),
            "{json}"
        );
    }
    // Round-robin: six new threads on each server.
    assert_eq!(thread_count(&urls[0]), 6);
    assert_eq!(thread_count(&urls[1]), 6);

    // A command in the middle of the batch: it runs once half the streams have begun, and the
    // report waits for it.
    let marker = d1.path().join("then-ran");
    let r = load_then(
        urls.clone(),
        8,
        "done after 3 echo calls",
        vec![],
        Some(Then {
            at_fraction: 0.5,
            command: format!("sleep 0.2; touch '{}'", marker.display()),
        }),
    );
    let json = r.to_json();
    assert_eq!((r.ok, r.failed, r.unfinished), (8, 0, 0), "{json}");
    let then = r.then.as_ref().unwrap();
    assert_eq!(
        (then.threshold, then.status.as_str()),
        (4, "exit 0"),
        "{json}"
    );
    let (started, ended) = (then.started_s.unwrap(), then.ended_s.unwrap());
    assert!(ended - started >= 0.2, "{json}");
    assert!(marker.exists(), "{json}");
    // Half the streams had begun when it started: at least 4 runs had their stream's head.
    let begun = r
        .runs
        .iter()
        .filter(|run| run.start_s.unwrap() + run.head_s.unwrap() <= started + 1e-3)
        .count();
    assert!(begun >= 4, "{begun} streams had begun: {json}");
    assert_eq!(json["then"]["status"], "exit 0", "{json}");

    // The same runs, expecting an answer the agent never gives: every run fails, with the reason.
    let r = load(urls[..1].to_vec(), 3, "an answer never given", vec![]);
    assert_eq!((r.ok, r.failed, r.unfinished), (0, 3, 0), "{}", r.to_json());
    let (reason, count) = r.failures.iter().next().unwrap();
    assert_eq!(*count, 3);
    assert!(
        reason.contains("does not hold the answer") && reason.contains("an answer never given"),
        "{reason}"
    );

    for s in [&mut s1, &mut s2] {
        let _ = s.kill();
        let _ = s.wait();
    }
}

#[test]
fn the_load_generator_names_what_is_wrong_with_its_input() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = |urls: Vec<String>, n| LoadConfig {
        urls,
        n,
        concurrency: 0,
        api_key: None,
        assistant: "agent".into(),
        expect: "x".into(),
        message: "x".into(),
        deadline: Duration::from_secs(5),
        server_pids: vec![],
        then: None,
    };
    let e = rt.block_on(run(config(vec![], 1))).unwrap_err().to_string();
    assert!(e.contains("--url"), "{e}");
    let e = rt
        .block_on(run(config(vec!["https://127.0.0.1:1".into()], 1)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("https://127.0.0.1:1") && e.contains("http://"),
        "{e}"
    );
    // A server that is not there: each run fails with the connection's error, none hangs.
    let port = free_port();
    let r = rt
        .block_on(run(config(vec![format!("http://127.0.0.1:{port}")], 2)))
        .unwrap();
    assert_eq!((r.ok, r.failed), (0, 2));
    let reason = r.failures.keys().next().unwrap();
    assert!(reason.starts_with("POST /threads:"), "{reason}");
}
