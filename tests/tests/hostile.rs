//! The host against an agentd that lies ([`agentd_fakes::evil_agentd`]): code in a sandbox can put
//! its own server where agentd was. Each test is one misbehaviour, through the Rust API and through
//! `agentctl`: every wait ends at its documented deadline (set small here), the error says what was
//! waited for or what was wrong, memory stays bounded and no file is left behind.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentd_fakes::evil_agentd::{Evil, EvilAgentd, HUNG};
use agentd_host::contract::link::Link;
use agentd_host::{AgentdSandbox, BaseSandbox as _, Deadlines, SandboxError};
use agentd_protocol::{ExecRequest, FsRequest};
use agentd_tests::binary;

/// Deadlines of one to two seconds: long enough for loopback, short enough for a test.
fn tight() -> Deadlines {
    Deadlines {
        connect: Duration::from_secs(1),
        exec_margin: Duration::from_secs(1),
        silence: Duration::from_secs(2),
    }
}

/// `call`, which must end (the test fails rather than hangs) within [`HUNG`]; with its time. The
/// bounds on that time leave a few seconds for a loaded machine: what tells an answer "at once"
/// from one at a deadline is the error itself (a protocol error, not a timeout).
async fn timed<T>(call: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = tokio::time::timeout(HUNG, call).await.expect("the client hung on a lying agentd");
    (out, started.elapsed())
}

async fn link_to(evil: &EvilAgentd) -> Link {
    Link::connect_within(&evil.url(), None, &[], tight()).await.unwrap()
}

fn exec(command: &str, timeout: f64) -> ExecRequest {
    ExecRequest { command: command.to_owned(), timeout: Some(timeout), ..ExecRequest::default() }
}

fn ls_root() -> FsRequest {
    serde_json::from_value(serde_json::json!({"verb": "ls", "path": "/"})).unwrap()
}

fn assert_timeout(err: SandboxError, waited_for: &str, after: Duration) {
    match &err {
        SandboxError::Timeout { what, after: deadline } => {
            assert!(what.contains(waited_for), "{err}");
            assert_eq!(*deadline, after, "{err}");
        }
        other => panic!("expected a timeout about {waited_for}, got {other}"),
    }
}

#[tokio::test]
async fn a_server_that_never_upgrades_or_never_says_hello_fails_the_connect_at_its_deadline() {
    for evil in [Evil::NoUpgrade, Evil::NoHello] {
        let server = EvilAgentd::start(evil).unwrap();
        let (result, took) = timed(Link::connect_within(&server.url(), None, &[], tight())).await;
        assert_timeout(result.err().unwrap(), "connecting to agentd", Duration::from_secs(1));
        assert!(took < Duration::from_secs(6), "{evil:?}: {took:?}");
        let (result, _) = timed(AgentdSandbox::connect_within(&server.url(), None, tight())).await;
        assert!(matches!(result, Err(SandboxError::Timeout { .. })), "{evil:?}");
    }
}

#[tokio::test]
async fn a_server_that_never_answers_fails_each_request_at_its_deadline() {
    let server = EvilAgentd::start(Evil::Mute).unwrap();
    let link = link_to(&server).await;

    // An exec waits its own timeout plus the margin: 1 s + 1 s.
    let (result, took) = timed(link.exec(exec("true", 1.0), None)).await;
    assert_timeout(result.unwrap_err(), "exec", Duration::from_secs(2));
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(7), "{took:?}");

    // A verb, an upload's reply, a download's first part: the silence deadline.
    let (result, _) = timed(link.fs(ls_root())).await;
    assert_timeout(result.unwrap_err(), "file verb", Duration::from_secs(2));
    let (result, _) = timed(link.upload("/x", &b"data"[..], |_| {})).await;
    assert_timeout(result.unwrap_err(), "upload", Duration::from_secs(2));
    let (result, _) = timed(link.download("/x", tokio::io::sink(), |_, _| {})).await;
    assert_timeout(result.unwrap_err(), "download", Duration::from_secs(2));

    // Through the contract too, with the deadlines of the sandbox's link.
    let sandbox = AgentdSandbox::connect_within(&server.url(), None, tight()).await.unwrap();
    let (result, took) = timed(sandbox.execute("true", Some(Duration::from_secs(1)))).await;
    assert!(matches!(result, Err(SandboxError::Timeout { .. })) && took < Duration::from_secs(7), "{took:?}");
    let (result, _) = timed(sandbox.ls("/")).await;
    assert!(matches!(result, Err(SandboxError::Timeout { .. })), "{result:?}");
}

