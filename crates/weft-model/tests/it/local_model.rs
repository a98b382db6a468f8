//! The `local` provider on a real GGUF model (SmolLM2-135M-Instruct, the file
//! `scripts/setup-local-model` installs and names in `WEFT_TEST_LOCAL_GGUF`): replies stream,
//! structured replies parse and validate against the schema, a request with tools yields a call
//! of an offered tool whose arguments validate, and a truncated file is refused by name; and on
//! Gemma 3 270M (`WEFT_TEST_LOCAL_GEMMA_GGUF`), its prompt's tokens are llama.cpp's, and it
//! answers, calls tools and plans. Built with the `local-model` feature only; named
//! `needs_local_model_*`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use weft_core::model::{Message, Messages, ModelRequest, Purpose, ToolDef};
use weft_core::tool::ToolInfo;
use weft_model::{DeltaSink, ModelError, SharedModel, from_spec};

use crate::support as common;

fn gguf() -> PathBuf {
    PathBuf::from(common::service_var("WEFT_TEST_LOCAL_GGUF"))
}

/// Gemma 3 270M (`scripts/setup-local-model --gemma` installs it and names it in
/// `WEFT_TEST_LOCAL_GEMMA_GGUF`): a `gemma3` file with a SentencePiece tokenizer.
fn gemma() -> PathBuf {
    PathBuf::from(common::service_var("WEFT_TEST_LOCAL_GEMMA_GGUF"))
}

fn model(spec: Value) -> SharedModel {
    from_spec(&spec, Path::new(".")).unwrap()
}

fn request(purpose: Purpose, system: &str, user: &str) -> ModelRequest {
    let mut messages = Messages::new();
    messages.push(Message::System {
        content: system.into(),
    });
    messages.push(Message::User {
        content: user.into(),
    });
    ModelRequest {
        purpose,
        call_index: 0,
        purpose_index: 0,
        messages,
        tools: Vec::new(),
        response_schema: None,
        exact_schema: None,
        max_tokens: None,
        temperature: None,
    }
}

#[tokio::test]
async fn needs_local_model_a_plain_reply_streams_its_pieces() {
    let file = gguf();
    let m = model(json!({"provider": "local", "file": file, "max_tokens": 40}));
    let pieces = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink: DeltaSink = {
        let pieces = pieces.clone();
        Arc::new(move |d: &str| pieces.lock().unwrap().push(d.to_owned()))
    };
    let req = request(
        Purpose::React,
        "You are a helpful assistant.",
        "Name three colours.",
    );
    let reply = m.complete_boxed(&req, Some(sink)).await.unwrap();
    let pieces = pieces.lock().unwrap().clone();
    assert!(pieces.len() > 3, "the reply streamed in pieces: {pieces:?}");
    assert_eq!(pieces.concat(), reply.content, "the pieces make the reply");
    assert!(!reply.content.trim().is_empty());
    assert!(reply.tool_calls.is_empty());
    assert!(reply.usage.input_tokens > 10, "{:?}", reply.usage);
    assert!(
        reply.usage.output_tokens >= pieces.len() as u64 && reply.usage.output_tokens <= 40,
        "{:?}",
        reply.usage
    );
    assert!(m.name().starts_with("local:"), "{}", m.name());
    eprintln!("reply: {:?} ({:?})", reply.content, reply.usage);
}

fn tool(name: &str, description: &str, schema: Value) -> ToolInfo {
    serde_json::from_value(
        json!({"name": name, "description": description, "input_schema": schema}),
    )
    .unwrap()
}

/// Asserts that the engine accepts `plan` (a reply's `plan` list) as it accepts a planner's:
/// it parses as a plan and `graph::validate` finds no problem with `catalog`'s tools.
fn assert_engine_accepts(
    task: &str,
    reply: &str,
    plan: &Value,
    catalog: &std::collections::BTreeMap<String, ToolInfo>,
) {
    let plan = weft_core::plan::Plan::from_value(plan)
        .unwrap_or_else(|e| panic!("task {task:?}: {reply} is no plan: {e:?}"));
    let problems = weft_core::graph::validate(
        &plan,
        catalog,
        &weft_core::graph::ValidateOptions::default(),
    );
    assert!(
        problems.is_empty(),
        "task {task:?}: the engine refuses {reply}: {problems:?}"
    );
}

