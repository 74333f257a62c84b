//! Route B's expansion of a glob under a root, like Python 3.11's `glob.glob(pattern, root_dir=root,
//! recursive=True)` (contract §3.6): `**` alone is zero or more directories and follows directory
//! links, other segments are fnmatch without braces, and a name starting with `.` only matches a
//! segment starting with `.` (`**` never yields one). Hits may repeat; unreadable directories give
//! nothing.
//!
//! Every lookup goes through the [`Workspace`] from the root's fd: links are followed as the
//! resolver follows them, so with `--root` a link leading out is nothing here, and the expansion never
//! lists a directory outside the root.
//!
//! One deviation: `**` does not re-enter a directory it is already inside (Python loops through a
//! symlink cycle until the kernel refuses the path).

use crate::cancel::Cancel;
use crate::fs::glob::fnmatch::{PYTHON, Pattern, has_magic};
use crate::root::{self, Kind, Node, Workspace};

/// The tree being globbed: the root directory, looked into through the workspace's resolver.
struct Tree<'a> {
    ws: &'a Workspace,
    root: &'a Node,
    /// The request's token: a cancelled expansion looks nothing more up.
    cancel: &'a Cancel,
}

impl Tree<'_> {
    /// What `rel` names below the root (`follow`: its last link followed).
    fn node(&self, rel: &[u8], follow: bool) -> Option<Node> {
        self.ws.node_in(self.root, rel, follow).ok().flatten()
    }

    fn is_dir(&self, rel: &[u8]) -> bool {
        self.node(rel, true).is_some_and(|n| n.is_dir())
    }

    fn exists(&self, rel: &[u8]) -> bool {
        self.node(rel, false).is_some()
    }
}

/// Relative hits of `pattern` (no leading `/`) under `root`, unsorted.
pub(super) fn expand(ws: &Workspace, root: &Node, pattern: &str, cancel: &Cancel) -> Vec<Vec<u8>> {
    let tree = Tree { ws, root, cancel };
    let mut hits = Vec::new();
    iglob(&tree, pattern, false, &mut hits);
    // Python drops the empty hit a leading `**` yields for the root itself.
    hits.retain(|hit| !hit.is_empty());
    hits
}

/// `os.path.split`: the head loses its trailing slashes (unless it is only slashes).
fn split(path: &str) -> (&str, &str) {
    let cut = path.rfind('/').map_or(0, |i| i + 1);
    let (head, tail) = path.split_at(cut);
    let trimmed = head.trim_end_matches('/');
    (if trimmed.is_empty() { head } else { trimmed }, tail)
}

/// `os.path.join` of two relative paths.
fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut out = dir.to_vec();
    if !dir.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

fn iglob(tree: &Tree<'_>, pathname: &str, dironly: bool, out: &mut Vec<Vec<u8>>) {
    let (dirname, basename) = split(pathname);
    if !has_magic(pathname) {
        let exists = if basename.is_empty() {
            tree.is_dir(dirname.as_bytes())
        } else {
            tree.exists(pathname.as_bytes())
        };
        if exists {
            out.push(pathname.as_bytes().to_vec());
        }
        return;
    }
    if dirname.is_empty() {
        glob_in_dir(tree, b"", basename, dironly, out);
        return;
    }
    let dirs = if has_magic(dirname) {
        let mut dirs = Vec::new();
        iglob(tree, dirname, true, &mut dirs);
        dirs
    } else {
        vec![dirname.as_bytes().to_vec()]
    };
    for dir in dirs {
        if tree.cancel.is_cancelled() {
            return;
        }
        let mut names = Vec::new();
        glob_in_dir(tree, &dir, basename, dironly, &mut names);
        out.extend(names.iter().map(|name| join(&dir, name)));
    }
}

/// Names under `dir` matching one segment: `_glob2` for `**`, `_glob1` for other magic, `_glob0` for
/// plain text.
fn glob_in_dir(tree: &Tree<'_>, dir: &[u8], segment: &str, dironly: bool, out: &mut Vec<Vec<u8>>) {
    if segment == "**" {
        out.push(Vec::new());
        let Some(node) = tree.node(dir, true).filter(Node::is_dir) else { return };
        let mut ancestors = vec![(node.stat().st_dev, node.stat().st_ino)];
        rlistdir(tree, &node, b"", dironly, &mut ancestors, out);
    } else if has_magic(segment) {
        let Some(node) = tree.node(dir, true) else { return };
        let pattern = Pattern::new(segment, PYTHON);
        let hidden_ok = segment.starts_with('.');
        for (name, _) in listdir(tree, &node, dironly) {
            if tree.cancel.is_cancelled() {
                return;
            }
            let text = String::from_utf8_lossy(&name);
            if (hidden_ok || !text.starts_with('.')) && pattern.is_match(&text) {
                out.push(name);
            }
        }
    } else if segment.is_empty() {
        if tree.is_dir(dir) {
            out.push(Vec::new());
        }
    } else if tree.exists(&join(dir, segment.as_bytes())) {
        out.push(segment.as_bytes().to_vec());
    }
}

