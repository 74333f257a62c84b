//! Knowing that nothing a cached ruleset was built from has changed, without looking up a path.
//!
//! A ruleset is built from paths: its roots (which inode each one names), the directories listed
//! around withheld paths (their entries) and, for the report, the withheld files' link counts.
//! Checking them all again before each command takes a few dozen `statx` calls on the file system,
//! work that does not belong on agentd's runtime thread. Instead, once a ruleset is built, each of
//! those paths and each directory on the way to it is watched (inotify), and the mount table is
//! polled. The kernel queues an event within the very system call that changes what is watched, so
//! a change a command made was queued before that command's result went out. Before a cached
//! ruleset is used, [`Watch::current`] reads the queue without blocking. Any event that can matter
//! makes every cached ruleset stale, and the next plan rebuilds off the runtime.
//!
//! What counts ([`Guard::counts`]):
//! - in a directory on the way to a watched path, only the entry that leads on (created, removed,
//!   renamed away or onto);
//! - in a listed directory, any entry, and its own attributes;
//! - a watched withheld file's attributes (a new hard link changes them);
//! - a watched path itself removed or moved, a watch the kernel dropped, lost events (the queue
//!   overflowed), an event on a watch agentd does not know;
//! - any change to the mount table: a mount over a path changes what it names without an inotify
//!   event.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsFd as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

/// How a path is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// Only which inode it names (a root).
    Identity,
    /// Which inode, and every entry in it (a listed directory).
    Listed,
    /// Which inode, and its attributes (a withheld file's link count).
    Attributes,
}

/// The watches of one agentd's cached rulesets and report.
pub struct Watch {
    inotify: Inotify,
    /// `/proc/self/mountinfo`, polled for a change of the mount table.
    mounts: File,
    /// Once the mount table changed, it stays changed until [`Watch::settle`] has read it again.
    mounts_changed: AtomicBool,
    state: Mutex<State>,
}

struct State {
    /// Counts the changes seen: a ruleset checked at generation `g` is fresh while it is still `g`.
    generation: u64,
    guards: HashMap<WatchDescriptor, Guard>,
}

/// What matters of the events of one watch (one inode; several paths may share it).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Guard {
    /// Any entry of the directory.
    entries: bool,
    /// The inode's own attributes.
    attributes: bool,
    /// The entries leading on to watched paths.
    names: HashSet<OsString>,
}

const ENTRY_EVENTS: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO);
const SELF_EVENTS: AddWatchFlags =
    AddWatchFlags::IN_DELETE_SELF.union(AddWatchFlags::IN_MOVE_SELF).union(AddWatchFlags::IN_IGNORED);

impl Guard {
    /// Whether `mask` (with the entry `name`, for an event in a directory) can change what this
    /// watch guards. Pure.
    pub fn counts(&self, mask: AddWatchFlags, name: Option<&std::ffi::OsStr>) -> bool {
        if mask.intersects(SELF_EVENTS | AddWatchFlags::IN_Q_OVERFLOW | AddWatchFlags::IN_UNMOUNT) {
            return true;
        }
        match name {
            // An entry's own attributes: its directory's listing and the way through it stay.
            Some(_) if mask.contains(AddWatchFlags::IN_ATTRIB) => false,
            Some(name) => mask.intersects(ENTRY_EVENTS) && (self.entries || self.names.contains(name)),
            None => mask.contains(AddWatchFlags::IN_ATTRIB) && self.attributes,
        }
    }

    fn mask(&self) -> AddWatchFlags {
        let mut mask = SELF_EVENTS | AddWatchFlags::IN_DONT_FOLLOW;
        if self.entries || !self.names.is_empty() {
            mask |= ENTRY_EVENTS;
        }
        if self.attributes {
            mask |= AddWatchFlags::IN_ATTRIB;
        }
        mask
    }
}

/// Whether any of `events` counts, given the guards they were queued for. Pure.
pub fn any_counts(events: &[InotifyEvent], guards: &HashMap<WatchDescriptor, Guard>) -> bool {
    events.iter().any(|event| match guards.get(&event.wd) {
        Some(guard) => guard.counts(event.mask, event.name.as_deref()),
        // A lost event (its wd is -1) or a watch we do not know: assume the worst.
        None => true,
    })
}

