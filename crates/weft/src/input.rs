//! `--input`: the JSON object a run starts with.

use anyhow::{Context, Result, anyhow};
use serde_json::Value;

/// `--input`: JSON text, or `@FILE` for a JSON file. Absent: `{}`.
pub fn input(arg: Option<&str>) -> Result<Value> {
    let Some(arg) = arg else {
        return Ok(Value::Object(serde_json::Map::new()));
    };
    let (text, origin) = match arg.strip_prefix('@') {
        Some(file) => (
            std::fs::File::open(file)
                .and_then(weft_core::limits::read_text)
                .with_context(|| format!("cannot read input file {file}"))?,
            format!("input file {file}"),
        ),
        None => (arg.to_owned(), "--input".to_owned()),
    };
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{origin} is not valid JSON"))?;
    weft_core::limits::check_depth(&v, &origin).map_err(|e| anyhow!(e))?;
    if !v.is_object() {
        return Err(anyhow!(
            "{origin} must be a JSON object, e.g. '{{\"customerId\": \"c1\"}}'"
        ));
    }
    Ok(v)
}
