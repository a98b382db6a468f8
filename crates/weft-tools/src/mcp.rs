//! MCP servers as tool sources, through `rmcp`: a local child process speaking stdio, or a
//! Streamable HTTP endpoint.
//!
//! A server is connected when its tools are first needed ([`crate::Registry::load_mcp_tools`]
//! lists them; a call connects if no connection is open). A connection that breaks or a call
//! that hangs past the timeout fails that call and drops the connection (a child process is
//! killed); the next call starts the server again. `notifications/tools/list_changed` marks the
//! list stale; it is listed again before the next call.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use rmcp::model::{
    CallToolRequestParams, ClientConfig, ClientJsonRpcMessage, Implementation, ServerJsonRpcMessage,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use weft_core::agent::parse_duration;
use weft_core::{ToolError, ToolInfo};

use crate::render::Vars;
use crate::secrets::{Secrets, referenced_in_str};
use crate::{Tool, ToolContext};

/// Variables passed on from weft's own environment to a server process.
const PASSED_ENV: &[&str] = &["PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT"];
/// How much of a server's stderr is kept for error messages.
const STDERR_TAIL: usize = 4 * 1024;

/// An MCP server whose tools the agent gets.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpDeclOuter {
    mcp: McpServerDecl,
}

/// An `mcp:` declaration.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerDecl {
    /// The server's name: the default tool-name prefix, and how errors name the server.
    pub name: String,
    /// The program and its first arguments (stdio servers).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// More arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment of the server process; values may use `{{ secrets.NAME }}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of the server process, relative to the agent file.
    #[serde(default)]
    pub cwd: Option<String>,
    /// A Streamable HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP headers; values may use `{{ secrets.NAME }}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Tool names are `PREFIX.tool`; default the server's name; `""` means no prefix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Only these of the server's tools (names as the server gives them).
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    /// Per call (and for connecting). Default 60 s.
    #[serde(default)]
    #[schemars(schema_with = "weft_core::agent::schema::duration")]
    pub timeout: Option<Value>,
    /// Whether each call of the server's tools waits for a person's approval before it runs.
    #[serde(default)]
    pub requires_approval: bool,
    /// The category the server's tools are listed under.
    #[serde(default)]
    pub category: Option<String>,
    /// What a stdio server's process may do beyond the default sandbox, or `none` (see
    /// docs/security.md).
    #[serde(default)]
    pub sandbox: Option<weft_core::sandbox::SandboxDecl>,
}

impl McpServerDecl {
    /// Parses `{mcp: {...}}`.
    pub fn parse(raw: &Value) -> Result<Self, String> {
        let outer: McpDeclOuter = serde_json::from_value(raw.clone()).map_err(|e| {
            let name = raw
                .get("mcp")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            format!("mcp server `{name}`: {e}")
        })?;
        let d = outer.mcp;
        match (&d.command, &d.url) {
            (Some(c), None) if !c.is_empty() => {}
            (None, Some(_)) => {}
            _ => {
                return Err(format!(
                    "mcp server `{}`: give either `command` (a non-empty list) or `url`",
                    d.name
                ));
            }
        }
        Ok(d)
    }

    fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or(&self.name)
    }

    /// The registry name of a server tool.
    pub fn tool_name(&self, remote: &str) -> String {
        match self.prefix() {
            "" => remote.to_owned(),
            p => format!("{p}.{remote}"),
        }
    }
}

/// Marks the tool list stale when the server says it changed.
#[derive(Clone)]
struct Handler {
    stale: Arc<AtomicBool>,
    changed: Arc<AtomicBool>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
        self.changed.store(true, Ordering::SeqCst);
    }

    fn get_info(&self) -> ClientConfig {
        let mut c = ClientConfig::default();
        c.client_info = Implementation::new("weft", env!("CARGO_PKG_VERSION"));
        c
    }
}

