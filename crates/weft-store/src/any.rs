//! One store type for whichever backend a `--db` specification names.

use weft_core::snapshot::Encoded;
use weft_core::{Envelope, SessionStatus};

use crate::{
    Durability, ListFilter, NewSession, PgStore, RamStore, SessionRecord, Settings, Snapshot,
    SqliteStore, Store, StoreError,
};

/// A SQLite, PostgreSQL or in-RAM store, chosen at run time.
#[derive(Debug)]
pub enum AnyStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
    Ram(RamStore),
}

/// What a store specification names.
#[derive(Debug, PartialEq)]
enum Spec<'a> {
    Postgres(&'a str),
    SqliteUrl(&'a str),
    SqlitePath(&'a str),
    Memory,
}

fn classify(spec: &str) -> Result<Spec<'_>, StoreError> {
    let s = spec.trim();
    if s.is_empty() {
        return Err(StoreError::BadSpec {
            spec: spec.to_owned(),
            reason: "it is empty; give a file path, sqlite://PATH, postgres://... or memory:"
                .into(),
        });
    }
    let lower = s.to_ascii_lowercase();
    Ok(
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Spec::Postgres(s)
        } else if lower.starts_with("sqlite:") {
            Spec::SqliteUrl(s)
        } else if lower == "memory:" || lower == "memory" {
            Spec::Memory
        } else if let Some((scheme, _)) = s.split_once("://") {
            return Err(StoreError::BadSpec {
                spec: spec.to_owned(),
                reason: format!(
                    "weft has no {scheme:?} store; use a file path, sqlite://PATH, postgres://... or memory:"
                ),
            });
        } else {
            Spec::SqlitePath(s)
        },
    )
}

impl AnyStore {
    /// Opens the store `spec` names: `postgres://...` or `postgresql://...` (PostgreSQL),
    /// `sqlite://PATH` or a plain path (SQLite; the file is created when missing), or `memory:`.
    /// Writes at the default durability (`full`).
    pub async fn open(spec: &str) -> Result<Self, StoreError> {
        Self::open_with(spec, Durability::default()).await
    }

    /// [`AnyStore::open`] writing at `durability` (a store in memory has none to choose).
    pub async fn open_with(spec: &str, durability: Durability) -> Result<Self, StoreError> {
        Ok(match classify(spec)? {
            Spec::Postgres(url) => {
                Self::Postgres(PgStore::connect_durable(url, None, durability).await?)
            }
            Spec::SqliteUrl(url) => Self::Sqlite(
                SqliteStore::open_with(crate::sqlite::url_path(url)?, durability).await?,
            ),
            Spec::SqlitePath(path) => Self::Sqlite(SqliteStore::open_with(path, durability).await?),
            Spec::Memory => Self::Ram(RamStore::new()),
        })
    }

    /// Like [`AnyStore::open`], but a SQLite file must already exist
    /// ([`StoreError::NoDatabase`] otherwise). For commands that only read, such as listing.
    pub async fn open_existing(spec: &str) -> Result<Self, StoreError> {
        Self::open_existing_with(spec, Durability::default()).await
    }

    /// [`AnyStore::open_existing`] writing at `durability`.
    pub async fn open_existing_with(
        spec: &str,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        Ok(match classify(spec)? {
            Spec::Postgres(url) => {
                Self::Postgres(PgStore::connect_durable(url, None, durability).await?)
            }
            Spec::SqliteUrl(url) => Self::Sqlite(
                SqliteStore::open_existing_with(crate::sqlite::url_path(url)?, durability).await?,
            ),
            Spec::SqlitePath(path) => {
                Self::Sqlite(SqliteStore::open_existing_with(path, durability).await?)
            }
            Spec::Memory => Self::Ram(RamStore::new()),
        })
    }

    /// The durability appends are written at and the settings behind it, read back from the
    /// database; `None` for a store in memory, which keeps nothing across a crash.
    pub async fn settings(&self) -> Result<Option<Settings>, StoreError> {
        Ok(match self {
            Self::Sqlite(st) => Some(st.settings()),
            Self::Postgres(st) => Some(st.settings().await?),
            Self::Ram(_) => None,
        })
    }

    /// The backend's name: `sqlite`, `postgres` or `memory`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
            Self::Ram(_) => "memory",
        }
    }
}

impl Store for AnyStore {
    fn set_durability(&self, durability: Durability) {
        match self {
            Self::Sqlite(st) => st.set_durability(durability),
            Self::Postgres(st) => st.set_durability(durability),
            Self::Ram(st) => st.set_durability(durability),
        }
    }

    async fn create(&self, s: NewSession, now: i64) -> Result<SessionRecord, StoreError> {
        match self {
            Self::Sqlite(st) => st.create(s, now).await,
            Self::Postgres(st) => st.create(s, now).await,
            Self::Ram(st) => st.create(s, now).await,
        }
    }

    async fn create_with(
        &self,
        s: NewSession,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> Result<SessionRecord, StoreError> {
        match self {
            Self::Sqlite(st) => st.create_with(s, events, status, now).await,
            Self::Postgres(st) => st.create_with(s, events, status, now).await,
            Self::Ram(st) => st.create_with(s, events, status, now).await,
        }
    }

    async fn append(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(st) => st.append(id, expected_seq, events, status, now).await,
            Self::Postgres(st) => st.append(id, expected_seq, events, status, now).await,
            Self::Ram(st) => st.append(id, expected_seq, events, status, now).await,
        }
    }

    async fn get(&self, id: &str) -> Result<SessionRecord, StoreError> {
        match self {
            Self::Sqlite(st) => st.get(id).await,
            Self::Postgres(st) => st.get(id).await,
            Self::Ram(st) => st.get(id).await,
        }
    }

