//! The `BaseSandbox` contract (that of the Python package deepagents' `BaseSandbox`, 0.7.32): four
//! required members, the seven file verbs and `execute_with_offload`. Result types come from the
//! protocol crate.
//!
//! The verbs and the offload have default implementations that need only the four required members
//! ([`crate::derived`]: `agentd fs` / `agentd exec` run through `execute`), so any sandbox with an exec
//! channel gets them; `AgentdSandbox` overrides [`BaseSandbox::fs`] and `execute_with_offload` with
//! native requests. The seven verb methods all go through `fs`, so the two paths share one parser.

use std::time::Duration;

use agentd_protocol::fs::{
    DeleteResult, EditResult, FsRequest, FsResponse, GlobResult, GrepResult, LsResult, ReadResult,
    WriteResult,
};
use agentd_protocol::{ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;
use tokio::io::AsyncWrite;

use crate::adapters::agentd::AgentdSandbox;
use crate::adapters::inject::AgentdSource;
use crate::derived;
use crate::error::{Result, SandboxError};
use crate::link::Downloaded;

/// Outer limit of `grep`, as the reference's async twin.
pub const GREP_TIMEOUT: Duration = Duration::from_secs(35);
/// Outer limit of `glob`, as the reference's async twin.
pub const GLOB_TIMEOUT: Duration = Duration::from_secs(30);

/// A place where commands run and files live. Failures the model should see are values inside the
/// results; `Err` is reserved for a sandbox that cannot be reached.
#[async_trait]
pub trait BaseSandbox: Send + Sync {
    /// A stable identifier, unique per sandbox instance.
    fn id(&self) -> &str;

    /// Runs POSIX `sh` text; stdout and stderr merged. `timeout`: `None` is the backend's default,
    /// `Some(Duration::ZERO)` no limit.
    async fn execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse>;

    /// Writes each file (parents created, existing files replaced); one response per input, in order.
    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>>;

    /// Reads each file; one response per input, in order.
    async fn download_files(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>>;

    /// Streams the file at `remote` into `sink` ([`download_to_path`](crate::download::download_to_path)
    /// gives it a file with no name until it is whole), saying (bytes so far, size or 0) to
    /// `progress`. `Ok(Err(error))` is the contract's per-file error. Default: over the agentd link
    /// when there is one (any size, bounded memory), else [`BaseSandbox::download_files`] (whole, in
    /// memory, with its bound).
    async fn download_into(
        &self,
        remote: &str,
        sink: &mut (dyn AsyncWrite + Unpin + Send),
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<std::result::Result<Downloaded, String>> {
        crate::download::download_into(self, remote, sink, progress).await
    }

    /// The agentd link inside, when this sandbox has one: for the protocol's native extras (live
    /// output, cwd/env/stdin, streamed transfers with progress, the hello) that the contract lacks.
    /// `None` (the default): the contract is all there is.
    fn agentd(&self) -> Option<&AgentdSandbox> {
        None
    }

    /// How the sandbox's shell finds agentd, for the derived path (a name on `$PATH` by default).
    fn agentd_command(&self) -> &str {
        "agentd"
    }

    /// How agentd got into a sandbox a provider made or attached to: baked into its image or
    /// injected. `None` (the default): not a provider's sandbox (a link, the local agentd), or one
    /// without agentd (only `execute` works, through the provider's exec).
    fn agentd_source(&self) -> Option<AgentdSource> {
        None
    }

    /// Runs `command` keeping output above `inline_budget` bytes in the file at `capture_path` and
    /// answering with a preview (contract §4). The capture stops at `max_capture_bytes` (default
    /// 10 MiB). Default: `agentd exec` through `execute`, with a random sentinel.
    async fn execute_with_offload(
        &self,
        command: &str,
        capture_path: &str,
        inline_budget: u64,
        max_capture_bytes: Option<u64>,
        timeout: Option<Duration>,
    ) -> Result<ExecuteOffloadResult> {
        derived::execute_with_offload(self, command, capture_path, inline_budget, max_capture_bytes, timeout)
            .await
    }

    /// Runs one file verb. Default: `agentd fs request` through `execute`.
    async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        Ok(derived::fs(self, request).await)
    }

    /// Lists one directory level.
    async fn ls(&self, path: &str) -> Result<LsResult> {
        match self.fs(FsRequest::Ls { path: path.to_owned() }).await? {
            FsResponse::Ls(result) => Ok(result),
            other => Err(mismatch("ls", &other)),
        }
    }

    /// Reads `limit` lines from line `offset` (0-based).
    async fn read(&self, path: &str, offset: i64, limit: i64) -> Result<ReadResult> {
        match self.fs(FsRequest::Read { path: path.to_owned(), offset, limit }).await? {
            FsResponse::Read(result) => Ok(result),
            other => Err(mismatch("read", &other)),
        }
    }

    /// Creates or overwrites a file.
    async fn write(&self, path: &str, content: &str) -> Result<WriteResult> {
        match self.fs(FsRequest::Write { path: path.to_owned(), content: content.to_owned() }).await? {
            FsResponse::Write(result) => Ok(result),
            other => Err(mismatch("write", &other)),
        }
    }

    /// Replaces `old` by `new`.
    async fn edit(&self, path: &str, old: &str, new: &str, replace_all: bool) -> Result<EditResult> {
        let request =
            FsRequest::Edit { path: path.to_owned(), old: old.to_owned(), new: new.to_owned(), replace_all };
        match self.fs(request).await? {
            FsResponse::Edit(result) => Ok(result),
            other => Err(mismatch("edit", &other)),
        }
    }

    /// Files matching `pattern` under `path` (default `/`), given up after [`GLOB_TIMEOUT`].
    async fn glob(&self, pattern: &str, path: Option<&str>) -> Result<GlobResult> {
        let request = FsRequest::Glob { pattern: pattern.to_owned(), path: path.map(str::to_owned) };
        match tokio::time::timeout(GLOB_TIMEOUT, self.fs(request)).await {
            Err(_) => Ok(GlobResult {
                error: Some(
                    "Error: glob timed out after 30s. Try a more specific pattern or a narrower path."
                        .to_owned(),
                ),
                ..GlobResult::default()
            }),
            Ok(response) => match response? {
                FsResponse::Glob(result) => Ok(result),
                other => Err(mismatch("glob", &other)),
            },
        }
    }

    /// Lines containing the literal `pattern`, given up after [`GREP_TIMEOUT`].
    async fn grep(
        &self,
        pattern: &str,
        path: Option<&str>,
        glob: Option<&str>,
        max_count: Option<i64>,
    ) -> Result<GrepResult> {
        let request = FsRequest::Grep {
            pattern: pattern.to_owned(),
            path: path.map(str::to_owned),
            glob: glob.map(str::to_owned),
            max_count,
        };
        match tokio::time::timeout(GREP_TIMEOUT, self.fs(request)).await {
            Err(_) => Ok(GrepResult {
                error: Some(
                    "Error: grep timed out after 35s. Try a more specific pattern or a narrower path."
                        .to_owned(),
                ),
                ..GrepResult::default()
            }),
            Ok(response) => match response? {
                FsResponse::Grep(result) => Ok(result),
                other => Err(mismatch("grep", &other)),
            },
        }
    }

    /// Removes a file, link or directory tree.
    async fn delete(&self, path: &str) -> Result<DeleteResult> {
        match self.fs(FsRequest::Delete { path: path.to_owned() }).await? {
            FsResponse::Delete(result) => Ok(result),
            other => Err(mismatch("delete", &other)),
        }
    }
}

fn mismatch(verb: &str, got: &FsResponse) -> SandboxError {
    SandboxError::Protocol(format!("a `{verb}` request was answered with {got:?}"))
}
