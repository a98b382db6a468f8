//! Gemma 3 (text), read from a quantized `gemma3` GGUF file and run on the CPU, computing what
//! llama.cpp computes for the same file.
//!
//! The model is a stack of decoder layers between a token embedding (its rows scaled by the
//! square root of the hidden size) and a final RMS norm whose output is scored against the
//! vocabulary (the file's `output.weight`, else the token embedding again). Each layer:
//!
//! - attention: RMS norm, then query, key and value projections with fewer key/value heads than
//!   query heads (each key/value head serves a run of consecutive query heads); an RMS norm on
//!   each head's query and key; rotary positions (the two halves of a head rotated together);
//!   scaled dot-product attention over the keys at or before each query; the output projection
//!   and another RMS norm before the result is added to the layer's input;
//! - feed-forward: RMS norm, GELU (tanh approximation) of the gate times the up projection, the
//!   down projection and another RMS norm before the result is added back.
//!
//! Five layers in six attend only to the keys less than `attention.sliding_window` positions
//! back and rotate with base 10,000; every sixth (index 5, 11, …) attends to all keys before it
//! and rotates with base `rope.freq_base`. Queries are scaled by 1/√`attention.key_length`.
//! The norms' weights are used as the file stores them: the GGUF converter has already added the
//! 1 that Gemma's own checkpoints leave out.
//!
//! Each layer keeps the keys and values it has read (a new tensor per step, so a clone of the
//! model shares what was read before it). The rotary tables cover only the positions the caller
//! asks for (the context weft allows), not the model's trained context.

use candle_core::quantized::{QMatMul, gguf_file};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::Embedding;
use candle_transformers::quantized_nn::RmsNorm;

/// Every this many layers, the last is a global-attention layer.
const GLOBAL_EVERY: usize = 6;
/// The rotary base of the sliding-window layers.
const SLIDING_ROPE_BASE: f32 = 10_000.;

/// Cosine and sine tables, one row per position, one column per pair of rotated dimensions.
#[derive(Debug, Clone)]
struct RotaryTables {
    cos: Tensor,
    sin: Tensor,
}

