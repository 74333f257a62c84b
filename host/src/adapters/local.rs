//! [`LocalSandbox`]: the embedded default. It starts `agentd serve` as a child on a Unix socket in a
//! private directory with a temporary workspace, links to it, and on drop stops it (agentd kills
//! every running command's tree on SIGTERM) and removes the workspace. Only in the process that
//! started it: a copy a forked child inherited leaves all of that to its owner when dropped.
//!
//! Who may drive that agentd: only a client holding its token, a fresh one per sandbox that lives in
//! this process's memory and agentd's (handed over in agentd's environment, which agentd erases at
//! start), never in a file. A process that can reach the socket (another sandbox's command, a
//! container sharing the directory, anything of the same user) cannot connect without it, whatever
//! its ancestry; agentd also refuses its own commands by their process.
//!
//! What that agentd and its commands see of this process's environment: the minimal set and the
//! names the caller gives ([`agentd_protocol::profile::env`]), never the harness's secrets.

use std::io::{BufRead as _, BufReader};
use std::mem::ManuallyDrop;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentd_protocol::permission::PermissionRule;
use agentd_protocol::profile::env as passed_env;
use agentd_protocol::profile::{Limits, Mode, SandboxProfile};
use async_trait::async_trait;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::contract::BaseSandbox;
use crate::contract::agentd::{AgentdSandbox, OverAgentd};
use crate::contract::deadlines::Deadlines;
use crate::contract::error::{Result, SandboxError};
use crate::contract::provider::{Kind, Provider, SandboxInfo};

/// This kind, as its row of the kinds table names it.
pub const KIND: Kind = Kind::new("local");

/// Variable naming the agentd binary to run (overrides the search).
pub const AGENTD_BIN_ENV: &str = "AGENTD_BIN";

/// How long agentd may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopping agentd gets after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A private agentd on loopback, alive as long as this value in the process that started it.
pub struct LocalSandbox {
    /// `unix:PATH` of agentd's socket.
    url: String,
    /// The bearer token agentd requires on its socket.
    token: String,
    /// The process that started agentd: only its drop ends what [`Owned`] holds. A forked child
    /// (Python's `os.fork`, multiprocessing) has a copy of this value; its drop used to stop the
    /// parent's agentd and delete the parent's workspace and socket.
    owner: u32,
    owned: ManuallyDrop<Owned>,
}

/// What dropping a [`LocalSandbox`] ends, in its owner only.
struct Owned {
    sandbox: AgentdSandbox,
    child: Child,
    workspace: tempfile::TempDir,
    /// Holds agentd's socket; mode 0700.
    _socket_dir: tempfile::TempDir,
    /// The default profile's private tmp and its profile file (absent when unconfined).
    _confinement: Option<DefaultProfile>,
}

/// Tasks (processes and threads: a pids cgroup counts both) one command of the embedded default may
/// have at once. Real work fits with room to spare: a parallel build (`make -j`/cargo on a many-core
/// machine, each compiler with its own threads), a JVM or Gradle build (hundreds of threads), a test
/// runner with dozens of workers, a headless browser. It is systemd's default per-service `TasksMax`
/// on a machine with the common `pid_max` of 32768 (15 %, 4915) rounded down: a fork bomb stops
/// there, leaving the machine's process table to everything else, `agentctl down` included.
pub const DEFAULT_PROCESSES: u64 = 4096;

/// The embedded default's sandbox profile: commands may write only to the workspace and a private
/// tmp (`TMPDIR`), read everything, use the network, and have at most [`DEFAULT_PROCESSES`] tasks.
/// Best-effort, so a kernel without landlock (or a machine where no pids cgroup can be made) still
/// runs commands, and each result says what was enforced.
pub struct DefaultProfile {
    pub tmp: tempfile::TempDir,
    config: tempfile::TempDir,
}