#[tokio::test]
async fn needs_local_model_planner_replies_parse_and_validate_every_time() {
    let file = gguf();
    let m = model(json!({"provider": "local", "file": file, "max_tokens": 128}));
    let tools = vec![
        tool(
            "get_weather",
            "The weather of a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        tool(
            "send_email",
            "Send an email.",
            json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"]}),
        ),
    ];
    let schema = weft_core::prompts::planner_schema(&tools, &[]);
    let validator = jsonschema::validator_for(&schema).unwrap();
    // The grammar is built from the exact form, so the reply is also a plan the engine takes.
    let exact = weft_core::prompts::exact_planner_schema(
        &tools,
        &[],
        &weft_core::prompts::PlanScope::default(),
        &[],
    );
    let exact_validator = jsonschema::validator_for(&exact).unwrap();
    let catalog: std::collections::BTreeMap<String, weft_core::tool::ToolInfo> =
        tools.iter().map(|t| (t.name.clone(), t.clone())).collect();
    let tasks = [
        "What is the weather in Oslo?",
        "Email bob@example.com that the meeting moved to 3 pm.",
        "Is it raining in Lisbon?",
        "What is 2 + 2?",
        "Compare the weather in Paris and Rome.",
        "Tell alice@example.com the weather in Berlin.",
        "Say hello.",
        "Send an email to team@example.com saying thanks.",
        "Which is warmer today, Madrid or Oslo?",
        "Write a haiku about autumn.",
    ];
    let mut plans = 0;
    for (i, task) in tasks.iter().enumerate() {
        let mut req = request(
            Purpose::Plan,
            weft_core::prompts::PLANNER_ROLE,
            &format!("Tools: get_weather, send_email\nTask: {task}"),
        );
        req.call_index = i as u32;
        req.response_schema = Some(schema.clone());
        req.exact_schema = Some(exact.clone().into());
        let started = std::time::Instant::now();
        let reply = m.complete_boxed(&req, None).await.unwrap();
        let value: Value = serde_json::from_str(&reply.content)
            .unwrap_or_else(|e| panic!("task {task:?}: not JSON ({e}): {}", reply.content));
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "task {task:?}: {} does not validate: {errors:?}",
            reply.content
        );
        assert!(
            exact_validator.is_valid(&value),
            "task {task:?}: {} does not fit the exact schema",
            reply.content
        );
        if value.get("plan").is_some() {
            assert_engine_accepts(task, &reply.content, &value["plan"], &catalog);
            plans += 1;
        }
        eprintln!(
            "{task:?} ({} ms, {} prompt + {} output tokens): {}",
            started.elapsed().as_millis(),
            reply.usage.input_tokens,
            reply.usage.output_tokens,
            reply.content
        );
    }
    eprintln!("{plans} of {} replies were plans", tasks.len());
}

/// A tool with an `output_schema`.
fn typed_tool(name: &str, description: &str, input: Value, output: Value) -> ToolInfo {
    serde_json::from_value(json!({"name": name, "description": description,
        "input_schema": input, "output_schema": output}))
    .unwrap()
}

