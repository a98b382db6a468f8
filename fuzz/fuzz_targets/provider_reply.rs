//! What a provider's server sends back, whole or streamed, for both providers: a reply or a
//! typed error, never a panic. The first byte picks the provider and whether it streams.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::fuzzing::{anthropic, openai};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let body = String::from_utf8_lossy(rest);
    let streamed = pick & 1 == 1;
    if pick & 2 == 0 {
        let _ = openai(&body, streamed);
    } else {
        let _ = anthropic(&body, streamed);
    }
});
