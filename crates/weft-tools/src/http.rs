//! Declarative HTTP tools: a request built from templates over the call's arguments and the
//! agent's secrets.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::agent::parse_duration;
use weft_core::{ToolError, ToolInfo};

use crate::render::Vars;
use crate::secrets::{Secrets, referenced_in_str, referenced_in_value};
use crate::{Tool, ToolContext};

const DEFAULT_MAX_RESPONSE: usize = 1024 * 1024;
/// How much of an error response body is kept.
const MAX_ERROR_BODY: usize = 4 * 1024;

/// An HTTP endpoint as a tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpToolDecl {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    category: Option<String>,
    #[serde(default = "any_object")]
    input_schema: Value,
    /// JSON Schema of the response's body (read as JSON): a call whose body does not match
    /// it fails, and a planner in the process offers a reference into it only where it fits
    /// the parameter it fills.
    #[serde(default)]
    output_schema: Option<Value>,
    #[serde(default)]
    idempotent: bool,
    #[serde(default)]
    parallel: bool,
    #[serde(default)]
    requires_approval: bool,
    http: HttpSpec,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct HttpSpec {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    #[schemars(schema_with = "weft_core::agent::schema::duration")]
    timeout: Option<Value>,
    #[serde(default)]
    max_response_bytes: Option<usize>,
}

fn get() -> String {
    "GET".into()
}

fn any_object() -> Value {
    json!({"type": "object"})
}

/// A tool that makes one HTTP request.
#[derive(Debug, Clone)]
pub struct HttpTool {
    info: ToolInfo,
    method: reqwest::Method,
    url: String,
    headers: BTreeMap<String, String>,
    body: Option<Value>,
    timeout: Duration,
    max_response_bytes: usize,
    secrets: Option<Secrets>,
    uses_secrets: bool,
    client: reqwest::Client,
}

impl HttpTool {
    /// Builds the tool from its raw declaration. Every secret it refers to must be declared.
    pub fn from_decl(raw: &Value, secrets: Option<Secrets>) -> Result<Self, String> {
        let decl: HttpToolDecl = serde_json::from_value(raw.clone()).map_err(|e| {
            let name = raw.get("name").and_then(Value::as_str).unwrap_or("?");
            format!("http tool `{name}`: {e}")
        })?;
        let name = decl.name.clone();
        let method = reqwest::Method::from_bytes(decl.http.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| {
                format!(
                    "`{name}`: http.method `{}` is not an HTTP method",
                    decl.http.method
                )
            })?;
        let timeout = match &decl.http.timeout {
            None => Duration::from_secs(30),
            Some(v) => parse_duration(v).map_err(|e| format!("`{name}`: http.timeout: {e}"))?,
        };
        let mut used = BTreeSet::new();
        referenced_in_str(&decl.http.url, &mut used);
        decl.http
            .headers
            .values()
            .for_each(|h| referenced_in_str(h, &mut used));
        if let Some(b) = &decl.http.body {
            referenced_in_value(b, &mut used);
        }
        let uses_secrets = !used.is_empty();
        if uses_secrets {
            let s = secrets.clone().unwrap_or_default();
            s.check_declared(used, &format!("http tool `{name}`"))
                .map_err(|e| e.to_string())?;
        }
        let client = client_builder()
            .timeout(timeout)
            .redirect(redirect_policy(uses_secrets))
            .build()
            .map_err(|e| format!("`{name}`: could not set up the HTTP client: {e}"))?;
        Ok(Self {
            info: ToolInfo {
                name: decl.name,
                description: decl.description,
                category: decl.category,
                input_schema: decl.input_schema,
                idempotent: decl.idempotent,
                parallel: decl.parallel,
                requires_approval: decl.requires_approval,
                source: "http".into(),
                output_schema: decl.output_schema,
            },
            method,
            url: decl.http.url,
            headers: decl.http.headers,
            body: decl.http.body,
            timeout,
            max_response_bytes: decl.http.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE),
            secrets,
            uses_secrets,
            client,
        })
    }

    async fn run(&self, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let name = &self.info.name;
        let vars = Vars::new(args, self.secrets.as_ref(), self.uses_secrets)?;
        let url = vars.render_url(name, "http.url", &self.url)?;
        let mut req = self.client.request(self.method.clone(), &url);
        for (k, v) in &self.headers {
            req = req.header(
                k.as_str(),
                vars.render(name, &format!("http.headers.{k}"), v)?,
            );
        }
        if !ctx.idempotency_key.is_empty()
            && !self
                .headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("idempotency-key"))
        {
            req = req.header("Idempotency-Key", &ctx.idempotency_key);
        }
        if let Some(body) = &self.body {
            let body = vars.render_json(name, "http.body", body)?;
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&body).unwrap_or_default());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| request_error(name, self.timeout, &e))?;
        let status = resp.status();
        let is_json = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("json"));
        let bytes = read_limited(resp, self.max_response_bytes, name, self.timeout).await?;
        if !status.is_success() {
            let keep = &bytes[..bytes.len().min(MAX_ERROR_BODY)];
            return Err(ToolError::new(
                "http_status",
                format!("`{name}`: the server answered {status}"),
            )
            .with_detail(json!({
                "status": status.as_u16(),
                "body": String::from_utf8_lossy(keep),
                "truncated": bytes.len() > MAX_ERROR_BODY,
            })));
        }
        Ok(body_value(&bytes, is_json))
    }
}

