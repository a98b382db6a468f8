//! The memory and document tools' view of the session store: whose memories a call may read or
//! write follows from the session's stored record (its user and agent), never from the model.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use weft_core::event::RecalledMemory;
use weft_model::Embedder;
use weft_store::{Kind, NewEntry, Shelf, Store};
use weft_tools::KnowledgeBase;

use crate::retrieval::Retriever;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A [`KnowledgeBase`] over a session store (and the embedder of its vectors, if any).
pub struct StoreKnowledge<S: Store>(pub Retriever<S>);

impl<S: Store> StoreKnowledge<S> {
    /// The knowledge base over `store`, embedding with `embedder` when there is one (without
    /// one, texts are stored and searched without vectors).
    pub fn new(store: Arc<S>, embedder: Option<Arc<Embedder>>) -> Self {
        Self(Retriever::new(store, embedder))
    }

    /// The shelves session `id` may read (its user's, its agent's, public) and the one it
    /// writes (its user's; `None` for a session without a user).
    async fn shelves(&self, id: &str) -> Result<(Vec<Shelf>, Option<Shelf>), String> {
        let rec = self.0.store.get(id).await.map_err(|e| e.to_string())?;
        let own = rec.user_id.as_deref().map(Shelf::user);
        let mut read: Vec<Shelf> = own.iter().cloned().collect();
        read.push(Shelf::agent(&rec.agent));
        read.push(Shelf::public());
        Ok((read, own))
    }

    async fn search(
        &self,
        id: &str,
        kind: Kind,
        query: &str,
        limit: usize,
    ) -> Result<Value, String> {
        let (read, _) = self.shelves(id).await?;
        let hits = self
            .0
            .search(kind, &read, query, limit)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(
            hits.into_iter()
                .map(|h| match kind {
                    Kind::Memory => serde_json::json!({"id": h.id, "scope": h.scope, "text": h.text}),
                    Kind::Document => serde_json::json!({"source": format!("{}:{}", h.source, h.position), "text": h.text}),
                })
                .collect::<Vec<_>>(),
        )
        .map_err(|e| e.to_string())
    }
}

/// The memories session `id` may read that best match `query` (at most `limit`, best first),
/// for the prompt of a turn: the same search, through the same [`KnowledgeBase::recall`], as
/// the `recall` tool's, so the shelves come from the session's record alone.
pub(crate) async fn recall_memories<S: Store>(
    store: &Arc<S>,
    embedder: Option<Arc<Embedder>>,
    id: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<RecalledMemory>, String> {
    if query.split_whitespace().next().is_none() {
        return Ok(Vec::new());
    }
    let hits = StoreKnowledge::new(Arc::clone(store), embedder)
        .recall(id, query, limit)
        .await?;
    serde_json::from_value(hits)
        .map_err(|e| format!("the memory search gave a result weft cannot read: {e}"))
}

impl<S: Store> KnowledgeBase for StoreKnowledge<S> {
    fn remember<'a>(
        &'a self,
        session: &'a str,
        text: String,
    ) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let (_, own) = self.shelves(session).await?;
            let Some(own) = own else {
                return Err("this session has no user, so there is no one to remember for; start it with a user id".into());
            };
            let entry = NewEntry {
                text,
                source: String::new(),
                position: 0,
                embedding: None,
            };
            let ids = self
                .0
                .add(Kind::Memory, &own, vec![entry], false, crate::now_ms())
                .await
                .map_err(|e| e.to_string())?;
            ids.first()
                .copied()
                .ok_or_else(|| "the store gave no id".to_owned())
        })
    }

    fn recall<'a>(
        &'a self,
        session: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(self.search(session, Kind::Memory, query, limit))
    }

    fn forget<'a>(&'a self, session: &'a str, id: i64) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let (_, own) = self.shelves(session).await?;
            let Some(own) = own else {
                return Ok(false);
            };
            self.0
                .store
                .forget(Kind::Memory, &[own], id)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn search_documents<'a>(
        &'a self,
        session: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(self.search(session, Kind::Document, query, limit))
    }
}
