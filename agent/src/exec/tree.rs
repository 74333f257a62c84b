//! Finding every process of one exec, and the kill ladder that ends them.
//!
//! Where the exec has its own pids cgroup (a profile with `limits.processes`), its processes are the
//! ones the cgroup lists: the kernel puts every fork there, whatever the process does with its
//! session, parents or environment, and the list costs one read however many processes the machine
//! has. Otherwise (and, once the cgroup is empty, as a last sweep for a process that moved itself out
//! of it) an exec's processes are the shell's descendants by parent pid, plus every process that
//! carries the exec's tag (`AGENTD_EXEC_TAG=<agentd pid>.<seq>`) in its environment. The second set
//! catches descendants that left the process group with `setsid` and were orphaned: agentd is a
//! subreaper, so they are re-parented to agentd rather than to init, and the inherited tag says which
//! exec they came from. (Killing only the shell's process group once left `setsid sleep` children
//! running for hours.) Without a cgroup, a process that both escapes the tree and clears its
//! environment is not found. A process whose first thread ended alone reads as a zombie in
//! `/proc/<pid>/stat`; it counts as live while any of its threads does.
//!
//! A pid is a number the kernel gives again once its process was reaped, so no signal here goes to
//! a number alone. The shell's process group is signalled only while the shell is not reaped yet
//! ([`Leader`]: the reaper holds off meanwhile, so the number is still the shell's). Every other
//! signal goes through a pidfd opened for a pid a scan found, and only if a second scan, made after
//! the pidfd was opened, still finds that pid ([`signal_confirmed`]): the pidfd's process was then
//! the member the scan saw, and a pidfd reaches its own process or, once that is reaped, nothing. (A
//! finished kept process's `kill` once sent SIGTERM, then SIGKILL, to the process group of whatever
//! process had taken its reaped shell's number.)
//!
//! Every `/proc` scan, cgroup read and signal round runs on the blocking pool ([`off_runtime`]); only
//! the waits between rounds are on the runtime thread. Forty timeouts scanning `/proc` with 1500
//! processes around once held every other connection's `exec true` for 12 s.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::time::{Instant, sleep};

use crate::confine::cgroup_procs;
use crate::reaper::Reaper;

/// Name of the environment variable every exec's processes inherit.
pub const TAG_VAR: &str = "AGENTD_EXEC_TAG";

/// One live process as `/proc/<pid>/stat` describes it.
struct ProcEntry {
    pid: Pid,
    ppid: Pid,
    /// Stopped (`T`, or `t` under a tracer): it cannot fork until continued.
    stopped: bool,
}

fn live_processes() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid = Pid::from_raw(entry.ok()?.file_name().to_str()?.parse().ok()?);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (state, ppid) = parse_stat(&stat)?;
        let stopped = match state {
            "X" => return None,
            // The first thread is a zombie: the process has ended, or that thread ended alone (the
            // `exit` system call, not `exit_group`) and the others run on, and fork. Only they
            // can tell; a process that read as dead here once outlived its exec's timeout.
            "Z" => live_threads_stopped(pid)?,
            state => state == "T" || state == "t",
        };
        Some(ProcEntry { pid, ppid, stopped })
    })
    .collect()
}

/// Of the process `pid`'s threads that have not ended: whether all of them are stopped; `None` if
/// there are none.
fn live_threads_stopped(pid: Pid) -> Option<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut live = tasks.flatten().filter_map(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        let (state, _) = parse_stat(&stat)?;
        (state != "Z" && state != "X").then(|| state == "T" || state == "t")
    });
    let first = live.next()?;
    Some(live.fold(first, |all, stopped| all && stopped))
}

/// `(state, parent pid)` from the text of `/proc/<pid>/stat`.
fn parse_stat(stat: &str) -> Option<(&str, Pid)> {
    // The command name may hold spaces and parentheses; the fields after the last ')' do not.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?;
    let ppid = Pid::from_raw(fields.next()?.parse().ok()?);
    Some((state, ppid))
}

/// Whether `pid` (as this process's pid namespace numbers it; 0: not visible in it) is a process
/// agentd started: a command, or anything a command started. agentd is a child subreaper, so a
/// process that left its exec's tree was re-parented to agentd and still counts. A process that
/// cannot be looked up (it exited meanwhile) counts as one: the caller refuses it.
pub fn is_agentd_descendant(pid: Pid) -> bool {
    is_descendant(pid, Pid::this(), |pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&stat).map(|(_, ppid)| ppid)
    })
}

