//! fnmatch-style matching of one name against one pattern segment, on code points, case-sensitive.
//!
//! The set syntax follows Python's `fnmatch.translate` (contract §3.6 route B, §3.7): `[` without a
//! closing `]` is literal, a `]` right after `[` or `[!` is a member, `-` after a range or at either end
//! is a member, and reversed ranges are dropped (an emptied set matches nothing, an emptied `[!…]`
//! matches any one character). [`Dialect`] adds what grep's basename filter also accepts.

/// What differs between the three users of the matcher.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// `[^…]` negates like `[!…]` (otherwise `^` is a member).
    pub caret_negates: bool,
    /// `\x` matches `x` literally outside sets (otherwise `\` is ordinary).
    pub escapes: bool,
}

/// Python's `fnmatch` as `glob.glob` uses it (grep route B; the glob verb after [`rewrite_caret`]).
pub const PYTHON: Dialect = Dialect { caret_negates: false, escapes: false };

/// grep's `--glob` basename filter (route A), as GNU grep's `--include` and ripgrep read it.
pub const GREP_FILTER: Dialect = Dialect { caret_negates: true, escapes: true };

#[derive(Debug, Clone)]
enum Token {
    Char(char),
    One,
    Star,
    /// Inclusive ranges; a single member is a range of one.
    Set {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Char(x) => *x == c,
            Token::One => true,
            Token::Star => false,
            Token::Set { negated, ranges } => ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated,
        }
    }
}

/// A compiled segment pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    tokens: Vec<Token>,
    /// Set when the pattern is plain text: matching is then string equality.
    literal: Option<String>,
}

/// Whether `s` holds any of Python glob's magic characters (`*`, `?`, `[`).
pub fn has_magic(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The glob verb's `[^…]` → `[!…]` rewrite: applied when a `]` occurs anywhere from two characters
/// after the `[`, so in `[^]…]` the `]` stays a member.
pub fn rewrite_caret(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len());
    for (i, &c) in chars.iter().enumerate() {
        let rewrite = c == '^'
            && i > 0
            && chars[i - 1] == '['
            && chars.get(i + 1..).is_some_and(|rest| rest.contains(&']'));
        out.push(if rewrite { '!' } else { c });
    }
    out
}

impl Pattern {
    pub fn new(pattern: &str, dialect: Dialect) -> Self {
        let pat: Vec<char> = pattern.chars().collect();
        let n = pat.len();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < n {
            let c = pat[i];
            i += 1;
            match c {
                '*' => {
                    if !matches!(tokens.last(), Some(Token::Star)) {
                        tokens.push(Token::Star);
                    }
                }
                '?' => tokens.push(Token::One),
                '\\' if dialect.escapes && i < n => {
                    tokens.push(Token::Char(pat[i]));
                    i += 1;
                }
                '[' => {
                    let mut j = i;
                    if j < n && (pat[j] == '!' || (dialect.caret_negates && pat[j] == '^')) {
                        j += 1;
                    }
                    if j < n && pat[j] == ']' {
                        j += 1;
                    }
                    while j < n && pat[j] != ']' {
                        j += 1;
                    }
                    if j >= n {
                        tokens.push(Token::Char('['));
                    } else {
                        tokens.push(parse_set(&pat[i..j], dialect));
                        i = j + 1;
                    }
                }
                c => tokens.push(Token::Char(c)),
            }
        }
        let literal = tokens
            .iter()
            .map(|t| match t {
                Token::Char(c) => Some(*c),
                _ => None,
            })
            .collect::<Option<String>>();
        Self { tokens, literal }
    }

    /// Starts with a literal `.` (what matches a hidden name where wildcards may not).
    pub fn starts_with_dot(&self) -> bool {
        matches!(self.tokens.first(), Some(Token::Char('.')))
    }

    /// Plain text, no wildcard or set.
    pub fn literal(&self) -> Option<&str> {
        self.literal.as_deref()
    }

