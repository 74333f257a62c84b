//! Running one command: spawn under `/bin/sh -c` in its own session, capture its merged output at the
//! source, enforce the timeout with the kill ladder, and report exactly how it ended.
//!
//! - [`tree`]: which processes belong to an exec, and the SIGTERM → grace → SIGKILL ladder.
//! - [`capture`]: the capture file, the pipe drain, splice of the dropped tail to /dev/null.
//! - [`spawn`]: `/bin/sh -c` started in a new session (a clone sharing agentd's memory until the
//!   exec, which agentd does not wait for), confined or not, its child making raw calls only
//!   ([`crate::syscall`]); exit statuses come from [`crate::reaper`].
//! - [`prepare`]: an exec request admitted and its confinement planned, ready to run.
//! - [`preview`]: the head/tail preview of offloaded output.
//!
//! A kept exec (`keep`) captures into a [`capture::Journal`] (its head in memory, then its file)
//! that readers follow from any offset; the caller learns of it, the shell's [`Target`] and the stdin it may write to through
//! [`Spawned`], right after the spawn.
//!
//! Invariants: the result is reported as soon as the shell is reaped and the pipe is drained, or
//! [`DRAIN_AFTER_EXIT`] after the reaping if a background process still holds the pipe; a timed-out or
//! cancelled exec returns only after its whole tree is gone.

pub mod capture;
pub mod prepare;
pub mod preview;
pub mod spawn;
pub mod tree;

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentd_protocol::limits::{
    MAX_INLINE_CAPTURE, MAX_JOURNAL_BYTES, MAX_REPLY_BYTES, MIN_INLINE_CAPTURE_BYTES,
};
use agentd_protocol::permission::Operation;
use agentd_protocol::profile::{Enforcement, Limits};
use agentd_protocol::{Ending, ErrorCode, ExecResult, TerminalSize};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::unistd::Pid;
use thiserror::Error;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{mpsc, oneshot};

use crate::reaper::{Exit, ExitReceiver, Reaper};
use capture::{CaptureFile, CaptureTarget, DrainEnd, Journal};
use tree::{TAG_VAR, Target, TimeoutLadder};

use crate::admission::{Admitted, Capture};
use crate::cancel::Cancel;
use crate::confine::{Cleanup, Plan};
use crate::outbox::{Reserved, Room};
use crate::root::{Kind, Node, ResolveError, Workspace};
use crate::scratch::Scratch;

/// How long the pipe is still read after the shell was reaped, for output a background process
/// writes late. Past it the result goes out and the pipe is drained to nowhere.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);

/// What to run and how.
pub struct ExecSpec {
    pub command: String,
    /// Absolute, or relative to the workspace; with `--root`, a path under the root (`/` is the root).
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    /// `None`: no limit.
    pub timeout: Option<Duration>,
    pub stdin: Option<Vec<u8>>,
    /// Stdin is a pipe left open for the caller ([`Spawned::input`]).
    pub stdin_pipe: bool,
    /// Run under a new terminal of this size.
    pub pty: Option<TerminalSize>,
    pub max_capture_bytes: u64,
    pub mode: CaptureMode,
    /// The sandbox profile's part, when one is in force.
    pub confined: Option<Confined>,
    /// What the child applies and what is cleaned up after it: the profile's plan, or an
    /// unconfined command's cgroup ([`crate::confine::Confiner::unconfined_plan`]).
    pub plan: Option<Plan>,
    /// An offload's capture file, already made where the sandbox's file work runs
    /// ([`offload_target`]); `None`: made by agentd when needed.
    pub offload: Option<CaptureTarget>,
}

impl ExecSpec {
    /// The spec of an admitted request, with its prepared confinement.
    pub fn new(admitted: Admitted, confined: Option<Confined>, plan: Option<Plan>) -> Self {
        Self {
            command: admitted.command,
            cwd: admitted.cwd,
            env: admitted.env,
            timeout: admitted.timeout,
            stdin: admitted.stdin,
            stdin_pipe: admitted.stdin_pipe,
            pty: admitted.pty,
            max_capture_bytes: admitted.max_capture_bytes,
            mode: match admitted.capture {
                Capture::Inline if admitted.keep.is_some() => CaptureMode::Kept,
                Capture::Inline => CaptureMode::Inline,
                Capture::Offload { path, inline_budget } => CaptureMode::Offload { path, inline_budget },
            },
            confined,
            plan,
            offload: None,
        }
    }
}

/// A command under a sandbox profile: its prepared confinement and the profile's environment rules.
pub struct Confined {
    pub env_allowlist: Option<Vec<String>>,
    pub fixed_env: BTreeMap<String, String>,
    pub limits: Limits,
}

