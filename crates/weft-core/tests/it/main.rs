//! The integration tests of weft-core: the plan engine's property test, the exact reply schemas
//! against the engine's handling of replies, and the committed event logs folded to their
//! recorded digests.
//!
//! One test binary for the crate (its build and link happen once); each module is one
//! former test file.
#![recursion_limit = "256"]

mod exact_replies;
mod golden_logs;
mod plan_prop;
mod typed_references;
