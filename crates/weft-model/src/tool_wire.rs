//! How tool calls look on the wire, for every provider: tool names mapped to the form providers
//! accept.
//!
//! Names: OpenAI and Anthropic accept only `^[a-zA-Z0-9_-]{1,64}$`, while weft names MCP tools
//! `server.tool`. A valid name is sent as it is. Any other is sent with each refused character
//! replaced by `_` (`time.now` → `time_now`); when that form is taken by another tool of the
//! request, or the name is longer than 64 characters, it ends with `_` and 8 hex digits of a
//! hash of the original name instead (cut to fit). A model's call of a wire name is mapped back.
//!
//! Ids: a reply's call ids are handed over as the server sent them (empty when it sent none);
//! the core gives each call an id of its own when it records the reply
//! (`weft_core::agent_loop::model_replied`), and that id goes back with the call's result.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::{ToolCall, ToolDef};

const MAX_NAME: usize = 64;

fn valid(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// FNV-1a, 32 bits: stable across processes and versions (a wire name must not change).
fn hash(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

fn replaced(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "tool".into() } else { s }
}

fn hashed(name: &str) -> String {
    let suffix = format!("_{:08x}", hash(name));
    let mut base = replaced(name);
    base.truncate(MAX_NAME - suffix.len());
    base + &suffix
}

/// The wire names of one request's tools, both ways.
#[derive(Debug, Default)]
pub(crate) struct ToolNames {
    to_wire: HashMap<String, String>,
    from_wire: HashMap<String, String>,
}

impl ToolNames {
    pub(crate) fn new(tools: &[ToolDef]) -> Self {
        let mut n = Self::default();
        let mut taken: HashSet<String> = tools
            .iter()
            .filter(|t| valid(&t.name))
            .map(|t| t.name.clone())
            .collect();
        for t in tools.iter().filter(|t| !valid(&t.name)) {
            let mut wire = replaced(&t.name);
            if wire.len() > MAX_NAME || taken.contains(&wire) {
                wire = hashed(&t.name);
            }
            let mut k = 2;
            while taken.contains(&wire) {
                let suffix = format!("_{k}");
                wire = hashed(&t.name);
                wire.truncate(MAX_NAME - suffix.len());
                wire.push_str(&suffix);
                k += 1;
            }
            taken.insert(wire.clone());
            n.from_wire.insert(wire.clone(), t.name.clone());
            n.to_wire.insert(t.name.clone(), wire);
        }
        n
    }

    /// The name to send for `name` (a tool of the request, or one the conversation called).
    pub(crate) fn wire<'a>(&'a self, name: &'a str) -> Cow<'a, str> {
        match self.to_wire.get(name) {
            Some(w) => Cow::Borrowed(w),
            None if valid(name) => Cow::Borrowed(name),
            None => Cow::Owned(hashed(name)),
        }
    }

    /// The tool a model's call of `wire` means.
    pub(crate) fn local(&self, wire: &str) -> String {
        self.from_wire
            .get(wire)
            .cloned()
            .unwrap_or_else(|| wire.to_owned())
    }

    /// Maps the names of a reply's calls back.
    pub(crate) fn map_back(&self, calls: &mut [ToolCall]) {
        if self.from_wire.is_empty() {
            return;
        }
        for c in calls {
            c.name = self.local(&c.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: String::new(),
            parameters: json!({}),
        }
    }

    #[test]
    fn names_become_valid_without_collisions_and_map_back() {
        let long = "x".repeat(80);
        let tools = [
            tool("time.now"),
            tool("time_now"),
            tool("time/now"),
            tool("echo"),
            tool(&long),
        ];
        let n = ToolNames::new(&tools);
        let wires: Vec<String> = tools.iter().map(|t| n.wire(&t.name).into_owned()).collect();
        assert_eq!(wires[1], "time_now");
        assert_eq!(wires[3], "echo");
        assert!(
            wires[0].starts_with("time_now_") && wires[0].len() == 17,
            "{wires:?}"
        );
        assert!(wires[2].starts_with("time_now_"));
        assert_eq!(wires[4].len(), 64);
        let unique: HashSet<&String> = wires.iter().collect();
        assert_eq!(unique.len(), tools.len(), "{wires:?}");
        for (t, w) in tools.iter().zip(&wires) {
            assert!(valid(w), "{w}");
            assert_eq!(n.local(w), t.name);
        }
        // Alone, a dotted name keeps its readable form.
        let n = ToolNames::new(&[tool("time.now")]);
        assert_eq!(n.wire("time.now"), "time_now");
        assert_eq!(n.local("time_now"), "time.now");
        assert_eq!(n.local("other"), "other");
    }
}
