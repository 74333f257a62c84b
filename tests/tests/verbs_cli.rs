//! The file verbs' command lines: `agentctl` and `agentd fs` take the same arguments (one definition,
//! `agentd_protocol::cli::FsCommand`) and give the same results.

use std::process::Command;

use agentd_tests::binary;

/// agentctl attached to `daemon` (nothing from the environment), printing JSON.
fn agentctl(daemon: &agentd_tests::Daemon, session: &std::path::Path) -> Command {
    let mut command = Command::new(binary("agentctl"));
    command
        .env("AGENTCTL_SESSION", session)
        .env_remove("AGENTD_URL")
        .env("AGENTD_TOKEN", &daemon.token)
        .args(["--json", "--url", &daemon.url]);
    command
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
        let (ctl_code, ctl) = run(agentctl(&daemon, &state.path().join("s.json")).args(with("ctl")), stdin);
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
