//! `delete` (contract §3.5): a probe (`lexists`), then a recursive removal that never follows links,
//! reporting failures in GNU `rm`'s words.

use std::ffi::CStr;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use agentd_protocol::fs::DeleteResult;
use nix::errno::Errno;
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::errno;
use crate::guard;
use crate::root::{self, Kind, ResolveError, Workspace};

pub fn delete(path: &str, ws: &Workspace) -> DeleteResult {
    let fail = |error: String| DeleteResult { error: Some(error), path: None };
    let not_found = || fail(format!("Error: '{path}' not found"));
    if path.is_empty() || path.contains('\0') {
        return not_found();
    }
    // The probe is `lexists`: the last link is not followed (but a trailing `/` follows it).
    let (entry, node) = match ws.entry(path, false).and_then(|entry| Ok((ws.lookup(&entry, false)?, entry))) {
        Ok((Some(node), entry)) => (entry, node),
        Err(ResolveError::Escape) => return fail(format!("Error deleting file '{path}': invalid_path")),
        // A path hidden by an unsearchable parent is "not found" too (the reference's quirk).
        Ok((None, _)) | Err(_) => return not_found(),
    };
    if let Some(refusal) = refusal(path) {
        return fail(format!("Error deleting file '{path}': {refusal}"));
    }
    if let Some(refusal) = guard::delete_refusal_at(ws, path, node.location(), node.is_dir()) {
        return fail(refusal);
    }
    let mut messages = Vec::new();
    match entry.name() {
        Some(name) => {
            // The contents of a directory (or, for `link/`, of the directory it leads to), then the
            // entry itself: all through fds, never following a link.
            let emptied = !node.is_dir()
                || match node.open_dir() {
                    Ok(dir) => remove_children(&dir, path, &mut messages),
                    Err(err) => {
                        messages.push(cannot_remove(path, &err));
                        false
                    }
                };
            if emptied {
                remove_entry(entry.dir(), name, node.is_dir(), path, &mut messages);
            }
        }
        // `/`, `.` and `..` were refused above; nothing else names a directory without a name.
        None => messages.push(cannot_remove(path, &Errno::EINVAL.into())),
    }
    if messages.is_empty() {
        DeleteResult { error: None, path: Some(path.to_owned()) }
    } else {
        fail(format!("Error deleting file '{path}': {}", messages.join("\n")))
    }
}

/// What GNU `rm -rf` refuses outright.
fn refusal(path: &str) -> Option<String> {
    if path.bytes().all(|b| b == b'/') {
        return Some(format!(
            "rm: it is dangerous to operate recursively on '{path}'\nrm: use --no-preserve-root to override this failsafe"
        ));
    }
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or(path);
    (last == "." || last == "..")
        .then(|| format!("rm: refusing to remove '.' or '..' directory: skipping '{path}'"))
}

/// Removes everything in the open directory `dir` (shown as `shown`), depth first; keeps going past
/// failures like `rm -rf`, collecting one message per failure. Subdirectories are opened with
/// `O_NOFOLLOW` from their parent's fd: an entry swapped for a link is never entered. `false` when
/// `dir` could not be listed (then it is not removed either, as `rm` does).
fn remove_children(dir: &OwnedFd, shown: &str, messages: &mut Vec<String>) -> bool {
    let children = match root::list(dir) {
        Ok(children) => children,
        Err(err) => {
            messages.push(cannot_remove(shown, &err));
            return false;
        }
    };
    for child in children {
        let child_shown = format!("{}/{}", shown.trim_end_matches('/'), child.name_lossy());
        let is_dir = child.kind == Some(Kind::Dir);
        let emptied = !is_dir
            || match root::open_child_dir(dir.as_fd(), &child.name) {
                Ok(sub) => remove_children(&sub, &child_shown, messages),
                Err(err) => {
                    messages.push(cannot_remove(&child_shown, &err));
                    false
                }
            };
        if emptied {
            remove_entry(dir.as_fd(), &child.name, is_dir, &child_shown, messages);
        }
    }
    true
}

/// Unlinks `name` in `dir` (as a directory when `is_dir`); a link is removed, never followed.
fn remove_entry(dir: BorrowedFd<'_>, name: &CStr, is_dir: bool, shown: &str, messages: &mut Vec<String>) {
    let flag = if is_dir { UnlinkatFlags::RemoveDir } else { UnlinkatFlags::NoRemoveDir };
    if let Err(err) = unlinkat(dir, name, flag) {
        messages.push(cannot_remove(shown, &err.into()));
    }
}

fn cannot_remove(shown: &str, err: &std::io::Error) -> String {
    let reason = errno(err).map_or_else(|| err.to_string(), |e| e.desc().to_owned());
    format!("rm: cannot remove '{shown}': {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_33_links_are_removed_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let ws = &Workspace::open(base.into());
        std::fs::write(base.join("f"), "x").unwrap();
        std::fs::create_dir_all(base.join("sub/inner")).unwrap();
        std::fs::write(base.join("sub/inner/g"), "x").unwrap();
        std::os::unix::fs::symlink(base.join("sub"), base.join("ln")).unwrap();
        std::os::unix::fs::symlink("nowhere", base.join("bad")).unwrap();
        assert_eq!(delete("f", ws), DeleteResult { error: None, path: Some("f".into()) });
        assert_eq!(delete("f", ws).error.as_deref(), Some("Error: 'f' not found"));
        assert_eq!(delete("ln", ws).path.as_deref(), Some("ln"));
        assert_eq!(delete("bad", ws).path.as_deref(), Some("bad"));
        assert!(base.join("sub/inner/g").exists(), "the link's target must survive");
        assert_eq!(delete("sub", ws).path.as_deref(), Some("sub"));
        assert!(!base.join("sub").exists());
    }

    #[test]
    fn refuses_what_rm_refuses() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            delete(".", &Workspace::open(dir.path().into())).error.as_deref(),
            Some("Error deleting file '.': rm: refusing to remove '.' or '..' directory: skipping '.'")
        );
        assert!(
            delete("/", &Workspace::open(dir.path().into()))
                .error
                .unwrap()
                .contains("dangerous to operate recursively on '/'")
        );
        assert_eq!(
            delete("", &Workspace::open(dir.path().into())).error.as_deref(),
            Some("Error: '' not found")
        );
        assert!(dir.path().exists());
    }
}