/// The plans of a tiny model, decoded under the planner's stages (each step's references typed
/// by the steps before it), at several temperatures and seeds: each is a plan the engine takes,
/// and every reference into a step's output reads a path its tool's `output_schema` promises
/// and that fits the parameter (the issue's `reserve_copy {"member_id": "†steps.s1"}`, a whole
/// object put into an integer, cannot be written).
#[tokio::test]
async fn needs_local_model_typed_plans_put_only_fitting_references_into_arguments() {
    use weft_core::fits::{Source, fitting_paths};
    use weft_core::plan::{RefRoot, Reference};
    use weft_core::prompts::{PlanScope, exact_planner_schema, planner_schema, planner_stages};
    let file = gguf();
    let m = model(json!({"provider": "local", "file": file, "max_tokens": 160}));
    let string =
        |k: &str| json!({"type": "object", "properties": {k: {"type": "string"}}, "required": [k]});
    let tools = vec![
        typed_tool(
            "find_member",
            "Finds a library member by name.",
            string("name"),
            json!({"type": "object", "properties": {"member": {"type": "object",
                "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}, "required": ["id", "name"]}},
                "required": ["member"]}),
        ),
        typed_tool(
            "find_book",
            "Finds a book by its title.",
            string("title"),
            json!({"type": "object", "properties": {"book_id": {"type": "integer"}, "title": {"type": "string"}},
                "required": ["book_id", "title"]}),
        ),
        tool(
            "reserve_copy",
            "Reserves a copy of a book for a member.",
            json!({"type": "object", "properties": {"member_id": {"type": "integer"}, "book_id": {"type": "integer"}},
                "required": ["member_id", "book_id"]}),
        ),
    ];
    let catalog: std::collections::BTreeMap<String, ToolInfo> =
        tools.iter().map(|t| (t.name.clone(), t.clone())).collect();
    let scope = PlanScope::default();
    let tasks = [
        "Reserve a copy of Dune for Ann.",
        "Find member Bob and the book Emma, then reserve Emma for Bob.",
        "Ann wants to borrow The Hobbit: reserve it for her.",
    ];
    let (mut plans, mut references) = (0, 0);
    for (i, (task, temperature)) in tasks
        .iter()
        .flat_map(|t| [(t, 0.0), (t, 0.7), (t, 1.0)])
        .enumerate()
    {
        let mut req = request(
            Purpose::Plan,
            weft_core::prompts::PLANNER_ROLE,
            &format!("Tools: find_member, find_book, reserve_copy\nTask: {task}"),
        );
        req.call_index = i as u32;
        req.temperature = Some(temperature);
        req.response_schema = Some(planner_schema(&tools, &[]));
        req.exact_schema = Some(weft_core::model::Exact {
            schema: exact_planner_schema(&tools, &[], &scope, &[]),
            staged: Some(planner_stages(&tools, &[], scope.clone())),
        });
        let reply = m.complete_boxed(&req, None).await.unwrap();
        eprintln!("{task:?} at {temperature}: {}", reply.content);
        let value: Value = serde_json::from_str(&reply.content)
            .unwrap_or_else(|e| panic!("task {task:?}: not JSON ({e}): {}", reply.content));
        let Some(steps) = value.get("plan").and_then(Value::as_array) else {
            continue;
        };
        plans += 1;
        assert_engine_accepts(task, &reply.content, &value["plan"], &catalog);
        let tool_of = |id: &str| {
            steps
                .iter()
                .find(|s| s["_id"] == id)
                .and_then(|s| s["_tool"].as_str())
                .map(|t| &catalog[t])
        };
        for step in steps {
            let Some(info) = step["_tool"].as_str().map(|t| &catalog[t]) else {
                continue;
            };
            for (k, v) in step.as_object().unwrap() {
                let Some(text) = v.as_str().and_then(|s| s.strip_prefix('†')) else {
                    continue;
                };
                let r = Reference::parse(text).unwrap();
                let RefRoot::Step(id) = &r.root else {
                    panic!("{v} in {step}: the run has no input and no State");
                };
                // A step of a tool with no `output_schema` promises nothing (none is asked for).
                let Some(out) = tool_of(id).and_then(|t| t.output_schema.as_ref()) else {
                    continue;
                };
                let param = &info.input_schema["properties"][k];
                let fitting = fitting_paths(Source::Schema(out), param).unwrap();
                assert!(
                    fitting.contains(&r.path),
                    "{v} in {step} does not fit `{k}` ({param}): what fits is {fitting:?}"
                );
                references += 1;
            }
        }
    }
    eprintln!(
        "{plans} plans of {} replies, {references} references, each fitting",
        tasks.len() * 3
    );
    assert!(
        references > 0,
        "no plan read a step's output: the test showed nothing"
    );
}

#[tokio::test]
async fn needs_local_model_a_react_request_with_two_tools_yields_a_valid_call() {
    let file = gguf();
    let tools = vec![
        ToolDef {
            name: "get_weather".into(),
            description: "The current weather of a city.".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}),
        },
        ToolDef {
            name: "add".into(),
            description: "Adds two numbers.".into(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"], "additionalProperties": false}),
        },
    ];
    let mut req = request(
        Purpose::React,
        "You are an assistant. Use the tools to answer.",
        "What is the weather in Oslo right now? Use the get_weather tool.",
    );
    req.tools = tools.clone();
    // Whatever the reply calls is an offered tool with arguments valid against its schema.
    let valid = |calls: &[weft_model::ToolCall]| {
        for call in calls {
            let offered = tools.iter().find(|t| t.name == call.name);
            let offered = offered.unwrap_or_else(|| panic!("{} is not offered", call.name));
            let validator = jsonschema::validator_for(&offered.parameters).unwrap();
            assert!(
                validator.is_valid(&call.arguments),
                "{} does not validate against {}",
                call.arguments,
                offered.parameters
            );
            eprintln!("call: {} {}", call.name, call.arguments);
        }
    };
    // `auto`: SmolLM2-135M may answer this in text (its first token is `<` with about 2% of the
    // probability, in candle and in llama.cpp alike, on the same file and prompt); any call it
    // makes is well-formed.
    let m = model(json!({"provider": "local", "file": file, "max_tokens": 100}));
    let reply = m.complete_boxed(&req, None).await.unwrap();
    valid(&reply.tool_calls);
    eprintln!(
        "auto: {} calls, text {:?}",
        reply.tool_calls.len(),
        reply.content
    );
    // `required`: the reply is calls.
    let m = model(
        json!({"provider": "local", "file": file, "max_tokens": 100, "tool_choice": "required"}),
    );
    let reply = m.complete_boxed(&req, None).await.unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "one call: {reply:?}");
    valid(&reply.tool_calls);
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn needs_local_model_a_truncated_file_is_refused_by_name() {
    let file = gguf();
    let bytes = std::fs::read(&file).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Cut in the header (the vocabulary), in the tensor table, in the weights; and not GGUF.
    for (name, len) in [
        ("header.gguf", 4096),
        ("table.gguf", 1_700_000),
        ("weights.gguf", bytes.len() / 2),
        ("empty.gguf", 0),
    ] {
        let cut = dir.path().join(name);
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let m = model(json!(format!("local:{}", cut.display())));
        let req = request(Purpose::React, "s", "Say hi.");
        let e = m.complete_boxed(&req, None).await.unwrap_err();
        assert!(matches!(e, ModelError::Config(_)), "{name}: {e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(&cut.display().to_string()) && msg.contains("complete GGUF model"),
            "{name}: {msg}"
        );
        eprintln!("{name}: {msg}");
    }
    // A file that is not there is refused when the agent file is read.
    let e = from_spec(&json!("local:/nonexistent/model.gguf"), Path::new("."))
        .err()
        .unwrap();
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
}

/// llama.cpp's tokens for the Gemma prompt of the test below: llama-cpp-python 0.3 on
/// gemma-3-270m-q4_k_m.gguf, `Llama(model_path, vocab_only=True).tokenize(text.encode(),
/// add_bos=False, special=True)`, the text being Gemma 3's chat template rendered by hand
/// (`<bos><start_of_turn>user\nYou are a helpful assistant.\n\nWhat is ...<end_of_turn>\n
/// <start_of_turn>model\nParis.<end_of_turn>\n<start_of_turn>user\nAnd of Spain? ...
/// <end_of_turn>\n<start_of_turn>model\n`).
const GEMMA_PROMPT_TOKENS: [u32; 81] = [
    2, 105, 2364, 107, 3048, 659, 496, 11045, 16326, 236761, 108, 3689, 563, 506, 5279, 529, 7001,
    236881, 138, 7925, 528, 886, 3658, 236787, 120362, 33443, 236764, 236743, 236770, 236778,
    236800, 236812, 236810, 163543, 236743, 255968, 42364, 236761, 106, 107, 105, 4368, 107, 50429,
    236761, 106, 107, 105, 2364, 107, 3133, 529, 14145, 236881, 3714, 13319, 1083, 623, 23458, 844,
    25938, 109, 139, 724, 16764, 236743, 249732, 236743, 464, 382, 366, 236743, 478, 385, 366, 366,
    106, 107, 105, 4368, 107,
];

#[test]
fn needs_local_model_gemma_prompt_tokens_are_llama_cpps() {
    let file = gemma();
    // Spaces in a row, digits, accents, an emoji, a tab, added tokens (`\n\n\n`, three
    // spaces), a control character and characters with no token (written as bytes).
    let mut req = request(
        Purpose::React,
        "You are a helpful assistant.",
        "What is the capital of France?  Answer in one word: na\u{ef}ve caf\u{e9}, 12345 \u{1f600} \t tabs.",
    );
    req.messages.push(Message::Assistant {
        content: "Paris.".into(),
        tool_calls: vec![],
    });
    req.messages.push(Message::User {
        content: "And of Spain? {\"city\": \"Oslo\"}\n\n\n   indented \u{1} \u{2400} \u{13000}"
            .into(),
    });
    let tokens = weft_model::prompt_tokens(&file, &req).unwrap();
    assert_eq!(tokens, GEMMA_PROMPT_TOKENS);
}

/// What llama.cpp replies to the question of the test below, greedily, with weft's repeat
/// penalty (1.1 on the last 64 generated tokens): llama-cpp-python 0.3 on the same file, its
/// first 15 tokens (the 16th is a near-tie, -4.03 against -4.06, between two tokens of no
/// meaning). The file is the pretrained Gemma 3 270M, not the instruction-tuned one, and it
/// carries no chat template: it repeats the turn rather than answering it, in llama.cpp as here.
const GEMMA_REPLY_START: &str =
    "You are a helpful assistant. Answer briefly.\n\nWhat is the capital of France?";

#[tokio::test]
async fn needs_local_model_gemma_a_plain_question_gets_llama_cpps_reply() {
    let file = gemma();
    let m = model(json!({"provider": "local", "file": file, "max_tokens": 40}));
    let req = request(
        Purpose::React,
        "You are a helpful assistant. Answer briefly.",
        "What is the capital of France?",
    );
    let started = std::time::Instant::now();
    let reply = m.complete_boxed(&req, None).await.unwrap();
    let ms = started.elapsed().as_millis();
    eprintln!("reply ({ms} ms): {:?} ({:?})", reply.content, reply.usage);
    assert!(
        reply.content.starts_with(GEMMA_REPLY_START),
        "{:?}",
        reply.content
    );
    assert!(
        !reply.content.contains("<end_of_turn>") && !reply.content.contains("<start_of_turn>"),
        "{:?}",
        reply.content
    );
    assert_eq!(reply.usage.input_tokens, 26, "{:?}", reply.usage);
}

#[tokio::test]
async fn needs_local_model_gemma_a_request_with_tools_and_required_yields_a_valid_call() {
    let file = gemma();
    let tools = vec![
        ToolDef {
            name: "get_weather".into(),
            description: "The current weather of a city.".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}),
        },
        ToolDef {
            name: "add".into(),
            description: "Adds two numbers.".into(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"], "additionalProperties": false}),
        },
    ];
    let mut req = request(
        Purpose::React,
        "You are an assistant. Use the tools to answer.",
        "What is the weather in Oslo right now? Use the get_weather tool.",
    );
    req.tools = tools.clone();
    let m = model(
        json!({"provider": "local", "file": file, "max_tokens": 100, "tool_choice": "required"}),
    );
    let reply = m.complete_boxed(&req, None).await.unwrap();
    assert!(!reply.tool_calls.is_empty(), "calls: {reply:?}");
    for call in &reply.tool_calls {
        let offered = tools.iter().find(|t| t.name == call.name);
        let offered = offered.unwrap_or_else(|| panic!("{} is not offered", call.name));
        let validator = jsonschema::validator_for(&offered.parameters).unwrap();
        assert!(
            validator.is_valid(&call.arguments),
            "{} does not validate against {}",
            call.arguments,
            offered.parameters
        );
        eprintln!("call: {} {}", call.name, call.arguments);
    }
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn needs_local_model_gemma_planner_replies_parse_and_validate() {
    let file = gemma();
    let m = model(json!({"provider": "local", "file": file, "max_tokens": 128}));
    let tools = vec![
        tool(
            "get_weather",
            "The weather of a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        tool(
            "send_email",
            "Send an email.",
            json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"]}),
        ),
    ];
    let schema = weft_core::prompts::planner_schema(&tools, &[]);
    let validator = jsonschema::validator_for(&schema).unwrap();
    let exact = weft_core::prompts::exact_planner_schema(
        &tools,
        &[],
        &weft_core::prompts::PlanScope::default(),
        &[],
    );
    let exact_validator = jsonschema::validator_for(&exact).unwrap();
    let catalog: std::collections::BTreeMap<String, weft_core::tool::ToolInfo> =
        tools.iter().map(|t| (t.name.clone(), t.clone())).collect();
    let tasks = [
        "What is the weather in Oslo?",
        "Tell alice@example.com the weather in Berlin.",
        "Write a haiku about autumn.",
    ];
    for (i, task) in tasks.iter().enumerate() {
        let mut req = request(
            Purpose::Plan,
            weft_core::prompts::PLANNER_ROLE,
            &format!("Tools: get_weather, send_email\nTask: {task}"),
        );
        req.call_index = i as u32;
        req.response_schema = Some(schema.clone());
        req.exact_schema = Some(exact.clone().into());
        let started = std::time::Instant::now();
        let reply = m.complete_boxed(&req, None).await.unwrap();
        let value: Value = serde_json::from_str(&reply.content)
            .unwrap_or_else(|e| panic!("task {task:?}: not JSON ({e}): {}", reply.content));
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "task {task:?}: {} does not validate: {errors:?}",
            reply.content
        );
        assert!(
            exact_validator.is_valid(&value),
            "task {task:?}: {} does not fit the exact schema",
            reply.content
        );
        if value.get("plan").is_some() {
            assert_engine_accepts(task, &reply.content, &value["plan"], &catalog);
        }
        eprintln!(
            "{task:?} ({} ms, {} prompt + {} output tokens): {}",
            started.elapsed().as_millis(),
            reply.usage.input_tokens,
            reply.usage.output_tokens,
            reply.content
        );
    }
}

