//! Nothing is lost: uploads, `write` and `edit` replace a file atomically (temp file + rename), so a
//! SIGKILL at any moment leaves the old content or the new one; the temp files a killed agentd left
//! are swept; any valid name (255 bytes) works; a failed upload removes the directories it made; new
//! content never inherits setuid/setgid. A real agentd binary, killed for real.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentd_host::{AgentdSandbox, BaseSandbox};
use agentd_tests::{Daemon, Ws, raw_connect, recv_json, send_text};
use futures_util::SinkExt as _;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use tokio_tungstenite::tungstenite::Message;

/// Size of the file edited while agentd is killed: large enough that an edit takes tens of ms.
const BIG: usize = 64 << 20;

async fn greeted(daemon: &Daemon) -> Ws {
    let mut ws = raw_connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    send_text(&mut ws, json!({"type": "hello", "id": 0, "versions": [1]}).to_string()).await;
    assert_eq!(recv_json(&mut ws).await["type"], "hello");
    ws
}

fn kill9(daemon: &mut Daemon) {
    let pid = agentd_tests::nix_pid(daemon.pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    daemon.child.wait().unwrap();
    agentd_tests::remove_scratch(daemon.pid());
}

/// The names in `dir` that look like agentd temp files.
fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".agentd-") && n.ends_with(".part"))
                .collect()
        })
        .unwrap_or_default()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[tokio::test]
async fn sigkill_mid_edit_leaves_the_old_or_the_new_content_whole() {
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("big.txt");
    let line = "abcdefghijklmnopqrstuvwxyz0123456789 the quick brown fox jumps\n";
    let mut old = line.repeat(BIG / line.len());
    old.push_str("MARKER-OLD\n");
    let new = old.replace("MARKER-OLD", "MARKER-NEW");
    let target = path.to_str().unwrap().to_owned();

    // One edit to completion: how long it takes.
    std::fs::write(&path, &old).unwrap();
    let daemon = Daemon::start();
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let started = Instant::now();
    assert_eq!(sb.edit(&target, "MARKER-OLD", "MARKER-NEW", false).await.unwrap().error, None);
    let full = started.elapsed();
    assert!(std::fs::read(&path).unwrap() == new.as_bytes());
    drop((sb, daemon));

    // Each round waits until the edit starts writing (a temp file appears, or the file itself
    // changes size, as an edit in place would), then kills agentd a little later, the delays spread
    // over one whole edit's time (the temp file appears before the edit's second pass writes it):
    // never empty, never partial.
    let rounds = 16u32;
    let (mut saw_old, mut saw_new) = (0, 0);
    for round in 0..rounds {
        std::fs::write(&path, &old).unwrap();
        let mut daemon = Daemon::start();
        let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
        let edit = {
            let target = target.clone();
            tokio::spawn(async move { sb.edit(&target, "MARKER-OLD", "MARKER-NEW", false).await })
        };
        let (dir, watched, size) = (files.path().to_owned(), path.clone(), old.len() as u64);
        let writing = tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                let resized = std::fs::metadata(&watched).map(|m| m.len() != size).unwrap_or(true);
                if !temps(&dir).is_empty() || resized {
                    return true;
                }
            }
            false
        });
        assert!(writing.await.unwrap(), "round {round}: the edit never started writing");
        tokio::time::sleep(full * round / rounds).await;
        kill9(&mut daemon);
        let _ = edit.await;
        let now = std::fs::read(&path).unwrap();
        let (is_old, is_new) = (now == old.as_bytes(), now == new.as_bytes());
        assert!(is_old || is_new, "round {round}: {} bytes, neither the old nor the new content", now.len());
        if is_old { saw_old += 1 } else { saw_new += 1 }
    }
    eprintln!("one edit of {BIG} B took {full:?}; killed {rounds} times: {saw_old} old, {saw_new} new");
    // The kills did land before and after the rename.
    assert!(saw_old > 0 && saw_new > 0, "{saw_old} old, {saw_new} new");
    // A restarted agentd sweeps the temp files the killed ones left.
    let _daemon = Daemon::start();
    let swept = agentd_tests::eventually(Duration::from_secs(5), || temps(files.path()).is_empty()).await;
    assert!(swept, "left over: {:?}", temps(files.path()));
}

