//! Long-term memory and documents ("knowledge"): short texts kept across sessions, each on a
//! shelf (a scope and its owner), found again by full-text search. SQLite searches with FTS5,
//! PostgreSQL with its own full-text search, the memory store by counting the words a text shares
//! with the query.
//!
//! **Isolation.** A search or a deletion names every shelf it may touch; nothing is read or
//! deleted outside them. Callers build the shelves from who is asking (the session's user, the
//! agent), never from what a model wrote, so one user's memories never reach another's search.

pub(crate) mod memory;
mod postgres;
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
    pub scope: Scope,
    pub owner: String,
}

impl Shelf {
    pub fn user(id: &str) -> Self {
        Self {
            scope: Scope::User,
            owner: id.to_owned(),
        }
    }

    pub fn agent(name: &str) -> Self {
        Self {
            scope: Scope::Agent,
            owner: name.to_owned(),
        }
    }

    pub fn public() -> Self {
        Self {
            scope: Scope::Public,
            owner: String::new(),
        }
    }
}

/// An entry to store: its text and, for a document chunk, where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEntry {
    pub text: String,
    /// The document's path or name; empty for a memory.
    pub source: String,
    /// The chunk's position in its document (0, 1, ...).
    pub position: i64,
}

/// An entry found by a search, best first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub id: i64,
    pub scope: Scope,
    pub source: String,
    pub position: i64,
    pub text: String,
    /// Higher is better; comparable within one search only.
    pub score: f64,
}

/// A stored entry as a listing shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    pub id: i64,
    pub scope: Scope,
    /// The shelf's owner: the user's id, the agent's name, or empty (public).
    pub owner: String,
    pub source: String,
    pub position: i64,
    pub text: String,
    /// When it was stored, in milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// The words of a query a search looks for: letters and digits, lower-cased, at most 32 distinct
/// words of two characters or more. Everything else (quotes, operators) is dropped, so no query
/// text reaches a database's query language.
pub fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for w in query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2)
    {
        let w = w.to_lowercase();
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
}

impl Knowledge for crate::AnyStore {
    async fn add(
        &self,
        kind: Kind,
        shelf: &Shelf,
        entries: Vec<NewEntry>,
        replace: bool,
        now: i64,
    ) -> Result<Vec<i64>, StoreError> {
        match self {
            Self::Sqlite(s) => s.add(kind, shelf, entries, replace, now).await,
            Self::Postgres(s) => s.add(kind, shelf, entries, replace, now).await,
            Self::Memory(s) => s.add(kind, shelf, entries, replace, now).await,
        }
    }

    async fn search(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        match self {
            Self::Sqlite(s) => s.search(kind, shelves, query, limit).await,
            Self::Postgres(s) => s.search(kind, shelves, query, limit).await,
            Self::Memory(s) => s.search(kind, shelves, query, limit).await,
        }
    }

    async fn forget(&self, kind: Kind, shelves: &[Shelf], id: i64) -> Result<bool, StoreError> {
        match self {
            Self::Sqlite(s) => s.forget(kind, shelves, id).await,
            Self::Postgres(s) => s.forget(kind, shelves, id).await,
            Self::Memory(s) => s.forget(kind, shelves, id).await,
        }
    }

    async fn list_entries(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Listed>, StoreError> {
        match self {
            Self::Sqlite(s) => s.list_entries(kind, shelves, limit, offset).await,
            Self::Postgres(s) => s.list_entries(kind, shelves, limit, offset).await,
            Self::Memory(s) => s.list_entries(kind, shelves, limit, offset).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_words_keep_letters_and_digits_only() {
        assert_eq!(
            query_words(r#"What's "Ada's" NEAR(x) OR 42 -- a"#),
            ["what", "ada", "near", "or", "42"]
        );
        assert!(query_words("' \" * ( )").is_empty());
    }
}
