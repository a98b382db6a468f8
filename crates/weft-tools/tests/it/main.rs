//! The integration tests of weft-tools: built-ins, HTTP tools, MCP servers, secrets, the sandbox.
//!
//! One test binary for the crate (its build and link happen once); each module is one
//! former test file, `support` what they share.

mod builtins;
mod http;
mod mcp;
mod outputs;
mod sandbox;
mod secrets;
mod support;
