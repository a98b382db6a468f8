//! How tool calls look on the wire, for every provider: tool names mapped to the form providers
//! accept, and each call of a reply given its own id.
//!
//! Names: OpenAI and Anthropic accept only `^[a-zA-Z0-9_-]{1,64}$`, while weft names MCP tools
//! `server.tool`. A valid name is sent as it is. Any other is sent with each refused character
//! replaced by `_` (`time.now` → `time_now`); when that form is taken by another tool of the
//! request, or the name is longer than 64 characters, it ends with `_` and 8 hex digits of a
//! hash of the original name instead (cut to fit). A model's call of a wire name is mapped back.
//!
//! Ids: a call whose id is empty, or repeats the id of an earlier call of the same reply or of
//! the conversation so far, gets a new one (`call_N` for an empty id, `ID_2`, `ID_3`, ... for a
//! repeated one). The new id is the call's identity in weft and the id sent back with its
//! result; servers that repeat ids do not check them, and a server that sends unique ids sees
//! its own ids unchanged.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::{Message, Messages, ToolCall, ToolDef};

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

/// Gives every call of a reply an id of its own (see the module documentation).
pub(crate) fn unique_ids(calls: &mut [ToolCall], history: &Messages) {
    let mut used: HashSet<String> = history
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some(tool_calls.iter().map(|c| c.id.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    for (i, c) in calls.iter_mut().enumerate() {
        if c.id.is_empty() || used.contains(&c.id) {
            let base = if c.id.is_empty() {
                format!("call_{}", i + 1)
            } else {
                c.id.clone()
            };
            let mut id = base.clone();
            let mut k = 2;
            while id == c.id || id.is_empty() || used.contains(&id) {
                id = format!("{base}_{k}");
                k += 1;
            }
            c.id = id;
        }
        used.insert(c.id.clone());
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

    #[test]
    fn repeated_and_empty_ids_are_made_unique() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "echo".into(),
            arguments: json!({}),
        };
        let history = Messages::from(vec![Message::Assistant {
            content: String::new(),
            tool_calls: vec![call("call_0")],
        }]);
        let mut calls = vec![call("a"), call("a"), call(""), call("call_0"), call("a_2")];
        unique_ids(&mut calls, &history);
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "a_2", "call_3", "call_0_2", "a_2_2"]);
    }
}
