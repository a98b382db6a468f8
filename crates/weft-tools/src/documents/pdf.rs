//! The text of a PDF, page by page, read with `pdf-extract` (on `lopdf`), pure Rust. Before a
//! page is read, the text operators `'` and `"` of its content are spelled out as the ones they
//! stand for, which the extractor reads (Ghostscript writes every line after the first so); this
//! is not done yet inside form XObjects. `pdf-extract` places text by its position, where
//! lopdf's own extraction breaks words that are kerned (as groff writes them).
//!
//! A PDF is untrusted input and its reader was not written for it: it can panic on a malformed
//! file, or run for a very long time. So the file is read whole first (at most
//! [`MAX_PDF_BYTES`]), its text is extracted on a thread of its own where a panic is caught and
//! turned into an error (and not printed), the caller waits at most [`PDF_TIME_LIMIT`], and the
//! text kept is bounded by [`MAX_PDF_TEXT_BYTES`]. Every error says what is wrong with the file
//! and what to do; the caller adds the file's name. The thread is named `weft-pdf`, and a panic
//! hook keeps its panics off stderr while passing every other thread's on. Not bounded: a stack
//! overflow in the reader would still end the process, and decompressed streams have no bound
//! of their own.

use std::io::Read;
use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use pdf_extract::content::{Content, Operation};
use pdf_extract::{Document, ObjectId, OutputError, PlainTextOutput};

/// The largest PDF weft reads: 64 MiB.
pub const MAX_PDF_BYTES: u64 = 64 * 1024 * 1024;

/// The most text weft keeps from one PDF: as much as from a text file.
pub(crate) const MAX_PDF_TEXT_BYTES: usize = weft_core::limits::MAX_FILE_BYTES as usize;

/// The longest weft waits for the text of one PDF.
pub const PDF_TIME_LIMIT: Duration = Duration::from_secs(60);

/// The name of the threads that read PDFs: their panics are errors, not messages on stderr.
const THREAD: &str = "weft-pdf";

/// The text of each page of the PDF at `path` (page 1 first).
pub(super) fn pages(path: &Path) -> Result<Vec<String>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_PDF_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_PDF_BYTES {
        return Err(format!(
            "it is larger than {} MiB, the most weft reads from one PDF; split it into smaller files",
            MAX_PDF_BYTES / (1024 * 1024)
        ));
    }
    pages_of(bytes, PDF_TIME_LIMIT)
}

/// The text of each page of the PDF in `bytes`, read on a thread of its own within `limit`.
fn pages_of(bytes: Vec<u8>, limit: Duration) -> Result<Vec<String>, String> {
    // A PDF starts with `%PDF-` (readers accept it anywhere in the first KiB).
    if !bytes[..bytes.len().min(1024)]
        .windows(5)
        .any(|w| w == b"%PDF-")
    {
        return Err("it is not a PDF (it has no `%PDF-` header)".into());
    }
    guarded(move || extract(&bytes), limit)
}

/// Runs `read` on a thread of its own: its panic becomes an error (and is not printed), and it
/// is given up on after `limit` (the thread is left to end with the process).
fn guarded(
    read: impl FnOnce() -> Result<Vec<String>, String> + Send + 'static,
    limit: Duration,
) -> Result<Vec<String>, String> {
    quiet_panics();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
                .unwrap_or_else(|_| {
                    Err("it is damaged or uses a feature weft's PDF reader does not handle (the reader gave up); \
                         try saving it again as a new PDF"
                        .into())
                });
            let _ = tx.send(result);
        })
        .map_err(|e| format!("cannot start reading it: {e}"))?;
    rx.recv_timeout(limit).unwrap_or_else(|_| {
        Err(format!(
            "reading its text took longer than {} s; it may be damaged: try saving it again as a new PDF",
            limit.as_secs_f64()
        ))
    })
}

/// Panics on the PDF threads are caught and reported as errors: the default hook would also
/// print them. Every other thread's panics go to the hook that was there before.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() != Some(THREAD) {
                before(info);
            }
        }));
    });
}

