//! Sandbox profiles: real commands under real profiles, and the kernel saying no.
//!
//! These need landlock (ABI ≥ 4 for the network rules). On a kernel without it each test prints one
//! `skipped:` line and returns ([`agentd_tests::skip`]), unless `AGENTD_REQUIRE_LANDLOCK=1` (set by `.ci/run`)
//! makes that a failure.
//! The probes the shell cannot make (sockets of every kind, io_uring, x32 system calls, open by
//! handle, nested landlock) are python3 scripts; without python3 those tests skip the same way
//! (`AGENTD_REQUIRE_PYTHON3`).

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use agentd_host::{AgentdSandbox, SandboxError};
use agentd_protocol::profile::{Level, Limits, Network, ProfileOverride};
use agentd_protocol::{ErrorCode, ExecRequest, ExecResult};
use agentd_tests::{Daemon, Need, profiled, skip};

async fn run(sandbox: &AgentdSandbox, command: &str) -> ExecResult {
    run_with(
        sandbox,
        ExecRequest { command: command.to_owned(), timeout: Some(20.0), ..ExecRequest::default() },
    )
    .await
}

async fn run_with(sandbox: &AgentdSandbox, request: ExecRequest) -> ExecResult {
    sandbox.exec(request, None).await.unwrap()
}

fn workspace(daemon: &Daemon) -> &Path {
    daemon.workspace.path()
}

const WRITE_ONLY_WORKSPACE: &str = r#"
name = "workspace-only"
writable_roots = ["{W}"]
"#;

#[tokio::test]
async fn writes_outside_the_writable_roots_are_denied_by_the_kernel() {
    let Some((daemon, sb, _dir)) = profiled(WRITE_ONLY_WORKSPACE, &[]).await else { return };
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escape.txt");
    let r = run(&sb, &format!("echo in > inside.txt && echo ok; echo out > {}", target.display())).await;
    let output = r.output.clone().unwrap();
    assert!(output.starts_with("ok\n"), "{output}");
    assert!(output.contains("Permission denied"), "{output}");
    assert_ne!(r.exit_code, 0);
    assert_eq!(std::fs::read_to_string(workspace(&daemon).join("inside.txt")).unwrap(), "in\n");
    assert!(!target.exists());
    let enforcement = r.enforcement.unwrap();
    assert_eq!((enforcement.filesystem, enforcement.level), (Level::Full, Level::Full));
    // The hello says what the profile can enforce here.
    let hello = sb.link().await.unwrap().hello().clone();
    assert_eq!(hello.profile.map(|p| (p.profile, p.level)), Some(("workspace-only".to_owned(), Level::Full)));
}

#[tokio::test]
async fn reads_outside_the_readable_roots_are_denied() {
    let secret_dir = tempfile::tempdir().unwrap();
    std::fs::write(secret_dir.path().join("secret"), "s3cret").unwrap();
    let profile = r#"
name = "narrow-read"
readable_roots = ["/bin", "/usr", "/lib", "/lib64", "/etc", "/dev", "/proc"]
writable_roots = ["{W}"]
"#;
    let Some((_daemon, sb, _dir)) = profiled(profile, &[]).await else { return };
    let r = run(
        &sb,
        &format!("cat {}/secret; echo rc=$?; echo mine > own && cat own", secret_dir.path().display()),
    )
    .await;
    let output = r.output.unwrap();
    assert!(
        output.contains("Permission denied") && output.contains("rc=1") && output.ends_with("mine\n"),
        "{output}"
    );
    assert!(!output.contains("s3cret"));
}

