//! `agentctl`: run commands and move files in a sandbox from the shell.
//!
//! Which sandbox: `--sandbox KIND:SPEC` (any kind, through its provider), else `--url` (a running
//! agentd), else the session `agentctl up` started, else a private local agentd that lives for this
//! one command. Commands work on any `BaseSandbox`; where it has an agentd link (`.agentd()`) they
//! use its extras (live output, cwd/env, streamed transfers with progress, the hello).
//!
//! [`processes`]: processes that outlive agentctl (`exec --detach`, `ps`, `attach`, `kill`) and the
//! interactive `shell`.
//!
//! [`session`]: the `up` session's files, trusted only when no command could have written them.
//!
//! [`cleanup`]: what agentctl creates for one command it removes however the command ends
//! (SIGINT/SIGTERM included).

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentd_host::adapters::local::{
    DefaultProfile, Lifetime, LocalOptions, Started, TokenSource, socket_dir, spawn_agentd_passing,
};
use agentd_host::contract::derived::shell_quote;
use agentd_host::contract::download::download_to_path;
use agentd_host::provider::{self, Kind, Opened, SandboxInfo, SandboxSpec, spec_forms};
use agentd_host::{AgentdSandbox, BaseSandbox, Deadlines, LocalSandbox, SandboxError, escape_controls};
use agentd_protocol::cli::FsCommand;
use agentd_protocol::permission::PermissionRule;
use agentd_protocol::profile::{Enforcement, Level, Mode, ProfileOverride};
use agentd_protocol::{ExecRequest, FsRequest, FsResponse};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cleanup::{Stop, Waited};
use crate::session::SessionFile;

// Its own file beside this one: the signal handling and removal of what a command created.
#[path = "agentctl/cleanup.rs"]
mod cleanup;
#[path = "agentctl/processes.rs"]
mod processes;
#[path = "agentctl/session.rs"]
mod session;

/// Exit status for agentctl's own failures (unreachable sandbox, bad arguments, spawn failure).
const AGENTCTL_FAILED: u8 = 125;

/// Files above this size get a progress bar (on a terminal).
const PROGRESS_BYTES: u64 = 8 << 20;

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

/// The sandbox a command talks to; keeps a private agentd alive while needed.
enum Target {
    Remote(AgentdSandbox),
    Private(LocalSandbox),
    /// From `--sandbox KIND:SPEC`.
    Spec(Opened),
}

impl Target {
    fn sandbox(&self) -> &dyn BaseSandbox {
        match self {
            Self::Remote(sandbox) => sandbox,
            Self::Private(local) => local,
            Self::Spec(opened) => opened.sandbox.as_ref(),
        }
    }

    /// What this command created and must remove, as a person would look for it (`docker:ID`);
    /// `None` when it attached to a sandbox that outlives it.
    fn created(&self) -> Option<String> {
        match self {
            Self::Remote(_) => None,
            Self::Private(local) => Some(format!(
                "the local agentd (pid {}, workspace {})",
                local.pid(),
                shown(&local.workspace().display().to_string())
            )),
            Self::Spec(opened) if opened.created => {
                Some(format!("{}:{}", opened.kind(), shown(opened.sandbox.id())))
            }
            Self::Spec(_) => None,
        }
    }

    /// Releases what this command started: a sandbox it created is stopped and removed (a private
    /// local agentd is stopped and its workspace removed when dropped).
    async fn finish(self) -> Result<(), SandboxError> {
        match self {
            Self::Spec(opened) => opened.close().await,
            Self::Remote(_) | Self::Private(_) => Ok(()),
        }
    }
}

