//! The in-RAM store (`--db memory:`), for tests and one-off runs. Not to be confused with
//! long-term memory (`crate::knowledge`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use weft_core::snapshot::Encoded;
use weft_core::{Envelope, SessionStatus};

use crate::{
    Leases, ListFilter, NewSession, SessionLog, SessionRecord, Snapshot, StoreError, check_batch,
};

#[derive(Debug)]
struct Entry {
    rec: SessionRecord,
    log: Vec<Envelope>,
    /// The newest snapshot's head: (seq, version, head).
    head: Option<(u64, u32, String)>,
    parts: BTreeMap<u64, String>,
    /// How far its spans were acknowledged by the OTLP collector.
    exported: u64,
}

type Sessions = HashMap<String, Entry>;

/// Sessions in RAM; lost when the process ends.
#[derive(Debug, Default)]
pub struct RamStore {
    sessions: Mutex<Sessions>,
    leases: Mutex<std::collections::HashMap<String, crate::Lease>>,
    work: tokio::sync::Notify,
    pub(crate) knowledge: Mutex<crate::knowledge::ram::Entries>,
    /// What each user spent, by (user, period key).
    usage: Mutex<HashMap<(String, String), weft_core::quota::Used>>,
    /// Crons, by id.
    crons: Mutex<BTreeMap<String, crate::CronRecord>>,
    /// Queued runs, by run id.
    queued: Mutex<BTreeMap<String, crate::QueuedRun>>,
}

impl RamStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn leases(
        &self,
    ) -> Result<
        std::sync::MutexGuard<'_, std::collections::HashMap<String, crate::Lease>>,
        StoreError,
    > {
        self.leases
            .lock()
            .map_err(|_| StoreError::Poisoned("leases"))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Sessions>, StoreError> {
        self.sessions
            .lock()
            .map_err(|_| StoreError::Poisoned("sessions"))
    }

    /// An append, and the snapshot written with it, under one lock.
    fn append_inner(
        &self,
        id: &str,
        expected_seq: u64,
        events: &[Envelope],
        status: SessionStatus,
        now: i64,
        snapshot: Option<&Encoded>,
    ) -> Result<(), StoreError> {
        let mut map = self.lock()?;
        let entry = map
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        // Checked while the sessions are locked: an owner taking over loads the log after this.
        crate::lease::fence(id, crate::epoch_of(events), self.leases()?.get(id), now)?;
        if entry.rec.last_seq != expected_seq {
            return Err(StoreError::Conflict {
                session: id.to_owned(),
                expected: expected_seq,
                actual: entry.rec.last_seq,
            });
        }
        check_batch(id, expected_seq, events)?;
        entry.log.extend_from_slice(events);
        entry.rec.last_seq = expected_seq + events.len() as u64;
        entry.rec.updated_at =
            crate::updated_at_after(entry.rec.updated_at, entry.rec.status, status, now);
        entry.rec.status = status;
        if let Some(snap) = snapshot {
            entry.head = Some((snap.seq, snap.version, snap.head.clone()));
            if let Some(part) = &snap.part {
                entry.parts.split_off(&part.start);
                entry.parts.insert(part.start, part.text.clone());
            }
        }
        Ok(())
    }
}

impl SessionLog for RamStore {
    async fn create(&self, s: NewSession, now: i64) -> Result<SessionRecord, StoreError> {
        let mut map = self.lock()?;
        if map.contains_key(&s.id) {
            return Err(StoreError::Exists(s.id));
        }
        let rec = crate::row::record(s, now, 0);
        map.insert(
            rec.id.clone(),
            Entry {
                rec: rec.clone(),
                log: Vec::new(),
                head: None,
                parts: BTreeMap::new(),
                exported: 0,
            },
        );
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
        self.append_inner(id, expected_seq, events, status, now, None)
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
        crate::check_snapshot(id, expected_seq, events, snapshot)?;
        self.append_inner(id, expected_seq, events, status, now, Some(snapshot))
    }

