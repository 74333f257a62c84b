//! The module trees read top-down: in every crate of the workspace, at every level of the module
//! tree, the sibling modules (each taken with its whole subtree) do not refer to each other in a
//! circle.
//!
//! How it is checked, without a compiler plugin: each module file is read for the paths it names
//! through `crate::`, `super::` and `self::` (in `use` trees and in expressions; comments and string
//! literals are skipped). A path is resolved to the module that defines its item by walking the
//! module tree from the crate root and following `pub use` re-exports (`pub use a::B;`, `pub use
//! a::{B, C as D};`). Then, for each module `P` with children `C1..Cn`, `Ci` depends on `Cj` when a
//! file under `Ci` names an item under `Cj`; a cycle in that graph fails the test, with the
//! references that make it. A parent using its own children, and a child using its parent, are not
//! sibling edges: a module and its insides are one unit one level up.
//!
//! `cargo test -p agentd-tests --test layers -- --nocapture` prints every cycle found.

#![expect(clippy::unwrap_used, reason = "a failed read aborts the test with its message")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agentd_tests::sources::{Declared, declared_modules};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// A module path from the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// One file module of a crate.
struct Module {
    file: PathBuf,
    /// Text with comments and string literals blanked out.
    code: String,
    children: Vec<String>,
}

struct Crate {
    name: String,
    modules: BTreeMap<ModPath, Module>,
}

