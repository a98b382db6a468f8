//! Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, llama.cpp's server in
//! embedding mode, vLLM, Ollama), over the providers' HTTP layer: the same timeouts, retries with
//! backoff, key handling and cassettes.
//!
//! Configured per process, because the vectors a store keeps must all come from one model:
//! `WEFT_EMBEDDINGS_URL` (the base URL, e.g. `http://127.0.0.1:8090/v1`), `WEFT_EMBEDDINGS_MODEL`
//! (the model name sent, default `default`) and `WEFT_EMBEDDINGS_API_KEY_ENV` (the variable that
//! holds a key, if the server needs one). Without `WEFT_EMBEDDINGS_URL` there are no embeddings
//! and search is by text alone.
//!
//! A reply is checked before it is used: one vector per input, in order, all of one dimension
//! (at most [`MAX_DIMENSION`]), every number finite. Vectors are returned scaled to length 1, so a
//! dot product is their cosine similarity.

use serde_json::{Value, json};

use crate::config::{ProviderConfig, ProviderKind};
use crate::http::{Http, parse_json};
use crate::{ModelError, Usage};

/// Texts sent in one request.
pub const BATCH: usize = 32;
/// The longest vector accepted from a server.
pub const MAX_DIMENSION: usize = 8192;
/// The most bytes of one text sent to be embedded (about 500 tokens; embedding models read
/// 256–8192 tokens and the rest would be cut or refused by the server anyway).
pub const MAX_TEXT_BYTES: usize = 2000;

/// The environment variables that configure embeddings. This one holds the endpoint's base URL
/// (`http://127.0.0.1:8090/v1`); embeddings are off when it is unset or empty.
pub const URL_ENV: &str = "WEFT_EMBEDDINGS_URL";
/// The variable holding the model name sent with each request (`default` when unset).
pub const MODEL_ENV: &str = "WEFT_EMBEDDINGS_MODEL";
/// The variable holding the name of another variable that holds the server's key (no key is
/// sent when unset).
pub const KEY_ENV_ENV: &str = "WEFT_EMBEDDINGS_API_KEY_ENV";

/// A client of an embeddings endpoint.
#[derive(Debug)]
pub struct Embedder {
    http: Http,
    model: String,
    headers: Vec<(&'static str, String)>,
}

impl Embedder {
    /// A client of the OpenAI-compatible endpoint at `base_url` (without `/embeddings`) for
    /// `model`, sending `api_key` as a bearer token when given.
    pub fn new(base_url: &str, model: &str, api_key: Option<String>) -> Result<Self, ModelError> {
        let mut cfg = ProviderConfig::new(ProviderKind::OpenAi, model);
        cfg.base_url = base_url.trim_end_matches('/').to_owned();
        if crate::config::check_base_url(&cfg.base_url).is_err() {
            return Err(ModelError::Config(format!(
                "{URL_ENV} {base_url:?} is not an http(s) URL with a host; write the endpoint's base, e.g. http://127.0.0.1:8090/v1"
            )));
        }
        cfg.timeout = std::time::Duration::from_secs(60);
        cfg.no_key = api_key.is_none();
        cfg.api_key.clone_from(&api_key);
        let headers = api_key
            .map(|k| vec![("authorization", format!("Bearer {k}"))])
            .unwrap_or_default();
        Ok(Self {
            http: Http::new(&cfg)?,
            model: model.to_owned(),
            headers,
        })
    }

    /// The client the environment configures (see the module's documentation); `None` without
    /// `WEFT_EMBEDDINGS_URL`. `env` looks up a variable.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Self>, ModelError> {
        let Some(url) = env(URL_ENV).filter(|s| !s.trim().is_empty()) else {
            return Ok(None);
        };
        let model = env(MODEL_ENV)
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let key = match env(KEY_ENV_ENV).filter(|s| !s.trim().is_empty()) {
            None => None,
            Some(var) => Some(env(&var).filter(|s| !s.is_empty()).ok_or_else(|| {
                ModelError::Config(format!(
                    "{KEY_ENV_ENV} names {var}, which is not set: set it to the embeddings server's key"
                ))
            })?),
        };
        Self::new(url.trim(), model.trim(), key).map(Some)
    }

    /// The model name, kept with every stored vector: vectors of different models are never
    /// compared.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// One vector per text, in order, each of length 1. Texts longer than [`MAX_TEXT_BYTES`]
    /// are cut (at a character boundary) before they are sent.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut out: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            let input: Vec<&str> = batch.iter().map(|t| cut(t)).collect();
            let body = json!({"model": self.model, "input": input});
            let resp = self.http.post("/embeddings", &self.headers, &body).await?;
            let text = resp.text().await?;
            let vectors = read_reply(self.http.provider(), &text, batch.len())?;
            if let (Some(first), Some(v)) = (out.first(), vectors.first())
                && first.len() != v.len()
            {
                return Err(malformed(
                    self.http.provider(),
                    &format!(
                        "the server changed its vectors' dimension mid-run ({} then {})",
                        first.len(),
                        v.len()
                    ),
                    &text,
                ));
            }
            out.extend(vectors);
        }
        Ok(out)
    }
}

