//! The `local` provider: a GGUF model run in the process, on the CPU (feature `local-model`).
//!
//! `model: local:PATH.gguf`, or `{provider: local, file, context_size, temperature, seed,
//! max_tokens}`. The file is read with candle's GGUF reader and run as candle's quantized
//! Llama (SmolLM2, Llama, and other `llama` architecture files) or as Gemma 3 (`gemma3` files,
//! by weft's own [`gemma3`], built on candle's tensors and quantized matrix products); its
//! tokenizer is built from the file's own vocabulary and its prompt from the file's chat
//! template. When a request has a reply schema or offers tools, llguidance masks the tokens the
//! grammar does not allow at each step (see [`constrain`]), so the reply always parses.
//!
//! A file is loaded once per process, on its first call, and shared by every model that names
//! it; one reply is generated at a time. The number of CPU threads is candle's, set by
//! `CANDLE_NUM_THREADS` (or `RAYON_NUM_THREADS`) for the whole process.

mod constrain;
mod gemma3;
mod vocab;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama;
use llguidance::{Matcher, ParserFactory};
use serde_json::{Map, Value, json};

use crate::config::LOCAL_KEYS as KEYS;
use crate::config::ToolChoice;
use crate::{DeltaSink, Message, Model, ModelError, ModelReply, ModelRequest, Usage};
use vocab::Vocab;

const PROVIDER: &str = "local";

/// The longest context candle's quantized Llama holds (its rotary table's length).
const MAX_CONTEXT: usize = 4096;

/// The context used when the mapping sets none.
const DEFAULT_CONTEXT: usize = 4096;

/// The reply's length when neither the request nor the mapping sets one.
const DEFAULT_MAX_TOKENS: u32 = 512;

/// Gemma's chat template (Gemma 3's, text only), for `gemma3` files that carry none: the system
/// message opens the first user turn, the assistant's role is `model`. Gemma's own template
/// also refuses turns that do not alternate; this one does not (a turn's tool results are user
/// turns in a row).
const GEMMA: &str = "{{ bos_token }}{% if messages[0].role == 'system' %}{% set first = messages[0].content ~ '\n\n' %}{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}{% for message in rest %}<start_of_turn>{{ 'model' if message.role == 'assistant' else message.role }}\n{{ first if loop.first else '' }}{{ message.content | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/// ChatML, for files that carry no chat template.
const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Settings of a local model, read from an agent file's `model`.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalConfig {
    /// The GGUF file.
    pub file: PathBuf,
    /// The most tokens of prompt and reply together (at most 4096).
    pub context_size: usize,
    /// Sampling temperature; 0 picks the likeliest token each time.
    pub temperature: f32,
    /// The seed of the sampler's random numbers, so a run can be repeated.
    pub seed: u64,
    /// The reply's length when the request sets none.
    pub max_tokens: u32,
    /// What the reply may do with offered tools: `auto` (the default) lets the model call or
    /// answer; `required`, the reply calls tools until a tool has answered since the person last
    /// spoke (then it may answer); `none`, it never calls.
    pub tool_choice: ToolChoice,
}

impl LocalConfig {
    /// Reads `local:PATH` (`rest` is the path) or the mapping; the path is relative to
    /// `base_dir`.
    pub fn from_spec(
        rest: &str,
        map: Option<&Map<String, Value>>,
        base_dir: &Path,
    ) -> Result<Self, ModelError> {
        let mut cfg = Self {
            file: base_dir.join(rest),
            context_size: DEFAULT_CONTEXT,
            temperature: 0.0,
            seed: 0,
            max_tokens: DEFAULT_MAX_TOKENS,
            tool_choice: ToolChoice::Auto,
        };
        let Some(m) = map else { return Ok(cfg) };
        if m.contains_key("threads") {
            // candle sizes its worker pool once per process, from the environment, when the
            // first model runs: a per-model count could not be kept.
            return Err(ModelError::Config(
                "the `model` mapping: `threads` cannot be set per model: a local model's CPU \
                 threads are the process's, set by the environment variable CANDLE_NUM_THREADS \
                 (default: the number of physical cores); remove `threads` and start weft with \
                 CANDLE_NUM_THREADS=N"
                    .into(),
            ));
        }
        if let Some(k) = m.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(ModelError::Config(format!(
                "the `model` mapping: unknown key `{k}` for the local provider; known keys: {}",
                KEYS.join(", ")
            )));
        }
        let count = |key: &str, max: u64| -> Result<Option<u64>, ModelError> {
            m.get(key)
                .map(|v| {
                    v.as_u64().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                        ModelError::Config(format!(
                            "the `model` mapping: `{key}` must be a whole number from 1 to {max}, found {v}"
                        ))
                    })
                })
                .transpose()
        };
        if let Some(n) = count("context_size", MAX_CONTEXT as u64)? {
            cfg.context_size = n as usize;
        }
        if let Some(n) = count("max_tokens", MAX_CONTEXT as u64)? {
            cfg.max_tokens = n as u32;
        }
        if let Some(v) = m.get("seed") {
            cfg.seed = v.as_u64().ok_or_else(|| {
                ModelError::Config(format!(
                    "the `model` mapping: `seed` must be a whole number, found {v}"
                ))
            })?;
        }
        if let Some(v) = m.get("tool_choice") {
            cfg.tool_choice = match v.as_str() {
                Some("auto") => ToolChoice::Auto,
                Some("required") => ToolChoice::Required,
                Some("none") => ToolChoice::None,
                _ => {
                    return Err(ModelError::Config(format!(
                        "the `model` mapping: `tool_choice` of the local provider must be `auto`, \
                         `required` or `none`, found {v}"
                    )));
                }
            };
        }
        if let Some(v) = m.get("temperature") {
            cfg.temperature = v
                .as_f64()
                .filter(|t| (0.0..=2.0).contains(t))
                .ok_or_else(|| {
                    ModelError::Config(format!(
                        "the `model` mapping: `temperature` must be a number from 0 to 2, found {v}"
                    ))
                })? as f32;
        }
        Ok(cfg)
    }
}