struct Conn {
    service: RunningService<RoleClient, Handler>,
    /// A stdio server's process: killed when the connection is dropped.
    _child: Option<tokio::process::Child>,
    generation: u64,
}

/// A new connection, and a stdio server's process.
struct Connected {
    service: RunningService<RoleClient, Handler>,
    child: Option<tokio::process::Child>,
}

/// The longest line a stdio server may write (a message) before it is a protocol error.
const MAX_STDOUT_LINE: u64 = 64 * 1024 * 1024;

/// A stdio server's stdout, passed on line by line while every line is JSON. The first line
/// that is not (a banner, a log line) is recorded in `garbage` and ends the stream, so the
/// connection fails at once with a protocol error instead of waiting out a timeout (rmcp skips
/// such lines and waits on).
fn checked_stdout(
    stdout: tokio::process::ChildStdout,
    garbage: Arc<std::sync::Mutex<Option<String>>>,
) -> tokio::io::DuplexStream {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (reader, mut writer) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut lines)
                .take(MAX_STDOUT_LINE)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = line.trim_ascii();
            let whole = line.ends_with(b"\n") || (line.len() as u64) < MAX_STDOUT_LINE;
            if !text.is_empty()
                && (!whole || serde_json::from_slice::<serde::de::IgnoredAny>(text).is_err())
            {
                let shown: String = String::from_utf8_lossy(text).chars().take(200).collect();
                if let Ok(mut g) = garbage.lock() {
                    *g = Some(shown);
                }
                break;
            }
            if writer.write_all(&line).await.is_err() {
                break;
            }
        }
        let _ = writer.shutdown().await;
    });
    reader
}

/// One remote tool as last listed.
#[derive(Clone)]
struct RemoteTool {
    tool: rmcp::model::Tool,
}

/// A connection (or the means to make one) to one MCP server.
pub(crate) struct McpServer {
    pub(crate) decl: McpServerDecl,
    base_dir: PathBuf,
    timeout: Duration,
    secrets: Option<Secrets>,
    uses_secrets: bool,
    conn: tokio::sync::Mutex<Option<Conn>>,
    generation: AtomicU64,
    stale: Arc<AtomicBool>,
    /// Set by `notifications/tools/list_changed`, cleared by [`McpServer::list`].
    changed: Arc<AtomicBool>,
    tools: std::sync::RwLock<BTreeMap<String, RemoteTool>>,
    stderr: Arc<std::sync::Mutex<String>>,
    /// The first line of a stdio server's stdout that was not JSON-RPC.
    garbage: Arc<std::sync::Mutex<Option<String>>>,
    /// Whether the server's process was started in a sandbox.
    sandboxed: AtomicBool,
}

fn mcp_error(server: &str, m: impl std::fmt::Display) -> ToolError {
    ToolError::new("mcp", format!("mcp server `{server}`: {m}"))
}

