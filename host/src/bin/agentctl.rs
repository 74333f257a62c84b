//! `agentctl`: run commands and move files in a sandbox from the shell.
//!
//! Which sandbox: `--sandbox KIND:SPEC` (any kind, through its provider), else `--url` (a running
//! agentd), else the session `agentctl up` started, else a private local agentd that lives for this
//! one command. Commands work on any `BaseSandbox`; where it has an agentd link (`.agentd()`) they
//! use its extras (live output, cwd/env, streamed transfers with progress, the hello).
//!
//! This file is the command tree (clap) and the dispatch; each family of commands is a module:
//! - [`target`]: the sandbox a command talks to ([`target::Target`]), and `status`.
//! - [`cleanup`]: a command on a sandbox run from opening to letting go; what agentctl creates for
//!   one command it removes however the command ends (SIGINT/SIGTERM included).
//! - [`exec`]: `exec`, over the agentd link or through the contract's `execute`.
//! - [`processes`]: processes that outlive agentctl (`exec --detach`, `ps`, `attach`, `kill`) and
//!   the interactive `shell`.
//! - [`files`]: the file verbs (`ls`, `read`, `write`, `edit`, `glob`, `grep`, `delete`).
//! - [`transfer`]: `upload` and `download`.
//! - [`up`]: `up` and `down`, the session's agentd.
//! - [`session`]: the `up` session's files, trusted only when no command could have written them.
//! - [`sandboxes`]: `sandbox ls|rm|pause|resume|gc|kube-template`, across kinds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentd_host::provider::{self, spec_forms};
use agentd_host::{Deadlines, escape_controls};
use agentd_protocol::FsRequest;
use agentd_protocol::cli::FsCommand;
use agentd_protocol::permission::PermissionRule;
use clap::{Args, Parser, Subcommand};

use crate::sandboxes::Verb;
use crate::target::Target;

// Each command family in its own file beside this one (`agentctl/`).
#[path = "agentctl/cleanup.rs"]
mod cleanup;
#[path = "agentctl/exec.rs"]
mod exec;
#[path = "agentctl/files.rs"]
mod files;
#[path = "agentctl/processes.rs"]
mod processes;
#[path = "agentctl/sandboxes.rs"]
mod sandboxes;
#[path = "agentctl/session.rs"]
mod session;
#[path = "agentctl/target.rs"]
mod target;
#[path = "agentctl/transfer.rs"]
mod transfer;
#[path = "agentctl/up.rs"]
mod up;

/// Exit status for agentctl's own failures (unreachable sandbox, bad arguments, spawn failure).
const AGENTCTL_FAILED: u8 = 125;

