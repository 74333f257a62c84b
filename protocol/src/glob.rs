//! Glob matching, pure: the name matcher ([`fnmatch`]), brace expansion ([`braces`]), and whole paths
//! matched the way deepagents matches them (`wcmatch` with `BRACE | GLOBSTAR`): [`Glob`] for one
//! brace-free pattern (agentd's permission rules), [`IncludeGlob`] for the include globs of the
//! in-memory backends (deepagents' `compile_grep_include_glob`, used by `glob` and `grep`).
//!
//! ```
//! use agentd_protocol::glob::IncludeGlob;
//!
//! let bare = IncludeGlob::new("*.py").unwrap();
//! assert!(bare.is_match("src/app/main.py")); // no `/`: the basename, at any depth
//! let anchored = IncludeGlob::new("/*.py").unwrap();
//! assert!(anchored.is_match("top.py") && !anchored.is_match("src/main.py"));
//! assert!(IncludeGlob::new("../*.py").is_err());
//! ```

pub mod braces;
pub mod fnmatch;

use self::braces::expand_braces;
use self::fnmatch::{Dialect, Pattern};

/// wcmatch's glob: `[!…]` and `[^…]` negate, `\x` is a literal `x`.
pub const WCMATCH: Dialect = Dialect { caret_negates: true, escapes: true };

/// wcmatch's default cap on brace expansions; more refuse the pattern.
pub const MAX_EXPANSIONS: usize = 1000;

/// One brace-free glob, by segment: `*`, `?` and `[set]` match within one segment; a `**` segment
/// matches any number of segments (inside a glob none too, `/ws/**/*.env` matching `/ws/x.env`; at
/// its end at least one, so `/ws/src/**` matches beneath `/ws/src`, not `/ws/src` itself). Empty
/// segments are ignored, on both sides, as wcmatch ignores doubled `/`.
#[derive(Debug, Clone)]
pub struct Glob {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone)]
pub enum Segment {
    /// `**`.
    Any,
    Name(Pattern),
}

impl Glob {
    pub fn new(path: &str) -> Self {
        let segments = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| if s == "**" { Segment::Any } else { Segment::Name(Pattern::new(s, WCMATCH)) })
            .collect();
        Self { segments }
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether the path's `names` (its non-empty segments) match; `dots`: wildcards match names
    /// starting with `.` (wcmatch's `DOTMATCH`; without it, neither wildcards nor `**` do).
    pub fn matches(&self, names: &[&str], dots: bool) -> bool {
        self.walk(names, dots, false)
    }

    /// [`Glob::matches`]; `open_end`: a final `**` may match no name, as wcmatch's does when the
    /// path ends in `/` (`src/**` matches `src/`) or is empty (`**` matches the empty path).
    fn walk(&self, names: &[&str], dots: bool, open_end: bool) -> bool {
        // reach[j]: the first i segments can match the first j names.
        let mut reach = vec![false; names.len() + 1];
        reach[0] = true;
        let last = self.segments.len().saturating_sub(1);
        for (i, segment) in self.segments.iter().enumerate() {
            let mut next = vec![false; names.len() + 1];
            match segment {
                Segment::Any => {
                    // A final `**` needs a name to match (`/ws/src/**` is not `/ws/src`); inside,
                    // it may match none (`/ws/**/*.env` is `/ws/x.env` too).
                    let at_least_one = i == last && !open_end;
                    // `on`: some earlier start reaches `j` through names `**` may cross (not
                    // hidden ones, unless `dots`).
                    let mut on = false;
                    for j in 0..=names.len() {
                        next[j] = on || (reach[j] && !at_least_one);
                        if j < names.len() {
                            on = (on || reach[j]) && (dots || !names[j].starts_with('.'));
                        }
                    }
                }
                Segment::Name(pattern) => {
                    for j in 0..names.len() {
                        if reach[j] && name_matches(pattern, names[j], dots) {
                            next[j + 1] = true;
                        }
                    }
                }
            }
            reach = next;
        }
        reach[names.len()]
    }
}

fn name_matches(pattern: &Pattern, name: &str, dots: bool) -> bool {
    if !dots && name.starts_with('.') && pattern.literal().is_none_or(|l| !l.starts_with('.')) {
        // A hidden name is matched only by a pattern that starts with a literal `.`.
        return pattern.starts_with_dot() && pattern.is_match(name);
    }
    pattern.is_match(name)
}

/// An include glob with deepagents' rules (`compile_grep_include_glob`, 0.7.32), matched against a
/// path relative to the search root:
///
/// - without `/`, the basename at any depth (`*.py` matches `src/app/main.py`);
/// - with `/`, the whole relative path, `**` crossing directories (`src/**/*.py`);
/// - a leading `/` anchors at the root (`/*.py` matches `top.py`, not `src/main.py`).
///
/// Braces expand first; names starting with `.` match only a segment that starts with `.`. A
/// pattern ending in `/` matches only a path ending in `/` (never a file's on disk; a key of the
/// in-memory backend can end so), and a path's trailing `/` is no name (`*` matches `x/`).
#[derive(Debug, Clone)]
pub struct IncludeGlob {
    /// One per brace expansion, with whether it ends in `/`.
    globs: Vec<(Glob, bool)>,
    anchored: bool,
}

