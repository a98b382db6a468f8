//! The runtime reads the time from the clock it is given: a test moves it by hand, no sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use serde_json::json;
use weft_core::{Envelope, Plan};
use weft_runtime::{ManualClock, Runtime};
use weft_store::{RamStore, SessionLog};

use crate::support as common;

#[tokio::test]
async fn events_are_stamped_with_the_runtimes_clock() {
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let seen: Arc<Mutex<Vec<Envelope>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let store = Arc::new(RamStore::new());
    let rt = Runtime::builder(
        Arc::clone(&store),
        Arc::new(common::registry(vec![])),
        common::limits(),
        None,
        None,
    )
    .observe(Arc::new(move |e| sink.lock().unwrap().push(e.clone())))
    .clock(clock.clone())
    .build();
    let plan = Plan::from_value(&json!([
        {"_id": "a", "_tool": "echo", "text": "one", "_outputPath": "†state.a"},
        {"_id": "b", "_tool": "echo", "text": "†state.a"}
    ]))
    .unwrap();
    let session = rt.run_plan("clock", plan, json!({})).await.unwrap();
    let id = session.id.clone();
    drop(session);
    let events = seen.lock().unwrap().clone();
    assert!(events.len() > 3, "the plan ran: {} events", events.len());
    assert!(
        events.iter().all(|e| e.ts == 1_700_000_000_000),
        "every event carries the clock's time: {:?}",
        events.iter().map(|e| e.ts).collect::<Vec<_>>()
    );
    let (_, stored) = store.load(&id).await.unwrap();
    assert!(stored.iter().all(|e| e.ts == 1_700_000_000_000));

    // Moved on, the clock stamps what follows with the new time.
    clock.advance(90_000);
    assert_eq!(
        weft_runtime::Clock::now_ms(clock.as_ref()),
        1_700_000_090_000
    );
}