/// A GGUF model run in the process. Cheap to build: the file is loaded on the first call (and
/// shared with every other model of the process that names the same file).
pub struct LocalModel {
    cfg: LocalConfig,
    name: String,
    engine: tokio::sync::OnceCell<Arc<Engine>>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl LocalModel {
    /// A model of the file `cfg.file`; refused when the file cannot be opened.
    pub fn new(cfg: LocalConfig) -> Result<Self, ModelError> {
        if let Err(e) = std::fs::metadata(&cfg.file) {
            return Err(ModelError::Config(format!(
                "local model {}: cannot open the file: {e}; give the path of a .gguf file, relative to the agent file",
                cfg.file.display()
            )));
        }
        let stem = cfg
            .file
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Self {
            name: format!("{PROVIDER}:{stem}"),
            cfg,
            engine: tokio::sync::OnceCell::new(),
        })
    }

    async fn engine(&self) -> Result<Arc<Engine>, ModelError> {
        self.engine
            .get_or_try_init(|| {
                let file = self.cfg.file.clone();
                async move {
                    tokio::task::spawn_blocking(move || Engine::shared(&file))
                        .await
                        .map_err(|e| ModelError::Config(format!("loading the model failed: {e}")))?
                }
            })
            .await
            .cloned()
    }
}

/// The loaded files of the process, by path: each loaded once while a model uses it.
static LOADED: LazyLock<Mutex<HashMap<PathBuf, Weak<Engine>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A model's weights, by architecture (`general.architecture`). A clone is cheap: tensors are
/// shared, and the KV caches grow by new tensors, not in place.
#[derive(Clone)]
enum ModelWeights {
    Llama(quantized_llama::ModelWeights),
    Gemma3(gemma3::ModelWeights),
}

impl ModelWeights {
    /// The next-token scores after reading `input` (shape 1 × tokens) from position `at`.
    fn forward(&mut self, input: &Tensor, at: usize) -> candle_core::Result<Tensor> {
        match self {
            ModelWeights::Llama(w) => w.forward(input, at),
            ModelWeights::Gemma3(w) => w.forward(input, at),
        }
    }

    /// Forgets what was read.
    fn clear_kv_cache(&mut self) {
        match self {
            ModelWeights::Llama(w) => w.clear_kv_cache(),
            ModelWeights::Gemma3(w) => w.clear_kv_cache(),
        }
    }
}

/// A loaded file: its weights (one generation at a time), vocabulary and chat template.
struct Engine {
    file: PathBuf,
    weights: Mutex<ModelWeights>,
    /// The model after reading each of the last prompts ([`PREFIXES`], newest last): a prompt
    /// that begins with one of them is read from where it ends. A session's next request
    /// repeats its last one and adds to it, so only what was added is read again.
    prefixes: Mutex<Vec<Prefix>>,
    vocab: Vocab,
    factory: ParserFactory,
    template: String,
    /// The context the model was trained with (`llama.context_length`, `gemma3.context_length`).
    trained_context: usize,
}

/// A prompt already read, and the model with it in its KV cache (a clone of the weights is
/// cheap: tensors are shared, and the cache's grow by new tensors, not in place).
struct Prefix {
    tokens: Vec<u32>,
    weights: ModelWeights,
}

/// How many read prompts are kept (the sessions of a process take turns on one model).
const PREFIXES: usize = 4;

/// What candle's error says, without the backtrace candle captures into it when
/// `RUST_BACKTRACE` is set: a user-facing message never carries one.
fn said(e: &candle_core::Error) -> String {
    use candle_core::Error;
    match e {
        Error::WithBacktrace { inner, .. } => said(inner),
        Error::Context { inner, context } => format!("{context}: {}", said(inner)),
        Error::WithPath { inner, path } => format!("{}: {}", path.display(), said(inner)),
        other => other.to_string(),
    }
}

