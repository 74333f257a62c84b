//! `agentd serve --root DIR` against swap races: while the client runs a verb on `/a/…`, a thread
//! swaps `DIR/a` between a real directory and a symlink to a directory outside the root, atomically
//! (`renameat2(RENAME_EXCHANGE)`), in a tight loop (≥ 1000 swaps per verb). This is what a command
//! running in the workspace can do. Nothing outside may be read, written, emptied or deleted: the
//! outside tree is compared byte for byte after every round, and no result may carry its secret.
//!
//! Each attack must also have seen both sides of the swap (a round that reached the inside, and
//! one that was refused as `invalid_path`), so the race really interleaved with the requests.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentd_host::{AgentdSandbox, BaseSandbox, SandboxError};
use agentd_protocol::{ErrorCode, ExecRequest, Offload};
use agentd_tests::{Daemon, Swapper};
use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

/// In every outside file; must never appear in a result.
const SECRET: &str = "TOP-SECRET-OUTSIDE";
/// A name only the outside directory has; must never be listed.
const OUTSIDE_ONLY: &str = "only-outside-name";
const MIN_SWAPS: u64 = 1000;
const MIN_ROUNDS: u32 = 100;
/// Each attack ends within this, pass or fail.
const DEADLINE: Duration = Duration::from_secs(20);

/// What one round of an attack saw.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// It worked on the inside directory.
    Inside,
    /// It was refused as leaving the root.
    Refused,
    /// Anything else (a race in the middle of the walk, an unmatched edit): allowed, but no escape.
    Other,
}

/// `DIR` with `a` (a real directory) and `b` (a link to the outside), swapped by a thread.
struct Arena {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    outside: PathBuf,
    /// The real inside directory, wherever the swaps put it: to restore what a round removed.
    inside: OwnedFd,
    daemon: Daemon,
    swapper: Swapper,
}

