//! Assistants and threads as LangGraph clients read them. An assistant is an agent file (its
//! name is its id and its graph id). A thread is a session: created empty by `POST /threads`
//! (its agent is set by its first run), owned by the user whose key created it.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::{SessionStatus, State as SessionState};
use weft_store::{ListFilter, NewSession, SessionLog, SessionRecord, StoreError};

use super::auth::User;
use super::{ApiError, Shared};
use crate::sessions_cmd::fmt_time;

fn assistant(name: &str, spec: &weft_core::agent::AgentSpec) -> Value {
    json!({
        "assistant_id": name,
        "graph_id": name,
        "name": name,
        "description": spec.description,
        "config": {},
        "context": {},
        "metadata": {"mode": format!("{:?}", spec.mode).to_lowercase()},
        "version": 1,
        "created_at": fmt_time(0),
        "updated_at": fmt_time(0),
    })
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct SearchAssistants {
    #[serde(default)]
    graph_id: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
}

pub async fn search_assistants(
    State(app): State<Shared>,
    body: Option<Json<SearchAssistants>>,
) -> Json<Value> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let mut names: Vec<&String> = app.agents.keys().collect();
    names.sort();
    let list: Vec<Value> = names
        .into_iter()
        .filter(|n| q.graph_id.as_ref().is_none_or(|g| g == *n))
        .skip(q.offset.unwrap_or(0))
        .take(q.limit.unwrap_or(10))
        .map(|n| assistant(n, &app.agents[n].spec))
        .collect();
    Json(Value::Array(list))
}

/// The assistant's graph as LangGraph draws one: weft runs an agent as one loop (the model
/// decides, its tool calls run, their results go back), so the graph is that loop: `agent`, and
/// `tools` when the agent has any. Plan steps and workflow steps are not nodes.
pub async fn assistant_graph(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let a = app.assistant(&id)?;
    let node = |id: &str, kind: &str| json!({"id": id, "type": kind, "data": {"id": ["weft", id], "name": id}});
    let mut nodes = vec![node("__start__", "schema"), node("agent", "runnable")];
    let mut edges = vec![json!({"source": "__start__", "target": "agent"})];
    if a.tools.infos().next().is_some() {
        nodes.push(node("tools", "runnable"));
        edges.push(json!({"source": "agent", "target": "tools", "conditional": true}));
        edges.push(json!({"source": "tools", "target": "agent"}));
    }
    nodes.push(node("__end__", "schema"));
    edges.push(json!({"source": "agent", "target": "__end__", "conditional": true}));
    Ok(Json(json!({"nodes": nodes, "edges": edges})))
}

/// The assistant's schemas: the input a run takes, and the thread's values (its state and a
/// run's output). weft agents take no config or context.
pub async fn assistant_schemas(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    app.assistant(&id)?;
    let message = json!({"type": "object", "properties": {
        "type": {"type": "string"}, "role": {"type": "string"}, "content": {}
    }});
    let input = json!({"title": "Input", "type": "object", "properties": {
        "messages": {"type": "array", "items": message,
            "description": "the last message's content is the task (or the answer to a wait)"},
        "task": {"type": "string", "description": "the task, instead of messages"},
    }});
    let values = json!({"title": "State", "type": "object", "properties": {
        "messages": {"type": "array", "items": message},
        "data": {"type": "object", "description": "what the run's steps wrote"},
        "answer": {"type": "string", "description": "the answer, once the run ended"},
    }});
    Ok(Json(json!({
        "graph_id": id,
        "input_schema": input,
        "output_schema": values,
        "state_schema": values,
        "config_schema": {"title": "Config", "type": "object", "properties": {}},
        "context_schema": null,
    })))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct CountAssistants {
    #[serde(default)]
    graph_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    /// Only assistants whose metadata holds each of these keys with this value.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
}

/// How many assistants match (`graph_id` and `name` are both the agent's name).
pub async fn count_assistants(
    State(app): State<Shared>,
    body: Option<Json<CountAssistants>>,
) -> Json<Value> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let n = app
        .agents
        .iter()
        .filter(|(n, _)| q.graph_id.as_ref().is_none_or(|g| g == *n))
        .filter(|(n, _)| q.name.as_ref().is_none_or(|g| g == *n))
        .filter(|(n, a)| holds(&assistant(n, &a.spec)["metadata"], q.metadata.as_ref()))
        .count();
    Json(json!(n))
}

