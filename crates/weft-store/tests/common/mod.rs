//! What the integration tests of this crate share.
#![allow(clippy::panic, dead_code)]

/// The value of a variable a service test needs. Such a test is named `needs_<service>_...` and
/// fails without its variable, so it never passes silently; `scripts/test` leaves it out (and
/// says how many it left out and what to set) when the variable is unset.
pub fn service_var(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: this test needs it (scripts/test skips the test when it is unset; .ci/run sets it)"
        ),
    }
}
