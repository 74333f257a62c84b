//! `agentctl`: run commands and move files in a sandbox from the shell.
//!
//! Which sandbox: `--url` (a running agentd), else the session `agentctl up` started, else a private
//! local agentd that lives for this one command.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentd_host::adapters::docker::{self, DockerSandbox};
use agentd_host::adapters::local::{DefaultProfile, Lifetime, Started, socket_dir, spawn_agentd};
use agentd_host::{AgentdSandbox, BaseSandbox as _, LocalSandbox, SandboxError};
use agentd_protocol::cli::FsCommand;
use agentd_protocol::{ExecRequest, FsResponse};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

/// Exit status for agentctl's own failures (unreachable sandbox, bad arguments, spawn failure).
const AGENTCTL_FAILED: u8 = 125;

/// Files above this size get a progress bar (on a terminal).
const PROGRESS_BYTES: u64 = 8 << 20;

#[derive(Parser)]
#[command(name = "agentctl", version, about = "Run commands and move files in an agentd sandbox.")]
#[command(after_help = "Without --url, commands use the session started by `agentctl up`, or else a \
private local agentd that lives for that one command.\nExit status: the command's own for `exec`; \
125 when agentctl itself fails.")]
struct Cli {
    /// agentd to attach to, e.g. ws://127.0.0.1:7700.
    #[arg(long, global = true, env = "AGENTD_URL")]
    url: Option<String>,
    /// Bearer token for --url (prefer the AGENTD_TOKEN variable: arguments are visible in ps).
    #[arg(long, global = true, env = "AGENTD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print results as JSON (the protocol's result types) for scripts.
    #[arg(long, global = true)]
    json: bool,
    /// Run in a container instead: docker:IMAGE (agentd baked in; created, then removed) or
    /// docker-attach:CONTAINER (a running container; the static agentd is injected).
    #[arg(long, global = true, value_name = "docker:IMAGE|docker-attach:CONTAINER")]
    sandbox: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a shell command; prints its output and exits with its exit code.
    Exec(ExecArgs),
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
    /// Containers agentctl created (label dev.agentd.sandbox).
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// Remove every container agentctl created and left behind.
    Gc,
    #[command(flatten)]
    Fs(FsCommand),
}

#[derive(Subcommand)]
enum SandboxCmd {
    /// List them: id, image, status.
    Ls,
    /// Stop and remove the given ones.
    Rm { ids: Vec<String> },
}

#[derive(Args)]
struct ExecArgs {
    /// Seconds before the command's process tree is killed (fractions allowed; 0: no limit).
    #[arg(long)]
    timeout: Option<f64>,
    /// Working directory (relative to the workspace unless absolute).
    #[arg(long)]
    cwd: Option<String>,
    /// Extra environment variable, KEY=VALUE (repeatable).
    #[arg(long = "env", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// The command; several words are joined with spaces and run by /bin/sh -c.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got `{raw}`")),
    }
}

/// What `agentctl up` leaves for later commands.
#[derive(Serialize, Deserialize)]
struct SessionFile {
    /// `unix:PATH`: a local session needs no token (agentd refuses its own commands by process).
    url: String,
    /// For a session recorded by an older agentctl (a TCP url).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    pid: u32,
    workspace: PathBuf,
    /// The workspace was created by `up`, so `down` removes it.
    owns_workspace: bool,
    /// The profile's private tmp and profile directory, removed by `down`.
    #[serde(default)]
    private_dirs: Vec<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("agentctl: {err}");
            ExitCode::from(AGENTCTL_FAILED)
        }
    }
}

/// The sandbox a command talks to; keeps a private agentd alive while needed.
enum Target {
    Remote(AgentdSandbox),
    Private(LocalSandbox),
    Docker(DockerSandbox),
}

impl Target {
    fn sandbox(&self) -> &AgentdSandbox {
        match self {
            Self::Remote(sandbox) => sandbox,
            Self::Private(local) => local.agentd(),
            Self::Docker(docker) => docker.agentd(),
        }
    }

    /// Releases what this command started: a container it created is stopped and removed.
    async fn finish(self) {
        match self {
            Self::Docker(docker) => {
                if let Err(err) = docker.close().await {
                    eprintln!("agentctl: {err}");
                }
            }
            Self::Remote(_) | Self::Private(_) => {}
        }
    }
}

