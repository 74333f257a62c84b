//! `read` (contract §3.2): a page of lines with the contract's exact steps, in order: stat, empty
//! file, binary extension, UTF-8 sniff, `limit 0`, lines, byte cap, offset check, window.
//!
//! The file is streamed: lines before the page are scanned (and checked as UTF-8, as the reference
//! decodes them) but not kept, and no line is kept beyond what the page can show.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read as _};

use agentd_protocol::fs::{Encoding, FileData, ReadResult, has_binary_suffix};
use agentd_protocol::limits::MAX_READ_BASE64_BYTES;
use agentd_protocol::permission::Operation;
use base64::Engine as _;
use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::errno;
use crate::cancel::Cancel;
use crate::guard;
use crate::root::{ResolveError, Workspace};

/// Appended when the page hit the byte cap.
pub const TRUNCATION_MSG: &str = "\n\n[Output was truncated due to size limits. This paginated read result exceeded the sandbox stdout limit. Continue reading with a larger offset or smaller limit to inspect the rest of the file.]";
/// The reference's stdout limit; the page plus `TRUNCATION_MSG` never exceeds it.
const STDOUT_LIMIT: usize = 512_000;
/// Bytes of page text: 511806.
const PAGE_BYTES: usize = STDOUT_LIMIT - TRUNCATION_MSG.len();
const _: () = assert!(PAGE_BYTES == 511_806);
/// Largest file with a binary extension that is returned (as base64).
const BINARY_PREVIEW_MAX: u64 = 512_000;
/// Bytes checked for UTF-8 before a file counts as text.
const SNIFF_BYTES: usize = 8192;
/// Files up to this size get an exact `total_lines` even when the page did not reach the end.
const RECOUNT_MAX: u64 = 1_048_576;
/// Content of a zero-byte file.
const EMPTY_REMINDER: &str = "System reminder: File exists but has empty contents";

pub fn read(path: &str, offset: i64, limit: i64, ws: &Workspace, cancel: &Cancel) -> ReadResult {
    let fail = |what: &str| ReadResult::error(format!("File '{path}': {what}"));
    let offset = u64::try_from(offset).unwrap_or(0);
    let limit = u64::try_from(limit).unwrap_or(0);
    if path.contains('\0') {
        return fail("invalid_path");
    }
    // `stat("")` fails with ENOENT; joined to the workspace it would name the workspace itself.
    if path.is_empty() {
        return fail("file_not_found");
    }
    let node = match ws.node(path, true) {
        Ok(Some(node)) => node,
        Ok(None) => return fail("file_not_found"),
        Err(ResolveError::Escape) => return fail("invalid_path"),
        Err(err) if matches!(err.errno(), Some(Errno::EACCES | Errno::EPERM)) => {
            return fail("permission_denied");
        }
        Err(_) => return fail("file_not_found"),
    };
    if let Some(refusal) = guard::refusal_of(ws, Operation::Read, path, &node) {
        return ReadResult::error(refusal);
    }
    if !node.is_file() {
        return fail("not_a_file");
    }
    let size = u64::try_from(node.stat().st_size).unwrap_or(0);
    if size == 0 {
        return whole(EMPTY_REMINDER.to_owned(), Encoding::Utf8);
    }
    // Failures below carry the text after `File '{p}': `. The file is the one looked at: reopened
    // through the walk's directory fd and checked to be the same inode.
    let open = || match node.open(OFlag::O_RDONLY) {
        Ok(file) => Ok(file),
        Err(err) if matches!(errno(&err), Some(Errno::EACCES | Errno::EPERM)) => {
            Err("permission_denied".to_owned())
        }
        Err(err) => Err(format!("unexpected server response: {err}")),
    };
    // The whole file as base64, if it has at most `cap` bytes. The size from `stat` can lie (a
    // file that grew, a /proc-like one), so the read itself stops one byte past the cap.
    let whole_base64 = |file: Result<File, String>, cap: u64| {
        let too_big = || fail(&format!("Binary file exceeds maximum preview size of {cap} bytes"));
        if size > cap {
            return too_big();
        }
        match file.and_then(|f| read_at_most(f, size, cap + 1).map_err(|e| e.to_string())) {
            Ok(bytes) if bytes.len() as u64 > cap => too_big(),
            Ok(bytes) => whole(base64(&bytes), Encoding::Base64),
            Err(what) => fail(&what),
        }
    };
    if has_binary_suffix(path) {
        return whole_base64(open(), BINARY_PREVIEW_MAX);
    }
    let mut reader = match open() {
        Ok(file) => BufReader::with_capacity(64 * 1024, file),
        Err(what) => return fail(&what),
    };
    let text = match sniff(&mut reader) {
        Ok(text) => text,
        Err(err) => return fail(&format!("unexpected server response: {err}")),
    };
    if !text {
        // The reference returns the whole file as base64, with no size cap (quirk); here the cap is
        // what fits one reply. `sniff` left the file at its start with nothing buffered.
        return whole_base64(Ok(reader.into_inner()), MAX_READ_BASE64_BYTES as u64);
    }
    if limit == 0 {
        return ReadResult {
            file_data: Some(FileData { content: String::new(), encoding: Encoding::Utf8 }),
            no_lines_requested: true,
            ..ReadResult::default()
        };
    }
    match page(reader, offset, limit, size, cancel) {
        Ok(Page::Window(result)) => result,
        Ok(Page::PastEnd { lines }) => {
            fail(&format!("Line offset {offset} exceeds file length ({lines} lines)"))
        }
        Err(PageError::Decode(detail)) => fail(&format!("unexpected server response: {detail}")),
        Err(PageError::Io(err)) => fail(&format!("unexpected server response: {err}")),
    }
}

