//! What the integration tests of this crate share.
#![allow(clippy::panic, clippy::expect_used, dead_code)]

use std::process::Command;

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

/// `psql` against `url`, unaligned and without headers; the output's text.
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql (the PostgreSQL client) must be installed");
    assert!(
        out.status.success(),
        "psql: {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A fresh database beside the one `WEFT_TEST_POSTGRES_URL` names; dropped when the guard is.
pub struct Database {
    admin: String,
    pub name: String,
    pub url: String,
}

impl Database {
    pub fn new(tag: &str) -> Self {
        let base = service_var("WEFT_TEST_POSTGRES_URL");
        let (server, _) = base
            .rsplit_once('/')
            .expect("a postgres:// URL with a database");
        let name = format!("weft_{tag}_{}", std::process::id());
        let admin = base.clone();
        psql(
            &admin,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        psql(&admin, &format!("CREATE DATABASE {name}"));
        Self {
            url: format!("{server}/{name}"),
            admin,
            name,
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                &self.admin,
                "-X",
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .output();
    }
}
