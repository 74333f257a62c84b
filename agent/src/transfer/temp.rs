//! Temporary files of replacements (uploads, `write`, `edit`): where a new content is written before
//! it is renamed over its destination, and how the ones a killed agentd left are found again.
//!
//! - **Names** have a fixed length, independent of the destination's (so a 255-byte name still has
//!   room): `.agentd-<16 hex>-<8 hex>.part`, 38 bytes, the 16 hex random and the 8 hex a digest of
//!   them. A sweep only ever considers names of exactly that form whose digest matches, so a user's
//!   file that merely looks similar (`.agentd-x.part`, another digest, another length) is never
//!   touched.
//! - **Liveness**: the writer holds an exclusive `flock` on its temp file for as long as it writes.
//!   A sweep removes a temp file only when it can take that lock, i.e. when no process holds it any
//!   more (the kernel drops the locks of a killed process). Between `openat` and `flock` the file is
//!   still mode 0000; a sweep takes a mode-0000 temp file only once it is [`UNLOCKED_GRACE`] old, so
//!   it never removes one whose writer is between the two calls.
//! - **Sweeps**: every replacement first sweeps its destination directory (once per directory per
//!   process, see [`sweep_once`]); and each temp file is recorded in [`records_dir`] (a file per temp
//!   file, holding the directory's real path) until it is renamed or removed, so a starting `agentd
//!   serve` finds those a killed process left anywhere in its workspace ([`recorded`]).

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, fchmod, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use sha2::{Digest as _, Sha256};

use crate::root::{self, Kind};

const PREFIX: &str = ".agentd-";
const SUFFIX: &str = ".part";
/// Length of every temp name: prefix, 16 hex, `-`, 8 hex, suffix.
pub const NAME_LEN: usize = PREFIX.len() + 16 + 1 + 8 + SUFFIX.len();
/// Age after which a temp file that never got its lock (still mode 0000) counts as left over.
pub const UNLOCKED_GRACE: Duration = Duration::from_secs(60);
/// Directories remembered as swept by this process before the memory is cleared.
const SWEPT_CAP: usize = 4096;