/// Entry names of the directory `dir` (only directories, links followed, with `dironly`), each with
/// what it leads to (links followed); nothing on error.
fn listdir(tree: &Tree<'_>, dir: &Node, dironly: bool) -> Vec<(Vec<u8>, Option<Node>)> {
    let Ok(children) = dir.open_dir().and_then(|fd| root::list(&fd)) else { return Vec::new() };
    children
        .into_iter()
        // A cancelled request looks nothing more up.
        .take_while(|_| !tree.cancel.is_cancelled())
        .map(|child| {
            let name = child.name.as_bytes().to_vec();
            // Only directories (and links, which may lead to one) need a lookup.
            let target = match child.kind {
                Some(Kind::File | Kind::Other) => None,
                Some(Kind::Dir | Kind::Symlink) | None => tree.ws.node_in(dir, &name, true).ok().flatten(),
            };
            (name, target)
        })
        .filter(|(_, target)| !dironly || target.as_ref().is_some_and(Node::is_dir))
        .collect()
}

/// `_rlistdir`: every non-hidden name below `dir`, recursively, as paths relative to `dir`; `rel` is
/// `dir`'s own path relative to where the listing started.
fn rlistdir(
    tree: &Tree<'_>,
    dir: &Node,
    rel: &[u8],
    dironly: bool,
    ancestors: &mut Vec<(u64, u64)>,
    out: &mut Vec<Vec<u8>>,
) {
    for (name, target) in listdir(tree, dir, dironly) {
        if tree.cancel.is_cancelled() {
            return;
        }
        if name.starts_with(b".") {
            continue;
        }
        let child_rel = join(rel, &name);
        out.push(child_rel.clone());
        let Some(child) = target.filter(Node::is_dir) else { continue };
        let id = (child.stat().st_dev, child.stat().st_ino);
        if !ancestors.contains(&id) {
            ancestors.push(id);
            rlistdir(tree, &child, &child_rel, dironly, ancestors, out);
            ancestors.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use super::*;

    fn hits(root: &Path, pattern: &str) -> Vec<String> {
        let ws = Workspace::open("/".into());
        let node = ws.node(root.to_str().unwrap(), true).unwrap().unwrap();
        let mut hits: Vec<String> = expand(&ws, &node, pattern, &Cancel::default())
            .into_iter()
            .map(|h| String::from_utf8(h).unwrap())
            .collect();
        hits.sort();
        hits
    }

    #[test]
    fn python_glob_semantics() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for f in ["a.py", ".h.py", "s/b.py", "s/t/c.py", ".d/e.py", "s/.x/f.py"] {
            let p = r.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "").unwrap();
        }
        symlink("s", r.join("ln")).unwrap();
        assert_eq!(hits(r, "*.py"), ["a.py"]);
        assert_eq!(hits(r, ".*.py"), [".h.py"]);
        assert_eq!(hits(r, "**/*.py"), ["a.py", "ln/b.py", "ln/t/c.py", "s/b.py", "s/t/c.py"]);
        assert_eq!(hits(r, "s/**"), ["s/", "s/b.py", "s/t", "s/t/c.py"]);
        assert_eq!(
            hits(r, "**"),
            ["a.py", "ln", "ln/b.py", "ln/t", "ln/t/c.py", "s", "s/b.py", "s/t", "s/t/c.py"]
        );
        assert_eq!(hits(r, ".d/*"), [".d/e.py"]);
        assert_eq!(hits(r, "*/.x/*"), ["ln/.x/f.py", "s/.x/f.py"]);
        assert_eq!(hits(r, "s//b.py"), ["s//b.py"]);
        assert_eq!(hits(r, "*/b.py"), ["ln/b.py", "s/b.py"]);
        assert_eq!(hits(r, "*/"), ["ln/", "s/"]);
        assert_eq!(hits(r, "missing/*.py"), Vec::<String>::new());
        // Python reads `^` as a member, not a negation.
        assert_eq!(hits(r, "[^a].py"), ["a.py"]);
        // Python repeats hits reached through several `**` splits.
        assert_eq!(
            hits(r, "**/**/c.py"),
            ["ln/t/c.py", "ln/t/c.py", "ln/t/c.py", "s/t/c.py", "s/t/c.py", "s/t/c.py"]
        );
    }

    #[test]
    fn symlink_cycles_end() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        fs::create_dir_all(r.join("s/t")).unwrap();
        fs::write(r.join("s/t/c.py"), "").unwrap();
        symlink(".", r.join("s/t/loop")).unwrap();
        symlink("..", r.join("s/t/up")).unwrap();
        // Each link is listed once, entered never (it leads back into the directory it sits in).
        assert_eq!(hits(r, "s/**"), ["s/", "s/t", "s/t/c.py", "s/t/loop", "s/t/up"]);
        assert_eq!(hits(r, "**/c.py"), ["s/t/c.py", "s/t/loop/c.py"]);
    }

    #[test]
    fn split_like_python() {
        assert_eq!(split("a/b/c"), ("a/b", "c"));
        assert_eq!(split("a//b"), ("a", "b"));
        assert_eq!(split("a/"), ("a", ""));
        assert_eq!(split("a"), ("", "a"));
    }
}
