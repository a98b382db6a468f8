//! A PostgreSQL cluster of one test's own ([`PgCluster`]): `initdb` in a temporary directory,
//! started with `pg_ctl` on a free loopback port, so that a test can crash it (`-m immediate`),
//! stop it, restart it and start it again while weft runs on it, without touching the shared
//! server other tests use.
//!
//! PostgreSQL refuses to run as root: when the test runs as root, every `initdb`/`pg_ctl` runs
//! as the OS user `postgres` (with `runuser`), and the directory belongs to that user. Durability
//! settings keep their defaults (a crash here is a real crash); only `shared_buffers` is small,
//! so that a cluster starts quickly, and `max_connections` is 200, for several weft processes.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a start (including crash recovery) may take before the test fails.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A PostgreSQL cluster of one test's own: initdb'd in a temp dir, on a free loopback port.
#[derive(Debug)]
pub struct PgCluster {
    /// postgres://postgres@127.0.0.1:PORT/weft
    pub url: String,
    port: u16,
    /// The temporary directory: `data/` (the cluster), `server.log`, and the unix socket.
    dir: tempfile::TempDir,
    /// Whether `initdb`/`pg_ctl` run as the OS user `postgres` (we are root).
    as_postgres: bool,
}

impl PgCluster {
    /// Creates a cluster (`initdb`), starts it on a free port of 127.0.0.1, creates the
    /// database `weft` and returns once it accepts connections. `tag` names the directory.
    pub fn start(tag: &str) -> Self {
        let as_postgres = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix(&format!("weft-pg-{tag}-"))
            .tempdir_in("/tmp")
            .expect("a temporary directory under /tmp for a PostgreSQL cluster");
        if as_postgres {
            run_checked(
                Command::new("chown").args(["postgres:", &path_str(dir.path())]),
                "chown the cluster's directory to the user postgres (is there an OS user `postgres`?)",
            );
        }
        let mut cluster = Self {
            url: String::new(),
            port: 0,
            dir,
            as_postgres,
        };
        let data = cluster.data_dir();
        cluster.pg(
            "initdb",
            &[
                "-D",
                &path_str(&data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        // A free port can be taken by someone else between our probe and the server's bind:
        // a few tries, each on a new port.
        let mut last_failure = String::new();
        for _ in 0..5 {
            let port = free_port();
            cluster.write_settings(port);
            let out = cluster.pg_ctl(&["start", "-w", "-t", "60"]);
            if out.status.success() {
                cluster.port = port;
                cluster.url = format!("postgres://postgres@127.0.0.1:{port}/weft");
                cluster.wait_accepting("postgres");
                crate::psql(&cluster.admin_url(), "CREATE DATABASE weft");
                cluster.wait_accepting("weft");
                return cluster;
            }
            last_failure = format!(
                "pg_ctl start: {}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                cluster.log_tail()
            );
            let _ = cluster.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        }
        panic!("the test's PostgreSQL cluster would not start: {last_failure}");
    }

    /// Crashes the server: `pg_ctl stop -m immediate` (no checkpoint; the next start recovers
    /// from the WAL). Returns once it has stopped.
    pub fn crash(&self) {
        self.pg_ctl_checked(
            &["stop", "-m", "immediate", "-w", "-t", "60"],
            "stop -m immediate",
        );
    }

    /// Stops the server cleanly: `pg_ctl stop -m fast` (sessions are disconnected).
    pub fn stop_fast(&self) {
        self.pg_ctl_checked(&["stop", "-m", "fast", "-w", "-t", "60"], "stop -m fast");
    }

    /// Starts the stopped (or crashed) server again on the same port; returns once it accepts
    /// connections to `weft`.
    pub fn start_again(&self) {
        self.pg_ctl_checked(&["start", "-w", "-t", "60"], "start");
        self.wait_accepting("weft");
    }

    /// `pg_ctl restart -m fast`; returns once it accepts connections to `weft`.
    pub fn restart_fast(&self) {
        self.pg_ctl_checked(
            &["restart", "-m", "fast", "-w", "-t", "60"],
            "restart -m fast",
        );
        self.wait_accepting("weft");
    }

    /// The port it listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Appends this cluster's settings to postgresql.conf (a later line wins, so a retry on
    /// another port overrides the earlier one).
    fn write_settings(&self, port: u16) {
        let conf = self.data_dir().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf)
            .unwrap_or_else(|e| panic!("read {}: {e}", conf.display()));
        text.push_str(&format!(
            "\n# weft-testkit PgCluster\nlisten_addresses = '127.0.0.1'\nport = {port}\n\
             unix_socket_directories = '{}'\nshared_buffers = 16MB\nmax_connections = 200\n\
             logging_collector = off\n",
            path_str(self.dir.path())
        ));
        std::fs::write(&conf, text).unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
    }

    /// Waits (for at most a minute) until `SELECT 1` succeeds on database `db`.
    fn wait_accepting(&self, db: &str) {
        let url = format!("postgres://postgres@127.0.0.1:{}/{db}", self.port);
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < START_LIMIT {
            let out = Command::new("psql")
                .args([url.as_str(), "-X", "-q", "-At", "-c", "SELECT 1"])
                .stdin(Stdio::null())
                .output()
                .expect("psql (the PostgreSQL client) must be installed");
            if out.status.success() {
                return;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the test's PostgreSQL cluster on port {} did not accept connections within {START_LIMIT:?}: {last}\n{}",
            self.port,
            self.log_tail()
        );
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        let data = path_str(&self.data_dir());
        let log = path_str(&self.log_file());
        let mut all = vec!["-D", data.as_str(), "-l", log.as_str()];
        all.extend_from_slice(args);
        self.pg_output("pg_ctl", &all)
    }

    fn pg_ctl_checked(&self, args: &[&str], what: &str) {
        let out = self.pg_ctl(args);
        assert!(
            out.status.success(),
            "pg_ctl {what} (port {}): {}{}\n{}",
            self.port,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log_tail()
        );
    }

    /// Runs a PostgreSQL program, as the user postgres when we are root; panics on failure.
    fn pg(&self, program: &str, args: &[&str]) {
        let out = self.pg_output(program, args);
        assert!(
            out.status.success(),
            "{program} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_output(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", program]);
            c
        } else {
            Command::new(program)
        };
        cmd.args(args)
            // The user postgres may not be able to enter the test's own working directory.
            .current_dir(self.dir.path())
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{program} (PostgreSQL's server programs, on PATH, and runuser when root): {e}"
                )
            })
    }

    /// The end of the server's log, for a failure message.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_file()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(20);
        format!("server.log (last lines):\n{}", lines[from..].join("\n"))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.data_dir().join("postmaster.pid").exists() {
            let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "30"]);
        }
        // The temporary directory removes itself.
    }
}

