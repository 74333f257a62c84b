//! Route A line search (contract §3.6): a file is bytes split at LF only, the pattern is one or more
//! LF-separated literals found with `memchr::memmem`, and a file holding NUL is skipped whole.

use std::cell::RefCell;
use std::fs::File;
use std::io::{ErrorKind, Read as _};

use memchr::memmem::Finder;
use memchr::{memchr, memchr_iter, memrchr};

use agentd_protocol::fs::GrepMatch;

use super::Account;
use crate::cancel::Cancel;

/// Bytes read per call; a line longer than this grows the buffer while it could still fit the reply.
const CHUNK: usize = 256 * 1024;

/// What a line must contain.
pub(super) enum LineMatcher {
    /// An empty part (or an empty pattern) is in every line.
    Every,
    Any(Vec<Finder<'static>>),
}

/// How a line too long to hold ended.
enum Skipped {
    /// It holds the pattern: the reply cannot show it, so the grep is truncated.
    Matched,
    /// It ended without a match; `rest` bytes after its LF are at the start of the buffer.
    Ended { rest: usize },
}

impl LineMatcher {
    pub(super) fn new(pattern: &str) -> Self {
        let parts: Vec<&str> = pattern.split('\n').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return LineMatcher::Every;
        }
        LineMatcher::Any(parts.into_iter().map(|p| Finder::new(p.as_bytes()).into_owned()).collect())
    }

