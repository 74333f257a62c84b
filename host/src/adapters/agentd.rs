//! [`AgentdSandbox`]: the contract over a websocket link to a running agentd, reconnecting when the
//! link dropped between calls; and [`OverAgentd`], how a sandbox that holds one (local, Docker, …)
//! gets the whole contract from it by writing only what differs.

use std::time::Duration;

use agentd_protocol::limits::DEFAULT_MAX_CAPTURE_BYTES;
use agentd_protocol::{
    ExecRequest, ExecResult, ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse,
    Offload,
};
use agentd_protocol::{FsRequest, FsResponse};
use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::Mutex;

use crate::error::{Result, SandboxError};
use crate::link::{Link, OutputSink};
use crate::sandbox::BaseSandbox;

/// A sandbox reached through agentd's websocket.
pub struct AgentdSandbox {
    connector: Box<dyn Connector>,
    id: String,
    link: Mutex<Arc<Link>>,
}

/// How to open (and reopen) the link to one agentd.
#[async_trait]
pub trait Connector: Send + Sync {
    async fn connect(&self) -> Result<Link>;
}

/// A websocket URL and its bearer token.
struct UrlConnector {
    url: String,
    token: Option<String>,
}

#[async_trait]
impl Connector for UrlConnector {
    async fn connect(&self) -> Result<Link> {
        Link::connect(&self.url, self.token.as_deref()).await
    }
}

impl AgentdSandbox {
    /// Connects to the agentd at `url` (`ws://host:port`).
    pub async fn connect(url: &str, token: Option<&str>) -> Result<Self> {
        let connector = UrlConnector { url: url.to_owned(), token: token.map(str::to_owned) };
        let link = connector.connect().await?;
        let id = format!("agentd:{}#{}", url, link.hello().pid);
        Ok(Self::from_parts(Box::new(connector), link, id))
    }

    /// A sandbox whose link `connector` opens (and reopens when it dropped), named `id`.
    pub async fn with_connector(connector: Box<dyn Connector>, id: String) -> Result<Self> {
        let link = connector.connect().await?;
        Ok(Self::from_parts(connector, link, id))
    }

    fn from_parts(connector: Box<dyn Connector>, link: Link, id: String) -> Self {
        Self { connector, id, link: Mutex::new(Arc::new(link)) }
    }

    /// The current link, reconnected first if the previous one closed.
    pub async fn link(&self) -> Result<Arc<Link>> {
        let mut link = self.link.lock().await;
        if link.is_closed() {
            *link = Arc::new(self.connector.connect().await?);
        }
        Ok(Arc::clone(&link))
    }

    /// Runs a request with every option of the protocol (cwd, env, stdin, streaming, offload).
    pub async fn exec(&self, request: ExecRequest, on_output: Option<OutputSink<'_>>) -> Result<ExecResult> {
        self.link().await?.exec(request, on_output).await
    }

    /// The workspace agentd runs in (default cwd of commands).
    pub async fn workspace(&self) -> Result<String> {
        Ok(self.link().await?.hello().workspace.clone())
    }
}

/// Seconds for the wire: `None` leaves agentd's default, zero is "no limit".
fn wire_timeout(timeout: Option<Duration>) -> Option<f64> {
    timeout.map(|t| t.as_secs_f64())
}

/// The contract's view of a native result. A timeout reads as exit code 124 with a note, the
/// convention of `timeout(1)` that models and harnesses already know.
pub fn execute_response(result: &ExecResult) -> Result<ExecuteResponse> {
    let bytes = result.output_bytes().map_err(|e| SandboxError::Protocol(e.to_string()))?;
    let mut output = String::from_utf8_lossy(&bytes).into_owned();
    let mut exit_code = result.exit_code;
    if result.timed_out {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&format!(
            "[Command timed out after {:.1}s; its process tree was killed]",
            result.duration
        ));
        exit_code = 124;
    }
    Ok(ExecuteResponse { output, exit_code: Some(exit_code), truncated: result.truncated })
}

