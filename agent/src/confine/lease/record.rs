//! Who lent what: one file per live agentd whose commands run as a sandbox user, naming its pid,
//! that user and the roots lent to it, so that no other agentd re-owns them or takes that user's
//! files while it lives.
//!
//! The files live in [`DIR`], a directory only agentd's user (root) may enter, made without
//! following a link and checked on the descriptor it was opened as: commands cannot write a record
//! or remove one. Each agentd holds an exclusive `flock` on its own file for its life; the kernel
//! drops it however agentd ends (SIGKILL too), so a record is live exactly while its lock is held,
//! whatever has become of its pid since. Reading, sweeping and writing records all happen under
//! an exclusive `flock` of the directory itself, so two agentds starting at once see each other.
//!
//! Roots are compared by identity (device and inode of the root and of every directory above it,
//! taken when the record was written), not by their text: an overlap is one root equal to, above or
//! below another. [`decode`], [`encode`] and [`overlap`] are pure.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use thiserror::Error;

/// Where the records are kept: beneath `/run`, which only root may write (a directory in the
/// shared temp dir could be made first by anyone).
pub const DIR: &str = "/run/agentd-leases";

/// A record larger than this is not one agentd wrote.
const MOST_BYTES: u64 = 1 << 20;

/// The first line of a record, with its version.
const HEADER: &str = "agentd-lease 1";

#[derive(Debug, Error)]
pub enum LeaseError {
    #[error("cannot keep the record of lent roots in {dir}: {reason}")]
    Registry { dir: PathBuf, reason: String },
    #[error(
        "writable root {mine} overlaps {theirs}, lent to the sandbox user of the live agentd pid {pid}: \
         refusing to start (its session's files would change owner); stop that agentd or choose \
         roots apart from it"
    )]
    Overlap { mine: String, theirs: String, pid: u32 },
}

/// One lent root: its path (to be named in messages) and its identity chain, `(device, inode)` of
/// the root first, then of each directory above it up to `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: String,
    pub chain: Vec<(u64, u64)>,
}

/// What one agentd lent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub pid: u32,
    /// Its sandbox user's uid.
    pub uid: u32,
    pub roots: Vec<Root>,
}

/// The record as written: a header line, `pid`, `uid`, then per root a line of `dev:ino` pairs and
/// a line with its path (paths are for messages: one with a newline in it is cut there). Pure.
pub fn encode(record: &Record) -> String {
    let mut text = format!("{HEADER}\npid {}\nuid {}\n", record.pid, record.uid);
    for root in &record.roots {
        let chain: Vec<String> = root.chain.iter().map(|(dev, ino)| format!("{dev}:{ino}")).collect();
        let path = root.path.split('\n').next().unwrap_or_default();
        text.push_str(&format!("root {}\npath {path}\n", chain.join(" ")));
    }
    text
}

