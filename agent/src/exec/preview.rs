//! The preview of an offloaded output (the contract's offload, as deepagents
//! 0.7.32 makes it): a head/tail excerpt
//! around a `... [N lines truncated] ...` marker, or a byte excerpt with a notice.

/// Bytes in each of the head and tail excerpts.
pub const EXCERPT_BYTES: usize = 2000;
/// Lines in each of the head and tail excerpts.
pub const EXCERPT_LINES: usize = 5;
/// Bytes of the byte excerpt.
pub const BYTE_EXCERPT: usize = 4000;
/// Lines shown in all by a head/tail preview; the marker counts the LF bytes beyond them.
const SHOWN_LINES: u64 = 10;

/// What the preview needs to know of the stored output.
pub struct Stored<'a> {
    /// The first `min(len, BYTE_EXCERPT)` stored bytes.
    pub head: &'a [u8],
    /// The last `min(len, EXCERPT_BYTES + 1)` stored bytes.
    pub tail: &'a [u8],
    /// Stored bytes in all.
    pub len: u64,
    /// LF bytes among them.
    pub newlines: u64,
    /// The capture stopped at its cap.
    pub capped: bool,
}

/// The preview text and the number in its marker (0 when there is none).
pub fn render(stored: &Stored<'_>) -> (Vec<u8>, u64) {
    let omitted = stored.newlines.saturating_sub(SHOWN_LINES);
    if omitted == 0 {
        return (byte_excerpt(stored), 0);
    }
    let head = &stored.head[..stored.head.len().min(EXCERPT_BYTES)];
    let tail = &stored.tail[stored.tail.len().saturating_sub(EXCERPT_BYTES)..];
    let mut out = first_lines(head).to_vec();
    if first_lines_exceed(stored) || last_lines_exceed(stored) {
        out.extend_from_slice(
            b"\n... [the excerpts above and below are byte-capped, so the lines bordering this marker may be cut mid-line] ...\n",
        );
    }
    out.extend_from_slice(format!("... [{omitted} lines truncated] ...\n").as_bytes());
    out.extend_from_slice(last_lines(tail));
    (out, omitted)
}

fn byte_excerpt(stored: &Stored<'_>) -> Vec<u8> {
    let mut out = stored.head[..stored.head.len().min(BYTE_EXCERPT)].to_vec();
    if stored.len > BYTE_EXCERPT as u64 {
        let notice = if stored.capped {
            format!(
                "\n... [output clipped here; capture stopped at its {}-byte limit, so the file at the path above is also incomplete] ...\n",
                stored.len
            )
        } else {
            format!(
                "\n... [output clipped here; {} bytes total, full output at the path above] ...\n",
                stored.len
            )
        };
        out.extend_from_slice(notice.as_bytes());
    }
    out
}

/// `head -n 5`: up to and including the fifth LF, or all.
fn first_lines(bytes: &[u8]) -> &[u8] {
    match memchr::memchr_iter(b'\n', bytes).nth(EXCERPT_LINES - 1) {
        Some(end) => &bytes[..=end],
        None => bytes,
    }
}

/// `tail -n 5`: the last five lines, an unterminated last line counting as one.
fn last_lines(bytes: &[u8]) -> &[u8] {
    match last_lines_start(bytes) {
        Some(start) => &bytes[start..],
        None => bytes,
    }
}

/// Where the last five lines of `bytes` start, if all five begin inside it after a LF.
fn last_lines_start(bytes: &[u8]) -> Option<usize> {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    memchr::memrchr_iter(b'\n', body).nth(EXCERPT_LINES - 1).map(|lf| lf + 1)
}

/// The output's first five lines are longer than the head excerpt.
fn first_lines_exceed(stored: &Stored<'_>) -> bool {
    let window = &stored.head[..stored.head.len().min(EXCERPT_BYTES)];
    memchr::memchr_iter(b'\n', window).nth(EXCERPT_LINES - 1).is_none() && stored.len > EXCERPT_BYTES as u64
}

