//! The `sandbox:` key of a command tool or a stdio MCP server: what its process may do beyond
//! the default sandbox (read the system's runtime files and the agent file's directory, write
//! its own workspace, no network), or `sandbox: none` to run it without one.
//!
//! ```yaml
//! sandbox:
//!   read: [data, /opt/models]      # relative to the agent file's directory
//!   write: [.]                     # `.` is the agent file's directory
//!   network: [5432]                # TCP ports it may connect to or bind (any host)
//!   limits: {cpu_s: 120, memory_mb: 2048, processes: 64, file_size_mb: 100, open_files: 256}
//! ```
//!
//! The declaration is read by hand ([`SandboxDecl::from_value`]) so that each problem names the
//! field it is in (`tools[1].sandbox.limits.cpu_s`) and says what to write instead.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diagnose::Seg;

/// A tool's `sandbox:`: `none`, or what it may do beyond the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxDecl {
    /// `sandbox: none`: the tool runs without a sandbox.
    Off,
    /// What the tool may do beyond the default sandbox.
    Rules(SandboxRules),
}

/// What a tool may do beyond the default sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SandboxRules {
    /// Paths it may read (and execute), relative to the agent file's directory.
    pub read: Vec<String>,
    /// Paths it may read and write, relative to the agent file's directory.
    pub write: Vec<String>,
    /// TCP ports it may connect to and bind, on any host.
    pub network: Vec<u16>,
    /// Resource limits in place of the defaults.
    pub limits: SandboxLimits,
}

/// Resource limits; each absent one keeps its default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SandboxLimits {
    /// CPU seconds (command tools only; default 60).
    pub cpu_s: Option<u64>,
    /// Memory (data segment) in MiB (default 1024).
    pub memory_mb: Option<u64>,
    /// Processes (default 256).
    pub processes: Option<u64>,
    /// Largest file it may write, in MiB (default 1024).
    pub file_size_mb: Option<u64>,
    /// Open files (default 1024).
    pub open_files: Option<u64>,
}

const KEYS: [&str; 4] = ["read", "write", "network", "limits"];
const LIMIT_KEYS: [&str; 5] = [
    "cpu_s",
    "memory_mb",
    "processes",
    "file_size_mb",
    "open_files",
];

impl SandboxDecl {
    /// Reads a `sandbox:` value; each problem with the path of the field under `sandbox`
    /// (empty for the value itself) and what to do.
    pub fn from_value(v: &Value) -> Result<Self, Vec<(Vec<Seg>, String)>> {
        let mut out = Vec::new();
        let map = match v {
            Value::String(s) if s == "none" => return Ok(Self::Off),
            Value::Object(m) => m,
            other => {
                return Err(vec![(
                    Vec::new(),
                    format!(
                        "`sandbox` is `none` (no sandbox) or a mapping with `read`, `write`, `network` and `limits`, not {other}"
                    ),
                )]);
            }
        };
        let mut rules = SandboxRules::default();
        for (k, v) in map {
            let at = vec![Seg::Key(k.clone())];
            match k.as_str() {
                "read" | "write" => match paths(v) {
                    Ok(p) if k == "read" => rules.read = p,
                    Ok(p) => rules.write = p,
                    Err(e) => out.push((at, e)),
                },
                "network" => match ports(v) {
                    Ok(p) => rules.network = p,
                    Err(e) => out.push((at, e)),
                },
                "limits" => match limits(v) {
                    Ok(l) => rules.limits = l,
                    Err(mut e) => {
                        for (p, _) in &mut e {
                            p.insert(0, Seg::Key("limits".into()));
                        }
                        out.extend(e);
                    }
                },
                _ => out.push((at, unknown(k, &KEYS))),
            }
        }
        if out.is_empty() {
            Ok(Self::Rules(rules))
        } else {
            Err(out)
        }
    }

    /// The JSON Schema of the value (for `weft schema` and editors).
    pub fn schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "What the tool's process may do beyond the default sandbox, or `none` to run it without one",
            "anyOf": [
                {"const": "none"},
                {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "read": {"type": "array", "items": {"type": "string"}},
                        "write": {"type": "array", "items": {"type": "string"}},
                        "network": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535}},
                        "limits": {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "cpu_s": {"type": "integer", "minimum": 1},
                                "memory_mb": {"type": "integer", "minimum": 1},
                                "processes": {"type": "integer", "minimum": 1},
                                "file_size_mb": {"type": "integer", "minimum": 1},
                                "open_files": {"type": "integer", "minimum": 1}
                            }
                        }
                    }
                },
                {"type": "null"}
            ]
        })
    }
}

