//! Problems of a file people write (an agent file): each names where it is (the field's path and
//! its YAML line and column) and, for a misspelt name, the name that was probably meant.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// One problem of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The field, as `tools[2].builtin` or `workflow.steps.triage.next[0].to`; empty for the
    /// whole file.
    pub path: String,
    /// What is wrong and what to write instead (a misspelt key names the one meant).
    pub message: String,
    /// Where the field is in the file (1-based), when it was found.
    pub line: Option<usize>,
    /// The field's column on that line (1-based); `None` when its line is unknown.
    pub column: Option<usize>,
    /// Text inside the field the problem is about (a template's variable): its position is
    /// given rather than the field's.
    pub needle: Option<String>,
}

impl Problem {
    /// A problem of the field at `path` (empty: the whole file), not located in the text yet.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
            line: None,
            column: None,
            needle: None,
        }
    }

    /// A problem from a message written as `PATH: what is wrong` (as the loaders' checks
    /// write them); a message that starts with no path is about the whole file.
    pub fn from_message(text: &str) -> Self {
        if let Some((path, rest)) = text.split_once(": ")
            && !path.is_empty()
            && path
                .chars()
                .all(|c| c.is_alphanumeric() || "_-.[]".contains(c))
            && !path.starts_with('.')
        {
            return Self::new(path, rest);
        }
        Self::new("", text)
    }

    /// A problem YAML's own reader found (syntax, a key given twice, ...), where it found it.
    pub fn yaml(e: &serde_yaml_ng::Error) -> Self {
        let mut p = Self::new("", e.to_string());
        if let Some(l) = e.location() {
            p.line = Some(l.line());
            p.column = Some(l.column());
        }
        p
    }

    /// Sets the position from `text`, the file's contents, unless it is known already.
    #[must_use]
    pub fn located(mut self, text: &str) -> Self {
        if self.line.is_some() || self.path.is_empty() {
            return self;
        }
        let Some((line, column)) = locate(text, &parse_path(&self.path)) else {
            return self;
        };
        (self.line, self.column) = (Some(line), Some(column));
        if let Some(n) = &self.needle
            && let Some((l, c)) = find_after(text, line, n)
        {
            (self.line, self.column) = (Some(l), Some(c));
        }
        self
    }

    /// `FILE:LINE:COLUMN: PATH: message`, as compilers write theirs (editors jump to it).
    pub fn in_file(&self, file: &str) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{file}:{l}:{c}: {self}"),
            _ => format!("{file}: {self}"),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The candidate closest to `word`, when it is close enough to be a misspelling of it.
pub fn closest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    // Close by Jaro-Winkler (transposed and dropped letters in longer names), or one edit away
    // (a short name: `rn` for `run`).
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            let edits = strsim::osa_distance(word, c);
            let score = strsim::jaro_winkler(word, c);
            let close = edits <= 1 && word.chars().count() > 1;
            (if close { score.max(0.81) } else { score }, c)
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// ` (did you mean `NAME`?)` for the closest candidate, or nothing.
pub fn did_you_mean<'a, I>(word: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    closest(word, candidates)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// One step of a path into a file's structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    /// A mapping's key.
    Key(String),
    /// A list's position, from 0.
    Index(usize),
}

/// Reads `a.b[2].c` into its steps.
pub fn parse_path(path: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            out.push(Seg::Key(key.to_owned()));
        }
        while let Some((n, tail)) = rest.split_once(']') {
            if let Ok(i) = n.parse() {
                out.push(Seg::Index(i));
            }
            rest = tail.strip_prefix('[').unwrap_or(tail);
        }
    }
    out
}

/// Writes a path of steps as `a.b[2].c`.
pub fn show_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The line and column (1-based) of the field at `path` in a YAML (or JSON) text: of the key,
/// when the path ends with a key. `None` when the text has no such field.
///
/// The text is read by the YAML reader that reads the file; the walk stops at the field with an
/// error, which the reader marks with the position it was reading.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let e = Walk { path }.deserialize(de).err()?;
    if e.to_string().contains(FOUND) {
        e.location().map(|l| (l.line(), l.column()))
    } else {
        None
    }
}

const FOUND: &str = "weft: found the field";

