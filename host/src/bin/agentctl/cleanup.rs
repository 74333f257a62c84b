//! A command on a sandbox, from opening the sandbox to letting go of it ([`in_sandbox`]): what
//! agentctl creates for one command it removes, however the command ends: by itself, by an
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

use agentd_host::provider::SandboxSpec;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::target;
use crate::{AGENTCTL_FAILED, Cli, Cmd, say, session, shown, work};

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

/// Runs a command that needs a sandbox: opens it, does the work, and lets go of it however the work
/// ends. What this command created is removed also on SIGINT/SIGTERM (see `cleanup`); the exit
/// status is then 128 + the signal's number, and 125 whenever something it created may be left.
pub async fn in_sandbox(cli: &Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Read before anything is created: a blocking read of stdin would keep signals from being seen.
    let request = match &cli.command {
        Cmd::Fs(command) => Some(command.clone().into_request(|| std::io::read_to_string(std::io::stdin()))?),
        Cmd::Exec(_)
        | Cmd::Upload { .. }
        | Cmd::Download { .. }
        | Cmd::Status
        | Cmd::Ps
        | Cmd::Attach { .. }
        | Cmd::Kill { .. }
        | Cmd::Shell { .. }
        | Cmd::Up { .. }
        | Cmd::Down
        | Cmd::Sandbox(_)
        | Cmd::Gc => None,
    };
    // Rules a sandbox agentctl does not start can only reach it with a command.
    let own = cli.sandbox.is_none() && cli.url.is_none() && session::read()?.is_none();
    if !cli.permissions.is_empty() && !own && !matches!(cli.command, Cmd::Exec(_)) {
        return Err("--permission: this sandbox's file verbs follow its own profile; with a sandbox \
                    agentctl does not start, only `exec` takes rules"
            .into());
    }
    let mut stop = Stop::catch()?;
    let opening = tokio::select! {
        opened = target::target(cli) => opened.map_err(Err),
        signo = stop.next() => Err(Ok(signo)),
    };
    let target = match opening {
        Ok(target) => target,
        Err(ended) => return abandoned_opening(cli, ended, &mut stop).await,
    };
    let ended = tokio::select! {
        outcome = work(cli, request, &target) => Ok(outcome),
        signo = stop.next() => Err(signo),
    };
    let created = target.created();
    if let (Err(signo), Some(created)) = (&ended, &created) {
        eprintln!("agentctl: {}: removing {created}, which this command created", signal_name(*signo));
    }
    let left = match wait(target.finish(), &mut stop).await {
        Waited::Done(Ok(())) => false,
        Waited::Done(Err(err)) => {
            let created = created.as_deref().unwrap_or("the sandbox");
            say(format!("removing {created}: {err}"));
            true
        }
        Waited::TimedOut => {
            let created = created.as_deref().unwrap_or("the sandbox");
            eprintln!(
                "agentctl: removing {created} took more than {} s; it may be left",
                CLEANUP_TIMEOUT.as_secs()
            );
            true
        }
        Waited::Signal(signo) => {
            let created = created.as_deref().unwrap_or("the sandbox");
            eprintln!("agentctl: {} during the removal: {created} may be left", signal_name(signo));
            true
        }
    };
    match (ended, left) {
        (Ok(outcome), false) => outcome,
        (Ok(outcome), true) => outcome.and(Ok(ExitCode::from(AGENTCTL_FAILED))),
        (Err(signo), false) => Ok(signal_status(signo)),
        (Err(_), true) => Ok(ExitCode::from(AGENTCTL_FAILED)),
    }
}

/// Opening the sandbox failed (`Err`) or a signal came first (`Ok(signo)`). Whatever was made
/// halfway is being removed by its provider's guard: wait for that before leaving.
async fn abandoned_opening(
    cli: &Cli,
    ended: Result<i32, Box<dyn std::error::Error>>,
    stop: &mut Stop,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Only a `KIND:SPEC` that creates leaves something of its own behind.
    let creating = match cli.sandbox.as_deref().map(str::parse::<SandboxSpec>) {
        Some(Ok(spec @ SandboxSpec::Create { .. })) => Some(shown(&spec.to_string()).into_owned()),
        Some(Ok(SandboxSpec::Attach { .. }) | Err(_)) | None => None,
    };
    if let (Ok(signo), Some(creating)) = (&ended, &creating) {
        eprintln!("agentctl: {}: abandoning the sandbox {creating} being created", signal_name(*signo));
    }
    let left = match wait(settle(), stop).await {
        Waited::Done(()) => None,
        Waited::TimedOut => Some(format!("its removal took more than {} s", CLEANUP_TIMEOUT.as_secs())),
        Waited::Signal(signo) => Some(format!("{} during its removal", signal_name(signo))),
    };
    if let (Some(why), Some(creating)) = (left, creating) {
        if let Err(err) = &ended {
            say(err);
        }
        eprintln!(
            "agentctl: {why}: a sandbox {creating} may be left (`agentctl sandbox ls` lists what agentd created)"
        );
        return Ok(ExitCode::from(AGENTCTL_FAILED));
    }
    ended.map(signal_status)
}
