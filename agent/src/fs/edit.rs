//! `edit` (contract §3.4): exact, then CRLF-form, then LF-form matching of `old`; the same transform
//! applied to `new`; the file replaced atomically, as an upload replaces one (through links, mode and
//! owner kept, setuid and setgid dropped).
//!
//! The new content goes to a temp file in the directory where the resolution found the file (a link's
//! target's directory: the link stays a link) and is renamed over its name, so a kill at any moment
//! leaves the old content or the new, never a truncated file. A rename makes a new inode: other hard
//! links to the file keep the old content. Where that directory takes no new file (no write
//! permission on it) but the file itself is writable, the content is rewritten in place as the
//! contract's reference does (truncate and write, not atomic), so such an edit still succeeds.
//!
//! Memory does not grow with the file: two passes read it in [`CHUNK`] steps (see [`scan`]). The
//! first checks UTF-8 and counts each form of `old`; the second writes the new content and counts
//! again. Should its counts differ (the file changed in between), the edit fails (`file_changed`)
//! and the file is left to whoever changed it: retrying could chase a file rewritten without end.

use std::fs::File;
use std::io::{Seek as _, SeekFrom, Write};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use agentd_protocol::fs::EditResult;
use agentd_protocol::permission::Operation;
use memchr::memmem;
use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::errno;
use crate::cancel::Cancel;
use crate::guard;
use crate::root::{Node, ResolveError, Workspace};
use crate::transfer::{UploadTarget, spool};

pub fn edit(
    path: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    ws: &Workspace,
    cancel: &Cancel,
) -> EditResult {
    let fail = |error: String| EditResult { error: Some(error), ..EditResult::default() };
    if old.is_empty() {
        return fail("Error: old_string cannot be empty. Provide the exact text to replace.".to_owned());
    }
    let denied = || fail(format!("Error: Permission denied editing file '{path}'"));
    let other = |err: std::io::Error| fail(format!("Error editing file '{path}': {err}"));
    if path.contains('\0') {
        return fail(format!("Error editing file '{path}': invalid_path"));
    }
    // `stat("")` fails with ENOENT; joined to the workspace it would name the workspace itself.
    if path.is_empty() {
        return fail(format!("Error: File '{path}' not found"));
    }
    let node = match ws.node(path, true) {
        Ok(Some(node)) => node,
        Ok(None) => return fail(format!("Error: File '{path}' not found")),
        Err(ResolveError::Escape) => return fail(format!("Error editing file '{path}': invalid_path")),
        Err(err) if matches!(err.errno(), Some(Errno::EACCES | Errno::EPERM)) => return denied(),
        Err(_) => return fail(format!("Error: File '{path}' not found")),
    };
    let refusal = |operation| guard::refusal_of(ws, operation, path, &node);
    if let Some(refusal) = refusal(Operation::Write).or_else(|| refusal(Operation::Read)) {
        return fail(refusal);
    }
    if !node.is_file() {
        return fail(format!("Error: '{path}' is not a regular file"));
    }
    // One fd for the read and the write: read-write when allowed, else read-only, keeping why (a file
    // that cannot be written still gets its content checked first, as the contract orders).
    let denied_errno = |err: &std::io::Error| matches!(errno(err), Some(Errno::EACCES | Errno::EPERM));
    let opened = match node.open(OFlag::O_RDWR) {
        Ok(file) => Ok((file, None)),
        Err(err) if denied_errno(&err) || matches!(errno(&err), Some(Errno::EROFS | Errno::ETXTBSY)) => {
            node.open(OFlag::O_RDONLY).map(|file| (file, Some(err)))
        }
        Err(err) => Err(err),
    };
    let (file, unwritable) = match opened {
        Ok(opened) => opened,
        Err(err) if denied_errno(&err) => return denied(),
        Err(err) => return other(err),
    };
    let crlf = |s: &str| s.replace("\r\n", "\n").replace('\n', "\r\n");
    let lf = |s: &str| s.replace("\r\n", "\n");
    let candidates = [(old.to_owned(), new.to_owned()), (crlf(old), crlf(new)), (lf(old), lf(new))];
    // The distinct forms of `old` (often all three are one), each counted once per pass.
    let mut patterns: Vec<&[u8]> = Vec::new();
    let forms = candidates.each_ref().map(|(form, _)| {
        patterns.iter().position(|p| *p == form.as_bytes()).unwrap_or_else(|| {
            patterns.push(form.as_bytes());
            patterns.len() - 1
        })
    });
    let failed = |failure: Failure| match failure {
        Failure::Io(err) if denied_errno(&err) => denied(),
        Failure::Io(err) => other(err),
        Failure::Cancelled => fail(CANCELLED.to_owned()),
        Failure::Changed => fail(format!("Error editing file '{path}': file_changed")),
    };
    let found = match scan(&file, &patterns, None, cancel) {
        Ok(found) => found,
        Err(failure) => return failed(failure),
    };
    if !found.text {
        return fail(format!("Error: File '{path}' is not a text file"));
    }
    let Some((count, form, new_form)) = forms
        .iter()
        .zip(&candidates)
        .map(|(&form, (_, new_form))| (found.counts[form], form, new_form))
        .find(|(count, ..)| *count >= 1)
    else {
        return fail(format!("Error: String not found in file: '{old}'"));
    };
    if count > 1 && !replace_all {
        return fail(format!(
            "Error: String '{old}' appears multiple times. Use replace_all=True to replace all occurrences."
        ));
    }
    if let Some(err) = unwritable {
        return failed(Failure::Io(err));
    }
    // The second pass writes the new content while it checks that it finds what the first found: a
    // file changed in between could otherwise get an edit the contract would refuse.
    let written = replace(&node, &file, ws, |out| {
        let replace = Replace { pattern: form, new: new_form.as_bytes(), all: replace_all, out };
        if scan(&file, &patterns, Some(replace), cancel)? == found { Ok(()) } else { Err(Failure::Changed) }
    });
    match written {
        Ok(()) => EditResult {
            error: None,
            path: Some(path.to_owned()),
            occurrences: Some(if replace_all { count } else { 1 }),
        },
        Err(failure) => failed(failure),
    }
}

