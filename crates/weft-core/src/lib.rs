//! weft's pure core: events, the state they fold into, plans as data-flow graphs of tool calls,
//! their validation, and the decisions of the engine. Nothing here does I/O or reads a clock:
//! the shell (`weft-runtime`) performs effects and reports their outcomes as events.
//!
//! **Layers.** A module uses only modules of its own layer or of a layer below it:
//! 1. data, with its parsing and checks: the agent file ([`agent`]) and what it holds
//!    ([`budget`], [`repeats`], [`sandbox`], [`workflow`], [`limits`], [`durability`]), plans
//!    ([`plan`], [`path`], [`condition`], [`graph`], [`tool`], [`fits`]), model messages and the
//!    conversation ([`model`], [`history`]), [`diagnose`], [`quota`], [`process`];
//! 2. the events of a session's log ([`event`], and [`redaction`], which rewrites them);
//! 3. their fold, the state ([`state`]);
//! 4. the decisions made from the state: [`engine`] (with [`fan_out`]), [`agent_loop`] (with the
//!    budget and repeat checks made before a call), [`prompts`], [`model_calls`], [`recovery`];
//! 5. [`snapshot`], which writes a state down and reads it back.
//!
//! Within a layer, only `model` and `history`, and `engine` and `fan_out`, use each other.

#![warn(missing_docs, unreachable_pub)]

pub mod agent;
pub mod agent_loop;
pub mod budget;
pub mod condition;
pub mod diagnose;
pub mod durability;
pub mod engine;
pub mod event;
pub mod fan_out;
pub mod fits;
pub mod graph;
pub mod history;
pub mod limits;
pub mod model;
pub mod model_calls;
pub mod path;
pub mod plan;
pub mod process;
pub mod prompts;
pub mod quota;
pub mod recovery;
pub mod redaction;
pub mod repeats;
pub mod sandbox;
pub mod snapshot;
pub mod state;
pub mod tool;
pub mod trust;
pub mod workflow;

#[cfg(test)]
mod engine_tests;

pub use durability::Durability;
pub use engine::{Invocation, Next};
pub use event::{EVENT_VERSION, Envelope, Event, RunStatus, SessionStatus, ToolError, ToolOutcome};
pub use limits::Limits;
pub use plan::{Plan, PlanProblem, PlanStep};
pub use state::{SNAPSHOT_VERSION, State, StepStatus};
pub use tool::{ToolCatalog, ToolInfo};
