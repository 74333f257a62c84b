//! The fake Daytona's side of its containers (the rest is [`crate::containers`]): creating one for
//! a sandbox, the toolbox exec (one `sh` script, stderr merged) and the file verbs with Daytona's
//! error codes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::CONTAINER_LABEL;
use crate::containers::{self, docker, kill_marked, text};
pub use crate::containers::{image_exists, ip, remove, start, stop};

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

/// Creates and starts a container for sandbox `id`, with `mounts` bound at the same paths (the last
/// one its working directory); its id, or Docker's message.
pub async fn run(
    instance: &str,
    id: &str,
    image: &str,
    env: &BTreeMap<String, String>,
    mounts: &[std::path::PathBuf],
) -> Result<String, String> {
    let workdir = mounts.last().map(|dir| dir.to_string_lossy().into_owned());
    containers::run(&containers::Spec {
        label: CONTAINER_LABEL,
        instance,
        sandbox: id,
        image,
        env,
        mounts,
        workdir: workdir.as_deref(),
        command: &[],
        publish: &[],
    })
    .await
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
    let marker = containers::exec_marker(EXEC_MARKER);
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
