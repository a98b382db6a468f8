//! candle's side: a GGUF file run as candle's quantized Llama (`general.architecture: llama`)
//! or quantized Gemma 3 (`gemma3`), on the CPU, with the thread count of the command line.
//!
//! candle has no tokenizer of its own: the prompt is tokenized with a `tokenizers` tokenizer
//! built from the file's vocabulary (byte-level BPE for `tokenizer.ggml.model: gpt2`, as weft
//! does; a Unigram over the token scores for SentencePiece `llama` vocabularies such as
//! Gemma's). As weft does, tensors of the quantized types candle multiplies without SIMD
//! (Q4_1, Q5_0, Q5_1, Q8_1) are converted to Q8_0 at load.

use std::io::{BufReader, Cursor, Read, Seek};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_gemma3, quantized_llama};
use tokenizers::Tokenizer;
use weft_engine_bench::{Args, GENERATED, Report, cpu_seconds, prompt_text};

/// The quantized types candle's CPU kernels multiply without SIMD (weft converts them).
const SLOW_TYPES: &[GgmlDType] = &[
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_1,
];

enum Model {
    Llama(quantized_llama::ModelWeights),
    Gemma3(quantized_gemma3::ModelWeights),
}

impl Model {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> candle_core::Result<Vec<f32>> {
        let x = Tensor::new(tokens, &Device::Cpu)?.unsqueeze(0)?;
        let logits = match self {
            Self::Llama(m) => m.forward(&x, pos)?,
            Self::Gemma3(m) => m.forward(&x, pos)?,
        };
        logits.squeeze(0)?.to_vec1::<f32>()
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(report) => {
            report.print();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("engine-candle: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<Report, String> {
    let args = Args::parse()?;
    let n = args.threads.to_string();
    // SAFETY: no other thread exists yet (rayon's pool and candle read these on first use).
    unsafe {
        std::env::set_var("RAYON_NUM_THREADS", &n);
        std::env::set_var("CANDLE_NUM_THREADS", &n);
    }
    let file = &args.model;
    let bad = |what: String| format!("{}: {what}", file.display());

    let t = Instant::now();
    let (mut model, tokenizer, bos) = load(file).map_err(bad)?;
    let load = t.elapsed();

    let text = prompt_text(args.prompt_tokens);
    let ids = tokenizer
        .encode(text.as_str(), false)
        .map_err(|e| bad(format!("cannot tokenize the prompt: {e}")))?;
    let mut prompt: Vec<u32> = bos.into_iter().collect();
    prompt.extend(ids.get_ids());
    if prompt.len() < args.prompt_tokens {
        return Err(bad(format!(
            "the prompt has {} tokens, fewer than the {} asked",
            prompt.len(),
            args.prompt_tokens
        )));
    }
    prompt.truncate(args.prompt_tokens);

    let (t, cpu) = (Instant::now(), cpu_seconds());
    let logits = model
        .forward(&prompt, 0)
        .map_err(|e| bad(format!("the prompt failed: {e}")))?;
    let prompt_time = t.elapsed();
    let prompt_cpu = cpu_seconds() - cpu;

    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut next = argmax(&logits);
    let mut out = Vec::with_capacity(GENERATED);
    for i in 0..GENERATED {
        out.push(next);
        if i + 1 == GENERATED {
            break;
        }
        let logits = model
            .forward(&[next], prompt.len() + i)
            .map_err(|e| bad(format!("generation failed: {e}")))?;
        next = argmax(&logits);
    }
    let generation = t.elapsed();
    let generation_cpu = cpu_seconds() - cpu;
    let text = tokenizer
        .decode(&out, false)
        .unwrap_or_default()
        .replace('▁', " ");
    Ok(Report {
        engine: "candle",
        threads: args.threads,
        load,
        prompt_tokens: prompt.len(),
        prompt: prompt_time,
        prompt_cpu,
        generated: out.len(),
        generation,
        generation_cpu,
        text,
    })
}

fn argmax(scores: &[f32]) -> u32 {
    let mut best = 0;
    for (i, s) in scores.iter().enumerate() {
        if *s > scores[best] {
            best = i;
        }
    }
    best as u32
}

/// The model, its tokenizer and its beginning-of-sequence token.
fn load(file: &Path) -> Result<(Model, Tokenizer, Option<u32>), String> {
    let f = std::fs::File::open(file).map_err(|e| format!("cannot open: {e}"))?;
    let mut reader = BufReader::new(f);
    let content =
        Content::read(&mut reader).map_err(|e| format!("cannot read the GGUF header: {e}"))?;
    let arch = text_of(&content, "general.architecture").unwrap_or_default();
    let tokenizer = tokenizer(&content)?;
    let bos = content
        .metadata
        .get("tokenizer.ggml.bos_token_id")
        .and_then(|v| v.to_u32().ok());
    let slow = content
        .tensor_infos
        .values()
        .any(|t| SLOW_TYPES.contains(&t.ggml_dtype));
    let model = if slow {
        let mut converted = Cursor::new(
            to_fast_types(&content, &mut reader)
                .map_err(|e| format!("cannot load the weights: {e}"))?,
        );
        let content =
            Content::read(&mut converted).map_err(|e| format!("cannot load the weights: {e}"))?;
        weights(&arch, content, &mut converted)
    } else {
        weights(&arch, content, &mut reader)
    }?;
    Ok((model, tokenizer, bos))
}

fn weights<R: Read + Seek>(arch: &str, content: Content, r: &mut R) -> Result<Model, String> {
    let loaded = match arch {
        "llama" => {
            quantized_llama::ModelWeights::from_gguf(content, r, &Device::Cpu).map(Model::Llama)
        }
        "gemma3" => {
            quantized_gemma3::ModelWeights::from_gguf(content, r, &Device::Cpu).map(Model::Gemma3)
        }
        other => {
            return Err(format!(
                "its architecture is `{other}` (general.architecture); this bench runs `llama` and `gemma3`"
            ));
        }
    };
    loaded.map_err(|e| format!("cannot load the weights: {e}"))
}

/// The file's metadata and tensors as a GGUF file in memory, its tensors of [`SLOW_TYPES`]
/// converted to Q8_0 (those whose rows are a whole number of Q8_0 blocks).
fn to_fast_types<R: Read + Seek>(
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
    let metadata: Vec<(&str, &Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut out = Cursor::new(Vec::new());
    gguf_file::write(&mut out, &metadata, &refs)?;
    Ok(out.into_inner())
}

fn text_of(content: &Content, key: &str) -> Option<String> {
    content
        .metadata
        .get(key)
        .and_then(|v| v.to_string().ok())
        .cloned()
}

fn strings<'a>(content: &'a Content, key: &str) -> Result<Vec<&'a str>, String> {
    let items = content
        .metadata
        .get(key)
        .ok_or_else(|| format!("the metadata has no `{key}`"))?
        .to_vec()
        .map_err(|_| format!("the metadata's `{key}` is not a list"))?;
    items
        .iter()
        .map(|i| {
            i.to_string()
                .map(String::as_str)
                .map_err(|_| format!("the metadata's `{key}` holds a value that is not text"))
        })
        .collect()
}

/// A tokenizer for the file's vocabulary.
fn tokenizer(content: &Content) -> Result<Tokenizer, String> {
    use tokenizers::decoders::byte_fallback::ByteFallback;
    use tokenizers::models::bpe::BPE;
    use tokenizers::models::unigram::Unigram;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};