#[tokio::test]
async fn network_deny_blocks_tcp_connect_and_allow_does_not() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The probe is agentd's own `health` (a TCP connect), so the test needs no python or netcat.
    let agentd = agentd_tests::binary("agentd");
    let connect = format!("{} health --listen 127.0.0.1:{port} && echo connected", agentd.display());
    let deny = "name = \"offline\"\nnetwork = \"deny\"\n";
    let Some((_daemon, sb, _dir)) = profiled(deny, &[]).await else { return };
    let r = run(&sb, &connect).await;
    let output = r.output.unwrap();
    assert!(output.contains("Permission denied") && !output.contains("connected"), "{output}");
    assert_eq!(r.enforcement.unwrap().network, Level::Full);
    drop(sb);
    let allow = "name = \"online\"\nnetwork = \"allow\"\n";
    let (_daemon, sb, _dir) = profiled(allow, &[]).await.unwrap();
    let r = run(&sb, &connect).await;
    assert_eq!(r.output.as_deref(), Some("connected\n"));
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_agentd_keeps_answering() {
    let profile = "name = \"few-processes\"\n[limits]\nprocesses = 64\n";
    let Some((_daemon, sb, _dir)) = profiled(profile, &[]).await else { return };
    let bomb = run_with(
        &sb,
        ExecRequest {
            command: "f(){ f|f& }; f 2>/dev/null; sleep 1; echo contained".to_owned(),
            timeout: Some(10.0),
            ..ExecRequest::default()
        },
    )
    .await;
    assert!(bomb.output.unwrap_or_default().contains("contained"));
    assert_eq!(bomb.enforcement.unwrap().limits, Level::Full);
    let start = Instant::now();
    let r = run(&sb, "echo still answering").await;
    assert_eq!(r.output.as_deref(), Some("still answering\n"));
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn cpu_and_file_size_limits_stop_the_command_and_say_so() {
    let profile = "name = \"limited\"\n[limits]\ncpu_seconds = 1\nfile_size = 1048576\n";
    let Some((daemon, sb, _dir)) = profiled(profile, &[]).await else { return };
    let start = Instant::now();
    let spin = run(&sb, "while :; do :; done").await;
    assert_eq!(
        (spin.ending.signal.as_deref(), spin.limit_exceeded.as_deref()),
        (Some("SIGXCPU"), Some("cpu_seconds"))
    );
    assert!(!spin.ending.timed_out && start.elapsed() < Duration::from_secs(10));
    let big = run(&sb, "head -c 1073741824 /dev/zero > big").await;
    assert_eq!(big.limit_exceeded.as_deref(), Some("file_size"), "{big:?}");
    assert_eq!(std::fs::metadata(workspace(&daemon).join("big")).unwrap().len(), 1_048_576);
}

#[tokio::test]
async fn the_environment_is_the_allowlist_and_the_token_is_out_of_reach() {
    let profile = "name = \"clean-env\"\nenv_allowlist = [\"PATH\"]\nwritable_roots = [\"{W}\", \"/dev/null\"]\n[env]\nLANG = \"C.UTF-8\"\n";
    let Some((daemon, sb, _dir)) = profiled(profile, &[]).await else { return };
    let agentd = daemon.pid();
    let r = run(&sb, "env | sort").await;
    let names: Vec<&str> =
        r.output.as_deref().unwrap().lines().map(|l| l.split('=').next().unwrap()).collect();
    assert_eq!(names, ["AGENTD_EXEC_TAG", "LANG", "PATH", "PWD"], "{:?}", r.output);
    let probe = format!(
        "for f in environ cmdline; do grep -c '{token}' /proc/{agentd}/$f; done; head -c 16 /proc/{agentd}/mem; echo mem=$?",
        token = daemon.token
    );
    let output = run(&sb, &probe).await.output.unwrap();
    assert!(!output.contains(&daemon.token));
    // Not found, or not even readable (the sandbox user is not agentd's).
    let refused: Vec<&str> = output
        .lines()
        .filter(|l| *l == "0" || (l.starts_with("grep:") && l.ends_with("Permission denied")))
        .collect();
    assert_eq!(refused.len(), 2, "{output}");
    assert!(output.contains("mem=1"), "{output}");
}

#[tokio::test]
async fn a_request_cannot_loosen_the_profile_but_may_tighten_it() {
    let profile = "name = \"base\"\nwritable_roots = [\"{W}\"]\nnetwork = \"deny\"\nmax_timeout = 30\n[limits]\ncpu_seconds = 5\n";
    let Some((daemon, sb, _dir)) = profiled(profile, &[]).await else { return };
    let w = workspace(&daemon).canonicalize().unwrap();
    let loosen = [
        ProfileOverride { network: Some(Network::Allow), ..ProfileOverride::default() },
        ProfileOverride { writable_roots: Some(vec!["/".into()]), ..ProfileOverride::default() },
        ProfileOverride {
            limits: Some(Limits { cpu_seconds: Some(60), ..Limits::default() }),
            ..ProfileOverride::default()
        },
    ];
    for over in loosen {
        let request = ExecRequest {
            command: "true".into(),
            profile: Some(Box::new(over.clone())),
            ..ExecRequest::default()
        };
        match sb.exec(request, None).await {
            Err(SandboxError::Refused { code: ErrorCode::ProfileViolation, message }) => {
                assert!(message.contains("profile `base`"), "{message}");
            }
            other => panic!("{over:?} was not refused: {other:?}"),
        }
    }
    let too_long = ExecRequest { command: "true".into(), timeout: Some(0.0), ..ExecRequest::default() };
    assert!(matches!(
        sb.exec(too_long, None).await,
        Err(SandboxError::Refused { code: ErrorCode::ProfileViolation, .. })
    ));
    // Tightening works: a sub-directory only.
    // Made by a command, so it is the sandbox user's like the rest of the root.
    assert_eq!(run(&sb, "mkdir sub").await.exit_code, 0);
    let tighter = ProfileOverride {
        writable_roots: Some(vec![w.join("sub").to_string_lossy().into_owned()]),
        ..ProfileOverride::default()
    };
    let request = ExecRequest {
        command: "echo a > sub/ok; echo b > not-sub".into(),
        profile: Some(Box::new(tighter)),
        ..ExecRequest::default()
    };
    let r = sb.exec(request, None).await.unwrap();
    assert!(w.join("sub/ok").exists() && !w.join("not-sub").exists(), "{r:?}");
}

#[tokio::test]
async fn strict_refuses_what_it_cannot_enforce_and_best_effort_reports_it() {
    // Simulate a rule this kernel cannot enforce: require a landlock ABI above the kernel's.
    let strict = "name = \"future\"\nwritable_roots = [\"{W}\"]\nlandlock_abi = 99\n";
    let Some((daemon, sb, _dir)) = profiled(strict, &[]).await else { return };
    let marker = workspace(&daemon).join("ran");
    let request = ExecRequest { command: format!("touch {}", marker.display()), ..ExecRequest::default() };
    match sb.exec(request.clone(), None).await {
        Err(SandboxError::Refused { code: ErrorCode::NotEnforceable, message }) => {
            assert!(message.contains("landlock ABI 99"), "{message}");
        }
        other => panic!("strict mode ran it: {other:?}"),
    }
    assert!(!marker.exists());
    drop(sb);
    let best = "name = \"future\"\nmode = \"best_effort\"\nwritable_roots = [\"{W}\"]\nlandlock_abi = 99\n";
    let (daemon, sb, _dir) = profiled(best, &[]).await.unwrap();
    let marker = workspace(&daemon).join("ran");
    let request = ExecRequest { command: format!("touch {}", marker.display()), ..ExecRequest::default() };
    let r = sb.exec(request, None).await.unwrap();
    assert!(marker.exists());
    let enforcement = r.enforcement.unwrap();
    assert_eq!((enforcement.level, enforcement.filesystem), (Level::Partial, Level::Partial));
    assert!(enforcement.notes.iter().any(|n| n.contains("landlock ABI 99")), "{:?}", enforcement.notes);
}

#[tokio::test]
async fn the_embedded_default_is_confined_to_its_workspace_and_private_tmp() {
    let sb = agentd_host::LocalSandbox::start().await.unwrap();
    let outside = tempfile::tempdir().unwrap();
    let command = format!(
        "echo a > in-workspace && echo b > \"$TMPDIR/in-tmp\" && echo both-ok; echo c > {}/escape",
        outside.path().display()
    );
    let r = sb.agentd().exec(ExecRequest { command, ..ExecRequest::default() }, None).await.unwrap();
    let enforcement = r.enforcement.clone().unwrap();
    assert_eq!(enforcement.profile, "local-default");
    if enforcement.landlock_abi == 0 {
        skip(Need::Landlock, "no landlock on this kernel");
        return;
    }
    let output = r.output.unwrap();
    assert!(output.starts_with("both-ok\n") && output.contains("Permission denied"), "{output}");
    assert!(sb.workspace().join("in-workspace").exists());
    assert!(!outside.path().join("escape").exists());
    assert_eq!(enforcement.filesystem, Level::Full);
}

#[tokio::test]
async fn timeouts_under_a_profile_still_kill_escaped_descendants() {
    let profile = "name = \"tree\"\nwritable_roots = [\"{W}\"]\nallowed_commands = [\"sh\", \"sleep\", \"setsid\"]\n[limits]\nprocesses = 32\n";
    let Some((_daemon, sb, _dir)) = profiled(profile, &[]).await else { return };
    let request = ExecRequest {
        command: "sh -c 'sleep 1009 & setsid sleep 1009 & sleep 1009'".into(),
        timeout: Some(0.5),
        ..ExecRequest::default()
    };
    let r = sb.exec(request, None).await.unwrap();
    assert!(r.ending.timed_out);
    assert!(agentd_tests::processes_named("sleep 1009").is_empty());
    // `allowed_commands` refuses other first words before anything runs.
    let other = ExecRequest { command: "ls /".into(), ..ExecRequest::default() };
    match sb.exec(other, None).await {
        Err(SandboxError::Refused { code: ErrorCode::ProfileViolation, message }) => {
            assert!(message.contains("does not allow the command `ls`"), "{message}");
        }
        other => panic!("ls was not refused: {other:?}"),
    }
}

/// `profile` (TOML, `{W}`: the workspace) written to a file in `dir`.
fn profile_file(dir: &Path, workspace: &Path, profile: &str) -> std::path::PathBuf {
    let path = dir.join(format!("profile-{}.toml", rand::random::<u32>()));
    std::fs::write(&path, profile.replace("{W}", workspace.canonicalize().unwrap().to_str().unwrap()))
        .unwrap();
    path
}

/// python3 is there to run the probes (else the test says it is skipped).
fn python3() -> bool {
    let there = std::process::Command::new("python3").arg("-c").arg("").status().is_ok_and(|s| s.success());
    if !there {
        skip(Need::Python3, "no python3 for the probes");
    }
    there
}

/// A process the test started outside any sandbox; killed when dropped.
struct Victim(std::process::Child);

impl Victim {
    fn start() -> Self {
        Self(std::process::Command::new("sleep").arg("1013").spawn().unwrap())
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Tries every way out a `network = "deny"` command has been seen to take, one line each:
/// `NAME ok` or `NAME refused ERRNO`.
const NETWORK_PROBE: &str = r#"
import ctypes, os, socket, sys
path, abstract, udp_port, tcp_port, victim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        f()
        print(name, "ok", flush=True)
    except OSError as e:
        print(name, "refused", e.errno, flush=True)
def syscall(nr, *args):
    if libc.syscall(nr, *args) < 0:
        raise OSError(ctypes.get_errno(), "syscall %d" % nr)
def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", udp_port))
def dgram_pair_sendto():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"leak", "\0" + abstract + "-dgram")
def pair():
    a, b = socket.socketpair()
    a.send(b"p")
    assert b.recv(1) == b"p"
attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect(path))
attempt("abstract", lambda: socket.socket(socket.AF_UNIX).connect("\0" + abstract))
if os.path.exists("/var/run/docker.sock") and sys.argv[6] == "deny":
    attempt("docker", lambda: socket.socket(socket.AF_UNIX).connect("/var/run/docker.sock"))
attempt("udp", udp)
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", tcp_port)))
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))
attempt("unix_dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("dgram_pair", dgram_pair_sendto)
params = ctypes.create_string_buffer(120)
attempt("io_uring", lambda: syscall(425, 4, params))
attempt("x32_socket", lambda: syscall(41 | 0x40000000, 2, 2, 0))
attempt("kill", lambda: os.kill(victim, 9))
attempt("socketpair", pair)
"#;

fn probe_results(output: &str) -> std::collections::BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(name, result)| (name.to_owned(), result.to_owned()))
        .collect()
}