    async fn get(&self, id: &str) -> Result<SessionRecord, StoreError> {
        let map = self.lock()?;
        map.get(id)
            .map(|e| e.rec.clone())
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    async fn load(&self, id: &str) -> Result<(SessionRecord, Vec<Envelope>), StoreError> {
        let map = self.lock()?;
        map.get(id)
            .map(|e| (e.rec.clone(), e.log.clone()))
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))
    }

    async fn events_after(&self, id: &str, after_seq: u64) -> Result<Vec<Envelope>, StoreError> {
        let map = self.lock()?;
        let entry = map
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        Ok(entry
            .log
            .iter()
            .filter(|e| e.seq > after_seq)
            .cloned()
            .collect())
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SessionRecord>, StoreError> {
        let map = self.lock()?;
        let mut v: Vec<SessionRecord> = map
            .values()
            .map(|e| &e.rec)
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

    async fn prune(&self, before: i64, active: bool) -> Result<u64, StoreError> {
        let mut map = self.lock()?;
        let n = map.len();
        map.retain(|_, e| e.rec.updated_at >= before || (!active && !e.rec.status.is_terminal()));
        let pruned = (n - map.len()) as u64;
        self.leases()?
            .retain(|id, l| l.expires_at >= before || map.contains_key(id));
        Ok(pruned)
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut map = self.lock()?;
        map.remove(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        self.leases()?.remove(id);
        Ok(())
    }

    async fn set_metadata(
        &self,
        id: &str,
        metadata: &serde_json::Value,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut map = self.lock()?;
        let e = map
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        e.rec.metadata = metadata.clone();
        e.rec.updated_at = now;
        Ok(())
    }

    async fn exported_through(&self, id: &str) -> Result<u64, StoreError> {
        Ok(self.lock()?.get(id).map_or(0, |e| e.exported))
    }

    async fn set_exported_through(&self, marks: &[(String, u64)]) -> Result<(), StoreError> {
        let mut map = self.lock()?;
        for (id, seq) in marks {
            if let Some(e) = map.get_mut(id) {
                e.exported = e.exported.max(*seq);
            }
        }
        Ok(())
    }

    async fn name_agent(&self, id: &str, agent: &str) -> Result<(), StoreError> {
        let mut map = self.lock()?;
        let e = map
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        if e.rec.agent.is_empty() {
            agent.clone_into(&mut e.rec.agent);
        }
        Ok(())
    }

    async fn latest_snapshot(&self, id: &str) -> Result<Option<Snapshot>, StoreError> {
        let map = self.lock()?;
        let entry = map
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        Ok(entry.head.as_ref().map(|(seq, version, head)| Snapshot {
            seq: *seq,
            version: *version,
            head: head.clone(),
        }))
    }

    async fn snapshot_parts(&self, id: &str, from: u64) -> Result<Vec<(u64, String)>, StoreError> {
        let map = self.lock()?;
        let entry = map
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
        let first = entry
            .parts
            .range(..=from)
            .next_back()
            .map_or(0, |(k, _)| *k);
        Ok(entry
            .parts
            .range(first..)
            .map(|(k, v)| (*k, v.clone()))
            .collect())
    }
}

impl crate::Usage for RamStore {
    async fn add_usage(
        &self,
        user: &str,
        periods: &[String],
        used: &weft_core::quota::Used,
        _now: i64,
    ) -> Result<(), StoreError> {
        let mut all = self
            .usage
            .lock()
            .map_err(|_| StoreError::Poisoned("usage counters"))?;
        for period in periods {
            let c = all.entry((user.to_owned(), period.clone())).or_default();
            *c = c.plus(used);
        }
        Ok(())
    }

    async fn usage(
        &self,
        user: &str,
        periods: &[String],
    ) -> Result<Vec<weft_core::quota::Used>, StoreError> {
        let all = self
            .usage
            .lock()
            .map_err(|_| StoreError::Poisoned("usage counters"))?;
        Ok(periods
            .iter()
            .map(|p| {
                all.get(&(user.to_owned(), p.clone()))
                    .cloned()
                    .unwrap_or_default()
            })
            .collect())
    }
}

impl RamStore {
    fn crons(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, crate::CronRecord>>, StoreError> {
        self.crons.lock().map_err(|_| StoreError::Poisoned("crons"))
    }
}

impl RamStore {
    fn queued(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, crate::QueuedRun>>, StoreError> {
        self.queued
            .lock()
            .map_err(|_| StoreError::Poisoned("queued runs"))
    }

    /// The queued runs `keep` keeps, oldest first.
    fn queued_where(
        &self,
        keep: impl Fn(&crate::QueuedRun) -> bool,
    ) -> Result<Vec<crate::QueuedRun>, StoreError> {
        let all = self.queued()?;
        Ok(oldest_first(
            all.values().filter(|q| keep(q)).cloned().collect(),
        ))
    }
}

/// Oldest first, as the SQL stores list them.
fn oldest_first(mut runs: Vec<crate::QueuedRun>) -> Vec<crate::QueuedRun> {
    runs.sort_by(|a, b| (a.created_at, &a.run_id).cmp(&(b.created_at, &b.run_id)));
    runs
}

impl crate::RunQueue for RamStore {
    async fn queue_run(&self, q: &crate::QueuedRun) -> Result<(), StoreError> {
        let mut all = self.queued()?;
        if all.contains_key(&q.run_id) {
            return Err(StoreError::Exists(q.run_id.clone()));
        }
        all.insert(q.run_id.clone(), q.clone());
        Ok(())
    }

    async fn queued_run(&self, run_id: &str) -> Result<Option<crate::QueuedRun>, StoreError> {
        Ok(self.queued()?.get(run_id).cloned())
    }

    async fn queued_runs_of(&self, thread_id: &str) -> Result<Vec<crate::QueuedRun>, StoreError> {
        self.queued_where(|q| q.thread_id == thread_id)
    }

    async fn queued_runs_of_user(
        &self,
        user_id: &str,
    ) -> Result<Vec<crate::QueuedRun>, StoreError> {
        self.queued_where(|q| q.user_id == user_id)
    }

    async fn stale_queued_runs(
        &self,
        now: i64,
        limit: usize,
    ) -> Result<Vec<crate::QueuedRun>, StoreError> {
        let all = self.queued()?;
        let mut stale = oldest_first(
            all.values()
                .filter(|q| q.expires_at <= now)
                .cloned()
                .collect(),
        );
        stale.truncate(limit);
        Ok(stale)
    }

    async fn take_queued_run(
        &self,
        run_id: &str,
        from: &str,
        now: i64,
        owner: &str,
        expires_at: i64,
    ) -> Result<bool, StoreError> {
        let mut all = self.queued()?;
        match all.get_mut(run_id) {
            Some(q) if q.owner == from && q.expires_at <= now => {
                owner.clone_into(&mut q.owner);
                q.expires_at = expires_at;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn renew_queued_runs(&self, owner: &str, expires_at: i64) -> Result<(), StoreError> {
        for q in self.queued()?.values_mut().filter(|q| q.owner == owner) {
            q.expires_at = expires_at;
        }
        Ok(())
    }

    async fn unqueue_run(&self, run_id: &str) -> Result<(), StoreError> {
        self.queued()?.remove(run_id);
        Ok(())
    }
}

impl crate::Crons for RamStore {
    async fn create_cron(&self, c: &crate::CronRecord) -> Result<(), StoreError> {
        let mut all = self.crons()?;
        if all.contains_key(&c.id) {
            return Err(StoreError::Exists(c.id.clone()));
        }
        let mut c = c.clone();
        c.claim = None;
        c.last = None;
        c.ticks = 0;
        all.insert(c.id.clone(), c);
        Ok(())
    }

    async fn update_cron(
        &self,
        c: &crate::CronRecord,
        reschedule: bool,
    ) -> Result<bool, StoreError> {
        let mut all = self.crons()?;
        let Some(stored) = all.get_mut(&c.id) else {
            return Ok(false);
        };
        stored.schedule.clone_from(&c.schedule);
        stored.payload.clone_from(&c.payload);
        stored.metadata.clone_from(&c.metadata);
        stored.on_run_completed.clone_from(&c.on_run_completed);
        stored.enabled = c.enabled;
        stored.end_time = c.end_time;
        if reschedule {
            stored.next_run_at = c.next_run_at;
        }
        stored.updated_at = c.updated_at;
        Ok(true)
    }

    async fn cron(&self, id: &str) -> Result<Option<crate::CronRecord>, StoreError> {
        Ok(self.crons()?.get(id).cloned())
    }

    async fn crons_of(&self, user: &str) -> Result<Vec<crate::CronRecord>, StoreError> {
        let mut out: Vec<crate::CronRecord> = self
            .crons()?
            .values()
            .filter(|c| c.user_id == user)
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    async fn delete_cron(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let mut all = self.crons()?;
        let claimed = all
            .get(id)
            .and_then(|c| c.claim.as_ref())
            .is_some_and(|claim| claim.expires > now);
        Ok(!claimed && all.remove(id).is_some())
    }

    async fn due_crons(
        &self,
        now: i64,
        limit: usize,
    ) -> Result<Vec<crate::CronRecord>, StoreError> {
        let mut out: Vec<crate::CronRecord> = self
            .crons()?
            .values()
            .filter(|c| {
                c.enabled
                    && match &c.claim {
                        None => c.next_run_at.is_some_and(|t| t <= now),
                        Some(claim) => claim.expires <= now,
                    }
            })
            .cloned()
            .collect();
        out.sort_by_key(|c| c.next_run_at);
        out.truncate(limit);
        Ok(out)
    }

    async fn claim_cron_tick(
        &self,
        id: &str,
        due: i64,
        next: Option<i64>,
        owner: &str,
        expires: i64,
    ) -> Result<bool, StoreError> {
        let mut all = self.crons()?;
        let Some(c) = all.get_mut(id) else {
            return Ok(false);
        };
        if !c.enabled || c.claim.is_some() || c.next_run_at != Some(due) {
            return Ok(false);
        }
        c.next_run_at = next;
        c.claim = Some(crate::CronClaim {
            tick: due,
            owner: owner.to_owned(),
            expires,
        });
        Ok(true)
    }

    async fn reclaim_cron_tick(
        &self,
        id: &str,
        claim: &crate::CronClaim,
        owner: &str,
        now: i64,
        expires: i64,
    ) -> Result<bool, StoreError> {
        let mut all = self.crons()?;
        let Some(c) = all.get_mut(id) else {
            return Ok(false);
        };
        match &mut c.claim {
            Some(held)
                if held.tick == claim.tick && held.owner == claim.owner && held.expires <= now =>
            {
                held.owner = owner.to_owned();
                held.expires = expires;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn finish_cron_tick(
        &self,
        id: &str,
        owner: &str,
        done: &crate::CronTick,
    ) -> Result<bool, StoreError> {
        let mut all = self.crons()?;
        let Some(c) = all.get_mut(id) else {
            return Ok(false);
        };
        if !c
            .claim
            .as_ref()
            .is_some_and(|h| h.tick == done.tick && h.owner == owner)
        {
            return Ok(false);
        }
        c.claim = None;
        c.last = Some(done.clone());
        c.ticks += 1;
        Ok(true)
    }
}

impl Leases for RamStore {
    async fn acquire(
        &self,
        id: &str,
        owner: &crate::Owner,
        now: i64,
        ttl_ms: i64,
        force: bool,
    ) -> Result<crate::Lease, StoreError> {
        let mut leases = self.leases()?;
        let epoch = match leases.get(id) {
            None => 1,
            Some(l) if l.owner.id == owner.id => l.epoch,
            Some(l) if l.expires_at <= now || force => l.epoch + 1,
            Some(l) => return Err(crate::lease::held(l, now)),
        };
        let lease = crate::Lease {
            session: id.to_owned(),
            owner: owner.clone(),
            epoch,
            expires_at: now.saturating_add(ttl_ms),
            request: None,
        };
        leases.insert(id.to_owned(), lease.clone());
        Ok(lease)
    }

    async fn renew(&self, lease: &crate::Lease, expires_at: i64) -> Result<(), StoreError> {
        let mut leases = self.leases()?;
        match leases.get_mut(&lease.session) {
            Some(l) if l.owner.id == lease.owner.id && l.epoch == lease.epoch => {
                l.expires_at = expires_at;
                Ok(())
            }
            _ => Err(StoreError::LeaseLost(lease.session.clone())),
        }
    }

    async fn release(&self, lease: &crate::Lease) -> Result<(), StoreError> {
        match self.renew(lease, 0).await {
            Err(StoreError::LeaseLost(_)) => Ok(()),
            other => other,
        }
    }

    async fn request(&self, id: &str, what: &str, now: i64) -> Result<bool, StoreError> {
        let mut leases = self.leases()?;
        match leases.get_mut(id) {
            Some(l) if l.expires_at > now => {
                l.request = Some(what.to_owned());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn lease(&self, id: &str) -> Result<Option<crate::Lease>, StoreError> {
        Ok(self.leases()?.get(id).cloned())
    }

    async fn claim(
        &self,
        owner: &crate::Owner,
        agents: &[String],
        now: i64,
        ttl_ms: i64,
        limit: usize,
    ) -> Result<Vec<crate::Lease>, StoreError> {
        let mut candidates: Vec<(bool, i64, String)> = {
            let map = self.lock()?;
            let leases = self.leases()?;
            map.values()
                .filter(|e| {
                    e.rec.status == SessionStatus::Running
                        && !e.log.is_empty()
                        && agents.contains(&e.rec.agent)
                        && leases.get(&e.rec.id).is_none_or(|l| l.expires_at <= now)
                })
                .map(|e| {
                    // Sessions whose owner stopped come first (see `lease::claimable_sql`).
                    let fresh = !leases.contains_key(&e.rec.id);
                    (fresh, e.rec.updated_at, e.rec.id.clone())
                })
                .collect()
        };
        candidates.sort();
        let ids = candidates.into_iter().map(|(_, _, id)| id);
        crate::take_each(self, ids, owner, now, ttl_ms, limit).await
    }

    async fn waiting(&self, now: i64) -> Result<u64, StoreError> {
        let map = self.lock()?;
        let leases = self.leases()?;
        Ok(map
            .values()
            .filter(|e| {
                e.rec.status == SessionStatus::Running
                    && !e.log.is_empty()
                    && leases.get(&e.rec.id).is_none_or(|l| l.expires_at <= now)
            })
            .count() as u64)
    }

    async fn wake(&self) -> Result<(), StoreError> {
        self.work.notify_waiters();
        Ok(())
    }

    async fn wait_for_work(&self, max: std::time::Duration) {
        let _ = tokio::time::timeout(max, self.work.notified()).await;
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
