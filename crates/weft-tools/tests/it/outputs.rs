//! A tool's declared `output_schema`: a call whose output matches it gives its output; one
//! whose output does not fails as `invalid_output`, naming the tool and where the output
//! differs; a schema that does not compile is refused when the agent file is loaded, naming the
//! tool and the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use common::*;
use serde_json::json;

const AGENT: &str = r#"name: a
tools:
  - name: find_member
    command: [python3, -c, "import json, sys; a = json.load(sys.stdin); print(json.dumps({'member': {'id': 7 if a['name'] == 'Ann' else 'seven'}}))"]
    input_schema: {type: object, properties: {name: {type: string}}, required: [name]}
    output_schema:
      type: object
      properties: {member: {type: object, properties: {id: {type: integer}}, required: [id]}}
      required: [member]
"#;

#[tokio::test]
async fn an_output_that_breaks_the_declared_schema_fails_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(AGENT, dir.path());
    let info = weft_core::ToolCatalog::tool_info(&reg, "find_member").unwrap();
    assert_eq!(
        info.output_schema.as_ref().unwrap()["required"],
        json!(["member"])
    );
    let out = ok(call(&reg, "find_member", json!({"name": "Ann"})).await);
    assert_eq!(out, json!({"member": {"id": 7}}));
    let e = err(call(&reg, "find_member", json!({"name": "Bob"})).await);
    assert_eq!(e.kind, "invalid_output", "{e:?}");
    assert!(
        e.message
            .contains("the output of `find_member` does not match its output_schema")
            && e.message.contains("/member/id"),
        "{}",
        e.message
    );
    assert_eq!(e.detail, json!({"member": {"id": "seven"}}));
}

#[test]
fn an_output_schema_that_does_not_compile_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "name: a\ntools:\n  - name: t\n    command: [python3, -c, 'print(1)']\n    output_schema: {type: 12}\n";
    let spec = spec(yaml);
    let Err(e) = weft_tools::Registry::from_agent(&spec, dir.path()) else {
        panic!("a bad output_schema was loaded");
    };
    assert!(
        e.to_string()
            .contains("tool `t`: output_schema is not a valid JSON Schema"),
        "{e}"
    );
}
