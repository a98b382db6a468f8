//! Knowledge in SQLite: the `knowledge` table and its FTS5 index (migration 6), ranked by bm25.

use sqlx::{QueryBuilder, Row, Sqlite};

use futures::TryStreamExt;

use super::{
    Hit, Kind, Knowledge, Listed, NewEntry, Scope, Shelf, TopK, encode_vector, query_words,
    similarity,
};
use crate::StoreError;
use crate::sqlite::SqliteStore;

fn err(context: &str, source: sqlx::Error) -> StoreError {
    StoreError::Sql {
        context: context.to_owned(),
        source,
    }
}

fn shelves_clause(q: &mut QueryBuilder<'_, Sqlite>, shelves: &[Shelf]) {
    q.push(" AND (");
    for (i, s) in shelves.iter().enumerate() {
        if i > 0 {
            q.push(" OR ");
        }
        q.push("(k.scope = ")
            .push_bind(s.scope.as_str())
            .push(" AND k.owner = ")
            .push_bind(s.owner.clone())
            .push(")");
    }
    q.push(")");
}

/// A hit from a row of (id, scope, source, position, text).
fn read_hit(r: &sqlx::sqlite::SqliteRow, score: f64) -> Result<Hit, StoreError> {
    let scope: String = r.try_get(1).map_err(|e| err("cannot read knowledge", e))?;
    Ok(Hit {
        id: r.try_get(0).map_err(|e| err("cannot read knowledge", e))?,
        scope: Scope::parse(&scope).ok_or_else(|| {
            StoreError::Corrupt(format!("knowledge has an unknown scope `{scope}`"))
        })?,
        source: r.try_get(2).map_err(|e| err("cannot read knowledge", e))?,
        position: r.try_get(3).map_err(|e| err("cannot read knowledge", e))?,
        text: r.try_get(4).map_err(|e| err("cannot read knowledge", e))?,
        score,
    })
}

