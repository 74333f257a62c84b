//! agentctl as a child process, as the tests that bound it run it: isolated from the machine's
//! providers ([`agentctl`], then [`with_daytona`] / [`with_modal`] for a fake; [`agentctl_in`] with a
//! given session file and no sandbox from the environment), run to its end with
//! its own peak RSS measured ([`run`]: `wait4`'s rusage of that very child, so other children of the
//! test process do not count).

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentd_fakes::fake_daytona::FakeDaytona;
use agentd_fakes::fake_modal::FakeModal;

use crate::binaries::binary;

/// agentctl with no provider configured but the ones a test adds, and a Docker engine that is
/// not there (so no test here touches real containers).
pub fn agentctl(state: &tempfile::TempDir) -> Command {
    let mut command = Command::new(binary("agentctl"));
    command
        .env("AGENTCTL_SESSION", state.path().join("session.json"))
        .env("DOCKER_HOST", format!("unix://{}", state.path().join("no-docker.sock").display()))
        .env("MODAL_CONFIG_PATH", state.path().join("no-modal.toml"))
        .env("HOME", state.path());
    for variable in [
        "AGENTD_URL",
        "AGENTD_TOKEN",
        "DAYTONA_API_KEY",
        "DAYTONA_API_URL",
        "DAYTONA_TARGET",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "MODAL_SERVER_URL",
        "MODAL_ENVIRONMENT",
    ] {
        command.env_remove(variable);
    }
    command
}

/// `agentctl` with the session file `session`, and no sandbox named by the environment.
pub fn agentctl_in(session: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(binary("agentctl"));
    command
        .env("AGENTCTL_SESSION", session)
        .env_remove("AGENTD_URL")
        .env_remove("AGENTD_TOKEN")
        .env_remove("DAYTONA_API_KEY");
    command
}

pub fn with_daytona(command: &mut Command, fake: &FakeDaytona) {
    command.env("DAYTONA_API_URL", fake.api_url()).env("DAYTONA_API_KEY", fake.api_key());
}

pub fn with_modal(command: &mut Command, fake: &FakeModal) {
    command.envs(fake.env());
}

/// How a run went: its exit code, output, peak RSS (KiB, from `wait4`'s rusage of
/// this very child) and wall time.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub max_rss_kib: i64,
    pub elapsed: Duration,
}

/// Runs `command` to its end (killed after `deadline`), measuring its peak RSS. The child is
/// reaped by `wait4` (for its own rusage), not by `Child::wait`.
#[expect(clippy::zombie_processes, reason = "the child is reaped by `wait4`, which `Child` cannot do")]
pub fn run(command: &mut Command, deadline: Duration) -> Run {
    let started = Instant::now();
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            while started.elapsed() < deadline {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // Not reaped yet (`done` is set only after wait4), so the pid is still this child's.
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        })
    };
    let mut status = 0;
    // SAFETY: rusage is a plain C struct of integers, valid when zeroed.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not waited for by anyone else (`child.wait` is never
    // called); `status` and `usage` are valid for writes for the call's duration.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let _ = watchdog.join();
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    Run {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stdout: text(stdout.join().unwrap()),
        stderr: text(stderr.join().unwrap()),
        max_rss_kib: usage.ru_maxrss,
        elapsed: started.elapsed(),
    }
}