/// What happens to the captured output.
#[derive(Debug, Clone)]
pub enum CaptureMode {
    /// All captured bytes come back inline; the capture file is temporary.
    Inline,
    /// Output above `inline_budget` stays in the file at `path` and a preview comes back.
    Offload { path: String, inline_budget: u64 },
    /// A kept exec's: the output goes to a [`Journal`] in agentd's own directory, which stays after
    /// the exec (its owner removes it); its head comes back inline, as for `Inline`.
    Kept,
}

/// What the caller of [`Executor::run`] learns right after the spawn (before the exec is known to
/// have happened).
pub struct Spawned {
    pub pid: Pid,
    /// Where the exec's processes are found: for signals and the kill ladder, also after its shell
    /// ended (its strays).
    pub target: Target,
    /// The write end of a stdin pipe, or the terminal's master side (non-blocking, close-on-exec).
    pub input: Option<OwnedFd>,
    /// The exec runs under a terminal: `input` is its master side, to resize.
    pub terminal: bool,
    /// A kept exec's journal.
    pub journal: Option<Journal>,
    /// How far the capture is.
    pub progress: tokio::sync::watch::Receiver<capture::Progress>,
}

/// An exec without a result: reported as such, never as a made-up exit code.
#[derive(Debug, Error)]
pub enum ExecError {
    #[error("working directory `{path}` is not usable: {source}")]
    Cwd { path: PathBuf, source: io::Error },
    #[error("capture file `{path}` cannot be created: {source}")]
    CapturePath { path: PathBuf, source: io::Error },
    /// `cwd` or `capture_path` would leave `--root`.
    #[error("{what} `{path}` is refused: invalid_path (it leaves the root)")]
    OutsideRoot { what: &'static str, path: PathBuf },
    #[error("cannot create the output pipe: {0}")]
    Pipe(io::Error),
    #[error("cannot start /bin/sh: {0}")]
    Shell(io::Error),
    /// A strict profile's command found less confinement than asked and did not run.
    #[error("{0}")]
    NotEnforceable(io::Error),
    /// The command ran, but its result could not be assembled.
    #[error("the command ran, but its output could not be read back from `{path}`: {source}")]
    Capture { path: PathBuf, source: io::Error },
    /// The command ran, but its exit status was lost (the reaper is gone: agentd is failing).
    #[error("the command ran, but its exit status was lost")]
    StatusLost,
    /// agentd began to shut down before the command started.
    #[error("agentd is shutting down: the command did not start")]
    ShuttingDown,
}

impl ExecError {
    /// A failed spawn; the child's strict refusal is told apart.
    fn spawn(err: io::Error) -> Self {
        if err.get_ref().is_some_and(|inner| inner.is::<crate::confine::ConfineError>()) {
            Self::NotEnforceable(err)
        } else {
            Self::Shell(err)
        }
    }

    /// The protocol's code for it.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotEnforceable(_) => ErrorCode::NotEnforceable,
            _ if self.is_spawn_failure() => ErrorCode::SpawnFailed,
            _ => ErrorCode::Internal,
        }
    }

    /// The command never started (as opposed to: it ran and its result was lost).
    pub fn is_spawn_failure(&self) -> bool {
        match self {
            Self::Cwd { .. }
            | Self::CapturePath { .. }
            | Self::OutsideRoot { .. }
            | Self::Pipe(_)
            | Self::Shell(_)
            | Self::NotEnforceable(_)
            | Self::ShuttingDown => true,
            Self::Capture { .. } | Self::StatusLost => false,
        }
    }
}

/// Runs commands for every connection of this agentd.
pub struct Executor {
    reaper: Arc<Reaper>,
    ladder: TimeoutLadder,
    /// Where `cwd` and capture paths resolve (confined with `--root`), as the file verbs' paths do.
    workspace: Workspace,
    /// Where temporary capture files of inline execs and journals live: agentd's own directory
    /// ([`crate::scratch`]), for the paths shown.
    scratch: Workspace,
    /// `scratch`, open: its files are made and removed beneath it by name, no path resolved.
    scratch_dir: Arc<OwnedFd>,
    /// Prefix of every exec tag: agentd's pid, so two agentd in one sandbox never share tags.
    tag_prefix: String,
    next_seq: AtomicU64,
    /// Running execs by sequence number, so shutdown can end them all.
    running: Mutex<HashMap<u64, Target>>,
    /// Set when agentd shuts down: no exec starts from then on.
    shutdown: Cancel,
    base_env: Arc<spawn::BaseEnv>,
    spawner: spawn::Spawner,
}

