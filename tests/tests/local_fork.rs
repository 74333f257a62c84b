//! A `LocalSandbox` belongs to the process that started it: a forked child that drops its copy
//! (Python's `os.fork` or multiprocessing do this when the copy is collected) leaves the parent's
//! agentd, workspace and socket alone; the owner's drop still ends them all.

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentd_host::{BaseSandbox, LocalSandbox};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// How long the child may take to drop its copy and exit.
const CHILD_DEADLINE: Duration = Duration::from_secs(10);

/// The child's exit status, or `None` (and the child killed) when it outlived [`CHILD_DEADLINE`].
fn wait_child(child: Pid) -> Option<WaitStatus> {
    let deadline = Instant::now() + CHILD_DEADLINE;
    while Instant::now() < deadline {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
            WaitStatus::StillAlive => std::thread::sleep(Duration::from_millis(10)),
            status => return Some(status),
        }
    }
    let _ = kill(child, Signal::SIGKILL);
    let _ = waitpid(child, None);
    None
}

/// Whether `pid` runs: a zombie (agentd after a SIGTERM, not yet reaped by its parent) does not.
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name, which is in parentheses and may hold spaces.
    stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
}

#[tokio::test]
async fn a_forked_childs_drop_leaves_the_parents_sandbox_alone() {
    let sandbox = LocalSandbox::start().await.expect("start local agentd");
    let agentd = sandbox.pid();
    let workspace = sandbox.workspace().to_owned();
    let socket = PathBuf::from(sandbox.url().strip_prefix("unix:").unwrap());
    assert!(sandbox.execute("echo before > before.txt", None).await.unwrap().exit_code == Some(0));

    // SAFETY: this test process has other threads (libtest's, tokio's blocking pool); after the fork
    // the child only drops its copy (the owner check returns before allocating or taking a lock)
    // and `_exit`s, so it never needs what another thread may have held at the fork.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            drop(sandbox);
            // SAFETY: `_exit` ends the child at once, running no atexit handler or destructor of
            // the parent's state.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            let status = wait_child(child);
            assert_eq!(status, Some(WaitStatus::Exited(child, 0)), "the child's drop did not return");
        }
    }

    assert!(alive(agentd), "the child's drop stopped the parent's agentd");
    assert!(workspace.join("before.txt").is_file(), "the child's drop removed the parent's workspace");
    assert!(socket.exists(), "the child's drop removed the parent's socket");
    let after = sandbox.execute("cat before.txt; echo after", None).await.unwrap();
    assert_eq!((after.output.as_str(), after.exit_code), ("before\nafter\n", Some(0)));

    // The owner's drop still ends everything.
    drop(sandbox);
    assert!(!alive(agentd), "the owner's drop left agentd running");
    assert!(!workspace.exists(), "the owner's drop left the workspace");
    assert!(!socket.exists(), "the owner's drop left the socket");
}
