//! The routes and `/openapi.json`. Each route module states its routes once, as [`Route`]s
//! (method, path, handler, summary, the request type, the response type); the router and the
//! OpenAPI 3.1 document are both made from them. Request and response schemas are generated
//! from the handlers' own types (schemars): requests as they are read, responses as they are
//! written (`components/schemas` holds the named response types), so the document cannot drift
//! from what the handlers accept and answer.
//!
//! Every JSON answer is a type deriving `Serialize` and `JsonSchema`; a test checks the main
//! routes' real answers against the schemas declared here
//! (`crates/weft-server/tests/it/playground.rs`). `weft serve --openapi` prints the document;
//! `scripts/playground-types` turns it into the playground's `playground/js/api-types.d.ts` and,
//! with `--check` (a step of `.ci/run`), fails on a stale file and runs `tsc --noEmit` over the
//! page's scripts, which name the response types they read with JSDoc (`@typedef
//! {import("./api-types").components["schemas"]["SessionView"]} SessionView`), so a renamed or
//! removed field fails where it is read. The check is strict with null checks on and
//! `noImplicitAny` off (DOM helpers and callbacks stay untyped); what the schemas leave open
//! (each event type's fields, `conversation` messages, `partial_call`, `forked_from`, tool input
//! schemas) is typed by hand where it is read.

use axum::handler::Handler;
use axum::routing::MethodRouter;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use super::Shared;

/// What a route answers with when it succeeds.
pub(crate) enum Answer {
    /// A JSON body of a type: its schema, and what it is.
    Json(fn(&mut SchemaGenerator) -> Schema, &'static str),
    /// A body of another media type (server-sent events, HTML, text), and what it is.
    Media(&'static str, &'static str),
    /// Server-sent events whose `data` is JSON of a type: its schema, and what they are.
    Events(fn(&mut SchemaGenerator) -> Schema, &'static str),
    /// No body, with this status.
    Empty(u16, &'static str),
}

/// One route: method, path, handler, what it does, its request body's schema (if it takes
/// one), what it answers, and whether it needs a key.
pub(crate) struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub handler: MethodRouter<Shared>,
    pub summary: &'static str,
    pub body: Option<fn() -> Value>,
    pub answers: Answer,
    pub open: bool,
}

macro_rules! method {
    ($name:ident) => {
        /// A route of this method; its answer is declared with [`Route::json`] and the like.
        pub(crate) fn $name<H, T>(path: &'static str, summary: &'static str, handler: H) -> Route
        where
            H: Handler<T, Shared>,
            T: 'static,
        {
            Route {
                method: stringify!($name),
                path,
                handler: axum::routing::$name(handler),
                summary,
                body: None,
                answers: Answer::Media("application/json", ""),
                open: false,
            }
        }
    };
}

method!(get);
method!(post);
method!(put);
method!(patch);
method!(delete);

impl Route {
    /// The route takes a JSON body of type `B`.
    pub(crate) fn body<B: JsonSchema>(mut self) -> Self {
        self.body = Some(schema_of::<B>);
        self
    }

    /// The route answers with a JSON body of type `R`.
    pub(crate) fn json<R: JsonSchema>(mut self, what: &'static str) -> Self {
        self.answers = Answer::Json(|g| g.subschema_for::<R>(), what);
        self
    }

    /// The route answers with server-sent events whose data is JSON of type `E`.
    pub(crate) fn events<E: JsonSchema>(mut self, what: &'static str) -> Self {
        self.answers = Answer::Events(|g| g.subschema_for::<E>(), what);
        self
    }

    /// The route answers with a body of `media` type.
    pub(crate) fn media(mut self, media: &'static str, what: &'static str) -> Self {
        self.answers = Answer::Media(media, what);
        self
    }

    /// The route answers with `status` and no body.
    pub(crate) fn empty(mut self, status: u16, what: &'static str) -> Self {
        self.answers = Answer::Empty(status, what);
        self
    }

    /// The route needs no key.
    pub(crate) fn open(mut self) -> Self {
        self.open = true;
        self
    }
}

/// The schema of a request type, whole (the types it holds written out in place, so that no
/// reference points outside it), as it is read.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>();
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// The error every route may answer with: `{"detail": ...}`.
#[derive(serde::Serialize, JsonSchema)]
pub(crate) struct Detail {
    pub detail: String,
}

/// The path as OpenAPI writes it (`{*path}` becomes `{path}`).
fn doc_path(path: &str) -> String {
    path.replace("{*", "{")
}

/// The document for `routes`.
pub(crate) fn document(routes: &[Route]) -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let error = generator.subschema_for::<Detail>();
    let error = json!({"application/json": {"schema": error}});
    let mut paths = Map::new();
    for r in routes {
        let path = doc_path(r.path);
        let params: Vec<Value> = path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let ok = match &r.answers {
            Answer::Json(schema, what) => (
                "200",
                json!({"description": what, "content": {"application/json": {"schema": schema(&mut generator)}}}),
            ),
            // `itemSchema` (OpenAPI 3.2) is the schema of each event's data.
            Answer::Events(schema, what) => (
                "200",
                json!({"description": what, "content": {"text/event-stream": {
                    "schema": {"type": "string"},
                    "itemSchema": schema(&mut generator),
                }}}),
            ),
            Answer::Media(media, what) => {
                let kind = if *media == "application/json" {
                    "object"
                } else {
                    "string"
                };
                (
                    "200",
                    json!({"description": what, "content": {*media: {"schema": {"type": kind}}}}),
                )
            }
            Answer::Empty(status, what) => match status {
                204 => ("204", json!({"description": what})),
                // A route that is there only to say what to use instead.
                501 => ("501", json!({"description": what, "content": error})),
                _ => ("200", json!({"description": what})),
            },
        };
        let mut responses = Map::new();
        responses.insert(ok.0.into(), ok.1);
        if !r.open {
            responses.insert(
                "401".into(),
                json!({"description": "no valid API key", "content": error}),
            );
        }
        responses.insert(
            "404".into(),
            json!({"description": "not found, or another user's", "content": error}),
        );
        responses.insert(
            "default".into(),
            json!({"description": "an error: 409, 413, 422, 429, 503...", "content": error}),
        );
        let mut op = json!({
            "summary": r.summary,
            "parameters": params,
            "responses": responses,
        });
        if r.open {
            op["security"] = json!([]);
        }
        if let Some(body) = r.body {
            op["requestBody"] =
                json!({"required": false, "content": {"application/json": {"schema": body()}}});
        }
        let entry = paths
            .entry(path)
            .or_insert_with(|| Value::Object(Map::new()));
        entry[r.method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "weft serve",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "LangGraph Server's API (assistants, threads, runs, streaming) and AG-UI over weft's durable sessions.",
        },
        "components": {
            "schemas": generator.take_definitions(true),
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
                "bearer": {"type": "http", "scheme": "bearer"},
            },
        },
        "security": [{"apiKey": []}, {"bearer": []}],
        "paths": paths,
    })
}

