//! Path permissions, decided once for the file verbs and for the kernel: the ordered rules of a
//! profile ([`PermissionRule`], deepagents' `FilesystemPermission` shape), compiled ([`Permissions`])
//! and asked, pure, whether an operation on a path is denied ([`Permissions::denial`]), and turned
//! into the subtrees landlock must withhold or grant back ([`boundaries`]).
//!
//! Matching is deepagents' (`wcmatch.globmatch` with `BRACE | GLOBSTAR`): braces expand first; `*`,
//! `?` and `[set]` match within one path segment; a `**` segment matches any number of segments
//! (inside a glob none too, `/ws/**/*.env` matching `/ws/x.env`; at its end at least one, so
//! `/ws/src/**` matches beneath `/ws/src`, not `/ws/src` itself); wildcards do not
//! match a name that starts with `.`. One deliberate difference: for a **deny** rule wildcards do
//! match dot names. deepagents' `deny /ws/src/**` leaves `/ws/src/.env` writable; the kernel cannot
//! tell dot names apart, and a deny is never made looser than its text. Allow rules keep
//! deepagents' reading, so agentd never allows what deepagents' own check would deny.

use std::path::{Path, PathBuf};

use agentd_protocol::permission::{Operation, PermissionMode, PermissionRule};

use agentd_protocol::glob::braces::expand_braces;
use agentd_protocol::glob::{Glob, Segment};

/// More brace expansions than this in one rule path refuse the profile.
pub use agentd_protocol::glob::MAX_EXPANSIONS;

/// The compiled rules, in the order they apply.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    rules: Vec<Compiled>,
}

#[derive(Debug, Clone)]
struct Compiled {
    rule: PermissionRule,
    /// One per pattern per brace expansion, with the pattern it came from.
    globs: Vec<(usize, Glob)>,
}

/// Why an operation is denied: the rule (its place in the list) and its patterns that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub rule: usize,
    pub patterns: Vec<String>,
}

/// What a glob covers, for the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// A plain path, or a plain path and `/**`: the subtree at this path (for `/p/**`, `/p` itself
    /// is included: its entries are what the rule is about).
    Prefix(PathBuf),
    /// Anything else: what matches must be looked for beneath `anchor`, its wildcard-free start.
    Pattern { anchor: PathBuf },
}

impl Permissions {
    /// Compiles validated rules (see [`PermissionRule::validate`]); a path with more than
    /// [`MAX_EXPANSIONS`] brace expansions is refused.
    pub fn new(rules: &[PermissionRule]) -> Result<Self, String> {
        let mut compiled = Vec::with_capacity(rules.len());
        for rule in rules {
            rule.validate()?;
            let mut globs = Vec::new();
            for (at, path) in rule.paths.iter().enumerate() {
                let expanded = expand_braces(path, MAX_EXPANSIONS).ok_or_else(|| {
                    format!("permission path `{path}` expands to more than {MAX_EXPANSIONS} paths")
                })?;
                globs.extend(expanded.iter().map(|one| (at, Glob::new(one))));
            }
            compiled.push(Compiled { rule: rule.clone(), globs });
        }
        Ok(Self { rules: compiled })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in order.
    pub fn rules(&self) -> impl Iterator<Item = &PermissionRule> {
        self.rules.iter().map(|c| &c.rule)
    }

    /// The first rule about `operation` matching `path` (absolute, normalized: no `.`, `..` or
    /// doubled `/`) decides; `Some` when it denies. No rule matching: allowed.
    pub fn denial(&self, operation: Operation, path: &str) -> Option<Denial> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        for (index, compiled) in self.rules.iter().enumerate() {
            if !compiled.rule.applies_to(operation) {
                continue;
            }
            let dots = compiled.rule.mode == PermissionMode::Deny;
            let mut matched: Vec<String> = Vec::new();
            for (at, glob) in &compiled.globs {
                let pattern = &compiled.rule.paths[*at];
                if !matched.contains(pattern) && glob.matches(&segments, dots) {
                    matched.push(pattern.clone());
                }
            }
            if !matched.is_empty() {
                return match compiled.rule.mode {
                    PermissionMode::Allow => None,
                    PermissionMode::Deny => Some(Denial { rule: index, patterns: matched }),
                };
            }
        }
        None
    }