/// What the benchmarks that send weft's prompt to llama.cpp read: the prompt's text, the first
/// token's text where the file says a tokenizer adds it (Gemma's `<bos>`, which its template
/// writes too; not SmolLM2's, whose template starts with `<|im_start|>`, its BOS, and whose
/// file says none is added), and a reply's calls read as a call reads them.
#[test]
fn needs_local_model_gemma_the_prompt_text_and_a_replys_calls_are_read_as_a_call_reads_them() {
    let mut req = request(Purpose::React, "Be brief.", "Weather in Oslo?");
    req.tools = vec![ToolDef {
        name: "get_weather".into(),
        description: "The weather in a city.".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }];
    let (text, bos) = weft_model::prompt_text(&gemma(), &req).unwrap();
    assert_eq!(bos.as_deref(), Some("<bos>"));
    assert!(text.starts_with("<bos>"), "{text}");
    assert!(
        text.contains("get_weather") && text.contains("Weather in Oslo?"),
        "{text}"
    );
    let (text, bos) = weft_model::prompt_text(&gguf(), &req).unwrap();
    assert_eq!(bos, None);
    assert!(text.starts_with("<|im_start|>system"), "{text}");

    let reply = r#"Let me look. <tool_call>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]</tool_call>"#;
    let (said, calls) = weft_model::read_tool_calls(&req, reply.into());
    assert_eq!(said, "Let me look.");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].arguments, json!({"city": "Oslo"}));
    // A call of a tool that is not offered is no call: the reply stays text.
    let other = r#"<tool_call>[{"name": "send_mail", "arguments": {}}]</tool_call>"#;
    let (said, calls) = weft_model::read_tool_calls(&req, other.into());
    assert!(calls.is_empty());
    assert_eq!(said, other);
}

