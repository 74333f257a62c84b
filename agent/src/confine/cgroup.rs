//! The per-command pids cgroups' lifecycle: where agentd makes them (beneath its own pids cgroup, in
//! `agentd-<pid>`, swept when that agentd is gone), the empty ones kept for later commands, and the
//! files each is driven through.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::Flock;
use nix::unistd::Pid;

use super::Confiner;
use crate::leftovers;

/// The directory agentd makes its per-command cgroups in, and the lock that tells other agentds it
/// is alive (see [`leftovers`]).
pub(super) struct CgroupParent {
    pub(super) dir: PathBuf,
    /// An exclusive `flock` on `dir`, held for agentd's whole life (the kernel drops it when agentd
    /// dies, however it dies). `None` where the lock could not be taken.
    pub(super) _alive: Option<Flock<File>>,
    /// `dir`'s own join file: commands without a cgroup of their own join the budget here
    /// ([`IdleCgroups::crowded`]).
    pub(super) join: Option<Arc<OwnedFd>>,
}

/// Where agentd can create pids cgroups: beneath its own pids cgroup (so every limit on agentd
/// bounds its commands too; a cgroup at the hierarchy's root once gave a command more processes than
/// agentd itself was allowed), in a directory `agentd-<pid>` with one child per command. What dead
/// agentds left there is swept first: their empty cgroups (a cgroup that still holds a process
/// cannot be removed, `rmdir` refuses it).
pub(super) fn pids_cgroup_parent() -> Option<CgroupParent> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = own_pids_cgroup(&membership, &mounts)?;
    let pid = std::process::id();
    leftovers::sweep_dead_agentds(&own.dir, pid, remove_cgroup_tree);
    let dir = own.dir.join(format!("agentd-{pid}"));
    if own.v2 {
        // v2: the controller must be enabled for our children and for theirs.
        std::fs::write(own.dir.join("cgroup.subtree_control"), "+pids").ok()?;
        std::fs::create_dir_all(&dir).ok()?;
        if std::fs::write(dir.join("cgroup.subtree_control"), "+pids").is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
    } else {
        std::fs::create_dir_all(&dir).ok()?;
    }
    let alive = leftovers::lock_dir(&dir);
    let budget = commands_budget(&limits_above(&own.dir), machine_headroom());
    if let Err(err) = std::fs::write(dir.join("pids.max"), budget.to_string()) {
        tracing::warn!("cannot set the commands' task budget in {}: {err}", dir.display());
    }
    tracing::debug!("commands' task budget: {budget}");
    let join = open_join_file(&dir).ok().map(Arc::new);
    Some(CgroupParent { dir, _alive: alive, join })
}

/// Tasks kept for agentd itself out of what the limits above it leave: its runtime, at most
/// `MAX_BLOCKING_THREADS` pool threads (each of which may run grep's workers), a drain thread per
/// large output, and children between their clone and their cgroup join (they count where agentd
/// is until then).
pub(super) const AGENTD_TASK_RESERVE: u64 = 256;

/// The share of the machine's task table (`kernel.pid_max`, `kernel.threads-max`) that all of
/// agentd's commands may hold at most, where no cgroup limit is tighter.
const MACHINE_SHARE: u64 = 4;

/// The commands' task budget (`pids.max` of `agentd-<pid>`, over every command and whatever they
/// leave running): what the tightest limit above agentd leaves free (`headrooms`: each limited
/// cgroup from agentd's own up, and the machine's free task slots), less agentd's reserve, and at
/// most a [`MACHINE_SHARE`] of the machine's table. Where little is free, agentd keeps half of it.
/// Pure.
pub(super) fn commands_budget(headrooms: &[u64], machine: (u64, u64)) -> u64 {
    let (table, free_on_machine) = machine;
    let free = headrooms.iter().copied().chain([free_on_machine]).min().unwrap_or(free_on_machine);
    let reserve = AGENTD_TASK_RESERVE.min(free / 2);
    (free - reserve).min(table / MACHINE_SHARE)
}