#[async_trait]
impl BaseSandbox for AgentdSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    async fn execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        let request = ExecRequest {
            command: command.to_owned(),
            timeout: wire_timeout(timeout),
            ..ExecRequest::default()
        };
        execute_response(&self.exec(request, None).await?)
    }

    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        let link = self.link().await?;
        let uploads = files.iter().map(|(path, bytes)| {
            let link = Arc::clone(&link);
            async move {
                let error = link.upload(path, bytes.as_slice(), |_| {}).await?;
                Ok(FileUploadResponse { path: path.clone(), error })
            }
        });
        futures_util::future::join_all(uploads).await.into_iter().collect()
    }

    async fn download_files(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        let link = self.link().await?;
        let downloads = paths.iter().map(|path| {
            let link = Arc::clone(&link);
            async move {
                let mut content = Vec::new();
                Ok(match link.download(path, &mut content, |_, _| {}).await? {
                    Ok(_) => FileDownloadResponse { path: path.clone(), content: Some(content), error: None },
                    Err(error) => {
                        FileDownloadResponse { path: path.clone(), content: None, error: Some(error) }
                    }
                })
            }
        });
        futures_util::future::join_all(downloads).await.into_iter().collect()
    }

    async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        self.link().await?.fs(request).await
    }

    fn agentd(&self) -> Option<&AgentdSandbox> {
        Some(self)
    }

    async fn execute_with_offload(
        &self,
        command: &str,
        capture_path: &str,
        inline_budget: u64,
        max_capture_bytes: Option<u64>,
        timeout: Option<Duration>,
    ) -> Result<ExecuteOffloadResult> {
        let request = ExecRequest {
            command: command.to_owned(),
            timeout: wire_timeout(timeout),
            max_capture_bytes: Some(max_capture_bytes.unwrap_or(DEFAULT_MAX_CAPTURE_BYTES)),
            offload: Some(Offload { capture_path: capture_path.to_owned(), inline_budget }),
            ..ExecRequest::default()
        };
        let result = self.exec(request, None).await?;
        Ok(ExecuteOffloadResult {
            offloaded: result.offloaded,
            preview_has_truncation_marker: result.offloaded && result.omitted_lines > 0,
            response: execute_response(&result)?,
        })
    }
}

/// A sandbox reached through an [`AgentdSandbox`] it holds. Implementing this is all a wrapper does
/// to be a [`BaseSandbox`]: `execute`, the verbs and the offload go over the link, and the members
/// below default to the link's too, so a wrapper overrides only what is its own (its id, a
/// transfers channel of its provider). Cleanup stays the wrapper's (`Drop`, `close`).
///
/// The names differ from [`BaseSandbox`]'s so that both traits can be in scope at once.
#[async_trait]
pub trait OverAgentd: Send + Sync {
    /// The link-based sandbox inside.
    fn linked(&self) -> &AgentdSandbox;

    /// [`BaseSandbox::id`]; default: the link's.
    fn sandbox_id(&self) -> &str {
        self.linked().id()
    }

    /// [`BaseSandbox::agentd_command`]; default: the link's.
    fn agentd_path(&self) -> &str {
        self.linked().agentd_command()
    }

    /// [`BaseSandbox::upload_files`]; default: streamed over the link.
    async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        self.linked().upload_files(files).await
    }

    /// [`BaseSandbox::download_files`]; default: streamed over the link.
    async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        self.linked().download_files(paths).await
    }
}

#[async_trait]
impl<T: OverAgentd> BaseSandbox for T {
    fn id(&self) -> &str {
        self.sandbox_id()
    }

    fn agentd_command(&self) -> &str {
        self.agentd_path()
    }

    fn agentd(&self) -> Option<&AgentdSandbox> {
        Some(self.linked())
    }

    async fn execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        self.linked().execute(command, timeout).await
    }

    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        self.upload(files).await
    }

    async fn download_files(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        self.download(paths).await
    }

    async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        self.linked().fs(request).await
    }

    async fn execute_with_offload(
        &self,
        command: &str,
        capture_path: &str,
        inline_budget: u64,
        max_capture_bytes: Option<u64>,
        timeout: Option<Duration>,
    ) -> Result<ExecuteOffloadResult> {
        self.linked()
            .execute_with_offload(command, capture_path, inline_budget, max_capture_bytes, timeout)
            .await
    }
}
