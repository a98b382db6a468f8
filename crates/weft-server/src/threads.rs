//! Assistants and threads as LangGraph clients read them. An assistant is an agent file (its
//! name is its id and its graph id). A thread is a session: created empty by `POST /threads`
//! (its agent is set by its first run), owned by the user whose key created it. A thread is
//! deleted with `SessionLog::delete` (the session, its events, snapshots and lease in one
//! transaction) and its crons with it; its metadata is replaced with `SessionLog::set_metadata`;
//! a copy is a fork at its last event (`weft_host::sessions::fork`).

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_core::{SessionStatus, State as SessionState};
use weft_store::{Leases, ListFilter, NewSession, SessionLog, SessionRecord, StoreError};

use super::auth::User;
use super::messages::{Message, messages};
use super::openapi::{self, Route};
use super::{ApiError, Shared, checkpoints, runs};
use weft_host::sessions::fmt_time;

/// The routes of assistants and threads.
pub(crate) fn routes() -> Vec<Route> {
    vec![
        openapi::post("/assistants/search", "List the assistants (one per agent file)", search_assistants)
            .body::<SearchAssistants>()
            .json::<Vec<Assistant>>("a list of assistants"),
        openapi::post("/assistants/count", "How many assistants match (graph_id, name, metadata)", count_assistants)
            .body::<CountAssistants>()
            .json::<usize>("a number"),
        openapi::get("/assistants/{id}", "An assistant, by its agent's name", get_assistant)
            .json::<Assistant>("the assistant"),
        openapi::get(
            "/assistants/{id}/graph",
            "The agent as LangGraph's graph: the loop of `agent` and, when it has tools, `tools` (plan and workflow steps are not nodes)",
            assistant_graph,
        )
        .json::<Graph>("{nodes, edges}"),
        openapi::get(
            "/assistants/{id}/schemas",
            "The input a run takes and the thread's values (state and output); no config or context",
            assistant_schemas,
        )
        .json::<Schemas>("{graph_id, input_schema, output_schema, state_schema, config_schema, context_schema}"),
        openapi::post("/threads", "Create a thread (a session) owned by the key's user", create_thread)
            .body::<CreateThread>()
            .json::<Thread>("the thread"),
        openapi::post("/threads/search", "The user's threads, newest first", search_threads)
            .body::<SearchThreads>()
            .json::<Vec<Thread>>("a list of threads"),
        openapi::post(
            "/threads/count",
            "How many of the user's threads match (status, metadata, values; of the newest 10,000)",
            count_threads,
        )
        .body::<CountThreads>()
        .json::<usize>("a number"),
        openapi::get(
            "/threads/{tid}",
            "A thread: status (idle, busy, interrupted, error), values, interrupts",
            get_thread,
        )
        .json::<Thread>("the thread"),
        openapi::delete(
            "/threads/{tid}",
            "Delete the thread: its session, events, snapshots and runs (409 while a run drives it)",
            delete_thread,
        )
        .empty(204, "once it is deleted"),
        openapi::patch(
            "/threads/{tid}",
            "Merge metadata into the thread's (`threads.update`); a key set to null is removed",
            update_thread,
        )
        .body::<UpdateThread>()
        .json::<Thread>("the thread"),
        openapi::post(
            "/threads/{tid}/copy",
            "A new thread with the thread's log up to now (`threads.copy`: a fork at its last event; 409 while a run drives it)",
            copy_thread,
        )
        .json::<Thread>("the new thread"),
        openapi::post(
            "/threads/{tid}/state",
            "Add messages to the thread's conversation (`threads.update_state` with `values.messages`; only between runs, 409 while one drives it)",
            crate::state_update::update_state,
        )
        .body::<crate::state_update::UpdateState>()
        .json::<crate::state_update::Updated>("{checkpoint}: the checkpoint the update made"),
        openapi::get(
            "/threads/{tid}/state",
            "The thread's state: values, next, tasks with interrupts, checkpoint",
            get_state,
        )
        .json::<ThreadState>("the state"),
        openapi::get(
            "/threads/{tid}/state/{checkpoint_id}",
            "The thread's state at one of its checkpoints (an id its history or a `checkpoints` stream gave)",
            get_state_at,
        )
        .json::<ThreadState>("the state"),
        openapi::post(
            "/threads/{tid}/state/checkpoint",
            "The thread's state at the checkpoint the body names (`{checkpoint: {checkpoint_id}}`)",
            post_state_at,
        )
        .body::<StateAt>()
        .json::<ThreadState>("the state"),
        openapi::post(
            "/threads/{tid}/history",
            "The thread's states at each of its checkpoints (each event that changed its values), newest first",
            history,
        )
        .body::<History>()
        .json::<Vec<ThreadState>>("a list of states"),
    ]
}

