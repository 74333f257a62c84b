//! Issue 47, item 1: a read-deny rule protects what it names, not a name. A command renames,
//! links, replaces or re-parents a denied path (or a directory on its way) so that the next command's
//! ruleset, or the file verbs, would take it for something else; each attack is run as the issue
//! reported it, then the secret is looked for through every door: the next command, the file verbs,
//! `agentctl`.
//!
//! Needs landlock (ABI ≥ 4, as the profile tests); without it each test prints one `skipped:` line
//! ([`agentd_tests::skip`]).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use agentd_host::{AgentdSandbox, BaseSandbox};
use agentd_protocol::ExecRequest;
use agentd_protocol::profile::Level;
use agentd_tests::agentctl::agentctl_in as agentctl;
use agentd_tests::{Daemon, Need, binary, profiled, run, skip};

/// The workspace's real path.
fn real(daemon: &Daemon) -> PathBuf {
    daemon.workspace.path().canonicalize().unwrap()
}

/// As [`profiled`], for a workspace `prepare` makes (given its real path) before agentd starts.
async fn prepared(
    profile: &str,
    prepare: impl FnOnce(&Path),
) -> Option<(Daemon, AgentdSandbox, tempfile::TempDir)> {
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    prepare(&w);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.toml");
    std::fs::write(&path, profile.replace("{W}", w.to_str().unwrap())).unwrap();
    let daemon = Daemon::start_in(workspace, &["--profile", path.to_str().unwrap()]);
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    if sb.link().await.unwrap().hello().landlock_abi < 4 {
        skip(Need::Landlock, "profiles need landlock ABI 4");
        return None;
    }
    Some((daemon, sb, dir))
}

/// The issue's profile: three read-denied paths at three depths, strict.
const THREE_SECRETS: &str = r#"
name = "three-secrets"
mode = "strict"
writable_roots = ["{W}"]

[[permissions]]
operations = ["read"]
paths = ["{W}/.env", "{W}/secret/**", "{W}/a/b/secret/**"]
mode = "deny"
"#;

const FILES: &[(&str, &str)] = &[
    (".env", "SECRET-ENV-4711\n"),
    ("secret/key", "SECRET-DIR-4712\n"),
    ("a/b/secret/key", "SECRET-DEEP-4713\n"),
    ("a/b/open.txt", "open\n"),
    ("pubdir/z.txt", "z\n"),
];

/// Every name the attacks could have given a secret, and the denied names themselves.
const NAMES: &[&str] = &[
    "notes.txt",
    "pub/key",
    "a2/b/secret/key",
    "a/b2/secret/key",
    "hard",
    "pubdir/hard",
    "pubdir/key",
    "moved",
    ".env",
    "secret/key",
    "a/b/secret/key",
];

/// What the file verbs and the next command show of every name in [`NAMES`].
async fn everything_readable(sb: &AgentdSandbox) -> String {
    let mut seen = String::new();
    for name in NAMES {
        let r = sb.read(name, 0, 100).await.unwrap();
        seen.push_str(&format!("read {name}: {r:?}\n"));
    }
    let g = sb.grep("SECRET", Some("."), None, None).await.unwrap();
    seen.push_str(&format!("grep: {g:?}\n"));
    let cat = run(sb, &format!("cat {} 2>/dev/null", NAMES.join(" "))).await;
    seen.push_str(&cat.output.unwrap_or_default());
    seen
}

