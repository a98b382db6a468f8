//! Opening the session store the user names.

use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use weft_store::{AnyStore, Durability};

/// The store the CLI uses.
pub type CliStore = AnyStore;

/// The default store: a SQLite file in the working directory.
pub const DEFAULT_DB: &str = ".weft/weft.db";

/// Opens `--db` (or `WEFT_DB`; default `.weft/weft.db`) writing at `durability` (`--durability`),
/// else at what the agent file of a new run asks for (`agent`), else at the default until
/// the host's `DurabilityPolicy` says what the agent files ask for. With
/// `existing`, a SQLite file must already be there (commands that only read must not create an
/// empty database).
pub async fn open(
    db: Option<&str>,
    existing: bool,
    durability: Option<Durability>,
    agent: Option<Durability>,
) -> Result<Arc<CliStore>> {
    let spec = db.unwrap_or(DEFAULT_DB);
    let d = durability.or(agent).unwrap_or_default();
    // A SQLite file named with --db that is not there yet is created; say so, since a typo in
    // the path would otherwise start an empty store without a word.
    let new_file = !existing
        && spec != DEFAULT_DB
        && capabilities_file(spec).is_some()
        && !std::path::Path::new(spec).exists();
    let store = if existing {
        AnyStore::open_existing_with(spec, d).await
    } else {
        AnyStore::open_with(spec, d).await
    };
    let store = store.with_context(|| format!("cannot open the session store `{spec}`"))?;
    if new_file {
        eprintln!("note: created a new session store at {spec} (there was no database there)");
    }
    if let Some(file) = capabilities_file(spec) {
        weft_model::capabilities::use_file(file);
    }
    Ok(Arc::new(store))
}

/// Where what weft learns about model servers is kept across processes: the file
/// `provider-capabilities.json` beside a SQLite database given as a path. With PostgreSQL or
/// memory it is learned once per process.
fn capabilities_file(spec: &str) -> Option<std::path::PathBuf> {
    if spec.contains("://") || spec.starts_with("memory:") {
        return None;
    }
    let dir = std::path::Path::new(spec).parent()?;
    Some(dir.join("provider-capabilities.json"))
}

static CHOSEN: OnceLock<Option<String>> = OnceLock::new();

/// Remembers the `--db` (or `WEFT_DB`) this process uses, for the commands its hints suggest.
pub fn remember(db: Option<&str>) {
    let _ = CHOSEN.set(db.filter(|d| *d != DEFAULT_DB).map(str::to_owned));
}

/// ` --db SPEC` when the store is not the default one, so that a suggested command reaches
/// the same sessions.
pub fn db_flag() -> String {
    match CHOSEN.get() {
        Some(Some(db)) => format!(" --db {}", shell_word(db)),
        _ => String::new(),
    }
}

pub use weft_host::shell_word;