#[tokio::test]
async fn network_deny_closes_unix_abstract_udp_raw_io_uring_and_signals() {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
    if !python3() {
        return;
    }
    let outside = tempfile::tempdir().unwrap();
    let script = outside.path().join("probe.py");
    std::fs::write(&script, NETWORK_PROBE).unwrap();
    let socket_path = outside.path().join("listener.sock");
    let unix = UnixListener::bind(&socket_path).unwrap();
    unix.set_nonblocking(true).unwrap();
    let abstract_name = format!("agentd-test-{}", rand::random::<u64>());
    let abstract_listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(&abstract_name).unwrap()).unwrap();
    abstract_listener.set_nonblocking(true).unwrap();
    let abstract_dgram =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(format!("{abstract_name}-dgram")).unwrap())
            .unwrap();
    abstract_dgram.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let mut victim = Victim::start();
    let victim_pid = victim.0.id();
    let command = |mode: &str| {
        format!(
            "python3 {} {} {abstract_name} {} {} {} {mode}",
            script.display(),
            socket_path.display(),
            udp.local_addr().unwrap().port(),
            tcp.local_addr().unwrap().port(),
            victim_pid
        )
    };
    let mut buf = [0u8; 16];

    let deny = "name = \"offline\"\nwritable_roots = [\"{W}\"]\nnetwork = \"deny\"\n";
    let Some((_daemon, sb, _dir)) = profiled(deny, &[]).await else { return };
    let r = run(&sb, &command("deny")).await;
    let output = r.output.clone().unwrap();
    let results = probe_results(&output);
    let eacces = "refused 13";
    for name in ["unix", "abstract", "udp", "tcp", "raw", "packet", "netlink", "unix_dgram", "dgram_pair"] {
        assert_eq!(results.get(name).map(String::as_str), Some(eacces), "{name}: {output}");
    }
    assert_eq!(results.get("io_uring").map(String::as_str), Some(eacces), "{output}");
    assert_eq!(results.get("x32_socket").map(String::as_str), Some(eacces), "{output}");
    if std::path::Path::new("/var/run/docker.sock").exists() {
        assert_eq!(results.get("docker").map(String::as_str), Some(eacces), "{output}");
    }
    // Scoped signals: EPERM, and the process outside lives on.
    assert_eq!(results.get("kill").map(String::as_str), Some("refused 1"), "{output}");
    assert!(victim.alive());
    assert_eq!(results.get("socketpair").map(String::as_str), Some("ok"), "{output}");
    // Nothing reached the listeners.
    assert!(unix.accept().is_err() && abstract_listener.accept().is_err() && tcp.accept().is_err());
    assert!(udp.recv(&mut buf).is_err() && abstract_dgram.recv(&mut buf).is_err());
    let enforcement = r.enforcement.unwrap();
    assert_eq!(
        (enforcement.network, enforcement.signals, enforcement.level),
        (Level::Full, Level::Full, Level::Full)
    );
    drop(sb);

    // The same probe with the network allowed gets through: the walls above are the profile's.
    // As agentd's own user (root): the sandbox user's own walls (socket permissions, no
    // CAP_NET_RAW) would refuse some of these whatever the network rule.
    let allow = "name = \"online\"\nuser = \"agentd\"\nwritable_roots = [\"{W}\"]\n";
    let (_daemon, sb, _dir) = profiled(allow, &[]).await.unwrap();
    let output = run(&sb, &command("allow")).await.output.unwrap();
    let results = probe_results(&output);
    for name in ["unix", "udp", "tcp", "raw", "packet", "netlink", "unix_dgram"] {
        assert_eq!(results.get(name).map(String::as_str), Some("ok"), "{name}: {output}");
    }
    // Abstract Unix sockets outside stay scoped under every profile (a connect, a datagram sent to
    // one): EPERM.
    for name in ["abstract", "dgram_pair"] {
        assert_eq!(results.get(name).map(String::as_str), Some("refused 1"), "{name}: {output}");
    }
    assert_ne!(results.get("io_uring").map(String::as_str), Some(eacces), "{output}");
    assert_ne!(results.get("x32_socket").map(String::as_str), Some(eacces), "{output}");
    assert!(unix.accept().is_ok() && abstract_listener.accept().is_err() && tcp.accept().is_ok());
    assert_eq!(udp.recv(&mut buf).unwrap(), 4);
    assert!(abstract_dgram.recv(&mut buf).is_err());
    // Signals stay scoped: that does not depend on the network.
    assert_eq!(results.get("kill").map(String::as_str), Some("refused 1"), "{output}");
    assert!(victim.alive());
    // Inside its own sandbox a command still signals its own processes.
    let own = run(&sb, "sleep 30 & kill $! && wait $!; echo status=$?").await.output.unwrap();
    assert!(own.ends_with("status=143\n"), "{own}");
}

