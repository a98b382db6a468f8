//! The integration tests of weft-server: the server started in the test's own process (bound on
//! port 0, stopped through its host's `Shutdown`) and driven over HTTP.

mod in_process;
mod playground;
