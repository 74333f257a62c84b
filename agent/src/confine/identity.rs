//! Who a command becomes before its exec, and who agentd's file work for its sandbox runs as: the
//! profile's `user`.
//!
//! Under `user = "sandbox"` (the default) a command can do to the machine only what an unprivileged
//! user could: when agentd is root, it becomes a uid and gid of this agentd's own
//! ([`sandbox_id`]: no file, process or socket of anyone else's is its own, not even another
//! agentd's sandbox's) with no supplementary groups, and it keeps no capability (so `reboot`,
//! `settimeofday`, `sethostname`, netlink, `mknod`, `prlimit`/renice of other users' processes and
//! reading what only root may read all fail as they fail for any user); `no_new_privs` keeps setuid
//! programs and file capabilities from giving any back: with it the kernel caps what an exec
//! permits at what the process had, nothing. The bounding set is left as it is: under those two it
//! bounds nothing more, and emptying it is one `prctl` per capability, each a new set of
//! credentials (about 60 µs a command, 8 % of a round trip, measured). It also enters an
//! IPC namespace of this agentd's own, so no System V or POSIX IPC object of the machine is in
//! reach. When agentd is not root it cannot change users: commands run as agentd's own user, with
//! whatever capabilities agentd had dropped.
//!
//! [`decide`] is the pure rule over the facts read at start ([`Facts`]); [`Identity::apply`] the raw
//! system calls, for the calling thread only (a child before its exec, or a worker thread of
//! [`crate::confine::Confiner`]'s file work), never through libc, whose wrappers change every
//! thread of the process.

use agentd_protocol::profile::{Level, User, sandbox_id};

use crate::syscall::{self, Errno};

/// What [`decide`] needs to know of agentd, read once at start.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub euid: u32,
    pub pid: u32,
    /// Lines of `/proc/self/uid_map` and `gid_map`: `(inside, outside, count)`.
    pub uid_map: Vec<(u32, u32, u32)>,
    pub gid_map: Vec<(u32, u32, u32)>,
}

impl Facts {
    pub fn read() -> Self {
        let map = |path: &str| parse_map(&std::fs::read_to_string(path).unwrap_or_default());
        Self {
            euid: nix::unistd::geteuid().as_raw(),
            pid: std::process::id(),
            uid_map: map("/proc/self/uid_map"),
            gid_map: map("/proc/self/gid_map"),
        }
    }
}

/// `inside outside count` lines. Pure.
fn parse_map(text: &str) -> Vec<(u32, u32, u32)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(str::parse::<u32>);
            Some((fields.next()?.ok()?, fields.next()?.ok()?, fields.next()?.ok()?))
        })
        .collect()
}

fn mapped(map: &[(u32, u32, u32)], id: u32) -> bool {
    map.iter().any(|&(inside, _, count)| id >= inside && u64::from(id) < u64::from(inside) + u64::from(count))
}

/// What `user` gets on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Become this `(uid, gid)`, with no supplementary groups.
    pub switch: Option<(u32, u32)>,
    /// Enter agentd's IPC namespace (agentd is root).
    pub root_steps: bool,
    /// Drop every capability (all but `user = "agentd"`).
    pub drop: bool,
    /// The report's `privileges`, and why it is less than full.
    pub level: Level,
    pub notes: Vec<String>,
}

/// What `user` gets from an agentd with `facts`. Pure.
pub fn decide(user: User, facts: &Facts) -> Decision {
    let root = facts.euid == 0;
    let mut notes = Vec::new();
    let wanted = match user {
        User::Agentd => {
            return Decision {
                switch: None,
                root_steps: false,
                drop: false,
                level: Level::NotRequested,
                notes,
            };
        }
        User::Sandbox if root => Some((sandbox_id(facts.pid), sandbox_id(facts.pid))),
        User::Sandbox => None,
        User::Id { uid, gid } if root || uid == facts.euid => Some((uid, gid)),
        User::Id { uid, gid } => {
            notes.push(format!(
                "user {uid}:{gid}: agentd runs as uid {} and cannot change users, so commands run as its own",
                facts.euid
            ));
            None
        }
    };
    let (switch, mut level) = match wanted {
        Some((uid, _)) if uid == facts.euid => (None, Level::Full),
        Some((uid, gid)) if !mapped(&facts.uid_map, uid) || !mapped(&facts.gid_map, gid) => {
            notes.push(format!(
                "user {uid}:{gid} is not mapped in agentd's user namespace: commands stay uid {} without \
                 capabilities",
                facts.euid
            ));
            (None, Level::Partial)
        }
        Some(ids) => (Some(ids), Level::Full),
        None if user == User::Sandbox => {
            notes.push(format!(
                "privileges: commands run as agentd's own user (uid {}), without capabilities",
                facts.euid
            ));
            (None, Level::Full)
        }
        None => (None, Level::NotEnforced),
    };
    if root && switch.is_none() && level == Level::Full {
        // Root without capabilities still owns root's files.
        level = Level::Partial;
    }
    Decision { switch, root_steps: root, drop: true, level, notes }
}

