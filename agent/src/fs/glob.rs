//! `glob` (contract §3.7): files under a root whose basename, or whose path relative to the root,
//! matches a pattern with braces, `*`, `?`, `[set]` and `**`.
//!
//! The walk is one thread, top-down, entries in name order: truncation keeps what the walk met first,
//! and name order makes that reproducible (the match-limit quirk of §3.7 depends on it).

/// The matcher is the protocol crate's, shared with the permission rules and the host.
pub(crate) use agentd_protocol::glob::{braces, fnmatch};

use std::collections::HashSet;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use agentd_protocol::fs::{FileInfo, GlobResult, TruncationReason};
use agentd_protocol::permission::Operation;
use nix::errno::Errno;

use self::braces::expand_braces;
use self::fnmatch::{PYTHON, Pattern, has_magic, rewrite_caret};

use agentd_protocol::limits::json_escaped_len;

use crate::cancel::Cancel;
use crate::fs::budget::LIST_BUDGET;
use crate::guard;
use crate::root::{self, Kind, Node, ResolveError, Workspace};

/// The walk stops after this long.
const TIME_BUDGET: Duration = Duration::from_secs(5);
/// The walk stops before examining a file once this many matches are held.
const MAX_MATCHES: usize = 10_000;
/// What a match adds to the reply besides its path.
const RECORD: &str = r#"{"path":"","is_dir":false},"#;
/// More brace expansions than this refuse the pattern.
const MAX_EXPANSIONS: usize = 1000;
/// Top-level directories skipped when the root resolves to `/`.
const SKIPPED_UNDER_SLASH: [&str; 3] = ["proc", "sys", "dev"];

/// Files matching `pattern` under `path` (default `/`). Roots are made absolute (`src` is `/src`),
/// then resolved through the workspace (with `--root`, `/` is the root and escapes are refused).
pub fn glob(pattern: &str, path: Option<&str>, ws: &Workspace, cancel: &Cancel) -> GlobResult {
    glob_within(pattern, path, ws, LIST_BUDGET, cancel)
}

/// [`glob`] with `bytes` for the matches' JSON records.
fn glob_within(
    pattern: &str,
    path: Option<&str>,
    ws: &Workspace,
    bytes: usize,
    cancel: &Cancel,
) -> GlobResult {
    let root = match path {
        None | Some("") => "/".to_owned(),
        Some(p) if p.starts_with('/') => p.to_owned(),
        Some(p) => format!("/{p}"),
    };
    let fail =
        |code: &str| GlobResult { error: Some(format!("Path '{root}': {code}")), ..GlobResult::default() };

    let node = match ws.node(&root, true) {
        Ok(Some(node)) => node,
        Ok(None) => return fail("path_not_found"),
        Err(ResolveError::Escape) => return fail("invalid_path"),
        Err(err) if matches!(err.errno(), Some(Errno::EACCES | Errno::EPERM)) => {
            return fail("permission_denied");
        }
        Err(_) => return fail("path_not_found"),
    };
    if let Some(refusal) = guard::refusal_at(ws, Operation::Read, path.unwrap_or("/"), node.location()) {
        return GlobResult { error: Some(refusal), ..GlobResult::default() };
    }
    if !node.is_dir() {
        return fail("not_a_directory");
    }
    if !node.is_searchable() {
        return fail("permission_denied");
    }
    if pattern.split(['/', '\\']).any(|segment| segment == "..") {
        return fail("invalid_pattern");
    }
    let Some(candidates) = expand_braces(pattern, MAX_EXPANSIONS) else {
        return fail("pattern_too_broad");
    };
    let rule = Rule::new(pattern.contains('/'), &candidates);
    let prefix = root.trim_end_matches('/');
    let mut walk = Walk {
        rule: &rule,
        ws,
        cancel,
        skip_system_dirs: ws.real_path(node.location()) == Path::new("/"),
        root_location: node.location().to_owned(),
        below: guard::Below::new(ws, node.location()),
        prefix,
        start: Instant::now(),
        found: Vec::new(),
        // Each match costs its JSON record: the prefix, `/` and its relative path.
        bytes_left: bytes,
        prefix_cost: RECORD.len() + json_escaped_len(prefix) + 1,
        budget: false,
        unreadable: false,
    };
    walk.run(node);

    let Walk { mut found, budget, unreadable, .. } = walk;
    found.sort_unstable();
    let matches = found.into_iter().map(|rel| FileInfo::new(format!("{prefix}/{rel}"), false)).collect();
    let truncation_reason = if unreadable {
        Some(TruncationReason::Unreadable)
    } else if budget {
        Some(TruncationReason::Budget)
    } else {
        None
    };
    GlobResult {
        error: None,
        matches: Some(matches),
        truncated: truncation_reason.is_some(),
        truncation_reason,
    }
}