    pub fn denies(&self, operation: Operation, path: &str) -> bool {
        self.denial(operation, path).is_some()
    }

    /// The patterns of deny rules about `operation` that could match `path` or anything beneath
    /// it, whatever the order of the rules (a recursive delete removes all of it; deepagents refuses
    /// it the same way): a pattern whose wildcard-free start lies beneath `path` or above it.
    pub fn denied_within(&self, operation: Operation, path: &str) -> Vec<String> {
        let base = Path::new(path);
        let mut out: Vec<String> = Vec::new();
        for compiled in &self.rules {
            if compiled.rule.mode != PermissionMode::Deny || !compiled.rule.applies_to(operation) {
                continue;
            }
            for (at, glob) in &compiled.globs {
                let start = match shape(glob) {
                    Shape::Prefix(p) => p,
                    Shape::Pattern { anchor } => anchor,
                };
                let pattern = &compiled.rule.paths[*at];
                if (start.starts_with(base) || base.starts_with(&start)) && !out.contains(pattern) {
                    out.push(pattern.clone());
                }
            }
        }
        out
    }

    /// Each rule's globs' shapes, by rule.
    pub fn shapes(&self) -> Vec<Vec<Shape>> {
        self.rules.iter().map(|c| c.globs.iter().map(|(_, g)| shape(g)).collect()).collect()
    }

    /// Whether `path` (absolute, normalized) matches a glob of rule `index`, as the kernel plan reads
    /// it (dot names matched for deny rules).
    pub fn rule_matches(&self, index: usize, path: &str) -> bool {
        let Some(compiled) = self.rules.get(index) else { return false };
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let dots = compiled.rule.mode == PermissionMode::Deny;
        compiled.globs.iter().any(|(_, glob)| glob.matches(&segments, dots))
    }
}

/// What `glob` covers, for the kernel.
fn shape(glob: &Glob) -> Shape {
    let mut prefix = PathBuf::from("/");
    for (i, segment) in glob.segments().iter().enumerate() {
        match segment {
            Segment::Name(pattern) => match pattern.literal() {
                Some(name) => prefix.push(name),
                None => return Shape::Pattern { anchor: prefix },
            },
            Segment::Any if i + 1 == glob.segments().len() => return Shape::Prefix(prefix),
            Segment::Any => return Shape::Pattern { anchor: prefix },
        }
    }
    Shape::Prefix(prefix)
}

/// Where, for one operation, what the rules decide changes: the subtrees landlock withholds
/// (`false`) or grants back inside a withheld one (`true`), shallowest first.
///
/// `targets[i]`: the subtrees rule `i` covers for the kernel (its prefixes, or the paths its
/// patterns matched when the command started), with the rule's mode and whether it is about the
/// operation. A subtree's decision is the first rule covering it (its own path or an ancestor);
/// no rule: allowed. A boundary is a subtree whose decision differs from the nearest covered
/// ancestor's.
pub fn boundaries(targets: &[(PermissionMode, bool, Vec<PathBuf>)]) -> Vec<(PathBuf, bool)> {
    let mut nodes: Vec<&PathBuf> =
        targets.iter().filter(|(_, applies, _)| *applies).flat_map(|(_, _, paths)| paths).collect();
    nodes.sort_by_key(|p| (p.components().count(), p.as_os_str().to_owned()));
    nodes.dedup();
    let decide = |node: &Path| {
        targets
            .iter()
            .filter(|(_, applies, _)| *applies)
            .find(|(_, _, paths)| paths.iter().any(|p| node.starts_with(p)))
            .is_none_or(|(mode, _, _)| *mode == PermissionMode::Allow)
    };
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    for node in nodes {
        let allowed = decide(node);
        let parent = node
            .ancestors()
            .skip(1)
            .find_map(|a| {
                targets.iter().any(|(_, ap, ps)| *ap && ps.iter().any(|p| p == a)).then(|| decide(a))
            })
            .unwrap_or(true);
        if allowed != parent {
            out.push((node.clone(), allowed));
        }
    }
    out
}

