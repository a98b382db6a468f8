//! Adding to and searching the knowledge store (memories, document chunks), with embeddings when
//! an embeddings endpoint is configured: entries are stored with their vectors, and a search
//! fuses the full-text ranking with the ranking by meaning (reciprocal rank fusion,
//! [`weft_store::fuse`]). Without an endpoint, or when it fails during a search, search is by
//! text alone: it still works, and the failure is logged.
//!
//! The endpoint is configured per process (`WEFT_EMBEDDINGS_URL`, see
//! [`weft_model::embeddings`]): the vectors of one store must all come from one model, and a
//! vector is only ever compared with vectors of the model that made it.

use std::sync::{Arc, OnceLock};

use weft_model::{Embedder, ModelError};
use weft_store::{Embedding, Hit, Kind, Knowledge, NewEntry, Shelf, StoreError, fuse};

/// How many candidates each ranking contributes to the fusion, for a search of `limit`.
fn candidates(limit: usize) -> usize {
    (limit * 4).max(20)
}

/// Why an addition or a search failed.
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The embedder could not make the vectors.
    #[error(
        "cannot make embeddings: {0}; check the server at WEFT_EMBEDDINGS_URL, or unset it to store text without embeddings"
    )]
    Embeddings(ModelError),
}

/// The knowledge store and, optionally, the embedder its vectors come from.
pub struct Retriever<S> {
    /// Where entries are stored and searched.
    pub store: Arc<S>,
    /// Makes the vectors of texts and queries; None to store and search text only.
    pub embedder: Option<Arc<Embedder>>,
}

impl<S> Clone for Retriever<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            embedder: self.embedder.clone(),
        }
    }
}

impl<S: Knowledge> Retriever<S> {
    /// A retriever over `store`, embedding with `embedder` when there is one.
    pub fn new(store: Arc<S>, embedder: Option<Arc<Embedder>>) -> Self {
        Self { store, embedder }
    }

    /// Stores `entries` (see [`Knowledge::add`]), embedding those without a vector first when
    /// there is an embedder; a failed embedding stores nothing.
    pub async fn add(
        &self,
        kind: Kind,
        shelf: &Shelf,
        mut entries: Vec<NewEntry>,
        replace: bool,
        now: i64,
    ) -> Result<Vec<i64>, RetrievalError> {
        if let Some(embedder) = &self.embedder {
            let missing: Vec<usize> = (0..entries.len())
                .filter(|i| entries[*i].embedding.is_none())
                .collect();
            if !missing.is_empty() {
                let texts: Vec<&str> = missing.iter().map(|i| entries[*i].text.as_str()).collect();
                let vectors = embedder
                    .embed(&texts)
                    .await
                    .map_err(RetrievalError::Embeddings)?;
                for (i, vector) in missing.into_iter().zip(vectors) {
                    entries[i].embedding = Some(Embedding {
                        model: embedder.model().to_owned(),
                        vector,
                    });
                }
            }
        }
        Ok(self.store.add(kind, shelf, entries, replace, now).await?)
    }

    /// The best `limit` entries for `query`: the full-text ranking fused with the ranking by
    /// meaning when there is an embedder, the full-text ranking alone otherwise.
    pub async fn search(
        &self,
        kind: Kind,
        shelves: &[Shelf],
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>, RetrievalError> {
        let Some(embedder) = &self.embedder else {
            return Ok(self.store.search(kind, shelves, query, limit).await?);
        };
        if limit == 0 || shelves.is_empty() || query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let depth = candidates(limit);
        let text = self.store.search(kind, shelves, query, depth).await?;
        let vector = match embedder.embed(&[query]).await {
            Ok(mut v) => v.pop().unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "search by meaning skipped: the query could not be embedded; searching by text alone");
                let mut text = text;
                text.truncate(limit);
                return Ok(text);
            }
        };
        let near = self
            .store
            .search_vector(kind, shelves, embedder.model(), &vector, depth)
            .await?;
        Ok(fuse(&[text, near], limit))
    }
}

/// The embedder the environment configures for this process (`WEFT_EMBEDDINGS_URL`, read once),
/// or why it cannot be built.
pub fn configured_embedder() -> Result<Option<Arc<Embedder>>, String> {
    static EMBEDDER: OnceLock<Result<Option<Arc<Embedder>>, String>> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| {
            Embedder::from_env(&|k| std::env::var(k).ok())
                .map(|e| e.map(Arc::new))
                .map_err(|e| e.to_string())
        })
        .clone()
}
