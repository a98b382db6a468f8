//! What the Python process keeps once: weft's async runtime (started on first use, so that
//! importing `weft` starts no thread), the host every run is driven by, and the stores opened
//! so far (one per `db`, shared by every agent that names it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::prelude::*;
use weft_host::Host;
use weft_store::AnyStore;

/// The default store, as for the `weft` command: a SQLite file in the working directory.
pub(crate) const DEFAULT_DB: &str = ".weft/weft.db";

/// weft's async runtime, or why it could not start.
pub(crate) fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("weft")
            .build()
            .map_err(|e| format!("weft cannot start its async runtime: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The host of every run this process drives: leases as this process, the system's clock,
/// telemetry from the environment (`OTEL_EXPORTER_OTLP_ENDPOINT`, as for the `weft` command).
pub(crate) fn host() -> Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| Host {
        telemetry: runtime()
            .map(|rt| rt.block_on(async { weft_host::telemetry::Telemetry::from_env() }))
            .unwrap_or_default(),
        ..Host::default()
    })
    .clone()
}

/// The host of one run, with the hints of its errors naming `db` as the `weft` command would,
/// and a shutdown handle of its own (Ctrl-C stops this run, not the process's later ones).
pub(crate) fn host_for(db: &str) -> Host {
    Host {
        shutdown: weft_host::Shutdown::new(),
        db_flag: if db == DEFAULT_DB {
            String::new()
        } else {
            format!(" --db {}", weft_host::shell_word(db))
        },
        ..host()
    }
}

/// The store `db` names (a SQLite path, a `postgres://` URL, or `memory:`), opened once.
pub(crate) async fn store(db: &str) -> Result<Arc<AnyStore>, String> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<AnyStore>>>> = OnceLock::new();
    let stores = STORES.get_or_init(Mutex::default);
    // A relative SQLite path names a file from the working directory of the moment.
    let key =
        if db.contains("://") || db.eq_ignore_ascii_case("memory") || db.starts_with("memory:") {
            db.to_owned()
        } else {
            std::path::absolute(db)
                .map_err(|e| format!("cannot open the session store `{db}`: {e}"))?
                .display()
                .to_string()
        };
    if let Some(s) = stores.lock().map_err(|e| e.to_string())?.get(&key) {
        return Ok(s.clone());
    }
    let opened = AnyStore::open_with(&key, weft_core::Durability::default())
        .await
        .map_err(|e| format!("cannot open the session store `{db}`: {e}"))?;
    let mut open = stores.lock().map_err(|e| e.to_string())?;
    Ok(open.entry(key).or_insert(Arc::new(opened)).clone())
}

/// Makes this Python interpreter weft's sandbox launcher for command tools: `python -c
/// "import weft._weft as w; ..." POLICY -- PROGRAM ...` sets up the sandbox and becomes
/// PROGRAM (the `weft` command uses itself, as `weft __sandbox`).
pub(crate) fn set_launcher(py: Python<'_>) -> PyResult<()> {
    let exe: String = py.import("sys")?.getattr("executable")?.extract()?;
    if exe.is_empty() {
        return Ok(());
    }
    weft_tools::sandbox::set_launcher(
        exe.into(),
        vec![
            "-c".into(),
            "import sys, weft._weft as w; sys.exit(w._sandbox())".into(),
        ],
    );
    Ok(())
}