#[tokio::test]
async fn replies_that_break_the_protocol_fail_their_request_at_once() {
    // A reply of no known type, with the request's id: that request fails, now, not at a deadline.
    let server = EvilAgentd::start(Evil::Garbage).unwrap();
    let link = link_to(&server).await;
    let (result, took) = timed(link.fs(ls_root())).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("unreadable") && took < Duration::from_secs(10), "{err} after {took:?}");
    let (result, _) = timed(link.exec(exec("true", 30.0), None)).await;
    assert!(matches!(result, Err(SandboxError::Protocol(_))), "{result:?}");

    // A chunk larger than agentd ever sends fails the request it names.
    let server = EvilAgentd::start(Evil::HugeChunk).unwrap();
    let link = link_to(&server).await;
    let (result, took) = timed(link.exec(exec("true", 30.0), None)).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("chunk of 8388616 bytes") && took < Duration::from_secs(10), "{err} after {took:?}");

    // A message larger than any reply closes the link: every request learns it at once.
    let server = EvilAgentd::start(Evil::HugeText).unwrap();
    let link = link_to(&server).await;
    let (result, took) = timed(link.fs(ls_root())).await;
    assert!(matches!(result, Err(SandboxError::LinkClosed)) && took < Duration::from_secs(10), "{result:?}");
    assert!(link.is_closed());

    // Two results for one exec and one for an id never asked: the first counts, the rest are
    // dropped, and the link goes on serving.
    let server = EvilAgentd::start(Evil::DoubleReply).unwrap();
    let link = link_to(&server).await;
    for _ in 0..3 {
        let (result, _) = timed(link.exec(exec("true", 30.0), None)).await;
        assert_eq!(result.unwrap().output.as_deref(), Some("answer 1\n"));
    }
}

#[tokio::test]
async fn a_download_stops_at_its_announced_size() {
    // Announced as 10 bytes, streamed without end: an error at byte 10, not a full disk.
    let server = EvilAgentd::start(Evil::EndlessDownload).unwrap();
    let link = link_to(&server).await;
    let mut written = Vec::new();
    let (result, _) = timed(link.download("/x", &mut written, |_, _| {})).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("more of /x than the 10 bytes it announced"), "{err}");
    assert!(written.is_empty(), "nothing of a chunk past the size is written: {}", written.len());

    // Data before the size: an error before anything is written.
    let server = EvilAgentd::start(Evil::ChunkFirst).unwrap();
    let link = link_to(&server).await;
    let mut written = Vec::new();
    let (result, _) = timed(link.download("/x", &mut written, |_, _| {})).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("before announcing its size") && written.is_empty(), "{err}");

    // `download_files` holds whole files in memory: a 2 GiB one is `file_too_large`, at once.
    let server = EvilAgentd::start(Evil::HugeDownload).unwrap();
    let sandbox = AgentdSandbox::connect_within(&server.url(), None, tight()).await.unwrap();
    let (result, took) = timed(sandbox.download_files(&["/x".to_owned()])).await;
    let response = result.unwrap().pop().unwrap();
    assert_eq!((response.content, response.error.as_deref()), (None, Some("file_too_large")));
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// What a finished `agentctl` run left: its status, its output and its peak resident memory.
struct Ran {
    status: std::process::ExitStatus,
    stderr: String,
    peak_kib: i64,
    took: Duration,
}

/// Runs agentctl with `args` against `url`, with `env` set; waits at most [`HUNG`], then kills it.
fn agentctl(url: &str, env: &[(&str, &str)], args: &[&str]) -> Ran {
    agentctl_within(HUNG, url, env, args)
}

/// [`agentctl`] that may take up to `limit`.
fn agentctl_within(limit: Duration, url: &str, env: &[(&str, &str)], args: &[&str]) -> Ran {
    let mut command = Command::new(binary("agentctl"));
    command
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("AGENTD_TOKEN")
        .env_remove("AGENTD_CONNECT_DEADLINE")
        .env_remove("AGENTD_EXEC_MARGIN")
        .env_remove("AGENTD_SILENCE_DEADLINE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    #[expect(clippy::zombie_processes, reason = "reaped by wait4 below, which std's `Child` cannot do")]
    let mut child = command.spawn().unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(&mut stderr).unwrap());
    let killer = std::thread::spawn(move || {
        std::thread::sleep(limit);
        // Only if still unreaped (the test then fails on the time it took).
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    });
    drop(killer);
    // wait4 for the child's own peak RSS (ru_maxrss, KiB), not every child's of this process.
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `pid` is our unreaped child; both pointers are valid for the call.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
    assert_eq!(reaped, pid, "wait4");
    // SAFETY: wait4 filled it in.
    let usage = unsafe { usage.assume_init() };
    let took = started.elapsed();
    assert!(took < limit, "agentctl {args:?} hung");
    Ran {
        status: std::process::ExitStatus::from_raw(status),
        stderr: err.join().unwrap(),
        peak_kib: usage.ru_maxrss,
        took,
    }
}

