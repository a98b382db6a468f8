//! Knowledge in the in-RAM store: ranked by how many of the query's words an entry holds.

use super::{
    Embedding, Hit, Kind, Knowledge, Listed, NewEntry, Shelf, TopK, query_words, similarity_to,
};
use crate::StoreError;
use crate::ram::RamStore;

/// One stored entry.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    id: i64,
    kind: Kind,
    shelf: Shelf,
    source: String,
    position: i64,
    text: String,
    /// `text`'s words, lower-cased.
    words: Vec<String>,
    embedding: Option<Embedding>,
    created_at: i64,
}

/// The in-RAM store's entries.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    next: i64,
    all: Vec<Entry>,
}

impl Knowledge for RamStore {
    async fn add(
        &self,
        kind: Kind,
        shelf: &Shelf,
        entries: Vec<NewEntry>,
        replace: bool,
        now: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let mut k = self.knowledge.lock().map_err(|_| poisoned())?;
        if replace {
            k.all.retain(|e| {
                !(e.kind == kind
                    && e.shelf == *shelf
                    && entries.iter().any(|n| n.source == e.source))
            });
        }
        let mut ids = Vec::with_capacity(entries.len());
        for e in entries {
            k.next += 1;
            let id = k.next;
            ids.push(id);
            let words = query_words(&e.text);
            k.all.push(Entry {
                id,
                kind,
                shelf: shelf.clone(),
                source: e.source,
                position: e.position,
                text: e.text,
                words,
                embedding: e.embedding,
                created_at: now,
            });
        }
        Ok(ids)
    }

    async fn search(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let words = query_words(query);
        let k = self.knowledge.lock().map_err(|_| poisoned())?;
        let mut hits: Vec<Hit> = k
            .all
            .iter()
            .filter(|e| e.kind == kind && shelves.contains(&e.shelf))
            .filter_map(|e| {
                let n = words.iter().filter(|w| e.words.contains(w)).count();
                (n > 0).then(|| Hit {
                    id: e.id,
                    scope: e.shelf.scope,
                    source: e.source.clone(),
                    position: e.position,
                    text: e.text.clone(),
                    score: n as f64,
                })
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(limit);
        Ok(hits)
    }

    async fn search_vector(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        model: &str,
        vector: &[f32],
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let k = self.knowledge.lock().map_err(|_| poisoned())?;
        let mut best = TopK::new(limit);
        for e in k
            .all
            .iter()
            .filter(|e| e.kind == kind && shelves.contains(&e.shelf))
        {
            if let Some(em) = e.embedding.as_ref().filter(|em| em.model == model)
                && let Some(score) = similarity_to(vector, &em.vector)
            {
                best.offer(e.id, score);
            }
        }
        Ok(best
            .into_sorted()
            .into_iter()
            .filter_map(|(id, score)| {
                k.all.iter().find(|e| e.id == id).map(|e| Hit {
                    id: e.id,
                    scope: e.shelf.scope,
                    source: e.source.clone(),
                    position: e.position,
                    text: e.text.clone(),
                    score,
                })
            })
            .collect())
    }

    async fn forget(&self, kind: Kind, shelves: &[Shelf], id: i64) -> Result<bool, StoreError> {
        let mut k = self.knowledge.lock().map_err(|_| poisoned())?;
        let before = k.all.len();
        k.all
            .retain(|e| !(e.id == id && e.kind == kind && shelves.contains(&e.shelf)));
        Ok(k.all.len() < before)
    }

    async fn list_entries(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Listed>, StoreError> {
        self.listed(kind, shelves, None, (limit, offset))
    }

    async fn find(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        source: &str,
    ) -> Result<Vec<Listed>, StoreError> {
        self.listed(kind, shelves, Some(source), (usize::MAX, 0))
    }
}

impl RamStore {
    /// The entries of `kind` on `shelves` (from `source` only, if given), newest first, `limit`
    /// of them after skipping `offset`.
    fn listed(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        source: Option<&str>,
        (limit, offset): (usize, usize),
    ) -> Result<Vec<Listed>, StoreError> {
        let k = self.knowledge.lock().map_err(|_| poisoned())?;
        let mut found: Vec<&Entry> = k
            .all
            .iter()
            .filter(|e| e.kind == kind && shelves.contains(&e.shelf))
            .filter(|e| source.is_none_or(|s| e.source == s))
            .collect();
        found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        Ok(found
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|e| Listed {
                id: e.id,
                scope: e.shelf.scope,
                owner: e.shelf.owner.clone(),
                source: e.source.clone(),
                position: e.position,
                text: e.text.clone(),
                created_at: e.created_at,
            })
            .collect())
    }
}

fn poisoned() -> StoreError {
    StoreError::Poisoned("memories and documents")
}
