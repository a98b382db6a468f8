//! Reading a model's reply: JSON out of text, fields by their usual names, and the event that
//! refuses a reply with the reason fed back on the next call. Shared by every mode.

use serde_json::Value;

use crate::event::Event;
use crate::model::Purpose;

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
