//! API keys. Each key belongs to a user; a request carries its key as `x-api-key` or
//! `Authorization: Bearer KEY`, and sees only its user's threads and runs. A request without a
//! known key gets 401 with a JSON body.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// The user a request acts for.
#[derive(Clone, Debug)]
pub(crate) struct User(pub String);

/// Known keys and their users.
pub(crate) struct Keys(HashMap<String, String>);

impl Keys {
    /// Reads `--keys FILE` (lines `KEY USER`) and `WEFT_API_KEYS` (`KEY=USER,...`). No key at
    /// all is a mistake: a server that anyone can use is never what `weft serve` starts.
    pub(crate) fn load(file: Option<&Path>) -> Result<Self> {
        let mut keys = HashMap::new();
        if let Some(f) = file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| anyhow!("--keys {}: cannot read it: {e}", f.display()))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(k), Some(u), None) => {
                        add(&mut keys, k, u, &format!("{}:{}", f.display(), n + 1))?
                    }
                    _ => {
                        return Err(anyhow!(
                            "--keys {}:{}: write one `KEY USER` pair per line",
                            f.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
        if let Ok(env) = std::env::var("WEFT_API_KEYS") {
            for pair in env.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, u) = pair.split_once('=').ok_or_else(|| {
                    anyhow!(
                        "WEFT_API_KEYS: `{}`: write KEY=USER pairs separated by commas",
                        redact(pair)
                    )
                })?;
                add(&mut keys, k.trim(), u.trim(), "WEFT_API_KEYS")?;
            }
        }
        if keys.is_empty() {
            return Err(anyhow!(
                "weft serve needs API keys: give --keys FILE (lines `KEY USER`) or WEFT_API_KEYS=KEY=USER,..."
            ));
        }
        Ok(Self(keys))
    }
}

fn add(keys: &mut HashMap<String, String>, k: &str, u: &str, whence: &str) -> Result<()> {
    if k.len() < 16 {
        return Err(anyhow!(
            "{whence}: the key of user `{u}` is {} characters; use at least 16 (e.g. `openssl rand -hex 16`)",
            k.len()
        ));
    }
    keys.insert(k.to_owned(), u.to_owned());
    Ok(())
}

/// A key shown in a message: its first four characters.
fn redact(s: &str) -> String {
    format!("{}…", s.chars().take(4).collect::<String>())
}

/// Rejects a request without a known key; gives the others their [`User`].
pub(crate) async fn require(
    State(keys): State<Arc<Keys>>,
    mut req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    let given = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(|v| v.trim().to_owned())
        });
    let Some(user) = given.and_then(|k| keys.0.get(&k).cloned()) else {
        // The body is not read: a connection whose body had not all arrived yet is closed after
        // the answer, so it says so, and the client does not send its next request on it.
        let unread = req
            .headers()
            .contains_key(axum::http::header::TRANSFER_ENCODING)
            || req
                .headers()
                .get(axum::http::header::CONTENT_LENGTH)
                .is_some_and(|v| v.as_bytes() != b"0");
        let mut res = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "a valid API key is needed (x-api-key or Authorization: Bearer)".into(),
        )
        .into_response();
        if unread {
            res.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        return res;
    };
    req.extensions_mut().insert(User(user));
    next.run(req).await
}
