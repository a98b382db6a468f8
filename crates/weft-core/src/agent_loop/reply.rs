//! Reading a model's reply: JSON out of text, fields by their usual names, and the event that
//! refuses a reply with the reason fed back on the next call. Shared by every mode.

use std::collections::HashSet;

use serde_json::Value;

use crate::event::Event;
use crate::model::{Purpose, ToolCall};
use crate::state::State;

/// Reads a JSON value from a model's text: plain JSON, JSON in a code fence, or the first
/// JSON object or array inside the text.
pub fn extract_json(text: &str) -> Result<Value, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("the reply is empty; a JSON object was expected".into());
    }
    if let Ok(v) = serde_json::from_str(t) {
        return Ok(v);
    }
    let unfenced = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|s| s.trim_end().strip_suffix("```"))
        .map(str::trim);
    if let Some(u) = unfenced
        && let Ok(v) = serde_json::from_str(u)
    {
        return Ok(v);
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (t.find(open), t.rfind(close))
            && a < b
            && let Ok(v) = serde_json::from_str(&t[a..=b])
        {
            return Ok(v);
        }
    }
    let preview: String = t.chars().take(120).collect();
    Err(format!("the reply is not JSON: `{preview}`"))
}

pub(crate) fn upper_field(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(|s| s.trim().to_ascii_uppercase().replace([' ', '-'], "_"))
}

pub(crate) fn str_field<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str))
}

pub(crate) fn rejected(purpose: Purpose, step: Option<&str>, reason: impl Into<String>) -> Event {
    Event::ModelReplyRejected {
        purpose,
        step: step.map(str::to_owned),
        reason: reason.into(),
    }
}

/// Gives every call of a reply an id of its own, whatever the provider sent: a call keeps the
/// provider's id unless it is empty or repeats the id of an earlier call of the reply, of the
/// conversation, of a call in flight or of an approval a person gave; such a call gets a new id
/// (`ID_2`, `ID_3`, ... for a repeated one, `call_N_K` for an empty one: the K-th call of the
/// session's N-th model call) and keeps the provider's in `provider_id`. Results go back to the
/// model under the call's id, which is the provider's own whenever that one was usable.
pub(crate) fn identify_calls(state: &State, calls: &mut [ToolCall]) {
    let mut mine: HashSet<String> = HashSet::with_capacity(calls.len());
    let taken = |id: &str, mine: &HashSet<String>| {
        id.is_empty()
            || mine.contains(id)
            || state.history.has_call(id)
            || state.calls.open.contains_key(id)
            || super::wait::approval(state, id).is_some()
    };
    for (k, c) in calls.iter_mut().enumerate() {
        if taken(&c.id, &mine) {
            let base = if c.id.is_empty() {
                format!("call_{}_{}", state.usage.calls.saturating_add(1), k + 1)
            } else {
                c.id.clone()
            };
            let mut id = base.clone();
            let mut n = 2u32;
            while taken(&id, &mine) || id == c.id {
                id = format!("{base}_{n}");
                n = n.saturating_add(1);
            }
            c.provider_id = Some(std::mem::replace(&mut c.id, id));
        }
        mine.insert(c.id.clone());
    }
}
