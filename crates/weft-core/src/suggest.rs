//! "Did you mean": the known name closest to a mistyped one, for errors that name what to write.

/// The candidate closest to `name` by edit distance, if it is close enough to be a typo (at most
/// a third of the longer name's characters differ, and at least one). Ties go to the first.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = distance(name, c);
        let allowed = (name.chars().count().max(c.chars().count()) / 3).max(1);
        if d <= allowed && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `; did you mean `X`?` when a candidate is close to `name`, else nothing.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, candidates)
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default()
}

/// Levenshtein distance over characters, with adjacent swaps counted as one edit.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    if let Some(first) = rows.first_mut() {
        for (j, cell) in first.iter_mut().enumerate() {
            *cell = j;
        }
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_the_name_and_a_stranger_finds_none() {
        assert_eq!(closest("lnie", ["line", "lines", "count"]), Some("line"));
        assert_eq!(
            closest("refund-polcy", ["refund-policy", "tone"]),
            Some("refund-policy")
        );
        assert_eq!(closest("weather", ["line", "count"]), None);
        assert_eq!(did_you_mean("x", []), "");
    }
}
