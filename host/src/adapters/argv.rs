//! What providers share whose own exec runs an argv with bytes on its stdin and gives back its
//! stdout, stderr and exit status ([`ArgvExec`]: Modal's command router, Kubernetes' `pods/exec`):
//!
//! - [`sh_execute`]: the contract's `execute` through it (`sh -c`, stdin closed, a long command as
//!   an uploaded script, a timeout read as exit 124 with agentd's note: [`execute_response`]);
//! - [`upload`] / [`download`]: files through it. Bytes travel on the exec's stdin (upload) or stdout
//!   (download) and are never interpreted. A small `sh` wrapper checks the path first and says what
//!   is wrong through its exit status, which maps to the contract's per-file codes.

use std::time::Duration;

use agentd_protocol::{ExecuteResponse, FileDownloadResponse, FileUploadResponse, TransferError};
use async_trait::async_trait;
use futures_util::StreamExt as _;

use crate::adapters::capped::EXEC_RESULT_MAX;
use crate::contract::agentd::DOWNLOAD_FILES_MOST;
use crate::contract::agentd::timeout_note;
use crate::contract::deadlines::DEFAULT_EXEC_TIMEOUT;
use crate::contract::error::{Result, SandboxError};
use crate::contract::random::random_hex;

/// A provider's exec of one argv.
#[async_trait]
pub trait ArgvExec: Send + Sync {
    /// Runs `args` with `stdin` (else an empty, closed stdin), ended at `timeout`, keeping at most
    /// `cap` bytes of each output stream.
    async fn run(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
        timeout: Option<Duration>,
        cap: u64,
    ) -> Result<ExecOutput>;
}

/// How an exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// The provider gave no exit before the exec's deadline.
    NoAnswer,
}

impl ExitStatus {
    /// The SDKs' number: the code, or 128 + the signal; `None` when unknown.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Code(code) => Some(code),
            ExitStatus::Signal(signal) => Some(128 + signal),
            ExitStatus::NoAnswer => None,
        }
    }
}

/// What an exec produced.
#[derive(Debug)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub status: ExitStatus,
    pub elapsed: Duration,
}

/// Commands longer than this travel as an uploaded script: one `sh -c` argument is limited to
/// 128 KiB by Linux (MAX_ARG_STRLEN).
const INLINE_COMMAND_MAX: usize = 64 * 1024;

/// The contract's view of an exec of `sh -c`: stdout then stderr; a kill at or past the command's
/// `timeout` (or no exit by the deadline) reads as exit code 124 with agentd's note.
pub fn execute_response(out: &ExecOutput, timeout: Option<Duration>) -> ExecuteResponse {
    let mut bytes = out.stdout.clone();
    bytes.extend_from_slice(&out.stderr);
    let mut output = String::from_utf8_lossy(&bytes).into_owned();
    let timed_out = match out.status {
        ExitStatus::NoAnswer => true,
        ExitStatus::Signal(_) => timeout.is_some_and(|t| out.elapsed >= t),
        ExitStatus::Code(_) => false,
    };
    if !timed_out {
        return ExecuteResponse { output, exit_code: out.status.code(), truncated: false };
    }
    if !output.is_empty() && !output.ends_with('\n') {
        output.push('\n');
    }
    output.push_str(&timeout_note(timeout.unwrap_or(out.elapsed).as_secs_f64()));
    ExecuteResponse { output, exit_code: Some(124), truncated: false }
}