#[derive(Parser)]
#[command(name = "agentctl", version, about = "Run commands and move files in an agentd sandbox.")]
#[command(after_help = "Without --sandbox or --url, commands use the session started by `agentctl up`, \
or else a private local agentd that lives for that one command.\nA sandbox created for one command (a \
creating KIND:SPEC, the private local agentd) is removed however the command ends, SIGINT and SIGTERM \
included; the removal may take up to 30 s, and a second signal exits at once, naming what may be left.\n\
Exit status: the command's own for `exec`; 130 or 143 when SIGINT or SIGTERM stopped agentctl; 125 when \
agentctl itself fails or something it created may be left.")]
struct Cli {
    /// agentd to attach to, e.g. ws://127.0.0.1:7700.
    #[arg(long, global = true, env = "AGENTD_URL")]
    url: Option<String>,
    /// A file holding the bearer token for --url; else the AGENTD_TOKEN variable. Never an
    /// argument: every process of the machine can read another's arguments (/proc/PID/cmdline).
    #[arg(long, global = true, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Print results as JSON (the protocol's result types) for scripts.
    #[arg(long, global = true)]
    json: bool,
    #[arg(long, global = true, value_name = "KIND:SPEC", help = sandbox_help(), long_help = sandbox_long_help())]
    sandbox: Option<String>,
    /// Seconds to connect to agentd: TCP, upgrade and hello together [default: 30].
    #[arg(long, global = true, value_name = "SECS", env = "AGENTD_CONNECT_DEADLINE", value_parser = deadline)]
    connect_deadline: Option<Duration>,
    /// Seconds an exec's result may come after its own timeout [default: 15].
    #[arg(long, global = true, value_name = "SECS", env = "AGENTD_EXEC_MARGIN", value_parser = deadline)]
    exec_margin: Option<Duration>,
    /// Seconds a file verb's reply, or a transfer's next part, may take [default: 120].
    #[arg(long, global = true, value_name = "SECS", env = "AGENTD_SILENCE_DEADLINE", value_parser = deadline)]
    silence_deadline: Option<Duration>,
    /// A path permission, MODE:OPERATIONS:PATH (e.g. deny:write:/workspace/src/**), repeatable, first
    /// match wins. A sandbox agentctl starts (the private one, `up`) gets them in its profile: the
    /// file verbs and every command obey them. On another sandbox, `exec` sends them with the
    /// command (deny rules only: they tighten its profile for that command).
    #[arg(long = "permission", global = true, value_name = "MODE:OPS:PATH")]
    permissions: Vec<PermissionRule>,
    /// A variable of agentctl's environment that commands of a sandbox agentctl starts (the private
    /// one, `up`) get, beside PATH, HOME, LANG, LC_*, TERM, TZ, USER, LOGNAME, SHELL, TMPDIR: a name,
    /// or a prefix ending in `*`; repeatable. Nothing else passes: a name that looks like a secret
    /// (*KEY*, *SECRET*, *TOKEN*, *PASSWORD*, *CREDENTIAL*) only when named exactly.
    #[arg(long = "pass-env", global = true, value_name = "NAME", value_parser = pass_env)]
    pass_env: Vec<String>,
    #[command(subcommand)]
    command: Cmd,
}

fn pass_env(raw: &str) -> Result<String, String> {
    agentd_protocol::profile::env::check_named(raw).map(|()| raw.to_owned())
}

fn deadline(raw: &str) -> Result<Duration, String> {
    agentd_host::contract::deadlines::seconds(raw).map_err(str::to_owned)
}

