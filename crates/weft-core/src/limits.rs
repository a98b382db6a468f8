//! Limits: the bounds on a run (the agent file's `limits:`, [`Limits`]), and the limits on what
//! weft accepts, so that everything it accepts it can also store and read back, and the work
//! spent on one input stays bounded.
//!
//! Stored events are read back with `serde_json`, which refuses JSON nested deeper than
//! [`READ_DEPTH`] levels. A value weft accepts (a tool's output, an input, a plan argument) ends
//! up inside an event envelope (a few levels) and may be written below an `_outputPath` of up to
//! [`MAX_PATH_SEGMENTS`] segments, so values are held to [`MAX_VALUE_DEPTH`] levels, well below
//! what the reader takes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The deepest JSON the event reader takes (`serde_json`'s fixed recursion limit).
pub const READ_DEPTH: usize = 128;

/// The deepest JSON value weft accepts from a tool, an input, a plan or a model reply.
pub const MAX_VALUE_DEPTH: usize = 64;

/// The most segments a reference or an `_outputPath` may have (`state.a.b` has 2 below `state`).
pub const MAX_PATH_SEGMENTS: usize = 32;

/// The levels an event adds around a value: the envelope, the event, a step's outcome, and
/// the state snapshot around the data.
pub const ENVELOPE_DEPTH: usize = 8;

/// The largest file (agent file, plan, input, scripted model) weft reads: 16 MiB.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads at most [`MAX_FILE_BYTES`] of text from `reader` (an agent file, a plan, an input file,
/// a script, a cassette, a task on stdin): past that it stops reading and fails with an
/// `InvalidData` error that says so, instead of growing without bound (`@/dev/zero`). The
/// caller opens the source (`File::open(path).and_then(read_text)`) and names it in its error;
/// weft-core itself opens nothing.
pub fn read_text(reader: impl std::io::Read) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    reader.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "it is larger than {} MiB, the most weft reads from one file or stream",
                MAX_FILE_BYTES / (1024 * 1024)
            ),
        ));
    }
    Ok(text)
}

/// The most JSON values (every object, array and scalar) a plan may hold.
pub const MAX_PLAN_NODES: usize = 100_000;

const _: () = assert!(MAX_VALUE_DEPTH + MAX_PATH_SEGMENTS + ENVELOPE_DEPTH < READ_DEPTH);

/// How deeply `value` nests: a scalar is 0, `[]` and `{}` are 1, `[[1]]` is 2. Computed
/// without recursion, so any value can be measured.
pub fn depth(value: &Value) -> usize {
    let mut max = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                max = max.max(d + 1);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            Value::Object(map) => {
                max = max.max(d + 1);
                stack.extend(map.values().map(|i| (i, d + 1)));
            }
            _ => max = max.max(d),
        }
    }
    max
}

/// `Err` with a message naming `what` when `value` nests deeper than [`MAX_VALUE_DEPTH`].
pub fn check_depth(value: &Value, what: &str) -> Result<(), String> {
    let d = depth(value);
    if d > MAX_VALUE_DEPTH {
        return Err(format!(
            "{what} is JSON nested {d} levels deep; weft accepts at most {MAX_VALUE_DEPTH} levels \
             (flatten it, or return the deep part as a string)"
        ));
    }
    Ok(())
}

/// How many values `value` holds (itself and everything inside it), counted up to `cap`.
pub fn nodes(value: &Value, cap: usize) -> usize {
    let mut n = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        n += 1;
        if n > cap {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    n
}

/// `Err` naming `what` when JSON or YAML text nests its flow brackets (`[`, `{`) deeper than
/// [`READ_DEPTH`]: checked on the text, before a parser spends its time on it.
pub fn check_text_depth(text: &str, what: &str) -> Result<(), String> {
    let d = text_depth(text);
    if d > READ_DEPTH {
        return Err(format!(
            "{what} nests brackets {d} levels deep; weft reads at most {READ_DEPTH} levels"
        ));
    }
    Ok(())
}

/// How deeply JSON text nests, counted on its brackets (outside strings) without parsing it:
/// lets a reader refuse a deep document before a parser recurses into it.
pub fn text_depth(text: &str) -> usize {
    let (mut d, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                d += 1;
                max = max.max(d);
            }
            b']' | b'}' => d = d.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Bounds on a run. Every loop in weft is bounded by one of these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Attempts per step, the first included.
    pub max_step_attempts: u32,
    /// Steps running at once in one wave.
    pub max_parallel: usize,
    /// Waves per run.
    pub max_waves: u32,
    /// Replans per run (plan mode).
    pub max_replans: u32,
    /// Response resolution rounds (plan mode).
    pub max_response_rounds: u32,
    /// Model turns per run (ReAct mode).
    pub max_iterations: u32,
    /// Unusable replies (or failed model calls) in a row before the run gives up.
    pub max_model_retries: u32,
    /// Backoff before the second attempt; doubles for each further attempt.
    pub retry_backoff_ms: u64,
    /// Upper bound of one backoff.
    pub retry_backoff_max_ms: u64,
    /// The most tokens (estimated) a conversation request may carry before its older turns are
    /// summarised by the model (`compact` calls). Unset: never compacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_context_tokens: Option<u32>,
    /// Transitions between workflow steps from one message of the user to the end of its turn
    /// (workflow mode).
    pub max_transitions: u32,
    /// The most tokens (estimated as for `max_context_tokens`) of long-term memories a turn's
    /// requests carry, when the agent recalls memories (`recall_memories`). 0: none.
    pub memory_tokens: u32,
    /// The most memories a turn's requests carry (at most 20).
    pub memory_items: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_step_attempts: 3,
            max_parallel: 4,
            max_waves: 100,
            max_replans: 3,
            max_response_rounds: 2,
            max_iterations: 25,
            max_model_retries: 3,
            retry_backoff_ms: 200,
            retry_backoff_max_ms: 10_000,
            max_context_tokens: None,
            max_transitions: 50,
            memory_tokens: 400,
            memory_items: 5,
        }
    }
}

impl Limits {
    /// The delay before attempt `next_attempt` (2, 3, ...).
    pub fn backoff_ms(&self, next_attempt: u32) -> u64 {
        let exp = next_attempt.saturating_sub(2).min(20);
        self.retry_backoff_ms
            .saturating_mul(1u64 << exp)
            .min(self.retry_backoff_max_ms)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn nested(n: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..n {
            v = json!([v]);
        }
        v
    }

    #[test]
    fn depth_counts_levels() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!([])), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": 2}]})), 3);
        assert_eq!(depth(&nested(200)), 200);
        assert_eq!(text_depth(&nested(200).to_string()), 200);
        assert_eq!(text_depth(r#"{"a": "[[[[\"]]"}"#), 1);
    }

    #[test]
    fn the_deepest_accepted_value_reads_back_inside_an_event() {
        let v = nested(MAX_VALUE_DEPTH + MAX_PATH_SEGMENTS + ENVELOPE_DEPTH);
        let text = v.to_string();
        assert!(serde_json::from_str::<Value>(&text).is_ok());
        assert!(check_depth(&nested(MAX_VALUE_DEPTH), "x").is_ok());
        let e = check_depth(&nested(MAX_VALUE_DEPTH + 1), "the output").unwrap_err();
        assert!(
            e.contains("the output is JSON nested 65 levels deep"),
            "{e}"
        );
    }
}