#[tokio::test]
async fn the_report_is_what_the_command_got_under_strict_and_best_effort() {
    for mode in ["strict", "best_effort"] {
        let profile = format!(
            "name = \"all\"\nmode = \"{mode}\"\nwritable_roots = [\"{{W}}\"]\nnetwork = \"deny\"\n[limits]\nprocesses = 64\n"
        );
        let Some((_daemon, sb, _dir)) = profiled(&profile, &[]).await else { return };
        let r = run(&sb, "true").await;
        let e = r.enforcement.unwrap();
        if e.landlock_abi < 6 {
            skip(
                Need::Landlock,
                format!("signal scoping needs landlock ABI 6, the kernel has {}", e.landlock_abi),
            );
            return;
        }
        assert_eq!(
            (e.filesystem, e.network, e.signals, e.limits, e.level),
            (Level::Full, Level::Full, Level::Full, Level::Full, Level::Full),
            "{mode}: {:?}",
            e.notes
        );
        // The only note says what is withheld.
        assert_eq!(e.notes.len(), 1, "{:?}", e.notes);
        assert!(e.notes[0].starts_with("withheld: /sys/fs/cgroup: not writable"), "{:?}", e.notes);
    }
}

/// Wraps agentd in 16 landlock layers (the kernel's most), so its commands' `restrict_self` fails.
const SIXTEEN_LAYERS: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
# struct landlock_ruleset_attr: handled_access_fs = MAKE_SYM (agentd makes no symlinks), net, scoped.
attr = (ctypes.c_uint64 * 3)(1 << 13, 0, 0)
assert libc.prctl(38, 1, 0, 0, 0) == 0
for _ in range(16):
    fd = libc.syscall(444, attr, 24, 0)
    assert fd >= 0, ctypes.get_errno()
    assert libc.syscall(446, fd, 0) == 0, ctypes.get_errno()
    os.close(fd)