async fn target(cli: &Cli) -> Result<Target, Box<dyn std::error::Error>> {
    if let Some(spec) = &cli.sandbox {
        let spec: SandboxSpec = spec.parse()?;
        return Ok(Target::Spec(provider::open(&spec).await?));
    }
    if let Some(url) = &cli.url {
        let token = match &cli.token_file {
            Some(file) => Some(
                std::fs::read_to_string(file).map_err(|e| format!("--token-file {}: {e}", file.display()))?,
            ),
            None => std::env::var("AGENTD_TOKEN").ok(),
        };
        let token = token.as_deref().map(str::trim);
        return Ok(Target::Remote(AgentdSandbox::connect(url, token).await?));
    }
    if let Some(session) = session::read()? {
        let token = session.token()?;
        return Ok(Target::Remote(AgentdSandbox::connect(&session.url, Some(&token)).await?));
    }
    let options = LocalOptions {
        permissions: cli.permissions.clone(),
        env_allowlist: cli.pass_env.clone(),
        ..LocalOptions::default()
    };
    Ok(Target::Private(LocalSandbox::start_with(&options).await?))
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
        | Cmd::Shell { .. } => in_sandbox(&cli).await,
        Cmd::Sandbox(SandboxCmd::Ls) => sandbox_ls(&cli).await,
        Cmd::Sandbox(SandboxCmd::Rm { ids }) => by_id(ids, Verb::Remove).await,
        Cmd::Sandbox(SandboxCmd::Pause { ids }) => by_id(ids, Verb::Pause).await,
        Cmd::Sandbox(SandboxCmd::Resume { ids }) => by_id(ids, Verb::Resume).await,
        Cmd::Sandbox(SandboxCmd::KubeTemplate { image, name, replicas, agentd_image, apply }) => {
            use agentd_host::adapters::kubernetes::{Cluster, KubernetesOptions, manifests};
            let documents = [
                manifests::sandbox_template(name, image, agentd_image),
                manifests::warm_pool(name, name, *replicas),
            ];
            if *apply {
                let cluster = Cluster::connect(&KubernetesOptions::default()).await?;
                manifests::apply(&cluster, &documents).await?;
                println!(
                    "applied SandboxTemplate {name} and SandboxWarmPool {name} in {}",
                    cluster.namespace
                );
            } else {
                print!("{}", manifests::to_yaml(&documents));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Sandbox(SandboxCmd::Gc) | Cmd::Gc => gc().await,
        Cmd::Up { workspace } => up(&cli, workspace.as_deref()),
        Cmd::Down => down(),
    }
}

/// Runs a command that needs a sandbox: opens it, does the work, and lets go of it however the work
/// ends. What this command created is removed also on SIGINT/SIGTERM (see `cleanup`); the exit
/// status is then 128 + the signal's number, and 125 whenever something it created may be left.
async fn in_sandbox(cli: &Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Read before anything is created: a blocking read of stdin would keep signals from being seen.
    let request = match &cli.command {
        Cmd::Fs(command) => Some(command.clone().into_request(|| std::io::read_to_string(std::io::stdin()))?),
        Cmd::Exec(_)
        | Cmd::Upload { .. }
        | Cmd::Download { .. }
        | Cmd::Status
        | Cmd::Ps
        | Cmd::Attach { .. }
        | Cmd::Kill { .. }
        | Cmd::Shell { .. }
        | Cmd::Up { .. }
        | Cmd::Down
        | Cmd::Sandbox(_)
        | Cmd::Gc => None,
    };
    // Rules a sandbox agentctl does not start can only reach it with a command.
    let own = cli.sandbox.is_none() && cli.url.is_none() && session::read()?.is_none();
    if !cli.permissions.is_empty() && !own && !matches!(cli.command, Cmd::Exec(_)) {
        return Err("--permission: this sandbox's file verbs follow its own profile; with a sandbox \
                    agentctl does not start, only `exec` takes rules"
            .into());
    }
    let mut stop = Stop::catch()?;
    let opening = tokio::select! {
        opened = target(cli) => opened.map_err(Err),
        signo = stop.next() => Err(Ok(signo)),
    };
    let target = match opening {
        Ok(target) => target,
        Err(ended) => return abandoned_opening(cli, ended, &mut stop).await,
    };
    let ended = tokio::select! {
        outcome = work(cli, request, &target) => Ok(outcome),
        signo = stop.next() => Err(signo),
    };
    let created = target.created();
    if let (Err(signo), Some(created)) = (&ended, &created) {
        eprintln!(
            "agentctl: {}: removing {created}, which this command created",
            cleanup::signal_name(*signo)
        );
    }
    let left = match cleanup::wait(target.finish(), &mut stop).await {
        Waited::Done(Ok(())) => false,
        Waited::Done(Err(err)) => {
            let created = created.as_deref().unwrap_or("the sandbox");
            say(format!("removing {created}: {err}"));
            true
        }
        Waited::TimedOut => {
            let created = created.as_deref().unwrap_or("the sandbox");
            eprintln!(
                "agentctl: removing {created} took more than {} s; it may be left",
                cleanup::CLEANUP_TIMEOUT.as_secs()
            );
            true
        }
        Waited::Signal(signo) => {
            let created = created.as_deref().unwrap_or("the sandbox");
            eprintln!("agentctl: {} during the removal: {created} may be left", cleanup::signal_name(signo));
            true
        }
    };
    match (ended, left) {
        (Ok(outcome), false) => outcome,
        (Ok(outcome), true) => outcome.and(Ok(ExitCode::from(AGENTCTL_FAILED))),
        (Err(signo), false) => Ok(cleanup::signal_status(signo)),
        (Err(_), true) => Ok(ExitCode::from(AGENTCTL_FAILED)),
    }
}

/// Opening the sandbox failed (`Err`) or a signal came first (`Ok(signo)`). Whatever was made
/// halfway is being removed by its provider's guard: wait for that before leaving.
async fn abandoned_opening(
    cli: &Cli,
    ended: Result<i32, Box<dyn std::error::Error>>,
    stop: &mut Stop,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Only a `KIND:SPEC` that creates leaves something of its own behind.
    let creating = match cli.sandbox.as_deref().map(str::parse::<SandboxSpec>) {
        Some(Ok(spec @ SandboxSpec::Create { .. })) => Some(shown(&spec.to_string()).into_owned()),
        Some(Ok(SandboxSpec::Attach { .. }) | Err(_)) | None => None,
    };
    if let (Ok(signo), Some(creating)) = (&ended, &creating) {
        eprintln!(
            "agentctl: {}: abandoning the sandbox {creating} being created",
            cleanup::signal_name(*signo)
        );
    }
    let left = match cleanup::wait(cleanup::settle(), stop).await {
        Waited::Done(()) => None,
        Waited::TimedOut => {
            Some(format!("its removal took more than {} s", cleanup::CLEANUP_TIMEOUT.as_secs()))
        }
        Waited::Signal(signo) => Some(format!("{} during its removal", cleanup::signal_name(signo))),
    };
    if let (Some(why), Some(creating)) = (left, creating) {
        if let Err(err) = &ended {
            say(err);
        }
        eprintln!(
            "agentctl: {why}: a sandbox {creating} may be left (`agentctl sandbox ls` lists what agentd created)"
        );
        return Ok(ExitCode::from(AGENTCTL_FAILED));
    }
    ended.map(cleanup::signal_status)
}

/// The command's own work on the sandbox; `request` is the file verb's, read before the sandbox was
/// opened.
async fn work(
    cli: &Cli,
    request: Option<FsRequest>,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match (&cli.command, request) {
        (Cmd::Exec(args), _) => exec(cli, args, target).await,
        (Cmd::Upload { local, remote }, _) => upload(cli, local, remote, target).await,
        (Cmd::Download { remote, local }, _) => download(cli, remote, local, target).await,
        (Cmd::Status, _) => status(target).await,
        (Cmd::Fs(_), Some(request)) => verb(cli, request, target).await,
        (Cmd::Ps, _) => processes::ps(linked(target)?, cli.json).await,
        (Cmd::Attach { process, from }, _) => {
            processes::attach(linked(target)?, process, *from, cli.json).await
        }
        (Cmd::Kill { process, signal }, _) => {
            processes::kill(linked(target)?, process, signal.as_deref()).await
        }
        (Cmd::Shell { command }, _) => processes::shell(linked(target)?, command.clone()).await,
        (Cmd::Fs(_) | Cmd::Up { .. } | Cmd::Down | Cmd::Sandbox(_) | Cmd::Gc, _) => {
            Err("not a command on a sandbox".into())
        }
    }
}

async fn status(target: &Target) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let kind = match target {
        Target::Remote(_) => "attached",
        Target::Private(_) => "private (no `agentctl up` session)",
        Target::Spec(opened) => {
            opened.kind().row().and_then(|row| row.noun).unwrap_or_else(|| opened.kind().name())
        }
    };
    let sandbox = target.sandbox();
    // How a provider's sandbox got its agentd: `, baked` or `, injected`.
    let source = sandbox.agentd_source().map(|source| format!(", {source}")).unwrap_or_default();
    match sandbox.agentd() {
        Some(agentd) => {
            let hello = agentd.link().await?.hello().clone();
            println!(
                "{kind}: {} pid {} workspace {} (agentd {}{source})",
                shown(sandbox.id()),
                hello.pid,
                shown(&hello.workspace),
                shown(&hello.agentd_version)
            );
            if let Some(report) = &hello.profile {
                print!("{}", enforcement_text(report));
            }
        }
        None => println!("{kind}: {} (no agentd link: the contract through its exec)", shown(sandbox.id())),
    }
    Ok(ExitCode::SUCCESS)
}

