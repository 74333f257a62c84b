//! Route B line search (contract §3.6): the file is decoded as UTF-8 with invalid bytes dropped, then
//! split with universal newlines (LF, CRLF and CR each end a line), the way Python iterates a text
//! file. A line is searched with its ending as one LF, so a pattern ending in LF matches at a line
//! end; the reported text has no ending. NUL is ordinary text.

use std::fs::File;
use std::io::{ErrorKind, Read as _};

use memchr::memchr2;
use memchr::memmem::Finder;

use agentd_protocol::fs::GrepMatch;

use super::Account;
use crate::cancel::Cancel;

/// Bytes read per call.
const CHUNK: usize = 256 * 1024;

/// What a line (its text plus `\n` when it had an ending) must contain.
pub(super) enum LineMatcher {
    Every,
    /// The pattern has an LF before its end: no line holds one there.
    Never,
    Contains(Box<Finder<'static>>),
    /// The pattern is `text` + LF: the line has an ending and its text ends with `text`.
    EndsWith(String),
}

impl LineMatcher {
    pub(super) fn new(pattern: &str) -> Self {
        match pattern.split_once('\n') {
            _ if pattern.is_empty() => LineMatcher::Every,
            None => LineMatcher::Contains(Box::new(Finder::new(pattern.as_bytes()).into_owned())),
            Some((head, "")) => LineMatcher::EndsWith(head.to_owned()),
            Some(_) => LineMatcher::Never,
        }
    }

    fn matches(&self, text: &str, ended: bool) -> bool {
        match self {
            LineMatcher::Every => true,
            LineMatcher::Never => false,
            LineMatcher::Contains(finder) => finder.find(text.as_bytes()).is_some(),
            LineMatcher::EndsWith(head) => ended && text.ends_with(head.as_str()),
        }
    }

    /// Whether a line holds the pattern, seen before its end.
    fn matches_so_far(&self, text: &str) -> bool {
        match self {
            LineMatcher::Every => true,
            LineMatcher::Never | LineMatcher::EndsWith(_) => false,
            LineMatcher::Contains(finder) => finder.find(text.as_bytes()).is_some(),
        }
    }

    /// Bytes of a long line's decoded text kept when the rest is dropped, so that a match across
    /// the cut (or a suffix at its end) is still seen.
    fn overlap(&self) -> usize {
        match self {
            LineMatcher::Every | LineMatcher::Never => 0,
            LineMatcher::Contains(finder) => finder.needle().len().saturating_sub(1),
            LineMatcher::EndsWith(head) => head.len(),
        }
    }

    /// Matching lines of `file` as (1-based number, text), each charged to `account`; the search
    /// stops once it refuses one. `None` when unreadable.
    pub(super) fn search_file(
        &self,
        file: File,
        account: &Account<'_>,
        cancel: &Cancel,
    ) -> Option<Vec<GrepMatch>> {
        let mut file = file;
        let mut raw: Vec<u8> = Vec::new();
        let mut text = String::new();
        let mut found = Vec::new();
        let mut lines = 0u64;
        // `text` starts with the tail of a line too long to hold: whether it matches is decided
        // when it ends, and it is never reported.
        let mut skipping = false;
        loop {
            if cancel.is_cancelled() {
                return None;
            }
            let read = loop {
                match (&mut file).take(CHUNK as u64).read_to_end(&mut raw) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return None,
                }
            };
            let eof = read < CHUNK;
            let kept = decode_into(&raw, eof, &mut text);
            raw.drain(..raw.len() - kept);
            let used = self.split_lines(&text, eof, &mut lines, &mut found, &mut skipping, account);
            text.drain(..used);
            if eof || account.spent() {
                return Some(found);
            }
            // `text` is now the start of an unfinished line. Held whole only while it could still
            // fit the reply (its JSON is at least as long as its text); past that, only whether it
            // matches is found out, keeping a bounded tail of it.
            if skipping || text.len() > account.text_room(lines + 1) {
                // A CR at the end may start a CRLF: it is the line's end, not its text, and stays.
                let seen = text.strip_suffix('\r').unwrap_or(&text).len();
                if self.matches_so_far(&text[..seen]) {
                    account.refuse();
                    return Some(found);
                }
                let mut cut = seen.saturating_sub(self.overlap());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.drain(..cut);
                skipping = true;
            }
        }
    }

