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
    Ok(Arc::new(store.with_context(|| {
        format!("cannot open the session store `{spec}`")
    })?))
}
