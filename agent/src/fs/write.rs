//! `write` (contract §3.3): create missing parents (`mkdir -p` of the dirname), then write the exact
//! bytes as an upload does (temp file renamed over the name: atomic, mode and owner kept, setuid and
//! setgid dropped), so its errors are the upload's codes. A failed write removes the directories it
//! made.

use agentd_protocol::fs::WriteResult;

use agentd_protocol::permission::Operation;

use crate::root::{ResolveError, Workspace};
use crate::transfer;

pub fn write(path: &str, content: &str, ws: &Workspace) -> WriteResult {
    let fail = |error: String| WriteResult { error: Some(error), path: None };
    let parent = dirname(path);
    // `mkdir -p` of the dirname: with `/.` appended, every component of it is a directory on the way.
    let parent_dir = if parent.is_empty() { ".".to_owned() } else { format!("{parent}/.") };
    let made = match ws.entry_making(&parent_dir) {
        Ok((_, made)) => made,
        Err(ResolveError::Escape) => return fail(format!("Failed to write file '{path}': invalid_path")),
        Err(ResolveError::Io(err)) => {
            return fail(format!("Failed to write file '{path}': cannot create directory '{parent}': {err}"));
        }
    };
    match transfer::destination(ws, path, Operation::Write)
        .and_then(|dest| transfer::write_whole(&dest, content.as_bytes()))
    {
        Ok(()) => WriteResult { error: None, path: Some(path.to_owned()) },
        Err(code) => {
            made.undo();
            fail(format!("Failed to write file '{path}': {code}"))
        }
    }
}

/// Python's `os.path.dirname`: everything before the last `/`, trailing slashes trimmed unless
/// that leaves nothing.
fn dirname(path: &str) -> &str {
    match path.rfind('/') {
        None => "",
        Some(last) => {
            let head = &path[..=last];
            let trimmed = head.trim_end_matches('/');
            if trimmed.is_empty() { head } else { trimmed }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirname_matches_python() {
        for (path, want) in
            [("a/b/c", "a/b"), ("/a", "/"), ("a", ""), ("a//b", "a"), ("//x", "//"), ("/", "/")]
        {
            assert_eq!(dirname(path), want, "{path}");
        }
    }

    #[test]
    fn golden_23() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().to_str().unwrap();
        let base = &Workspace::open("/".into());
        let target = format!("{t}/w/x/y.txt");
        assert_eq!(write(&target, "hi", base), WriteResult { error: None, path: Some(target.clone()) });
        assert_eq!(write(&target, "second", base).path, Some(target.clone()));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "second");
        assert_eq!(
            write("rel.txt", "x", &Workspace::open(dir.path().into())).error.as_deref(),
            Some("Failed to write file 'rel.txt': invalid_path")
        );
        assert_eq!(write(t, "x", base).error, Some(format!("Failed to write file '{t}': is_directory")));
        std::fs::write(dir.path().join("afile"), "").unwrap();
        let r = write(&format!("{t}/afile/c"), "x", base);
        assert!(r.error.is_some() && r.path.is_none(), "{r:?}");
    }

    #[test]
    fn a_failed_write_removes_the_directories_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let ws = &Workspace::open(dir.path().into());
        let base = dir.path().to_str().unwrap();
        // The parents are made, then the name is too long for the file system: they go again.
        let long = format!("{base}/new/deeper/{}", "n".repeat(256));
        assert!(write(&long, "x", ws).error.is_some());
        assert!(!dir.path().join("new").exists());
        // So does a relative path, refused after the parent step (the contract's order).
        assert!(write("rel/x", "x", ws).error.is_some());
        assert!(!dir.path().join("rel").exists());
        std::fs::create_dir(dir.path().join("old")).unwrap();
        assert!(write(&format!("{base}/old/made/{}", "n".repeat(256)), "x", ws).error.is_some());
        assert!(dir.path().join("old").is_dir() && !dir.path().join("old/made").exists());
        let name = "w".repeat(255);
        assert_eq!(write(&format!("{base}/old/{name}"), "x", ws).error, None);
        assert_eq!(std::fs::read(dir.path().join("old").join(&name)).unwrap(), b"x");
    }
}
