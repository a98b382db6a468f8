//! `fs_read`, `fs_write` and `fs_list`: file tools confined to one workspace directory.
//! Paths that leave the workspace (`..`, absolute paths elsewhere, symlinks pointing out) are
//! refused.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::{ToolError, ToolInfo};

use crate::{Tool, ToolContext};

const DEFAULT_MAX_READ: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceConfig {
    /// The directory, relative to the agent file's directory. Created when missing.
    workspace: String,
    #[serde(default)]
    max_read_bytes: Option<u64>,
}

/// The directory the file tools may touch.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    max_read: u64,
}

fn refused(m: String) -> ToolError {
    ToolError::new("refused", m)
}

fn io(what: &str, path: &str, e: &std::io::Error) -> ToolError {
    let kind = if e.kind() == std::io::ErrorKind::NotFound {
        "not_found"
    } else {
        "io"
    };
    ToolError::new(kind, format!("{what} `{path}`: {e}"))
}

impl Workspace {
    /// Reads `config.workspace` (relative to `base_dir`), creating the directory when missing.
    pub fn from_config(config: &Value, base_dir: &Path, tool: &str) -> Result<Arc<Self>, String> {
        let c: WorkspaceConfig = serde_json::from_value(config.clone()).map_err(|e| {
            format!("{tool}: config needs `workspace: <directory relative to the agent file>`: {e}")
        })?;
        let dir = base_dir.join(&c.workspace);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("{tool}: could not create workspace {}: {e}", dir.display()))?;
        let root = dir
            .canonicalize()
            .map_err(|e| format!("{tool}: workspace {}: {e}", dir.display()))?;
        Ok(Arc::new(Self {
            root,
            max_read: c.max_read_bytes.unwrap_or(DEFAULT_MAX_READ),
        }))
    }

    /// The workspace's directory, canonical: every path a tool takes is resolved under it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The real path of `rel` inside the workspace; refused when it leaves it. The path itself
    /// may not exist yet (for writes): then its nearest existing ancestor is checked.
    fn resolve(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let given = Path::new(rel);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        // Lexical normalisation first: `..` may never climb above the workspace.
        let mut norm = PathBuf::new();
        for c in joined.components() {
            match c {
                Component::ParentDir => {
                    if !norm.pop() {
                        return Err(refused(format!("`{rel}` leaves the workspace")));
                    }
                }
                Component::CurDir => {}
                other => norm.push(other.as_os_str()),
            }
        }
        if !norm.starts_with(&self.root) {
            return Err(refused(format!(
                "`{rel}` is outside the workspace; give a path relative to it"
            )));
        }
        // Then the real location: symlinks may not lead out.
        let mut existing = norm.as_path();
        let mut rest = Vec::new();
        while !existing.exists() {
            if let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) {
                rest.push(name.to_owned());
                existing = parent;
            } else {
                break;
            }
        }
        if std::fs::symlink_metadata(existing).is_err() {
            return Err(refused(format!("`{rel}` is outside the workspace")));
        }
        let mut real = existing
            .canonicalize()
            .map_err(|e| io("resolving", rel, &e))?;
        if !real.starts_with(&self.root) {
            return Err(refused(format!(
                "`{rel}` leads outside the workspace (through a symbolic link)"
            )));
        }
        for name in rest.into_iter().rev() {
            real.push(name);
        }
        // A dangling symlink as the last part would be followed by a write.
        if std::fs::symlink_metadata(&real).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(refused(format!(
                "`{rel}` is a symbolic link that leads nowhere inside the workspace"
            )));
        }
        Ok(real)
    }

    fn display(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .map(|r| {
                let s = r.to_string_lossy().into_owned();
                if s.is_empty() { ".".to_owned() } else { s }
            })
            .unwrap_or_else(|_| p.to_string_lossy().into_owned())
    }
}

fn path_arg<'a>(
    args: &'a Value,
    key: &str,
    default: Option<&'a str>,
) -> Result<&'a str, ToolError> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) if default.is_some() => Ok(default.unwrap_or(".")),
        _ => Err(ToolError::new(
            "invalid_arguments",
            format!("`{key}` must be a string path relative to the workspace"),
        )),
    }
}

