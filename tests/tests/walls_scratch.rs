//! agentd's own directory and what it holds, and what agentd inherits, each tried as the attack that
//! got through (issue 47):
//! - names planted in the temp dir for the next pids (links to a directory of the attacker's
//!   choosing, directories of another user) caught a later root agentd's journals there;
//! - a command of another session (another sandbox user) read a kept process's journal and a
//!   running exec's spilled capture; a confined command of agentd's own user read its agentd's;
//! - a descriptor agentd (or `agentctl exec`, which starts one) inherited reached commands: under
//!   `network = "deny"` a command wrote to an inherited TCP socket and appended to a root 0600 file
//!   outside its roots.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agentd_host::AgentdSandbox;
use agentd_host::adapters::local::{DefaultProfile, Lifetime, TokenSource, socket_dir, spawn_agentd};
use agentd_protocol::{ExecRequest, ExecResult};
use agentd_tests::{Daemon, Need, as_root, binary, run, skip};

/// Why these tests need root.
const ROOT: &str = "the sandbox users and the planted names of another user are root's to make";

/// Output past what a capture holds in memory (64 KiB), so it is spilled to a file.
const SPILLED: &str = "head -c 200000 /dev/zero | tr '\\0' x; echo";

/// A kept process that spills its output to its journal, and has ended.
async fn kept_with_journal(sb: &AgentdSandbox) -> ExecResult {
    let request = ExecRequest {
        command: SPILLED.to_owned(),
        keep: Some(60.0),
        timeout: Some(30.0),
        ..ExecRequest::default()
    };
    let r = sb.exec(request, None).await.unwrap();
    assert_eq!(
        (r.exit_code, r.output.as_ref().map(String::len)),
        (0, Some(200_001)),
        "{:?}",
        r.capture_error
    );
    r
}

/// The files agentd `pid` holds open whose names start with one of `prefixes`.
fn open_files(pid: u32, prefixes: &[&str]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| prefixes.iter().any(|prefix| name.starts_with(prefix)))
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Everything below `dir`, links not followed.
fn entries_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            found.extend(entries_below(&path));
        }
        found.push(path);
    }
    found
}

fn read_number(path: &str) -> u32 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

/// Names planted for this many pids after the last one given: more than the machine starts while
/// the test plants them and starts agentd.
const PLANTED: u32 = 4000;

#[tokio::test]
async fn names_planted_for_the_next_pids_catch_nothing_of_a_root_agentd() {
    if !as_root(ROOT) {
        return;
    }
    // The temp dir agentd is given, which its commands may write (a writable root, as `/tmp` is in
    // the README's example profile), and the directory the attacker wants root's files in.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let target = tempfile::tempdir().unwrap();
    let pid_max = read_number("/proc/sys/kernel/pid_max");
    let last = read_number("/proc/sys/kernel/ns_last_pid");
    let pids: Vec<u32> = (1..=PLANTED).map(|i| (last + i) % pid_max).filter(|&pid| pid > 300).collect();
    let mut planted_dirs = Vec::new();
    for &pid in &pids {
        let name = tmp.path().join(format!("agentd-{pid}"));
        // Links for some pids, directories another user made (as a sandbox user can) for the rest.
        if pid % 2 == 0 {
            std::os::unix::fs::symlink(target.path(), &name).unwrap();
        } else {
            std::fs::create_dir(&name).unwrap();
            std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o777)).unwrap();
            nix::unistd::chown(&name, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            planted_dirs.push(name);
        }
    }
    let workspace = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let profile = config.path().join("planted.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"planted\"\nwritable_roots = [{:?}, {:?}]\n",
            workspace.path().to_str().unwrap(),
            tmp.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let env = format!("TMPDIR={}", tmp.path().display());
    let daemon = Daemon::launch(&["env", &env], workspace, &["--profile", profile.to_str().unwrap()], None);
    assert!(pids.contains(&daemon.pid()), "agentd's pid {} is not among those planted", daemon.pid());
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();

    // agentd works: a kept process's journal and a spilled inline capture.
    kept_with_journal(&sb).await;
    let r = run(&sb, SPILLED).await;
    assert_eq!(r.output.as_ref().map(String::len), Some(200_001));
    let journals = open_files(daemon.pid(), &["journal-"]);
    assert!(!journals.is_empty(), "agentd holds no journal");
    let scratch = journals[0].parent().unwrap().to_owned();

    // Nothing landed where the attacker pointed, nor in a directory it made.
    let landed: Vec<PathBuf> = std::iter::once(target.path().to_owned())
        .chain(planted_dirs.iter().cloned())
        .flat_map(|dir| entries_below(&dir))
        .collect();
    assert!(landed.is_empty(), "agentd wrote into planted places: {landed:?}");
    // Its directory is its own, private, and not in the temp dir commands may write.
    let meta = std::fs::symlink_metadata(&scratch).unwrap();
    assert!(meta.is_dir() && !meta.file_type().is_symlink());
    assert_eq!((std::os::unix::fs::MetadataExt::uid(&meta), meta.permissions().mode() & 0o7777), (0, 0o700));
    assert!(!scratch.starts_with(tmp.path()), "{} is under a writable root", scratch.display());
    // (An exec's journal may go meanwhile; the kept process's stays.)
    let modes: Vec<u32> = journals
        .iter()
        .filter_map(|j| std::fs::metadata(j).ok())
        .map(|m| m.permissions().mode() & 0o7777)
        .collect();
    assert!(!modes.is_empty() && modes.iter().all(|&mode| mode == 0o600), "{modes:?}");
    drop(sb);
    drop(daemon);
    assert!(!scratch.exists(), "{} is left behind", scratch.display());
}

