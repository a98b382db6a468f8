//! Server-sent events read from a stream that arrives in pieces: the pieces' bytes as text (a
//! UTF-8 character split between two pieces kept whole, [`Utf8Decoder`]) and the text split into
//! events ([`SseParser`]). The providers' streamed replies are read with them, and so is any
//! other client of weft's that follows an event stream (`weft-bench serve-load`).

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// Its `event:` field (none: the default, `message`).
    pub event: Option<String>,
    /// Its `data:` lines, joined with `\n`.
    pub data: String,
}

/// Splits a text stream into server-sent events. Lines end with CRLF, LF or CR, wherever the
/// pieces are cut; a blank line ends an event; comments are skipped.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: String,
    /// The last piece ended with a CR, already taken as a line end: a LF that starts the next
    /// piece is the rest of that CRLF, not a second line end (found by fuzzing: a stream cut
    /// between CR and LF ended its event early).
    cr: bool,
    /// Bytes fed with [`SseParser::feed_bytes`].
    bytes: Utf8Decoder,
}

impl SseParser {
    /// Feeds text; returns the events it completes.
    pub fn feed(&mut self, text: &str) -> Vec<SseEvent> {
        if text.is_empty() {
            return Vec::new();
        }
        let text = if std::mem::take(&mut self.cr) {
            text.strip_prefix('\n').unwrap_or(text)
        } else {
            text
        };
        self.cr = text.ends_with('\r');
        self.buf
            .push_str(&text.replace("\r\n", "\n").replace('\r', "\n"));
        let mut out = Vec::new();
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            if let Some(ev) = parse_block(&block) {
                out.push(ev);
            }
        }
        out
    }

    /// Feeds bytes as they came off the connection; returns the events they complete.
    pub fn feed_bytes(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let text = self.bytes.decode(bytes);
        self.feed(&text)
    }

    /// The last event, when the stream ended without a blank line after it.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let block = std::mem::take(&mut self.buf);
        parse_block(&block)
    }
}

fn parse_block(block: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut data: Option<String> = None;
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    data.map(|data| SseEvent { event, data })
}

/// Bytes that arrive in pieces, as text: a character cut between two pieces waits for the rest
/// of it; bytes that are not UTF-8 become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    /// Bytes of an incomplete UTF-8 character.
    pending: Vec<u8>,
}

impl Utf8Decoder {
    /// The text of `bytes` after what came before.
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let buf = std::mem::take(&mut self.pending);
        match std::str::from_utf8(&buf) {
            Ok(s) => s.to_owned(),
            Err(e) if e.error_len().is_none() => {
                let (good, rest) = buf.split_at(e.valid_up_to());
                self.pending = rest.to_vec();
                String::from_utf8_lossy(good).into_owned()
            }
            Err(_) => String::from_utf8_lossy(&buf).into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sse_events_split_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.feed("event: a\ndata: {\"x\"").is_empty());
        let evs = p.feed(":1}\r\n\r\ndata: two\ndata: lines\n\ndata: [DONE]");
        assert_eq!(
            evs,
            vec![
                SseEvent {
                    event: Some("a".into()),
                    data: "{\"x\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "two\nlines".into()
                }
            ]
        );
        assert_eq!(p.finish().unwrap().data, "[DONE]");
    }

    #[test]
    fn a_crlf_cut_between_its_cr_and_its_lf_is_one_line_end() {
        let mut p = SseParser::default();
        assert!(p.feed("data: a\r").is_empty());
        assert!(
            p.feed("\n").is_empty(),
            "CR then LF is one line end, not a blank line"
        );
        assert!(p.feed("data: b\r").is_empty());
        let evs = p.feed("\n\r\n");
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, "a\nb");
        // A lone CR still ends a line.
        assert_eq!(p.feed("data: c\r\r")[0].data, "c");
    }

    #[test]
    fn a_character_cut_between_two_pieces_of_bytes_is_kept_whole() {
        let mut p = SseParser::default();
        let bytes = "data: café ✓\n\n".as_bytes();
        // `é` is two bytes and `✓` three: cut inside each.
        let cut = [0, 9, 10, 12, 13, bytes.len()];
        let evs: Vec<SseEvent> = cut
            .windows(2)
            .flat_map(|w| p.feed_bytes(&bytes[w[0]..w[1]]))
            .collect();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, "café ✓");
        let mut d = Utf8Decoder::default();
        assert_eq!(d.decode(b"a\xff b"), "a\u{fffd} b");
    }
}
