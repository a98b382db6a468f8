//! Measures appends of 4-event batches (one ReAct-like iteration each) to a store.
//!
//! `cargo run --release -p weft-store --example append_latency -- [STORE] [ITERATIONS]`, where
//! STORE is anything `AnyStore::open` takes (default: a file in a temporary directory).

use std::time::{Duration, Instant};

use serde_json::json;
use weft_core::{EVENT_VERSION, Envelope, Event, SessionStatus, ToolOutcome};
use weft_store::{AnyStore, NewSession, SessionLog, StoreError};

fn batch(i: u64, from: u64) -> Vec<Envelope> {
    let env = |seq, event| Envelope {
        epoch: 0,
        seq,
        ts: 1_763_900_000_000 + seq as i64,
        v: EVENT_VERSION,
        event,
    };
    let call = format!("call_{i}");
    vec![
        env(
            from,
            Event::StepStarted {
                step: format!("turn-{i}"),
                attempt: 1,
            },
        ),
        env(
            from + 1,
            Event::StepCompleted {
                step: format!("turn-{i}"),
                output: json!({"role": "assistant", "tool_calls": [{"id": call, "name": "search", "args": {"q": "x"}}]}),
                summary: None,
            },
        ),
        env(
            from + 2,
            Event::ToolCallStarted {
                call_id: call.clone(),
                step: None,
                item: None,
                tool: "search".into(),
                args: json!({"q": "x"}),
                attempt: 1,
                idempotency_key: format!("s:turn-{i}:1"),
                untrusted_from: Vec::new(),
            },
        ),
        env(
            from + 3,
            Event::ToolCallFinished {
                call_id: call,
                outcome: ToolOutcome::Ok {
                    output: json!("a result of about fifty bytes, give or take a few"),
                },
                duration_ms: 3,
            },
        ),
    ]
}

#[tokio::main]
async fn main() -> Result<(), StoreError> {
    let mut args = std::env::args().skip(1);
    let dir = std::env::temp_dir().join(format!("weft-latency-{}", std::process::id()));
    let spec = args
        .next()
        .unwrap_or_else(|| dir.join("weft.db").display().to_string());
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let st = AnyStore::open(&spec).await?;
    let id = format!("latency-{}", std::process::id());
    st.create(
        NewSession {
            id: id.clone(),
            agent: "bench".into(),
            ..Default::default()
        },
        0,
    )
    .await?;
    let mut times = Vec::with_capacity(n as usize);
    let mut seq = 0;
    for i in 0..n {
        let b = batch(i, seq + 1);
        let t = Instant::now();
        st.append(&id, seq, &b, SessionStatus::Running, i as i64)
            .await?;
        times.push(t.elapsed());
        seq += 4;
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / n as u32;
    let pct = |p: f64| times[((n as f64 - 1.0) * p) as usize];
    println!(
        "{} store, {n} appends of 4 events: mean {mean:?}, p50 {:?}, p99 {:?}, max {:?}",
        st.backend(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    // The session stays in a database that was named; a temporary file goes.
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
