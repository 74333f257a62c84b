//! Quoted-heredoc framing: a way to pass arbitrary command text through a shell that no command text
//! can break out of.
//!
//! The delimiter carries 80 random bits and is drawn again for as long as it occurs anywhere in the
//! command, so the command cannot end the heredoc early. The heredoc is quoted (`<<'DELIM'`), so nothing
//! in it expands, and the command is appended last, after every other part of the script is final, so
//! text in the command that looks like a placeholder is never rewritten.

use rand::RngCore;

/// Prefix of every delimiter, so a reader of a transcript sees what it is.
pub const DELIMITER_PREFIX: &str = "AGENTD_CMD_";

/// Random bytes in a delimiter (80 bits).
pub const DELIMITER_RANDOM_BYTES: usize = 10;

/// A delimiter that does not occur in `command`.
pub fn delimiter_for<R: RngCore + ?Sized>(command: &str, rng: &mut R) -> String {
    loop {
        let candidate = random_token(DELIMITER_PREFIX, rng);
        if !command.contains(&candidate) {
            return candidate;
        }
    }
}

/// `head <<'DELIM'` + LF + `command` + LF + `DELIM` + LF: `head` reads the command, byte for byte plus
/// one final LF, on its stdin. [`unframe`] removes that LF again.
///
/// ```
/// let mut rng = rand::rng();
/// let script = agentd_protocol::framing::frame("sh -s", "echo 'EOF'\n", &mut rng);
/// assert!(script.starts_with("sh -s <<'AGENTD_CMD_"));
/// assert!(script.contains("\necho 'EOF'\n\n"));
/// ```
pub fn frame<R: RngCore + ?Sized>(head: &str, command: &str, rng: &mut R) -> String {
    let delimiter = delimiter_for(command, rng);
    let mut script = String::with_capacity(head.len() + command.len() + 2 * delimiter.len() + 8);
    script.push_str(head);
    script.push_str(" <<'");
    script.push_str(&delimiter);
    script.push_str("'\n");
    // Last: nothing after this point inspects or rewrites the text.
    script.push_str(command);
    script.push('\n');
    script.push_str(&delimiter);
    script.push('\n');
    script
}

/// The command as it was framed, from what the heredoc delivered on stdin.
pub fn unframe(stdin: &[u8]) -> &[u8] {
    stdin.strip_suffix(b"\n").unwrap_or(stdin)
}

/// `prefix` + 20 lower-case hex digits + `__`.
pub(crate) fn random_token<R: RngCore + ?Sized>(prefix: &str, rng: &mut R) -> String {
    use std::fmt::Write as _;
    let mut bytes = [0u8; DELIMITER_RANDOM_BYTES];
    rng.fill_bytes(&mut bytes);
    let mut token = String::with_capacity(prefix.len() + 2 * bytes.len() + 2);
    token.push_str(prefix);
    for byte in bytes {
        let _ = write!(token, "{byte:02x}");
    }
    token.push_str("__");
    token
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};

    #[test]
    fn delimiter_is_redrawn_while_it_occurs_in_the_command() {
        let first = delimiter_for("", &mut StdRng::seed_from_u64(7));
        // A command that contains exactly the delimiter the same random source draws first.
        let hostile = format!("echo {first}\n{first}\nrm -rf /");
        let second = delimiter_for(&hostile, &mut StdRng::seed_from_u64(7));
        assert_ne!(first, second);
        assert!(!hostile.contains(&second));
        assert_eq!(second.len(), DELIMITER_PREFIX.len() + 20 + 2);
    }

    #[test]
    fn frame_then_unframe_gives_the_command_back() {
        let mut rng = StdRng::seed_from_u64(1);
        for command in ["", "a", "a\n", "{command}\n$HOME `x`", "line\nEOF\n'"] {
            let script = frame("head", command, &mut rng);
            let body_start = script.find('\n').map_or(0, |i| i + 1);
            let delimiter_line = &script[script.len() - 34..];
            let body = &script[body_start..script.len() - delimiter_line.len()];
            assert_eq!(unframe(body.as_bytes()), command.as_bytes());
        }
    }
}
