//! `weft docs add` and `weft docs search` on a SQLite store: results cite file and line, adding
//! a changed file replaces its chunks, and bad input is refused by name with nothing stored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

fn weft(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn documents_are_added_searched_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("guide.md"),
        "# Refunds\n\nRefunds are paid within 14 days.\n",
    )
    .unwrap();
    let long: String = (0..40)
        .map(|i| format!("Paragraph {i} is about shipping parcels to port number {i}.\n\n"))
        .collect();
    std::fs::write(d.join("shipping.txt"), long).unwrap();
    let o = weft(d, &["docs", "add", "guide.md", "shipping.txt"]);
    assert!(o.status.success(), "{o:?}");
    let o = weft(d, &["docs", "search", "refunds paid", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let first: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(first["source"], "guide.md");
    assert_eq!(first["position"], 1);
    // A chunk of the long file cites the line it starts on.
    let o = weft(d, &["docs", "search", "port number 39", "--limit", "1"]);
    let text = stdout(&o);
    let cite = text.lines().next().unwrap();
    let (file, line) = cite.split_once(':').unwrap();
    assert_eq!(file, "shipping.txt");
    let line: usize = line.parse().unwrap();
    assert!(line > 1, "{text}");
    // Adding the changed file again replaces its chunks.
    std::fs::write(
        d.join("guide.md"),
        "# Refunds\n\nRefunds are paid within 30 days.\n",
    )
    .unwrap();
    assert!(weft(d, &["docs", "add", "guide.md"]).status.success());
    let text = stdout(&weft(d, &["docs", "search", "refunds paid"]));
    assert!(
        text.contains("30 days") && !text.contains("14 days"),
        "{text}"
    );
    // Scopes keep documents apart.
    assert!(
        weft(d, &["docs", "add", "guide.md", "--scope", "agent:shop"])
            .status
            .success()
    );
    let text = stdout(&weft(
        d,
        &["docs", "search", "refunds", "--scope", "user:bob"],
    ));
    assert!(text.starts_with("no document matches"), "{text}");
    // Bad input: named, and nothing stored.
    std::fs::write(d.join("report.pdf"), "%PDF-1.4").unwrap();
    let o = weft(d, &["docs", "add", "guide.md", "report.pdf"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("report.pdf"));
    let o = weft(d, &["docs", "search", "x", "--scope", "users:bob"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--scope `users:bob`"));
}
