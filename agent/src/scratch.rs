//! agentd's scratch directory: where inline captures spill and kept processes' journals live.
//!
//! A command may write where agentd makes this directory (`/tmp` is often a writable root), and may
//! plant what it likes there before a later agentd starts. So the directory is never taken as found:
//! its name `agentd-<pid>.<64 random bits>` is not known in advance, `mkdir` makes it or fails (a
//! planted entry of that name, link or directory, is an error, never used), it is opened by that
//! one name beneath its parent's descriptor without following a link, and kept only when the open
//! directory is agentd's own user's, mode 0700. Everything in it is then reached through that
//! descriptor, and its files are made 0600 ([`crate::exec::capture::CaptureTarget::private`]).
//!
//! Where: the first of [`parents`] that lies under no root lent to commands (a writable root, or the
//! workspace): lending would hand the directory to the sandbox user ([`crate::confine`]'s lease),
//! and a root a command writes is a root it can read. Commands of agentd's own user under a profile
//! are also kept out by landlock (the directory is withheld like the token file).
//!
//! A `flock` is held on the directory for agentd's life: the sweep of a later agentd
//! ([`crate::leftovers`]) leaves it alone.

use std::fs::File;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, mkdirat};
use thiserror::Error;

/// Names tried in one parent before giving up on it: a clash of 64 random bits is someone guessing.
const NAME_TRIES: usize = 4;

#[derive(Debug, Error)]
pub enum ScratchError {
    #[error("no directory for agentd's scratch directory outside the roots lent to commands; tried {0}")]
    NoParent(String),
    #[error("cannot make agentd's scratch directory in `{parent}`: {source}")]
    Make { parent: PathBuf, source: Errno },
    #[error("`{path}` is not a directory of agentd's own user with mode 0700 (something was planted there)")]
    NotPrivate { path: PathBuf },
}

/// agentd's own directory, open and locked for agentd's life.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    dir: Arc<OwnedFd>,
    _lock: Flock<File>,
}

impl Scratch {
    /// Makes the scratch directory in the first of `parents` it can be made in.
    pub fn make(parents: &[PathBuf]) -> Result<Self, ScratchError> {
        let mut tried = Vec::new();
        for parent in parents {
            match Self::make_in(parent) {
                Ok(scratch) => return Ok(scratch),
                Err(err) => {
                    tracing::debug!("{err}");
                    tried.push(err.to_string());
                }
            }
        }
        Err(ScratchError::NoParent(if tried.is_empty() { "none".to_owned() } else { tried.join("; ") }))
    }

