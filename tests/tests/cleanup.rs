//! What agentctl creates for one command, it removes: on SIGTERM and SIGINT of agentctl too, while
//! the command runs and while agentd in the container never answers (issue 27). Each Docker test
//! drives agentctl on a private tag of `agentd-busybox` (built by `images/build.sh`), so the
//! containers made from it are the test's alone; they and the tag are removed when the test ends,
//! passed or failed. Without the engine or the image the Docker tests skip ([`agentd_tests::skip`];
//! a failure under `AGENTD_REQUIRE_DOCKER`).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::io::BufRead as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use agentd_tests::binary;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const BUSYBOX: &str = "agentd-busybox:latest";
const BUSYBOX_BASE: &str = "agentd-base-busybox:latest";
/// The command each test stops agentctl in the middle of.
const LONG: &str = "sleep 300";
/// How long agentctl may take to exit after a signal when the removal is quick (a container whose
/// agentd ends on SIGTERM): measured well under a second.
const QUICK: Duration = Duration::from_secs(15);
/// The same when the container ignores SIGTERM (Docker's 5 s stop grace, then SIGKILL): agentctl's
/// own bound for the removal is 30 s.
const HOSTILE: Duration = Duration::from_secs(35);

/// agentctl with no session, no URL and no provider keys in its environment, its stderr piped.
fn agentctl(state: &std::path::Path, args: &[&str]) -> Child {
    Command::new(binary("agentctl"))
        .env("AGENTCTL_SESSION", state.join("session.json"))
        .env_remove("AGENTD_URL")
        .env_remove("AGENTD_TOKEN")
        .env_remove("DAYTONA_API_KEY")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The lines agentctl writes to stderr, as they come.
fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.stderr.take().unwrap();
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = send.send(line);
        }
    });
    lines
}

