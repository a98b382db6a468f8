//! `weft-bench bfcl`: the Berkeley Function Calling Leaderboard's questions (`bfcl-eval`'s
//! `simple`, `multiple` and `parallel` categories, prepared by `bench/bfcl/prepare.py`) asked of
//! a small model as a ReAct agent asks its first model call, in two ways on the same GGUF file:
//!
//! - `local`: weft's in-process model (`local:`), whose reply follows the grammar of the
//!   offered tools (`tool_choice: auto`, the agent file's default; `local_required` with
//!   `tool_choice: required`);
//! - `server`: llama.cpp's server (llama-cpp-python's), sent the same prompt text through its
//!   plain completions endpoint with no grammar, its reply read as the `local` provider reads
//!   one.
//!
//! Nothing here builds a prompt on its own: the request is the engine's (`agent_loop::decide` on
//! a ReAct session just given the question, the BFCL functions as its tools) and the prompt is
//! the `local` provider's rendering of it. Every call's tool calls are written as JSON lines;
//! `bench/bfcl/score.py` scores them with BFCL's own AST checker.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weft_core::agent::Mode;
use weft_core::agent_loop::{self, AgentConfig};
use weft_core::model::{ModelRequest, ToolCall};
use weft_core::{Event, Limits, State, ToolInfo};

use crate::BenchError;
use crate::local_eval::{Generated, Local, cut, first_model_call};

/// One question as `prepare.py` writes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// BFCL's id (`simple_python_12`).
    pub id: String,
    /// `simple`, `multiple` or `parallel`.
    pub category: String,
    /// The user's question (BFCL's user turn).
    pub question: String,
    /// The functions offered, as BFCL converts them for a function-calling model (names with
    /// `.` written with `_`; BFCL's types as JSON Schema's).
    pub tools: Vec<Function>,
}

/// One offered function.
#[derive(Clone, Debug, Deserialize)]
pub struct Function {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub parameters: Value,
}

/// A question made ready: the agent's configuration and the request the engine sends.
pub struct Case {
    pub question: Question,
    pub request: ModelRequest,
}

/// Reads the questions file (JSON lines); a bad line names the file, the line and the fault.
pub fn load(path: &Path) -> Result<Vec<Case>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::Io {
        what: format!("read the questions file {}", path.display()),
        source: e,
    })?;
    let mut cases = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = || format!("questions file {}, line {}", path.display(), i + 1);
        let q: Question = serde_json::from_str(line).map_err(|e| {
            BenchError::Setup(format!(
                "{}: {e}; bench/bfcl/prepare.py writes this file",
                at()
            ))
        })?;
        let request =
            request(&q).map_err(|e| BenchError::Setup(format!("{} ({}){e}", at(), q.id)))?;
        cases.push(Case {
            question: q,
            request,
        });
    }
    Ok(cases)
}

/// The request a ReAct agent offered the question's functions makes for its first model call.
fn request(q: &Question) -> Result<ModelRequest, String> {
    let mut tools = Vec::new();
    for f in &q.tools {
        let info: ToolInfo = serde_json::from_value(json!({
            "name": f.name,
            "description": f.description,
            "input_schema": f.parameters,
        }))
        .map_err(|e| format!(": function `{}`: {e}", f.name))?;
        tools.push(info);
    }
    let cfg = AgentConfig {
        mode: Mode::React,
        limits: Limits::default(),
        instructions: String::new(),
        tools,
        skills: Vec::new(),
        approve_plans: false,
        review_responses: false,
        recall_memories: false,
        workflow: None,
        budget: None,
        model_costs: weft_core::budget::ModelCosts::default(),
        repeats: weft_core::repeats::Rules::default(),
        trust: None,
    };
    let mut state = State::new();
    state.apply(&Event::SessionStarted {
        session_id: format!("bfcl-{}", q.id),
        agent: "bfcl".into(),
        input: Value::Null,
        mode: Some(Mode::React),
        parent_id: None,
    });
    for e in agent_loop::start_turn(&q.question, Value::Null) {
        state.apply(&e);
    }
    first_model_call(&mut state, &cfg)
}

/// Where the replies come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// In the process, the tools' grammar, `tool_choice: auto`.
    Local,
    /// In the process, the tools' grammar, `tool_choice: required`.
    LocalRequired,
    /// llama.cpp's server, the same prompt, no grammar.
    Server,
}

impl Backend {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "local" => Some(Self::Local),
            "local_required" => Some(Self::LocalRequired),
            "server" => Some(Self::Server),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::LocalRequired => "local_required",
            Self::Server => "server",
        }
    }
}

