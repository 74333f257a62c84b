//! What a provider or a sandbox sends is data, never instructions: the checks an id passes before
//! it is used. (The escaping of text before it reaches a person's terminal is
//! [`escape`](super::escape), below the errors that show it.)
//!
//! - [`check_id`]: a sandbox id (from a provider's listing, its create answer, or typed by a user)
//!   must have the shape of an id before it goes into a URL, a request or a path: a listed
//!   `../../evil` must never become a request outside the provider's sandbox collection.

use crate::contract::error::{Result, SandboxError};

/// Longest id accepted. Provider ids are far shorter (Docker's 64 hex digits, Daytona's UUIDs and
/// names, Modal's `sb-…`); a bound keeps a hostile listing from making huge URLs and messages.
pub const MAX_ID_LEN: usize = 128;

/// Checks that `id` has the shape every provider's sandbox ids have: 1 to [`MAX_ID_LEN`] ASCII
/// letters, digits, `-`, `_` and `.`, and not `.` or `..` alone. So no `/`, no `%`, no space, no
/// control character: nothing that changes the meaning of a URL path or of a shell word.
pub fn check_id(provider: &'static str, id: &str) -> Result<()> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let well_formed =
        !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(allowed) && id != "." && id != "..";
    if well_formed { Ok(()) } else { Err(bad_id(provider, id)) }
}

/// The error for an id that is not of `provider`'s shape (for checks stricter than [`check_id`]).
pub fn bad_id(provider: &'static str, id: &str) -> SandboxError {
    // Only a bounded prefix is kept: the message must stay readable whatever was listed.
    let shown: String = id.chars().take(MAX_ID_LEN + 16).collect();
    let shown = if shown.len() < id.len() { format!("{shown}…") } else { shown };
    SandboxError::BadId { provider, id: shown }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_every_provider_pass() {
        for id in [
            "sb-a1B2c3",
            "3f2a9c0d1e2b3a4f5e6d7c8b9a0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7",
            "0b2c0f7e-4d1a-4b2e-a1c3-5d6e7f8a9b0c",
            "my_sandbox.v2",
            "a",
            "...",
        ] {
            assert!(check_id("X", id).is_ok(), "{id}");
        }
        let longest = "a".repeat(MAX_ID_LEN);
        assert!(check_id("X", &longest).is_ok());
    }

    #[test]
    fn ids_that_would_leave_the_collection_are_refused() {
        let too_long = "a".repeat(MAX_ID_LEN + 1);
        for id in [
            "",
            ".",
            "..",
            "../../../../evil/delete-me",
            "a/b",
            "a%2Fb",
            "%2e%2e",
            "a b",
            "a\nb",
            "a\u{1b}[2J",
            "a?x=1",
            "a#frag",
            "sb-é",
            "a\\b",
            too_long.as_str(),
        ] {
            let err = check_id("Daytona", id).unwrap_err();
            assert!(matches!(&err, SandboxError::BadId { provider: "Daytona", .. }), "{id}: {err}");
        }
    }

    #[test]
    fn a_refused_id_is_shown_escaped_and_bounded() {
        let err = check_id("Modal", "\u{1b}]0;pwned\u{7}").unwrap_err().to_string();
        assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
        assert!(err.contains(r"\x1b]0;pwned\x07"), "{err}");
        let long = check_id("Modal", &"x".repeat(10_000)).unwrap_err().to_string();
        assert!(long.len() < 400, "{}", long.len());
    }
}
