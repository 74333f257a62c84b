//! `allowed_commands`, attacked where it said `programs: full` and let other programs run: a
//! program written into memory (`memfd_create`) and executed from there; a multi-call binary
//! (busybox) allowed under one of its names, answering to all of them; an allowed name resolved
//! through a directory commands can write (a venv in the workspace), re-linked to another
//! program; and, for commands that keep root's capabilities, shared memory executed through
//! `/proc/self/map_files`. Each attack is run as it got through before; what the report says is
//! checked with it.
//!
//! Needs landlock (ABI ≥ 4, as the profile tests) and python3; the busybox attack takes the
//! busybox binary out of the `agentd-busybox` image (Docker). Without them each test prints one
//! `skipped:` line ([`agentd_tests::skip`]).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use agentd_host::{AgentdSandbox, SandboxError};
use agentd_protocol::profile::{Enforcement, Level, ProfileOverride};
use agentd_protocol::{ErrorCode, ExecRequest, ExecResult};
use agentd_tests::{Need, profiled, skip};

async fn run(sandbox: &AgentdSandbox, command: &str) -> Result<ExecResult, SandboxError> {
    let request = ExecRequest { command: command.to_owned(), timeout: Some(20.0), ..ExecRequest::default() };
    sandbox.exec(request, None).await
}

async fn output(sandbox: &AgentdSandbox, command: &str) -> String {
    run(sandbox, command).await.unwrap().output.unwrap_or_default()
}

/// What `hello` says the server's profile gets (what `agentctl status` prints).
async fn capability(sandbox: &AgentdSandbox) -> Enforcement {
    sandbox.link().await.unwrap().hello().profile.clone().expect("a profile")
}

fn python3() -> bool {
    let found =
        std::process::Command::new("python3").arg("-c").arg("pass").status().is_ok_and(|s| s.success());
    if !found {
        skip(Need::Python3, "python3 is not on PATH");
    }
    found
}

/// A directory outside the workspace that the sandbox user can search and not write.
fn shared_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `/usr/bin/id`, written into a memfd and executed from it, by path (`/proc/self/fd/N`) and by
/// descriptor (`fexecve`, `execveat`); and the same through a file made with `O_TMPFILE` in the
/// workspace. Prints `uid=` when it ran.
const FROM_MEMORY: &str = r#"
import os, sys
how = sys.argv[1]
if how == "tmpfile":
    fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o755)
else:
    fd = os.memfd_create("x", 0)
os.write(fd, open("/usr/bin/id", "rb").read())
if how == "fd":
    os.execve(fd, ["id"], {})
os.execv(f"/proc/self/fd/{fd}", ["id"])
"#;

/// A memfd sealed against execution (what the filter lets through) works as memory, and cannot be
/// made executable.
const SEALED: &str = r#"
import os
MFD_NOEXEC_SEAL = 8
fd = os.memfd_create("x", MFD_NOEXEC_SEAL)
os.write(fd, open("/usr/bin/id", "rb").read())
os.lseek(fd, 0, 0)
print("read back", len(os.read(fd, 4)))
try:
    os.fchmod(fd, 0o755)
except OSError as e:
    print("fchmod", e.errno)
os.execv(f"/proc/self/fd/{fd}", ["id"])
"#;

#[tokio::test]
async fn an_allowed_python_cannot_execute_a_program_it_wrote_into_memory() {
    if !python3() {
        return;
    }
    let profile = "name = \"python-only\"\nwritable_roots = [\"{W}\"]\nallowed_commands = [\"python3\"]\n";
    let files = [("memory.py", FROM_MEMORY), ("sealed.py", SEALED)];
    let Some((_daemon, sb, _dir)) = profiled(profile, &files).await else { return };
    assert_eq!(output(&sb, "python3 -c 'print(6*7)'").await, "42\n");
    for how in ["path", "fd", "tmpfile"] {
        let r = run(&sb, &format!("python3 memory.py {how}")).await.unwrap();
        let out = r.output.clone().unwrap_or_default();
        assert!(!out.contains("uid="), "{how}: /usr/bin/id ran from memory: {out}");
        assert!(out.contains("PermissionError"), "{how}: {out}");
        assert_eq!(r.enforcement.as_ref().map(|e| e.programs), Some(Level::Full), "{how}");
    }
    let sealed = output(&sb, "python3 sealed.py").await;
    assert!(sealed.starts_with("read back 4\nfchmod 1\n"), "{sealed}");
    assert!(!sealed.contains("uid=") && sealed.contains("PermissionError"), "{sealed}");
}