impl Executor {
    pub fn new(
        reaper: Arc<Reaper>,
        workspace: Workspace,
        scratch: &Scratch,
        grace: Duration,
        shutdown: Cancel,
    ) -> Self {
        Self {
            reaper,
            ladder: TimeoutLadder { grace },
            workspace,
            scratch_dir: scratch.dir(),
            scratch: Workspace::open(scratch.path().to_owned()),
            tag_prefix: std::process::id().to_string(),
            next_seq: AtomicU64::new(0),
            running: Mutex::new(HashMap::new()),
            shutdown,
            base_env: Arc::new(spawn::BaseEnv::capture()),
            spawner: spawn::Spawner::new(),
        }
    }

    pub fn workspace(&self) -> &Path {
        self.workspace.dir()
    }

    /// The working directory `cwd` names (default: the workspace), opened: the command starts in
    /// this very directory (`fchdir` on its fd), whatever happens to the path meanwhile.
    fn working_dir(&self, cwd: Option<&str>) -> Result<Node, ExecError> {
        let cwd = cwd.unwrap_or(".");
        let path = self.workspace.shown(cwd);
        // chdir failing in the child would be indistinguishable from a missing shell.
        let errno = |errno: Errno| ExecError::Cwd { path: path.clone(), source: errno.into() };
        match self.workspace.node(cwd, true) {
            Ok(Some(node)) if node.is_dir() => Ok(node),
            Ok(Some(_)) => Err(errno(Errno::ENOTDIR)),
            Ok(None) => Err(errno(Errno::ENOENT)),
            Err(ResolveError::Escape) => Err(ExecError::OutsideRoot { what: "working directory", path }),
            Err(ResolveError::Io(source)) => Err(ExecError::Cwd { path, source }),
        }
    }

    /// Runs `spec` to completion. `spawned` hears of the process at once; `started` hears the
    /// shell's pid once its exec happened; `live` gets output as it comes. With `room`, output that
    /// comes back inline is read back only once room for its reply is reserved there (returned with
    /// the result, to be held until the reply is sent).
    ///
    /// The phases: open the capture and the pipes, [`launch`](Self::launch) the shell, hand the
    /// ends over ([`close_child_ends`], [`Self::confirm_exec`]), [`wait_for_exit`] with the
    /// timeout and the cancel, [`end_what_it_left`], [`drain_output`], then [`finish`] the result.
    pub async fn run(
        &self,
        mut spec: ExecSpec,
        cancel: &Cancel,
        watchers: Watchers,
        room: Option<&Room>,
    ) -> Result<(ExecResult, Option<Reserved>), ExecError> {
        let Watchers { spawned, started, live } = watchers;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}.{seq}", self.tag_prefix);
        let cwd = self.working_dir(spec.cwd.as_deref())?;
        let (mut capture, mut journal) = match spec.offload.take() {
            Some(target) => (CaptureFile::new(target, spec.max_capture_bytes), None),
            None => self.capture_for(&spec, seq)?,
        };
        let progress = spawned.as_ref().map(|_| capture.watch());
        let pipes = open_pipes(spec.pty, spec.stdin.is_some() || spec.stdin_pipe)?;

        let no_env = BTreeMap::new();
        let (env_allowlist, fixed_env, limits) = match spec.confined.take() {
            Some(c) => (c.env_allowlist, c.fixed_env, Some(c.limits)),
            None => (None, no_env, None),
        };
        let shell = spawn::Shell {
            env_allowlist: env_allowlist.as_deref(),
            fixed_env: &fixed_env,
            command: &spec.command,
            cwd: cwd.fd(),
            base_env: &self.base_env,
            env: &spec.env,
            tag: (TAG_VAR, &tag),
            stdin: match &pipes.terminal {
                Some(_) => Some(&pipes.writer),
                None => pipes.stdin.as_ref().map(|(read, _)| read),
            },
            output: &pipes.writer,
            terminal: pipes.terminal.is_some(),
        };
        let start = Instant::now();
        let Launched { target, exited, mut launch, mut report, mut cleanup } =
            self.launch(&shell, spec.plan.take(), seq, &tag)?;
        let pid = target.root;
        let Pipes { reader, writer, terminal, stdin } = pipes;
        let (feed, input) = close_child_ends(writer, stdin, spec.stdin_pipe, terminal);
        if let (Some(spawned), Some(progress)) = (spawned, progress) {
            let terminal = spec.pty.is_some();
            let journal = journal.take();
            let _ = spawned.send(Spawned { pid, target: target.clone(), input, terminal, journal, progress });
        }
        if let Some(started) = started {
            self.confirm_exec(&mut launch, seq).await?;
            let _ = started.send(pid);
        }
        if let (Some(write), Some(bytes)) = (feed, spec.stdin.take()) {
            tokio::spawn(feed_stdin(write, bytes));
        }

