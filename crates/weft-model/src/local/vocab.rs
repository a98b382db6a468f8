//! A GGUF file's own tokenizer, built for the prompt and as a `toktrie` token trie for
//! llguidance from the same vocabulary: the byte-level BPE of `tokenizer.ggml.model: gpt2`
//! (`tokens`, `merges`, `token_type`; SmolLM2, Llama 3, Qwen) as a `tokenizers` tokenizer, or
//! the SentencePiece BPE of `tokenizer.ggml.model: llama` (`tokens`, `scores`, `token_type`;
//! Gemma, Llama 2) as [`Spm`], llama.cpp's algorithm.

use std::collections::{BinaryHeap, HashMap};
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
/// `tokenizer.ggml.token_type` of an unknown-text token (`<unk>`).
const UNKNOWN: i32 = 2;
/// `tokenizer.ggml.token_type` of a token added to the vocabulary whole (Gemma's `\n\n`).
const USER_DEFINED: i32 = 4;
/// `tokenizer.ggml.token_type` of a byte token (`<0x0A>`).
const BYTE: i32 = 6;

/// Pre-tokenizers (`tokenizer.ggml.pre`) that split digits one by one before the byte-level
/// split, as their models were trained.
const SPLIT_DIGITS: &[&str] = &["smollm", "starcoder", "refact", "codeshell", "command-r"];

/// Tokens that end a turn, besides the file's end-of-sequence token, by chat format.
const END_OF_TURN: &[&str] = &["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>"];

/// Turns text into tokens.
pub(super) enum Encoder {
    /// Byte-level BPE (`gpt2`).
    Bpe(Tokenizer),
    /// SentencePiece BPE (`llama`).
    Spm(Spm),
}

impl Encoder {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        match self {
            Encoder::Bpe(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| e.to_string()),
            Encoder::Spm(s) => Ok(s.encode(text)),
        }
    }
}

/// The vocabulary of a GGUF file.
pub(super) struct Vocab {
    /// Encodes the prompt (control tokens are matched as single tokens).
    pub(super) encoder: Arc<Encoder>,
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
        self.encoder
            .encode(text)
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
    if model != "gpt2" && model != "llama" {
        return Err(format!(
            "its tokenizer is `{model}` (tokenizer.ggml.model); weft reads byte-level BPE \
             tokenizers (`gpt2`), as SmolLM2, Llama 3 and Qwen files have, and SentencePiece \
             BPE tokenizers (`llama`), as Gemma files have"
        ));
    }
    let tokens = strings(content, "tokenizer.ggml.tokens")?;
    let types: Vec<i32> = match content.metadata.get("tokenizer.ggml.token_type") {
        Some(Value::Array(a)) => a.iter().map(|v| v.to_i32().unwrap_or(1)).collect(),
        _ => vec![1; tokens.len()],
    };
    let n = u32::try_from(tokens.len()).map_err(|_| "the vocabulary is too large".to_owned())?;
    let eos = token_id(content, "tokenizer.ggml.eos_token_id")
        .filter(|&t| t < n)
        .ok_or_else(|| "the metadata has no valid `tokenizer.ggml.eos_token_id`".to_owned())?;
    let bos = token_id(content, "tokenizer.ggml.bos_token_id").filter(|&t| t < n);
    let (encoder, words) = if model == "llama" {
        spm(content, &tokens, &types)?
    } else {
        bpe(content, &tokens, &types)?
    };
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
    let encoder = Arc::new(encoder);
    let env: TokEnv = Arc::new(TrieEnv {
        trie,
        encoder: encoder.clone(),
    });
    Ok(Vocab {
        encoder,
        env,
        stops,
        bos: name(bos),
        eos: name(Some(eos)),
    })
}

/// The marker-prefixed name llguidance's trie gives a control token.
fn special_word(name: &str) -> Vec<u8> {
    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    w.extend_from_slice(name.as_bytes());
    w
}

/// The byte-level BPE tokenizer and each token's bytes.
fn bpe(
    content: &Content,
    tokens: &[&str],
    types: &[i32],
) -> Result<(Encoder, Vec<Vec<u8>>), String> {
    let merges = strings(content, "tokenizer.ggml.merges")?;

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
        .zip(types)
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
                special_word(s)
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
    Ok((Encoder::Bpe(tokenizer), words))
}

/// SentencePiece's stand-in for a space in token texts.
const SPACE: char = '\u{2581}';