    /// Matching lines of `file` as (1-based number, text without LF, decoded lossily), each charged
    /// to `account`; the search stops once it refuses one. `None` when it cannot be read or holds a
    /// NUL byte.
    pub(super) fn search_file(
        &self,
        file: File,
        account: &Account<'_>,
        cancel: &Cancel,
    ) -> Option<Vec<GrepMatch>> {
        // One buffer per walker thread, reused for every file: a small file costs an open, one
        // read that fills it and one that sees the end (reading into a fresh growing Vec took ~11).
        thread_local! {
            static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            let found = self.search_with(file, &mut buffer, account, cancel);
            // A long line grew it: give that back rather than keep it for the thread's life.
            if buffer.len() > CHUNK {
                buffer.truncate(CHUNK);
                buffer.shrink_to_fit();
            }
            found
        })
    }

    fn search_with(
        &self,
        mut file: File,
        buf: &mut Vec<u8>,
        account: &Account<'_>,
        cancel: &Cancel,
    ) -> Option<Vec<GrepMatch>> {
        if buf.len() < CHUNK {
            buf.resize(CHUNK, 0);
        }
        let mut found = Vec::new();
        let mut lines = 0u64;
        // `buf[..filled]` holds bytes read but not yet scanned; it always starts a line.
        let mut filled = 0;
        loop {
            if cancel.is_cancelled() {
                return None;
            }
            if account.spent() {
                return Some(found);
            }
            if filled == buf.len() {
                // One line fills the buffer. It is held whole only while it could still fit the
                // reply (its JSON is at least as long as its bytes); past that, only whether it
                // matches is found out, with memory that does not grow with it.
                let room = account.text_room(lines + 1);
                if filled < room {
                    buf.resize((filled * 2).min(room + 1), 0);
                } else {
                    match self.skip_long_line(&mut file, buf, filled, cancel)? {
                        Skipped::Matched => {
                            account.refuse();
                            // Still a binary file (and so no match at all) if a NUL follows.
                            return no_nul(&mut file, buf, cancel).then_some(found);
                        }
                        Skipped::Ended { rest } => {
                            lines += 1;
                            filled = rest;
                            continue;
                        }
                    }
                }
            }
            let read = read_some(&mut file, &mut buf[filled..])?;
            if read == 0 {
                // End of file: the rest is the last line, with or without its LF.
                self.scan(&buf[..filled], lines, &mut found, account);
                return Some(found);
            }
            if memchr(0, &buf[filled..filled + read]).is_some() {
                return None;
            }
            filled += read;
            if filled == buf.len()
                && let Some(last) = memrchr(b'\n', &buf[..filled])
            {
                let end = last + 1;
                lines = self.scan(&buf[..end], lines, &mut found, account);
                buf.copy_within(end..filled, 0);
                filled -= end;
            }
        }
    }

    /// Reads on to the end of the line that starts with `buf[..filled]` (no LF there) without
    /// holding it: each part is looked for in what was read, keeping the last `part - 1` bytes so
    /// an occurrence across two reads is found. `None` when unreadable or a NUL is met.
    fn skip_long_line(
        &self,
        file: &mut File,
        buf: &mut Vec<u8>,
        mut filled: usize,
        cancel: &Cancel,
    ) -> Option<Skipped> {
        let finders = match self {
            LineMatcher::Every => return Some(Skipped::Matched),
            LineMatcher::Any(finders) => finders,
        };
        let overlap = finders.iter().map(|f| f.needle().len()).max().unwrap_or(1).saturating_sub(1);
        if buf.len() < overlap + CHUNK {
            buf.resize(overlap + CHUNK, 0);
        }
        let matches = |hay: &[u8]| finders.iter().any(|f| f.find(hay).is_some());
        loop {
            if matches(&buf[..filled]) {
                return Some(Skipped::Matched);
            }
            let tail = overlap.min(filled);
            buf.copy_within(filled - tail..filled, 0);
            filled = tail;
            if cancel.is_cancelled() {
                return None;
            }
            let read = read_some(file, &mut buf[filled..])?;
            if read == 0 {
                // The file ended inside the line, so the line ended without a match.
                return Some(Skipped::Ended { rest: 0 });
            }
            if memchr(0, &buf[filled..filled + read]).is_some() {
                return None;
            }
            if let Some(i) = memchr(b'\n', &buf[filled..filled + read]) {
                let end = filled + i;
                if matches(&buf[..end]) {
                    return Some(Skipped::Matched);
                }
                let total = filled + read;
                buf.copy_within(end + 1..total, 0);
                return Some(Skipped::Ended { rest: total - end - 1 });
            }
            filled += read;
        }
    }

    /// Matches in `hay`, which starts a line; returns `lines` plus the LFs in `hay`.
    /// Stops early once `account` refuses a match.
    fn scan(&self, hay: &[u8], mut lines: u64, found: &mut Vec<GrepMatch>, account: &Account<'_>) -> u64 {
        let text = |line: &[u8]| String::from_utf8_lossy(line).into_owned();
        let finders = match self {
            LineMatcher::Every => {
                let mut start = 0;
                for end in memchr_iter(b'\n', hay) {
                    lines += 1;
                    if !account.push(found, lines, text(&hay[start..end])) {
                        return lines;
                    }
                    start = end + 1;
                }
                if start < hay.len() {
                    account.push(found, lines + 1, text(&hay[start..]));
                }
                return lines;
            }
            LineMatcher::Any(finders) => finders,
        };
        // Next occurrence of each part at or after `pos` (usize::MAX: none left); recomputed only once
        // `pos` passes it, so each part's search moves forward through `hay` once.
        let mut next = vec![0usize; finders.len()];
        let mut stale = vec![true; finders.len()];
        let mut pos = 0;
        let mut counted = 0;
        while pos < hay.len() {
            for (i, finder) in finders.iter().enumerate() {
                if stale[i] || (next[i] != usize::MAX && next[i] < pos) {
                    next[i] = finder.find(&hay[pos..]).map_or(usize::MAX, |at| pos + at);
                    stale[i] = false;
                }
            }
            let hit = next.iter().copied().min().unwrap_or(usize::MAX);
            if hit == usize::MAX {
                break;
            }
            let start = memrchr(b'\n', &hay[pos..hit]).map_or(pos, |i| pos + i + 1);
            let end = memchr(b'\n', &hay[hit..]).map_or(hay.len(), |i| hit + i);
            lines += memchr_iter(b'\n', &hay[counted..start]).count() as u64;
            counted = start;
            if !account.push(found, lines + 1, text(&hay[start..end])) {
                return lines;
            }
            pos = end + 1;
        }
        lines + memchr_iter(b'\n', &hay[counted..]).count() as u64
    }
}

