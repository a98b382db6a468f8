//! `weft-bench local-eval`: how often a small model's planner replies and workflow step outputs
//! are usable, the model run in the process (`local:`, constrained by the reply's schema) and
//! behind an OpenAI-compatible server in each form of structured output the `openai` provider
//! knows (`json_object` with the schema, constrained by the server's grammar; the schema written
//! into the prompt; and `json_schema`, which is only tried once, to show whether the server takes
//! it).
//!
//! Nothing here builds a prompt or reads a reply on its own: a request is the one the engine
//! makes for a session's first model call (`agent_loop::decide` on a session that has just been
//! given the task), and a reply is read as the engine reads it (`agent_loop::model_replied`: a
//! planner reply must give a plan the engine accepts, which is `graph::validate` against the
//! agent's tools, their input schemas and the plan's references; a workflow step's output must
//! pass `workflow::validate_output` against the step's `output_schema`). On top of that, each
//! task of the task file (`bench/local-eval/tasks.yaml`) has a check of what a sensible reply
//! holds. With `--out FILE` the results are written as JSON, which `bench/local-eval/times.py`
//! reads for the time per call and `refusals.py` for why the engine refused planner replies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_core::agent::Mode;
use weft_core::agent_loop::{self, AgentConfig, AgentNext};
use weft_core::model::{ModelReply, ModelRequest, Purpose};
use weft_core::{Event, Plan, RunStatus, State};
use weft_model::{ModelError, OpenAiModel, ProviderConfig, ProviderKind, SchemaWire, SharedModel};

use crate::BenchError;

/// The task file: planner tasks and workflow tasks.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    /// Tasks for plan-mode agents: the planner's reply is scored.
    #[serde(default)]
    pub planner: Vec<TaskSpec>,
    /// Tasks for workflow agents: the output of the first step (which has an `output_schema`
    /// and no tools) is scored.
    #[serde(default)]
    pub workflow: Vec<TaskSpec>,
}

/// One task: an agent file, the task, its input, and what a sensible reply holds.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The agent file, relative to the task file.
    pub agent: String,
    /// The task, as `weft run AGENT TASK` gives it.
    pub task: String,
    /// The run's input (`--input`).
    #[serde(default)]
    pub input: Value,
    /// What a sensible reply holds.
    pub check: Check,
}

/// What makes a valid reply sensible.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// Planner tasks: tools the plan must call, each in some step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<String>,
    /// Workflow tasks: fields of the output and the value each must have (a missing field
    /// counts as `null`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub equals: Map<String, Value>,
    /// Workflow tasks: fields of the output whose text must hold the given text (case
    /// ignored).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub contains: Map<String, Value>,
}

/// What a reply is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A planner call of a plan-mode agent.
    Planner,
    /// The output of a workflow step with an `output_schema`.
    Workflow,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Planner => "planner",
            Self::Workflow => "workflow",
        }
    }
}

/// A task made ready: the session's state when the model is asked, the agent's configuration,
/// and the request the engine sends.
pub struct Case {
    pub kind: Kind,
    /// `planner[3]`, `workflow[0]`: where the task is in the file.
    pub id: String,
    /// The agent's name.
    pub agent: String,
    pub task: String,
    pub state: State,
    pub config: AgentConfig,
    pub request: ModelRequest,
    pub check: Check,
}

/// Reads the task file and makes every task ready (agent files read, tools built, requests
/// made). A mistake names the file, the task and the field.
pub async fn load(path: &Path) -> Result<Vec<Case>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::Io {
        what: format!("read the task file {}", path.display()),
        source: e,
    })?;
    let file: TaskFile = serde_yaml_ng::from_str(&text).map_err(|e| {
        BenchError::Setup(format!(
            "task file {}: {e}; see bench/local-eval/tasks.yaml for its form",
            path.display()
        ))
    })?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut cases = Vec::new();
    for (kind, specs) in [
        (Kind::Planner, &file.planner),
        (Kind::Workflow, &file.workflow),
    ] {
        for (i, spec) in specs.iter().enumerate() {
            let id = format!("{}[{i}]", kind.as_str());
            let case = make_case(kind, &id, spec, base)
                .await
                .map_err(|e| BenchError::Setup(format!("task file {}: {id}{e}", path.display())))?;
            cases.push(case);
        }
    }
    Ok(cases)
}

