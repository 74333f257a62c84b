//! The core: the `BaseSandbox` contract (that of the Python package deepagents' `BaseSandbox`,
//! 0.7.32) and everything it names, with no adapter in it. Four required members, the seven file
//! verbs and `execute_with_offload` ([`OffloadRequest`]). Result types come from the protocol crate.
//!
//! The verbs and the offload have default implementations that need only the four required members
//! ([`derived`]: `agentd fs` / `agentd exec` run through `execute`), so any sandbox with an exec
//! channel gets them; `AgentdSandbox` overrides [`BaseSandbox::fs`] and `execute_with_offload` with
//! native requests. The seven verb methods all go through `fs`, so the two paths share one parser.
//!
//! The trait lives here, above its parts, because its defaults and its parts name each other (the
//! defaults call [`derived`] and [`download`], which take any `BaseSandbox`; [`agentd`] implements it
//! and is what [`BaseSandbox::agentd`] hands out). Its parts, lowest first:
//! - [`escape`]: text from a sandbox or a provider escaped before a person sees it.
//! - [`error`]: [`SandboxError`], the transport failures; model-facing failures are values.
//! - [`untrusted`]: ids from a provider or a person checked for their shape before use.
//! - [`random`]: unguessable names and tokens.
//! - [`deadlines`]: how long the host waits on a sandbox ([`deadlines::Deadlines`]); every wait ends.
//! - [`link`]: the websocket client ([`link::Link`]): handshake, many requests in flight, streamed
//!   transfers; nothing agentd says is trusted (sizes, ids, shapes are checked).
//! - [`derived`]: the file verbs and the offload over any `execute`.
//! - [`download`]: a sandbox's file saved to a local path, nameless until whole.
//! - [`agentd`]: [`AgentdSandbox`], any running agentd over the link, and
//!   [`OverAgentd`](agentd::OverAgentd), the delegation every wrapper of a link uses.
//! - [`process`]: [`Process`](process::Process), a kept process followed across link drops.
//! - [`provider`]: the [`Provider`](provider::Provider) interface and its plain types (a
//!   [`Kind`](provider::Kind), a [`SandboxInfo`](provider::SandboxInfo)); the table of kinds is
//!   the crate's `provider` module, above the adapters.

pub mod agentd;
pub mod deadlines;
pub mod derived;
pub mod download;
pub mod error;
pub mod escape;
pub mod link;
pub mod process;
pub mod provider;
pub mod random;
pub mod untrusted;

use std::time::Duration;

use agentd_protocol::fs::{
    DeleteResult, EditResult, FsRequest, FsResponse, GlobResult, GrepResult, LsResult, ReadResult,
    WriteResult,
};
use agentd_protocol::{ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;
use tokio::io::AsyncWrite;

use agentd::AgentdSandbox;
use error::{Result, SandboxError};
use link::Downloaded;

/// Outer limit of `grep`, as the reference's async twin.
pub const GREP_TIMEOUT: Duration = Duration::from_secs(35);
/// Outer limit of `glob`, as the reference's async twin.
pub const GLOB_TIMEOUT: Duration = Duration::from_secs(30);

/// What `execute_with_offload` runs and how (contract §4): `command`, its output above
/// `inline_budget` bytes kept in the file at `capture_path` and answered with a preview; the
/// capture stops at `max_capture_bytes` (`None`: 10 MiB); `timeout` as `execute`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadRequest {
    pub command: String,
    pub capture_path: String,
    pub inline_budget: u64,
    pub max_capture_bytes: Option<u64>,
    pub timeout: Option<Duration>,
}

impl OffloadRequest {
    /// `command` with its capture at `capture_path` past `inline_budget` bytes; the default cap
    /// and timeout.
    pub fn new(command: impl Into<String>, capture_path: impl Into<String>, inline_budget: u64) -> Self {
        Self {
            command: command.into(),
            capture_path: capture_path.into(),
            inline_budget,
            max_capture_bytes: None,
            timeout: None,
        }
    }

    /// The capture stops at `bytes`.
    pub fn max_capture_bytes(self, bytes: u64) -> Self {
        Self { max_capture_bytes: Some(bytes), ..self }
    }

    /// Gives up after `timeout` (`Duration::ZERO`: no limit).
    pub fn timeout(self, timeout: Duration) -> Self {
        Self { timeout: Some(timeout), ..self }
    }
}

/// How agentd got into a sandbox a provider made or attached to
/// ([`BaseSandbox::agentd_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentdSource {
    /// The image had it (Docker: its entrypoint is agentd; Daytona, Modal: `agentd` on `PATH`).
    Baked,
    /// The static binary (`adapters::inject::static_agentd`) was copied in.
    Injected,
}

impl AgentdSource {
    /// `baked` or `injected`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Baked => "baked",
            Self::Injected => "injected",
        }
    }
}

impl std::fmt::Display for AgentdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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

    /// Streams the file at `remote` into `sink` ([`download_to_path`](crate::contract::download::download_to_path)
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
        crate::contract::download::download_into(self, remote, sink, progress).await
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

    /// Runs `request.command` keeping output above `inline_budget` bytes in the file at
    /// `capture_path` and answering with a preview (contract §4; [`OffloadRequest`]). Default:
    /// `agentd exec` through `execute`, with a random sentinel.
    async fn execute_with_offload(&self, request: &OffloadRequest) -> Result<ExecuteOffloadResult> {
        derived::execute_with_offload(self, request).await
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