impl McpServer {
    pub(crate) fn new(
        decl: McpServerDecl,
        base_dir: &Path,
        secrets: Option<Secrets>,
    ) -> Result<Self, String> {
        let timeout = match &decl.timeout {
            None => Duration::from_secs(60),
            Some(v) => parse_duration(v)
                .map_err(|e| format!("mcp server `{}`: timeout: {e}", decl.name))?,
        };
        let mut used = BTreeSet::new();
        decl.env
            .values()
            .chain(decl.headers.values())
            .for_each(|v| referenced_in_str(v, &mut used));
        if let Some(u) = &decl.url {
            referenced_in_str(u, &mut used);
        }
        let uses_secrets = !used.is_empty();
        if uses_secrets {
            secrets
                .clone()
                .unwrap_or_default()
                .check_declared(used, &format!("mcp server `{}`", decl.name))
                .map_err(|e| e.to_string())?;
        }
        Ok(Self {
            decl,
            base_dir: if base_dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                base_dir.to_path_buf()
            },
            timeout,
            secrets,
            uses_secrets,
            conn: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
            stale: Arc::new(AtomicBool::new(true)),
            changed: Arc::new(AtomicBool::new(false)),
            tools: std::sync::RwLock::new(BTreeMap::new()),
            stderr: Arc::new(std::sync::Mutex::new(String::new())),
            garbage: Arc::new(std::sync::Mutex::new(None)),
            sandboxed: AtomicBool::new(false),
        })
    }

    /// Connecting (starting a process, initialising, listing tools) is bounded by the same
    /// `timeout` as a call: a declared timeout is never exceeded by a server that does not
    /// answer.
    fn connect_timeout(&self) -> Duration {
        self.timeout
    }

    fn name(&self) -> &str {
        &self.decl.name
    }

    fn stderr_tail(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The protocol error seen on a stdio server's stdout, if any.
    fn protocol_error(&self) -> Option<ToolError> {
        let line = self.garbage.lock().ok()?.clone()?;
        Some(
            ToolError::new(
                "mcp_protocol",
                format!(
                    "mcp server `{}` wrote text that is not JSON-RPC on stdout: `{line}`; an MCP server over stdio must write only JSON-RPC messages there (and its logs to stderr)",
                    self.name()
                ),
            )
            .with_detail(json!({"stdout_line": line})),
        )
    }

    async fn connect(&self) -> Result<Connected, ToolError> {
        let vars = Vars::new(Value::Null, self.secrets.as_ref(), self.uses_secrets)?;
        let handler = Handler {
            stale: self.stale.clone(),
            changed: self.changed.clone(),
        };
        let label = format!("mcp server `{}`", self.name());
        if let Some(command) = &self.decl.command {
            let Some((program, first_args)) = command.split_first() else {
                return Err(mcp_error(self.name(), "`command` is empty"));
            };
            let cwd = match &self.decl.cwd {
                Some(c) => self.base_dir.join(c),
                None => self.base_dir.clone(),
            };
            let mut env = Vec::with_capacity(self.decl.env.len());
            for (k, v) in &self.decl.env {
                env.push((k.clone(), vars.render(&label, &format!("env.{k}"), v)?));
            }
            // Through the sandbox launcher (`sandbox.rs`), which also makes the server die
            // with weft, even killed with SIGKILL (see `owned.rs`). The signal comes when the
            // spawning thread exits: the spawn below happens on the thread polling this
            // connection, a runtime worker (or `block_on`'s thread), which lives as long as the
            // runtime.
            let workspace =
                crate::sandbox::workspace(&format!("mcp-{}", self.name())).map_err(|e| {
                    ToolError::new(
                        "sandbox",
                        format!("{label}: could not create its workspace directory: {e}"),
                    )
                    .with_detail(json!({"rule": "setup"}))
                })?;
            let (exe, lead, sandboxed) = crate::sandbox::command(
                program,
                &cwd,
                crate::owned::child_path(env.iter().map(|(k, v)| (k, v))).as_deref(),
                |resolved| {
                    crate::sandbox::Policy::for_tool(
                        self.decl.sandbox.as_ref(),
                        &self.base_dir,
                        &cwd,
                        resolved,
                        crate::command::script_of(
                            program,
                            &[first_args, self.decl.args.as_slice()].concat(),
                            &cwd,
                        )
                        .as_deref(),
                        &workspace,
                        false,
                    )
                },
            )?;
            self.sandboxed.store(sandboxed, Ordering::Relaxed);
            let mut cmd = tokio::process::Command::new(exe);
            cmd.args(lead)
                .args(first_args)
                .args(&self.decl.args)
                .env_clear()
                .kill_on_drop(true)
                .current_dir(&cwd);
            for k in PASSED_ENV {
                if let Ok(v) = std::env::var(k) {
                    cmd.env(k, v);
                }
            }
            if sandboxed {
                cmd.env("TMPDIR", &workspace);
            }
            cmd.env("WEFT_WORKSPACE", &workspace).envs(env);
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().map_err(|e| {
                ToolError::new(
                    "spawn",
                    format!("{label}: could not start `{program}`: {e}"),
                )
            })?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(mcp_error(
                    self.name(),
                    "the server's stdin or stdout is missing",
                ));
            };
            let stderr = child.stderr.take();
            if let Ok(mut g) = self.garbage.lock() {
                *g = None;
            }
            let transport = (checked_stdout(stdout, Arc::clone(&self.garbage)), stdin);
            if let Some(mut err) = stderr {
                let tail = self.stderr.clone();
                if let Ok(mut t) = tail.lock() {
                    t.clear();
                }
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    while let Ok(n) = err.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        if let Ok(mut t) = tail.lock() {
                            t.push_str(&String::from_utf8_lossy(&buf[..n]));
                            if t.len() > STDERR_TAIL {
                                let mut cut = t.len() - STDERR_TAIL;
                                while !t.is_char_boundary(cut) {
                                    cut += 1;
                                }
                                t.drain(..cut);
                            }
                        }
                    }
                });
            }
            match tokio::time::timeout(self.connect_timeout(), handler.serve(transport)).await {
                Ok(Ok(s)) => Ok(Connected {
                    service: s,
                    child: Some(child),
                }),
                Ok(Err(e)) => Err(match self.protocol_error() {
                    Some(p) => p,
                    None => self.start_error(format!("initialization failed: {e}")),
                }),
                Err(_) => Err(self.start_error(format!(
                    "did not complete initialization within {:?}",
                    self.connect_timeout()
                ))),
            }
        } else {
            let url = self.decl.url.clone().unwrap_or_default();
            let url = vars.render(&label, "url", &url)?;
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let mut custom = HashMap::new();
            for (k, v) in &self.decl.headers {
                let value = vars.render(&label, &format!("headers.{k}"), v)?;
                if k.eq_ignore_ascii_case("authorization")
                    && let Some(token) = value.strip_prefix("Bearer ")
                {
                    config = config.auth_header(token.to_owned());
                    continue;
                }
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| mcp_error(self.name(), format!("header name `{k}`: {e}")))?;
                let value = http::HeaderValue::from_str(&value).map_err(|e| {
                    mcp_error(
                        self.name(),
                        format!("header `{k}` has an invalid value: {e}"),
                    )
                })?;
                custom.insert(name, value);
            }
            config = config.custom_headers(custom);
            crate::http::install_crypto_provider();
            let transport =
                StreamableHttpClientTransport::with_client(SessionAwareClient::default(), config);
            match tokio::time::timeout(self.connect_timeout(), handler.serve(transport)).await {
                Ok(Ok(s)) => Ok(Connected {
                    service: s,
                    child: None,
                }),
                Ok(Err(e)) => Err(mcp_error(
                    self.name(),
                    format!("could not connect to {url}: {e}"),
                )),
                Err(_) => Err(mcp_error(
                    self.name(),
                    format!(
                        "{url} did not complete initialization within {:?}",
                        self.connect_timeout()
                    ),
                )),
            }
        }
    }

    fn start_error(&self, m: String) -> ToolError {
        let tail = self.stderr_tail();
        if self.sandboxed.load(Ordering::Relaxed)
            && let Some(mut e) = crate::sandbox::classify(
                &format!("mcp server `{}`", self.name()),
                &crate::sandbox::Ended {
                    code: None,
                    signal: None,
                    stderr: &tail,
                },
            )
        {
            e.message = format!("{m}: {}", e.message);
            return e;
        }
        let last = tail.lines().rev().find(|l| !l.trim().is_empty());
        let mut e = mcp_error(
            self.name(),
            match last {
                Some(l) => format!("{m}; its last error output: {}", l.trim()),
                None => m,
            },
        );
        if !tail.is_empty() {
            e = e.with_detail(json!({"stderr": tail}));
        }
        e
    }

    /// The peer of an open connection, connecting (and listing) when there is none; refreshes
    /// the tool list when the server said it changed.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), ToolError> {
        let mut guard = self.conn.lock().await;
        let closed = guard
            .as_ref()
            .is_none_or(|c| c.service.is_closed() || c.service.peer().is_transport_closed());
        if closed {
            if let Some(old) = guard.take() {
                let _ = old.service.cancel().await;
            }
            let Connected { service, child } = self.connect().await?;
            let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
            *guard = Some(Conn {
                service,
                _child: child,
                generation,
            });
            self.stale.store(true, Ordering::SeqCst);
        }
        let Some(conn) = guard.as_ref() else {
            return Err(mcp_error(self.name(), "no connection"));
        };
        let peer = conn.service.peer().clone();
        let generation = conn.generation;
        drop(guard);
        if self.stale.swap(false, Ordering::SeqCst)
            && let Err(e) = self.list_with(&peer).await
        {
            self.stale.store(true, Ordering::SeqCst);
            return Err(e);
        }
        Ok((peer, generation))
    }

    async fn list_with(&self, peer: &Peer<RoleClient>) -> Result<(), ToolError> {
        let listed = tokio::time::timeout(self.connect_timeout(), peer.list_all_tools())
            .await
            .map_err(|_| {
                mcp_error(
                    self.name(),
                    format!(
                        "tools/list got no answer within {:?}",
                        self.connect_timeout()
                    ),
                )
            })?
            .map_err(|e| mcp_error(self.name(), format!("tools/list failed: {e}")))?;
        let mut map = BTreeMap::new();
        for tool in listed {
            map.insert(tool.name.to_string(), RemoteTool { tool });
        }
        if let Ok(mut t) = self.tools.write() {
            *t = map;
        }
        Ok(())
    }

    /// Drops the connection made in `generation` (killing a child process) so the next call
    /// starts the server again.
    async fn reset(&self, generation: u64) {
        let mut guard = self.conn.lock().await;
        if guard.as_ref().is_some_and(|c| c.generation == generation)
            && let Some(old) = guard.take()
        {
            drop(guard);
            let _ = tokio::time::timeout(Duration::from_secs(5), old.service.cancel()).await;
        }
    }

    /// Stops the server (if running).
    pub(crate) async fn shutdown(&self) {
        let old = self.conn.lock().await.take();
        if let Some(old) = old {
            let _ = tokio::time::timeout(Duration::from_secs(5), old.service.cancel()).await;
        }
    }

    /// Connects (if needed) and returns the allowed tools' metadata, named for the registry.
    pub(crate) async fn list(&self) -> Result<Vec<(String, ToolInfo)>, ToolError> {
        self.stale.store(true, Ordering::SeqCst);
        self.changed.store(false, Ordering::SeqCst);
        self.peer().await?;
        let tools = self.tools.read().map(|t| t.clone()).unwrap_or_default();
        if let Some(allow) = &self.decl.allow {
            for a in allow {
                if !tools.contains_key(a) {
                    return Err(mcp_error(
                        self.name(),
                        format!(
                            "`allow` names `{a}`, which the server does not offer; it offers: {}",
                            tools.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(tools
            .values()
            .filter(|t| {
                self.decl
                    .allow
                    .as_ref()
                    .is_none_or(|a| a.iter().any(|n| n == t.tool.name.as_ref()))
            })
            .map(|t| (t.tool.name.to_string(), self.info_for(&t.tool)))
            .collect())
    }

    /// Whether the server said its tool list changed since it was last listed for the registry.
    pub(crate) fn list_changed(&self) -> bool {
        self.changed.load(Ordering::SeqCst)
    }

    fn info_for(&self, tool: &rmcp::model::Tool) -> ToolInfo {
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        let idempotent = tool
            .annotations
            .as_ref()
            .and_then(|a| a.idempotent_hint)
            .unwrap_or(false);
        ToolInfo {
            name: self.decl.tool_name(&tool.name),
            description: tool
                .description
                .as_deref()
                .or(tool.title.as_deref())
                .unwrap_or_default()
                .to_owned(),
            category: self.decl.category.clone(),
            input_schema: Value::Object((*tool.input_schema).clone()),
            idempotent: read_only || idempotent,
            parallel: read_only,
            requires_approval: self.decl.requires_approval,
            source: format!("mcp:{}", self.decl.name),
            // Checked on every call's output by the registry, as every tool's is.
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|s| Value::Object((**s).clone())),
        }
    }

    /// `tools/call` with the timeout; a broken or hung connection is dropped. (A Streamable
    /// HTTP server that lost the session answers 404 or 400: a new session is initialised at
    /// once and the request sent once more, see [`SessionAwareClient`].)
    pub(crate) async fn call(&self, remote: &str, args: Value) -> Result<Value, ToolError> {
        let (peer, generation) = self.peer().await?;
        let remote_tool = self.tools.read().ok().and_then(|t| t.get(remote).cloned());
        let Some(remote_tool) = remote_tool else {
            return Err(ToolError::new(
                "unknown_tool",
                format!(
                    "mcp server `{}` no longer offers the tool `{remote}`",
                    self.name()
                ),
            ));
        };
        let arguments = match args {
            Value::Object(m) => m,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolError::new(
                    "invalid_arguments",
                    format!("MCP tool arguments must be an object, not {other}"),
                ));
            }
        };
        let params = CallToolRequestParams::new(remote.to_owned()).with_arguments(arguments);
        // Dropping the request future (on timeout) sends notifications/cancelled.
        let result = match tokio::time::timeout(self.timeout, peer.call_tool(params)).await {
            Err(_) => {
                self.reset(generation).await;
                return Err(ToolError::new(
                    "timeout",
                    format!(
                        "mcp server `{}`: `{remote}` did not answer within {:?}; the call was cancelled and the server will be started again on the next call",
                        self.name(),
                        self.timeout
                    ),
                ));
            }
            Ok(Err(ServiceError::McpError(e))) => {
                return Err(ToolError::new(
                    "mcp",
                    format!(
                        "mcp server `{}`: `{remote}` failed: {}",
                        self.name(),
                        e.message
                    ),
                )
                .with_detail(serde_json::to_value(&e).unwrap_or(Value::Null)));
            }
            Ok(Err(e)) => {
                self.reset(generation).await;
                let mut err = ToolError::new(
                    "mcp_connection",
                    format!(
                        "mcp server `{}`: the connection broke during `{remote}` ({e}); the server will be started again on the next call",
                        self.name()
                    ),
                );
                let tail = self.stderr_tail();
                if !tail.is_empty() {
                    err = err.with_detail(json!({"stderr": tail}));
                }
                if let Some(p) = self.protocol_error() {
                    err = p;
                }
                return Err(err);
            }
            Ok(Ok(r)) => r,
        };
        let result = serde_json::to_value(&result).unwrap_or(Value::Null);
        convert_result(
            self.name(),
            remote,
            &result,
            remote_tool.tool.output_schema.is_some(),
        )
    }
}

/// reqwest's Streamable HTTP client, except that a 400 answer whose JSON-RPC error says the
/// session is not valid is read as the expired session it is (servers that lost the session in
/// a restart answered so before the specification asked for 404). rmcp then initialises a new
/// session and sends the request once more; left alone, the error, whose id is not the
/// request's, would leave the call waiting for an answer until its timeout.
#[derive(Clone, Default)]
struct SessionAwareClient(reqwest::Client);

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

fn session_refused(
    attached: bool,
    r: HttpResult<StreamableHttpPostResponse>,
) -> HttpResult<StreamableHttpPostResponse> {
    match r {
        Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _))
            if attached && stale_session(&e.error) =>
        {
            Err(StreamableHttpError::SessionExpired)
        }
        other => other,
    }
}

