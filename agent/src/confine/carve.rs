//! Withheld paths: landlock only grants, so keeping a path (agentd's token file, the cgroup tree)
//! from a command that may read or write around it is a carve-out of the grants.
//!
//! For a root R granted rights G that contains withheld paths: R gets G minus every right withheld
//! beneath it; along the way from R to each withheld path P, every *sibling* entry (existing now,
//! other than the one leading on) gets back the rights withheld from its directory; P gets none
//! of them. Landlock's rights are the union of the rules on a path's ancestors, so no rule on the
//! way to P carries what is withheld from P.
//!
//! Consequences, documented in docs/profiles.md:
//! - entries created later directly in a directory on the way (`/`, `/run`, `/sys`, `/sys/fs`)
//!   do not get the withheld rights; and since the token's withheld rights include every write
//!   right, those directories cannot get new entries or lose old ones: a command cannot rename the
//!   token, nor any directory on its way, to pass it off as a sibling at the next plan;
//! - renaming or linking P to a place with more rights is refused by landlock's refer rules
//!   (`EXDEV`); at ABI 1 every reparenting is refused;
//! - a withheld file with other hard links, or reachable through another mount, is reachable
//!   there: hard links are reported (partial), other mounts are not seen.
//!
//! Listing the directories on the way costs a few dozen system calls per command, so a ruleset is
//! reused while what it was built from is unchanged ([`Seen`]): the roots are the same inodes and
//! the listed directories have the same change times.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use landlock::{ABI, Access as _, AccessFs, BitFlags, PathBeneath, RulesetCreated, RulesetCreatedAttr as _};

/// A path kept from every command that runs under a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    /// Canonical.
    pub path: PathBuf,
    pub keep: Keep,
}

/// What is kept from a withheld path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// A secret: no reading (or executing) its content, no writing, no moving it.
    ReadsAndWrites,
    /// No writing beneath it; reading stays.
    Writes,
    /// No reading (or executing) file content beneath it; listing and writing stay (a read-deny
    /// permission rule).
    Reads,
    /// Nothing kept from it, but its name is: neither it nor a directory on its way is removed
    /// or renamed, so nothing else takes its name (a subtree granted back inside a read-denied
    /// one: `mv .env README.md` under `allow read README.md` would make the secret readable).
    Name,
}

impl Withheld {
    /// A file (or tree) no command may read or write.
    pub fn secret(path: PathBuf) -> Self {
        Self { path, keep: Keep::ReadsAndWrites }
    }

    /// A tree no command may write to.
    pub fn read_only(path: PathBuf) -> Self {
        Self { path, keep: Keep::Writes }
    }

    /// The landlock rights kept at the path and beneath it, as this ABI names them. Listing a
    /// directory (`ReadDir`) stays, so `ls /run` works beside `/run/agentd.token`. A read-denied
    /// subtree also loses `Refer`: nothing is linked or moved out of it (or into it) to another
    /// directory.
    pub fn rights(&self, abi: ABI) -> BitFlags<AccessFs> {
        match self.keep {
            Keep::ReadsAndWrites => AccessFs::from_write(abi) | AccessFs::ReadFile | AccessFs::Execute,
            Keep::Writes => AccessFs::from_write(abi),
            Keep::Reads => super::permits::read_rights() | (AccessFs::from_all(abi) & AccessFs::Refer),
            Keep::Name => BitFlags::empty(),
        }
    }

    /// The rights the directories on the way to the path lack (their other entries get them back):
    /// its own, and for a read-denied path also removing and reparenting, so that neither it nor a
    /// directory on its way is renamed (`mv .env notes.txt`, `mv secret pub`, `mv a a2`) to a name
    /// the next command's ruleset would grant. Writes withheld already include both.
    pub fn way_rights(&self, abi: ABI) -> BitFlags<AccessFs> {
        let moves = AccessFs::RemoveFile | AccessFs::RemoveDir | AccessFs::Refer;
        match self.keep {
            Keep::ReadsAndWrites | Keep::Writes => self.rights(abi),
            Keep::Reads | Keep::Name => self.rights(abi) | (moves & AccessFs::from_all(abi)),
        }
    }

    /// For the report.
    pub fn describe(&self) -> String {
        match self.keep {
            Keep::ReadsAndWrites => format!("{}: not readable or writable", self.path.display()),
            Keep::Writes => format!("{}: not writable", self.path.display()),
            Keep::Reads => format!("{}: not readable", self.path.display()),
            Keep::Name => format!("{}: not renamed", self.path.display()),
        }
    }
}

/// agentd's own withheld paths: its token file (when it has one) and the cgroup tree (a command that
/// writes `cgroup.procs` or `tasks` leaves its pids cgroup).
pub fn agentd_withheld(token_file: Option<&Path>) -> Vec<Withheld> {
    let cgroups = Path::new("/sys/fs/cgroup");
    // Where there is none, withholding it would only cost `/` its write rights.
    let mut withheld: Vec<Withheld> =
        cgroups.exists().then(|| Withheld::read_only(cgroups.to_owned())).into_iter().collect();
    if let Some(file) = token_file {
        // agentd read the file at start, so it exists; an absolute path is the fallback.
        let path = std::fs::canonicalize(file)
            .or_else(|_| std::path::absolute(file))
            .unwrap_or_else(|_| file.to_owned());
        withheld.push(Withheld::secret(path));
    }
    withheld
}