/// The busybox binary of the `agentd-busybox` image, copied to `to`; `false` (after [`skip`])
/// without the image.
async fn busybox(to: &Path) -> bool {
    if !agentd_tests::docker_available("agentd-busybox:latest").await {
        return false;
    }
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker").args(args).output().unwrap();
        assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let container = docker(&["create", "agentd-busybox:latest"]);
    let _remove = agentd_tests::RemoveOnDrop(container.clone());
    docker(&["cp", &format!("{container}:/bin/busybox"), to.to_str().unwrap()]);
    true
}

#[tokio::test]
async fn allowing_one_name_of_busybox_is_not_reported_as_allowing_one_program() {
    // busybox under three names, hard links of one file, outside the writable roots.
    let bin = shared_dir();
    let b = bin.path().canonicalize().unwrap();
    if !busybox(&b.join("busybox")).await {
        return;
    }
    for name in ["ls", "id"] {
        std::fs::hard_link(b.join("busybox"), b.join(name)).unwrap();
    }
    let profile = |mode: &str| {
        format!(
            "name = \"ls-only\"\nmode = \"{mode}\"\nwritable_roots = [\"{{W}}\"]\nallowed_commands = [\"ls\"]\n\
             [env]\nPATH = \"{}:/usr/bin:/bin\"\n",
            b.display()
        )
    };
    let attacks =
        ["ls >/dev/null; id", "ls >/dev/null; busybox id", &format!("ls >/dev/null; {}/id", b.display())];

    // Best effort: the attack runs (busybox answers as `id`), and the result says `partial`,
    // naming `id`.
    let Some((_daemon, sb, _dir)) = profiled(&profile("best_effort"), &[]).await else { return };
    let r = run(&sb, attacks[0]).await.unwrap();
    let report = r.enforcement.expect("a report");
    assert!(r.output.as_deref().is_some_and(|o| o.contains("uid=")), "{:?}", r.output);
    assert_eq!(report.programs, Level::Partial, "`{}` ran `id`: {:?}", attacks[0], report.notes);
    let note = report.notes.iter().find(|n| n.contains("multi-call")).expect("a multi-call note");
    assert!(note.contains(&b.join("ls").display().to_string()) && note.contains("id"), "{note}");

    // Strict: nothing runs, and the refusal names the other names.
    let Some((_daemon, sb, _dir)) = profiled(&profile("strict"), &[]).await else { return };
    assert_eq!(capability(&sb).await.programs, Level::Partial);
    for attack in attacks {
        let err = run(&sb, attack).await.expect_err(attack);
        let SandboxError::Refused { code: ErrorCode::NotEnforceable, message } = &err else {
            panic!("`{attack}`: {err:?}")
        };
        assert!(message.contains("multi-call") && message.contains("id"), "{message}");
    }
}

