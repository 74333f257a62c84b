//! The profile's permission rules ([`crate::permission`]) on the file verbs and transfers, as
//! deepagents' filesystem middleware applies them: a path is matched as written (made absolute and
//! normalized by its text) and as it resolves (links followed); a deny on either refuses it.
//! `ls`, `glob` and `grep` leave read-denied paths out of their results; the other verbs answer
//! with the middleware's strings:
//! - `Error: permission denied for {operation} on {path}`,
//! - `… on {path} (resolves to {real})` when only the resolved path is denied,
//! - `Error: permission denied for write on {path} (matches deny rule(s): {patterns})` for
//!   `delete`.

use std::path::{Path, PathBuf};

use agentd_protocol::fs::{FsRequest, FsResponse};
use agentd_protocol::permission::Operation;

use nix::sys::stat::FileStat;

use crate::permission::{Shape, lexical};
use crate::root::{Kind, Node, Workspace};

/// The verb's answer when the rules refuse `request` outright (`None`: it may run).
pub fn refuse(request: &FsRequest, ws: &Workspace) -> Option<FsResponse> {
    if ws.permissions().is_empty() {
        return None;
    }
    let error = match request {
        FsRequest::Ls { path } | FsRequest::Read { path, .. } => refusal(ws, Operation::Read, path),
        FsRequest::Write { path, .. } => refusal(ws, Operation::Write, path),
        // An edit that succeeds or not tells what the file holds: it needs both.
        FsRequest::Edit { path, .. } => {
            refusal(ws, Operation::Write, path).or_else(|| refusal(ws, Operation::Read, path))
        }
        FsRequest::Glob { path, .. } => refusal(ws, Operation::Read, path.as_deref().unwrap_or("/")),
        FsRequest::Grep { path, .. } => refusal(ws, Operation::Read, path.as_deref().unwrap_or(".")),
        FsRequest::Delete { path } => {
            // Links are removed, not followed: what the name is decides.
            let is_dir = matches!(ws.node(path, false), Ok(Some(node)) if node.is_dir());
            delete_refusal(ws, path, is_dir)
        }
    };
    Some(request.verb().failed(error?))
}

/// Why `operation` on `path` is refused: `None` when the rules allow it (or there are none).
/// The message is deepagents' middleware's.
pub fn refusal(ws: &Workspace, operation: Operation, path: &str) -> Option<String> {
    let rules = ws.permissions();
    if rules.is_empty() {
        return None;
    }
    let written = written(ws, path);
    if rules.denies(operation, &written) {
        return Some(denied_on(operation, path, &written, &written));
    }
    let real = real(ws, path)?;
    rules.denies(operation, &real).then(|| denied_on(operation, path, &real, &written))
}

/// [`refusal`] of `path` as written only: no file IO. A caller that walks the path itself then
/// checks what it found with [`refusal_at`].
pub fn refusal_as_written(ws: &Workspace, operation: Operation, path: &str) -> Option<String> {
    let rules = ws.permissions();
    if rules.is_empty() {
        return None;
    }
    let written = written(ws, path);
    rules.denies(operation, &written).then(|| denied_on(operation, path, &written, &written))
}

/// Why `operation` on what a verb opened for `path` is refused: `location` is where the walk found
/// it (a [`crate::root::Node`]'s or [`crate::root::Entry`]'s real location). [`refuse`] looked at
/// the path before the verb walked it; a command can swap a component for a link into a denied tree
/// in between, so each verb checks again what it is about to read or write, with no second walk.
pub fn refusal_at(ws: &Workspace, operation: Operation, path: &str, location: &Path) -> Option<String> {
    let rules = ws.permissions();
    if rules.is_empty() {
        return None;
    }
    let real = ws.real_path(location).to_string_lossy().into_owned();
    rules.denies(operation, &real).then(|| denied_on(operation, path, &real, &written(ws, path)))
}

