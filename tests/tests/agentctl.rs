//! agentctl from the shell: a one-shot exec on the embedded default, a multi-step session (up,
//! upload, exec, download, down) against one local agentd, and `--sandbox KIND:SPEC` with
//! `sandbox ls|rm` across kinds (Docker tests skip, see [`agentd_tests::skip`], without the engine
//! or the images `images/build.sh` builds).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::process::Command;

use agentd_tests::agentctl::agentctl_in as agentctl;
use agentd_tests::binary;

/// Runs `command`, which must succeed; returns its output.
fn succeed(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{:?} failed: {}", command, String::from_utf8_lossy(&out.stderr));
    out
}

/// An `agentctl up` session, taken down when dropped: also when the test fails half-way, so its
/// agentd (and what it kept running) never outlives the test.
struct Up(Option<std::path::PathBuf>);

impl Up {
    fn start(session: &std::path::Path) -> Self {
        succeed(agentctl(session).arg("up"));
        Self(Some(session.to_owned()))
    }

    /// `agentctl down`, which must succeed.
    fn down(mut self) {
        if let Some(session) = self.0.take() {
            succeed(agentctl(&session).arg("down"));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(session) = self.0.take() {
            let _ = agentctl(&session).arg("down").output();
        }
    }
}

#[test]
fn one_shot_exec_prints_output_and_exits_with_the_code() {
    let state = tempfile::tempdir().unwrap();
    let out = agentctl(&state.path().join("s.json"))
        .args(["exec", "--", "echo hello; echo err >&2; exit 5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\nerr\n");
    let out = agentctl(&state.path().join("s.json"))
        .args(["--json", "exec", "--timeout", "0.3", "--env", "A=b", "--", "echo $A; sleep 5"])
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((result["timed_out"].as_bool(), result["output"].as_str()), (Some(true), Some("b\n")));
    assert_eq!(out.status.code(), Some(143));
}

#[test]
fn up_upload_exec_download_down() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("session.json");
    succeed(agentctl(&session).arg("up"));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&session).unwrap()).unwrap();
    let pid = saved["pid"].as_u64().unwrap();

    let local = state.path().join("in.txt");
    std::fs::write(&local, b"line one\nline two\n").unwrap();
    succeed(agentctl(&session).args(["upload", local.to_str().unwrap(), "data/in.txt"]));
    succeed(agentctl(&session).args(["exec", "--", "wc -l < data/in.txt > data/count.txt"]));
    let back = state.path().join("count.txt");
    succeed(agentctl(&session).args(["download", "data/count.txt", back.to_str().unwrap()]));
    assert_eq!(std::fs::read_to_string(&back).unwrap().trim(), "2");
    let out = agentctl(&session)
        .args(["--json", "download", "data/missing", back.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("file_not_found"));
    assert_eq!(
        std::fs::read_to_string(&back).unwrap().trim(),
        "2",
        "a failed download must not touch the file"
    );

    // The session file holds no secret, and a command that uses it to drive its own agentd (the
    // attack: read ~/.agentd/session.json, connect, write outside the profile's roots) is refused.
    let text = std::fs::read_to_string(&session).unwrap();
    assert!(saved["url"].as_str().unwrap().starts_with("unix:") && saved.get("token").is_none(), "{text}");
    let token = std::fs::read_to_string(saved["token_file"].as_str().unwrap()).unwrap();
    assert!(!text.contains(token.trim()), "{text}");
    let outside = tempfile::tempdir().unwrap();
    let planted = outside.path().join("planted");
    let inner = format!(
        "AGENTCTL_SESSION={} {} write {} < /dev/null; echo inner=$?",
        session.display(),
        binary("agentctl").display(),
        planted.display()
    );
    let out = succeed(agentctl(&session).args(["exec", "--", &inner]));
    let printed = String::from_utf8_lossy(&out.stdout);
    // The session file and the token file are out of the command's reach (the sandbox user's, and
    // withheld); without the token agentd refuses the upgrade.
    assert!(printed.contains("Permission denied") && printed.contains("inner=125"), "{printed}");
    assert!(!planted.exists());

    succeed(agentctl(&session).arg("down"));
    assert!(!session.exists());
    let workspace = saved["workspace"].as_str().unwrap();
    assert!(!std::path::Path::new(workspace).exists());
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(stat.is_empty() || stat.contains(") Z"), "agentd {pid} still running");
}

/// Runs `command`, which must fail as agentctl's own failure (125); returns its stderr.
fn fail_125(command: &mut Command) -> String {
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(125), "{command:?}: {stderr}");
    stderr
}