/// Collects text, at most [`MAX_PDF_TEXT_BYTES`] in all (then it fails).
struct Bounded<'a> {
    text: &'a mut String,
    room: &'a mut usize,
}

impl std::fmt::Write for Bounded<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        *self.room = self.room.checked_sub(s.len()).ok_or(std::fmt::Error)?;
        self.text.push_str(s);
        Ok(())
    }
}

impl pdf_extract::ConvertToFmt for Bounded<'_> {
    type Writer = Self;
    fn convert(self) -> Self {
        self
    }
}

/// Rewrites the text operators `'` and `"` of a page's content as the operators they stand for
/// (`T*` then `Tj`; `"` sets the spacings first): the text extractor reads those only.
fn spell_out_quotes(doc: &mut Document, page: ObjectId) -> Result<(), String> {
    let data = doc
        .get_page_content(page)
        .map_err(|e| format!("cannot read the content ({e})"))?;
    let content = Content::decode(&data).map_err(|e| format!("cannot read the content ({e})"))?;
    if !content
        .operations
        .iter()
        .any(|o| matches!(o.operator.as_str(), "'" | "\""))
    {
        return Ok(());
    }
    let mut operations = Vec::with_capacity(content.operations.len());
    for op in content.operations {
        let mut operands = op.operands.into_iter();
        match op.operator.as_str() {
            "'" => {
                operations.push(Operation::new("T*", vec![]));
                operations.push(Operation::new("Tj", operands.collect()));
            }
            "\"" => {
                let (aw, ac) = (operands.next(), operands.next());
                operations.extend(aw.map(|aw| Operation::new("Tw", vec![aw])));
                operations.extend(ac.map(|ac| Operation::new("Tc", vec![ac])));
                operations.push(Operation::new("T*", vec![]));
                operations.push(Operation::new("Tj", operands.collect()));
            }
            _ => operations.push(Operation::new(&op.operator, operands.collect())),
        }
    }
    let data = Content { operations }
        .encode()
        .map_err(|e| format!("cannot read the content ({e})"))?;
    doc.change_page_content(page, data)
        .map_err(|e| format!("cannot read the content ({e})"))
}