/// Every number of a YAML text that is not finite (`.nan`, `.inf`, `-.inf`, or one too large
/// for a float), with its path (`budget.run.cost_usd`) and a problem saying so. JSON has no such
/// number: a file read into JSON would hold `null` in its place, as if the field had not been
/// given (a budget's limit would be gone). A text that is not YAML has none.
pub fn non_finite_numbers(text: &str) -> Vec<Problem> {
    fn walk(v: &serde_yaml_ng::Value, at: &mut Vec<Seg>, out: &mut Vec<Problem>) {
        use serde_yaml_ng::Value as Y;
        match v {
            Y::Number(n) => {
                if let Some(f) = n.as_f64().filter(|f| !f.is_finite()) {
                    let shown = if f.is_nan() {
                        ".nan"
                    } else if f > 0.0 {
                        ".inf"
                    } else {
                        "-.inf"
                    };
                    out.push(Problem::new(
                        show_path(at),
                        format!(
                            "{shown} is not a finite number; give a number (a limit: 0 or more)"
                        ),
                    ));
                }
            }
            Y::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    at.push(Seg::Index(i));
                    walk(item, at, out);
                    at.pop();
                }
            }
            Y::Mapping(map) => {
                for (k, item) in map {
                    let key = match k {
                        Y::String(s) => s.clone(),
                        other => serde_yaml_ng::to_string(other)
                            .map(|s| s.trim().to_owned())
                            .unwrap_or_default(),
                    };
                    at.push(Seg::Key(key));
                    walk(item, at, out);
                    at.pop();
                }
            }
            Y::Tagged(t) => walk(&t.value, at, out),
            Y::Null | Y::Bool(_) | Y::String(_) => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        walk(&v, &mut Vec::new(), &mut out);
    }
    out
}

/// The first line at or after `line` holding `needle`: its line and column.
fn find_after(text: &str, line: usize, needle: &str) -> Option<(usize, usize)> {
    text.lines()
        .enumerate()
        .skip(line.saturating_sub(1))
        .find_map(|(i, l)| {
            l.find(needle)
                .map(|at| (i + 1, l[..at].chars().count() + 1))
        })
}

struct Walk<'p> {
    path: &'p [Seg],
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.path.is_empty() {
            return d.deserialize_any(Found);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Seg::Key(want), rest)) = self.path.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        while let Some(hit) = map.next_key_seed(Key {
            want,
            here: rest.is_empty(),
        })? {
            if hit {
                return map.next_value_seed(Walk { path: rest });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Seg::Index(want), rest)) = self.path.split_first() else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut i = 0;
        loop {
            if i == *want {
                return seq.next_element_seed(Walk { path: rest }).map(|_| ());
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A map's key: true when it is the one wanted; an error (the position) when the path ends at it.
struct Key<'p> {
    want: &'p str,
    here: bool,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = bool;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, k: &str) -> Result<bool, E> {
        if k != self.want {
            return Ok(false);
        }
        if self.here {
            return Err(E::custom(FOUND));
        }
        Ok(true)
    }
    fn visit_bool<E: de::Error>(self, k: bool) -> Result<bool, E> {
        self.visit_str(&k.to_string())
    }
    fn visit_i64<E: de::Error>(self, k: i64) -> Result<bool, E> {
        self.visit_str(&k.to_string())
    }
    fn visit_u64<E: de::Error>(self, k: u64) -> Result<bool, E> {
        self.visit_str(&k.to_string())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

/// Marks the value the path ends at.
struct Found;

impl<'de> Visitor<'de> for Found {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(FOUND))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(FOUND))
    }
}

/// Checks `value` against `schema` (a JSON Schema with every subschema inlined, as
/// the agent file's `agent::schema::of` makes) and takes out of it what is wrong, so that the rest can
/// be read and checked further: keys the schema does not know (each with the known key it is
/// closest to) and values of the wrong type. `at` is the path of `value` in the file.
pub fn against_schema(value: &mut Value, schema: &Value, at: &[Seg], out: &mut Vec<Problem>) {
    unknown_keys(value, schema, &mut at.to_vec(), out);
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return;
    };
    let mut wrong: Vec<(Vec<Seg>, String)> = Vec::new();
    for e in validator.iter_errors(value) {
        // A value that may take several forms (a duration, a model) is left to the reader of
        // that field, whose message says which forms it takes.
        if matches!(
            e.kind(),
            jsonschema::error::ValidationErrorKind::AnyOf { .. }
                | jsonschema::error::ValidationErrorKind::OneOfNotValid { .. }
                | jsonschema::error::ValidationErrorKind::OneOfMultipleValid { .. }
        ) {
            continue;
        }
        let mut path = Vec::new();
        let mut v = &*value;
        for seg in e.instance_path().as_str().split('/').skip(1) {
            let seg = seg.replace("~1", "/").replace("~0", "~");
            match v {
                Value::Array(a) => {
                    let i = seg.parse().unwrap_or(usize::MAX);
                    path.push(Seg::Index(i));
                    v = a.get(i).unwrap_or(&Value::Null);
                }
                _ => {
                    v = v.get(&seg).unwrap_or(&Value::Null);
                    path.push(Seg::Key(seg));
                }
            }
        }
        if wrong.iter().any(|(p, _)| path.starts_with(p)) {
            continue;
        }
        wrong.retain(|(p, _)| !p.starts_with(&path));
        wrong.push((path, e.to_string()));
    }
    for (path, message) in wrong {
        let mut full = at.to_vec();
        full.extend(path.iter().cloned());
        out.push(Problem::new(show_path(&full), message));
        match path.split_last() {
            Some((Seg::Key(k), parent)) => {
                if let Some(Value::Object(m)) = pointer_mut(value, parent) {
                    m.remove(k);
                }
            }
            // An item of a list is kept in its place (the next items keep their positions).
            Some((Seg::Index(_), _)) => {
                if let Some(v) = pointer_mut(value, &path) {
                    *v = Value::Null;
                }
            }
            None => {}
        }
    }
}

