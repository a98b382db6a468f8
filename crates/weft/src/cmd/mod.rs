//! The commands, one module each.

pub mod batch;
pub mod check;
pub mod docs;
pub mod eval;
pub mod memory;
pub mod new;
pub mod plan;
pub mod run;
pub mod schema;
pub mod serve;
pub mod sessions;
pub mod submit;
pub mod submit_from;
pub mod tools;
pub mod worker;