fn extract(bytes: &[u8]) -> Result<Vec<String>, String> {
    let mut doc = Document::load_mem(bytes).map_err(|e| {
        format!("it cannot be read as a PDF ({e}); is the file complete? Try saving it again")
    })?;
    if doc.is_encrypted() && doc.encryption_state.is_none() {
        return Err(
            "it is encrypted with a password; weft reads only PDFs that open without one: save a copy without the password"
                .into(),
        );
    }
    let mut room = MAX_PDF_TEXT_BYTES;
    let mut pages = Vec::new();
    for (n, id) in doc.get_pages() {
        let page_error =
            |e: String| format!("page {n} cannot be read: {e}; try saving it again as a new PDF");
        spell_out_quotes(&mut doc, id).map_err(page_error)?;
        let mut text = String::new();
        let mut out = PlainTextOutput::new(Bounded {
            text: &mut text,
            room: &mut room,
        });
        match pdf_extract::output_doc_page(&doc, &mut out, n) {
            Ok(()) => pages.push(text),
            Err(OutputError::FormatError(_)) => {
                return Err(format!(
                    "it holds more than {} MiB of text, the most weft reads from one PDF; split it into smaller files",
                    MAX_PDF_TEXT_BYTES / (1024 * 1024)
                ));
            }
            Err(e) => return Err(page_error(e.to_string())),
        }
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/documents")
            .join(name)
    }

    #[test]
    fn text_is_read_page_by_page() {
        // Made by Ghostscript from handbook.ps (tests/fixtures/documents/README.md), which
        // writes every line after a page's first with the `'` operator.
        let pages = pages(&fixture("handbook.pdf")).unwrap();
        assert_eq!(pages.len(), 2, "{pages:?}");
        assert!(
            pages[0].contains("Refunds are paid within fourteen days"),
            "{pages:?}"
        );
        assert!(!pages[0].contains("Norway"), "{pages:?}");
        assert!(
            pages[1].contains("Parcels to Norway take a week"),
            "{pages:?}"
        );
        // Made by groff: words are split into pieces placed one by one (kerning), and put
        // together again by their positions.
        let pages = super::pages(&fixture("store.pdf")).unwrap();
        assert_eq!(pages.len(), 2, "{pages:?}");
        assert!(
            pages[0].contains("every day except Sunday. Deliveries"),
            "{pages:?}"
        );
        assert!(
            pages[1].contains("Every kettle carries a two-year warranty"),
            "{pages:?}"
        );
        // Encrypted with an owner password only: it opens without one, so it is read.
        let pages = super::pages(&fixture("owner-only.pdf")).unwrap();
        assert!(pages[1].contains("Norway"), "{pages:?}");
        // A page with no text (a drawing, as a scanned page) gives none.
        let pages = super::pages(&fixture("scan.pdf")).unwrap();
        assert!(pages.iter().all(|p| p.trim().is_empty()), "{pages:?}");
    }

    #[test]
    fn encrypted_truncated_and_oversized_pdfs_are_refused() {
        let e = pages(&fixture("locked.pdf")).unwrap_err();
        assert!(e.contains("encrypted with a password"), "{e}");
        let whole = std::fs::read(fixture("handbook.pdf")).unwrap();
        for cut in [whole.len() / 2, whole.len() - 40, 200, 20] {
            let e = pages_of(whole[..cut].to_vec(), PDF_TIME_LIMIT).unwrap_err();
            assert!(
                e.contains("cannot be read") || e.contains("damaged"),
                "cut at {cut}: {e}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.pdf");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_PDF_BYTES + 1).unwrap();
        let e = pages(&big).unwrap_err();
        assert!(e.contains("larger than 64 MiB"), "{e}");
    }

    #[test]
    #[allow(clippy::panic)]
    fn a_reader_that_panics_or_hangs_gives_an_error() {
        let e = guarded(|| panic!("index out of bounds"), PDF_TIME_LIMIT).unwrap_err();
        assert!(e.contains("damaged"), "{e}");
        let e = guarded(
            || {
                std::thread::sleep(Duration::from_secs(5));
                Ok(Vec::new())
            },
            Duration::from_millis(100),
        )
        .unwrap_err();
        assert!(e.contains("took longer than 0.1 s"), "{e}");
        assert_eq!(
            guarded(|| Ok(vec!["a".into()]), PDF_TIME_LIMIT),
            Ok(vec!["a".into()])
        );
    }

    #[test]
    fn files_that_are_not_pdfs_are_refused() {
        let e = pages_of(b"hello".to_vec(), PDF_TIME_LIMIT).unwrap_err();
        assert!(e.contains("not a PDF"), "{e}");
        let e = pages_of(b"%PDF-1.4\n".to_vec(), PDF_TIME_LIMIT).unwrap_err();
        assert!(e.contains("cannot be read as a PDF"), "{e}");
    }

    #[test]
    fn garbage_after_a_header_gives_an_error_never_a_panic() {
        // Bytes that look like a PDF's start, then noise of many shapes.
        let mut seed = 7u64;
        for n in 0..200 {
            let mut b = b"%PDF-1.7\n1 0 obj << /Type /Page /Contents 2 0 R >> endobj\n".to_vec();
            for _ in 0..(n * 13 % 400) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                b.push((seed >> 56) as u8);
            }
            b.extend_from_slice(b"\ntrailer << /Root 1 0 R >>\n%%EOF");
            // Either some pages (of no text) or an error: what matters is that it returns.
            let _ = pages_of(b, PDF_TIME_LIMIT);
        }
        // Real PDFs cut short anywhere, and with bytes changed here and there.
        for name in ["handbook.pdf", "store.pdf"] {
            let whole = std::fs::read(fixture(name)).unwrap();
            for cut in (0..whole.len()).step_by(97) {
                let _ = pages_of(whole[..cut].to_vec(), PDF_TIME_LIMIT);
            }
            for at in (0..whole.len()).step_by(89) {
                let mut b = whole.clone();
                b[at] = b[at].wrapping_add(0x55);
                let _ = pages_of(b, PDF_TIME_LIMIT);
            }
        }
    }
}