/// The digest tying the random part of a temp name to agentd.
fn check(random: u64) -> u32 {
    let digest =
        Sha256::new().chain_update(b"agentd temp file\0").chain_update(random.to_be_bytes()).finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The temp name for `random`.
pub fn name(random: u64) -> String {
    format!("{PREFIX}{random:016x}-{:08x}{SUFFIX}", check(random))
}

/// Whether `name` is an agentd temp name: exactly the form of [`name`], lower-case hex, digest
/// matching.
pub fn is_temp_name(name: &[u8]) -> bool {
    let Some(middle) =
        name.strip_prefix(PREFIX.as_bytes()).and_then(|rest| rest.strip_suffix(SUFFIX.as_bytes()))
    else {
        return false;
    };
    let lower_hex = |part: &[u8]| part.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    match (middle.get(..16), middle.get(16), middle.get(17..)) {
        (Some(random), Some(b'-'), Some(digest))
            if digest.len() == 8 && lower_hex(random) && lower_hex(digest) =>
        {
            let parse =
                |hex: &[u8]| std::str::from_utf8(hex).ok().and_then(|s| u64::from_str_radix(s, 16).ok());
            matches!((parse(random), parse(digest)), (Some(r), Some(d)) if u64::from(check(r)) == d)
        }
        _ => false,
    }
}

/// A temp file being written: its name in the destination directory, the file (its `flock` held),
/// and its record.
#[derive(Debug)]
pub struct Temp {
    pub name: CString,
    pub file: Flock<File>,
    record: Option<PathBuf>,
}

impl Temp {
    /// Creates a temp file in `dir` (whose real path is `real_dir`), after sweeping `dir` once.
    pub fn create(dir: BorrowedFd<'_>, real_dir: &Path) -> io::Result<Self> {
        sweep_once(dir);
        let random = rand::random::<u64>();
        let name = CString::new(name(random)).map_err(|_| Errno::EINVAL)?;
        let record = record(&name, real_dir);
        // Read-write: an unnamed one ([`Temp::unnamed`]) is read back.
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        // Mode 0000 until the lock is held: see the module doc.
        let fd = match openat(dir, name.as_c_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(err) => {
                forget(record.as_deref());
                return Err(err.into());
            }
        };
        let locked = Flock::lock(File::from(fd), FlockArg::LockExclusive)
            .map_err(|(_, errno)| errno)
            .and_then(|file| fchmod(file.as_fd(), Mode::from_bits_truncate(0o600)).map(|()| file));
        match locked {
            Ok(file) => Ok(Self { name, file, record }),
            Err(errno) => {
                let _ = unlinkat(dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir);
                forget(record.as_deref());
                Err(errno.into())
            }
        }
    }

    /// A temp file in `dir` without a name, for content staged away from its destination: made as
    /// every temp file (a kill before the unlink leaves a leftover that is swept), then unlinked at
    /// once, so nothing is left behind whatever happens next.
    pub fn unnamed(dir: BorrowedFd<'_>, real_dir: &Path) -> io::Result<File> {
        let Self { name, file, record } = Self::create(dir, real_dir)?;
        let unlinked = unlinkat(dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir);
        forget(record.as_deref());
        unlinked?;
        file.unlock().map_err(|(_, errno)| errno.into())
    }

    /// The temp file is gone (renamed into place or removed): its record goes too, then its lock.
    pub fn done(self) {
        forget(self.record.as_deref());
    }
}

/// Where temp files are recorded: `$TMPDIR/agentd-temps-<euid>`, mode 0700, agentd's own (one that
/// is not, e.g. made by another user in a shared `/tmp`, is not used). `None` without one.
pub fn records_dir() -> Option<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = std::env::temp_dir().join(format!("agentd-temps-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(dir)
}

/// Records a temp file about to be made: a file named after it holding its directory's real path.
fn record(name: &CStr, real_dir: &Path) -> Option<PathBuf> {
    let path = records_dir()?.join(OsStr::from_bytes(name.to_bytes()));
    std::fs::write(&path, real_dir.as_os_str().as_bytes()).ok()?;
    Some(path)
}

fn forget(record: Option<&Path>) {
    if let Some(path) = record {
        let _ = std::fs::remove_file(path);
    }
}

/// What a sweep found at one temp name.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing there (any more).
    Gone,
    /// A temp file left over: removed now.
    Removed,
    /// In use (locked), too young, or not a temp file of ours: left alone.
    Kept,
}

/// Removes the temp file `name` from `dir` if it is left over: a regular file with one link, a temp
/// name, and no lock held on it (mode 0000: older than [`UNLOCKED_GRACE`]).
pub fn sweep_name(dir: BorrowedFd<'_>, name: &CStr) -> Found {
    if !is_temp_name(name.to_bytes()) {
        return Found::Kept;
    }
    let stat = match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::ENOENT) => return Found::Gone,
        Err(_) => return Found::Kept,
    };
    if Kind::of(&stat) != Kind::File || stat.st_nlink != 1 {
        return Found::Kept;
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let opened = openat(dir, name, flags, Mode::empty());
    let unlocked_old = stat.st_mode & 0o7777 == 0 && age(&stat) >= UNLOCKED_GRACE;
    let lock = match opened {
        Ok(fd) => match Flock::lock(File::from(fd), FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Some(lock),
            Err(_) => return Found::Kept,
        },
        // Mode 0000 cannot be opened without CAP_DAC_OVERRIDE: its age alone decides.
        Err(Errno::EACCES) if unlocked_old => None,
        Err(Errno::ENOENT) => return Found::Gone,
        Err(_) => return Found::Kept,
    };
    if let Some(lock) = &lock {
        // The lock is taken: the writer is gone, or never got its lock (mode 0000, then wait).
        let Ok(now) = fstat(lock.as_fd()) else { return Found::Kept };
        if (now.st_dev, now.st_ino) != (stat.st_dev, stat.st_ino)
            || (now.st_mode & 0o7777 == 0 && age(&now) < UNLOCKED_GRACE)
        {
            return Found::Kept;
        }
    }
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) => Found::Removed,
        Err(Errno::ENOENT) => Found::Gone,
        Err(_) => Found::Kept,
    }
}

fn age(stat: &FileStat) -> Duration {
    let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(stat.st_mtime).unwrap_or(0));
    SystemTime::now().duration_since(modified).unwrap_or(Duration::ZERO)
}