        let (stop_drain, stop) = oneshot::channel();
        let drain = tokio::spawn(capture::drain(reader, capture, live, stop));
        let ended = wait_for_exit(&self.ladder, &target, exited, spec.timeout, cancel).await;
        let duration = start.elapsed();
        let bombed = end_what_it_left(cleanup.as_mut(), ended.timed_out || ended.cancelled).await;
        self.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&seq);
        // The child is done with agentd's memory by now (it exec'd or exited before its exit could
        // be reported): whether it exec'd, and what it measured of its confinement. One that never
        // exec'd wrote nothing (its output pipe is at its end, no capture file was made).
        launch.conclude(report.as_mut()).map_err(ExecError::spawn)?;
        let exit = ended.exit.ok_or(ExecError::StatusLost)?;
        let (capture, pipe_held) = drain_output(drain, stop_drain, pid).await?;

        let result = ExecResult {
            exit_code: exit.code(),
            ending: Ending {
                signal: match exit {
                    Exit::Signal(signal) => Some(signal.as_str().to_owned()),
                    Exit::Code(_) => None,
                },
                timed_out: ended.timed_out,
                cancelled: ended.cancelled,
                abandoned: false,
            },
            duration: duration.as_secs_f64(),
            total_bytes: capture.total(),
            capped: capture.is_full(),
            limit_exceeded: if bombed {
                Some("processes".to_owned())
            } else {
                limit_exceeded(exit, limits.as_ref())
            },
            enforcement: report,
            ..ExecResult::default()
        };
        let reserved = match room {
            Some(room) => room.reserve(reply_size(&capture, &spec.mode)).await,
            None => None,
        };
        let left = Left { cleanup, pipe_held, target };
        let result = finish(capture, spec.mode, result, left).await?;
        Ok((result, reserved))
    }

    /// Spawns the shell under its plan (`None`: no cgroup, no confinement), registered among the
    /// running execs under the lock shutdown takes, so no exec starts unseen by `kill_all`.
    fn launch(
        &self,
        shell: &spawn::Shell<'_>,
        plan: Option<Plan>,
        seq: u64,
        tag: &str,
    ) -> Result<Launched, ExecError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        // Read under it too: an exec asked for as `kill_all` runs never starts.
        if self.shutdown.is_cancelled() {
            return Err(ExecError::ShuttingDown);
        }
        let (steps, report, cleanup) = match plan {
            Some(plan) => {
                let (report, steps, cleanup) = plan.into_parts();
                (Some(steps), report, Some(cleanup))
            }
            None => (None, None, None),
        };
        let spawned = self.reaper.spawn(|| {
            let launch = self.spawner.spawn(shell, steps)?;
            Ok((launch.pid, launch))
        });
        let (launch, exited) = spawned.map_err(ExecError::spawn)?;
        let cgroup = cleanup.as_ref().and_then(|cleanup| cleanup.cgroup().map(Path::to_owned));
        let leader = tree::Leader::new(launch.pid, Arc::clone(&self.reaper));
        let target = Target { root: launch.pid, leader, tag: tag.to_owned(), cgroup };
        running.insert(seq, target.clone());
        Ok(Launched { target, exited, launch, report, cleanup })
    }

    /// Waits until the shell's exec happened (a caller is told only of a command that started).
    async fn confirm_exec(&self, launch: &mut spawn::Launch, seq: u64) -> Result<(), ExecError> {
        if let Err(err) = launch.exec_done().await {
            // The child exited without its exec (its status goes nowhere: `exited` is dropped).
            self.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&seq);
            return Err(ExecError::spawn(err));
        }
        Ok(())
    }

    /// Ends the processes of `target` with the kill ladder (an exec's strays after its shell ended).
    pub async fn kill(&self, target: &Target) {
        self.ladder.kill(target).await;
    }

    /// Ends every running exec with the kill ladder, then every other process agentd started
    /// (background processes of finished execs): agentd is shutting down.
    pub async fn kill_all(&self) {
        let running: Vec<Target> =
            self.running.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        let kills = running.iter().map(|target| self.ladder.kill(target));
        futures_util::future::join_all(kills).await;
        tree::kill_every_descendant().await;
    }

    /// Where the output is stored. An offload capture path resolves like any other path (under
    /// `--root` when given, parents made); the file is then created and removed through the fd of
    /// its directory, by its name there, never following a link: a capture path that is a symbolic
    /// link is refused.
    fn capture_for(&self, spec: &ExecSpec, seq: u64) -> Result<(CaptureFile, Option<Journal>), ExecError> {
        // Inline captures and journals live in agentd's own directory; the file is made there
        // (`O_NOFOLLOW`) only if the output outgrows memory, a journal's at once.
        let scratch = |name: String| {
            let shown = self.scratch.shown(&name);
            CString::new(name)
                .map(|c_name| CaptureTarget::private(Arc::clone(&self.scratch_dir), c_name, shown.clone()))
                .map_err(|err| ExecError::CapturePath { path: shown, source: err.into() })
        };
        match &spec.mode {
            CaptureMode::Inline => {
                let cap = spec.max_capture_bytes.clamp(MIN_INLINE_CAPTURE_BYTES, MAX_INLINE_CAPTURE);
                Ok((CaptureFile::new(scratch(format!("capture-{seq}"))?, cap), None))
            }
            CaptureMode::Kept => {
                let cap = journal_cap(spec.max_capture_bytes);
                let (capture, journal) = CaptureFile::journal(scratch(format!("journal-{seq}"))?, cap);
                Ok((capture, Some(journal)))
            }
            CaptureMode::Offload { path, .. } => {
                let target = target_in(&self.workspace, path, self.workspace.shown(path))?;
                Ok((CaptureFile::new(target, spec.max_capture_bytes), None))
            }
        }
    }
}