#[test]
fn sandbox_local_runs_a_private_agentd_for_the_command() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("s.json");
    let out = agentctl(&session)
        .args(["--sandbox", "local", "exec", "--cwd", "/tmp", "--env", "A=b c", "--"])
        .arg("echo \"$A\" \"$PWD\"; exit 7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b c /tmp\n");
    let out = succeed(agentctl(&session).args(["--sandbox", "local", "status"]));
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.starts_with("local: ") && status.contains(" workspace "), "{status}");
    // The private agentd of each command is gone with it: its workspace (a temporary directory) too.
    let workspace = status.split(" workspace ").nth(1).unwrap().split(' ').next().unwrap();
    assert!(!std::path::Path::new(workspace).exists(), "{workspace} outlived the command");
    assert!(!session.exists(), "--sandbox local must not start or record a session");
}

#[test]
fn sandbox_specs_that_cannot_be_used_fail_with_the_reason() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("s.json");
    let stderr = fail_125(agentctl(&session).args(["--sandbox", "daytona:x", "exec", "--", "true"]));
    assert!(stderr.contains("DAYTONA_API_KEY") || stderr.contains("`daytona` feature"), "{stderr}");
    let mut no_modal_token = agentctl(&session);
    no_modal_token
        .env_remove("MODAL_TOKEN_ID")
        .env_remove("MODAL_TOKEN_SECRET")
        .env("MODAL_CONFIG_PATH", state.path().join("no-modal.toml"))
        .args(["--sandbox", "modal:x", "exec", "--", "true"]);
    let stderr = fail_125(&mut no_modal_token);
    assert!(stderr.contains("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"), "{stderr}");
    let stderr = fail_125(agentctl(&session).args(["--sandbox", "fly:x", "exec", "--", "true"]));
    assert!(stderr.contains(&agentd_host::provider::spec_forms()), "{stderr}");
    let stderr = fail_125(agentctl(&session).args(["sandbox", "rm", "no-such-sandbox-id"]));
    assert!(stderr.contains("no-such-sandbox-id"), "{stderr}");
    let out = succeed(agentctl(&session).arg("--help"));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&agentd_host::provider::spec_forms()));
}

