//! Documents for search: a file's text (plain text and Markdown as they are) cut into chunks of
//! a few paragraphs, each with the line it starts on, so a search result can cite
//! `path:line`. The store keeps the chunks (`weft docs add`); the `search_documents` tool finds
//! them.

use std::path::Path;

/// The longest chunk, in bytes (about 200 tokens): long enough to hold an answer with its
/// context, short enough that a few fit in a prompt.
pub const CHUNK_BYTES: usize = 800;

/// What a document is, by its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Markdown,
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
            other => Err(format!(
                "{}: weft cannot read `.{other}` documents yet; give a text (.txt) or Markdown (.md) file",
                path.display()
            )),
        }
    }
}

/// A chunk of a document: its text and the line (from 1) it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub line: usize,
    pub text: String,
}

/// Cuts `text` into chunks of whole paragraphs (split at blank lines) of at most
/// [`CHUNK_BYTES`]; a longer paragraph is cut at spaces (or anywhere, if it has none).
pub fn chunks(text: &str) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    let mut paragraph = String::new();
    let mut para_start = 0;
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
    let add_paragraph =
        |out: &mut Vec<Chunk>, current: &mut String, start: &mut usize, p: &str, at: usize| {
            let p = p.trim();
            if p.is_empty() {
                return;
            }
            if !current.is_empty() && current.len() + 2 + p.len() > CHUNK_BYTES {
                flush(out, current, *start);
            }
            if current.is_empty() {
                *start = at;
            } else {
                current.push_str("\n\n");
            }
            if p.len() <= CHUNK_BYTES {
                current.push_str(p);
                return;
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
                    flush(out, current, *start);
                    *start = at;
                }
            }
        };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            add_paragraph(&mut out, &mut current, &mut start, &paragraph, para_start);
            paragraph.clear();
            continue;
        }
        if paragraph.is_empty() {
            para_start = i + 1;
        } else {
            paragraph.push('\n');
        }
        paragraph.push_str(line);
    }
    add_paragraph(&mut out, &mut current, &mut start, &paragraph, para_start);
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