/// What a profile's report says, for a person: the whole, each rule, then the notes (escaped: it
/// comes from the sandbox).
fn enforcement_text(report: &Enforcement) -> String {
    let level = |l: Level| match l {
        Level::Full => "full",
        Level::Partial => "partial",
        Level::NotEnforced => "not enforced",
        Level::NotRequested => "not requested",
    };
    let mode = match report.mode {
        Mode::Strict => "strict",
        Mode::BestEffort => "best effort",
    };
    let mut out = format!(
        "profile {}: {} ({mode}, landlock ABI {})\n",
        shown(&report.profile),
        level(report.level),
        report.landlock_abi
    );
    for (what, l) in [
        ("filesystem", report.filesystem),
        ("network", report.network),
        ("signals", report.signals),
        ("programs", report.programs),
        ("limits", report.limits),
        ("privileges", report.privileges),
    ] {
        if l != Level::NotRequested {
            out.push_str(&format!("  {what}: {}\n", level(l)));
        }
    }
    for rule in &report.permissions {
        out.push_str(&format!("  permission {}: {}\n", shown(&rule.rule), level(rule.level)));
        for note in &rule.notes {
            out.push_str(&format!("    {}\n", shown(note)));
        }
    }
    for note in &report.notes {
        out.push_str(&format!("  note: {}\n", shown(note)));
    }
    out
}