/// agentctl failed (125) saying it waited for `what` for `after`, a few seconds past that at most.
fn assert_gave_up(ran: &Ran, what: &str, after: &str) {
    assert_eq!(ran.status.code(), Some(125), "{}", ran.stderr);
    assert!(ran.stderr.contains(what), "{}", ran.stderr);
    assert!(ran.stderr.contains(&format!("no answer within {after}")), "{}", ran.stderr);
    assert!(ran.took < Duration::from_secs(9), "{:?}: {}", ran.took, ran.stderr);
}

#[test]
fn agentctl_gives_up_on_a_silent_server_at_the_deadlines_it_was_given() {
    // By variable and by flag.
    let server = EvilAgentd::start(Evil::NoHello).unwrap();
    let ran = agentctl(&server.url(), &[("AGENTD_CONNECT_DEADLINE", "1")], &["exec", "--", "true"]);
    assert_gave_up(&ran, "connecting to agentd", "1s");
    let server = EvilAgentd::start(Evil::NoUpgrade).unwrap();
    let ran = agentctl(&server.url(), &[], &["--connect-deadline", "1", "ls", "/"]);
    assert_gave_up(&ran, "connecting to agentd", "1s");

    let server = EvilAgentd::start(Evil::Mute).unwrap();
    let ran =
        agentctl(&server.url(), &[("AGENTD_EXEC_MARGIN", "1")], &["exec", "--timeout", "1", "--", "true"]);
    assert_gave_up(&ran, "the result of an exec", "2s");
    let ran = agentctl(&server.url(), &[], &["--silence-deadline", "1", "ls", "/"]);
    assert_gave_up(&ran, "the reply to a file verb", "1s");

    // A deadline that is not a number of seconds is refused before anything is tried.
    let ran = agentctl(&server.url(), &[("AGENTD_SILENCE_DEADLINE", "soon")], &["ls", "/"]);
    assert_eq!(ran.status.code(), Some(2));
    assert!(ran.stderr.contains("'soon' for '--silence-deadline"), "{}", ran.stderr);
}

#[test]
fn agentctl_download_of_a_lying_server_leaves_no_file() {
    for (evil, says) in [
        (Evil::EndlessDownload, "than the 10 bytes it announced"),
        (Evil::ChunkFirst, "before announcing its size"),
        (Evil::Mute, "no answer within 1s"),
    ] {
        let server = EvilAgentd::start(evil).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let ran = agentctl(
            &server.url(),
            &[("AGENTD_SILENCE_DEADLINE", "1")],
            &["download", "/x", target.to_str().unwrap()],
        );
        assert_eq!(ran.status.code(), Some(125), "{evil:?}: {}", ran.stderr);
        assert!(ran.stderr.contains(says), "{evil:?}: {}", ran.stderr);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{evil:?} left {left:?}");
    }
}

#[test]
fn agentctl_downloads_a_2_gib_answer_in_bounded_memory_and_keeps_nothing_of_a_bad_one() {
    // 2 GiB, streamed to the file as it comes; the lying server's digest is wrong, so the file
    // is refused at the end and nothing stays.
    let server = EvilAgentd::start(Evil::HugeDownload).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out");
    // Loopback moves 2 GiB in seconds; a debug build on a busy machine may take minutes.
    let limit = Duration::from_secs(600);
    let ran = agentctl_within(limit, &server.url(), &[], &["download", "/x", target.to_str().unwrap()]);
    assert_eq!(ran.status.code(), Some(125), "{}", ran.stderr);
    assert!(ran.stderr.contains("sha256 mismatch"), "{}", ran.stderr);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left {left:?}");
    println!("agentctl download of 2 GiB: peak RSS {} MiB, {:?}", ran.peak_kib / 1024, ran.took);
    assert!(ran.peak_kib < 128 * 1024, "peak RSS {} KiB", ran.peak_kib);
}

#[test]
fn agentctl_killed_mid_download_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out");
    // A 2 GiB download that is killed part-way: the partial file has no name to leave behind.
    let server_huge = EvilAgentd::start(Evil::HugeDownload).unwrap();
    let mut child = Command::new(binary("agentctl"))
        .args(["--url", &server_huge.url(), "download", "/x", target.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "still downloading when killed");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left {left:?}");
}
