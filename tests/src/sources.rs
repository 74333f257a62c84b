//! The workspace's Rust files read as text, for the tests that hold the tree to its maps
//! (`tests/tests/docs.rs`) and to its layers (`tests/tests/layers.rs`).

use std::path::{Path, PathBuf};

/// One `mod NAME;` declaration (any visibility; inline `mod NAME { … }` is not a file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub name: String,
    /// The file it names: `#[path = "…"]` on the line above honoured, else `NAME.rs` or
    /// `NAME/mod.rs` in the declaring module's directory.
    pub file: PathBuf,
    /// Its line in the source, 0-based.
    pub line: usize,
}

/// The `mod NAME;` declarations of `source`, the text of `file`. `mod_rs`: `file` owns its
/// directory (a crate root, a `mod.rs`, a `#[path]` module), so its children sit beside it.
pub fn declared_modules(source: &str, file: &Path, mod_rs: bool) -> Vec<Declared> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let own_dir = match file.file_stem() {
        Some(stem) if !mod_rs => dir.join(stem),
        _ => dir.to_owned(),
    };
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "mod") else { continue };
        let Some(name) = words.get(at + 1).and_then(|w| w.strip_suffix(';')) else { continue };
        // Only visibilities before it: not a comment, not a word of other code.
        if !words[..at].iter().all(|w| w.starts_with("pub")) {
            continue;
        }
        let path_attr = n.checked_sub(1).and_then(|p| lines.get(p)).and_then(|above| {
            let rest = above.trim().strip_prefix("#[path = \"")?;
            Some(rest[..rest.find('"')?].to_owned())
        });
        let file = match path_attr {
            Some(relative) => dir.join(relative),
            None if own_dir.join(format!("{name}.rs")).exists() => own_dir.join(format!("{name}.rs")),
            None => own_dir.join(name).join("mod.rs"),
        };
        found.push(Declared { name: name.to_owned(), file, line: n });
    }
    found
}