/// The sandbox's agentd link, which the process commands need.
fn linked(target: &Target) -> Result<&AgentdSandbox, Box<dyn std::error::Error>> {
    let sandbox = target.sandbox();
    sandbox
        .agentd()
        .ok_or_else(|| format!("{} has no agentd link: processes need one", shown(sandbox.id())).into())
}

/// The exit status that passes a command's on, as `exec` does: its exit code, or 125 when it has
/// none that fits.
fn exit_status(result: &agentd_protocol::ExecResult) -> ExitCode {
    ExitCode::from(u8::try_from(result.exit_code).unwrap_or(AGENTCTL_FAILED))
}

async fn exec(cli: &Cli, args: &ExecArgs, target: &Target) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // The private sandbox has them in its own profile already.
    let permissions = match target {
        Target::Private(_) => Vec::new(),
        _ => cli.permissions.clone(),
    };
    let Some(agentd) = target.sandbox().agentd() else {
        if args.detach {
            return Err("--detach needs a sandbox with an agentd link".into());
        }
        if !permissions.is_empty() {
            return Err("--permission needs a sandbox with an agentd link".into());
        }
        return exec_contract(cli, args, target.sandbox()).await;
    };
    let request = ExecRequest {
        command: args.command.join(" "),
        cwd: args.cwd.clone(),
        env: args.env.iter().cloned().collect(),
        timeout: args.timeout,
        profile: (!permissions.is_empty())
            .then(|| Box::new(ProfileOverride { permissions, ..ProfileOverride::default() })),
        ..ExecRequest::default()
    };
    if args.detach {
        if let Some(created) = target.created() {
            return Err(format!(
                "--detach: {created} ends with this command, and its processes with it: start a                  session with `agentctl up`, or use --url or a KIND-attach:ID sandbox"
            )
            .into());
        }
        return processes::detach(agentd, request).await;
    }
    let mut stdout = std::io::stdout();
    let mut print = |data: &[u8]| {
        let _ = stdout.write_all(data);
        let _ = stdout.flush();
    };
    let live: Option<agentd_host::contract::link::OutputSink<'_>> =
        if cli.json { None } else { Some(&mut print) };
    let result = match agentd.exec(request, live).await {
        Ok(result) => result,
        Err(SandboxError::Refused { message, .. }) => return Err(message.into()),
        Err(err) => return Err(err.into()),
    };
    if cli.json {
        println!("{}", agentd_protocol::ServerMessage::ExecResult(result.clone()).to_json());
    } else if result.timed_out {
        eprintln!("agentctl: timed out after {:.1}s; the process tree was killed", result.duration);
    } else if result.truncated {
        eprintln!("agentctl: output truncated: {} bytes in all", result.total_bytes);
    }
    Ok(exit_status(&result))
}

/// `exec` through the contract's `execute` (a sandbox without an agentd link): cwd and env become
/// shell text, the output comes at the end, and `--json` prints the contract's `ExecuteResponse`.
async fn exec_contract(
    cli: &Cli,
    args: &ExecArgs,
    sandbox: &dyn BaseSandbox,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let timeout = args.timeout.map(Duration::try_from_secs_f64).transpose()?;
    let response = sandbox.execute(&contract_command(args), timeout).await?;
    if cli.json {
        println!("{}", serde_json::to_string(&response)?);
    } else {
        print!("{}", response.output);
        std::io::stdout().flush()?;
        if response.truncated {
            eprintln!("agentctl: output truncated");
        }
    }
    Ok(ExitCode::from(response.exit_code.and_then(|code| u8::try_from(code).ok()).unwrap_or(AGENTCTL_FAILED)))
}

/// The `sh` text of an `exec` with its `--cwd` and `--env` for a sandbox that has only `execute`.
fn contract_command(args: &ExecArgs) -> String {
    let mut command = String::new();
    if let Some(cwd) = &args.cwd {
        command.push_str(&format!("cd {} || exit 1\n", shell_quote(cwd)));
    }
    for (key, value) in &args.env {
        command.push_str(&format!("export {}={}\n", shell_quote(key), shell_quote(value)));
    }
    command.push_str(&args.command.join(" "));
    command
}

/// REMOTE relative to the workspace unless absolute: agentd's workspace, or the directory the
/// sandbox's commands start in.
async fn remote_path(sandbox: &dyn BaseSandbox, remote: &str) -> Result<String, SandboxError> {
    if remote.starts_with('/') {
        return Ok(remote.to_owned());
    }
    let workspace = match sandbox.agentd() {
        Some(agentd) => agentd.workspace().await?,
        None => sandbox.execute("pwd", None).await?.output.trim_end().to_owned(),
    };
    Ok(format!("{}/{remote}", workspace.trim_end_matches('/')))
}