/// Walks `parent_of` from `pid` up to pid 1 (not a descendant) or `ancestor` (one). Pure.
fn is_descendant(pid: Pid, ancestor: Pid, parent_of: impl Fn(Pid) -> Option<Pid>) -> bool {
    // A process of another pid namespace (0) is no descendant: agentd's are all visible to it.
    let mut current = pid;
    // pid_max is at most 2^22: a longer chain is a loop in a racing read; refuse it.
    for _ in 0..(1 << 22) {
        if current.as_raw() <= 1 {
            return current == ancestor;
        }
        match parent_of(current) {
            None => return true,
            Some(parent) if parent == ancestor => return true,
            Some(parent) => current = parent,
        }
    }
    true
}

fn has_tag(pid: Pid, tag_entry: &[u8]) -> bool {
    let tagged = |environ: Vec<u8>| environ.split(|b| *b == 0).any(|var| var == tag_entry);
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(environ) if !environ.is_empty() => tagged(environ),
        // Empty when the first thread has ended (the memory is read through it) while others
        // run on: they read it.
        _ => std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|task| std::fs::read(task.path().join("environ")).is_ok_and(&tagged)),
    }
}

/// A process found by a scan, held by a pidfd so that a signal reaches it and no other.
struct Held {
    pid: Pid,
    /// `None` on a kernel without pidfds (before 5.3), or when no descriptor could be had: the
    /// number is all there is.
    fd: Option<OwnedFd>,
}

impl Held {
    /// `None`: the process is gone already.
    fn open(pid: Pid) -> Option<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; the
        // descriptor is owned by nothing else.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
        if fd >= 0 {
            let fd = i32::try_from(fd).ok()?;
            // SAFETY: a descriptor the kernel just returned to us, owned here alone.
            return Some(Self { pid, fd: Some(unsafe { OwnedFd::from_raw_fd(fd) }) });
        }
        match Errno::last() {
            Errno::ESRCH => None,
            // No pidfds here (ENOSYS), or no descriptor to be had now (EMFILE): a process left
            // unsignalled would outlive its kill, so the number it is, confirmed by the rescan.
            _ => Some(Self { pid, fd: None }),
        }
    }

    /// True if the signal was delivered.
    fn signal(&self, signal: Signal) -> bool {
        match &self.fd {
            Some(fd) => {
                // SAFETY: pidfd_send_signal reads a descriptor we own, a signal number, and no
                // siginfo (null) with no flags.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        signal as libc::c_int,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
                rc == 0
            }
            None => kill(self.pid, signal).is_ok(),
        }
    }
}

/// Sends `signal` to each of `found` (pids a scan found) that `rescan`, run once after every one
/// of them is held by a pidfd, finds again; returns how many got it. A pid found twice was, at the
/// second scan, the held process (it cannot have taken the number of one reaped before, since the
/// holder kept its own number while it was alive), so only the processes the scans mean get the
/// signal, however the numbers are reused meanwhile. Blocking.
pub fn signal_confirmed(found: Vec<Pid>, rescan: impl FnOnce() -> Vec<Pid>, signal: Signal) -> usize {
    if found.is_empty() {
        return 0;
    }
    let held: Vec<Held> = found.into_iter().filter_map(Held::open).collect();
    if held.is_empty() {
        return 0;
    }
    let again: HashSet<Pid> = rescan().into_iter().collect();
    held.iter().filter(|held| again.contains(&held.pid) && held.signal(signal)).count()
}

/// [`signal_confirmed`] with one scan function: what it finds now, confirmed by what it finds next.
fn signal_found(scan: &dyn Fn() -> Vec<Pid>, signal: Signal) -> usize {
    signal_confirmed(scan(), scan, signal)
}