fn unknown(k: &str, keys: &[&str]) -> String {
    let hint = match crate::diagnose::closest(k, keys.iter().copied()) {
        Some(c) => format!(" (did you mean `{c}`?)"),
        None => format!(
            "; the keys here are {}",
            keys.iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("unknown key `{k}`{hint}")
}

fn paths(v: &Value) -> Result<Vec<String>, String> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("a list of paths (e.g. `[data, /opt/models]`), not {v}"))?;
    items
        .iter()
        .map(|p| match p.as_str() {
            Some(s) if !s.trim().is_empty() => Ok(s.to_owned()),
            _ => Err(format!(
                "each entry is a path (relative to the agent file's directory, `.` for the directory itself), not {p}"
            )),
        })
        .collect()
}

fn ports(v: &Value) -> Result<Vec<u16>, String> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("a list of TCP ports (e.g. `[443, 5432]`), not {v}"))?;
    items
        .iter()
        .map(|p| {
            p.as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    format!(
                        "each entry is a TCP port from 1 to 65535 (Landlock restricts ports, not hosts), not {p}"
                    )
                })
        })
        .collect()
}

fn limits(v: &Value) -> Result<SandboxLimits, Vec<(Vec<Seg>, String)>> {
    let Value::Object(map) = v else {
        return Err(vec![(
            Vec::new(),
            format!(
                "a mapping of limits (`cpu_s`, `memory_mb`, `processes`, `file_size_mb`, `open_files`), not {v}"
            ),
        )]);
    };
    let mut l = SandboxLimits::default();
    let mut out = Vec::new();
    for (k, v) in map {
        let at = vec![Seg::Key(k.clone())];
        let slot = match k.as_str() {
            "cpu_s" => &mut l.cpu_s,
            "memory_mb" => &mut l.memory_mb,
            "processes" => &mut l.processes,
            "file_size_mb" => &mut l.file_size_mb,
            "open_files" => &mut l.open_files,
            _ => {
                out.push((at, unknown(k, &LIMIT_KEYS)));
                continue;
            }
        };
        match v.as_u64().filter(|n| *n > 0) {
            Some(n) => *slot = Some(n),
            None => out.push((at, format!("a whole number of at least 1, not {v}"))),
        }
    }
    if out.is_empty() { Ok(l) } else { Err(out) }
}

impl Serialize for SandboxDecl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Off => s.serialize_str("none"),
            Self::Rules(r) => r.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SandboxDecl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Self::from_value(&v).map_err(|problems| {
            serde::de::Error::custom(
                problems
                    .iter()
                    .map(|(at, m)| {
                        let mut path = vec![Seg::Key("sandbox".into())];
                        path.extend(at.iter().cloned());
                        format!("{}: {m}", crate::diagnose::show_path(&path))
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })
    }
}

impl JsonSchema for SandboxDecl {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SandboxDecl".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        Self::schema(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn none_and_rules_are_read() {
        assert_eq!(
            SandboxDecl::from_value(&json!("none")),
            Ok(SandboxDecl::Off)
        );
        let d = SandboxDecl::from_value(&json!({
            "read": ["data"], "write": ["."], "network": [5432],
            "limits": {"cpu_s": 5, "memory_mb": 64}
        }))
        .unwrap_or(SandboxDecl::Off);
        let SandboxDecl::Rules(r) = d else {
            panic!("not rules: {d:?}")
        };
        assert_eq!(
            (
                r.read,
                r.write,
                r.network,
                r.limits.cpu_s,
                r.limits.memory_mb
            ),
            (
                vec!["data".to_owned()],
                vec![".".to_owned()],
                vec![5432],
                Some(5),
                Some(64)
            )
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let e = SandboxDecl::from_value(&json!({
            "reed": ["x"], "network": [0], "limits": {"cpu": 1, "memory_mb": -1}
        }))
        .err()
        .unwrap_or_default();
        let shown: Vec<String> = e
            .iter()
            .map(|(p, m)| format!("{}: {m}", crate::diagnose::show_path(p)))
            .collect();
        assert_eq!(shown.len(), 4, "{shown:?}");
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("reed: unknown key `reed` (did you mean `read`?)")),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("network: each entry is a TCP port")),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("limits.cpu: unknown key")),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|s| s.starts_with("limits.memory_mb: a whole number")),
            "{shown:?}"
        );
        let e = SandboxDecl::from_value(&json!("off"))
            .err()
            .unwrap_or_default();
        assert!(e[0].1.contains("`none`"), "{e:?}");
    }
}