/// The issue's reproduction: `mv .env notes.txt && : > .env; mv secret pub && mkdir secret;
/// mv a a2 && mkdir -p a/b/secret` left all three secrets to the `read` verb and the next command
/// while the report said `full`. Now each rename is refused and nothing reads.
#[tokio::test]
async fn read_denied_paths_are_not_renamed_out_of_their_rule() {
    let Some((daemon, sb, _dir)) = profiled(THREE_SECRETS, FILES).await else { return };
    let w = real(&daemon);
    let r = run(
        &sb,
        "mv .env notes.txt && : > .env; mv secret pub && mkdir secret; mv a a2 && mkdir -p a/b/secret",
    )
    .await;
    assert_eq!(r.enforcement.as_ref().map(|e| e.level), Some(Level::Full), "{r:?}");
    let seen = everything_readable(&sb).await;
    assert!(!seen.contains("SECRET-"), "a secret was read after the renames:\n{seen}");
    // Each attack, alone, and what a command could try instead.
    let attacks = [
        "mv .env notes.txt",
        "mv secret pub",
        "mv a a2",
        "mv a/b a/b2",
        "mv secret/key pubdir/key",
        "mv .env pubdir/moved",
        "python3 -c 'import os; os.rename(\".env\", \"notes.txt\")'",
        "ln .env pubdir/hard",
        "ln secret/key pubdir/hard",
        "ln secret/key hard",
        "cp -al secret pub",
        "mv pubdir/z.txt .env",
        "mv pubdir a && mkdir -p a/b/secret",
    ];
    for attack in attacks {
        let r = run(&sb, &format!("{attack}; echo \"exit=$?\"")).await;
        let output = r.output.unwrap_or_default();
        assert!(!output.ends_with("exit=0\n"), "`{attack}` succeeded: {output}");
        let seen = everything_readable(&sb).await;
        assert!(!seen.contains("SECRET-"), "`{attack}` let a secret be read:\n{seen}");
    }
    for (path, content) in &FILES[..3] {
        assert_eq!(std::fs::read_to_string(w.join(path)).unwrap(), *content, "{path} moved");
    }
    // What stays: new files beside the secrets, and everything in the other directories.
    let r =
        run(&sb, "echo n > new.txt && mv pubdir/z.txt pubdir/y.txt && rm pubdir/y.txt && cat a/b/open.txt")
            .await;
    assert_eq!(r.output.as_deref(), Some("open\n"), "{r:?}");
    let report = r.enforcement.unwrap();
    assert_eq!(report.level, Level::Full, "{report:?}");
    assert!(
        report.permissions[0].notes.iter().any(|n| n.contains("nothing is removed, renamed")),
        "{report:?}"
    );
}

/// A hard link in the denied file's own directory needs only the right to create a file there:
/// the link is made, but its new name is denied as the file is, to the next command and to the
/// verbs.
#[tokio::test]
async fn a_hard_link_to_a_read_denied_file_is_denied_as_the_file_is() {
    let Some((daemon, sb, _dir)) = profiled(THREE_SECRETS, FILES).await else { return };
    let w = real(&daemon);
    let r = run(&sb, "ln .env notes.txt; ln secret/key secret/again; echo done").await;
    assert_eq!(r.output.as_deref(), Some("done\n"), "{r:?}");
    assert!(w.join("notes.txt").exists());
    let seen = everything_readable(&sb).await;
    assert!(!seen.contains("SECRET-"), "a hard link read a secret:\n{seen}");
    let r = sb.read("notes.txt", 0, 10).await.unwrap();
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("permission denied for read on notes.txt")),
        "{r:?}"
    );
    let r = run(&sb, "cat notes.txt secret/again; echo \"exit=$?\"").await;
    assert!(!r.output.as_deref().unwrap_or_default().contains("SECRET-"), "{r:?}");
    assert_eq!(r.enforcement.as_ref().map(|e| e.level), Some(Level::Full), "{r:?}");
}

/// A hard link made before agentd started, in another directory, is out of the kernel's reach:
/// the report says so, and a strict profile refuses to run rather than run with less.
#[tokio::test]
async fn a_hard_link_elsewhere_makes_the_rule_partial_and_strict_refuses() {
    let prepare = |w: &Path| {
        for dir in ["pubdir", "secret", "a/b/secret"] {
            std::fs::create_dir_all(w.join(dir)).unwrap();
        }
        std::fs::write(w.join(".env"), "SECRET-ENV-4711\n").unwrap();
        std::fs::hard_link(w.join(".env"), w.join("pubdir/old")).unwrap();
    };
    let Some((_daemon, sb, _dir)) = prepared(THREE_SECRETS, prepare).await else { return };
    let hello = sb.link().await.unwrap().hello().profile.clone().unwrap();
    assert_eq!(hello.permissions[0].level, Level::Partial, "{hello:?}");
    assert!(hello.permissions[0].notes.iter().any(|n| n.contains("outside its directory")), "{hello:?}");
    let refused =
        sb.exec(ExecRequest { command: "cat pubdir/old".into(), ..ExecRequest::default() }, None).await;
    assert!(refused.is_err(), "{refused:?}");
    let r = sb.read("pubdir/old", 0, 10).await.unwrap();
    assert!(!format!("{r:?}").contains("SECRET-"), "{r:?}");
}

/// `agentctl down` when dropped, also when the test fails half-way.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = agentctl(&self.0).arg("down").output();
    }
}

