//! # agentd
//!
//! The in-sandbox daemon. One static binary: it serves a websocket (see `protocol/README.md`), runs
//! shell commands with timeouts that kill the whole process tree, captures their output at the source,
//! and streams files in and out with a sha256 check.
//!
//! ## Layout
//! - [`server`]: websocket listener, bearer-token check on the upgrade, one session per connection
//!   dispatching requests by id.
//! - [`exec`]: spawn, reaping (agentd is a child subreaper), capture file and preview, kill ladder.
//! - [`transfer`]: chunked uploads (temp file + rename) and downloads, sha256 end to end.
//! - [`auth`]: token loading and constant-time comparison; the loopback-only rule without a token.
//!
//! ## Usage
//! ```text
//! AGENTD_TOKEN=$(head -c 24 /dev/urandom | base64) agentd serve --listen 0.0.0.0:7700 --root /workspace
//! agentd serve --listen 127.0.0.1:0        # loopback without a token; prints the bound address
//! ```

mod auth;
mod confine;
mod exec;
mod fs;
mod oneshot;
mod root;
mod server;
mod transfer;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::auth::Token;
use crate::confine::Confiner;
use crate::exec::Executor;
use crate::exec::reaper::Reaper;
use crate::root::Workspace;
use crate::server::Shared;
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
    /// Without a token agentd only listens on loopback addresses.
    Serve(ServeArgs),
    /// Run one file verb and print its result as JSON (what the host's derived path runs).
    #[command(subcommand)]
    Fs(oneshot::FsCommand),
    /// Run the command on stdin with agentd's capture rules, print its output, exit with its code.
    ///
    /// Meant for a quoted heredoc: `agentd exec --meta S <<'DELIM'` … `DELIM`.
    Exec(oneshot::ExecArgs),
    /// Exit 0 when an agentd accepts connections at ADDR (for container health checks).
    Health {
        #[arg(long, default_value = "127.0.0.1:7700")]
        listen: SocketAddr,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on, e.g. 127.0.0.1:7700 (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Serve one session on stdin/stdout instead of listening (websocket frames without the HTTP
    /// upgrade, no token: the channel, e.g. `docker exec -i`, is already authenticated). Exits at EOF.
    #[arg(long, conflicts_with_all = ["listen", "token_file"])]
    stdio: bool,
    /// File holding the bearer token clients must send.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Confine file verbs and transfers to DIR: `/` means DIR, and paths that leave it (`..`, or
    /// links pointing outside) are refused as invalid_path. DIR is also the workspace (default cwd
    /// of commands). Without it the workspace is the current directory and paths are not confined.
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
    // Before any thread exists: take the token out of our environment (and out of
    // /proc/<pid>/environ) so no child inherits or reads it.
    // SAFETY: no other thread runs yet.
    let env_token = unsafe { auth::take_env_token() };
    // Non-dumpable: other processes of the same user cannot ptrace agentd or read its memory.
    let _ = nix::sys::prctl::set_dumpable(false);

    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTD_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Fs(command) => return oneshot::fs(command),
        Command::Exec(args) => return oneshot::exec(args),
        Command::Health { listen } => {
            return match std::net::TcpStream::connect_timeout(&listen, Duration::from_secs(2)) {
                Ok(_) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("agentd: nothing accepts connections at {listen}: {err}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Serve(args) => match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(serve(args, env_token)),
            Err(err) => Err(format!("cannot start the runtime: {err}").into()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agentd: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs, env_token: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    let token = Token::load(args.token_file.as_deref(), env_token)?;
    if !args.stdio {
        auth::check_listen(args.listen, token.as_ref())?;
    }
    let confined = args.root.is_some();
    let workspace = match args.root {
        Some(root) => root,
        None => std::env::current_dir()?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|e| format!("workspace `{}` is not usable: {e}", workspace.display()))?;
    let files =
        if confined { Workspace::confined(workspace.clone()) } else { Workspace::open(workspace.clone()) };
    let scratch = std::env::temp_dir().join(format!("agentd-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("cannot create `{}`: {e}", scratch.display()))?;
    let seconds = |s: f64, name: &str| {
        if s.is_finite() && s >= 0.0 {
            Ok(s)
        } else {
            Err(format!("--{name} must be a number of seconds ≥ 0"))
        }
    };
    let default_timeout = seconds(args.default_timeout, "default-timeout")?;
    let grace = Duration::from_secs_f64(seconds(args.kill_grace, "kill-grace")?);

    // The SIGCHLD handler must exist before the first child.
    let reaper = Reaper::start()?;
    let executor = Executor::new(reaper, workspace, scratch.clone(), grace);
    let profiled = args.profile.is_some();
    let profile = match &args.profile {
        Some(path) => Confiner::load(path)?,
        None => SandboxProfile { name: "none".to_owned(), ..SandboxProfile::default() },
    };
    let shared = Arc::new(Shared {
        executor,
        workspace: files,
        confiner: Confiner::new(profile, confine::agentd_withheld(args.token_file.as_deref())),
        profiled,
        token,
        default_timeout: (default_timeout > 0.0).then(|| Duration::from_secs_f64(default_timeout)),
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    if args.stdio {
        tokio::select! {
            () = server::serve_stdio(Arc::clone(&shared)) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    } else {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        let bound = listener.local_addr()?;
        // One line on stdout tells a parent process (LocalSandbox, scripts) where to connect.
        println!("agentd listening on ws://{bound}");
        tokio::select! {
            () = server::serve(listener, Arc::clone(&shared)) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    }
    // Nothing may outlive agentd: every running exec's tree is killed before it exits.
    shared.executor.kill_all().await;
    shared.confiner.remove_cgroups();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