fn info(name: &str, description: &str, schema: Value, idempotent: bool) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: description.into(),
        category: Some("files".into()),
        input_schema: schema,
        idempotent,
        parallel: idempotent,
        requires_approval: false,
        source: "builtin".into(),
        output_schema: None,
    }
}

/// Reads a text file of the workspace.
#[derive(Debug)]
pub struct FsRead {
    pub(crate) info: ToolInfo,
    ws: Arc<Workspace>,
}

impl FsRead {
    /// The `fs_read` tool over the workspace `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        Self {
            info: info(
                "fs_read",
                "Read a text file of the workspace; returns {path, content}.",
                json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
                true,
            ),
            ws,
        }
    }
}

impl Tool for FsRead {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let rel = path_arg(&args, "path", None)?;
        let p = self.ws.resolve(rel)?;
        let meta = tokio::fs::metadata(&p)
            .await
            .map_err(|e| io("reading", rel, &e))?;
        if meta.len() > self.ws.max_read {
            return Err(ToolError::new(
                "too_large",
                format!(
                    "`{rel}` has {} bytes, more than the limit of {}",
                    meta.len(),
                    self.ws.max_read
                ),
            ));
        }
        let bytes = tokio::fs::read(&p)
            .await
            .map_err(|e| io("reading", rel, &e))?;
        let content = String::from_utf8(bytes)
            .map_err(|_| ToolError::new("invalid_output", format!("`{rel}` is not UTF-8 text")))?;
        Ok(json!({"path": self.ws.display(&p), "content": content}))
    }
}

/// Writes a text file of the workspace (creating directories as needed).
#[derive(Debug)]
pub struct FsWrite {
    pub(crate) info: ToolInfo,
    ws: Arc<Workspace>,
}

impl FsWrite {
    /// The `fs_write` tool over the workspace `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        Self {
            info: info(
                "fs_write",
                "Write a text file of the workspace (replacing it); returns {path, bytes}.",
                json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
                true,
            ),
            ws,
        }
    }
}

impl Tool for FsWrite {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let rel = path_arg(&args, "path", None)?;
        let content = args
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::new("invalid_arguments", "`content` must be a string"))?;
        let p = self.ws.resolve(rel)?;
        if let Some(parent) = p.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| io("creating the directory of", rel, &e))?;
            // Re-check: the directories just made are plain, but a racing symlink is not.
            self.ws.resolve(rel)?;
        }
        tokio::fs::write(&p, content)
            .await
            .map_err(|e| io("writing", rel, &e))?;
        Ok(json!({"path": self.ws.display(&p), "bytes": content.len()}))
    }
}

/// Lists a directory of the workspace.
#[derive(Debug)]
pub struct FsList {
    pub(crate) info: ToolInfo,
    ws: Arc<Workspace>,
}

impl FsList {
    /// The `fs_list` tool over the workspace `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        Self {
            info: info(
                "fs_list",
                "List a directory of the workspace (default: its root); returns {path, entries: [{name, type, size}]}.",
                json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                true,
            ),
            ws,
        }
    }
}

impl Tool for FsList {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        let rel = path_arg(&args, "path", Some("."))?;
        let p = self.ws.resolve(rel)?;
        let mut rd = tokio::fs::read_dir(&p)
            .await
            .map_err(|e| io("listing", rel, &e))?;
        let mut entries = Vec::new();
        while let Some(e) = rd.next_entry().await.map_err(|e| io("listing", rel, &e))? {
            let meta = tokio::fs::symlink_metadata(e.path()).await.ok();
            let kind = match &meta {
                Some(m) if m.file_type().is_symlink() => "symlink",
                Some(m) if m.is_dir() => "dir",
                Some(_) => "file",
                None => "unknown",
            };
            entries.push(json!({
                "name": e.file_name().to_string_lossy(),
                "type": kind,
                "size": meta.filter(|m| m.is_file()).map(|m| m.len()),
            }));
        }
        entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok(json!({"path": self.ws.display(&p), "entries": entries}))
    }
}
