//! The host side's walls, each tried as the attack that got through it (issue 47): the harness's
//! secrets in its environment reaching every command of the embedded default; `agentctl`'s session
//! files rewritten by a command when the workspace is `$HOME`, after which `agentctl down` (root)
//! killed a pid and removed a directory of the command's choosing and `agentctl exec` sent a
//! root-only file as the bearer token to the command's own listener; and `agentctl --token`, which
//! every process of the machine could read in `/proc/*/cmdline`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use agentd_tests::{Daemon, Need, binary, skip};

/// The secrets a harness holds in its environment (fake values, each one unique).
const SECRETS: &[(&str, &str)] = &[
    ("ANTHROPIC_API_KEY", "sk-ant-fake-4c1d"),
    ("OPENAI_API_KEY", "sk-openai-fake-77e0"),
    ("DAYTONA_API_KEY", "dtn-fake-9a2b"),
    ("MODAL_TOKEN_SECRET", "as-modal-fake-51f3"),
    ("AWS_SECRET_ACCESS_KEY", "aws-fake-secret-0d8e"),
    ("GITHUB_TOKEN", "ghp-fake-6b47"),
];

/// agentctl with the harness's environment: the secrets, a locale, and what it needs; the session
/// in `session` (never the machine's `~/.agentd`).
fn agentctl(session: &Path) -> Command {
    let mut command = Command::new(binary("agentctl"));
    command
        .env("AGENTCTL_SESSION", session)
        .env_remove("AGENTD_URL")
        .env_remove("AGENTD_TOKEN")
        .envs(SECRETS.iter().copied())
        .env("LANG", "C.UTF-8")
        .env("AWS_REGION", "eu-north-1")
        .env("PROJECT_SETTING", "plain-value");
    command
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The environment a command sees, as `NAME=VALUE` lines.
fn env_of(out: &Output) -> Vec<String> {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}{stderr}");
    stdout.lines().map(str::to_owned).collect()
}

fn has(env: &[String], name: &str) -> Option<String> {
    env.iter().find_map(|line| line.strip_prefix(&format!("{name}=")).map(str::to_owned))
}

/// (4) Secrets in agentctl's environment reach no command of the private sandbox (a
/// `LocalSandbox`) nor of an `up` session, nor that agentd's own environment; the minimal set does,
/// and so does what the caller names.
#[test]
fn harness_secrets_stay_out_of_the_embedded_default() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("session.json");

    let out = agentctl(&session).args(["exec", "--", "env"]).output().unwrap();
    let env = env_of(&out);
    for (name, value) in SECRETS {
        assert!(!env.iter().any(|line| line.contains(value)), "{name} reached the command: {env:?}");
    }
    assert_eq!(has(&env, "PROJECT_SETTING"), None, "{env:?}");
    assert_eq!(has(&env, "LANG").as_deref(), Some("C.UTF-8"), "{env:?}");
    assert!(has(&env, "PATH").is_some_and(|path| path.contains("/usr/bin")), "{env:?}");
    assert!(has(&env, "HOME").is_some(), "{env:?}");

    // Named: by name (a secret-looking one only so), or by a prefix (which passes no secret).
    let out = agentctl(&session)
        .args(["--pass-env", "PROJECT_SETTING", "--pass-env", "AWS_*", "exec", "--env", "GITHUB_TOKEN"])
        .args(["--", "env"])
        .output()
        .unwrap();
    let env = env_of(&out);
    assert_eq!(has(&env, "PROJECT_SETTING").as_deref(), Some("plain-value"), "{env:?}");
    assert_eq!(has(&env, "AWS_REGION").as_deref(), Some("eu-north-1"), "{env:?}");
    assert_eq!(has(&env, "GITHUB_TOKEN").as_deref(), Some("ghp-fake-6b47"), "{env:?}");
    assert_eq!(has(&env, "AWS_SECRET_ACCESS_KEY"), None, "{env:?}");
    assert_eq!(has(&env, "ANTHROPIC_API_KEY"), None, "{env:?}");

    // An `up` session: its commands, and its agentd's own environment.
    let up = agentctl(&session).arg("up").output().unwrap();
    assert!(up.status.success(), "{:?}", text(&up));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&session).unwrap()).unwrap();
    let pid = saved["pid"].as_u64().unwrap();
    let _down = Down(session.clone());
    let env = env_of(&agentctl(&session).args(["exec", "--", "env"]).output().unwrap());
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    for (name, value) in SECRETS {
        assert!(!env.iter().any(|line| line.contains(value)), "{name} reached the command: {env:?}");
        assert!(!environ.contains(value), "{name} is in agentd's environment");
    }
    assert!(has(&env, "PATH").is_some() && has(&env, "LANG").is_some(), "{env:?}");
}