fn bad_file(file: &Path, what: impl std::fmt::Display) -> ModelError {
    ModelError::Config(format!(
        "local model {}: {what}; the file must be a complete GGUF model (download it again if it was cut short)",
        file.display()
    ))
}

impl Engine {
    /// The loaded model of `file`: the one already loaded in this process, or a new load.
    fn shared(file: &Path) -> Result<Arc<Engine>, ModelError> {
        let key = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        // The lock is held through the load, so two sessions starting at once load it once. A
        // load that panicked (a malformed file can make candle panic) leaves the lock poisoned;
        // the map holds only weak references to finished loads, so later loads go on with it.
        let mut loaded = LOADED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = loaded.get(&key).and_then(Weak::upgrade) {
            return Ok(e);
        }
        let engine = Arc::new(Self::load(file)?);
        loaded.retain(|_, w| w.strong_count() > 0);
        loaded.insert(key, Arc::downgrade(&engine));
        Ok(engine)
    }

    fn load(file: &Path) -> Result<Engine, ModelError> {
        let (mut reader, content, arch) = read_header(file)?;
        if arch != "llama" && arch != "gemma3" {
            return Err(bad_file(
                file,
                format!(
                    "its architecture is `{arch}` (general.architecture); weft runs `llama` files (SmolLM2, Llama) and `gemma3` files (Gemma 3)"
                ),
            ));
        }
        let vocab = vocab::from_gguf(&content).map_err(|e| bad_file(file, e))?;
        let template = chat_template(&content, &arch);
        let trained_context = content
            .metadata
            .get(&format!("{arch}.context_length"))
            .and_then(|v| v.to_u32().ok())
            .map_or(MAX_CONTEXT, |n| n as usize);
        fn weights<R: std::io::Read + std::io::Seek>(
            arch: &str,
            content: Content,
            reader: &mut R,
        ) -> candle_core::Result<ModelWeights> {
            Ok(if arch == "gemma3" {
                ModelWeights::Gemma3(gemma3::ModelWeights::from_gguf(
                    content,
                    reader,
                    &Device::Cpu,
                    MAX_CONTEXT,
                )?)
            } else {
                ModelWeights::Llama(quantized_llama::ModelWeights::from_gguf(
                    content,
                    reader,
                    &Device::Cpu,
                )?)
            })
        }
        let weights = if content
            .tensor_infos
            .values()
            .any(|t| SLOW_TYPES.contains(&t.ggml_dtype))
        {
            let mut converted =
                std::io::Cursor::new(to_fast_types(&content, &mut reader).map_err(|e| {
                    bad_file(file, format!("cannot load the weights: {}", said(&e)))
                })?);
            let content = Content::read(&mut converted)
                .map_err(|e| bad_file(file, format!("cannot load the weights: {}", said(&e))))?;
            weights(&arch, content, &mut converted)
        } else {
            weights(&arch, content, &mut reader)
        }
        .map_err(|e| bad_file(file, format!("cannot load the weights: {}", said(&e))))?;
        let mut factory = ParserFactory::new_simple(&vocab.env)
            .map_err(|e| bad_file(file, format!("cannot index its vocabulary: {e}")))?;
        factory.quiet();
        Ok(Engine {
            file: file.to_path_buf(),
            weights: Mutex::new(weights),
            prefixes: Mutex::new(Vec::new()),
            vocab,
            factory,
            template,
            trained_context,
        })
    }

    /// The prompt: the request's messages through the chat template, with the tools (when
    /// offered) described in the system message.
    fn prompt(&self, req: &ModelRequest) -> Result<String, ModelError> {
        Self::render(&self.template, &self.vocab, &self.file, req)
    }