/// llama.cpp's server, asked through its plain completions endpoint.
pub struct Server {
    client: reqwest::Client,
    url: String,
    temperature: f64,
    max_tokens: u32,
}

impl Server {
    pub fn new(base_url: &str, temperature: f64, max_tokens: u32) -> Result<Self, BenchError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(600))
            .build()
            .map_err(|e| BenchError::Setup(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            client,
            url: format!("{}/completions", base_url.trim_end_matches('/')),
            temperature,
            max_tokens,
        })
    }

    /// The reply to `prompt` (the rendered text, without the file's first token where the
    /// server adds it as the file says), read as the `local` provider reads one.
    async fn generate(&self, req: &ModelRequest, prompt: &str) -> Result<Generated, String> {
        let body = json!({
            "prompt": prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": 0,
            // The `local` provider's repeat penalty (llama-cpp-python's default, said here).
            "repeat_penalty": 1.1,
        });
        let resp = self
            .client
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("POST {}: {e}", self.url))?;
        let status = resp.status();
        let v: Value = resp
            .json()
            .await
            .map_err(|e| format!("POST {}: the answer is not JSON: {e}", self.url))?;
        if !status.is_success() {
            return Err(format!("HTTP {}: {v}", status.as_u16()));
        }
        let text = v
            .pointer("/choices/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        let (text, tool_calls) = weft_model::read_tool_calls(req, text);
        Ok(Generated {
            text,
            tool_calls,
            input_tokens: n("/usage/prompt_tokens"),
            output_tokens: n("/usage/completion_tokens"),
        })
    }
}

/// One call's record, a line of `--out`.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub id: String,
    pub category: String,
    pub backend: Backend,
    /// The model file's name.
    pub model: String,
    /// The tool calls read from the reply, in order.
    pub calls: Vec<Value>,
    /// The reply's text besides its calls (its first 1,000 bytes).
    pub text: String,
    /// The reply calls a tool, or begins to (`<tool_call>` in its text: calls that could not be
    /// read stay in the text).
    pub attempted_call: bool,
    /// Every call names an offered function and its arguments are valid against that
    /// function's parameters (and there is at least one).
    pub well_formed: bool,
    /// Why it is not well formed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    pub ms: f64,
    /// The prompt's tokens by weft's tokenizer, and as the engine that answered counted them.
    pub prompt_tokens: usize,
    pub engine_prompt_tokens: u64,
    pub output_tokens: u64,
}

/// Asks `backend` for `case` and records the reply.
pub async fn call(
    backend: Backend,
    local: Option<&mut Local>,
    server: Option<&Server>,
    file: &Path,
    case: &Case,
) -> Record {
    let prompt_tokens = weft_model::prompt_tokens(file, &case.request).map_or(0, |t| t.len());
    let began = Instant::now();
    let generated = match (backend, local, server) {
        (Backend::Local | Backend::LocalRequired, Some(l), _) => l.generate(&case.request, 0).await,
        (Backend::Server, _, Some(s)) => match weft_model::prompt_text(file, &case.request) {
            Ok((text, bos)) => {
                let prompt = bos
                    .and_then(|b| text.strip_prefix(b.as_str()))
                    .unwrap_or(&text);
                s.generate(&case.request, prompt).await
            }
            Err(e) => Err(e.to_string()),
        },
        _ => Err(format!("backend `{}` is not set up", backend.as_str())),
    };
    let ms = began.elapsed().as_secs_f64() * 1000.0;
    let (g, error) = match generated {
        Ok(g) => (g, None),
        Err(e) => (
            Generated {
                text: String::new(),
                tool_calls: Vec::new(),
                input_tokens: 0,
                output_tokens: 0,
            },
            Some(format!("the call failed: {e}")),
        ),
    };
    let problem = error.or_else(|| malformed(&case.request, &g.tool_calls));
    Record {
        id: case.question.id.clone(),
        category: case.question.category.clone(),
        backend,
        model: file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        calls: g
            .tool_calls
            .iter()
            .map(|c| json!({"name": c.name, "arguments": c.arguments}))
            .collect(),
        attempted_call: !g.tool_calls.is_empty() || g.text.contains("<tool_call>"),
        text: cut(&g.text, 1000),
        well_formed: problem.is_none(),
        problem,
        ms,
        prompt_tokens,
        engine_prompt_tokens: g.input_tokens,
        output_tokens: g.output_tokens,
    }
}

