//! Path permissions and allowed programs, attacked through both doors: the file verbs and
//! `execute`. One rule list; the verbs check it by its text, the kernel (landlock) holds every
//! command to it.
//!
//! Needs landlock (ABI ≥ 4, as the profile tests); without it each test prints one `skipped:` line
//! ([`agentd_tests::skip`]) unless `AGENTD_REQUIRE_LANDLOCK=1`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::path::{Path, PathBuf};

use agentd_host::BaseSandbox;
use agentd_protocol::permission::{Operation, PermissionMode, PermissionRule};
use agentd_protocol::profile::{Level, ProfileOverride};
use agentd_protocol::{ErrorCode, ExecRequest};
use agentd_tests::{Daemon, profiled, run};

fn w(daemon: &Daemon) -> PathBuf {
    daemon.workspace.path().canonicalize().unwrap()
}

/// Every file beneath `dir` with its content, sorted.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                out.push((path.display().to_string() + "/", Vec::new()));
                stack.push(path);
            } else if kind.is_symlink() {
                out.push((
                    path.display().to_string(),
                    std::fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes(),
                ));
            } else {
                out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

const SRC_DENIED: &str = r#"
name = "src-read-only"
writable_roots = ["{W}"]

[[permissions]]
operations = ["write"]
paths = ["{W}/src/gen/**"]
mode = "allow"

[[permissions]]
operations = ["write"]
paths = ["{W}/src/**"]
mode = "deny"

[[permissions]]
operations = ["read"]
paths = ["{W}/secret/**"]
mode = "deny"
"#;

const FILES: &[(&str, &str)] = &[
    ("src/x.py", "original\n"),
    ("src/lib/y.py", "library\n"),
    ("src/gen/out.txt", "generated\n"),
    ("other/z.txt", "other\n"),
    ("secret/key", "TOPSECRET-4711\n"),
    ("secret/deep/more", "TOPSECRET-4711 again\n"),
];

/// Every way a command could write into a write-denied subtree, or move it, fails, and leaves the
/// subtree as it was; writes beside it and in an allowed subtree inside it work.
#[tokio::test]
async fn a_write_denied_subtree_holds_against_every_command() {
    let Some((daemon, sb, _dir)) = profiled(SRC_DENIED, FILES).await else { return };
    let w = w(&daemon);
    let src = w.join("src");
    let before = tree(&src);
    let attacks = [
        "echo pwn > src/x.py",
        "echo pwn >> src/x.py",
        "sed -i s/original/pwn/ src/x.py",
        "truncate -s 0 src/x.py",
        "cp other/z.txt src/x.py",
        "cp other/z.txt src/new.py",
        "touch src/new.py",
        "mkdir src/newdir",
        "rm src/x.py",
        "rm -rf src/lib",
        "mv src/x.py other/",
        "mv other/z.txt src/",
        "mv src src2",
        "mv src other/src",
        "mv src/lib other/lib",
        "ln src/x.py other/hard && echo pwn > other/hard",
        "ln -s ../src/x.py other/link && echo pwn > other/link",
        "ln -s ../src other/dirlink && echo pwn > other/dirlink/new.py",
        "python3 -c 'import os; os.rename(\"src/x.py\", \"src/y.py\")'",
        "python3 -c 'open(\"src/lib/y.py\", \"w\").write(\"pwn\")'",
        "chmod 777 src/x.py",
        "mkfifo src/fifo",
    ];
    for attack in attacks {
        let r = run(&sb, &format!("{attack}; echo \"exit=$?\"")).await;
        let output = r.output.unwrap_or_default();
        assert!(!output.ends_with("exit=0\n") || attack.contains("chmod"), "`{attack}` succeeded: {output}");
        assert_eq!(tree(&src), before, "`{attack}` changed the denied subtree: {output}");
    }
    // chmod is not a write right landlock knows: the content stays, which is what the rule is about.
    // Beside it, and in the allowed subtree inside it, writes work.
    let r = run(&sb, "echo ok > other/new.txt && echo gen > src/gen/new.txt && echo done").await;
    assert_eq!(r.output.as_deref(), Some("done\n"), "{r:?}");
    assert_eq!(std::fs::read_to_string(src.join("gen/new.txt")).unwrap(), "gen\n");
    let report = r.enforcement.unwrap();
    assert_eq!(report.level, Level::Full, "{report:?}");
    assert_eq!(
        report.permissions.iter().map(|r| (r.rule.as_str(), r.level)).collect::<Vec<_>>(),
        vec![
            (format!("allow:write:{}/src/gen/**", w.display()).as_str(), Level::Full),
            (format!("deny:write:{}/src/**", w.display()).as_str(), Level::Full),
            (format!("deny:read:{}/secret/**", w.display()).as_str(), Level::Full),
        ]
    );
    // What landlock's model costs is said: new entries directly in the workspace are refused too.
    let deny_write = &report.permissions[1];
    assert!(deny_write.notes.iter().any(|n| n.contains("cannot get new entries")), "{deny_write:?}");
    let r = run(&sb, "touch new-at-top; echo \"exit=$?\"").await;
    assert!(r.output.unwrap().ends_with("exit=1\n"));
}

/// A read-denied file's content never appears in a command's output, however it is read.
#[tokio::test]
async fn a_read_denied_subtree_never_reaches_command_output() {
    let Some((_daemon, sb, _dir)) = profiled(SRC_DENIED, FILES).await else { return };
    let attacks = [
        "cat secret/key",
        "grep -r TOPSECRET .",
        "tar cf - . | strings",
        "cp secret/key other/copy; cat other/copy",
        "ln secret/key other/hard; cat other/hard",
        "ln -s ../secret/key other/link; cat other/link",
        "python3 -c 'print(open(\"secret/deep/more\").read())'",
        "head -c 100 secret/deep/more",
        "dd if=secret/key 2>/dev/null",
        "mv secret/key other/moved; cat other/moved",
        "mv secret other/s; cat other/s/key",
    ];
    for attack in attacks {
        let r = run(&sb, attack).await;
        let output = r.output.unwrap_or_default();
        assert!(!output.contains("TOPSECRET"), "`{attack}` printed the secret: {output}");
    }
    // Names still list (only content is withheld), and what is not denied reads.
    let r = run(&sb, "ls secret; cat other/z.txt").await;
    assert_eq!(r.output.as_deref(), Some("deep\nkey\nother\n"));
}

/// `allowed_commands`: the listed programs run; nothing else can be executed, however it is
/// reached.
#[tokio::test]
async fn only_the_allowed_programs_can_be_executed() {
    let profile = r#"
name = "git-and-python"
writable_roots = ["{W}"]
allowed_commands = ["git", "python3"]
"#;
    let Some((_daemon, sb, _dir)) = profiled(profile, &[("a.txt", "a\n")]).await else { return };
    let r = run(&sb, "git --version && git init -q repo && git -C repo status --short && echo git-ok").await;
    let output = r.output.clone().unwrap();
    assert!(output.starts_with("git version") && output.ends_with("git-ok\n"), "{output}");
    let r = run(&sb, "python3 -c 'print(6*7)'").await;
    assert_eq!(r.output.as_deref(), Some("42\n"));
    assert_eq!(r.enforcement.as_ref().map(|e| e.programs), Some(Level::Full));
    // The first word is checked before anything runs...
    let refused =
        sb.exec(ExecRequest { command: "curl --version".into(), ..ExecRequest::default() }, None).await;
    assert!(refused.is_err() || refused.as_ref().is_ok_and(|r| r.exit_code != 0), "{refused:?}");
    // ...and the kernel refuses every other way in.
    let attacks = [
        "git --version >/dev/null && curl --version",
        "git --version >/dev/null && /usr/bin/env curl --version",
        "git --version >/dev/null && cp /bin/ls ./x && ./x",
        "git --version >/dev/null && ls",
        "git --version >/dev/null && /bin/ls",
        "python3 -c 'import os; os.execv(\"/bin/ls\", [\"ls\"])'",
        "python3 -c 'import subprocess; print(subprocess.run([\"curl\", \"--version\"]).returncode)'",
        "git --version >/dev/null && bash -c 'echo escaped'",
    ];
    for attack in attacks {
        let r = run(&sb, attack).await;
        let output = r.output.clone().unwrap_or_default();
        assert!(
            !output.contains("curl ") && !output.contains("a.txt") && !output.contains("escaped"),
            "`{attack}` ran: {output}"
        );
        assert!(
            output.contains("Permission denied") || output.contains("PermissionError"),
            "`{attack}`: {output}"
        );
    }
}

/// A request may add deny rules in front of the profile's; an allow rule could loosen it and is
/// refused with `profile_violation`; its deny holds in the kernel.
#[tokio::test]
async fn per_exec_rules_only_tighten() {
    let Some((daemon, sb, _dir)) = profiled(SRC_DENIED, FILES).await else { return };
    let w = w(&daemon);
    let rule = |mode, path: &str| PermissionRule {
        operations: vec![Operation::Write],
        paths: vec![format!("{}/{path}", w.display())],
        mode,
    };
    let loosen = ExecRequest {
        command: "echo pwn > src/x.py".into(),
        profile: Some(Box::new(ProfileOverride {
            permissions: vec![rule(PermissionMode::Allow, "src/**")],
            ..ProfileOverride::default()
        })),
        ..ExecRequest::default()
    };
    let err = sb.exec(loosen, None).await.unwrap_err();
    assert!(
        matches!(&err, agentd_host::SandboxError::Refused { code: ErrorCode::ProfileViolation, .. }),
        "{err:?}"
    );
    assert_eq!(std::fs::read_to_string(w.join("src/x.py")).unwrap(), "original\n");
    let tighten = ExecRequest {
        command: "echo pwn > other/z.txt; echo \"exit=$?\"".into(),
        timeout: Some(20.0),
        profile: Some(Box::new(ProfileOverride {
            permissions: vec![rule(PermissionMode::Deny, "other/**")],
            ..ProfileOverride::default()
        })),
        ..ExecRequest::default()
    };
    let r = sb.exec(tighten, None).await.unwrap();
    let output = r.output.clone().unwrap();
    assert!(output.contains("Permission denied") && !output.ends_with("exit=0\n"), "{r:?}");
    assert_eq!(std::fs::read_to_string(w.join("other/z.txt")).unwrap(), "other\n");
    // The next command without it writes there again.
    let r = run(&sb, "echo new > other/z.txt && echo ok").await;
    assert_eq!(r.output.as_deref(), Some("ok\n"));
}

/// The same rules through the file verbs and transfers: deepagents' middleware strings for what is
/// refused, and read-denied paths left out of listings and matches.
#[tokio::test]
async fn the_file_verbs_obey_the_same_rules() {
    let Some((daemon, sb, _dir)) = profiled(SRC_DENIED, FILES).await else { return };
    let w = w(&daemon);
    let p = |rel: &str| format!("{}/{rel}", w.display());
    let src = w.join("src");
    let before = tree(&src);
    let x = p("src/x.py");
    let write = sb.write(&x, "pwn").await.unwrap();
    assert_eq!(write.error.as_deref(), Some(format!("Error: permission denied for write on {x}").as_str()));
    let edit = sb.edit(&x, "original", "pwn", false).await.unwrap();
    assert_eq!(edit.error.as_deref(), Some(format!("Error: permission denied for write on {x}").as_str()));
    let delete = sb.delete(&x).await.unwrap();
    assert_eq!(
        delete.error.as_deref(),
        Some(
            format!(
                "Error: permission denied for write on {x} (matches deny rule(s): {}/src/**)",
                w.display()
            )
            .as_str()
        )
    );
    // Deleting the directory above deletes the denied tree: refused whatever the rule order.
    let whole = sb.delete(&p("src")).await.unwrap();
    assert!(whole.error.is_some_and(|e| e.contains("matches deny rule(s)")));
    let relative = sb.write("src/lib/new.py", "pwn").await.unwrap();
    assert_eq!(relative.error.as_deref(), Some("Error: permission denied for write on src/lib/new.py"));
    let uploaded = sb.upload_files(&[(p("src/up.py"), b"pwn".to_vec())]).await.unwrap();
    assert_eq!(uploaded[0].error.as_deref(), Some("permission_denied"));
    // An offload's capture file is agentd's write: refused there too, and nothing runs.
    let offload = sb
        .execute_with_offload(&agentd_host::OffloadRequest::new("echo ran > other/ran; seq 100000", &x, 10))
        .await;
    let refused = format!("{offload:?}");
    assert!(refused.contains("SpawnFailed") && refused.contains("permission denied for write"), "{refused}");
    assert!(!w.join("other/ran").exists());
    assert_eq!(tree(&src), before, "a verb changed the denied subtree");
    // Allowed inside the denied tree, and beside it (file work is not held to landlock's carve-out).
    for (path, content) in [("src/gen/new.txt", "gen"), ("new-at-top.txt", "top")] {
        let written = sb.write(&p(path), content).await.unwrap();
        assert_eq!(written.error, None, "{path}");
    }

    // Reads: the secret's content never comes back.
    let key = p("secret/key");
    let read = sb.read(&key, 0, 100).await.unwrap();
    assert_eq!(read.error.as_deref(), Some(format!("Error: permission denied for read on {key}").as_str()));
    assert!(read.file_data.is_none());
    std::os::unix::fs::symlink(w.join("secret/key"), w.join("other/door")).unwrap();
    let through = sb.read(&p("other/door"), 0, 100).await.unwrap();
    assert_eq!(
        through.error.as_deref(),
        Some(
            format!("Error: permission denied for read on {} (resolves to {key})", p("other/door")).as_str()
        )
    );
    let downloaded = sb.download_files(&[key.clone(), p("other/door")]).await.unwrap();
    assert!(downloaded.iter().all(|d| d.error.as_deref() == Some("permission_denied")), "{downloaded:?}");
    let listed = sb.ls(&p("secret")).await.unwrap();
    assert_eq!(listed.entries, Some(vec![]), "{listed:?}");
    let top = sb.ls(&w.display().to_string()).await.unwrap().entries.unwrap();
    assert!(top.iter().any(|e| e.path.ends_with("/secret")), "the directory itself is not denied: {top:?}");
    let globbed = sb.glob("**/*", Some(&w.display().to_string())).await.unwrap().matches.unwrap();
    assert!(
        !globbed.is_empty()
            && globbed.iter().all(|m| !m.path.contains("/secret/") && !m.path.ends_with("/door")),
        "{globbed:?}"
    );
    let grepped = sb.grep("TOPSECRET", Some(&w.display().to_string()), None, None).await.unwrap();
    assert_eq!(grepped.matches, Some(vec![]), "{grepped:?}");
    let other = sb.grep("other", Some(&w.display().to_string()), None, None).await.unwrap().matches.unwrap();
    assert!(other.iter().any(|m| m.path.ends_with("other/z.txt")), "what is not denied is found: {other:?}");
}

const ENV_FILES: &str = r#"
name = "env-files"
MODE
writable_roots = ["{W}"]

[[permissions]]
operations = ["read", "write"]
paths = ["{W}/**/*.env"]
mode = "deny"
"#;

/// A glob that is not a plain prefix is looked for when the command starts: what matches then is
/// withheld, what the command creates later is not, and the report says so (`partial`, naming the
/// rule); a strict profile refuses to run anything under it.
#[tokio::test]
async fn a_pattern_rule_is_partial_and_a_strict_profile_refuses_it() {
    let files = [
        ("a/prod.env", "SECRET=one\n"),
        ("b/c/.env", "SECRET=two\n"),
        ("readme.md", "hello\n"),
        ("docs/x", "x"),
    ];
    let best_effort = ENV_FILES.replace("MODE", "mode = \"best_effort\"");
    let Some((_daemon, sb, _dir)) = profiled(&best_effort, &files).await else { return };
    let r = run(&sb, "cat a/prod.env b/c/.env readme.md; echo later > docs/new.env; cat docs/new.env").await;
    let output = r.output.clone().unwrap();
    assert!(!output.contains("SECRET"), "{output}");
    assert!(output.contains("hello\n"), "{output}");
    // The honest gap: a file created after the start is not covered by the kernel...
    assert!(output.ends_with("later\n"), "{output}");
    let report = r.enforcement.unwrap();
    let rule = &report.permissions[0];
    assert_eq!((rule.level, report.level), (Level::Partial, Level::Partial), "{report:?}");
    assert!(
        rule.notes.iter().any(|n| n.contains("not a plain prefix") && n.contains("2 path(s)")),
        "{rule:?}"
    );
    // ...but the verbs, which match by the text, refuse it.
    let read = sb.read("docs/new.env", 0, 10).await.unwrap();
    assert_eq!(read.error.as_deref(), Some("Error: permission denied for read on docs/new.env"));

    let strict = ENV_FILES.replace("MODE", "");
    let Some((_daemon, sb, _dir)) = profiled(&strict, &files).await else { return };
    match sb.exec(ExecRequest { command: "cat readme.md".into(), ..ExecRequest::default() }, None).await {
        Err(agentd_host::SandboxError::Refused { code: ErrorCode::NotEnforceable, message }) => {
            assert!(message.contains("not a plain prefix") && message.contains("**/*.env"), "{message}");
        }
        other => panic!("a strict profile ran a partial rule: {other:?}"),
    }
}

/// A denied prefix that does not exist yet is not covered for the command that creates it (the
/// report says so), and is covered from the next command on.
#[tokio::test]
async fn a_missing_prefix_is_covered_from_the_command_after_its_creation() {
    let profile = r#"
name = "later"
mode = "best_effort"
writable_roots = ["{W}"]

[[permissions]]
operations = ["write"]
paths = ["{W}/build/**"]
mode = "deny"
"#;
    let Some((daemon, sb, _dir)) = profiled(profile, &[("readme.md", "x")]).await else { return };
    let w = w(&daemon);
    // The verbs check the text, so they refuse it before it exists.
    let write = sb.write(&format!("{}/build/x", w.display()), "v").await.unwrap();
    assert!(write.error.is_some_and(|e| e.starts_with("Error: permission denied for write")));
    // A command creating it is not held (the honest gap), and says so.
    let r = run(&sb, "mkdir build && echo first > build/x && echo made").await;
    assert_eq!(r.output.as_deref(), Some("made\n"), "{r:?}");
    let rule = &r.enforcement.unwrap().permissions[0];
    assert_eq!(rule.level, Level::Partial);
    assert!(rule.notes.iter().any(|n| n.contains("does not exist now")), "{rule:?}");
    // The next command is.
    let r = run(&sb, "echo second > build/x; echo \"exit=$?\"").await;
    assert!(!r.output.clone().unwrap().ends_with("exit=0\n"), "{r:?}");
    assert_eq!(std::fs::read_to_string(w.join("build/x")).unwrap(), "first\n");
    assert_eq!(r.enforcement.unwrap().permissions[0].level, Level::Full);
}

const SECRET_DENIED: &str = r#"
name = "secret"
writable_roots = ["{W}"]

[[permissions]]
operations = ["read", "write"]
paths = ["{W}/secret/**"]
mode = "deny"
"#;

/// Swaps `a` and `b` (a directory and a link) as fast as it can until dropped: the race between
/// a verb's check of a path and its use. Stopped and joined on drop, when a test fails too.
struct Swapper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Swapper {
    fn start(a: PathBuf, b: PathBuf) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !flag.load(Ordering::Relaxed) {
                let flags = nix::fcntl::RenameFlags::RENAME_EXCHANGE;
                nix::fcntl::renameat2(nix::fcntl::AT_FDCWD, &a, nix::fcntl::AT_FDCWD, &b, flags).unwrap();
                swaps += 1;
            }
            swaps
        });
        Self { stop, thread: Some(thread) }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The race a command can run against the verbs: `door` is a directory one moment and a link to the