impl RotaryTables {
    fn new(head_dim: usize, base: f32, positions: usize, device: &Device) -> Result<Self> {
        let half = head_dim / 2;
        let inverse: Vec<f32> = (0..half)
            .map(|i| 1. / base.powf((2 * i) as f32 / head_dim as f32))
            .collect();
        let inverse = Tensor::from_vec(inverse, (1, half), device)?;
        let at = Tensor::arange(0u32, positions as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((positions, 1))?;
        let angles = at.broadcast_mul(&inverse)?;
        Ok(Self {
            cos: angles.cos()?,
            sin: angles.sin()?,
        })
    }

    /// `x` (batch × heads × tokens × head size) rotated for positions `at..at + tokens`.
    fn rotate(&self, x: &Tensor, at: usize) -> Result<Tensor> {
        let tokens = x.dim(2)?;
        let available = self.cos.dim(0)?;
        if at + tokens > available {
            candle_core::bail!(
                "positions {at}..{} are past the {available} this model was prepared for",
                at + tokens
            );
        }
        let cos = self.cos.narrow(0, at, tokens)?;
        let sin = self.sin.narrow(0, at, tokens)?;
        candle_nn::rotary_emb::rope(&x.contiguous()?, &cos, &sin)
    }
}

#[derive(Debug, Clone)]
struct Attention {
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    o: QMatMul,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    /// `Some(n)`: a query sees only the keys fewer than `n` positions back.
    window: Option<usize>,
    rotary: RotaryTables,
    /// Keys and values read so far (batch × key/value heads × positions × head size).
    cache: Option<(Tensor, Tensor)>,
}

impl Attention {
    fn forward(&mut self, x: &Tensor, at: usize) -> Result<Tensor> {
        let (batch, tokens, _) = x.dims3()?;
        let split = |t: Tensor, heads: usize| {
            t.reshape((batch, tokens, heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(self.q.forward(x)?, self.heads)?;
        let k = split(self.k.forward(x)?, self.kv_heads)?;
        let v = split(self.v.forward(x)?, self.kv_heads)?;
        let q = self.rotary.rotate(&self.q_norm.forward(&q)?, at)?;
        let k = self.rotary.rotate(&self.k_norm.forward(&k)?, at)?;
        let q = (q * (1. / (self.head_dim as f64).sqrt()))?;

        let (k, v) = match &self.cache {
            Some((old_k, old_v)) => (
                Tensor::cat(&[old_k, &k], 2)?.contiguous()?,
                Tensor::cat(&[old_v, &v], 2)?.contiguous()?,
            ),
            None => (k, v),
        };
        self.cache = Some((k.clone(), v.clone()));
        let keys = k.dim(2)?;
        let first = keys - tokens;

        // Query heads grouped by the key/value head they share: the group's queries are
        // consecutive heads, so they stack into one matrix per key/value head.
        let group = self.heads / self.kv_heads;
        let q = q.reshape((batch, self.kv_heads, group * tokens, self.head_dim))?;
        let scores = q.matmul(&k.t()?.contiguous()?)?;
        let scores = scores.reshape((batch, self.heads, tokens, keys))?;
        let scores = match self.mask(tokens, first, keys, x.device())? {
            Some(mask) => scores.broadcast_add(&mask)?,
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let weights = weights.reshape((batch, self.kv_heads, group * tokens, keys))?;
        let out = weights.matmul(&v)?;
        let out = out
            .reshape((batch, self.heads, tokens, self.head_dim))?
            .transpose(1, 2)?
            .reshape((batch, tokens, self.heads * self.head_dim))?;
        self.o.forward(&out)
    }

    /// What hides key `j` from the query at position `first + i`: `-inf` where `j` is after it,
    /// or (in a sliding-window layer) a window or more before it; `None` when nothing is hidden.
    fn mask(
        &self,
        tokens: usize,
        first: usize,
        keys: usize,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        let hidden = |i: usize, j: usize| {
            let at = first + i;
            j > at || self.window.is_some_and(|w| at - j >= w)
        };
        let mut values = Vec::with_capacity(tokens * keys);
        let mut any = false;
        for i in 0..tokens {
            for j in 0..keys {
                let h = hidden(i, j);
                any |= h;
                values.push(if h { f32::NEG_INFINITY } else { 0. });
            }
        }
        if !any {
            return Ok(None);
        }
        Tensor::from_vec(values, (tokens, keys), device).map(Some)
    }
}

#[derive(Debug, Clone)]
struct FeedForward {
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
}

impl Module for FeedForward {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gated = (self.gate.forward(x)?.gelu()? * self.up.forward(x)?)?;
        self.down.forward(&gated)
    }
}

#[derive(Debug, Clone)]
struct Layer {
    attention_norm: RmsNorm,
    attention: Attention,
    post_attention_norm: RmsNorm,
    ffn_norm: RmsNorm,
    ffn: FeedForward,
    post_ffn_norm: RmsNorm,
}

impl Layer {
    fn forward(&mut self, x: &Tensor, at: usize) -> Result<Tensor> {
        let a = self
            .attention
            .forward(&self.attention_norm.forward(x)?, at)?;
        let x = (x + self.post_attention_norm.forward(&a)?)?;
        let f = self.ffn.forward(&self.ffn_norm.forward(&x)?)?;
        x + self.post_ffn_norm.forward(&f)?
    }
}

/// A Gemma 3 model's weights and what its layers have read.
#[derive(Debug, Clone)]
pub(super) struct ModelWeights {
    embedding: Embedding,
    /// √hidden size, the embedding's scale.
    embedding_scale: f64,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
}

impl ModelWeights {
    /// Reads the weights from a `gemma3` GGUF file, with rotary tables for `positions`
    /// positions.
    pub(super) fn from_gguf<R: std::io::Seek + std::io::Read>(
        content: gguf_file::Content,
        reader: &mut R,
        device: &Device,
        positions: usize,
    ) -> Result<Self> {
        let meta = |key: &str| {
            content
                .metadata
                .get(&format!("gemma3.{key}"))
                .ok_or_else(|| candle_core::Error::Msg(format!("no gemma3.{key} in the file")))
        };
        let heads = meta("attention.head_count")?.to_u32()? as usize;
        let kv_heads = meta("attention.head_count_kv")?.to_u32()? as usize;
        let head_dim = meta("attention.key_length")?.to_u32()? as usize;
        let layers = meta("block_count")?.to_u32()? as usize;
        let hidden = meta("embedding_length")?.to_u32()? as usize;
        let window = meta("attention.sliding_window")?.to_u32()? as usize;
        let eps = meta("attention.layer_norm_rms_epsilon")?.to_f32()? as f64;
        let global_base = meta("rope.freq_base")?.to_f32()?;
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            candle_core::bail!("{heads} query heads cannot share {kv_heads} key/value heads");
        }

        let mut tensor = |name: &str| content.tensor(reader, name, device);
        let embedding_q = tensor("token_embd.weight")?;
        let embedding = Embedding::new(embedding_q.dequantize(device)?, hidden);
        let norm = RmsNorm::from_qtensor(tensor("output_norm.weight")?, eps)?;
        let output = match tensor("output.weight") {
            Ok(w) => QMatMul::from_qtensor(w)?,
            Err(_) => QMatMul::from_qtensor(embedding_q)?,
        };

        let global_rotary = RotaryTables::new(head_dim, global_base, positions, device)?;
        let sliding_rotary = RotaryTables::new(head_dim, SLIDING_ROPE_BASE, positions, device)?;
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
            let p = format!("blk.{i}");
            let mut matmul = |n: &str| QMatMul::from_qtensor(tensor(&format!("{p}.{n}.weight"))?);
            let q = matmul("attn_q")?;
            let k = matmul("attn_k")?;
            let v = matmul("attn_v")?;
            let o = matmul("attn_output")?;
            let gate = matmul("ffn_gate")?;
            let up = matmul("ffn_up")?;
            let down = matmul("ffn_down")?;
            let mut rms = |n: &str| RmsNorm::from_qtensor(tensor(&format!("{p}.{n}.weight"))?, eps);
            let global = i % GLOBAL_EVERY == GLOBAL_EVERY - 1;
            blocks.push(Layer {
                attention_norm: rms("attn_norm")?,
                attention: Attention {
                    q,
                    k,
                    v,
                    o,
                    q_norm: rms("attn_q_norm")?,
                    k_norm: rms("attn_k_norm")?,
                    heads,
                    kv_heads,
                    head_dim,
                    window: if global { None } else { Some(window) },
                    rotary: if global {
                        global_rotary.clone()
                    } else {
                        sliding_rotary.clone()
                    },
                    cache: None,
                },
                post_attention_norm: rms("post_attention_norm")?,
                ffn_norm: rms("ffn_norm")?,
                ffn: FeedForward { gate, up, down },
                post_ffn_norm: rms("post_ffw_norm")?,
            });
        }
        Ok(Self {
            embedding,
            embedding_scale: (hidden as f64).sqrt(),
            layers: blocks,
            norm,
            output,
        })
    }

    /// The next-token scores (batch × vocabulary) after reading `input` (batch × tokens) from
    /// position `at`.
    pub(super) fn forward(&mut self, input: &Tensor, at: usize) -> Result<Tensor> {
        let tokens = input.dim(1)?;
        let mut x = (self.embedding.forward(input)? * self.embedding_scale)?;
        for layer in self.layers.iter_mut() {
            x = layer.forward(&x, at)?;
        }
        let last = x.narrow(1, tokens - 1, 1)?.squeeze(1)?;
        let last = self.norm.forward(&last)?;
        self.output.forward(&last)?.to_dtype(DType::F32)
    }

    /// Forgets what was read.
    pub(super) fn clear_kv_cache(&mut self) {
        for layer in self.layers.iter_mut() {
            layer.attention.cache = None;
        }
    }
}
