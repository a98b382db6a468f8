//! CORS: the origins whose pages may call the API from a browser (`weft serve --cors-origin`).
//!
//! Off by default: a browser then lets only pages of the server's own origin (the playground)
//! read its answers. Keys travel in a header (`x-api-key`, `Authorization`), never in a cookie,
//! so no credentials are allowed and `*` (any origin) gives a page nothing its user's key does
//! not. The headers LangGraph's clients read are exposed: `Content-Location` (the run a stream
//! belongs to, which the JavaScript SDK needs to rejoin it) and `Location` (a run's join).

use std::time::Duration;

use axum::http::{HeaderValue, Method, header};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

/// The layer for `origins` (none: no layer), or what is wrong with one of them.
pub(crate) fn layer(origins: &[String]) -> Result<Option<CorsLayer>, String> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        if origins.len() > 1 {
            return Err(
                "--cors-origin `*` allows every origin: give it alone, or list the origins".into(),
            );
        }
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .map(|o| origin(o))
                .collect::<Result<Vec<_>, _>>()?,
        )
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
            ])
            // The SDKs' own (`x-api-key`, `last-event-id`, `content-type`, ...) and whatever an
            // application adds: a preflight gets back the headers it asked for.
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers([header::CONTENT_LOCATION, header::LOCATION])
            .max_age(Duration::from_secs(3600)),
    ))
}

/// `o` as an origin header value: `http` or `https`, a host, an optional port, nothing after.
fn origin(o: &str) -> Result<HeaderValue, String> {
    let bad = |why: &str| {
        Err(format!(
            "--cors-origin `{o}`: {why}; an origin is scheme://host[:port], as a browser sends \
             it (e.g. http://localhost:5173), or `*` for any"
        ))
    };
    let Some((scheme, rest)) = o.split_once("://") else {
        return bad("no scheme");
    };
    if scheme != "http" && scheme != "https" {
        return bad("the scheme is not http or https");
    }
    if rest.is_empty() {
        return bad("no host");
    }
    if rest.contains('/') {
        return bad("an origin has no path (drop everything from the first `/` after the host)");
    }
    if rest.contains(['?', '#', '@', ' ']) {
        return bad("an origin is only a host and a port");
    }
    if let Some((_, port)) = rest.rsplit_once(':')
        && !rest.ends_with(']')
        && port.parse::<u16>().is_err()
    {
        return bad("the port is not a number");
    }
    match HeaderValue::from_str(o) {
        Ok(v) => Ok(v),
        Err(_) => bad("it is not a header value"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked_and_the_error_says_what_one_is() {
        assert!(layer(&[]).unwrap().is_none());
        assert!(layer(&["*".into()]).unwrap().is_some());
        assert!(
            layer(&["http://localhost:5173".into(), "https://app.example".into()])
                .unwrap()
                .is_some()
        );
        assert!(layer(&["http://[::1]:8080".into()]).unwrap().is_some());
        for (bad, says) in [
            ("localhost:5173", "no scheme"),
            ("ftp://x", "not http or https"),
            ("http://localhost:5173/", "no path"),
            ("http://x:port", "not a number"),
            ("http://", "no host"),
        ] {
            let e = layer(&[bad.into()]).unwrap_err();
            assert!(
                e.contains(says) && e.contains(bad) && e.contains("scheme://host[:port]"),
                "{bad}: {e}"
            );
        }
        let e = layer(&["*".into(), "http://a".into()]).unwrap_err();
        assert!(e.contains("alone"), "{e}");
    }
}