impl Watch {
    /// `None` where inotify or the mount table cannot be had: every ruleset is then checked by
    /// looking at its paths again, off the runtime.
    pub fn new() -> Option<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let mounts = File::open("/proc/self/mountinfo").ok()?;
        Some(Self {
            inotify,
            mounts,
            mounts_changed: AtomicBool::new(false),
            state: Mutex::new(State { generation: 0, guards: HashMap::new() }),
        })
    }

    /// The generation after every queued event was read and the mount table polled: no path is
    /// looked up and nothing blocks, so it runs on the runtime.
    pub fn current(&self) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut changed, queued) = self.poll_changes();
        // The queue is read only when the poll saw events in it.
        if queued {
            loop {
                match self.inotify.read_events() {
                    Ok(events) if events.is_empty() => break,
                    Ok(events) => changed |= any_counts(&events, &state.guards),
                    Err(Errno::EAGAIN) => break,
                    Err(Errno::EINTR) => continue,
                    // Events that cannot be read may have mattered.
                    Err(_) => {
                        changed = true;
                        break;
                    }
                }
            }
        }
        if changed {
            state.generation += 1;
        }
        state.generation
    }

    /// Like [`Watch::current`], after reading the mount table again when it had changed, so that a
    /// later change is seen as a new one. Reads `/proc`: off the runtime.
    pub fn settle(&self) -> u64 {
        // A change of the mount table is counted here (a changed table counts at every read until
        // it is read through), before it is read through.
        let generation = self.current();
        if !self.mounts_changed.swap(false, Ordering::AcqRel) {
            return generation;
        }
        use std::io::Read as _;
        // Reading it through resets the poll; a change from here on is polled again.
        let mut mounts = &self.mounts;
        let read = std::io::Seek::rewind(&mut mounts)
            .and_then(|()| std::io::copy(&mut mounts.take(u64::MAX), &mut std::io::sink()));
        if read.is_err() {
            self.mounts_changed.store(true, Ordering::Release);
        }
        self.current()
    }

    /// Whether a ruleset checked at `generation` is still fresh.
    pub fn fresh(&self, generation: u64) -> bool {
        self.current() == generation
    }

    /// Watches `path` as `how` says, and each directory on the way to it for the entry that leads
    /// on. `false`: some of it could not be watched (it is then checked by looking at it again). A
    /// directory on the way that does not exist ends the way: its creation is an event in its
    /// parent. Looks up paths: off the runtime.
    pub fn add(&self, path: &Path, how: Watched) -> bool {
        let mut components = path.components();
        if components.next() != Some(Component::RootDir) {
            return false;
        }
        let mut dir = PathBuf::from("/");
        for component in components {
            // Paths here are absolute and canonical.
            let Component::Normal(name) = component else { return false };
            match self.guard(&dir, |g| {
                g.names.insert(name.to_owned());
            }) {
                Ok(()) => dir.push(name),
                // `dir` is not there (any more): its parent is watched for its name.
                Err(Errno::ENOENT) => return true,
                Err(_) => return false,
            }
        }
        let watched = self.guard(&dir, |g| match how {
            Watched::Identity => {}
            Watched::Listed => {
                g.entries = true;
                g.attributes = true;
            }
            Watched::Attributes => g.attributes = true,
        });
        matches!(watched, Ok(()) | Err(Errno::ENOENT))
    }

    /// Adds `change` to the guard of `dir`'s watch.
    fn guard(&self, dir: &Path, change: impl FnOnce(&mut Guard)) -> Result<(), Errno> {
        let mut wanted = Guard::default();
        change(&mut wanted);
        // Added to what the inode's watch has: the kernel's answer names the watch, whichever path
        // led to it.
        let mask = wanted.mask() | AddWatchFlags::from_bits_retain(libc::IN_MASK_ADD);
        let wd = self.inotify.add_watch(dir, mask)?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let guard = state.guards.entry(wd).or_default();
        guard.entries |= wanted.entries;
        guard.attributes |= wanted.attributes;
        guard.names.extend(wanted.names);
        Ok(())
    }

    /// One `poll` of both: whether the mount table changed since it was last read through, and
    /// whether inotify has events queued (one system call on the runtime, not one per source).
    fn poll_changes(&self) -> (bool, bool) {
        let mut fds = [
            PollFd::new(self.mounts.as_fd(), PollFlags::POLLPRI),
            PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
        ];
        let (mounts, queued) = match poll(&mut fds, PollTimeout::ZERO) {
            Ok(0) => (false, false),
            Ok(_) => (
                fds[0].revents().is_none_or(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR)),
                fds[1].revents().is_none_or(|r| !r.is_empty()),
            ),
            // The queue is read to find out.
            Err(Errno::EINTR) => (false, true),
            Err(_) => (true, true),
        };
        if mounts {
            self.mounts_changed.store(true, Ordering::Release);
        }
        (mounts || self.mounts_changed.load(Ordering::Acquire), queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh_after(watch: &Watch, change: impl FnOnce()) -> bool {
        let before = watch.settle();
        change();
        watch.fresh(before)
    }

    #[test]
    fn only_what_a_ruleset_was_built_from_makes_it_stale() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("a/root");
        let listed = base.join("listed");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&listed).unwrap();
        std::fs::create_dir_all(base.join("a/other")).unwrap();
        let secret = base.join("secret");
        std::fs::write(&secret, "s").unwrap();
        let watch = Watch::new().unwrap();
        assert!(watch.add(&root, Watched::Identity));
        assert!(watch.add(&listed, Watched::Listed));
        assert!(watch.add(&secret, Watched::Attributes));

        // Work inside a root, beside the way, or on an entry's attributes: still fresh.
        assert!(fresh_after(&watch, || std::fs::write(root.join("file"), "x").unwrap()));
        assert!(fresh_after(&watch, || std::fs::remove_file(root.join("file")).unwrap()));
        assert!(fresh_after(&watch, || std::fs::create_dir(base.join("a/beside")).unwrap()));
        assert!(fresh_after(&watch, || std::fs::rename(base.join("a/other"), base.join("a/moved")).unwrap()));
        assert!(fresh_after(&watch, || std::fs::write(listed.join("../unrelated"), "x").unwrap()));

        // A new entry in a listed directory, or one renamed away.
        assert!(!fresh_after(&watch, || std::fs::write(listed.join("new"), "x").unwrap()));
        assert!(!fresh_after(&watch, || std::fs::rename(listed.join("new"), base.join("out")).unwrap()));
        // A hard link to the withheld file.
        assert!(!fresh_after(&watch, || std::fs::hard_link(&secret, base.join("copy")).unwrap()));
        // Another directory in a root's place, or in place of a directory on the way to it.
        assert!(!fresh_after(&watch, || {
            std::fs::rename(&root, base.join("a/old-root")).unwrap();
            std::fs::create_dir(&root).unwrap();
        }));
        assert!(watch.add(&root, Watched::Identity));
        assert!(!fresh_after(&watch, || std::fs::rename(base.join("a"), base.join("a2")).unwrap()));
    }

    #[test]
    fn a_root_that_appears_later_makes_it_stale() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let watch = Watch::new().unwrap();
        let later = base.join("later/deeper");
        assert!(watch.add(&later, Watched::Identity), "watched through its parent");
        assert!(!fresh_after(&watch, || std::fs::create_dir(base.join("later")).unwrap()));
    }

    #[test]
    fn lost_events_and_unknown_watches_count() {
        let guards = HashMap::new();
        let overflow =
            InotifyEvent { wd: foreign_wd(), mask: AddWatchFlags::IN_Q_OVERFLOW, cookie: 0, name: None };
        assert!(any_counts(&[overflow], &guards));
        let guard = Guard { names: ["on".into()].into(), ..Guard::default() };
        assert!(guard.counts(AddWatchFlags::IN_Q_OVERFLOW, None));
        assert!(guard.counts(AddWatchFlags::IN_IGNORED, None));
        assert!(guard.counts(AddWatchFlags::IN_CREATE, Some("on".as_ref())));
        assert!(!guard.counts(AddWatchFlags::IN_CREATE, Some("off".as_ref())));
        assert!(!guard.counts(AddWatchFlags::IN_ATTRIB, Some("on".as_ref())));
        assert!(!guard.counts(AddWatchFlags::IN_ATTRIB, None));
    }

    /// A watch descriptor agentd never made: one from an instance of its own.
    fn foreign_wd() -> WatchDescriptor {
        let other = Inotify::init(InitFlags::IN_CLOEXEC).unwrap();
        let dir = tempfile::tempdir().unwrap();
        other.add_watch(dir.path(), AddWatchFlags::IN_CREATE).unwrap()
    }
}
