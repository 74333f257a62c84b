//! The walls around agentd, each tried as the attack that got through it before: a request that
//! loosens the profile through `..` or a symlink, a command that drives its own agentd, a web page
//! that opens a websocket to it, a TCP listener without a token.
//!
//! And, as root, the walls of the embedded default (`local-default`, as `LocalSandbox` and `agentctl
//! up` start it), whose commands used to run as root with every capability: the Docker engine's
//! socket; another session's socket, TCP port and token, and its own; an upgrade from a process
//! that is not agentd's without the token; device nodes in the workspace; `reboot`,
//! `settimeofday`/`clock_settime`, `sethostname`, netlink, the rlimit, nice, scheduler, affinity and
//! I/O priority of a process outside, System V shared memory outside, an abstract socket outside,
//! `/etc/shadow`; and what the report says of it. Each is also run, where that is harmless, with
//! `user = "agentd"` (the same profile, root's capabilities) or without a profile, where it gets
//! through: the attack is real.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentd_host::adapters::local::{DefaultProfile, Lifetime, TokenSource, socket_dir, spawn_agentd};
use agentd_host::{AgentdSandbox, LocalSandbox, SandboxError};
use agentd_protocol::profile::{Level, ProfileOverride, sandbox_id};
use agentd_protocol::{ErrorCode, ExecRequest};
use agentd_tests::{Daemon, Need, PidsCap, as_root, run, skip};

/// Why these tests need root.
const ROOT: &str = "the sandbox user and the capabilities it drops are root's";

/// A raw websocket upgrade (no client library) over TCP `host:port` or a Unix socket path, with
/// extra header lines; prints the status line of the answer. Run by agentd's commands and by the
/// test itself, so the same bytes are refused from one and accepted from the other.
const UPGRADE: &str = r#"
import socket, sys
kind, addr = sys.argv[1], sys.argv[2]
if kind == "unix":
    s = socket.socket(socket.AF_UNIX)
    s.connect(addr)
else:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
extra = "".join(line + "\r\n" for line in sys.argv[3:])
s.sendall(("GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + extra + "\r\n").encode())
print(s.recv(4096).split(b"\r\n")[0].decode())
"#;

fn script(dir: &Path) -> String {
    let path = dir.join("upgrade.py");
    std::fs::write(&path, UPGRADE).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The status line the test process itself gets (it is not one of agentd's commands).
fn upgrade_from_here(script: &str, kind: &str, addr: &str, headers: &[&str]) -> String {
    let out = Command::new("python3").args([script, kind, addr]).args(headers).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

async fn output(sb: &AgentdSandbox, command: &str) -> String {
    let request = ExecRequest { command: command.to_owned(), timeout: Some(20.0), ..ExecRequest::default() };
    let r = sb.exec(request, None).await.unwrap();
    r.output.unwrap()
}

#[tokio::test]
async fn a_command_cannot_drive_its_own_agentd_over_the_local_socket() {
    let daemon = Daemon::start_unix(&[]);
    let socket = daemon.url.strip_prefix("unix:").unwrap().to_owned();
    let sb = AgentdSandbox::connect(&daemon.url, None).await.unwrap();
    let script = script(daemon.workspace.path());

    // The same upgrade, from outside agentd's tree: accepted (so the refusals below are not a
    // broken client).
    assert_eq!(upgrade_from_here(&script, "unix", &socket, &[]), "HTTP/1.1 101 Switching Protocols");

    // From a command, from its background child, and from a double-forked `setsid` process that
    // left the exec's tree (agentd is a subreaper: it is re-parented to agentd, still its own).
    let direct = output(&sb, &format!("python3 {script} unix {socket}")).await;
    assert_eq!(direct.trim(), "HTTP/1.1 403 Forbidden", "{direct}");
    let nested = output(&sb, &format!("sh -c 'python3 {script} unix {socket}' & wait")).await;
    assert_eq!(nested.trim(), "HTTP/1.1 403 Forbidden", "{nested}");
    let escaped = daemon.workspace.path().join("escaped");
    let command = format!(
        "( setsid sh -c 'sleep 0.2; python3 {script} unix {socket} > {out}' & ) ; exit 0",
        out = escaped.display()
    );
    output(&sb, &command).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(&escaped).map_or(true, |s| !s.ends_with('\n')) {
        assert!(std::time::Instant::now() < deadline, "the escaped process never answered");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(std::fs::read_to_string(&escaped).unwrap().trim(), "HTTP/1.1 403 Forbidden");
}

#[tokio::test]
async fn web_pages_cannot_open_a_websocket_to_agentd() {
    // A browser sends Origin on every websocket upgrade; it cannot send a bearer token. Both
    // transports refuse an upgrade that carries one, even with the right token.
    let tcp = Daemon::start();
    let addr = tcp.url.strip_prefix("ws://").unwrap().to_owned();
    let script = script(tcp.workspace.path());
    let bearer = format!("Authorization: Bearer {}", tcp.token);
    let page = "Origin: http://evil.example";
    assert_eq!(upgrade_from_here(&script, "tcp", &addr, &[&bearer]), "HTTP/1.1 101 Switching Protocols");
    assert_eq!(upgrade_from_here(&script, "tcp", &addr, &[&bearer, page]), "HTTP/1.1 403 Forbidden");
    assert_eq!(upgrade_from_here(&script, "tcp", &addr, &[page]), "HTTP/1.1 403 Forbidden");
    assert_eq!(upgrade_from_here(&script, "tcp", &addr, &[]), "HTTP/1.1 401 Unauthorized");

    let unix = Daemon::start_unix(&[]);
    let socket = unix.url.strip_prefix("unix:").unwrap();
    assert_eq!(upgrade_from_here(&script, "unix", socket, &[]), "HTTP/1.1 101 Switching Protocols");
    assert_eq!(upgrade_from_here(&script, "unix", socket, &[page]), "HTTP/1.1 403 Forbidden");
}

#[test]
fn tcp_without_a_token_is_refused_at_start_loopback_too() {
    for listen in ["127.0.0.1:0", "[::1]:0", "0.0.0.0:0"] {
        let out = Command::new(agentd_tests::binary("agentd"))
            .args(["serve", "--listen", listen])
            .env_remove("AGENTD_TOKEN")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{listen} served without a token");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("without a token") && stderr.contains("--unix"), "{stderr}");
    }
}

const WORKSPACE_ONLY: &str = "name = \"w\"\nwritable_roots = [\"{W}\"]\n";

/// A daemon whose profile makes only its workspace writable, a link to it, and a directory outside.
async fn workspace_only() -> (Daemon, AgentdSandbox, tempfile::TempDir, tempfile::TempDir) {
    let config = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    let profile = config.path().join("profile.toml");
    std::fs::write(&profile, WORKSPACE_ONLY.replace("{W}", w.to_str().unwrap())).unwrap();
    let daemon = Daemon::start_in(workspace, &["--profile", profile.to_str().unwrap()]);
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    (daemon, sb, config, tempfile::tempdir().unwrap())
}

#[tokio::test]
async fn an_override_cannot_loosen_the_roots_through_dots_or_links() {
    let (daemon, sb, _config, outside) = workspace_only().await;
    let w = daemon.workspace.path().canonicalize().unwrap();
    let outside = outside.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(&outside, w.join("link")).unwrap();
    // `W/../<outside's name>` only names outside when outside is W's sibling: make one.
    let sibling = w.parent().unwrap().join(format!("{}-sibling", w.file_name().unwrap().to_str().unwrap()));
    std::fs::create_dir_all(&sibling).unwrap();
    let _cleanup = RemoveDir(sibling.clone());
    let text = |p: &Path| p.to_str().unwrap().to_owned();
    let attacks = [
        (format!("{}/../{}", text(&w), sibling.file_name().unwrap().to_str().unwrap()), sibling.clone()),
        (format!("{}/link", text(&w)), outside.clone()),
        (format!("{}/link/", text(&w)), outside.clone()),
        (format!("{}/../../..", text(&w)), outside.clone()),
        (
            format!("{}/./link/../{}", text(&w), outside.file_name().unwrap().to_str().unwrap()),
            outside.clone(),
        ),
    ];
    for (root, target) in attacks {
        let file = target.join("pwned");
        let request = ExecRequest {
            command: format!("echo x > {}", file.display()),
            timeout: Some(20.0),
            profile: Some(Box::new(ProfileOverride {
                writable_roots: Some(vec![root.clone()]),
                ..ProfileOverride::default()
            })),
            ..ExecRequest::default()
        };
        match sb.exec(request, None).await {
            Err(SandboxError::Refused { code: ErrorCode::ProfileViolation, message }) => {
                assert!(message.contains("is not beneath"), "{message}");
            }
            other => panic!("override {root} was not refused: {other:?}"),
        }
        assert!(!file.exists(), "{root}: wrote {}", file.display());
    }
    // A real tightening still runs, and the kernel holds it: the command writes in the narrower
    // root only. (Made by a command: as the sandbox user's, as the roots are.)
    assert_eq!(output(&sb, "mkdir sub && echo made").await, "made\n");
    let request = ExecRequest {
        command: "echo in > sub/ok; echo out > elsewhere; cat sub/ok".to_owned(),
        timeout: Some(20.0),
        profile: Some(Box::new(ProfileOverride {
            writable_roots: Some(vec![format!("{}/sub/", text(&w))]),
            ..ProfileOverride::default()
        })),
        ..ExecRequest::default()
    };
    let r = sb.exec(request, None).await.unwrap();
    assert_eq!(r.output.as_deref().map(|o| o.contains("in\n")), Some(true), "{r:?}");
    assert!(!w.join("elsewhere").exists());
}

#[tokio::test]
async fn numbers_that_used_to_abort_the_daemon_are_refused() {
    let (_daemon, sb, _config, _outside) = workspace_only().await;
    for bad in [1e20, 1e300, -1.0] {
        let over = ProfileOverride { max_timeout: Some(bad), ..ProfileOverride::default() };
        let request = ExecRequest {
            command: "true".to_owned(),
            profile: Some(Box::new(over)),
            ..ExecRequest::default()
        };
        match sb.exec(request, None).await {
            Err(SandboxError::Refused { code: ErrorCode::InvalidField, .. }) => {}
            other => panic!("max_timeout {bad}: {other:?}"),
        }
        let request =
            ExecRequest { command: "true".to_owned(), timeout: Some(bad), ..ExecRequest::default() };
        assert!(matches!(
            sb.exec(request, None).await,
            Err(SandboxError::Refused { code: ErrorCode::InvalidField, .. })
        ));
    }
    // The daemon is still up and serving.
    assert_eq!(output(&sb, "echo alive").await, "alive\n");

    let out = Command::new(agentd_tests::binary("agentd"))
        .args(["exec", "--timeout", "1e20"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timeout"));
    let profile_dir = tempfile::tempdir().unwrap();
    for field in ["default_timeout", "max_timeout"] {
        let profile = profile_dir.path().join("p.toml");
        std::fs::write(&profile, format!("name = \"n\"\n{field} = 1e20\n")).unwrap();
        let out = Command::new(agentd_tests::binary("agentd"))
            .args(["serve", "--unix"])
            .arg(profile_dir.path().join("s"))
            .arg("--profile")
            .arg(&profile)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{field} = 1e20 was accepted");
        assert!(String::from_utf8_lossy(&out.stderr).contains(field));
    }
}

struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn commands_get_no_more_processes_than_agentd_itself() {
    const CEILING: u32 = 24;
    let Some(cap) = PidsCap::or_skip(CEILING) else { return };
    let config = tempfile::tempdir().unwrap();
    let profile = config.path().join("p.toml");
    // The profile allows far more than agentd's own cgroup does.
    std::fs::write(&profile, "name = \"many\"\n[limits]\nprocesses = 1000\n").unwrap();
    let enter = cap.enter();
    let daemon = Daemon::launch(
        &["sh", "-c", &enter, "sh"],
        tempfile::tempdir().unwrap(),
        &["--profile", profile.to_str().unwrap()],
        None,
    );
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let r = sb
        .exec(
            ExecRequest {
                command: "for i in $(seq 100); do sleep 1010 & done 2>/dev/null; echo done".to_owned(),
                timeout: Some(20.0),
                ..ExecRequest::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        r.enforcement.as_ref().map(|e| e.limits),
        Some(agentd_protocol::profile::Level::Full),
        "{r:?}"
    );
    // The command met the commands' budget beneath agentd's cap (far below the profile's 1000),
    // and was ended whole with its exec: no sleeper is left, in the cap or not.
    assert_eq!(r.limit_exceeded.as_deref(), Some("processes"), "{r:?}");
    let sleeps = agentd_tests::processes_named("sleep 1010").len();
    assert_eq!(sleeps, 0, "{sleeps} sleeps outlived their exec");
    // The per-command cgroups are beneath agentd's own, not at the hierarchy's root.
    assert!(cap.dir.join(format!("agentd-{}", daemon.pid())).is_dir());
    assert!(!Path::new(&format!("/sys/fs/cgroup/pids/agentd-{}", daemon.pid())).exists());
}

/// Per-command cgroups are reused once empty: the limit holds for the next command, also after the
/// kill ladder set it to 0 to end a timed-out one.
#[tokio::test]
async fn a_reused_command_cgroup_gets_its_limit_back() {
    const CEILING: u32 = 64;
    let Some(cap) = PidsCap::or_skip(CEILING) else { return };
    let config = tempfile::tempdir().unwrap();
    let profile = config.path().join("p.toml");
    std::fs::write(&profile, "name = \"few\"\n[limits]\nprocesses = 8\n").unwrap();
    let enter = cap.enter();
    let daemon = Daemon::launch(
        &["sh", "-c", &enter, "sh"],
        tempfile::tempdir().unwrap(),
        &["--profile", profile.to_str().unwrap(), "--kill-grace", "0.2"],
        None,
    );
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    // SIGTERM ignored: the ladder ends it through the cgroup (`pids.max` 0, then SIGKILL).
    let request = ExecRequest {
        command: "trap '' TERM; sleep 30 & wait".to_owned(),
        timeout: Some(0.3),
        ..ExecRequest::default()
    };
    let r = sb.exec(request, None).await.unwrap();
    assert!(r.ending.timed_out, "{r:?}");
    assert_eq!(r.stray_processes, Some(0), "{r:?}");
    for _ in 0..3 {
        let forks = "for i in 1 2 3 4 5; do sleep 0 & done; wait; echo forked";
        assert_eq!(output(&sb, forks).await, "forked\n");
    }
    let cgroups: Vec<_> = std::fs::read_dir(cap.dir.join(format!("agentd-{}", daemon.pid())))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    assert_eq!(cgroups.len(), 1, "one cgroup, reused: {cgroups:?}");
    // The profile's limit, which the kernel enforces (the storm tests show it binding).
    assert_eq!(std::fs::read_to_string(cgroups[0].join("pids.max")).unwrap().trim(), "8");
}

#[tokio::test]
async fn a_root_swapped_for_a_link_after_admission_grants_nothing_outside() {
    const MIN_SWAPS: u64 = 1000;
    const MIN_ROUNDS: u32 = 200;
    let (daemon, sb, _config, outside) = workspace_only().await;
    let w = daemon.workspace.path().canonicalize().unwrap();
    let outside = outside.path().canonicalize().unwrap();
    // `a` is a real directory, `b` a link to the outside; a thread exchanges the two names.
    std::fs::create_dir(w.join("a")).unwrap();
    std::os::unix::fs::symlink(&outside, w.join("b")).unwrap();
    let swapper = agentd_tests::Swapper::start(&w, "a", "b");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (mut rounds, mut admitted, mut refused) = (0u32, 0u32, 0u32);
    while (rounds < MIN_ROUNDS || swapper.swaps() < MIN_SWAPS) && std::time::Instant::now() < deadline {
        rounds += 1;
        let request = ExecRequest {
            // Several writes through the swapping name, so one may meet the link.
            command: format!(
                "for i in 1 2 3 4 5 6; do echo x > {}/a/pwned-$i; done 2>/dev/null; true",
                w.display()
            ),
            timeout: Some(20.0),
            profile: Some(Box::new(ProfileOverride {
                writable_roots: Some(vec![format!("{}/a", w.display())]),
                ..ProfileOverride::default()
            })),
            ..ExecRequest::default()
        };
        match sb.exec(request, None).await {
            Ok(_) => admitted += 1,
            Err(SandboxError::Refused { code: ErrorCode::ProfileViolation, .. }) => refused += 1,
            Err(other) => panic!("round {rounds}: {other:?}"),
        }
        let planted: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(planted.is_empty(), "round {rounds}: written outside: {planted:?}");
    }
    let swaps = swapper.swaps();
    drop(swapper);
    assert!(swaps >= MIN_SWAPS && rounds >= MIN_ROUNDS, "{swaps} swaps, {rounds} rounds in 30 s");
    println!("{swaps} swaps, {rounds} rounds: {admitted} admitted, {refused} refused");
    // Both outcomes happened: the race was real.
    assert!(admitted > 0 && refused > 0, "admitted {admitted}, refused {refused}");
}

// The embedded default's walls, as root.

/// Each probe, named on the command line, tries one thing only root could do to the machine or to a
/// process outside, and prints `NAME ok` or `NAME ERRNO`. Its parameters come as JSON in the first
/// argument: the outside process (`pid`: the test's own), its `nofile` limits, the `ioprio` system
/// call numbers (get, set) and an `abstract` socket name.
const PROBES: &str = r#"
import ctypes, errno, json, os, resource, socket, sys, time

params = json.loads(sys.argv[1])
target = params["pid"]
libc = ctypes.CDLL(None, use_errno=True)


def checked(ret):
    if ret == -1:
        raise OSError(ctypes.get_errno(), "")
    return ret


def reboot():
    # LINUX_REBOOT_CMD_CAD_OFF: Ctrl-Alt-Del then signals init instead of rebooting. Never a reboot.
    checked(libc.reboot(0))


class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]


def settimeofday():
    now = Timeval()
    checked(libc.gettimeofday(ctypes.byref(now), None))
    checked(libc.settimeofday(ctypes.byref(now), None))


def clock_settime():
    time.clock_settime_ns(time.CLOCK_REALTIME, time.clock_gettime_ns(time.CLOCK_REALTIME))


def sethostname():
    socket.sethostname(socket.gethostname())


# The outside process's settings, each set to what it is: the kernel asks who may change another's
# before it looks at the value, and nothing changes should one pass.
def rlimit():
    resource.prlimit(target, resource.RLIMIT_NOFILE, tuple(params["nofile"]))


def nice():
    os.setpriority(os.PRIO_PROCESS, target, os.getpriority(os.PRIO_PROCESS, target))


def scheduler():
    os.sched_setscheduler(target, os.sched_getscheduler(target), os.sched_getparam(target))


def affinity():
    os.sched_setaffinity(target, os.sched_getaffinity(target))


def ioprio():
    get, set_ = params["ioprio"]
    # IOPRIO_WHO_PROCESS
    checked(libc.syscall(set_, 1, target, checked(libc.syscall(get, 1, target))))


def shadow():
    open("/etc/shadow", "rb").close()


def abstract():
    socket.socket(socket.AF_UNIX).connect("\0" + params["abstract"])


def docker():
    s = socket.socket(socket.AF_UNIX)
    s.connect("/var/run/docker.sock")
    s.sendall(b"GET /version HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
    if b" 200 " not in s.recv(4096).split(b"\r\n")[0]:
        raise OSError(errno.EPROTO, "")


for name in sys.argv[2:]:
    try:
        globals()[name]()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
"#;

/// The probes' parameters, for the test process as the outside process.
fn probe_params(abstract_name: &str) -> serde_json::Value {
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    serde_json::json!({
        "pid": std::process::id(),
        "nofile": [soft, hard],
        "ioprio": [nix::libc::SYS_ioprio_get, nix::libc::SYS_ioprio_set],
        "abstract": abstract_name,
    })
}

/// What each named probe got as `sb`'s command: `ok` or the errno's name.
async fn probe(sb: &AgentdSandbox, params: &serde_json::Value, names: &[&str]) -> BTreeMap<String, String> {
    let command = format!("python3 - '{params}' {} <<'PY'\n{PROBES}\nPY\n", names.join(" "));
    let r = run(sb, &command).await;
    let out = r.output.unwrap_or_default();
    assert_eq!(r.exit_code, 0, "{out}");
    out.lines().filter_map(|l| l.split_once(' ')).map(|(n, got)| (n.to_owned(), got.to_owned())).collect()
}

fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(n, got)| ((*n).to_owned(), (*got).to_owned())).collect()
}

/// agentd under the embedded default's profile (its roots, tmp, limits and mode) with `user =
/// "agentd"`: commands keep root and its capabilities, as every command of the embedded default did
/// before the sandbox user. The positive control.
async fn as_agentd() -> (Daemon, AgentdSandbox, DefaultProfile) {
    let workspace = tempfile::tempdir().unwrap();
    let profile = DefaultProfile::create(workspace.path()).unwrap();
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(profile.file()).unwrap()).unwrap();
    json["user"] = "agentd".into();
    std::fs::write(profile.file(), json.to_string()).unwrap();
    let daemon = Daemon::start_in(workspace, &["--profile", profile.file().to_str().unwrap()]);
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    (daemon, sb, profile)
}

/// An agentd started as `agentctl up` starts it: the embedded default, on a Unix socket in a private
/// directory, its token in a 0600 file there.
struct Session {
    child: Option<std::process::Child>,
    pid: u32,
    socket: String,
    token_file: PathBuf,
    workspace: tempfile::TempDir,
    sb: AgentdSandbox,
    _socket_dir: tempfile::TempDir,
    _profile: DefaultProfile,
}

impl Session {
    async fn start() -> Self {
        let workspace = tempfile::tempdir().unwrap();
        let profile = DefaultProfile::create(workspace.path()).unwrap();
        let socket_dir = socket_dir().unwrap();
        let token_file = socket_dir.path().join("token");
        let token = agentd_fakes::random_hex(32);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&token_file)
            .unwrap()
            .write_all(token.as_bytes())
            .unwrap();
        let (child, started) = spawn_agentd(
            workspace.path(),
            socket_dir.path(),
            Lifetime::TiedToParent,
            Some(&profile.file()),
            TokenSource::File(&token_file),
        )
        .unwrap();
        let sb = AgentdSandbox::connect(&started.url, Some(&token)).await.unwrap();
        Self {
            child: Some(child),
            pid: started.pid,
            socket: started.url.strip_prefix("unix:").unwrap().to_owned(),
            token_file,
            workspace,
            sb,
            _socket_dir: socket_dir,
            _profile: profile,
        }
    }

    /// SIGTERM, and the wait for agentd's exit.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ =
                nix::sys::signal::kill(agentd_tests::nix_pid(child.id()), nix::sys::signal::Signal::SIGTERM);
            let _ = child.wait();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop();
    }
}

fn owner(path: &Path) -> u32 {
    std::os::unix::fs::MetadataExt::uid(&std::fs::symlink_metadata(path).unwrap())
}

#[tokio::test]
async fn the_embedded_default_reports_the_user_it_runs_commands_as_and_lends_it_the_workspace() {
    if !as_root(ROOT) {
        return;
    }
    let mut session = Session::start().await;
    let id = sandbox_id(session.pid);
    let report = "echo x > made; id -u; id -g; id -G; \
                  grep -E '^(Cap(Inh|Prm|Eff|Amb)|NoNewPrivs):' /proc/self/status; readlink /proc/self/ns/ipc";
    let r = run(&session.sb, report).await;
    let e = r.enforcement.clone().unwrap();
    assert_eq!((e.profile.as_str(), e.privileges), ("local-default", Level::Full), "{r:?}");
    assert!(e.notes.iter().all(|n| !n.contains("privileges") && !n.contains("user")), "{e:?}");
    let out = r.output.unwrap();
    let (applied, ipc) = out.trim_end().rsplit_once('\n').unwrap();
    let none = "0000000000000000";
    assert_eq!(
        applied,
        format!(
            "{id}\n{id}\n{id}\nCapInh:\t{none}\nCapPrm:\t{none}\nCapEff:\t{none}\n\
             CapAmb:\t{none}\nNoNewPrivs:\t1"
        )
    );
    let own_ipc = std::fs::read_link("/proc/self/ns/ipc").unwrap();
    assert!(ipc.starts_with("ipc:[") && Path::new(ipc) != own_ipc, "{ipc}");
    // A setuid-root program gives nothing back: `mount` (setuid root here) stays the sandbox user.
    if std::fs::metadata("/usr/bin/mount")
        .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o4000 != 0)
    {
        let r = run(&session.sb, "mkdir -p m && /usr/bin/mount -t tmpfs none m; echo status=$?; grep -c \" $PWD/m \" /proc/self/mounts").await;
        let out = r.output.unwrap();
        assert!(!out.contains("status=0") && out.trim_end().ends_with('0'), "{out}");
    }
    // The workspace is the sandbox user's for agentd's life, and agentd's user's again after it.
    let (workspace, made) = (session.workspace.path().to_owned(), session.workspace.path().join("made"));
    assert_eq!((owner(&workspace), owner(&made)), (id, id));
    session.stop();
    assert_eq!((owner(&workspace), owner(&made)), (0, 0));

    // The same profile with `user = "agentd"`: root with its capabilities, reported as not requested.
    let (_daemon, control, _profile) = as_agentd().await;
    let r = run(&control, report).await;
    assert_eq!(r.enforcement.as_ref().map(|e| e.privileges), Some(Level::NotRequested), "{r:?}");
    let out = r.output.unwrap();
    assert!(out.starts_with("0\n0\n0\n") && !out.contains(&format!("CapEff:\t{none}")), "{out}");
}

#[tokio::test]
async fn a_command_cannot_reach_the_docker_engine() {
    if !as_root(ROOT) {
        return;
    }
    if !Path::new("/var/run/docker.sock").exists() {
        skip(Need::Docker, "no /var/run/docker.sock");
        return;
    }
    let params = probe_params("");
    let sb = LocalSandbox::start().await.unwrap();
    assert_eq!(probe(sb.agentd(), &params, &["docker"]).await, expect(&[("docker", "EACCES")]));
    let (_daemon, control, _profile) = as_agentd().await;
    assert_eq!(probe(&control, &params, &["docker"]).await, expect(&[("docker", "ok")]));
}

#[tokio::test]
async fn a_command_cannot_reach_another_session_nor_read_a_token() {
    if !as_root(ROOT) {
        return;
    }
    let a = Session::start().await;
    let b = Session::start().await;
    let c = LocalSandbox::start().await.unwrap();
    let c_socket = c.url().strip_prefix("unix:").unwrap().to_owned();
    let tcp = Daemon::start();
    let tcp_addr = tcp.url.strip_prefix("ws://").unwrap().to_owned();
    let script = script(a.workspace.path());
    let upgrade = |kind: &str, addr: &str, extra: &str| {
        format!("python3 {script} {kind} {addr} {extra} 2>&1 | tail -n 1")
    };

    // Every local session's socket is in a directory only root may enter: A's own, B's (`agentctl
    // up`'s kind), C's (`LocalSandbox`'s).
    for socket in [&b.socket, &c_socket, &a.socket] {
        let out = output(&a.sb, &upgrade("unix", socket, "")).await;
        assert!(out.contains("PermissionError"), "{socket}: {out}");
    }
    let out = output(&a.sb, &upgrade("tcp", &tcp_addr, "")).await;
    assert_eq!(out.trim(), "HTTP/1.1 401 Unauthorized");
    // Wherever a token is: in a session's file, or in its agentd's memory.
    let tokens = [
        b.token_file.clone(),
        a.token_file.clone(),
        PathBuf::from(format!("/proc/{}/environ", b.pid)),
        PathBuf::from(format!("/proc/{}/environ", c.pid())),
        PathBuf::from(format!("/proc/{}/environ", a.pid)),
        PathBuf::from(format!("/proc/{}/mem", c.pid())),
    ];
    for file in &tokens {
        let out = output(&a.sb, &format!("cat {} 2>&1 >/dev/null; echo \"cat=$?\"", file.display())).await;
        assert!(out.contains("Permission denied") && out.ends_with("cat=1\n"), "{}: {out}", file.display());
    }

    // As root (`user = "agentd"`), the same command reads B's token and drives B with it.
    let (_daemon, control, _profile) = as_agentd().await;
    let bearer = format!("\"Authorization: Bearer $(cat {})\"", b.token_file.display());
    let out = output(&control, &upgrade("unix", &b.socket, &bearer)).await;
    assert_eq!(out.trim(), "HTTP/1.1 101 Switching Protocols", "{out}");
}

#[tokio::test]
async fn an_upgrade_without_the_token_from_outside_agentd_is_refused() {
    // The test process stands for any process outside agentd's tree (a container's, another user's
    // with access to the socket).
    let local = LocalSandbox::start().await.unwrap();
    let session = Session::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let token_of_session = std::fs::read_to_string(&session.token_file).unwrap();
    let sockets = [
        (local.url().strip_prefix("unix:").unwrap(), local.token()),
        (session.socket.as_str(), token_of_session.as_str()),
    ];
    for (socket, token) in sockets {
        assert_eq!(upgrade_from_here(&script, "unix", socket, &[]), "HTTP/1.1 401 Unauthorized");
        let wrong = format!("Authorization: Bearer {token}x");
        assert_eq!(upgrade_from_here(&script, "unix", socket, &[&wrong]), "HTTP/1.1 401 Unauthorized");
        let right = format!("Authorization: Bearer {token}");
        assert_eq!(upgrade_from_here(&script, "unix", socket, &[&right]), "HTTP/1.1 101 Switching Protocols");
    }
}

#[tokio::test]
async fn no_device_node_can_be_made_in_the_workspace() {
    if !as_root(ROOT) {
        return;
    }
    // /dev/loop0 (a disk's blocks) and /dev/kmsg, in the workspace and in the private tmp.
    let nodes = "mknod ./d b 7 0; echo \"d=$?\"; mknod ./c c 1 11; echo \"c=$?\"; \
                 mknod \"$TMPDIR/c\" c 1 11; echo \"tmp=$?\"";
    let sb = LocalSandbox::start().await.unwrap();
    let out = output(sb.agentd(), nodes).await;
    assert!(out.contains("d=1\n") && out.contains("c=1\n") && out.contains("tmp=1\n"), "{out}");
    assert!(!sb.workspace().join("d").exists() && !sb.workspace().join("c").exists());
    // Not even root makes one under a profile: landlock refuses it everywhere.
    let (daemon, control, _profile) = as_agentd().await;
    let out = output(&control, nodes).await;
    assert!(out.contains("d=1\n") && out.contains("c=1\n") && out.contains("tmp=1\n"), "{out}");
    assert!(!daemon.workspace.path().join("c").exists());
    // Without a profile, root does.
    let unconfined = LocalSandbox::start_unconfined().await.unwrap();
    let out =
        output(unconfined.agentd(), "mknod ./d b 7 0; echo \"d=$?\"; mknod ./c c 1 11; echo \"c=$?\"").await;
    assert_eq!(out, "d=0\nc=0\n");
    use std::os::unix::fs::FileTypeExt as _;
    let kind = |name: &str| std::fs::symlink_metadata(unconfined.workspace().join(name)).unwrap().file_type();
    assert!(kind("d").is_block_device() && kind("c").is_char_device());
}

#[tokio::test]
async fn a_command_has_none_of_roots_powers_over_the_machine_or_a_process_outside() {
    if !as_root(ROOT) {
        return;
    }
    let params = probe_params("");
    let sb = LocalSandbox::start().await.unwrap();
    let all = [
        "reboot",
        "settimeofday",
        "clock_settime",
        "sethostname",
        "rlimit",
        "nice",
        "scheduler",
        "affinity",
        "ioprio",
        "shadow",
    ];
    let refused = expect(&[
        ("reboot", "EPERM"),
        ("settimeofday", "EPERM"),
        ("clock_settime", "EPERM"),
        ("sethostname", "EPERM"),
        ("rlimit", "EPERM"),
        ("nice", "EPERM"),
        ("scheduler", "EPERM"),
        ("affinity", "EPERM"),
        ("ioprio", "EPERM"),
        ("shadow", "EACCES"),
    ]);
    assert_eq!(probe(sb.agentd(), &params, &all).await, refused);
    // Netlink: `up` for `down`, the same check (CAP_NET_ADMIN for any change), and nothing changes
    // should it pass.
    let out = output(sb.agentd(), "ip link set dev lo up 2>&1; echo \"ip=$?\"").await;
    assert!(out.contains("Operation not permitted") && out.ends_with("ip=2\n"), "{out}");

    // As root (`user = "agentd"`), the harmless ones pass: the attacks are real.
    let (_daemon, control, _profile) = as_agentd().await;
    let harmless = ["sethostname", "rlimit", "nice", "scheduler", "affinity", "ioprio", "shadow"];
    let passed: Vec<(&str, &str)> = harmless.iter().map(|n| (*n, "ok")).collect();
    assert_eq!(probe(&control, &params, &harmless).await, expect(&passed));
}

/// A System V shared memory segment of the test's, removed when dropped.
struct Segment(i32);

impl Segment {
    fn create() -> Self {
        // IPC_PRIVATE, IPC_CREAT | 0600.
        let make = "import ctypes; print(ctypes.CDLL(None).shmget(0, 4096, 0o1600))";
        let out = Command::new("python3").args(["-c", make]).output().unwrap();
        let id: i32 = String::from_utf8(out.stdout).unwrap().trim().parse().unwrap();
        assert!(id >= 0, "shmget failed: {}", String::from_utf8_lossy(&out.stderr));
        Self(id)
    }

    fn exists(&self) -> bool {
        let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
        table.lines().any(|l| l.split_whitespace().nth(1) == Some(&self.0.to_string()))
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm").args(["-m", &self.0.to_string()]).output();
    }
}

#[tokio::test]
async fn shared_memory_outside_cannot_be_removed() {
    if !as_root(ROOT) {
        return;
    }
    let segment = Segment::create();
    let remove = format!("ipcrm -m {} 2>&1; echo \"ipcrm=$?\"", segment.0);
    let sb = LocalSandbox::start().await.unwrap();
    let out = output(sb.agentd(), &remove).await;
    assert!(out.ends_with("ipcrm=1\n"), "{out}");
    assert!(segment.exists());
    let (_daemon, control, _profile) = as_agentd().await;
    assert_eq!(output(&control, &remove).await, "ipcrm=0\n");
    assert!(!segment.exists());
}

#[tokio::test]
async fn an_abstract_socket_outside_cannot_be_reached() {
    use std::os::linux::net::SocketAddrExt as _;
    let name = format!("agentd-walls-{}", agentd_fakes::random_hex(8));
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    let params = probe_params(&name);
    let sb = LocalSandbox::start().await.unwrap();
    let abi = run(sb.agentd(), "true").await.enforcement.map_or(0, |e| e.landlock_abi);
    if abi < 6 {
        skip(
            Need::Landlock,
            format!("abstract sockets are scoped from landlock ABI 6, the kernel has {abi}"),
        );
        return;
    }
    assert_eq!(probe(sb.agentd(), &params, &["abstract"]).await, expect(&[("abstract", "EPERM")]));
    let unconfined = LocalSandbox::start_unconfined().await.unwrap();
    assert_eq!(probe(unconfined.agentd(), &params, &["abstract"]).await, expect(&[("abstract", "ok")]));
}

/// The file verbs, transfers and an offload's capture file of the embedded default reach what its
/// commands reach and no more (before, they wrote to the host's `/` as root): outside the writable
/// roots nothing is made, changed or removed, and what only root may read stays unread. Inside, what
/// they make is the sandbox user's, so a command can change it. Without a profile the same calls go
/// through (the control).
#[tokio::test]
async fn the_file_verbs_reach_what_a_command_reaches_and_no_more() {
    use agentd_host::BaseSandbox as _;
    if !as_root(ROOT) {
        return;
    }
    let outside = tempfile::tempdir().unwrap();
    std::fs::set_permissions(outside.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let kept = outside.path().join("kept.txt");
    std::fs::write(&kept, "original\n").unwrap();
    let path = |name: &str| outside.path().join(name).to_string_lossy().into_owned();
    let kept_path = kept.to_string_lossy().into_owned();

    let sb = LocalSandbox::start().await.unwrap();
    let id = sandbox_id(sb.pid());
    let refused = |error: Option<String>, what: &str| {
        let error = error.unwrap_or_else(|| panic!("{what} went through"));
        assert!(
            error.contains("permission_denied") || error.contains("Permission denied"),
            "{what}: {error}"
        );
    };
    refused(sb.write(&path("written.txt"), "x").await.unwrap().error, "write outside");
    refused(sb.write("/agentd-wall-test.txt", "x").await.unwrap().error, "write to /");
    refused(sb.edit(&kept_path, "original", "changed", false).await.unwrap().error, "edit outside");
    refused(sb.delete(&kept_path).await.unwrap().error, "delete outside");
    let up = sb.upload_files(&[(path("uploaded.bin"), b"x".to_vec())]).await.unwrap();
    refused(up[0].error.clone(), "upload outside");
    refused(sb.read("/etc/shadow", 0, 10).await.unwrap().error, "read /etc/shadow");
    let down = sb.download_files(&["/etc/shadow".to_owned()]).await.unwrap();
    refused(down[0].error.clone(), "download /etc/shadow");
    let offload = sb
        .execute_with_offload(&agentd_host::OffloadRequest::new(
            "echo ran > $TMPDIR/../ran; echo out",
            path("capture.txt"),
            1,
        ))
        .await;
    assert!(offload.is_err(), "an offload outside the roots ran: {offload:?}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "original\n");
    for name in ["written.txt", "uploaded.bin", "capture.txt"] {
        assert!(!outside.path().join(name).exists(), "{name} was made outside the roots");
    }
    assert!(!Path::new("/agentd-wall-test.txt").exists());

    // Inside the workspace: the sandbox user's, and a command changes what the verbs made.
    let ws = sb.workspace().to_owned();
    let inside = |name: &str| ws.join(name).to_string_lossy().into_owned();
    assert_eq!(sb.write(&inside("notes/a.txt"), "one\n").await.unwrap().error, None);
    let up = sb.upload_files(&[(inside("up.bin"), b"two\n".to_vec())]).await.unwrap();
    assert_eq!(up[0].error, None);
    let capture = inside("out/capture.txt");
    let offload =
        sb.execute_with_offload(&agentd_host::OffloadRequest::new("seq 1 2000", &capture, 10)).await.unwrap();
    assert!(offload.offloaded, "{offload:?}");
    for made in ["notes", "notes/a.txt", "up.bin", "out/capture.txt"] {
        assert_eq!(owner(&ws.join(made)), id, "{made}");
    }
    let r = sb
        .execute("echo more >> notes/a.txt && echo more >> up.bin && cat notes/a.txt up.bin", None)
        .await
        .unwrap();
    assert_eq!(r.output, "one\nmore\ntwo\nmore\n", "{r:?}");
    assert_eq!(sb.edit(&inside("notes/a.txt"), "one", "ONE", false).await.unwrap().error, None);
    drop(sb);

    // The control: without a profile, the same write goes through (as root).
    let open = LocalSandbox::start_unconfined().await.unwrap();
    assert_eq!(open.write(&path("written.txt"), "x").await.unwrap().error, None);
    assert!(outside.path().join("written.txt").exists());
}

/// A writable root beneath a directory the sandbox user cannot search (root's home, a 0700 temp
/// dir) is lent in vain: every report says so, rather than leaving commands to meet "Permission
/// denied" unexplained.
#[tokio::test]
async fn a_writable_root_the_sandbox_user_cannot_reach_is_reported() {
    if !as_root(ROOT) {
        return;
    }
    let closed = tempfile::tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let root = closed.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let config = tempfile::tempdir().unwrap();
    let profile = config.path().join("p.toml");
    std::fs::write(&profile, format!("name = \"closed\"\nwritable_roots = [\"{}\"]\n", root.display()))
        .unwrap();
    let daemon = Daemon::start_with(&["--profile", profile.to_str().unwrap()]);
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let r = run(&sb, &format!("echo x > {}/f", root.display())).await;
    let notes = r.enforcement.unwrap().notes;
    assert!(notes.iter().any(|n| n.contains("not searchable by the sandbox user")), "{notes:?}");
    assert_ne!(r.exit_code, 0, "{:?}", r.output);
}