/// The output's last five lines are longer than the tail excerpt.
fn last_lines_exceed(stored: &Stored<'_>) -> bool {
    match last_lines_start(stored.tail) {
        Some(start) => stored.tail.len() - start > EXCERPT_BYTES,
        None => stored.len > EXCERPT_BYTES as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preview(output: &[u8], capped: bool) -> (String, u64) {
        let stored = Stored {
            head: &output[..output.len().min(BYTE_EXCERPT)],
            tail: &output[output.len().saturating_sub(EXCERPT_BYTES + 1)..],
            len: output.len() as u64,
            newlines: memchr::memchr_iter(b'\n', output).count() as u64,
            capped,
        };
        let (text, omitted) = render(&stored);
        (String::from_utf8(text).unwrap(), omitted)
    }

    fn seq(from: u32, to: u32) -> String {
        (from..=to).map(|i| format!("{i}\n")).collect()
    }

    #[test]
    fn golden_55_head_tail_and_single_line_marker() {
        assert_eq!(
            preview(seq(1, 100).as_bytes(), false),
            ("1\n2\n3\n4\n5\n... [90 lines truncated] ...\n96\n97\n98\n99\n100\n".to_owned(), 90)
        );
        assert_eq!(
            preview(seq(1, 11).as_bytes(), false).0,
            "1\n2\n3\n4\n5\n... [1 lines truncated] ...\n7\n8\n9\n10\n11\n"
        );
        assert_eq!(preview(seq(101, 110).as_bytes(), false), (seq(101, 110), 0));
    }

    #[test]
    fn golden_56_unterminated_last_line_counts_as_a_line() {
        let mut output: String = (1..=12).map(|i| format!("{i} line\n")).collect();
        output.push_str("no-newline-end");
        let expected = "1 line\n2 line\n3 line\n4 line\n5 line\n... [2 lines truncated] ...\n9 line\n10 line\n11 line\n12 line\nno-newline-end";
        assert_eq!(preview(output.as_bytes(), false), (expected.to_owned(), 2));
    }

    #[test]
    fn golden_57_byte_excerpt_and_its_notices() {
        let output = format!("{}\n{}\n", "a".repeat(5000), "b".repeat(5000));
        let expected = format!(
            "{}\n... [output clipped here; 10002 bytes total, full output at the path above] ...\n",
            "a".repeat(4000)
        );
        assert_eq!(preview(output.as_bytes(), false), (expected, 0));
        let expected = format!(
            "{}\n... [output clipped here; capture stopped at its 6000-byte limit, so the file at the path above is also incomplete] ...\n",
            "a".repeat(4000)
        );
        assert_eq!(preview(&output.as_bytes()[..6000], true), (expected, 0));
    }

    #[test]
    fn golden_58_long_lines_get_the_byte_cap_notice() {
        let output: String =
            (0..20).map(|i| format!("{}\n", char::from(b'0' + i % 10).to_string().repeat(1000))).collect();
        let expected = format!(
            "{}\n{}\n... [the excerpts above and below are byte-capped, so the lines bordering this marker may be cut mid-line] ...\n... [10 lines truncated] ...\n{}\n{}\n",
            "0".repeat(1000),
            "1".repeat(999),
            "8".repeat(998),
            "9".repeat(1000)
        );
        assert_eq!(preview(output.as_bytes(), false), (expected, 10));
    }

    #[test]
    fn golden_59_capped_stream_of_short_lines() {
        let output = "x\n".repeat(5_242_880);
        let expected = format!("{}... [5242870 lines truncated] ...\n{}", "x\n".repeat(5), "x\n".repeat(5));
        assert_eq!(preview(output.as_bytes(), true), (expected, 5_242_870));
    }

    #[test]
    fn exactly_2000_byte_tail_lines_do_not_exceed() {
        // Five lines of 400 bytes each (LF included) end the output: exactly the excerpt size.
        let mut output = seq(1, 20);
        for _ in 0..5 {
            output.push_str(&"t".repeat(399));
            output.push('\n');
        }
        let (text, _) = preview(output.as_bytes(), false);
        assert!(!text.contains("byte-capped"), "{text}");
    }
}