/// The contract's `execute` through `exec`: `sh -c COMMAND` with stdin closed; a command too long
/// for one argument is uploaded to a script in `run_dir` first (and removed after).
pub async fn sh_execute(
    exec: &dyn ArgvExec,
    run_dir: &str,
    command: &str,
    timeout: Option<Duration>,
) -> Result<ExecuteResponse> {
    let timeout = match timeout {
        None => Some(DEFAULT_EXEC_TIMEOUT),
        Some(t) if t.is_zero() => None,
        Some(t) => Some(t),
    };
    let mut script = None;
    let mut text = format!("exec </dev/null\n{command}");
    if text.len() > INLINE_COMMAND_MAX {
        let path = format!("{run_dir}/cmd-{}.sh", &random_hex()[..16]);
        let up = upload(exec, &[(path.clone(), command.as_bytes().to_vec())]).await?;
        if let Some(error) = up.into_iter().find_map(|u| u.error) {
            return Err(SandboxError::Start(format!("cannot upload a long command to {path}: {error}")));
        }
        text = format!("exec </dev/null\n. {path}");
        script = Some(path);
    }
    let args = ["sh".to_owned(), "-c".to_owned(), text];
    let out = exec.run(&args, None, timeout, EXEC_RESULT_MAX).await;
    if let Some(path) = script {
        let _ = sh(exec, &format!("rm -f {path}"), None).await;
    }
    Ok(execute_response(&out?, timeout))
}

/// `sh -c SCRIPT` through `exec` (60 s at most): the exit code and stdout then stderr, as text.
pub async fn sh(exec: &dyn ArgvExec, script: &str, stdin: Option<&[u8]>) -> Result<(Option<i32>, String)> {
    let args = ["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    let out = exec.run(&args, stdin, Some(Duration::from_secs(60)), EXEC_RESULT_MAX).await?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code(), text))
}

/// Exit statuses of the wrappers, one per contract code (out of the range `cat` and `sh` use).
const EXIT_INVALID_PATH: i32 = 80;
const EXIT_FILE_NOT_FOUND: i32 = 81;
const EXIT_IS_DIRECTORY: i32 = 82;
const EXIT_PERMISSION_DENIED: i32 = 83;
/// Files in flight at once.
const CONCURRENT: usize = 4;

/// Walks the components before the last: a directory must be searchable, anything else existing
/// is ENOTDIR (`invalid_path`); `$MISSING` runs for the first missing one.
const WALK: &str = r#"rest=${p#/} q=
while :; do
  case $rest in */*) ;; *) break ;; esac
  q=$q/${rest%%/*}; rest=${rest#*/}
  if [ -d "$q" ]; then [ -x "$q" ] || fail 83
  elif [ -e "$q" ] || [ -L "$q" ]; then fail 80
  else missing; break
  fi
done
"#;

/// `sh -c DOWNLOAD sh PATH`: the file on stdout.
pub fn download_script() -> String {
    format!(
        r#"p=$1
fail() {{ exit "$1"; }}
missing() {{ fail 81; }}
{WALK}[ -d "$p" ] && fail 82
[ -e "$p" ] || fail 81
[ -r "$p" ] || fail 83
exec cat -- "$p""#
    )
}

/// `sh -c UPLOAD sh PATH` with the bytes on stdin: parents made, the file replaced. A refusal
/// still reads stdin to its end, so the stream that carries it completes.
pub fn upload_script() -> String {
    format!(
        r#"p=$1
fail() {{ cat >/dev/null; exit "$1"; }}
missing() {{ [ -w "${{q%/*}}/" ] || fail 83; mkdir -p -- "${{p%/*}}" || fail 1; }}
{WALK}[ -d "$p" ] && fail 82
if [ -e "$p" ]; then [ -w "$p" ] || fail 83; else [ -w "${{p%/*}}/" ] || fail 83; fi
exec cat > "$p""#
    )
}

fn args(script: &str, path: &str) -> Vec<String> {
    vec!["sh".to_owned(), "-c".to_owned(), script.to_owned(), "sh".to_owned(), path.to_owned()]
}

