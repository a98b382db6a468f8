//! Documents for search: a file's readable text cut into chunks of a few paragraphs, each with
//! the place it starts, so a search result can cite `path:position`. Plain text and Markdown
//! are read as they are and a chunk cites its first line; HTML is reduced to its readable text
//! (`html.rs`) and a chunk cites the source line its first block starts on; a PDF's text is
//! read page by page (`pdf.rs`) and a chunk cites its page. The store keeps the chunks
//! (`weft docs add`); the `search_documents` tool finds them.

mod html;
mod pdf;

use std::path::Path;

pub use pdf::{MAX_PDF_BYTES, PDF_TIME_LIMIT};

/// The longest chunk, in bytes (about 200 tokens): long enough to hold an answer with its
/// context, short enough that a few fit in a prompt.
pub const CHUNK_BYTES: usize = 800;

/// What a document is, by its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Plain text (`.txt`, `.text`, or no extension).
    Text,
    /// Markdown (`.md`, `.markdown`).
    Markdown,
    /// HTML (`.html`, `.htm`, `.xhtml`), read as its text.
    Html,
    /// PDF (`.pdf`), read as the text of its pages.
    Pdf,
}

impl Format {
    /// The format of `path`, or an error that names the path and the formats weft reads.
    pub fn of(path: &Path) -> Result<Self, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        match ext.as_str() {
            "txt" | "text" | "" => Ok(Self::Text),
            "md" | "markdown" => Ok(Self::Markdown),
            "html" | "htm" | "xhtml" => Ok(Self::Html),
            "pdf" => Ok(Self::Pdf),
            other => Err(format!(
                "{}: weft cannot read `.{other}` documents yet; give a text (.txt), Markdown (.md), HTML (.html, .htm) or PDF (.pdf) file",
                path.display()
            )),
        }
    }
}

/// A chunk of a document: its text and where it starts: the line (from 1) of a text, Markdown
/// or HTML file, the page (from 1) of a PDF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Where the chunk starts: a line (from 1) of a text, Markdown or HTML file, a page (from 1)
    /// of a PDF.
    pub line: usize,
    /// The chunk's text, at most [`CHUNK_BYTES`] long.
    pub text: String,
}

/// Reads the document at `path` in the format its extension names and cuts it into chunks.
/// Every failure names the file and says what to do; a document without text gives no chunks.
/// A text, Markdown or HTML file is read up to [`weft_core::limits::MAX_FILE_BYTES`], a PDF up
/// to [`MAX_PDF_BYTES`].
pub fn read(path: &Path) -> Result<Vec<Chunk>, String> {
    let format = Format::of(path)?;
    let text = || {
        std::fs::File::open(path)
            .and_then(weft_core::limits::read_text)
            .map_err(|e| format!("cannot read document {}: {e}", path.display()))
    };
    match format {
        Format::Text | Format::Markdown => Ok(chunks(&text()?)),
        Format::Html => Ok(pack(html::blocks(&text()?))),
        Format::Pdf => {
            let pages = pdf::pages(path).map_err(|e| format!("{}: {e}", path.display()))?;
            // A chunk never spans two pages: each page is packed on its own.
            Ok(pages
                .iter()
                .enumerate()
                .flat_map(|(i, page)| pack(paragraphs(page).into_iter().map(|(_, p)| (i + 1, p))))
                .collect())
        }
    }
}

/// Cuts `text` into chunks of whole paragraphs (split at blank lines) of at most
/// [`CHUNK_BYTES`]; a longer paragraph is cut at spaces (or anywhere, if it has none). A chunk
/// cites the line its first paragraph starts on.
pub fn chunks(text: &str) -> Vec<Chunk> {
    pack(paragraphs(text))
}

/// The paragraphs of `text` (split at blank lines), each with the line (from 1) it starts on.
fn paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut paragraph = String::new();
    let mut start = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            if !paragraph.is_empty() {
                out.push((start, std::mem::take(&mut paragraph)));
            }
            continue;
        }
        if paragraph.is_empty() {
            start = i + 1;
        } else {
            paragraph.push('\n');
        }
        paragraph.push_str(line);
    }
    if !paragraph.is_empty() {
        out.push((start, paragraph));
    }
    out
}

/// Packs paragraphs, each with its position, into chunks of at most [`CHUNK_BYTES`]: whole
/// paragraphs while they fit, a longer one cut at spaces (or anywhere, if it has none). A chunk
/// cites the position of its first paragraph.
fn pack(paragraphs: impl IntoIterator<Item = (usize, String)>) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    let flush = |out: &mut Vec<Chunk>, current: &mut String, start: usize| {
        let t = current.trim();
        if !t.is_empty() {
            out.push(Chunk {
                line: start,
                text: t.to_owned(),
            });
        }
        current.clear();
    };
    for (at, p) in paragraphs {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        if !current.is_empty() && current.len() + 2 + p.len() > CHUNK_BYTES {
            flush(&mut out, &mut current, start);
        }
        if current.is_empty() {
            start = at;
        } else {
            current.push_str("\n\n");
        }
        if p.len() <= CHUNK_BYTES {
            current.push_str(p);
            continue;
        }
        // A paragraph longer than a chunk: cut it at spaces.
        let mut rest = p;
        while !rest.is_empty() {
            let mut end = rest
                .len()
                .min(CHUNK_BYTES.saturating_sub(current.len()).max(1));
            while !rest.is_char_boundary(end) {
                end += 1;
            }
            if end < rest.len()
                && let Some(space) = rest[..end].rfind(char::is_whitespace)
                && space > 0
            {
                end = space;
            }
            current.push_str(&rest[..end]);
            rest = rest[end..].trim_start();
            if !rest.is_empty() {
                flush(&mut out, &mut current, start);
                start = at;
            }
        }
    }
    flush(&mut out, &mut current, start);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_are_packed_and_cite_their_first_line() {
        let text = "# Refunds\n\nRefunds are paid\nwithin 14 days.\n\n\nShipping takes a week.\n";
        let c = chunks(text);
        assert_eq!(
            c,
            [Chunk {
                line: 1,
                text: "# Refunds\n\nRefunds are paid\nwithin 14 days.\n\nShipping takes a week."
                    .into()
            }]
        );
        let long = format!("intro\n\n{}\n\nlast words", "word ".repeat(400));
        let c = chunks(&long);
        assert!(c.len() >= 3, "{c:?}");
        assert!(c.iter().all(|c| c.text.len() <= CHUNK_BYTES));
        // A chunk cites the line it starts on: the pieces of the long paragraph cite its line.
        assert_eq!(c[0].line, 1);
        assert!(c[1..].iter().all(|c| c.line == 3), "{c:?}");
        assert!(c.last().is_some_and(|c| c.text.ends_with("last words")));
        // Every word is kept.
        let words: usize = c.iter().map(|c| c.text.split_whitespace().count()).sum();
        assert_eq!(words, 403);
        // Multi-byte text without spaces is cut on character boundaries.
        let c = chunks(&"é".repeat(1000));
        assert!(c.iter().all(|c| c.text.len() <= CHUNK_BYTES + 4));
        assert_eq!(
            c.iter().map(|c| c.text.chars().count()).sum::<usize>(),
            1000
        );
    }

    #[test]
    fn unknown_formats_are_refused_by_name() {
        let e = Format::of(Path::new("a/report.docx")).unwrap_err();
        assert!(e.contains("a/report.docx") && e.contains(".docx"), "{e}");
        assert_eq!(Format::of(Path::new("x.MD")), Ok(Format::Markdown));
    }
}