/// An exec's shell, the leader of its process group and session, as the reaper knows it.
#[derive(Clone)]
pub struct Leader {
    pub pid: Pid,
    reaper: Arc<Reaper>,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl Leader {
    pub fn new(pid: Pid, reaper: Arc<Reaper>) -> Self {
        Self { pid, reaper }
    }

    /// The shell has not been reaped: its number (and its group's) is still its own.
    pub fn unreaped(&self) -> bool {
        self.reaper.while_unreaped(self.pid, || ()).is_some()
    }

    /// Signals the shell's process group while the shell is not reaped; false after (its number
    /// may be another process's by then, so nothing is sent). Blocking (briefly holds off the
    /// reaper).
    fn signal_group(&self, signal: Signal) -> bool {
        self.reaper.while_unreaped(self.pid, || killpg(self.pid, signal).is_ok()).unwrap_or(false)
    }
}

/// Parent pid → live children, from one scan of `/proc`.
struct ProcessTree {
    children: HashMap<Pid, Vec<Pid>>,
    stopped: HashSet<Pid>,
}

impl ProcessTree {
    fn scan() -> Self {
        let mut children: HashMap<Pid, Vec<Pid>> = HashMap::new();
        let mut stopped = HashSet::new();
        for process in live_processes() {
            children.entry(process.ppid).or_default().push(process.pid);
            if process.stopped {
                stopped.insert(process.pid);
            }
        }
        Self { children, stopped }
    }

    /// Every live process below `root`.
    fn descendants(&self, root: Pid) -> Vec<Pid> {
        let mut found = Vec::new();
        let mut queue = vec![root];
        while let Some(pid) = queue.pop() {
            if let Some(kids) = self.children.get(&pid) {
                found.extend_from_slice(kids);
                queue.extend_from_slice(kids);
            }
        }
        found
    }

    fn is_live(&self, pid: Pid) -> bool {
        self.children.values().any(|kids| kids.contains(&pid))
    }
}

/// The live processes of the exec whose shell is `leader` and whose tag is `tag`, by the tree and
/// the tag: the shell and its descendants while the shell is not reaped (read after the scan, so
/// the scan saw its number as the shell's), then the tagged alone.
fn tree_members(leader: &Leader, tag: &str) -> (ProcessTree, Vec<Pid>) {
    let tree = ProcessTree::scan();
    let root = leader.unreaped().then_some(leader.pid);
    let members = members_in(&tree, root, tag);
    (tree, members)
}

fn members_in(tree: &ProcessTree, root: Option<Pid>, tag: &str) -> Vec<Pid> {
    let mut out: HashSet<Pid> = HashSet::new();
    if let Some(root) = root {
        out.extend(tree.descendants(root));
        if tree.is_live(root) {
            out.insert(root);
        }
    }
    // Orphans that escaped the tree were re-parented to agentd: look for the tag among its other
    // descendants only, which keeps the environ reads few.
    let tag_entry = format!("{TAG_VAR}={tag}").into_bytes();
    for pid in tree.descendants(Pid::this()) {
        if !out.contains(&pid) && has_tag(pid, &tag_entry) {
            out.insert(pid);
        }
    }
    out.into_iter().collect()
}

/// Runs blocking `/proc`, cgroup and signal work on the blocking pool, so the runtime thread goes on
/// serving every other connection meanwhile. The pool is bounded and these rounds are short (one
/// scan and its signals), so many ladders at once queue there rather than take a thread each for
/// their whole grace period. A round that panicked counts as having found nothing.
async fn off_runtime<T: Default + Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|err| {
        tracing::warn!("a kill round failed: {err}");
        T::default()
    })
}

/// Ends every process in the pids cgroups `dirs` (each holds one command's processes, a finished
/// command's strays included): the timeout's kill where the exec has a cgroup, and the cheap first
/// step of shutdown. `pids.max` goes to 0, so no fork in them succeeds any more; `cgroup.kill`
/// (cgroup v2, where it exists) kills them all at once, and every pid `cgroup.procs` lists is
/// SIGKILLed until the lists are empty (all cgroup v1 has). A fork bomb in a cgroup cannot outrun
/// that, a double-forked process that cleared its environment is on the list like any other, and
/// the kernel's lists spare agentd a `/proc` scan of thousands of processes on a CPU the bomb is
/// starving. Returns how many processes were still listed after the rounds.
pub async fn end_cgroups(dirs: Vec<PathBuf>) -> usize {
    let dirs = Arc::new(dirs);
    let freeze = Arc::clone(&dirs);
    off_runtime(move || {
        for dir in freeze.iter() {
            // Both fail harmlessly on a cgroup already gone.
            let _ = std::fs::write(dir.join("pids.max"), "0");
            if dir.join("cgroup.kill").exists() {
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            }
        }
    })
    .await;
    kill_until_gone(move || dirs.iter().flat_map(|dir| cgroup_procs(dir).unwrap_or_default()).collect()).await
}