fn pointer_mut<'v>(v: &'v mut Value, path: &[Seg]) -> Option<&'v mut Value> {
    path.iter().try_fold(v, |v, s| match s {
        Seg::Key(k) => v.get_mut(k.as_str()),
        Seg::Index(i) => v.get_mut(*i),
    })
}

fn unknown_keys(value: &mut Value, schema: &Value, at: &mut Vec<Seg>, out: &mut Vec<Problem>) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties");
            if let Some(props) = props
                && extra == Some(&Value::Bool(false))
            {
                let unknown: Vec<String> = map
                    .keys()
                    .filter(|k| !props.contains_key(*k))
                    .cloned()
                    .collect();
                for k in unknown {
                    map.remove(&k);
                    let hint = match closest(&k, props.keys().map(String::as_str)) {
                        Some(c) => format!(" (did you mean `{c}`?)"),
                        None => format!(
                            "; the keys here are {}",
                            props
                                .keys()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    };
                    at.push(Seg::Key(k.clone()));
                    out.push(Problem::new(
                        show_path(at),
                        format!("unknown key `{k}`{hint}"),
                    ));
                    at.pop();
                }
            }
            for (k, v) in map.iter_mut() {
                let sub = props
                    .and_then(|p| p.get(k))
                    .or(extra.filter(|e| e.is_object()));
                if let Some(sub) = sub {
                    at.push(Seg::Key(k.clone()));
                    unknown_keys(v, sub, at, out);
                    at.pop();
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|s| s.is_object()) {
                for (i, v) in items.iter_mut().enumerate() {
                    at.push(Seg::Index(i));
                    unknown_keys(v, sub, at, out);
                    at.pop();
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "name: a\ntools:\n  - builtin: echo\n  - name: t\n    command: [x, \"y\"]\nlimits: { max_parallel: 2 }\n";

    #[test]
    fn fields_are_found_where_they_are_written() {
        let at = |p: &str| locate(TEXT, &parse_path(p));
        assert_eq!(at("name"), Some((1, 1)));
        assert_eq!(at("tools[1].command"), Some((5, 5)));
        assert_eq!(at("tools[1].command[1]"), Some((5, 18)));
        assert_eq!(at("tools[0]"), Some((3, 5)));
        assert_eq!(at("limits.max_parallel"), Some((6, 11)));
        assert_eq!(at("tools[2]"), None);
        assert_eq!(at("nothing"), None);
    }

    #[test]
    fn paths_read_and_written() {
        let p = parse_path("workflow.steps.a.next[0].to");
        assert_eq!(p.len(), 6);
        assert_eq!(p[4], Seg::Index(0));
        assert_eq!(show_path(&p), "workflow.steps.a.next[0].to");
        let p = Problem::from_message("tools[3]: unknown built-in `x`");
        assert_eq!(
            (p.path.as_str(), p.message.as_str()),
            ("tools[3]", "unknown built-in `x`")
        );
        assert_eq!(Problem::from_message("a problem: here").path, "");
    }

    #[test]
    fn close_names_are_suggested_and_far_ones_not() {
        assert_eq!(
            closest("ehco", ["echo", "template", "recall"]),
            Some("echo")
        );
        assert_eq!(
            closest("opanai", ["scripted", "openai", "anthropic"]),
            Some("openai")
        );
        assert_eq!(closest("zzz", ["echo", "template"]), None);
        assert_eq!(closest("rn", ["run", "resume", "plan"]), Some("run"));
    }
}