/// One segment of a path-rule candidate.
enum Segment {
    /// `**`: any number of components, none starting with `.`.
    Any,
    Name {
        pattern: Pattern,
        dot: bool,
    },
}

impl Segment {
    fn matches(&self, component: &str) -> bool {
        match self {
            Segment::Any => false,
            Segment::Name { pattern, dot } => {
                (*dot || !component.starts_with('.')) && pattern.is_match(component)
            }
        }
    }
}

/// How candidates are matched: the choice is made on the pattern before expansion.
enum Rule {
    /// Basename at any depth. Literal candidates go to a set.
    Basename { literals: HashSet<String>, patterns: Vec<(Pattern, bool)> },
    /// Path relative to the root, anchored there. Literal candidates go to a set of normalised paths.
    Path { literals: HashSet<String>, patterns: Vec<Vec<Segment>> },
}

impl Rule {
    fn new(path_rule: bool, candidates: &[String]) -> Self {
        if !path_rule {
            let mut literals = HashSet::new();
            let mut patterns = Vec::new();
            for candidate in candidates {
                let pattern = Pattern::new(&rewrite_caret(candidate), PYTHON);
                match pattern.literal() {
                    Some(text) => {
                        literals.insert(text.to_owned());
                    }
                    None => patterns.push((pattern, candidate.starts_with('.'))),
                }
            }
            return Rule::Basename { literals, patterns };
        }
        let mut literals = HashSet::new();
        let mut patterns = Vec::new();
        for candidate in candidates {
            let candidate = rewrite_caret(candidate.trim_start_matches('/'));
            let parts: Vec<&str> = candidate.split('/').filter(|s| !s.is_empty()).collect();
            if candidate.ends_with('/') && parts.last() != Some(&"**") {
                continue;
            }
            if !parts.iter().any(|s| has_magic(s)) {
                literals.insert(parts.join("/"));
                continue;
            }
            let segments = parts
                .iter()
                .map(|&s| match s {
                    "**" => Segment::Any,
                    _ => Segment::Name { pattern: Pattern::new(s, PYTHON), dot: s.starts_with('.') },
                })
                .collect();
            patterns.push(segments);
        }
        Rule::Path { literals, patterns }
    }

    /// `rel` is the candidate's path relative to the root, `name` its basename.
    fn matches(&self, rel: &str, name: &str) -> bool {
        match self {
            Rule::Basename { literals, patterns } => {
                literals.contains(name)
                    || patterns.iter().any(|(p, dot)| (*dot || !name.starts_with('.')) && p.is_match(name))
            }
            Rule::Path { literals, patterns } => {
                if literals.contains(rel) {
                    return true;
                }
                if patterns.is_empty() {
                    return false;
                }
                let components: Vec<&str> = rel.split('/').collect();
                patterns.iter().any(|segments| path_matches(segments, &components))
            }
        }
    }
}

/// Segments against components, all consumed (§3.7 path rule). `ok[s][c]`: `segments[s..]` match
/// `components[c..]`.
fn path_matches(segments: &[Segment], components: &[&str]) -> bool {
    let (ns, nc) = (segments.len(), components.len());
    let hidden: Vec<bool> = components.iter().map(|c| c.starts_with('.')).collect();
    let mut ok = vec![vec![false; nc + 1]; ns + 1];
    ok[ns][nc] = true;
    for s in (0..ns).rev() {
        for c in (0..=nc).rev() {
            ok[s][c] = match &segments[s] {
                // A trailing `**` takes at least one component and all that remain.
                Segment::Any if s + 1 == ns => c < nc && !hidden[c..].contains(&true),
                // Zero components, or one more non-dot component and still `**`.
                Segment::Any => ok[s + 1][c] || (c < nc && !hidden[c] && ok[s][c + 1]),
                segment => c < nc && segment.matches(components[c]) && ok[s + 1][c + 1],
            };
        }
    }
    ok[0][0]
}