/// Stops, then SIGKILLs, every process below agentd until none is left: the last step of shutdown,
/// so nothing agentd started (a finished exec's background daemon, a fork bomb) outlives it.
pub async fn kill_every_descendant() {
    let agentd = Pid::this();
    let stopped = stop_all(move || {
        let tree = ProcessTree::scan();
        let all = tree.descendants(agentd);
        let running = all.iter().filter(|pid| !tree.stopped.contains(pid)).count();
        (all, running)
    })
    .await;
    let left = kill_until_gone(move || ProcessTree::scan().descendants(agentd)).await;
    if !stopped || left > 0 {
        tracing::warn!(left, "processes below agentd survived the stop and kill rounds");
    }
}

/// SIGSTOPs what `scan` finds (every process, and how many of them are not stopped yet) until a
/// scan finds all of them stopped; false if rounds ran out first (e.g. processes in
/// uninterruptible sleep).
///
/// Why stop before killing: a fork bomb replaces what is killed as fast as it is killed, and under a
/// pids limit every kill frees a slot for a survivor's fork. A stopped process cannot fork and keeps
/// its slot, so each round only has to catch the processes born since the last scan, and those
/// become fewer every round; then one SIGKILL round ends them all.
async fn stop_all(scan: impl Fn() -> (Vec<Pid>, usize) + Send + Sync + 'static) -> bool {
    let scan = Arc::new(scan);
    for _ in 0..KILL_ROUNDS {
        let round = Arc::clone(&scan);
        let all_stopped = off_runtime(move || {
            let (all, running) = round();
            if running == 0 {
                return true;
            }
            signal_confirmed(all, || round().0, Signal::SIGSTOP);
            false
        })
        .await;
        if all_stopped {
            return true;
        }
        // SIGSTOP takes effect when the process next runs: let it.
        sleep(Duration::from_millis(1)).await;
    }
    false
}

/// SIGKILLs what `scan` finds until it finds nothing; returns how many were left after the rounds.
async fn kill_until_gone(scan: impl Fn() -> Vec<Pid> + Send + Sync + 'static) -> usize {
    let scan = Arc::new(scan);
    for _ in 0..KILL_ROUNDS {
        let round = Arc::clone(&scan);
        let found = off_runtime(move || {
            let all = round();
            let found = all.len();
            signal_confirmed(all, &*round, Signal::SIGKILL);
            found
        })
        .await;
        if found == 0 {
            return 0;
        }
        sleep(Duration::from_millis(2)).await;
    }
    off_runtime(move || scan().len()).await
}

/// Where one exec's processes are found.
#[derive(Debug, Clone)]
pub struct Target {
    /// The shell: root of the exec's tree, and its session and process group id.
    pub root: Pid,
    /// The shell as the reaper knows it: whether its number is still its own.
    pub leader: Leader,
    /// The exec's tag (the value of [`TAG_VAR`]).
    pub tag: String,
    /// The exec's own pids cgroup, when it has one: then it alone says who the members are.
    pub cgroup: Option<PathBuf>,
}

impl Target {
    /// The live members: what the cgroup lists, else the tree and the tagged. Blocking: `/proc` or
    /// cgroup reads.
    pub fn members(&self) -> Vec<Pid> {
        match &self.cgroup {
            Some(dir) => cgroup_procs(dir).unwrap_or_default(),
            None => self.tree_members(),
        }
    }

    /// The live members by the tree and the tag (see [`tree_members`]). Blocking.
    pub fn tree_members(&self) -> Vec<Pid> {
        tree_members(&self.leader, &self.tag).1
    }

    /// Sends `signal` once to every live member; returns how many got it. Blocking.
    pub fn signal_members(&self, signal: Signal) -> usize {
        signal_found(&|| self.members(), signal)
    }

    /// Signals the shell's process group (while the shell is not reaped) and every member.
    fn signal_all(&self, signal: Signal) {
        self.leader.signal_group(signal);
        self.signal_members(signal);
    }
}

/// SIGTERM to the whole exec, a grace period, then SIGKILL until nothing is left.
#[derive(Debug, Clone, Copy)]
pub struct TimeoutLadder {
    pub grace: Duration,
}

/// How often the ladder looks again while waiting for processes to go.
const POLL: Duration = Duration::from_millis(10);

/// SIGKILL rounds before giving up on a tree that keeps forking (each round kills every member seen,
/// so a fork bomb shrinks fast; a new process needs a live parent in the tree).
const KILL_ROUNDS: usize = 200;