/// An offload's capture file `path` in `ws`, parents made and the file made, by the calling thread:
/// under a server profile, a thread that carries the sandbox's walls makes it, as it would any file
/// a verb writes.
pub fn offload_target(ws: &Workspace, path: &str) -> Result<CaptureTarget, ExecError> {
    let shown = ws.shown(path);
    // The capture file is written by agentd, not by the command: the permission rules are checked
    // here, as for any file a verb writes.
    if let Some(refusal) = crate::guard::refusal(ws, Operation::Write, path) {
        return Err(ExecError::CapturePath {
            path: shown,
            source: io::Error::new(io::ErrorKind::PermissionDenied, refusal),
        });
    }
    let target = target_in(ws, path, shown.clone())?;
    target.made().map_err(|source| ExecError::CapturePath { path: shown, source })
}

/// The capture file `path` names in `ws` (`shown` in results and messages), parents made.
fn target_in(ws: &Workspace, path: &str, shown: PathBuf) -> Result<CaptureTarget, ExecError> {
    let fail = |source: io::Error| ExecError::CapturePath { path: shown.clone(), source };
    let entry = match ws.entry(path, true) {
        Ok(entry) => entry,
        Err(ResolveError::Escape) => {
            return Err(ExecError::OutsideRoot { what: "capture file", path: shown });
        }
        Err(ResolveError::Io(source)) => return Err(fail(source)),
    };
    match ws.lookup(&entry, false) {
        Ok(Some(node)) if node.kind() == Kind::Symlink => return Err(fail(Errno::ELOOP.into())),
        Ok(_) => {}
        Err(ResolveError::Escape) => {
            return Err(ExecError::OutsideRoot { what: "capture file", path: shown });
        }
        Err(ResolveError::Io(source)) => return Err(fail(source)),
    }
    let Some(name) = entry.name() else { return Err(fail(Errno::EISDIR.into())) };
    // Checked again where the walk found it: a link swapped in on the way after the first check.
    if let Some(refusal) = crate::guard::refusal_at(ws, Operation::Write, path, &entry.location()) {
        return Err(fail(io::Error::new(io::ErrorKind::PermissionDenied, refusal)));
    }
    let dir = entry.dir().try_clone_to_owned().map_err(fail)?;
    Ok(CaptureTarget::new(Arc::new(dir), name.to_owned(), shown))
}

/// A command's output and input ends, before the spawn.
struct Pipes {
    /// What the drain reads: the output pipe's read end, or the terminal's master side.
    reader: OwnedFd,
    /// The command's output (and under a terminal, its stdin too).
    writer: OwnedFd,
    /// The terminal's master side again, for the caller's input and resizes.
    terminal: Option<OwnedFd>,
    /// A stdin pipe without a terminal: the command's read end, agentd's write end.
    stdin: Option<(OwnedFd, OwnedFd)>,
}

/// The output: a pipe, or a new terminal of `pty` (its master side read as the pipe would be); and
/// a stdin pipe when the command has input (`stdin`) and no terminal.
fn open_pipes(pty: Option<TerminalSize>, stdin: bool) -> Result<Pipes, ExecError> {
    let (reader, writer, terminal) = match pty {
        None => {
            let (reader, writer) =
                nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| ExecError::Pipe(e.into()))?;
            (reader, writer, None)
        }
        Some(size) => {
            let (master, slave) = open_terminal(size).map_err(ExecError::Pipe)?;
            let input = master.try_clone().map_err(ExecError::Pipe)?;
            (master, slave, Some(input))
        }
    };
    fcntl(reader.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(|e| ExecError::Pipe(e.into()))?;
    let stdin = match (&terminal, stdin) {
        (None, true) => {
            let (read, write) =
                nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| ExecError::Pipe(e.into()))?;
            // Writes wait on the runtime for room, never on a thread.
            fcntl(write.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
                .map_err(|e| ExecError::Pipe(e.into()))?;
            Some((read, write))
        }
        _ => None,
    };
    Ok(Pipes { reader, writer, terminal, stdin })
}

