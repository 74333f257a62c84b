//! Finding every process of one exec, and the kill ladder that ends them.
//!
//! An exec's processes are the shell's descendants by parent pid, plus every process that carries the
//! exec's tag (`AGENTD_EXEC_TAG=<agentd pid>.<seq>`) in its environment. The second set catches
//! descendants that left the process group with `setsid` and were orphaned: agentd is a subreaper, so
//! they are re-parented to agentd rather than to init, and the inherited tag says which exec they came
//! from. (Killing only the shell's process group once left `setsid sleep` children running for hours.)
//! A process that both escapes the tree and clears its environment is not found; confinement with a
//! cgroup is the complete answer where one can be created.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::time::{Instant, sleep};

/// Name of the environment variable every exec's processes inherit.
pub const TAG_VAR: &str = "AGENTD_EXEC_TAG";

/// One live (non-zombie) process as `/proc/<pid>/stat` describes it.
struct ProcEntry {
    pid: i32,
    ppid: i32,
    /// Stopped (`T`, or `t` under a tracer): it cannot fork until continued.
    stopped: bool,
}

fn live_processes() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (state, ppid) = parse_stat(&stat)?;
        let stopped = state == "T" || state == "t";
        (state != "Z" && state != "X").then_some(ProcEntry { pid, ppid, stopped })
    })
    .collect()
}

/// `(state, parent pid)` from the text of `/proc/<pid>/stat`.
fn parse_stat(stat: &str) -> Option<(&str, i32)> {
    // The command name may hold spaces and parentheses; the fields after the last ')' do not.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `pid` (as this process's pid namespace numbers it; 0: not visible in it) is a process
/// agentd started: a command, or anything a command started. agentd is a child subreaper, so a
/// process that left its exec's tree was re-parented to agentd and still counts. A process that
/// cannot be looked up (it exited meanwhile) counts as one: the caller refuses it.
pub fn is_agentd_descendant(pid: u32) -> bool {
    is_descendant(pid as i32, std::process::id() as i32, |pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&stat).map(|(_, ppid)| ppid)
    })
}

