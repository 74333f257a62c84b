//! The fake's sandboxes as Docker containers, driven through the `docker` CLI. Bytes go through
//! `docker exec -i` stdin/stdout without a terminal, so they arrive unchanged.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::process::Command;

use super::CONTAINER_LABEL;

/// Keeps a container alive with nothing of agentd in it; `docker-init` (`--init`) reaps the
/// orphans a killed exec leaves and ends `sleep` at once on stop.
const KEEP_ALIVE: &[&str] = &["sleep", "infinity"];
/// Marks every process of one exec (inherited through the environment), so a timeout can kill
/// them all: the exec's process group and whatever it started.
const EXEC_MARKER: &str = "FAKE_DAYTONA_EXEC";

/// A per-file failure, as Daytona reports it (status, code, message).
#[derive(Debug, Clone)]
pub struct FileError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl FileError {
    fn new(status: u16, code: &'static str, message: String) -> Self {
        Self { status, code, message }
    }
}

/// How an exec ended.
pub enum ExecEnd {
    Exited { code: i32, output: Vec<u8> },
    TimedOut,
}

/// Runs `docker ARGS` with `input` on stdin; (exit code, stdout, stderr). `kill_on_drop`: a caller
/// that gives up takes the CLI down with it.
async fn docker(args: &[&str], input: Option<Vec<u8>>) -> std::io::Result<(i32, Vec<u8>, Vec<u8>)> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // Written from its own task: a process that writes a lot before reading cannot deadlock us.
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        tokio::spawn(async move {
            // The process may exit without reading it all (EPIPE): its exit status tells.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let output = child.wait_with_output().await?;
    Ok((output.status.code().unwrap_or(-1), output.stdout, output.stderr))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

pub async fn image_exists(image: &str) -> bool {
    matches!(docker(&["image", "inspect", "--format", "{{.Id}}", image], None).await, Ok((0, _, _)))
}

/// Creates and starts a container for sandbox `id`, with `mounts` bound at the same paths (the last
/// one its working directory); its id, or Docker's message.
pub async fn run(
    instance: &str,
    id: &str,
    image: &str,
    env: &BTreeMap<String, String>,
    mounts: &[std::path::PathBuf],
) -> Result<String, String> {
    let instance_label = format!("{CONTAINER_LABEL}={instance}");
    let sandbox_label = format!("{CONTAINER_LABEL}.sandbox={id}");
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec!["run", "-d", "--init", "--label", &instance_label, "--label", &sandbox_label];
    for pair in &env {
        args.extend(["-e", pair.as_str()]);
    }
    let binds: Vec<String> = mounts.iter().map(|dir| format!("{0}:{0}", dir.display())).collect();
    for bind in &binds {
        args.extend(["-v", bind.as_str()]);
    }
    let workdir = mounts.last().map(|dir| dir.to_string_lossy());
    if let Some(dir) = &workdir {
        args.extend(["-w", dir.as_ref()]);
    }
    args.extend(["--entrypoint", KEEP_ALIVE[0], image]);
    args.extend(&KEEP_ALIVE[1..]);
    match docker(&args, None).await {
        Ok((0, stdout, _)) => Ok(text(&stdout)),
        Ok((_, _, stderr)) => Err(text(&stderr)),
        Err(err) => Err(format!("docker: {err}")),
    }
}

/// The container's address on its (bridge) network.
pub async fn ip(container: &str) -> Option<String> {
    let format = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}";
    match docker(&["inspect", "--format", format, container], None).await {
        Ok((0, stdout, _)) => text(&stdout).split_whitespace().next().map(str::to_owned),
        _ => None,
    }
}

pub async fn stop(container: &str) -> Result<(), String> {
    match docker(&["stop", "-t", "2", container], None).await {
        Ok((0, _, _)) => Ok(()),
        Ok((_, _, stderr)) => Err(text(&stderr)),
        Err(err) => Err(err.to_string()),
    }
}

pub async fn start(container: &str) -> Result<(), String> {
    match docker(&["start", container], None).await {
        Ok((0, _, _)) => Ok(()),
        Ok((_, _, stderr)) => Err(text(&stderr)),
        Err(err) => Err(err.to_string()),
    }
}

pub async fn remove(container: &str) {
    let _ = docker(&["rm", "-f", "-v", container], None).await;
}

/// Removes every container of fake `instance` (from `Drop`, outside any runtime).
pub fn remove_all_blocking(instance: &str) {
    let filter = format!("label={CONTAINER_LABEL}={instance}");
    let Ok(listed) = std::process::Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output()
    else {
        return;
    };
    let ids: Vec<String> = text(&listed.stdout).split_whitespace().map(str::to_owned).collect();
    if !ids.is_empty() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v"])
            .args(&ids)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs `command` as a script on `sh`'s stdin (stderr merged into stdout, in order), in `cwd`
/// (else the image's working directory) with `envs` added. Past `timeout`, every process of the
/// exec is killed with SIGKILL.
pub async fn exec(
    container: &str,
    command: &str,
    cwd: Option<&str>,
    envs: &BTreeMap<String, String>,
    timeout: Option<Duration>,
) -> Result<ExecEnd, String> {
    let marker = format!("{EXEC_MARKER}={}", super::state::random_hex(12));
    let pairs: Vec<String> = envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec!["exec", "-i", "-e", marker.as_str()];
    if let Some(cwd) = cwd.filter(|c| !c.is_empty()) {
        args.extend(["-w", cwd]);
    }
    for pair in &pairs {
        args.extend(["-e", pair.as_str()]);
    }
    args.extend([container, "sh", "-c", "exec 2>&1; exec sh"]);
    let run = docker(&args, Some(command.as_bytes().to_vec()));
    let ended = match timeout {
        Some(limit) => match tokio::time::timeout(limit, run).await {
            Ok(ended) => ended,
            Err(_) => {
                kill_marked(container, &marker).await;
                return Ok(ExecEnd::TimedOut);
            }
        },
        None => run.await,
    };
    match ended {
        // Docker's own failures (no such directory, container gone) are the only text on its
        // stderr: the script's stderr went to stdout.
        Ok((code, _, stderr)) if !stderr.is_empty() && code != 0 => Err(text(&stderr)),
        Ok((code, output, _)) => Ok(ExecEnd::Exited { code, output }),
        Err(err) => Err(format!("docker exec: {err}")),
    }
}

/// SIGKILLs every process in `container` whose environment holds `marker` (two passes, for
/// children forked during the first).
async fn kill_marked(container: &str, marker: &str) {
    let script = format!(
        "for pass in 1 2; do for d in /proc/[0-9]*; do \
         if grep -q '{marker}' \"$d/environ\" 2>/dev/null; then kill -9 \"${{d#/proc/}}\" 2>/dev/null; fi; \
         done; done"
    );
    let _ = docker(&["exec", container, "sh", "-c", &script], None).await;
}

/// Writes `bytes` to `path` (relative to the working directory), creating parent directories and
/// replacing a file that is there.
pub async fn write_file(container: &str, path: &str, bytes: Vec<u8>) -> Result<(), FileError> {
    let script = "if [ -d \"$1\" ]; then echo \"$1: is a directory\" >&2; exit 90; fi; \
                  mkdir -p \"$(dirname \"$1\")\" || exit 91; cat > \"$1\" || exit 92";
    match docker(&["exec", "-i", container, "sh", "-c", script, "sh", path], Some(bytes)).await {
        Ok((0, _, _)) => Ok(()),
        Ok((code, _, stderr)) => {
            let message = text(&stderr);
            Err(match code {
                90 | 91 => FileError::new(400, "INVALID_FILE_PATH", message),
                _ if message.contains("ermission denied") => {
                    FileError::new(403, "FILE_ACCESS_DENIED", message)
                }
                _ => FileError::new(500, "FILE_WRITE_FAILED", message),
            })
        }
        Err(err) => Err(FileError::new(500, "FILE_WRITE_FAILED", err.to_string())),
    }
}

/// The bytes of `path` (relative to the working directory).
pub async fn read_file(container: &str, path: &str) -> Result<Vec<u8>, FileError> {
    let script = "if [ -d \"$1\" ]; then exit 90; fi; [ -e \"$1\" ] || exit 91; \
                  [ -r \"$1\" ] || exit 92; exec cat -- \"$1\"";
    match docker(&["exec", container, "sh", "-c", script, "sh", path], None).await {
        Ok((0, stdout, _)) => Ok(stdout),
        Ok((90, _, _)) => {
            Err(FileError::new(400, "INVALID_FILE_PATH", format!("path is a directory: {path}")))
        }
        Ok((91, _, _)) => Err(FileError::new(404, "FILE_NOT_FOUND", format!("file not found: {path}"))),
        Ok((92, _, _)) => {
            Err(FileError::new(403, "FILE_ACCESS_DENIED", format!("permission denied: {path}")))
        }
        Ok((_, _, stderr)) => Err(FileError::new(500, "FILE_READ_FAILED", text(&stderr))),
        Err(err) => Err(FileError::new(500, "FILE_READ_FAILED", err.to_string())),
    }
}
