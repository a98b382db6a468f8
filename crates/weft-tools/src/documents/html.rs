//! The readable text of an HTML page, block by block, with the source line each block starts
//! on. html5ever's tokenizer (the one browsers' parsers are built on) reads the markup and
//! decodes character references; this module keeps the text a person reads: the contents of
//! `head`, `script`, `style`, `template` and the like are dropped, and every heading,
//! paragraph, list item and table row becomes a block of its own (a row's cells one per line),
//! so the paragraph chunker cuts between them. Spaces are collapsed as a browser shows them,
//! except inside `pre`.
//!
//! A tokenizer, not a tree: the text a person reads needs only the tags, and the sink itself
//! tells the tokenizer which elements hold raw text (`script`, `style`, `title`, ...), as a
//! browser's tree builder does. Misnested markup can then end a block early or late; it never
//! loses text outside the hidden elements. A chunk cites the *source* line its first block
//! starts on (the tokenizer reports lines), so a reader can open the file there, which a
//! heading or a paragraph number would not let them do.

use std::cell::RefCell;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

/// Elements whose contents are not read text: dropped with everything inside them.
const HIDDEN: &[&str] = &[
    "title", "script", "style", "template", "noscript", "iframe", "object", "svg", "math",
    "noembed", "noframes", "xmp", "select",
];

/// Elements a `<head>` holds; any other start tag (or text) ends a head whose end tag was left
/// out, as in a browser.
const IN_HEAD: &[&str] = &[
    "head", "title", "meta", "link", "style", "script", "base", "noscript", "template", "html",
];

/// Elements that start and end a block of their own.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "li",
    "dt",
    "dd",
    "ul",
    "ol",
    "dl",
    "table",
    "thead",
    "tbody",
    "tfoot",
    "tr",
    "caption",
    "blockquote",
    "pre",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "aside",
    "main",
    "figure",
    "figcaption",
    "address",
    "details",
    "summary",
    "form",
    "fieldset",
    "legend",
    "hr",
    "body",
    "html",
];

/// What the sink has gathered so far.
#[derive(Default)]
struct Text {
    /// Finished blocks: the line each starts on and its text.
    blocks: Vec<(usize, String)>,
    /// The block being read.
    current: String,
    /// The line `current` starts on.
    start: usize,
    /// How many hidden elements we are inside.
    hidden: usize,
    /// Inside `<head>` (all of it hidden).
    head: bool,
    /// How many `pre` elements we are inside.
    pre: usize,
    /// A space is owed before the next word (spaces are collapsed).
    space: bool,
}

impl Text {
    fn end_block(&mut self) {
        let t = self.current.trim();
        if !t.is_empty() {
            self.blocks.push((self.start, t.to_owned()));
        }
        self.current.clear();
        self.space = false;
    }

    fn end_line(&mut self) {
        let kept = self.current.trim_end().len();
        self.current.truncate(kept);
        if !self.current.is_empty() {
            self.current.push('\n');
        }
        self.space = false;
    }

    /// Text that the tokenizer gave at `line`, the line it had reached by the end of `s`.
    fn text(&mut self, s: &str, line: usize) {
        if self.hidden > 0 {
            return;
        }
        if self.head {
            if s.trim().is_empty() {
                return;
            }
            self.head = false;
        }
        let mut newlines_left = s.matches('\n').count();
        for c in s.chars() {
            // The line this character is on.
            let line = line.saturating_sub(newlines_left);
            if c == '\n' {
                newlines_left = newlines_left.saturating_sub(1);
            }
            if self.pre > 0 {
                if self.current.is_empty() {
                    if c.is_whitespace() {
                        continue;
                    }
                    self.start = line;
                }
                self.current.push(c);
                continue;
            }
            if c.is_whitespace() {
                self.space = true;
                continue;
            }
            if self.current.is_empty() {
                self.start = line;
            } else if self.space && !self.current.ends_with('\n') {
                self.current.push(' ');
            }
            self.space = false;
            self.current.push(c);
        }
    }

