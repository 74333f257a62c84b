//! Route B's expansion of a glob under a root, like Python 3.11's `glob.glob(pattern, root_dir=root,
//! recursive=True)` (contract §3.6): `**` alone is zero or more directories and follows directory
//! links, other segments are fnmatch without braces, and a name starting with `.` only matches a
//! segment starting with `.` (`**` never yields one). Hits may repeat; unreadable directories give
//! nothing.
//!
//! One deviation: `**` does not re-enter a directory it is already inside (Python loops through a
//! symlink cycle until the kernel refuses the path).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::fs::glob::fnmatch::{PYTHON, Pattern, has_magic};

/// Relative hits of `pattern` (no leading `/`) under `root`, unsorted.
pub(super) fn expand(root: &Path, pattern: &str) -> Vec<Vec<u8>> {
    let mut hits = Vec::new();
    iglob(root, pattern, false, &mut hits);
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

fn fs_path(root: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() { root.to_path_buf() } else { root.join(OsStr::from_bytes(rel)) }
}

fn is_dir(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_dir())
}

fn iglob(root: &Path, pathname: &str, dironly: bool, out: &mut Vec<Vec<u8>>) {
    let (dirname, basename) = split(pathname);
    if !has_magic(pathname) {
        let exists = if basename.is_empty() {
            is_dir(&fs_path(root, dirname.as_bytes()))
        } else {
            fs::symlink_metadata(fs_path(root, pathname.as_bytes())).is_ok()
        };
        if exists {
            out.push(pathname.as_bytes().to_vec());
        }
        return;
    }
    if dirname.is_empty() {
        glob_in_dir(root, b"", basename, dironly, out);
        return;
    }
    let dirs = if has_magic(dirname) {
        let mut dirs = Vec::new();
        iglob(root, dirname, true, &mut dirs);
        dirs
    } else {
        vec![dirname.as_bytes().to_vec()]
    };
    for dir in dirs {
        let mut names = Vec::new();
        glob_in_dir(root, &dir, basename, dironly, &mut names);
        out.extend(names.iter().map(|name| join(&dir, name)));
    }
}

/// Names under `dir` matching one segment: `_glob2` for `**`, `_glob1` for other magic, `_glob0` for
/// plain text.
fn glob_in_dir(root: &Path, dir: &[u8], segment: &str, dironly: bool, out: &mut Vec<Vec<u8>>) {
    let path = fs_path(root, dir);
    if segment == "**" {
        out.push(Vec::new());
        let mut ancestors = Vec::new();
        if let Ok(meta) = fs::metadata(&path) {
            ancestors.push((meta.dev(), meta.ino()));
        }
        rlistdir(&path, b"", dironly, &mut ancestors, out);
    } else if has_magic(segment) {
        let pattern = Pattern::new(segment, PYTHON);
        let hidden_ok = segment.starts_with('.');
        for name in listdir(&path, dironly) {
            let text = String::from_utf8_lossy(&name);
            if (hidden_ok || !text.starts_with('.')) && pattern.is_match(&text) {
                out.push(name);
            }
        }
    } else if segment.is_empty() {
        if is_dir(&path) {
            out.push(Vec::new());
        }
    } else if fs::symlink_metadata(path.join(segment)).is_ok() {
        out.push(segment.as_bytes().to_vec());
    }
}

/// Entry names of `dir` (only directories, links followed, with `dironly`); nothing on error.
fn listdir(dir: &Path, dironly: bool) -> Vec<Vec<u8>> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter(|entry| !dironly || is_dir(&entry.path()))
        .map(|entry| OsString::into_vec(entry.file_name()))
        .collect()
}

/// `_rlistdir`: every non-hidden name below `dir`, recursively, as paths relative to `dir`; `rel` is
/// `dir`'s own path relative to where the listing started.
fn rlistdir(dir: &Path, rel: &[u8], dironly: bool, ancestors: &mut Vec<(u64, u64)>, out: &mut Vec<Vec<u8>>) {
    for name in listdir(dir, dironly) {
        if name.starts_with(b".") {
            continue;
        }
        let child_rel = join(rel, &name);
        let child = dir.join(OsStr::from_bytes(&name));
        out.push(child_rel.clone());
        let Ok(meta) = fs::metadata(&child) else { continue };
        let id = (meta.dev(), meta.ino());
        if meta.is_dir() && !ancestors.contains(&id) {
            ancestors.push(id);
            rlistdir(&child, &child_rel, dironly, ancestors, out);
            ancestors.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn hits(root: &Path, pattern: &str) -> Vec<String> {
        let mut hits: Vec<String> =
            expand(root, pattern).into_iter().map(|h| String::from_utf8(h).unwrap()).collect();
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