/// `agentctl down` when dropped, so a failed test leaves no agentd.
struct Down(std::path::PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(binary("agentctl")).env("AGENTCTL_SESSION", &self.0).arg("down").output();
    }
}

/// A process the attack names: it must outlive every `agentctl` call.
struct Decoy(std::process::Child);

impl Decoy {
    fn start() -> Self {
        Self(Command::new("sleep").arg("60").spawn().unwrap())
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Ends the agentd of an `up` that should not have started, by the pid it printed.
struct Stray(Option<i32>);

impl Drop for Stray {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            for _ in 0..500 {
                if nix::sys::signal::kill(pid, None).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// What the attack's listener got: the upgrade's header lines of each connection.
fn listen(socket: &Path) -> std::sync::mpsc::Receiver<String> {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut got = vec![0; 4096];
            let n = stream.read(&mut got).unwrap_or(0);
            if tx.send(String::from_utf8_lossy(&got[..n]).into_owned()).is_err() {
                return;
            }
        }
    });
    rx
}

/// The forged session a command writes: our listener, a root-only file as the token, the decoy's
/// pid, and a directory outside every root to remove.
fn forged(socket: &Path, secret: &Path, pid: u32, outside: &Path) -> String {
    serde_json::json!({
        "url": format!("unix:{}", socket.display()),
        "token_file": secret,
        "pid": pid,
        "workspace": outside,
        "owns_workspace": true,
        "private_dirs": [outside],
    })
    .to_string()
}

/// (8) The workspace is `$HOME`, so `~/.agentd` would be lent to the sandbox user: a command
/// rewrites the session file, then `agentctl exec` and `agentctl down` (root) run. Nothing of the
/// command's choosing is signalled, removed or sent. And a session file agentctl did not write
/// alone (another user's, a symlink) is refused, not acted on.
#[test]
fn a_command_cannot_steer_agentctl_through_its_session_files() {
    if !nix::unistd::geteuid().is_root() {
        skip(Need::Root, "the sandbox user (to whom the workspace is lent) is root's");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "root's").unwrap();
    let vault = tempfile::tempdir().unwrap();
    let secret = vault.path().join("root-only");
    std::fs::write(&secret, "root-secret-3e9f").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let listening = tempfile::tempdir().unwrap();
    std::fs::set_permissions(listening.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = listening.path().join("evil.sock");
    let heard = listen(&socket);
    let mut decoy = Decoy::start();
    let forged = forged(&socket, &secret, decoy.0.id(), outside.path());

    let in_home = || {
        let mut command = Command::new(binary("agentctl"));
        command
            .env_remove("AGENTCTL_SESSION")
            .env_remove("AGENTD_URL")
            .env_remove("AGENTD_TOKEN")
            .env("HOME", &home_path)
            .args(["--connect-deadline", "2"]);
        command
    };
    let up = in_home().args(["up", "--workspace"]).arg(&home_path).output().unwrap();
    let mut stray = Stray(None);
    if up.status.success() {
        let saved = std::fs::read_to_string(home_path.join(".agentd/session.json")).unwrap();
        let saved: serde_json::Value = serde_json::from_str(&saved).unwrap();
        stray.0 = saved["pid"].as_i64().and_then(|pid| i32::try_from(pid).ok());
        let rewrite =
            "cd ~/.agentd && rm -f session.json && printf %s \"$FORGED\" > session.json; echo rc=$?";
        let out =
            in_home().args(["exec", "--env", &format!("FORGED={forged}"), "--", rewrite]).output().unwrap();
        eprintln!("the command's rewrite: {:?}", text(&out));
    } else {
        let (_, stderr) = text(&up);
        assert!(stderr.contains("inside the workspace"), "{stderr}");
        assert!(!home_path.join(".agentd").exists(), "up made its directory in the workspace");
    }
    let _ = in_home().args(["exec", "--", "true"]).output().unwrap();
    let _ = in_home().arg("down").output().unwrap();
    drop(stray);
    let mut no_harm = |after: &str| {
        assert!(decoy.alive(), "{after}: agentctl killed a pid the command chose");
        assert!(
            outside.path().join("keep").exists(),
            "{after}: agentctl removed a directory the command chose"
        );
        let sent: Vec<String> = heard.try_iter().collect();
        assert!(
            !sent.iter().any(|request| request.contains("root-secret-3e9f")),
            "{after}: the root-only file was sent as the token: {sent:?}"
        );
        assert!(sent.is_empty(), "{after}: agentctl connected to the command's listener: {sent:?}");
    };
    no_harm("workspace $HOME");

    // A session file elsewhere that agentctl did not write alone: another user's, then a symlink.
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("session.json");
    let planted = state.path().join("planted.json");
    for how in ["foreign", "symlink"] {
        let _ = std::fs::remove_file(&session);
        match how {
            "foreign" => {
                std::fs::write(&session, &forged).unwrap();
                std::fs::set_permissions(&session, std::fs::Permissions::from_mode(0o600)).unwrap();
                let other = agentd_protocol::profile::sandbox_id(7);
                std::os::unix::fs::chown(&session, Some(other), Some(other)).unwrap();
            }
            _ => {
                std::fs::write(&planted, &forged).unwrap();
                std::os::unix::fs::symlink(&planted, &session).unwrap();
            }
        }
        for verb in [&["exec", "--", "true"][..], &["down"]] {
            let out = Command::new(binary("agentctl"))
                .env("AGENTCTL_SESSION", &session)
                .args(["--connect-deadline", "2"])
                .args(verb)
                .output()
                .unwrap();
            let (_, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(125), "{how} {verb:?}: {stderr}");
            assert!(stderr.contains("does not use it"), "{how} {verb:?}: {stderr}");
        }
    }

    no_harm("a planted session file");
}

/// (13) A command scans every process's arguments for agentctl's token: `--token` is refused
/// (it is gone), and a connection with the token in `AGENTD_TOKEN` or `--token-file` works
/// while the scan finds nothing.
#[test]
fn agentctls_token_is_in_no_process_arguments() {
    let daemon = Daemon::start();
    let state = tempfile::tempdir().unwrap();
    let token_file = state.path().join("token");
    std::fs::write(&token_file, &daemon.token).unwrap();
    let scan =
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\"; echo; done 2>/dev/null; echo scanned";
    let run = |how: &str| {
        let mut command = Command::new(binary("agentctl"));
        command.env("AGENTCTL_SESSION", state.path().join("none.json")).env_remove("AGENTD_TOKEN");
        command.args(["--url", &daemon.url]);
        match how {
            "flag" => command.args(["--token", &daemon.token]),
            "env" => command.env("AGENTD_TOKEN", &daemon.token),
            _ => command.arg("--token-file").arg(&token_file),
        };
        command.args(["exec", "--", scan]).output().unwrap()
    };
    let flag = run("flag");
    let (stdout, stderr) = text(&flag);
    assert!(!stdout.contains(&daemon.token), "a command read the token in agentctl's arguments");
    assert_eq!(flag.status.code(), Some(2), "--token is still taken: {stdout}{stderr}");
    for how in ["env", "file"] {
        let out = run(how);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success() && stdout.contains("scanned"), "{how}: {stdout}{stderr}");
        assert!(!stdout.contains(&daemon.token), "{how}: a command read the token in process arguments");
    }
}

/// A tool on agentctl's `PATH` in a directory the sandbox user cannot search (a pyenv under root's
/// home) used to go missing for commands without a word: `status` names the directory.
#[test]
fn a_path_entry_commands_cannot_reach_is_named() {
    if !nix::unistd::geteuid().is_root() {
        skip(Need::Root, "the sandbox user, who cannot search root's directories, is root's");
        return;
    }
    let closed = tempfile::tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let tools = closed.path().join("bin");
    std::fs::create_dir(&tools).unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = agentctl(&state.path().join("none.json"))
        .env("PATH", format!("{}:/usr/bin:/bin", tools.display()))
        .arg("status")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let note = stdout.lines().find(|line| line.contains("note: PATH:")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(note.contains(&tools.display().to_string()) && note.contains("not searchable"), "{note}");
}