/// The `error` of an edit cancelled before it replaced the file (as the read-only verbs answer).
const CANCELLED: &str = "cancelled";

/// Bytes read per step: what a pass holds of the file besides the overlap its patterns need.
const CHUNK: usize = 256 * 1024;

/// Why an edit stopped after the file was opened.
#[derive(Debug)]
enum Failure {
    Io(std::io::Error),
    Cancelled,
    /// The second pass found other counts than the first, or no UTF-8: the file changed meanwhile.
    Changed,
}

impl From<std::io::Error> for Failure {
    fn from(err: std::io::Error) -> Self {
        Self::Io(err)
    }
}

/// Writes the new content (through `write`) into a replacement of the file `node`, opened read-write
/// as `file`, and renames it over the file: see the module doc. Where the directory takes no new
/// file, the content goes to a [`spool`] first and is then copied over the file (truncate and write,
/// the contract's in-place rewrite), so that memory does not grow with the file either.
fn replace(
    node: &Node,
    file: &File,
    ws: &Workspace,
    write: impl FnOnce(&mut dyn Write) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let (dir, name) = node.parent();
    let real_dir = ws.real_path(node.location().parent().unwrap_or(Path::new("")));
    match UploadTarget::create(dir, name, &real_dir, Some(node.stat()), None).map(UploadTarget::unsynced) {
        Ok(mut target) => match write(&mut Target(&mut target)) {
            Ok(()) => Ok(target.commit_io()?),
            Err(err) => {
                target.remove();
                Err(err)
            }
        },
        Err(err) if matches!(errno(&err), Some(Errno::EACCES | Errno::EPERM)) => {
            let mut spool = spool()?;
            write(&mut spool)?;
            spool.seek(SeekFrom::Start(0))?;
            // From here on the file is being rewritten: finished even if cancelled meanwhile.
            file.set_len(0)?;
            let mut file = file;
            file.seek(SeekFrom::Start(0))?;
            std::io::copy(&mut spool, &mut file)?;
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}

/// A replacement as a `Write`.
struct Target<'a>(&'a mut UploadTarget);

impl Write for Target<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes).map(|()| bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a pass over the file found: whether it is UTF-8 (a pass stops at the first invalid byte),
/// and how often each pattern occurs in it.
#[derive(Debug, PartialEq, Eq)]
struct Found {
    text: bool,
    counts: Vec<u64>,
}

/// The second pass's work: the content with `patterns[pattern]` replaced by `new` (the first
/// occurrence, or `all`), written to `out`.
struct Replace<'a> {
    pattern: usize,
    new: &'a [u8],
    all: bool,
    out: &'a mut dyn Write,
}