/// denied `secret/` the next, swapped while each verb runs, so a check of the path and the walk that
/// uses it can see different things. Every verb checks what its own walk opened: nothing of
/// `secret/` is read, listed, matched, downloaded or written, however the swaps fall.
#[tokio::test]
async fn a_link_swapped_in_mid_request_leads_no_verb_into_the_denied_tree() {
    let files = [
        ("secret/key", "TOPSECRET-4711\n"),
        ("secret/hidden-name.txt", "TOPSECRET-4711\n"),
        ("secret/victim", "TOPSECRET-4711\n"),
        ("door/key", "public\n"),
        ("door/victim", "public\n"),
    ];
    let Some((daemon, sb, _dir)) = profiled(SECRET_DENIED, &files).await else { return };
    let w = w(&daemon);
    std::os::unix::fs::symlink(w.join("secret"), w.join("alt")).unwrap();
    let secret_before = tree(&w.join("secret"));
    let at = |rel: &str| format!("{}/{rel}", w.display());
    let leaked = |text: &str| text.contains("TOPSECRET") || text.contains("hidden-name");
    let (mut allowed, mut refused) = (0, 0);
    let mut leaks = std::collections::BTreeMap::<&str, u32>::new();
    let mut check = |verb, leak: bool| *leaks.entry(verb).or_default() += u32::from(leak);
    let swapper = Swapper::start(w.join("door"), w.join("alt"));
    for round in 0..1000 {
        let read = sb.read(&at("door/key"), 0, 10).await.unwrap();
        check("read", leaked(&format!("{read:?}")));
        match read.error {
            None => allowed += 1,
            Some(e) if e.contains("permission denied") => refused += 1,
            Some(_) => {}
        }
        for (verb, glob) in [("grep", None), ("grep --glob", Some("**/key"))] {
            let grep = sb.grep("TOPSECRET", Some(&at("door")), glob, None).await.unwrap();
            check(verb, !grep.matches.unwrap_or_default().is_empty());
        }
        let grep = sb.grep("TOPSECRET", Some(&at("door/key")), None, None).await.unwrap();
        check("grep of a file", !grep.matches.unwrap_or_default().is_empty());
        check("ls", leaked(&format!("{:?}", sb.ls(&at("door")).await.unwrap())));
        check("glob", leaked(&format!("{:?}", sb.glob("*", Some(&at("door"))).await.unwrap())));
        let downloaded = sb.download_files(&[at("door/key")]).await.unwrap();
        check(
            "download",
            leaked(&String::from_utf8_lossy(downloaded[0].content.as_deref().unwrap_or_default())),
        );
        let secret = |name: &str| w.join("secret").join(name).exists();
        sb.write(&at("door/w"), "pwn\n").await.unwrap();
        check("write", secret("w"));
        // A new directory each round: the walk makes it where it is.
        sb.write(&at(&format!("door/d{round}/w")), "pwn\n").await.unwrap();
        check("write making a directory", secret(&format!("d{round}")));
        sb.upload_files(&[(at("door/u"), b"pwn\n".to_vec())]).await.unwrap();
        check("upload", secret("u"));
        sb.edit(&at("door/key"), "TOPSECRET", "pwned", false).await.unwrap();
        check("edit", !std::fs::read_to_string(w.join("secret/key")).unwrap().contains("TOPSECRET"));
        sb.delete(&at("door/victim")).await.unwrap();
        check("delete", !secret("victim"));
        let capture = at("door/c");
        match sb.execute_with_offload(&agentd_host::OffloadRequest::new("seq 100", &capture, 1)).await {
            Ok(_) => {}
            // Refused before anything runs.
            Err(agentd_host::SandboxError::Refused { code: ErrorCode::SpawnFailed, message })
                if message.contains("permission denied for write") => {}
            Err(err) => panic!("round {round}: {err:?}"),
        }
        check("offload capture", secret("c"));
    }
    let swaps = swapper.stop();
    leaks.retain(|_, n| *n > 0);
    assert!(leaks.is_empty(), "rounds that leaked or wrote into secret/, by verb: {leaks:?}");
    assert_eq!(tree(&w.join("secret")), secret_before, "nothing in secret/ changed");
    // The race ran: the same read was let through and refused as the swaps fell.
    assert!(
        swaps > 1000 && allowed > 0 && refused > 0,
        "swaps {swaps}, allowed {allowed}, refused {refused}"
    );
}