/// The response body as JSON when it is JSON, else as text.
pub(crate) fn body_value(bytes: &[u8], is_json: bool) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) if is_json || bytes.first().is_some_and(|b| *b == b'{' || *b == b'[') => v,
        _ => Value::String(String::from_utf8_lossy(bytes).into_owned()),
    }
}

pub(crate) fn request_error(name: &str, timeout: Duration, e: &reqwest::Error) -> ToolError {
    if e.is_timeout() {
        ToolError::new("timeout", format!("`{name}`: no answer within {timeout:?}"))
    } else {
        // The URL may hold a secret; the registry redacts it before anyone sees it.
        let mut msg = format!("`{name}`: request failed: {e}");
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
        ToolError::new("http", msg)
    }
}

/// Reads a body, failing once it exceeds `max` bytes.
pub(crate) async fn read_limited(
    mut resp: reqwest::Response,
    max: usize,
    name: &str,
    timeout: Duration,
) -> Result<Vec<u8>, ToolError> {
    let mut buf = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| request_error(name, timeout, &e))?
    {
        if buf.len() + chunk.len() > max {
            return Err(ToolError::new(
                "response_too_large",
                format!("`{name}`: the response is larger than {max} bytes"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

impl Tool for HttpTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        self.run(args, &ctx).await
    }
}

/// Installs rustls' `ring` crypto provider as the process default, unless one is installed
/// already. weft builds rustls without a default provider (one TLS stack, no aws-lc C build), so
/// every HTTP client (ours and rmcp's) needs this before it is built.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one first; either provider is fine, so the error is ignored.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// How many redirects an HTTP tool follows.
const MAX_REDIRECTS: usize = 10;

/// Redirects an HTTP tool follows. A request that carries a secret (in its URL, a header or its
/// body) follows a redirect only within its own origin (scheme, host and port): elsewhere the
/// secret header would go to a server nobody declared, and reqwest strips only the standard
/// credential headers. Such a redirect fails the call, naming where it led.
fn redirect_policy(uses_secrets: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        let crosses = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() != attempt.url().origin());
        if uses_secrets && crosses {
            let to = attempt.url().origin().ascii_serialization();
            return attempt.error(format!(
                "redirected to another origin ({to}); not followed because the request carries \
                 the agent's secrets: declare the tool with the final URL"
            ));
        }
        attempt.follow()
    })
}

/// A `reqwest` client builder with the crypto provider installed.
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}
