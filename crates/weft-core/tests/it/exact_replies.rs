//! The exact schemas of the step executor's, the review's and the response reviewer's replies
//! (the grammar a local model is decoded under) against the engine's own handling of those
//! replies: for random tool sets, skills and step categories, every reply the exact schema of
//! the real request allows (candidates made of replies of every kind, refused ones included,
//! and random mutations of them) is one the engine accepts; and the replies an issue reported
//! (an `ASK_USER` review with no question, `DESIGN_INSTRUCTIONS` in a step with no skill) are
//! outside the exact schema and refused by the engine.
//!
//! The seed is fixed (`PROPTEST_RNG_SEED` sets another) and the count modest (`PROPTEST_CASES`
//! sets another).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value, json};
use weft_core::agent::{Mode, Skill};
use weft_core::agent_loop::{AgentConfig, AgentNext, decide, model_replied};
use weft_core::model::{ModelReply, ModelRequest, Purpose};
use weft_core::{Event, Limits, Plan, State, ToolInfo};

/// The tools an agent may have: one with an optional argument, one with an enum and three
/// required ones, one with no arguments, the built-in question tool and a closed one.
fn tool_pool() -> Vec<ToolInfo> {
    [
        json!({"name": "search", "category": "web", "input_schema": {"type": "object",
            "properties": {"query": {"type": "string", "minLength": 1}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["query"]}}),
        json!({"name": "convert", "category": "money", "input_schema": {"type": "object",
            "properties": {"amount": {"type": "number"}, "from": {"type": "string", "enum": ["EUR", "USD"]}, "to": {"type": "string"}},
            "required": ["amount", "from", "to"]}}),
        json!({"name": "now", "category": "time"}),
        json!({"name": "ask_user", "input_schema": {"type": "object",
            "properties": {"question": {"type": "string"}}, "required": ["question"]}}),
        json!({"name": "notes", "category": "web", "input_schema": {"type": "object",
            "properties": {"text": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["text"], "additionalProperties": false}}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect()
}

/// One generated situation: which tools of the pool the agent has, whether the step has a
/// skill, and the step's category.
#[derive(Clone, Debug)]
struct Setup {
    tools: u8,
    skill: bool,
    category: Option<&'static str>,
}

fn gen_setup() -> impl Strategy<Value = Setup> {
    (
        0u8..32,
        any::<bool>(),
        prop_oneof![
            Just(None),
            Just(Some("web")),
            Just(Some("money")),
            Just(Some("none"))
        ],
    )
        .prop_map(|(tools, skill, category)| Setup {
            tools,
            skill,
            category,
        })
}

fn config(setup: &Setup, review_responses: bool) -> AgentConfig {
    AgentConfig {
        mode: Mode::Plan,
        limits: Limits::default(),
        instructions: String::new(),
        tools: tool_pool()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| setup.tools & (1 << i) != 0)
            .map(|(_, t)| t)
            .collect(),
        skills: vec![Skill {
            name: "summarize".into(),
            description: "short summaries".into(),
            instructions: "Write three lines.".into(),
        }],
        approve_plans: false,
        review_responses,
        recall_memories: false,
        workflow: None,
        budget: None,
        model_costs: Default::default(),
        repeats: Default::default(),
        trust: None,
    }
}

/// A plan-mode session whose accepted plan is one `_description` step `s1` (with the setup's
/// skill and category), driven by the engine until it asks for the step's executor. Returns
/// the state and that request.
fn at_executor(setup: &Setup, cfg: &AgentConfig) -> (State, ModelRequest) {
    let mut step = json!({"_id": "s1", "_description": "do the thing"});
    if setup.skill {
        step["_skill"] = json!("summarize");
    }
    if let Some(c) = setup.category {
        step["_category"] = json!(c);
    }
    let plan = Plan::from_value(&json!([step])).unwrap();
    let mut state = State::new();
    for e in [
        Event::SessionStarted {
            session_id: "s".into(),
            agent: "a".into(),
            input: Value::Null,
            mode: Some(Mode::Plan),
            parent_id: None,
        },
        Event::TurnStarted {
            task: "go".into(),
            input: Value::Null,
        },
        Event::PlanAccepted { plan },
    ] {
        state.apply(&e);
    }
    for _ in 0..10 {
        match decide(&state, cfg) {
            AgentNext::Record(events) => events.iter().for_each(|e| state.apply(e)),
            AgentNext::Start { events, calls } if calls.is_empty() => {
                events.iter().for_each(|e| state.apply(e));
            }
            AgentNext::CallModel { request, step } => {
                assert_eq!(request.purpose, Purpose::Execute);
                assert_eq!(step.as_deref(), Some("s1"));
                return (state, request);
            }
            other => panic!("the engine should call the executor, not {other:?}"),
        }
    }
    panic!("the engine never called the executor");
}

fn reply(v: &Value) -> ModelReply {
    ModelReply {
        content: v.to_string(),
        ..ModelReply::default()
    }
}

/// The validator of the exact schema of `req`.
fn exact(req: &ModelRequest) -> jsonschema::Validator {
    let schema = req
        .exact_schema
        .as_ref()
        .expect("the request has an exact schema");
    jsonschema::validator_for(&schema.schema).expect("the exact schema compiles")
}

/// Whether the exact schema of `req` allows `v`.
fn allowed(req: &ModelRequest, v: &Value) -> bool {
    exact(req).is_valid(v)
}

/// Why the engine refused `events` (its reply to a model reply), if it did: a refused reply, a
/// blocked call, a failed step, an empty question for the person, or a call whose arguments
/// do not match the tool's input schema (the check the tool layer makes before any call).
fn refusal(cfg: &AgentConfig, events: &[Event]) -> Option<String> {
    for e in events {
        match e {
            Event::ModelReplyRejected { reason, .. } => return Some(reason.clone()),
            Event::ToolCallBlocked { reason, .. } => return Some(reason.clone()),
            Event::StepFailed { error, .. } => return Some(error.message.clone()),
            Event::WaitingForUser { request } if request.question.trim().is_empty() => {
                return Some("an empty question for the person".into());
            }
            Event::StepAction { action, detail, .. } if action == "USE_TOOL" => {
                let tool = detail["tool"].as_str().unwrap_or_default();
                let Some(info) = cfg.tools.iter().find(|t| t.name == tool) else {
                    return Some(format!("a call of `{tool}`, which the agent does not have"));
                };
                let valid = jsonschema::validator_for(&info.input_schema)
                    .expect("the input schema compiles")
                    .is_valid(&detail["arguments"]);
                if !valid {
                    return Some(format!("arguments of `{tool}` do not match its schema"));
                }
            }
            _ => {}
        }
    }
    None
}

/// Replies of every kind for the step executor, right and wrong, for the whole tool pool.
fn executor_candidates() -> Vec<Value> {
    let mut out = vec![
        json!({"action": "USE_TOOL", "tool": "search", "arguments": {"query": "rust"}}),
        json!({"action": "USE_TOOL", "tool": "search", "arguments": {"query": "rust", "limit": 3}}),
        json!({"action": "USE_TOOL", "tool": "search", "arguments": {"query": ""}}),
        json!({"action": "USE_TOOL", "tool": "search", "arguments": {"limit": 0}}),
        json!({"action": "USE_TOOL", "tool": "convert", "arguments": {"amount": 3, "from": "EUR", "to": "USD"}}),
        json!({"action": "USE_TOOL", "tool": "convert", "arguments": {"amount": "3", "from": "GBP", "to": "USD"}}),
        json!({"action": "USE_TOOL", "tool": "now", "arguments": {}}),
        json!({"action": "USE_TOOL", "tool": "now"}),
        json!({"action": "USE_TOOL", "tool": "ask_user", "arguments": {"question": "Which city?"}}),
        json!({"action": "USE_TOOL", "tool": "ask_user", "arguments": {"question": " "}}),
        json!({"action": "USE_TOOL", "tool": "notes", "arguments": {"text": "x", "tags": ["a"]}}),
        json!({"action": "USE_TOOL", "tool": "notes", "arguments": {"text": "x", "color": "red"}}),
        json!({"action": "USE_TOOL", "tool": "weather", "arguments": {"city": "Oslo"}}),
        json!({"action": "USE_TOOL", "tool": "search", "arguments": "{\"query\": \"rust\"}"}),
        json!({"action": "USE_TOOL", "arguments": {"query": "rust"}}),
        json!({"action": "REQUEST_TOOL_INPUT", "tool": "convert", "arguments": {"amount": 3}, "missing": ["from", "to"], "question": "From which currency to which?"}),
        json!({"action": "REQUEST_TOOL_INPUT", "tool": "convert", "arguments": {"amount": 3, "from": "EUR", "to": "USD"}, "missing": ["to"], "question": "To?"}),
        json!({"action": "REQUEST_TOOL_INPUT", "tool": "search", "arguments": {}, "missing": ["query"], "question": "What should I look for?"}),
        json!({"action": "REQUEST_TOOL_INPUT", "tool": "search", "arguments": {}, "missing": ["query"], "question": ""}),
        json!({"action": "REQUEST_TOOL_INPUT", "tool": "weather", "arguments": {}, "missing": ["city"], "question": "Where?"}),
        json!({"action": "REQUEST_TOOL_INPUT", "tool": "notes", "arguments": {"tags": []}, "missing": ["text"], "question": "What text?"}),
        json!({"action": "DIRECT_RESPONSE", "response": "It is done."}),
        json!({"action": "DIRECT_RESPONSE", "response": ""}),
        json!({"action": "DIRECT_RESPONSE"}),
        json!({"action": "DESIGN_INSTRUCTIONS", "instructions": "Keep it to three lines."}),
        json!({"action": "DESIGN_INSTRUCTIONS", "instructions": " "}),
        json!({"action": "DESIGN_INSTRUCTIONS"}),
        json!({"action": "ASK_USER", "question": "Which city?"}),
        json!({"action": "use_tool", "tool": "now", "arguments": {}}),
        json!({"tool": "now", "arguments": {}}),
        json!({}),
    ];
    out.push(json!([1, 2]));
    out
}

/// Replies of every kind for the review, right and wrong.
fn review_candidates() -> Vec<Value> {
    let mut out = Vec::new();
    for d in [
        "CONTINUE",
        "REPLAN",
        "FINAL_RESPONSE",
        "ASK_USER",
        "CANNOT_COMPLETE",
        "continue",
        "STOP",
    ] {
        out.push(json!({"decision": d}));
        out.push(json!({"decision": d, "reason": "the results suffice"}));
        out.push(json!({"decision": d, "reason": ""}));
        out.push(json!({"decision": d, "reason": "unclear", "question": "Which city?"}));
        out.push(json!({"decision": d, "reason": "", "question": " "}));
    }
    out.push(json!({"reason": "no decision"}));
    out
}

/// Replies of every kind for the response reviewer, right and wrong.
fn response_review_candidates() -> Vec<Value> {
    let mut out = Vec::new();
    for v in [
        "ACCEPT",
        "REFINE",
        "ASK_USER",
        "CANNOT_COMPLETE",
        "accept",
        "MAYBE",
    ] {
        out.push(json!({"verdict": v}));
        out.push(json!({"verdict": v, "feedback": "name the source"}));
        out.push(json!({"verdict": v, "feedback": ""}));
        out.push(json!({"verdict": v, "feedback": "\n"}));
    }
    out.push(json!({"feedback": "no verdict"}));
    out
}

/// Keys a mutation touches, and values it puts there.
const KEYS: &[&str] = &[
    "action",
    "tool",
    "arguments",
    "missing",
    "question",
    "response",
    "instructions",
    "decision",
    "reason",
    "verdict",
    "feedback",
    "query",
    "amount",
    "extra",
];

fn values() -> Vec<Value> {
    vec![
        json!(""),
        json!(" "),
        json!("x"),
        json!(1),
        Value::Null,
        json!({}),
        json!([]),
        json!("search"),
        json!("now"),
        json!("USE_TOOL"),
        json!("DESIGN_INSTRUCTIONS"),
        json!("REQUEST_TOOL_INPUT"),
        json!("ASK_USER"),
        json!("REFINE"),
        json!(["query"]),
    ]
}

/// A mutation: remove a key, set a key, or set a key of `arguments` (which is made an object
/// first when it is not one).
type Mutation = (u8, usize, usize);

fn mutate(mut v: Value, mutations: &[Mutation]) -> Value {
    let vals = values();
    for &(kind, k, x) in mutations {
        let key = KEYS[k % KEYS.len()];
        let val = vals[x % vals.len()].clone();
        let Some(obj) = v.as_object_mut() else {
            return v;
        };
        match kind % 3 {
            0 => {
                obj.remove(key);
            }
            1 => {
                obj.insert(key.into(), val);
            }
            _ => {
                let args = obj
                    .entry("arguments")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !args.is_object() {
                    *args = Value::Object(Map::new());
                }
                if let Some(a) = args.as_object_mut() {
                    a.insert(key.into(), val);
                }
            }
        }
    }
    v
}

fn gen_mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 0..4)
}

fn proptest_config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(64),
        rng_seed: std::env::var("PROPTEST_RNG_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(RngSeed::Fixed(7), RngSeed::Fixed),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Every executor reply the exact schema of the step's request allows, the engine accepts.
    #[test]
    fn executor_replies_the_exact_schema_allows_are_accepted(
        setup in gen_setup(),
        picks in proptest::collection::vec((any::<usize>(), gen_mutations()), 1..24),
    ) {
        let cfg = config(&setup, false);
        let (state, req) = at_executor(&setup, &cfg);
        let candidates = executor_candidates();
        // The unmutated candidates every time, then the random mutations.
        let all = candidates.iter().cloned().chain(
            picks.iter().map(|(i, m)| mutate(candidates[i % candidates.len()].clone(), m)),
        );
        let schema = exact(&req);
        let mut allowed = 0;
        for v in all {
            if !schema.is_valid(&v) {
                continue;
            }
            allowed += 1;
            let events = model_replied(&state, &cfg, Purpose::Execute, Some("s1"), reply(&v));
            prop_assert_eq!(refusal(&cfg, &events), None, "{} in {:?}", v, setup);
        }
        // A direct response at least.
        prop_assert!(allowed > 0);
    }

    /// Every review reply and every response review reply their exact schemas allow, the
    /// engine accepts.
    #[test]
    fn review_replies_the_exact_schema_allows_are_accepted(
        setup in gen_setup(),
        picks in proptest::collection::vec((any::<usize>(), gen_mutations(), any::<bool>()), 1..24),
    ) {
        let cfg = config(&setup, true);
        let (state, _) = at_executor(&setup, &cfg);
        let review = exact(&weft_core::prompts::review(&state, &cfg));
        let response_review = exact(&weft_core::prompts::response_review(&state, &cfg));
        let mut allowed = 0;
        let reviews = review_candidates();
        let verdicts = response_review_candidates();
        let cases = reviews
            .iter()
            .map(|v| (v.clone(), true))
            .chain(verdicts.iter().map(|v| (v.clone(), false)))
            .chain(picks.iter().map(|(i, m, is_review)| {
                let pool = if *is_review { &reviews } else { &verdicts };
                (mutate(pool[i % pool.len()].clone(), m), *is_review)
            }));
        for (v, is_review) in cases {
            let (req, purpose) = if is_review {
                (&review, Purpose::Review)
            } else {
                (&response_review, Purpose::ResponseReview)
            };
            if !req.is_valid(&v) {
                continue;
            }
            allowed += 1;
            let events = model_replied(&state, &cfg, purpose, None, reply(&v));
            prop_assert_eq!(refusal(&cfg, &events), None, "{} ({:?})", v, purpose);
        }
        prop_assert!(allowed > 0);
    }
}

/// The replies of the issue are outside the exact schemas, and the engine refuses them; their
/// right forms are inside and accepted.
#[test]
fn the_refused_replies_of_the_issue_are_outside_the_exact_schemas() {
    let no_skill = Setup {
        tools: 0b11111,
        skill: false,
        category: None,
    };
    let cfg = config(&no_skill, true);
    let (state, exec) = at_executor(&no_skill, &cfg);

    let design = json!({"action": "DESIGN_INSTRUCTIONS", "instructions": "Keep it short."});
    assert!(!allowed(&exec, &design));
    let events = model_replied(&state, &cfg, Purpose::Execute, Some("s1"), reply(&design));
    assert!(refusal(&cfg, &events).is_some(), "{events:?}");

    let review = weft_core::prompts::review(&state, &cfg);
    for ask in [
        json!({"decision": "ASK_USER"}),
        json!({"decision": "ASK_USER", "reason": "", "question": ""}),
    ] {
        assert!(!allowed(&review, &ask), "{ask}");
        let events = model_replied(&state, &cfg, Purpose::Review, None, reply(&ask));
        assert!(refusal(&cfg, &events).is_some(), "{ask}: {events:?}");
    }
    let response_review = weft_core::prompts::response_review(&state, &cfg);
    let ask = json!({"verdict": "ASK_USER", "feedback": ""});
    assert!(!allowed(&response_review, &ask));
    let events = model_replied(&state, &cfg, Purpose::ResponseReview, None, reply(&ask));
    assert!(refusal(&cfg, &events).is_some(), "{events:?}");

    // The right forms are allowed and accepted.
    let ask =
        json!({"decision": "ASK_USER", "reason": "the city is unknown", "question": "Which city?"});
    assert!(allowed(&review, &ask));
    let events = model_replied(&state, &cfg, Purpose::Review, None, reply(&ask));
    assert_eq!(refusal(&cfg, &events), None);
    let call = json!({"action": "USE_TOOL", "tool": "search", "arguments": {"query": "rust"}});
    assert!(allowed(&exec, &call));
    let blank = json!({"action": "USE_TOOL", "tool": "ask_user", "arguments": {"question": ""}});
    assert!(!allowed(&exec, &blank));
    let ask = json!({"action": "REQUEST_TOOL_INPUT", "tool": "convert", "arguments": {"amount": 3},
        "missing": ["from"], "question": "From which currency?"});
    assert!(allowed(&exec, &ask));
    let events = model_replied(&state, &cfg, Purpose::Execute, Some("s1"), reply(&ask));
    assert_eq!(refusal(&cfg, &events), None);

    let skill = Setup {
        skill: true,
        ..no_skill
    };
    let (state, exec) = at_executor(&skill, &cfg);
    assert!(allowed(&exec, &design));
    let events = model_replied(&state, &cfg, Purpose::Execute, Some("s1"), reply(&design));
    assert_eq!(refusal(&cfg, &events), None);
}
