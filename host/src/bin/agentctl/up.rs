//! `up` and `down`: a local agentd that stays up for later commands, and its end. `down` signals
//! only the session's own agentd (through a pidfd) and ends what it left.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use agentd_host::adapters::local::{
    DefaultProfile, Lifetime, Started, TokenSource, socket_dir, spawn_agentd_passing,
};

use crate::Cli;
use crate::session::{self, SessionFile};

pub fn up(cli: &Cli, workspace: Option<&Path>) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if let Some(session) = session::read()? {
        return Err(format!(
            "a session is already up ({} pid {}); run `agentctl down` first",
            session.url, session.pid
        )
        .into());
    }
    let path = session::path()?;
    let given = match workspace {
        Some(dir) => Some(std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?),
        None => None,
    };
    // Before anything is made: the session's files are never where commands may write.
    let session_dir = session::prepare(&path, given.as_deref())?;
    let (workspace, owns_workspace) = match given {
        Some(dir) => (dir, false),
        None => (tempfile::Builder::new().prefix("agentd-session-").tempdir()?.keep(), true),
    };
    let log_path = path.with_extension("log");
    let log_name = log_path.file_name().ok_or("the session's log has no file name")?;
    let log = session::create_own(&session_dir, log_name, &log_path, true)?;
    // The same default profile as the embedded sandbox: writes only to the workspace and a private tmp.
    let profile = DefaultProfile::create_with(&workspace, &[], &cli.permissions)?;
    let socket_dir = socket_dir()?;
    // Readable by this user only, in a directory only this user can enter.
    let token_file = socket_dir.path().join("token");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&token_file)?
        .write_all(agentd_host::contract::random::random_hex().as_bytes())?;
    let spawned = spawn_agentd_passing(
        &workspace,
        socket_dir.path(),
        Lifetime::Detached { log },
        Some(&profile.file()),
        TokenSource::File(&token_file),
        &cli.pass_env,
    );
    let (tmp, profile_dir) = profile.keep();
    let socket_dir = socket_dir.keep();
    let (_child, Started { url, pid }) = match spawned {
        Ok(spawned) => spawned,
        Err(err) => {
            for dir in [&tmp, &profile_dir, &socket_dir] {
                let _ = std::fs::remove_dir_all(dir);
            }
            return Err(err.into());
        }
    };
    let session = SessionFile {
        url: url.clone(),
        token_file,
        pid,
        workspace: workspace.clone(),
        owns_workspace,
        private_dirs: vec![tmp, profile_dir, socket_dir],
    };
    // No secret in it (the token stays in its own file), but it names this user's sandbox:
    // readable by this user only.
    session::write(&session_dir, &path, &session)?;
    if cli.json {
        println!("{}", serde_json::json!({"url": url, "pid": pid, "workspace": workspace}));
    } else {
        println!("agentd up: {url} (pid {pid}), workspace {}", workspace.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Stops the session's agentd and removes what `up` made. What it acts on comes from a session
/// file [`session::read`] trusts, and the pid is signalled only while it is that session's agentd.
pub fn down() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let path = session::path()?;
    let Some(session) = session::read()? else {
        eprintln!("agentctl: no session is up");
        return Ok(ExitCode::SUCCESS);
    };
    // The recorded pid is a number: once that agentd has ended, another process may have it.
    // Only the process that serves the session's socket is signalled, through a pidfd.
    let agentd = SessionAgentd::open(&session);
    if let Some(agentd) = &agentd {
        agentd.signal(nix::sys::signal::Signal::SIGTERM);
    }
    // Until its last thread has ended: its first one reads as a zombie while the others still end.
    let alive = || agentd.as_ref().is_some_and(SessionAgentd::alive);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(agentd) = agentd.as_ref().filter(|_| alive()) {
        agentd.signal(nix::sys::signal::Signal::SIGKILL);
        // agentd did not finish its own cleaning (a storm starved it): end what it started here.
        let left = end_tagged(session.pid);
        if left > 0 {
            eprintln!("agentctl: {left} processes of agentd (pid {}) could not be ended", session.pid);
        }
    }
    if session.owns_workspace {
        let _ = std::fs::remove_dir_all(&session.workspace);
    }
    for dir in &session.private_dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    session::remove(&path)?;
    println!("agentd down (pid {})", session.pid);
    Ok(ExitCode::SUCCESS)
}

/// The session's agentd, held by a pidfd: signals reach it, never a process that took its number.
struct SessionAgentd {
    pid: i32,
    fd: std::os::fd::OwnedFd,
}

impl SessionAgentd {
    /// The process with the session's pid, if it is the agentd serving the session's socket
    /// (`--unix PATH` on its command line, read once the pidfd holds the process).
    fn open(session: &SessionFile) -> Option<Self> {
        use std::os::fd::FromRawFd as _;
        let pid = i32::try_from(session.pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: a descriptor the kernel just returned, owned here alone.
        let held = Self { pid, fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) } };
        let socket = session.url.strip_prefix("unix:")?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let serves = cmdline.split(|b| *b == 0).any(|arg| arg == socket.as_bytes());
        // Read after the pidfd was opened: if the process it holds is still there, the command
        // line was its own.
        (serves && held.alive()).then_some(held)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        self.send(signal as libc::c_int);
    }

    /// Some thread of it has not ended (its first one reads as a zombie while others still end).
    fn alive(&self) -> bool {
        // Signal 0 only asks whether the held process is there.
        self.send(0) && live_threads(self.pid).is_some()
    }

    fn send(&self, signal: libc::c_int) -> bool {
        use std::os::fd::AsRawFd as _;
        // SAFETY: pidfd_send_signal reads a descriptor we own, a signal number, and no siginfo
        // (null) with no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        rc == 0
    }
}