/// An agentd started as `agentctl up` starts it (the embedded default, its sandbox user).
struct Session {
    child: std::process::Child,
    pid: u32,
    sb: std::sync::Arc<AgentdSandbox>,
    _workspace: tempfile::TempDir,
    _socket_dir: tempfile::TempDir,
    _profile: DefaultProfile,
}

impl Session {
    async fn start(user: Option<&str>) -> Self {
        let workspace = tempfile::tempdir().unwrap();
        let profile = DefaultProfile::create(workspace.path()).unwrap();
        if let Some(user) = user {
            let mut json: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(profile.file()).unwrap()).unwrap();
            json["user"] = user.into();
            std::fs::write(profile.file(), json.to_string()).unwrap();
        }
        let socket_dir = socket_dir().unwrap();
        let token = agentd_fakes::random_hex(32);
        let (child, started) = spawn_agentd(
            workspace.path(),
            socket_dir.path(),
            Lifetime::TiedToParent,
            Some(&profile.file()),
            TokenSource::Env(&token),
        )
        .unwrap();
        let sb = std::sync::Arc::new(AgentdSandbox::connect(&started.url, Some(&token)).await.unwrap());
        Self {
            child,
            pid: started.pid,
            sb,
            _workspace: workspace,
            _socket_dir: socket_dir,
            _profile: profile,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ =
            nix::sys::signal::kill(agentd_tests::nix_pid(self.child.id()), nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

/// `cat` of each file from a command of `sb`: what it printed and its status, per file.
async fn cat_each(sb: &AgentdSandbox, files: &[PathBuf]) -> String {
    let mut out = String::new();
    for file in files {
        let r = run(sb, &format!("cat {} 2>&1 | head -c 300; echo \" cat=$?\"", file.display())).await;
        out.push_str(&format!("{}: {}", file.display(), r.output.unwrap()));
    }
    out
}

/// A's kept process's journal and its running exec's spilled capture, as agentd A holds them.
async fn journal_and_capture(a: &Session) -> (Vec<PathBuf>, tokio::task::JoinHandle<()>) {
    kept_with_journal(&a.sb).await;
    // Runs on while B looks: its capture file is open in agentd A.
    let sb = std::sync::Arc::clone(&a.sb);
    let running = tokio::spawn(async move {
        let _ = run(&sb, &format!("{SPILLED}; sleep 20")).await;
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let files = open_files(a.pid, &["journal-", "capture-"]);
        if files.len() == 2 {
            return (files, running);
        }
        assert!(std::time::Instant::now() < deadline, "agentd {} holds {files:?}", a.pid);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_command_of_another_session_cannot_read_a_journal_or_a_capture() {
    if !as_root(ROOT) {
        return;
    }
    let a = Session::start(None).await;
    let b = Session::start(None).await;
    let (files, running) = journal_and_capture(&a).await;
    let out = cat_each(&b.sb, &files).await;
    running.abort();
    // `cat` fails (the pipe's status is `head`'s: the text says it), and nothing of A's shows.
    assert!(!out.contains("xxxx"), "B read A's output: {out}");
    assert_eq!(out.matches("Permission denied").count(), 2, "{out}");
    for file in &files {
        assert_eq!(
            std::fs::metadata(file).unwrap().permissions().mode() & 0o7777,
            0o600,
            "{}",
            file.display()
        );
        let dir = std::fs::metadata(file.parent().unwrap()).unwrap();
        assert_eq!(dir.permissions().mode() & 0o7777, 0o700, "{}", file.display());
    }
}

#[tokio::test]
async fn a_confined_command_of_agentds_own_user_cannot_read_its_agentds_journal() {
    if !as_root(ROOT) {
        return;
    }
    // `user = "agentd"`: commands are root, as agentd is; only landlock keeps them out.
    let a = Session::start(Some("agentd")).await;
    let r = run(&a.sb, "true").await;
    if r.enforcement.is_none_or(|e| e.landlock_abi == 0) {
        skip(Need::Landlock, "no landlock on this kernel");
        return;
    }
    let (files, running) = journal_and_capture(&a).await;
    let out = cat_each(&a.sb, &files).await;
    running.abort();
    assert!(!out.contains("xxxx"), "a command read its agentd's files: {out}");
    assert_eq!(out.matches("Permission denied").count(), 2, "{out}");
}

/// Descriptors 50 (a loopback TCP connection whose other end the test holds) and 51 (a root 0600
/// file outside every root, open for appending) for a process about to start.
struct Inherited {
    peer: std::net::TcpStream,
    sent: std::net::TcpStream,
    file: std::fs::File,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Inherited {
    fn new() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sent = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        peer.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("root-only");
        let file = std::fs::OpenOptions::new().append(true).create_new(true).mode(0o600).open(&path).unwrap();
        Self { peer, sent, file, path, _dir: dir }
    }

    /// `command` gets them as descriptors 50 and 51 (`dup2` clears close-on-exec on the copies only,
    /// in the child: no other process the test starts meanwhile gets them).
    fn give(&self, command: &mut Command) {
        let (socket, file) = (self.sent.as_raw_fd(), self.file.as_raw_fd());
        // SAFETY: dup2 is async-signal-safe and touches no memory.
        unsafe {
            command.pre_exec(move || {
                for (from, to) in [(socket, 50), (file, 51)] {
                    if libc::dup2(from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// What reached the other end of the socket and the file.
    fn arrived(&mut self) -> (String, String) {
        let mut got = [0u8; 256];
        let socket = match self.peer.read(&mut got) {
            Ok(n) => String::from_utf8_lossy(&got[..n]).into_owned(),
            Err(_) => String::new(),
        };
        (socket, std::fs::read_to_string(&self.path).unwrap())
    }
}

/// Writes to descriptors 50 and 51 (python3: dash names no descriptor above 9) and reopens them
/// through `/proc/self/fd` (a redirection that fails ends only its subshell); prints which
/// descriptors it has.
const WRITE_INHERITED: &str = "for n in 50 51; do python3 -c \"import os; os.write($n, b'leak-fd')\" 2>/dev/null; \
                               (echo leak-proc >> /proc/self/fd/$n) 2>/dev/null; done; ls /proc/self/fd | tr '\\n' ' '";

/// python3 is there to write to a descriptor by number (else the test says it is skipped).
fn python3() -> bool {
    let there = Command::new("python3").arg("-c").arg("").status().is_ok_and(|s| s.success());
    if !there {
        skip(Need::Python3, "no python3 to write to a descriptor by number");
    }
    there
}

#[tokio::test]
async fn a_command_cannot_use_what_agentd_inherited() {
    if !python3() {
        return;
    }
    let mut inherited = Inherited::new();
    let workspace = tempfile::tempdir().unwrap();
    let profile = workspace.path().join("deny.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"deny\"\nnetwork = \"deny\"\nwritable_roots = [{:?}]\n",
            workspace.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let token = agentd_fakes::random_hex(16);
    let mut command = Command::new(binary("agentd"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--profile", profile.to_str().unwrap()])
        .env("AGENTD_TOKEN", &token)
        .current_dir(workspace.path())
        .stdout(Stdio::piped());
    inherited.give(&mut command);
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
        .unwrap();
    let url = line.trim().strip_prefix("agentd listening on ").unwrap().to_owned();
    let daemon = Daemon { child, url, token, workspace, socket_dir: None };
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();

    let r = run(&sb, WRITE_INHERITED).await;
    let fds = r.output.clone().unwrap();
    assert_eq!(r.exit_code, 0, "{fds}");
    let agentd_fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    drop(sb);
    drop(daemon);
    assert_eq!(inherited.arrived(), (String::new(), String::new()), "descriptors: {fds}");
    assert!(!fds.split(' ').any(|fd| fd == "50" || fd == "51"), "the command has {fds}");
    assert!(!agentd_fds.iter().any(|fd| fd == "50" || fd == "51"), "agentd has {agentd_fds:?}");
}

#[test]
fn a_command_of_agentctl_exec_cannot_use_what_agentctl_inherited() {
    if !python3() {
        return;
    }
    let mut inherited = Inherited::new();
    let state = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary("agentctl"));
    command
        .env("AGENTCTL_SESSION", state.path().join("s.json"))
        .env_remove("AGENTD_URL")
        .env_remove("AGENTD_TOKEN")
        .args(["exec", "--", WRITE_INHERITED]);
    inherited.give(&mut command);
    let out = command.output().unwrap();
    let fds = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{fds} {}", String::from_utf8_lossy(&out.stderr));
    // The sent end is still open here: a write would be waiting to be read.
    inherited.sent.flush().unwrap();
    assert_eq!(inherited.arrived(), (String::new(), String::new()), "descriptors: {fds}");
    assert!(!fds.split(' ').any(|fd| fd == "50" || fd == "51"), "the command has {fds}");
}