/// `docker inspect` of a container: `None` once it is gone.
fn inspect_state(container: &str) -> Option<String> {
    let out =
        Command::new("docker").args(["inspect", "-f", "{{.State.Status}}", container]).output().unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `status` of a container says how agentd got in: the image's own, or injected into an image
/// without it.
#[tokio::test]
async fn status_says_whether_agentd_was_baked_or_injected() {
    if !agentd_tests::docker_available("agentd-debian:latest").await
        || !agentd_tests::docker_available("agentd-base-debian:latest").await
    {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("s.json");
    for (image, source) in [("agentd-debian:latest", "baked"), ("agentd-base-debian:latest", "injected")] {
        let out = succeed(agentctl(&session).args(["--sandbox", &format!("docker:{image}"), "status"]));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.starts_with("container: ") && said.trim_end().ends_with(&format!(", {source})")),
            "{said}"
        );
    }
}

#[tokio::test]
async fn sandbox_docker_exec_then_ls_and_rm_across_kinds() {
    const DEBIAN: &str = "agentd-debian:latest";
    if !agentd_tests::docker_available(DEBIAN).await {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("s.json");
    let spec = format!("docker:{DEBIAN}");
    // A one-shot command gets its own container, removed when it ends.
    let out = agentctl(&session)
        .args(["--sandbox", &spec, "exec", "--", "test -f /etc/debian_version && hostname; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let hostname = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(hostname.len(), 12, "the container's short id: {hostname}");
    let _remove = agentd_tests::RemoveOnDrop(hostname.clone());
    assert_eq!(inspect_state(&hostname), None, "the command's container was left behind");

    // Two labelled containers (as agentd leaves them when a caller dies): listed, then removed by a
    // bare id prefix and by KIND:ID.
    let first = agentd_tests::plain_container(DEBIAN, &[]);
    let _first = agentd_tests::RemoveOnDrop(first.clone());
    let second = agentd_tests::plain_container(DEBIAN, &[]);
    let _second = agentd_tests::RemoveOnDrop(second.clone());
    let out = succeed(agentctl(&session).args(["sandbox", "ls", "--json"]));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    for id in [&first, &second] {
        let row = listed.iter().find(|row| row["id"] == id.as_str()).expect("listed");
        assert_eq!((row["kind"].as_str(), row["source"].as_str()), (Some("docker"), Some(DEBIAN)), "{row}");
        assert_eq!(row["state"].as_str().map(|s| s.starts_with("Up")), Some(true), "{row}");
    }
    assert!(!String::from_utf8_lossy(&out.stderr).contains("daytona"), "daytona is skipped silently");
    let out = succeed(agentctl(&session).args(["sandbox", "ls"]));
    let table = String::from_utf8_lossy(&out.stdout);
    let mut lines = table.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["KIND", "ID", "SOURCE", "STATE"]
    );
    assert!(lines.any(|line| line.starts_with("docker") && line.contains(&first[..12])), "{table}");

    succeed(agentctl(&session).args(["sandbox", "rm", &first[..12], &format!("docker:{second}")]));
    assert_eq!((inspect_state(&first), inspect_state(&second)), (None, None));
    let out = succeed(agentctl(&session).args(["sandbox", "ls", "--json"]));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!listed.iter().any(|row| row["id"] == first.as_str() || row["id"] == second.as_str()));
}

/// A standalone fake (`fake-daytona`, `fake-modal`), killed with SIGTERM (it then removes its
/// containers) and reaped when dropped, also when the test fails.
struct FakeProcess(std::process::Child);

impl Drop for FakeProcess {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).unwrap());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

/// The README's main-job command, one-shot on `daytona:IMAGE` through the `fake-daytona` binary,
/// with nothing but its two `export`ed variables (and PATH, HOME) in agentctl's environment: the
/// sandbox is created, agentd injected and linked, the command runs there, and the sandbox is gone
/// afterwards.
#[tokio::test]
async fn sandbox_daytona_runs_the_main_job_with_only_the_two_variables() {
    main_job_through_a_fake("fake-daytona", "daytona", &["DAYTONA_API_URL", "DAYTONA_API_KEY"]).await;
}

/// The same on `modal:IMAGE` through the `fake-modal` binary, with only `MODAL_SERVER_URL` and the
/// two token variables.
#[tokio::test]
async fn sandbox_modal_runs_the_main_job_with_only_the_token_variables() {
    main_job_through_a_fake(
        "fake-modal",
        "modal",
        &["MODAL_SERVER_URL", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"],
    )
    .await;
}

/// The main job on `KIND:agentd-base-debian:latest` through the standalone fake `fake_binary`, with
/// only the `variables` it exports (in that order), PATH and HOME set; then SIGTERM of agentctl in the
/// middle of a command, which deletes the sandbox all the same.
async fn main_job_through_a_fake(fake_binary: &str, kind: &str, variables: &[&str]) {
    use std::io::BufRead as _;
    const BASE: &str = "agentd-base-debian:latest";
    if !agentd_tests::docker_available(BASE).await {
        return;
    }
    let mut child = Command::new(binary(fake_binary))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let _fake = FakeProcess(child);
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut vars = Vec::new();
    for _ in variables {
        let line = lines.next().unwrap().unwrap();
        let (name, value) = line.strip_prefix("export ").and_then(|s| s.split_once('=')).expect(&line);
        vars.push((name.to_owned(), value.to_owned()));
    }
    let names: Vec<&str> = vars.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, variables);
    // Its first stderr line names the label value of its containers; the rest is drained.
    let mut stderr = std::io::BufReader::new(stderr);
    let mut banner = String::new();
    stderr.read_line(&mut banner).unwrap();
    let label =
        banner.split("labelled ").nth(1).and_then(|s| s.strip_suffix(")\n")).expect(&banner).to_owned();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let containers = || {
        let out = Command::new("docker").args(["ps", "-aq", "--filter", &format!("label={label}")]).output();
        String::from_utf8_lossy(&out.unwrap().stdout).split_whitespace().count()
    };

    let home = tempfile::tempdir().unwrap();
    let agentctl = || {
        let mut command = Command::new(binary("agentctl"));
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .current_dir(home.path());
        command
    };
    // The README's main job, word for word.
    let main_job = r#"echo "hello from $(uname -s)"; pwd"#;
    let started = std::time::Instant::now();
    let out =
        agentctl().args(["--sandbox", &format!("{kind}:{BASE}"), "exec", "--", main_job]).output().unwrap();
    eprintln!("agentctl --sandbox {kind}:{BASE} exec (create, inject, run, delete): {:?}", started.elapsed());
    let stderr_text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr_text}");
    // pwd is the container's working directory (the image's), not agentctl's own.
    let workdir = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Config.WorkingDir}}", BASE])
        .output()
        .unwrap();
    let workdir = String::from_utf8_lossy(&workdir.stdout).trim().to_owned();
    let workdir = if workdir.is_empty() { "/".to_owned() } else { workdir };
    assert_ne!(std::path::Path::new(&workdir), home.path());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("hello from Linux\n{workdir}\n"),
        "{stderr_text}"
    );

    // One-shot: the sandbox is deleted (its container removed) when the command ends.
    assert_eq!(containers(), 0, "the command's container was left behind");
    let out = agentctl().args(["sandbox", "ls", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let alive: Vec<_> = listed
        .iter()
        .filter(|row| {
            row["kind"] == kind && !matches!(row["state"].as_str(), Some("destroying" | "destroyed"))
        })
        .collect();
    assert!(alive.is_empty(), "the command's {kind} sandbox was left behind: {alive:?}");

    // SIGTERM of agentctl while the command runs: the sandbox goes all the same, and agentctl exits 143.
    let mut child = agentctl()
        .args(["--sandbox", &format!("{kind}:{BASE}"), "exec", "--", "sleep 300"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let running = || {
        let out = Command::new("docker").args(["ps", "-q", "--filter", &format!("label={label}")]).output();
        String::from_utf8_lossy(&out.unwrap().stdout).split_whitespace().any(|id| {
            let top = Command::new("docker").args(["top", id]).output().unwrap();
            String::from_utf8_lossy(&top.stdout).lines().any(|line| line.trim_end().ends_with(" sleep 300"))
        })
    };
    assert!(agentd_tests::eventually(std::time::Duration::from_secs(60), running).await, "no command ran");
    let sent = std::time::Instant::now();
    let status = agentd_tests::sigterm_and_wait(&mut child, std::time::Duration::from_secs(35)).await;
    let took = sent.elapsed();
    let said = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(143), "{said}");
    assert_eq!(containers(), 0, "SIGTERM left the command's {kind} sandbox behind: {said}");
    eprintln!("agentctl --sandbox {kind}:{BASE} exec, SIGTERM: exited 143 in {took:?}, sandbox deleted");
}

#[test]
fn a_detached_process_outlives_agentctl_and_is_attached_killed_and_listed() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("session.json");
    let up = Up::start(&session);
    // Without a session a detached process would end with the private agentd: refused.
    let private =
        agentctl(&state.path().join("none.json")).args(["exec", "--detach", "--", "true"]).output().unwrap();
    assert_eq!(private.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&private.stderr).contains("agentctl up"), "{private:?}");

    let out = succeed(agentctl(&session).args([
        "exec",
        "--detach",
        "--",
        "seq 1 3000; sleep 1; echo last; exit 4",
    ]));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(!id.is_empty() && !id.contains(char::is_whitespace), "only the id on stdout: {id:?}");
    // agentctl has exited; later, another agentctl gets the whole output and the exit code.
    let attached = agentctl(&session).args(["attach", &id]).output().unwrap();
    let expected: String = (1..=3000).map(|i| format!("{i}\n")).collect::<String>() + "last\n";
    assert_eq!(String::from_utf8_lossy(&attached.stdout), expected);
    assert_eq!(attached.status.code(), Some(4));
    let from = agentctl(&session).args(["attach", "--from", "10", &id]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&from.stdout), expected[10..]);
    let ps = succeed(agentctl(&session).args(["--json", "ps"]));
    let listed: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert!(
        listed.as_array().unwrap().iter().any(|p| p["process"] == id.as_str() && p["exit_code"] == 4),
        "{listed}"
    );

    // kill ends a detached server and what it started in the background.
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&session).unwrap()).unwrap();
    let marker = std::path::Path::new(saved["workspace"].as_str().unwrap()).join("bg.pid");
    let command = "sleep 1000 & echo $! > bg.pid; sleep 1000";
    let out = succeed(agentctl(&session).args(["exec", "--detach", "--", command]));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let began = std::time::Instant::now();
    // The shell makes the file before `echo` writes it: wait for the whole line.
    let child: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&marker).ok().filter(|text| text.ends_with('\n')) {
            break pid.trim().parse().unwrap();
        }
        assert!(began.elapsed() < std::time::Duration::from_secs(10), "the background child never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    succeed(agentctl(&session).args(["kill", &id]));
    let gone = !std::path::Path::new(&format!("/proc/{child}")).exists()
        || std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap().contains(") Z ");
    assert!(gone, "the background child {child} survived kill");
    let table = succeed(agentctl(&session).arg("ps"));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.lines().any(|l| l.starts_with(id.as_str()) && l.contains("exited")), "{table}");
    up.down();
}