    pub fn is_match(&self, name: &str) -> bool {
        if let Some(literal) = &self.literal {
            return literal == name;
        }
        // Every token but `*` takes exactly one character, so retrying from the last `*` suffices.
        let tokens = &self.tokens;
        let (mut t, mut s) = (0, 0);
        let mut retry: Option<(usize, usize)> = None;
        loop {
            let next = name[s..].chars().next();
            if t < tokens.len() {
                if let Token::Star = tokens[t] {
                    retry = Some((t, s));
                    t += 1;
                    continue;
                }
                if let Some(c) = next
                    && tokens[t].matches(c)
                {
                    t += 1;
                    s += c.len_utf8();
                    continue;
                }
            } else if next.is_none() {
                return true;
            }
            // Mismatch: let the last `*` take one more character.
            match retry {
                Some((star, from)) => match name[from..].chars().next() {
                    Some(c) => {
                        retry = Some((star, from + c.len_utf8()));
                        t = star + 1;
                        s = from + c.len_utf8();
                    }
                    None => return false,
                },
                None => return false,
            }
        }
    }
}

/// The inside of `[…]` (without the brackets), split into ranges the way `fnmatch.translate` does.
fn parse_set(stuff: &[char], dialect: Dialect) -> Token {
    let bang = |c: char| c == '!' || (dialect.caret_negates && c == '^');
    // Chunks are separated by the hyphens that form ranges: the last char of one chunk and the first
    // of the next are a range's ends. A hyphen is never a separator right after `[`/`[!`, nor right
    // after a range's end.
    let mut chunks: Vec<Vec<char>> = Vec::new();
    let mut lo = 0;
    let mut k = if bang(stuff[0]) { 2 } else { 1 };
    while let Some(at) = stuff.get(k..).and_then(|rest| rest.iter().position(|&c| c == '-')) {
        let at = k + at;
        chunks.push(stuff[lo..at].to_vec());
        lo = at + 1;
        k = at + 3;
    }
    let last = stuff[lo..].to_vec();
    if last.is_empty() {
        // A trailing hyphen is a member.
        if let Some(prev) = chunks.last_mut() {
            prev.push('-');
        }
    } else {
        chunks.push(last);
    }
    // Drop reversed ranges by fusing their chunks, right to left.
    for k in (1..chunks.len()).rev() {
        let (Some(&end), Some(&start)) = (chunks[k - 1].last(), chunks[k].first()) else { continue };
        if end > start {
            let tail = chunks.remove(k);
            chunks[k - 1].pop();
            chunks[k - 1].extend_from_slice(&tail[1..]);
        }
    }
    // The class as Python's regex then reads it: chunks joined by range hyphens (`None`), negated
    // when what is left starts with `!` (fusing can move one there), a join right after it literal.
    let mut seq: Vec<Option<char>> = Vec::new();
    for (idx, chunk) in chunks.iter().enumerate() {
        if idx > 0 {
            seq.push(None);
        }
        seq.extend(chunk.iter().map(|&c| Some(c)));
    }
    let negated = match seq.as_slice() {
        [] => return Token::Set { negated: false, ranges: Vec::new() },
        [Some(c)] if bang(*c) => return Token::One,
        [Some(c), ..] => bang(*c),
        _ => false,
    };
    let body = &seq[usize::from(negated)..];
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < body.len() {
        match (body[i], body.get(i + 1), body.get(i + 2)) {
            (Some(a), Some(None), Some(&Some(b))) => {
                ranges.push((a, b));
                i += 3;
            }
            (Some(a), ..) => {
                ranges.push((a, a));
                i += 1;
            }
            (None, ..) => {
                ranges.push(('-', '-'));
                i += 1;
            }
        }
    }
    Token::Set { negated, ranges }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, name: &str) -> bool {
        Pattern::new(pattern, PYTHON).is_match(name)
    }

    #[test]
    fn wildcards() {
        assert!(m("*.py", "a.py"));
        assert!(m("*.py", ".hidden.py"));
        assert!(!m("*.py", "a.pyc"));
        assert!(m("**", "anything"));
        assert!(m("a*b*c", "aXXbYYbc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("file?.txt", "fileA.txt"));
        assert!(!m("file?.txt", "file10.txt"));
        assert!(m("?", "é"));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(m("*", ""));
        assert!(!m("*.PY", "a.py"));
    }

    #[test]
    fn sets_follow_python() {
        assert!(m("file[1-2].txt", "file2.txt"));
        assert!(!m("file[1-2].txt", "file3.txt"));
        assert!(m("[!a].py", "b.py"));
        assert!(!m("[!a].py", "a.py"));
        // `^` is a member for Python.
        assert!(m("[^a].py", "a.py"));
        assert!(m("[^a].py", "^.py"));
        assert!(!m("[^a].py", "b.py"));
        // `]` first is a member; unclosed `[` is literal.
        assert!(m("[]a]", "]"));
        assert!(m("[!]a]", "b"));
        assert!(!m("[!]a]", "]"));
        assert!(m("[ab", "[ab"));
        assert!(!m("[ab", "a"));
        assert!(m("[]", "[]"));
        assert!(m("[!]", "[!]"));
        // Hyphens at the ends and after a range are members.
        assert!(m("[a-]", "-"));
        assert!(m("[-a]", "-"));
        assert!(m("[!-a]", "b"));
        assert!(!m("[!-a]", "-"));
        assert!(m("[a-c-e]", "-"));
        assert!(m("[a-c-e]", "b"));
        assert!(!m("[a-c-e]", "d"));
        // Reversed ranges vanish: empty never matches, negated empty matches any char.
        assert!(!m("[z-a]", "z"));
        assert!(!m("[z-a]", "-"));
        assert!(m("[!z-a]", "q"));
        assert!(m("[xz-ay]", "y"));
        assert!(!m("[xz-ay]", "b"));
        assert!(m("[c-a-z]", "-"));
        assert!(m("[c-a-z]", "z"));
        assert!(!m("[c-a-z]", "c"));
        // Fusing can leave a leading `!`, which then negates; a join right after it is literal.
        assert!(m("[]-\\!]", "\\"));
        assert!(m("[]-\\!]", "!"));
        assert!(m("[]-\\!-z]", "a"));
        assert!(!m("[]-\\!-z]", "-"));
        assert!(!m("[]-\\!-z]", "z"));
        // Backslash is ordinary.
        assert!(m("a\\b", "a\\b"));
        assert!(m("[\\]", "\\"));
    }

    #[test]
    fn grep_filter_dialect() {
        let g = |p: &str, n: &str| Pattern::new(p, GREP_FILTER).is_match(n);
        assert!(g("[^a].py", "b.py"));
        assert!(!g("[^a].py", "a.py"));
        assert!(g("\\*.py", "*.py"));
        assert!(!g("\\*.py", "a.py"));
        assert!(g("*.{py,txt}", "a.{py,txt}"));
        assert!(!g("*.{py,txt}", "a.py"));
    }

    #[test]
    fn caret_rewrite() {
        assert_eq!(rewrite_caret("[^a].py"), "[!a].py");
        assert_eq!(rewrite_caret("[^]"), "[!]");
        assert_eq!(rewrite_caret("[^a"), "[^a");
        assert_eq!(rewrite_caret("[^"), "[^");
        assert_eq!(rewrite_caret("^[^x]"), "^[!x]");
        assert!(Pattern::new(&rewrite_caret("[^]a]"), PYTHON).is_match("b"));
        assert!(!Pattern::new(&rewrite_caret("[^]a]"), PYTHON).is_match("]"));
    }

    #[test]
    fn literal_detection() {
        assert_eq!(Pattern::new("a.py", PYTHON).literal(), Some("a.py"));
        assert_eq!(Pattern::new("[ab", PYTHON).literal(), Some("[ab"));
        assert_eq!(Pattern::new("a*", PYTHON).literal(), None);
        assert!(has_magic("a[b") && has_magic("?") && !has_magic("a{b}"));
    }
}
