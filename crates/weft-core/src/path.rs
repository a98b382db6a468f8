//! Dotted paths into JSON values (`a.b.0.c`), used by references and `_outputPath`.

use serde_json::{Map, Value};

/// Reads the value at `path` (segments) inside `root`. Numeric segments index arrays.
pub fn get<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = root;
    for seg in path {
        cur = match cur {
            Value::Object(map) => map.get(seg)?,
            Value::Array(items) => items.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Writes `value` at `path` inside `root`, creating objects on the way. A non-object found on
/// the way is replaced by an object: the latest writer of a path wins, as in a plain assignment.
pub fn set(root: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *root = value;
        return;
    };
    let mut cur = root;
    for seg in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(map) = cur else { return };
        cur = map
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    if let Value::Object(map) = cur {
        map.insert(last.clone(), value);
    }
}

/// True when one path is a prefix of the other (so a write to one affects a read of the other).
pub fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Splits `a.b.c` into segments; rejects empty segments.
pub fn parse(dotted: &str) -> Option<Vec<String>> {
    if dotted.is_empty() {
        return Some(Vec::new());
    }
    let segs: Vec<String> = dotted.split('.').map(str::to_owned).collect();
    if segs
        .iter()
        .any(|s| s.is_empty() || s.chars().any(char::is_whitespace))
    {
        return None;
    }
    Some(segs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Vec<String> {
        parse(s).unwrap_or_default()
    }

    #[test]
    fn set_creates_nested_objects_and_get_reads_them() {
        let mut v = json!({});
        set(&mut v, &p("a.b.c"), json!(1));
        assert_eq!(v, json!({"a": {"b": {"c": 1}}}));
        assert_eq!(get(&v, &p("a.b.c")), Some(&json!(1)));
        assert_eq!(get(&v, &p("a.x")), None);
        set(&mut v, &p("a.b"), json!([10, 20]));
        assert_eq!(get(&v, &p("a.b.1")), Some(&json!(20)));
    }

    #[test]
    fn overlap_is_prefix_in_either_direction() {
        assert!(overlaps(&p("a.b"), &p("a")));
        assert!(overlaps(&p("a"), &p("a.b.c")));
        assert!(!overlaps(&p("a.b"), &p("a.c")));
    }

    #[test]
    fn parse_rejects_empty_segments() {
        assert!(parse("a..b").is_none());
        assert!(parse("a. b").is_none());
        assert_eq!(parse("a.b"), Some(vec!["a".to_owned(), "b".to_owned()]));
    }
}
