//! What the integration tests of this crate share: weft-testkit's service variables,
//! PostgreSQL databases and clusters of a test's own and `psql`, and a copy of a directory tree.

#![allow(clippy::unwrap_used, clippy::panic)]

pub use weft_testkit::{Balancer, Database, PgCluster, psql, service_var};

use std::path::Path;

/// Copies the tree at `from` to `to`, leaving out stores (`.weft`) and Python's caches.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".weft" || name == "__pycache__" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// The events `weft run --events` printed among its other lines on stderr (each event a line
/// that begins `{"seq":`; a failure message may quote a model's reply, which can hold a `{`
/// line of its own).
pub fn events_in(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .filter(|l| l.starts_with("{\"seq\":"))
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event: {l}: {e}\n{stderr}"))
        })
        .collect()
}
