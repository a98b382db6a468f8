//! `weft sessions trace`: a past session's OpenTelemetry spans, read from the store and sent
//! (or printed); the live export of a driven session is `weft_host::telemetry`.

use std::time::Duration;

use anyhow::{Result, anyhow};
use weft_host::telemetry::options;
use weft_store::Store;
use weft_telemetry::{Deriver, Exporter, export};

/// `weft sessions trace ID [--otlp URL]`: sends the spans; with `--json`, prints them.
pub async fn trace<S: Store>(
    store: &S,
    id: &str,
    otlp: Option<&str>,
    json: bool,
    out: &mut impl std::io::Write,
) -> Result<u8> {
    if !json {
        // A mistake in the endpoint is said before the session is read.
        export::endpoint(otlp)?;
    }
    let (_, events) = store.load(id).await?;
    let spans = Deriver::derive(id, options(store, id, None, None).await, &events);
    if json {
        for s in &spans {
            writeln!(out, "{}", export::span_json(s))?;
        }
        return Ok(0);
    }
    if export::disabled() {
        return Err(anyhow!(
            "OTEL_SDK_DISABLED=true: telemetry is off; unset it to export, or use --json"
        ));
    }
    let exporter = Exporter::from_env(otlp)?.ok_or_else(|| {
        anyhow!(
            "no OTLP endpoint: give --otlp URL or set OTEL_EXPORTER_OTLP_ENDPOINT (or use --json)"
        )
    })?;
    let url = exporter.endpoint().to_string();
    let n = spans.len();
    let trace = spans
        .first()
        .map(|s| export::span_json(s)["trace_id"].clone())
        .unwrap_or_default();
    exporter.send_all(spans).await;
    let (counts, err) = exporter.finish(Duration::from_secs(30)).await;
    if counts.exported as usize != n {
        return Err(anyhow!(
            "exported {} of {n} spans of session {id} to {url}: {}",
            counts.exported,
            err.unwrap_or_else(|| "the collector did not answer in time".to_owned())
        ));
    }
    writeln!(
        out,
        "exported {n} spans of session {id} (trace {}) to {url}",
        trace.as_str().unwrap_or_default()
    )?;
    Ok(0)
}
