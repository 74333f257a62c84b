//! The workspace, and with `--root` the virtual-path guard: every path a verb or transfer names is
//! resolved under the root, `/` meaning the root itself, and a path that would leave it (a `..`
//! component, or a symlink whose target lies outside) is refused.
//!
//! Without `--root` the workspace is agentd's working directory and only relative paths are joined
//! to it; absolute paths are the machine's own, as in any sandbox where agentd is the only tenant.

use std::path::{Component, Path, PathBuf};

use thiserror::Error;

/// A path that would leave the root.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("path leaves the root")]
pub struct Escape;

#[derive(Debug, Clone)]
pub struct Workspace {
    /// Default working directory of commands; base of relative paths.
    dir: PathBuf,
    /// Confined: every path lives under `dir` (already canonical).
    confined: bool,
}

impl Workspace {
    /// An unconfined workspace at `dir`.
    pub fn open(dir: PathBuf) -> Self {
        Self { dir, confined: false }
    }

    /// A confined workspace: `dir` must be canonical (no symlinks in it).
    pub fn confined(dir: PathBuf) -> Self {
        Self { dir, confined: true }
    }

    /// The file `path` names.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, Escape> {
        if !self.confined {
            return Ok(self.dir.join(path));
        }
        let mut resolved = self.dir.clone();
        for component in Path::new(path).components() {
            match component {
                Component::Normal(name) => resolved.push(name),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => return Err(Escape),
            }
        }
        // Links: the deepest part of the path that exists, with every link followed, must stay inside.
        let mut probe = resolved.as_path();
        loop {
            match probe.canonicalize() {
                Ok(real) if real.starts_with(&self.dir) => break,
                Ok(_) => return Err(Escape),
                Err(_) => match probe.parent() {
                    Some(parent) => probe = parent,
                    None => break,
                },
            }
        }
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confined_paths_stay_under_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("in")).unwrap();
        let ws = Workspace::confined(root.clone());
        assert_eq!(ws.resolve("/sub/f"), Ok(root.join("sub/f")));
        assert_eq!(ws.resolve("sub/f"), Ok(root.join("sub/f")));
        assert_eq!(ws.resolve("/"), Ok(root.clone()));
        assert_eq!(ws.resolve("/in/new/deeper"), Ok(root.join("in/new/deeper")));
        assert_eq!(ws.resolve("/../etc/passwd"), Err(Escape));
        assert_eq!(ws.resolve("sub/../../x"), Err(Escape));
        assert_eq!(ws.resolve("/out/secret"), Err(Escape));
        assert_eq!(ws.resolve("/out"), Err(Escape));
        let open = Workspace::open(root.clone());
        assert_eq!(open.resolve("/etc/passwd"), Ok(PathBuf::from("/etc/passwd")));
        assert_eq!(open.resolve("rel"), Ok(root.join("rel")));
    }
}
