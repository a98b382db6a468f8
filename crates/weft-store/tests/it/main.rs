//! The integration tests of weft-store: the stores' behaviour, crons, durability, errors, group commit, leases, the SQLite file, usage counters.
//!
//! One test binary for the crate (its build and link happen once); each module is one
//! former test file, `support` what they share.

mod behaviour;
mod crons;
mod durability;
mod errors;
mod group_commit;
mod leases;
mod queued_runs;
mod sqlite_file;
mod support;
mod usage;
