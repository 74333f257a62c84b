//! The one owner of every exit status in agentd.
//!
//! agentd is a child subreaper (and may be PID 1 in a container), so orphans of every exec are
//! re-parented to it and must be reaped here, or they stay zombies. A library wait on a single pid
//! would race this loop for the same statuses, so no other code in agentd waits: execs are spawned
//! through [`Reaper::spawn`] and receive their shell's status from here.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

/// How a tracked process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(nix::sys::signal::Signal),
}

impl Exit {
    /// The shell convention: a death by signal `n` is `128 + n`.
    pub fn code(self) -> i32 {
        match self {
            Self::Code(code) => code,
            Self::Signal(signal) => 128 + signal as i32,
        }
    }
}

/// The signals agentd installs handlers for (tokio's, on the runtime thread).
pub const HANDLED: [nix::sys::signal::Signal; 3] =
    [nix::sys::signal::Signal::SIGCHLD, nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGINT];

/// Keeps the signals agentd handles ([`HANDLED`]) off the calling thread, so the
/// kernel delivers them to the runtime thread, where they are awaited. A signal for the process goes
/// to any thread that does not block it: an idle pool thread picked for a SIGCHLD was woken only to
/// wake the runtime thread in turn, a second wake-up on every exec. For every thread agentd starts
/// besides the runtime's (the blocking pool's `on_thread_start`, the drain threads).
pub fn keep_signals_off_this_thread() {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let handled: SigSet = HANDLED.into_iter().collect();
    // It cannot fail with a valid `how`; were it to, the signals would only take the longer way.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&handled), None);
}

/// Receives the exit of one spawned process.
pub type ExitReceiver = oneshot::Receiver<Exit>;

#[derive(Default)]
pub struct Reaper {
    /// Processes whose exit someone awaits. Held while spawning and while reaping, so a child that
    /// exits before it is registered cannot be reaped unseen.
    waiters: Mutex<HashMap<Pid, oneshot::Sender<Exit>>>,
}

impl Reaper {
    /// Makes agentd a subreaper and starts the reaping task (needs a tokio runtime).
    pub fn start() -> io::Result<Arc<Self>> {
        // Orphans of an exec must come to us, so a timeout can find them and no zombie outlives them.
        nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)?;
        let mut sigchld = signal(SignalKind::child())?;
        let reaper = Arc::new(Self::default());
        let task_reaper = Arc::clone(&reaper);
        tokio::spawn(async move {
            loop {
                task_reaper.reap_all();
                if sigchld.recv().await.is_none() {
                    break;
                }
            }
        });
        Ok(reaper)
    }

    /// Runs `start` (which spawns a child and returns its pid, with what else it made) and
    /// registers the pid before anyone can reap it.
    pub fn spawn<T>(&self, start: impl FnOnce() -> io::Result<(Pid, T)>) -> io::Result<(T, ExitReceiver)> {
        let mut waiters = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let (pid, made) = start()?;
        let (tx, rx) = oneshot::channel();
        waiters.insert(pid, tx);
        Ok((made, rx))
    }

    /// Runs `f` while the tracked child `pid` is not reaped yet, with reaping held off until it
    /// returns; `None` once it was reaped (or if it was never tracked). Until then the pid number,
    /// and the process group and session it leads, are that child's (an exited child keeps its
    /// number as a zombie until it is reaped): a signal sent from `f` by number reaches it or its
    /// group, never a process that took the number after it.
    pub fn while_unreaped<T>(&self, pid: Pid, f: impl FnOnce() -> T) -> Option<T> {
        let waiters = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let tracked = waiters.contains_key(&pid);
        tracked.then(f)
    }

    /// Reaps every exited child; hands tracked statuses to their waiters, drops orphans' statuses.
    fn reap_all(&self) {
        let mut waiters = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let (pid, exit) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, Exit::Code(code)),
                Ok(WaitStatus::Signaled(pid, signal, _core)) => (pid, Exit::Signal(signal)),
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Ok(_) => continue,
                Err(Errno::EINTR) => continue,
                Err(err) => {
                    tracing::warn!("waitpid failed: {err}");
                    return;
                }
            };
            if let Some(waiter) = waiters.remove(&pid) {
                // The exec may have given up waiting (connection gone); nothing to tell then.
                let _ = waiter.send(exit);
            }
        }
    }
}
