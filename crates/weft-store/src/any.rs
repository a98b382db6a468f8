//! One store type for whichever backend a `--db` specification names.

use weft_core::snapshot::Encoded;
use weft_core::{Envelope, SessionStatus};

use crate::knowledge::{Hit, Kind, Knowledge, Listed, NewEntry, Shelf};
use crate::{
    Durability, Lease, Leases, ListFilter, NewLog, NewSession, Owner, PgStore, RamStore,
    SessionLog, SessionRecord, Settings, Snapshot, SqliteStore, StoreError,
};

/// A SQLite, PostgreSQL or in-RAM store, chosen at run time.
#[derive(Debug)]
pub enum AnyStore {
    /// A SQLite file (a path, `sqlite:` URL, or the default).
    Sqlite(SqliteStore),
    /// A PostgreSQL database (a `postgres://` URL).
    Postgres(PgStore),
    /// Memory only, gone when the process ends (`memory:`).
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

/// Methods of a store trait for [`AnyStore`], each calling the same method of the store it
/// holds: every `async fn` is written once, as its signature.
macro_rules! delegate {
    ($(async fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?;)*) => {
        $(
            async fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                match self {
                    Self::Sqlite(st) => st.$name($($arg),*).await,
                    Self::Postgres(st) => st.$name($($arg),*).await,
                    Self::Ram(st) => st.$name($($arg),*).await,
                }
            }
        )*
    };
}

impl SessionLog for AnyStore {
    fn set_durability(&self, durability: Durability) {
        match self {
            Self::Sqlite(st) => st.set_durability(durability),
            Self::Postgres(st) => st.set_durability(durability),
            Self::Ram(st) => st.set_durability(durability),
        }
    }

    delegate! {
        async fn create(&self, s: NewSession, now: i64) -> Result<SessionRecord, StoreError>;
        async fn create_with(
            &self,
            s: NewSession,
            events: &[Envelope],
            status: SessionStatus,
            now: i64,
        ) -> Result<SessionRecord, StoreError>;
        async fn create_many(
            &self,
            batch: &[NewLog],
            now: i64,
        ) -> Result<Vec<Option<StoreError>>, StoreError>;
        async fn append(
            &self,
            id: &str,
            expected_seq: u64,
            events: &[Envelope],
            status: SessionStatus,
            now: i64,
        ) -> Result<(), StoreError>;
        async fn append_with_snapshot(
            &self,
            id: &str,
            expected_seq: u64,
            events: &[Envelope],
            status: SessionStatus,
            now: i64,
            snapshot: &Encoded,
        ) -> Result<(), StoreError>;
        async fn get(&self, id: &str) -> Result<SessionRecord, StoreError>;
        async fn load(&self, id: &str) -> Result<(SessionRecord, Vec<Envelope>), StoreError>;
        async fn events_after(&self, id: &str, after_seq: u64) -> Result<Vec<Envelope>, StoreError>;
        async fn list(&self, filter: &ListFilter) -> Result<Vec<SessionRecord>, StoreError>;
        async fn prune(&self, before: i64, active: bool) -> Result<u64, StoreError>;
        async fn delete(&self, id: &str) -> Result<(), StoreError>;
        async fn set_metadata(&self, id: &str, metadata: &serde_json::Value, now: i64) -> Result<(), StoreError>;
        async fn name_agent(&self, id: &str, agent: &str) -> Result<(), StoreError>;
        async fn exported_through(&self, id: &str) -> Result<u64, StoreError>;
        async fn set_exported_through(&self, marks: &[(String, u64)]) -> Result<(), StoreError>;
        async fn latest_snapshot(&self, id: &str) -> Result<Option<Snapshot>, StoreError>;
        async fn snapshot_parts(&self, id: &str, from: u64) -> Result<Vec<(u64, String)>, StoreError>;
    }
}

impl Leases for AnyStore {
    delegate! {
        async fn acquire(
            &self,
            id: &str,
            owner: &Owner,
            now: i64,
            ttl_ms: i64,
            force: bool,
        ) -> Result<Lease, StoreError>;
        async fn renew(&self, lease: &Lease, expires_at: i64) -> Result<(), StoreError>;
        async fn release(&self, lease: &Lease) -> Result<(), StoreError>;
        async fn request(&self, id: &str, what: &str, now: i64) -> Result<bool, StoreError>;
        async fn lease(&self, id: &str) -> Result<Option<Lease>, StoreError>;
        async fn claim(
            &self,
            owner: &Owner,
            agents: &[String],
            now: i64,
            ttl_ms: i64,
            limit: usize,
        ) -> Result<Vec<Lease>, StoreError>;
        async fn waiting(&self, now: i64) -> Result<u64, StoreError>;
        async fn wake(&self) -> Result<(), StoreError>;
        async fn wait_for_work(&self, max: std::time::Duration);
        async fn ping(&self) -> Result<(), StoreError>;
    }
}