    async fn load(&self, id: &str) -> Result<(SessionRecord, Vec<Envelope>), StoreError> {
        match self {
            Self::Sqlite(st) => st.load(id).await,
            Self::Postgres(st) => st.load(id).await,
            Self::Ram(st) => st.load(id).await,
        }
    }

    async fn events_after(&self, id: &str, after_seq: u64) -> Result<Vec<Envelope>, StoreError> {
        match self {
            Self::Sqlite(st) => st.events_after(id, after_seq).await,
            Self::Postgres(st) => st.events_after(id, after_seq).await,
            Self::Ram(st) => st.events_after(id, after_seq).await,
        }
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SessionRecord>, StoreError> {
        match self {
            Self::Sqlite(st) => st.list(filter).await,
            Self::Postgres(st) => st.list(filter).await,
            Self::Ram(st) => st.list(filter).await,
        }
    }

    async fn prune(&self, before: i64, active: bool) -> Result<u64, StoreError> {
        match self {
            Self::Sqlite(st) => st.prune(before, active).await,
            Self::Postgres(st) => st.prune(before, active).await,
            Self::Ram(st) => st.prune(before, active).await,
        }
    }

    async fn append_with_snapshot(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
        snapshot: &Encoded,
    ) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(st) => {
                st.append_with_snapshot(id, expected_seq, events, status, now, snapshot)
                    .await
            }
            Self::Postgres(st) => {
                st.append_with_snapshot(id, expected_seq, events, status, now, snapshot)
                    .await
            }
            Self::Ram(st) => {
                st.append_with_snapshot(id, expected_seq, events, status, now, snapshot)
                    .await
            }
        }
    }

    async fn acquire(
        &self,
        id: &str,
        owner: &crate::Owner,
        now: i64,
        ttl_ms: i64,
        force: bool,
    ) -> Result<crate::Lease, StoreError> {
        match self {
            Self::Sqlite(st) => st.acquire(id, owner, now, ttl_ms, force).await,
            Self::Postgres(st) => st.acquire(id, owner, now, ttl_ms, force).await,
            Self::Ram(st) => st.acquire(id, owner, now, ttl_ms, force).await,
        }
    }

    async fn renew(&self, lease: &crate::Lease, expires_at: i64) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(st) => st.renew(lease, expires_at).await,
            Self::Postgres(st) => st.renew(lease, expires_at).await,
            Self::Ram(st) => st.renew(lease, expires_at).await,
        }
    }

    async fn release(&self, lease: &crate::Lease) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(st) => st.release(lease).await,
            Self::Postgres(st) => st.release(lease).await,
            Self::Ram(st) => st.release(lease).await,
        }
    }

    async fn request(&self, id: &str, what: &str, now: i64) -> Result<bool, StoreError> {
        match self {
            Self::Sqlite(st) => st.request(id, what, now).await,
            Self::Postgres(st) => st.request(id, what, now).await,
            Self::Ram(st) => st.request(id, what, now).await,
        }
    }

    async fn lease(&self, id: &str) -> Result<Option<crate::Lease>, StoreError> {
        match self {
            Self::Sqlite(st) => st.lease(id).await,
            Self::Postgres(st) => st.lease(id).await,
            Self::Ram(st) => st.lease(id).await,
        }
    }

    async fn claim(
        &self,
        owner: &crate::Owner,
        agents: &[String],
        now: i64,
        ttl_ms: i64,
        limit: usize,
    ) -> Result<Vec<crate::Lease>, StoreError> {
        match self {
            Self::Sqlite(st) => st.claim(owner, agents, now, ttl_ms, limit).await,
            Self::Postgres(st) => st.claim(owner, agents, now, ttl_ms, limit).await,
            Self::Ram(st) => st.claim(owner, agents, now, ttl_ms, limit).await,
        }
    }

    async fn wake(&self) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(st) => st.wake().await,
            Self::Postgres(st) => st.wake().await,
            Self::Ram(st) => st.wake().await,
        }
    }

    async fn wait_for_work(&self, max: std::time::Duration) {
        match self {
            Self::Sqlite(st) => st.wait_for_work(max).await,
            Self::Postgres(st) => st.wait_for_work(max).await,
            Self::Ram(st) => st.wait_for_work(max).await,
        }
    }

    async fn latest_snapshot(&self, id: &str) -> Result<Option<Snapshot>, StoreError> {
        match self {
            Self::Sqlite(st) => st.latest_snapshot(id).await,
            Self::Postgres(st) => st.latest_snapshot(id).await,
            Self::Ram(st) => st.latest_snapshot(id).await,
        }
    }

    async fn snapshot_parts(&self, id: &str, from: u64) -> Result<Vec<(u64, String)>, StoreError> {
        match self {
            Self::Sqlite(st) => st.snapshot_parts(id, from).await,
            Self::Postgres(st) => st.snapshot_parts(id, from).await,
            Self::Ram(st) => st.snapshot_parts(id, from).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_choose_backends_by_prefix() {
        assert_eq!(
            classify("postgres://u@h/db").unwrap(),
            Spec::Postgres("postgres://u@h/db")
        );
        assert_eq!(
            classify("postgresql://h/db").unwrap(),
            Spec::Postgres("postgresql://h/db")
        );
        assert_eq!(
            classify("sqlite://x.db").unwrap(),
            Spec::SqliteUrl("sqlite://x.db")
        );
        assert_eq!(
            classify(".weft/weft.db").unwrap(),
            Spec::SqlitePath(".weft/weft.db")
        );
        assert_eq!(classify("memory:").unwrap(), Spec::Memory);
        assert!(matches!(
            classify("mysql://h/db"),
            Err(StoreError::BadSpec { .. })
        ));
        assert!(matches!(classify("  "), Err(StoreError::BadSpec { .. })));
    }
}
