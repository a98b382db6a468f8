//! weft's benchmark workloads. They have the same shapes as the LangGraph peer script
//! (`react N`, `concurrent M K`, `growth T`) plus weft's own (`plan N`, `resume E`), and each
//! returns its figures so the binary can repeat it and print medians.

#[cfg(feature = "local-model")]
pub mod bfcl;
pub mod local_eval;
pub mod pg_capacity;
pub mod retrieval;
pub mod serve_floor;
pub mod serve_load;
pub mod workloads;

use std::fmt;
use std::path::Path;

/// Benchmark failures: a workload that could not run or did not end as it must.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Runtime(#[from] weft_runtime::RuntimeError),
    #[error(transparent)]
    Store(#[from] weft_store::StoreError),
    #[error(transparent)]
    Tools(#[from] weft_tools::ToolsError),
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A workload ran but its session did not end as the workload requires.
    #[error("workload `{workload}`: {message}")]
    Outcome { workload: String, message: String },
    #[error("{0}")]
    Setup(String),
}

/// One measured figure: a name (`us_per_iter`), a value and a unit for people.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub key: &'static str,
    pub value: f64,
}

/// What one run of a workload measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The workload and its parameters, e.g. `react n=100 store=sqlite`.
    pub label: String,
    pub figures: Vec<Figure>,
}

impl Report {
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            figures: Vec::new(),
        }
    }

    #[must_use]
    pub fn with(mut self, key: &'static str, value: f64) -> Self {
        self.figures.push(Figure { key, value });
        self
    }

    /// The value of figure `key`.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.figures.iter().find(|f| f.key == key).map(|f| f.value)
    }

    /// The median of each figure over several runs of the same workload (the first run's
    /// label and figure order). `None` when `runs` is empty.
    pub fn median(runs: &[Report]) -> Option<Report> {
        let first = runs.first()?;
        let mut out = Report::new(first.label.clone());
        for f in &first.figures {
            let mut vals: Vec<f64> = runs.iter().filter_map(|r| r.get(f.key)).collect();
            vals.sort_by(f64::total_cmp);
            let n = vals.len();
            let m = if n == 0 {
                continue;
            } else if n % 2 == 1 {
                vals[n / 2]
            } else {
                (vals[n / 2 - 1] + vals[n / 2]) / 2.0
            };
            out.figures.push(Figure {
                key: f.key,
                value: m,
            });
        }
        Some(out)
    }
}

impl fmt::Display for Report {
    /// `weft <label>: key=value key=value ...` (one line, easy to parse).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weft {}:", self.label)?;
        for fig in &self.figures {
            let v = fig.value;
            if v != 0.0 && v.abs() < 0.01 {
                write!(f, " {}={:.5}", fig.key, v)?;
            } else if v.abs() < 100.0 {
                write!(f, " {}={:.3}", fig.key, v)?;
            } else {
                write!(f, " {}={:.1}", fig.key, v)?;
            }
        }
        Ok(())
    }
}

/// The size in MB of a SQLite database: its file plus any write-ahead log.
pub fn db_size_mb(path: &Path) -> Result<f64, BenchError> {
    let size = |p: &Path| -> Result<u64, BenchError> {
        match std::fs::metadata(p) {
            Ok(m) => Ok(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(BenchError::Io {
                what: format!("read the size of {}", p.display()),
                source: e,
            }),
        }
    };
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let bytes = size(path)? + size(Path::new(&wal))?;
    Ok(bytes as f64 / 1e6)
}

/// The peak resident set size of this process in MB (`VmHWM`), when the system tells it.
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_of_each_figure() {
        let runs = vec![
            Report::new("x").with("a", 3.0).with("b", 10.0),
            Report::new("x").with("a", 1.0).with("b", 30.0),
            Report::new("x").with("a", 2.0).with("b", 20.0),
        ];
        let m = Report::median(&runs).unwrap();
        assert_eq!(m.get("a"), Some(2.0));
        assert_eq!(m.get("b"), Some(20.0));
        let even = Report::median(&runs[..2]).unwrap();
        assert_eq!(even.get("a"), Some(2.0));
        assert!(Report::median(&[]).is_none());
    }

    #[test]
    fn report_prints_one_parsable_line() {
        let r = Report::new("react n=10 store=sqlite")
            .with("total_ms", 1234.5)
            .with("db_mb", 0.0421);
        assert_eq!(
            r.to_string(),
            "weft react n=10 store=sqlite: total_ms=1234.5 db_mb=0.042"
        );
    }

    #[test]
    fn missing_database_files_count_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.db");
        assert_eq!(db_size_mb(&p).unwrap(), 0.0);
        std::fs::write(&p, vec![0u8; 1000]).unwrap();
        std::fs::write(dir.path().join("x.db-wal"), vec![0u8; 500]).unwrap();
        assert!((db_size_mb(&p).unwrap() - 0.0015).abs() < 1e-12);
    }

    #[test]
    fn peak_rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_mb().unwrap() > 0.0);
        }
    }
}