    fn render(
        template: &str,
        vocab: &Vocab,
        file: &Path,
        req: &ModelRequest,
    ) -> Result<String, ModelError> {
        let mut messages: Vec<Value> = Vec::new();
        let mut system = String::new();
        for m in req.messages.iter() {
            match m {
                Message::System { content } => {
                    if !system.is_empty() {
                        system.push_str("\n\n");
                    }
                    system.push_str(content);
                }
                Message::User { content } => {
                    messages.push(json!({"role": "user", "content": content}));
                }
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut text = content.clone();
                    if !tool_calls.is_empty() {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&constrain::calls_text(tool_calls));
                    }
                    messages.push(json!({"role": "assistant", "content": text}));
                }
                Message::Tool {
                    name,
                    content,
                    is_error,
                    ..
                } => {
                    // Said as the user's turn (chat templates of small models have no tool
                    // role), with what to do next: without it, a small model calls the same
                    // tool again and again.
                    let text = if *is_error {
                        format!(
                            "The tool {name} failed: {content}\nAnswer, or call a tool to try another way."
                        )
                    } else {
                        format!("The tool {name} returned: {content}\nAnswer from this result.")
                    };
                    messages.push(json!({"role": "user", "content": text}));
                }
            }
        }
        if !req.tools.is_empty() {
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&constrain::tools_prompt(&req.tools));
        }
        if !system.is_empty() {
            messages.insert(0, json!({"role": "system", "content": system}));
        }
        let mut env = minijinja::Environment::new();
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        let ctx = json!({
            "messages": messages,
            "add_generation_prompt": true,
            "bos_token": vocab.bos,
            "eos_token": vocab.eos,
        });
        env.render_str(template, ctx).map_err(|e| {
            ModelError::Config(format!(
                "local model {}: its chat template (tokenizer.chat_template) failed: {e}",
                file.display()
            ))
        })
    }

    /// Generates one reply (blocking: run it off the async threads).
    fn generate(
        &self,
        prompt: &[u32],
        constraint: Option<constrain::Constraint>,
        limits: Limits,
        deltas: Option<DeltaSink>,
        cancelled: &AtomicBool,
    ) -> Result<Generated, ModelError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| ModelError::Malformed {
            provider: PROVIDER.into(),
            message: format!("{}: {what}: {e}", self.file.display()),
            body: String::new(),
            usage: Usage::default(),
        };
        let parser = |grammar| {
            self.factory.create_parser(grammar).map_err(|e| {
                ModelError::Config(format!(
                    "local model: the reply's schema or tools cannot be turned into a grammar: {e}"
                ))
            })
        };
        let (mut matcher, mut stages, closers) = match constraint {
            Some(c) => (
                Some(Matcher::new(Ok(parser(c.grammar)?))),
                c.stages,
                c.closers,
            ),
            None => (None, None, &[][..]),
        };
        let mut generated: Vec<u32> = Vec::new();
        // One generation at a time. It works on a copy of the weights: a generation that
        // panicked leaves the lock poisoned but the weights as they were.
        let base = self
            .weights
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut weights, reused) = self.read_from(&base, prompt);
        let mut rng = fastrand::Rng::with_seed(limits.seed);
        let input = Tensor::new(&prompt[reused..], &Device::Cpu)
            .and_then(|t| t.unsqueeze(0))
            .map_err(|e| fail("preparing the prompt", &said(&e)))?;
        let mut logits = weights
            .forward(&input, reused)
            .map_err(|e| fail("reading the prompt", &said(&e)))?;
        self.keep(prompt, &weights);
        let mut out: Vec<u8> = Vec::new();
        let mut recent: Vec<u32> = Vec::with_capacity(REPEAT_WINDOW);
        let mut sent = 0;
        let mut tokens = 0u32;
        let mut finish = "length";
        while tokens < limits.max_tokens {
            if cancelled.load(Ordering::Relaxed) {
                return Err(ModelError::Cancelled);
            }
            let mut scores: Vec<f32> = logits
                .squeeze(0)
                .and_then(|l| l.to_dtype(candle_core::DType::F32))
                .and_then(|l| l.to_vec1())
                .map_err(|e| fail("reading the scores", &said(&e)))?;
            if let Some(m) = matcher.as_mut() {
                let mask = m
                    .compute_mask_or_eos()
                    .map_err(|e| fail("constraining the reply", &e))?;
                for (i, s) in scores.iter_mut().enumerate() {
                    if !mask.is_allowed(i as u32) {
                        *s = f32::NEG_INFINITY;
                    }
                }
            }
            penalize_repeats(&mut scores, &recent);
            // Near the end of the budget, a constrained reply is closed: of the tokens allowed,
            // the end of the reply, else the likeliest that only closes strings, lists, objects
            // and (a reply that may call tools) the calls' tag, so that the reply parses rather
            // than stopping mid-way.
            let closing = matcher.is_some()
                && limits.max_tokens - tokens <= (limits.max_tokens / 8).max(CLOSING_RESERVE);
            let tok = match closing
                .then(|| self.closing_token(&scores, in_string(&out), closers))
                .flatten()
            {
                Some(t) => t,
                None => sample(&scores, limits.temperature, &mut rng)
                    .ok_or_else(|| fail("sampling", &"no token is allowed"))?,
            };
            if self.vocab.stops.contains(&tok) {
                finish = "stop";
                break;
            }
            tokens += 1;
            if recent.len() == REPEAT_WINDOW {
                recent.remove(0);
            }
            recent.push(tok);
            if let Some(m) = matcher.as_mut() {
                m.consume_token(tok)
                    .map_err(|e| fail("constraining the reply", &e))?;
            }
            out.extend_from_slice(&self.vocab.bytes(tok));
            generated.push(tok);
            // More of a staged list is written: the grammar is built again, typed by it, and
            // reads the reply so far again (every stage allows what the one before allowed up
            // to there). One that cannot read it leaves the grammar in use as it was.
            if let Some(grammar) = stages.as_mut().and_then(|s| s.next(&out)) {
                let mut again = Matcher::new(Ok(parser(grammar)?));
                match again.consume_tokens(&generated) {
                    Ok(()) => matcher = Some(again),
                    Err(e) => {
                        tracing::warn!(
                            "local model: the reply's next grammar refused the reply so far ({e}); going on with the one in use"
                        );
                        stages = None;
                    }
                }
            }
            // Stream the part that is whole characters.
            let whole = match std::str::from_utf8(&out[sent..]) {
                Ok(_) => out.len(),
                Err(e) => sent + e.valid_up_to(),
            };
            if whole > sent {
                if let Some(d) = &deltas {
                    d(&String::from_utf8_lossy(&out[sent..whole]));
                }
                sent = whole;
            }
            if tokens >= limits.max_tokens || prompt.len() + tokens as usize >= limits.context {
                break;
            }
            let next = Tensor::new(&[tok], &Device::Cpu)
                .and_then(|t| t.unsqueeze(0))
                .map_err(|e| fail("preparing the next step", &said(&e)))?;
            logits = weights
                .forward(&next, prompt.len() + tokens as usize - 1)
                .map_err(|e| fail("generating", &said(&e)))?;
        }
        Ok(Generated {
            text: String::from_utf8_lossy(&out).into_owned(),
            output_tokens: tokens,
            reused,
            finish,
        })
    }

    /// The model to read `prompt` with, and how many of its first tokens it has read already:
    /// the longest kept prompt that `prompt` begins with (and goes on past), else none.
    fn read_from(&self, base: &ModelWeights, prompt: &[u32]) -> (ModelWeights, usize) {
        let kept = self
            .prefixes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match kept
            .iter()
            .filter(|p| p.tokens.len() < prompt.len() && prompt.starts_with(&p.tokens))
            .max_by_key(|p| p.tokens.len())
        {
            Some(p) => (p.weights.clone(), p.tokens.len()),
            None => {
                let mut w = base.clone();
                w.clear_kv_cache();
                (w, 0)
            }
        }
    }

    /// Keeps the model as it is after reading `prompt`, in place of the oldest kept one.
    fn keep(&self, prompt: &[u32], weights: &ModelWeights) {
        let mut kept = self
            .prefixes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.retain(|p| p.tokens != prompt);
        if kept.len() == PREFIXES {
            kept.remove(0);
        }
        kept.push(Prefix {
            tokens: prompt.to_vec(),
            weights: weights.clone(),
        });
    }
}

