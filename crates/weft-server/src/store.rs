//! LangGraph's store API (`client.store`) on weft's long-term memory: an item is a memory on
//! the shelf of the key's user (`weft_store::Knowledge`, kind `memory`), so what a client puts
//! there is what the user's agents recall, and what they remembered is listed here. Nothing of
//! another user's is ever read, listed or deleted.
//!
//! An item `(namespace, key)` is kept as one memory whose source is the JSON list of its
//! namespace's labels and its key (`["prefs","ui","theme"]`) and whose text is its value as
//! JSON; putting it again replaces it (in one transaction). The memories an agent remembered
//! (the `remember` tool, `weft memory add`) have no such source: they are listed as the
//! namespace `["memories"]`, keyed by their id, with the value `{"text": ...}`, and can be read,
//! searched and deleted, not put.

use axum::Json;
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_store::knowledge::{Kind, Knowledge, Listed, NewEntry, Shelf};

use super::auth::User;
use super::openapi::{self, Route};
use super::{ApiError, Shared};
use weft_host::sessions::fmt_time;

/// The namespace the memories agents remembered are listed under.
const MEMORIES: &str = "memories";
/// The most entries a search, a listing of namespaces or a look-up of a remembered memory reads
/// (newest first).
const SCAN: usize = 10_000;

/// The routes of the store.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::put(
            "/store/items",
            "Put an item (`store.put_item`): a memory on the key's user's shelf, replacing the item of the same namespace and key",
            put_item,
        )
        .body::<PutItem>()
        .empty(204, "once it is stored"),
        openapi::get(
            "/store/items",
            "An item by namespace (labels joined by `.`) and key (`store.get_item`)",
            get_item,
        )
        .json::<Item>("the item"),
        openapi::delete(
            "/store/items",
            "Delete an item (`store.delete_item`)",
            delete_item,
        )
        .body::<ItemRef>()
        .empty(204, "once it is deleted"),
        openapi::post(
            "/store/items/search",
            "The user's items under a namespace prefix (`store.search_items`): newest first, or ranked by full-text search with `query`; `filter` matches values' top-level keys",
            search_items,
        )
        .body::<SearchItems>()
        .json::<SearchItemsAnswer>("{items}"),
        openapi::post(
            "/store/namespaces",
            "The namespaces of the user's items (`store.list_namespaces`), with prefix, suffix and max_depth",
            list_namespaces,
        )
        .body::<ListNamespaces>()
        .json::<NamespacesAnswer>("{namespaces}"),
    ]
}

