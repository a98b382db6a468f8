//! The integration tests of weft-runtime: plans, agent loops, workflows, crashes and resumes, snapshots, memories.
//!
//! One test binary for the crate (its build and link happen once); each module is one
//! former test file, `support` what they share.

mod agents;
mod big_plan;
mod budgets;
mod call_starts;
mod clock;
mod create;
mod durable_scenarios;
mod embed;
mod engine;
mod fan_out;
mod flows;
mod loops;
mod memories;
mod model_calls;
mod outage;
mod prop;
mod quotas;
mod repeats;
mod retrieval;
mod scenarios;
mod snapshots;
mod support;
mod workflows;