/// The schema of any JSON value (a field whose shape is the agent's or the tool's own).
pub(crate) fn any(_: &mut SchemaGenerator) -> Schema {
    Schema::from(true)
}

/// A stored event as it is sent: its place in the log and its type, with the event's own
/// fields beside them.
#[derive(Clone, serde::Serialize)]
#[serde(transparent)]
pub(crate) struct StoredEvent(pub weft_core::Envelope);

impl JsonSchema for StoredEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StoredEvent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schemars::json_schema!({
        "type": "object",
        "properties": {
            "seq": {"type": "integer", "minimum": 1},
            "ts": {"type": "integer"},
            "v": {"type": "integer"},
            "epoch": {"type": "integer"},
            "type": {"type": "string"},
        },
        "required": ["seq", "ts", "v", "type"],
        })
    }
}

/// A plan as it is sent: its calls (`_id`, `_tool` and the arguments).
#[derive(serde::Serialize)]
#[serde(transparent)]
pub(crate) struct PlanCalls(pub weft_core::Plan);

impl JsonSchema for PlanCalls {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PlanCalls".into()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        calls(g)
    }
}

/// The schema of a list of plan calls (`_id`, `_tool` and the arguments).
pub(crate) fn calls(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "properties": {"_id": {"type": "string"}}, "required": ["_id"]},
    })
}

/// The schema of the model's conversation: messages tagged by `role`.
pub(crate) fn messages(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"role": {"type": "string"}},
            "required": ["role"],
        },
    })
}
