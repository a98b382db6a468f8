//! What the integration tests of this crate share.
#![allow(clippy::panic, dead_code)]

pub use weft_testkit::service_var;