/// A reply that calls tools and runs out of its budget still gives calls: near the end, of the
/// tokens the grammar allows, those that close the arguments, the list and the calls' tag are
/// taken, and the calls written whole before a cut are read. The question is BFCL's
/// `simple_python_3`, asked as a ReAct agent asks it (bench/bfcl.sh): Gemma 3 270M (the
/// pretrained model) writes the same call again and again, and its reply was cut inside the
/// calls' tag (`...]</`) and read as text, no call at all.
#[tokio::test]
async fn needs_local_model_gemma_calls_cut_by_the_budget_still_end_as_calls() {
    let tool = ToolDef {
        name: "algebra_quadratic_roots".into(),
        description: "Find the roots of a quadratic equation ax^2 + bx + c = 0.".into(),
        parameters: json!({"type": "object", "properties": {
            "a": {"type": "integer", "description": "Coefficient of x^2."},
            "b": {"type": "integer", "description": "Coefficient of x."},
            "c": {"type": "integer", "description": "Constant term."}},
            "required": ["a", "b", "c"]}),
    };
    let mut req = request(
        Purpose::React,
        weft_core::prompts::REACT_ROLE,
        "Find the roots of a quadratic equation with coefficients a=1, b=-3, c=2.",
    );
    req.tools = vec![tool];
    let m = model(
        json!({"provider": "local", "file": gemma(), "max_tokens": 160, "tool_choice": "required"}),
    );
    let reply = m.complete_boxed(&req, None).await.unwrap();
    assert!(reply.usage.output_tokens <= 160, "{reply:?}");
    assert!(
        !reply.tool_calls.is_empty(),
        "no calls read from {:?}",
        reply.content
    );
    for call in &reply.tool_calls {
        assert_eq!(call.name, "algebra_quadratic_roots");
        for k in ["a", "b", "c"] {
            assert!(call.arguments[k].is_i64(), "{}", call.arguments);
        }
    }
}