/// Starts an upload of `path` on `daemon` and sends 2 MiB, then waits until its temp file holds
/// bytes: its writer has its lock by then. (A temp file killed before its writer locked it is still
/// mode 0000 and is only swept once it is `UNLOCKED_GRACE` old, which these tests do not wait for.)
async fn half_upload(daemon: &Daemon, path: &Path) -> Ws {
    let before = temps(path.parent().unwrap());
    let mut ws = greeted(daemon).await;
    send_text(&mut ws, json!({"type": "upload", "id": 1, "path": path.to_str().unwrap()}).to_string()).await;
    for _ in 0..8 {
        ws.send(Message::binary(agentd_protocol::chunk::encode(1, &[7u8; 256 << 10]))).await.unwrap();
    }
    let dir = path.parent().unwrap();
    let written = |name: &String| std::fs::metadata(dir.join(name)).is_ok_and(|m| m.len() > 0);
    let started = agentd_tests::eventually(Duration::from_secs(5), || {
        let new: Vec<String> = temps(dir).into_iter().filter(|n| !before.contains(n)).collect();
        matches!(new.as_slice(), [one] if written(one))
    })
    .await;
    assert!(started, "no temp file with bytes in it mid-upload");
    ws
}

#[tokio::test]
async fn sigkill_mid_upload_leaves_no_part_file_after_a_restart_or_the_next_upload() {
    let files = tempfile::tempdir().unwrap();
    let dest = files.path().join("sub/upload.bin");
    std::fs::create_dir(files.path().join("sub")).unwrap();
    let dir = dest.parent().unwrap().to_owned();

    // Killed mid-upload: the temp file stays, a new agentd removes it when it starts.
    let mut daemon = Daemon::start();
    let ws = half_upload(&daemon, &dest).await;
    kill9(&mut daemon);
    drop(ws);
    assert_eq!(temps(&dir).len(), 1, "the kill left a temp file");
    let restarted = Daemon::start();
    assert!(agentd_tests::eventually(Duration::from_secs(5), || temps(&dir).is_empty()).await);
    drop(restarted);

    // Killed again, its record of the temp file lost too: the next upload into that directory, by a
    // new agentd, sweeps it. A file of the user's that only looks similar is never touched.
    let lookalikes = [
        ".agentd-0123456789abcdef-00000000.part",
        ".agentd-notes.part",
        ".upload.bin.agentd-0123456789abcdef.part",
    ];
    for name in lookalikes {
        std::fs::write(dir.join(name), "mine").unwrap();
    }
    let mut daemon = Daemon::start();
    let ws = half_upload(&daemon, &dest).await;
    kill9(&mut daemon);
    drop(ws);
    let left: Vec<String> = temps(&dir).into_iter().filter(|n| !lookalikes.contains(&n.as_str())).collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let records = std::env::temp_dir().join(format!("agentd-temps-{}", nix::unistd::geteuid()));
    std::fs::remove_file(records.join(&left[0])).unwrap();
    let daemon = Daemon::start();
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let up = sb.upload_files(&[(dir.join("other").to_str().unwrap().into(), b"x".to_vec())]).await.unwrap();
    assert_eq!(up[0].error, None);
    assert!(!dir.join(&left[0]).exists(), "the next upload into the directory swept it");
    for name in lookalikes {
        assert_eq!(std::fs::read(dir.join(name)).unwrap(), b"mine");
    }
    assert!(!dest.exists());
}

#[tokio::test]
async fn names_of_255_bytes_upload_write_and_edit() {
    let daemon = Daemon::start();
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let dir = daemon.workspace.path().canonicalize().unwrap();
    for (i, verb) in ["upload", "write", "edit"].into_iter().enumerate() {
        let name: String = std::iter::repeat_n(char::from(b'a' + u8::try_from(i).unwrap()), 255).collect();
        let path = dir.join(&name);
        let p = path.to_str().unwrap().to_owned();
        match verb {
            "upload" => {
                let up = sb.upload_files(&[(p.clone(), b"uploaded".to_vec())]).await.unwrap();
                assert_eq!(up[0].error, None);
                assert_eq!(std::fs::read(&path).unwrap(), b"uploaded");
            }
            "write" => {
                assert_eq!(sb.write(&p, "written").await.unwrap().error, None);
                assert_eq!(sb.write(&p, "written twice").await.unwrap().error, None);
                assert_eq!(std::fs::read(&path).unwrap(), b"written twice");
            }
            _ => {
                std::fs::write(&path, "before edit").unwrap();
                assert_eq!(sb.edit(&p, "before", "after", false).await.unwrap().error, None);
                assert_eq!(std::fs::read(&path).unwrap(), b"after edit");
            }
        }
    }
    // One byte more is the file system's limit, not agentd's.
    let too_long = dir.join("z".repeat(256));
    let up = sb.upload_files(&[(too_long.to_str().unwrap().into(), b"x".to_vec())]).await.unwrap();
    assert!(up[0].error.is_some());
    assert!(temps(&dir).is_empty());
}