    /// Visits the complete lines of `text` (all of them at end of file); returns the bytes used.
    /// Stops once `account` refuses a match.
    fn split_lines(
        &self,
        text: &str,
        eof: bool,
        lines: &mut u64,
        found: &mut Vec<GrepMatch>,
        skipping: &mut bool,
        account: &Account<'_>,
    ) -> usize {
        let bytes = text.as_bytes();
        let mut pos = 0;
        // `false` once the search must stop.
        let mut visit = |line: &str, ended: bool| {
            *lines += 1;
            if !self.matches(line, ended) {
                *skipping = false;
                return true;
            }
            if std::mem::take(skipping) {
                account.refuse();
                return false;
            }
            account.push(found, *lines, line.to_owned())
        };
        while let Some(i) = memchr2(b'\n', b'\r', &bytes[pos..]) {
            let at = pos + i;
            let width = match (bytes[at], bytes.get(at + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A CR at the end of what is decoded so far may be the first half of a CRLF.
                (b'\r', None) if !eof => break,
                _ => 1,
            };
            // LF and CR are ASCII, so these are char boundaries.
            if !visit(&text[pos..at], true) {
                return text.len();
            }
            pos = at + width;
        }
        if eof && pos < text.len() {
            visit(&text[pos..], false);
            pos = text.len();
        }
        pos
    }
}

/// Appends the valid UTF-8 of `raw` to `text`, dropping invalid bytes; returns how many trailing bytes
/// were kept back as a possibly incomplete sequence (none at end of file).
fn decode_into(raw: &[u8], eof: bool, text: &mut String) -> usize {
    let mut chunks = raw.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        text.push_str(chunk.valid());
        let invalid = chunk.invalid();
        let last = chunks.peek().is_none();
        if last
            && !eof
            && !invalid.is_empty()
            && std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none())
        {
            return invalid.len();
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::budget::Budget;

    /// Matches of `pattern` in a file holding `content` with `bytes` of budget, and whether it
    /// was spent.
    fn search_within(pattern: &str, content: &[u8], bytes: usize) -> (Vec<(u64, String)>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, content).unwrap();
        let budget = Budget::new(bytes);
        let found = LineMatcher::new(pattern)
            .search_file(File::open(&path).unwrap(), &Account::new(&budget, "f"), &Cancel::default())
            .unwrap();
        (found.into_iter().map(|m| (m.line, m.text)).collect(), budget.spent())
    }

    fn search(pattern: &str, content: &[u8]) -> Vec<(u64, String)> {
        let (found, spent) = search_within(pattern, content, usize::MAX);
        assert!(!spent);
        found
    }

    /// What one match adds to the reply: its JSON record and a comma.
    fn cost(line: u64, text: &str) -> usize {
        let record = GrepMatch { path: "f".into(), line, text: text.into() };
        serde_json::to_string(&record).unwrap().len() + 1
    }

    fn lines(found: &[(u64, &str)]) -> Vec<(u64, String)> {
        found.iter().map(|&(n, t)| (n, t.to_owned())).collect()
    }

    #[test]
    fn universal_newlines() {
        assert_eq!(search("needle", b"first\rneedle cr\rlast"), lines(&[(2, "needle cr")]));
        assert_eq!(search("other", b"needle crlf\r\nother\r\n"), lines(&[(2, "other")]));
        assert_eq!(search("", b"a\r\rb\n\nc"), lines(&[(1, "a"), (2, ""), (3, "b"), (4, ""), (5, "c")]));
        assert_eq!(search("x", b"x\ry\rz"), lines(&[(1, "x")]));
        assert_eq!(search("\r", b"a\rb\r\n"), lines(&[]));
    }

    #[test]
    fn pattern_ending_in_lf() {
        assert_eq!(search("b\n", b"abc\nxyz\nb\n"), lines(&[(3, "b")]));
        assert_eq!(search("b\n", b"abc\nxyz\nb"), lines(&[]));
        assert_eq!(search("\n", b"a\nb"), lines(&[(1, "a")]));
        assert_eq!(search("a\nb", b"a\nb\n"), lines(&[]));
    }