/// What a ruleset was built from: a root (its inode) or a listed directory (its inode and times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    path: PathBuf,
    listed: bool,
    /// `(dev, ino, mtime, mtime_nsec, ctime, ctime_nsec)`; `None`: absent.
    state: Option<(u64, u64, i64, i64, i64, i64)>,
}

impl Seen {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A listed directory (its entries matter), not a root (only its inode does).
    pub fn listed(&self) -> bool {
        self.listed
    }

    fn now(path: &Path, listed: bool) -> Self {
        let state = std::fs::metadata(path).ok().map(|m| {
            // A root's content changes all the time and does not matter: only which inode it is.
            if listed {
                (m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec())
            } else {
                (m.dev(), m.ino(), 0, 0, 0, 0)
            }
        });
        Self { path: path.to_owned(), listed, state }
    }
}

/// Nothing a ruleset was built from has changed since.
pub fn unchanged(seen: &[Seen]) -> bool {
    seen.iter().all(|s| Seen::now(&s.path, s.listed) == *s)
}

/// Adds the rule for `root` granted `granted`, carved around `withheld`; what it looked at goes to
/// `seen`.
pub fn add_root(
    ruleset: RulesetCreated,
    root: &Path,
    granted: BitFlags<AccessFs>,
    withheld: &[Withheld],
    abi: ABI,
    seen: &mut Vec<Seen>,
) -> Result<RulesetCreated, String> {
    seen.push(Seen::now(root, false));
    let mut covering = BitFlags::empty();
    let mut beneath = Vec::new();
    for w in withheld {
        if root.starts_with(&w.path) {
            covering |= w.rights(abi);
        } else if w.path.starts_with(root) {
            beneath.push(Below { path: w.path.as_path(), own: w.rights(abi), way: w.way_rights(abi) });
        }
    }
    let granted = granted & !covering;
    let missing = beneath.iter().fold(BitFlags::empty(), |all, b| all | b.way);
    let ruleset = add_rule(ruleset, root, granted & !missing)?;
    carve(ruleset, root, granted, missing, &beneath, seen)
}

/// A withheld path beneath a directory being carved: the rights kept from it (`own`) and from the
/// directories on its way (`way`, which includes `own`).
#[derive(Clone, Copy)]
struct Below<'a> {
    path: &'a Path,
    own: BitFlags<AccessFs>,
    way: BitFlags<AccessFs>,
}

/// Notes on withheld files that have other names (hard links), which are not withheld.
pub fn link_notes(withheld: &[Withheld]) -> Vec<String> {
    withheld
        .iter()
        .filter_map(|w| {
            let meta = std::fs::metadata(&w.path).ok()?;
            (!meta.is_dir() && meta.nlink() > 1).then(|| {
                format!("{} has {} hard links: only this name is withheld", w.path.display(), meta.nlink())
            })
        })
        .collect()
}

/// Grants what `dir` lacks (`missing`, out of `granted`) back to every entry of `dir` that does not
/// lead to a withheld path in `below`, and walks on towards those.
fn carve(
    mut ruleset: RulesetCreated,
    dir: &Path,
    granted: BitFlags<AccessFs>,
    missing: BitFlags<AccessFs>,
    below: &[Below<'_>],
    seen: &mut Vec<Seen>,
) -> Result<RulesetCreated, String> {
    if below.is_empty() || (granted & missing).is_empty() {
        return Ok(ruleset);
    }
    // Before listing: a change after this is seen as a change at the next check.
    seen.push(Seen::now(dir, true));
    // The entry of `dir` a withheld path goes through.
    let step = |path: &Path| {
        path.strip_prefix(dir)
            .ok()
            .and_then(|rest| rest.components().next())
            .map(|c| c.as_os_str().to_owned())
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // Nothing listed, nothing granted back: fewer rights, never more.
        Err(_) => return Ok(ruleset),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        // Links are skipped: they get rights where they point, and following one here could grant
        // a withheld path; one on the way means the path is no longer canonical, so nothing
        // beneath it is granted.
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        let child = dir.join(&name);
        let on_way: Vec<_> =
            below.iter().filter(|b| step(b.path).is_some_and(|c| c == name)).copied().collect();
        if on_way.is_empty() {
            // A sibling: what its directory lacks.
            ruleset = add_rule(ruleset, &child, granted & missing)?;
            continue;
        }
        // On the way: it lacks what is withheld from the directories on the way beneath it; at a
        // withheld path, that path's own rights are gone for good beneath it.
        let own = on_way.iter().filter(|b| b.path == child).fold(BitFlags::empty(), |a, b| a | b.own);
        let deeper: Vec<_> = on_way.into_iter().filter(|b| b.path != child).collect();
        let child_missing = deeper.iter().fold(own, |all, b| all | b.way);
        ruleset = add_rule(ruleset, &child, granted & missing & !child_missing)?;
        ruleset = carve(ruleset, &child, granted & !own, child_missing & !own, &deeper, seen)?;
    }
    Ok(ruleset)
}

/// A rule on `path`, a canonical path (roots come resolved from admission, withheld paths and
/// their siblings are built from them): it is opened with no symlink followed anywhere on the way, so
/// a component swapped for a link since it was resolved grants nothing rather than the link's target.
/// A path that does not exist (any more) grants nothing either.
fn add_rule(
    ruleset: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, String> {
    if access.is_empty() {
        return Ok(ruleset);
    }
    match open_canonical(path) {
        Some(fd) => rule_on(ruleset, fd, path, access),
        None => Ok(ruleset),
    }
}

/// Opens `path` (`O_PATH`) only if no component of it is a symlink.
fn open_canonical(path: &Path) -> Option<std::fs::File> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let how =
        OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC).resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how) {
        Ok(fd) => Some(fd.into()),
        // Before Linux 5.6: the path must still resolve to itself, then it is opened without
        // following a final link (a swap between the two checks is not caught there).
        Err(nix::errno::Errno::ENOSYS) => {
            use std::os::unix::fs::OpenOptionsExt as _;
            if std::fs::canonicalize(path).ok()? != path {
                return None;
            }
            let flags = libc::O_PATH | libc::O_NOFOLLOW;
            std::fs::File::options().read(true).custom_flags(flags).open(path).ok()
        }
        Err(_) => None,
    }
}