impl Cli {
    /// The deadlines of every link this run opens (the sandbox may not be agentd any more).
    fn deadlines(&self) -> Deadlines {
        let defaults = Deadlines::default();
        Deadlines {
            connect: self.connect_deadline.unwrap_or(defaults.connect),
            exec_margin: self.exec_margin.unwrap_or(defaults.exec_margin),
            silence: self.silence_deadline.unwrap_or(defaults.silence),
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a shell command; prints its output and exits with its exit code.
    Exec(ExecArgs),
    /// The processes agentd holds: running ones, and kept ones' results (`--json`: one array).
    Ps,
    /// Print a kept process's output from the start (or `--from` a byte offset), live until it
    /// ends, and exit with its exit code, as `exec` would.
    Attach {
        process: String,
        /// First byte to print (an offset into everything the process wrote).
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
    /// End a process and every process it started (SIGTERM, a grace, SIGKILL), or send it one
    /// `--signal`.
    Kill {
        process: String,
        /// A signal name (INT, TERM, HUP, …) sent once to each of its processes.
        #[arg(long)]
        signal: Option<String>,
    },
    /// An interactive terminal in the sandbox (a login shell, or `--command`), like
    /// `docker exec -it`: this terminal in raw mode, resized with it; exits with its exit code.
    Shell {
        /// Run this instead of a login shell.
        #[arg(long)]
        command: Option<String>,
    },
    /// Copy a local file into the sandbox (REMOTE relative to the workspace unless absolute).
    Upload { local: PathBuf, remote: String },
    /// Copy a file out of the sandbox (REMOTE relative to the workspace unless absolute).
    Download { remote: String, local: PathBuf },
    /// Start a local agentd that stays up for later commands (until `agentctl down`).
    Up {
        /// Workspace directory (default: a new temporary directory, removed by `down`).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Stop the agentd started by `agentctl up`.
    Down,
    /// Show the sandbox commands would use.
    Status,
    /// The sandboxes agentd created, across kinds: ls, rm, gc.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// Remove every sandbox agentd created, across kinds (`agentctl sandbox gc`): every one carrying
    /// agentd's label, whoever made it (other users' containers on the same Docker engine too).
    Gc,
    #[command(flatten)]
    Fs(FsCommand),
}

#[derive(Subcommand)]
enum SandboxCmd {
    /// List them: KIND, ID, SOURCE, STATE (`--json`: one array of objects). Daytona is listed when
    /// DAYTONA_API_KEY is set, Modal when its token is (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml).
    Ls,
    /// Stop and remove the given ones: KIND:ID, or a bare ID (or unique prefix) looked up across kinds.
    Rm {
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Suspend the given ones (KIND:ID or a bare ID, as `rm` takes them), to `resume` later; kinds
    /// that cannot say so.
    Pause {
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Resume suspended ones and wait until each is ready.
    Resume {
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Print an agent-sandbox SandboxTemplate and SandboxWarmPool (YAML, for `kubectl apply -f -`)
    /// whose Pods get the static agentd from an initContainer, beside any IMAGE; then
    /// `--sandbox kube-claim:NAME` claims a warm one.
    KubeTemplate {
        /// The sandbox's image.
        #[arg(long)]
        image: String,
        /// The template's and the pool's name.
        #[arg(long, default_value = "agentd")]
        name: String,
        /// Sandboxes the pool keeps ready.
        #[arg(long, default_value_t = 2)]
        replicas: u32,
        /// The image the initContainer copies agentd from (`/usr/local/bin/agentd` in it).
        #[arg(long, default_value = agentd_host::adapters::kubernetes::manifests::AGENTD_IMAGE)]
        agentd_image: String,
        /// Create (or replace) them in the cluster (kubeconfig as `kubectl` finds it) instead of
        /// printing them.
        #[arg(long)]
        apply: bool,
    },
    /// Remove every sandbox agentd created, across kinds: every one carrying agentd's label
    /// (`dev.agentd.sandbox`), whoever made it: other users' containers on the same Docker engine,
    /// and every such sandbox of the Daytona organisation or Modal environment, are removed too.
    Gc,
}

fn sandbox_help() -> String {
    format!("Sandbox to use, KIND:SPEC: {}", spec_forms())
}

fn sandbox_long_help() -> String {
    // Each kind's sentence is its row's, so a new kind brings its own.
    let kinds: Vec<&str> =
        provider::KINDS.iter().map(|row| row.help).filter(|help| !help.is_empty()).collect();
    format!(
        "Sandbox to use instead of --url or the `up` session, KIND:SPEC, one of: {}.\n{} A \
         sandbox created for a command is removed when it ends; KIND-attach:ID uses an existing one \
         and leaves it (docker-attach injects the static agentd).",
        spec_forms(),
        kinds.join(" ")
    )
}

#[derive(Args)]
struct ExecArgs {
    /// Seconds before the command's process tree is killed (fractions allowed; 0: no limit).
    #[arg(long)]
    timeout: Option<f64>,
    /// Working directory (relative to the workspace unless absolute).
    #[arg(long)]
    cwd: Option<String>,
    /// Extra environment variable, KEY=VALUE, or KEY for agentctl's own value (repeatable).
    #[arg(long = "env", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Start it kept and print only its process id: it runs on after agentctl exits (`agentctl
    /// attach ID`, `ps`, `kill`). Needs an agentd that outlives agentctl (`up`, `--url`, or a
    /// `KIND-attach:ID` sandbox).
    #[arg(long)]
    detach: bool,
    /// The command; several words are joined with spaces and run by /bin/sh -c.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        None if !raw.is_empty() => match std::env::var(raw) {
            Ok(value) => Ok((raw.to_owned(), value)),
            Err(_) => Err(format!("`{raw}` is not set in agentctl's environment")),
        },
        _ => Err(format!("expected KEY=VALUE or KEY, got `{raw}`")),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.deadlines().choose_for_process();
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            say(err);
            ExitCode::from(AGENTCTL_FAILED)
        }
    }
}

/// Prints `message` on stderr as agentctl's own line. Messages carry names, ids and errors from
/// providers and sandboxes: their control characters are written out, never sent to the terminal.
fn say(message: impl std::fmt::Display) {
    eprintln!("agentctl: {}", escape_controls(&message.to_string()));
}

/// `text` from a sandbox or a provider, fit to print for a person (see [`escape_controls`]).
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    escape_controls(text)
}

async fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match &cli.command {
        Cmd::Exec(_)
        | Cmd::Upload { .. }
        | Cmd::Download { .. }
        | Cmd::Fs(_)
        | Cmd::Status
        | Cmd::Ps
        | Cmd::Attach { .. }
        | Cmd::Kill { .. }
        | Cmd::Shell { .. } => cleanup::in_sandbox(&cli).await,
        Cmd::Sandbox(SandboxCmd::Ls) => sandboxes::sandbox_ls(&cli).await,
        Cmd::Sandbox(SandboxCmd::Rm { ids }) => sandboxes::by_id(ids, Verb::Remove).await,
        Cmd::Sandbox(SandboxCmd::Pause { ids }) => sandboxes::by_id(ids, Verb::Pause).await,
        Cmd::Sandbox(SandboxCmd::Resume { ids }) => sandboxes::by_id(ids, Verb::Resume).await,
        Cmd::Sandbox(SandboxCmd::KubeTemplate { image, name, replicas, agentd_image, apply }) => {
            sandboxes::kube_template(image, name, *replicas, agentd_image, *apply).await
        }
        Cmd::Sandbox(SandboxCmd::Gc) | Cmd::Gc => sandboxes::gc().await,
        Cmd::Up { workspace } => up::up(&cli, workspace.as_deref()),
        Cmd::Down => up::down(),
    }
}

/// The command's own work on the sandbox; `request` is the file verb's, read before the sandbox was
/// opened.
async fn work(
    cli: &Cli,
    request: Option<FsRequest>,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match (&cli.command, request) {
        (Cmd::Exec(args), _) => exec::exec(cli, args, target).await,
        (Cmd::Upload { local, remote }, _) => transfer::upload(cli, local, remote, target).await,
        (Cmd::Download { remote, local }, _) => transfer::download(cli, remote, local, target).await,
        (Cmd::Status, _) => target::status(target).await,
        (Cmd::Fs(_), Some(request)) => files::verb(cli, request, target).await,
        (Cmd::Ps, _) => processes::ps(target::linked(target)?, cli.json).await,
        (Cmd::Attach { process, from }, _) => {
            processes::attach(target::linked(target)?, process, *from, cli.json).await
        }
        (Cmd::Kill { process, signal }, _) => {
            processes::kill(target::linked(target)?, process, signal.as_deref()).await
        }
        (Cmd::Shell { command }, _) => processes::shell(target::linked(target)?, command.clone()).await,
        (Cmd::Fs(_) | Cmd::Up { .. } | Cmd::Down | Cmd::Sandbox(_) | Cmd::Gc, _) => {
            Err("not a command on a sandbox".into())
        }
    }
}

/// The exit status that passes a command's on, as `exec` does: its exit code, or 125 when it has
/// none that fits.
fn exit_status(result: &agentd_protocol::ExecResult) -> ExitCode {
    ExitCode::from(u8::try_from(result.exit_code).unwrap_or(AGENTCTL_FAILED))
}