/// The contract's code for a wrapper's exit, or free text (its stderr) for other failures;
/// `None` on success.
pub fn transfer_error(status: ExitStatus, stderr: &[u8]) -> Option<String> {
    let code = match status {
        ExitStatus::Code(0) => return None,
        ExitStatus::Code(EXIT_INVALID_PATH) => TransferError::InvalidPath,
        ExitStatus::Code(EXIT_FILE_NOT_FOUND) => TransferError::FileNotFound,
        ExitStatus::Code(EXIT_IS_DIRECTORY) => TransferError::IsDirectory,
        ExitStatus::Code(EXIT_PERMISSION_DENIED) => TransferError::PermissionDenied,
        other => {
            let text = String::from_utf8_lossy(stderr).trim().chars().take(500).collect::<String>();
            let how = match other.code() {
                Some(code) => format!("exit status {code}"),
                None => "no exit status".to_owned(),
            };
            return Some(if text.is_empty() { how } else { format!("{text} ({how})") });
        }
    };
    Some(code.as_str().to_owned())
}

/// Writes each file through its own exec; one response per input, in order.
pub async fn upload(exec: &dyn ArgvExec, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
    let script = upload_script();
    // Collected first: a lazy `map` held across the await makes the future not `Send` for every lifetime.
    let uploads: Vec<_> = files.iter().map(|(path, bytes)| upload_one(exec, &script, path, bytes)).collect();
    futures_util::stream::iter(uploads)
        .buffered(CONCURRENT)
        .collect::<Vec<Result<_>>>()
        .await
        .into_iter()
        .collect()
}

async fn upload_one(
    exec: &dyn ArgvExec,
    script: &str,
    path: &str,
    bytes: &[u8],
) -> Result<FileUploadResponse> {
    let error = match TransferError::check_path(path) {
        Err(code) => Some(code.as_str().to_owned()),
        Ok(()) => {
            let ExecOutput { stderr, status, .. } =
                exec.run(&args(script, path), Some(bytes), None, EXEC_RESULT_MAX).await?;
            transfer_error(status, &stderr)
        }
    };
    Ok(FileUploadResponse { path: path.to_owned(), error })
}

/// Reads each file through its own exec; one response per input, in order.
pub async fn download(exec: &dyn ArgvExec, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
    let script = download_script();
    let downloads: Vec<_> = paths.iter().map(|path| download_one(exec, &script, path)).collect();
    futures_util::stream::iter(downloads)
        .buffered(CONCURRENT)
        .collect::<Vec<Result<_>>>()
        .await
        .into_iter()
        .collect()
}