impl Knowledge for SqliteStore {
    async fn add(
        &self,
        kind: Kind,
        shelf: &Shelf,
        entries: Vec<NewEntry>,
        replace: bool,
        now: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let ctx = "cannot store knowledge";
        let mut tx = self.pool.begin().await.map_err(|e| err(ctx, e))?;
        if replace {
            let mut sources: Vec<&str> = entries.iter().map(|e| e.source.as_str()).collect();
            sources.sort_unstable();
            sources.dedup();
            for source in sources {
                sqlx::query(
                    "DELETE FROM knowledge WHERE kind = ? AND scope = ? AND owner = ? AND source = ?",
                )
                .bind(kind.as_str())
                .bind(shelf.scope.as_str())
                .bind(&shelf.owner)
                .bind(source)
                .execute(&mut *tx)
                .await
                .map_err(|e| err(ctx, e))?;
            }
        }
        let mut ids = Vec::with_capacity(entries.len());
        for e in entries {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO knowledge (kind, scope, owner, source, position, text, created_at, \
                 embedding, embedding_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            )
            .bind(kind.as_str())
            .bind(shelf.scope.as_str())
            .bind(&shelf.owner)
            .bind(&e.source)
            .bind(e.position)
            .bind(&e.text)
            .bind(now)
            .bind(e.embedding.as_ref().map(|v| encode_vector(&v.vector)))
            .bind(e.embedding.as_ref().map(|v| v.model.clone()))
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| err(ctx, e))?;
            ids.push(id);
        }
        tx.commit().await.map_err(|e| err(ctx, e))?;
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
        if words.is_empty() || shelves.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let matcher = words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" OR ");
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT k.id, k.scope, k.source, k.position, k.text, bm25(knowledge_fts) AS rank \
             FROM knowledge_fts JOIN knowledge k ON k.id = knowledge_fts.rowid \
             WHERE knowledge_fts MATCH ",
        );
        q.push_bind(matcher)
            .push(" AND k.kind = ")
            .push_bind(kind.as_str());
        shelves_clause(&mut q, shelves);
        q.push(" ORDER BY rank, k.id LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = q
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(|e| err("cannot search knowledge", e))?;
        rows.iter()
            .map(|r| {
                let rank: f64 = r.try_get(5).map_err(|e| err("cannot read knowledge", e))?;
                read_hit(r, -rank)
            })
            .collect()
    }

    async fn search_vector(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        model: &str,
        vector: &[f32],
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        if shelves.is_empty() || limit == 0 || vector.is_empty() {
            return Ok(Vec::new());
        }
        // First the ids and vectors only, streamed, keeping the best `limit`; then their rows.
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT k.id, k.embedding FROM knowledge k WHERE k.kind = ",
        );
        q.push_bind(kind.as_str())
            .push(" AND k.embedding_model = ")
            .push_bind(model.to_owned());
        shelves_clause(&mut q, shelves);
        let mut best = TopK::new(limit);
        {
            let mut rows = q.build().fetch(&self.pool);
            while let Some(r) = rows
                .try_next()
                .await
                .map_err(|e| err("cannot search knowledge by meaning", e))?
            {
                let id: i64 = r.try_get(0).map_err(|e| err("cannot read knowledge", e))?;
                let stored: Vec<u8> = r.try_get(1).map_err(|e| err("cannot read knowledge", e))?;
                if let Some(score) = similarity(vector, &stored) {
                    best.offer(id, score);
                }
            }
        }
        let best = best.into_sorted();
        if best.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT k.id, k.scope, k.source, k.position, k.text FROM knowledge k WHERE k.id IN (",
        );
        let mut ids = q.separated(", ");
        for (id, _) in &best {
            ids.push_bind(*id);
        }
        q.push(")");
        let rows = q
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(|e| err("cannot search knowledge by meaning", e))?;
        let mut hits = Vec::with_capacity(best.len());
        for (id, score) in best {
            // An entry deleted between the two reads is left out.
            if let Some(r) = rows
                .iter()
                .find(|r| r.try_get::<i64, _>(0).is_ok_and(|x| x == id))
            {
                hits.push(read_hit(r, score)?);
            }
        }
        Ok(hits)
    }

    async fn forget(&self, kind: Kind, shelves: &[Shelf], id: i64) -> Result<bool, StoreError> {
        if shelves.is_empty() {
            return Ok(false);
        }
        let mut q = QueryBuilder::<Sqlite>::new("DELETE FROM knowledge AS k WHERE k.id = ");
        q.push_bind(id)
            .push(" AND k.kind = ")
            .push_bind(kind.as_str());
        shelves_clause(&mut q, shelves);
        let done = q
            .build()
            .execute(&self.pool)
            .await
            .map_err(|e| err("cannot delete knowledge", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_entries(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Listed>, StoreError> {
        if shelves.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT k.id, k.scope, k.owner, k.source, k.position, k.text, k.created_at \
             FROM knowledge k WHERE k.kind = ",
        );
        q.push_bind(kind.as_str());
        shelves_clause(&mut q, shelves);
        q.push(" ORDER BY k.created_at DESC, k.id DESC LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .push(" OFFSET ")
            .push_bind(i64::try_from(offset).unwrap_or(i64::MAX));
        let rows = q
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(|e| err("cannot list knowledge", e))?;
        rows.into_iter()
            .map(|r| {
                let read = |e| err("cannot read knowledge", e);
                let scope: String = r.try_get(1).map_err(read)?;
                Ok(Listed {
                    id: r.try_get(0).map_err(read)?,
                    scope: Scope::parse(&scope).ok_or_else(|| {
                        StoreError::Corrupt(format!("knowledge has an unknown scope `{scope}`"))
                    })?,
                    owner: r.try_get(2).map_err(read)?,
                    source: r.try_get(3).map_err(read)?,
                    position: r.try_get(4).map_err(read)?,
                    text: r.try_get(5).map_err(read)?,
                    created_at: r.try_get(6).map_err(read)?,
                })
            })
            .collect()
    }
}