#[test]
fn shell_runs_an_interactive_terminal_and_passes_its_exit_code() {
    use std::io::Write as _;
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("session.json");
    let up = Up::start(&session);
    let mut shell = agentctl(&session)
        .args(["shell", "--command", "test -t 0 && echo on-a-tty; sh -i"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut keys = shell.stdin.take().unwrap();
    keys.write_all(b"echo $((20+22))\nexit 3\n").unwrap();
    let out = shell.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("on-a-tty") && text.contains("42"), "{text}");
    assert_eq!(out.status.code(), Some(3), "{text}");
    up.down();
}

/// `--permission` on a session agentctl starts: the rule is in its profile, so `write` and `exec`
/// both obey it, `status` shows it per rule; on an attached sandbox only `exec` takes rules.
#[test]
fn permissions_hold_in_a_session_and_status_reports_them() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("s.json");
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    std::fs::create_dir(w.join("src")).unwrap();
    std::fs::write(w.join("src/x.py"), "original\n").unwrap();
    let rule = format!("deny:write:{}/src/**", w.display());
    succeed(agentctl(&session).args(["--permission", &rule, "up", "--workspace"]).arg(&w));
    let up = Up(Some(session.clone()));
    let out = agentctl(&session).args(["exec", "--", "echo pwn > src/x.py"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Permission denied"), "{out:?}");
    let out =
        agentctl(&session).args(["write", "src/x.py"]).stdin(std::process::Stdio::null()).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("permission denied for write on src/x.py"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_to_string(w.join("src/x.py")).unwrap(), "original\n");
    let status = String::from_utf8(succeed(agentctl(&session).arg("status")).stdout).unwrap();
    assert!(status.contains(&format!("permission {rule}: full")), "{status}");
    // An attached sandbox's verbs follow its own profile: agentctl says so rather than ignore it.
    let out = agentctl(&session).args(["--permission", &rule, "ls", "."]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only `exec` takes rules"), "{out:?}");
    // ...and an exec carries deny rules for itself.
    let other = format!("deny:write:{}/**", w.display());
    let out =
        agentctl(&session).args(["--permission", &other, "exec", "--", "echo x > new.txt"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(!w.join("new.txt").exists());
    let allow = format!("allow:write:{}/src/**", w.display());
    let out = agentctl(&session).args(["--permission", &allow, "exec", "--", "true"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("may add only deny rules"), "{out:?}");
    up.down();
}

/// What a command can leave that reads as dead: a process whose first thread ended alone (the
/// `exit` system call, not `exit_group`) shows `Z` in `/proc/<pid>/stat` and an empty environment,
/// while its other threads run on. `agentctl down` of an agentd that cannot act (stopped) ends the
/// commands itself, by their tag: it must find this one through its other threads.
#[test]
fn down_ends_a_process_whose_first_thread_exited_alone_when_agentd_cannot() {
    let there = Command::new("python3").args(["-c", ""]).status().is_ok_and(|s| s.success());
    if !there {
        agentd_tests::skip(agentd_tests::Need::Python3, "no python3 to end a first thread alone");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("session.json");
    let up = Up::start(&session);
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&session).unwrap()).unwrap();
    let agentd = nix::unistd::Pid::from_raw(i32::try_from(saved["pid"].as_i64().unwrap()).unwrap());
    let workspace = std::path::Path::new(saved["workspace"].as_str().unwrap()).to_owned();
    let half = "import ctypes, threading, time\n\
        threading.Thread(target=time.sleep, args=(1000,)).start()\n\
        time.sleep(0.2)\n\
        ctypes.CDLL(None).syscall(60, 0)\n";
    std::fs::write(workspace.join("half.py"), half).unwrap();
    let command = "setsid python3 half.py >/dev/null 2>&1 & echo $! > half.pid";
    succeed(agentctl(&session).args(["exec", "--", command]));
    let pid: i32 = std::fs::read_to_string(workspace.join("half.pid")).unwrap().trim().parse().unwrap();
    // Ended by the test whatever happens; a no-op once `down` did it.
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _kill = Kill(pid);
    let state_of = |stat: &std::path::Path| {
        let stat = std::fs::read_to_string(stat).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
    };
    let threads_alive = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|task| state_of(&task.path().join("stat")).is_some_and(|s| s != 'Z' && s != 'X'))
            .count()
    };
    let began = std::time::Instant::now();
    while state_of(std::path::Path::new(&format!("/proc/{pid}/stat"))) != Some('Z') {
        assert!(began.elapsed() < std::time::Duration::from_secs(10), "the first thread never ended");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(threads_alive(), 1, "the process lives on in its second thread");
    nix::sys::signal::kill(agentd, nix::sys::signal::Signal::SIGSTOP).unwrap();
    up.down();
    assert_eq!(threads_alive(), 0, "the process outlived `agentctl down`");
}
