//! The glob verb's brace expander (`protocol/src/glob/braces.rs`, included as is): any pattern
//! expands or is refused without panicking or overflowing the stack, never into more than the
//! limit, and a pattern without `{` is its only expansion.
#![no_main]

#[expect(
    unreachable_pub,
    reason = "a module of another crate, included as is: its `pub` items are the crate's"
)]
#[path = "../../protocol/src/glob/braces.rs"]
mod braces;

use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 1000;

fuzz_target!(|data: &[u8]| {
    let Ok(pattern) = std::str::from_utf8(data) else { return };
    match braces::expand_braces(pattern, LIMIT) {
        Some(expansions) => {
            assert!(!expansions.is_empty() && expansions.len() <= LIMIT);
            if !pattern.contains('{') {
                assert_eq!(expansions, [pattern]);
            }
        }
        None => assert!(pattern.contains('{')),
    }
});
