//! The `http_get` built-in: GET a URL, refusing private and internal addresses unless allowed.
//! The host is resolved once, every address checked, and the request pinned to a checked
//! address, so a DNS answer that changes between the check and the request cannot redirect it.
//! Redirects are followed by hand (up to 5), each checked the same way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::{ToolError, ToolInfo};

use crate::http::{body_value, read_limited, request_error};
use crate::{Tool, ToolContext};

const MAX_REDIRECTS: usize = 5;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FetchConfig {
    /// Only these hosts (exact names, case-insensitive) may be fetched.
    #[serde(default)]
    allow_hosts: Option<Vec<String>>,
    /// Allow loopback, private, link-local and other internal addresses.
    #[serde(default)]
    allow_private: bool,
    #[serde(default)]
    max_bytes: Option<usize>,
    #[serde(default)]
    timeout: Option<Value>,
}

/// GETs a URL from the web.
#[derive(Debug, Clone)]
pub struct HttpGet {
    pub(crate) info: ToolInfo,
    config: FetchConfig,
    timeout: Duration,
    max_bytes: usize,
}

impl HttpGet {
    /// The tool with the settings of its declaration (null for the defaults); an error says
    /// which setting is wrong.
    pub fn from_config(config: &Value) -> Result<Self, String> {
        let config: FetchConfig = if config.is_null() {
            FetchConfig::default()
        } else {
            serde_json::from_value(config.clone()).map_err(|e| format!("http_get config: {e}"))?
        };
        let timeout = match &config.timeout {
            Some(v) => weft_core::agent::parse_duration(v)
                .map_err(|e| format!("http_get config.timeout: {e}"))?,
            None => Duration::from_secs(30),
        };
        Ok(Self {
            info: ToolInfo {
                name: "http_get".into(),
                description: "GET a URL (http or https); returns {status, content_type, body}, the body as JSON when it is JSON, else as text.".into(),
                category: Some("web".into()),
                input_schema: json!({
                    "type": "object",
                    "properties": {"url": {"type": "string", "description": "an http:// or https:// URL"}},
                    "required": ["url"]
                }),
                idempotent: true,
                parallel: true,
                requires_approval: false,
                source: "builtin".into(),
                output_schema: None,
            },
            max_bytes: config.max_bytes.unwrap_or(1024 * 1024),
            config,
            timeout,
        })
    }

    /// Checks a URL's host and returns the address to connect to.
    async fn check(&self, url: &reqwest::Url) -> Result<Option<SocketAddr>, ToolError> {
        let refused = |m: String| ToolError::new("refused", m);
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused(format!(
                "only http and https URLs may be fetched, not `{}`",
                url.scheme()
            )));
        }
        let host = url
            .host()
            .ok_or_else(|| refused(format!("`{url}` has no host")))?;
        let host_text = match &host {
            url::Host::Domain(d) => d.to_ascii_lowercase(),
            url::Host::Ipv4(a) => a.to_string(),
            url::Host::Ipv6(a) => a.to_string(),
        };
        if let Some(allowed) = &self.config.allow_hosts
            && !allowed.iter().any(|h| h.eq_ignore_ascii_case(&host_text))
        {
            return Err(refused(format!(
                "host `{host_text}` is not in allow_hosts ({})",
                allowed.join(", ")
            )));
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let is_domain = matches!(host, url::Host::Domain(_));
        let addrs: Vec<SocketAddr> = match host {
            url::Host::Ipv4(a) => vec![SocketAddr::new(IpAddr::V4(a), port)],
            url::Host::Ipv6(a) => vec![SocketAddr::new(IpAddr::V6(a), port)],
            url::Host::Domain(d) => tokio::net::lookup_host((d, port))
                .await
                .map_err(|e| {
                    ToolError::new("http", format!("could not resolve `{host_text}`: {e}"))
                })?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(ToolError::new(
                "http",
                format!("`{host_text}` resolves to no address"),
            ));
        }
        if !self.config.allow_private
            && let Some(bad) = addrs.iter().find(|a| is_internal(a.ip()))
        {
            return Err(refused(format!(
                "`{host_text}` resolves to {}, an internal address (loopback, private, link-local or metadata); set `allow_private: true` in the tool's config to allow it",
                bad.ip()
            )));
        }
        // An address literal needs no pinning; a name is pinned to the address checked.
        Ok(if is_domain {
            addrs.first().copied()
        } else {
            None
        })
    }

    async fn run(&self, args: Value) -> Result<Value, ToolError> {
        let name = &self.info.name;
        let raw = args
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::new("invalid_arguments", "`url` must be a string"))?;
        let mut url = reqwest::Url::parse(raw).map_err(|e| {
            ToolError::new("invalid_arguments", format!("`{raw}` is not a URL: {e}"))
        })?;
        for _ in 0..=MAX_REDIRECTS {
            let addr = self.check(&url).await?;
            let mut builder = crate::http::client_builder()
                .timeout(self.timeout)
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy();
            if let (Some(addr), Some(host)) = (addr, url.host_str()) {
                builder = builder.resolve(host, addr);
            }
            let client = builder.build().map_err(|e| {
                ToolError::new("http", format!("could not set up the HTTP client: {e}"))
            })?;
            let resp = client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| request_error(name, self.timeout, &e))?;
            let status = resp.status();
            if status.is_redirection()
                && let Some(loc) = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
            {
                url = url.join(loc).map_err(|e| {
                    ToolError::new("http", format!("bad redirect location `{loc}`: {e}"))
                })?;
                continue;
            }
            let content_type = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let is_json = content_type.as_deref().is_some_and(|c| c.contains("json"));
            let bytes = read_limited(resp, self.max_bytes, name, self.timeout).await?;
            let out = json!({
                "url": url.as_str(),
                "status": status.as_u16(),
                "content_type": content_type,
                "body": body_value(&bytes, is_json),
            });
            if !status.is_success() {
                return Err(
                    ToolError::new("http_status", format!("GET {url} answered {status}"))
                        .with_detail(out),
                );
            }
            return Ok(out);
        }
        Err(ToolError::new(
            "http",
            format!("more than {MAX_REDIRECTS} redirects"),
        ))
    }
}

/// Loopback, private, shared, link-local, unspecified, multicast, broadcast, documentation and
/// cloud metadata addresses.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => is_internal_v4(a),
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return is_internal_v4(v4);
            }
            let s = a.segments();
            a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 may reach internal v4
                || a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
    }
}

fn is_internal_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // shared 100.64/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || o[0] >= 240
        || a == Ipv4Addr::new(100, 100, 100, 200) // Alibaba metadata
}

impl Tool for HttpGet {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        self.run(args).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses() {
        for a in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "100.100.100.200",
        ] {
            assert!(is_internal(a.parse().expect("ip")), "{a}");
        }
        for a in ["93.184.216.34", "1.1.1.1", "2606:4700::1111", "172.32.0.1"] {
            assert!(!is_internal(a.parse().expect("ip")), "{a}");
        }
    }
}