os.execv(sys.argv[1], sys.argv[1:])
"#;

#[tokio::test]
async fn a_strict_command_that_does_not_get_landlock_does_not_run() {
    if !python3() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("layers.py");
    std::fs::write(&wrapper, SIXTEEN_LAYERS).unwrap();
    let outside = tempfile::tempdir().unwrap();
    for mode in ["strict", "best_effort"] {
        let workspace = tempfile::tempdir().unwrap();
        let profile = profile_file(
            dir.path(),
            workspace.path(),
            // As agentd's own user: the marker's directory is root's.
            &format!(
                "name = \"nested\"\nmode = \"{mode}\"\nuser = \"agentd\"\nwritable_roots = [\"{{W}}\"]\n"
            ),
        );
        let daemon = Daemon::launch(
            &["python3", wrapper.to_str().unwrap()],
            workspace,
            &["--profile", profile.to_str().unwrap()],
            None,
        );
        let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
        if sb.link().await.unwrap().hello().landlock_abi < 4 {
            skip(Need::Landlock, "no landlock");
            return;
        }
        let marker = outside.path().join(format!("ran-{mode}"));
        let request =
            ExecRequest { command: format!("touch {}", marker.display()), ..ExecRequest::default() };
        let result = sb.exec(request, None).await;
        if mode == "strict" {
            match result {
                Err(SandboxError::Refused { code: ErrorCode::NotEnforceable, message }) => {
                    assert!(message.contains("landlock_restrict_self failed"), "{message}");
                }
                other => panic!("strict mode ran it: {other:?}"),
            }
            assert!(!marker.exists());
        } else {
            // Best effort runs it, and says the rules were not in force (they were not: it wrote
            // outside its root).
            let r = result.unwrap();
            assert!(marker.exists(), "{r:?}");
            let e = r.enforcement.unwrap();
            assert_eq!((e.filesystem, e.level), (Level::NotEnforced, Level::NotEnforced), "{:?}", e.notes);
            assert!(e.notes.iter().any(|n| n.contains("landlock_restrict_self failed")), "{:?}", e.notes);
        }
    }
}

