//! Embedding weft in a Rust program: a tool written in Rust, an agent built in code, a run on a
//! SQLite file, the answer and the session's events read back.
//!
//!     cargo run -p weft-runtime --example embed
//!
//! The model here is scripted, so the example runs anywhere; swap it for
//! `weft_model::from_spec(&json!("openai:gpt-4o-mini"), dir)` to use a real one.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::agent::AgentSpec;
use weft_core::{Event, ToolError, ToolInfo, ToolOutcome};
use weft_model::{ScriptedModel, SharedModel};
use weft_runtime::{Agent, Runtime, SessionInfo};
use weft_store::{SessionLog, SqliteStore};
use weft_tools::{Registry, Tool, ToolContext};

/// A tool is a type with its metadata and an async `call`.
struct Convert {
    info: ToolInfo,
}

impl Convert {
    fn new() -> Self {
        Self {
            info: ToolInfo {
                name: "convert".into(),
                description: "Convert an amount of US dollars to euros.".into(),
                category: Some("money".into()),
                input_schema: json!({
                    "type": "object",
                    "properties": {"usd": {"type": "number"}},
                    "required": ["usd"]
                }),
                idempotent: true,
                parallel: true,
                requires_approval: false,
                source: "rust".into(),
                output_schema: None,
            },
        }
    }
}

impl Tool for Convert {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        // The arguments were validated against the schema before the call.
        let usd = args["usd"].as_f64().unwrap_or_default();
        Ok(json!({"eur": (usd * 0.92 * 100.0).round() / 100.0}))
    }
}

/// What a model would answer: call the tool, then answer from its result.
const SCRIPT: &str = r#"
- tool_calls: [ { name: convert, arguments: { usd: 100 } } ]
- text: "100 USD is 92 EUR."
"#;

/// Runs the agent on a task with its sessions in the SQLite file `db`; returns the answer and
/// the tool results the session recorded.
pub async fn run(db: &Path) -> Result<(String, Vec<Value>), Box<dyn std::error::Error>> {
    let spec = AgentSpec::parse(
        "embedded agent",
        "name: converter\nmode: react\ninstructions: You convert currencies with the convert tool.\n",
    )?;
    let mut tools = Registry::new();
    tools.register(Convert::new())?;
    let tools = Arc::new(tools);
    let model: SharedModel = Arc::new(ScriptedModel::parse("embedded script", SCRIPT)?);
    let agent = Agent::new(&spec, tools.clone(), model, &json!({}), &json!({}))?;

    let store = Arc::new(SqliteStore::open(db).await?);
    let rt = Runtime::builder(store.clone(), tools, spec.limits.clone(), None, None).build();
    let session = rt
        .run_agent(
            &agent,
            SessionInfo::default(),
            "How much is 100 USD in euros?",
            json!({}),
        )
        .await?;
    let answer = session.state.turn().answer().unwrap_or_default().to_owned();

    // Everything the run did is in the session's log, durable in the file.
    let (_record, events) = store.load(&session.id).await?;
    let results = events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ToolCallFinished {
                outcome: ToolOutcome::Ok { output },
                ..
            } => Some(output),
            _ => None,
        })
        .collect();
    Ok((answer, results))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("weft-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (answer, results) = run(&dir.join("weft.db")).await?;
    println!("tool results: {results:?}");
    println!("answer: {answer}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