    #[test]
    fn invalid_bytes_are_dropped_and_nul_is_text() {
        assert_eq!(search("needle", b"ne\xffedle\n"), lines(&[(1, "needle")]));
        assert_eq!(search("", b"a\r\xff\nb"), lines(&[(1, "a"), (2, "b")]));
        assert_eq!(search("a", b"a\0b\n"), lines(&[(1, "a\0b")]));
        assert_eq!(search("\u{fffd}", b"\xef\xbf\xbd\n\xff\n"), lines(&[(1, "\u{fffd}")]));
        assert_eq!(search("é", b"caf\xc3\xa9 \xc3\n"), lines(&[(1, "café ")]));
    }

    #[test]
    fn chunk_boundaries() {
        // A CRLF and a multi-byte char straddling the read boundary.
        let mut content = vec![b'a'; CHUNK - 1];
        content.extend_from_slice(b"\r\nneedle \xc3");
        let pad = CHUNK * 2 - content.len() - 1;
        content.extend(std::iter::repeat_n(b'b', pad));
        content.extend_from_slice(b"\xc3\xa9\rend");
        let found = search("needle", &content);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, 2);
        assert!(found[0].1.starts_with("needle b") && found[0].1.ends_with("bé"));
        assert_eq!(search("end", &content), lines(&[(3, "end")]));
        // An incomplete sequence at end of file is dropped.
        assert_eq!(search("x", b"x\xe2\x82"), lines(&[(1, "x")]));
    }

    #[test]
    fn a_match_exactly_at_the_budget_fits_and_one_byte_less_truncates() {
        // Universal newlines, a dropped invalid byte, and escapes in the cost.
        let content = b"a\"b\\\xff\x01\r\nplain\rlast";
        let all = cost(1, "a\"b\\\u{1}") + cost(2, "plain") + cost(3, "last");
        let (found, spent) = search_within("", content, all);
        assert_eq!(found, lines(&[(1, "a\"b\\\u{1}"), (2, "plain"), (3, "last")]));
        assert!(!spent);
        let (found, spent) = search_within("", content, all - 1);
        assert_eq!(found, lines(&[(1, "a\"b\\\u{1}"), (2, "plain")]));
        assert!(spent);
    }

    #[test]
    fn a_line_longer_than_the_budget_is_decided_without_holding_it() {
        let budget = 100_000;
        let long = |middle: &[u8], shift: usize| {
            let mut content = b"needle first\r\n".to_vec();
            content.resize(2 * CHUNK + shift, b'x');
            content.extend_from_slice(middle);
            content.resize(6 * CHUNK, b'y');
            content
        };
        for shift in 0..8 {
            // Across a read boundary, with an invalid byte inside (dropped, so it still matches).
            let mut content = long(b"nee\xffdle", shift);
            content.extend_from_slice(b"\rneedle after\n");
            let (found, spent) = search_within("needle", &content, budget);
            assert_eq!(found, lines(&[(1, "needle first")]), "{shift}");
            assert!(spent, "{shift}");
        }
        // Not in it: the line is counted and the search goes on (a CR ending it at a read's end too).
        for end in [CHUNK * 6, CHUNK * 6 - 1, CHUNK * 6 + 1] {
            let mut content = long(b"needl", 0);
            content.resize(end, b'y');
            content.extend_from_slice(b"\r\nlast needle\n");
            let (found, spent) = search_within("needle", &content, budget);
            assert_eq!(found, lines(&[(1, "needle first"), (3, "last needle")]), "{end}");
            assert!(!spent);
            // A pattern ending in LF: only the long line's end decides.
            let (found, spent) = search_within("yy\n", &content, budget);
            assert_eq!(found, lines(&[]));
            assert!(spent, "the long line ends with yy: truncated");
            let (found, spent) = search_within("needle\n", &content, budget);
            assert_eq!(found, lines(&[(3, "last needle")]));
            assert!(!spent);
            let (found, spent) = search_within("", &content, budget);
            assert_eq!(found, lines(&[(1, "needle first")]));
            assert!(spent);
        }
    }
}
