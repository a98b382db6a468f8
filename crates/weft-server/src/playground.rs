//! The playground: a web page at `/` that shows sessions live (the plan as a graph laid out by
//! wave, tool calls, reviews and replans, the streamed answer, usage and cost), starts runs,
//! answers waits, approves, rejects and edits plans and tool calls, cancels and pauses, and
//! travels back through a session's events to fork it. Its files (plain ES modules and CSS in
//! `crates/weft-server/playground/`, no build step) are embedded in the binary and hold no data, so
//! they load without a key; everything the page shows comes from the HTTP API, called with the
//! key the person signs in with, like any other client.
//!
//! The key is kept in `sessionStorage` (or `localStorage` when asked) and sent as `x-api-key`;
//! event streams are read with `fetch` (with `Last-Event-ID`), since `EventSource` cannot send a
//! header. The page is served with a Content-Security-Policy that allows only this server's
//! scripts, styles and connections, and an ETag from the embedded file's hash (`debug-embed`:
//! debug builds embed the files too, so tests load what ships). The scripts, one per concern
//! under `playground/js/` (`main.js` the entry), each say in their first lines what they do;
//! every one is `// @ts-check`, checked by `tsc` against `api-types.d.ts` (see `openapi.rs`).

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

#[derive(rust_embed::Embed)]
#[folder = "playground/"]
struct Assets;

/// Where the page's scripts may load from and talk to: this server only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`: the page.
pub(crate) async fn index(headers: HeaderMap) -> Response {
    file("index.html", &headers)
}

/// `GET /playground/{*path}`: its scripts, styles and icons.
pub(crate) async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    file(&path, &headers)
}

fn file(path: &str, headers: &HeaderMap) -> Response {
    let Some(f) = Assets::get(path) else {
        return super::ApiError::not_found("file").into_response();
    };
    let etag = format!(
        "\"{}\"",
        f.metadata
            .sha256_hash()
            .iter()
            .take(12)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        f.data.into_owned().into_response()
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(f.metadata.mimetype()) {
        h.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    // Revalidated on every load (cheap with the ETag), so a new build is never mixed with an
    // old cached module.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        let index = Assets::get("index.html").map(|f| f.data.into_owned());
        let index = String::from_utf8(index.unwrap_or_default()).unwrap_or_default();
        assert!(index.contains("/playground/js/main.js"), "{index}");
        let mut missing = Vec::new();
        for name in Assets::iter() {
            if !name.ends_with(".js") {
                continue;
            }
            let text = Assets::get(&name)
                .map(|f| String::from_utf8_lossy(&f.data).into_owned())
                .unwrap_or_default();
            for line in text.lines() {
                let line = line.trim();
                if !(line.starts_with("import ") || line.starts_with("} from ")) {
                    continue;
                }
                let Some(spec) = line.split(['"', '\'']).nth(1) else {
                    continue;
                };
                let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
                let target = spec.trim_start_matches("./");
                let full = if dir.is_empty() {
                    target.to_owned()
                } else {
                    format!("{dir}/{target}")
                };
                if Assets::get(&full).is_none() {
                    missing.push(format!("{name} imports {spec}"));
                }
            }
        }
        assert!(missing.is_empty(), "{missing:?}");
    }
}