fn progress_bar(len: u64) -> ProgressBar {
    if len < PROGRESS_BYTES {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

async fn upload(
    cli: &Cli,
    local: &Path,
    remote: &str,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let sandbox = target.sandbox();
    let file = tokio::fs::File::open(local).await.map_err(|e| format!("{}: {e}", local.display()))?;
    let remote = remote_path(sandbox, remote).await?;
    let error = match sandbox.agentd() {
        Some(agentd) => {
            let bar = progress_bar(file.metadata().await?.len());
            let error = agentd.link().await?.upload(&remote, file, |n| bar.inc(n)).await?;
            bar.finish_and_clear();
            error
        }
        // The contract's batch call, whole file in memory: the provider's own channel.
        None => {
            drop(file);
            let bytes = tokio::fs::read(local).await.map_err(|e| format!("{}: {e}", local.display()))?;
            let mut responses = sandbox.upload_files(&[(remote.clone(), bytes)]).await?;
            responses.pop().ok_or("the sandbox answered an upload with nothing")?.error
        }
    };
    if cli.json {
        println!(
            "{}",
            serde_json::to_string(&agentd_protocol::FileUploadResponse {
                path: remote.clone(),
                error: error.clone()
            })?
        );
    }
    match error {
        None => Ok(ExitCode::SUCCESS),
        Some(error) => {
            if !cli.json {
                say(format!("upload to {remote} failed: {error}"));
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn download(
    cli: &Cli,
    remote: &str,
    local: &Path,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let sandbox = target.sandbox();
    let remote = remote_path(sandbox, remote).await?;
    let bar = ProgressBar::hidden();
    let outcome = download_to_path(sandbox, &remote, local, |done, total| {
        if bar.is_hidden() && total >= PROGRESS_BYTES {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            bar.set_length(total);
            if let Ok(style) =
                ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            {
                bar.set_style(style);
            }
        }
        bar.set_position(done);
    })
    .await?;
    bar.finish_and_clear();
    match outcome {
        Ok(done) => {
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({"path": remote, "size": done.size, "sha256": done.sha256, "error": null})
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            if cli.json {
                println!("{}", serde_json::json!({"path": remote, "error": error}));
            } else {
                say(format!("download of {remote} failed: {error}"));
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

fn up(cli: &Cli, workspace: Option<&Path>) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if let Some(session) = session::read()? {
        return Err(format!(
            "a session is already up ({} pid {}); run `agentctl down` first",
            session.url, session.pid
        )
        .into());
    }
    let path = session::path()?;
    let given = match workspace {
        Some(dir) => Some(std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?),
        None => None,
    };
    // Before anything is made: the session's files are never where commands may write.
    let session_dir = session::prepare(&path, given.as_deref())?;
    let (workspace, owns_workspace) = match given {
        Some(dir) => (dir, false),
        None => (tempfile::Builder::new().prefix("agentd-session-").tempdir()?.keep(), true),
    };
    let log_path = path.with_extension("log");
    let log_name = log_path.file_name().ok_or("the session's log has no file name")?;
    let log = session::create_own(&session_dir, log_name, &log_path, true)?;
    // The same default profile as the embedded sandbox: writes only to the workspace and a private tmp.
    let profile = DefaultProfile::create_with(&workspace, &[], &cli.permissions)?;
    let socket_dir = socket_dir()?;
    // Readable by this user only, in a directory only this user can enter.
    let token_file = socket_dir.path().join("token");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&token_file)?
        .write_all(agentd_host::contract::random::random_hex().as_bytes())?;
    let spawned = spawn_agentd_passing(
        &workspace,
        socket_dir.path(),
        Lifetime::Detached { log },
        Some(&profile.file()),
        TokenSource::File(&token_file),
        &cli.pass_env,
    );
    let (tmp, profile_dir) = profile.keep();
    let socket_dir = socket_dir.keep();
    let (_child, Started { url, pid }) = match spawned {
        Ok(spawned) => spawned,
        Err(err) => {
            for dir in [&tmp, &profile_dir, &socket_dir] {
                let _ = std::fs::remove_dir_all(dir);
            }
            return Err(err.into());
        }
    };
    let session = SessionFile {
        url: url.clone(),
        token_file,
        pid,
        workspace: workspace.clone(),
        owns_workspace,
        private_dirs: vec![tmp, profile_dir, socket_dir],
    };
    // No secret in it (the token stays in its own file), but it names this user's sandbox:
    // readable by this user only.
    session::write(&session_dir, &path, &session)?;
    if cli.json {
        println!("{}", serde_json::json!({"url": url, "pid": pid, "workspace": workspace}));
    } else {
        println!("agentd up: {url} (pid {pid}), workspace {}", workspace.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Stops the session's agentd and removes what `up` made. What it acts on comes from a session
/// file [`session::read`] trusts, and the pid is signalled only while it is that session's agentd.
fn down() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let path = session::path()?;
    let Some(session) = session::read()? else {
        eprintln!("agentctl: no session is up");
        return Ok(ExitCode::SUCCESS);
    };
    // The recorded pid is a number: once that agentd has ended, another process may have it.
    // Only the process that serves the session's socket is signalled, through a pidfd.
    let agentd = SessionAgentd::open(&session);
    if let Some(agentd) = &agentd {
        agentd.signal(nix::sys::signal::Signal::SIGTERM);
    }
    // Until its last thread has ended: its first one reads as a zombie while the others still end.
    let alive = || agentd.as_ref().is_some_and(SessionAgentd::alive);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(agentd) = agentd.as_ref().filter(|_| alive()) {
        agentd.signal(nix::sys::signal::Signal::SIGKILL);
        // agentd did not finish its own cleaning (a storm starved it): end what it started here.
        let left = end_tagged(session.pid);
        if left > 0 {
            eprintln!("agentctl: {left} processes of agentd (pid {}) could not be ended", session.pid);
        }
    }
    if session.owns_workspace {
        let _ = std::fs::remove_dir_all(&session.workspace);
    }
    for dir in &session.private_dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    session::remove(&path)?;
    println!("agentd down (pid {})", session.pid);
    Ok(ExitCode::SUCCESS)
}

/// The session's agentd, held by a pidfd: signals reach it, never a process that took its number.
struct SessionAgentd {
    pid: i32,
    fd: std::os::fd::OwnedFd,
}

impl SessionAgentd {
    /// The process with the session's pid, if it is the agentd serving the session's socket
    /// (`--unix PATH` on its command line, read once the pidfd holds the process).
    fn open(session: &SessionFile) -> Option<Self> {
        use std::os::fd::FromRawFd as _;
        let pid = i32::try_from(session.pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: a descriptor the kernel just returned, owned here alone.
        let held = Self { pid, fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) } };
        let socket = session.url.strip_prefix("unix:")?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let serves = cmdline.split(|b| *b == 0).any(|arg| arg == socket.as_bytes());
        // Read after the pidfd was opened: if the process it holds is still there, the command
        // line was its own.
        (serves && held.alive()).then_some(held)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        self.send(signal as libc::c_int);
    }

    /// Some thread of it has not ended (its first one reads as a zombie while others still end).
    fn alive(&self) -> bool {
        // Signal 0 only asks whether the held process is there.
        self.send(0) && live_threads(self.pid).is_some()
    }

    fn send(&self, signal: libc::c_int) -> bool {
        use std::os::fd::AsRawFd as _;
        // SAFETY: pidfd_send_signal reads a descriptor we own, a signal number, and no siginfo
        // (null) with no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        rc == 0
    }
}

/// Stops, then SIGKILLs, every process carrying the exec tag of the agentd `agentd`
/// (`AGENTD_EXEC_TAG=<pid>.<seq>`, which every process of its commands inherits), as agentd's own
/// shutdown does: stopped processes cannot fork, so a fork bomb cannot replace what is killed.
/// Returns how many were left after the rounds.
fn end_tagged(agentd: u32) -> usize {
    use nix::sys::signal::{Signal, kill};
    let prefix = format!("AGENTD_EXEC_TAG={agentd}.").into_bytes();
    // (pid, stopped) of every live process with the tag.
    let scan = || -> Vec<(i32, bool)> {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(|pid| {
                let live = live_threads(pid)?;
                let tagged =
                    environ(pid, live.first_ended).split(|b| *b == 0).any(|var| var.starts_with(&prefix));
                tagged.then_some((pid, live.stopped))
            })
            .collect()
    };
    for _ in 0..200 {
        let found = scan();
        if found.iter().all(|(_, stopped)| *stopped) {
            break;
        }
        for (pid, _) in found {
            let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGSTOP);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..200 {
        let found = scan();
        if found.is_empty() {
            return 0;
        }
        for (pid, _) in found {
            let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    scan().len()
}

/// A process with a thread that has not ended.
struct Live {
    /// Every such thread is stopped (it cannot fork until continued).
    stopped: bool,
    /// The first thread has ended (it reads as a zombie) while others have not: they ended alone
    /// (the `exit` system call ends one thread), or are still ending.
    first_ended: bool,
}

/// Process `pid` if any of its threads has not ended. Its first thread reads as a zombie once it
/// has ended, while the others may run on: only they tell.
fn live_threads(pid: i32) -> Option<Live> {
    let state = |stat: &Path| -> Option<char> {
        let stat = std::fs::read_to_string(stat).ok()?;
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    };
    let live = |state: char| (state != 'Z' && state != 'X').then_some(state == 'T' || state == 't');
    match state(Path::new(&format!("/proc/{pid}/stat")))? {
        'Z' => {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
            let mut threads = tasks.flatten().filter_map(|task| live(state(&task.path().join("stat"))?));
            let first = threads.next()?;
            Some(Live { stopped: threads.fold(first, |all, stopped| all && stopped), first_ended: true })
        }
        other => live(other).map(|stopped| Live { stopped, first_ended: false }),
    }
}

/// The environment of process `pid`. With `first_ended` it is read through the other threads (it
/// is read through the first one's memory, so `/proc/<pid>/environ` reads empty then).
fn environ(pid: i32, first_ended: bool) -> Vec<u8> {
    let first = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    if !first_ended || !first.is_empty() {
        return first;
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|task| std::fs::read(task.path().join("environ")).ok().filter(|e| !e.is_empty()))
        .unwrap_or_default()
}

/// Runs a file verb; prints its result (the protocol's type with `--json`). Exit status 1 when the
/// result carries an error.
async fn verb(
    cli: &Cli,
    request: FsRequest,
    target: &Target,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let response = target.sandbox().fs(request).await?;
    if cli.json {
        println!("{}", serde_json::to_string(&response)?);
    }
    let error = match &response {
        FsResponse::Ls(r) => r.error.clone(),
        FsResponse::Read(r) => r.error.clone(),
        FsResponse::Write(r) => r.error.clone(),
        FsResponse::Edit(r) => r.error.clone(),
        FsResponse::Glob(r) => r.error.clone(),
        FsResponse::Grep(r) => r.error.clone(),
        FsResponse::Delete(r) => r.error.clone(),
    };
    if let Some(error) = error {
        if !cli.json {
            say(error);
        }
        return Ok(ExitCode::FAILURE);
    }
    if !cli.json {
        print_human(&response);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(response: &FsResponse) {
    match response {
        FsResponse::Ls(r) => {
            for entry in r.entries.iter().flatten() {
                println!("{}{}", shown(&entry.path), if entry.is_dir { "/" } else { "" });
            }
        }
        FsResponse::Read(r) => {
            if let Some(data) = &r.file_data {
                println!("{}", data.content);
            }
            if let (Some(next), Some(total)) = (r.next_offset, r.total_lines) {
                eprintln!("agentctl: more lines follow ({total} in all); continue with --offset {next}");
            } else if let Some(next) = r.next_offset {
                eprintln!("agentctl: more lines follow; continue with --offset {next}");
            }
        }
        FsResponse::Write(r) => println!("{}", shown(r.path.as_deref().unwrap_or_default())),
        FsResponse::Edit(r) => {
            let path = shown(r.path.as_deref().unwrap_or_default());
            println!("{path}: {} replaced", r.occurrences.unwrap_or(0))
        }
        FsResponse::Glob(r) => {
            for entry in r.matches.iter().flatten() {
                println!("{}", shown(&entry.path));
            }
            if r.truncated {
                eprintln!("agentctl: results truncated ({:?})", r.truncation_reason);
            }
        }
        FsResponse::Grep(r) => {
            for m in r.matches.iter().flatten() {
                // The path is a name from the sandbox; the line is the file's content, as `read` prints it.
                println!("{}:{}:{}", shown(&m.path), m.line, m.text);
            }
        }
        FsResponse::Delete(_) => {}
    }
}

/// Kinds left out of a listing, each with the reason.
type Skipped = Vec<(Kind, String)>;

/// The providers of the kinds that can be listed here: built, and configured (Daytona: its API
/// key; Modal: its token). The others come back with the reason.
fn listable() -> (Vec<Box<dyn provider::Provider>>, Skipped) {
    let (mut providers, mut skipped) = (Vec::new(), Vec::new());
    for kind in Kind::ALL {
        let found = match kind.unavailable() {
            None => provider::provider(kind).map_err(|e| e.to_string()),
            Some(why) => Err(why),
        };
        match found {
            Ok(provider) => providers.push(provider),
            Err(why) => skipped.push((kind, why)),
        }
    }
    (providers, skipped)
}

/// Every sandbox agentd created, across the listable kinds, and the kinds whose listing failed
/// (each said on stderr as it fails; the others are still listed).
async fn list_all() -> (Vec<SandboxInfo>, Vec<Kind>) {
    let (providers, _skipped) = listable();
    let (mut all, mut failed) = (Vec::new(), Vec::new());
    for provider in providers {
        match provider.list().await {
            Ok(listed) => all.extend(listed),
            Err(err) => {
                say(format!("{}: {err}", provider.kind()));
                failed.push(provider.kind());
            }
        }
    }
    (all, failed)
}

/// How `sandbox ls` shows an id: Docker's are shortened as `docker ps` does (`rm` takes prefixes).
fn short_id(info: &SandboxInfo) -> &str {
    match info.kind.row().and_then(|row| row.short_id) {
        // By `get`: an id that is not ASCII (a hostile listing) is shown whole, not cut mid-character.
        Some(width) => info.id.get(..width).unwrap_or(&info.id),
        None => &info.id,
    }
}

/// Exit status 1 when a provider could not be listed (the others are shown all the same).
async fn sandbox_ls(cli: &Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (all, failed) = list_all().await;
    let status = if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    if cli.json {
        println!("{}", serde_json::to_string(&all)?);
        return Ok(status);
    }
    let rows: Vec<[std::borrow::Cow<'_, str>; 4]> = all
        .iter()
        .map(|i| [i.kind.name().into(), shown(short_id(i)), shown(&i.source), shown(&i.state)])
        .collect();
    let header = ["KIND", "ID", "SOURCE", "STATE"].map(std::borrow::Cow::from);
    let mut widths = header.each_ref().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let [kind, id, source, state] = row;
        println!("{kind:<0$}  {id:<1$}  {source:<2$}  {state}", widths[0], widths[1], widths[2]);
    }
    Ok(status)
}

/// What `sandbox rm|pause|resume` does to each sandbox.
#[derive(Clone, Copy)]
enum Verb {
    Remove,
    Pause,
    Resume,
}

/// `KIND:ID` goes to that kind; a bare id (or a prefix of one) is looked up among what `ls` lists.
async fn by_id(ids: &[String], verb: Verb) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut listed = None;
    for id in ids {
        let (kind, id) =
            match id.split_once(':').and_then(|(head, rest)| Some((Kind::from_name(head)?, rest))) {
                Some((kind, rest)) => (kind, rest.to_owned()),
                None => {
                    if listed.is_none() {
                        listed = Some(list_all().await.0);
                    }
                    let all = listed.as_deref().unwrap_or_default();
                    let found: Vec<&SandboxInfo> =
                        all.iter().filter(|i| i.id.starts_with(id.as_str())).collect();
                    match found.as_slice() {
                        [one] => (one.kind, one.id.clone()),
                        [] => {
                            return Err(format!(
                                "no sandbox agentd created has the id {} (see `agentctl sandbox ls`)",
                                shown(id)
                            )
                            .into());
                        }
                        _ => {
                            return Err(format!(
                                "{} names {} sandboxes; give more of the id or KIND:ID",
                                shown(id),
                                found.len()
                            )
                            .into());
                        }
                    }
                }
            };
        if let Some(why) = kind.unavailable() {
            return Err(why.into());
        }
        let provider = provider::provider(kind)?;
        let done = match verb {
            Verb::Remove => provider.remove(&id).await.map(|()| "removed"),
            Verb::Pause => provider.pause(&id).await.map(|()| "paused"),
            Verb::Resume => provider.resume(&id).await.map(|()| "resumed"),
        };
        println!("{} {kind}:{}", done?, shown(&id));
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes what every provider lists. A listing or a removal that fails (an id of the wrong
/// shape is refused before any request) is said and skipped; the rest goes on, and the exit
/// status is then 1.
async fn gc() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (providers, skipped) = listable();
    for (kind, why) in skipped {
        say(format!("{kind} skipped: {why}"));
    }
    let (mut removed, mut failed) = (0, 0);
    for provider in providers {
        let kind = provider.kind();
        let listed = match provider.list().await {
            Ok(listed) => listed,
            Err(err) => {
                say(format!("{kind}: {err}"));
                failed += 1;
                continue;
            }
        };
        for info in listed {
            match provider.remove(&info.id).await {
                Ok(()) => {
                    println!("removed {kind}:{} ({})", shown(short_id(&info)), shown(&info.source));
                    removed += 1;
                }
                Err(err) => {
                    say(format!("{kind}: not removed: {err}"));
                    failed += 1;
                }
            }
        }
    }
    println!("{removed} sandbox(es) removed");
    if failed > 0 {
        say(format!("{failed} listing(s) or removal(s) failed"));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--cwd` and `--env` survive as shell text, quotes and spaces included, and a missing cwd
    /// stops the command (as agentd refuses it on the native path).
    #[test]
    fn exec_options_become_shell_text_for_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let cli = Cli::parse_from([
            "agentctl",
            "exec",
            "--cwd",
            dir.path().to_str().unwrap(),
            "--env",
            "A=it's a b",
            "--env",
            "B=$HOME",
            "--",
            "printf '%s|%s|%s' \"$A\" \"$B\" \"$PWD\";",
            "exit 6",
        ]);
        let Cmd::Exec(args) = &cli.command else { panic!("not exec") };
        let out = std::process::Command::new("sh").arg("-c").arg(contract_command(args)).output().unwrap();
        assert_eq!(out.status.code(), Some(6));
        let expected = format!("it's a b|$HOME|{}", dir.path().display());
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);

        let cli = Cli::parse_from(["agentctl", "exec", "--cwd", "/no/such/dir", "--", "echo ran"]);
        let Cmd::Exec(args) = &cli.command else { panic!("not exec") };
        let out = std::process::Command::new("sh").arg("-c").arg(contract_command(args)).output().unwrap();
        assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(1), b"".as_slice()));
    }
}
