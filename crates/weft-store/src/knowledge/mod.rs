//! Long-term memory and documents ("knowledge"): short texts kept across sessions, each on a
//! shelf (a scope and its owner), found again by full-text search. SQLite searches with FTS5,
//! PostgreSQL with its own full-text search, the in-RAM store by counting the words a text shares
//! with the query.
//!
//! An entry may also keep an embedding (a vector of length 1 and the name of the model that made
//! it). [`Knowledge::search_vector`] ranks the entries whose vectors the same model made by cosine
//! similarity, reading every candidate vector (an exact search, linear in the entries on the
//! shelves searched, in bounded memory); [`fuse`] combines a text ranking and a vector ranking by
//! reciprocal rank fusion. Memories and document chunks share one table (migration 6) and one
//! search, told apart by [`Kind`]; vectors (migration 7) are stored as little-endian `f32`. The
//! search by meaning is exact rather than an approximate index: no extension to install on
//! either database, results that do not depend on an index's tuning, and a latency that
//! BENCHMARKS.md measures.
//!
//! **Isolation.** A search or a deletion names every shelf it may touch; nothing is read or
//! deleted outside them. Callers build the shelves from who is asking (the session's user, the
//! agent), never from what a model wrote, so one user's memories never reach another's search.

mod postgres;
pub(crate) mod ram;
mod sql;
mod sqlite;

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::StoreError;

/// Who may read an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One user's.
    User,
    /// One agent's, shared by its users.
    Agent,
    /// Everyone's.
    Public,
}

impl Scope {
    /// The scope's name as stored and as [`Scope::parse`] reads it: `user`, `agent` or `public`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Agent => "agent",
            Self::Public => "public",
        }
    }

    /// Reads a scope's name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Self::User),
            "agent" => Some(Self::Agent),
            "public" => Some(Self::Public),
            _ => None,
        }
    }
}

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A fact remembered (`remember`).
    Memory,
    /// A chunk of a document (`weft docs add`).
    Document,
}

impl Kind {
    /// The kind's name as stored: `memory` or `document`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Document => "document",
        }
    }
}

/// A scope and its owner: the user's id, the agent's name, or nobody (public).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shelf {
    /// Who may read the shelf's entries.
    pub scope: Scope,
    /// The user's id for [`Scope::User`], the agent's name for [`Scope::Agent`], empty for
    /// [`Scope::Public`].
    pub owner: String,
}

impl Shelf {
    /// The shelf of the user with id `id`.
    pub fn user(id: &str) -> Self {
        Self {
            scope: Scope::User,
            owner: id.to_owned(),
        }
    }

    /// The shelf of the agent named `name`, shared by its users.
    pub fn agent(name: &str) -> Self {
        Self {
            scope: Scope::Agent,
            owner: name.to_owned(),
        }
    }

    /// The shelf everyone reads.
    pub fn public() -> Self {
        Self {
            scope: Scope::Public,
            owner: String::new(),
        }
    }
}

/// An entry to store: its text and, for a document chunk, where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEntry {
    /// The text to store and search.
    pub text: String,
    /// The document's path or name; empty for a memory.
    pub source: String,
    /// The chunk's position in its document (0, 1, ...).
    pub position: i64,
    /// The text's embedding, if one was made.
    pub embedding: Option<Embedding>,
}

/// A vector of length 1 and the model that made it.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    /// The name of the model that made the vector; only vectors of one model are compared.
    pub model: String,
    /// The vector, normalised to length 1.
    pub vector: Vec<f32>,
}