impl StreamableHttpClient for SessionAwareClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let attached = session_id.is_some();
        let r = self
            .0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        session_refused(attached, r)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let attached = session_id.is_some();
        let r = self
            .0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        session_refused(attached, r)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let attached = session_id.is_some();
        let r = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        session_refused(attached, r)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> HttpResult<()> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// A server's answer that it does not know the session (HTTP 400 with a JSON-RPC error about
/// the session id, as servers answer a session they lost in a restart).
fn stale_session(e: &rmcp::model::ErrorData) -> bool {
    let m = e.message.to_ascii_lowercase();
    m.contains("session")
        && (m.contains("no valid")
            || m.contains("not found")
            || m.contains("unknown")
            || m.contains("expired")
            || m.contains("invalid"))
}

/// Turns a `CallToolResult` (as JSON) into the tool's output or error.
fn convert_result(
    server: &str,
    remote: &str,
    result: &Value,
    declares_output: bool,
) -> Result<Value, ToolError> {
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let texts: Vec<&str> = content
        .iter()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|c| c.get("text").and_then(Value::as_str))
        .collect();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let message = if texts.is_empty() {
            format!("`{remote}` reported an error")
        } else {
            texts.join("\n")
        };
        return Err(ToolError::new("tool_error", message).with_detail(json!({
            "server": server,
            "tool": remote,
            "content": content,
        })));
    }
    // A tool with an outputSchema gives its output as structuredContent (which the registry
    // checks against the schema, as it checks every tool's declared output).
    if declares_output && result.get("structuredContent").is_none() {
        return Err(ToolError::new(
            "invalid_output",
            format!(
                "mcp server `{server}`: `{remote}` declares an outputSchema but returned no structuredContent"
            ),
        ));
    }
    if let Some(structured) = result.get("structuredContent") {
        return Ok(structured.clone());
    }
    if content.len() == 1
        && let [text] = texts.as_slice()
    {
        // One text block: JSON text becomes the value, other text stays text.
        return Ok(match serde_json::from_str::<Value>(text) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
            _ => Value::String((*text).to_owned()),
        });
    }
    Ok(json!({"content": content}))
}