/// One `read`, retried when interrupted; `None` on an error.
fn read_some(file: &mut File, buf: &mut [u8]) -> Option<usize> {
    loop {
        match file.read(buf) {
            Ok(n) => return Some(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
}

/// Reads the rest of `file`: whether it holds no NUL (and could be read).
fn no_nul(file: &mut File, buf: &mut [u8], cancel: &Cancel) -> bool {
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        match read_some(file, buf) {
            Some(0) => return true,
            Some(n) if memchr(0, &buf[..n]).is_none() => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::budget::Budget;

    /// Matches of `pattern` in a file holding `content` with `bytes` of budget, whether it was
    /// spent, and the capacity the search's buffer ended with.
    fn search_within(
        pattern: &str,
        content: &[u8],
        bytes: usize,
    ) -> (Option<Vec<(u64, String)>>, bool, usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, content).unwrap();
        let budget = Budget::new(bytes);
        let mut buf = Vec::new();
        let found = LineMatcher::new(pattern).search_with(
            File::open(&path).unwrap(),
            &mut buf,
            &Account::new(&budget, "f"),
            &Cancel::default(),
        );
        let found = found.map(|found| found.into_iter().map(|m| (m.line, m.text)).collect());
        (found, budget.spent(), buf.capacity())
    }

    fn search(pattern: &str, content: &[u8]) -> Option<Vec<(u64, String)>> {
        let (found, spent, _) = search_within(pattern, content, usize::MAX);
        assert!(!spent);
        found
    }

    /// What one match adds to the reply: its JSON record and a comma.
    fn cost(line: u64, text: &str) -> usize {
        let record = GrepMatch { path: "f".into(), line, text: text.into() };
        serde_json::to_string(&record).unwrap().len() + 1
    }

    fn lines(found: &[(u64, &str)]) -> Option<Vec<(u64, String)>> {
        Some(found.iter().map(|&(n, t)| (n, t.to_owned())).collect())
    }

    #[test]
    fn lf_only_lines() {
        assert_eq!(search("needle", b"needle crlf\r\nother\r\n"), lines(&[(1, "needle crlf\r")]));
        assert_eq!(search("needle", b"first\rneedle cr\rlast"), lines(&[(1, "first\rneedle cr\rlast")]));
        assert_eq!(search("o", b"one\nno\ntwo"), lines(&[(1, "one"), (2, "no"), (3, "two")]));
        assert_eq!(search("x", b""), lines(&[]));
    }

    #[test]
    fn parts_and_empty_patterns() {
        assert_eq!(search("b\n", b"abc\nxyz\nb\n"), lines(&[(1, "abc"), (2, "xyz"), (3, "b")]));
        assert_eq!(search("", b"a\n\nb"), lines(&[(1, "a"), (2, ""), (3, "b")]));
        assert_eq!(search("", b""), lines(&[]));
        assert_eq!(search("zz\nb", b"abc\nxyz\nb\nzzz"), lines(&[(1, "abc"), (3, "b"), (4, "zzz")]));
        assert_eq!(search("c\na", b"abc\nxyz\nb\n"), lines(&[(1, "abc")]));
    }

    #[test]
    fn binary_and_invalid_utf8() {
        assert_eq!(search("a", b"a\nb\0"), None);
        assert_eq!(search("a", b"a\xff\n"), lines(&[(1, "a\u{fffd}")]));
    }

    #[test]
    fn long_files_cross_chunks() {
        let mut content = Vec::new();
        let mut expected = Vec::new();
        for i in 1..=100_000u64 {
            let line = if i % 997 == 0 { format!("line {i} needle") } else { format!("line {i} hay") };
            content.extend_from_slice(line.as_bytes());
            content.push(b'\n');
            if i % 997 == 0 {
                expected.push((i, line));
            }
        }
        // A line longer than a chunk, and a last line without LF.
        content.extend(std::iter::repeat_n(b'y', CHUNK * 2 + 7));
        content.extend_from_slice(b"needle\nlast needle");
        expected.push((100_001, format!("{}needle", "y".repeat(CHUNK * 2 + 7))));
        expected.push((100_002, "last needle".to_owned()));
        assert_eq!(search("needle", &content), Some(expected));
        let every = search("", &content).unwrap();
        assert_eq!(every.len(), 100_002);
        assert_eq!(every[99_999], (100_000, "line 100000 hay".to_owned()));
        // NUL far past the first chunk still marks the file binary.
        content.extend_from_slice(b"\n\0");
        assert_eq!(search("needle", &content), None);
    }

    #[test]
    fn a_match_exactly_at_the_budget_fits_and_one_byte_less_truncates() {
        let content = b"a\"b\\c\t\x01\nplain\nlast";
        let all = cost(1, "a\"b\\c\t\u{1}") + cost(2, "plain") + cost(3, "last");
        let (found, spent, _) = search_within("", content, all);
        assert_eq!(found, lines(&[(1, "a\"b\\c\t\u{1}"), (2, "plain"), (3, "last")]));
        assert!(!spent);
        let (found, spent, _) = search_within("", content, all - 1);
        assert_eq!(found, lines(&[(1, "a\"b\\c\t\u{1}"), (2, "plain")]));
        assert!(spent);
        // A refused match ends the search: a later, smaller one does not slip in.
        let first_two = cost(1, "a\"b\\c\t\u{1}") + cost(2, "plain");
        let (found, spent, _) = search_within("", b"a\"b\\c\t\x01\nplain, longer\nz", first_two);
        assert_eq!(found, lines(&[(1, "a\"b\\c\t\u{1}")]));
        assert!(spent);
    }

    #[test]
    fn a_line_longer_than_the_budget_is_never_held_whole() {
        let budget = 100_000;
        for part in ["needle", "zz\nneedle", "needle\nzz"] {
            // "needle" straddles a read boundary for some shifts (the reads after the first line
            // start at CHUNK + 13).
            for shift in 0..24 {
                let mut content = b"needle first\n".to_vec();
                content.resize(2 * CHUNK + shift, b'x');
                content.extend_from_slice(b"needle");
                content.resize(4 * CHUNK, b'y');
                content.extend_from_slice(b"\nneedle after\n");
                let (found, spent, capacity) = search_within(part, &content, budget);
                assert_eq!(found, lines(&[(1, "needle first")]), "{part:?} {shift}");
                assert!(spent, "the long line matches: truncated ({part:?} {shift})");
                assert!(capacity <= 2 * CHUNK, "buffer of {capacity} bytes");
            }
        }
        // A long line without the pattern is passed over and counted; the search goes on.
        let mut content = b"needle first\n".to_vec();
        content.resize(6 * CHUNK, b'x');
        content.extend_from_slice(b"eedl\nlast needle\n");
        for part in ["needle", "zz\nneedle"] {
            let (found, spent, capacity) = search_within(part, &content, budget);
            assert_eq!(found, lines(&[(1, "needle first"), (3, "last needle")]), "{part:?}");
            assert!(!spent);
            assert!(capacity <= 2 * CHUNK, "buffer of {capacity} bytes");
        }
        // An empty part matches the long line at once; a NUL after it still makes the file binary.
        let (found, spent, _) = search_within("", &content, budget);
        assert!(spent);
        assert_eq!(found.unwrap()[0], (1, "needle first".to_owned()));
        content.push(0);
        assert_eq!(search_within("needle", &content, budget).0, None);
        // With the budget to hold it, the same line is reported whole.
        let (found, spent, _) = search_within("eedl\n", &content[..content.len() - 1], usize::MAX);
        assert!(!spent);
        assert_eq!(found.unwrap().len(), 3);
    }
}
