//! Knowledge in the SQL stores, written once for SQLite and PostgreSQL ([`sql_knowledge`]): the
//! two differ only in their full-text search (`sqlite.rs`: FTS5 ranked by bm25; `postgres.rs`: a
//! `tsvector` column ranked by `ts_rank`), and every placeholder is written by `QueryBuilder`.

/// Implements [`super::Knowledge`] for `$store`, a store with a `pool` of database `$db` and an
/// `err(context, sqlx::Error)`. `$text_query(words)` begins a full-text search: a query
/// selecting `k.id, k.scope, k.source, k.position, k.text` and a `rank` (higher is better) of the
/// entries `k` holding any of `words`, ending in its `WHERE` condition.
macro_rules! sql_knowledge {
    ($store:ty, $db:ty, $text_query:path) => {
        use futures::TryStreamExt;
        use sqlx::Row;

        use $crate::StoreError;
        use $crate::knowledge::{
            Hit, Kind, Listed, NewEntry, Scope, Shelf, TopK, encode_vector, query_words,
            similarity,
        };

        fn err(context: &str, source: sqlx::Error) -> StoreError {
            StoreError::sql(context.to_owned(), source)
        }

fn shelves_clause(q: &mut sqlx::QueryBuilder<'_, $db>, shelves: &[Shelf]) {
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
fn read_hit(r: &<$db as sqlx::Database>::Row, score: f64) -> Result<Hit, StoreError> {
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

impl $crate::knowledge::Knowledge for $store {
    async fn add(
        &self,
        kind: Kind,
        shelf: &Shelf,
        entries: Vec<NewEntry>,
        replace: bool,
        now: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let ctx = "cannot store knowledge";
        let mut tx = self.pool.begin().await.map_err(|e| self.err(ctx, e))?;
        if replace {
            let mut sources: Vec<&str> = entries.iter().map(|e| e.source.as_str()).collect();
            sources.sort_unstable();
            sources.dedup();
            for source in sources {
                let mut q = sqlx::QueryBuilder::<$db>::new("DELETE FROM knowledge WHERE kind = ");
                q.push_bind(kind.as_str())
                    .push(" AND scope = ")
                    .push_bind(shelf.scope.as_str())
                    .push(" AND owner = ")
                    .push_bind(shelf.owner.clone())
                    .push(" AND source = ")
                    .push_bind(source);
                q.build()
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err(ctx, e))?;
            }
        }
        let mut ids = Vec::with_capacity(entries.len());
        for e in entries {
            let mut q = sqlx::QueryBuilder::<$db>::new(
                "INSERT INTO knowledge (kind, scope, owner, source, position, text, created_at, \
                 embedding, embedding_model) ",
            );
            q.push_values([e], |mut row, e| {
                row.push_bind(kind.as_str())
                    .push_bind(shelf.scope.as_str())
                    .push_bind(shelf.owner.clone())
                    .push_bind(e.source)
                    .push_bind(e.position)
                    .push_bind(e.text)
                    .push_bind(now)
                    .push_bind(e.embedding.as_ref().map(|v| encode_vector(&v.vector)))
                    .push_bind(e.embedding.map(|v| v.model));
            });
            q.push(" RETURNING id");
            let id: i64 = q
            .build_query_scalar()
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| self.err(ctx, e))?;
            ids.push(id);
        }
        tx.commit().await.map_err(|e| self.err(ctx, e))?;
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
        let mut q = $text_query(&words);
        q.push(" AND k.kind = ")
            .push_bind(kind.as_str());
        shelves_clause(&mut q, shelves);
        q.push(" ORDER BY rank DESC, k.id LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = q
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.err("cannot search knowledge", e))?;
        rows.iter()
            .map(|r| {
                let rank: f64 = r.try_get(5).map_err(|e| err("cannot read knowledge", e))?;
                read_hit(r, rank)
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
        let mut q = sqlx::QueryBuilder::<$db>::new(
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
                .map_err(|e| self.err("cannot search knowledge by meaning", e))?
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
        let mut q = sqlx::QueryBuilder::<$db>::new(
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
            .map_err(|e| self.err("cannot search knowledge by meaning", e))?;
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
        let mut q = sqlx::QueryBuilder::<$db>::new("DELETE FROM knowledge AS k WHERE k.id = ");
        q.push_bind(id)
            .push(" AND k.kind = ")
            .push_bind(kind.as_str());
        shelves_clause(&mut q, shelves);
        let done = q
            .build()
            .execute(&self.pool)
            .await
            .map_err(|e| self.err("cannot delete knowledge", e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_entries(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        limit: usize,
        offset: usize,
    ) -> Result<Vec<Listed>, StoreError> {
        self.listed(kind, shelves, None, (limit, offset)).await
    }

    async fn find(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        source: &str,
    ) -> Result<Vec<Listed>, StoreError> {
        self.listed(kind, shelves, Some(source), (usize::MAX, 0)).await
    }
}

impl $store {
    /// The entries of `kind` on `shelves` (from `source` only, if given), newest first, `limit`
    /// of them after skipping `offset`.
    async fn listed(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        source: Option<&str>,
        (limit, offset): (usize, usize),
    ) -> Result<Vec<Listed>, StoreError> {
        if shelves.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let mut q = sqlx::QueryBuilder::<$db>::new(
            "SELECT k.id, k.scope, k.owner, k.source, k.position, k.text, k.created_at \
             FROM knowledge k WHERE k.kind = ",
        );
        q.push_bind(kind.as_str());
        shelves_clause(&mut q, shelves);
        if let Some(source) = source {
            q.push(" AND k.source = ").push_bind(source.to_owned());
        }
        q.push(" ORDER BY k.created_at DESC, k.id DESC LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .push(" OFFSET ")
            .push_bind(i64::try_from(offset).unwrap_or(i64::MAX));
        let rows = q
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.err("cannot list knowledge", e))?;
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
    };
}
pub(crate) use sql_knowledge;
