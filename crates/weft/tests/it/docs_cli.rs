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

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../weft-tools/tests/fixtures/documents")
        .join(name)
}

fn first_hit(dir: &Path, query: &str) -> serde_json::Value {
    let o = weft(dir, &["docs", "search", query, "--json", "--limit", "1"]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    serde_json::from_str(text.lines().next().unwrap_or("null")).unwrap()
}

#[test]
fn html_and_pdf_documents_cite_their_line_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let page = "<!DOCTYPE html>\n<html>\n<head><title>Help</title>\n\
        <script>const hidden = 'zebra';</script><style>.zebra { }</style>\n</head>\n<body>\n\
        <h1>Returns</h1>\n\
        <p>Returns are accepted within &quot;thirty&quot; days.</p>\n\
        <table><tr><td>Gift cards</td><td>never refunded</td></tr></table>\n\
        </body>\n</html>\n";
    std::fs::write(d.join("help.html"), page).unwrap();
    // A real PDF made by Ghostscript (see the fixture's README): two pages.
    std::fs::copy(fixture("handbook.pdf"), d.join("handbook.pdf")).unwrap();
    let o = weft(d, &["docs", "add", "help.html", "handbook.pdf"]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("handbook.pdf: 2 chunks"), "{o:?}");
    // A PDF's chunk cites its page.
    let hit = first_hit(d, "parcels to Norway");
    assert_eq!(
        (hit["source"].as_str(), hit["position"].as_i64()),
        (Some("handbook.pdf"), Some(2))
    );
    assert!(
        hit["text"].as_str().unwrap().contains("take a week"),
        "{hit}"
    );
    let hit = first_hit(d, "refunds receipt");
    assert_eq!(
        (hit["source"].as_str(), hit["position"].as_i64()),
        (Some("handbook.pdf"), Some(1))
    );
    // An HTML chunk cites the source line its first block starts on; entities are decoded.
    let hit = first_hit(d, "returns thirty days");
    assert_eq!(
        (hit["source"].as_str(), hit["position"].as_i64()),
        (Some("help.html"), Some(7))
    );
    let text = hit["text"].as_str().unwrap();
    assert!(
        text.starts_with("Returns\n\nReturns are accepted within \"thirty\" days."),
        "{text}"
    );
    assert!(text.contains("Gift cards\nnever refunded"), "{text}");
    // Nothing of the head, the scripts or the styles is kept.
    let o = weft(d, &["docs", "search", "zebra help"]);
    assert!(stdout(&o).starts_with("no document matches"), "{o:?}");
    // The plain output cites `file:position` too.
    let o = weft(d, &["docs", "search", "Norway", "--limit", "1"]);
    assert!(stdout(&o).starts_with("handbook.pdf:2\n"), "{o:?}");

    // Adding a changed HTML file again replaces its chunks.
    std::fs::write(d.join("help.html"), page.replace("thirty", "sixty")).unwrap();
    assert!(weft(d, &["docs", "add", "help.html"]).status.success());
    let hit = first_hit(d, "returns accepted days");
    assert!(
        hit["text"].as_str().unwrap().contains("\"sixty\" days"),
        "{hit}"
    );
    let o = weft(d, &["docs", "search", "thirty"]);
    assert!(stdout(&o).starts_with("no document matches"), "{o:?}");

    // A PDF with no text (a scanned page) adds nothing, and says so.
    std::fs::copy(fixture("scan.pdf"), d.join("scan.pdf")).unwrap();
    let o = weft(d, &["docs", "add", "scan.pdf"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "scan.pdf: no text, nothing added\n");

    // Bad PDFs are refused by name, exit 2, and the good file given with them is not stored.
    std::fs::write(d.join("fresh.html"), "<p>Walruses are welcome.</p>").unwrap();
    let whole = std::fs::read(fixture("handbook.pdf")).unwrap();
    std::fs::write(d.join("cut.pdf"), &whole[..whole.len() / 2]).unwrap();
    std::fs::write(d.join("noise.pdf"), b"\x00\x01GIF89a not a pdf at all").unwrap();
    std::fs::copy(fixture("locked.pdf"), d.join("locked.pdf")).unwrap();
    for (bad, says) in [
        ("cut.pdf", "cannot be read as a PDF"),
        ("noise.pdf", "not a PDF"),
        ("locked.pdf", "encrypted with a password"),
    ] {
        let o = weft(d, &["docs", "add", "fresh.html", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("error: {bad}: ")) && err.contains(says),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        let o = weft(d, &["docs", "search", "walruses"]);
        assert!(
            stdout(&o).starts_with("no document matches"),
            "{bad}: {o:?}"
        );
    }
}
