//! `ls` (contract §3.1): one level, directory order, dot-files included, links not followed below
//! the listed path.

use agentd_protocol::fs::{FileInfo, LsResult};
use nix::errno::Errno;

use super::errno;
use crate::root::{self, Kind, ResolveError, Workspace};

pub fn ls(path: &str, ws: &Workspace) -> LsResult {
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
    if !node.is_dir() {
        return fail("not_a_directory");
    }
    let children = match node.open_dir().and_then(|dir| root::list(&dir)) {
        Ok(children) => children,
        Err(err) => return fail(code(errno(&err))),
    };
    let prefix = if path.ends_with('/') { path.to_owned() } else { format!("{path}/") };
    // The listing's type does not follow links: a link to a directory is not a directory here.
    let entries = children
        .iter()
        .map(|child| FileInfo::new(format!("{prefix}{}", child.name_lossy()), child.kind == Some(Kind::Dir)))
        .collect();
    LsResult { error: None, entries: Some(entries) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_5_and_6() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().to_str().unwrap();
        std::fs::write(dir.path().join("a"), "").unwrap();
        std::fs::write(dir.path().join(".hid"), "").unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deep")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("ln")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.path().join("bad")).unwrap();
        let mut got: Vec<(String, bool)> = ls(&format!("{t}/"), &Workspace::open("/".into()))
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
        let deep = ls(&format!("{t}//sub"), &Workspace::open("/".into())).entries.unwrap();
        assert_eq!(deep, vec![FileInfo::new(format!("{t}//sub/deep"), true)]);
        assert_eq!(
            ls(&format!("{t}/a"), &Workspace::open("/".into())).error,
            Some(format!("Path '{t}/a': not_a_directory"))
        );
        assert_eq!(ls("", &Workspace::open("/".into())).error.as_deref(), Some("Path '': path_not_found"));
        // A link given as the path is followed.
        assert_eq!(ls(&format!("{t}/ln"), &Workspace::open("/".into())).entries.unwrap().len(), 1);
    }
}
