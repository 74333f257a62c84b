//! A pids cgroup as a ceiling for what a test starts ([`PidsCap`]): a fork bomb or an escape cannot
//! fill the machine's process table, and what is left is killed when it drops.

use std::path::PathBuf;
use std::time::Duration;

use crate::skip::{Need, skip};

/// A pids cgroup made by the test beneath its own (cgroup v1 `pids`), with a small `pids.max`: a
/// ceiling for everything started inside it, so a fork bomb or an escape cannot fill the machine's
/// process table. Dropping it kills what is left and removes it.
pub struct PidsCap {
    pub dir: PathBuf,
}

impl PidsCap {
    /// `None` where no writable cgroup v1 `pids` hierarchy is mounted (not root, cgroup v2 only).
    pub fn new(max: u32) -> Option<Self> {
        let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let own = membership.lines().find_map(|l| l.split_once(":pids:").map(|(_, path)| path.to_owned()))?;
        let root = std::path::Path::new("/sys/fs/cgroup/pids");
        let dir =
            root.join(own.trim_start_matches('/')).join(format!("agentd-test-{}", rand::random::<u32>()));
        std::fs::create_dir(&dir).ok()?;
        let cap = Self { dir };
        std::fs::write(cap.dir.join("pids.max"), max.to_string()).ok()?;
        Some(cap)
    }

    /// [`PidsCap::new`], or [`skip`] (`Need::Cgroup`) and `None`.
    pub fn or_skip(max: u32) -> Option<Self> {
        let cap = Self::new(max);
        if cap.is_none() {
            skip(Need::Cgroup, "needs a writable cgroup v1 pids hierarchy (root)");
        }
        cap
    }

    /// A wrapper for [`Daemon::launch`](crate::Daemon::launch): a shell that joins the cap, then runs its arguments.
    pub fn enter(&self) -> String {
        format!("echo $$ > {}/cgroup.procs && exec \"$@\"", self.dir.display())
    }

    /// Moves the calling thread into the cap until the guard drops: what it spawns meanwhile (an
    /// agentd through `LocalSandbox::start`) starts inside. cgroup v1 moves single threads through
    /// `tasks`, so the test's other threads stay where they are.
    pub fn join_thread(&self) -> ThreadInCap {
        let tid = nix::unistd::gettid().to_string();
        let back = self.dir.parent().expect("parent cgroup").join("tasks");
        std::fs::write(self.dir.join("tasks"), &tid).expect("join the cap");
        ThreadInCap { tid, back }
    }

    /// Every pid in the cap's tree.
    pub fn pids(&self) -> Vec<i32> {
        pids_below(&self.dir)
    }
}

/// The calling thread inside a [`PidsCap`]; dropping it moves the thread back to the cap's parent.
pub struct ThreadInCap {
    tid: String,
    back: PathBuf,
}

impl Drop for ThreadInCap {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.back, &self.tid);
    }
}

/// Every pid in the cgroup `dir` and beneath it.
pub fn pids_below(dir: &std::path::Path) -> Vec<i32> {
    let mut pids = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        pids.extend(procs.lines().filter_map(|l| l.parse::<i32>().ok()));
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    pids
}

impl Drop for PidsCap {
    fn drop(&mut self) {
        for _ in 0..100 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Deepest first.
        let mut dirs = vec![self.dir.clone()];
        let mut i = 0;
        while i < dirs.len() {
            let children: Vec<_> = std::fs::read_dir(&dirs[i])
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            dirs.extend(children);
            i += 1;
        }
        for dir in dirs.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}
