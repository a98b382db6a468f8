//! A GGUF file's own tokenizer: the byte-level BPE its metadata describes
//! (`tokenizer.ggml.model: gpt2`, `tokens`, `merges`, `token_type`), built as a `tokenizers`
//! tokenizer for the prompt and as a `toktrie` token trie for llguidance, from the same
//! vocabulary.

use std::sync::Arc;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// `tokenizer.ggml.token_type` of a control token (`<|im_start|>`, `<|im_end|>`, ...).
const CONTROL: i32 = 3;

/// Pre-tokenizers (`tokenizer.ggml.pre`) that split digits one by one before the byte-level
/// split, as their models were trained.
const SPLIT_DIGITS: &[&str] = &["smollm", "starcoder", "refact", "codeshell", "command-r"];

/// Tokens that end a turn, besides the file's end-of-sequence token, by chat format.
const END_OF_TURN: &[&str] = &["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>"];

/// The vocabulary of a GGUF file.
pub(super) struct Vocab {
    /// Encodes the prompt (control tokens are matched as single tokens).
    pub(super) tokenizer: Tokenizer,
    /// The token trie llguidance masks with, as a tokenizer environment.
    pub(super) env: TokEnv,
    /// Tokens that end the reply: the end-of-sequence token and the end-of-turn token.
    pub(super) stops: Vec<TokenId>,
    /// The text of the beginning- and end-of-sequence tokens (for chat templates).
    pub(super) bos: String,
    pub(super) eos: String,
}

impl Vocab {
    /// The bytes a token stands for (empty for control tokens).
    pub(super) fn bytes(&self, tok: TokenId) -> Vec<u8> {
        self.env.tok_trie().decode(&[tok])
    }

    /// The prompt's tokens.
    pub(super) fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("cannot tokenize the prompt: {e}"))
    }
}

fn strings<'a>(content: &'a Content, key: &str) -> Result<Vec<&'a str>, String> {
    let v = content
        .metadata
        .get(key)
        .ok_or_else(|| format!("the metadata has no `{key}`"))?;
    let items = v
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

fn token_id(content: &Content, key: &str) -> Option<u32> {
    content.metadata.get(key).and_then(|v| v.to_u32().ok())
}

/// GPT-2's byte-level alphabet: which character stands for each byte in the token strings.
fn byte_of_char() -> std::collections::HashMap<char, u8> {
    let mut printable: Vec<u32> = (u32::from(b'!')..=u32::from(b'~'))
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars = printable.clone();
    let mut next = 0;
    for b in 0..=255u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + next);
            next += 1;
        }
    }
    printable
        .into_iter()
        .zip(chars)
        .filter_map(|(b, c)| Some((char::from_u32(c)?, u8::try_from(b).ok()?)))
        .collect()
}

/// Builds the vocabulary from the file's metadata. Errors say what is missing or unsupported.
pub(super) fn from_gguf(content: &Content) -> Result<Vocab, String> {
    let model = content
        .metadata
        .get("tokenizer.ggml.model")
        .and_then(|v| v.to_string().ok())
        .map(String::as_str)
        .unwrap_or("");
    if model != "gpt2" {
        return Err(format!(
            "its tokenizer is `{model}` (tokenizer.ggml.model); weft reads byte-level BPE \
             tokenizers (`gpt2`), as SmolLM2, Llama 3 and Qwen files have"
        ));
    }
    let tokens = strings(content, "tokenizer.ggml.tokens")?;
    let merges = strings(content, "tokenizer.ggml.merges")?;
    let types: Vec<i32> = match content.metadata.get("tokenizer.ggml.token_type") {
        Some(Value::Array(a)) => a.iter().map(|v| v.to_i32().unwrap_or(1)).collect(),
        _ => vec![1; tokens.len()],
    };
    let n = u32::try_from(tokens.len()).map_err(|_| "the vocabulary is too large".to_owned())?;
    let eos = token_id(content, "tokenizer.ggml.eos_token_id")
        .filter(|&t| t < n)
        .ok_or_else(|| "the metadata has no valid `tokenizer.ggml.eos_token_id`".to_owned())?;
    let bos = token_id(content, "tokenizer.ggml.bos_token_id").filter(|&t| t < n);

    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| ((*t).to_owned(), i as u32))
        .collect();
    let merges: Vec<(String, String)> = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| format!("the merge `{m}` is not two tokens"))
        })
        .collect::<Result<_, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| format!("cannot build its BPE tokenizer: {e}"))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let pre = content
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map(String::as_str)
        .unwrap_or("");
    let byte_level = ByteLevel::new(false, true, true);
    if SPLIT_DIGITS.contains(&pre) {
        tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            byte_level.into(),
        ])));
    } else {
        tokenizer.with_pre_tokenizer(Some(byte_level));
    }
    tokenizer.with_decoder(Some(ByteLevel::default()));
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, t)| **t == CONTROL)
        .map(|(s, _)| AddedToken::from((*s).to_owned(), true))
        .collect();
    tokenizer
        .add_special_tokens(special)
        .map_err(|e| format!("cannot add its control tokens: {e}"))?;

    // The trie: each token's bytes; control tokens are marked as special (0xFF, then the name).
    let chars = byte_of_char();
    let words: Vec<Vec<u8>> = tokens
        .iter()
        .zip(types.iter().chain(std::iter::repeat(&1)))
        .map(|(s, t)| {
            if *t == CONTROL {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(s.as_bytes());
                w
            } else {
                // A character outside the byte alphabet is kept as its UTF-8 bytes.
                let mut w = Vec::with_capacity(s.len());
                for c in s.chars() {
                    match chars.get(&c) {
                        Some(b) => w.push(*b),
                        None => w.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                w
            }
        })
        .collect();
    let mut stops = vec![eos];
    for name in END_OF_TURN {
        if let Some(i) = tokens.iter().position(|t| t == name)
            && !stops.contains(&(i as u32))
        {
            stops.push(i as u32);
        }
    }
    let mut info = TokRxInfo::new(n, eos);
    info.tok_bos = bos;
    info.tok_end_of_turn = stops.get(1).copied();
    let trie = TokTrie::from(&info, &words).with_eos_tokens(&stops);
    let name = |id: Option<u32>| {
        id.and_then(|i| tokens.get(i as usize))
            .map(|s| (*s).to_owned())
            .unwrap_or_default()
    };
    let env: TokEnv = Arc::new(TrieEnv {
        trie,
        tokenizer: tokenizer.clone(),
    });
    Ok(Vocab {
        tokenizer,
        env,
        stops,
        bos: name(bos),
        eos: name(Some(eos)),
    })
}

/// The token trie with the tokenizer that encodes text for it (llguidance tokenizes the
/// grammar's fixed strings through it).
struct TrieEnv {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => match self.tokenizer.encode(text, false) {
                Ok(e) => e.get_ids().to_vec(),
                Err(_) => self.trie.greedy_tokenize(s),
            },
            // Bytes that are not text (a piece of a character) are matched greedily in the trie.
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_alphabet_covers_every_byte_once() {
        let m = byte_of_char();
        assert_eq!(m.len(), 256);
        assert_eq!(m.get(&'Ġ'), Some(&b' '));
        assert_eq!(m.get(&'Ċ'), Some(&b'\n'));
        assert_eq!(m.get(&'a'), Some(&b'a'));
    }
}
