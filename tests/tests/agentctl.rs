//! agentctl from the shell: a one-shot exec on the embedded default, a multi-step session
//! (up, upload, exec, download, down) against one local agentd, and the file verbs against
//! `agentd fs`.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use agentd_tests::binary;

fn agentctl(session: &std::path::Path) -> Command {
    let mut command = Command::new(binary("agentctl"));
    command.env("AGENTCTL_SESSION", session).env_remove("AGENTD_URL").env_remove("AGENTD_TOKEN");
    command
}

/// Runs `command`, which must succeed; returns its output.
fn succeed(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{:?} failed: {}", command, String::from_utf8_lossy(&out.stderr));
    out
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
    assert!(saved["url"].as_str().unwrap().starts_with("unix:") && !text.contains("token"), "{text}");
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
    assert!(printed.contains("403") && printed.contains("inner=125"), "{printed}");
    assert!(!planted.exists());

    succeed(agentctl(&session).arg("down"));
    assert!(!session.exists());
    let workspace = saved["workspace"].as_str().unwrap();
    assert!(!std::path::Path::new(workspace).exists());
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(stat.is_empty() || stat.contains(") Z"), "agentd {pid} still running");
}

/// The file verbs take one set of arguments in `agentctl` and `agentd fs` (defined once): every
/// invocation gives the same result through both (agentctl over the link, `agentd fs` in the
/// workspace), on twin directories `ctl/` and `fs/`, and leaves the same files.
#[test]
fn file_verbs_take_the_same_arguments_as_agentd_fs() {
    let daemon = agentd_tests::Daemon::start();
    let ws = daemon.workspace.path().canonicalize().unwrap();
    for side in ["ctl", "fs"] {
        std::fs::create_dir_all(ws.join(side).join("sub")).unwrap();
        std::fs::write(ws.join(side).join("a.txt"), "one\ntwo\none\n").unwrap();
        std::fs::write(ws.join(side).join("sub/b.rs"), "fn one() {}\n").unwrap();
    }
    // (arguments with @ for the twin directory, stdin, the result's error with @)
    let steps: &[(&[&str], &str, Option<&str>)] = &[
        (&["write", "@/new/x.txt"], "hello\n", None),
        (&["read", "@/a.txt", "--offset", "-3", "--limit", "2"], "", None),
        (&["read", "@/a.txt", "--offset", "2"], "", None),
        (&["read", "@/missing"], "", Some("File '@/missing': file_not_found")),
        (&["edit", "@/a.txt", "one", "1", "--replace-all"], "", None),
        (&["edit", "@/a.txt", "--", "two", "-2"], "", None),
        (
            &["edit", "@/a.txt", "1", "one"],
            "",
            Some(
                "Error: String '1' appears multiple times. Use replace_all=True to replace all occurrences.",
            ),
        ),
        (&["ls", "@/sub"], "", None),
        (&["glob", "*.rs", "@"], "", None),
        (&["grep", "one", "@", "--glob", "*.rs", "--max-count", "5"], "", None),
        (&["grep", "1", "@/a.txt", "--max-count", "-1"], "", None),
        (&["rm", "@/new/x.txt"], "", None),
        (&["delete", "@/sub"], "", None),
    ];
    let run = |command: &mut Command, stdin: &str| {
        use std::io::Write as _;
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{command:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), json)
    };
    let state = tempfile::tempdir().unwrap();
    for (args, stdin, error) in steps {
        let twin = |side: &str| format!("{}/{side}", ws.display());
        let with = |side: &str| args.iter().map(|a| a.replace('@', &twin(side))).collect::<Vec<_>>();
        let (ctl_code, ctl) = run(
            agentctl(&state.path().join("s.json"))
                .args(["--json", "--url", &daemon.url])
                .env("AGENTD_TOKEN", &daemon.token)
                .args(with("ctl")),
            stdin,
        );
        let (fs_code, fs) =
            run(Command::new(binary("agentd")).current_dir(&ws).arg("fs").args(with("fs")), stdin);
        let ctl = serde_json::from_str::<serde_json::Value>(&ctl.to_string().replace("ctl/", "fs/")).unwrap();
        assert_eq!(ctl, fs, "{args:?}");
        let verb = fs.as_object().and_then(|o| o.values().next()).unwrap();
        let want_error = error.map(|e| e.replace('@', &twin("fs")));
        assert_eq!(verb["error"].as_str(), want_error.as_deref(), "{args:?}: {fs}");
        // agentctl fails on an error result; `agentd fs` printed a result, so it succeeded.
        assert_eq!((ctl_code, fs_code), (Some(if error.is_some() { 1 } else { 0 }), Some(0)), "{args:?}");
    }
    for side in ["ctl", "fs"] {
        let dir = ws.join(side);
        assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "1\n-2\n1\n", "{side}");
        assert!(dir.join("new").is_dir() && !dir.join("new/x.txt").exists() && !dir.join("sub").exists());
    }
}