/// Stops, then SIGKILLs, every process carrying the exec tag of the agentd `agentd`
/// (`AGENTD_EXEC_TAG=<pid>.<seq>`, which every process of its commands inherits), as agentd's own
/// shutdown does: stopped processes cannot fork, so a fork bomb cannot replace what is killed.
/// Returns how many were left after the rounds.
fn end_tagged(agentd: u32) -> usize {
    use nix::sys::signal::{Signal, kill};
    let prefix = format!("AGENTD_EXEC_TAG={agentd}.").into_bytes();
    // (pid, stopped) of every live process with the tag.
    let scan = || -> Vec<(i32, bool)> {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(|pid| {
                let live = live_threads(pid)?;
                let tagged =
                    environ(pid, live.first_ended).split(|b| *b == 0).any(|var| var.starts_with(&prefix));
                tagged.then_some((pid, live.stopped))
            })
            .collect()
    };
    for _ in 0..200 {
        let found = scan();
        if found.iter().all(|(_, stopped)| *stopped) {
            break;
        }
        for (pid, _) in found {
            let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGSTOP);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..200 {
        let found = scan();
        if found.is_empty() {
            return 0;
        }
        for (pid, _) in found {
            let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    scan().len()
}

/// A process with a thread that has not ended.
struct Live {
    /// Every such thread is stopped (it cannot fork until continued).
    stopped: bool,
    /// The first thread has ended (it reads as a zombie) while others have not: they ended alone
    /// (the `exit` system call ends one thread), or are still ending.
    first_ended: bool,
}

/// Process `pid` if any of its threads has not ended. Its first thread reads as a zombie once it
/// has ended, while the others may run on: only they tell.
fn live_threads(pid: i32) -> Option<Live> {
    let state = |stat: &Path| -> Option<char> {
        let stat = std::fs::read_to_string(stat).ok()?;
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    };
    let live = |state: char| (state != 'Z' && state != 'X').then_some(state == 'T' || state == 't');
    match state(Path::new(&format!("/proc/{pid}/stat")))? {
        'Z' => {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
            let mut threads = tasks.flatten().filter_map(|task| live(state(&task.path().join("stat"))?));
            let first = threads.next()?;
            Some(Live { stopped: threads.fold(first, |all, stopped| all && stopped), first_ended: true })
        }
        other => live(other).map(|stopped| Live { stopped, first_ended: false }),
    }
}

/// The environment of process `pid`. With `first_ended` it is read through the other threads (it
/// is read through the first one's memory, so `/proc/<pid>/environ` reads empty then).
fn environ(pid: i32, first_ended: bool) -> Vec<u8> {
    let first = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    if !first_ended || !first.is_empty() {
        return first;
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|task| std::fs::read(task.path().join("environ")).ok().filter(|e| !e.is_empty()))
        .unwrap_or_default()
}