#[tokio::test]
async fn a_program_allowed_through_a_writable_directory_is_not_granted() {
    if !python3() {
        return;
    }
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let profile = "name = \"venv\"\nwritable_roots = [\"{W}\"]\nallowed_commands = [\"python\", \"ln\"]\n\
                   [env]\nPATH = \"{W}/venv/bin:/usr/bin:/bin\"\n";
    let Some((daemon, sb, _dir)) = profiled(profile, &[("venv/bin/.keep", "")]).await else { return };
    let w = daemon.workspace.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(&python, w.join("venv/bin/python")).unwrap();
    // The agent uses its venv's python; then a command re-links it to another program, and the
    // next commands run `python`.
    let first = run(&sb, "python -c 'print(6*7)'").await.unwrap();
    let relink = run(&sb, "ln -sf /usr/bin/id venv/bin/python").await.unwrap();
    assert_eq!(relink.exit_code, 0, "{relink:?}");
    assert_eq!(std::fs::read_link(w.join("venv/bin/python")).unwrap(), Path::new("/usr/bin/id"));
    // The next command, and one whose own profile makes its ruleset anew (a narrower list).
    let narrower =
        ProfileOverride { allowed_commands: Some(vec!["python".into()]), ..ProfileOverride::default() };
    for profile in [None, Some(Box::new(narrower))] {
        let request =
            ExecRequest { command: "python".into(), timeout: Some(20.0), profile, ..ExecRequest::default() };
        let out = sb.exec(request, None).await.unwrap().output.unwrap_or_default();
        assert!(!out.contains("uid="), "the re-linked python ran /usr/bin/id: {out}");
    }
    // The venv's python was never granted, and the report says why.
    let out = first.output.clone().unwrap_or_default();
    assert!(!out.contains("42") && out.contains("Permission denied"), "{out}");
    let report = first.enforcement.expect("a report");
    let note =
        format!("`python` is not granted: it resolves through {}, which commands can change", w.display());
    assert!(report.notes.iter().any(|n| n.contains(&note)), "{:?}", report.notes);
}

/// Shared anonymous memory holding `/usr/bin/id`, executed through `/proc/self/map_files` (which
/// only a command with `CAP_SYS_ADMIN` may open).
const FROM_SHARED_MEMORY: &str = r#"
import mmap, os
data = open("/usr/bin/id", "rb").read()
m = mmap.mmap(-1, (len(data) + 4095) // 4096 * 4096, mmap.MAP_SHARED)
m.write(data)
for line in open("/proc/self/maps"):
    r, perms, off, dev, ino = line.split()[:5]
    if perms.endswith("s") and "dev/zero" in line:
        start, end = r.split("-")
        path = f"/proc/self/map_files/{int(start, 16):x}-{int(end, 16):x}"
        os.execv(path, ["id"])
print("no mapping")
"#;

#[tokio::test]
async fn commands_with_root_capabilities_are_not_reported_as_held_to_their_programs() {
    if !python3() {
        return;
    }
    let profile = |mode: &str| {
        format!(
            "name = \"root-python\"\nmode = \"{mode}\"\nuser = \"agentd\"\nwritable_roots = [\"{{W}}\"]\n\
             allowed_commands = [\"python3\"]\n[env]\nPATH = \"/usr/bin:/bin\"\n"
        )
    };
    if !nix::unistd::geteuid().is_root() {
        return skip(Need::Root, "agentd is not root here: its commands have no capabilities to keep");
    }
    let files = [("shared.py", FROM_SHARED_MEMORY)];
    let Some((_daemon, sb, _dir)) = profiled(&profile("best_effort"), &files).await else { return };
    // The attack is real: root's commands run /usr/bin/id from shared memory...
    let r = run(&sb, "python3 shared.py").await.unwrap();
    let report = r.enforcement.expect("a report");
    assert!(r.output.as_deref().is_some_and(|o| o.contains("uid=")), "{:?}", r.output);
    // ...so the report does not call the programs held.
    assert_eq!(report.programs, Level::Partial, "python3 ran /usr/bin/id: {:?}", report.notes);
    assert!(report.notes.iter().any(|n| n.contains("/proc/self/map_files")), "{:?}", report.notes);
    // Strict: nothing runs.
    let Some((_daemon, sb, _dir)) = profiled(&profile("strict"), &files).await else { return };
    let err = run(&sb, "python3 shared.py").await.expect_err("strict ran it");
    assert!(matches!(err, SandboxError::Refused { code: ErrorCode::NotEnforceable, .. }), "{err:?}");
}
