//! `/openapi.json`: the API as an OpenAPI 3.1 document. The request bodies' schemas are
//! generated from the handlers' own request types (schemars), so the document cannot drift from
//! what the handlers accept; the routes come from the same table the router is built from.

use schemars::JsonSchema;
use serde_json::{Map, Value, json};

/// One route: method, path, what it does, its request type's schema (if it takes a body), and
/// what it answers.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    pub body: Option<fn() -> Value>,
    pub answers: &'static str,
}

pub fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// The document for `routes`.
pub fn document(routes: &[Route]) -> Value {
    let mut paths = Map::new();
    for r in routes {
        let params: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let mut op = json!({
            "summary": r.summary,
            "parameters": params,
            "responses": {
                "200": {"description": r.answers},
                "401": {"description": "no valid API key", "content": {"application/json": {"schema": error_schema()}}},
                "404": {"description": "not found, or another user's", "content": {"application/json": {"schema": error_schema()}}},
            },
        });
        if r.path == "/health" || r.path == "/" || r.path.starts_with("/playground/") {
            op["security"] = json!([]);
        }
        if let Some(body) = r.body {
            op["requestBody"] =
                json!({"required": false, "content": {"application/json": {"schema": body()}}});
        }
        let entry = paths
            .entry(r.path.to_owned())
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
        "components": {"securitySchemes": {
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            "bearer": {"type": "http", "scheme": "bearer"},
        }},
        "security": [{"apiKey": []}, {"bearer": []}],
        "paths": paths,
    })
}

fn error_schema() -> Value {
    json!({"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]})
}