/// A shell just spawned, and what its plan left to report and undo.
struct Launched {
    target: Target,
    exited: ExitReceiver,
    launch: spawn::Launch,
    report: Option<Enforcement>,
    cleanup: Option<Cleanup>,
}

/// Closes agentd's copies of the child's ends, before any other child is cloned (no await since
/// the clone): no other child holds them, and EOF comes when this command's end. Returns the end
/// agentd feeds `stdin` through and the caller's input (`stdin_pipe`'s write end, or the terminal).
fn close_child_ends(
    writer: OwnedFd,
    stdin: Option<(OwnedFd, OwnedFd)>,
    stdin_pipe: bool,
    terminal: Option<OwnedFd>,
) -> (Option<OwnedFd>, Option<OwnedFd>) {
    drop(writer);
    let stdin = stdin.map(|(read, write)| {
        drop(read);
        write
    });
    match (stdin_pipe, terminal) {
        (_, Some(master)) => (None, Some(master)),
        (true, None) => (None, stdin),
        (false, None) => (stdin, None),
    }
}

/// How the wait for a command's shell ended.
struct Ended {
    /// `None`: its status was lost (the reaper is gone).
    exit: Option<Exit>,
    timed_out: bool,
    cancelled: bool,
}

/// Waits for the shell's exit; at the timeout or the cancel, ends the tree with the kill ladder first.
async fn wait_for_exit(
    ladder: &TimeoutLadder,
    target: &Target,
    exited: ExitReceiver,
    timeout: Option<Duration>,
    cancel: &Cancel,
) -> Ended {
    let (mut timed_out, mut cancelled) = (false, false);
    let sleep = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(exited);
    let exit = tokio::select! {
        exit = &mut exited => exit,
        () = sleep => {
            timed_out = true;
            ladder.kill(target).await;
            (&mut exited).await
        }
        () = cancel.cancelled() => {
            cancelled = true;
            ladder.kill(target).await;
            (&mut exited).await
        }
    };
    Ended { exit: exit.ok(), timed_out, cancelled }
}

/// What the command's cgroup says once its shell ended: `killed` (timeout, cancel) is recorded, and
/// forks refused in it mean it met its task limit (a fork bomb's signature, by its own limit or the
/// commands' budget): whatever it left is ended with it, through the cgroup, so a bomb cannot
/// outlive its exec. Returns whether it was a bomb.
async fn end_what_it_left(cleanup: Option<&mut Cleanup>, killed: bool) -> bool {
    let Some(cleanup) = cleanup else { return false };
    if killed {
        cleanup.killed();
    }
    if cleanup.refused_forks() == 0 {
        return false;
    }
    let Some(dir) = cleanup.cgroup().map(Path::to_owned) else { return false };
    tree::end_cgroups(vec![dir]).await;
    cleanup.killed();
    true
}

/// The capture once the pipe is drained: at EOF, or [`DRAIN_AFTER_EXIT`] after the exit when a
/// background process still holds the pipe (then `true`: the rest goes to nowhere).
async fn drain_output(
    mut drain: tokio::task::JoinHandle<io::Result<capture::Drained>>,
    stop_drain: oneshot::Sender<()>,
    pid: Pid,
) -> Result<(CaptureFile, bool), ExecError> {
    let drained = match tokio::time::timeout(DRAIN_AFTER_EXIT, &mut drain).await {
        Ok(drained) => drained,
        Err(_) => {
            let _ = stop_drain.send(());
            drain.await
        }
    };
    let (capture, end, read_result) = drained
        .map_err(io::Error::other)
        .and_then(|drained| drained)
        .map_err(|source| ExecError::Capture { path: PathBuf::from("(output pipe)"), source })?;
    if let Err(err) = read_result {
        tracing::warn!(%pid, "reading exec output failed: {err}");
    }
    let pipe_held = matches!(end, DrainEnd::Stopped);
    if pipe_held {
        tracing::debug!(%pid, "a background process still holds the output pipe");
    }
    Ok((capture, pipe_held))
}

/// What a finished command left: its cgroup to clean up, a pipe a background process still holds,
/// its processes.
struct Left {
    cleanup: Option<Cleanup>,
    pipe_held: bool,
    target: Target,
}

