//! The workspace and writable roots lent to the sandbox user for agentd's life.
//!
//! A command under `user = "sandbox"` runs as a uid of agentd's own ([`super::identity`]), so the
//! directories it may write must be its own: at start agentd gives the sandbox user what in them
//! belongs to agentd's user or to an earlier agentd's sandbox user (a directory made for the session,
//! files a harness put there, what a killed agentd left), and at shutdown gives back to agentd's
//! user what the sandbox user owns there, so the host finds its files as its own again.
//!
//! What is never touched: a world-writable sticky directory (`/tmp`: everyone may already make files
//! there, and what is in it is other users'), anything of another user, another mount, device nodes,
//! and regular files with more than one name (a hard link to a file outside the root). The walk
//! works on directory descriptors and never follows a link, so a command swapping a directory for a
//! link between two starts cannot turn it to anything outside. [`lends`] is the rule, pure.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use agentd_protocol::profile::is_sandbox_id;
use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat};
use nix::unistd::{Gid, Uid, fchownat};

/// Directories deeper than this below a root are left as they are (each level holds a descriptor).
const MAX_DEPTH: usize = 64;

/// What changes owner: from `from` to `to`, `(uid, gid)` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handover {
    pub to: (u32, u32),
    /// Entries owned by this uid change hands; `None`: entries owned by a sandbox id (the range
    /// sandbox users come from: this agentd's or a dead one's).
    pub from: Option<u32>,
    /// When lending: sandbox ids of dead agentds change hands too.
    pub sandbox_ids: bool,
}

impl Handover {
    fn takes(&self, uid: u32) -> bool {
        uid != self.to.0 && (self.from == Some(uid) || (self.sandbox_ids && is_sandbox_id(uid)))
    }
}

/// What the walk does with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Change its owner, and (a directory) look inside.
    Take,
    /// Leave it; a directory is still looked inside (it is already `to`'s).
    Enter,
    /// Leave it and what is below it.
    Skip,
}

/// What `handover` does with an entry of `stat` on the root's device `dev`. Pure.
pub fn lends(stat: &FileStat, dev: u64, handover: &Handover) -> Action {
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    let mode = stat.st_mode & 0o7777;
    if stat.st_dev != dev || kind == SFlag::S_IFBLK || kind == SFlag::S_IFCHR {
        return Action::Skip;
    }
    if kind == SFlag::S_IFDIR && mode & 0o1002 == 0o1002 {
        // Sticky and world-writable: everyone's, like /tmp.
        return Action::Skip;
    }
    if kind == SFlag::S_IFREG && stat.st_nlink > 1 {
        return Action::Skip;
    }
    if handover.takes(stat.st_uid) {
        Action::Take
    } else if stat.st_uid == handover.to.0 && kind == SFlag::S_IFDIR {
        Action::Enter
    } else {
        Action::Skip
    }
}

/// Hands `root` and what is below it over, as [`lends`] says; returns how many entries changed
/// owner. Errors on single entries are passed over (the rest still changes hands).
pub fn hand_over(root: &Path, handover: &Handover) -> usize {
    let Ok(dir) =
        nix::fcntl::open(root, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
    else {
        return 0;
    };
    let Ok(stat) = nix::sys::stat::fstat(&dir) else { return 0 };
    let mut changed = 0;
    match lends(&stat, stat.st_dev, handover) {
        Action::Skip => return 0,
        Action::Take => {
            if chown(&dir, None, handover) {
                changed += 1;
            }
        }
        Action::Enter => {}
    }
    changed + walk(dir, stat.st_dev, handover, 0)
}

fn chown(dir: &impl AsFd, name: Option<&CStr>, handover: &Handover) -> bool {
    let (uid, gid) = handover.to;
    let (path, flags) = match name {
        Some(name) => (name, AtFlags::AT_SYMLINK_NOFOLLOW),
        None => (c"", AtFlags::AT_EMPTY_PATH),
    };
    fchownat(dir, path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)), flags).is_ok()
}

