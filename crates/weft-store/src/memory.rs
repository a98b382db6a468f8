//! A store in memory, for tests and one-off runs.

use std::collections::HashMap;
use std::sync::Mutex;

use weft_core::{Envelope, SessionStatus};

use crate::{ListFilter, NewSession, SessionRecord, Store, StoreError, check_batch};

type Sessions = HashMap<String, (SessionRecord, Vec<Envelope>)>;

/// Sessions in memory; lost when the process ends.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<Sessions>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Sessions>, StoreError> {
        self.sessions
            .lock()
            .map_err(|_| StoreError::Backend("the in-memory store was poisoned by a panic".into()))
    }
}

impl Store for MemoryStore {
    async fn create(&self, s: NewSession, now: i64) -> Result<SessionRecord, StoreError> {
        let mut map = self.lock()?;
        if map.contains_key(&s.id) {
            return Err(StoreError::Exists(s.id));
        }
        let rec = SessionRecord {
            id: s.id.clone(),
            user_id: s.user_id,
            agent: s.agent,
            reference_id: s.reference_id,
            metadata: s.metadata,
            parent_id: s.parent_id,
            status: SessionStatus::Running,
            created_at: now,
            updated_at: now,
            last_seq: 0,
        };
        map.insert(s.id, (rec.clone(), Vec::new()));
        Ok(rec)
    }

    async fn append(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut map = self.lock()?;
        let (rec, log) = map
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        if rec.last_seq != expected_seq {
            return Err(StoreError::Conflict {
                session: id.to_owned(),
                expected: expected_seq,
                actual: rec.last_seq,
            });
        }
        check_batch(id, expected_seq, events)?;
        log.extend_from_slice(events);
        rec.last_seq = expected_seq + events.len() as u64;
        rec.status = status;
        rec.updated_at = now;
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<SessionRecord, StoreError> {
        let map = self.lock()?;
        map.get(id)
            .map(|(r, _)| r.clone())
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    async fn load(&self, id: &str) -> Result<(SessionRecord, Vec<Envelope>), StoreError> {
        let map = self.lock()?;
        map.get(id)
            .cloned()
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    async fn events_after(&self, id: &str, after_seq: u64) -> Result<Vec<Envelope>, StoreError> {
        let map = self.lock()?;
        let (_, log) = map
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        Ok(log.iter().filter(|e| e.seq > after_seq).cloned().collect())
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SessionRecord>, StoreError> {
        let map = self.lock()?;
        let mut v: Vec<SessionRecord> = map
            .values()
            .map(|(r, _)| r)
            .filter(|r| {
                filter
                    .user_id
                    .as_ref()
                    .is_none_or(|u| r.user_id.as_ref() == Some(u))
            })
            .filter(|r| filter.status.is_none_or(|s| r.status == s))
            .cloned()
            .collect();
        v.sort_by(|a, b| {
            b.updated_at
                .cmp(&a.updated_at)
                .then_with(|| b.id.cmp(&a.id))
        });
        if let Some(n) = filter.limit {
            v.truncate(n);
        }
        Ok(v)
    }

    async fn prune(&self, before: i64) -> Result<u64, StoreError> {
        let mut map = self.lock()?;
        let n = map.len();
        map.retain(|_, (r, _)| r.updated_at >= before);
        Ok((n - map.len()) as u64)
    }
}