/// The file's chat template, else its architecture's usual one.
fn chat_template(content: &Content, arch: &str) -> String {
    content
        .metadata
        .get("tokenizer.chat_template")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_else(|| if arch == "gemma3" { GEMMA } else { CHATML }.to_owned())
}

/// `file` opened, its GGUF header read and its architecture (`general.architecture`, empty
/// when missing); the reader stands after the header.
fn read_header(
    file: &Path,
) -> Result<(std::io::BufReader<std::fs::File>, Content, String), ModelError> {
    let f = std::fs::File::open(file).map_err(|e| bad_file(file, format!("cannot open: {e}")))?;
    let mut reader = std::io::BufReader::new(f);
    let content = Content::read(&mut reader)
        .map_err(|e| bad_file(file, format!("cannot read the GGUF header: {}", said(&e))))?;
    let arch = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    Ok((reader, content, arch))
}

/// The tokens of the prompt a request makes for the model of `file`: its chat template, then
/// its tokenizer, as a call reads it (only the file's header is read, not its weights). For the
/// tests that compare them with llama.cpp's.
#[doc(hidden)]
pub fn prompt_tokens(file: &Path, req: &ModelRequest) -> Result<Vec<u32>, ModelError> {
    let (_, content, arch) = read_header(file)?;
    let vocab = vocab::from_gguf(&content).map_err(|e| bad_file(file, e))?;
    let text = Engine::render(&chat_template(&content, &arch), &vocab, file, req)?;
    vocab
        .encode(&text)
        .map_err(|e| ModelError::Config(format!("local model {}: {e}", file.display())))
}

/// The prompt's text a request makes for the model of `file` (its chat template, the tools
/// described in the system message), and, when the file says that a tokenizer adds its first
/// token (`tokenizer.ggml.add_bos_token`), that token's text, which the template may begin
/// with and another engine then adds itself. For the benchmarks that send the same prompt to
/// llama.cpp (only the file's header is read).
#[doc(hidden)]
pub fn prompt_text(
    file: &Path,
    req: &ModelRequest,
) -> Result<(String, Option<String>), ModelError> {
    let (_, content, arch) = read_header(file)?;
    let vocab = vocab::from_gguf(&content).map_err(|e| bad_file(file, e))?;
    let text = Engine::render(&chat_template(&content, &arch), &vocab, file, req)?;
    let adds_bos = content
        .metadata
        .get("tokenizer.ggml.add_bos_token")
        .and_then(|v| v.to_bool().ok())
        .unwrap_or(false);
    Ok((text, adds_bos.then(|| vocab.bos.clone())))
}

/// A reply's text read as a call of `req` reads it with `tool_choice: auto`: its tool calls, if
/// it is calls of offered tools, and the text besides. For the benchmarks that read another
/// engine's reply to the same prompt.
#[doc(hidden)]
pub fn read_tool_calls(req: &ModelRequest, text: String) -> (String, Vec<crate::ToolCall>) {
    constrain::read_reply(req, ToolChoice::Auto, text)
}

