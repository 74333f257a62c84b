//! `edit` (contract §3.4): exact, then CRLF-form, then LF-form matching of `old`; the same transform
//! applied to `new`; the file replaced atomically, as an upload replaces one (through links, mode and
//! owner kept, setuid and setgid dropped).
//!
//! The new content goes to a temp file in the directory where the resolution found the file (a link's
//! target's directory: the link stays a link) and is renamed over its name, so a kill at any moment
//! leaves the old content or the new, never a truncated file. A rename makes a new inode: other hard
//! links to the file keep the old content. Where that directory takes no new file (no write
//! permission on it) but the file itself is writable, the content is rewritten in place as the
//! contract's reference does (truncate and write, not atomic), so such an edit still succeeds.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use agentd_protocol::fs::EditResult;
use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::errno;
use crate::root::{Node, ResolveError, Workspace};
use crate::transfer::UploadTarget;

pub fn edit(path: &str, old: &str, new: &str, replace_all: bool, ws: &Workspace) -> EditResult {
    let fail = |error: String| EditResult { error: Some(error), ..EditResult::default() };
    if old.is_empty() {
        return fail("Error: old_string cannot be empty. Provide the exact text to replace.".to_owned());
    }
    let denied = || fail(format!("Error: Permission denied editing file '{path}'"));
    let other = |err: std::io::Error| fail(format!("Error editing file '{path}': {err}"));
    if path.contains('\0') {
        return fail(format!("Error editing file '{path}': invalid_path"));
    }
    // `stat("")` fails with ENOENT; joined to the workspace it would name the workspace itself.
    if path.is_empty() {
        return fail(format!("Error: File '{path}' not found"));
    }
    let node = match ws.node(path, true) {
        Ok(Some(node)) => node,
        Ok(None) => return fail(format!("Error: File '{path}' not found")),
        Err(ResolveError::Escape) => return fail(format!("Error editing file '{path}': invalid_path")),
        Err(err) if matches!(err.errno(), Some(Errno::EACCES | Errno::EPERM)) => return denied(),
        Err(_) => return fail(format!("Error: File '{path}' not found")),
    };
    if !node.is_file() {
        return fail(format!("Error: '{path}' is not a regular file"));
    }
    // One fd for the read and the write: read-write when allowed, else read-only, keeping why (a file
    // that cannot be written still gets its content checked first, as the contract orders).
    let denied_errno = |err: &std::io::Error| matches!(errno(err), Some(Errno::EACCES | Errno::EPERM));
    let opened = match node.open(OFlag::O_RDWR) {
        Ok(file) => Ok((file, None)),
        Err(err) if denied_errno(&err) || matches!(errno(&err), Some(Errno::EROFS | Errno::ETXTBSY)) => {
            node.open(OFlag::O_RDONLY).map(|file| (file, Some(err)))
        }
        Err(err) => Err(err),
    };
    let mut bytes = Vec::new();
    let (file, unwritable) = match opened.and_then(|(mut file, unwritable)| {
        file.read_to_end(&mut bytes)?;
        Ok((file, unwritable))
    }) {
        Ok(opened) => opened,
        Err(err) if denied_errno(&err) => return denied(),
        Err(err) => return other(err),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return fail(format!("Error: File '{path}' is not a text file"));
    };
    let crlf = |s: &str| s.replace("\r\n", "\n").replace('\n', "\r\n");
    let lf = |s: &str| s.replace("\r\n", "\n");
    let candidates = [(old.to_owned(), new.to_owned()), (crlf(old), crlf(new)), (lf(old), lf(new))];
    let Some((count, (old_form, new_form))) = candidates
        .iter()
        .map(|pair| (text.matches(pair.0.as_str()).count(), pair))
        .find(|(count, _)| *count >= 1)
    else {
        return fail(format!("Error: String not found in file: '{old}'"));
    };
    if count > 1 && !replace_all {
        return fail(format!(
            "Error: String '{old}' appears multiple times. Use replace_all=True to replace all occurrences."
        ));
    }
    let edited =
        if replace_all { text.replace(old_form, new_form) } else { text.replacen(old_form, new_form, 1) };
    let written = match unwritable {
        None => replace(&node, &file, edited.as_bytes(), ws),
        Some(err) => Err(err),
    };
    match written {
        Ok(()) => EditResult {
            error: None,
            path: Some(path.to_owned()),
            occurrences: Some(if replace_all { count as u64 } else { 1 }),
        },
        Err(err) if matches!(errno(&err), Some(Errno::EACCES | Errno::EPERM)) => denied(),
        Err(err) => other(err),
    }
}