/// A tool offered by an MCP server, registered as `prefix.name`.
pub(crate) struct McpTool {
    pub(crate) info: ToolInfo,
    pub(crate) remote: String,
    pub(crate) server: Arc<McpServer>,
}

impl Tool for McpTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        self.server.call(&self.remote, args).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_become_outputs_or_errors() {
        let r = json!({"content": [{"type": "text", "text": "{\"a\": 1}"}]});
        assert_eq!(
            convert_result("s", "t", &r, false).ok(),
            Some(json!({"a": 1}))
        );
        let r = json!({"content": [{"type": "text", "text": "no such file"}], "isError": true});
        let e = convert_result("s", "t", &r, false).err();
        assert_eq!(
            e.map(|e| (e.kind, e.message)),
            Some(("tool_error".to_owned(), "no such file".to_owned()))
        );
        let r = json!({"content": [{"type": "text", "text": "{\"n\": 1}"}]});
        let e = convert_result("s", "t", &r, true).err();
        assert_eq!(e.map(|e| e.kind), Some("invalid_output".to_owned()));
        let r = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(
            convert_result("s", "t", &r, true).ok(),
            Some(json!({"n": 1}))
        );
    }

    #[test]
    fn declarations() {
        let d = McpServerDecl::parse(&json!({"mcp": {"name": "time", "command": ["x"]}}))
            .expect("valid");
        assert_eq!(d.tool_name("now"), "time.now");
        let d = McpServerDecl::parse(
            &json!({"mcp": {"name": "time", "url": "http://h/mcp", "prefix": ""}}),
        )
        .expect("valid");
        assert_eq!(d.tool_name("now"), "now");
        let e = McpServerDecl::parse(&json!({"mcp": {"name": "x"}})).err();
        assert!(e.is_some_and(|e| e.contains("`x`") && e.contains("command")));
    }
}