fn whole(content: String, encoding: Encoding) -> ReadResult {
    ReadResult { file_data: Some(FileData { content, encoding }), ..ReadResult::default() }
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An error once the request is cancelled, to end a read loop (the server answers `cancelled`).
fn cancelled(cancel: &Cancel) -> io::Result<()> {
    if cancel.is_cancelled() { Err(io::Error::other("cancelled")) } else { Ok(()) }
}

/// At most `max` bytes of `file`, whose size is probably `size` (allocated at once, not grown).
fn read_at_most(file: File, size: u64, max: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether the first 8192 bytes are UTF-8 (a sequence cut by the window's end is accepted).
fn sniff(reader: &mut BufReader<File>) -> io::Result<bool> {
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    reader.get_mut().take(SNIFF_BYTES as u64).read_to_end(&mut head)?;
    // Put the sniffed bytes back in front of the stream: rewind the file instead of re-buffering.
    io::Seek::seek(reader.get_mut(), io::SeekFrom::Start(0))?;
    Ok(match std::str::from_utf8(&head) {
        Ok(_) => true,
        Err(err) => err.error_len().is_none(),
    })
}

enum Page {
    Window(ReadResult),
    PastEnd { lines: u64 },
}

enum PageError {
    Decode(String),
    Io(io::Error),
}

impl From<io::Error> for PageError {
    fn from(err: io::Error) -> Self {
        Self::Io(err)
    }
}

fn page(
    reader: BufReader<File>,
    offset: u64,
    limit: u64,
    size: u64,
    cancel: &Cancel,
) -> Result<Page, PageError> {
    let mut lines = LineScanner::new(reader, cancel);
    let mut line = Vec::new();
    let mut scanned = 0u64;
    while scanned < offset {
        if !lines.next_line(&mut line, 0, None)? {
            return Ok(Page::PastEnd { lines: scanned });
        }
        scanned += 1;
    }
    let mut content = String::new();
    let mut returned = 0u64;
    let mut truncated = false;
    let mut at_end = false;
    while returned < limit {
        // Keep (and check) only what the page can still show, plus a little to find a boundary.
        let room = PAGE_BYTES - content.len();
        if !lines.next_line(&mut line, room + 4, Some(room + 4))? {
            at_end = true;
            break;
        }
        scanned += 1;
        let separator = usize::from(returned > 0);
        if separator + line.len() > room {
            if room >= separator {
                content.push_str(&"\n"[..separator]);
                content.push_str(utf8_prefix(&line, room - separator));
            }
            content.push_str(TRUNCATION_MSG);
            truncated = true;
            // A line too large to show still counts, so paging moves past it.
            returned = returned.max(1);
            break;
        }
        if separator == 1 {
            content.push('\n');
        }
        content.push_str(utf8_prefix(&line, line.len()));
        returned += 1;
    }
    if returned == 0 && !truncated {
        return Ok(Page::PastEnd { lines: scanned });
    }
    if !at_end {
        at_end = lines.at_end()?;
    }
    let total_lines = if at_end {
        Some(scanned + lines.count_rest()?)
    } else if size <= RECOUNT_MAX {
        // Counted again from the start, on the same open file.
        let mut file = lines.reader.into_inner();
        io::Seek::seek(&mut file, io::SeekFrom::Start(0))?;
        Some(LineScanner::new(BufReader::new(file), cancel).count_rest()?)
    } else {
        None
    };
    let end_line = offset + returned;
    let next_offset = match total_lines {
        Some(total) if end_line >= total => None,
        _ => Some(end_line),
    };
    Ok(Page::Window(ReadResult {
        file_data: Some(FileData { content, encoding: Encoding::Utf8 }),
        total_lines,
        start_line: Some(offset + 1),
        end_line: Some(end_line),
        next_offset,
        ..ReadResult::default()
    }))
}

/// The longest prefix of `bytes[..max]` that is whole UTF-8 (the bytes were checked before).
fn utf8_prefix(bytes: &[u8], max: usize) -> &str {
    let bytes = &bytes[..max.min(bytes.len())];
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => std::str::from_utf8(&bytes[..err.valid_up_to()]).unwrap_or_default(),
    }
}

/// Splits a stream into lines ending at LF, CRLF or a lone CR (each counted once); a final
/// unterminated segment is a line, a trailing terminator adds none.
struct LineScanner<'a> {
    reader: BufReader<File>,
    /// Absolute offset of the next unread byte, for error messages.
    position: u64,
    /// Polled before each buffer's worth is read.
    cancel: &'a Cancel,
}

impl<'a> LineScanner<'a> {
    fn new(reader: BufReader<File>, cancel: &'a Cancel) -> Self {
        Self { reader, position: 0, cancel }
    }

    /// Reads the next line into `out` (at most `keep` bytes of it), checking its first `check` bytes
    /// (`None`: all) as strict UTF-8. `false` at the end of the file.
    fn next_line(&mut self, out: &mut Vec<u8>, keep: usize, check: Option<usize>) -> Result<bool, PageError> {
        out.clear();
        let mut utf8 = Utf8Check::default();
        let mut seen = 0usize;
        // Bytes past `check` are not examined, so an open sequence at the cut is not an error.
        let mut partly_checked = false;
        loop {
            cancelled(self.cancel)?;
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                if !partly_checked {
                    utf8.finish()?;
                }
                return Ok(seen > 0);
            }
            let (body, terminator) = match memchr::memchr2(b'\n', b'\r', buf) {
                Some(i) => (&buf[..i], Some(buf[i])),
                None => (buf, None),
            };
            let checked = check.map_or(body.len(), |limit| limit.saturating_sub(seen).min(body.len()));
            partly_checked |= checked < body.len();
            utf8.feed(&body[..checked], self.position)?;
            let kept = keep.saturating_sub(out.len()).min(body.len());
            out.extend_from_slice(&body[..kept]);
            seen += body.len();
            let consumed = body.len() + usize::from(terminator.is_some());
            self.position += consumed as u64;
            self.reader.consume(consumed);
            if let Some(terminator) = terminator {
                if !partly_checked {
                    utf8.finish()?;
                }
                if terminator == b'\r' && self.reader.fill_buf()?.first() == Some(&b'\n') {
                    self.reader.consume(1);
                    self.position += 1;
                }
                return Ok(true);
            }
        }
    }

    fn at_end(&mut self) -> io::Result<bool> {
        Ok(self.reader.fill_buf()?.is_empty())
    }

    /// Counts the remaining lines without decoding them (the reference's lenient recount).
    fn count_rest(&mut self) -> io::Result<u64> {
        let mut count = 0u64;
        let mut in_line = false;
        let mut after_cr = false;
        loop {
            cancelled(self.cancel)?;
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(count + u64::from(in_line));
            }
            for &byte in buf {
                match byte {
                    b'\n' if after_cr => after_cr = false,
                    b'\n' | b'\r' => {
                        count += 1;
                        in_line = false;
                        after_cr = byte == b'\r';
                    }
                    _ => {
                        in_line = true;
                        after_cr = false;
                    }
                }
            }
            let len = buf.len();
            self.reader.consume(len);
        }
    }
}