/// The record in `text`, or `None` when it is not one [`encode`] wrote. Pure.
pub fn decode(text: &str) -> Option<Record> {
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let pid = lines.next()?.strip_prefix("pid ")?.parse().ok()?;
    let uid = lines.next()?.strip_prefix("uid ")?.parse().ok()?;
    let mut roots = Vec::new();
    while let Some(line) = lines.next() {
        let chain = line
            .strip_prefix("root ")?
            .split(' ')
            .map(|pair| {
                let (dev, ino) = pair.split_once(':')?;
                Some((dev.parse().ok()?, ino.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        let path = lines.next()?.strip_prefix("path ")?.to_owned();
        if chain.is_empty() {
            return None;
        }
        roots.push(Root { path, chain });
    }
    Some(Record { pid, uid, roots })
}

/// The first of `mine` that is `theirs`'s root, above it or beneath it: `(mine, theirs)`. Pure.
pub fn overlap<'a>(mine: &'a [Root], theirs: &'a [Root]) -> Option<(&'a Root, &'a Root)> {
    mine.iter().find_map(|m| {
        theirs.iter().find_map(|t| {
            let (m_id, t_id) = (m.chain.first()?, t.chain.first()?);
            (m.chain.contains(t_id) || t.chain.contains(m_id)).then_some((m, t))
        })
    })
}

/// The identity chain of `path` (absolute, real): `(device, inode)` of it and of each directory
/// above it. Links are not followed (a real path has none).
pub fn chain(path: &Path) -> Option<Vec<(u64, u64)>> {
    use std::os::unix::fs::MetadataExt as _;
    path.is_absolute().then_some(())?;
    path.ancestors()
        .map(|step| std::fs::symlink_metadata(step).ok().map(|meta| (meta.dev(), meta.ino())))
        .collect()
}

/// This agentd's record, held for its life: the file's lock says it is alive. Dropped, the record
/// is removed.
#[derive(Debug)]
pub struct Lease {
    dir: OwnedFd,
    name: CString,
    /// Its lock is the liveness, held until the lease drops.
    file: Flock<File>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(dir) = self.dir.try_clone()
            && let Ok(_held) = Flock::lock(dir, FlockArg::LockExclusive)
        {
            let _ = unlinkat(&self.dir, self.name.as_c_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

/// Records `record` in `dir` (see the module doc) once no live agentd's roots overlap its roots;
/// returns the lease and the uids of the live agentds' sandbox users. Records of dead agentds are
/// removed on the way.
pub fn lease(dir: &Path, record: &Record) -> Result<(Lease, Vec<u32>), LeaseError> {
    let registry = |reason: String| LeaseError::Registry { dir: dir.to_owned(), reason };
    let directory = open_dir(dir).map_err(registry)?;
    let held = Flock::lock(directory, FlockArg::LockExclusive)
        .map_err(|(_, errno)| registry(format!("cannot lock it: {errno}")))?;
    let mut live = Vec::new();
    for (name, theirs) in read_records(&held).map_err(registry)? {
        match theirs {
            Some(theirs) => {
                if let Some((mine, other)) = overlap(&record.roots, &theirs.roots) {
                    return Err(LeaseError::Overlap {
                        mine: mine.path.clone(),
                        theirs: other.path.clone(),
                        pid: theirs.pid,
                    });
                }
                live.push(theirs.uid);
            }
            None => {
                return Err(registry(format!(
                    "the record {} of a live agentd cannot be read by this one",
                    name.to_string_lossy()
                )));
            }
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let name = CString::new(format!("{}-{nanos}", record.pid)).map_err(|e| registry(e.to_string()))?;
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(held.as_fd(), name.as_c_str(), flags, Mode::from_bits_truncate(0o600))
        .map_err(|e| registry(format!("cannot create a record: {e}")))?;
    let file = Flock::lock(File::from(fd), FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| registry(format!("cannot lock its own record: {errno}")))?;
    let dir_fd = held.try_clone().map_err(|e| registry(e.to_string()))?;
    // From here the record is removed on any failure (the lease's drop).
    let lease = Lease { dir: dir_fd, name, file };
    (&*lease.file)
        .write_all(encode(record).as_bytes())
        .map_err(|e| registry(format!("cannot write its record: {e}")))?;
    drop(held);
    Ok((lease, live))
}

/// `dir`, made 0700 when missing, opened without following a link, and checked to be a directory
/// only agentd's user may enter.
fn open_dir(dir: &Path) -> Result<OwnedFd, String> {
    let parent = dir.parent().ok_or("it has no parent")?;
    let name = dir.file_name().ok_or("it has no name")?;
    std::fs::create_dir_all(parent).map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let above = nix::fcntl::open(parent, flags, Mode::empty())
        .map_err(|e| format!("cannot open {}: {e}", parent.display()))?;
    match mkdirat(&above, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => return Err(format!("cannot make it: {errno}")),
    }
    let fd = openat(&above, name, flags, Mode::empty()).map_err(|e| format!("cannot open it: {e}"))?;
    let stat = fstat(&fd).map_err(|e| format!("cannot look at it: {e}"))?;
    let euid = nix::unistd::geteuid().as_raw();
    if stat.st_uid != euid || stat.st_mode & 0o077 != 0 {
        return Err(format!(
            "it is not a directory of uid {euid} that only it may enter (uid {}, mode {:o})",
            stat.st_uid,
            stat.st_mode & 0o7777
        ));
    }
    Ok(fd)
}

/// The records in the locked directory `dir` whose agentd is alive (`None`: alive, but the record
/// does not read); the others are removed.
fn read_records(dir: &Flock<OwnedFd>) -> Result<Vec<(CString, Option<Record>)>, String> {
    let listing = Dir::openat(dir.as_fd(), c".", OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| format!("cannot list it: {e}"))?;
    let names: Vec<CString> = listing
        .into_iter()
        .flatten()
        .map(|entry| entry.file_name().to_owned())
        .filter(|name| !name.to_bytes().starts_with(b"."))
        .collect();
    let mut live = Vec::new();
    for name in names {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let Ok(fd) = openat(dir.as_fd(), name.as_c_str(), flags, Mode::empty()) else { continue };
        let regular = fstat(&fd).is_ok_and(|s| s.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits());
        match Flock::lock(File::from(fd), FlockArg::LockSharedNonblock) {
            // Nobody holds it: its agentd is gone.
            Ok(_dead) => {
                let _ = unlinkat(dir.as_fd(), name.as_c_str(), UnlinkatFlags::NoRemoveDir);
            }
            Err((mut file, Errno::EWOULDBLOCK)) if regular => {
                let mut text = String::new();
                let read = (&mut file).take(MOST_BYTES).read_to_string(&mut text);
                live.push((name, read.ok().and_then(|_| decode(&text))));
            }
            Err(_) => {}
        }
    }
    Ok(live)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(path: &str, chain: &[(u64, u64)]) -> Root {
        Root { path: path.to_owned(), chain: chain.to_vec() }
    }

    #[test]
    fn records_read_back_as_written() {
        let record = Record {
            pid: 42,
            uid: 1_600_000_042,
            roots: vec![root("/w", &[(1, 5), (1, 2)]), root("/a b/c", &[(1, 9), (1, 8), (1, 2)])],
        };
        assert_eq!(decode(&encode(&record)), Some(record.clone()));
        let empty = Record { roots: Vec::new(), ..record };
        assert_eq!(decode(&encode(&empty)), Some(empty));
        for bad in [
            "",
            "agentd-lease 2\npid 1\nuid 2\n",
            "agentd-lease 1\npid x\nuid 2\n",
            "agentd-lease 1\npid 1\nuid 2\nroot 1:2\n",
            "agentd-lease 1\npid 1\nuid 2\nroot \npath /\n",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn roots_overlap_when_one_is_or_holds_the_other() {
        let slash = (1, 2);
        let w = root("/w", &[(1, 5), slash]);
        let inside = root("/w/sub", &[(1, 7), (1, 5), slash]);
        let beside = root("/v", &[(1, 6), slash]);
        let alias = root("/mnt/w", &[(1, 5), (3, 1), slash]);
        let found = |mine: &Root, theirs: &Root| {
            overlap(std::slice::from_ref(mine), std::slice::from_ref(theirs))
                .map(|(m, t)| (m.path.clone(), t.path.clone()))
        };
        assert_eq!(found(&inside, &w), Some(("/w/sub".into(), "/w".into())), "beneath theirs");
        assert_eq!(found(&w, &inside), Some(("/w".into(), "/w/sub".into())), "above theirs");
        assert_eq!(found(&w, &w), Some(("/w".into(), "/w".into())), "the same");
        assert_eq!(
            found(&alias, &w).map(|f| f.0),
            Some("/mnt/w".into()),
            "the same directory by another path"
        );
        assert_eq!(found(&beside, &w), None);
        assert_eq!(found(&root("/", &[slash]), &w).map(|f| f.0), Some("/".into()));
    }

    #[test]
    fn a_live_lease_refuses_an_overlap_and_a_dead_one_is_swept() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("leases");
        let (w, v) = (top.path().join("w"), top.path().join("v"));
        std::fs::create_dir_all(w.join("sub")).unwrap();
        std::fs::create_dir_all(&v).unwrap();
        let record = |pid, path: &Path| Record {
            pid,
            uid: 1000 + pid,
            roots: vec![Root { path: path.display().to_string(), chain: chain(path).unwrap() }],
        };
        let (first, live) = lease(&dir, &record(1, &w)).unwrap();
        assert!(live.is_empty());
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dir).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o700);
        for refused in [w.join("sub"), w.clone(), top.path().to_owned()] {
            match lease(&dir, &record(2, &refused)) {
                Err(LeaseError::Overlap { pid: 1, .. }) => {}
                other => panic!("{}: {other:?}", refused.display()),
            }
        }
        let (second, live) = lease(&dir, &record(3, &v)).unwrap();
        assert_eq!(live, [1001]);
        drop((first, second));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "records go with their leases");
        // A record nobody holds a lock on (its agentd was killed) is swept, whatever its pid.
        std::fs::write(dir.join("1-1"), encode(&record(std::process::id(), &w))).unwrap();
        let (_third, live) = lease(&dir, &record(4, &w)).unwrap();
        assert!(live.is_empty());
        assert!(!dir.join("1-1").exists());
    }
}