/// One task made ready; an error starts with the field (`.agent: ...`).
async fn make_case(kind: Kind, id: &str, spec: &TaskSpec, base: &Path) -> Result<Case, String> {
    let file: PathBuf = base.join(&spec.agent);
    let loaded = weft_host::load::agent(&file)
        .await
        .map_err(|e| format!(".agent: {e}"))?;
    let want = match kind {
        Kind::Planner => Mode::Plan,
        Kind::Workflow => Mode::Workflow,
    };
    if loaded.spec.mode != want {
        return Err(format!(
            ".agent: {} is a {:?} agent; {} tasks need a {want:?} agent",
            file.display(),
            loaded.spec.mode,
            kind.as_str()
        ));
    }
    // The agent's model is not asked: the backends under test are. The configuration only
    // reads a model's prices and output bound.
    let placeholder: SharedModel = Arc::new(weft_model::ScriptedModel::new("local-eval", vec![]));
    let agent = weft_runtime::Agent::new(
        &loaded.spec,
        Arc::new(loaded.tools),
        placeholder,
        &json!({}),
        &spec.input,
    )
    .map_err(|e| format!(".agent: {e}"))?;
    check_check(kind, &spec.check, &agent.config)?;
    let mut state = State::new();
    state.apply(&Event::SessionStarted {
        session_id: format!("local-eval-{id}"),
        agent: agent.name.clone(),
        input: spec.input.clone(),
        mode: Some(want),
        parent_id: None,
    });
    for e in agent_loop::start_turn(&spec.task, spec.input.clone()) {
        state.apply(&e);
    }
    let request = first_model_call(&mut state, &agent.config)?;
    let expected = match kind {
        Kind::Planner => Purpose::Plan,
        Kind::Workflow => Purpose::Workflow,
    };
    if request.purpose != expected || request.response_schema.is_none() {
        return Err(format!(
            ".agent: the session's first model call is a `{}` call{}; a {} task needs a `{}` call with a reply schema (for a workflow: a first step with an `output_schema` and no tools)",
            request.purpose.as_str(),
            if request.response_schema.is_none() {
                " without a reply schema"
            } else {
                ""
            },
            kind.as_str(),
            expected.as_str()
        ));
    }
    Ok(Case {
        kind,
        id: id.to_owned(),
        agent: agent.name,
        task: spec.task.clone(),
        state,
        config: agent.config,
        request,
        check: spec.check.clone(),
    })
}