impl DefaultProfile {
    pub fn create(workspace: &Path) -> Result<Self> {
        Self::create_with(workspace, &[], &[])
    }

    /// The default profile with `extra_roots` also writable (each must exist), and `permissions`
    /// (path rules the file verbs check and landlock enforces for every command).
    pub fn create_with(
        workspace: &Path,
        extra_roots: &[PathBuf],
        permissions: &[PermissionRule],
    ) -> Result<Self> {
        let tmp = tempfile::Builder::new().prefix("agentd-tmp-").tempdir()?;
        let config = tempfile::Builder::new().prefix("agentd-profile-").tempdir()?;
        let profile = SandboxProfile {
            name: "local-default".to_owned(),
            mode: Some(Mode::BestEffort),
            writable_roots: Some(
                [workspace, tmp.path()]
                    .into_iter()
                    .chain(extra_roots.iter().map(PathBuf::as_path))
                    .map(|root| root.to_string_lossy().into_owned())
                    .collect(),
            ),
            env: [("TMPDIR".to_owned(), tmp.path().to_string_lossy().into_owned())].into(),
            limits: Limits { processes: Some(DEFAULT_PROCESSES), ..Limits::default() },
            permissions: permissions.to_vec(),
            ..SandboxProfile::default()
        };
        let text = serde_json::to_string_pretty(&profile).map_err(|e| SandboxError::Start(e.to_string()))?;
        std::fs::write(config.path().join("profile.json"), text)?;
        Ok(Self { tmp, config })
    }

    /// The file to give `agentd serve --profile`.
    pub fn file(&self) -> PathBuf {
        self.config.path().join("profile.json")
    }

    /// Keeps both directories past this value (for `agentctl up`): (tmp, profile directory).
    pub fn keep(self) -> (PathBuf, PathBuf) {
        (self.tmp.keep(), self.config.keep())
    }
}

/// Where a started agentd listens.
#[derive(Debug, Clone)]
pub struct Started {
    /// `unix:PATH`.
    pub url: String,
    pub pid: u32,
}

/// How a started agentd learns its token.
#[derive(Debug)]
pub enum TokenSource<'a> {
    /// In its environment (`AGENTD_TOKEN`), which agentd erases at start: the token then lives only
    /// in memory.
    Env(&'a str),
    /// In a file agentd reads (`--token-file`) and withholds from its commands.
    File(&'a Path),
}

/// How to start a [`LocalSandbox`]. The default is the embedded default: confined by
/// [`DefaultProfile`], nothing writable beyond the workspace and its private tmp.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Run commands under [`DefaultProfile`] (`false`: confined only by the machine).
    pub confined: bool,
    /// More directories commands may write to, beside the workspace and tmp. Each is created when
    /// missing. Ignored when not `confined` (everything the user may write is writable then).
    pub writable_roots: Vec<PathBuf>,
    /// The link's deadlines (`None`: [`Deadlines::from_env`]).
    pub deadlines: Option<Deadlines>,
    /// Path permissions, first match wins (deepagents' `FilesystemPermission` shape): the file
    /// verbs check them and landlock holds every command to them. Refused when not `confined`.
    pub permissions: Vec<PermissionRule>,
    /// Variables of this process's environment commands get beside the minimal set (`PATH`,
    /// `HOME`, `LANG`, …): names, or prefixes ending in `*`; a name that looks like a secret passes
    /// only when named exactly ([`agentd_protocol::profile::env`]).
    pub env_allowlist: Vec<String>,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            confined: true,
            writable_roots: Vec::new(),
            deadlines: None,
            permissions: Vec::new(),
            env_allowlist: Vec::new(),
        }
    }
}

impl LocalSandbox {
    /// Starts agentd with a fresh temporary workspace, confined by [`DefaultProfile`].
    pub async fn start() -> Result<Self> {
        Self::start_with(&LocalOptions::default()).await
    }