fn cut(text: &str) -> &str {
    if text.len() <= MAX_TEXT_BYTES {
        return text;
    }
    let mut end = MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn malformed(provider: &str, message: &str, body: &str) -> ModelError {
    let mut body = body.to_owned();
    if body.len() > 500 {
        let mut end = 500;
        while !body.is_char_boundary(end) {
            end -= 1;
        }
        body.truncate(end);
        body.push_str("...");
    }
    ModelError::Malformed {
        provider: provider.to_owned(),
        message: format!("embeddings: {message}"),
        body,
        usage: Usage::default(),
    }
}

/// Reads an embeddings reply for `n` inputs: `{"data": [{"index": i, "embedding": [...]}]}`.
pub(crate) fn read_reply(
    provider: &str,
    text: &str,
    n: usize,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let v: Value = parse_json(provider, text)?;
    let Some(data) = v.get("data").and_then(Value::as_array) else {
        return Err(malformed(provider, "the reply has no `data` list", text));
    };
    if data.len() != n {
        return Err(malformed(
            provider,
            &format!("asked for {n} vectors, got {}", data.len()),
            text,
        ));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; n];
    let mut dimension: Option<usize> = None;
    for (pos, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            None => pos,
            Some(i) => i
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|i| *i < n)
                .ok_or_else(|| {
                    malformed(provider, &format!("item {pos} has a bad `index` {i}"), text)
                })?,
        };
        let Some(numbers) = item.get("embedding").and_then(Value::as_array) else {
            return Err(malformed(
                provider,
                &format!("item {pos} has no `embedding` list (a base64 encoding is not asked for)"),
                text,
            ));
        };
        // llama.cpp's server without pooling answers one vector per token: a list of lists.
        if numbers.first().is_some_and(Value::is_array) {
            return Err(malformed(
                provider,
                "the server returned one vector per token; start it with pooling (e.g. `--pooling mean`) so it returns one per text",
                text,
            ));
        }
        if numbers.is_empty() || numbers.len() > MAX_DIMENSION {
            return Err(malformed(
                provider,
                &format!(
                    "item {pos} has {} numbers; expected 1 to {MAX_DIMENSION}",
                    numbers.len()
                ),
                text,
            ));
        }
        if *dimension.get_or_insert(numbers.len()) != numbers.len() {
            return Err(malformed(
                provider,
                "the vectors have different dimensions",
                text,
            ));
        }
        let mut vector = Vec::with_capacity(numbers.len());
        for x in numbers {
            #[allow(clippy::cast_possible_truncation)]
            match x.as_f64().map(|x| x as f32).filter(|x| x.is_finite()) {
                Some(x) => vector.push(x),
                None => {
                    return Err(malformed(
                        provider,
                        &format!("item {pos} holds {x}, which is not a finite number"),
                        text,
                    ));
                }
            }
        }
        if !normalise(&mut vector) {
            return Err(malformed(
                provider,
                &format!("item {pos} is all zeros"),
                text,
            ));
        }
        if slots[index].replace(vector).is_some() {
            return Err(malformed(
                provider,
                &format!("index {index} appears twice"),
                text,
            ));
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Scales `v` to length 1; false if it is all zeros.
pub fn normalise(v: &mut [f32]) -> bool {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return false;
    }
    #[allow(clippy::cast_possible_truncation)]
    for x in v.iter_mut() {
        *x = (f64::from(*x) / norm) as f32;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_in_index_order_and_normalised() {
        let v = read_reply(
            "openai",
            r#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}"#,
            2,
        )
        .unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
    }

    #[test]
    fn bad_replies_say_what_is_wrong() {
        let bad = |text: &str, n: usize, needle: &str| {
            let e = read_reply("openai", text, n).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        };
        bad("nope", 1, "not JSON");
        bad(r#"{"object":"list"}"#, 1, "no `data` list");
        bad(r#"{"data":[]}"#, 1, "asked for 1 vectors, got 0");
        bad(
            r#"{"data":[{"embedding":[[1,2],[3,4]]}]}"#,
            1,
            "one vector per token",
        );
        bad(
            r#"{"data":[{"embedding":[1,"x"]}]}"#,
            1,
            "not a finite number",
        );
        bad(r#"{"data":[{"embedding":[0,0]}]}"#, 1, "all zeros");
        bad(r#"{"data":[{"embedding":[]}]}"#, 1, "has 0 numbers");
        bad(
            r#"{"data":[{"embedding":[1]},{"embedding":[1,2]}]}"#,
            2,
            "different dimensions",
        );
        bad(
            r#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
            2,
            "appears twice",
        );
        bad(
            r#"{"data":[{"index":7,"embedding":[1]}]}"#,
            1,
            "bad `index`",
        );
        let huge = format!(
            r#"{{"data":[{{"embedding":[{}]}}]}}"#,
            vec!["1"; MAX_DIMENSION + 1].join(",")
        );
        bad(&huge, 1, "expected 1 to 8192");
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        let t = "é".repeat(MAX_TEXT_BYTES);
        let c = cut(&t);
        assert!(c.len() <= MAX_TEXT_BYTES && c.chars().all(|ch| ch == 'é'));
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn the_environment_configures_or_refuses() {
        let none = Embedder::from_env(&|_| None).unwrap();
        assert!(none.is_none());
        let vars = |k: &str| match k {
            URL_ENV => Some("http://127.0.0.1:9/v1/".to_owned()),
            KEY_ENV_ENV => Some("MY_KEY".to_owned()),
            _ => None,
        };
        let e = Embedder::from_env(&vars).unwrap_err().to_string();
        assert!(e.contains("MY_KEY") && e.contains("not set"), "{e}");
        let ok = Embedder::from_env(&|k: &str| {
            (k == URL_ENV).then(|| "http://127.0.0.1:9/v1".to_owned())
        })
        .unwrap()
        .unwrap();
        assert_eq!(ok.model(), "default");
        let e = Embedder::from_env(&|k: &str| (k == URL_ENV).then(|| "not a url".to_owned()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(URL_ENV) && e.contains("\"not a url\""), "{e}");
        assert_eq!(e.matches("model configuration").count(), 1, "{e}");
    }
}