/// What each limited pids cgroup from `dir` up to the top of its mount leaves free (`pids.max`
/// less `pids.current`).
fn limits_above(dir: &Path) -> Vec<u64> {
    let read = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
    dir.ancestors()
        .map_while(|dir| {
            let current = read(dir, "pids.current")?;
            Some((read(dir, "pids.max").unwrap_or_default(), current))
        })
        .filter_map(|(max, current)| {
            let max: u64 = max.trim().parse().ok()?;
            Some(max.saturating_sub(current.trim().parse().ok()?))
        })
        .collect()
}

/// The machine's task table (the smaller of `kernel.pid_max` and `kernel.threads-max`) and how
/// much of it is free now (`/proc/loadavg` counts every task).
fn machine_headroom() -> (u64, u64) {
    let read =
        |path: &str| std::fs::read_to_string(path).ok().and_then(|text| text.trim().parse::<u64>().ok());
    let table = match (read("/proc/sys/kernel/pid_max"), read("/proc/sys/kernel/threads-max")) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(32_768),
    };
    let used = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| parse_loadavg_tasks(&text))
        .unwrap_or(0);
    (table, table.saturating_sub(used))
}

/// The task count of `/proc/loadavg` (`0.00 0.01 0.05 2/245 1234`: the 245). Pure.
fn parse_loadavg_tasks(text: &str) -> Option<u64> {
    text.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()
}

/// Removes `dir`'s per-command cgroups, then `dir`: each one that is empty (no process, no child).
pub(super) fn remove_cgroup_tree(dir: &Path) {
    if let Ok(children) = std::fs::read_dir(dir) {
        for child in children.flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(child.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// agentd's own pids cgroup directory.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct OwnCgroup {
    pub(super) dir: PathBuf,
    v2: bool,
}

/// Finds the directory of our pids cgroup from `/proc/self/cgroup` and `/proc/self/mountinfo`: the
/// v1 hierarchy that has `pids`, else the v2 one (when it offers `pids`, checked by the caller's
/// write). Pure.
pub(super) fn own_pids_cgroup(membership: &str, mountinfo: &str) -> Option<OwnCgroup> {
    // mountinfo: `id parent dev ROOT MOUNTPOINT opts… - FSTYPE SOURCE SUPEROPTS`.
    let mount = |v2: bool| {
        mountinfo.lines().find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let superopts = right.nth(1)?;
            let wanted = if v2 {
                fstype == "cgroup2"
            } else {
                fstype == "cgroup" && superopts.split(',').any(|o| o == "pids")
            };
            let mut left = left.split(' ');
            let root = left.nth(3)?;
            let point = left.next()?;
            wanted.then(|| (root.to_owned(), PathBuf::from(point)))
        })
    };
    let within = |(root, point): (String, PathBuf), path: &str| {
        // The mount shows the hierarchy from `root` down; our path is absolute in the hierarchy.
        let relative = Path::new(path).strip_prefix(&root).ok()?;
        Some(point.join(relative))
    };
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if controllers.split(',').any(|c| c == "pids") {
            return Some(OwnCgroup { dir: within(mount(false)?, path)?, v2: false });
        }
    }
    let path = membership.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(OwnCgroup { dir: within(mount(true)?, path)?, v2: true })
}

impl Confiner {
    pub(super) fn cgroup_parent(&self) -> Option<&PathBuf> {
        self.cgroups.get_or_init(pids_cgroup_parent).as_ref().map(|parent| &parent.dir)
    }

