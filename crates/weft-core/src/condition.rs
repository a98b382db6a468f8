//! What a `_when` condition may say. A condition tests values the plan already has; it does not
//! build new ones. Plans come from models, so a condition is untrusted input, and the expression
//! language can grow a value without bound in one step (`(() * 100000000) ~ 2` ran for minutes,
//! found by fuzzing; `'x' | indent(1000000000)` allocates a gigabyte). Before a condition is
//! compiled, its text is checked: outside string literals it may not repeat or concatenate
//! (`*`, `**`, `~`), slice (`:`), call a function (`range(...)`, `lipsum(...)`), or use a filter outside
//! [`FILTERS`]. Comparisons, `and` / `or` / `not`, `in`, `is` tests, `+ - / // %`, attribute and
//! index access stay.

/// Filters a condition may use: each costs at most the size of its input.
pub const FILTERS: &[&str] = &[
    "abs", "bool", "count", "d", "default", "first", "float", "int", "last", "length", "lower",
    "max", "min", "round", "string", "trim", "upper",
];

const USE: &str =
    "a condition compares values, e.g. `†state.total > 100 and †state.items | length > 0`";

/// An expression's text compiled, once [`check`] found it says only what an expression may say:
/// the one place weft compiles a model's or an agent file's expression (the compiler panics on a
/// template's closing marker, `}}`, and can build values without bound; both found by fuzzing).
pub fn compile<'e>(
    env: &'e minijinja::Environment<'e>,
    expr: &'e str,
) -> Result<minijinja::Expression<'e, 'e>, String> {
    check(expr)?;
    env.compile_expression(expr).map_err(|e| e.to_string())
}

/// Checks a condition's text (after its reference marks are removed).
pub fn check(expr: &str) -> Result<(), String> {
    if let Some(m) = ["}}", "%}", "#}", "{{", "{%", "{#"]
        .into_iter()
        .find(|m| expr.contains(m))
    {
        return Err(format!(
            "it contains `{m}`; a condition is an expression, not a template: write it without `{{{{ }}}}` ({USE})"
        ));
    }
    let code = without_strings(expr);
    if let Some(op) = ["**", "*", "~"].into_iter().find(|op| code.contains(op)) {
        return Err(format!("it uses `{op}`, which builds values; {USE}"));
    }
    // Slices (`l[1:]`) build values too, and the expression engine overflows on some
    // (`l[6:][:][6:6:-6]`, found by fuzzing); index with one number instead (`l[0]`, `l[-1]`).
    if code.contains(':') {
        return Err(format!(
            "it uses `:` (a slice or a mapping), which builds values; index with one number, e.g. `†state.items[0]`; {USE}"
        ));
    }
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !(chars[i].is_alphabetic() || chars[i] == '_') || (i > 0 && is_word(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_word(chars[i]) {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        let before = chars[..start].iter().rev().find(|c| !c.is_whitespace());
        let after = chars[i..].iter().find(|c| !c.is_whitespace());
        let is_filter = before == Some(&'|');
        if is_filter && !FILTERS.contains(&name.as_str()) {
            return Err(format!(
                "it uses the filter `{name}`; a condition may use only {} ({USE})",
                FILTERS.join(", ")
            ));
        }
        let after_dot = before == Some(&'.');
        let keyword = ["and", "or", "not", "in", "is", "if", "else"].contains(&name.as_str());
        if !is_filter && !after_dot && !keyword && after == Some(&'(') {
            return Err(format!("it calls `{name}(...)`; {USE}"));
        }
    }
    Ok(())
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The text with the contents of its string literals blanked out.
fn without_strings(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    out.push(c);
                    continue;
                }
                out.push(' ');
            }
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn tests_pass_and_builders_are_refused() {
        for ok in [
            "state.total > 100 and state.items | length > 0",
            "'*~' in state.name",
            "state.a is defined and not state.b",
            "steps.s1.output.ok == true or (state.n + 1) / 2 >= 3",
            "state.name | lower | trim == 'x'",
            "state.v | round(2) > 1.5",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("(() * 100000000) ~ 2", "`*`"),
            ("2 ** 64 > 1", "`**`"),
            ("state.a ~ state.b", "`~`"),
            ("range(100000000) | length > 0", "calls `range(...)`"),
            ("'x' | indent(1000000000) == ''", "filter `indent`"),
            ("state.x | join == ''", "filter `join`"),
            ("{{ state.x }}", "not a template"),
            ("state.l[6:][:][6:6:-6] == []", "uses `:`"),
        ] {
            let e = check(bad).err().unwrap_or_default();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