/// An assistant: an agent file, whose name is its id and its graph id.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Assistant {
    assistant_id: String,
    graph_id: String,
    name: String,
    description: Option<String>,
    config: Map<String, Value>,
    context: Map<String, Value>,
    metadata: AssistantMetadata,
    version: u32,
    created_at: String,
    updated_at: String,
}

#[derive(Serialize, JsonSchema)]
struct AssistantMetadata {
    /// `plan`, `react` or `workflow`.
    mode: String,
}

fn assistant(name: &str, spec: &weft_core::agent::AgentSpec) -> Assistant {
    Assistant {
        assistant_id: name.to_owned(),
        graph_id: name.to_owned(),
        name: name.to_owned(),
        description: spec.description.clone(),
        config: Map::new(),
        context: Map::new(),
        metadata: AssistantMetadata {
            mode: format!("{:?}", spec.mode).to_lowercase(),
        },
        version: 1,
        created_at: fmt_time(0),
        updated_at: fmt_time(0),
    }
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct SearchAssistants {
    #[serde(default)]
    graph_id: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    offset: Option<usize>,
}

pub(crate) async fn search_assistants(
    State(app): State<Shared>,
    body: Option<Json<SearchAssistants>>,
) -> Json<Vec<Assistant>> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let mut names: Vec<&String> = app.agents.keys().collect();
    names.sort();
    let list: Vec<Assistant> = names
        .into_iter()
        .filter(|n| q.graph_id.as_ref().is_none_or(|g| g == *n))
        .skip(q.offset.unwrap_or(0))
        .take(q.limit.unwrap_or(10))
        .map(|n| assistant(n, &app.agents[n].spec))
        .collect();
    Json(list)
}

/// LangGraph's drawing of a graph: its nodes and edges.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Graph {
    nodes: Vec<GraphNode>,
    edges: Vec<GraphEdge>,
}

#[derive(Serialize, JsonSchema)]
struct GraphNode {
    id: String,
    /// `schema` (`__start__`, `__end__`) or `runnable`.
    #[serde(rename = "type")]
    kind: String,
    data: GraphNodeData,
}

