//! The profile's permission rules ([`crate::permission`]) on the file verbs and transfers, as
//! deepagents' filesystem middleware applies them: a path is matched as written (made absolute and
//! normalized by its text) and as it resolves (links followed); a deny on either refuses it.
//! `ls`, `glob` and `grep` leave read-denied paths out of their results; the other verbs answer
//! with the middleware's strings:
//! - `Error: permission denied for {operation} on {path}`,
//! - `… on {path} (resolves to {real})` when only the resolved path is denied,
//! - `Error: permission denied for write on {path} (matches deny rule(s): {patterns})` for
//!   `delete`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agentd_protocol::fs::{
    DeleteResult, EditResult, FsRequest, FsResponse, GlobResult, GrepResult, LsResult, ReadResult,
    WriteResult,
};
use agentd_protocol::permission::Operation;

use crate::permission::lexical;
use crate::root::Workspace;

/// The verb's answer when the rules refuse `request` outright (`None`: it may run).
pub fn refuse(request: &FsRequest, ws: &Workspace) -> Option<FsResponse> {
    if ws.permissions().is_empty() {
        return None;
    }
    let error = Some;
    Some(match request {
        FsRequest::Ls { path } => {
            FsResponse::Ls(LsResult { error: error(refusal(ws, Operation::Read, path)?), entries: None })
        }
        FsRequest::Read { path, .. } => FsResponse::Read(ReadResult {
            error: error(refusal(ws, Operation::Read, path)?),
            ..ReadResult::default()
        }),
        FsRequest::Write { path, .. } => {
            FsResponse::Write(WriteResult { error: error(refusal(ws, Operation::Write, path)?), path: None })
        }
        // An edit that succeeds or not tells what the file holds: it needs both.
        FsRequest::Edit { path, .. } => FsResponse::Edit(EditResult {
            error: error(refusal(ws, Operation::Write, path).or_else(|| refusal(ws, Operation::Read, path))?),
            ..EditResult::default()
        }),
        FsRequest::Glob { path, .. } => FsResponse::Glob(GlobResult {
            error: error(refusal(ws, Operation::Read, path.as_deref().unwrap_or("/"))?),
            ..GlobResult::default()
        }),
        FsRequest::Grep { path, .. } => FsResponse::Grep(GrepResult {
            error: error(refusal(ws, Operation::Read, path.as_deref().unwrap_or("."))?),
            ..GrepResult::default()
        }),
        FsRequest::Delete { path } => {
            // Links are removed, not followed: what the name is decides.
            let is_dir = matches!(ws.node(path, false), Ok(Some(node)) if node.is_dir());
            FsResponse::Delete(DeleteResult { error: error(delete_refusal(ws, path, is_dir)?), path: None })
        }
    })
}

/// `response` without what the rules do not let its caller read: listings and matches lose the
/// read-denied paths.
pub fn filter(response: FsResponse, ws: &Workspace) -> FsResponse {
    if ws.permissions().is_empty() {
        return response;
    }
    let mut seen = Results { ws, dirs: HashMap::new(), paths: HashMap::new() };
    match response {
        FsResponse::Ls(mut result) => {
            if let Some(entries) = &mut result.entries {
                entries.retain(|e| !seen.hidden(&e.path));
            }
            FsResponse::Ls(result)
        }
        FsResponse::Glob(mut result) => {
            if let Some(matches) = &mut result.matches {
                matches.retain(|m| !seen.hidden(&m.path));
            }
            FsResponse::Glob(result)
        }
        FsResponse::Grep(mut result) => {
            if let Some(matches) = &mut result.matches {
                matches.retain(|m| !seen.hidden(&m.path));
            }
            FsResponse::Grep(result)
        }
        other => other,
    }
}

/// Which results reading is denied for (matched as written and as they resolve), over many
/// results, most of them in few directories: each directory's real path is resolved once, and an entry that is not a link is that path and its name (one `lstat`, not a
/// walk of every component); each path is decided once (grep's matches repeat them).
struct Results<'a> {
    ws: &'a Workspace,
    dirs: HashMap<String, Option<PathBuf>>,
    paths: HashMap<String, bool>,
}

impl Results<'_> {
    fn hidden(&mut self, path: &str) -> bool {
        if let Some(hidden) = self.paths.get(path) {
            return *hidden;
        }
        let rules = self.ws.permissions();
        let hidden = rules.denies(Operation::Read, &written(self.ws, path))
            || self.real(path).is_some_and(|real| rules.denies(Operation::Read, &real));
        self.paths.insert(path.to_owned(), hidden);
        hidden
    }

    fn real(&mut self, path: &str) -> Option<String> {
        let split = path.rsplit_once('/').filter(|(_, name)| !matches!(*name, "" | "." | ".."));
        let Some((parent, name)) = split else { return real(self.ws, path) };
        let parent = if parent.is_empty() { "/" } else { parent };
        let ws = self.ws;
        let dir = self.dirs.entry(parent.to_owned()).or_insert_with(|| real(ws, parent).map(PathBuf::from));
        let candidate = dir.as_ref()?.join(name);
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if !meta.file_type().is_symlink() => Some(candidate.to_string_lossy().into_owned()),
            _ => real(self.ws, path),
        }
    }
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

/// Read denials below a directory a walk holds open. A walk that never follows a link below it
/// finds each entry at the directory's real location and the entry's relative path, so that is
/// what is checked, with no second walk: a component swapped for a link after the walk looked
/// changes nothing ([`filter`] then also checks each result as written and as it resolves).
pub struct Below<'a> {
    ws: &'a Workspace,
    real: PathBuf,
}

impl<'a> Below<'a> {
    /// Below `dir`, the real location of a directory the walk opened.
    pub fn new(ws: &'a Workspace, dir: &Path) -> Self {
        Self { ws, real: ws.real_path(dir) }
    }

    /// Whether reading `rel` (relative to the directory) is denied.
    pub fn hides(&self, rel: &str) -> bool {
        let rules = self.ws.permissions();
        !rules.is_empty() && rules.denies(Operation::Read, &self.real.join(rel).to_string_lossy())
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
        let mut results = Results { ws: &ws, dirs: HashMap::new(), paths: HashMap::new() };
        assert!(results.hidden("./door/../secret/key") && !results.hidden("door"));
        assert!(results.hidden("door/key"), "a link on the way is resolved");
        assert!(results.hidden(&format!("{}/door/key", w.display())));
        assert!(
            refusal(&ws, Operation::Read, "door/missing").is_some(),
            "a missing file is denied where it would be"
        );
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
        // Deleting a directory deletes what is beneath it.
        assert!(delete_refusal_at(&ws, "door", secret.location(), true).is_some());
        assert!(delete_refusal_at(&ws, "door", secret.location(), false).is_none(), "not itself matched");
        assert!(delete_refusal_at(&ws, "open", open.location(), true).is_none());
        // Below a directory the walk holds: its real location and the relative path.
        let below = Below::new(&ws, secret.location());
        assert!(below.hides("sub") && below.hides("sub/x"));
        assert!(!Below::new(&ws, open.location()).hides("sub"));
        // Directories are not made where the rules deny writing, whatever the path said.
        let made = ws.entry_making("door/new/deeper/file");
        assert_eq!(made.map(|_| ()).unwrap_err().errno(), Some(nix::errno::Errno::EACCES));
        assert!(!w.join("secret/new").exists());
        assert!(ws.entry_making("open/new/file").is_ok());
    }
}