/// What is wrong with the calls, if anything: none at all, or one whose arguments its
/// function's parameters refuse (a call naming no offered function is not read as a call).
fn malformed(req: &ModelRequest, calls: &[ToolCall]) -> Option<String> {
    if calls.is_empty() {
        return Some("no tool call".into());
    }
    for c in calls {
        let Some(tool) = req.tools.iter().find(|t| t.name == c.name) else {
            return Some(format!("`{}` is not an offered function", c.name));
        };
        match jsonschema::validator_for(&tool.parameters) {
            Ok(v) => {
                if let Some(e) = v.iter_errors(&c.arguments).next() {
                    return Some(format!("`{}`: arguments: {e}", c.name));
                }
            }
            Err(e) => return Some(format!("`{}`: its parameters do not compile: {e}", c.name)),
        }
    }
    None
}

/// The in-process model of `file` for `backend`, at temperature 0.
pub fn local(file: PathBuf, backend: Backend, max_tokens: u32) -> Option<Local> {
    let l = Local::new(file, 0.0, max_tokens);
    match backend {
        Backend::Local => Some(l),
        Backend::LocalRequired => Some(l.with_tool_choice("required")),
        Backend::Server => None,
    }
}

/// Well-formed calls per backend and category, as a Markdown table (BFCL's accuracy is
/// `score.py`'s).
pub fn table(records: &[Record]) -> String {
    let mut keys: Vec<(Backend, &str)> = Vec::new();
    for r in records {
        if !keys.contains(&(r.backend, r.category.as_str())) {
            keys.push((r.backend, &r.category));
        }
    }
    let mut out = String::from(
        "| backend | category | questions | replies calling | well-formed calls | mean s/question |\n| --- | --- | ---: | ---: | ---: | ---: |\n",
    );
    for (b, c) in keys {
        let rs: Vec<&Record> = records
            .iter()
            .filter(|r| r.backend == b && r.category == c)
            .collect();
        let ok = rs.iter().filter(|r| r.well_formed).count();
        let calling = rs.iter().filter(|r| r.attempted_call).count();
        let secs: f64 = rs.iter().map(|r| r.ms / 1000.0).sum();
        out.push_str(&format!(
            "| {} | {c} | {} | {calling} | {ok} | {:.2} |\n",
            b.as_str(),
            rs.len(),
            secs / rs.len().max(1) as f64
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::model::{Message, Purpose};

    fn question() -> Question {
        serde_json::from_value(json!({
            "id": "simple_python_0",
            "category": "simple",
            "question": "Find the area of a triangle with a base of 10 and a height of 5.",
            "tools": [{
                "name": "calculate_triangle_area",
                "description": "Area of a triangle.",
                "parameters": {
                    "type": "object",
                    "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}},
                    "required": ["base", "height"]
                }
            }]
        }))
        .unwrap()
    }

    #[test]
    fn the_request_is_a_react_agents_first_call_offering_the_functions() {
        let q = question();
        let req = request(&q).unwrap();
        assert_eq!(req.purpose, Purpose::React);
        assert_eq!(req.tools.len(), 1);
        assert_eq!(req.tools[0].name, "calculate_triangle_area");
        assert_eq!(req.tools[0].parameters, q.tools[0].parameters);
        let users: Vec<&str> = req
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::User { content } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(users, [q.question.as_str()]);
    }

    #[test]
    fn a_call_is_well_formed_only_with_arguments_its_parameters_accept() {
        let req = request(&question()).unwrap();
        let call = |args: Value| ToolCall {
            id: "c".into(),
            name: "calculate_triangle_area".into(),
            arguments: args,
            provider_id: None,
        };
        assert_eq!(malformed(&req, &[]).as_deref(), Some("no tool call"));
        assert_eq!(
            malformed(&req, &[call(json!({"base": 10, "height": 5}))]),
            None
        );
        let wrong = malformed(&req, &[call(json!({"base": "10", "height": 5}))]).unwrap();
        assert!(wrong.contains("arguments"), "{wrong}");
        let missing = malformed(&req, &[call(json!({"base": 10}))]).unwrap();
        assert!(missing.contains("height"), "{missing}");
    }

    #[test]
    fn a_bad_questions_line_names_the_file_and_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        std::fs::write(&path, "\n{\"id\": \"x\"}\n").unwrap();
        let Err(e) = load(&path) else {
            panic!("a line without its fields was read")
        };
        let said = e.to_string();
        assert!(said.contains("q.jsonl, line 2"), "{said}");
        assert!(said.contains("prepare.py"), "{said}");
    }
}