impl TimeoutLadder {
    /// Ends the exec `target`; returns once no member is left (or after the last round).
    pub async fn kill(&self, target: &Target) {
        let target = Arc::new(target.clone());
        let signalled = Arc::clone(&target);
        off_runtime(move || {
            signalled.signal_all(Signal::SIGTERM);
            // Stopped processes act on SIGTERM only once continued.
            signalled.signal_all(Signal::SIGCONT);
        })
        .await;
        let deadline = Instant::now() + self.grace;
        let mut gone = false;
        while !gone && Instant::now() < deadline {
            let looked = Arc::clone(&target);
            gone = off_runtime(move || looked.members().is_empty()).await;
            if !gone {
                sleep(POLL).await;
            }
        }
        let root = target.root;
        let left = match &target.cgroup {
            Some(dir) => {
                let mut left = 0;
                if !gone {
                    let group = Arc::clone(&target);
                    off_runtime(move || group.leader.signal_group(Signal::SIGKILL)).await;
                    left = end_cgroups(vec![dir.clone()]).await;
                }
                // Only a process that moved itself out of the cgroup (root, where landlock does not
                // withhold the cgroup tree) is left for the tree and the tag: one scan, usually empty.
                let rest = Arc::clone(&target);
                left + kill_until_gone(move || rest.tree_members()).await
            }
            None if gone => 0,
            None => {
                // What is left is stopped first (a fork bomb cannot outrun that), then killed.
                let stopping = Arc::clone(&target);
                stop_all(move || {
                    stopping.leader.signal_group(Signal::SIGSTOP);
                    let (tree, members) = tree_members(&stopping.leader, &stopping.tag);
                    let running = members.iter().filter(|pid| !tree.stopped.contains(pid)).count();
                    (members, running)
                })
                .await;
                let killing = Arc::clone(&target);
                kill_until_gone(move || {
                    killing.leader.signal_group(Signal::SIGKILL);
                    killing.tree_members()
                })
                .await
            }
        };
        if left > 0 {
            tracing::warn!(%root, left, "processes of an exec survived {KILL_ROUNDS} SIGKILL rounds");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_by_walking_parents() {
        // 1 ← 50 (agentd) ← 60 ← 70;  1 ← 80
        let pid = Pid::from_raw;
        let parents: HashMap<Pid, Pid> =
            [(pid(50), pid(1)), (pid(60), pid(50)), (pid(70), pid(60)), (pid(80), pid(1))].into();
        let parent_of = |pid| parents.get(&pid).copied();
        assert!(is_descendant(pid(60), pid(50), parent_of));
        assert!(is_descendant(pid(70), pid(50), parent_of));
        assert!(!is_descendant(pid(80), pid(50), parent_of));
        assert!(!is_descendant(pid(50), pid(50), parent_of), "agentd is not its own descendant");
        assert!(!is_descendant(pid(0), pid(50), parent_of), "another pid namespace");
        assert!(is_descendant(pid(99), pid(50), parent_of), "vanished: refused");
        let looped: HashMap<Pid, Pid> = [(pid(7), pid(8)), (pid(8), pid(7))].into();
        assert!(is_descendant(pid(7), pid(50), |pid| looped.get(&pid).copied()));
        assert!(parse_stat("12 (a) b) c) S 34 12").is_some_and(|(s, p)| s == "S" && p == Pid::from_raw(34)));
    }

    #[test]
    fn a_signal_goes_only_to_a_pid_found_again_after_it_was_held() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = crate::pid::from_wire(child.id()).unwrap();
        // Not found again: nothing is sent.
        assert_eq!(signal_confirmed(vec![pid], Vec::new, Signal::SIGKILL), 0);
        assert!(child.try_wait().unwrap().is_none());
        // Found again while held: sent, to it.
        assert_eq!(signal_confirmed(vec![pid], || vec![pid], Signal::SIGKILL), 1);
        assert!(child.wait().unwrap().code().is_none());
        // Reaped: its number reaches nothing, whatever a scan says.
        assert_eq!(signal_confirmed(vec![pid], || vec![pid], Signal::SIGKILL), 0);
    }

    #[test]
    fn real_children_and_grandchildren_are_descendants() {
        assert!(!is_agentd_descendant(Pid::this()));
        assert!(!is_agentd_descendant(Pid::from_raw(1)));
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
            .unwrap();
        let grandchild = Pid::from_raw(line.trim().parse().unwrap());
        assert!(is_agentd_descendant(crate::pid::from_wire(child.id()).unwrap()));
        assert!(is_agentd_descendant(grandchild));
        let _ = kill(grandchild, Signal::SIGKILL);
        let _ = child.wait();
    }
}
