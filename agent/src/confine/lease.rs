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
//!
//! What a permission rule denies (read or write) is not lent either: its owner keeps its metadata
//! (mode, times, owner), which no landlock right covers. Where the sandbox user could not read
//! it otherwise (a 0600 file of agentd's user), its group becomes the sandbox user's, with the
//! owner's rights less write when write is denied ([`shared_mode`]); at shutdown its group and mode
//! are what they were. A directory denied is still looked inside: what a rule allows there again
//! is lent.
//!
//! Roots lent to one live agentd are never another's: [`record`] keeps who lent what, and an
//! agentd whose roots overlap a live one's refuses to start; the sandbox users of live agentds are
//! never taken from ([`Handover::spared`]).

pub mod record;

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use agentd_protocol::profile::is_sandbox_id;
use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat};
use nix::unistd::{Gid, Uid, fchown, fchownat};

/// Directories deeper than this below a root are left as they are (each level holds a descriptor).
const MAX_DEPTH: usize = 64;

/// What changes owner: from `from` to `to`, `(uid, gid)` each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    pub to: (u32, u32),
    /// Entries owned by this uid change hands; `None`: entries owned by a sandbox id (the range
    /// sandbox users come from: this agentd's or a dead one's).
    pub from: Option<u32>,
    /// When lending: sandbox ids of dead agentds change hands too.
    pub sandbox_ids: bool,
    /// Sandbox users of live agentds ([`record`]): never taken.
    pub spared: Vec<u32>,
}

impl Handover {
    fn takes(&self, uid: u32) -> bool {
        uid != self.to.0
            && (self.from == Some(uid)
                || (self.sandbox_ids && is_sandbox_id(uid) && !self.spared.contains(&uid)))
    }
}

/// What the permission rules deny of an entry's path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Denied {
    pub read: bool,
    pub write: bool,
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
    /// Keep its owner, give its group to `to`'s and set this mode (a denied entry the sandbox
    /// user could not read otherwise); a directory is looked inside.
    Share(u32),
}

/// The mode that lets a group read what a denied entry of `mode` lets its owner (write only when
/// `write` is not denied), when the other users' bits do not already; setuid and setgid dropped
/// from what is not a directory. Pure.
pub fn shared_mode(mode: u32, dir: bool, denied: Denied) -> Option<u32> {
    let owner = (mode >> 6) & 0o7;
    let want = if denied.write { owner & 0o5 } else { owner };
    if mode & 0o7 & want == want {
        return None;
    }
    let special = if dir { mode & 0o7000 } else { mode & 0o1000 };
    Some(special | (mode & 0o707) | (want << 3))
}

/// What `handover` does with an entry of `stat` on the root's device `dev`, which the rules deny
/// as `denied` says. Pure.
pub fn lends(stat: &FileStat, dev: u64, handover: &Handover, denied: Denied) -> Action {
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    let action = owner_rule(stat, dev, handover);
    if !(denied.read || denied.write) {
        return action;
    }
    // Denied: its metadata stays its owner's.
    let dir = kind == SFlag::S_IFDIR;
    let leave = if dir { Action::Enter } else { Action::Skip };
    match action {
        Action::Take if handover.from == Some(stat.st_uid) && (dir || kind == SFlag::S_IFREG) => {
            shared_mode(stat.st_mode & 0o7777, dir, denied).map_or(leave, Action::Share)
        }
        Action::Take | Action::Enter | Action::Share(_) => leave,
        Action::Skip => Action::Skip,
    }
}