#[derive(Serialize, JsonSchema)]
struct GraphNodeData {
    id: Vec<String>,
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct GraphEdge {
    source: String,
    target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    conditional: Option<bool>,
}

/// The assistant's graph as LangGraph draws one: weft runs an agent as one loop (the model
/// decides, its tool calls run, their results go back), so the graph is that loop: `agent`, and
/// `tools` when the agent has any. Plan steps and workflow steps are not nodes.
pub(crate) async fn assistant_graph(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Graph>, ApiError> {
    let a = app.assistant(&id)?;
    let node = |id: &str, kind: &str| GraphNode {
        id: id.to_owned(),
        kind: kind.to_owned(),
        data: GraphNodeData {
            id: vec!["weft".to_owned(), id.to_owned()],
            name: id.to_owned(),
        },
    };
    let edge = |source: &str, target: &str, conditional: Option<bool>| GraphEdge {
        source: source.to_owned(),
        target: target.to_owned(),
        conditional,
    };
    let mut nodes = vec![node("__start__", "schema"), node("agent", "runnable")];
    let mut edges = vec![edge("__start__", "agent", None)];
    if a.tools.infos().next().is_some() {
        nodes.push(node("tools", "runnable"));
        edges.push(edge("agent", "tools", Some(true)));
        edges.push(edge("tools", "agent", None));
    }
    nodes.push(node("__end__", "schema"));
    edges.push(edge("agent", "__end__", Some(true)));
    Ok(Json(Graph { nodes, edges }))
}

/// An assistant's schemas, as LangGraph names them (each a JSON Schema).
#[derive(Serialize, JsonSchema)]
pub(crate) struct Schemas {
    graph_id: String,
    input_schema: Value,
    output_schema: Value,
    state_schema: Value,
    config_schema: Value,
    context_schema: Option<Value>,
}

/// The assistant's schemas: the input a run takes, and the thread's values (its state and a
/// run's output). weft agents take no config or context.
pub(crate) async fn assistant_schemas(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Schemas>, ApiError> {
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
    Ok(Json(Schemas {
        graph_id: id,
        input_schema: input,
        output_schema: values.clone(),
        state_schema: values,
        config_schema: json!({"title": "Config", "type": "object", "properties": {}}),
        context_schema: None,
    }))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct CountAssistants {
    #[serde(default)]
    graph_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    /// Only assistants whose metadata holds each of these keys with this value.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
}

/// How many assistants match (`graph_id` and `name` are both the agent's name).
pub(crate) async fn count_assistants(
    State(app): State<Shared>,
    body: Option<Json<CountAssistants>>,
) -> Json<usize> {
    let q = body.map(|Json(b)| b).unwrap_or_default();
    let n = app
        .agents
        .iter()
        .filter(|(n, _)| q.graph_id.as_ref().is_none_or(|g| g == *n))
        .filter(|(n, _)| q.name.as_ref().is_none_or(|g| g == *n))
        .filter(|(n, a)| {
            let metadata = serde_json::to_value(assistant(n, &a.spec).metadata);
            holds(&metadata.unwrap_or_default(), q.metadata.as_ref())
        })
        .count();
    Json(n)
}

/// Whether `v` (an object) holds every key of `wanted` with its value.
fn holds(v: &Value, wanted: Option<&serde_json::Map<String, Value>>) -> bool {
    wanted
        .into_iter()
        .flatten()
        .all(|(k, want)| v.get(k) == Some(want))
}

pub(crate) async fn get_assistant(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Assistant>, ApiError> {
    let a = app.assistant(&id)?;
    Ok(Json(assistant(&id, &a.spec)))
}

/// The thread's record and log, if it is this user's; another user's thread is not found.
pub(crate) async fn load_log(
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
pub(crate) async fn load(
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
/// person, `error` after a failed run, `idle` otherwise (after a cancelled run too: LangGraph's
/// server does not count a run cancelled by request as an error, and the thread takes a new
/// run).
pub(crate) fn status(app: &Shared, rec: &SessionRecord, st: &SessionState) -> ThreadStatus {
    if app.runs.active_on(&rec.id) {
        return ThreadStatus::Busy;
    }
    match st.status() {
        SessionStatus::WaitingForUser => ThreadStatus::Interrupted,
        SessionStatus::Failed if weft_core::recovery::was_cancelled(st) => ThreadStatus::Idle,
        SessionStatus::Failed => ThreadStatus::Error,
        SessionStatus::Running if st.seq() > 0 => ThreadStatus::Busy,
        _ => ThreadStatus::Idle,
    }
}

/// A thread's status, as LangGraph names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ThreadStatus {
    Idle,
    Busy,
    Interrupted,
    Error,
}

impl ThreadStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Busy => "busy",
            Self::Interrupted => "interrupted",
            Self::Error => "error",
        }
    }
}

/// A thread's values: the conversation, the plan's State object, the answer once the run
/// ended, the wait as an interrupt, and (from `runs/wait` and `join`) a failed run's error.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct Values {
    pub messages: Vec<Message>,
    #[schemars(schema_with = "openapi::any")]
    pub data: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(rename = "__interrupt__", skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<Vec<Interrupt>>,
    #[serde(rename = "__error__", skip_serializing_if = "Option::is_none")]
    pub error: Option<runs::RunError>,
}

/// The thread's values: the conversation ([`messages`]), the plan's State object and the
/// answer.
pub(crate) fn values(st: &SessionState) -> Values {
    Values {
        messages: messages(st),
        data: st.data().clone(),
        answer: st.turn().answer().map(str::to_owned),
        interrupt: st.turn().waiting().map(|w| vec![interrupt(st, w)]),
        error: None,
    }
}

/// A wait as a LangGraph interrupt: answer it with a run whose `command` is `{resume: ...}`.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct Interrupt {
    pub value: InterruptValue,
    pub id: String,
}

/// What the wait asks.
#[derive(Clone, Serialize, JsonSchema)]
pub(crate) struct InterruptValue {
    pub question: String,
    /// `missing_input`, `question`, `plan_approval`, `tool_approval`, `paused` or `message`.
    pub kind: String,
    pub step: Option<String>,
    pub tool: Option<String>,
    pub missing: Vec<String>,
}

pub(crate) fn interrupt(st: &SessionState, w: &weft_core::event::InputRequest) -> Interrupt {
    Interrupt {
        value: InterruptValue {
            question: w.question.clone(),
            kind: w.kind.clone(),
            step: w.step.clone(),
            tool: w.tool.clone(),
            missing: w.missing.clone(),
        },
        id: format!("{}-wait-{}", st.session_id(), st.seq()),
    }
}

/// A thread: a session as LangGraph clients read it.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Thread {
    thread_id: String,
    created_at: String,
    updated_at: String,
    metadata: Map<String, Value>,
    status: ThreadStatus,
    /// None before the thread's first run.
    values: Option<Values>,
    interrupts: ThreadInterrupts,
    config: Map<String, Value>,
}

/// The interrupts that wait for an answer, by node (weft's one node is `agent`).
#[derive(Serialize, JsonSchema)]
struct ThreadInterrupts {
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<Vec<Interrupt>>,
}

pub(crate) fn thread_json(app: &Shared, rec: &SessionRecord, st: &SessionState) -> Thread {
    Thread {
        thread_id: rec.id.clone(),
        created_at: fmt_time(rec.created_at),
        updated_at: fmt_time(rec.updated_at),
        metadata: public_metadata(&rec.metadata),
        status: status(app, rec, st),
        values: (st.seq() != 0).then(|| values(st)),
        interrupts: ThreadInterrupts {
            agent: st.turn().waiting().map(|w| vec![interrupt(st, w)]),
        },
        config: Map::new(),
    }
}

/// Metadata as the client gave it (weft's own keys left out).
fn public_metadata(m: &Value) -> Map<String, Value> {
    match m {
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| !k.starts_with("weft_"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        _ => Map::new(),
    }
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct CreateThread {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    if_exists: Option<String>,
}

pub(crate) async fn create_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<CreateThread>>,
) -> Result<Json<Thread>, ApiError> {
    crate::health::refuse_while_down(&app)?;
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
        // A new thread has no events: its state is the empty one, with nothing to read.
        Ok(rec) => return Ok(Json(thread_json(&app, &rec, &SessionState::new()))),
        Err(StoreError::Exists(_)) if b.if_exists.as_deref() == Some("do_nothing") => {}
        Err(StoreError::Exists(_)) => {
            return Err(ApiError::new(
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
pub(crate) struct SearchThreads {
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

pub(crate) async fn search_threads(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<SearchThreads>>,
) -> Result<Json<Vec<Thread>>, ApiError> {
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
        if q.status.as_deref().is_none_or(|s| t.status.as_str() == s) {
            if skipped < offset {
                skipped += 1;
            } else {
                out.push(t);
            }
        }
    }
    Ok(Json(out))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct CountThreads {
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
pub(crate) async fn count_threads(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    body: Option<Json<CountThreads>>,
) -> Result<Json<usize>, ApiError> {
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
        let values = serde_json::to_value(&t.values).unwrap_or_default();
        if q.status.as_deref().is_none_or(|s| t.status.as_str() == s)
            && holds(&values, q.values.as_ref())
        {
            n += 1;
        }
    }
    Ok(Json(n))
}

/// The most threads a search with a filter (status, metadata) looks at, newest first.
const SEARCH_SCAN: usize = 10_000;

pub(crate) async fn get_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
) -> Result<Json<Thread>, ApiError> {
    let (rec, st) = load(&app, &user, &tid).await?;
    Ok(Json(thread_json(&app, &rec, &st)))
}

/// LangGraph's `ThreadState`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct ThreadState {
    values: Values,
    next: Vec<String>,
    tasks: Vec<Task>,
    interrupts: Vec<Interrupt>,
    checkpoint: Checkpoint,
    parent_checkpoint: Option<Checkpoint>,
    metadata: Map<String, Value>,
    created_at: String,
}

/// A task that waits (weft's one: `agent`, while the session waits for a person).
#[derive(Serialize, JsonSchema)]
struct Task {
    id: String,
    name: String,
    interrupts: Vec<Interrupt>,
    error: Option<String>,
    #[schemars(schema_with = "openapi::any")]
    state: Option<Value>,
}

/// A checkpoint: the session's sequence number.
#[derive(Serialize, JsonSchema)]
struct Checkpoint {
    thread_id: String,
    checkpoint_ns: String,
    checkpoint_id: String,
}

/// The thread's state as LangGraph's `ThreadState`: values, what runs next, the checkpoint
/// (the session's sequence number) and the interrupts that wait for an answer.
pub(crate) fn state_json(rec: &SessionRecord, st: &SessionState) -> ThreadState {
    let interrupts = checkpoints::waits(st);
    let tasks = if interrupts.is_empty() {
        Vec::new()
    } else {
        // The wait's task, as the thread's history names it (the wait is its last event).
        vec![Task {
            id: checkpoints::task_id(&rec.id, &st.seq().to_string()),
            name: "agent".into(),
            interrupts: interrupts.clone(),
            error: None,
            state: None,
        }]
    };
    ThreadState {
        values: values(st),
        next: if st.turn().waiting().is_some() {
            vec!["agent".into()]
        } else {
            Vec::new()
        },
        tasks,
        interrupts,
        checkpoint: checkpoint(&rec.id, st.seq()),
        parent_checkpoint: None,
        metadata: public_metadata(&rec.metadata),
        created_at: fmt_time(rec.updated_at),
    }
}

fn checkpoint(thread_id: &str, seq: u64) -> Checkpoint {
    Checkpoint {
        thread_id: thread_id.to_owned(),
        checkpoint_ns: String::new(),
        checkpoint_id: seq.to_string(),
    }
}

/// The thread's state at checkpoint `cp` (`st`: the thread there), as its history and a
/// `checkpoints` stream show it: what runs next with the tasks' ids, the parent checkpoint, the
/// checkpoint's `source`, `step` and run in the metadata.
fn checkpoint_state(
    rec: &SessionRecord,
    cp: &checkpoints::Checkpoint,
    st: &SessionState,
) -> ThreadState {
    let interrupts = checkpoints::waits(st);
    let mut metadata = public_metadata(&rec.metadata);
    metadata.extend(checkpoints::metadata(cp));
    ThreadState {
        values: values(st),
        next: cp.next.iter().map(|t| t.name.clone()).collect(),
        tasks: cp
            .next
            .iter()
            .map(|t| Task {
                id: t.id.clone(),
                name: t.name.clone(),
                interrupts: interrupts.clone(),
                error: None,
                state: None,
            })
            .collect(),
        interrupts,
        checkpoint: checkpoint(&rec.id, cp.seq),
        parent_checkpoint: cp.parent.map(|p| checkpoint(&rec.id, p)),
        metadata,
        created_at: fmt_time(rec.updated_at),
    }
}

/// The thread's states at its last `last` checkpoints up to event `upto`, oldest first (only
/// those are made: a state holds the whole conversation).
fn checkpoint_states(
    rec: &SessionRecord,
    events: &[weft_core::Envelope],
    (upto, last): (Option<u64>, usize),
) -> Vec<ThreadState> {
    let events: Vec<&weft_core::Envelope> = events
        .iter()
        .take_while(|e| upto.is_none_or(|u| e.seq <= u))
        .collect();
    let all = events
        .iter()
        .filter(|e| checkpoints::is_checkpoint(&e.event))
        .count();
    let mut skip = all.saturating_sub(last);
    let mut st = SessionState::new();
    let mut lineage = checkpoints::Lineage::new(&rec.id);
    let mut out = Vec::new();
    for e in events {
        let call = checkpoints::open_call(&e.event, &st);
        st.apply(&e.event);
        if let Some(cp) = lineage.note(e, call.as_ref(), &st).checkpoint {
            if skip > 0 {
                skip -= 1;
            } else {
                out.push(checkpoint_state(rec, &cp, &st));
            }
        }
    }
    out
}

pub(crate) async fn get_state(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
) -> Result<Json<ThreadState>, ApiError> {
    let (rec, st) = load(&app, &user, &tid).await?;
    Ok(Json(state_json(&rec, &st)))
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct History {
    #[serde(default)]
    limit: Option<usize>,
}

/// The thread's states at each of its checkpoints, newest first.
pub(crate) async fn history(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    body: Option<Json<History>>,
) -> Result<Json<Vec<ThreadState>>, ApiError> {
    let limit = body.and_then(|Json(b)| b.limit).unwrap_or(10);
    let (rec, events) = load_log(&app, &user, &tid).await?;
    let mut out = checkpoint_states(&rec, &events, (None, limit));
    out.reverse();
    Ok(Json(out))
}

/// `GET /threads/{tid}/state/{checkpoint_id}`: the state at one of the thread's checkpoints.
pub(crate) async fn get_state_at(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path((tid, id)): Path<(String, String)>,
) -> Result<Json<ThreadState>, ApiError> {
    state_at(&app, &user, &tid, &id).await.map(Json)
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct StateAt {
    /// `{checkpoint_id, checkpoint_ns?, thread_id?}`: the checkpoint.
    #[schemars(schema_with = "openapi::any")]
    checkpoint: Value,
}

/// `POST /threads/{tid}/state/checkpoint` (`threads.get_state` with `checkpoint`).
pub(crate) async fn post_state_at(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    Json(body): Json<StateAt>,
) -> Result<Json<ThreadState>, ApiError> {
    let Some(id) = body.checkpoint.get("checkpoint_id").and_then(Value::as_str) else {
        return Err(ApiError::bad(
            "checkpoint.checkpoint_id: missing; give the id of a checkpoint of the thread's \
             history, e.g. {\"checkpoint\": {\"checkpoint_id\": \"12\"}}",
        ));
    };
    state_at(&app, &user, &tid, id).await.map(Json)
}

/// The thread's state at checkpoint `id`, or 404 when it is not one of the thread's.
async fn state_at(app: &Shared, user: &User, tid: &str, id: &str) -> Result<ThreadState, ApiError> {
    let (rec, events) = load_log(app, user, tid).await?;
    let seq: Option<u64> = id.parse().ok();
    seq.and_then(|seq| {
        checkpoint_states(&rec, &events, (Some(seq), 1))
            .pop()
            .filter(|s| s.checkpoint.checkpoint_id == id)
    })
    .ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "checkpoint {id} is not a checkpoint of thread {tid}; its history \
                 (POST /threads/{tid}/history) lists them"
            ),
        )
    })
}

/// Whether a process drives the thread now: a run of this server, or a live lease of another.
pub(crate) async fn busy(app: &Shared, tid: &str) -> Result<bool, ApiError> {
    if app.runs.active_on(tid) {
        return Ok(true);
    }
    let now = weft_runtime::now_ms();
    Ok(matches!(
        app.store.lease(tid).await?,
        Some(l) if l.expires_at > now
    ))
}

pub(crate) fn busy_error(tid: &str, what: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!("thread {tid} is busy with a run; cancel it (runs.cancel) or {what} once it ended"),
    )
}

/// `DELETE /threads/{tid}`: the session, its events, its snapshots and its lease are deleted,
/// and with them its runs (whose identity is in the log) and its crons. A thread a process
/// drives is refused.
pub(crate) async fn delete_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
) -> Result<StatusCode, ApiError> {
    let _ = load(&app, &user, &tid).await?;
    if busy(&app, &tid).await? {
        return Err(busy_error(&tid, "delete it"));
    }
    match app.store.delete(&tid).await {
        Ok(()) | Err(StoreError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    app.runs.forget_thread(&tid);
    app.summaries.forget(&tid);
    app.eval_results.forget(&tid);
    crate::crons::forget_thread(&app, &user, &tid).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct UpdateThread {
    /// Merged into the thread's metadata: each key replaces the thread's, a key set to null is
    /// removed.
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

/// `PATCH /threads/{tid}` (`threads.update`): the body's metadata merged into the thread's.
pub(crate) async fn update_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
    body: Option<Json<UpdateThread>>,
) -> Result<Json<Thread>, ApiError> {
    let (rec, _) = load(&app, &user, &tid).await?;
    let update = body.and_then(|Json(b)| b.metadata).unwrap_or_default();
    if let Some(k) = update.keys().find(|k| k.starts_with("weft_")) {
        return Err(ApiError::bad(format!(
            "metadata.{k}: keys that begin with `weft_` are weft's own; choose another name"
        )));
    }
    let mut metadata = match rec.metadata {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    for (k, v) in update {
        if v.is_null() {
            metadata.remove(&k);
        } else {
            metadata.insert(k, v);
        }
    }
    app.store
        .set_metadata(&tid, &Value::Object(metadata), weft_runtime::now_ms())
        .await?;
    let (rec, st) = load(&app, &user, &tid).await?;
    Ok(Json(thread_json(&app, &rec, &st)))
}

/// `POST /threads/{tid}/copy` (`threads.copy`): a new thread of the same user with the
/// thread's log up to its last event and its metadata (plus `forked_from`), made with
/// `weft_host::sessions::fork` as `weft sessions fork` makes one. A thread that never had a run
/// is copied as a new empty thread with its metadata.
pub(crate) async fn copy_thread(
    State(app): State<Shared>,
    Extension(user): Extension<User>,
    Path(tid): Path<String>,
) -> Result<Json<Thread>, ApiError> {
    let (rec, st) = load(&app, &user, &tid).await?;
    if busy(&app, &tid).await? || (st.seq() > 0 && st.status() == SessionStatus::Running) {
        return Err(busy_error(&tid, "copy it"));
    }
    let new_id = if st.seq() == 0 {
        let new = NewSession {
            id: uuid::Uuid::now_v7().to_string(),
            user_id: Some(user.0.clone()),
            agent: String::new(),
            metadata: rec.metadata.clone(),
            parent_id: Some(tid.clone()),
            ..NewSession::default()
        };
        app.store.create(new, weft_runtime::now_ms()).await?.id
    } else {
        weft_host::sessions::fork(app.store.as_ref(), &tid, st.seq(), None, None)
            .await
            .map_err(|e| match e {
                weft_host::HostError::Store(e) => e.into(),
                other => ApiError::bad(crate::message(&other.into())),
            })?
            .0
    };
    let (rec, st) = load(&app, &user, &new_id).await?;
    Ok(Json(thread_json(&app, &rec, &st)))
}
