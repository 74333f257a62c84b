//! Sandbox profiles: real commands under real profiles, and the kernel saying no.
//!
//! These need landlock (ABI ≥ 4 for the network rules). On a kernel without it each test prints one
//! line and returns, unless `AGENTD_REQUIRE_LANDLOCK=1` (set by `.ci/run`) makes that a failure.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use agentd_host::{AgentdSandbox, SandboxError};
use agentd_protocol::profile::{Level, Limits, Network, ProfileOverride};
use agentd_protocol::{ErrorCode, ExecRequest, ExecResult};
use agentd_tests::Daemon;

/// A daemon running `profile` (TOML, `{W}` replaced by its workspace), and a link to it.
async fn profiled(profile: &str) -> Option<(Daemon, AgentdSandbox, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    let path = dir.path().join("profile.toml");
    std::fs::write(&path, profile.replace("{W}", w.to_str().unwrap())).unwrap();
    let daemon = Daemon::start_in(workspace, &["--profile", path.to_str().unwrap()]);
    let sandbox = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let abi = sandbox.link().await.unwrap().hello().landlock_abi;
    if abi < 4 {
        assert!(std::env::var_os("AGENTD_REQUIRE_LANDLOCK").is_none(), "landlock ABI {abi} < 4 but required");
        println!("skipped: this kernel's landlock ABI is {abi}; profile tests need 4");
        return None;
    }
    Some((daemon, sandbox, dir))
}

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
    let Some((daemon, sb, _dir)) = profiled(WRITE_ONLY_WORKSPACE).await else { return };
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
    let Some((_daemon, sb, _dir)) = profiled(profile).await else { return };
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
    let Some((_daemon, sb, _dir)) = profiled(deny).await else { return };
    let r = run(&sb, &connect).await;
    let output = r.output.unwrap();
    assert!(output.contains("Permission denied") && !output.contains("connected"), "{output}");
    assert_eq!(r.enforcement.unwrap().network, Level::Full);
    drop(sb);
    let allow = "name = \"online\"\nnetwork = \"allow\"\n";
    let (_daemon, sb, _dir) = profiled(allow).await.unwrap();
    let r = run(&sb, &connect).await;
    assert_eq!(r.output.as_deref(), Some("connected\n"));
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_agentd_keeps_answering() {
    let profile = "name = \"few-processes\"\n[limits]\nprocesses = 64\n";
    let Some((_daemon, sb, _dir)) = profiled(profile).await else { return };
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
    let Some((daemon, sb, _dir)) = profiled(profile).await else { return };
    let start = Instant::now();
    let spin = run(&sb, "while :; do :; done").await;
    assert_eq!(
        (spin.signal.as_deref(), spin.limit_exceeded.as_deref()),
        (Some("SIGXCPU"), Some("cpu_seconds"))
    );
    assert!(!spin.timed_out && start.elapsed() < Duration::from_secs(10));
    let big = run(&sb, "head -c 1073741824 /dev/zero > big").await;
    assert_eq!(big.limit_exceeded.as_deref(), Some("file_size"), "{big:?}");
    assert_eq!(std::fs::metadata(workspace(&daemon).join("big")).unwrap().len(), 1_048_576);
}

#[tokio::test]
async fn the_environment_is_the_allowlist_and_the_token_is_out_of_reach() {
    let profile = "name = \"clean-env\"\nenv_allowlist = [\"PATH\"]\nwritable_roots = [\"{W}\", \"/dev/null\"]\n[env]\nLANG = \"C.UTF-8\"\n";
    let Some((daemon, sb, _dir)) = profiled(profile).await else { return };
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
    let counts: Vec<&str> = output.lines().filter(|l| l.len() == 1).collect();
    assert_eq!(counts, ["0", "0"], "{output}");
    assert!(output.contains("mem=1"), "{output}");
}

#[tokio::test]
async fn a_request_cannot_loosen_the_profile_but_may_tighten_it() {
    let profile = "name = \"base\"\nwritable_roots = [\"{W}\"]\nnetwork = \"deny\"\nmax_timeout = 30\n[limits]\ncpu_seconds = 5\n";
    let Some((daemon, sb, _dir)) = profiled(profile).await else { return };
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
    std::fs::create_dir(w.join("sub")).unwrap();
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
    let Some((daemon, sb, _dir)) = profiled(strict).await else { return };
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
    let (daemon, sb, _dir) = profiled(best).await.unwrap();
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
        assert!(std::env::var_os("AGENTD_REQUIRE_LANDLOCK").is_none(), "landlock required");
        println!("skipped: no landlock on this kernel");
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
    let profile = "name = \"tree\"\nwritable_roots = [\"{W}\"]\nallowed_commands = [\"sh\", \"echo\"]\n[limits]\nprocesses = 32\n";
    let Some((_daemon, sb, _dir)) = profiled(profile).await else { return };
    let request = ExecRequest {
        command: "sh -c 'sleep 1009 & setsid sleep 1009 & sleep 1009'".into(),
        timeout: Some(0.5),
        ..ExecRequest::default()
    };
    let r = sb.exec(request, None).await.unwrap();
    assert!(r.timed_out);
    assert!(agentd_tests::processes_named("sleep 1009").is_empty());
    // `allowed_commands` (advisory) refuses other first words.
    let other = ExecRequest { command: "ls /".into(), ..ExecRequest::default() };
    match sb.exec(other, None).await {
        Err(SandboxError::Refused { code: ErrorCode::ProfileViolation, message }) => {
            assert!(message.contains("does not allow the command `ls`"), "{message}");
        }
        other => panic!("ls was not refused: {other:?}"),
    }
}