/// One pass over `file` from its start, [`CHUNK`] bytes a step, holding besides a step only the
/// longest pattern's length minus one (an occurrence may straddle two steps): checks UTF-8, counts
/// each pattern's occurrences as `str::matches` does (leftmost first, non-overlapping), and writes
/// the replaced content when asked to. Polls cancellation at each step.
fn scan(
    file: &File,
    patterns: &[&[u8]],
    replace: Option<Replace<'_>>,
    cancel: &Cancel,
) -> Result<Found, Failure> {
    // Each step reads at least the overlap it keeps, so moving the overlap costs at most the read.
    let keep = patterns.iter().map(|p| p.len()).max().unwrap_or(1).saturating_sub(1);
    let mut buf = vec![0u8; keep + CHUNK.max(keep)];
    let mut counters: Vec<Counter<'_>> = patterns.iter().map(|p| Counter::new(p)).collect();
    let mut utf8 = Utf8::default();
    // The replacement, its output buffered, and `emitted`: the file's bytes before it are written out
    // (replaced where they matched).
    let mut writing = replace.map(|Replace { pattern, new, all, out }| {
        (pattern, new, all, std::io::BufWriter::with_capacity(CHUNK, out), 0u64)
    });
    // `buf[..filled]` is the file's bytes from offset `start`.
    let (mut start, mut filled) = (0u64, 0usize);
    loop {
        if cancel.is_cancelled() {
            return Err(Failure::Cancelled);
        }
        let read = read_at_most(file, &mut buf[filled..], start + filled as u64)?;
        let fresh = filled..filled + read;
        filled += read;
        let last = filled < buf.len();
        if !utf8.feed(&buf[fresh]) || (last && !utf8.finish()) {
            return Ok(Found { text: false, counts: Vec::new() });
        }
        let window = &buf[..filled];
        for (index, counter) in counters.iter_mut().enumerate() {
            let Some((_, new, all, out, emitted)) = writing.as_mut().filter(|w| w.0 == index) else {
                counter.scan(window, start, |_, _| Ok(()))?;
                continue;
            };
            let len = counter.finder.needle().len() as u64;
            counter.scan(window, start, |at, nth| {
                if *all || nth == 0 {
                    out.write_all(&window[in_window(start, *emitted)..at])?;
                    out.write_all(new)?;
                    *emitted = start + at as u64 + len;
                }
                Ok(())
            })?;
            // No occurrence begins before the counter's `resume`: the bytes up to it are settled.
            let settled = if last { filled } else { in_window(start, counter.resume) };
            out.write_all(&window[in_window(start, *emitted)..settled])?;
            *emitted = start + settled as u64;
        }
        if last {
            break;
        }
        let kept = keep.min(filled);
        buf.copy_within(filled - kept..filled, 0);
        start += (filled - kept) as u64;
        filled = kept;
    }
    if let Some((.., mut out, _)) = writing {
        out.flush()?;
    }
    Ok(Found { text: true, counts: counters.iter().map(|c| c.count).collect() })
}

