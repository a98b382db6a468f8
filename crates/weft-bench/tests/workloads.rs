#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The workloads run to their end (each checks its session's outcome) at small sizes, and their
//! figures are consistent with what they ran.

use weft_bench::workloads::{self, StoreKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_records_three_events_per_iteration_in_both_stores() {
    for kind in [StoreKind::Memory, StoreKind::Sqlite] {
        let r5 = workloads::react(5, kind).await.unwrap();
        let r10 = workloads::react(10, kind).await.unwrap();
        let (e5, e10) = (r5.get("events").unwrap(), r10.get("events").unwrap());
        assert_eq!(e10 - e5, 15.0, "{kind:?}");
        assert!(r10.get("total_ms").unwrap() > 0.0);
        let db = r10.get("db_mb").unwrap();
        match kind {
            StoreKind::Memory => assert_eq!(db, 0.0),
            StoreKind::Sqlite => assert!(db > 0.0 && db < 1.0, "db {db} MB"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_all_answer_and_take_at_least_the_think_time() {
    for kind in [StoreKind::Memory, StoreKind::Sqlite] {
        let r = workloads::concurrent(20, 2, kind).await.unwrap();
        assert_eq!(
            r.label,
            format!("concurrent m=20 k=2 store={}", kind.name())
        );
        assert!((r.get("ideal_s").unwrap() - 0.15).abs() < 1e-9);
        assert!(r.get("wall_s").unwrap() >= 0.15, "{kind:?}");
        assert!(r.get("rss_mb").unwrap() > 0.0);
        let db = r.get("db_mb").unwrap();
        match kind {
            StoreKind::Memory => assert_eq!(db, 0.0),
            StoreKind::Sqlite => assert!(db > 0.0, "db {db} MB"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_keeps_one_session_across_turns() {
    let r = workloads::growth(4).await.unwrap();
    let one = workloads::growth(1).await.unwrap();
    // Every turn adds the same events: a task, a call, its result, an answer.
    let per_turn = (r.get("events").unwrap() - one.get("events").unwrap()) / 3.0;
    assert!(per_turn >= 4.0, "{per_turn} events per turn");
    assert!(r.get("db_mb").unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_run_every_step_linear_and_wide() {
    let reports = workloads::plan(50).await.unwrap();
    let labels: Vec<_> = reports.iter().map(|r| r.label.clone()).collect();
    assert_eq!(labels, ["plan n=50 shape=linear", "plan n=50 shape=wide"]);
    for r in &reports {
        assert!(r.get("validate_us_per_step").unwrap() > 0.0);
        assert!(r.get("sqlite_us_per_step").unwrap() > 0.0);
    }
}

#[test]
fn the_linear_plan_chains_through_state_and_the_wide_one_does_not() {
    let linear = workloads::echo_plan(3, true).unwrap();
    let wide = workloads::echo_plan(3, false).unwrap();
    let reads = |p: &weft_core::Plan| {
        p.steps
            .iter()
            .map(|s| s.to_call()["text"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        reads(&linear),
        ["†input.text", "†state.v0.text", "†state.v1.text"]
    );
    assert!(reads(&wide).iter().all(|r| r == "†input.text"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_loads_at_least_the_events_asked_for_and_continues() {
    let r = workloads::resume(300).await.unwrap();
    let events = r.get("events").unwrap();
    assert!((300.0..310.0).contains(&events), "{events} events");
    assert!(r.get("next_turn_ms").unwrap() > 0.0);
}

/// With a tool that is not idempotent (in the process or a process of its own) every call's
/// start is stored before it runs: the same events as with `echo`, at both durabilities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_runs_with_every_tool_at_both_durabilities() {
    use weft_bench::workloads::ToolKind;
    use weft_store::Durability;
    for d in [Durability::Normal, Durability::Full] {
        workloads::set_durability(d);
        for tool in [ToolKind::Echo, ToolKind::Ledger, ToolKind::Command] {
            let r = workloads::react_with(3, StoreKind::Sqlite, tool)
                .await
                .unwrap();
            assert_eq!(r.get("events"), Some(13.0), "{tool:?} at {d}");
        }
    }
    workloads::set_durability(Durability::Full);
}