/// [`refusal_at`] of the node a verb's walk opened, and of its other names: a file the rules deny by
/// one name (`.env`) is denied by every name it has (`ln .env notes.txt`), as its content is the
/// same. The file is known by its inode (`stat`, the walk's own), not by a second lookup.
pub fn refusal_of(ws: &Workspace, operation: Operation, path: &str, node: &Node) -> Option<String> {
    refusal_at(ws, operation, path, node.location()).or_else(|| {
        linked_denial(ws, operation, node.stat(), &ws.real_path(node.location()))
            .map(|name| linked_on(operation, path, &name))
    })
}

/// The name the rules deny `operation` on that is another name of the file `stat` describes, found
/// at `real` (its real location): a regular file with more than one link whose inode is that of a
/// path a deny rule names (a plain path: what a pattern matches is not looked for here), or of a
/// denied entry of its own directory (a link a command made beside a file of a denied subtree, under
/// a name a rule allows: `ln conf/.env conf/public.txt`). `None`: no such name.
pub fn linked_denial(ws: &Workspace, operation: Operation, stat: &FileStat, real: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let rules = ws.permissions();
    if rules.is_empty() || Kind::of(stat) != Kind::File || stat.st_nlink < 2 {
        return None;
    }
    let same = |meta: &std::fs::Metadata| (meta.dev(), meta.ino()) == (stat.st_dev, stat.st_ino);
    let named = rules.shapes().into_iter().flatten().find_map(|shape| {
        let Shape::Prefix(named) = shape else { return None };
        let text = named.to_string_lossy();
        let meta = std::fs::metadata(&named).ok()?;
        (same(&meta) && rules.denies(operation, &text)).then(|| text.into_owned())
    });
    named.or_else(|| {
        let entries = std::fs::read_dir(real.parent()?).ok()?;
        entries.flatten().find_map(|entry| {
            let other = entry.path();
            let text = other.to_string_lossy();
            let linked = other != real && entry.metadata().is_ok_and(|meta| same(&meta));
            (linked && rules.denies(operation, &text)).then(|| text.into_owned())
        })
    })
}

/// The refusal of `operation` on `path`, another name of the denied file `name`.
fn linked_on(operation: Operation, path: &str, name: &str) -> String {
    format!("Error: permission denied for {} on {path} (the same file as {name})", operation.as_str())
}

/// deepagents' refusal of `operation` on `path`, which resolves to `real`.
fn denied_on(operation: Operation, path: &str, real: &str, written: &str) -> String {
    let op = operation.as_str();
    if real == written {
        format!("Error: permission denied for {op} on {path}")
    } else {
        format!("Error: permission denied for {op} on {path} (resolves to {real})")
    }
}

/// [`delete_refusal`] on what the walk found for `path` at `location` (see [`refusal_at`]).
pub fn delete_refusal_at(ws: &Workspace, path: &str, location: &Path, is_dir: bool) -> Option<String> {
    let rules = ws.permissions();
    if rules.is_empty() {
        return None;
    }
    let real = ws.real_path(location).to_string_lossy().into_owned();
    let denied = if is_dir {
        !rules.denied_within(Operation::Write, &real).is_empty()
    } else {
        rules.denies(Operation::Write, &real)
    };
    denied.then(|| denied_on(Operation::Write, path, &real, &written(ws, path)))
}

/// What the rules hide of a walk's results below a directory it holds open (`ls`, `glob`,
/// `grep`): an entry is hidden when reading it is denied as the client sees it (matched as
/// written) or where it is. A walk that never follows a link below the directory finds each
/// entry at the directory's real location and the entry's relative path, and a link where the walk
/// found it leads; so that is what is checked, in the walk, with no second walk: a component
/// swapped for a link after the walk looked changes nothing.
pub struct Below<'a> {
    ws: &'a Workspace,
    real: PathBuf,
}

impl<'a> Below<'a> {
    /// Below `dir`, the real location of a directory the walk opened.
    pub fn new(ws: &'a Workspace, dir: &Path) -> Self {
        Self { ws, real: ws.real_path(dir) }
    }

