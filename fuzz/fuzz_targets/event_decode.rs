//! A stored event row (its type on the first line, its payload after): the decoder gives the
//! event or a "corrupt" error, and whatever it accepts is written and read back unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_store::fuzzing::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (kind, payload) = text.split_once('\n').unwrap_or(("step_completed", text));
    let Ok(event) = decode(kind, payload) else {
        return;
    };
    let (kind, payload) =
        encode(&event).unwrap_or_else(|e| panic!("a decoded event cannot be written: {e}"));
    let back = decode(kind, &payload)
        .unwrap_or_else(|e| panic!("a written event cannot be read back: {e}\n{payload}"));
    assert_eq!(
        back.event, event.event,
        "an event changed when written and read back"
    );
});
