//! Whether what a reference reads fits the parameter it fills: the grammar of a planner in the
//! process offers a reference (`†input.x`, `†state.a`, `†steps.s1.member.id`) in an argument
//! only where what it will read is of a kind the parameter accepts.
//!
//! What is known of a reference's source decides what can be promised:
//! - a value held now (the run's input, the State as it is, a finished step's output): it fits
//!   when the parameter's schema accepts it, checked as the engine checks arguments;
//! - a tool's declared `output_schema`: the paths through `required` properties are offered,
//!   each where the JSON types its schema names are all types the parameter accepts (an
//!   `integer` fits a `number`), and a parameter with fixed values (`enum`, `const`) takes only
//!   a source whose own fixed values it accepts; a path whose schema names no type fits only a
//!   parameter that takes anything. Keywords beyond the type and fixed values (a `pattern`,
//!   `minimum`, `format`) are not compared: a source may still break those;
//! - nothing (a tool with no `output_schema`, a step the executor carries out, a step not yet
//!   written): any path is offered, and nothing is promised.

use std::collections::BTreeSet;

use serde_json::Value;

/// How deep a path into a source's value or schema is offered.
pub const MAX_OFFERED_DEPTH: usize = 4;

/// The most paths offered from one source: a wide value offers its first ones.
pub const MAX_OFFERED_PATHS: usize = 64;

/// The most places looked at in one source (a wide input is not walked whole for every
/// parameter of every step).
pub const MAX_LOOKED_AT: usize = 512;

/// What is known of what a reference reads.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// A value held now.
    Value(&'a Value),
    /// The schema its value will match (a tool's `output_schema`).
    Schema(&'a Value),
    /// Nothing: any path may be read, and whether it fits is not known.
    Unknown,
}

/// A name that a reference holds as one path segment (references are written without escapes).
pub fn plain_segment(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The paths below `source` (itself first, as the empty path) that fit `param`, outermost key
/// first; `None` when the source is [`Source::Unknown`] (any path may be written).
pub fn fitting_paths(source: Source<'_>, param: &Value) -> Option<Vec<Vec<String>>> {
    let mut out = Vec::new();
    match source {
        Source::Unknown => return None,
        Source::Value(v) => {
            let validator = jsonschema::validator_for(param).ok();
            let mut looked = 0;
            walk_value(v, &mut Vec::new(), &mut |path, v| {
                looked += 1;
                if validator.as_ref().is_some_and(|val| val.is_valid(v)) {
                    out.push(path.to_vec());
                }
                looked < MAX_LOOKED_AT && out.len() < MAX_OFFERED_PATHS
            });
        }
        Source::Schema(s) => {
            let mut looked = 0;
            walk_schema(s, &mut Vec::new(), &mut |path, s| {
                looked += 1;
                if schema_fits(s, param) {
                    out.push(path.to_vec());
                }
                looked < MAX_LOOKED_AT && out.len() < MAX_OFFERED_PATHS
            });
        }
    }
    Some(out)
}

/// Calls `seen` with `v` and each value below it (depth first), until it returns `false`;
/// returns whether to go on.
fn walk_value(
    v: &Value,
    path: &mut Vec<String>,
    seen: &mut dyn FnMut(&[String], &Value) -> bool,
) -> bool {
    if !seen(path, v) {
        return false;
    }
    if path.len() >= MAX_OFFERED_DEPTH {
        return true;
    }
    if let Value::Object(m) = v {
        for (k, child) in m.iter().filter(|(k, _)| plain_segment(k)) {
            path.push(k.clone());
            let on = walk_value(child, path, seen);
            path.pop();
            if !on {
                return false;
            }
        }
    }
    true
}

/// [`walk_value`] over a schema: `s` and the schemas of the `required` properties below it.
fn walk_schema(
    s: &Value,
    path: &mut Vec<String>,
    seen: &mut dyn FnMut(&[String], &Value) -> bool,
) -> bool {
    if !seen(path, s) {
        return false;
    }
    if path.len() >= MAX_OFFERED_DEPTH {
        return true;
    }
    let (Some(props), Some(required)) = (
        s.get("properties").and_then(Value::as_object),
        s.get("required").and_then(Value::as_array),
    ) else {
        return true;
    };
    // Only an object has properties to read: a schema that also allows other types may give one.
    if types(s).is_none_or(|t| t.iter().any(|t| *t != "object")) {
        return true;
    }
    for k in required.iter().filter_map(Value::as_str) {
        if let Some(child) = props.get(k).filter(|_| plain_segment(k)) {
            path.push(k.to_owned());
            let on = walk_schema(child, path, seen);
            path.pop();
            if !on {
                return false;
            }
        }
    }
    true
}

/// The JSON types `schema` allows (`integer` apart from `number`); `None` when it does not say
/// (any type).
fn types(schema: &Value) -> Option<BTreeSet<&'static str>> {
    const ALL: [&str; 7] = [
        "null", "boolean", "integer", "number", "string", "array", "object",
    ];
    let named = |t: &str| ALL.iter().find(|a| **a == t).copied();
    if let Some(t) = schema.get("type") {
        return match t {
            Value::String(t) => Some(named(t).into_iter().collect()),
            Value::Array(ts) => Some(
                ts.iter()
                    .filter_map(Value::as_str)
                    .filter_map(named)
                    .collect(),
            ),
            _ => None,
        };
    }
    if let Some(values) = fixed(schema) {
        return Some(values.into_iter().map(type_of).collect());
    }
    let branches = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)?;
    let mut all = BTreeSet::new();
    for b in branches {
        all.extend(types(b)?);
    }
    Some(all)
}