    /// Starts agentd without a sandbox profile (commands are confined only by the machine).
    pub async fn start_unconfined() -> Result<Self> {
        Self::start_with(&LocalOptions { confined: false, ..LocalOptions::default() }).await
    }

    /// Starts agentd as `options` say.
    pub async fn start_with(options: &LocalOptions) -> Result<Self> {
        if !options.confined && !options.permissions.is_empty() {
            return Err(SandboxError::Start(
                "permissions need a confined sandbox: agentd enforces them through its profile".to_owned(),
            ));
        }
        for entry in &options.env_allowlist {
            passed_env::check_named(entry)
                .map_err(|why| SandboxError::Start(format!("env_allowlist: {why}")))?;
        }
        let workspace = tempfile::Builder::new().prefix("agentd-workspace-").tempdir()?;
        let confinement = if options.confined {
            let mut roots = Vec::with_capacity(options.writable_roots.len());
            for root in &options.writable_roots {
                std::fs::create_dir_all(root)
                    .map_err(|e| SandboxError::Start(format!("writable root {}: {e}", root.display())))?;
                // Landlock rules name inodes: resolve links so the rule covers what the path means.
                roots.push(std::fs::canonicalize(root)?);
            }
            Some(DefaultProfile::create_with(workspace.path(), &roots, &options.permissions)?)
        } else {
            None
        };
        let profile = confinement.as_ref().map(DefaultProfile::file);
        let socket_dir = socket_dir()?;
        let token = crate::contract::random::random_hex();
        let (child, started) = spawn_agentd_passing(
            workspace.path(),
            socket_dir.path(),
            Lifetime::TiedToParent,
            profile.as_deref(),
            TokenSource::Env(&token),
            &options.env_allowlist,
        )?;
        let mut guard = ChildGuard(Some(child));
        let deadlines = match options.deadlines {
            Some(deadlines) => deadlines,
            None => Deadlines::from_env()?,
        };
        let sandbox = AgentdSandbox::connect_within(&started.url, Some(&token), deadlines).await?;
        let child = guard.0.take().ok_or_else(|| SandboxError::Start("agentd child vanished".to_owned()))?;
        Ok(Self {
            url: started.url,
            token,
            owner: std::process::id(),
            owned: ManuallyDrop::new(Owned {
                sandbox,
                child,
                workspace,
                _socket_dir: socket_dir,
                _confinement: confinement,
            }),
        })
    }

    /// The workspace directory on this machine (the default cwd of commands).
    pub fn workspace(&self) -> &Path {
        self.owned.workspace.path()
    }

    /// The underlying link, for the protocol's full exec options.
    pub fn agentd(&self) -> &AgentdSandbox {
        &self.owned.sandbox
    }

    /// `unix:PATH` of agentd's socket.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bearer token agentd requires on its socket: with [`LocalSandbox::url`], what another link
    /// to the same agentd needs ([`LocalSandbox::connect`]).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Another link to the same agentd, valid while this value lives.
    pub async fn connect(&self) -> Result<AgentdSandbox> {
        AgentdSandbox::connect(&self.url, Some(&self.token)).await
    }

    /// Process id of the agentd child.
    pub fn pid(&self) -> u32 {
        self.owned.child.id()
    }
}

impl Drop for LocalSandbox {
    fn drop(&mut self) {
        if std::process::id() != self.owner {
            // A forked child's copy: `owned` is leaked, untouched. Dropping it would stop the
            // parent's agentd, delete its directories, and abort the link's tasks on a runtime
            // whose threads stayed in the parent (a lock one held at the fork never unlocks).
            return;
        }
        stop(&mut self.owned.child);
        // SAFETY: `owned` is dropped once, here, and `self` is not used after its drop.
        unsafe { ManuallyDrop::drop(&mut self.owned) };
    }
}

/// Stops a child agentd if construction fails halfway.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            stop(child);
        }
    }
}

