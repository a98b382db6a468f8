//! What weft's integration tests share, defined once: the variables of the services a test
//! needs, PostgreSQL databases and schemas that belong to one test and are dropped with it,
//! waiting for a file another process writes, and a round-robin balancer in front of several
//! servers ([`Balancer`]), and a PostgreSQL cluster of a test's own that it can crash and start
//! again ([`PgCluster`]).
//!
//! This crate is for tests only (`[dev-dependencies]`): it panics with a message instead of
//! returning errors, so that a test fails where the problem is.
#![warn(missing_docs, unreachable_pub)]
#![allow(clippy::panic, clippy::expect_used)]

pub mod balancer;
pub mod pg_cluster;

pub use balancer::Balancer;
pub use pg_cluster::PgCluster;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// `psql` against `url`, unaligned and without headers; the output's text. Panics with psql's
/// error when the statement fails.
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

/// A number that differs between runs and between processes: `PID_NANOS`.
pub fn run_stamp() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000)
        .unwrap_or(0);
    format!("{}_{nanos}", std::process::id())
}

/// A fresh database beside the one `WEFT_TEST_POSTGRES_URL` names; dropped when the guard is.
#[derive(Debug)]
pub struct Database {
    admin: String,
    /// The database's name.
    pub name: String,
    /// A URL that connects to it.
    pub url: String,
}

impl Database {
    /// Creates `weft_<tag>_<pid>`, dropping any left over from an earlier run.
    pub fn new(tag: &str) -> Self {
        let base = service_var("WEFT_TEST_POSTGRES_URL");
        let (server, _) = base
            .rsplit_once('/')
            .expect("a postgres:// URL with a database");
        let name = format!("weft_{tag}_{}", std::process::id());
        psql(
            &base,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        psql(&base, &format!("CREATE DATABASE {name}"));
        Self {
            url: format!("{server}/{name}"),
            admin: base,
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

/// Names of PostgreSQL schemas of a test's own in the database at `WEFT_TEST_POSTGRES_URL`,
/// dropped (with psql) when this value is dropped: a store connected to the database's own
/// schema would migrate it, which is not a test's to do.
#[derive(Debug)]
pub struct Schemas {
    url: String,
    /// `prefix_PID_TIME`, so runs never share a schema.
    base: String,
    made: Vec<String>,
}

impl Schemas {
    /// Schemas named `<prefix>_<pid>_<time>_<n>`.
    pub fn new(prefix: &str) -> Self {
        Self {
            url: service_var("WEFT_TEST_POSTGRES_URL"),
            base: format!("{prefix}_{}", run_stamp()),
            made: Vec::new(),
        }
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The name of a new schema, dropped with this value.
    pub fn new_name(&mut self) -> String {
        let name = format!("{}_{}", self.base, self.made.len());
        self.made.push(name.clone());
        name
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        for name in &self.made {
            let _ = Command::new("psql")
                .args([
                    self.url.as_str(),
                    "-qc",
                    &format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
                ])
                .output();
        }
    }
}

/// Waits until `path` exists, for at most `limit`; panics naming the file when it does not
/// appear.
pub fn wait_for_file(path: &Path, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "{} did not appear within {limit:?}: the process that writes it is stuck or failed",
        path.display()
    );
}
