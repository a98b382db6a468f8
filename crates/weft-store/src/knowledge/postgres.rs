//! Knowledge in PostgreSQL: the `knowledge` table and its `tsvector` column (migration 6), ranked
//! by `ts_rank`.

use sqlx::{Postgres, QueryBuilder};

use crate::postgres::PgStore;

/// The entries holding any of `words` (see [`super::sql::sql_knowledge`]), ranked by `ts_rank`.
fn text_query(words: &[String]) -> QueryBuilder<'static, Postgres> {
    let matcher = words.join(" | ");
    let mut q = QueryBuilder::new(
        "SELECT k.id, k.scope, k.source, k.position, k.text, \
         ts_rank(k.tsv, to_tsquery('english', ",
    );
    q.push_bind(matcher.clone())
        .push("))::float8 AS rank FROM knowledge k WHERE k.tsv @@ to_tsquery('english', ")
        .push_bind(matcher)
        .push(")");
    q
}

super::sql::sql_knowledge!(PgStore, Postgres, text_query);