/// [`Decision`] made applicable: plain values, so a child (on raw system calls, nothing allocated)
/// can apply it.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    switch: Option<(u32, u32)>,
    /// agentd's IPC namespace, entered first (a descriptor the [`crate::confine::Confiner`] holds
    /// for agentd's life).
    ipc: Option<i32>,
}

impl Identity {
    /// `None` when nothing is to be changed (`user = "agentd"`).
    pub fn new(decision: &Decision, ipc: Option<i32>) -> Option<Self> {
        decision
            .drop
            .then_some(Self { switch: decision.switch, ipc: if decision.root_steps { ipc } else { None } })
    }

    /// The same for a thread of agentd's own ([`super::files`]): it keeps agentd's IPC namespace.
    pub fn for_thread(self) -> Self {
        Self { ipc: None, ..self }
    }

    /// Applies it to the calling thread: raw system calls only.
    pub fn apply(&self) -> Result<(), Errno> {
        if let Some(ipc) = self.ipc {
            syscall::setns(ipc, libc::CLONE_NEWIPC)?;
        }
        // Ambient capabilities exist from Linux 4.3; older kernels have none to clear.
        match syscall::prctl3(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as usize, 0) {
            Ok(_) | Err(libc::EINVAL) => {}
            Err(errno) => return Err(errno),
        }
        if let Some((uid, gid)) = self.switch {
            syscall::drop_groups()?;
            syscall::set_gid(gid)?;
            syscall::set_uid(uid)?;
        }
        syscall::clear_capabilities()
    }

    /// Whether the calling thread is as [`Identity::apply`] leaves it: the ids, and no capability.
    pub fn holds(&self) -> bool {
        let ids = self.switch.is_none_or(|wanted| syscall::ids() == wanted);
        ids && syscall::has_no_capabilities() == Ok(true)
    }
}

/// A `PATH` value for commands of another user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPath {
    /// The value without the directories the user cannot search.
    pub path: String,
    /// Directories that exist but that the user cannot search (a pyenv or nvm under root's home):
    /// the programs there are out of the commands' reach, which a person should be told.
    pub unreachable: Vec<String>,
}

/// `path` (a `PATH` value) without the directories `uid`:`gid` cannot search (`/root/.cargo/bin` in
/// root's `PATH`): a shell that meets one reports a missing command as "Permission denied".
pub fn searchable_path(path: &str, uid: u32, gid: u32) -> SandboxPath {
    let (kept, dropped): (Vec<_>, Vec<_>) =
        std::env::split_paths(path).partition(|dir| searchable(dir, uid, gid));
    let text = |dir: &std::path::PathBuf| dir.to_string_lossy().into_owned();
    SandboxPath {
        path: kept.iter().map(text).collect::<Vec<_>>().join(":"),
        unreachable: dropped
            .iter()
            .enumerate()
            .filter(|(at, dir)| dir.is_absolute() && dir.is_dir() && !dropped[..*at].contains(dir))
            .map(|(_, dir)| text(dir))
            .collect(),
    }
}

/// Whether `uid`:`gid` (no supplementary groups) can search `dir` and every directory above it.
pub fn searchable(dir: &std::path::Path, uid: u32, gid: u32) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    dir.is_absolute()
        && dir.ancestors().all(|step| {
            std::fs::metadata(step).is_ok_and(|meta| {
                let mode = meta.mode();
                meta.is_dir()
                    && if meta.uid() == uid {
                        mode & 0o100 != 0
                    } else if meta.gid() == gid {
                        mode & 0o010 != 0
                    } else {
                        mode & 0o001 != 0
                    }
            })
        })
}