/// Blanks comments, string and char literals (keeping newlines), so that paths in docs or messages
/// are not read as references.
fn strip(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(bytes.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(bytes.len(), |n| i + n + 2);
            out.extend(source[i..end].chars().filter(|c| *c == '\n'));
            i = end;
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            let end = source[body..].find(&close).map_or(bytes.len(), |n| body + n + close.len());
            out.extend(source[i..end].chars().filter(|c| *c == '\n'));
            out.push_str("\"\"");
            i = end;
        } else if bytes[i] == b'"' || (bytes[i] == b'b' && rest.starts_with("b\"")) {
            let mut j = if bytes[i] == b'b' { i + 2 } else { i + 1 };
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.extend(source[i..j.min(bytes.len())].chars().filter(|c| *c == '\n'));
            out.push_str("\"\"");
            i = (j + 1).min(bytes.len());
        } else if bytes[i] == b'\'' && char_literal_len(rest).is_some() {
            out.push_str("' '");
            i += char_literal_len(rest).unwrap_or(1);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Blanks the modules under `#[cfg(test)]` (inline ones and `mod tests;` declarations): what
/// only tests use is not a dependency of the code.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find("#[cfg(test)]") {
        let start = from + found;
        let after = start + "#[cfg(test)]".len();
        let item = out[after..].trim_start();
        let item_at = out.len() - item.len();
        let words: Vec<&str> = item.split_whitespace().take(3).collect();
        let is_mod = words.first() == Some(&"mod")
            || (words.first().is_some_and(|w| w.starts_with("pub")) && words.get(1) == Some(&"mod"));
        from = after;
        if !is_mod {
            continue;
        }
        let Some(end_at) = item.find([';', '{']) else { continue };
        let end = if item.as_bytes()[end_at] == b';' {
            item_at + end_at + 1
        } else {
            let mut level = 0usize;
            let mut end = out.len();
            for (i, c) in out[item_at + end_at..].char_indices() {
                match c {
                    '{' => level += 1,
                    '}' => {
                        level -= 1;
                        if level == 0 {
                            end = item_at + end_at + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        let blank: String = out[start..end].chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect();
        out.replace_range(start..end, &blank);
        from = end;
    }
    out
}

/// `r"`, `r#"`, `br##"` …: the number of hashes of a raw string starting here.
fn raw_string_start(rest: &str) -> Option<usize> {
    let after = rest.strip_prefix("br").or_else(|| rest.strip_prefix('r'))?;
    let hashes = after.len() - after.trim_start_matches('#').len();
    after[hashes..].starts_with('"').then_some(hashes)
}

/// The byte length of a char literal starting here (`'a'`, `'\n'`, `'\u{1F}'`), `None` for a
/// lifetime.
fn char_literal_len(rest: &str) -> Option<usize> {
    let body = &rest[1..];
    if let Some(escaped) = body.strip_prefix('\\') {
        let end = escaped.find('\'')?;
        return (end <= 10).then_some(end + 3);
    }
    let c = body.chars().next()?;
    body[c.len_utf8()..].starts_with('\'').then_some(c.len_utf8() + 2)
}

fn load_crate(name: &str, root: &Path) -> Crate {
    let mut modules = BTreeMap::new();
    let mut queue = vec![(ModPath::new(), root.to_owned(), true)];
    while let Some((path, file, mod_rs)) = queue.pop() {
        let raw = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = without_test_modules(&strip(&raw));
        let mut children = Vec::new();
        let code_lines: Vec<&str> = code.lines().collect();
        // Declarations the test-module blanking removed (`#[cfg(test)] mod tests;`) do not count.
        let declared = declared_modules(&raw, &file, mod_rs)
            .into_iter()
            .filter(|d| code_lines.get(d.line).is_some_and(|line| line.contains("mod")));
        for Declared { name: child, file: child_file, .. } in declared {
            let child_mod_rs = child_file.file_name().is_some_and(|f| f == "mod.rs")
                || raw.contains(&format!("#[path = \"{}", child_file.file_name().unwrap().to_string_lossy()));
            let mut child_path = path.clone();
            child_path.push(child.clone());
            children.push(child);
            queue.push((child_path, child_file, child_mod_rs));
        }
        modules.insert(path, Module { file, code, children });
    }
    Crate { name: name.to_owned(), modules }
}

/// Every path a file names from `crate::`, `super::` or `self::`, as (start, segments): `use`
/// trees are expanded (`crate::a::{b, c::d}` gives `a::b` and `a::c::d`). The start is the module
/// the path is relative to: the number of `super`s, after the inline modules (`mod tests { … }`)
/// open at that point are accounted for.
fn references(code: &str) -> Vec<(usize, bool, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    // Brace depth, and the depths at which inline modules opened.
    let mut depth = 0usize;
    let mut inline = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                let before = code[..i].trim_end();
                let word_start =
                    before.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |p| p + 1);
                let head = before[..word_start].trim_end();
                if head.ends_with("mod")
                    && !head[..head.len() - 3].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                {
                    inline.push(depth);
                }
                depth += 1;
                i += 1;
                continue;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        let boundary =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        let rest = &code[i..];
        let start = ["crate", "super", "self"]
            .into_iter()
            .find(|k| rest.starts_with(k) && rest[k.len()..].trim_start().starts_with("::"));
        let (true, Some(keyword)) = (boundary, start) else {
            i += 1;
            continue;
        };
        // Count leading `super::`s (and a `self::` or `crate::`).
        let mut cursor = i;
        let mut supers = 0usize;
        let absolute = keyword == "crate";
        loop {
            let rest = &code[cursor..];
            let Some(k) = ["crate", "super", "self"].into_iter().find(|k| {
                rest.starts_with(k)
                    && rest[k.len()..].trim_start().starts_with("::")
                    && !rest[k.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            }) else {
                break;
            };
            if k == "super" {
                supers += 1;
            }
            let after = &rest[k.len()..];
            cursor += k.len() + (after.len() - after.trim_start().len()) + 2;
            cursor += code[cursor..].len() - code[cursor..].trim_start().len();
        }
        let (paths, end) = use_tree(code, cursor);
        // Inline modules shift `super` and `self` by their depth; `crate` is absolute.
        let up = if absolute { 0 } else { supers.saturating_sub(inline.len()) };
        for segments in paths {
            found.push((up, absolute, segments));
        }
        i = end.max(i + 1);
    }
    found
}

/// Parses a use tree (or an expression path) at `at`: the leaf paths and where it ended.
fn use_tree(code: &str, mut at: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        let rest = &code[at..];
        if rest.starts_with('{') {
            let mut paths = Vec::new();
            let mut cursor = at + 1;
            loop {
                let skipped = &code[cursor..];
                cursor += skipped.len() - skipped.trim_start().len();
                if code[cursor..].starts_with('}') {
                    cursor += 1;
                    break;
                }
                if code[cursor..].starts_with(',') {
                    cursor += 1;
                    continue;
                }
                if code[cursor..].starts_with("self")
                    && !code[cursor + 4..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                {
                    paths.push(prefix.clone());
                    cursor += 4;
                    continue;
                }
                let (inner_paths, end) = use_tree(code, cursor);
                if end == cursor {
                    // Not a path (`*` or something unexpected): skip a character.
                    cursor += 1;
                    continue;
                }
                for p in inner_paths {
                    let mut full = prefix.clone();
                    full.extend(p);
                    paths.push(full);
                }
                cursor = end;
            }
            return (paths, cursor);
        }
        let ident_len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if ident_len == 0 {
            return (if prefix.is_empty() { Vec::new() } else { vec![prefix] }, at);
        }
        prefix.push(rest[..ident_len].to_owned());
        at += ident_len;
        let after = &code[at..];
        let trimmed = after.trim_start();
        if let Some(next) = trimmed.strip_prefix("::") {
            let next_trimmed = next.trim_start();
            // A turbofish or a glob ends the path here.
            if next_trimmed.starts_with('<') || next_trimmed.starts_with('*') {
                return (vec![prefix], at);
            }
            at = code.len() - next_trimmed.len();
            continue;
        }
        return (vec![prefix], at);
    }
}

/// A crate's references resolved: file module -> (target module, the path as written).
fn resolve_all(krate: &Crate) -> Vec<(ModPath, ModPath, String)> {
    let mut edges = Vec::new();
    for (from, module) in &krate.modules {
        for (up, absolute, segments) in references(&module.code) {
            let base: ModPath = if absolute {
                Vec::new()
            } else if up > from.len() {
                continue;
            } else {
                from[..from.len() - up].to_vec()
            };
            let target = resolve(krate, &base, &segments, 0);
            let written = format!(
                "{}{}",
                if absolute {
                    "crate::".to_owned()
                } else if up == 0 {
                    "self::".to_owned()
                } else {
                    "super::".repeat(up)
                },
                segments.join("::")
            );
            edges.push((from.clone(), target, written));
        }
    }
    edges
}

/// The module defining the item at `segments` below `base`, following re-exports.
fn resolve(krate: &Crate, base: &ModPath, segments: &[String], depth: usize) -> ModPath {
    let mut current = base.clone();
    for (n, segment) in segments.iter().enumerate() {
        let Some(module) = krate.modules.get(&current) else { return current };
        if module.children.contains(segment) {
            current.push(segment.clone());
            continue;
        }
        if depth < 8
            && let Some((up, absolute, source)) = reexport(&module.code, segment)
        {
            let from = if absolute {
                Vec::new()
            } else if up > current.len() {
                return current;
            } else {
                current[..current.len() - up].to_vec()
            };
            let mut rest = source;
            rest.extend(segments[n + 1..].iter().cloned());
            return resolve(krate, &from, &rest, depth + 1);
        }
        return current;
    }
    current
}

/// Where a module's `pub use` takes `name` from, if it re-exports it: (supers, absolute, path).
fn reexport(code: &str, name: &str) -> Option<(usize, bool, Vec<String>)> {
    for (at, _) in code.match_indices("use ") {
        let line_start = code[..at].rfind(['\n', ';', '}', '{']).map_or(0, |p| p + 1);
        let head = code[line_start..at].trim();
        let visible = head == "pub" || (head.starts_with("pub(") && head.ends_with(')'));
        if !visible {
            continue;
        }
        let body_start = at + 4;
        let body = &code[body_start..];
        let body_trimmed = body.trim_start();
        let offset = body_start + body.len() - body_trimmed.len();
        let (mut up, mut absolute, mut cursor) = (0usize, false, offset);
        loop {
            let rest = &code[cursor..];
            if let Some(r) = rest.strip_prefix("crate::") {
                absolute = true;
                cursor = code.len() - r.len();
            } else if let Some(r) = rest.strip_prefix("super::") {
                up += 1;
                cursor = code.len() - r.len();
            } else if let Some(r) = rest.strip_prefix("self::") {
                cursor = code.len() - r.len();
            } else {
                break;
            }
        }
        let end = code[cursor..].find(';').map_or(code.len(), |p| cursor + p);
        for (path, alias) in use_leaves(&code[cursor..end]) {
            if alias == name {
                return Some((up, absolute, path));
            }
        }
    }
    None
}

/// The leaves of a use tree's text, each with the name it is bound to (`a::{B, C as D}` gives
/// `(a::B, B)` and `(a::C, D)`).
fn use_leaves(tree: &str) -> Vec<(Vec<String>, String)> {
    fn walk(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let mut prefix = prefix.to_vec();
            prefix
                .extend(tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned));
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut level = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        walk(&inner[start..i], &prefix, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            walk(&inner[start..], &prefix, out);
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((path, alias)) => (path.trim(), alias.trim().to_owned()),
            None => (tree, tree.rsplit("::").next().unwrap_or("").trim().to_owned()),
        };
        if path.is_empty() || path.ends_with('*') {
            return;
        }
        let mut full = prefix.to_vec();
        full.extend(path.split("::").map(str::trim).map(str::to_owned));
        if full.last().is_some_and(|l| l == "self") {
            full.pop();
        }
        out.push((full, alias));
    }
    let mut out = Vec::new();
    walk(tree, &[], &mut out);
    out
}

/// The cycles among siblings, at every level: one line per cycle, with the references that make it.
fn cycles(krate: &Crate) -> Vec<String> {
    let edges = resolve_all(krate);
    let mut found = Vec::new();
    for (parent, module) in &krate.modules {
        let children = &module.children;
        if children.len() < 2 {
            continue;
        }
        // child -> child -> an example reference.
        let mut graph: BTreeMap<&str, BTreeMap<&str, String>> = BTreeMap::new();
        for (from, to, written) in &edges {
            let (Some(a), Some(b)) = (child_under(parent, from), child_under(parent, to)) else { continue };
            if a != b {
                let file =
                    krate.modules[from].file.strip_prefix(workspace()).unwrap_or(&krate.modules[from].file);
                graph
                    .entry(a)
                    .or_default()
                    .entry(b)
                    .or_insert_with(|| format!("{}: {written}", file.display()));
            }
        }
        let mut reported = BTreeSet::new();
        for start in children {
            if reported.contains(start.as_str()) {
                continue;
            }
            if let Some(cycle) = cycle_through(&graph, start) {
                // The whole circle `start` is in: every sibling it reaches that reaches it back.
                let members: Vec<&str> = children
                    .iter()
                    .map(String::as_str)
                    .filter(|&other| {
                        other == start || (reaches(&graph, start, other) && reaches(&graph, other, start))
                    })
                    .collect();
                let via: Vec<String> = cycle.windows(2).map(|w| graph[w[0]][w[1]].clone()).collect();
                reported.extend(members.iter().copied());
                let at = if parent.is_empty() {
                    "crate".to_owned()
                } else {
                    format!("crate::{}", parent.join("::"))
                };
                found.push(format!(
                    "{} {at}: {{{}}}, e.g. {} (via {})",
                    krate.name,
                    members.join(", "),
                    cycle.join(" -> "),
                    via.join("; ")
                ));
            }
        }
    }
    found
}

/// `to` can be reached from `from` along the graph's edges.
fn reaches(graph: &BTreeMap<&str, BTreeMap<&str, String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::from([from]);
    let mut stack = vec![from];
    while let Some(node) = stack.pop() {
        for &next in graph.get(node).map(|m| m.keys().collect::<Vec<_>>()).unwrap_or_default() {
            if next == to {
                return true;
            }
            if seen.insert(next) {
                stack.push(next);
            }
        }
    }
    false
}

/// The child of `parent` whose subtree holds `module`, if `module` is strictly below `parent`.
fn child_under<'a>(parent: &ModPath, module: &'a ModPath) -> Option<&'a str> {
    (module.len() > parent.len() && module.starts_with(parent)).then(|| module[parent.len()].as_str())
}

/// A shortest cycle from `start` back to it, as the list of nodes (first = last).
fn cycle_through<'a>(
    graph: &BTreeMap<&'a str, BTreeMap<&'a str, String>>,
    start: &'a str,
) -> Option<Vec<&'a str>> {
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for node in frontier {
            for &to in graph.get(node).map(|m| m.keys().collect::<Vec<_>>()).unwrap_or_default() {
                if to == start {
                    let mut path = vec![start, node];
                    let mut at = node;
                    while at != start {
                        at = previous[at];
                        path.push(at);
                    }
                    // `path` is start, node, …, start backwards: read it forwards.
                    path.remove(0);
                    path.reverse();
                    path.push(start);
                    return Some(path);
                }
                if to != start && !previous.contains_key(to) {
                    previous.insert(to, node);
                    next.push(to);
                }
            }
        }
        frontier = next;
    }
    None
}

