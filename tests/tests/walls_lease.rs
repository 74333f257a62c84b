//! The roots lent to the sandbox user, tried as the attacks that got through (issue 47, items 9
//! and 10): a second agentd whose writable roots overlap a live session's re-owned that session's
//! private file, so its commands read and rewrote it and the first session lost it; and a command
//! that changed the mode, times and owner of what a write-deny rule names, because that was lent
//! to its user with the rest.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::io::{BufRead as _, Read as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use agentd_host::{AgentdSandbox, BaseSandbox as _};
use agentd_protocol::profile::sandbox_id;
use agentd_tests::{Need, as_root, run, skip};

/// Why these tests need root.
const ROOT: &str = "the sandbox user, and the roots lent to it, are root's to give";

/// An agentd started by the test; ended with SIGTERM on drop unless it already ended.
struct Agentd {
    child: Child,
    url: String,
    token: String,
    ended: bool,
}

impl Agentd {
    /// Starts agentd serving `profile` in `cwd`: `Err(stderr)` when it refuses to start.
    fn start(profile: &Path, cwd: &Path) -> Result<Self, String> {
        Self::start_through(&[], profile, cwd)
    }

    /// [`Agentd::start`] through `wrapper`, a command that ends by running its arguments.
    fn start_through(wrapper: &[&str], profile: &Path, cwd: &Path) -> Result<Self, String> {
        let token = format!("lease-{}", rand::random::<u64>());
        let agentd = agentd_tests::binary("agentd");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(&agentd);
                command
            }
            None => Command::new(&agentd),
        };
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--profile"])
            .arg(profile)
            .env("AGENTD_TOKEN", &token)
            .current_dir(cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        match line.trim().strip_prefix("agentd listening on ") {
            Some(url) => Ok(Self { url: url.to_owned(), token, child, ended: false }),
            None => {
                let mut stderr = String::new();
                child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
                child.wait().unwrap();
                Err(stderr)
            }
        }
    }

    async fn connect(&self) -> AgentdSandbox {
        AgentdSandbox::connect(&self.url, Some(&self.token)).await.unwrap()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn end(&mut self, signal: nix::sys::signal::Signal) {
        if !self.ended {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).unwrap());
            let _ = nix::sys::signal::kill(pid, signal);
            let _ = self.child.wait();
            self.ended = true;
            agentd_tests::remove_scratch(self.pid());
        }
    }
}

impl Drop for Agentd {
    fn drop(&mut self) {
        self.end(nix::sys::signal::Signal::SIGTERM);
    }
}

