//! The published JSON Schema of agent files (`schema/agent.schema.json`) is what `weft schema`
//! prints, every agent file of the project validates against it, and mistakes that the loader
//! refuses are refused by the schema too, so an editor flags them while they are typed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn printed() -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("schema")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&printed()).unwrap()
}

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap()
}

#[test]
fn the_published_schema_is_what_weft_schema_prints() {
    let published: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("schema/agent.schema.json")).unwrap(),
    )
    .unwrap();
    assert!(
        published == printed(),
        "schema/agent.schema.json is out of date: regenerate it with `weft schema > schema/agent.schema.json`"
    );
}

#[test]
fn every_agent_file_of_the_project_validates() {
    let v = validator();
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [
        "examples",
        "examples/tutorial",
        "crates/weft/tests/fixtures",
    ] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            // Scripts of the scripted model sit beside the agents.
            if name.ends_with(".yaml") && !name.contains("script") {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 8, "{files:?}");
    for f in files {
        let doc = yaml(&std::fs::read_to_string(&f).unwrap());
        let errors: Vec<String> = v
            .iter_errors(&doc)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", f.display());
    }
}

#[test]
fn mistakes_the_loader_refuses_are_refused_by_the_schema() {
    let v = validator();
    for bad in [
        "name: a\nmodle: openai:gpt-4o-mini\n",
        "name: a\nmode: planning\n",
        "name: a\nlimits: { max_iterations: -1 }\n",
        "name: a\nsecrets: { t: { environment: X } }\n",
        "name: a\ntools:\n  - name: t\n    command: [\"x\"]\n    timout: 3s\n",
        "name: a\ntools:\n  - mcp: { name: m, comand: [\"x\"] }\n",
        "name: a\nmodel: { provider: openai, name: m, tool_choice: always }\n",
        "description: no name\n",
    ] {
        assert!(!v.is_valid(&yaml(bad)), "accepted:\n{bad}");
    }
}

#[test]
fn the_published_process_schema_is_current_and_the_example_process_validates() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["schema", "--process"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let published: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("schema/process.schema.json")).unwrap(),
    )
    .unwrap();
    assert!(
        published == printed,
        "schema/process.schema.json is out of date: regenerate it with `weft schema --process > schema/process.schema.json`"
    );
    let v = jsonschema::validator_for(&printed).unwrap();
    let example: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/processes/order-status.json")).unwrap(),
    )
    .unwrap();
    let errors: Vec<String> = v.iter_errors(&example).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let mut bad = example.clone();
    bad["plann"] = bad["plan"].clone();
    assert!(!v.is_valid(&bad));
}
