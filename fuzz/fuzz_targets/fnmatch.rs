//! The glob verb's and grep's name matcher (`protocol/src/glob/fnmatch.rs`, included as is): any
//! pattern and name, in each dialect, without panicking or taking more than linear-ish time; a
//! pattern without magic matches exactly itself.
#![no_main]

#[expect(
    dead_code,
    unreachable_pub,
    reason = "a module of another crate, included as is: its `pub` items are the crate's, and the target uses part of it"
)]
#[path = "../../protocol/src/glob/fnmatch.rs"]
mod fnmatch;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // pattern NUL name
    let (pattern, name) = text.split_once('\0').unwrap_or((text, text));
    for dialect in [fnmatch::PYTHON, fnmatch::GREP_FILTER] {
        let compiled = fnmatch::Pattern::new(pattern, dialect);
        let matched = compiled.is_match(name);
        if let Some(literal) = compiled.literal() {
            assert_eq!(matched, literal == name, "{pattern:?} {name:?}");
        }
    }
    let caret = fnmatch::rewrite_caret(pattern);
    let _ = fnmatch::Pattern::new(&caret, fnmatch::PYTHON).is_match(name);
    if !fnmatch::has_magic(pattern) {
        assert!(fnmatch::Pattern::new(pattern, fnmatch::PYTHON).is_match(pattern), "{pattern:?}");
    }
});
