//! # agentd
//!
//! The in-sandbox daemon. One static binary: it serves a websocket (see `protocol/README.md`), runs
//! shell commands with timeouts that kill the whole process tree, captures their output at the source,
//! and streams files in and out with a sha256 check.
//!
//! ## Layout
//! - [`server`]: websocket listener, bearer-token check on the upgrade, one session per connection
//!   that parses requests, dispatches them by id and writes the replies; the work is the modules'
//!   below.
//! - [`exec`]: an exec request admitted and planned ([`exec::prepare`]), then spawn, capture file
//!   and preview, kill ladder.
//! - [`reaper`]: the one owner of exit statuses (agentd is a child subreaper, maybe PID 1).
//! - [`syscall`]: the raw system calls of a child between its clone and its exec (the spawn's and
//!   the confinement's).
//! - [`pid`]: process ids, typed once; the protocol's `u32` converted in one place.
//! - [`confine`]: sandbox profiles applied in each command's own process between clone and exec
//!   (pids cgroup, rlimits, landlock, the seccomp filter of `network = "deny"`), and the measured
//!   report of what was enforced.
//! - [`transfer`]: `upload` and `download` requests: chunked uploads (temp file + rename) and
//!   downloads, sha256 end to end.
//! - [`fs`]: the seven file verbs, implemented once, for native `fs` requests and `agentd fs`.
//! - [`guard`]: the profile's permission rules on the file verbs, transfers and offload capture
//!   files, with deepagents' messages.
//! - [`root`]: the workspace, and with `--root` the guard that resolves every path beneath it on
//!   file descriptors.
//! - [`oneshot`]: the one-shot CLI (`agentd fs …`, `agentd exec …`) the host's derived path runs
//!   through any exec channel.
//! - [`admission`]: what one exec request may do (profile tightening, timeouts, every number and
//!   path from the wire validated): pure rules over resolved values, used by [`exec::prepare`] and
//!   the CLI.
//! - [`permission`]: path permission rules, pure: what the file verbs may do to a path, and the
//!   subtrees landlock withholds from commands.
//! - [`process`]: every exec by process id, across connections: kept processes (`keep`) that
//!   outlive their connection, their journals, attachments and grace, stdin, and the bounds.
//! - [`registry`]: every request in flight (all kinds) with its caps and cancellation, and the
//!   connection budget (idle sessions make room; `hello` is due within the handshake timeout).
//! - [`inbound`]: what clients' unfinished messages may hold: large ones are received a few at a
//!   time across all connections.
//! - [`outbox`]: each connection's outgoing queue and writer; large replies take room from one
//!   budget shared by all connections, so memory does not follow output size. At SIGTERM the
//!   writers send a going-away close frame and nothing more.
//! - [`cancel`]: the one cancellation token of every kind of work, agentd's shutdown included.
//! - [`memory`]: free pages go back to the system once the work is done.
//! - [`bridge`]: `agentd bridge`, stdio relayed to an agentd's Unix socket (a link through a
//!   channel that carries only stdio, whose commands outlive it).
//! - [`install`]: `agentd install DIR`, this binary copied into a shared volume (initContainers).
//! - [`auth`]: token loading and constant-time comparison; TCP always needs a token.
//! - [`scratch`]: agentd's own directory (spilled captures, journals): made fresh, private, never
//!   under a root lent to commands.
//! - [`leftovers`]: the directories of agentds that were killed, swept by the next.
//!
//! ## Usage
//! ```text
//! AGENTD_TOKEN=$(head -c 24 /dev/urandom | base64) agentd serve --listen 0.0.0.0:7700 --root /workspace
//! agentd serve --unix ~/.agentd/agentd.sock  # a local session: no token, own commands refused
//! ```