/// Quantized types candle multiplies without SIMD on x86 (a plain loop per block, several
/// times slower than the types it has kernels for): their tensors are converted to `Q8_0`
/// when the file is loaded (as precise, for a little more memory).
const SLOW_TYPES: &[GgmlDType] = &[
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_1,
];

/// The file's metadata and tensors as a GGUF file in memory, its tensors of [`SLOW_TYPES`]
/// converted to `Q8_0` (those whose rows are a whole number of its blocks).
fn to_fast_types<R: std::io::Read + std::io::Seek>(
    content: &Content,
    reader: &mut R,
) -> candle_core::Result<Vec<u8>> {
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        let t = content.tensor(reader, name, &Device::Cpu)?;
        let row = t.shape().dims().last().copied().unwrap_or(0);
        let t = if SLOW_TYPES.contains(&t.dtype()) && row % GgmlDType::Q8_0.block_size() == 0 {
            QTensor::quantize(&t.dequantize(&Device::Cpu)?, GgmlDType::Q8_0)?
        } else {
            t
        };
        tensors.push((name.as_str(), t));
    }
    let metadata: Vec<(&str, &candle_core::quantized::gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut out = std::io::Cursor::new(Vec::new());
    candle_core::quantized::gguf_file::write(&mut out, &metadata, &refs)?;
    Ok(out.into_inner())
}

/// How many of the last generated tokens are penalized when they come again.
const REPEAT_WINDOW: usize = 64;

/// How much less likely a token of the window is made (llama.cpp's classic default): a small
/// model decoding greedily otherwise repeats a sentence until it runs out of tokens.
const REPEAT_PENALTY: f32 = 1.1;

/// Lowers the scores of the tokens generated in the window.
fn penalize_repeats(scores: &mut [f32], recent: &[u32]) {
    let mut seen: Vec<u32> = recent.to_vec();
    seen.sort_unstable();
    seen.dedup();
    for t in seen {
        if let Some(s) = scores.get_mut(t as usize)
            && s.is_finite()
        {
            *s = if *s > 0.0 {
                *s / REPEAT_PENALTY
            } else {
                *s * REPEAT_PENALTY
            };
        }
    }
}

/// The fewest tokens kept at the end of a constrained reply's budget for closing it.
const CLOSING_RESERVE: u32 = 24;

impl Engine {
    /// Of the tokens still allowed (a finite score), an end of the reply, else the likeliest
    /// that is made only of `closers` (inside a string: `"` and then those); `None` when none
    /// is allowed.
    fn closing_token(&self, scores: &[f32], in_string: bool, closers: &[u8]) -> Option<u32> {
        if let Some(stop) = self
            .vocab
            .stops
            .iter()
            .find(|t| scores.get(**t as usize).is_some_and(|s| s.is_finite()))
        {
            return Some(*stop);
        }
        scores
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_finite())
            .filter(|(i, _)| {
                let bytes = self.vocab.bytes(*i as u32);
                let rest = if in_string {
                    match bytes.split_first() {
                        Some((b'"', rest)) => rest,
                        _ => return false,
                    }
                } else {
                    &bytes[..]
                };
                !bytes.is_empty() && rest.iter().all(|b| closers.contains(b))
            })
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
    }
}

/// Whether JSON text `out` ends inside a string.
fn in_string(out: &[u8]) -> bool {
    let (mut inside, mut escaped) = (false, false);
    for b in out {
        match (inside, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (_, false, b'"') => inside = !inside,
            _ => {}
        }
    }
    inside
}

/// Picks a token: the likeliest at temperature 0, else one drawn from the softmax.
fn sample(scores: &[f32], temperature: f32, rng: &mut fastrand::Rng) -> Option<u32> {
    let best = scores
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_finite())
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    if temperature <= 0.0 {
        return Some(best.0 as u32);
    }
    let max = *best.1;
    let weights: Vec<f32> = scores
        .iter()
        .map(|s| {
            if s.is_finite() {
                ((s - max) / temperature).exp()
            } else {
                0.0
            }
        })
        .collect();
    let total: f32 = weights.iter().sum();
    let mut pick = rng.f32() * total;
    for (i, w) in weights.iter().enumerate() {
        if *w > 0.0 && pick < *w {
            return Some(i as u32);
        }
        pick -= w;
    }
    Some(best.0 as u32)
}

#[derive(Clone, Copy)]
struct Limits {
    max_tokens: u32,
    temperature: f32,
    seed: u64,
    context: usize,
}

struct Generated {
    text: String,
    output_tokens: u32,
    /// The prompt's first tokens that were read for an earlier request.
    reused: usize,
    finish: &'static str,
}

