//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): what a broken or hostile
//! server can send, read by the same code that reads a live reply. Each returns the reply or the
//! error a run would record; none may panic, hang or grow without bound.

use std::sync::{Arc, OnceLock};

use crate::http::Response;
use crate::sse::SseParser;
use crate::{
    AnthropicModel, DeltaSink, ModelError, ModelReply, OpenAiModel, ProviderConfig, ProviderKind,
};

fn sink() -> DeltaSink {
    Arc::new(|_: &str| {})
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("a current-thread runtime: {e}"))
    })
}

fn config(kind: ProviderKind) -> ProviderConfig {
    let mut c = ProviderConfig::new(kind, "fuzz");
    c.base_url = "http://127.0.0.1:9/v1".into();
    c.api_key = Some("fuzz-key".into());
    c
}

/// Built once: building a provider builds its HTTP client, which is slow and not what is fuzzed.
fn models() -> &'static (OpenAiModel, AnthropicModel) {
    static MODELS: OnceLock<(OpenAiModel, AnthropicModel)> = OnceLock::new();
    MODELS.get_or_init(|| {
        let built = OpenAiModel::new(config(ProviderKind::OpenAi))
            .and_then(|o| Ok((o, AnthropicModel::new(config(ProviderKind::Anthropic))?)));
        built.unwrap_or_else(|e| panic!("the providers of the fuzz targets: {e}"))
    })
}

/// An OpenAI-compatible reply body: a whole JSON reply, or (`streamed`) a server-sent stream.
pub fn openai(body: &str, streamed: bool) -> Result<Option<ModelReply>, ModelError> {
    let m = &models().0;
    if streamed {
        let resp = Response::of_text("openai", body.to_owned());
        runtime().block_on(m.read_stream(resp, sink(), 0))
    } else {
        m.parse_reply(body).map(Some)
    }
}

/// An Anthropic reply body: a whole JSON reply, or (`streamed`) a server-sent stream.
pub fn anthropic(body: &str, streamed: bool) -> Result<ModelReply, ModelError> {
    let m = &models().1;
    if streamed {
        let resp = Response::of_text("anthropic", body.to_owned());
        runtime().block_on(m.read_stream(resp, sink()))
    } else {
        m.parse_reply(body)
    }
}

/// The server-sent events of a stream that arrives in `pieces`, as (event name, data).
pub fn sse_events(pieces: &[&str]) -> Vec<(Option<String>, String)> {
    let mut p = SseParser::default();
    let mut out: Vec<_> = pieces
        .iter()
        .flat_map(|piece| p.feed(piece))
        .map(|e| (e.event, e.data))
        .collect();
    out.extend(p.finish().map(|e| (e.event, e.data)));
    out
}

/// An embeddings reply body for `n` inputs: the vectors, or the error a search or an addition
/// would report.
pub fn embeddings(body: &str, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
    crate::embeddings::read_reply("openai", body, n)
}