/// An item as LangGraph's store answers it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Item {
    namespace: Vec<String>,
    key: String,
    #[schemars(schema_with = "openapi::any")]
    value: Value,
    /// When the value was put (a put replaces the item: both times are the last put's).
    created_at: String,
    updated_at: String,
    /// Higher is better, within one search with a `query`.
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct PutItem {
    namespace: Vec<String>,
    key: String,
    value: Map<String, Value>,
    /// Which fields to index: every value is searched as its whole JSON text, so this is
    /// accepted and has no effect.
    #[serde(default)]
    #[schemars(schema_with = "openapi::any")]
    #[allow(dead_code)]
    index: Option<Value>,
    /// Not supported: items are kept until deleted.
    #[serde(default)]
    #[schemars(schema_with = "openapi::any")]
    ttl: Option<Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ItemRef {
    namespace: Vec<String>,
    key: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct GetQuery {
    /// The namespace's labels joined by `.`.
    namespace: Option<String>,
    key: String,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct SearchItems {
    #[serde(default)]
    namespace_prefix: Vec<String>,
    /// Only items whose value holds each of these keys with this value.
    #[serde(default)]
    filter: Option<Map<String, Value>>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
    /// Words to search for (full-text search over the values' text).
    #[serde(default)]
    query: Option<String>,
}

/// What a search answers.
#[derive(Serialize, JsonSchema)]
pub(crate) struct SearchItemsAnswer {
    items: Vec<Item>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(crate) struct ListNamespaces {
    #[serde(default)]
    prefix: Option<Vec<String>>,
    #[serde(default)]
    suffix: Option<Vec<String>>,
    /// Namespaces longer than this are cut to this many labels.
    #[serde(default)]
    max_depth: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
}

/// What a listing of namespaces answers.
#[derive(Serialize, JsonSchema)]
pub(crate) struct NamespacesAnswer {
    namespaces: Vec<Vec<String>>,
}

/// Checks a namespace and a key as the request gives them.
fn check(namespace: &[String], key: &str) -> Result<(), ApiError> {
    if namespace.is_empty() {
        return Err(ApiError::bad(
            "namespace: give at least one label, e.g. [\"prefs\"]",
        ));
    }
    if let Some(l) = namespace.iter().find(|l| l.is_empty() || l.contains('.')) {
        return Err(ApiError::bad(format!(
            "namespace: the label `{l}` is empty or holds a `.`; labels are non-empty and without periods"
        )));
    }
    if key.is_empty() {
        return Err(ApiError::bad("key: give the item's key"));
    }
    Ok(())
}

/// The source an item is kept under: its namespace's labels and its key, as a JSON list.
fn source(namespace: &[String], key: &str) -> String {
    let mut path: Vec<&str> = namespace.iter().map(String::as_str).collect();
    path.push(key);
    serde_json::to_string(&path).unwrap_or_default()
}

/// A stored memory as an item: one put through this API (its source names it), or one an
/// agent remembered (`["memories"]`, its id). `None` for a memory whose stored form is not an
/// item's (it is left out, and logged).
fn item(e: &Listed, score: Option<f64>) -> Option<Item> {
    let at = fmt_time(e.created_at);
    if e.source.is_empty() {
        return Some(Item {
            namespace: vec![MEMORIES.to_owned()],
            key: e.id.to_string(),
            value: json!({"text": e.text}),
            created_at: at.clone(),
            updated_at: at,
            score,
        });
    }
    let path: Vec<String> = serde_json::from_str(&e.source).ok()?;
    let value: Value = match serde_json::from_str(&e.text) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            tracing::warn!(id = e.id, source = %e.source, "a memory whose text is not an item's value (a JSON object) is left out");
            return None;
        }
    };
    let (key, namespace) = path.split_last()?;
    Some(Item {
        namespace: namespace.to_vec(),
        key: key.clone(),
        value,
        created_at: at.clone(),
        updated_at: at,
        score,
    })
}

/// The memory an agent remembered with id `key`, if it is the user's.
async fn remembered(app: &Shared, shelf: &Shelf, key: &str) -> Result<Option<Listed>, ApiError> {
    let Ok(id) = key.parse::<i64>() else {
        return Ok(None);
    };
    let all = app
        .store
        .list_entries(Kind::Memory, std::slice::from_ref(shelf), SCAN, 0)
        .await?;
    Ok(all.into_iter().find(|e| e.id == id && e.source.is_empty()))
}

/// Whether `namespace` is where remembered memories are listed.
fn is_memories(namespace: &[String]) -> bool {
    namespace.len() == 1 && namespace[0] == MEMORIES
}

pub(crate) async fn put_item(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Json(b): Json<PutItem>,
) -> Result<StatusCode, ApiError> {
    check(&b.namespace, &b.key)?;
    if is_memories(&b.namespace) {
        return Err(ApiError::bad(
            "namespace [\"memories\"] lists what the user's agents remembered and cannot be written; put items under another namespace",
        ));
    }
    if b.ttl.as_ref().is_some_and(|t| !t.is_null()) {
        return Err(ApiError::bad(
            "ttl is not supported: items are kept until deleted (store.delete_item); leave ttl out",
        ));
    }
    let entry = NewEntry {
        text: Value::Object(b.value).to_string(),
        source: source(&b.namespace, &b.key),
        position: 0,
        embedding: None,
    };
    app.store
        .add(
            Kind::Memory,
            &Shelf::user(&user.0),
            vec![entry],
            true,
            weft_runtime::now_ms(),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn get_item(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Query(q): Query<GetQuery>,
) -> Result<Json<Item>, ApiError> {
    let namespace: Vec<String> = q
        .namespace
        .as_deref()
        .unwrap_or_default()
        .split('.')
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    check(&namespace, &q.key)?;
    let shelf = Shelf::user(&user.0);
    let found = if is_memories(&namespace) {
        remembered(&app, &shelf, &q.key).await?
    } else {
        app.store
            .find(
                Kind::Memory,
                std::slice::from_ref(&shelf),
                &source(&namespace, &q.key),
            )
            .await?
            .into_iter()
            .next()
    };
    found
        .as_ref()
        .and_then(|e| item(e, None))
        .map(Json)
        .ok_or_else(|| ApiError::not_found("item"))
}

pub(crate) async fn delete_item(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Json(b): Json<ItemRef>,
) -> Result<StatusCode, ApiError> {
    check(&b.namespace, &b.key)?;
    let shelves = [Shelf::user(&user.0)];
    let entries = if is_memories(&b.namespace) {
        remembered(&app, &shelves[0], &b.key)
            .await?
            .into_iter()
            .collect()
    } else {
        app.store
            .find(Kind::Memory, &shelves, &source(&b.namespace, &b.key))
            .await?
    };
    for e in entries {
        app.store.forget(Kind::Memory, &shelves, e.id).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Whether `v` (an object) holds every key of `wanted` with its value.
fn holds(v: &Value, wanted: Option<&Map<String, Value>>) -> bool {
    wanted
        .into_iter()
        .flatten()
        .all(|(k, want)| v.get(k) == Some(want))
}

pub(crate) async fn search_items(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<SearchItems>>,
) -> Result<Json<SearchItemsAnswer>, ApiError> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let limit = q.limit.unwrap_or(10).min(1000);
    let offset = q.offset.unwrap_or(0);
    let shelves = [Shelf::user(&user.0)];
    let found: Vec<Item> = match q.query.as_deref().filter(|t| !t.trim().is_empty()) {
        Some(text) => app
            .store
            .search(Kind::Memory, &shelves, text, SCAN)
            .await?
            .into_iter()
            .filter_map(|h| {
                let e = Listed {
                    id: h.id,
                    scope: h.scope,
                    owner: user.0.clone(),
                    source: h.source,
                    position: h.position,
                    text: h.text,
                    created_at: 0,
                };
                item(&e, Some(h.score))
            })
            .collect(),
        None => app
            .store
            .list_entries(Kind::Memory, &shelves, SCAN, 0)
            .await?
            .iter()
            .filter_map(|e| item(e, None))
            .collect(),
    };
    let items = found
        .into_iter()
        .filter(|i| i.namespace.starts_with(&q.namespace_prefix))
        .filter(|i| holds(&i.value, q.filter.as_ref()))
        .skip(offset)
        .take(limit)
        .collect();
    Ok(Json(SearchItemsAnswer { items }))
}

pub(crate) async fn list_namespaces(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<ListNamespaces>>,
) -> Result<Json<NamespacesAnswer>, ApiError> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let entries = app
        .store
        .list_entries(Kind::Memory, &[Shelf::user(&user.0)], SCAN, 0)
        .await?;
    let mut namespaces: Vec<Vec<String>> = entries
        .iter()
        .filter_map(|e| item(e, None))
        .map(|i| i.namespace)
        .filter(|n| q.prefix.as_ref().is_none_or(|p| n.starts_with(p)))
        .filter(|n| q.suffix.as_ref().is_none_or(|s| n.ends_with(s)))
        .map(|mut n| {
            if let Some(d) = q.max_depth {
                n.truncate(d);
            }
            n
        })
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let namespaces = namespaces
        .into_iter()
        .skip(q.offset.unwrap_or(0))
        .take(q.limit.unwrap_or(100))
        .collect();
    Ok(Json(NamespacesAnswer { namespaces }))
}