/// Sets the flag when dropped: a call given up stops its generation at the next token.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Model for LocalModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn max_output_tokens(&self) -> Option<u32> {
        Some(self.cfg.max_tokens)
    }

    async fn complete(
        &self,
        req: &ModelRequest,
        deltas: Option<DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        let engine = self.engine().await?;
        let prompt_text = engine.prompt(req)?;
        let prompt = engine.vocab.encode(&prompt_text).map_err(|e| {
            ModelError::Config(format!("local model {}: {e}", engine.file.display()))
        })?;
        let context = self.cfg.context_size.min(engine.trained_context.max(1));
        let max_tokens = req.max_tokens.unwrap_or(self.cfg.max_tokens);
        if prompt.len() + 1 > context {
            return Err(ModelError::WouldNotFit {
                provider: PROVIDER.into(),
                message: format!(
                    "the prompt is {} tokens and the context {context} (context_size); shorten the \
                     conversation or raise context_size (at most {})",
                    prompt.len(),
                    MAX_CONTEXT.min(engine.trained_context)
                ),
            });
        }
        let limits = Limits {
            max_tokens,
            temperature: req.temperature.unwrap_or(self.cfg.temperature),
            seed: self.cfg.seed.wrapping_add(u64::from(req.call_index)),
            context,
        };
        let constraint = constrain::constraint(req, self.cfg.tool_choice);
        let cancelled = Arc::new(AtomicBool::new(false));
        let _guard = CancelOnDrop(cancelled.clone());
        let worker = engine.clone();
        let prompt_len = prompt.len();
        let generated = tokio::task::spawn_blocking(move || {
            worker.generate(&prompt, constraint, limits, deltas, &cancelled)
        })
        .await
        .map_err(|e| ModelError::Malformed {
            provider: PROVIDER.into(),
            message: format!("the generation stopped: {e}"),
            body: String::new(),
            usage: Usage::default(),
        })??;
        let usage = Usage {
            input_tokens: prompt_len as u64,
            output_tokens: u64::from(generated.output_tokens),
            cache_read_tokens: generated.reused as u64,
            ..Usage::default()
        };
        let (content, tool_calls) =
            constrain::read_reply(req, self.cfg.tool_choice, generated.text);
        let finish = if !tool_calls.is_empty() {
            "tool_calls"
        } else {
            generated.finish
        };
        Ok(ModelReply {
            content,
            tool_calls,
            usage,
            model: self.name.clone(),
            finish_reason: Some(finish.to_owned()),
            ..ModelReply::default()
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// The model file of the `needs_local_model_*` tests (`scripts/setup-local-model`).
    fn model_file() -> PathBuf {
        weft_testkit::service_var("WEFT_TEST_LOCAL_GGUF").into()
    }

    #[test]
    fn a_candle_error_is_said_without_its_backtrace() {
        let e = candle_core::Error::WithBacktrace {
            inner: Box::new(candle_core::Error::Msg(
                "unsupported gguf version 99".into(),
            )),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        // candle's own Display puts the frames after the message.
        assert!(e.to_string().lines().count() > 1, "{e}");
        assert_eq!(said(&e), "unsupported gguf version 99");
        let e = e.context("reading the header").with_path("m.gguf");
        assert_eq!(
            said(&e),
            "m.gguf: reading the header: unsupported gguf version 99"
        );
    }

    #[test]
    fn the_mapping_names_the_key_and_what_to_do() {
        let map = |v: Value| v.as_object().cloned().unwrap();
        let err = |v: Value| {
            LocalConfig::from_spec("m.gguf", Some(&map(v)), Path::new("/agents"))
                .unwrap_err()
                .to_string()
        };
        let e = err(json!({"threads": 2}));
        assert!(
            e.contains("`threads`") && e.contains("CANDLE_NUM_THREADS=N"),
            "{e}"
        );
        let e = err(json!({"thread": 2}));
        assert!(
            e.contains("unknown key `thread`") && e.contains("context_size"),
            "{e}"
        );
        let e = err(json!({"temperature": 3}));
        assert!(
            e.contains("`temperature` must be a number from 0 to 2"),
            "{e}"
        );
        // `omit` is a wire choice of OpenAI-compatible servers; a local model has no wire.
        let e = err(json!({"tool_choice": "omit"}));
        assert!(
            e.contains("`tool_choice`") && e.contains("`auto`, `required` or `none`"),
            "{e}"
        );
        let cfg = LocalConfig::from_spec(
            "m.gguf",
            Some(&map(
                json!({"context_size": 2048, "seed": 7, "tool_choice": "required"}),
            )),
            Path::new("/agents"),
        )
        .unwrap();
        assert_eq!(cfg.file, Path::new("/agents/m.gguf"));
        assert_eq!((cfg.context_size, cfg.seed), (2048, 7));
        assert_eq!(cfg.tool_choice, ToolChoice::Required);
    }

    #[test]
    fn needs_local_model_a_prompt_that_goes_on_from_a_read_one_is_read_from_where_it_ended() {
        let first = "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n";
        let second = format!(
            "{first}Blue.<|im_end|>\n<|im_start|>user\nAnd a fruit?<|im_end|>\n<|im_start|>assistant\n"
        );
        reads_on_from_where_it_ended(
            &model_file(),
            first,
            &second,
            "<|im_start|>user\nHi.<|im_end|>\n",
        );
    }

    /// Gemma 3, on a first prompt longer than its sliding window (512 tokens), so that the
    /// windowed layers' masks are used when it is read whole, read on and read token by token.
    #[test]
    fn needs_local_model_gemma_a_prompt_that_goes_on_from_a_read_one_is_read_from_where_it_ended() {
        let file: PathBuf = weft_testkit::service_var("WEFT_TEST_LOCAL_GEMMA_GGUF").into();
        // A list whose next word is not in doubt, so that rounding cannot change the likeliest
        // token.
        // Lines: a newline is a token of its own, so the first prompt's tokens begin the second's.
        let long: String = (1..=70)
            .map(|i| format!("Item {i} is a colour.\n"))
            .collect();
        let first = format!("<bos><start_of_turn>user\n{long}");
        let second = format!("{first}Item 71 is a");
        reads_on_from_where_it_ended(
            &file,
            &first,
            &second,
            "<bos><start_of_turn>user\nHi.<end_of_turn>\n",
        );
    }

    fn reads_on_from_where_it_ended(file: &Path, first: &str, second: &str, other: &str) {
        let engine = Engine::load(file).unwrap();
        let encode = |text: &str| engine.vocab.encode(text).unwrap();
        let (a, b) = (encode(first), encode(second));
        assert!(
            b.starts_with(&a),
            "the second prompt's tokens begin with the first's"
        );
        let scores = |w: &mut ModelWeights, tokens: &[u32], at: usize| -> Vec<f32> {
            let input = Tensor::new(tokens, &Device::Cpu)
                .and_then(|t| t.unsqueeze(0))
                .unwrap();
            w.forward(&input, at)
                .and_then(|l| l.squeeze(0))
                .and_then(|l| l.to_dtype(candle_core::DType::F32))
                .and_then(|l| l.to_vec1())
                .unwrap()
        };
        let base = engine.weights.lock().unwrap().clone();
        // The second prompt read whole.
        let mut whole = base.clone();
        whole.clear_kv_cache();
        let expected = scores(&mut whole, &b, 0);
        // The first prompt read and kept; the second is read on from where it ended.
        let (mut w, reused) = engine.read_from(&base, &a);
        assert_eq!(reused, 0, "nothing was kept yet");
        scores(&mut w, &a, 0);
        engine.keep(&a, &w);
        let (mut w, reused) = engine.read_from(&base, &b);
        assert_eq!(reused, a.len(), "the first prompt is not read again");
        let got = scores(&mut w, &b[reused..], reused);
        // The same next-token scores, but for rounding: sums are taken in other orders when
        // the tokens come in other batches.
        let top = |s: &[f32]| {
            s.iter()
                .enumerate()
                .max_by(|x, y| x.1.total_cmp(y.1))
                .map(|(i, _)| i)
        };
        let range = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
        let off = expected
            .iter()
            .zip(&got)
            .fold(0f32, |m, (e, g)| m.max((e - g).abs()));
        // The engine's own rounding: the same tokens read one at a time (as a reply's are)
        // give scores that differ from a whole read by this much.
        let mut one_by_one = base.clone();
        one_by_one.clear_kv_cache();
        let mut stepped = Vec::new();
        for (i, t) in b.iter().enumerate() {
            stepped = scores(&mut one_by_one, &[*t], i);
        }
        let rounding = expected
            .iter()
            .zip(&stepped)
            .fold(0f32, |m, (e, g)| m.max((e - g).abs()));
        let top2 = |s: &[f32]| {
            let mut v: Vec<(usize, f32)> = s.iter().copied().enumerate().collect();
            v.sort_by(|x, y| y.1.total_cmp(&x.1));
            v.truncate(3);
            v
        };
        eprintln!(
            "the likeliest tokens: read whole {:?}, read on {:?}, read one at a time {:?}",
            top2(&expected),
            top2(&got),
            top2(&stepped)
        );
        assert_eq!(top(&got), top(&expected));
        assert!(
            off <= 1.5 * rounding,
            "scores differ by {off} (of {range}); reading one token at a time moves them by {rounding}"
        );
        // A generation reports what it reused; a prompt that begins with no kept one is read
        // whole.
        let limits = Limits {
            max_tokens: 4,
            temperature: 0.0,
            seed: 0,
            context: 1024,
        };
        let run = |prompt: &[u32]| {
            engine
                .generate(prompt, None, limits, None, &AtomicBool::new(false))
                .unwrap()
                .reused
        };
        assert_eq!(run(&b), a.len());
        assert_eq!(run(&encode(other)), 0);
        eprintln!(
            "{} of {} tokens reused; scores within {off} of {range} (one at a time: {rounding})",
            a.len(),
            b.len()
        );
    }
}