/// A new IPC namespace for agentd's commands, held by the returned descriptor: made on a thread of
/// its own, which alone enters it and then ends. `None` where agentd may not (not root).
pub fn ipc_namespace() -> Option<std::os::fd::OwnedFd> {
    let made = std::thread::Builder::new().name("agentd-ipc-ns".into()).spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWIPC).ok()?;
        std::fs::File::open("/proc/thread-self/ns/ipc").ok().map(std::os::fd::OwnedFd::from)
    });
    match made.map(std::thread::JoinHandle::join) {
        Ok(Ok(fd)) => fd,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(euid: u32) -> Facts {
        let all = vec![(0, 0, u32::MAX)];
        Facts { euid, pid: 4242, uid_map: all.clone(), gid_map: all }
    }

    #[test]
    fn path_keeps_the_directories_the_user_can_search() {
        let top = tempfile::tempdir().unwrap();
        let closed = top.path().join("closed");
        let open = top.path().join("open");
        for (dir, mode) in [(&closed, 0o700), (&open, 0o755)] {
            std::fs::create_dir(dir).unwrap();
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        }
        std::fs::set_permissions(top.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = format!("/usr/bin:{}:{}:relative:/nonexistent", closed.display(), open.display());
        let id = sandbox_id(1);
        assert_eq!(
            searchable_path(&path, id, id),
            SandboxPath {
                path: format!("/usr/bin:{}", open.display()),
                unreachable: vec![closed.display().to_string()]
            }
        );
    }

    #[test]
    fn maps_are_read_as_the_kernel_writes_them() {
        let map = parse_map("         0          0 4294967295\n    1000   100000  65536\nbad\n");
        assert_eq!(map, [(0, 0, u32::MAX), (1000, 100_000, 65536)]);
        assert!(mapped(&map, 1_600_004_242) && mapped(&map, 66_535) && mapped(&map, 0));
        let rootless = parse_map("0 1000 1\n1 100000 65536\n");
        assert!(mapped(&rootless, 65536) && !mapped(&rootless, 65537) && !mapped(&rootless, 1_600_000_000));
    }

    #[test]
    fn root_gives_commands_a_user_of_their_own_without_capabilities() {
        let d = decide(User::Sandbox, &facts(0));
        assert_eq!(d.switch, Some((sandbox_id(4242), sandbox_id(4242))));
        assert!(d.root_steps && d.drop);
        assert_eq!(d.level, Level::Full);
        assert!(d.notes.is_empty(), "{:?}", d.notes);
        let d = decide(User::Id { uid: 1000, gid: 100 }, &facts(0));
        assert_eq!((d.switch, d.level), (Some((1000, 100)), Level::Full));
    }

    #[test]
    fn agentd_keeps_its_own_user_only_when_the_profile_says_so() {
        let d = decide(User::Agentd, &facts(0));
        assert_eq!(
            d,
            Decision {
                switch: None,
                root_steps: false,
                drop: false,
                level: Level::NotRequested,
                notes: vec![]
            }
        );
    }

    #[test]
    fn an_unprivileged_agentd_runs_commands_as_itself_without_capabilities() {
        let d = decide(User::Sandbox, &facts(1000));
        assert_eq!((d.switch, d.root_steps, d.drop, d.level), (None, false, true, Level::Full));
        assert!(d.notes[0].contains("agentd's own user (uid 1000)"), "{:?}", d.notes);
        let d = decide(User::Id { uid: 1000, gid: 1000 }, &facts(1000));
        assert_eq!((d.switch, d.level), (None, Level::Full));
        let d = decide(User::Id { uid: 2000, gid: 2000 }, &facts(1000));
        assert_eq!((d.switch, d.level), (None, Level::NotEnforced));
        assert!(d.notes[0].contains("cannot change users"), "{:?}", d.notes);
    }

    #[test]
    fn an_unmapped_sandbox_user_leaves_root_without_capabilities_only() {
        let mut rootless = facts(0);
        rootless.uid_map = parse_map("0 1000 1\n1 100000 65536\n");
        let d = decide(User::Sandbox, &rootless);
        assert_eq!((d.switch, d.root_steps, d.level), (None, true, Level::Partial));
        assert!(d.notes[0].contains("not mapped"), "{:?}", d.notes);
        // A uid inside the map works.
        let d = decide(User::Id { uid: 1000, gid: 1000 }, &rootless);
        assert_eq!((d.switch, d.level), (Some((1000, 1000)), Level::Full));
    }
}
