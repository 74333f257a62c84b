//! `delete` (contract §3.5): a probe (`lexists`), then a recursive removal that never follows links,
//! reporting failures in GNU `rm`'s words.

use std::path::Path;

use agentd_protocol::fs::DeleteResult;

use super::errno;
use crate::root::Workspace;

pub fn delete(path: &str, ws: &Workspace) -> DeleteResult {
    let fail = |error: String| DeleteResult { error: Some(error), path: None };
    let Ok(target) = ws.resolve(path) else {
        return fail(format!("Error deleting file '{path}': invalid_path"));
    };
    if path.is_empty() || path.contains('\0') || std::fs::symlink_metadata(&target).is_err() {
        // A path hidden by an unsearchable parent is "not found" too (the reference's quirk).
        return fail(format!("Error: '{path}' not found"));
    }
    if let Some(refusal) = refusal(path) {
        return fail(format!("Error deleting file '{path}': {refusal}"));
    }
    let mut messages = Vec::new();
    remove(&target, path, &mut messages);
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

/// Removes `target` (shown as `shown`) and, for a real directory, everything below it first; keeps
/// going past failures like `rm -rf`, collecting one message per failure.
fn remove(target: &Path, shown: &str, messages: &mut Vec<String>) {
    let is_dir = std::fs::symlink_metadata(target).map(|m| m.is_dir()).unwrap_or(false);
    let result = if is_dir {
        match std::fs::read_dir(target) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    let child_shown = format!("{}/{}", shown.trim_end_matches('/'), name.to_string_lossy());
                    remove(&entry.path(), &child_shown, messages);
                }
                std::fs::remove_dir(target)
            }
            Err(err) => Err(err),
        }
    } else {
        std::fs::remove_file(target)
    };
    if let Err(err) = result {
        let reason = errno(&err).map_or_else(|| err.to_string(), |e| e.desc().to_owned());
        messages.push(format!("rm: cannot remove '{shown}': {reason}"));
    }
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