/// Walks `parent_of` from `pid` up to pid 1 (not a descendant) or `ancestor` (one). Pure.
fn is_descendant(pid: i32, ancestor: i32, parent_of: impl Fn(i32) -> Option<i32>) -> bool {
    // A process of another pid namespace (0) is no descendant: agentd's are all visible to it.
    let mut current = pid;
    // pid_max is at most 2^22: a longer chain is a loop in a racing read; refuse it.
    for _ in 0..(1 << 22) {
        if current <= 1 {
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

fn has_tag(pid: i32, tag_entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|environ| environ.split(|b| *b == 0).any(|var| var == tag_entry))
        .unwrap_or(false)
}

/// Parent pid → live children, from one scan of `/proc`.
struct ProcessTree {
    children: HashMap<i32, Vec<i32>>,
    stopped: HashSet<i32>,
}

impl ProcessTree {
    fn scan() -> Self {
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
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
    fn descendants(&self, root: i32) -> Vec<i32> {
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

    fn is_live(&self, pid: i32) -> bool {
        self.children.values().any(|kids| kids.contains(&pid))
    }
}

/// The live processes of the exec whose shell is `root` and whose tag is `tag`.
pub fn members(root: u32, tag: &str) -> Vec<i32> {
    members_in(&ProcessTree::scan(), root, tag)
}

fn members_in(tree: &ProcessTree, root: u32, tag: &str) -> Vec<i32> {
    let root = root as i32;
    let mut out: HashSet<i32> = tree.descendants(root).into_iter().collect();
    if tree.is_live(root) {
        out.insert(root);
    }
    // Orphans that escaped the tree were re-parented to agentd: look for the tag among its other
    // descendants only, which keeps the environ reads few.
    let tag_entry = format!("{TAG_VAR}={tag}").into_bytes();
    for pid in tree.descendants(std::process::id() as i32) {
        if !out.contains(&pid) && has_tag(pid, &tag_entry) {
            out.insert(pid);
        }
    }
    out.into_iter().collect()
}

/// Ends every process in the per-command pids cgroups `dirs` (each holds one command's processes,
/// a finished command's strays included): the cheap first step of shutdown. `pids.max` goes to 0,
/// so no fork in them succeeds any more; `cgroup.kill` (cgroup v2) kills them all at once, and
/// every pid `cgroup.procs` lists is SIGKILLed until the lists are empty. A fork bomb in a cgroup
/// cannot outrun that, and the kernel's lists spare agentd a `/proc` scan of thousands of processes
/// on a CPU the bomb is starving. Returns how many processes were still listed after the rounds.
pub async fn end_cgroups(dirs: &[PathBuf]) -> usize {
    for dir in dirs {
        // Both fail harmlessly on a cgroup already gone; `cgroup.kill` exists on v2 only.
        let _ = std::fs::write(dir.join("pids.max"), "0");
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    }
    kill_until_gone(|| {
        dirs.iter()
            .flat_map(|dir| {
                std::fs::read_to_string(dir.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect()
    })
    .await
}

/// Stops, then SIGKILLs, every process below agentd until none is left: the last step of shutdown,
/// so nothing agentd started (a finished exec's background daemon, a fork bomb) outlives it.
pub async fn kill_every_descendant() {
    let agentd = std::process::id() as i32;
    let stopped = stop_all(|| {
        let tree = ProcessTree::scan();
        let all = tree.descendants(agentd);
        let running = all.iter().filter(|pid| !tree.stopped.contains(pid)).count();
        (all, running)
    })
    .await;
    let left = kill_until_gone(|| ProcessTree::scan().descendants(agentd)).await;
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
async fn stop_all(scan: impl Fn() -> (Vec<i32>, usize)) -> bool {
    for _ in 0..KILL_ROUNDS {
        let (all, running) = scan();
        if running == 0 {
            return true;
        }
        for pid in all {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
        // SIGSTOP takes effect when the process next runs: let it.
        sleep(Duration::from_millis(1)).await;
    }
    false
}

/// SIGKILLs what `scan` finds until it finds nothing; returns how many were left after the rounds.
async fn kill_until_gone(scan: impl Fn() -> Vec<i32>) -> usize {
    for _ in 0..KILL_ROUNDS {
        let all = scan();
        if all.is_empty() {
            return 0;
        }
        for pid in all {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        sleep(Duration::from_millis(2)).await;
    }
    scan().len()
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
    /// Ends the exec rooted at `root`; returns once no member is left (or after the last round).
    pub async fn kill(&self, root: u32, tag: &str) {
        signal_all(root, tag, Signal::SIGTERM);
        // Stopped processes act on SIGTERM only once continued.
        signal_all(root, tag, Signal::SIGCONT);
        let deadline = Instant::now() + self.grace;
        while Instant::now() < deadline {
            if members(root, tag).is_empty() {
                return;
            }
            sleep(POLL).await;
        }
        // What is left is stopped first (a fork bomb cannot outrun that), then killed.
        let _ = killpg(Pid::from_raw(root as i32), Signal::SIGSTOP);
        stop_all(|| {
            let tree = ProcessTree::scan();
            let members = members_in(&tree, root, tag);
            let running = members.iter().filter(|pid| !tree.stopped.contains(pid)).count();
            (members, running)
        })
        .await;
        let left = kill_until_gone(|| {
            let _ = killpg(Pid::from_raw(root as i32), Signal::SIGKILL);
            members(root, tag)
        })
        .await;
        if left > 0 {
            tracing::warn!(root, left, "processes of an exec survived {KILL_ROUNDS} SIGKILL rounds");
        }
    }
}

/// Signals the shell's process group and every member; returns how many members there were.
fn signal_all(root: u32, tag: &str, signal: Signal) -> usize {
    let _ = killpg(Pid::from_raw(root as i32), signal);
    let members = members(root, tag);
    for pid in &members {
        let _ = kill(Pid::from_raw(*pid), signal);
    }
    members.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_by_walking_parents() {
        // 1 ← 50 (agentd) ← 60 ← 70;  1 ← 80
        let parents: HashMap<i32, i32> = [(50, 1), (60, 50), (70, 60), (80, 1)].into();
        let parent_of = |pid| parents.get(&pid).copied();
        assert!(is_descendant(60, 50, parent_of));
        assert!(is_descendant(70, 50, parent_of));
        assert!(!is_descendant(80, 50, parent_of));
        assert!(!is_descendant(50, 50, parent_of), "agentd is not its own descendant");
        assert!(!is_descendant(0, 50, parent_of), "another pid namespace");
        assert!(is_descendant(99, 50, parent_of), "vanished: refused");
        let looped: HashMap<i32, i32> = [(7, 8), (8, 7)].into();
        assert!(is_descendant(7, 50, |pid| looped.get(&pid).copied()));
        assert!(parse_stat("12 (a) b) c) S 34 12").is_some_and(|(s, p)| s == "S" && p == 34));
    }

    #[test]
    fn real_children_and_grandchildren_are_descendants() {
        assert!(!is_agentd_descendant(std::process::id()));
        assert!(!is_agentd_descendant(1));
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
            .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        assert!(is_agentd_descendant(child.id()));
        assert!(is_agentd_descendant(grandchild));
        let _ = kill(Pid::from_raw(grandchild as i32), Signal::SIGKILL);
        let _ = child.wait();
    }
}