/// The check must fit the kind of task, and name the agent's tools.
fn check_check(kind: Kind, check: &Check, cfg: &AgentConfig) -> Result<(), String> {
    match kind {
        Kind::Planner => {
            if check.calls.is_empty() || !check.equals.is_empty() || !check.contains.is_empty() {
                return Err(".check: a planner task's check is `calls: [TOOL, ...]`".into());
            }
            for c in &check.calls {
                if !cfg.tools.iter().any(|t| &t.name == c) {
                    return Err(format!(
                        ".check.calls: `{c}` is not a tool of the agent (its tools: {})",
                        cfg.tools
                            .iter()
                            .map(|t| t.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        Kind::Workflow => {
            if !check.calls.is_empty() || (check.equals.is_empty() && check.contains.is_empty()) {
                return Err(
                    ".check: a workflow task's check is `equals: {FIELD: VALUE}` and/or `contains: {FIELD: TEXT}`"
                        .into(),
                );
            }
            if let Some((k, v)) = check.contains.iter().find(|(_, v)| !v.is_string()) {
                return Err(format!(".check.contains.{k}: give a text, found {v}"));
            }
        }
    }
    Ok(())
}

/// Drives a session that has just been given its task to its first model call, as the runtime
/// does: events `decide` records are applied, and the first `CallModel` is the request.
pub fn first_model_call(state: &mut State, cfg: &AgentConfig) -> Result<ModelRequest, String> {
    for _ in 0..16 {
        match agent_loop::decide(state, cfg) {
            AgentNext::Record(events) => {
                for e in &events {
                    state.apply(e);
                }
            }
            AgentNext::CallModel { request, .. } => return Ok(request),
            other => {
                return Err(format!(
                    ": the session's first move is not a model call: {other:?}"
                ));
            }
        }
    }
    Err(": the session made no model call in its first 16 moves".into())
}

/// How one reply fared.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Score {
    /// The engine reads JSON in it (`agent_loop::extract_json`).
    pub parsed: bool,
    /// That JSON validates against the request's reply schema (the planner's schema, or the
    /// step's `output_schema`).
    pub schema_valid: bool,
    /// Planner: the engine accepts it as a plan (`plan_accepted`: valid against the agent's
    /// tools, their input schemas and the plan's references). Workflow: the output passes the
    /// engine's check against the step's `output_schema`.
    pub accepted: bool,
    /// Planner: the reply is a `direct_response`, no plan (the engine ends the run with it).
    pub direct: bool,
    /// Accepted, and every argument it reads by reference from what is typed (the run's input,
    /// the State, a step of a tool with an `output_schema`) fits its parameter
    /// (`weft_core::fits`): the plan's calls would not be refused for their arguments.
    pub arguments_fit: bool,
    /// Accepted, the task's check holds, and (a plan) its arguments fit.
    pub sensible: bool,
    /// What is wrong, when something is (the engine's words where the engine refused it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Scores a reply text of `case`'s model call.
pub fn score(case: &Case, text: &str) -> Score {
    let mut s = Score::default();
    let value = match agent_loop::extract_json(text) {
        Ok(v) => v,
        Err(e) => {
            s.problem = Some(e);
            return s;
        }
    };
    s.parsed = true;
    let schema_problem = case
        .request
        .response_schema
        .as_ref()
        .and_then(|schema| schema_problem(schema, &value));
    s.schema_valid = schema_problem.is_none();
    match case.kind {
        Kind::Planner => score_plan(case, text, &mut s),
        Kind::Workflow => score_output(case, &value, &mut s),
    }
    if s.problem.is_none() {
        s.problem = schema_problem;
    }
    s
}

fn schema_problem(schema: &Value, value: &Value) -> Option<String> {
    match jsonschema::validator_for(schema) {
        Ok(v) => v.iter_errors(value).next().map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                format!("schema: {e}")
            } else {
                format!("schema: at {at}: {e}")
            }
        }),
        Err(e) => Some(format!("the reply schema does not compile: {e}")),
    }
}

fn score_plan(case: &Case, text: &str, s: &mut Score) {
    let reply = ModelReply {
        content: text.to_owned(),
        ..ModelReply::default()
    };
    let events = agent_loop::model_replied(&case.state, &case.config, Purpose::Plan, None, reply);
    for e in &events {
        match e {
            Event::PlanAccepted { plan } => {
                s.accepted = true;
                let misfits = misfits(case, plan);
                s.arguments_fit = misfits.is_empty();
                s.sensible = s.arguments_fit && plan_holds(&case.check, plan);
                if !s.arguments_fit {
                    s.problem = Some(format!("arguments that do not fit: {}", misfits.join("; ")));
                } else if !s.sensible {
                    s.problem = Some(format!(
                        "not sensible: the plan calls {} (the check wants {})",
                        tools_called(plan),
                        case.check.calls.join(", ")
                    ));
                }
            }
            Event::PlanRejected { problems } => {
                s.problem = Some(format!(
                    "plan rejected: {}",
                    problems
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            Event::ModelReplyRejected { reason, .. } => s.problem = Some(reason.clone()),
            Event::RunFinished {
                status: RunStatus::Completed,
                answer: Some(_),
                ..
            } => {
                s.direct = true;
                s.problem = Some("a direct response, no plan".into());
            }
            _ => {}
        }
    }
}

/// The arguments of `plan` that read by reference something typed (the run's input, the
/// State, a step of a tool with an `output_schema`) that does not fit their parameter.
fn misfits(case: &Case, plan: &Plan) -> Vec<String> {
    use weft_core::fits::{Source, fitting_paths};
    use weft_core::plan::{REF_MARK, RefRoot, Reference};
    let info = |name: &str| case.config.tools.iter().find(|t| t.name == name);
    let any = Value::Object(Map::new());
    let mut out = Vec::new();
    for step in &plan.steps {
        let Some(tool) = step.tool.as_deref().and_then(info) else {
            continue;
        };
        for (k, v) in &step.args {
            let Some(r) = v
                .as_str()
                .and_then(|t| t.strip_prefix(REF_MARK))
                .and_then(|t| Reference::parse(t).ok())
            else {
                continue;
            };
            let source = match &r.root {
                RefRoot::Input => Source::Value(case.state.input()),
                RefRoot::State => Source::Value(case.state.data()),
                RefRoot::Step(id) => {
                    let output = plan
                        .steps
                        .iter()
                        .find(|s| &s.id == id)
                        .and_then(|s| s.tool.as_deref())
                        .and_then(info)
                        .and_then(|t| t.output_schema.as_ref());
                    match output {
                        Some(schema) => Source::Schema(schema),
                        None => continue,
                    }
                }
                RefRoot::Item => continue,
            };
            let param = tool.input_schema["properties"].get(k).unwrap_or(&any);
            if !fitting_paths(source, param).is_some_and(|p| p.contains(&r.path)) {
                out.push(format!("{}.{k} = {v}", step.id));
            }
        }
    }
    out
}

fn tools_called(plan: &Plan) -> String {
    let names: Vec<&str> = plan
        .steps
        .iter()
        .map(|s| s.tool.as_deref().unwrap_or("(a described step)"))
        .collect();
    names.join(", ")
}

/// Every tool of the check is called by some step of the plan.
fn plan_holds(check: &Check, plan: &Plan) -> bool {
    check
        .calls
        .iter()
        .all(|c| plan.steps.iter().any(|s| s.tool.as_deref() == Some(c)))
}

fn score_output(case: &Case, value: &Value, s: &mut Score) {
    let Some(schema) = &case.request.response_schema else {
        return;
    };
    if let Err(e) = weft_core::workflow::validate_output(schema, value) {
        s.problem = Some(format!("output refused: {e}"));
        return;
    }
    s.accepted = true;
    match output_problem(&case.check, value) {
        None => s.sensible = true,
        Some(p) => s.problem = Some(format!("not sensible: {p}")),
    }
}

/// What of the check the output misses.
fn output_problem(check: &Check, value: &Value) -> Option<String> {
    for (k, want) in &check.equals {
        let got = value.get(k).unwrap_or(&Value::Null);
        if got != want {
            return Some(format!("`{k}` is {got}, the check wants {want}"));
        }
    }
    for (k, want) in &check.contains {
        let want = want.as_str().unwrap_or_default().to_lowercase();
        let got = value.get(k).and_then(Value::as_str).unwrap_or_default();
        if !got.to_lowercase().contains(&want) {
            return Some(format!(
                "`{k}` is {got:?}, the check wants it to hold {want:?}"
            ));
        }
    }
    None
}

/// Where the replies come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The GGUF model run in this process (`local:`), constrained by the reply schema.
    Local,
    /// The server, asked with `response_format: {type: json_object, schema}`.
    JsonObject,
    /// The server, the schema written into the prompt.
    Prompt,
}

impl Backend {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "local" => Some(Self::Local),
            "json_object" => Some(Self::JsonObject),
            "prompt" => Some(Self::Prompt),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::JsonObject => "json_object",
            Self::Prompt => "prompt",
        }
    }

    /// How the table names it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Local => "in-process (`local:`, llguidance)",
            Self::JsonObject => "server, `json_object` + schema (grammar)",
            Self::Prompt => "server, schema in the prompt",
        }
    }
}

/// One reply generated.
#[derive(Clone, Debug)]
pub struct Generated {
    pub text: String,
    /// The reply's tool calls, as the provider read them (the server's: none, its text only).
    pub tool_calls: Vec<weft_core::model::ToolCall>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The in-process model, one instance per seed (they share the loaded file).
pub struct Local {
    file: PathBuf,
    temperature: f64,
    max_tokens: u32,
    tool_choice: &'static str,
    models: Vec<(u64, SharedModel)>,
}

impl Local {
    pub fn new(file: PathBuf, temperature: f64, max_tokens: u32) -> Self {
        Self {
            file,
            temperature,
            max_tokens,
            tool_choice: "auto",
            models: Vec::new(),
        }
    }

    /// The same, with the provider's `tool_choice` (`auto`, `required`, `none`).
    pub fn with_tool_choice(self, tool_choice: &'static str) -> Self {
        Self {
            tool_choice,
            ..self
        }
    }

    /// One reply to `req`, drawn with `seed`.
    pub async fn generate(&mut self, req: &ModelRequest, seed: u64) -> Result<Generated, String> {
        let model = match self.models.iter().find(|(s, _)| *s == seed) {
            Some((_, m)) => m.clone(),
            None => {
                let spec = json!({
                    "provider": "local",
                    "file": self.file.display().to_string(),
                    "temperature": self.temperature,
                    "seed": seed,
                    "max_tokens": self.max_tokens,
                    "tool_choice": self.tool_choice,
                });
                let m = weft_model::from_spec(&spec, Path::new(".")).map_err(|e| e.to_string())?;
                self.models.push((seed, m.clone()));
                m
            }
        };
        let reply = model
            .complete_boxed(req, None)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Generated {
            text: reply.content,
            tool_calls: reply.tool_calls,
            input_tokens: reply.usage.input_tokens,
            output_tokens: reply.usage.output_tokens,
        })
    }
}

/// The OpenAI-compatible server. Each request's body is the one the `openai` provider makes
/// for the form of structured output asked for (`OpenAiModel::request_body`), sent once: the
/// provider's own retries (an invalid reply asked for again, twice) are left out, so that each
/// figure is one generation, as in-process.
pub struct Server {
    model: OpenAiModel,
    client: reqwest::Client,
    url: String,
}

impl Server {
    pub fn new(
        base_url: &str,
        name: &str,
        temperature: f64,
        max_tokens: u32,
    ) -> Result<Self, BenchError> {
        let map = json!({
            "provider": "openai",
            "name": name,
            "base_url": base_url,
            "api_key": "none",
            "temperature": temperature,
            "max_tokens": max_tokens,
            "stream": false,
        });
        let cfg = ProviderConfig::from_spec(ProviderKind::OpenAi, name, map.as_object(), &|_| None)
            .map_err(|e| BenchError::Setup(format!("--server-url {base_url}: {e}")))?;
        let url = format!("{}/chat/completions", cfg.base_url);
        let model = OpenAiModel::new(cfg)
            .map_err(|e| BenchError::Setup(format!("--server-url {base_url}: {e}")))?;
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(600))
            .build()
            .map_err(|e| BenchError::Setup(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { model, client, url })
    }

    /// The model behind the server, as the `openai` provider (for a call through its own
    /// fallbacks).
    pub fn model(&self) -> &OpenAiModel {
        &self.model
    }

    /// One request in the form `wire`; an HTTP error is `Err` with its status and body.
    pub async fn generate(
        &self,
        req: &ModelRequest,
        wire: SchemaWire,
        seed: u64,
    ) -> Result<Generated, String> {
        let mut body = self.model.request_body(req, false, wire);
        body["seed"] = json!(seed);
        let resp = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("POST {}: {e}", self.url))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| format!("POST {}: reading the body: {e}", self.url))?;
        if !status.is_success() {
            return Err(format!("HTTP {}: {}", status.as_u16(), cut(&text, 400)));
        }
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("the server's answer is not JSON ({e}): {}", cut(&text, 200)))?;
        let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        Ok(Generated {
            text: v
                .pointer("/choices/0/message/content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            tool_calls: Vec::new(),
            input_tokens: n("/usage/prompt_tokens"),
            output_tokens: n("/usage/completion_tokens"),
        })
    }
}

