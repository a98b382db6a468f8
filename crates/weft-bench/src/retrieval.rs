//! The retrieval benchmark: a generated corpus of facts (one chunk each), a question set whose
//! answers are known (each question is built from one chunk's facts, in other words), and the
//! figures: ingestion rate, query latency p50/p99 and recall@5 (the share of questions whose
//! chunk is among the first five results).
//!
//! Questions come in three sets. `exact` names facts with the corpus's own words;
//! `paraphrased` says them with other words (synonyms for the verbs and nouns) but keeps the
//! person's name and the year, which narrow a keyword search to a handful of chunks; `meaning`
//! keeps only the person's name (shared by about one chunk in 650) and describes the building and
//! the colour of its doors with other words ("a crossing" for a bridge, "deep red" for crimson),
//! so that only a search by meaning can tell the right chunk from the person's other buildings.
//!
//! With an embedder, the chunks are stored with their vectors and each search fuses the text
//! ranking with the ranking by meaning ([`Retriever::search`]); ingestion then includes making
//! the vectors.

use std::time::Instant;

use weft_runtime::retrieval::Retriever;
use weft_store::{Kind, NewEntry, Shelf, Store};

use crate::Report;

const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ren", "sa", "tor", "vel", "qua", "zim", "bar", "dun", "fe", "gol", "hir",
    "jax", "nor", "pel", "ros", "tul", "wen",
];
const FIRST: &[&str] = &[
    "Ada", "Boris", "Chen", "Dara", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jonas", "Kaya",
    "Liam", "Maya", "Nils", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera",
    "Wen", "Xavi", "Yara", "Zane",
];
const LAST: &[&str] = &[
    "Alvarez", "Berg", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Horvat", "Ivanov",
    "Jensen", "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Quist", "Rossi",
    "Silva", "Tanaka", "Ueda", "Varga", "Weber", "Yilmaz", "Zhang",
];
const CITIES: &[&str] = &[
    "Lisbon", "Oslo", "Nairobi", "Lima", "Osaka", "Tromso", "Krakow", "Porto", "Quito", "Accra",
    "Hanoi", "Tbilisi", "Ghent", "Bergen", "Dakar", "Cusco", "Leeds", "Graz", "Turku", "Split",
];
const THINGS: &[(&str, &str)] = &[
    ("bridge", "crossing"),
    ("library", "archive"),
    ("telescope", "observatory"),
    ("garden", "park"),
    ("ferry", "boat"),
    ("school", "academy"),
    ("clinic", "hospital"),
    ("bakery", "patisserie"),
    ("museum", "gallery"),
    ("railway", "train line"),
];
/// Colours and other words for them.
const COLOURS: &[(&str, &str)] = &[
    ("teal", "blue-green"),
    ("amber", "golden orange"),
    ("crimson", "deep red"),
    ("olive", "dull green"),
    ("violet", "purple"),
    ("ochre", "earthy yellow"),
    ("indigo", "dark blue"),
    ("coral", "pinkish orange"),
    ("slate", "bluish grey"),
    ("ivory", "creamy white"),
];

/// A small deterministic generator (xorshift64*), so every run has the same corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        let i = usize::try_from(self.next() % from.len() as u64).unwrap_or(0);
        from[i]
    }
}

/// One generated fact.
struct Fact {
    name: String,
    person: String,
    city: &'static str,
    year: u64,
    thing: (&'static str, &'static str),
    colour: (&'static str, &'static str),
}

fn facts(n: usize) -> Vec<Fact> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|i| {
            // Names are unique: the index, written in syllables.
            let mut name = String::new();
            let mut k = i;
            for _ in 0..4 {
                name.push_str(SYLLABLES[k % SYLLABLES.len()]);
                k /= SYLLABLES.len();
            }
            let mut name: Vec<char> = name.chars().collect();
            if let Some(c) = name.first_mut() {
                *c = c.to_ascii_uppercase();
            }
            Fact {
                name: name.into_iter().collect(),
                person: format!("{} {}", rng.pick(FIRST), rng.pick(LAST)),
                city: rng.pick(CITIES),
                year: 1900 + rng.next() % 125,
                thing: rng.pick(THINGS),
                colour: rng.pick(COLOURS),
            }
        })
        .collect()
}

fn chunk(f: &Fact) -> String {
    format!(
        "The {} called {} was built in {} in {} by {}, who painted its doors {}.",
        f.thing.0, f.name, f.city, f.year, f.person, f.colour.0
    )
}

fn exact_question(f: &Fact) -> String {
    format!(
        "Who built the {} called {} in {}?",
        f.thing.0, f.name, f.city
    )
}

fn paraphrased_question(f: &Fact) -> String {
    format!(
        "Which {} did {} construct in the year {}?",
        f.thing.1, f.person, f.year
    )
}

fn meaning_question(f: &Fact) -> String {
    format!(
        "Which {} made by {} has {} doors?",
        f.thing.1, f.person, f.colour.1
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Ingests `n` chunks through `retriever` and asks `questions` questions of each set.
pub async fn retrieval<S: Store>(
    retriever: &Retriever<S>,
    label: &str,
    n: usize,
    questions: usize,
) -> anyhow::Result<Vec<Report>> {
    let label = format!(
        "{label} embeddings={}",
        retriever.embedder.as_ref().map_or("off", |e| e.model())
    );
    let facts = facts(n);
    let shelf = Shelf::public();
    let start = Instant::now();
    // Documents of 10 chunks each, added one document at a time.
    for (d, group) in facts.chunks(10).enumerate() {
        let entries = group
            .iter()
            .enumerate()
            .map(|(i, f)| NewEntry {
                text: chunk(f),
                source: format!("doc{d}.txt"),
                position: i64::try_from(i).unwrap_or(0) + 1,
                embedding: None,
            })
            .collect();
        retriever
            .add(Kind::Document, &shelf, entries, true, 0)
            .await?;
    }
    let ingest = start.elapsed().as_secs_f64();
    let mut reports = vec![
        Report::new(format!("retrieval ingest chunks={n} {label}"))
            .with("chunks_per_s", n as f64 / ingest)
            .with("seconds", ingest),
    ];
    let step = (n / questions.max(1)).max(1);
    for (set, ask) in [
        ("exact", exact_question as fn(&Fact) -> String),
        ("paraphrased", paraphrased_question),
        ("meaning", meaning_question),
    ] {
        let mut latencies = Vec::new();
        let mut found = 0usize;
        let mut asked = 0usize;
        for (i, f) in facts.iter().enumerate().step_by(step).take(questions) {
            let q = ask(f);
            let t = Instant::now();
            let hits = retriever
                .search(Kind::Document, std::slice::from_ref(&shelf), &q, 5)
                .await?;
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            let want = (
                format!("doc{}.txt", i / 10),
                i64::try_from(i % 10).unwrap_or(0) + 1,
            );
            if hits.iter().any(|h| (h.source.clone(), h.position) == want) {
                found += 1;
            }
            asked += 1;
        }
        latencies.sort_by(f64::total_cmp);
        reports.push(
            Report::new(format!("retrieval search set={set} chunks={n} {label}"))
                .with("recall_at_5", found as f64 / asked.max(1) as f64)
                .with("p50_ms", percentile(&latencies, 0.5))
                .with("p99_ms", percentile(&latencies, 0.99))
                .with("questions", asked as f64),
        );
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_the_same_every_time_and_names_are_unique() {
        let a = facts(500);
        let b = facts(500);
        assert_eq!(chunk(&a[123]), chunk(&b[123]));
        let mut names: Vec<&str> = a.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 500);
    }
}