    /// The per-command cgroups that exist now (commands running, or a finished command's
    /// background processes still in its cgroup).
    pub fn command_cgroups(&self) -> Vec<PathBuf> {
        let Some(Some(parent)) = self.cgroups.get() else { return Vec::new() };
        std::fs::read_dir(&parent.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .map(|entry| entry.path())
            .collect()
    }

    /// Removes agentd's cgroups at shutdown, once every process is gone.
    pub fn remove_cgroups(&self) {
        let Some(Some(parent)) = self.cgroups.get() else { return };
        remove_cgroup_tree(&parent.dir);
    }
}

/// Empty per-command cgroups kept for the next commands. Making and removing a cgroup per command
/// cost more than everything else planned (in v1, the `rmdir` also waits for the kernel to take the
/// cgroup offline), so while commands run, as many are kept as ran at once, up to a bound that
/// leaves room for the rest of agentd's descriptors (each holds 4). Once no request came for a
/// while, all but [`IDLE_CGROUPS_KEPT`] are removed ([`Confiner::trim_idle_cgroups`]).
pub(super) struct IdleCgroups {
    pub(super) list: std::sync::Mutex<Vec<PidsCgroup>>,
    /// Cgroups of finished commands that could not be removed when they ended (their background
    /// processes still lived in them), with the forks refused in each before its command took it:
    /// watched
    /// ([`IdleCgroups::watch_left_behind`]) and removed once those processes are gone.
    left_behind: std::sync::Mutex<Vec<(PathBuf, u64)>>,
    /// Kept at most while busy.
    pub(super) busy: usize,
    /// Per-command cgroups that may exist at once, in use or idle ([`IdleCgroups::crowded`]).
    most: usize,
}

/// Idle cgroups kept for good.
pub(super) const IDLE_CGROUPS_KEPT: usize = 8;

/// Idle cgroups kept at most while busy, whatever the descriptor limit.
pub(super) const IDLE_CGROUPS_BUSY: usize = 256;

impl IdleCgroups {
    /// The bound while busy: a sixteenth of the descriptor limit (4 per cgroup, and the rest for
    /// connections and work), between the two constants.
    pub(super) fn new() -> Self {
        let fds = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let busy =
            usize::try_from(fds / 16).unwrap_or(usize::MAX).clamp(IDLE_CGROUPS_KEPT, IDLE_CGROUPS_BUSY);
        // Each holds 4 descriptors: together at most an eighth of the limit.
        let most = usize::try_from(fds / 32).unwrap_or(usize::MAX).max(IDLE_CGROUPS_BUSY);
        Self { list: Default::default(), left_behind: Default::default(), busy, most }
    }

    pub(super) fn list(&self) -> std::sync::MutexGuard<'_, Vec<PidsCgroup>> {
        self.list.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// No idle cgroup, and as many exist as descriptors allow: an unconfined command joins the
    /// budget's own cgroup instead of one of its own (it stays within the budget; only the
    /// per-command bomb ending and stray count are lost for it).
    pub(super) fn crowded(&self) -> bool {
        // The count first: it is one load, and the list's lock is taken only when it is high.
        LIVE.load(std::sync::atomic::Ordering::Relaxed) >= self.most && self.list().is_empty()
    }

    pub(super) fn take(&self) -> Option<PidsCgroup> {
        self.list().pop()
    }

    /// Keeps `cgroup` for another command; it comes back when there is no room (to be removed).
    pub(super) fn keep(&self, cgroup: PidsCgroup) -> Option<PidsCgroup> {
        let mut list = self.list();
        if list.len() >= self.busy {
            return Some(cgroup);
        }
        list.push(cgroup);
        None
    }

    /// The idle cgroups beyond [`IDLE_CGROUPS_KEPT`], taken out (to be removed).
    pub(super) fn trim(&self) -> Vec<PidsCgroup> {
        let mut list = self.list();
        let keep = list.len().min(IDLE_CGROUPS_KEPT);
        list.split_off(keep)
    }