/// `s`'s first `max` bytes (fewer, to end on a character), marked `...` when cut.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// One scored call.
#[derive(Clone, Debug, Serialize)]
pub struct CallRecord {
    pub backend: Backend,
    pub kind: Kind,
    pub case: String,
    pub agent: String,
    pub seed: u64,
    pub ms: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub score: Score,
    /// The call failed (no reply to score).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The reply's text (its first 2,000 bytes).
    pub reply: String,
}

/// Asks `backend` for `case` with `seed` and scores the reply.
pub async fn call(
    backend: Backend,
    local: Option<&mut Local>,
    server: Option<&Server>,
    case: &Case,
    seed: u64,
) -> CallRecord {
    let began = Instant::now();
    let generated = match (backend, local, server) {
        (Backend::Local, Some(l), _) => l.generate(&case.request, seed).await,
        (Backend::JsonObject, _, Some(s)) => {
            s.generate(&case.request, SchemaWire::JsonObject, seed)
                .await
        }
        (Backend::Prompt, _, Some(s)) => s.generate(&case.request, SchemaWire::Prompt, seed).await,
        _ => Err(format!("backend `{}` is not set up", backend.as_str())),
    };
    let ms = began.elapsed().as_secs_f64() * 1000.0;
    let (g, error) = match generated {
        Ok(g) => (Some(g), None),
        Err(e) => (None, Some(e)),
    };
    let text = g.as_ref().map(|g| g.text.as_str()).unwrap_or_default();
    let score = match &error {
        Some(e) => Score {
            problem: Some(format!("the call failed: {e}")),
            ..Score::default()
        },
        None => score(case, text),
    };
    CallRecord {
        backend,
        kind: case.kind,
        case: case.id.clone(),
        agent: case.agent.clone(),
        seed,
        ms,
        input_tokens: g.as_ref().map_or(0, |g| g.input_tokens),
        output_tokens: g.as_ref().map_or(0, |g| g.output_tokens),
        score,
        error,
        reply: cut(text, 2000),
    }
}