/// Replaces the file `node` (opened read-write as `file`) with `bytes`: see the module doc.
fn replace(node: &Node, file: &File, bytes: &[u8], ws: &Workspace) -> std::io::Result<()> {
    let (dir, name) = node.parent();
    let real_dir = ws.real_path(node.location().parent().unwrap_or(Path::new("")));
    match UploadTarget::create(dir, name, &real_dir, Some(node.stat()), None).map(UploadTarget::unsynced) {
        Ok(mut target) => match target.write(bytes) {
            Ok(()) => target.commit_io(),
            Err(err) => {
                target.remove();
                Err(err)
            }
        },
        Err(err) if matches!(errno(&err), Some(Errno::EACCES | Errno::EPERM)) => {
            file.set_len(0).and_then(|()| file.write_all_at(bytes, 0))
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(initial: &[u8], old: &str, new: &str, replace_all: bool) -> (EditResult, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, initial).unwrap();
        let result = edit("f", old, new, replace_all, &Workspace::open(dir.path().into()));
        (result, std::fs::read(&path).unwrap())
    }

    fn ok(occurrences: u64) -> EditResult {
        EditResult { error: None, path: Some("f".into()), occurrences: Some(occurrences) }
    }

    #[test]
    fn golden_24_to_29() {
        assert_eq!(run(b"a\r\nb\r\nc\r\n", "b\nc", "X\nY", false), (ok(1), b"a\r\nX\r\nY\r\n".to_vec()));
        assert_eq!(run(b"a\r\nb\r\nc\r\n", "b\r\nc", "X\nY", false), (ok(1), b"a\r\nX\nY\r\n".to_vec()));
        assert_eq!(run(b"a\nb\nc\n", "a\r\nb", "P\r\nQ", false), (ok(1), b"P\nQ\nc\n".to_vec()));
        assert_eq!(
            run(b"x\r\ny\nx\ny\r\nx\r\ny", "x\ny", "Z", true),
            (ok(1), b"x\r\ny\nZ\r\nx\r\ny".to_vec())
        );
        assert_eq!(
            run(b"a\nb", "b\n", "c\n", false).0.error.as_deref(),
            Some("Error: String not found in file: 'b\n'")
        );
        let many = run(b"apple\nbanana\napple\n", "apple", "pear", false).0;
        assert_eq!(
            many.error.as_deref(),
            Some(
                "Error: String 'apple' appears multiple times. Use replace_all=True to replace all occurrences."
            )
        );
        assert_eq!(
            run(b"apple\nbanana\napple\n", "apple", "pear", true),
            (ok(2), b"pear\nbanana\npear\n".to_vec())
        );
        assert_eq!(run(b"aaa", "aa", "X", false), (ok(1), b"Xa".to_vec()));
        assert_eq!(run(b"aaaa", "aa", "X", true), (ok(2), b"XX".to_vec()));
        assert_eq!(run(b"hello", "hello", "hello", false), (ok(1), b"hello".to_vec()));
    }

    #[test]
    fn golden_30_31_errors_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let ws = &Workspace::open(base.into());
        assert_eq!(
            edit("missing", "", "y", false, ws).error.as_deref(),
            Some("Error: old_string cannot be empty. Provide the exact text to replace.")
        );
        assert_eq!(
            edit("missing", "a", "b", false, ws).error.as_deref(),
            Some("Error: File 'missing' not found")
        );
        std::fs::write(base.join("bin"), b"ab\xffcd").unwrap();
        assert_eq!(
            edit("bin", "ab", "y", false, ws).error.as_deref(),
            Some("Error: File 'bin' is not a text file")
        );
        std::fs::create_dir(base.join("d")).unwrap();
        assert_eq!(
            edit("d", "ab", "y", false, ws).error.as_deref(),
            Some("Error: 'd' is not a regular file")
        );
        std::fs::write(base.join("f"), b"abc").unwrap();
        std::os::unix::fs::symlink(base.join("f"), base.join("ln")).unwrap();
        assert_eq!(edit("ln", "a", "Z", false, ws).error, None);
        assert_eq!(std::fs::read(base.join("f")).unwrap(), b"Zbc");
        assert!(std::fs::symlink_metadata(base.join("ln")).unwrap().file_type().is_symlink());
    }

    #[test]
    fn edits_replace_the_links_target_whole_and_drop_setuid() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let ws = &Workspace::open(base.into());
        std::fs::create_dir(base.join("sub")).unwrap();
        let long = "e".repeat(255);
        let target = base.join("sub").join(&long);
        std::fs::write(&target, "#!/bin/sh\necho old\n").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::symlink(format!("sub/{long}"), base.join("ln")).unwrap();
        let before = std::fs::metadata(&target).unwrap();
        assert_eq!(edit("ln", "old", "new", false, ws).error, None);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "#!/bin/sh\necho new\n");
        let after = std::fs::metadata(&target).unwrap();
        // A new inode (renamed into place), the mode kept without setuid, the link still a link.
        assert_ne!(std::os::unix::fs::MetadataExt::ino(&after), std::os::unix::fs::MetadataExt::ino(&before));
        assert_eq!(after.permissions().mode() & 0o7777, 0o755);
        assert!(std::fs::symlink_metadata(base.join("ln")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_dir(base.join("sub")).unwrap().count(), 1);
        assert_eq!(edit(&format!("sub/{long}"), "new", "x", false, ws).error, None);
    }
}