fn walk(dir: OwnedFd, dev: u64, handover: &Handover, depth: usize) -> usize {
    if depth >= MAX_DEPTH {
        return 0;
    }
    let Ok(mut listing) = Dir::from_fd(dir) else { return 0 };
    let mut changed = 0;
    let mut below = Vec::new();
    let names: Vec<(std::ffi::CString, Option<Type>)> = listing
        .iter()
        .flatten()
        .filter(|entry| !matches!(entry.file_name().to_bytes(), b"." | b".."))
        .map(|entry| (entry.file_name().to_owned(), entry.file_type()))
        .collect();
    for (name, _) in &names {
        let Ok(stat) = fstatat(&listing, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else { continue };
        let action = lends(&stat, dev, handover);
        if action == Action::Take && chown(&listing, Some(name), handover) {
            changed += 1;
        }
        let is_dir = stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits();
        if is_dir && action != Action::Skip {
            below.push(name.clone());
        }
    }
    for name in below {
        let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if let Ok(child) = openat(&listing, name.as_c_str(), flags, Mode::empty()) {
            changed += walk(child, dev, handover, depth + 1);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::profile::sandbox_id;

    fn stat(kind: SFlag, mode: u32, uid: u32, nlink: u64) -> FileStat {
        // SAFETY: a plain C struct; all zeros is a valid value.
        let mut stat: FileStat = unsafe { std::mem::zeroed() };
        stat.st_mode = kind.bits() | mode;
        stat.st_uid = uid;
        stat.st_nlink = nlink;
        stat.st_dev = 7;
        stat
    }

    #[test]
    fn what_is_lent_and_what_is_left() {
        let me = sandbox_id(10);
        let lend = Handover { to: (me, me), from: Some(0), sandbox_ids: true };
        let dir = |mode, uid| stat(SFlag::S_IFDIR, mode, uid, 2);
        let file = |uid, nlink| stat(SFlag::S_IFREG, 0o644, uid, nlink);
        assert_eq!(lends(&dir(0o700, 0), 7, &lend), Action::Take);
        assert_eq!(lends(&file(0, 1), 7, &lend), Action::Take);
        assert_eq!(lends(&file(sandbox_id(99), 1), 7, &lend), Action::Take, "a dead agentd's");
        assert_eq!(lends(&dir(0o755, me), 7, &lend), Action::Enter, "already its own");
        assert_eq!(lends(&file(me, 1), 7, &lend), Action::Skip);
        assert_eq!(lends(&file(1000, 1), 7, &lend), Action::Skip, "another user's");
        assert_eq!(lends(&dir(0o755, 1000), 7, &lend), Action::Skip);
        assert_eq!(lends(&file(0, 2), 7, &lend), Action::Skip, "a hard link");
        assert_eq!(lends(&dir(0o1777, 0), 7, &lend), Action::Skip, "everyone's, like /tmp");
        assert_eq!(lends(&stat(SFlag::S_IFCHR, 0o600, 0, 1), 7, &lend), Action::Skip);
        assert_eq!(lends(&stat(SFlag::S_IFBLK, 0o600, 0, 1), 7, &lend), Action::Skip);
        assert_eq!(lends(&dir(0o700, 0), 8, &lend), Action::Skip, "another mount");
        assert_eq!(lends(&stat(SFlag::S_IFLNK, 0o777, 0, 1), 7, &lend), Action::Take);

        let back = Handover { to: (0, 0), from: Some(me), sandbox_ids: false };
        assert_eq!(lends(&file(me, 1), 7, &back), Action::Take);
        assert_eq!(lends(&file(sandbox_id(99), 1), 7, &back), Action::Skip, "not this agentd's");
        assert_eq!(lends(&dir(0o755, 0), 7, &back), Action::Enter);
    }

    #[test]
    fn a_tree_is_lent_and_given_back_without_following_links() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let me = sandbox_id(1);
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("w");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), "x").unwrap();
        let outside = top.path().join("outside");
        std::fs::write(&outside, "y").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::fs::hard_link(&outside, root.join("hard")).unwrap();
        let owner = |p: &Path| std::os::unix::fs::MetadataExt::uid(&std::fs::symlink_metadata(p).unwrap());
        let lend = Handover { to: (me, me), from: Some(0), sandbox_ids: true };
        assert_eq!(hand_over(&root, &lend), 5, "w, a, b, f and the link itself");
        for p in ["", "a", "a/b", "a/b/f", "link"] {
            assert_eq!(owner(&root.join(p)), me, "{p}");
        }
        assert_eq!(owner(&outside), 0, "the link's target, and the hard link, are left");
        assert_eq!(hand_over(&root, &Handover { to: (0, 0), from: Some(me), sandbox_ids: false }), 5);
        assert_eq!(owner(&root.join("a/b/f")), 0);
    }
}
