//! The reference pages in docs/ hold real examples: every agent file and tool declaration in
//! docs/agent-file.md and docs/workflows.md loads, every plan (and process file) in
//! docs/plans.md parses and validates its shape, and every script in docs/scripted-model.md
//! parses. A page that drifts from the code fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;

use weft_core::Plan;
use weft_core::agent::AgentSpec;
use weft_tools::{Registry, Secrets};

/// The fenced blocks of `lang` in a page of docs/.
fn blocks(page: &str, lang: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(page);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim() == format!("```{lang}") => current = Some(String::new()),
            Some(b) if line.trim() == "```" => {
                out.push(std::mem::take(b));
                current = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    assert!(!out.is_empty(), "{page} has no {lang} examples");
    out
}

/// A directory with the files the examples name.
fn workdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir_all(d.join("tools")).unwrap();
    for f in [
        "tools/billing.py",
        "tools/refund.py",
        "tools/kb.py",
        "tools/escalate.py",
    ] {
        std::fs::write(d.join(f), "print('{}')\n").unwrap();
    }
    std::fs::write(
        d.join("researcher.yaml"),
        "name: researcher\nmodel: scripted:s.yaml\n",
    )
    .unwrap();
    std::fs::create_dir_all(d.join("processes")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/processes/order-status.json"),
        d.join("processes/order-status.json"),
    )
    .unwrap();
    std::fs::write(d.join("tools/demo_tools.py"), "print('{}')\n").unwrap();
    tmp
}

fn load(text: &str, dir: &Path) {
    let spec =
        AgentSpec::parse("docs/agent-file.md", text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"));
    let secrets = Secrets::from_values(BTreeMap::from([(
        "crm_token".to_owned(),
        "a-documented-token".to_owned(),
    )]))
    .unwrap();
    Registry::from_agent_with_secrets(&spec, dir, secrets)
        .unwrap_or_else(|e| panic!("{e}\n---\n{text}"));
}

#[test]
fn every_agent_file_and_tool_in_the_agent_file_reference_loads() {
    let tmp = workdir();
    let mut tools = 0;
    for b in blocks("agent-file.md", "yaml") {
        if b.starts_with("name:") {
            load(&b, tmp.path());
        } else {
            // A tool declaration, as an item of `tools:`.
            let indented: String = b.lines().map(|l| format!("  {l}\n")).collect();
            load(
                &format!(
                    "name: doc\nmodel: scripted:s.yaml\nsecrets:\n  crm_token: {{ env: CRM_TOKEN }}\ntools:\n{indented}"
                ),
                tmp.path(),
            );
            tools += 1;
        }
    }
    assert_eq!(
        tools, 6,
        "command, built-in, http, mcp, agent and process examples"
    );
}

#[test]
fn every_workflow_in_the_workflow_reference_loads() {
    let tmp = workdir();
    let mut agents = 0;
    for b in blocks("workflows.md", "yaml") {
        if b.starts_with("name:") {
            let spec = AgentSpec::parse("docs/workflows.md", &b)
                .unwrap_or_else(|e| panic!("{e}\n---\n{b}"));
            let tools =
                Registry::from_agent(&spec, tmp.path()).unwrap_or_else(|e| panic!("{e}\n---\n{b}"));
            weft_runtime::Agent::workflow(
                &spec,
                &tools,
                &serde_json::json!({}),
                &serde_json::json!({}),
            )
            .unwrap_or_else(|e| panic!("{e}\n---\n{b}"));
            agents += 1;
        } else {
            // A step, as an entry of `steps:`.
            let steps: BTreeMap<String, weft_core::workflow::StepSpec> =
                serde_yaml_ng::from_str(&b).unwrap_or_else(|e| panic!("{e}\n---\n{b}"));
            assert_eq!(steps.len(), 1, "{b}");
        }
    }
    assert!(agents >= 1);
}

#[test]
fn every_plan_in_the_plan_reference_parses() {
    for b in blocks("plans.md", "json") {
        if b.contains("\"state_schema\"") {
            // A process file: a plan with its schemas and tools.
            weft_core::process::ProcessSpec::parse("docs/plans.md", &b)
                .unwrap_or_else(|e| panic!("{e}\n---\n{b}"));
            continue;
        }
        let plan = Plan::parse_str(&b).unwrap_or_else(|p| panic!("{p:?}\n---\n{b}"));
        assert!(!plan.steps.is_empty());
        for s in &plan.steps {
            for (at, r) in s.arg_refs() {
                r.unwrap_or_else(|e| panic!("{}.{at}: {e}", s.id));
            }
        }
    }
}

#[test]
fn every_script_in_the_scripted_model_reference_parses() {
    for b in blocks("scripted-model.md", "yaml") {
        weft_model::ScriptedModel::parse("docs/scripted-model.md", &b)
            .unwrap_or_else(|e| panic!("{e}\n---\n{b}"));
    }
}