    /// Whether the rules hide the entry `rel` (relative to the directory), shown to the client as
    /// `shown`; `target`: for a link, the location the walk found it leads to (else the entry is
    /// where it is named).
    pub fn hides(&self, rel: &str, shown: &str, target: Option<&Path>) -> bool {
        let rules = self.ws.permissions();
        if rules.is_empty() {
            return false;
        }
        let written = written(self.ws, shown);
        if rules.denies(Operation::Read, &written) {
            return true;
        }
        let real = match target {
            Some(target) => self.ws.real_path(target),
            None => self.real.join(rel),
        };
        let real = real.to_string_lossy();
        real != written && rules.denies(Operation::Read, &real)
    }

    /// Whether the rules hide a file the walk opened (`stat`, at `rel` below the directory) because
    /// it is another name of a read-denied file ([`linked_denial`]).
    pub fn hides_linked(&self, stat: &FileStat, rel: &str) -> bool {
        linked_denial(self.ws, Operation::Read, stat, &self.real.join(rel)).is_some()
    }
}

/// Why deleting `path` is refused. A directory goes with everything beneath it, so any deny-write
/// pattern that could match in it refuses it, whatever the order (deepagents' rule); a file is
/// decided by the first matching rule.
pub fn delete_refusal(ws: &Workspace, path: &str, is_dir: bool) -> Option<String> {
    let rules = ws.permissions();
    if rules.is_empty() {
        return None;
    }
    let patterns = |at: &str| {
        if is_dir {
            rules.denied_within(Operation::Write, at)
        } else {
            rules.denial(Operation::Write, at).map(|d| d.patterns).unwrap_or_default()
        }
    };
    let written = written(ws, path);
    let found = patterns(&written);
    if !found.is_empty() {
        return Some(format!(
            "Error: permission denied for write on {path} (matches deny rule(s): {})",
            found.join(", ")
        ));
    }
    let real = real(ws, path)?;
    (real != written && !patterns(&real).is_empty())
        .then(|| format!("Error: permission denied for write on {path} (resolves to {real})"))
}

/// `path` as written, absolute on the machine, normalized by its text.
fn written(ws: &Workspace, path: &str) -> String {
    let shown = lexical(&ws.shown(path).to_string_lossy(), Path::new("/"));
    if ws.is_confined() { lexical(shown.trim_start_matches('/'), ws.dir()) } else { shown }
}