/// Whether `v` (an object) holds every key of `wanted` with its value.
fn holds(v: &Value, wanted: Option<&serde_json::Map<String, Value>>) -> bool {
    wanted
        .into_iter()
        .flatten()
        .all(|(k, want)| v.get(k) == Some(want))
}

pub async fn get_assistant(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let a = app.assistant(&id)?;
    Ok(Json(assistant(&id, &a.spec)))
}

/// The thread's record and log, if it is this user's; another user's thread is not found.
pub async fn load_log(
    app: &Shared,
    user: &User,
    tid: &str,
) -> Result<(SessionRecord, Vec<weft_core::Envelope>), ApiError> {
    let (rec, events) = match app.store.load(tid).await {
        Ok(r) => r,
        Err(StoreError::NotFound(_)) => return Err(ApiError::not_found("thread")),
        Err(e) => return Err(e.into()),
    };
    if rec.user_id.as_deref() != Some(user.0.as_str()) {
        return Err(ApiError::not_found("thread"));
    }
    Ok((rec, events))
}

/// The thread's record and current state, if it is this user's; another user's thread is not
/// found. The state is loaded as a run continues it (`weft_runtime::load_state`: the newest
/// snapshot and the events after it), not folded from the whole log.
pub async fn load(
    app: &Shared,
    user: &User,
    tid: &str,
) -> Result<(SessionRecord, SessionState), ApiError> {
    let not_found = |e: StoreError| match e {
        StoreError::NotFound(_) => ApiError::not_found("thread"),
        e => e.into(),
    };
    let rec = app.store.get(tid).await.map_err(not_found)?;
    if rec.user_id.as_deref() != Some(user.0.as_str()) {
        return Err(ApiError::not_found("thread"));
    }
    let state = weft_runtime::load_state(app.store.as_ref(), tid)
        .await
        .map_err(not_found)?
        .state;
    Ok((rec, state))
}

/// LangGraph's thread status: `busy` while a run drives it, `interrupted` while it waits for a
/// person, `error` after a failed run, `idle` otherwise.
pub fn status(app: &Shared, rec: &SessionRecord, st: &SessionState) -> &'static str {
    if app.runs.active_on(&rec.id) {
        return "busy";
    }
    match st.status {
        SessionStatus::WaitingForUser => "interrupted",
        SessionStatus::Failed => "error",
        SessionStatus::Running if st.seq > 0 => "busy",
        _ => "idle",
    }
}

/// A message as LangChain clients read it.
fn message(kind: &str, content: &str, id: String) -> Value {
    json!({"type": kind, "content": content, "id": id, "additional_kwargs": {}, "response_metadata": {}})
}

/// The thread's values: the conversation (each turn's task, the person's answers, the agent's
/// answer), the plan's State object and the answer.
pub fn values(st: &SessionState) -> Value {
    let mut messages = Vec::new();
    let id = |kind: &str, n: usize| format!("{}-{kind}-{n}", st.session_id);
    for (n, (task, answer)) in st.memory.iter().enumerate() {
        messages.push(message("human", task, id("task", n)));
        if let Some(a) = answer {
            messages.push(message("ai", a, id("answer", n)));
        }
    }
    let turn = st.memory.len();
    if let Some(task) = &st.task {
        messages.push(message("human", task, id("task", turn)));
    }
    for (k, reply) in st.user_inputs.iter().enumerate() {
        messages.push(message("human", reply, id(&format!("reply{k}"), turn)));
    }
    if let Some(a) = &st.answer {
        messages.push(message("ai", a, id("answer", turn)));
    }
    let mut v = json!({"messages": messages, "data": st.data});
    if let Some(a) = &st.answer {
        v["answer"] = json!(a);
    }
    if let Some(w) = &st.waiting {
        v["__interrupt__"] = json!([interrupt(st, w)]);
    }
    v
}