async fn target(cli: &Cli) -> Result<Target, Box<dyn std::error::Error>> {
    if let Some(spec) = &cli.sandbox {
        if let Some(image) = spec.strip_prefix("docker:") {
            return Ok(Target::Docker(DockerSandbox::create(image).await?));
        }
        if let Some(container) = spec.strip_prefix("docker-attach:") {
            return Ok(Target::Docker(DockerSandbox::attach(container, &docker::static_agentd()?).await?));
        }
        return Err(format!("--sandbox {spec}: expected docker:IMAGE or docker-attach:CONTAINER").into());
    }
    if let Some(url) = &cli.url {
        return Ok(Target::Remote(AgentdSandbox::connect(url, cli.token.as_deref()).await?));
    }
    if let Some(session) = read_session()? {
        return Ok(Target::Remote(AgentdSandbox::connect(&session.url, session.token.as_deref()).await?));
    }
    Ok(Target::Private(LocalSandbox::start().await?))
}

async fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match &cli.command {
        Cmd::Exec(_) | Cmd::Upload { .. } | Cmd::Download { .. } => {
            let target = target(&cli).await?;
            let outcome = match &cli.command {
                Cmd::Exec(args) => exec(&cli, args, &target).await,
                Cmd::Upload { local, remote } => upload(&cli, local, remote, &target).await,
                Cmd::Download { remote, local } => download(&cli, remote, local, &target).await,
                _ => verb(&cli, &target).await,
            };
            target.finish().await;
            outcome
        }
        Cmd::Sandbox(command) => sandbox_command(command).await,
        Cmd::Gc => gc().await,
        Cmd::Up { workspace } => up(&cli, workspace.as_deref()),
        Cmd::Down => down(),
        Cmd::Fs(_) => {
            let target = target(&cli).await?;
            let outcome = verb(&cli, &target).await;
            target.finish().await;
            outcome
        }
        Cmd::Status => {
            let target = target(&cli).await?;
            let hello = target.sandbox().link().await?.hello().clone();
            let kind = match &target {
                Target::Remote(_) => "attached",
                Target::Private(_) => "private (no `agentctl up` session)",
                Target::Docker(_) => "container",
            };
            println!(
                "{kind}: {} pid {} workspace {} (agentd {})",
                target.sandbox().id(),
                hello.pid,
                hello.workspace,
                hello.agentd_version
            );
            target.finish().await;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn exec(cli: &Cli, args: &ExecArgs, target: &Target) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let request = ExecRequest {
        command: args.command.join(" "),
        cwd: args.cwd.clone(),
        env: args.env.iter().cloned().collect(),
        timeout: args.timeout,
        ..ExecRequest::default()
    };
    let mut stdout = std::io::stdout();
    let mut print = |data: &[u8]| {
        let _ = stdout.write_all(data);
        let _ = stdout.flush();
    };
    let live: Option<agentd_host::link::OutputSink<'_>> = if cli.json { None } else { Some(&mut print) };
    let result = match target.sandbox().exec(request, live).await {
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
    Ok(ExitCode::from(u8::try_from(result.exit_code).unwrap_or(AGENTCTL_FAILED)))
}

/// REMOTE relative to the workspace unless absolute.
async fn remote_path(sandbox: &AgentdSandbox, remote: &str) -> Result<String, SandboxError> {
    if remote.starts_with('/') {
        return Ok(remote.to_owned());
    }
    Ok(format!("{}/{remote}", sandbox.workspace().await?.trim_end_matches('/')))
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
    let file = tokio::fs::File::open(local).await.map_err(|e| format!("{}: {e}", local.display()))?;
    let len = file.metadata().await?.len();
    let remote = remote_path(target.sandbox(), remote).await?;
    let bar = progress_bar(len);
    let error = target.sandbox().link().await?.upload(&remote, file, |n| bar.inc(n)).await?;
    bar.finish_and_clear();
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
                eprintln!("agentctl: upload to {remote} failed: {error}");
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
    let remote = remote_path(target.sandbox(), remote).await?;
    // Written beside the destination and renamed, so a failed download leaves nothing half-written.
    let dir = local.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let partial = tempfile::NamedTempFile::new_in(dir)?;
    let file = tokio::fs::File::from_std(partial.reopen()?);
    let bar = ProgressBar::hidden();
    let outcome = target
        .sandbox()
        .link()
        .await?
        .download(&remote, file, |done, total| {
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
            partial.persist(local)?;
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
                eprintln!("agentctl: download of {remote} failed: {error}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

fn session_path() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("AGENTCTL_SESSION") {
        return Ok(PathBuf::from(path));
    }
    let home = std::env::var_os("HOME").ok_or("HOME is not set; set AGENTCTL_SESSION to a file path")?;
    Ok(PathBuf::from(home).join(".agentd").join("session.json"))
}

/// The `up` session, if one is recorded and its agentd is alive.
fn read_session() -> Result<Option<SessionFile>, Box<dyn std::error::Error>> {
    let path = session_path()?;
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("{}: {err}", path.display()).into()),
    };
    let session: SessionFile = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if !Path::new(&format!("/proc/{}", session.pid)).exists() {
        eprintln!("agentctl: the `up` session (pid {}) is gone; removing {}", session.pid, path.display());
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    }
    Ok(Some(session))
}

fn up(cli: &Cli, workspace: Option<&Path>) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if let Some(session) = read_session()? {
        return Err(format!(
            "a session is already up ({} pid {}); run `agentctl down` first",
            session.url, session.pid
        )
        .into());
    }
    let path = session_path()?;
    let (workspace, owns_workspace) = match workspace {
        Some(dir) => (std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?, false),
        None => (tempfile::Builder::new().prefix("agentd-session-").tempdir()?.keep(), true),
    };
    let log_path = path.with_extension("log");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    // The same default profile as the embedded sandbox: writes only to the workspace and a private tmp.
    let profile = DefaultProfile::create(&workspace)?;
    let socket_dir = socket_dir()?;
    let spawned =
        spawn_agentd(&workspace, socket_dir.path(), Lifetime::Detached { log }, Some(&profile.file()));
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
        token: None,
        pid,
        workspace: workspace.clone(),
        owns_workspace,
        private_dirs: vec![tmp, profile_dir, socket_dir],
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // No secret in it, but it names this user's sandbox: readable by this user only.
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
    file.write_all(serde_json::to_string_pretty(&session)?.as_bytes())?;
    if cli.json {
        println!("{}", serde_json::json!({"url": url, "pid": pid, "workspace": workspace}));
    } else {
        println!("agentd up: {url} (pid {pid}), workspace {}", workspace.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn down() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let path = session_path()?;
    let Some(session) = read_session()? else {
        eprintln!("agentctl: no session is up");
        return Ok(ExitCode::SUCCESS);
    };
    let pid = nix::unistd::Pid::from_raw(session.pid as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let alive = || Path::new(&format!("/proc/{}", session.pid)).exists() && !is_zombie(session.pid);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if alive() {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
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
    std::fs::remove_file(&path)?;
    println!("agentd down (pid {})", session.pid);
    Ok(ExitCode::SUCCESS)
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
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let state = stat.rsplit_once(')')?.1.split_whitespace().next()?.to_owned();
                let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let tagged = environ.split(|b| *b == 0).any(|var| var.starts_with(&prefix));
                (tagged && state != "Z" && state != "X").then_some((pid, state == "T" || state == "t"))
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

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Runs a file verb; prints its result (the protocol's type with `--json`). Exit status 1 when the
/// result carries an error.
async fn verb(cli: &Cli, target: &Target) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let Cmd::Fs(command) = &cli.command else { return Err("not a file verb".into()) };
    let request = command.clone().into_request(|| std::io::read_to_string(std::io::stdin()))?;
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
            eprintln!("agentctl: {error}");
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
                println!("{}{}", entry.path, if entry.is_dir { "/" } else { "" });
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
        FsResponse::Write(r) => println!("{}", r.path.as_deref().unwrap_or_default()),
        FsResponse::Edit(r) => {
            println!("{}: {} replaced", r.path.as_deref().unwrap_or_default(), r.occurrences.unwrap_or(0))
        }
        FsResponse::Glob(r) => {
            for entry in r.matches.iter().flatten() {
                println!("{}", entry.path);
            }
            if r.truncated {
                eprintln!("agentctl: results truncated ({:?})", r.truncation_reason);
            }
        }
        FsResponse::Grep(r) => {
            for m in r.matches.iter().flatten() {
                println!("{}:{}:{}", m.path, m.line, m.text);
            }
        }
        FsResponse::Delete(_) => {}
    }
}

async fn sandbox_command(command: &SandboxCmd) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let engine = docker::engine().await?;
    match command {
        SandboxCmd::Ls => {
            for (id, image, status) in docker::list(&engine).await? {
                println!("{}  {image}  {status}", &id[..id.len().min(12)]);
            }
        }
        SandboxCmd::Rm { ids } => {
            for id in ids {
                docker::remove(&engine, id).await?;
                println!("removed {id}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn gc() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let engine = docker::engine().await?;
    let leftovers = docker::list(&engine).await?;
    for (id, image, _) in &leftovers {
        docker::remove(&engine, id).await?;
        println!("removed {} ({image})", &id[..id.len().min(12)]);
    }
    println!("{} container(s) removed", leftovers.len());
    Ok(ExitCode::SUCCESS)
}