/// `result` with its output fields filled and the strays the command left; its cgroup cleaned up.
async fn finish(
    capture: CaptureFile,
    mode: CaptureMode,
    mut result: ExecResult,
    left: Left,
) -> Result<ExecResult, ExecError> {
    let Left { cleanup, pipe_held, target } = left;
    let path = capture.path().to_owned();
    // Output held in memory, no cgroup or an empty one (told through a descriptor it holds) and
    // nothing left running: no file system work, so no trip to the blocking pool (most commands
    // end this way, confined or not).
    let left_now = match &cleanup {
        None => Some(None),
        Some(cleanup) => cleanup.left_now(),
    };
    if let Some(left) = left_now
        && !pipe_held
        && capture.in_memory()
        && matches!(mode, CaptureMode::Inline | CaptureMode::Kept)
    {
        if let Some(cleanup) = cleanup {
            result.stray_processes = left;
            if let Some(rest) = cleanup.keep(left) {
                // Removing a cgroup that cannot be kept is path work; nobody waits for it.
                tokio::task::spawn_blocking(move || drop(rest));
            }
        }
        return finish_capture(capture, &mode, &mut result)
            .map(|()| result)
            .map_err(|source| ExecError::Capture { path, source });
    }
    // Reading back up to 12 MiB (and writing the preview), counting strays (a `/proc` scan without
    // a cgroup) and removing the cgroup are blocking work: off the runtime thread, so other
    // connections' requests do not wait for it.
    let finished = tokio::task::spawn_blocking(move || {
        if let Some(cleanup) = cleanup {
            result.stray_processes = cleanup.processes_left();
            cleanup.finish(result.stray_processes);
        }
        if result.stray_processes.is_none() && pipe_held {
            // No cgroup to ask: a `/proc` scan, only when a process is known to be left.
            let left = target.members().len();
            result.stray_processes = Some(u32::try_from(left).unwrap_or(u32::MAX));
        }
        finish_capture(capture, &mode, &mut result).map(|()| result)
    })
    .await
    .unwrap_or_else(|e| Err(io::Error::other(e)));
    finished.map_err(|source| ExecError::Capture { path, source })
}

/// Which resource limit ended the command, if one did: its own death by SIGXCPU/SIGXFSZ, or a shell
/// reporting a child's (exit 128 + n) when that limit is set.
fn limit_exceeded(exit: Exit, limits: Option<&Limits>) -> Option<String> {
    use nix::sys::signal::Signal;
    let named = |signal: Signal| match signal {
        Signal::SIGXCPU => Some("cpu_seconds".to_owned()),
        Signal::SIGXFSZ => Some("file_size".to_owned()),
        _ => None,
    };
    match exit {
        Exit::Signal(signal) => named(signal),
        Exit::Code(code) => {
            let limits = limits?;
            let signal = Signal::try_from(code - 128).ok()?;
            let set = match signal {
                Signal::SIGXCPU => limits.cpu_seconds.is_some(),
                Signal::SIGXFSZ => limits.file_size.is_some(),
                _ => false,
            };
            if set { named(signal) } else { None }
        }
    }
}

/// Bytes of a reply kept for everything but the output field.
const REPLY_ENVELOPE: usize = 64 * 1024;

/// What the output field of an inline reply may take, encoded: the rest fits [`MAX_REPLY_BYTES`].
const OUTPUT_BUDGET: usize = MAX_REPLY_BYTES - REPLY_ENVELOPE;

/// The most the reply of this capture can take: inline output escaped or base64 within its budget,
/// or a preview.
fn reply_size(capture: &CaptureFile, mode: &CaptureMode) -> usize {
    let inline = match mode {
        CaptureMode::Inline | CaptureMode::Kept => true,
        CaptureMode::Offload { inline_budget, .. } => capture.captured() <= *inline_budget,
    };
    if !inline {
        return REPLY_FIELDS + 16 * 1024;
    }
    inline_reply_size(capture.captured())
}

/// Every field of an exec's reply but the output: a few hundred bytes, a few KiB with an
/// enforcement report. (A reply larger than reserved takes more room when it is queued.)
const REPLY_FIELDS: usize = 8 * 1024;

/// The most a reply carrying `bytes` of output inline can take: text escapes to at most 6 bytes a
/// byte, base64 to 4 per 3; the output budget caps both.
fn inline_reply_size(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX).saturating_mul(6).min(OUTPUT_BUDGET) + REPLY_FIELDS
}