mod admission;
mod auth;
mod bridge;
mod cancel;
mod confine;
mod exec;
mod fs;
mod guard;
mod inbound;
mod install;
mod leftovers;
mod memory;
mod oneshot;
mod outbox;
mod permission;
mod pid;
mod process;
mod reaper;
mod registry;
mod root;
mod scratch;
mod server;
mod syscall;
mod transfer;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::admission::ServerPolicy;
use crate::auth::Token;
use crate::confine::{Confiner, FileWork};
use crate::exec::Executor;
use crate::permission::Permissions;
use crate::reaper::Reaper;
use crate::registry::Connections;
use crate::root::Workspace;
use crate::server::{Listener, Shared};
use agentd_protocol::limits::{
    FD_RESERVE, MAX_BLOCKING_THREADS, MAX_CONNECTIONS, MAX_PENDING_CONNECTIONS, SHUTDOWN_GRACE_MS,
};
use agentd_protocol::profile::SandboxProfile;

#[derive(Parser)]
#[command(
    name = "agentd",
    version,
    about = "Run commands and move files inside a sandbox, over a websocket."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the agentd protocol on a websocket.
    ///
    /// The token comes from --token-file or the AGENTD_TOKEN variable, never from the command line.
    /// A TCP listener always needs a token; `--unix PATH` serves a local session without one.
    Serve(ServeArgs),
    /// Run one file verb and print its result as JSON (what the host's derived path runs).
    #[command(subcommand)]
    Fs(oneshot::FsCommand),
    /// Run the command on stdin with agentd's capture rules, print its output, exit with its code.
    ///
    /// Meant for a quoted heredoc: `agentd exec --meta S <<'DELIM'` … `DELIM`.
    Exec(oneshot::ExecArgs),
    /// Relay stdin/stdout to the agentd serving the Unix socket PATH (for channels that carry only
    /// stdio, e.g. Kubernetes' pods/exec): its commands outlive the channel. Exits 3 when nothing
    /// serves PATH.
    Bridge {
        #[arg(long, value_name = "PATH")]
        unix: PathBuf,
    },
    /// Copy this agentd to DIR/agentd (0755, renamed into place): what an initContainer runs to
    /// share the static binary with its Pod's other containers through a volume.
    Install {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Exit 0 when an agentd accepts connections at ADDR (for container health checks).
    Health {
        #[arg(long, default_value = "127.0.0.1:7700")]
        listen: SocketAddr,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on, e.g. 127.0.0.1:7700 (port 0 picks a free port). TCP always needs a
    /// token (--token-file or AGENTD_TOKEN).
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Listen on a Unix socket at PATH instead of TCP, for a local session: no token; the socket is
    /// made mode 0600, and connections from agentd's own commands (any process it started) are
    /// refused. Keep PATH in a directory only you can enter.
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    unix: Option<PathBuf>,
    /// Serve one session on stdin/stdout instead of listening (websocket frames without the HTTP
    /// upgrade, no token: the channel, e.g. `docker exec -i`, is already authenticated). Exits at EOF.
    #[arg(long, conflicts_with_all = ["listen", "unix", "token_file"])]
    stdio: bool,
    /// File holding the bearer token clients must send.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Confine file verbs, transfers, exec `cwd` and offload capture paths to DIR: `/` means DIR, and
    /// paths that leave it (`..`, or links pointing outside) are refused (invalid_path). Resolution
    /// walks file descriptors, so swapping a component for a link cannot redirect it. DIR is also the
    /// workspace (default cwd of commands). Without it the workspace is the current directory and
    /// paths are not confined.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Timeout in seconds for commands that name none (0: no limit).
    #[arg(long, default_value_t = 1800.0)]
    default_timeout: f64,
    /// Sandbox profile (TOML) applied to every command: writable/readable roots, network, environment,
    /// timeouts, resource limits. See README, "Sandbox profiles".
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Seconds between SIGTERM and SIGKILL when a command times out or is cancelled.
    #[arg(long, default_value_t = 1.0)]
    kill_grace: f64,
}

fn main() -> ExitCode {
    // First: what the parent left open (a socket, a file outside every root) would reach commands
    // past their walls. agentd is given nothing but stdio (`--stdio` serves on 0 and 1).
    close_inherited_descriptors();
    // Before any thread exists: take the token out of our environment (and out of
    // /proc/<pid>/environ) so no child inherits or reads it.
    // SAFETY: no other thread runs yet.
    let env_token = unsafe { auth::take_env_token() };
    // Non-dumpable: other processes of the same user cannot ptrace agentd or read its memory.
    let _ = nix::sys::prctl::set_dumpable(false);

    let cli = Cli::parse();
    // The one-shot commands log nothing unless asked: a provider's exec channel merges stderr into
    // stdout, and a log line before the result would make the result unreadable (it carries what
    // went wrong itself, as `capture_error` does).
    let quiet = matches!(cli.command, Command::Fs(_) | Command::Exec(_) | Command::Bridge { .. });
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTD_LOG")
                .unwrap_or_else(|_| if quiet { "off" } else { "warn" }.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Fs(command) => return oneshot::fs(command),
        Command::Exec(args) => return oneshot::exec(args),
        Command::Bridge { unix } => return bridge::bridge(&unix),
        Command::Install { dir } => return install::install(&dir),
        Command::Health { listen } => {
            return match std::net::TcpStream::connect_timeout(&listen, Duration::from_secs(2)) {
                Ok(_) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("agentd: nothing accepts connections at {listen}: {err}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Serve(args) => {
            // A bounded blocking pool: no client can make agentd take more threads than this.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .max_blocking_threads(MAX_BLOCKING_THREADS)
                // Idle pool threads retire soon after a burst instead of lingering (10 s default).
                // A thread can always be made for the pool: commands cannot take agentd's own
                // tasks (their budget leaves agentd its reserve, `confine::cgroup`).
                .thread_keep_alive(Duration::from_secs(2))
                .on_thread_start(reaper::keep_signals_off_this_thread)
                .build();
            match runtime {
                Ok(runtime) => {
                    let result = runtime.block_on(serve(args, env_token));
                    // Blocking work still running (its requests are cancelled and it polls that,
                    // but a read can hang in a stuck file system) must not keep agentd alive.
                    runtime.shutdown_timeout(Duration::from_millis(SHUTDOWN_GRACE_MS));
                    result
                }
                Err(err) => Err(format!("cannot start the runtime: {err}").into()),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agentd: {err}");
            ExitCode::FAILURE
        }
    }
}

/// How often the cgroups that finished commands left processes in are looked at.
const LEFT_BEHIND_EVERY: Duration = Duration::from_millis(100);

/// For agentd's life: what finished commands left running that meets its task limit later (a fork
/// bomb that outlived its exec) is ended whole, and their cgroups go once empty.
async fn end_bombs_left_behind(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(LEFT_BEHIND_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !shared.confiner.left_behind() {
            continue;
        }
        let looked = Arc::clone(&shared);
        let bombs = tokio::task::spawn_blocking(move || looked.confiner.watch_left_behind()).await;
        if let Ok(bombs) = bombs
            && !bombs.is_empty()
        {
            tracing::debug!("ending {} fork bombs left by finished commands", bombs.len());
            exec::tree::end_cgroups(bombs).await;
        }
    }
}

async fn serve(args: ServeArgs, env_token: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    let token = Token::load(args.token_file.as_deref(), env_token)?;
    if !args.stdio && args.unix.is_none() {
        auth::check_listen(args.listen, token.as_ref())?;
    }
    let confined = args.root.is_some();
    let workspace = match args.root {
        Some(root) => root,
        None => std::env::current_dir()?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|e| format!("workspace `{}` is not usable: {e}", workspace.display()))?;
    let files = if confined {
        Workspace::confined(workspace.clone())
            .map_err(|e| format!("workspace `{}` is not usable: {e}", workspace.display()))?
    } else {
        Workspace::open(workspace.clone())
    };
    let profile = args.profile.as_deref().map(Confiner::load).transpose()?;
    // The file verbs and transfers check the profile's permission rules on every path.
    let files = match &profile {
        Some(profile) => files.with_permissions(
            Permissions::new(&profile.profile().permissions)
                .map_err(|e| format!("profile: permissions: {e}"))?,
        ),
        None => files,
    };
    // Temp files of replacements a killed agentd left in this workspace (uploads, write, edit).
    let sweep_ws = files.clone();
    tokio::task::spawn_blocking(move || transfer::sweep_recorded(&sweep_ws));
    let default_timeout = admission::seconds(args.default_timeout, "--default-timeout")?;
    let max_connections = connection_budget(raise_fd_limit());
    tracing::debug!("connection budget: {max_connections}");
    let grace = admission::seconds(args.kill_grace, "--kill-grace")?;

    // The SIGCHLD handler must exist before the first child.
    let reaper = Reaper::start()?;
    let shutdown = cancel::Cancel::default();
    let reported = match &profile {
        Some(profile) => profile.profile().clone(),
        None => SandboxProfile { name: "none".to_owned(), ..SandboxProfile::default() },
    };
    let mut confiner = Confiner::new(reported, confine::agentd_withheld(args.token_file.as_deref()));
    // The roots commands write, lent to the sandbox user under `user = "sandbox"`.
    let lent_roots: Vec<PathBuf> = match &profile {
        Some(profile) => match &profile.profile().writable_roots {
            Some(roots) => roots.iter().map(PathBuf::from).collect(),
            None => vec![workspace.clone()],
        },
        None => Vec::new(),
    };
    // Commands of agentd's own user under a profile could read its files: landlock keeps them out.
    let withhold_scratch = profile.is_some() && confiner.commands_are_agentds_user();
    let temp_dir = std::env::temp_dir();
    let temp_dir = std::fs::canonicalize(&temp_dir).unwrap_or(temp_dir);
    let parents = scratch::parents(&temp_dir, withhold_scratch, &lent_roots);
    for parent in &parents {
        leftovers::sweep_dead_agentds(parent, std::process::id(), leftovers::remove_scratch);
    }
    let scratch = scratch::Scratch::make(&parents)?;
    if withhold_scratch {
        confiner.withhold(confine::Withheld::secret(scratch.path().to_owned()));
    }
    let executor = Executor::new(reaper, files.clone(), &scratch, grace, shutdown.clone());
    // Under a profile, the file verbs and transfers get the walls commands get.
    let file_work = match &profile {
        Some(_) => FileWork::Confined(Arc::new(confiner.file_workers()?)),
        None => FileWork::Open,
    };
    let shared = Arc::new(Shared {
        executor,
        shutdown,
        processes: Arc::default(),
        workspace: files,
        confiner: Arc::new(confiner),
        files: file_work,
        token,
        policy: ServerPolicy {
            profile,
            default_timeout: (!default_timeout.is_zero()).then_some(default_timeout),
        },
        global: Arc::default(),
        connections: Arc::new(Connections::new(max_connections, MAX_PENDING_CONNECTIONS)),
        room: outbox::Room::new(),
        large_messages: inbound::LargeMessages::new(),
    });
    // Under `user = "sandbox"`, the roots commands write become the sandbox user's, before the
    // first command (and back to agentd's user at the end).
    let lent = match &shared.policy.profile {
        Some(_) => {
            shared.confiner.warn_unreachable_path();
            match shared.confiner.lend_roots(lent_roots) {
                Ok(lent) => Some(lent),
                Err(err) => {
                    scratch.remove();
                    return Err(err.into());
                }
            }
        }
        None => None,
    };
    let idle = Arc::clone(&shared);
    tokio::spawn(memory::release_when_idle(Arc::clone(&shared.global), move || {
        idle.confiner.trim_idle_cgroups();
    }));
    tokio::spawn(end_bombs_left_behind(Arc::clone(&shared)));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    if args.stdio {
        tokio::select! {
            () = server::serve_stdio(Arc::clone(&shared)) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    } else {
        let (listener, url) = match &args.unix {
            Some(path) => (Listener::Unix(bind_unix(path)?), format!("unix:{}", path.display())),
            None => {
                let tcp = tokio::net::TcpListener::bind(args.listen).await?;
                let url = format!("ws://{}", tcp.local_addr()?);
                (Listener::Tcp(tcp), url)
            }
        };
        // One line on stdout tells a parent process (LocalSandbox, scripts) where to connect.
        println!("agentd listening on {url}");
        tokio::select! {
            () = server::serve(listener, Arc::clone(&shared)) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        if let Some(path) = &args.unix {
            let _ = std::fs::remove_file(path);
        }
    }
    // Blocking verbs stop at their next step instead of holding the shutdown.
    shared.shutdown.cancel();
    // Nothing may outlive agentd: every running exec's tree is killed before it exits.
    // Per-command pids cgroups first: through the cgroup, a fork bomb cannot outrun the kill.
    exec::tree::end_cgroups(shared.confiner.command_cgroups()).await;
    shared.executor.kill_all().await;
    shared.confiner.remove_cgroups();
    if let Some(lent) = lent {
        lent.give_back();
    }
    scratch.remove();
    Ok(())
}

/// Closes every descriptor above stderr, before agentd opens any of its own.
fn close_inherited_descriptors() {
    if syscall::close_from(3, 0).is_ok() {
        return;
    }
    // Before Linux 5.9: the descriptors as `/proc` lists them, the listing's own closed with it.
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return };
    let open: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in open {
        // SAFETY: nothing of agentd's is open yet: these are inherited (or the listing's, now closed).
        unsafe { libc::close(fd) };
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one (connections and work both need descriptors; the
/// default soft 1024 is a historical `select` limit agentd does not have); returns the soft limit in
/// force.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(err) => {
                tracing::warn!("cannot raise RLIMIT_NOFILE from {soft} to {hard}: {err}");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(err) => {
            tracing::warn!("cannot read RLIMIT_NOFILE: {err}");
            1024
        }
    }
}

/// Connections agentd accepts at once with `fds` descriptors: [`MAX_CONNECTIONS`], less when the
/// descriptors left after [`FD_RESERVE`] (and a few for the listener, the runtime and stdio) are
/// fewer.
fn connection_budget(fds: u64) -> usize {
    let fds = usize::try_from(fds).unwrap_or(usize::MAX);
    fds.saturating_sub(FD_RESERVE + 16).clamp(1, MAX_CONNECTIONS)
}

/// Binds the Unix socket at `path`, mode 0600. A socket file left by an agentd that died is replaced;
/// a live one, or any other file, is an error.
fn bind_unix(path: &std::path::Path) -> Result<tokio::net::UnixListener, Box<dyn std::error::Error>> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let stale = meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_err();
        if !stale {
            return Err(format!(
                "`{}` exists (another agentd listens there, or it is not a socket)",
                path.display()
            )
            .into());
        }
        std::fs::remove_file(path)?;
    }
    // Created with no permissions for others, before anyone could connect.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let listener = tokio::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = listener.map_err(|e| format!("cannot listen on `{}`: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_budget_leaves_the_reserve() {
        // The default soft limit: the reserve and a few fds stay free of connections.
        assert_eq!(connection_budget(1024), 1024 - FD_RESERVE - 16);
        // Raised limits: the constant caps it.
        assert_eq!(connection_budget(20_000), MAX_CONNECTIONS);
        assert_eq!(connection_budget(1 << 20), MAX_CONNECTIONS);
        // Absurdly low limits still admit one connection.
        assert_eq!(connection_budget(10), 1);
    }
}