/// A vector as stored: its numbers as little-endian `f32`.
pub(crate) fn encode_vector(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The cosine similarity of `query` (length 1) and a stored vector, or `None` if the stored
/// bytes do not hold a vector of the query's dimension.
pub(crate) fn similarity(query: &[f32], stored: &[u8]) -> Option<f64> {
    if stored.len() != query.len() * 4 {
        return None;
    }
    dot(
        query,
        stored
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    )
}

/// [`similarity`] of a vector held in memory (the in-RAM store's), without encoding it.
pub(crate) fn similarity_to(query: &[f32], v: &[f32]) -> Option<f64> {
    (v.len() == query.len())
        .then(|| dot(query, v.iter().copied()))
        .flatten()
}

fn dot(query: &[f32], other: impl Iterator<Item = f32>) -> Option<f64> {
    let d: f64 = query
        .iter()
        .zip(other)
        .map(|(q, x)| f64::from(*q) * f64::from(x))
        .sum();
    d.is_finite().then_some(d)
}

/// The best `limit` (id, score) pairs, best first (ties: lower id first), kept in memory
/// bounded by `limit` however many candidates pass.
#[derive(Debug)]
pub(crate) struct TopK {
    limit: usize,
    /// A min-heap on score: the worst kept candidate is on top.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<Scored>>,
}

#[derive(Debug, PartialEq)]
struct Scored(f64, std::cmp::Reverse<i64>);

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

impl TopK {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            heap: std::collections::BinaryHeap::with_capacity(limit + 1),
        }
    }

    pub(crate) fn offer(&mut self, id: i64, score: f64) {
        if self.limit == 0 {
            return;
        }
        self.heap
            .push(std::cmp::Reverse(Scored(score, std::cmp::Reverse(id))));
        if self.heap.len() > self.limit {
            self.heap.pop();
        }
    }

    /// The kept pairs, best first.
    pub(crate) fn into_sorted(self) -> Vec<(i64, f64)> {
        let mut v: Vec<(i64, f64)> = self
            .heap
            .into_iter()
            .map(|std::cmp::Reverse(Scored(s, std::cmp::Reverse(id)))| (id, s))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// The constant of reciprocal rank fusion: an entry's fused score is the sum, over the rankings
/// that hold it, of `1 / (RRF_K + rank)` (ranks from 1). 60 is the value the method was
/// published with; it keeps one ranking's top result from outweighing agreement between them.
pub const RRF_K: f64 = 60.0;

/// Combines rankings (each best first) by reciprocal rank fusion into the best `limit` entries;
/// their `score` becomes the fused score. Ties keep the order of the first ranking.
pub fn fuse(rankings: &[Vec<Hit>], limit: usize) -> Vec<Hit> {
    let mut fused: Vec<Hit> = Vec::new();
    for ranking in rankings {
        for (rank, hit) in ranking.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let add = 1.0 / (RRF_K + (rank + 1) as f64);
            match fused.iter_mut().find(|h| h.id == hit.id) {
                Some(h) => h.score += add,
                None => fused.push(Hit {
                    score: add,
                    ..hit.clone()
                }),
            }
        }
    }
    // A stable sort: equal scores keep the order they were first seen in.
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
    fused.truncate(limit);
    fused
}

/// An entry found by a search, best first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The entry's id in the store.
    pub id: i64,
    /// The scope of the shelf the entry is on.
    pub scope: Scope,
    /// The document's path or name; empty for a memory.
    pub source: String,
    /// The chunk's position in its document (0, 1, ...); 0 for a memory.
    pub position: i64,
    /// The entry's text.
    pub text: String,
    /// Higher is better; comparable within one search only.
    pub score: f64,
}

/// English words too common to tell texts apart. In a small collection (one user's memories)
/// a full-text ranking would otherwise rank a text first for sharing "of" or "the" with the
/// question; PostgreSQL's `english` configuration drops such words itself.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "him", "his", "how", "if", "in", "into", "is", "it", "its", "me", "my",
    "no", "not", "of", "on", "or", "our", "she", "should", "so", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "to", "too", "up", "us", "was",
    "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with",
    "would", "you", "your",
];

/// A stored entry as a listing shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    /// The entry's id in the store.
    pub id: i64,
    /// The scope of the shelf the entry is on.
    pub scope: Scope,
    /// The shelf's owner: the user's id, the agent's name, or empty (public).
    pub owner: String,
    /// The document's path or name; empty for a memory.
    pub source: String,
    /// The chunk's position in its document (0, 1, ...); 0 for a memory.
    pub position: i64,
    /// The entry's text.
    pub text: String,
    /// When it was stored, in milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// The words of a query a search looks for: letters and digits, lower-cased, at most 32 distinct