/// Every crate root of the workspace: the libraries and the binaries.
fn crates() -> Vec<Crate> {
    let root = workspace();
    let mut roots = vec![
        ("agentd".to_owned(), root.join("agent/src/main.rs")),
        ("agentd-host".to_owned(), root.join("host/src/lib.rs")),
        ("agentd-protocol".to_owned(), root.join("protocol/src/lib.rs")),
        ("agentd-python".to_owned(), root.join("python/src/lib.rs")),
        ("agentd-tests".to_owned(), root.join("tests/src/lib.rs")),
        ("agentd-fakes".to_owned(), root.join("tests/fakes/src/lib.rs")),
    ];
    for bins in ["host/src/bin", "tests/src/bin"] {
        for entry in std::fs::read_dir(root.join(bins)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                roots.push((path.strip_prefix(&root).unwrap().display().to_string(), path));
            }
        }
    }
    roots.into_iter().map(|(name, path)| load_crate(&name, &path)).collect()
}

#[test]
fn no_module_refers_to_its_siblings_in_a_circle() {
    let mut all = Vec::new();
    let mut files = 0;
    for krate in crates() {
        files += krate.modules.len();
        all.extend(cycles(&krate));
    }
    for line in &all {
        println!("{line}");
    }
    // The walk found the trees at all (agentd alone has more than fifty files).
    assert!(files > 100, "only {files} module files found");
    assert!(all.is_empty(), "{} cycles between sibling modules:\n{}", all.len(), all.join("\n"));
}

/// The checker itself finds the circles it is for: a sibling pair through a `use` tree, one through
/// a re-export at the crate root, and none where a child only uses its parent.
#[test]
fn the_checker_finds_a_circle_through_a_use_tree_and_a_reexport() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "//! `crate::b` in a doc is no reference\nmod a;\nmod b;\nmod c;\npub use b::Thing;\n");
    write("a.rs", "use crate::{Thing, b::{self}};\nfn f() -> Thing { todo!() }\n");
    write("b.rs", "mod inner;\npub struct Thing;\n");
    write("b/inner.rs", "fn g() { let _ = \"crate::c::Nope\"; super::super::a::f(); }\n");
    write("c.rs", "pub fn h() { crate::b::Thing; }\n#[cfg(test)]\nmod tests {\n    use super::h;\n}\n");
    let krate = load_crate("sample", &dir.path().join("lib.rs"));
    let found = cycles(&krate);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("a -> b -> a"), "{found:#?}");
    assert!(found[0].contains("crate::Thing") && found[0].contains("super::super::a::f"), "{found:#?}");
}
