//! Measures the `local` provider on a GGUF file: load time, prompt and generation speed, the
//! time of a planner call (a structured reply under the planner's schema), and the process's
//! peak memory. The figures in docs/local-model.md come from it:
//!
//! ```sh
//! CANDLE_NUM_THREADS=1 cargo run --release -p weft-model --features local-model --example local_bench -- FILE.gguf
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use weft_core::model::{Message, Messages, ModelRequest, Purpose};
use weft_core::tool::ToolInfo;

fn request(system: &str, user: &str, max_tokens: u32) -> ModelRequest {
    let mut messages = Messages::new();
    messages.push(Message::System {
        content: system.into(),
    });
    messages.push(Message::User {
        content: user.into(),
    });
    ModelRequest {
        purpose: Purpose::React,
        call_index: 0,
        purpose_index: 0,
        messages,
        tools: Vec::new(),
        response_schema: None,
        exact_schema: None,
        max_tokens: Some(max_tokens),
        temperature: None,
    }
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main]
async fn main() {
    let file = std::env::args()
        .nth(1)
        .expect("usage: local_bench FILE.gguf");
    let model =
        weft_model::from_spec(&json!({"provider": "local", "file": file}), Path::new(".")).unwrap();
    let threads = std::env::var("CANDLE_NUM_THREADS").unwrap_or_else(|_| "default".into());

    let t = Instant::now();
    model
        .complete_boxed(&request("s", "Hi.", 1), None)
        .await
        .unwrap();
    let load = t.elapsed().as_secs_f64();
    println!("file: {file}");
    println!("threads (CANDLE_NUM_THREADS): {threads}");
    println!("load and first call: {load:.2} s");

    // Prompt speed: a long prompt, one output token.
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let t = Instant::now();
    let r = model
        .complete_boxed(&request("You are helpful.", &long, 1), None)
        .await
        .unwrap();
    let prompt_s = t.elapsed().as_secs_f64();
    let prompt_tps = r.usage.input_tokens as f64 / prompt_s;
    println!(
        "prompt: {prompt_tps:.0} tokens/s ({} tokens in {prompt_s:.2} s)",
        r.usage.input_tokens
    );

    // Generation speed: a short prompt, a long reply, less the short prompt's share.
    let short = request(
        "You are helpful.",
        "Count from 1 to 200, one number a line.",
        128,
    );
    let t = Instant::now();
    let r1 = model
        .complete_boxed(
            &request(
                "You are helpful.",
                "Count from 1 to 200, one number a line.",
                1,
            ),
            None,
        )
        .await
        .unwrap();
    let first = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let r = model.complete_boxed(&short, None).await.unwrap();
    let gen_s = t.elapsed().as_secs_f64() - first;
    let gen_tokens = r.usage.output_tokens.saturating_sub(r1.usage.output_tokens);
    let gen_tps = gen_tokens as f64 / gen_s;
    println!("generation: {gen_tps:.1} tokens/s ({gen_tokens} tokens in {gen_s:.2} s)");

    // Planner calls: the planner's schema with two tools, five tasks.
    let tools: Vec<ToolInfo> = serde_json::from_value(json!([
        {"name": "get_weather", "description": "The weather of a city.", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"name": "send_email", "description": "Send an email.", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"]}}
    ]))
    .unwrap();
    let schema: Value = weft_core::prompts::planner_schema(&tools, &[]);
    let tasks = [
        "What is the weather in Oslo?",
        "Email bob@example.com that the meeting moved to 3 pm.",
        "Is it raining in Lisbon?",
        "Say hello.",
        "Compare the weather in Paris and Rome.",
    ];
    let mut total = 0.0;
    let mut out_tokens = 0;
    for task in tasks {
        let mut req = request(
            weft_core::prompts::PLANNER_ROLE,
            &format!("Tools: get_weather, send_email\nTask: {task}"),
            256,
        );
        req.purpose = Purpose::Plan;
        req.response_schema = Some(schema.clone());
        let t = Instant::now();
        let r = model.complete_boxed(&req, None).await.unwrap();
        total += t.elapsed().as_secs_f64();
        out_tokens += r.usage.output_tokens;
    }
    println!(
        "planner call: {:.2} s on average ({} tasks, {:.0} output tokens each)",
        total / tasks.len() as f64,
        tasks.len(),
        out_tokens as f64 / tasks.len() as f64
    );
    println!("peak memory (VmHWM): {:.0} MiB", peak_rss_mib());
}