/// SIGTERM, wait, then SIGKILL: agentd ends its commands' trees on SIGTERM before exiting.
fn stop(child: &mut Child) {
    // Every pid fits (pid_max is at most 2^22); a number that did not is no process to signal.
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// How long a started agentd lives.
#[derive(Debug)]
pub enum Lifetime {
    /// Until its owner drops it; the kernel sends it SIGTERM if the thread that started it ends
    /// first (`PR_SET_PDEATHSIG` follows the forking thread, not the process): start it from a
    /// thread that lives as long as it should, e.g. a runtime worker.
    TiedToParent,
    /// Until it is stopped explicitly (`agentctl up`); its log goes to `log`, not to our terminal
    /// (an inherited pipe would keep a caller that reads our output waiting forever).
    Detached { log: std::fs::File },
}

/// A new private directory (mode 0700) for agentd's socket.
pub fn socket_dir() -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix("agentd-socket-").tempdir()?)
}

/// agentd's own settings, passed to it beside the environment its commands get.
const AGENTD_SETTINGS: &[&str] = &["AGENTD_LOG"];

/// Starts `agentd serve` on a Unix socket in `socket_dir` (which should be private), in `workspace`,
/// with the sandbox profile in `profile` if given, requiring the bearer token `token`. Its
/// environment, and so its commands', is this process's minimal set ([`spawn_agentd_passing`]).
pub fn spawn_agentd(
    workspace: &Path,
    socket_dir: &Path,
    lifetime: Lifetime,
    profile: Option<&Path>,
    token: TokenSource<'_>,
) -> Result<(Child, Started)> {
    spawn_agentd_passing(workspace, socket_dir, lifetime, profile, token, &[])
}

/// [`spawn_agentd`], with the variables of this process's environment that `env_allowlist` names
/// passed on too ([`agentd_protocol::profile::env::passes`]). The rest (the harness's API keys
/// and credentials) never reaches agentd: not its commands, not its `/proc/<pid>/environ`.
pub fn spawn_agentd_passing(
    workspace: &Path,
    socket_dir: &Path,
    lifetime: Lifetime,
    profile: Option<&Path>,
    token: TokenSource<'_>,
    env_allowlist: &[String],
) -> Result<(Child, Started)> {
    let binary = agentd_binary()?;
    let mut command = Command::new(&binary);
    let settings = AGENTD_SETTINGS.iter().filter_map(|name| Some((*name, std::env::var_os(name)?)));
    command
        .env_clear()
        .envs(passed_env::passing(std::env::vars_os(), env_allowlist))
        .envs(settings)
        .arg("serve")
        .arg("--unix")
        .arg(socket_dir.join("agentd.sock"))
        // The workspace is agentd's working directory: commands start there and relative paths
        // resolve there, while absolute paths keep their meaning on this machine (no `--root`).
        .current_dir(workspace)
        .args(profile.map(|p| ["--profile".as_ref(), p.as_os_str()]).into_iter().flatten())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    match token {
        TokenSource::Env(token) => command.env("AGENTD_TOKEN", token),
        TokenSource::File(file) => command.env_remove("AGENTD_TOKEN").arg("--token-file").arg(file),
    };
    // Only stdio reaches agentd: a descriptor this program inherited without close-on-exec (a
    // socket, a file outside every root) would reach its commands past their walls. Close-on-exec,
    // so std's own report of a failed exec still works; agentd closes what it finds at start too.
    // SAFETY: a raw system call on integers, async-signal-safe, no memory of the parent touched.
    unsafe {
        command.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
    }
    match lifetime {
        Lifetime::TiedToParent => {
            command.stderr(Stdio::inherit());
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                command.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
                });
            }
        }
        Lifetime::Detached { log } => {
            // Its own process group: a Ctrl-C in the terminal that ran `up` must not reach it.
            command.stderr(Stdio::from(log)).process_group(0);
        }
    }
    let mut child =
        command.spawn().map_err(|e| SandboxError::Start(format!("cannot run {}: {e}", binary.display())))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(SandboxError::Start("agentd's stdout is not piped".to_owned()));
    };
    // agentd prints one line once it listens; read it on a thread so a hung child cannot hang us.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = match rx.recv_timeout(START_TIMEOUT) {
        Ok(line) => line,
        Err(_) => {
            stop(&mut child);
            return Err(SandboxError::Start(format!(
                "agentd did not report its address within {START_TIMEOUT:?}"
            )));
        }
    };
    let Some(url) = line.trim().strip_prefix("agentd listening on ").map(str::to_owned) else {
        stop(&mut child);
        return Err(SandboxError::Start(format!(
            "agentd exited before listening (printed {:?})",
            line.trim()
        )));
    };
    let pid = child.id();
    Ok((child, Started { url, pid }))
}

