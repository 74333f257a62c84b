//! Files through the router's exec (provider facts §A3 steps 8–9): bytes travel on the exec's stdin
//! (upload) or stdout (download) and are never interpreted. A small `sh` wrapper checks the path
//! first and says what is wrong through its exit status, which maps to the contract's per-file codes.

use agentd_protocol::{FileDownloadResponse, FileUploadResponse, TransferError};
use futures_util::StreamExt as _;

use super::router::{ExecOutput, ExitStatus, Router};
use crate::adapters::capped::{EXEC_RESULT_MAX, FILE_MAX};
use crate::error::Result;

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
pub async fn upload(router: &Router, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
    let script = upload_script();
    // Collected first: a lazy `map` held across the await makes the future not `Send` for every lifetime.
    let uploads: Vec<_> =
        files.iter().map(|(path, bytes)| upload_one(router, &script, path, bytes)).collect();
    futures_util::stream::iter(uploads)
        .buffered(CONCURRENT)
        .collect::<Vec<Result<_>>>()
        .await
        .into_iter()
        .collect()
}

async fn upload_one(router: &Router, script: &str, path: &str, bytes: &[u8]) -> Result<FileUploadResponse> {
    let error = match TransferError::check_path(path) {
        Err(code) => Some(code.as_str().to_owned()),
        Ok(()) => {
            let ExecOutput { stderr, status, .. } =
                router.exec(&args(script, path), Some(bytes), None, EXEC_RESULT_MAX).await?;
            transfer_error(status, &stderr)
        }
    };
    Ok(FileUploadResponse { path: path.to_owned(), error })
}

/// Reads each file through its own exec; one response per input, in order.
pub async fn download(router: &Router, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
    let script = download_script();
    let downloads: Vec<_> = paths.iter().map(|path| download_one(router, &script, path)).collect();
    futures_util::stream::iter(downloads)
        .buffered(CONCURRENT)
        .collect::<Vec<Result<_>>>()
        .await
        .into_iter()
        .collect()
}

async fn download_one(router: &Router, script: &str, path: &str) -> Result<FileDownloadResponse> {
    let failed =
        |error: String| FileDownloadResponse { path: path.to_owned(), content: None, error: Some(error) };
    if let Err(code) = TransferError::check_path(path) {
        return Ok(failed(code.as_str().to_owned()));
    }
    let ExecOutput { stdout, stderr, status, .. } =
        router.exec(&args(script, path), None, None, FILE_MAX).await?;
    Ok(match transfer_error(status, &stderr) {
        None => FileDownloadResponse { path: path.to_owned(), content: Some(stdout), error: None },
        Some(error) => failed(error),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