impl IncludeGlob {
    /// The compiled pattern, or deepagents' message for one it refuses: a `..` segment, or more
    /// than [`MAX_EXPANSIONS`] brace expansions.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.split(['/', '\\']).any(|segment| segment == "..") {
            return Err(format!("Path traversal not allowed in glob pattern {}", python_repr(pattern)));
        }
        let anchored = pattern.contains('/');
        let Some(expanded) = expand_braces(pattern.trim_start_matches('/'), MAX_EXPANSIONS) else {
            return Err(format!(
                "Invalid glob pattern {}: Pattern limit exceeded the limit of {MAX_EXPANSIONS}",
                python_repr(pattern)
            ));
        };
        let globs = expanded.iter().map(|one| (Glob::new(one), one.ends_with('/'))).collect();
        Ok(Self { globs, anchored })
    }

    /// Whether `relative` (a path relative to the search root) is included.
    pub fn is_match(&self, relative: &str) -> bool {
        let names: Vec<&str> = relative.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
        // Unanchored, the basename (Python's `PurePosixPath.name`) is matched: it has no `/`.
        let (names, slash_ended) = if self.anchored {
            (&names[..], relative.ends_with('/'))
        } else {
            (names.last().map_or(&[][..], std::slice::from_ref), false)
        };
        let open_end = slash_ended || names.is_empty();
        self.globs
            .iter()
            .any(|(glob, dir_only)| (slash_ended || !dir_only) && glob.walk(names, false, open_end))
    }
}

/// `text` as Python's `repr` of a `str` writes it, for messages that quote deepagents' own.
pub fn python_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if u32::from(c) < 0x20 || (0x7f..0xa0).contains(&u32::from(c)) => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values from wcmatch 10 and 12.0.4 (`wcmatch.glob.compile(p, flags=BRACE|GLOBSTAR)
    /// .match(s)`, what deepagents 0.7.32's `compile_grep_include_glob` runs), the leading `/`
    /// stripped.
    #[test]
    fn include_globs_match_as_wcmatch_does() {
        let cases = [
            ("**/*.py", "main.py", true),
            ("**/*.py", "a/main.py", true),
            ("*.py", "a/.x.py", false),
            ("src/**", "src", false),
            ("src/**", "src/a/b", true),
            ("**/*.yml", ".github/ci.yml", false),
            ("*.yml", ".github/ci.yml", true),
            ("a/*/c", "a/.b/c", false),
            ("a/.*/c", "a/.b/c", true),
            ("a//b", "a/b", true),
            ("a/b", "a//b", true),
            ("{a,b}.py", "x/a.py", true),
            ("[^a].py", "b.py", true),
            ("[!a].py", "a.py", false),
            ("\\*.py", "*.py", true),
            ("!a.py", "!a.py", true),
            ("a/**/b", "a/b", true),
            ("a/**/b", "a/x/y/b", true),
            ("a/b/", "a/b", false),
            ("/*.py", "top.py", true),
            ("/*.py", "src/top.py", false),
            // Paths ending in `/` and the empty path (keys of the in-memory backend).
            ("**", "", true),
            ("**/**", "", true),
            ("*", "", false),
            ("**/*", "", false),
            ("/**", "/", true),
            ("**/", "/", true),
            ("*/", "/", false),
            ("*", "x/", true),
            ("x", "x//", true),
            ("dir/**", "dir/", true),
            ("dir/**", "dir", false),
            ("*/**", "x/", true),
            ("*/**", "x", false),
            ("**/", "x", false),
            ("**/", "a/b/", true),
            ("dir/", "dir/", true),
            ("dir/*", "dir/x/", true),
            ("a/**/b", "a/b/", true),
            ("**", ".x/", false),
            ("**/.*", "dir/.x/", true),
        ];
        for (pattern, path, expected) in cases {
            let glob = IncludeGlob::new(pattern).unwrap();
            assert_eq!(glob.is_match(path), expected, "{pattern} against {path}");
        }
    }

    #[test]
    fn refused_patterns_say_why_as_deepagents_does() {
        assert_eq!(
            IncludeGlob::new("../*.py").unwrap_err(),
            "Path traversal not allowed in glob pattern '../*.py'"
        );
        assert_eq!(
            IncludeGlob::new(&"{a,b}".repeat(11)).unwrap_err(),
            format!(
                "Invalid glob pattern '{}': Pattern limit exceeded the limit of 1000",
                "{a,b}".repeat(11)
            )
        );
        assert_eq!(python_repr("it's"), "\"it's\"");
        assert_eq!(python_repr("a'\"\n"), "'a\\'\"\\n'");
    }
}