/// [`lends`] by owner, kind and place alone.
fn owner_rule(stat: &FileStat, dev: u64, handover: &Handover) -> Action {
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

/// Whether `handover` lends `root` itself (takes it or looks inside): only such roots are recorded.
pub fn lends_root(root: &Path, handover: &Handover) -> bool {
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    nix::fcntl::open(root, flags, Mode::empty())
        .and_then(|dir| fstat(&dir))
        .is_ok_and(|stat| lends(&stat, stat.st_dev, handover, Denied::default()) != Action::Skip)
}

/// Entries [`Action::Share`] changed: their group and mode before, by `(device, inode)`.
pub type Shared = HashMap<(u64, u64), (u32, u32)>;

/// Which way a walk goes.
pub enum Direction<'a> {
    /// To the sandbox user: `denied` says what the rules deny of a path (real, absolute); what is
    /// shared is recorded.
    Lend { denied: &'a dyn Fn(&Path) -> Denied, shared: &'a mut Shared },
    /// Back to agentd's user: what was shared gets its group and mode back.
    Back { shared: &'a Shared },
}

/// Hands `root` and what is below it over, as [`lends`] says; returns how many entries changed
/// owner or group. Errors on single entries are passed over (the rest still changes hands).
pub fn hand_over(root: &Path, handover: &Handover, mut direction: Direction<'_>) -> usize {
    let Ok(dir) =
        nix::fcntl::open(root, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
    else {
        return 0;
    };
    let Ok(stat) = fstat(&dir) else { return 0 };
    let mut walk = Walk { dev: stat.st_dev, handover, direction: &mut direction };
    let (changed, enter) = walk.apply(&dir, None, root, &stat);
    if enter { changed + walk.below(dir, root.to_owned(), 0) } else { changed }
}

struct Walk<'w, 'a> {
    dev: u64,
    handover: &'w Handover,
    direction: &'w mut Direction<'a>,
}

impl Walk<'_, '_> {
    /// Does what the rule says with the entry `name` of `dir` (`None`: `dir` itself) at `path`:
    /// how many entries changed (0 or 1), and whether to look inside it.
    fn apply(&mut self, dir: &impl AsFd, name: Option<&CStr>, path: &Path, stat: &FileStat) -> (usize, bool) {
        let is_dir = stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits();
        let denied = match self.direction {
            Direction::Lend { denied, .. } => denied(path),
            Direction::Back { .. } => Denied::default(),
        };
        let action = lends(stat, self.dev, self.handover, denied);
        let changed = match (action, &mut *self.direction) {
            (Action::Take, _) => usize::from(chown(dir, name, self.handover)),
            (Action::Share(mode), Direction::Lend { shared, .. })
                if !shared.contains_key(&(stat.st_dev, stat.st_ino)) =>
            {
                let gid = self.handover.to.1;
                let before = (stat.st_gid, stat.st_mode & 0o7777);
                let done = regroup(dir, name, stat, gid, mode);
                if done {
                    shared.insert((stat.st_dev, stat.st_ino), before);
                }
                usize::from(done)
            }
            (Action::Enter | Action::Skip, Direction::Back { shared })
                if stat.st_uid == self.handover.to.0 =>
            {
                match shared.get(&(stat.st_dev, stat.st_ino)) {
                    Some(&(gid, mode)) => usize::from(regroup(dir, name, stat, gid, mode)),
                    None => 0,
                }
            }
            (Action::Share(_) | Action::Enter | Action::Skip, _) => 0,
        };
        (changed, is_dir && action != Action::Skip)
    }

    /// Walks the directory `dir` at `path`.
    fn below(&mut self, dir: OwnedFd, path: PathBuf, depth: usize) -> usize {
        if depth >= MAX_DEPTH {
            return 0;
        }
        let Ok(mut listing) = Dir::from_fd(dir) else { return 0 };
        let mut changed = 0;
        let mut below = Vec::new();
        let names: Vec<std::ffi::CString> = listing
            .iter()
            .flatten()
            .filter(|entry| !matches!(entry.file_name().to_bytes(), b"." | b".."))
            .map(|entry| entry.file_name().to_owned())
            .collect();
        for name in &names {
            let Ok(stat) = fstatat(&listing, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else { continue };
            let at = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let (done, enter) = self.apply(&listing, Some(name), &at, &stat);
            changed += done;
            if enter {
                below.push((name.clone(), at));
            }
        }
        for (name, at) in below {
            let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            if let Ok(child) = openat(&listing, name.as_c_str(), flags, Mode::empty()) {
                changed += self.below(child, at, depth + 1);
            }
        }
        changed
    }
}

fn chown(dir: &impl AsFd, name: Option<&CStr>, handover: &Handover) -> bool {
    let (uid, gid) = handover.to;
    let (path, flags) = match name {
        Some(name) => (name, AtFlags::AT_SYMLINK_NOFOLLOW),
        None => (c"", AtFlags::AT_EMPTY_PATH),
    };
    fchownat(dir, path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)), flags).is_ok()
}

/// Sets the group and mode of the entry `name` of `dir` (`None`: `dir` itself), if it is still
/// the one `stat` describes: opened without following a link, changed through its descriptor.
fn regroup(dir: &impl AsFd, name: Option<&CStr>, stat: &FileStat, gid: u32, mode: u32) -> bool {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let opened = match name {
        Some(name) => openat(dir, name, flags, Mode::empty()),
        None => openat(dir, c".", flags, Mode::empty()),
    };
    let Ok(fd) = opened else { return false };
    let same = fstat(&fd).is_ok_and(|now| (now.st_dev, now.st_ino) == (stat.st_dev, stat.st_ino));
    // The group first: a change of group clears setgid, which the mode then sets as wanted.
    same && fchown(&fd, None, Some(Gid::from_raw(gid))).is_ok()
        && fchmod(&fd, Mode::from_bits_truncate(mode)).is_ok()
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

    const OPEN: Denied = Denied { read: false, write: false };

    #[test]
    fn what_is_lent_and_what_is_left() {
        let me = sandbox_id(10);
        let live = sandbox_id(11);
        let lend = Handover { to: (me, me), from: Some(0), sandbox_ids: true, spared: vec![live] };
        let dir = |mode, uid| stat(SFlag::S_IFDIR, mode, uid, 2);
        let file = |uid, nlink| stat(SFlag::S_IFREG, 0o644, uid, nlink);
        let lends = |stat: &FileStat, dev, handover: &Handover| lends(stat, dev, handover, OPEN);
        assert_eq!(lends(&dir(0o700, 0), 7, &lend), Action::Take);
        assert_eq!(lends(&file(0, 1), 7, &lend), Action::Take);
        assert_eq!(lends(&file(sandbox_id(99), 1), 7, &lend), Action::Take, "a dead agentd's");
        assert_eq!(lends(&file(live, 1), 7, &lend), Action::Skip, "a live agentd's");
        assert_eq!(lends(&dir(0o700, live), 7, &lend), Action::Skip);
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

        let back = Handover { to: (0, 0), from: Some(me), sandbox_ids: false, spared: Vec::new() };
        assert_eq!(lends(&file(me, 1), 7, &back), Action::Take);
        assert_eq!(lends(&file(sandbox_id(99), 1), 7, &back), Action::Skip, "not this agentd's");
        assert_eq!(lends(&dir(0o755, 0), 7, &back), Action::Enter);
    }

    #[test]
    fn what_a_rule_denies_keeps_its_owner() {
        let me = sandbox_id(10);
        let lend = Handover { to: (me, me), from: Some(0), sandbox_ids: true, spared: Vec::new() };
        let write = Denied { read: false, write: true };
        let read = Denied { read: true, write: false };
        let entry = |kind, mode, uid| stat(kind, mode, uid, 1);
        let (file, dir) = (SFlag::S_IFREG, SFlag::S_IFDIR);
        // Readable by everyone already: left as it is; a directory is still looked inside.
        assert_eq!(lends(&entry(file, 0o644, 0), 7, &lend, write), Action::Skip);
        assert_eq!(lends(&entry(dir, 0o755, 0), 7, &lend, write), Action::Enter);
        // Private to agentd's user: the sandbox user's group may read it, never write it.
        assert_eq!(lends(&entry(file, 0o600, 0), 7, &lend, write), Action::Share(0o640));
        assert_eq!(
            lends(&entry(file, 0o6755, 0), 7, &lend, write),
            Action::Skip,
            "others may read and run it"
        );
        assert_eq!(lends(&entry(file, 0o4700, 0), 7, &lend, write), Action::Share(0o750), "no setuid");
        assert_eq!(lends(&entry(dir, 0o700, 0), 7, &lend, write), Action::Share(0o750));
        assert_eq!(lends(&entry(dir, 0o2700, 0), 7, &lend, read), Action::Share(0o2770), "write allowed");
        // Another's, a dead sandbox's, a link, a hard link: left.
        assert_eq!(lends(&entry(file, 0o600, 1000), 7, &lend, write), Action::Skip);
        assert_eq!(lends(&entry(file, 0o600, sandbox_id(99)), 7, &lend, write), Action::Skip);
        assert_eq!(lends(&entry(dir, 0o700, sandbox_id(99)), 7, &lend, write), Action::Enter);
        assert_eq!(lends(&entry(SFlag::S_IFLNK, 0o777, 0), 7, &lend, write), Action::Skip);
        assert_eq!(lends(&stat(file, 0o600, 0, 2), 7, &lend, write), Action::Skip);
        assert_eq!(lends(&entry(dir, 0o700, 0), 8, &lend, write), Action::Skip, "another mount");
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
        std::fs::create_dir(root.join("locked")).unwrap();
        std::fs::write(root.join("locked/secret"), "z").unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
        };
        mode(&root.join("locked"), 0o700);
        mode(&root.join("locked/secret"), 0o600);
        let meta = |p: &Path| {
            use std::os::unix::fs::MetadataExt as _;
            let meta = std::fs::symlink_metadata(root.join(p)).unwrap();
            (meta.uid(), meta.gid(), meta.mode() & 0o7777)
        };
        let lend = Handover { to: (me, me), from: Some(0), sandbox_ids: true, spared: Vec::new() };
        let locked = root.join("locked");
        let denied = |path: &Path| Denied { read: false, write: path.starts_with(&locked) };
        let mut shared = Shared::new();
        let lent = hand_over(&root, &lend, Direction::Lend { denied: &denied, shared: &mut shared });
        assert_eq!(lent, 7, "w, a, b, f and the link itself; locked and its secret shared");
        for p in ["", "a", "a/b", "a/b/f", "link"] {
            assert_eq!(meta(Path::new(p)).0, me, "{p}");
        }
        assert_eq!(meta(Path::new("locked")), (0, me, 0o750));
        assert_eq!(meta(Path::new("locked/secret")), (0, me, 0o640));
        assert_eq!(
            std::fs::symlink_metadata(&outside).map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap(),
            0,
            "the link's target, and the hard link, are left"
        );
        let back = Handover { to: (0, 0), from: Some(me), sandbox_ids: false, spared: Vec::new() };
        assert_eq!(hand_over(&root, &back, Direction::Back { shared: &shared }), 7);
        assert_eq!(meta(Path::new("a/b/f")).0, 0);
        assert_eq!(meta(Path::new("locked")), (0, 0, 0o700));
        assert_eq!(meta(Path::new("locked/secret")), (0, 0, 0o600));
    }
}