/// Fills the output fields of `result` from the finished capture. Output lost because the capture
/// file could not be made or written is never reported as complete: `truncated`, with the reason
/// in `capture_error`.
fn finish_capture(mut capture: CaptureFile, mode: &CaptureMode, result: &mut ExecResult) -> io::Result<()> {
    let offloadable = match mode {
        CaptureMode::Inline | CaptureMode::Kept => false,
        CaptureMode::Offload { inline_budget, .. } => {
            // A file that cannot be made leaves the stored bytes in memory: they come back inline.
            capture.captured() > *inline_budget && capture.persist().is_ok()
        }
    };
    // Bytes dropped because storing failed (the cap's own drops follow the rules below).
    let lost = capture.failure().is_some() && capture.total() > capture.captured();
    result.capture_error = capture.failure().map(str::to_owned);
    match mode {
        CaptureMode::Inline => {
            let dropped = capture.total() > capture.captured();
            let cut = result.set_output_within(capture.into_bytes()?, OUTPUT_BUDGET);
            result.truncated = dropped || cut;
        }
        CaptureMode::Kept => {
            // The journal stays for its attachers; its head is the output, as it is for them.
            let head = capture.read_at(0, kept_head_len())?;
            set_kept_output(result, head, capture.captured());
        }
        CaptureMode::Offload { .. } if !offloadable => {
            // The contract's quirk: inline output cut at the cap is not reported as truncated.
            result.capped = false;
            let bytes = capture.bytes()?;
            // The contract removes the capture file of inline output, also one left there before.
            capture.discard();
            // Output that escaping makes too large for one reply is agentd's own loss: reported.
            result.truncated = result.set_output_within(bytes, OUTPUT_BUDGET) || lost;
        }
        CaptureMode::Offload { .. } => {
            let len = capture.captured();
            let head = capture.read_at(0, preview::BYTE_EXCERPT)?;
            let tail_len = preview::EXCERPT_BYTES + 1;
            let tail = capture.read_at(len.saturating_sub(tail_len as u64), tail_len)?;
            let stored = preview::Stored {
                head: &head,
                tail: &tail,
                len,
                newlines: capture.newlines(),
                capped: capture.is_full(),
            };
            let (text, omitted) = preview::render(&stored);
            result.offloaded = true;
            result.truncated = result.capped || lost;
            result.omitted_lines = omitted;
            result.capture_path = Some(capture.path().to_string_lossy().into_owned());
            result.set_output(text);
        }
    }
    Ok(())
}

/// The cap of a kept exec's journal, from its `max_capture_bytes`: at least what a plain exec
/// keeps, at most [`MAX_JOURNAL_BYTES`].
pub fn journal_cap(max_capture_bytes: u64) -> u64 {
    max_capture_bytes.clamp(MIN_INLINE_CAPTURE_BYTES, MAX_JOURNAL_BYTES)
}

/// Bytes of a kept exec's journal read back for its result's output: as much as an inline capture.
pub const KEPT_HEAD_BYTES: u64 = MAX_INLINE_CAPTURE;

/// [`KEPT_HEAD_BYTES`] as a buffer's length.
pub fn kept_head_len() -> usize {
    usize::try_from(KEPT_HEAD_BYTES).unwrap_or(usize::MAX)
}

/// The output of a kept exec's result, for its own connection and for every attacher alike: `head`
/// (the journal's first [`KEPT_HEAD_BYTES`]) within the reply's budget, `truncated` when bytes were
/// past the journal's cap (`stored` of `result.total_bytes`) or past the budget.
pub fn set_kept_output(result: &mut ExecResult, head: Vec<u8>, stored: u64) {
    let cut = result.set_output_within(head, OUTPUT_BUDGET);
    result.truncated = result.total_bytes > stored || cut;
}

/// The size of a kept exec's reply, as [`reply_size`] tells a capture's.
pub fn kept_reply_size(stored: u64) -> usize {
    inline_reply_size(stored.min(KEPT_HEAD_BYTES))
}

/// A new terminal of `size`: its master side and the side the command gets, both close-on-exec
/// from the start (no other command may inherit them), the latter not made agentd's controlling
/// terminal.
fn open_terminal(size: TerminalSize) -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname_r(&master)?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let master = OwnedFd::from(master);
    resize_terminal(master.as_fd(), size)?;
    Ok((master, slave))
}

/// Sets the size of the terminal whose master side is `master`; its foreground process group gets
/// `SIGWINCH` from the kernel.
pub fn resize_terminal(master: std::os::fd::BorrowedFd<'_>, size: TerminalSize) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let winsize = libc::winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one `winsize`, which lives across the call.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &raw const winsize) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Who hears of an exec while it runs (see [`Executor::run`]).
#[derive(Default)]
pub struct Watchers {
    pub spawned: Option<oneshot::Sender<Spawned>>,
    pub started: Option<oneshot::Sender<Pid>>,
    pub live: Option<mpsc::Sender<Vec<u8>>>,
}

async fn feed_stdin(stdin: OwnedFd, bytes: Vec<u8>) {
    let Ok(mut pipe) = tokio::net::unix::pipe::Sender::from_owned_fd(stdin) else {
        return;
    };
    // A command that exits without reading its stdin closes the pipe: not an error.
    let _ = pipe.write_all(&bytes).await;
}
