//! Text from a provider or a sandbox escaped before it reaches a person's terminal.
//!
//! [`escape_controls`]: C0/C1 control characters, DEL and the bidirectional overrides rendered
//! visibly, so a sandbox name like `ESC ] 0 ; title BEL` cannot retitle, clear or rewrite the
//! terminal it is printed on.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character (C0, DEL, C1) and every bidirectional override or isolate
/// written out as an escape: `\x1b`, `\x7f`, `\u{9b}`, `\u{202e}`; `\n`, `\r`, `\t` as such. Text
/// without any is borrowed as it is.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Controls (Unicode category Cc: U+0000–001F, U+007F–009F) and the bidirectional embeddings,
/// overrides and isolates (U+202A–202E, U+2066–2069) that reorder what a terminal shows.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_written_out() {
        assert_eq!(escape_controls("\u{1b}]0;title\u{7}"), r"\x1b]0;title\x07");
        assert_eq!(escape_controls("\u{1b}[2J"), r"\x1b[2J");
        assert_eq!(escape_controls("a\u{9b}31mb\u{7f}"), r"a\u{9b}31mb\x7f");
        assert_eq!(escape_controls("line\nnext\r\tx\0"), r"line\nnext\r\tx\x00");
        assert_eq!(escape_controls("abc\u{202e}fed"), r"abc\u{202e}fed");
    }

    #[test]
    fn plain_text_is_borrowed() {
        for text in ["", "plain", "é ü 日本 🙂", "a\\x1b stays as typed"] {
            assert!(matches!(escape_controls(text), Cow::Borrowed(t) if t == text), "{text}");
        }
    }
}