/// words of two characters or more, without `STOP_WORDS`. Everything else (quotes, operators)
/// is dropped, so no query text reaches a database's query language.
pub fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for w in query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2)
    {
        let w = w.to_lowercase();
        if STOP_WORDS.contains(&w.as_str()) {
            continue;
        }
        if !words.contains(&w) {
            words.push(w);
        }
        if words.len() == 32 {
            break;
        }
    }
    words
}

/// Long-term memory and document chunks in a session store.
pub trait Knowledge: Send + Sync {
    /// Stores `entries` on `shelf`. With `replace`, the entries of the same kind on that shelf
    /// from the same sources are removed first, in the same transaction (a changed document
    /// replaces its chunks). Returns the new entries' ids.
    fn add(
        &self,
        kind: Kind,
        shelf: &Shelf,
        entries: Vec<NewEntry>,
        replace: bool,
        now: i64,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// The best `limit` entries of `kind` on `shelves` for `query` (see [`query_words`]).
    fn search(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        query: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Hit>, StoreError>> + Send;

    /// The best `limit` entries of `kind` on `shelves` whose embeddings `model` made, by cosine
    /// similarity to `vector` (length 1); `score` is the similarity.
    fn search_vector(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        model: &str,
        vector: &[f32],
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Hit>, StoreError>> + Send;

    /// Deletes the entry `id` of `kind` if it is on one of `shelves`; whether it was.
    fn forget(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        id: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The entries of `kind` on `shelves`, newest first (then the highest id first), `limit`
    /// of them after skipping `offset`.
    fn list_entries(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        limit: usize,
        offset: usize,
    ) -> impl Future<Output = Result<Vec<Listed>, StoreError>> + Send;

    /// The entries of `kind` on `shelves` whose source is `source`, newest first.
    fn find(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        source: &str,
    ) -> impl Future<Output = Result<Vec<Listed>, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_words_keep_letters_and_digits_only() {
        assert_eq!(
            query_words(r#"What's "Ada's" NEAR(x) OR 42 -- a"#),
            ["ada", "near", "42"]
        );
        assert!(query_words("' \" * ( )").is_empty());
    }

    fn hit(id: i64) -> Hit {
        Hit {
            id,
            scope: Scope::Public,
            source: String::new(),
            position: 0,
            text: format!("entry {id}"),
            score: 0.0,
        }
    }

    #[test]
    fn fusion_rewards_agreement_between_rankings() {
        // 3 is second in both rankings; 1 and 4 are first in one only.
        let text = vec![hit(1), hit(3), hit(2)];
        let vector = vec![hit(4), hit(3), hit(5)];
        let fused = fuse(&[text, vector], 3);
        let ids: Vec<i64> = fused.iter().map(|h| h.id).collect();
        assert_eq!(ids, [3, 1, 4]);
        assert!((fused[0].score - 2.0 / 62.0).abs() < 1e-12);
        assert!(fuse(&[], 5).is_empty());
        assert_eq!(fuse(&[vec![hit(1), hit(2)]], 1).len(), 1);
    }

    #[test]
    fn top_k_keeps_the_best_in_bounded_memory() {
        let mut t = TopK::new(3);
        for (id, s) in [(1, 0.1), (2, 0.9), (3, 0.5), (4, 0.9), (5, -1.0), (6, 0.7)] {
            t.offer(id, s);
            assert!(t.heap.len() <= 3);
        }
        assert_eq!(t.into_sorted(), [(2, 0.9), (4, 0.9), (6, 0.7)]);
        let mut none = TopK::new(0);
        none.offer(1, 1.0);
        assert!(none.into_sorted().is_empty());
    }

    #[test]
    fn stored_vectors_are_compared_only_at_their_dimension() {
        let q = [0.6f32, 0.8];
        let s = encode_vector(&[0.6, 0.8]);
        assert!((similarity(&q, &s).unwrap() - 1.0).abs() < 1e-6);
        assert_eq!(similarity(&q, &encode_vector(&[1.0])), None);
        assert_eq!(similarity(&q, &[1, 2, 3]), None);
        assert_eq!(similarity_to(&q, &[0.6, 0.8]), similarity(&q, &s));
        assert_eq!(similarity_to(&q, &[1.0]), None);
    }
}