fn rule_on(
    ruleset: RulesetCreated,
    fd: std::fs::File,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, String> {
    let meta = fd.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.file_type().is_symlink() {
        return Ok(ruleset);
    }
    // A file takes only the rights that apply to files.
    let access = if meta.is_dir() { access } else { access & AccessFs::from_file(ABI::V5) };
    if access.is_empty() {
        return Ok(ruleset);
    }
    ruleset.add_rule(PathBeneath::new(fd, access)).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a read-denied path keeps from moves: the directories on its way can neither remove nor
    /// reparent an entry (no rename of it or of them), it loses reparenting for its subtree;
    /// creating stays everywhere, and writes withheld keep what they kept.
    #[test]
    fn a_read_denied_path_and_its_way_keep_their_names() {
        let abi = ABI::V5;
        let moves = AccessFs::RemoveFile | AccessFs::RemoveDir | AccessFs::Refer;
        let reads = Withheld { path: "/ws/.env".into(), keep: Keep::Reads };
        assert_eq!(reads.rights(abi), AccessFs::ReadFile | AccessFs::Execute | AccessFs::Refer);
        assert_eq!(reads.way_rights(abi), reads.rights(abi) | moves);
        assert!((reads.way_rights(abi) & (AccessFs::MakeReg | AccessFs::MakeDir)).is_empty());
        let name = Withheld { path: "/ws/README.md".into(), keep: Keep::Name };
        assert_eq!((name.rights(abi), name.way_rights(abi)), (BitFlags::empty(), moves));
        let writes = Withheld::read_only("/ws/src".into());
        assert_eq!(writes.way_rights(abi), writes.rights(abi));
        // At ABI 1 there is no Refer right to withhold: every reparenting is refused there.
        assert_eq!(
            reads.way_rights(ABI::V1),
            AccessFs::ReadFile | AccessFs::Execute | AccessFs::RemoveFile | AccessFs::RemoveDir
        );
    }

    #[test]
    fn canonical_paths_open_only_without_links() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("sub")).unwrap();
        std::os::unix::fs::symlink(real.join("sub"), real.join("link")).unwrap();
        assert!(open_canonical(&real.join("sub")).is_some());
        assert!(open_canonical(&real.join("link")).is_none(), "a final link");
        assert!(open_canonical(&real.join("link/x")).is_none(), "a link on the way");
        std::fs::create_dir(real.join("sub/x")).unwrap();
        assert!(open_canonical(&real.join("sub/x")).is_some());
        assert!(open_canonical(&real.join("link/x")).is_none());
        assert!(open_canonical(&real.join("missing")).is_none());
    }

    #[test]
    fn a_ruleset_is_stale_once_a_listed_directory_or_a_root_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let seen = vec![Seen::now(dir.path(), true), Seen::now(&root, false)];
        assert!(unchanged(&seen));
        // Writing inside a root does not matter.
        std::fs::write(root.join("file"), "x").unwrap();
        assert!(unchanged(&seen));
        // A new entry in a listed directory does.
        std::fs::write(dir.path().join("new"), "x").unwrap();
        assert!(!unchanged(&seen));
        // So does another directory in a root's place.
        let seen = vec![Seen::now(&root, false)];
        std::fs::rename(&root, dir.path().join("old")).unwrap();
        std::fs::create_dir(&root).unwrap();
        assert!(!unchanged(&seen));
        // And a root that appears.
        let absent = vec![Seen::now(&dir.path().join("later"), false)];
        assert!(unchanged(&absent));
        std::fs::create_dir(dir.path().join("later")).unwrap();
        assert!(!unchanged(&absent));
    }
}