    let kind = text_of(content, "tokenizer.ggml.model").unwrap_or_default();
    let tokens = strings(content, "tokenizer.ggml.tokens")?;
    match kind.as_str() {
        "gpt2" => {
            let vocab: tokenizers::models::bpe::Vocab = tokens
                .iter()
                .enumerate()
                .map(|(i, t)| ((*t).to_owned(), i as u32))
                .collect();
            let merges = strings(content, "tokenizer.ggml.merges")?
                .iter()
                .map(|m| {
                    m.split_once(' ')
                        .map(|(a, b)| (a.to_owned(), b.to_owned()))
                        .ok_or_else(|| format!("the merge `{m}` is not two tokens"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .build()
                .map_err(|e| format!("cannot build its BPE tokenizer: {e}"))?;
            let mut t = Tokenizer::new(bpe);
            t.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
            t.with_decoder(Some(ByteLevel::default()));
            Ok(t)
        }
        "llama" => {
            let scores: Vec<f64> = match content.metadata.get("tokenizer.ggml.scores") {
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| f64::from(v.to_f32().unwrap_or(0.0)))
                    .collect(),
                _ => return Err("the metadata has no `tokenizer.ggml.scores`".to_owned()),
            };
            let vocab = tokens
                .iter()
                .zip(scores)
                .map(|(t, s)| ((*t).to_owned(), s))
                .collect();
            let unk = content
                .metadata
                .get("tokenizer.ggml.unknown_token_id")
                .and_then(|v| v.to_u32().ok())
                .map(|u| u as usize);
            let model = Unigram::from(vocab, unk, true)
                .map_err(|e| format!("cannot build its SentencePiece tokenizer: {e}"))?;
            let mut t = Tokenizer::new(model);
            t.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Never, false)));
            t.with_decoder(Some(ByteFallback::new()));
            Ok(t)
        }
        other => Err(format!(
            "its tokenizer is `{other}` (tokenizer.ggml.model); this bench reads `gpt2` and `llama`"
        )),
    }
}