/// A pids cgroup the test makes (as root on cgroup v1) and removes.
struct TestCgroup(std::path::PathBuf);

impl TestCgroup {
    fn create() -> Option<Self> {
        let dir = Path::new("/sys/fs/cgroup/pids").join(format!("agentd-test-{}", rand::random::<u32>()));
        std::fs::create_dir(&dir).ok().map(|()| Self(dir))
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Opens a file by handle (root has CAP_DAC_READ_SEARCH), no path walk: prints what it read.
const OPEN_BY_HANDLE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Handle(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("handle", ctypes.c_ubyte * 128)]
handle, mount_id = Handle(128), ctypes.c_int()
if libc.name_to_handle_at(-100, sys.argv[1].encode(), ctypes.byref(handle), ctypes.byref(mount_id), 0) == 0:
    fd = libc.open_by_handle_at(os.open("/", os.O_RDONLY), ctypes.byref(handle), os.O_RDONLY)
    print("handle", fd, ctypes.get_errno())
    if fd >= 0:
        print(os.read(fd, 100).decode())
"#;

#[tokio::test]
async fn the_token_file_and_the_cgroup_tree_stay_out_of_reach_of_every_profile() {
    // Only the open-by-handle probe needs it.
    let python = python3();
    let token_dir = tempfile::tempdir().unwrap();
    let token_dir_path = token_dir.path().canonicalize().unwrap();
    let token_file = token_dir_path.join("agentd.token");
    std::fs::write(token_dir_path.join("sibling"), "public\n").unwrap();
    let handle_script = token_dir_path.join("handle.py");
    std::fs::write(&handle_script, OPEN_BY_HANDLE).unwrap();
    let cgroup = TestCgroup::create();
    let sub_cgroup = cgroup.as_ref().map_or("/nonexistent".into(), |c| c.0.display().to_string());
    let attack = format!(
        "T={t}; D={d}; C={c}
cat $T; echo cat=$?
cp $T stolen-cp; echo cp=$?
ln -s $T stolen-sym; cat stolen-sym; echo sym=$?
mv $T stolen-mv; echo mv=$?
ln $T stolen-ln; echo ln=$?
mv $T $T.moved; echo mv-same=$?
ln $T $D/again; echo ln-same=$?
mkdir $D/sub && mv $T $D/sub/t; echo mv-sub=$?
cat stolen-* $D/again $D/sub/t $T.moved 2>/dev/null
echo $$ > /sys/fs/cgroup/pids/cgroup.procs; echo procs=$?
echo $$ > $C/cgroup.procs; echo sub-procs=$?
echo $$ > /sys/fs/cgroup/pids/tasks; echo tasks=$?
echo $$ > $C/tasks; echo sub-tasks=$?
echo 1 > $C/pids.max; echo sub-max=$?
mkdir /sys/fs/cgroup/pids/escape; echo mkdir=$?
cat /etc/hostname >/dev/null; echo hostname=$?
ls /run >/dev/null; echo run=$?
ls $D >/dev/null; echo dir=$?
python3 {h} $T
cat $D/sibling",
        h = handle_script.display(),
        t = token_file.display(),
        d = token_dir_path.display(),
        c = sub_cgroup,
    );
    let dir = tempfile::tempdir().unwrap();
    let d = token_dir_path.display();
    let profiles = [
        ("no-fs", "name = \"no-fs\"\n[limits]\nprocesses = 64\n".to_owned()),
        // The token's own directory writable: only the carve-out and landlock's refer rules hold.
        (
            "read-all",
            format!("name = \"read-all\"\nreadable_roots = [\"/\"]\nwritable_roots = [\"{{W}}\", \"{d}\"]\n"),
        ),
        (
            "strict",
            "name = \"strict\"\nmode = \"strict\"\nwritable_roots = [\"{W}\"]\nnetwork = \"deny\"\n"
                .to_owned(),
        ),
    ];
    let mut checked = 0;
    for (name, profile) in profiles {
        let workspace = tempfile::tempdir().unwrap();
        let path = profile_file(dir.path(), workspace.path(), &profile);
        let daemon =
            Daemon::launch(&[], workspace, &["--profile", path.to_str().unwrap()], Some(&token_file));
        let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
        if sb.link().await.unwrap().hello().landlock_abi < 3 {
            skip(Need::Landlock, "landlock ABI < 3");
            return;
        }
        let r = run(&sb, &attack).await;
        let output = r.output.clone().unwrap();
        assert!(!output.contains(&daemon.token), "{name}: {output}");
        let code = |step: &str| {
            output.lines().find_map(|l| l.strip_prefix(&format!("{step}="))).unwrap_or("missing").to_owned()
        };
        let mut refused =
            vec!["cat", "cp", "sym", "mv", "ln", "mv-same", "ln-same", "mv-sub", "procs", "tasks", "mkdir"];
        if cgroup.is_some() {
            refused.extend(["sub-procs", "sub-tasks", "sub-max"]);
        }
        for step in refused {
            assert_ne!(code(step), "0", "{name}: {step} went through: {output}");
        }
        for step in ["hostname", "run", "dir"] {
            assert_eq!(code(step), "0", "{name}: {step} was refused: {output}");
        }
        assert!(output.ends_with("public\n"), "{name}: {output}");
        // The token is where it was, as it was.
        assert_eq!(std::fs::read_to_string(&token_file).unwrap(), daemon.token);
        let e = r.enforcement.unwrap();
        assert_eq!((e.filesystem, e.level), (Level::Full, Level::Full), "{name}: {:?}", e.notes);
        let withheld = e.notes.iter().find(|n| n.starts_with("withheld:")).unwrap();
        assert!(
            withheld.contains(&format!("{}: not readable or writable", token_file.display())),
            "{withheld}"
        );
        // The next command reuses the ruleset: the token is still out of reach.
        let again = run(&sb, &format!("cat {}", token_file.display())).await.output.unwrap();
        assert!(again.contains("Permission denied") && !again.contains(&daemon.token), "{name}: {again}");
        // An entry created beside the token since is not a reused ruleset's blind spot.
        let later = token_dir_path.join(format!("later-{name}"));
        std::fs::write(&later, "later\n").unwrap();
        let r = run(&sb, &format!("cat {}", later.display())).await;
        assert_eq!(r.output.as_deref(), Some("later\n"), "{name}");
        checked += 1;
    }
    assert_eq!(checked, 3);

    // A second name of the token is not withheld: reported, and a strict profile refuses.
    let link = dir.path().join("token-link");
    std::fs::hard_link(&token_file, &link).unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let path = profile_file(dir.path(), workspace.path(), "name = \"strict\"\nwritable_roots = [\"{W}\"]\n");
    let daemon = Daemon::launch(&[], workspace, &["--profile", path.to_str().unwrap()], Some(&token_file));
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let hello = sb.link().await.unwrap().hello().profile.clone().unwrap();
    assert_eq!((hello.filesystem, hello.level), (Level::Partial, Level::Partial), "{:?}", hello.notes);
    match sb.exec(ExecRequest { command: "true".into(), ..ExecRequest::default() }, None).await {
        Err(SandboxError::Refused { code: ErrorCode::NotEnforceable, message }) => {
            assert!(message.contains("has 2 hard links"), "{message}");
        }
        other => panic!("a strict profile ran beside a linked token: {other:?}"),
    }
    std::fs::remove_file(&link).unwrap();

    // Without a profile nothing is withheld: the same probe reads the token (the walls above are
    // the profile's, not the probe's failure).
    let workspace = tempfile::tempdir().unwrap();
    let daemon = Daemon::launch(&[], workspace, &[], Some(&token_file));
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let output = run(
        &sb,
        &format!(
            "cat {t}; echo; echo $$ > {sub_cgroup}/cgroup.procs; echo sub-procs=$?; \
             echo $$ > {sub_cgroup}/tasks; echo sub-tasks=$?; python3 {h} {t}",
            t = token_file.display(),
            h = handle_script.display()
        ),
    )
    .await
    .output
    .unwrap();
    assert!(output.starts_with(&daemon.token), "{output}");
    // The handle probe works where nothing is withheld.
    assert!(!python || output.ends_with(&format!("{}\n", daemon.token)), "{output}");
    if cgroup.is_some() {
        assert!(output.contains("sub-procs=0") && output.contains("sub-tasks=0"), "{output}");
    }
}

/// A tmpfs the test mounts (as root) and unmounts, whatever happens.
struct TestMount(std::path::PathBuf);

impl TestMount {
    fn over(dir: &Path) -> Option<Self> {
        let mounted =
            std::process::Command::new("mount").args(["-t", "tmpfs", "agentd-test"]).arg(dir).status();
        mounted.is_ok_and(|s| s.success()).then(|| Self(dir.to_owned()))
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Commands reuse what earlier ones prepared (the ruleset, the report) until something it was made
/// from changes: each change made between two commands is seen by the second, which would
/// otherwise be refused its writable root or be told a report that is no longer true.
#[tokio::test]
async fn what_changes_between_two_commands_is_seen_by_the_next_one() {
    let base = tempfile::tempdir().unwrap();
    let base_path = base.path().canonicalize().unwrap();
    // The writable root in a directory of its own, off the way to the token: no ruleset lists it, so
    // only the root's own watch tells when it is replaced.
    let root_dir = tempfile::tempdir().unwrap();
    let root_base = root_dir.path().canonicalize().unwrap();
    let root = root_base.join("root");
    let token_dir = base_path.join("run");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&token_dir).unwrap();
    let token_file = token_dir.join("agentd.token");
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    // As agentd's own user: the test replaces the root's directory as root while agentd runs.
    let profile = format!(
        "name = \"roots\"\nmode = \"best_effort\"\nuser = \"agentd\"\nwritable_roots = [\"{{W}}\", \"{}\"]\n",
        root.display()
    );
    let path = profile_file(dir.path(), workspace.path(), &profile);
    let daemon = Daemon::launch(&[], workspace, &["--profile", path.to_str().unwrap()], Some(&token_file));
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    if sb.link().await.unwrap().hello().landlock_abi < 3 {
        skip(Need::Landlock, "landlock ABI < 3");
        return;
    }
    let write = |name: &str| format!("echo {name} > {}/{name} && echo ok", root.display());
    let filesystem = |r: &ExecResult| r.enforcement.as_ref().unwrap().filesystem;
    for name in ["first", "again"] {
        let r = run(&sb, &write(name)).await;
        assert_eq!(r.output.as_deref(), Some("ok\n"), "{name}: {r:?}");
        assert_eq!(filesystem(&r), Level::Full);
    }

    // The root's directory replaced by another one: the next command writes into the new one.
    std::fs::rename(&root, root_base.join("old-root")).unwrap();
    std::fs::create_dir(&root).unwrap();
    let r = run(&sb, &write("replaced")).await;
    assert_eq!(r.output.as_deref(), Some("ok\n"), "{r:?}");
    assert!(root.join("replaced").is_file() && !root_base.join("old-root/replaced").exists());

    // A second name of the token, made while agentd runs, is reported by the next command, and its
    // removal by the one after. It is made in a directory no ruleset lists (the profile's, made
    // before agentd), so only the token's own change tells.
    let link = dir.path().join("token-link");
    std::fs::hard_link(&token_file, &link).unwrap();
    let r = run(&sb, "true").await;
    assert_eq!(filesystem(&r), Level::Partial, "{:?}", r.enforcement);
    assert!(r.enforcement.unwrap().notes.iter().any(|n| n.contains("has 2 hard links")));
    std::fs::remove_file(&link).unwrap();
    assert_eq!(filesystem(&run(&sb, "true").await), Level::Full);

    // A file system mounted over the root: the next command writes into it, and once it is gone,
    // into the directory beneath again.
    if !nix::unistd::geteuid().is_root() {
        skip(Need::Root, "mounting over a root needs root");
        return;
    }
    {
        let _mount = TestMount::over(&root).expect("mount a tmpfs");
        let r = run(&sb, &write("mounted")).await;
        assert_eq!(r.output.as_deref(), Some("ok\n"), "over the mount: {r:?}");
        assert!(root.join("mounted").is_file());
    }
    assert!(!root.join("mounted").exists(), "the tmpfs held it");
    let r = run(&sb, &write("unmounted")).await;
    assert_eq!(r.output.as_deref(), Some("ok\n"), "after the mount: {r:?}");
    assert!(root.join("unmounted").is_file() && root.join("replaced").is_file());
}