/// A wait as a LangGraph interrupt: answer it with a run whose `command` is `{resume: ...}`.
pub fn interrupt(st: &SessionState, w: &weft_core::event::InputRequest) -> Value {
    json!({
        "value": {"question": w.question, "kind": w.kind, "step": w.step, "tool": w.tool, "missing": w.missing},
        "id": format!("{}-wait-{}", st.session_id, st.seq),
    })
}

pub fn thread_json(app: &Shared, rec: &SessionRecord, st: &SessionState) -> Value {
    let mut interrupts = serde_json::Map::new();
    if let Some(w) = &st.waiting {
        interrupts.insert("agent".into(), json!([interrupt(st, w)]));
    }
    json!({
        "thread_id": rec.id,
        "created_at": fmt_time(rec.created_at),
        "updated_at": fmt_time(rec.updated_at),
        "metadata": public_metadata(&rec.metadata),
        "status": status(app, rec, st),
        "values": if st.seq == 0 { Value::Null } else { values(st) },
        "interrupts": interrupts,
        "config": {},
    })
}

/// Metadata as the client gave it (weft's own keys left out).
fn public_metadata(m: &Value) -> Value {
    match m {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !k.starts_with("weft_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => json!({}),
    }
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct CreateThread {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    if_exists: Option<String>,
}

pub async fn create_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<CreateThread>>,
) -> Result<Json<Value>, ApiError> {
    let b = body.map(|Json(b)| b).unwrap_or_default();
    let id = b
        .thread_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let metadata = b.metadata.clone().unwrap_or_else(|| json!({}));
    if !metadata.is_object() {
        return Err(ApiError::bad("metadata must be a JSON object"));
    }
    let new = NewSession {
        id: id.clone(),
        user_id: Some(user.0.clone()),
        agent: String::new(),
        metadata,
        ..NewSession::default()
    };
    match app.store.create(new, weft_runtime::now_ms()).await {
        Ok(_) => {}
        Err(StoreError::Exists(_)) if b.if_exists.as_deref() == Some("do_nothing") => {}
        Err(StoreError::Exists(_)) => {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!("thread {id} exists already"),
            ));
        }
        Err(e) => return Err(e.into()),
    }
    let (rec, st) = load(&app, &user, &id).await?;
    Ok(Json(thread_json(&app, &rec, &st)))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct SearchThreads {
    #[serde(default)]
    status: Option<String>,
    /// Only threads whose metadata holds each of these keys with this value.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
}

pub async fn search_threads(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<SearchThreads>>,
) -> Result<Json<Value>, ApiError> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let limit = q.limit.unwrap_or(10).min(1000);
    let offset = q.offset.unwrap_or(0);
    let filtered = q.status.is_some() || q.metadata.as_ref().is_some_and(|m| !m.is_empty());
    // With a filter, the offset counts matching threads: the newest SEARCH_SCAN are looked at.
    let recs = app
        .store
        .list(&ListFilter {
            user_id: Some(user.0.clone()),
            status: None,
            limit: Some(if filtered {
                SEARCH_SCAN
            } else {
                offset + limit
            }),
        })
        .await?;
    let wanted = |rec: &SessionRecord| holds(&rec.metadata, q.metadata.as_ref());
    let mut out = Vec::new();
    let mut skipped = 0;
    for rec in recs.into_iter().filter(|r| wanted(r)) {
        if out.len() >= limit {
            break;
        }
        let (rec, st) = load(&app, &user, &rec.id).await?;
        let t = thread_json(&app, &rec, &st);
        if q.status.as_deref().is_none_or(|s| t["status"] == s) {
            if skipped < offset {
                skipped += 1;
            } else {
                out.push(t);
            }
        }
    }
    Ok(Json(Value::Array(out)))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct CountThreads {
    #[serde(default)]
    status: Option<String>,
    /// Only threads whose metadata holds each of these keys with this value.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
    /// Only threads whose values hold each of these keys with this value.
    #[serde(default)]
    values: Option<serde_json::Map<String, Value>>,
}