/// The SentencePiece BPE tokenizer and each token's bytes.
fn spm(
    content: &Content,
    tokens: &[&str],
    types: &[i32],
) -> Result<(Encoder, Vec<Vec<u8>>), String> {
    let scores: Vec<f32> = match content.metadata.get("tokenizer.ggml.scores") {
        Some(Value::Array(a)) => a.iter().map(|v| v.to_f32().unwrap_or(0.0)).collect(),
        _ => return Err("the metadata has no `tokenizer.ggml.scores`".to_owned()),
    };
    if scores.len() != tokens.len() {
        return Err(format!(
            "the metadata has {} scores for {} tokens",
            scores.len(),
            tokens.len()
        ));
    }
    let kind = |i: usize| types.get(i).copied().unwrap_or(1);
    let mut ids = HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        ids.insert((*t).to_owned(), i as u32);
    }
    let mut byte_tokens = [None; 256];
    for (b, slot) in byte_tokens.iter_mut().enumerate() {
        *slot = ids.get(&format!("<0x{b:02X}>")).copied();
    }
    // Matched whole before the rest is split, longest first (llama.cpp's order).
    let mut whole: Vec<(String, u32)> = tokens
        .iter()
        .enumerate()
        .filter(|(i, t)| matches!(kind(*i), CONTROL | USER_DEFINED | UNKNOWN) && !t.is_empty())
        .map(|(i, t)| ((*t).to_owned(), i as u32))
        .collect();
    whole.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
    let space_prefix = match content.metadata.get("tokenizer.ggml.add_space_prefix") {
        Some(v) => v.to_bool().unwrap_or(true),
        None => true,
    };
    let words = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| match kind(i) {
            CONTROL => special_word(t),
            USER_DEFINED => t.as_bytes().to_vec(),
            BYTE => parse_byte(t).map_or_else(|| t.as_bytes().to_vec(), |b| vec![b]),
            _ => t.replace(SPACE, " ").into_bytes(),
        })
        .collect();
    let unknown = token_id(content, "tokenizer.ggml.unknown_token_id");
    Ok((
        Encoder::Spm(Spm {
            ids,
            scores,
            whole,
            byte_tokens,
            unknown,
            space_prefix,
        }),
        words,
    ))
}

/// The byte of a byte token's text (`<0x0A>`).
fn parse_byte(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

/// A SentencePiece BPE tokenizer, as llama.cpp's `llm_tokenizer_spm`: the text is split at
/// control and added tokens (matched whole, longest first); in each piece, spaces become `▁`,
/// and starting from its characters, the adjacent pair whose joined text is the token of the
/// highest score is joined, again and again (the leftmost on a tie); what is left that is no
/// token is written as byte tokens.
pub(super) struct Spm {
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    whole: Vec<(String, u32)>,
    byte_tokens: [Option<u32>; 256],
    unknown: Option<u32>,
    /// Whether a piece that starts the text or follows a whole-matched token gets a space first
    /// (`tokenizer.ggml.add_space_prefix`, true unless the file says otherwise).
    space_prefix: bool,
}

/// A piece of the text being tokenized: text still to split, or a token matched whole.
enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// A candidate join of two adjacent symbols.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// The greatest is the highest score, then the leftmost.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

/// A symbol of a piece: `start..start + len` of its text (`len` 0 once joined to its left).
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Spm {
    pub(super) fn encode(&self, text: &str) -> Vec<u32> {
        let mut fragments = vec![Fragment::Text(text)];
        for (name, id) in &self.whole {
            if !text.contains(name.as_str()) {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len());
            for f in fragments {
                match f {
                    Fragment::Text(mut rest) => {
                        while let Some(at) = rest.find(name.as_str()) {
                            if at > 0 {
                                next.push(Fragment::Text(&rest[..at]));
                            }
                            next.push(Fragment::Token(*id));
                            rest = &rest[at + name.len()..];
                        }
                        if !rest.is_empty() {
                            next.push(Fragment::Text(rest));
                        }
                    }
                    token => next.push(token),
                }
            }
            fragments = next;
        }
        let mut out = Vec::new();
        let mut after_token = true;
        for f in fragments {
            match f {
                Fragment::Token(id) => {
                    out.push(id);
                    after_token = true;
                }
                Fragment::Text(t) => {
                    let mut piece = String::with_capacity(t.len() + 3);
                    if self.space_prefix && after_token {
                        piece.push(SPACE);
                    }
                    piece.extend(t.chars().map(|c| if c == ' ' { SPACE } else { c }));
                    self.encode_piece(&piece, &mut out);
                    after_token = false;
                }
            }
        }
        out
    }

    fn encode_piece(&self, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            let len = c.len_utf8();
            symbols.push(Symbol {
                start,
                len,
                prev: i.checked_sub(1),
                next: (start + len < text.len()).then_some(i + 1),
            });
        }
        let mut queue = BinaryHeap::new();
        // Which two symbols a joined text was made of, to split a symbol that is no token.
        let mut made_of: HashMap<&str, (usize, usize)> = HashMap::new();
        for i in 1..symbols.len() {
            self.try_join(
                text,
                &symbols,
                &mut queue,
                &mut made_of,
                Some(i - 1),
                Some(i),
            );
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (&symbols[b.left], &symbols[b.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            let right_next = r.next;
            symbols[b.left].len = b.size;
            symbols[b.right].len = 0;
            symbols[b.left].next = right_next;
            if let Some(n) = right_next {
                symbols[n].prev = Some(b.left);
            }
            let prev = symbols[b.left].prev;
            self.try_join(text, &symbols, &mut queue, &mut made_of, prev, Some(b.left));
            self.try_join(
                text,
                &symbols,
                &mut queue,
                &mut made_of,
                Some(b.left),
                right_next,
            );
        }
        let mut at = (!symbols.is_empty()).then_some(0);
        while let Some(i) = at {
            self.resegment(text, &symbols, &made_of, i, out);
            at = symbols[i].next;
        }
    }

    /// Queues the join of two adjacent symbols when their text is a token.
    fn try_join<'t>(
        &self,
        text: &'t str,
        symbols: &[Symbol],
        queue: &mut BinaryHeap<Bigram>,
        made_of: &mut HashMap<&'t str, (usize, usize)>,
        left: Option<usize>,
        right: Option<usize>,
    ) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        let joined = &text[start..start + size];
        if let Some(id) = self.ids.get(joined) {
            queue.push(Bigram {
                score: self.scores.get(*id as usize).copied().unwrap_or(0.0),
                left,
                right,
                size,
            });
            made_of.insert(joined, (left, right));
        }
    }

    fn resegment(
        &self,
        text: &str,
        symbols: &[Symbol],
        made_of: &HashMap<&str, (usize, usize)>,
        i: usize,
        out: &mut Vec<u32>,
    ) {
        let s = &text[symbols[i].start..symbols[i].start + symbols[i].len];
        if let Some(id) = self.ids.get(s) {
            out.push(*id);
        } else if let Some((l, r)) = made_of.get(s) {
            self.resegment(text, symbols, made_of, *l, out);
            self.resegment(text, symbols, made_of, *r, out);
        } else {
            for b in s.bytes() {
                if let Some(id) = self.byte_tokens[b as usize].or(self.unknown) {
                    out.push(id);
                }
            }
        }
    }
}