/// `path` with every link followed, on the machine; a missing last component is its parent's real
/// path and its name. `None` when it cannot be resolved (nothing there to protect).
fn real(ws: &Workspace, path: &str) -> Option<String> {
    if let Ok(Some(node)) = ws.node(path, true) {
        return Some(ws.real_path(node.location()).to_string_lossy().into_owned());
    }
    let entry = ws.entry(path, false).ok()?;
    let dir = ws.real_path(entry.dir_location());
    let name = entry.name().map(|n| String::from_utf8_lossy(n.to_bytes()).into_owned());
    Some(lexical(
        &name.map_or(dir.to_string_lossy().into_owned(), |n| dir.join(n).to_string_lossy().into_owned()),
        Path::new("/"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::Permissions;
    use agentd_protocol::permission::{PermissionMode, PermissionRule};

    #[test]
    fn a_link_into_a_denied_tree_is_denied_as_it_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(w.join("secret")).unwrap();
        std::fs::write(w.join("secret/key"), "k").unwrap();
        std::os::unix::fs::symlink(w.join("secret"), w.join("door")).unwrap();
        let rules = Permissions::new(&[PermissionRule {
            operations: vec![Operation::Read],
            paths: vec![format!("{}/secret/**", w.display())],
            mode: PermissionMode::Deny,
        }])
        .unwrap();
        let ws = Workspace::open(w.clone()).with_permissions(rules);
        assert_eq!(
            refusal(&ws, Operation::Read, "secret/key").unwrap(),
            "Error: permission denied for read on secret/key"
        );
        let through = refusal(&ws, Operation::Read, "door/key").unwrap();
        assert_eq!(
            through,
            format!("Error: permission denied for read on door/key (resolves to {}/secret/key)", w.display())
        );
        assert!(refusal(&ws, Operation::Write, "door/key").is_none());
        assert!(
            refusal(&ws, Operation::Read, "door/missing").is_some(),
            "a missing file is denied where it would be"
        );
    }

    /// A file the rules deny by one name is denied by its other names (hard links), as what the
    /// walk opened is that very inode; a copy is another file.
    #[test]
    fn another_name_of_a_denied_file_is_denied() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().canonicalize().unwrap();
        std::fs::write(w.join(".env"), "k").unwrap();
        std::fs::hard_link(w.join(".env"), w.join("notes.txt")).unwrap();
        std::fs::copy(w.join(".env"), w.join("copy")).unwrap();
        let rules = Permissions::new(&[PermissionRule {
            operations: vec![Operation::Read],
            paths: vec![format!("{}/.env", w.display())],
            mode: PermissionMode::Deny,
        }])
        .unwrap();
        let ws = Workspace::open(w.clone()).with_permissions(rules);
        let linked = ws.node("notes.txt", true).unwrap().unwrap();
        assert_eq!(
            refusal_of(&ws, Operation::Read, "notes.txt", &linked).unwrap(),
            format!("Error: permission denied for read on notes.txt (the same file as {}/.env)", w.display())
        );
        assert!(refusal_of(&ws, Operation::Write, "notes.txt", &linked).is_none());
        let copy = ws.node("copy", true).unwrap().unwrap();
        assert!(refusal_of(&ws, Operation::Read, "copy", &copy).is_none());
        assert!(Below::new(&ws, &w).hides_linked(linked.stat(), "notes.txt"));
    }

    /// The checks on what a walk opened: by its real location, whatever the path said.
    #[test]
    fn what_a_walk_opened_is_checked_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(w.join("secret/sub")).unwrap();
        std::fs::create_dir_all(w.join("open")).unwrap();
        std::os::unix::fs::symlink(w.join("secret"), w.join("door")).unwrap();
        let rules = Permissions::new(&[PermissionRule {
            operations: vec![Operation::Read, Operation::Write],
            paths: vec![format!("{}/secret/**", w.display())],
            mode: PermissionMode::Deny,
        }])
        .unwrap();
        let ws = Workspace::open(w.clone()).with_permissions(rules);
        let node = ws.node("door/sub", true).unwrap().unwrap();
        assert_eq!(
            refusal_at(&ws, Operation::Read, "door/sub", node.location()).unwrap(),
            format!("Error: permission denied for read on door/sub (resolves to {}/secret/sub)", w.display())
        );
        let open = ws.node("open", true).unwrap().unwrap();
        assert_eq!(refusal_at(&ws, Operation::Write, "open", open.location()), None);
        let secret = ws.node("door", true).unwrap().unwrap();
        let sub = ws.node("door/sub", true).unwrap().unwrap();
        // Deleting a directory deletes what is beneath it.
        assert!(delete_refusal_at(&ws, "door", secret.location(), true).is_some());
        assert!(delete_refusal_at(&ws, "door", secret.location(), false).is_none(), "not itself matched");
        assert!(delete_refusal_at(&ws, "open", open.location(), true).is_none());
        // Below a directory the walk holds: as shown, and at its real location and relative path.
        let below = Below::new(&ws, secret.location());
        assert!(below.hides("sub", "door/sub", None) && below.hides("sub/x", "door/sub/x", None));
        let open_below = Below::new(&ws, open.location());
        assert!(!open_below.hides("sub", "open/sub", None));
        assert!(open_below.hides("sub", "secret/sub", None), "denied as written");
        assert!(open_below.hides("link", "open/link", Some(sub.location())), "a link, where it leads");
        assert!(open_below.hides("x", "./open/../secret/x", None), "written is normalized");
        // Directories are not made where the rules deny writing, whatever the path said.
        let made = ws.entry_making("door/new/deeper/file");
        assert_eq!(made.map(|_| ()).unwrap_err().errno(), Some(nix::errno::Errno::EACCES));
        assert!(!w.join("secret/new").exists());
        assert!(ws.entry_making("open/new/file").is_ok());
    }
}