/// How many of the user's threads match (of the newest [`SEARCH_SCAN`]).
pub async fn count_threads(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<CountThreads>>,
) -> Result<Json<Value>, ApiError> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let recs = app
        .store
        .list(&ListFilter {
            user_id: Some(user.0.clone()),
            status: None,
            limit: Some(SEARCH_SCAN),
        })
        .await?;
    let mut n = 0usize;
    for rec in recs
        .into_iter()
        .filter(|r| holds(&r.metadata, q.metadata.as_ref()))
    {
        if q.status.is_none() && q.values.is_none() {
            n += 1;
            continue;
        }
        let (rec, st) = load(&app, &user, &rec.id).await?;
        let t = thread_json(&app, &rec, &st);
        if q.status.as_deref().is_none_or(|s| t["status"] == s)
            && holds(&t["values"], q.values.as_ref())
        {
            n += 1;
        }
    }
    Ok(Json(json!(n)))
}

/// The most threads a search with a filter (status, metadata) looks at, newest first.
const SEARCH_SCAN: usize = 10_000;

pub async fn get_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (rec, st) = load(&app, &user, &tid).await?;
    Ok(Json(thread_json(&app, &rec, &st)))
}

/// The thread's state as LangGraph's `ThreadState`: values, what runs next, the checkpoint
/// (the session's sequence number) and the interrupts that wait for an answer.
pub fn state_json(rec: &SessionRecord, st: &SessionState) -> Value {
    let interrupts: Vec<Value> = st.waiting.iter().map(|w| interrupt(st, w)).collect();
    json!({
        "values": values(st),
        "next": if st.waiting.is_some() { json!(["agent"]) } else { json!([]) },
        "tasks": if interrupts.is_empty() { json!([]) } else {
            json!([{"id": format!("{}-{}", rec.id, st.seq), "name": "agent", "interrupts": interrupts, "error": null, "state": null}])
        },
        "interrupts": interrupts,
        "checkpoint": {"thread_id": rec.id, "checkpoint_ns": "", "checkpoint_id": st.seq.to_string()},
        "parent_checkpoint": null,
        "metadata": public_metadata(&rec.metadata),
        "created_at": fmt_time(rec.updated_at),
    })
}

pub async fn get_state(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (rec, st) = load(&app, &user, &tid).await?;
    Ok(Json(state_json(&rec, &st)))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct History {
    #[serde(default)]
    limit: Option<usize>,
}

/// The thread's states after each turn ended or waited, newest first.
pub async fn history(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    body: Option<Json<History>>,
) -> Result<Json<Value>, ApiError> {
    let limit = body.and_then(|Json(b)| b.limit).unwrap_or(10);
    let (rec, events) = load_log(&app, &user, &tid).await?;
    let mut st = SessionState::new();
    let mut out = Vec::new();
    for e in &events {
        st.apply(&e.event);
        let checkpoint = matches!(
            e.event,
            weft_core::Event::RunFinished { .. } | weft_core::Event::WaitingForUser { .. }
        );
        if checkpoint {
            out.push(state_json(&rec, &st));
        }
    }
    out.reverse();
    out.truncate(limit);
    Ok(Json(Value::Array(out)))
}

pub async fn delete_thread() -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        "deleting a thread is not supported; `weft sessions prune` removes old sessions".into(),
    )
}