/// Sends `signal` to `child` and waits up to `within` for it to exit: its status and how long it took.
fn signal_and_wait(child: &mut Child, signal: Signal, within: Duration) -> (ExitStatus, Duration) {
    let sent = Instant::now();
    kill(agentd_tests::nix_pid(child.id()), signal).unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, sent.elapsed());
        }
        if sent.elapsed() > within {
            let _ = child.kill();
            panic!("agentctl did not exit within {within:?} of {signal}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits up to `within` for `check` to give a value.
fn until<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "no {what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A private tag of an image for one test. Dropping it removes every container made from it and
/// the tag (the image itself stays under its own name).
struct Tag(String);

impl Tag {
    /// `image` under a new name.
    fn of(image: &str) -> Self {
        let tag = Self(format!("agentd-test-cleanup-{}:latest", agentd_fakes::random_hex(6)));
        docker(&["tag", image, &tag.0]);
        tag
    }

    /// `image` with agentd replaced by a process that never answers and ignores SIGTERM (`sleep`
    /// as PID 1): its published port accepts connections and then drops them. The entrypoint is
    /// still a program named agentd, so the adapter takes it for baked and injects nothing.
    fn mute(image: &str) -> Self {
        let tag = Self(format!("agentd-test-cleanup-mute-{}:latest", agentd_fakes::random_hex(6)));
        let mut build = Command::new("docker")
            .args(["build", "-q", "-t", &tag.0, "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let dockerfile =
            format!("FROM {image}\nRUN printf '#!/bin/sh\\nexec /bin/sleep 300\\n' >/usr/local/bin/agentd\n");
        std::io::Write::write_all(&mut build.stdin.take().unwrap(), dockerfile.as_bytes()).unwrap();
        let out = build.wait_with_output().unwrap();
        assert!(out.status.success(), "docker build: {}", String::from_utf8_lossy(&out.stderr));
        tag
    }

    fn spec(&self) -> String {
        format!("docker:{}", self.0)
    }

    /// The containers (running or not) agentd made from this tag.
    fn containers(&self) -> Vec<String> {
        let label = format!("label={}", agentd_host::adapters::docker::LABEL);
        docker(&["ps", "-a", "--no-trunc", "--filter", &label, "--format", "{{.ID}} {{.Image}}"])
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(_, image)| *image == self.0)
            .map(|(id, _)| id.to_owned())
            .collect()
    }

    /// The one container made from this tag, once it exists.
    fn container(&self) -> String {
        until(Duration::from_secs(30), "container", || self.containers().pop())
    }
}

impl Drop for Tag {
    fn drop(&mut self) {
        for container in self.containers() {
            drop(agentd_tests::RemoveOnDrop(container));
        }
        let _ = Command::new("docker")
            .args(["rmi", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether `container` runs a process with exactly the command line `command` (the last column of
/// `docker top`).
fn runs(container: &str, command: &str) -> bool {
    let Ok(out) = Command::new("docker").args(["top", container]).output() else {
        return false;
    };
    let suffix = format!(" {command}");
    String::from_utf8_lossy(&out.stdout).lines().any(|line| line.trim_end().ends_with(&suffix))
}

/// agentctl on a fresh container running [`LONG`], stopped by `signal`: it exits with 128 + the
/// signal's number, quickly, and the container is gone.
fn signal_during_exec(signal: Signal) {
    let state = tempfile::tempdir().unwrap();
    let tag = Tag::of(BUSYBOX);
    let mut child = agentctl(state.path(), &["--sandbox", &tag.spec(), "exec", "--", LONG]);
    let stderr = stderr_lines(&mut child);
    let container = tag.container();
    until(Duration::from_secs(30), "command in the container", || runs(&container, LONG).then_some(()));
    let (status, took) = signal_and_wait(&mut child, signal, QUICK);
    let said: Vec<String> = stderr.try_iter().collect();
    assert_eq!(status.code(), Some(128 + signal as i32), "{said:?}");
    assert_eq!(tag.containers(), Vec::<String>::new(), "the container outlived agentctl");
    assert!(said.iter().any(|line| line.contains(&container)), "{said:?} names {container}");
    eprintln!("{signal}: agentctl exited {:?} in {took:?}, container removed", status.code());
}

#[tokio::test]
async fn sigterm_during_exec_removes_the_container() {
    if agentd_tests::docker_available(BUSYBOX).await {
        signal_during_exec(Signal::SIGTERM);
    }
}

#[tokio::test]
async fn sigint_during_exec_removes_the_container() {
    if agentd_tests::docker_available(BUSYBOX).await {
        signal_during_exec(Signal::SIGINT);
    }
}

/// A container whose agentd never answers: agentctl is still waiting for it when SIGTERM comes.
/// The half-made container is removed all the same (past Docker's stop grace: `sleep` ignores
/// SIGTERM), and agentctl exits 143.
#[tokio::test]
async fn sigterm_while_agentd_never_answers_removes_the_container() {
    if !agentd_tests::docker_available(BUSYBOX).await {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let tag = Tag::mute(BUSYBOX);
    let mut child = agentctl(state.path(), &["--sandbox", &tag.spec(), "exec", "--", "true"]);
    let stderr = stderr_lines(&mut child);
    let container = tag.container();
    // agentctl keeps knocking on the port: give it a moment of it.
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().unwrap().is_none(), "agentctl gave up on its own");
    let (status, took) = signal_and_wait(&mut child, Signal::SIGTERM, HOSTILE);
    let said: Vec<String> = stderr.try_iter().collect();
    assert_eq!(status.code(), Some(143), "{said:?}");
    assert_eq!(tag.containers(), Vec::<String>::new(), "{container} outlived agentctl");
    eprintln!("mute agentd: agentctl exited 143 in {took:?}, container removed");
}

/// The same when the creation fails by itself (agentd did not answer within the adapter's 20 s):
/// agentctl exits 125 with the reason, and the container is gone.
#[tokio::test]
async fn a_failed_creation_leaves_no_container() {
    if !agentd_tests::docker_available(BUSYBOX).await {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let tag = Tag::mute(BUSYBOX);
    let started = Instant::now();
    let child = agentctl(state.path(), &["--sandbox", &tag.spec(), "exec", "--", "true"]);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("did not answer"), "{stderr}");
    assert_eq!(tag.containers(), Vec::<String>::new(), "the container outlived agentctl");
    eprintln!("failed creation: agentctl exited 125 in {:?}, container removed", started.elapsed());
}

/// agentd is stopped (SIGSTOP from the host) while the command runs, so nothing more comes over the
/// link: SIGTERM still removes the container (Docker's SIGKILL ends a stopped process).
#[tokio::test]
async fn sigterm_while_agentd_is_stopped_removes_the_container() {
    if !agentd_tests::docker_available(BUSYBOX).await {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let tag = Tag::of(BUSYBOX);
    let mut child = agentctl(state.path(), &["--sandbox", &tag.spec(), "exec", "--", LONG]);
    let stderr = stderr_lines(&mut child);
    let container = tag.container();
    until(Duration::from_secs(30), "command in the container", || runs(&container, LONG).then_some(()));
    stop_agentd(&container);
    let (status, took) = signal_and_wait(&mut child, Signal::SIGTERM, HOSTILE);
    let said: Vec<String> = stderr.try_iter().collect();
    assert_eq!(status.code(), Some(143), "{said:?}");
    assert_eq!(tag.containers(), Vec::<String>::new(), "{container} outlived agentctl");
    eprintln!("stopped agentd: agentctl exited 143 in {took:?}, container removed");
}

/// SIGSTOP to the container's PID 1 (agentd), from the host (a signal from inside the container's
/// pid namespace would not reach its init).
fn stop_agentd(container: &str) {
    let pid: i32 = docker(&["inspect", "-f", "{{.State.Pid}}", container]).parse().unwrap();
    kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
}

/// A second signal while the removal is under way ends agentctl at once (125: something may be
/// left), naming the container.
#[tokio::test]
async fn a_second_signal_exits_at_once_naming_the_container() {
    if !agentd_tests::docker_available(BUSYBOX).await {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let tag = Tag::of(BUSYBOX);
    let mut child = agentctl(state.path(), &["--sandbox", &tag.spec(), "exec", "--", LONG]);
    let stderr = stderr_lines(&mut child);
    let container = tag.container();
    until(Duration::from_secs(30), "command in the container", || runs(&container, LONG).then_some(()));
    // A stopped agentd makes the removal last Docker's 5 s stop grace: time for the second signal.
    stop_agentd(&container);
    kill(agentd_tests::nix_pid(child.id()), Signal::SIGTERM).unwrap();
    let removing = stderr.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(removing.contains("SIGTERM: removing docker:"), "{removing}");
    let (status, took) = signal_and_wait(&mut child, Signal::SIGINT, Duration::from_secs(2));
    let said: Vec<String> = stderr.try_iter().collect();
    assert_eq!(status.code(), Some(125), "{said:?}");
    assert!(
        said.iter().any(|line| line.contains("SIGINT during the removal") && line.contains(&container)),
        "{said:?}"
    );
    eprintln!("second signal: agentctl exited 125 in {took:?}");
}

/// A container agentctl attached to (`docker-attach:ID`) outlives it: SIGTERM ends agentctl (143)
/// and leaves the container running.
#[tokio::test]
async fn sigterm_leaves_an_attached_container_running() {
    if !agentd_tests::docker_available(BUSYBOX_BASE).await {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let container = agentd_tests::RemoveOnDrop(agentd_tests::plain_container(BUSYBOX_BASE, &[]));
    let spec = format!("docker-attach:{}", container.0);
    let mut child = agentctl(state.path(), &["--sandbox", &spec, "exec", "--", LONG]);
    until(Duration::from_secs(30), "command in the container", || runs(&container.0, LONG).then_some(()));
    let (status, took) = signal_and_wait(&mut child, Signal::SIGTERM, QUICK);
    assert_eq!(status.code(), Some(143));
    assert_eq!(docker(&["inspect", "-f", "{{.State.Status}}", &container.0]), "running");
    eprintln!("attached: agentctl exited 143 in {took:?}, container left running");
}

/// A private local agentd (`--sandbox local`, and the default without a session) is stopped and
/// its directories removed when agentctl gets SIGTERM: nothing of it is left in `$TMPDIR`.
#[test]
fn sigterm_stops_a_local_agentd_and_removes_its_workspace() {
    for sandbox in [&["--sandbox", "local"][..], &[]] {
        let state = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let args = [sandbox, &["exec", "--", LONG]].concat();
        let mut command = Command::new(binary("agentctl"));
        command
            .env("AGENTCTL_SESSION", state.path().join("session.json"))
            .env("TMPDIR", tmp.path())
            .env_remove("AGENTD_URL")
            .env_remove("AGENTD_TOKEN")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stderr = stderr_lines(&mut child);
        let agentd = until(Duration::from_secs(30), "agentd running the command", || {
            let below = agentd_tests::descendants(child.id());
            below
                .iter()
                .any(|(_, cmdline)| cmdline.ends_with(LONG))
                .then(|| below.iter().find(|(_, cmdline)| cmdline.contains("agentd")).map(|(pid, _)| *pid))?
        });
        let (status, took) = signal_and_wait(&mut child, Signal::SIGTERM, QUICK);
        let said: Vec<String> = stderr.try_iter().collect();
        assert_eq!(status.code(), Some(143), "{args:?}: {said:?}");
        let stat = std::fs::read_to_string(format!("/proc/{agentd}/stat")).unwrap_or_default();
        assert!(stat.is_empty() || stat.contains(") Z"), "{args:?}: agentd {agentd} outlived agentctl");
        // `agentd-temps-<uid>` is shared by every agentd of the user and kept on purpose (it records
        // temp files for the next agentd's sweep).
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with("agentd-temps-"))
            .collect();
        assert!(left.is_empty(), "{args:?}: left in $TMPDIR: {left:?}");
        eprintln!("{args:?}: agentctl exited 143 in {took:?}, agentd and its directories gone");
    }
}