    /// `cgroup`, which a finished command used, is removed now, or once the processes it left
    /// there are gone.
    pub(super) fn remove(&self, mut cgroup: PidsCgroup) {
        // What the command left running keeps room to grow, not the whole budget: a bomb that
        // outlived its exec meets this limit within moments, and the watch ends it. `None`: the
        // kill ladder wrote 0, nothing there forks.
        if let (Some(limit), Ok(tasks)) = (cgroup.limit, cgroup.tasks())
            && tasks > 0
        {
            let _ = cgroup.set_max(left_behind_limit(tasks, limit));
        }
        // Counted from the command's start: a bomb that met its limit between the exec's end and
        // now is one too.
        let (dir, refused) = (cgroup.dir.clone(), cgroup.refused_before);
        drop(cgroup);
        if dir.exists() {
            self.left_behind.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((dir, refused));
        }
    }

    pub(super) fn has_left_behind(&self) -> bool {
        !self.left_behind.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty()
    }

    /// Removes the cgroups left behind whose processes are gone, and returns those where a fork was
    /// refused since their command started: what was left there met its limit (a fork bomb that
    /// outlived its exec) and is to be ended whole. Path work: off the runtime.
    pub(super) fn watch_left_behind(&self) -> Vec<PathBuf> {
        let mut left = self.left_behind.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        left.retain(|(dir, _)| {
            std::fs::remove_dir(dir).is_err_and(|err| err.kind() != io::ErrorKind::NotFound)
        });
        left.iter()
            .filter(|(dir, before)| {
                File::open(dir.join("pids.events"))
                    .and_then(|events| read_number(&events, Some(REFUSED)))
                    .is_ok_and(|now| now > *before)
            })
            .map(|(dir, _)| dir.clone())
            .collect()
    }
}

/// Room the processes a finished command left running keep to grow beyond their count when it
/// ended: a dev server's workers and a JVM's threads fit, a fork bomb meets it within moments.
pub(super) const LEFT_BEHIND_ROOM: u64 = 512;

/// The limit of a finished command's cgroup that still holds `tasks`, where its command was
/// allowed `limit`: twice what is there, at least [`LEFT_BEHIND_ROOM`], never above `limit`. Pure.
pub(super) fn left_behind_limit(tasks: u64, limit: u64) -> u64 {
    tasks.saturating_mul(2).max(LEFT_BEHIND_ROOM).min(limit)
}

/// One command's pids cgroup.
pub(super) struct PidsCgroup {
    pub(super) dir: PathBuf,
    /// The file the child writes `0` to, to move in, opened by the parent: `tasks` in cgroup v1,
    /// `cgroup.procs` in v2. In v1, `0` written to `tasks` moves only the writer's thread (the
    /// whole child, which has one), and the kernel then skips the lock that a move of a whole
    /// process takes (`cgroup_threadgroup_rwsem`): taking it after a quiet spell waits out an RCU
    /// grace period, 15–23 ms on this project's machine, against about 40 µs through `tasks`.
    pub(super) join: Arc<OwnedFd>,
    /// `pids.max`, open for the next command's limit.
    pub(super) max: File,
    /// What agentd last wrote to `pids.max` through `max`; `None`: not known (the kill ladder
    /// writes 0 through the path). Nothing else writes it: commands cannot reach the cgroup tree.
    pub(super) limit: Option<u64>,
    /// `pids.current`, open to tell an empty cgroup without a path lookup.
    pub(super) current: File,
    /// `pids.events`, open to read how many forks were refused in it.
    events: File,
    /// Forks refused in it before the current command took it ([`PidsCgroup::took`]).
    refused_before: u64,
}

/// `tasks` where the cgroup has one that agentd may write (v1), else `cgroup.procs` (v2, or a
/// delegation that handed over `cgroup.procs` only).
pub(super) fn open_join_file(dir: &Path) -> io::Result<OwnedFd> {
    let open = |name: &str| File::options().write(true).open(dir.join(name));
    Ok(open("tasks").or_else(|_| open("cgroup.procs"))?.into())
}

impl PidsCgroup {
    /// A new cgroup in `parent` for a command allowed `max` tasks ([`NO_LIMIT`]: only the
    /// commands' budget binds it).
    pub(super) fn create(parent: &Path, seq: u64, max: u64) -> io::Result<Self> {
        let dir = parent.join(seq.to_string());
        std::fs::create_dir_all(&dir)?;
        let mut cgroup = Self {
            max: File::options().write(true).open(dir.join("pids.max"))?,
            limit: None,
            current: File::open(dir.join("pids.current"))?,
            events: File::open(dir.join("pids.events"))?,
            refused_before: 0,
            join: Arc::new(open_join_file(&dir)?),
            dir,
        };
        LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        cgroup.took(max)?;
        Ok(cgroup)
    }