/// The values `schema` fixes (`enum`, `const`); `None` when it fixes none.
fn fixed(schema: &Value) -> Option<Vec<&Value>> {
    if let Some(c) = schema.get("const") {
        return Some(vec![c]);
    }
    schema
        .get("enum")
        .and_then(Value::as_array)
        .map(|e| e.iter().collect())
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether every value `source` allows is of a type `param` accepts, and of `param`'s fixed
/// values when it has some.
fn schema_fits(source: &Value, param: &Value) -> bool {
    if let Some(wanted) = fixed(param) {
        let Some(given) = fixed(source) else {
            return false;
        };
        return given.iter().all(|g| wanted.contains(g));
    }
    let Some(accepted) = types(param) else {
        // The parameter takes anything.
        return true;
    };
    let Some(given) = types(source) else {
        return false;
    };
    !given.is_empty()
        && given
            .iter()
            .all(|t| accepted.contains(t) || (*t == "integer" && accepted.contains("number")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dotted(paths: Option<Vec<Vec<String>>>) -> Vec<String> {
        paths
            .unwrap_or_default()
            .iter()
            .map(|p| p.join("."))
            .collect()
    }

    #[test]
    fn a_schema_offers_the_required_paths_of_the_parameters_type() {
        let out = json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "member": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}, "required": ["id", "name"]},
                "maybe": {"type": "integer"}
            },
            "required": ["title", "member"]
        });
        let int = json!({"type": "integer"});
        assert_eq!(
            dotted(fitting_paths(Source::Schema(&out), &int)),
            ["member.id"]
        );
        let num = json!({"type": "number"});
        assert_eq!(
            dotted(fitting_paths(Source::Schema(&out), &num)),
            ["member.id"]
        );
        let string = json!({"type": "string"});
        assert_eq!(
            dotted(fitting_paths(Source::Schema(&out), &string)),
            ["title", "member.name"]
        );
        let object = json!({"type": "object"});
        assert_eq!(
            dotted(fitting_paths(Source::Schema(&out), &object)),
            ["", "member"]
        );
        // A parameter that takes anything takes every path, typed or not.
        assert_eq!(
            fitting_paths(Source::Schema(&out), &json!({})).map(|p| p.len()),
            Some(5)
        );
    }

    #[test]
    fn fixed_values_fit_only_fixed_values_they_hold() {
        let param = json!({"type": "string", "enum": ["a", "b"]});
        assert!(schema_fits(&json!({"enum": ["a"]}), &param));
        assert!(schema_fits(&json!({"const": "b"}), &param));
        assert!(!schema_fits(&json!({"enum": ["a", "c"]}), &param));
        assert!(!schema_fits(&json!({"type": "string"}), &param));
        assert!(!schema_fits(
            &json!({"type": "number"}),
            &json!({"type": "integer"})
        ));
        assert!(!schema_fits(&json!({}), &json!({"type": "integer"})));
        assert!(schema_fits(
            &json!({"anyOf": [{"type": "integer"}, {"type": "null"}]}),
            &json!({"type": ["integer", "null"]})
        ));
    }

    #[test]
    fn a_value_offers_the_paths_whose_value_the_parameter_accepts() {
        let input = json!({"amount": 50, "customer": {"id": "c1", "age": 30}, "odd key": 1});
        let int = json!({"type": "integer", "minimum": 40});
        assert_eq!(
            dotted(fitting_paths(Source::Value(&input), &int)),
            ["amount"]
        );
        assert_eq!(
            dotted(fitting_paths(
                Source::Value(&input),
                &json!({"type": "string"})
            )),
            ["customer.id"]
        );
        assert!(fitting_paths(Source::Unknown, &int).is_none());
    }

    #[test]
    fn a_wide_value_is_looked_at_only_so_far() {
        let wide: serde_json::Map<String, Value> =
            (0..10_000).map(|i| (format!("k{i}"), json!(i))).collect();
        let wide = Value::Object(wide);
        let paths = fitting_paths(Source::Value(&wide), &json!({"type": "integer"})).unwrap();
        assert_eq!(paths.len(), MAX_OFFERED_PATHS);
        let strings = fitting_paths(Source::Value(&wide), &json!({"type": "string"})).unwrap();
        assert!(strings.is_empty());
    }
}