async fn download_one(exec: &dyn ArgvExec, script: &str, path: &str) -> Result<FileDownloadResponse> {
    let failed =
        |error: String| FileDownloadResponse { path: path.to_owned(), content: None, error: Some(error) };
    if let Err(code) = TransferError::check_path(path) {
        return Ok(failed(code.as_str().to_owned()));
    }
    let ExecOutput { stdout, stderr, status, .. } =
        exec.run(&args(script, path), None, None, DOWNLOAD_FILES_MOST).await?;
    Ok(match transfer_error(status, &stderr) {
        None => FileDownloadResponse { path: path.to_owned(), content: Some(stdout), error: None },
        Some(error) => failed(error),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(stdout: &str, stderr: &str, status: ExitStatus, elapsed: u64) -> ExecOutput {
        ExecOutput {
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            status,
            elapsed: Duration::from_secs(elapsed),
        }
    }

    #[test]
    fn router_execs_read_as_the_contract_says() {
        let t = Some(Duration::from_secs(2));
        let plain = execute_response(&out("a", "b", ExitStatus::Code(3), 0), t);
        assert_eq!((plain.output.as_str(), plain.exit_code, plain.truncated), ("ab", Some(3), false));
        let killed_early = execute_response(&out("", "", ExitStatus::Signal(9), 1), t);
        assert_eq!(killed_early.exit_code, Some(137));
        let timed_out = execute_response(&out("partial", "", ExitStatus::Signal(9), 2), t);
        assert_eq!(timed_out.exit_code, Some(124));
        assert_eq!(timed_out.output, "partial\n[Command timed out after 2.0s; its process tree was killed]");
        let no_answer = execute_response(&out("", "", ExitStatus::NoAnswer, 40), t);
        assert_eq!(no_answer.exit_code, Some(124));
        let no_limit = execute_response(&out("", "", ExitStatus::Signal(15), 99), None);
        assert_eq!(no_limit.exit_code, Some(143));
    }

    #[test]
    fn wrapper_exits_map_to_the_contract_codes() {
        let code = |n| transfer_error(ExitStatus::Code(n), b"");
        assert_eq!(code(0), None);
        assert_eq!(code(80).as_deref(), Some("invalid_path"));
        assert_eq!(code(81).as_deref(), Some("file_not_found"));
        assert_eq!(code(82).as_deref(), Some("is_directory"));
        assert_eq!(code(83).as_deref(), Some("permission_denied"));
        assert_eq!(
            transfer_error(ExitStatus::Code(1), b"cat: write error: No space left\n").as_deref(),
            Some("cat: write error: No space left (exit status 1)")
        );
        assert_eq!(transfer_error(ExitStatus::Signal(9), b"").as_deref(), Some("exit status 137"));
    }

    /// The wrappers themselves, run by this machine's `sh` against a scratch tree: each case's exit
    /// status and what lands on disk.
    #[test]
    fn the_wrappers_classify_paths_as_the_contract_does() {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap().to_owned();
        std::fs::write(format!("{root}/file"), b"abc").unwrap();
        std::fs::create_dir(format!("{root}/dir")).unwrap();
        std::os::unix::fs::symlink(format!("{root}/nowhere"), format!("{root}/dangling")).unwrap();
        let run = |script: String, path: &str, input: &[u8]| {
            let mut child = Command::new("sh")
                .args(&args(&script, path)[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(input).unwrap();
            let out = child.wait_with_output().unwrap();
            (transfer_error(ExitStatus::Code(out.status.code().unwrap()), &out.stderr), out.stdout)
        };
        let down = |path: &str| run(download_script(), &format!("{root}{path}"), b"");
        assert_eq!(down("/file"), (None, b"abc".to_vec()));
        assert_eq!(down("/missing").0.as_deref(), Some("file_not_found"));
        assert_eq!(down("/dangling").0.as_deref(), Some("file_not_found"));
        assert_eq!(down("/a/b/c").0.as_deref(), Some("file_not_found"));
        assert_eq!(down("/dir").0.as_deref(), Some("is_directory"));
        assert_eq!(down("/file/x").0.as_deref(), Some("invalid_path"));
        let up = |path: &str, bytes: &[u8]| run(upload_script(), &format!("{root}{path}"), bytes).0;
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(up("/new/deep/f", &bytes), None);
        assert_eq!(std::fs::read(format!("{root}/new/deep/f")).unwrap(), bytes);
        assert_eq!(up("/file", b"x"), None);
        assert_eq!(std::fs::read(format!("{root}/file")).unwrap(), b"x");
        assert_eq!(up("/dir", b"x").as_deref(), Some("is_directory"));
        assert_eq!(up("/file/x", b"x").as_deref(), Some("invalid_path"));
        assert_eq!(up("/dangling/x", b"x").as_deref(), Some("invalid_path"));
        if !nix::unistd::geteuid().is_root() {
            std::fs::create_dir(format!("{root}/ro")).unwrap();
            std::fs::set_permissions(
                format!("{root}/ro"),
                std::os::unix::fs::PermissionsExt::from_mode(0o555),
            )
            .unwrap();
            assert_eq!(up("/ro/f", b"x").as_deref(), Some("permission_denied"));
            assert_eq!(up("/ro/sub/f", b"x").as_deref(), Some("permission_denied"));
            std::fs::write(format!("{root}/locked"), b"s").unwrap();
            std::fs::set_permissions(
                format!("{root}/locked"),
                std::os::unix::fs::PermissionsExt::from_mode(0o000),
            )
            .unwrap();
            assert_eq!(down("/locked").0.as_deref(), Some("permission_denied"));
        }
    }
}
