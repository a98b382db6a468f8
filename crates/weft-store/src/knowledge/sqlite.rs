//! Knowledge in SQLite: the `knowledge` table and its FTS5 index (migration 6), ranked by bm25.

use sqlx::{QueryBuilder, Sqlite};

use crate::sqlite::SqliteStore;

/// The entries holding any of `words` (see [`super::sql::sql_knowledge`]); bm25 is lower for a
/// better match, so its negation is the rank.
fn text_query(words: &[String]) -> QueryBuilder<'static, Sqlite> {
    let matcher = words
        .iter()
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" OR ");
    let mut q = QueryBuilder::new(
        "SELECT k.id, k.scope, k.source, k.position, k.text, -bm25(knowledge_fts) AS rank \
         FROM knowledge_fts JOIN knowledge k ON k.id = knowledge_fts.rowid \
         WHERE knowledge_fts MATCH ",
    );
    q.push_bind(matcher);
    q
}

super::sql::sql_knowledge!(SqliteStore, Sqlite, text_query);