impl Arena {
    fn new() -> Self {
        let root_dir = tempfile::tempdir().unwrap();
        let outside_dir = tempfile::tempdir().unwrap();
        let root = root_dir.path().canonicalize().unwrap();
        let outside = outside_dir.path().canonicalize().unwrap();
        std::fs::write(outside.join("secret"), format!("A {SECRET}\n")).unwrap();
        std::fs::create_dir(outside.join("d")).unwrap();
        std::fs::write(outside.join("d/f1"), SECRET).unwrap();
        std::fs::write(outside.join("d/f2"), SECRET).unwrap();
        std::fs::write(outside.join("cap"), SECRET).unwrap();
        std::fs::write(outside.join(OUTSIDE_ONLY), SECRET).unwrap();
        std::fs::create_dir(root.join("a")).unwrap();
        std::fs::write(root.join("a/secret"), "A inside\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("b")).unwrap();
        let inside = open(&root.join("a"), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        let daemon = Daemon::start_with(&["--root", root.to_str().unwrap()]);
        let swapper = Swapper::start(&root, "a", "b");
        Self { _dirs: (root_dir, outside_dir), outside, inside, daemon, swapper }
    }

    async fn sandbox(&self) -> AgentdSandbox {
        AgentdSandbox::connect(&self.daemon.url, Some(&self.daemon.token)).await.unwrap()
    }

    /// Runs `round` until it ran `MIN_ROUNDS` times over at least `MIN_SWAPS` swaps (within
    /// `DEADLINE`), checking the outside after every round.
    async fn attack<F, Fut>(&self, verb: &str, mut round: F)
    where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Seen>,
    {
        let before = snapshot(&self.outside);
        let first_swap = self.swapper.swaps();
        let start = Instant::now();
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        let mut rounds = 0;
        loop {
            let swapped = self.swapper.swaps() - first_swap;
            if rounds >= MIN_ROUNDS && swapped >= MIN_SWAPS {
                break;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{verb}: only {rounds} rounds and {swapped} swaps in {DEADLINE:?}"
            );
            let outcome = round(rounds).await;
            *seen.entry(format!("{outcome:?}")).or_default() += 1;
            assert_eq!(snapshot(&self.outside), before, "{verb}: the outside changed in round {rounds}");
            rounds += 1;
        }
        let swapped = self.swapper.swaps() - first_swap;
        eprintln!("{verb}: {rounds} rounds over {swapped} swaps in {:?}: {seen:?}", start.elapsed());
        assert!(
            seen.contains_key("Inside") && seen.contains_key("Refused"),
            "{verb}: the race never interleaved: {seen:?}"
        );
    }

    /// Recreates `a/d` with two files in the real inside directory.
    fn restore_inside_dir(&self) {
        match nix::sys::stat::mkdirat(&self.inside, "d", Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(err) => panic!("mkdir a/d: {err}"),
        }
        for name in ["d/f1", "d/f2"] {
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT;
            let _ = nix::fcntl::openat(&self.inside, name, flags, Mode::from_bits_truncate(0o644));
        }
    }
}

/// Every path below `dir` (not following links) with its content (`None` for directories).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path.clone());
                out.insert(path, None);
            } else {
                out.insert(path.clone(), Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

fn refused(error: Option<&str>) -> Seen {
    match error {
        Some(e) if e.contains("invalid_path") => Seen::Refused,
        _ => Seen::Other,
    }
}

fn assert_no_secret(verb: &str, text: &str) {
    assert!(!text.contains(SECRET) && !text.contains(OUTSIDE_ONLY), "{verb} leaked: {text}");
}

#[tokio::test]
async fn read_and_download_never_return_an_outside_file() {
    let arena = &Arena::new();
    let sb = &arena.sandbox().await;
    arena
        .attack("read", |_| async move {
            let r = sb.read("/a/secret", 0, 100).await.unwrap();
            let content = r.file_data.map(|d| d.content).unwrap_or_default();
            assert_no_secret("read", &content);
            if content == "A inside" { Seen::Inside } else { refused(r.error.as_deref()) }
        })
        .await;
    arena
        .attack("download", |_| async move {
            let d = sb.download_files(&["/a/secret".into()]).await.unwrap().remove(0);
            let content = String::from_utf8(d.content.unwrap_or_default()).unwrap();
            assert_no_secret("download", &content);
            if content == "A inside\n" { Seen::Inside } else { refused(d.error.as_deref()) }
        })
        .await;
}

#[tokio::test]
async fn edit_never_rewrites_an_outside_file() {
    let arena = &Arena::new();
    let sb = &arena.sandbox().await;
    // Alternating A -> B and B -> A: an edit that reached the outside file would change it.
    arena
        .attack("edit", |round| {
            let (old, new) = if round % 2 == 0 { ("A", "B") } else { ("B", "A") };
            async move {
                let r = sb.edit("/a/secret", old, new, false).await.unwrap();
                if r.error.is_none() { Seen::Inside } else { refused(r.error.as_deref()) }
            }
        })
        .await;
}

#[tokio::test]
async fn write_and_upload_never_create_outside() {
    let arena = &Arena::new();
    let sb = &arena.sandbox().await;
    arena
        .attack("write", |round| async move {
            let r = sb.write(&format!("/a/w{}/planted", round % 3), "x").await.unwrap();
            if r.error.is_none() { Seen::Inside } else { refused(r.error.as_deref()) }
        })
        .await;
    arena
        .attack("upload", |round| async move {
            let path = if round % 2 == 0 { "/a/up/planted" } else { "/a/secret" };
            let r = sb.upload_files(&[(path.into(), b"A inside\n".to_vec())]).await.unwrap();
            if r[0].error.is_none() { Seen::Inside } else { refused(r[0].error.as_deref()) }
        })
        .await;
}

#[tokio::test]
async fn delete_never_empties_an_outside_directory() {
    let arena = &Arena::new();
    let sb = &arena.sandbox().await;
    arena.restore_inside_dir();
    arena
        .attack("delete", |_| async move {
            let r = sb.delete("/a/d").await.unwrap();
            arena.restore_inside_dir();
            if r.error.is_none() { Seen::Inside } else { refused(r.error.as_deref()) }
        })
        .await;
}

#[tokio::test]
async fn ls_glob_and_grep_never_see_outside() {
    let arena = &Arena::new();
    let sb = &arena.sandbox().await;
    arena
        .attack("ls", |_| async move {
            let r = sb.ls("/a").await.unwrap();
            let names: Vec<String> = r.entries.unwrap_or_default().into_iter().map(|e| e.path).collect();
            assert_no_secret("ls", &names.join(" "));
            if names.contains(&"/a/secret".to_owned()) { Seen::Inside } else { refused(r.error.as_deref()) }
        })
        .await;
    arena
        .attack("glob", |_| async move {
            let r = sb.glob("*", Some("/a")).await.unwrap();
            let names: Vec<String> = r.matches.unwrap_or_default().into_iter().map(|e| e.path).collect();
            assert_no_secret("glob", &names.join(" "));
            if names.contains(&"/a/secret".to_owned()) { Seen::Inside } else { refused(r.error.as_deref()) }
        })
        .await;
    arena
        .attack("grep", |round| {
            async move {
                // Route A (a walk), then route B (a path glob, resolved hit by hit).
                let glob = if round % 2 == 0 { None } else { Some("**/secret") };
                let r = sb.grep("A", Some("/a"), glob, None).await.unwrap();
                let lines: Vec<String> = r.matches.unwrap_or_default().into_iter().map(|m| m.text).collect();
                assert_no_secret("grep", &lines.join("\n"));
                if lines.iter().any(|l| l == "A inside") { Seen::Inside } else { refused(r.error.as_deref()) }
            }
        })
        .await;
}

/// A refused exec (`spawn_failed`, the code of an unusable `cwd`) or its output.
async fn exec(sb: &AgentdSandbox, request: ExecRequest) -> Result<String, String> {
    match sb.exec(request, None).await {
        Ok(result) => Ok(result.output.unwrap_or_default()),
        Err(SandboxError::Refused { code: ErrorCode::SpawnFailed, message }) => Err(message),
        Err(err) => panic!("exec: {err}"),
    }
}

#[tokio::test]
async fn exec_cwd_and_capture_paths_never_leave_the_root() {
    let arena = &Arena::new();
    let sb = &arena.sandbox().await;
    arena
        .attack("exec cwd", |_| async move {
            let request = ExecRequest {
                command: "cat secret".into(),
                cwd: Some("/a".into()),
                ..ExecRequest::default()
            };
            match exec(sb, request).await {
                Ok(output) => {
                    assert_no_secret("exec cwd", &output);
                    if output == "A inside\n" { Seen::Inside } else { Seen::Other }
                }
                Err(message) if message.contains("leaves the root") => Seen::Refused,
                Err(_) => Seen::Other,
            }
        })
        .await;
    // Offloaded (file kept) and inline (file removed) in turn: neither may touch `outside/cap`.
    arena
        .attack("capture path", |round| async move {
            let offload =
                Offload { capture_path: "/a/cap".into(), inline_budget: u64::from(round % 2) * 100 };
            let request =
                ExecRequest { command: "echo hi".into(), offload: Some(offload), ..ExecRequest::default() };
            match exec(sb, request).await {
                Ok(output) => {
                    assert_no_secret("capture path", &output);
                    Seen::Inside
                }
                Err(message) if message.contains("leaves the root") => Seen::Refused,
                Err(_) => Seen::Other,
            }
        })
        .await;
}