    fn tag(&mut self, tag: &Tag) -> TokenSinkResult<()> {
        let name: &str = &tag.name;
        let start = tag.kind == TagKind::StartTag;
        if self.hidden == 0 {
            if name == "head" {
                self.head = start;
            } else if start && !IN_HEAD.contains(&name) {
                self.head = false;
            }
        }
        if HIDDEN.contains(&name) {
            if start && !tag.self_closing {
                self.hidden += 1;
            } else if !start {
                self.hidden = self.hidden.saturating_sub(1);
            }
        }
        if self.hidden == 0 && !self.head {
            if BLOCKS.contains(&name) {
                self.end_block();
                if name == "pre" {
                    self.pre = if start {
                        self.pre + 1
                    } else {
                        self.pre.saturating_sub(1)
                    };
                }
            } else if matches!(name, "br" | "td" | "th") {
                self.end_line();
            }
        }
        // The tokenizer reads these elements' contents as text, not markup, once told so (the
        // tree builder's job in a browser).
        match (start && !tag.self_closing, name) {
            (true, "script") => TokenSinkResult::RawData(RawKind::ScriptData),
            (true, "style" | "xmp" | "iframe" | "noembed" | "noframes") => {
                TokenSinkResult::RawData(RawKind::Rawtext)
            }
            (true, "title" | "textarea") => TokenSinkResult::RawData(RawKind::Rcdata),
            (true, "plaintext") => TokenSinkResult::Plaintext,
            _ => TokenSinkResult::Continue,
        }
    }
}

struct Sink(RefCell<Text>);

impl TokenSink for Sink {
    type Handle = ();

    fn process_token(&self, token: Token, line_number: u64) -> TokenSinkResult<()> {
        let line = usize::try_from(line_number).unwrap_or(usize::MAX);
        let mut t = self.0.borrow_mut();
        match token {
            Token::CharacterTokens(s) => t.text(&s, line),
            Token::TagToken(tag) => return t.tag(&tag),
            Token::EOFToken => t.end_block(),
            Token::NullCharacterToken
            | Token::CommentToken(_)
            | Token::DoctypeToken(_)
            | Token::ParseError(_) => {}
        }
        TokenSinkResult::Continue
    }
}

/// The readable blocks of `html`, each with the source line (from 1) it starts on.
pub(super) fn blocks(html: &str) -> Vec<(usize, String)> {
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    let tokenizer = Tokenizer::new(Sink(RefCell::default()), TokenizerOpts::default());
    // The sink never asks the tokenizer to stop for a script, so one feed reads everything.
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    let mut text = tokenizer.sink.0.take();
    text.end_block();
    text.blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_text_block_by_block_with_source_lines() {
        let page = "<!DOCTYPE html>\n<html><head><title>Shop &amp; help</title>\n\
            <style>p { color: red }</style>\n\
            <script>if (a < b) { document.write('<p>hidden</p>') }</script></head>\n\
            <body>\n\
            <h1>Refunds &amp; returns</h1>\n\
            <p>Refunds are paid\n   within <b>14</b>&nbsp;days.</p>\n\
            <ul><li>Keep the receipt</li><li>Use the form</li></ul>\n\
            <table><tr><th>Plan</th><th>Price</th></tr>\n<tr><td>Basic</td><td>&euro;5</td></tr></table>\n\
            <pre>line one\n  line two</pre>\n\
            <noscript>Turn on scripts</noscript><!-- a comment -->\n\
            <p>Call us<br>any day</p>\n\
            </body></html>\n";
        let b = blocks(page);
        let texts: Vec<&str> = b.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            texts,
            [
                "Refunds & returns",
                "Refunds are paid within 14 days.",
                "Keep the receipt",
                "Use the form",
                "Plan\nPrice",
                "Basic\n€5",
                "line one\n  line two",
                "Call us\nany day",
            ]
        );
        let lines: Vec<usize> = b.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [6, 7, 9, 9, 10, 11, 12, 15]);
    }

    #[test]
    fn fragments_and_broken_markup_still_give_their_text() {
        assert_eq!(
            blocks("Just text, <i>no tags around it"),
            [(1, "Just text, no tags around it".to_owned())]
        );
        // A head left open ends at the body; an unclosed script hides the rest, as in a browser.
        assert_eq!(
            blocks("<head><title>t</title><body><p>seen</p><script>unseen"),
            [(1, "seen".to_owned())]
        );
        assert_eq!(
            blocks("<html><head><meta charset=utf-8><title>t</title><p>no end to the head"),
            [(1, "no end to the head".to_owned())]
        );
        assert_eq!(
            blocks("<head><link rel=x>\nBare text"),
            [(2, "Bare text".to_owned())]
        );
        assert!(blocks("<p>  </p><div>\n</div>").is_empty());
        assert!(blocks("").is_empty());
    }
}