/// Whether `path` (real, absolute) is allowed where `boundaries` (what [`boundaries`] returns for
/// one operation) say: the deepest boundary at or above it decides; none, allowed. Pure.
pub fn allowed_at(boundaries: &[(PathBuf, bool)], path: &Path) -> bool {
    boundaries
        .iter()
        .filter(|(at, _)| path.starts_with(at))
        .max_by_key(|(at, _)| at.components().count())
        .is_none_or(|(_, allowed)| *allowed)
}

/// `path` made absolute against `cwd` and normalized by its text (`.`, `..`, doubled `/`), as
/// deepagents' `validate_path` does; what the rules are matched against, with the real path.
pub fn lexical(path: &str, cwd: &Path) -> String {
    let joined = if path.starts_with('/') { PathBuf::from(path) } else { cwd.join(path) };
    let mut out: Vec<&str> = Vec::new();
    let text = joined.to_string_lossy().into_owned();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            part => out.push(part),
        }
    }
    let mut normal = String::with_capacity(text.len());
    for part in out {
        normal.push('/');
        normal.push_str(part);
    }
    if normal.is_empty() { "/".to_owned() } else { normal }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(mode: PermissionMode, ops: &[Operation], paths: &[&str]) -> PermissionRule {
        PermissionRule {
            operations: ops.to_vec(),
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            mode,
        }
    }

    use Operation::{Read, Write};
    use PermissionMode::{Allow, Deny};

    /// The cases were checked against wcmatch 10 (`globmatch(path, pattern, flags=BRACE|GLOBSTAR)`),
    /// for an allow rule; deny rules differ only on dot names.
    #[test]
    fn globs_match_as_deepagents_matches_them() {
        let cases = [
            ("/ws/src", "/ws/src/**", false),
            ("/ws/src/a", "/ws/src/**", true),
            ("/ws/src/a/b/c", "/ws/src/**", true),
            ("/ws/src/.env", "/ws/src/**", false),
            ("/ws/.git/x", "/ws/**", false),
            ("/ws/a/.env", "/ws/**/*.env", false),
            ("/ws/a/x.env", "/ws/**/*.env", true),
            ("/ws/x.env", "/ws/**/*.env", true),
            ("/ws/src", "/ws/src", true),
            ("/ws/src/a", "/ws/src", false),
            ("/ws/a.py", "/ws/*.{py,txt}", true),
            ("/ws/a.txt", "/ws/*.{py,txt}", true),
            ("/ws", "/ws/**", false),
            ("/x", "/**", true),
            ("/.x", "/**", false),
            ("/.x", "/.*", true),
            ("/a/b", "/*/b", true),
            ("/ws/ab", "/ws/a?", true),
            ("/ws/a/b", "/ws/a?b", false),
            ("/ws/ac", "/ws/a[!b]", true),
            ("/ws/ac", "/ws/a[^c]", false),
        ];
        for (path, pattern, allowed_match) in cases {
            let allow = Permissions::new(&[rule(Allow, &[Read], &[pattern])]).unwrap();
            let globs = &allow.rules[0].globs;
            assert_eq!(
                globs
                    .iter()
                    .any(|(_, g)| g
                        .matches(&path.split('/').filter(|s| !s.is_empty()).collect::<Vec<_>>(), false)),
                allowed_match,
                "{path} ~ {pattern}"
            );
        }
        // A deny rule reaches dot names too.
        let deny = Permissions::new(&[rule(Deny, &[Write], &["/ws/src/**"])]).unwrap();
        assert!(deny.denies(Write, "/ws/src/.env"));
        assert!(deny.denies(Write, "/ws/src/.git/config"));
        assert!(!deny.denies(Read, "/ws/src/.env"));
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let rules = Permissions::new(&[
            rule(Allow, &[Write], &["/ws/src/gen/**"]),
            rule(Deny, &[Write], &["/ws/src/**"]),
            rule(Deny, &[Read, Write], &["/ws/**/*.env"]),
        ])
        .unwrap();
        assert!(!rules.denies(Write, "/ws/src/gen/x.rs"));
        assert_eq!(
            rules.denial(Write, "/ws/src/x.rs"),
            Some(Denial { rule: 1, patterns: vec!["/ws/src/**".into()] })
        );
        assert!(!rules.denies(Write, "/ws/other/x.rs"));
        assert!(rules.denies(Read, "/ws/a/.env") || rules.denies(Read, "/ws/a/b.env"));
        assert!(rules.denies(Read, "/ws/a/b.env"));
        // An earlier allow wins over a later deny, even for the deny's own files.
        assert!(!rules.denies(Write, "/ws/src/gen/b.env"));
    }

    #[test]
    fn shapes_tell_prefixes_from_patterns() {
        let rules = Permissions::new(&[rule(
            Deny,
            &[Write],
            &["/ws/src/**", "/ws/.env", "/ws/**/*.env", "/a/{b,c}/**", "/x/*/y"],
        )])
        .unwrap();
        assert_eq!(
            rules.shapes()[0],
            vec![
                Shape::Prefix("/ws/src".into()),
                Shape::Prefix("/ws/.env".into()),
                Shape::Pattern { anchor: "/ws".into() },
                Shape::Prefix("/a/b".into()),
                Shape::Prefix("/a/c".into()),
                Shape::Pattern { anchor: "/x".into() },
            ]
        );
        assert_eq!(
            rules.denied_within(Write, "/ws"),
            ["/ws/src/**", "/ws/.env", "/ws/**/*.env"],
            "deleting /ws deletes what they match"
        );
        assert!(rules.denied_within(Write, "/elsewhere").is_empty());
        assert_eq!(rules.denied_within(Write, "/ws/src/a"), ["/ws/src/**", "/ws/**/*.env"]);
    }

    #[test]
    fn boundaries_are_where_the_decision_changes() {
        let p = |s: &str| PathBuf::from(s);
        // allow /ws/src/gen, deny /ws/src, deny /ws/src/gen/secret (shadowed by the allow).
        let targets = vec![
            (Allow, true, vec![p("/ws/src/gen")]),
            (Deny, true, vec![p("/ws/src")]),
            (Deny, true, vec![p("/ws/src/gen/secret")]),
            (Deny, false, vec![p("/ws/other")]),
        ];
        assert_eq!(boundaries(&targets), vec![(p("/ws/src"), false), (p("/ws/src/gen"), true)]);
        // A deny beneath an earlier allow that covers it never applies.
        let shadowed = vec![(Allow, true, vec![p("/ws")]), (Deny, true, vec![p("/ws/src")])];
        assert_eq!(boundaries(&shadowed), vec![]);
        // deny /ws/secret first, allow /ws, deny /: everything but /ws is denied, and /ws/secret.
        let nested = vec![
            (Deny, true, vec![p("/ws/secret")]),
            (Allow, true, vec![p("/ws")]),
            (Deny, true, vec![p("/")]),
        ];
        assert_eq!(boundaries(&nested), vec![(p("/"), false), (p("/ws"), true), (p("/ws/secret"), false)]);
    }

    #[test]
    fn the_deepest_boundary_above_a_path_decides() {
        let p = |s: &str| PathBuf::from(s);
        let found = vec![(p("/ws/src"), false), (p("/ws/src/gen"), true), (p("/ws/src/gen/secret"), false)];
        assert!(allowed_at(&found, Path::new("/ws")));
        assert!(allowed_at(&found, Path::new("/ws/srcx")), "by component, not by text");
        assert!(!allowed_at(&found, Path::new("/ws/src")), "the subtree's own directory");
        assert!(!allowed_at(&found, Path::new("/ws/src/a")));
        assert!(allowed_at(&found, Path::new("/ws/src/gen/x")));
        assert!(!allowed_at(&found, Path::new("/ws/src/gen/secret/y")));
        assert!(allowed_at(&[], Path::new("/ws")));
    }

    #[test]
    fn paths_are_normalized_by_their_text() {
        let cwd = Path::new("/ws");
        assert_eq!(lexical("a/../b/./c", cwd), "/ws/b/c");
        assert_eq!(lexical("/x//y/", cwd), "/x/y");
        assert_eq!(lexical("../../..", cwd), "/");
        assert_eq!(lexical(".", cwd), "/ws");
    }
}