impl crate::Usage for AnyStore {
    delegate! {
        async fn add_usage(
            &self,
            user: &str,
            periods: &[String],
            used: &weft_core::quota::Used,
            now: i64,
        ) -> Result<(), StoreError>;
        async fn usage(
            &self,
            user: &str,
            periods: &[String],
        ) -> Result<Vec<weft_core::quota::Used>, StoreError>;
    }
}

impl crate::RunQueue for AnyStore {
    delegate! {
        async fn queue_run(&self, q: &crate::QueuedRun) -> Result<(), StoreError>;
        async fn queued_run(&self, run_id: &str) -> Result<Option<crate::QueuedRun>, StoreError>;
        async fn queued_runs_of(&self, thread_id: &str) -> Result<Vec<crate::QueuedRun>, StoreError>;
        async fn queued_runs_of_user(&self, user_id: &str) -> Result<Vec<crate::QueuedRun>, StoreError>;
        async fn stale_queued_runs(&self, now: i64, limit: usize) -> Result<Vec<crate::QueuedRun>, StoreError>;
        async fn take_queued_run(
            &self,
            run_id: &str,
            from: &str,
            now: i64,
            owner: &str,
            expires_at: i64,
        ) -> Result<bool, StoreError>;
        async fn renew_queued_runs(&self, owner: &str, expires_at: i64) -> Result<(), StoreError>;
        async fn unqueue_run(&self, run_id: &str) -> Result<(), StoreError>;
    }
}

impl crate::Crons for AnyStore {
    delegate! {
        async fn create_cron(&self, c: &crate::CronRecord) -> Result<(), StoreError>;
        async fn update_cron(&self, c: &crate::CronRecord, reschedule: bool) -> Result<bool, StoreError>;
        async fn cron(&self, id: &str) -> Result<Option<crate::CronRecord>, StoreError>;
        async fn crons_of(&self, user: &str) -> Result<Vec<crate::CronRecord>, StoreError>;
        async fn delete_cron(&self, id: &str, now: i64) -> Result<bool, StoreError>;
        async fn due_crons(&self, now: i64, limit: usize) -> Result<Vec<crate::CronRecord>, StoreError>;
        async fn claim_cron_tick(
            &self,
            id: &str,
            due: i64,
            next: Option<i64>,
            owner: &str,
            expires: i64,
        ) -> Result<bool, StoreError>;
        async fn reclaim_cron_tick(
            &self,
            id: &str,
            claim: &crate::CronClaim,
            owner: &str,
            now: i64,
            expires: i64,
        ) -> Result<bool, StoreError>;
        async fn finish_cron_tick(
            &self,
            id: &str,
            owner: &str,
            done: &crate::CronTick,
        ) -> Result<bool, StoreError>;
    }
}

impl Knowledge for AnyStore {
    delegate! {
        async fn add(
            &self,
            kind: Kind,
            shelf: &Shelf,
            entries: Vec<NewEntry>,
            replace: bool,
            now: i64,
        ) -> Result<Vec<i64>, StoreError>;
        async fn search(
            &self,
            kind: Kind,
            shelves: &[Shelf],
            query: &str,
            limit: usize,
        ) -> Result<Vec<Hit>, StoreError>;
        async fn search_vector(
            &self,
            kind: Kind,
            shelves: &[Shelf],
            model: &str,
            vector: &[f32],
            limit: usize,
        ) -> Result<Vec<Hit>, StoreError>;
        async fn forget(&self, kind: Kind, shelves: &[Shelf], id: i64) -> Result<bool, StoreError>;
        async fn list_entries(
            &self,
            kind: Kind,
            shelves: &[Shelf],
            limit: usize,
            offset: usize,
        ) -> Result<Vec<Listed>, StoreError>;
        async fn find(
            &self,
            kind: Kind,
            shelves: &[Shelf],
            source: &str,
        ) -> Result<Vec<Listed>, StoreError>;
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
