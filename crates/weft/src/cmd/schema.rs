//! `weft schema`: the JSON Schema of agent files, assembled from the types that read them (the
//! agent file's own, the model mapping's and each kind of tool declaration's). The published copy
//! is `schema/agent.schema.json`; a test keeps it equal to this output. `weft schema --process`
//! prints the schema of process files (`schema/process.schema.json`).

use std::io::Write;

use anyhow::Result;
use serde_json::{Value, json};

/// The schema of an agent file.
pub fn agent_file() -> Value {
    let mut v = weft_core::agent::schema::of::<weft_core::agent::AgentSpec>();
    v["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    v["properties"]["model"] = weft_model::model_schema();
    v["properties"]["tools"]["items"] = weft_tools::declaration_schema();
    v
}

/// The schema of a process file (a plan reused as a tool), its tools declared as an agent's.
pub fn process_file() -> Value {
    let mut v = weft_core::agent::schema::of::<weft_core::process::ProcessSpec>();
    v["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    v["properties"]["tools"]["items"] = weft_tools::declaration_schema();
    v
}

pub fn run(process: bool) -> Result<u8> {
    let schema = if process {
        process_file()
    } else {
        agent_file()
    };
    let text = serde_json::to_string_pretty(&schema)?;
    writeln!(std::io::stdout(), "{text}")?;
    Ok(0)
}
