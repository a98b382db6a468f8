//! The embedding example (`examples/embed.rs`) runs: its Rust tool is called by the agent and
//! its result is stored in the session and reaches the answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../examples/embed.rs"]
#[allow(dead_code)]
mod example;

#[tokio::test]
async fn the_embedding_example_runs_its_rust_tool_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (answer, results) = example::run(&dir.path().join("weft.db")).await.unwrap();
    assert_eq!(results, vec![serde_json::json!({"eur": 92.0})]);
    assert_eq!(answer, "100 USD is 92 EUR.");
}