fn profile(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn meta(path: &Path) -> std::fs::Metadata {
    std::fs::symlink_metadata(path).unwrap()
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory holding the first session's workspace `w` (searchable by every user), and the
/// profiles' directory.
struct Place {
    _top: tempfile::TempDir,
    top: PathBuf,
    w: PathBuf,
    config: tempfile::TempDir,
}

impl Place {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        let w = top.join("w");
        std::fs::create_dir(&w).unwrap();
        set_mode(&top, 0o755);
        Self { _top: dir, top, w, config: tempfile::tempdir().unwrap() }
    }

    /// A profile named `name` whose one writable root is `root`.
    fn roots(&self, name: &str, root: &Path) -> PathBuf {
        let text = format!("name = \"{name}\"\nwritable_roots = [\"{}\"]\n", root.display());
        profile(self.config.path(), name, &text)
    }

    /// The first session, lending `w`, and the 0600 file `w/sub/private` its command made.
    async fn first_session(&self, content: &str) -> (Agentd, AgentdSandbox, PathBuf) {
        let first = Agentd::start(&self.roots("first", &self.w), &self.w).unwrap();
        let sb = first.connect().await;
        let command = format!("mkdir sub && echo '{content}' > sub/private && chmod 600 sub/private");
        let r = run(&sb, &command).await;
        assert_eq!(r.exit_code, 0, "{r:?}");
        let private = self.w.join("sub/private");
        assert_eq!((meta(&private).uid(), meta(&private).mode() & 0o777), (sandbox_id(first.pid()), 0o600));
        (first, sb, private)
    }
}

#[tokio::test]
async fn a_second_agentd_cannot_take_a_live_sessions_roots() {
    if !as_root(ROOT) {
        return;
    }
    let place = Place::new();
    let (w, top_path) = (place.w.clone(), place.top.clone());
    let roots = |name: &str, root: &Path| place.roots(name, root);
    let first_profile = roots("first", &w);
    let (mut first, sb, private) = place.first_session("the first session").await;
    let owner = sandbox_id(first.pid());

    // The attack: a second agentd lending the first one's subdirectory, its workspace, or a
    // directory above it. Each is refused at start, naming the first agentd and the root.
    for (name, root) in [("inside", w.join("sub")), ("equal", w.clone()), ("above", top_path.clone())] {
        let second = roots(name, &root);
        match Agentd::start(&second, &top_path) {
            Ok(mut started) => {
                let took =
                    run(&started.connect().await, &format!("cat {0}; echo mine > {0}", private.display()))
                        .await;
                started.end(nix::sys::signal::Signal::SIGTERM);
                panic!("a second agentd lending {name} ({}) started: {took:?}", root.display());
            }
            Err(stderr) => {
                assert!(stderr.contains(&format!("live agentd pid {}", first.pid())), "{name}: {stderr}");
                assert!(stderr.contains(&root.display().to_string()), "{name}: {stderr}");
            }
        }
    }
    assert_eq!((meta(&private).uid(), meta(&private).mode() & 0o777), (owner, 0o600));
    assert_eq!(std::fs::read_to_string(&private).unwrap(), "the first session\n");
    let r = run(&sb, "cat sub/private && echo more >> sub/private").await;
    assert_eq!((r.exit_code, r.output.as_deref()), (0, Some("the first session\n")), "{r:?}");

    // Once the first agentd has ended, the roots are free again.
    drop(sb);
    first.end(nix::sys::signal::Signal::SIGTERM);
    let mut next = Agentd::start(&roots("after-exit", &w.join("sub")), &top_path).unwrap();
    let r = run(&next.connect().await, &format!("cat {}", private.display())).await;
    assert_eq!(r.output.as_deref(), Some("the first session\nmore\n"), "{r:?}");
    next.end(nix::sys::signal::Signal::SIGTERM);

    // And after it was killed: the kernel dropped its lock with it.
    let mut killed = Agentd::start(&first_profile, &w).unwrap();
    let r = run(&killed.connect().await, "echo killed >> sub/private").await;
    assert_eq!(r.exit_code, 0, "{r:?}");
    killed.end(nix::sys::signal::Signal::SIGKILL);
    let mut after_kill = Agentd::start(&roots("after-kill", &w), &w).unwrap();
    let r = run(&after_kill.connect().await, "echo again >> sub/private && cat sub/private").await;
    assert_eq!(r.output.as_deref(), Some("the first session\nmore\nkilled\nagain\n"), "{r:?}");
    after_kill.end(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(meta(&private).uid(), 0, "given back to agentd's user");
}

/// The same directory by another path (a bind mount, in a mount namespace of the test's own) is no
/// overlap by identity of the roots, but the live agentd's sandbox user's files are still not taken.
#[tokio::test]
async fn a_live_agentds_files_are_not_taken_through_another_path() {
    if !as_root(ROOT) {
        return;
    }
    let place = Place::new();
    let alias = place.top.join("alias");
    std::fs::create_dir(&alias).unwrap();
    let (first, _sb, private) = place.first_session("mine").await;
    let owner = sandbox_id(first.pid());

    let bind =
        format!("mount --bind {} {} && exec \"$0\" \"$@\"", place.w.join("sub").display(), alias.display());
    let wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c", bind.as_str()];
    let mut second = Agentd::start_through(&wrapper, &place.roots("alias", &alias), &place.top).unwrap();
    let r =
        run(&second.connect().await, &format!("cat {0}/private; echo theirs > {0}/private", alias.display()))
            .await;
    assert_ne!(r.exit_code, 0, "{r:?}");
    second.end(nix::sys::signal::Signal::SIGTERM);
    assert_eq!((meta(&private).uid(), meta(&private).mode() & 0o777), (owner, 0o600));
    assert_eq!(std::fs::read_to_string(&private).unwrap(), "mine\n");
}

#[tokio::test]
async fn what_a_write_deny_names_keeps_its_mode_times_and_owner() {
    if !as_root(ROOT) {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    let (secret, locked, inner) = (w.join("secret.txt"), w.join("locked"), w.join("locked/inner.txt"));
    std::fs::write(&secret, "top secret\n").unwrap();
    std::fs::create_dir(&locked).unwrap();
    std::fs::write(&inner, "inner\n").unwrap();
    set_mode(&secret, 0o600);
    set_mode(&inner, 0o600);
    set_mode(&locked, 0o700);
    let config = tempfile::tempdir().unwrap();
    let text = format!(
        "name = \"deny\"\nwritable_roots = [\"{w}\"]\n\n[[permissions]]\noperations = [\"write\"]\n\
         paths = [\"{w}/secret.txt\", \"{w}/locked/**\"]\nmode = \"deny\"\n",
        w = w.display()
    );
    let mut agentd = Agentd::start(&profile(config.path(), "deny", &text), &w).unwrap();
    let sb = agentd.connect().await;
    if sb.link().await.unwrap().hello().landlock_abi < 4 {
        skip(Need::Landlock, "permissions need landlock ABI 4");
        return;
    }
    let before: Vec<(u32, i64)> =
        [&secret, &locked, &inner].iter().map(|p| (meta(p).uid(), meta(p).mtime())).collect();

    let attacks = [
        "chmod 6777 secret.txt",
        "touch -d 2001-01-01 secret.txt",
        "chown $(id -u):$(id -g) secret.txt",
        "chmod 000 locked",
        "touch -d 2001-01-01 locked",
        "chmod 777 locked/inner.txt",
        "chown $(id -u) locked/inner.txt",
        "echo changed > secret.txt",
    ];
    for attack in attacks {
        let r = run(&sb, attack).await;
        assert_ne!(r.exit_code, 0, "{attack} went through: {r:?}");
    }
    let after: Vec<(u32, i64)> =
        [&secret, &locked, &inner].iter().map(|p| (meta(p).uid(), meta(p).mtime())).collect();
    assert_eq!(after, before, "owner and mtime");
    for (path, mode) in [(&secret, 0o640), (&locked, 0o750), (&inner, 0o640)] {
        assert_eq!(
            meta(path).mode() & 0o7777,
            mode,
            "{}: readable by the sandbox user's group",
            path.display()
        );
    }

    // What the rules allow still works: reading, by the verb and by a command.
    for (path, content) in [(&secret, "top secret"), (&inner, "inner")] {
        let read = sb.read(&path.display().to_string(), 0, 10).await.unwrap();
        assert_eq!(read.error, None, "{read:?}");
        assert!(read.file_data.unwrap().content.contains(content));
    }
    let r = run(&sb, "cat secret.txt locked/inner.txt").await;
    assert_eq!(r.output.as_deref(), Some("top secret\ninner\n"), "{r:?}");

    // At the end, each is as it was.
    drop(sb);
    agentd.end(nix::sys::signal::Signal::SIGTERM);
    for (path, mode) in [(&secret, 0o600), (&locked, 0o700), (&inner, 0o600)] {
        assert_eq!(
            (meta(path).uid(), meta(path).gid(), meta(path).mode() & 0o7777),
            (0, 0, mode),
            "{}",
            path.display()
        );
    }
}
