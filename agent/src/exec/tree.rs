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
}

fn live_processes() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (state, ppid) = parse_stat(&stat)?;
        (state != "Z" && state != "X").then_some(ProcEntry { pid, ppid })
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
}

impl ProcessTree {
    fn scan() -> Self {
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for process in live_processes() {
            children.entry(process.ppid).or_default().push(process.pid);
        }
        Self { children }
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
    let tree = ProcessTree::scan();
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

/// SIGKILLs every process below agentd, until none is left: the last step of shutdown, so nothing
/// agentd started (a finished exec's background daemon included) outlives it.
pub async fn kill_every_descendant() {
    for _ in 0..KILL_ROUNDS {
        let all = ProcessTree::scan().descendants(std::process::id() as i32);
        if all.is_empty() {
            return;
        }
        for pid in all {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        sleep(Duration::from_millis(2)).await;
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
        for _ in 0..KILL_ROUNDS {
            if signal_all(root, tag, Signal::SIGKILL) == 0 {
                return;
            }
            sleep(Duration::from_millis(2)).await;
        }
        tracing::warn!(root, "processes of an exec survived {KILL_ROUNDS} SIGKILL rounds");
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