    /// A command takes it: its limit set to `max`, and the refused forks counted so far noted, so
    /// [`PidsCgroup::refused_forks`] tells this command's own.
    pub(super) fn took(&mut self, max: u64) -> io::Result<()> {
        self.set_max(max)?;
        self.refused_before = self.refused_total()?;
        Ok(())
    }

    /// Tasks charged to it now (zombies not yet reaped included).
    pub(super) fn tasks(&self) -> io::Result<u64> {
        read_number(&self.current, None)
    }

    /// Forks refused in it since the current command took it: by its own limit or by the budget
    /// above it. A command that met its task limit (a fork bomb's signature) is ended whole.
    pub(super) fn refused_forks(&self) -> io::Result<u64> {
        Ok(self.refused_total()?.saturating_sub(self.refused_before))
    }

    fn refused_total(&self) -> io::Result<u64> {
        read_number(&self.events, Some(REFUSED))
    }

    /// Sets `pids.max` (`NO_LIMIT`: "max"), unless it already holds `max` (most commands of a
    /// profile share their limit, and the write is a system call on the runtime).
    pub(super) fn set_max(&mut self, max: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        if self.limit == Some(max) {
            return Ok(());
        }
        self.limit = None;
        let text = if max == NO_LIMIT { "max".to_owned() } else { max.to_string() };
        // A cgroup file takes each write whole, wherever it is written.
        let written = self.max.write_at(text.as_bytes(), 0)?;
        if written != text.len() {
            return Err(io::ErrorKind::WriteZero.into());
        }
        self.limit = Some(max);
        Ok(())
    }
}

/// The line of `pids.events` that counts refused forks: `max N` (cgroup v2 may add other lines).
const REFUSED: &str = "max ";

/// The limit of a command without `limits.processes`: none of its own, the commands' budget only.
pub(super) const NO_LIMIT: u64 = u64::MAX;

/// The number in a small cgroup file read through `file` (a cgroup file is generated anew by a
/// read at offset 0): the whole file, or the line that starts with `key`.
fn read_number(file: &File, key: Option<&str>) -> io::Result<u64> {
    use std::os::unix::fs::FileExt as _;
    let mut buf = [0u8; 128];
    let read = file.read_at(&mut buf, 0)?;
    let text = std::str::from_utf8(&buf[..read]).map_err(io::Error::other)?;
    number_in(text, key)
        .ok_or_else(|| io::Error::other(format!("no number `{}` in `{text}`", key.unwrap_or_default())))
}

/// The number a cgroup file's `text` holds: the whole text, or the line that starts with `key`
/// (`pids.events` in v2 may hold lines besides `max N`). Pure.
fn number_in(text: &str, key: Option<&str>) -> Option<u64> {
    match key {
        None => text.trim().parse().ok(),
        Some(key) => text.lines().find_map(|line| line.strip_prefix(key)?.trim().parse().ok()),
    }
}

impl Drop for PidsCgroup {
    /// Removes the cgroup; it fails (harmlessly) while a background process still lives in it, and
    /// shutdown sweeps what is left.
    fn drop(&mut self) {
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Per-command cgroups that exist now (their [`PidsCgroup`]s), in use or idle.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The pids the cgroup `dir` lists in `cgroup.procs`: its processes, however they left the tree.
pub fn cgroup_procs(dir: &Path) -> io::Result<Vec<Pid>> {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs"))?;
    Ok(procs.lines().filter_map(|l| l.parse().ok()).map(Pid::from_raw).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::child::join_cgroup;

    #[test]
    fn what_a_finished_command_left_keeps_room_to_grow_within_its_limit() {
        assert_eq!(left_behind_limit(1, NO_LIMIT), LEFT_BEHIND_ROOM);
        assert_eq!(left_behind_limit(300, NO_LIMIT), 600);
        assert_eq!(left_behind_limit(3000, 4096), 4096);
        assert_eq!(left_behind_limit(10, 64), 64);
        assert_eq!(left_behind_limit(u64::MAX, NO_LIMIT), NO_LIMIT);
    }

    #[test]
    fn the_commands_budget_leaves_agentd_its_reserve_under_the_tightest_limit() {
        let machine = (32_768, 32_000);
        // Nothing limited above agentd: a quarter of the machine's table.
        assert_eq!(commands_budget(&[], machine), 8192);
        // agentd's cgroup (or a container's) leaves 1000: agentd keeps its reserve.
        assert_eq!(commands_budget(&[5000, 1000], machine), 1000 - AGENTD_TASK_RESERVE);
        // Capped just above what agentd needs: it keeps half of what is free.
        assert_eq!(commands_budget(&[300], machine), 150);
        assert_eq!(commands_budget(&[0], machine), 0);
        // The machine nearly full: its free slots are the limit.
        assert_eq!(commands_budget(&[], (32_768, 600)), 600 - AGENTD_TASK_RESERVE);
        assert_eq!(parse_loadavg_tasks("0.31 0.52 0.60 3/245 12345\n"), Some(245));
        assert_eq!(parse_loadavg_tasks("0.31 0.52"), None);
        assert_eq!(number_in("max 12\n", Some(REFUSED)), Some(12));
        assert_eq!(number_in("max.imposed 1\nmax 3\n", Some(REFUSED)), Some(3));
        assert_eq!(number_in("", Some(REFUSED)), None);
        assert_eq!(number_in("4036\n", None), Some(4036));
        assert_eq!(number_in("max\n", None), None);
    }

    /// The join goes through `tasks` where there is one (v1), else through `cgroup.procs` (v2).
    #[test]
    pub(super) fn the_child_joins_through_tasks_where_there_is_one() {
        let written = |names: &[&str]| {
            let dir = tempfile::tempdir().unwrap();
            for name in names {
                std::fs::write(dir.path().join(name), "").unwrap();
            }
            join_cgroup(&open_join_file(dir.path()).unwrap()).unwrap();
            names
                .iter()
                .map(|name| std::fs::read_to_string(dir.path().join(name)).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(written(&["tasks", "cgroup.procs"]), ["0", ""]);
        assert_eq!(written(&["cgroup.procs"]), ["0"]);
    }

    #[test]
    pub(super) fn own_pids_cgroup_is_found_in_v1_and_v2() {
        let v1_mounts = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
            36 31 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
        let v1 = "9:name=systemd:/\n8:pids:/user.slice/job\n0::/\n";
        assert_eq!(
            own_pids_cgroup(v1, v1_mounts),
            Some(OwnCgroup { dir: PathBuf::from("/sys/fs/cgroup/pids/user.slice/job"), v2: false })
        );
        // A container whose mount shows the hierarchy from its own cgroup down.
        let ns_mounts = "40 31 0:33 /docker/abc /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n";
        assert_eq!(
            own_pids_cgroup("4:pids:/docker/abc/sub\n", ns_mounts),
            Some(OwnCgroup { dir: PathBuf::from("/sys/fs/cgroup/pids/sub"), v2: false })
        );
        let v2_mounts = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            own_pids_cgroup("0::/system.slice/agentd.service\n", v2_mounts),
            Some(OwnCgroup { dir: PathBuf::from("/sys/fs/cgroup/system.slice/agentd.service"), v2: true })
        );
        assert_eq!(own_pids_cgroup("0::/x\n", v1_mounts), None, "no v2 mount");
        assert_eq!(own_pids_cgroup("", v2_mounts), None);
    }
}
