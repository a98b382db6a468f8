//! The integration tests of weft-model: the providers on the wire, cassettes, a real server.
//!
//! One test binary for the crate (its build and link happen once); each module is one
//! former test file, `support` what they share.

mod anthropic;
mod cassette;
mod e2e_openai;
#[cfg(feature = "local-model")]
mod local_model;
mod openai;
mod support;
