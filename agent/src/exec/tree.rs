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
        // The command name may hold spaces and parentheses; the fields after the last ')' do not.
        let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
        let state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        (state != "Z" && state != "X").then_some(ProcEntry { pid, ppid })
    })
    .collect()
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
