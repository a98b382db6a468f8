//! What a provider's server sends back, whole or streamed, for both providers, and what an
//! embeddings endpoint sends back: a reply or a typed error, never a panic. The first byte picks
//! the provider and whether it streams (bits 0 and 1), or (bit 2) an embeddings reply for 1 to 32
//! inputs (bits 3 to 7).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::fuzzing::{anthropic, embeddings, openai};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let body = String::from_utf8_lossy(rest);
    let streamed = pick & 1 == 1;
    if pick & 4 != 0 {
        let _ = embeddings(&body, usize::from(pick >> 3) + 1);
    } else if pick & 2 == 0 {
        let _ = openai(&body, streamed);
    } else {
        let _ = anthropic(&body, streamed);
    }
});