/// Sends a whole upload with the given `sha256`; returns its `upload_result` error.
async fn upload_with(ws: &mut Ws, id: u64, path: &Path, data: &[u8], sha256: &str) -> Option<String> {
    send_text(ws, json!({"type": "upload", "id": id, "path": path.to_str().unwrap()}).to_string()).await;
    ws.send(Message::binary(agentd_protocol::chunk::encode(id, data))).await.unwrap();
    send_text(ws, json!({"type": "upload_end", "id": id, "sha256": sha256}).to_string()).await;
    let reply = recv_json(ws).await;
    assert_eq!(reply["type"], "upload_result", "{reply}");
    reply["error"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn a_failed_upload_removes_the_directories_it_made_and_only_those() {
    let daemon = Daemon::start();
    let base = daemon.workspace.path().canonicalize().unwrap();
    let mut ws = greeted(&daemon).await;
    let wrong = "0".repeat(64);
    // A digest mismatch into a/b/c/ that did not exist: a is gone.
    let error = upload_with(&mut ws, 1, &base.join("a/b/c/f"), b"data", &wrong).await.unwrap();
    assert!(error.starts_with("sha256 mismatch"), "{error}");
    assert!(!base.join("a").exists());
    // A pre-existing a stays (and what it held); b and c, made by the upload, go.
    std::fs::create_dir(base.join("a")).unwrap();
    std::fs::write(base.join("a/keep"), "k").unwrap();
    let error = upload_with(&mut ws, 2, &base.join("a/b/c/f"), b"data", &wrong).await.unwrap();
    assert!(error.starts_with("sha256 mismatch"), "{error}");
    assert!(base.join("a/keep").is_file() && !base.join("a/b").exists());
    // Cancelled mid-upload: the same.
    send_text(
        &mut ws,
        json!({"type": "upload", "id": 3, "path": base.join("x/y/f").to_str().unwrap()}).to_string(),
    )
    .await;
    ws.send(Message::binary(agentd_protocol::chunk::encode(3, b"part"))).await.unwrap();
    assert!(agentd_tests::eventually(Duration::from_secs(5), || base.join("x/y").is_dir()).await);
    send_text(&mut ws, json!({"type": "cancel", "id": 4, "target": 3}).to_string()).await;
    let replies = [recv_json(&mut ws).await, recv_json(&mut ws).await];
    assert!(replies.iter().any(|r| r["error"] == "cancelled"), "{replies:?}");
    assert!(!base.join("x").exists());
    // A successful one keeps them, of course.
    let data = b"data";
    let sum = format!("{:x}", Sha256::digest(data));
    assert_eq!(upload_with(&mut ws, 5, &base.join("a/b/c/f"), data, &sum).await, None);
    assert_eq!(std::fs::read(base.join("a/b/c/f")).unwrap(), data);
}

#[tokio::test]
async fn overwriting_a_setuid_file_drops_the_bit_unless_asked_for() {
    let daemon = Daemon::start();
    let base: PathBuf = daemon.workspace.path().canonicalize().unwrap();
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let setuid = |name: &str| {
        let path = base.join(name);
        std::fs::write(&path, "#!/bin/sh\necho old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6755)).unwrap();
        assert_eq!(mode(&path), 0o6755);
        (path.to_str().unwrap().to_owned(), path)
    };
    let (p, path) = setuid("uploaded");
    assert_eq!(sb.upload_files(&[(p, b"new".to_vec())]).await.unwrap()[0].error, None);
    assert_eq!(mode(&path), 0o755);
    let (p, path) = setuid("written");
    assert_eq!(sb.write(&p, "new").await.unwrap().error, None);
    assert_eq!(mode(&path), 0o755);
    let (p, path) = setuid("edited");
    assert_eq!(sb.edit(&p, "old", "new", false).await.unwrap().error, None);
    assert_eq!((mode(&path), std::fs::read_to_string(&path).unwrap().contains("new")), (0o755, true));
    // An upload that names the mode gets it, setuid included: the client asked for it.
    let (p, path) = setuid("asked");
    let mut ws = greeted(&daemon).await;
    send_text(&mut ws, json!({"type": "upload", "id": 1, "path": p, "mode": 0o4750}).to_string()).await;
    ws.send(Message::binary(agentd_protocol::chunk::encode(1, b"new"))).await.unwrap();
    let sum = format!("{:x}", Sha256::digest(b"new"));
    send_text(&mut ws, json!({"type": "upload_end", "id": 1, "sha256": sum}).to_string()).await;
    assert_eq!(recv_json(&mut ws).await["error"], serde_json::Value::Null);
    assert_eq!(mode(&path), 0o4750);
}

/// `agentd fs edit` as an unprivileged user (uid 65534): the replacement where it can rename, the
/// contract's in-place rewrite where the directory takes no new file, the contract's refusal where the
/// file itself is not writable.
#[test]
fn edits_without_privileges_replace_or_rewrite_in_place_or_refuse() {
    use std::os::unix::fs::MetadataExt as _;
    let files = tempfile::tempdir().unwrap();
    let base = files.path();
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let make = |dir: &str, dir_mode: u32, file_mode: u32| {
        let dir = base.join(dir);
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, "before").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(file_mode)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
        file
    };
    let (open, closed, locked) =
        (make("open", 0o777, 0o666), make("closed", 0o555, 0o666), make("locked", 0o777, 0o444));
    let edit = |file: &Path| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(agentd_tests::binary("agentd"))
            .args(["fs", "edit"])
            .arg(file)
            .args(["before", "after"])
            .output()
            .unwrap();
        let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        result["edit"]["error"].as_str().map(str::to_owned)
    };
    let inode = |file: &Path| std::fs::metadata(file).unwrap().ino();
    // A writable directory: a new inode, now the editor's (agentd may not give it root's), mode kept.
    let before = inode(&open);
    assert_eq!(edit(&open), None);
    let meta = std::fs::metadata(&open).unwrap();
    assert_eq!((std::fs::read(&open).unwrap(), meta.mode() & 0o7777), (b"after".to_vec(), 0o666));
    assert_ne!(meta.ino(), before);
    assert_eq!(meta.uid(), 65534);
    // A directory it cannot write to: rewritten in place, as the contract's reference does.
    let before = inode(&closed);
    assert_eq!(edit(&closed), None);
    assert_eq!((std::fs::read(&closed).unwrap(), inode(&closed)), (b"after".to_vec(), before));
    // A file it may not write: refused although a rename would work.
    let error = edit(&locked).unwrap();
    assert_eq!(error, format!("Error: Permission denied editing file '{}'", locked.display()));
    assert_eq!(std::fs::read(&locked).unwrap(), b"before");
    for dir in ["open", "closed", "locked"] {
        assert!(temps(&base.join(dir)).is_empty(), "{dir}");
    }
    // The unprivileged records directory, when nothing is recorded in it.
    let _ = std::fs::remove_dir(std::env::temp_dir().join("agentd-temps-65534"));
}

/// A SIGKILLed agentd's scratch directory (`$TMPDIR/agentd-<pid>.<random>`) is removed by the next agentd
/// that starts; a live agentd's, one whose lock is held (an agentd of another pid namespace),
/// another user's and a link by such a name are left alone, and no link inside is followed.
#[tokio::test]
async fn the_next_agentd_sweeps_a_killed_ones_scratch_directory_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let env = format!("TMPDIR={}", tmp.path().display());
    let start = || Daemon::launch(&["env", &env], tempfile::tempdir().unwrap(), &[], None);
    let scratch = |name: &str| tmp.path().join(format!("agentd-{name}"));
    let mut killed = start();
    let live = start();
    let made = |pid: u32| agentd_tests::scratch_dirs_in(tmp.path(), pid).pop().unwrap_or_default();
    let (dead, alive) = (made(killed.pid()), made(live.pid()));
    assert!(dead.is_dir() && alive.is_dir(), "each agentd makes its scratch directory");
    // Something to remove below the dead one's, and a link out of it to what must stay.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious"), "keep").unwrap();
    std::fs::create_dir(dead.join("sub")).unwrap();
    std::fs::write(dead.join("sub/left"), "x").unwrap();
    std::os::unix::fs::symlink(outside.path(), dead.join("link")).unwrap();
    nix::sys::signal::kill(agentd_tests::nix_pid(killed.pid()), nix::sys::signal::Signal::SIGKILL).unwrap();
    killed.child.wait().unwrap();
    assert!(dead.is_dir(), "the control: a killed agentd leaves its scratch directory");
    // Names of pids no agentd here has (none reaches 2^22, the kernel's highest pid_max).
    let locked = scratch("4194320");
    std::fs::create_dir(&locked).unwrap();
    let lock = nix::fcntl::Flock::lock(
        std::fs::File::open(&locked).unwrap(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .unwrap();
    let link = scratch("4194321");
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    let foreign = scratch("4194322");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("theirs"), "x").unwrap();
    // Another user's only where the test may give it away (as root).
    let chowned = nix::unistd::chown(&foreign, Some(nix::unistd::Uid::from_raw(65534)), None).is_ok();

    // The sweep is done before the next agentd listens.
    let next = start();
    let gone = !dead.exists();
    let kept = (alive.is_dir(), locked.is_dir(), link.is_symlink(), foreign.join("theirs").exists());
    let precious = outside.path().join("precious").exists();
    drop((next, live, lock));
    assert!(gone, "{} is still there", dead.display());
    // Not root, the test's "other user's" directory is its own, and swept.
    assert_eq!(kept, (true, true, true, chowned), "live, locked, a link, another user's");
    assert!(precious, "a link was followed");
}
