//! Opening the session store the user names.

use std::sync::Arc;

use anyhow::{Context, Result};
use weft_store::AnyStore;

/// The store the CLI uses.
pub type CliStore = AnyStore;

/// The default store: a SQLite file in the working directory.
pub const DEFAULT_DB: &str = ".weft/weft.db";

/// Opens `--db` (or `WEFT_DB`; default `.weft/weft.db`). With `existing`, a SQLite file must
/// already be there (commands that only read must not create an empty database).
pub async fn open(db: Option<&str>, existing: bool) -> Result<Arc<CliStore>> {
    let spec = db.unwrap_or(DEFAULT_DB);
    let store = if existing {
        AnyStore::open_existing(spec).await
    } else {
        AnyStore::open(spec).await
    };
    let store = store.with_context(|| format!("cannot open the session store `{spec}`"))?;
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
