//! Route A line search (contract §3.6): a file is bytes split at LF only, the pattern is one or more
//! LF-separated literals found with `memchr::memmem`, and a file holding NUL is skipped whole.

use std::cell::RefCell;
use std::fs::File;
use std::io::{ErrorKind, Read as _};

use memchr::memmem::Finder;
use memchr::{memchr, memchr_iter, memrchr};

/// Bytes read per call; lines longer than this grow the buffer.
const CHUNK: usize = 256 * 1024;

/// What a line must contain.
pub(super) enum LineMatcher {
    /// An empty part (or an empty pattern) is in every line.
    Every,
    Any(Vec<Finder<'static>>),
}

impl LineMatcher {
    pub(super) fn new(pattern: &str) -> Self {
        let parts: Vec<&str> = pattern.split('\n').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return LineMatcher::Every;
        }
        LineMatcher::Any(parts.into_iter().map(|p| Finder::new(p.as_bytes()).into_owned()).collect())
    }

    /// Matching lines of `file` as (1-based number, text without LF, decoded lossily).
    /// `None` when it cannot be read or holds a NUL byte.
    pub(super) fn search_file(&self, file: File) -> Option<Vec<(u64, String)>> {
        // One buffer per walker thread, reused for every file: a small file costs an open, one
        // read that fills it and one that sees the end (reading into a fresh growing Vec took ~11).
        thread_local! {
            static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            self.search_with(file, &mut buffer)
        })
    }

    fn search_with(&self, mut file: File, buf: &mut Vec<u8>) -> Option<Vec<(u64, String)>> {
        if buf.len() < CHUNK {
            buf.resize(CHUNK, 0);
        }
        let mut found = Vec::new();
        let mut lines = 0u64;
        // `buf[..filled]` holds bytes read but not yet scanned; it always starts a line.
        let mut filled = 0;
        loop {
            if crate::registry::is_cancelled() {
                return None;
            }
            if filled == buf.len() {
                // One line longer than the buffer: grow it.
                let len = buf.len();
                buf.resize(len * 2, 0);
            }
            let read = loop {
                match file.read(&mut buf[filled..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return None,
                }
            };
            if read == 0 {
                // End of file: the rest is the last line, with or without its LF.
                self.scan(&buf[..filled], lines, &mut found);
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
                lines = self.scan(&buf[..end], lines, &mut found);
                buf.copy_within(end..filled, 0);
                filled -= end;
            }
        }
    }

    /// Matches in `hay`, which starts a line; returns `lines` plus the LFs in `hay`.
    fn scan(&self, hay: &[u8], mut lines: u64, found: &mut Vec<(u64, String)>) -> u64 {
        let text = |line: &[u8]| String::from_utf8_lossy(line).into_owned();
        let finders = match self {
            LineMatcher::Every => {
                let mut start = 0;
                for end in memchr_iter(b'\n', hay) {
                    lines += 1;
                    found.push((lines, text(&hay[start..end])));
                    start = end + 1;
                }
                if start < hay.len() {
                    found.push((lines + 1, text(&hay[start..])));
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
            found.push((lines + 1, text(&hay[start..end])));
            pos = end + 1;
        }
        lines + memchr_iter(b'\n', &hay[counted..]).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(pattern: &str, content: &[u8]) -> Option<Vec<(u64, String)>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, content).unwrap();
        LineMatcher::new(pattern).search_file(File::open(&path).unwrap())
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
}
