//! The integration tests of the weft command: every command run as a process, the server under real client libraries, the playground in a real browser, the book's commands.
//!
//! One test binary for the crate (its build and link happen once); each module is one
//! former test file, `support` what they share.

mod agentdojo;
mod batch;
mod book;
mod budget_cli;
mod crash;
mod crons;
mod docs;
mod docs_cli;
mod durability;
mod eval_cli;
mod hints_cli;
mod interrupt;
mod jssdk;
mod live_view;
mod llm_e2e;
mod load_checks;
mod local_model;
mod memory_cli;
mod ownership;
mod pg_outage;
mod plan_cli;
mod playground;
mod process_cli;
mod quotas;
mod run_cli;
mod safety_cli;
mod schema;
mod serve;
mod serve_load;
mod sessions_cli;
mod support;
mod telemetry;
mod tools_cli;
mod unsynced_writes;
mod untrusted;
mod workers;
mod workflow_cli;