/// The token trie with the tokenizer that encodes text for it (llguidance tokenizes the
/// grammar's fixed strings through it).
struct TrieEnv {
    trie: TokTrie,
    encoder: Arc<Encoder>,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => match self.encoder.encode(text) {
                Ok(ids) => ids,
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

    /// A small SentencePiece vocabulary: the highest-scored join goes first,
    /// added tokens are matched whole (longest first), and text with no token becomes bytes.
    #[test]
    fn spm_joins_the_best_scored_pair_first_and_falls_back_to_bytes() {
        let vocab: &[(&str, f32)] = &[
            ("<s>", 0.0),
            ("<turn>", 0.0),
            ("\n", 0.0),
            ("\n\n", 0.0),
            ("\u{2581}", -1.0),
            ("a", -1.0),
            ("b", -1.0),
            ("c", -1.0),
            ("ab", -5.0),
            ("bc", -2.0),
            ("\u{2581}a", -3.0),
            ("<0xC3>", 0.0),
            ("<0xA9>", 0.0),
        ];
        let ids: HashMap<String, u32> = vocab
            .iter()
            .enumerate()
            .map(|(i, (t, _))| ((*t).to_owned(), i as u32))
            .collect();
        let mut byte_tokens = [None; 256];
        byte_tokens[0xC3] = Some(11);
        byte_tokens[0xA9] = Some(12);
        let spm = Spm {
            ids,
            scores: vocab.iter().map(|(_, s)| *s).collect(),
            whole: vec![("<turn>".into(), 1), ("\n\n".into(), 3), ("\n".into(), 2)],
            byte_tokens,
            unknown: None,
            space_prefix: false,
        };
        // `bc` (-2) before `ab` (-5); then `▁a` (-3).
        assert_eq!(spm.encode("abc a"), vec![5, 9, 10]);
        // Added tokens whole, the longest first; `é` has no token: its two bytes.
        assert_eq!(spm.encode("<turn>a\n\n\n\u{e9}"), vec![1, 5, 3, 2, 11, 12]);
        assert_eq!(parse_byte("<0x0A>"), Some(b'\n'));
    }
}