/// Reads into all of `buf` from `offset`, less only at the end of the file.
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut read = 0;
    while read < buf.len() {
        match file.read_at(&mut buf[read..], offset + read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(read)
}

/// The index of the file's byte at `offset` in a window of it that begins at `start` (held in
/// memory, so the index fits a `usize`).
fn in_window(start: u64, offset: u64) -> usize {
    usize::try_from(offset - start).unwrap_or(usize::MAX)
}

/// One pattern's occurrences through a stream seen in overlapping windows.
struct Counter<'a> {
    finder: memmem::Finder<'a>,
    /// Where the next occurrence may begin (a file offset): past the last one, and past every
    /// position already searched.
    resume: u64,
    count: u64,
}

impl<'a> Counter<'a> {
    fn new(pattern: &'a [u8]) -> Self {
        Self { finder: memmem::Finder::new(pattern), resume: 0, count: 0 }
    }

    /// Finds the occurrences in `window` (the file's bytes from offset `start`, which is at most
    /// `resume`) that begin at or after `resume`, calling `found(index in window, how many came
    /// before)` for each.
    fn scan(
        &mut self,
        window: &[u8],
        start: u64,
        mut found: impl FnMut(usize, u64) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let len = self.finder.needle().len();
        let mut at = in_window(start, self.resume);
        while let Some(index) = self.finder.find(&window[at..]) {
            found(at + index, self.count)?;
            self.count += 1;
            at += index + len;
        }
        // An occurrence beginning before the last `len - 1` bytes would have been found here.
        self.resume = start + window.len().saturating_sub(len - 1).max(at) as u64;
        Ok(())
    }
}

/// UTF-8 validation of a stream fed in pieces that may split a character.
#[derive(Default)]
struct Utf8 {
    /// The start of a character whose remaining bytes are in the next piece (at most 3 bytes).
    pending: Vec<u8>,
}