/// A port of 127.0.0.1 nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective user).
fn running_as_root() -> bool {
    match std::fs::metadata("/proc/self") {
        Ok(m) => m.uid() == 0,
        Err(_) => Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false),
    }
}

fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path_str(p: &Path) -> String {
    p.to_str()
        .unwrap_or_else(|| panic!("a UTF-8 path: {}", p.display()))
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster of a test's own starts, survives a crash (`-m immediate`) and a fast restart,
    /// and keeps what was committed before the crash.
    #[test]
    fn needs_postgres_a_private_cluster_crashes_and_starts_again() {
        let cluster = PgCluster::start("selftest");
        assert!(cluster.url.ends_with(&format!(":{}/weft", cluster.port())));
        crate::psql(
            &cluster.url,
            "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)",
        );
        cluster.crash();
        let down = Command::new("psql")
            .args([cluster.url.as_str(), "-X", "-q", "-At", "-c", "SELECT 1"])
            .output()
            .expect("psql");
        assert!(!down.status.success(), "a crashed cluster still answered");
        cluster.start_again();
        assert_eq!(crate::psql(&cluster.url, "SELECT 1"), "1");
        assert_eq!(crate::psql(&cluster.url, "SELECT v FROM kept"), "7");
        cluster.restart_fast();
        assert_eq!(crate::psql(&cluster.url, "SELECT 1"), "1");
        cluster.stop_fast();
        cluster.start_again();
        assert_eq!(crate::psql(&cluster.url, "SELECT v FROM kept"), "7");
    }
}
