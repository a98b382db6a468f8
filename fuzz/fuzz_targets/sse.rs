//! Server-sent events arrive in pieces cut anywhere: the events are the same however the stream
//! was cut. The first bytes say where to cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::fuzzing::sse_events;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let cuts = usize::from(n % 8).min(rest.len());
    let (cut_bytes, body) = rest.split_at(cuts);
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let mut at: Vec<usize> = cut_bytes
        .iter()
        .map(|&b| usize::from(b) * text.len() / 256)
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for i in at {
        pieces.push(&text[from..i]);
        from = i;
    }
    pieces.push(&text[from..]);
    assert_eq!(
        sse_events(&pieces),
        sse_events(&[text]),
        "cut at {pieces:?}"
    );
});
