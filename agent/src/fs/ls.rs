//! `ls` (contract §3.1): one level, directory order, dot-files included, links not followed below
//! the listed path.

use agentd_protocol::fs::{FileInfo, LsResult};
use agentd_protocol::permission::Operation;
use nix::errno::Errno;

use std::ops::ControlFlow;

use agentd_protocol::limits::json_escaped_len;

use super::budget::{Budget, LIST_BUDGET};
use super::errno;
use crate::cancel::Cancel;
use crate::guard;
use crate::root::{self, Kind, Node, ResolveError, Workspace};

pub fn ls(path: &str, ws: &Workspace, cancel: &Cancel) -> LsResult {
    ls_within(path, ws, LIST_BUDGET, cancel)
}

/// [`ls`] with `budget` bytes of JSON for the entries.
fn ls_within(path: &str, ws: &Workspace, budget: usize, cancel: &Cancel) -> LsResult {
    let fail = |what: &str| LsResult { error: Some(format!("Path '{path}': {what}")), entries: None };
    if path.is_empty() {
        return fail("path_not_found");
    }
    if path.contains('\0') {
        return fail("invalid_path");
    }
    let code = |errno: Option<Errno>| match errno {
        Some(Errno::ENOTDIR) => "not_a_directory",
        Some(Errno::EACCES | Errno::EPERM) => "permission_denied",
        _ => "path_not_found",
    };
    let node = match ws.node(path, true) {
        Ok(Some(node)) => node,
        Ok(None) => return fail("path_not_found"),
        Err(ResolveError::Escape) => return fail("invalid_path"),
        Err(err) => return fail(code(err.errno())),
    };
    if let Some(refusal) = guard::refusal_at(ws, Operation::Read, path, node.location()) {
        return LsResult { error: Some(refusal), entries: None };
    }
    if !node.is_dir() {
        return fail("not_a_directory");
    }
    let prefix = if path.ends_with('/') { path.to_owned() } else { format!("{path}/") };
    // Each entry costs its JSON record; a listing that cannot fit one reply is refused whole rather
    // than shown in part (the result has no way to say it was cut).
    let budget = Budget::new(budget);
    let prefix_cost = json_escaped_len(&prefix);
    let mut entries = Vec::new();
    let below = guard::Below::new(ws, node.location());
    let listed = node.open_dir().and_then(|dir| {
        root::visit(&dir, |child| {
            let shown = format!("{prefix}{}", child.name_lossy());
            let name = &shown[prefix.len()..];
            // A link is judged by where it leads too.
            let target = (child.kind == Some(Kind::Symlink) && !ws.permissions().is_empty())
                .then(|| ws.node_in(&node, child.name.as_bytes(), true).ok().flatten())
                .flatten();
            if below.hides(name, &shown, target.as_ref().map(Node::location)) {
                return ControlFlow::Continue(());
            }
            // `{"path":"…","is_dir":false},`
            let cost = 27 + prefix_cost + json_escaped_len(&shown[prefix.len()..]);
            if !budget.take(cost) || cancel.is_cancelled() {
                return ControlFlow::Break(());
            }
            // The listing's type does not follow links: a link to a directory is not a directory here.
            entries.push(FileInfo::new(shown, child.kind == Some(Kind::Dir)));
            ControlFlow::Continue(())
        })
    });
    if let Err(err) = listed {
        return fail(code(errno(&err)));
    }
    if budget.spent() {
        return fail("too_many_entries");
    }
    LsResult { error: None, entries: Some(entries) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_that_cannot_fit_one_reply_is_refused_whole() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b\"q", "c"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let t = dir.path().to_str().unwrap();
        let ws = Workspace::open("/".into());
        let whole = ls(t, &ws, &Cancel::default());
        let entries = whole.entries.clone().unwrap();
        // The exact JSON of the entries, each with its comma: the budget that just fits.
        let exact: usize = entries.iter().map(|e| serde_json::to_string(e).unwrap().len() + 1).sum();
        assert_eq!(ls_within(t, &ws, exact, &Cancel::default()), whole);
        assert_eq!(
            ls_within(t, &ws, exact - 1, &Cancel::default()),
            LsResult { error: Some(format!("Path '{t}': too_many_entries")), entries: None }
        );
    }

    #[test]
    fn golden_5_and_6() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().to_str().unwrap();
        std::fs::write(dir.path().join("a"), "").unwrap();
        std::fs::write(dir.path().join(".hid"), "").unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deep")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("ln")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.path().join("bad")).unwrap();
        let mut got: Vec<(String, bool)> =
            ls(&format!("{t}/"), &Workspace::open("/".into()), &Cancel::default())
                .entries
                .unwrap()
                .into_iter()
                .map(|e| (e.path, e.is_dir))
                .collect();
        got.sort();
        let mut want: Vec<(String, bool)> =
            [("a", false), (".hid", false), ("sub", true), ("ln", false), ("bad", false)]
                .iter()
                .map(|(n, d)| (format!("{t}/{n}"), *d))
                .collect();
        want.sort();
        assert_eq!(got, want);
        let deep =
            ls(&format!("{t}//sub"), &Workspace::open("/".into()), &Cancel::default()).entries.unwrap();
        assert_eq!(deep, vec![FileInfo::new(format!("{t}//sub/deep"), true)]);
        assert_eq!(
            ls(&format!("{t}/a"), &Workspace::open("/".into()), &Cancel::default()).error,
            Some(format!("Path '{t}/a': not_a_directory"))
        );
        assert_eq!(
            ls("", &Workspace::open("/".into()), &Cancel::default()).error.as_deref(),
            Some("Path '': path_not_found")
        );
        // A link given as the path is followed.
        assert_eq!(
            ls(&format!("{t}/ln"), &Workspace::open("/".into()), &Cancel::default()).entries.unwrap().len(),
            1
        );
    }
}