/// Strict UTF-8 checking across buffer boundaries.
#[derive(Default)]
struct Utf8Check {
    /// An incomplete sequence carried over from the previous chunk, and where it started.
    carry: Vec<u8>,
    carry_at: u64,
}

impl Utf8Check {
    fn feed(&mut self, mut data: &[u8], mut position: u64) -> Result<(), PageError> {
        if !self.carry.is_empty() {
            let need = sequence_len(self.carry[0]);
            while self.carry.len() < need && !data.is_empty() {
                self.carry.push(data[0]);
                data = &data[1..];
                position += 1;
            }
            if self.carry.len() < need {
                return Ok(());
            }
            if std::str::from_utf8(&self.carry).is_err() {
                return Err(decode_error(self.carry[0], self.carry_at));
            }
            self.carry.clear();
        }
        match std::str::from_utf8(data) {
            Ok(_) => Ok(()),
            Err(err) => match err.error_len() {
                Some(_) => Err(decode_error(data[err.valid_up_to()], position + err.valid_up_to() as u64)),
                None => {
                    self.carry_at = position + err.valid_up_to() as u64;
                    self.carry = data[err.valid_up_to()..].to_vec();
                    Ok(())
                }
            },
        }
    }

    /// The line ended: a sequence still open is invalid.
    fn finish(&mut self) -> Result<(), PageError> {
        match self.carry.first() {
            Some(&byte) => Err(decode_error(byte, self.carry_at)),
            None => Ok(()),
        }
    }
}

