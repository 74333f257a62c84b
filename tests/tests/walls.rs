//! The walls around agentd, each tried as the attack that got through it before: a request that
//! loosens the profile through `..` or a symlink, a command that drives its own agentd, a web page
//! that opens a websocket to it, a TCP listener without a token.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use agentd_host::{AgentdSandbox, SandboxError};
use agentd_protocol::profile::ProfileOverride;
use agentd_protocol::{ErrorCode, ExecRequest};
use agentd_tests::{Daemon, PidsCap};

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
    // root only.
    std::fs::create_dir(w.join("sub")).unwrap();
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
    // Wherever they ended up, in the cap or not.
    let sleeps = agentd_tests::processes_named("sleep 1010").len();
    assert!(sleeps >= 1, "the command started nothing: {r:?}");
    assert!(sleeps < CEILING as usize, "{sleeps} sleeps in a cgroup capped at {CEILING}");
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
    assert!(r.timed_out, "{r:?}");
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