struct Walk<'a> {
    rule: &'a Rule,
    ws: &'a Workspace,
    cancel: &'a Cancel,
    /// Where the root really is: matched links must resolve below it.
    root_location: PathBuf,
    /// What the permission rules hide below the root, and the root as the client wrote it.
    below: guard::Below<'a>,
    prefix: &'a str,
    skip_system_dirs: bool,
    start: Instant,
    /// Matches as paths relative to the root.
    found: Vec<String>,
    /// Bytes of the reply's budget left for matches.
    bytes_left: usize,
    /// What a match costs besides its relative path.
    prefix_cost: usize,
    budget: bool,
    unreadable: bool,
}

/// A directory still to be walked: its parent, its name there, its path relative to the root.
type Pending = (Rc<Node>, CString, String);

impl Walk<'_> {
    fn out_of_time(&mut self) -> bool {
        // A cancelled walk stops the same way; the server answers `cancelled` instead.
        if self.start.elapsed() > TIME_BUDGET || self.cancel.is_cancelled() {
            self.budget = true;
        }
        self.budget
    }

    /// Top-down, depth first, each directory's files before its subdirectories. Everything is looked
    /// up from its parent's fd through the workspace's resolver: a directory is entered only as what
    /// it is (a component swapped for a link meanwhile is not entered), and a link is judged by what
    /// it leads to inside the workspace.
    fn run(&mut self, root: Node) {
        let mut next = Some((Rc::new(root), String::new()));
        let mut stack: Vec<Pending> = Vec::new();
        loop {
            let (dir, rel) = match next.take() {
                Some(first) => first,
                None => {
                    let Some((parent, name, rel)) = stack.pop() else { return };
                    match self.ws.node_in(&parent, name.as_bytes(), false) {
                        Ok(Some(dir)) if dir.is_dir() => (Rc::new(dir), rel),
                        _ => {
                            self.unreadable = true;
                            continue;
                        }
                    }
                }
            };
            let Some(entries) = self.list(&dir) else { continue };
            if self.out_of_time() {
                return;
            }
            let mut subdirs = Vec::new();
            for child in entries {
                let Some(kind) = child.kind else { continue };
                let name = child.name_lossy();
                let child_rel = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
                // What a link leads to decides; the resolver never lets it lead out of the workspace.
                let target = match kind {
                    Kind::Symlink => self.ws.node_in(&dir, child.name.as_bytes(), true).ok().flatten(),
                    Kind::Dir | Kind::File | Kind::Other => None,
                };
                if kind == Kind::Dir || target.as_ref().is_some_and(Node::is_dir) {
                    // Directory links are listed as directories but not entered.
                    let skipped =
                        rel.is_empty() && self.skip_system_dirs && SKIPPED_UNDER_SLASH.contains(&&*name);
                    if kind == Kind::Dir && !skipped {
                        subdirs.push((Rc::clone(&dir), child.name, child_rel));
                    }
                    continue;
                }
                if self.out_of_time() {
                    return;
                }
                if self.found.len() >= MAX_MATCHES {
                    self.budget = true;
                    return;
                }
                if self.rule.matches(&child_rel, &name)
                    && self.keeps(kind, target.as_ref())
                    && !self.below.hides(
                        &child_rel,
                        &format!("{}/{child_rel}", self.prefix),
                        target.as_ref().map(Node::location),
                    )
                {
                    let cost = self.prefix_cost + json_escaped_len(&child_rel);
                    let Some(left) = self.bytes_left.checked_sub(cost) else {
                        // The reply would pass its budget: truncated like the match limit.
                        self.budget = true;
                        return;
                    };
                    self.bytes_left = left;
                    self.found.push(child_rel);
                }
            }
            stack.extend(subdirs.into_iter().rev());
        }
    }

    /// Entries of `dir` sorted by name; `None` (and the walk marked unreadable) when it cannot be read.
    fn list(&mut self, dir: &Node) -> Option<Vec<root::Child>> {
        match dir.open_dir().and_then(|fd| root::list(&fd)) {
            Ok(mut entries) => {
                entries.sort_by_cached_key(root::Child::name_lossy);
                Some(entries)
            }
            Err(_) => {
                self.unreadable = true;
                None
            }
        }
    }

    /// Whether a matching non-directory resolves to a regular file inside the root.
    fn keeps(&self, kind: Kind, target: Option<&Node>) -> bool {
        match kind {
            // Reached through real directories only, so it is under the root.
            Kind::File => true,
            Kind::Symlink => {
                target.is_some_and(|t| t.is_file() && t.location().starts_with(&self.root_location))
            }
            Kind::Dir | Kind::Other => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    use super::*;

    /// The glob tree `F` of §5.
    fn tree_f() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path();
        let files = [
            "a.py",
            "b.py",
            "c.txt",
            ".env",
            ".hidden.py",
            "A.PY",
            "x.yml",
            "file1.txt",
            "file2.txt",
            "file10.txt",
            "fileA.txt",
            "src/main.py",
            "src/app/util.py",
            "src/.secret/key.py",
            "src/.env",
            ".github/workflows/ci.yml",
            "docs/readme.md",
        ];
        for file in files {
            let path = f.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "x").unwrap();
        }
        fs::create_dir(f.join("dir.py")).unwrap();
        symlink("a.py", f.join("link_in.py")).unwrap();
        symlink("/etc/hostname", f.join("link_out.py")).unwrap();
        symlink("missing", f.join("broken.py")).unwrap();
        symlink("src/", f.join("srclink")).unwrap();
        dir
    }

    fn root_of(dir: &tempfile::TempDir) -> String {
        dir.path().to_str().unwrap().to_owned()
    }

    /// Matches relative to `F/`, in result order; asserts success without truncation.
    fn rel(dir: &tempfile::TempDir, pattern: &str) -> Vec<String> {
        let root = root_of(dir);
        let result = glob(pattern, Some(&root), &Workspace::open("/".into()), &Cancel::default());
        assert_eq!(result.error, None, "{pattern}");
        assert!(!result.truncated, "{pattern}");
        assert_eq!(result.truncation_reason, None);
        let prefix = format!("{root}/");
        result
            .matches
            .unwrap()
            .into_iter()
            .map(|info| {
                assert!(!info.is_dir);
                assert_eq!((info.size, info.modified_at.as_deref()), (None, None));
                info.path.strip_prefix(&prefix).unwrap().to_owned()
            })
            .collect()
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn case_44_basename_and_path_rules() {
        let f = tree_f();
        assert_eq!(
            rel(&f, "*.py"),
            words("a.py b.py link_in.py src/.secret/key.py src/app/util.py src/main.py")
        );
        assert_eq!(rel(&f, "**/*.py"), words("a.py b.py link_in.py src/app/util.py src/main.py"));
        assert_eq!(rel(&f, "/*.py"), words("a.py b.py link_in.py"));
    }

    #[test]
    fn case_45_trailing_slash_and_empty_segments() {
        let f = tree_f();
        assert_eq!(rel(&f, "src/**"), words("src/app/util.py src/main.py"));
        assert_eq!(rel(&f, "src/"), Vec::<String>::new());
        assert_eq!(rel(&f, "src//main.py"), words("src/main.py"));
    }

    #[test]
    fn case_46_star_and_double_star_slash() {
        let f = tree_f();
        let all = "A.PY a.py b.py c.txt docs/readme.md file1.txt file10.txt file2.txt fileA.txt link_in.py \
                   src/app/util.py src/main.py x.yml";
        let with_dots = format!(".github/workflows/ci.yml {all}");
        let with_dots = with_dots.replace("link_in.py", "link_in.py src/.secret/key.py");
        assert_eq!(rel(&f, "*"), words(&with_dots));
        assert_eq!(rel(&f, "**"), words(&with_dots));
        assert_eq!(rel(&f, "**/"), words(all));
    }

    #[test]
    fn case_47_dot_names() {
        let f = tree_f();
        assert_eq!(rel(&f, ".*"), words(".env .hidden.py src/.env"));
        assert_eq!(rel(&f, ".env"), words(".env src/.env"));
        assert_eq!(rel(&f, "*.yml"), words(".github/workflows/ci.yml x.yml"));
        assert_eq!(rel(&f, "**/*.yml"), words("x.yml"));
        assert_eq!(rel(&f, ".github/**/*.yml"), words(".github/workflows/ci.yml"));
    }

    #[test]
    fn case_48_braces_and_sets() {
        let f = tree_f();
        assert_eq!(rel(&f, "{a,b}.py"), words("a.py b.py"));
        assert_eq!(rel(&f, "{a,{b,c}}.*"), words("a.py b.py c.txt"));
        assert_eq!(rel(&f, "{a,b.py"), Vec::<String>::new());
        assert_eq!(rel(&f, "file[1-2].txt"), words("file1.txt file2.txt"));
        assert_eq!(rel(&f, "file?.txt"), words("file1.txt file2.txt fileA.txt"));
        assert_eq!(rel(&f, "[^a].py"), words("b.py"));
        assert_eq!(rel(&f, "[!a].py"), words("b.py"));
        assert_eq!(rel(&f, "*.PY"), words("A.PY"));
    }

    #[test]
    fn case_49_rule_chosen_before_expansion() {
        let f = tree_f();
        assert_eq!(
            rel(&f, "*.{py,md}"),
            words("a.py b.py docs/readme.md link_in.py src/.secret/key.py src/app/util.py src/main.py")
        );
        assert_eq!(rel(&f, "{src/*.py,*.md}"), words("src/main.py"));
    }

    #[test]
    fn case_50_invalid_and_too_broad_patterns() {
        let f = tree_f();
        let root = root_of(&f);
        let base = &Workspace::open("/".into());
        for pattern in ["../*.py", "x\\..\\y", "src/../a.py", ".."] {
            let result = glob(pattern, Some(&root), base, &Cancel::default());
            assert_eq!(result.error, Some(format!("Path '{root}': invalid_pattern")), "{pattern}");
            assert_eq!(result.matches, None);
        }
        let alternatives = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        let ok = glob(&format!("a{{{}}}.py", alternatives(1000)), Some(&root), base, &Cancel::default());
        assert_eq!(ok.error, None);
        assert_eq!(ok.matches.unwrap(), Vec::new());
        let broad = glob(&format!("a{{{}}}.py", alternatives(1001)), Some(&root), base, &Cancel::default());
        assert_eq!(broad.error, Some(format!("Path '{root}': pattern_too_broad")));
        assert_eq!(broad.matches, None);
        // Exponential patterns are refused without being expanded.
        let huge = glob(&"{a,b}".repeat(40), Some(&root), base, &Cancel::default());
        assert_eq!(huge.error, Some(format!("Path '{root}': pattern_too_broad")));
    }

    #[test]
    fn case_51_roots() {
        let f = tree_f();
        let root = root_of(&f);
        let base = &Workspace::open("/".into());
        let link = format!("{root}/srclink");
        let paths = |r: GlobResult| r.matches.unwrap().into_iter().map(|i| i.path).collect::<Vec<_>>();
        assert_eq!(
            paths(glob("*.py", Some(&link), base, &Cancel::default())),
            vec![format!("{link}/.secret/key.py"), format!("{link}/app/util.py"), format!("{link}/main.py")]
        );
        let missing = format!("{root}/missing");
        let result = glob("*.py", Some(&missing), base, &Cancel::default());
        assert_eq!(result.error, Some(format!("Path '{missing}': path_not_found")));
        assert_eq!(result.matches, None);
        let file = format!("{root}/a.py");
        assert_eq!(
            glob("*.py", Some(&file), base, &Cancel::default()).error,
            Some(format!("Path '{file}': not_a_directory"))
        );
        // A relative root gets a leading `/` (not the base) and is reported that way.
        let relative = root.trim_start_matches('/').to_owned() + "/src";
        let result =
            glob("main.py", Some(&relative), &Workspace::open("/nowhere".into()), &Cancel::default());
        assert_eq!(paths(result), vec![format!("/{relative}/main.py")]);
        let result = glob("*.py", Some("srv/case/src/definitely/missing"), base, &Cancel::default());
        assert_eq!(result.error.as_deref(), Some("Path '/srv/case/src/definitely/missing': path_not_found"));
        // A trailing `/` on the root is not doubled.
        let slashed = format!("{root}/src/");
        assert_eq!(
            paths(glob("main.py", Some(&slashed), base, &Cancel::default())),
            vec![format!("{root}/src/main.py")]
        );
    }

    #[test]
    fn root_checks_precede_pattern_checks() {
        let result =
            glob("../x", Some("/definitely/missing"), &Workspace::open("/".into()), &Cancel::default());
        assert_eq!(result.error.as_deref(), Some("Path '/definitely/missing': path_not_found"));
    }

    #[test]
    fn case_52_match_limit_quirk() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        fs::create_dir(dir.path().join("m")).unwrap();
        for i in 0..10_000 {
            fs::write(dir.path().join(format!("m/f{i:05}.py")), "").unwrap();
        }
        let result = glob("*.py", Some(&root), &Workspace::open("/".into()), &Cancel::default());
        assert_eq!(result.error, None);
        let matches = result.matches.unwrap();
        assert_eq!(matches.len(), 10_000);
        assert_eq!(matches[0].path, format!("{root}/m/f00000.py"));
        assert!(!result.truncated);
        assert_eq!(result.truncation_reason, None);

        fs::create_dir(dir.path().join("n")).unwrap();
        fs::write(dir.path().join("n/z.txt"), "").unwrap();
        let result = glob("*.py", Some(&root), &Workspace::open("/".into()), &Cancel::default());
        assert_eq!(result.matches.unwrap().len(), 10_000);
        assert!(result.truncated);
        assert_eq!(result.truncation_reason, Some(TruncationReason::Budget));
    }

    #[test]
    fn case_53_unreadable_subtree() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        fs::create_dir_all(dir.path().join("open")).unwrap();
        fs::write(dir.path().join("open/a.py"), "").unwrap();
        let locked = dir.path().join("locked");
        fs::create_dir(&locked).unwrap();
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
        let result = glob("*.py", Some(&root), &Workspace::open("/".into()), &Cancel::default());
        let locked_root = format!("{root}/locked");
        let locked_result =
            glob("*.py", Some(&locked_root), &Workspace::open("/".into()), &Cancel::default());
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
        let paths: Vec<_> = result.matches.unwrap().into_iter().map(|i| i.path).collect();
        assert_eq!(paths, vec![format!("{root}/open/a.py")]);
        if nix::unistd::geteuid().is_root() {
            // Root reads mode-000 directories: nothing is unreadable.
            assert!(!result.truncated);
            assert_eq!(locked_result.error, None);
            assert_eq!(locked_result.matches, Some(Vec::new()));
        } else {
            assert!(result.truncated);
            assert_eq!(result.truncation_reason, Some(TruncationReason::Unreadable));
            assert_eq!(locked_result.error, Some(format!("Path '{locked_root}': permission_denied")));
            assert_eq!(locked_result.matches, None);
        }
    }

    #[test]
    fn brace_expansion_rules() {
        let e = |p: &str| expand_braces(p, MAX_EXPANSIONS).unwrap();
        assert_eq!(e("{a,b}.py"), ["a.py", "b.py"]);
        assert_eq!(e("{a,{b,c}}.*"), ["a.*", "b.*", "c.*"]);
        assert_eq!(e("{a,b.py"), ["{a,b.py"]);
        assert_eq!(e("{a,b.py{c,d}"), ["{a,b.py{c,d}"]);
        assert_eq!(e("{a}{b,c}"), ["{a}b", "{a}c"]);
        assert_eq!(e("{{a,b}}"), ["{{a,b}}"]);
        assert_eq!(e("x{,y}"), ["x", "xy"]);
        assert_eq!(e("{}"), ["{}"]);
        assert_eq!(e("{a,b}{c,d}"), ["ac", "ad", "bc", "bd"]);
        assert_eq!(e("{a,b}{c"), ["a{c", "b{c"]);
        assert_eq!(e("a\\{b,c}"), ["a\\b", "a\\c"]);
        assert_eq!(e("{é,ü}"), ["é", "ü"]);
        assert_eq!(expand_braces(&format!("{{{}}}", ",".repeat(999)), 1000).map(|v| v.len()), Some(1000));
        assert_eq!(expand_braces(&format!("{{{}}}", ",".repeat(1000)), 1000), None);
    }

    #[test]
    fn path_rule_details() {
        let rule = Rule::new(true, &["a/**/b".into(), "x/**".into(), ".d/*".into()]);
        assert!(rule.matches("a/b", "b"));
        assert!(rule.matches("a/1/2/b", "b"));
        assert!(!rule.matches("a/.h/b", "b"));
        assert!(rule.matches("x/y/z", "z"));
        assert!(!rule.matches("x", "x"));
        assert!(!rule.matches("x/.y", ".y"));
        assert!(!rule.matches("x/y/.z", ".z"));
        assert!(rule.matches(".d/f", "f"));
        assert!(!rule.matches(".d/.f", ".f"));
        let deep = Rule::new(true, &["**/**/**/**/**/**/**/**/**/**/z".into()]);
        assert!(deep.matches(&format!("{}z", "d/".repeat(40)), "z"));
        assert!(!deep.matches(&format!("{}y", "d/".repeat(40)), "y"));
    }

    #[test]
    fn fifos_and_outside_links_are_never_returned() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        nix::unistd::mkfifo(&dir.path().join("p.py"), nix::sys::stat::Mode::from_bits_truncate(0o644))
            .unwrap();
        fs::create_dir(dir.path().join("in")).unwrap();
        fs::write(dir.path().join("in/t.py"), "").unwrap();
        symlink(dir.path().join("in/t.py"), dir.path().join("abs.py")).unwrap();
        symlink(dir.path().join("in"), dir.path().join("d.py")).unwrap();
        let paths: Vec<_> =
            glob("*.py", Some(&format!("{root}/")), &Workspace::open("/".into()), &Cancel::default())
                .matches
                .unwrap()
                .into_iter()
                .map(|i| i.path)
                .collect();
        assert_eq!(paths, vec![format!("{root}/abs.py"), format!("{root}/in/t.py")]);
        let paths: Vec<_> =
            glob("*.py", Some(&format!("{root}/in")), &Workspace::open("/".into()), &Cancel::default())
                .matches
                .unwrap()
                .into_iter()
                .map(|i| i.path)
                .collect();
        assert_eq!(paths, vec![format!("{root}/in/t.py")]);
    }

    #[test]
    fn the_reply_budget_truncates_like_the_match_limit() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir);
        for i in 0..40 {
            fs::write(dir.path().join(format!("f{i:02}\"q\".txt")), "x").unwrap();
        }
        let ws = Workspace::open("/".into());
        let all = glob("*.txt", Some(&root), &ws, &Cancel::default()).matches.unwrap();
        assert_eq!(all.len(), 40);
        let cost =
            |n: usize| all[..n].iter().map(|m| serde_json::to_string(m).unwrap().len() + 1).sum::<usize>();
        let exact = glob_within("*.txt", Some(&root), &ws, cost(40), &Cancel::default());
        assert_eq!((exact.truncated, exact.truncation_reason), (false, None));
        assert_eq!(exact.matches.unwrap(), all);
        for bytes in [cost(40) - 1, cost(10), cost(11) - 1] {
            let cut = glob_within("*.txt", Some(&root), &ws, bytes, &Cancel::default());
            assert_eq!((cut.truncated, cut.truncation_reason), (true, Some(TruncationReason::Budget)));
            let kept = cut.matches.unwrap();
            assert_eq!(kept, all[..kept.len()], "a flat walk keeps the first in name order");
            assert_eq!(cost(kept.len()) <= bytes, cost(kept.len() + 1) > bytes);
        }
    }
}
