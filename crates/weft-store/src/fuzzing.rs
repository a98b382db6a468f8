//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): the decoder every store
//! reads events with, and the encoder it writes them with.

use weft_core::Envelope;

use crate::{StoreError, row};

/// An event row as the stores read it back: its type name and its payload text.
pub fn decode(kind: &str, payload: &str) -> Result<Envelope, StoreError> {
    let value = row::parse_payload("fuzz", 1, payload)?;
    row::decode("fuzz", 1, 0, 1, kind, value)
}

/// An event as the stores write it: its type name and its payload text.
pub fn encode(e: &Envelope) -> Result<(&'static str, String), StoreError> {
    row::encode("fuzz", e).map(|r| (r.kind, r.payload))
}