/// Length of the UTF-8 sequence a leading byte announces (1 for bytes that cannot lead one).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

fn decode_error(byte: u8, position: u64) -> PageError {
    PageError::Decode(format!(
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0x{byte:02x} in position {position}: invalid utf-8"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Case {
        dir: tempfile::TempDir,
    }

    impl Case {
        fn new() -> Self {
            Self { dir: tempfile::tempdir().unwrap() }
        }
        fn file(&self, name: &str, bytes: &[u8]) -> String {
            let path = self.dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path.to_str().unwrap().to_owned()
        }
    }

    fn text(r: &ReadResult) -> &str {
        assert_eq!(r.error, None);
        let data = r.file_data.as_ref().unwrap();
        assert_eq!(data.encoding, Encoding::Utf8);
        &data.content
    }

    fn window(r: &ReadResult) -> (Option<u64>, Option<u64>, Option<u64>, Option<u64>) {
        (r.total_lines, r.start_line, r.end_line, r.next_offset)
    }

    fn rd(path: &str, offset: i64, limit: i64) -> ReadResult {
        read(path, offset, limit, &Workspace::open("/".into()), &Cancel::default())
    }

    #[test]
    fn golden_7_8_line_endings() {
        let c = Case::new();
        let crlf = c.file("crlf", b"a\r\nb\r\nc\r\n");
        assert_eq!(
            (text(&rd(&crlf, 0, 2000)), window(&rd(&crlf, 0, 2000))),
            ("a\nb\nc", (Some(3), Some(1), Some(3), None))
        );
        assert_eq!(
            (text(&rd(&crlf, 1, 1)), window(&rd(&crlf, 1, 1))),
            ("b", (Some(3), Some(2), Some(2), Some(2)))
        );
        let cr = c.file("cr", b"a\r\rb");
        assert_eq!(
            (text(&rd(&cr, 0, 2000)), window(&rd(&cr, 0, 2000))),
            ("a\n\nb", (Some(3), Some(1), Some(3), None))
        );
        let lf = c.file("lf", b"\n");
        assert_eq!(
            (text(&rd(&lf, 0, 2000)), window(&rd(&lf, 0, 2000))),
            ("", (Some(1), Some(1), Some(1), None))
        );
        let lfs = c.file("lfs", b"\n\n\n");
        assert_eq!(
            (text(&rd(&lfs, 0, 2000)), window(&rd(&lfs, 0, 2000))),
            ("\n\n", (Some(3), Some(1), Some(3), None))
        );
    }

    #[test]
    fn golden_9_10_offsets_and_limits() {
        let c = Case::new();
        for bytes in [&b"L1\nL2\nL3"[..], b"L1\nL2\nL3\n"] {
            let p = c.file("l", bytes);
            let e = |o| format!("File '{p}': Line offset {o} exceeds file length (3 lines)");
            assert_eq!(rd(&p, 3, 2000).error, Some(e(3)));
            assert_eq!(rd(&p, 100, 10).error, Some(e(100)));
            assert_eq!(
                (text(&rd(&p, 2, 2000)), window(&rd(&p, 2, 2000))),
                ("L3", (Some(3), Some(3), Some(3), None))
            );
            for (o, l) in [(0, 0), (0, -1)] {
                let r = rd(&p, o, l);
                assert_eq!(
                    (text(&r), r.no_lines_requested, window(&r)),
                    ("", true, (None, None, None, None))
                );
            }
            assert_eq!(
                (text(&rd(&p, -5, 1)), window(&rd(&p, -5, 1))),
                ("L1", (Some(3), Some(1), Some(1), Some(1)))
            );
        }
    }

    #[test]
    fn golden_11_12_empty_and_long_files() {
        let c = Case::new();
        for name in ["x.txt", "x.png"] {
            let r = rd(&c.file(name, b""), 5, 0);
            assert_eq!(
                (text(&r), window(&r), r.no_lines_requested),
                (EMPTY_REMINDER, (None, None, None, None), false)
            );
        }
        let many: String = (0..2500).map(|i| format!("{i}\n")).collect();
        let p = c.file("many", many.as_bytes());
        assert_eq!(window(&rd(&p, 0, 2000)), (Some(2500), Some(1), Some(2000), Some(2000)));
        assert_eq!(window(&rd(&p, 2000, 2000)), (Some(2500), Some(2001), Some(2500), None));
    }

    #[test]
    fn golden_13_14_15_utf8_sniff_and_decoding() {
        let c = Case::new();
        let mut straddle = vec![b'a'; 8191];
        straddle.extend_from_slice("é\nrest".as_bytes());
        let r = rd(&c.file("s", &straddle), 0, 2000);
        assert_eq!(window(&r), (Some(2), Some(1), Some(2), None));
        let mut bad = vec![b'a'; 8191];
        bad.extend_from_slice(b"\xffabc");
        let r = rd(&c.file("b", &bad), 0, 2000);
        assert_eq!(r.file_data.as_ref().unwrap().encoding, Encoding::Base64);
        assert_eq!(window(&r), (None, None, None, None));
        let p = c.file("t", b"abc\xe4");
        assert!(
            rd(&p, 0, 2000).error.unwrap().starts_with(&format!("File '{p}': unexpected server response: "))
        );
        let mut late = vec![b'a'; 8192];
        late.extend_from_slice(b"\xffabc");
        let p = c.file("late", &late);
        assert!(
            rd(&p, 0, 2000).error.unwrap().starts_with(&format!("File '{p}': unexpected server response: "))
        );
        let mut ok = b"ok\n".repeat(10000);
        ok.extend_from_slice(b"\xff\n");
        let r = rd(&c.file("ok", &ok), 0, 1);
        assert_eq!((text(&r), window(&r)), ("ok", (Some(10001), Some(1), Some(1), Some(1))));
    }

    #[test]
    fn golden_16_17_binary_extensions() {
        let c = Case::new();
        let b64 = |r: ReadResult| {
            assert_eq!(r.error, None);
            let d = r.file_data.unwrap();
            assert_eq!(d.encoding, Encoding::Base64);
            d.content
        };
        assert_eq!(b64(rd(&c.file("x.PNG", b"\x89PNG\r\n"), 0, 2000)), "iVBORw0K");
        assert_eq!(b64(rd(&c.file("x.PNG", b"\x89PNG\r\n"), 0, 0)), "iVBORw0K");
        assert_eq!(text(&rd(&c.file(".png", b"hi"), 0, 2000)), "hi");
        assert_eq!(b64(rd(&c.file("a.tar.PDF", b"hi"), 0, 2000)), "aGk=");
        assert_eq!(b64(rd(&c.file("a.mkv", b"x"), 0, 2000)), "eA==");
        b64(rd(&c.file("t.png", &vec![0; 512_000]), 0, 2000));
        let p = c.file("t.png", &vec![0; 512_001]);
        assert_eq!(
            rd(&p, 0, 2000).error,
            Some(format!("File '{p}': Binary file exceeds maximum preview size of 512000 bytes"))
        );
    }

    #[test]
    fn svg_is_text() {
        // Golden 16: `.svg` is not among the binary suffixes.
        let c = Case::new();
        assert_eq!(text(&rd(&c.file("a.svg", b"<svg/>"), 0, 2000)), "<svg/>");
    }

    #[test]
    fn golden_18_19_byte_cap() {
        let c = Case::new();
        let r = rd(&c.file("x", &vec![b'x'; 600_000]), 0, 2000);
        assert_eq!(text(&r), format!("{}{TRUNCATION_MSG}", "x".repeat(511_806)));
        assert_eq!(text(&r).len(), 512_000);
        assert_eq!(window(&r), (Some(1), Some(1), Some(1), None));
        let r = rd(&c.file("e", "😀".repeat(200_000).as_bytes()), 0, 2000);
        assert_eq!(text(&r), format!("{}{TRUNCATION_MSG}", "😀".repeat(127_951)));
        assert_eq!(text(&r).len(), 511_998);
        let mut ys = Vec::new();
        for _ in 0..600 {
            ys.extend_from_slice(&[b'y'; 999]);
            ys.push(b'\n');
        }
        let r = rd(&c.file("y", &ys), 0, 2000);
        let line = "y".repeat(999);
        let expected =
            format!("{}\n{}{TRUNCATION_MSG}", vec![line.as_str(); 511].join("\n"), "y".repeat(806));
        assert_eq!(text(&r), expected);
        assert_eq!(text(&r).len(), 512_000);
        assert_eq!(window(&r), (Some(600), Some(1), Some(511), Some(511)));
    }

    #[test]
    fn golden_20_total_lines_only_for_small_files_or_at_the_end() {
        let c = Case::new();
        let big: Vec<u8> = (0..20_000).flat_map(|_| [&[b'z'; 99][..], b"\n"].concat()).collect();
        let p = c.file("big", &big);
        assert_eq!(window(&rd(&p, 0, 10)), (None, Some(1), Some(10), Some(10)));
        assert_eq!(window(&rd(&p, 19_990, 10)), (Some(20_000), Some(19_991), Some(20_000), None));
        let mut mib: Vec<u8> = (0..1024).flat_map(|_| [&[b'q'; 1023][..], b"\n"].concat()).collect();
        let p = c.file("mib", &mib);
        assert_eq!(window(&rd(&p, 0, 10)), (Some(1024), Some(1), Some(10), Some(10)));
        mib.push(b'q');
        let p = c.file("mib1", &mib);
        assert_eq!(window(&rd(&p, 0, 10)), (None, Some(1), Some(10), Some(10)));
    }

    #[test]
    fn golden_21_22_text_oddities_and_non_files() {
        let c = Case::new();
        assert_eq!(text(&rd(&c.file("n", b"a\0b\nc"), 0, 2000)), "a\u{0}b\nc");
        assert_eq!(text(&rd(&c.file("bom", b"\xef\xbb\xbfhi\n"), 0, 2000)), "\u{feff}hi");
        let r = rd(&c.file("ff", b"a\x0cb\x0bc\xe2\x80\xa8d"), 0, 2000);
        assert_eq!((text(&r), r.total_lines), ("a\x0cb\x0bc\u{2028}d", Some(1)));
        let d = c.dir.path().to_str().unwrap();
        assert_eq!(rd(d, 0, 2000).error, Some(format!("File '{d}': not_a_file")));
        let fifo = c.dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let f = fifo.to_str().unwrap();
        assert_eq!(rd(f, 0, 2000).error, Some(format!("File '{f}': not_a_file")));
        let link = c.dir.path().join("dangling");
        std::os::unix::fs::symlink("nowhere", &link).unwrap();
        let l = link.to_str().unwrap();
        assert_eq!(rd(l, 0, 2000).error, Some(format!("File '{l}': file_not_found")));
    }

    #[test]
    fn relative_paths_resolve_against_the_workspace() {
        let c = Case::new();
        c.file("rel.txt", b"hello\n");
        let r = read("rel.txt", 0, 2000, &Workspace::open(c.dir.path().into()), &Cancel::default());
        assert_eq!(text(&r), "hello");
    }

    #[test]
    fn a_file_that_fails_the_sniff_is_base64_only_up_to_what_fits_a_reply() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bin.txt");
        let cap = MAX_READ_BASE64_BYTES as u64;
        let make = |len: u64| {
            let mut file = File::create(&path).unwrap();
            std::io::Write::write_all(&mut file, b"\xff\xfe").unwrap();
            file.set_len(len).unwrap();
        };
        let p = path.to_str().unwrap();
        make(cap);
        let r = rd(p, 0, 2000);
        assert_eq!(r.error, None);
        let data = r.file_data.unwrap();
        assert_eq!(data.encoding, Encoding::Base64);
        let bytes = base64::engine::general_purpose::STANDARD.decode(&data.content).unwrap();
        assert_eq!((bytes.len() as u64, &bytes[..3]), (cap, &b"\xff\xfe\0"[..]));
        let reply = agentd_protocol::message::ServerMessage::FsResult(agentd_protocol::message::FsReply {
            id: u64::MAX,
            result: agentd_protocol::fs::FsResponse::Read(ReadResult { file_data: Some(data), ..r }),
        });
        assert!(reply.to_json().len() <= agentd_protocol::limits::MAX_REPLY_BYTES);
        make(cap + 1);
        assert_eq!(
            rd(p, 0, 2000).error,
            Some(format!("File '{p}': Binary file exceeds maximum preview size of {cap} bytes"))
        );
        // Small ones are unchanged.
        make(10);
        let r = rd(p, 5, 0);
        assert_eq!(r.file_data.unwrap().content, "//4AAAAAAAAAAA==");
    }
}
