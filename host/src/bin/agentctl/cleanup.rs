//! What agentctl creates for one command it removes, however the command ends: by itself, by an
//! error, or by SIGINT/SIGTERM of agentctl.
//!
//! From before a sandbox is opened until agentctl exits, SIGINT and SIGTERM are caught ([`Stop`])
//! rather than ending the process where it stands (which left a container running when agentctl was
//! stopped while it waited on one that never answered). A signal drops the command's work; then
//! the sandbox is removed, within [`CLEANUP_TIMEOUT`], and agentctl exits with 128 + the signal's
//! number (130, 143), as a shell reports a process a signal ended. A second signal during the
//! removal ends agentctl at once, naming what may be left.

use std::process::ExitCode;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// How long the removal of a sandbox this command created may take (Docker: the 5 s stop grace
/// and the removal; Daytona, Modal: the delete call and its retries). Past it agentctl gives up,
/// names what may be left and exits 125.
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// SIGINT and SIGTERM, caught while this value lives (tokio keeps its handlers installed after it
/// drops, so create it only where agentctl then exits by itself).
pub struct Stop {
    interrupt: Signal,
    terminate: Signal,
}

impl Stop {
    pub fn catch() -> std::io::Result<Self> {
        Ok(Self { interrupt: signal(SignalKind::interrupt())?, terminate: signal(SignalKind::terminate())? })
    }

    /// The number of the next signal caught.
    pub async fn next(&mut self) -> i32 {
        tokio::select! {
            Some(()) = self.interrupt.recv() => libc::SIGINT,
            Some(()) = self.terminate.recv() => libc::SIGTERM,
            // Both streams ended (the runtime is going away): no signal will come.
            else => std::future::pending().await,
        }
    }
}

/// `SIGINT` or `SIGTERM`, for messages.
pub fn signal_name(signo: i32) -> &'static str {
    if signo == libc::SIGINT { "SIGINT" } else { "SIGTERM" }
}

/// The status of a process a signal ended, as a shell reports it: 128 + its number.
pub fn signal_status(signo: i32) -> ExitCode {
    ExitCode::from(u8::try_from(128 + signo).unwrap_or(u8::MAX))
}

/// How waiting for a cleanup ended.
pub enum Waited<T> {
    /// It finished, with this result.
    Done(T),
    /// It took longer than [`CLEANUP_TIMEOUT`].
    TimedOut,
    /// A signal came first (its number): agentctl exits at once.
    Signal(i32),
}

/// Waits for `cleanup`, at most [`CLEANUP_TIMEOUT`], or until the next signal.
pub async fn wait<T>(cleanup: impl Future<Output = T>, stop: &mut Stop) -> Waited<T> {
    tokio::select! {
        // A cleanup that is already done wins over a signal that came at the same time.
        biased;
        done = tokio::time::timeout(CLEANUP_TIMEOUT, cleanup) => match done {
            Ok(done) => Waited::Done(done),
            Err(_) => Waited::TimedOut,
        },
        signo = stop.next() => Waited::Signal(signo),
    }
}

/// Waits until the runtime has no task left. When the creation of a sandbox is abandoned halfway
/// (a signal, or it failed), the provider's guard removes what was already made from a task it
/// spawns (a drop cannot wait); leaving `main` would cancel that task with the runtime.
pub async fn settle() {
    let metrics = tokio::runtime::Handle::current().metrics();
    while metrics.num_alive_tasks() > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
