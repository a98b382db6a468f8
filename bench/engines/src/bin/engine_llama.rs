//! llama.cpp's side, through `llama-cpp-2`: a GGUF file loaded by llama.cpp (any architecture
//! it knows), tokenized by llama.cpp's own tokenizer for the file, run on the CPU with the
//! context's thread counts (prompt and generation) set to the command line's.
//!
//! llama.cpp's log goes to standard error as it comes (it says why a file is refused).

use std::num::NonZeroU32;
use std::process::ExitCode;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use weft_engine_bench::{Args, GENERATED, Report, cpu_seconds, prompt_text};

fn main() -> ExitCode {
    match run() {
        Ok(report) => {
            report.print();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("engine-llama: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<Report, String> {
    let args = Args::parse()?;
    let file = &args.model;
    let bad = |what: String| format!("{}: {what}", file.display());
    let threads = i32::try_from(args.threads).map_err(|_| "THREADS is too large".to_owned())?;
    let backend = LlamaBackend::init().map_err(|e| format!("cannot start llama.cpp: {e}"))?;

    let t = Instant::now();
    let model = LlamaModel::load_from_file(&backend, file, &LlamaModelParams::default())
        .map_err(|e| bad(format!("cannot load the model: {e}")))?;
    let n_ctx = u32::try_from(args.prompt_tokens + GENERATED + 16)
        .map_err(|_| "PROMPT_TOKENS is too large".to_owned())?;
    let batch_size = u32::try_from(args.prompt_tokens).map_err(|_| "PROMPT_TOKENS is too large")?;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(n_ctx))
        .with_n_batch(batch_size)
        .with_n_ubatch(batch_size)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut ctx = model
        .new_context(&backend, params)
        .map_err(|e| bad(format!("cannot make a context: {e}")))?;
    let load = t.elapsed();

    let vocab = model.vocab();
    let text = prompt_text(args.prompt_tokens);
    let mut prompt: Vec<LlamaToken> = vec![vocab.bos()];
    prompt.extend(vocab.tokenize(text.as_bytes(), false, false));
    if prompt.len() < args.prompt_tokens {
        return Err(bad(format!(
            "the prompt has {} tokens, fewer than the {} asked",
            prompt.len(),
            args.prompt_tokens
        )));
    }
    prompt.truncate(args.prompt_tokens);

    let mut batch = LlamaBatch::new(args.prompt_tokens, 1);
    let last = prompt.len() - 1;
    for (i, tok) in prompt.iter().enumerate() {
        let pos = i32::try_from(i).map_err(|_| "PROMPT_TOKENS is too large")?;
        batch
            .add(*tok, pos, &[0], i == last)
            .map_err(|e| bad(format!("cannot batch the prompt: {e}")))?;
    }
    let (t, cpu) = (Instant::now(), cpu_seconds());
    ctx.decode(&mut batch)
        .map_err(|e| bad(format!("the prompt failed: {e}")))?;
    let prompt_time = t.elapsed();
    let prompt_cpu = cpu_seconds() - cpu;

    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut next = argmax(ctx.get_logits_ith(batch.n_tokens() - 1));
    let mut out = Vec::with_capacity(GENERATED);
    for i in 0..GENERATED {
        out.push(next);
        if i + 1 == GENERATED {
            break;
        }
        batch.clear();
        let pos = i32::try_from(prompt.len() + i).map_err(|_| "position too large")?;
        batch
            .add(next, pos, &[0], true)
            .map_err(|e| bad(format!("cannot batch a token: {e}")))?;
        ctx.decode(&mut batch)
            .map_err(|e| bad(format!("generation failed: {e}")))?;
        next = argmax(ctx.get_logits_ith(0));
    }
    let generation = t.elapsed();
    let generation_cpu = cpu_seconds() - cpu;
    let text = String::from_utf8_lossy(&vocab.detokenize(&out, false, false)).into_owned();
    Ok(Report {
        engine: "llama.cpp",
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

fn argmax(scores: &[f32]) -> LlamaToken {
    let mut best = 0;
    for (i, s) in scores.iter().enumerate() {
        if *s > scores[best] {
            best = i;
        }
    }
    LlamaToken::new(i32::try_from(best).unwrap_or(0))
}