/// Removes the temp files left over in the directory `dir`; how many.
pub fn sweep(dir: BorrowedFd<'_>) -> usize {
    let Ok(listing) =
        openat(dir, c".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
    else {
        return 0;
    };
    let Ok(children) = root::list(&listing) else { return 0 };
    children
        .iter()
        .filter(|child| child.name.to_bytes().len() == NAME_LEN && is_temp_name(child.name.to_bytes()))
        .filter(|child| sweep_name(dir, &child.name) == Found::Removed)
        .count()
}

/// [`sweep`], the first time this process writes into `dir` (remembered by device and inode).
pub fn sweep_once(dir: BorrowedFd<'_>) {
    static SWEPT: Mutex<Option<HashSet<(u64, u64)>>> = Mutex::new(None);
    let Ok(stat) = fstat(dir) else { return };
    let key = (stat.st_dev, stat.st_ino);
    {
        let Ok(mut swept) = SWEPT.lock() else { return };
        let swept = swept.get_or_insert_with(HashSet::new);
        if swept.len() >= SWEPT_CAP {
            swept.clear();
        }
        if !swept.insert(key) {
            return;
        }
    }
    sweep(dir);
}

/// One recorded temp file: the record's path, the temp's name and its directory's real path.
#[derive(Debug)]
pub struct Recorded {
    pub record: PathBuf,
    pub name: CString,
    pub real_dir: PathBuf,
}

/// The records in [`records_dir`].
pub fn recorded() -> Vec<Recorded> {
    let Some(dir) = records_dir() else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            if !is_temp_name(name.as_bytes()) {
                return None;
            }
            let real_dir = std::fs::read(entry.path()).ok()?;
            Some(Recorded {
                record: entry.path(),
                name: CString::new(name.as_bytes()).ok()?,
                real_dir: PathBuf::from(OsStr::from_bytes(&real_dir)),
            })
        })
        .collect()
}

impl Recorded {
    /// Sweeps this temp file from `dir` (its directory, opened); drops the record when the temp file
    /// is gone. A record whose directory is gone: `dir` is `None`, the record is dropped once old.
    pub fn sweep(&self, dir: Option<&OwnedFd>) -> Found {
        let found = match dir {
            Some(dir) => sweep_name(dir.as_fd(), &self.name),
            None => Found::Gone,
        };
        // A record is written just before its temp file: a young one may still get it.
        let old = std::fs::symlink_metadata(&self.record)
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= UNLOCKED_GRACE);
        if found == Found::Removed || (found == Found::Gone && old) {
            forget(Some(&self.record));
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;

    #[test]
    fn names_have_one_length_and_a_digest() {
        for random in [0, 1, u64::MAX, rand::random()] {
            let n = name(random);
            assert_eq!(n.len(), NAME_LEN, "{n}");
            assert!(is_temp_name(n.as_bytes()), "{n}");
        }
        let good = name(0x0123_4567_89ab_cdef);
        let mut wrong_digest = good.clone().into_bytes();
        wrong_digest[PREFIX.len() + 17] = if wrong_digest[PREFIX.len() + 17] == b'0' { b'1' } else { b'0' };
        for similar in [
            b".agentd-x.part".to_vec(),
            b".agentd-0123456789abcdef.part".to_vec(),
            good.to_uppercase().into_bytes(),
            format!("{good}.part").into_bytes(),
            format!("x{good}").into_bytes(),
            good.replace(".part", ".parts").into_bytes(),
            wrong_digest,
            b".notes.txt.agentd-0123456789abcdef.part".to_vec(),
        ] {
            assert!(!is_temp_name(&similar), "{}", String::from_utf8_lossy(&similar));
        }
    }

    #[test]
    fn sweeps_take_only_unlocked_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        // A live temp file (its lock held) stays; once dropped without removal, it is left over.
        let live = Temp::create(fd.as_fd(), dir.path()).unwrap();
        let live_path = dir.path().join(OsStr::from_bytes(live.name.to_bytes()));
        assert_eq!(sweep(fd.as_fd()), 0);
        assert!(live_path.exists());
        let record = live.record.clone();
        drop(live);
        assert_eq!(sweep(fd.as_fd()), 1);
        assert!(!live_path.exists());
        forget(record.as_deref());
        // A user's files that look alike, a temp name that is a directory or has two links: kept.
        let lookalike = dir.path().join(".agentd-0123456789abcdef-00000000.part");
        std::fs::write(&lookalike, "mine").unwrap();
        std::fs::create_dir(dir.path().join(name(7))).unwrap();
        std::fs::write(dir.path().join(name(8)), "x").unwrap();
        std::fs::hard_link(dir.path().join(name(8)), dir.path().join("other")).unwrap();
        // Mode 0000 and young: a writer may be between its open and its lock.
        std::fs::write(dir.path().join(name(9)), "x").unwrap();
        std::fs::set_permissions(
            dir.path().join(name(9)),
            std::os::unix::fs::PermissionsExt::from_mode(0o000),
        )
        .unwrap();
        assert_eq!(sweep(fd.as_fd()), 0);
        for kept in [lookalike, dir.path().join(name(7)), dir.path().join(name(8)), dir.path().join(name(9))]
        {
            assert!(kept.exists(), "{}", kept.display());
        }
    }
}