/// The agentd a program ships beside itself (the Python wheel carries a static one), set once.
static BUNDLED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Names the agentd binary this program ships with (a static build): [`agentd_binary`] and
/// the injecting adapters' `inject::static_agentd` use it when their variables are unset. The first
/// call wins; it returns whether this one did.
pub fn set_bundled_agentd(path: PathBuf) -> bool {
    BUNDLED.set(path).is_ok()
}

/// The binary [`set_bundled_agentd`] named, if any.
pub fn bundled_agentd() -> Option<&'static Path> {
    BUNDLED.get().map(PathBuf::as_path)
}

/// Finds the agentd executable: `$AGENTD_BIN`, the bundled one ([`set_bundled_agentd`]), next to
/// this program (or one level up, where test binaries live), then `$PATH`.
pub fn agentd_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(AGENTD_BIN_ENV) {
        return Ok(PathBuf::from(path));
    }
    if let Some(path) = bundled_agentd() {
        return Ok(path.to_owned());
    }
    let exe = std::env::current_exe()?;
    let beside = exe.parent().into_iter().flat_map(|dir| [dir.join("agentd"), dir.join("../agentd")]);
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join("agentd")).collect::<Vec<_>>())
        .unwrap_or_default();
    beside.chain(on_path).find(|candidate| candidate.is_file()).ok_or_else(|| {
        SandboxError::Start(
            "cannot find the agentd binary: build it with `cargo build --workspace` or set AGENTD_BIN"
                .to_owned(),
        )
    })
}

/// Everything goes over the link; the id is the link's, and `Drop` stops the child.
impl OverAgentd for LocalSandbox {
    fn linked(&self) -> &AgentdSandbox {
        &self.owned.sandbox
    }
}

/// Local sandboxes: each is a private agentd child that lives as long as its value, so there is
/// nothing to attach to, list or remove by id afterwards.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalProvider;

#[async_trait]
impl Provider for LocalProvider {
    fn kind(&self) -> Kind {
        KIND
    }

    async fn create(&self, source: &str) -> Result<Box<dyn BaseSandbox>> {
        if !source.is_empty() {
            return Err(SandboxError::InvalidSpec {
                spec: format!("local:{source}"),
                why: "`local` takes nothing after it".to_owned(),
            });
        }
        Ok(Box::new(LocalSandbox::start().await?))
    }

    async fn attach(&self, id: &str) -> Result<Box<dyn BaseSandbox>> {
        Err(not_by_id(id))
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        Ok(Vec::new())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        Err(not_by_id(id))
    }

    /// Dropping it stops the child and removes the workspace.
    async fn close(&self, sandbox: Box<dyn BaseSandbox>) -> Result<()> {
        drop(sandbox);
        Ok(())
    }
}

fn not_by_id(id: &str) -> SandboxError {
    SandboxError::InvalidSpec {
        spec: format!("local:{id}"),
        why: "a local sandbox lives only as long as the program that started it; there is no id to \
              attach to or remove"
            .to_owned(),
    }
}