/// The same attack through `agentctl --permission deny:read:W/.env up` (how
/// `LocalSandbox(permissions=…)` and deepagents set rules): `exec`, `read` and `status`.
#[test]
fn agentctl_rules_hold_against_the_rename() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("s.json");
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    std::fs::write(w.join(".env"), "SECRET-ENV-4711\n").unwrap();
    let rule = format!("deny:read:{}/.env", w.display());
    let up = agentctl(&session).args(["--permission", &rule, "up", "--workspace"]).arg(&w).output().unwrap();
    assert!(up.status.success(), "{up:?}");
    let _down = Down(session.clone());
    let status = String::from_utf8(agentctl(&session).arg("status").output().unwrap().stdout).unwrap();
    let abi = status.split("landlock ABI ").nth(1).and_then(|t| t.split(')').next()?.parse::<u32>().ok());
    if abi.is_none_or(|abi| abi < 4) {
        skip(Need::Landlock, format!("profiles need landlock ABI 4: {status}"));
        return;
    }
    let out = agentctl(&session).args(["exec", "--", "mv .env notes.txt && : > .env"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let out =
        agentctl(&session).args(["exec", "--", "ln .env notes.txt; cat notes.txt .env"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("SECRET-"), "{out:?}");
    let out = agentctl(&session).args(["read", "notes.txt"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("SECRET-"), "{out:?}");
    assert_eq!(std::fs::read_to_string(w.join(".env")).unwrap(), "SECRET-ENV-4711\n");
    let status = String::from_utf8(agentctl(&session).arg("status").output().unwrap().stdout).unwrap();
    assert!(status.contains(&format!("permission {rule}: full")), "{status}");
}

/// Roots and rules of the allowed-name cases: `conf/public.txt` may be read, the rest of `conf` not.
const PUBLIC_INSIDE_SECRET: &str = r#"writable_roots = ["{W}"]

[[permissions]]
operations = ["read"]
paths = ["{W}/conf/public.txt"]
mode = "allow"

[[permissions]]
operations = ["read"]
paths = ["{W}/conf/**"]
mode = "deny"
"#;

/// A subtree read is granted back in (`allow read conf/public.txt` before `deny read conf/**`)
/// keeps its name: a denied file renamed onto it would be read through it by the next command.
#[tokio::test]
async fn a_denied_file_does_not_take_the_name_of_an_allowed_one() {
    let profile = format!("name = \"public-inside-secret\"\nmode = \"strict\"\n{PUBLIC_INSIDE_SECRET}");
    let files = [("conf/.env", "SECRET-ENV-4711\n"), ("conf/public.txt", "public\n")];
    let Some((daemon, sb, _dir)) = profiled(&profile, &files).await else { return };
    let w = real(&daemon);
    let r = run(&sb, "cat conf/public.txt").await;
    assert_eq!(r.output.as_deref(), Some("public\n"), "{r:?}");
    for attack in [
        "mv conf/.env conf/public.txt",
        "rm conf/public.txt && ln conf/.env conf/public.txt",
        "mv conf c2 && mkdir conf && mv c2/.env conf/public.txt",
    ] {
        let r = run(&sb, &format!("{attack}; echo \"exit=$?\"")).await;
        let output = r.output.unwrap_or_default();
        assert!(!output.ends_with("exit=0\n"), "`{attack}` succeeded: {output}");
        let r = run(&sb, "cat conf/public.txt").await;
        assert!(!r.output.unwrap_or_default().contains("SECRET-"), "`{attack}` let the secret be read");
        let r = sb.read("conf/public.txt", 0, 10).await.unwrap();
        assert!(!format!("{r:?}").contains("SECRET-"), "`{attack}`: {r:?}");
    }
    assert_eq!(std::fs::read_to_string(w.join("conf/.env")).unwrap(), "SECRET-ENV-4711\n");
}

/// `agentctl status` of a sandbox whose profile has read-deny rules, `allowed_commands` and
/// `network = "deny"`: each permission line it calls `full` holds against every way a command
/// or a verb could give a secret another name (rename, hard link, symlink, re-parenting an
/// ancestor, replacing, `..`), and it still says `full` afterwards.
#[tokio::test]
async fn status_says_full_only_where_the_permissions_hold() {
    let profile = r#"
name = "agent"
mode = "strict"
writable_roots = ["{W}"]
network = "deny"
allowed_commands = ["mv", "ln", "cat", "cp", "mkdir", "python3"]

[[permissions]]
operations = ["read"]
paths = ["{W}/.env", "{W}/secret/**", "{W}/a/b/secret/**"]
mode = "deny"
"#;
    let Some((daemon, sb, _dir)) = profiled(profile, FILES).await else { return };
    let status = || {
        let out = Command::new(binary("agentctl"))
            .env("AGENTD_URL", &daemon.url)
            .env("AGENTD_TOKEN", &daemon.token)
            .env("AGENTCTL_SESSION", "/nonexistent/agentctl-session.json")
            .arg("status")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let before = status();
    let rule = before.lines().find(|l| l.trim_start().starts_with("permission deny:read:")).unwrap();
    assert!(rule.ends_with(": full"), "{before}");
    let attacks = [
        "mv .env notes.txt && : > .env",
        "mv secret pub && mkdir secret",
        "mv a a2 && mkdir -p a/b/secret",
        "mv a/b a/b2",
        "ln .env hard",
        "ln -s .env link; cat link",
        "ln -s secret pubdir/s; cat pubdir/s/key",
        "cat pubdir/../.env pubdir/../secret/key",
        "mv pubdir/z.txt .env",
        "cp .env pubdir/copy",
        "python3 -c 'import os; os.rename(\"secret\", \"pub\")'",
        "python3 -c 'import os; os.link(\"secret/key\", \"pubdir/key\")'",
        "python3 -c 'import os; os.rename(\"a/b/secret/key\", \"a/b/key\")'",
    ];
    for attack in attacks {
        let r = run(&sb, attack).await;
        assert!(!r.output.unwrap_or_default().contains("SECRET-"), "`{attack}` printed a secret");
        let mut seen = everything_readable(&sb).await;
        for name in ["hard", "link", "pubdir/s/key", "pubdir/copy", "a/b/key"] {
            seen.push_str(&format!("{:?}", sb.read(name, 0, 10).await.unwrap()));
        }
        assert!(!seen.contains("SECRET-"), "`{attack}` let a secret be read:\n{seen}");
    }
    let after = status();
    assert!(after.contains(rule), "{after}");
}

/// Write-deny holds against the same moves (the directories on its way cannot gain or lose
/// entries), and against a hard link its directory already held: writing through the other name
/// would change the protected file.
#[tokio::test]
async fn a_write_denied_file_is_not_renamed_nor_written_through_another_name() {
    let profile = r#"
name = "config-read-only"
mode = "strict"
writable_roots = ["{W}"]

[[permissions]]
operations = ["write"]
paths = ["{W}/conf/config.toml"]
mode = "deny"
"#;
    let prepare = |w: &Path| {
        std::fs::create_dir(w.join("conf")).unwrap();
        std::fs::write(w.join("conf/config.toml"), "safe\n").unwrap();
        std::fs::hard_link(w.join("conf/config.toml"), w.join("conf/config.bak")).unwrap();
        // Writable by anyone: only the rules stand in the way.
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o666);
        std::fs::set_permissions(w.join("conf/config.toml"), mode).unwrap();
    };
    let Some((daemon, sb, _dir)) = prepared(profile, prepare).await else { return };
    let w = real(&daemon);
    for attack in [
        "echo pwn > conf/config.bak",
        "mv conf/config.toml conf/x && echo pwn > conf/x",
        "mv conf c2 && echo pwn > c2/config.toml",
        "ln conf/config.toml other && echo pwn > other",
        "mv conf/config.bak config.bak && echo pwn > config.bak",
    ] {
        let r = run(&sb, &format!("{attack}; echo \"exit=$?\"")).await;
        let output = r.output.unwrap_or_default();
        assert!(!output.ends_with("exit=0\n"), "`{attack}` succeeded: {output}");
        assert_eq!(std::fs::read_to_string(w.join("conf/config.toml")).unwrap(), "safe\n", "`{attack}`");
    }
    let r = sb.edit("conf/config.bak", "safe", "pwn", false).await.unwrap();
    assert!(r.error.is_some(), "{r:?}");
    assert_eq!(std::fs::read_to_string(w.join("conf/config.toml")).unwrap(), "safe\n");
}

/// An allowed name inside a read-denied subtree that does not exist yet: under `best_effort` the
/// commands run, and one must not give a denied file that name (a rename, or a same-directory hard
/// link, which needs only the right to create a file there), since the next command, the name now
/// existing, would read it under the allow rule.
#[tokio::test]
async fn a_denied_file_does_not_take_an_allowed_name_that_is_missing() {
    let profile = format!("name = \"public-not-yet\"\nmode = \"best_effort\"\n{PUBLIC_INSIDE_SECRET}");
    let files = [("conf/.env", "SECRET-ENV-4711\n")];
    for attack in
        ["mv conf/.env conf/public.txt", "ln conf/.env conf/public.txt", "cp conf/.env conf/public.txt"]
    {
        let Some((daemon, sb, _dir)) = profiled(&profile, &files).await else { return };
        let _ = run(&sb, attack).await;
        let r = run(&sb, "cat conf/public.txt conf/.env").await;
        assert!(
            !r.output.unwrap_or_default().contains("SECRET-"),
            "`{attack}` let the next command read the secret"
        );
        let r = sb.read("conf/public.txt", 0, 10).await.unwrap();
        assert!(!format!("{r:?}").contains("SECRET-"), "`{attack}`: the read verb gave {r:?}");
        drop(daemon);
    }
}