impl Utf8 {
    /// Whether `bytes`, after the pieces before, can still be UTF-8.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        if !self.pending.is_empty() {
            // Complete the split character with up to 3 more bytes.
            let take = bytes.len().min(4 - self.pending.len());
            let held = self.pending.len();
            self.pending.extend_from_slice(&bytes[..take]);
            match std::str::from_utf8(&self.pending) {
                Ok(_) => bytes = &bytes[take..],
                Err(err) if err.valid_up_to() > 0 => bytes = &bytes[err.valid_up_to() - held..],
                // Still incomplete: `bytes` was shorter than the character's rest.
                Err(err) if err.error_len().is_none() => return true,
                Err(_) => return false,
            }
            self.pending.clear();
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => true,
            Err(err) if err.error_len().is_none() => {
                self.pending.extend_from_slice(&bytes[err.valid_up_to()..]);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether the stream, ended, was UTF-8 (no character left incomplete).
    fn finish(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(initial: &[u8], old: &str, new: &str, replace_all: bool) -> (EditResult, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, initial).unwrap();
        let result =
            edit("f", old, new, replace_all, &Workspace::open(dir.path().into()), &Cancel::default());
        (result, std::fs::read(&path).unwrap())
    }

    fn ok(occurrences: u64) -> EditResult {
        EditResult { error: None, path: Some("f".into()), occurrences: Some(occurrences) }
    }

    #[test]
    fn golden_24_to_29() {
        assert_eq!(run(b"a\r\nb\r\nc\r\n", "b\nc", "X\nY", false), (ok(1), b"a\r\nX\r\nY\r\n".to_vec()));
        assert_eq!(run(b"a\r\nb\r\nc\r\n", "b\r\nc", "X\nY", false), (ok(1), b"a\r\nX\nY\r\n".to_vec()));
        assert_eq!(run(b"a\nb\nc\n", "a\r\nb", "P\r\nQ", false), (ok(1), b"P\nQ\nc\n".to_vec()));
        assert_eq!(
            run(b"x\r\ny\nx\ny\r\nx\r\ny", "x\ny", "Z", true),
            (ok(1), b"x\r\ny\nZ\r\nx\r\ny".to_vec())
        );
        assert_eq!(
            run(b"a\nb", "b\n", "c\n", false).0.error.as_deref(),
            Some("Error: String not found in file: 'b\n'")
        );
        let many = run(b"apple\nbanana\napple\n", "apple", "pear", false).0;
        assert_eq!(
            many.error.as_deref(),
            Some(
                "Error: String 'apple' appears multiple times. Use replace_all=True to replace all occurrences."
            )
        );
        assert_eq!(
            run(b"apple\nbanana\napple\n", "apple", "pear", true),
            (ok(2), b"pear\nbanana\npear\n".to_vec())
        );
        assert_eq!(run(b"aaa", "aa", "X", false), (ok(1), b"Xa".to_vec()));
        assert_eq!(run(b"aaaa", "aa", "X", true), (ok(2), b"XX".to_vec()));
        assert_eq!(run(b"hello", "hello", "hello", false), (ok(1), b"hello".to_vec()));
    }

    /// The contract's edit of `initial` in memory, as `str::matches` and `replacen` do it: what the
    /// streaming passes must agree with.
    fn reference(initial: &[u8], old: &str, new: &str, replace_all: bool) -> (EditResult, Vec<u8>) {
        let unchanged =
            |error: String| (EditResult { error: Some(error), ..EditResult::default() }, initial.to_vec());
        let Ok(text) = std::str::from_utf8(initial) else {
            return unchanged("Error: File 'f' is not a text file".into());
        };
        let crlf = |s: &str| s.replace("\r\n", "\n").replace('\n', "\r\n");
        let lf = |s: &str| s.replace("\r\n", "\n");
        let candidates = [(old.to_owned(), new.to_owned()), (crlf(old), crlf(new)), (lf(old), lf(new))];
        let Some((count, (o, n))) =
            candidates.iter().map(|c| (text.matches(c.0.as_str()).count(), c)).find(|(c, _)| *c >= 1)
        else {
            return unchanged(format!("Error: String not found in file: '{old}'"));
        };
        if count > 1 && !replace_all {
            return unchanged(format!(
                "Error: String '{old}' appears multiple times. Use replace_all=True to replace all occurrences."
            ));
        }
        let edited = if replace_all { text.replace(o, n) } else { text.replacen(o, n, 1) };
        (ok(if replace_all { count as u64 } else { 1 }), edited.into_bytes())
    }

    fn same_as_reference(initial: &[u8], old: &str, new: &str) {
        for replace_all in [false, true] {
            let (got, want) =
                (run(initial, old, new, replace_all), reference(initial, old, new, replace_all));
            assert!(
                got == want,
                "{} bytes, old {:?}, replace_all {replace_all}: {:?} vs {:?} (content equal: {})",
                initial.len(),
                old.get(..40).unwrap_or(old),
                got.0,
                want.0,
                got.1 == want.1
            );
        }
    }

    /// Occurrences at every offset around the first step's end (where a step's overlap matters),
    /// alone, twice, and next to a near miss.
    #[test]
    fn occurrences_straddling_a_step_are_found_once() {
        for at in CHUNK - 7..=CHUNK + 1 {
            let mut once = "x".repeat(at);
            once.push_str("needle");
            once.push_str("y\n");
            same_as_reference(once.as_bytes(), "needle", "haystack");
            let twice = format!("{}needle{}needle", "x".repeat(at), "z".repeat(CHUNK - 3));
            same_as_reference(twice.as_bytes(), "needle", "N");
            let near = format!("{}needl{}needle", "x".repeat(at), "e".repeat(3));
            same_as_reference(near.as_bytes(), "needle", "");
        }
        // Ends of the file exactly at a step's end, and one byte either side.
        for len in [CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK] {
            let mut text = "x".repeat(len - 6);
            text.push_str("needle");
            same_as_reference(text.as_bytes(), "needle", "pin");
        }
    }

    /// Candidates that overlap count left to right, non-overlapping, across steps too.
    #[test]
    fn overlapping_candidates_count_as_str_matches_does() {
        assert_eq!(run(b"aaaaa", "aaa", "X", false), (ok(1), b"Xaa".to_vec()));
        assert_eq!(run(b"aaaaa", "aaa", "X", true), (ok(1), b"Xaa".to_vec()));
        assert_eq!(run(b"aaaaaa", "aaa", "X", true), (ok(2), b"XX".to_vec()));
        assert_eq!(run(b"abababa", "aba", "-", true), (ok(2), b"-b-".to_vec()));
        for extra in 0..4 {
            let many = "a".repeat(CHUNK + extra);
            same_as_reference(many.as_bytes(), "aaa", "b");
            same_as_reference(many.as_bytes(), "a", "bb");
            let (result, bytes) = run(many.as_bytes(), "aa", "", true);
            assert_eq!((result, bytes.len()), (ok(((CHUNK + extra) / 2) as u64), extra % 2));
        }
        let ab = "ab".repeat(CHUNK);
        same_as_reference(ab.as_bytes(), "bab", "_");
    }

    /// An `old` longer than a step: the overlap grows with it.
    #[test]
    fn an_old_longer_than_a_step_is_found() {
        let old = format!("{}!", "o".repeat(CHUNK + 100));
        let text = format!("{}{old}{}{old}", "o".repeat(CHUNK / 2), "p".repeat(3));
        same_as_reference(text.as_bytes(), &old, "new");
        let (result, bytes) = run(text.as_bytes(), &old, "new", true);
        assert_eq!(result, ok(2));
        assert_eq!(bytes, format!("{}newpppnew", "o".repeat(CHUNK / 2)).into_bytes());
    }

    /// CRLF and LF forms of `old` are counted in the same passes, across steps.
    #[test]
    fn line_ending_forms_are_found_across_steps() {
        for at in CHUNK - 4..=CHUNK {
            let crlf = format!("{}a\r\nb\r\nc\r\n", "x".repeat(at));
            same_as_reference(crlf.as_bytes(), "a\nb\nc", "X\nY");
            let lf = format!("{}a\nb\nc\r\n", "x".repeat(at));
            same_as_reference(lf.as_bytes(), "a\r\nb", "P\r\nQ");
        }
    }

    /// A character split between two steps is text; bytes that are not UTF-8 are not, wherever they
    /// are (a split start that the next step does not complete, one cut off by the end).
    #[test]
    fn utf8_split_between_steps_is_text_and_invalid_bytes_are_not() {
        for ch in ["é", "€", "😀"] {
            for back in 1..ch.len() {
                let text = format!("{}{ch}{ch}needle", "x".repeat(CHUNK - back));
                same_as_reference(text.as_bytes(), "needle", "ok");
                assert_eq!(run(text.as_bytes(), "needle", "ok", false).0, ok(1));
            }
        }
        let not_text = |bytes: &[u8]| {
            assert_eq!(
                run(bytes, "needle", "x", false),
                reference(bytes, "needle", "x", false),
                "{} bytes",
                bytes.len()
            );
            assert_eq!(
                run(bytes, "needle", "x", false).0.error.as_deref(),
                Some("Error: File 'f' is not a text file")
            );
        };
        for back in 1..4 {
            let mut bytes = "x".repeat(CHUNK - back).into_bytes();
            bytes.extend_from_slice(&"😀".as_bytes()[..back]);
            let mut cut_at_end = bytes.clone();
            bytes.extend_from_slice(b"needle");
            not_text(&bytes);
            cut_at_end.splice(0..6, *b"needle");
            not_text(&cut_at_end);
        }
        let mut late = "needle".repeat(CHUNK).into_bytes();
        late.push(0xff);
        not_text(&late);
    }

    /// The incremental check agrees with `str::from_utf8` however a string is cut into pieces.
    #[test]
    fn utf8_check_agrees_with_from_utf8_at_every_cut() {
        let samples: [&[u8]; 9] = [
            "aé€😀z".as_bytes(),
            b"\xe2\x82",
            b"a\xe2\x82",
            b"\xe2\x82\xac\xf0",
            b"\xed\xa0\x80",
            b"\xc0\xaf",
            b"\xf0\x9f\x98x",
            b"\x80abc",
            b"\xf4\x90\x80\x80",
        ];
        for sample in samples {
            let want = std::str::from_utf8(sample).is_ok();
            for i in 0..=sample.len() {
                for j in i..=sample.len() {
                    let mut check = Utf8::default();
                    let fed =
                        [&sample[..i], &sample[i..j], &sample[j..]].iter().all(|piece| check.feed(piece));
                    assert_eq!(fed && check.finish(), want, "{sample:?} cut at {i}, {j}");
                }
            }
        }
    }

    /// A cancelled edit stops before it replaces anything: the file untouched, no temp file left.
    #[test]
    fn a_cancelled_edit_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "needle").unwrap();
        let cancel = Cancel::default();
        cancel.cancel();
        let result = edit("f", "needle", "pin", false, &Workspace::open(dir.path().into()), &cancel);
        assert_eq!(result.error.as_deref(), Some(CANCELLED));
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"needle");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn golden_30_31_errors_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let ws = &Workspace::open(base.into());
        assert_eq!(
            edit("missing", "", "y", false, ws, &Cancel::default()).error.as_deref(),
            Some("Error: old_string cannot be empty. Provide the exact text to replace.")
        );
        assert_eq!(
            edit("missing", "a", "b", false, ws, &Cancel::default()).error.as_deref(),
            Some("Error: File 'missing' not found")
        );
        std::fs::write(base.join("bin"), b"ab\xffcd").unwrap();
        assert_eq!(
            edit("bin", "ab", "y", false, ws, &Cancel::default()).error.as_deref(),
            Some("Error: File 'bin' is not a text file")
        );
        std::fs::create_dir(base.join("d")).unwrap();
        assert_eq!(
            edit("d", "ab", "y", false, ws, &Cancel::default()).error.as_deref(),
            Some("Error: 'd' is not a regular file")
        );
        std::fs::write(base.join("f"), b"abc").unwrap();
        std::os::unix::fs::symlink(base.join("f"), base.join("ln")).unwrap();
        assert_eq!(edit("ln", "a", "Z", false, ws, &Cancel::default()).error, None);
        assert_eq!(std::fs::read(base.join("f")).unwrap(), b"Zbc");
        assert!(std::fs::symlink_metadata(base.join("ln")).unwrap().file_type().is_symlink());
    }

    #[test]
    fn edits_replace_the_links_target_whole_and_drop_setuid() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let ws = &Workspace::open(base.into());
        std::fs::create_dir(base.join("sub")).unwrap();
        let long = "e".repeat(255);
        let target = base.join("sub").join(&long);
        std::fs::write(&target, "#!/bin/sh\necho old\n").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::symlink(format!("sub/{long}"), base.join("ln")).unwrap();
        let before = std::fs::metadata(&target).unwrap();
        assert_eq!(edit("ln", "old", "new", false, ws, &Cancel::default()).error, None);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "#!/bin/sh\necho new\n");
        let after = std::fs::metadata(&target).unwrap();
        // A new inode (renamed into place), the mode kept without setuid, the link still a link.
        assert_ne!(std::os::unix::fs::MetadataExt::ino(&after), std::os::unix::fs::MetadataExt::ino(&before));
        assert_eq!(after.permissions().mode() & 0o7777, 0o755);
        assert!(std::fs::symlink_metadata(base.join("ln")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_dir(base.join("sub")).unwrap().count(), 1);
        assert_eq!(edit(&format!("sub/{long}"), "new", "x", false, ws, &Cancel::default()).error, None);
    }
}