    fn make_in(parent: &Path) -> Result<Self, ScratchError> {
        let make = |source: Errno| ScratchError::Make { parent: parent.to_owned(), source };
        let parent_fd =
            nix::fcntl::open(parent, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(make)?;
        let pid = std::process::id();
        let mut clash = Errno::EEXIST;
        for _ in 0..NAME_TRIES {
            let name = format!("agentd-{pid}.{:016x}", rand::random::<u64>());
            match mkdirat(&parent_fd, name.as_str(), Mode::S_IRWXU) {
                Ok(()) => return Self::take(parent, &parent_fd, &name),
                Err(Errno::EEXIST) => clash = Errno::EEXIST,
                Err(err) => return Err(make(err)),
            }
        }
        Err(make(clash))
    }

    /// Opens the directory just made as `name` and keeps it only if it is private.
    fn take(parent: &Path, parent_fd: &OwnedFd, name: &str) -> Result<Self, ScratchError> {
        let path = parent.join(name);
        let not_private = || ScratchError::NotPrivate { path: path.clone() };
        // One component, `O_NOFOLLOW`: what `RESOLVE_NO_SYMLINKS` would give; a link is refused.
        let dir = openat(
            parent_fd,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .map_err(|_| not_private())?;
        let euid = nix::unistd::geteuid().as_raw();
        // A umask may have taken bits from 0700; the owner and type are checked on what was opened.
        if !fstat(&dir).is_ok_and(|stat| is_own_directory(&stat, euid)) {
            return Err(not_private());
        }
        fchmod(&dir, Mode::S_IRWXU).map_err(|_| not_private())?;
        if !fstat(&dir).is_ok_and(|stat| is_private_directory(&stat, euid)) {
            return Err(not_private());
        }
        let lock_fd = dir.as_fd().try_clone_to_owned().map_err(|_| not_private())?;
        let lock =
            Flock::lock(File::from(lock_fd), FlockArg::LockExclusiveNonblock).map_err(|_| not_private())?;
        Ok(Self { path, dir: Arc::new(dir), _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory: files in it are made and read beneath it, by name.
    pub fn dir(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.dir)
    }

    /// Removes the directory and what is in it (links in it are removed, never followed).
    pub fn remove(self) {
        if let Err(err) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!("cannot remove {}: {err}", self.path.display());
        }
    }
}

/// A directory owned by `euid`. Pure.
fn is_own_directory(stat: &FileStat, euid: u32) -> bool {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR && stat.st_uid == euid
}

/// A directory owned by `euid` that no one else may enter (mode 0700 exactly). Pure.
fn is_private_directory(stat: &FileStat, euid: u32) -> bool {
    is_own_directory(stat, euid) && stat.st_mode & 0o7777 == 0o700
}

/// Where the scratch directory may go, in order: the temp dir, else a directory of the system's
/// (`/run` first for commands of agentd's own user under a profile, whose landlock carve-out then
/// costs `/run`, not the temp dir, its new entries), less every one under a root in `lent` (all
/// canonical). Pure.
pub fn parents(temp_dir: &Path, withheld: bool, lent: &[PathBuf]) -> Vec<PathBuf> {
    let system = [Path::new("/run"), Path::new("/var/tmp"), Path::new("/tmp")];
    let ordered: Vec<&Path> = if withheld {
        system.iter().take(1).copied().chain([temp_dir]).chain(system.iter().skip(1).copied()).collect()
    } else {
        [temp_dir].into_iter().chain(system).collect()
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for parent in ordered {
        if !lent.iter().any(|root| parent.starts_with(root)) && !out.iter().any(|seen| seen == parent) {
            out.push(parent.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn the_scratch_directory_goes_under_no_lent_root() {
        let tmp = Path::new("/tmp");
        assert_eq!(parents(tmp, false, &[]), paths(&["/tmp", "/run", "/var/tmp"]));
        // README's example profile lends /tmp.
        assert_eq!(parents(tmp, false, &paths(&["/workspace", "/tmp"])), paths(&["/run", "/var/tmp"]));
        // A TMPDIR inside a lent root (the workspace) is passed over, whatever its depth.
        let inside = Path::new("/workspace/.tmp");
        assert_eq!(parents(inside, false, &paths(&["/workspace"])), paths(&["/run", "/var/tmp", "/tmp"]));
        // Commands of agentd's own user: /run first.
        assert_eq!(parents(tmp, true, &[]), paths(&["/run", "/tmp", "/var/tmp"]));
        // Everything lent: nowhere.
        assert_eq!(parents(tmp, false, &paths(&["/"])), Vec::<PathBuf>::new());
    }

    #[test]
    fn only_a_private_directory_of_agentds_user_is_kept() {
        let stat = |mode: u32, uid: u32| {
            // SAFETY: `stat` is plain old data; all zeroes is a valid value.
            let mut stat: FileStat = unsafe { std::mem::zeroed() };
            stat.st_mode = mode;
            stat.st_uid = uid;
            stat
        };
        assert!(is_private_directory(&stat(libc::S_IFDIR | 0o700, 7), 7));
        assert!(!is_private_directory(&stat(libc::S_IFDIR | 0o755, 7), 7));
        assert!(!is_private_directory(&stat(libc::S_IFDIR | 0o700, 8), 7));
        assert!(!is_private_directory(&stat(libc::S_IFLNK | 0o700, 7), 7));
        assert!(is_own_directory(&stat(libc::S_IFDIR | 0o755, 7), 7));
        assert!(!is_own_directory(&stat(libc::S_IFREG | 0o700, 7), 7));
    }

    #[test]
    fn a_planted_name_is_never_taken() {
        let parent = tempfile::tempdir().unwrap();
        let made = Scratch::make(&[parent.path().to_owned()]).unwrap();
        let meta = std::fs::symlink_metadata(made.path()).unwrap();
        assert!(meta.is_dir());
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777, 0o700);
        // A link planted by the name is refused by `take`, never followed.
        let target = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(target.path(), parent.path().join("agentd-1.planted")).unwrap();
        let fd = nix::fcntl::open(parent.path(), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        assert!(matches!(
            Scratch::take(parent.path(), &fd, "agentd-1.planted"),
            Err(ScratchError::NotPrivate { .. })
        ));
        made.remove();
    }
}