/// The figures of one backend on one kind of reply.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub backend: Backend,
    pub kind: Kind,
    pub calls: usize,
    pub failed_calls: usize,
    pub parsed: usize,
    pub schema_valid: usize,
    pub accepted: usize,
    /// Planner replies accepted whose references into typed sources fit their parameters.
    pub arguments_fit: usize,
    pub direct: usize,
    pub sensible: usize,
    pub median_s: f64,
    pub mean_s: f64,
    pub mean_output_tokens: f64,
    /// Output tokens over the calls' whole time (prompt included).
    pub output_tokens_per_s: f64,
}

/// One summary per backend and kind present in `records`, in their order.
pub fn summarize(records: &[CallRecord]) -> Vec<Summary> {
    let mut keys: Vec<(Backend, Kind)> = Vec::new();
    for r in records {
        if !keys.contains(&(r.backend, r.kind)) {
            keys.push((r.backend, r.kind));
        }
    }
    keys.into_iter()
        .map(|(backend, kind)| {
            let rs: Vec<&CallRecord> = records
                .iter()
                .filter(|r| r.backend == backend && r.kind == kind)
                .collect();
            let count = |f: &dyn Fn(&Score) -> bool| rs.iter().filter(|r| f(&r.score)).count();
            let mut secs: Vec<f64> = rs.iter().map(|r| r.ms / 1000.0).collect();
            secs.sort_by(f64::total_cmp);
            let n = rs.len().max(1) as f64;
            let total_s: f64 = secs.iter().sum();
            let out: u64 = rs.iter().map(|r| r.output_tokens).sum();
            Summary {
                backend,
                kind,
                calls: rs.len(),
                failed_calls: rs.iter().filter(|r| r.error.is_some()).count(),
                parsed: count(&|s| s.parsed),
                schema_valid: count(&|s| s.schema_valid),
                accepted: count(&|s| s.accepted),
                arguments_fit: count(&|s| s.arguments_fit),
                direct: count(&|s| s.direct),
                sensible: count(&|s| s.sensible),
                median_s: median(&secs),
                mean_s: total_s / n,
                mean_output_tokens: out as f64 / n,
                output_tokens_per_s: if total_s > 0.0 {
                    out as f64 / total_s
                } else {
                    0.0
                },
            }
        })
        .collect()
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The summaries as a Markdown table.
pub fn table(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| replies | backend | calls | parse | schema | accepted by the engine | arguments fit | direct response | sensible | median s/call | mean s/call | mean output tokens |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for s in summaries {
        let pct = |k: usize| {
            if s.calls == 0 {
                "-".to_owned()
            } else {
                format!("{k} ({:.0}%)", 100.0 * k as f64 / s.calls as f64)
            }
        };
        let calls = if s.failed_calls > 0 {
            format!("{} ({} failed)", s.calls, s.failed_calls)
        } else {
            s.calls.to_string()
        };
        out.push_str(&format!(
            "| {} | {} | {calls} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.0} |\n",
            s.kind.as_str(),
            s.backend.label(),
            pct(s.parsed),
            pct(s.schema_valid),
            pct(s.accepted),
            if s.kind == Kind::Planner {
                pct(s.arguments_fit)
            } else {
                "-".to_owned()
            },
            if s.kind == Kind::Planner {
                pct(s.direct)
            } else {
                "-".to_owned()
            },
            pct(s.sensible),
            s.median_s,
            s.mean_s,
            s.mean_output_tokens,
        ));
    }
    out
}

/// What a `json_schema` request did: the server's answer to one, as the provider would send it.
#[derive(Clone, Debug, Serialize)]
pub struct JsonSchemaProbe {
    pub case: String,
    /// `accepted`, or `rejected`.
    pub outcome: String,
    /// The HTTP error (status and the start of the body), or the reply.
    pub detail: String,
    /// What the `openai` provider learned from one call through its own fallbacks, starting
    /// from nothing (`json_schema` first): the form it settled on.
    pub provider_learned: Option<String>,
}

/// Sends `case`'s request once as `json_schema`, then once through the provider's own path
/// (which falls back and learns), and says what happened.
pub async fn probe_json_schema(server: &Server, case: &Case) -> JsonSchemaProbe {
    let (outcome, detail) = match server
        .generate(&case.request, SchemaWire::JsonSchema, 0)
        .await
    {
        Ok(g) => ("accepted".to_owned(), cut(&g.text, 400)),
        Err(e) => ("rejected".to_owned(), e),
    };
    let cfg = server.model.config();
    let key = weft_model::capabilities::key(&cfg.base_url, &cfg.name);
    let learned = match weft_model::Model::complete(&server.model, &case.request, None).await {
        Ok(_) | Err(ModelError::Malformed { .. }) => weft_model::capabilities::get(&key).structured,
        Err(e) => Some(format!("(the call failed: {e})")),
    };
    JsonSchemaProbe {
        case: case.id.clone(),
        outcome,
        detail,
        provider_learned: learned,
    }
}

/// The machine's load average (1, 5, 15 minutes), where the system tells it.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|s| s.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}
