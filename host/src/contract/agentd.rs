//! [`AgentdSandbox`]: the contract over a websocket link to a running agentd, reconnecting when the
//! link dropped between calls, and healing it during an exec: over TCP an exec is kept for
//! [`HEAL_GRACE_SECS`], and when its link drops it is attached again over a new one from the last
//! byte delivered, so the caller gets the whole output and the true exit code. The exec is named
//! here (`exec.process`), so a drop before agentd said it started heals too: sent again under
//! its name, it is refused as existing if the first arrived, and attached to; it runs once. And [`OverAgentd`], how a sandbox that holds one (local, Docker, …)
//! gets the whole contract from it by writing only what differs.

use std::time::Duration;

use agentd_protocol::limits::DEFAULT_MAX_CAPTURE_BYTES;
use agentd_protocol::{
    ErrorCode, ExecRequest, ExecResult, ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse,
    FileUploadResponse, Offload,
};
use agentd_protocol::{FsRequest, FsResponse};
use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::Mutex;

use crate::contract::deadlines::Deadlines;
use crate::contract::error::{Result, SandboxError};
use crate::contract::link::{Link, OutputSink, Tracked};
use crate::contract::random::random_hex;
use crate::contract::{AgentdSource, BaseSandbox, OffloadRequest};

/// Largest file [`BaseSandbox::download_files`] takes into memory (the providers' channels keep
/// the same bound); a larger one is the per-file error `file_too_large`, said before any of it is
/// read. [`AgentdSandbox::download_to`] streams a file of any size to a writer instead. The
/// contract hands files over whole, in memory, so each has a bound, the same on every path (a part
/// of a provider's bulk download, a router exec's `cat`); a larger file streams with
/// `download::download_to_path`.
pub const DOWNLOAD_FILES_MOST: u64 = 256 << 20;

/// Seconds an exec over TCP runs on after its link dropped, for the link to come back and attach to
/// it again (the exec's `keep` grace). Past it agentd ends the command (its result says
/// `abandoned`) and the caller gets the link's error. Only links agentd outlives are healed
/// ([`Link::agentd_outlives`]: `ws://`, `wss://`, a bridge such as Kubernetes' exec stream): a Unix
/// socket link does not drop but with agentd itself, and an agentd served over one exec's stdio
/// (`docker-exec:`) lives only as long as that link; either way the command ends with agentd, so
/// those execs are not kept. agentd counts an exec kept this long on a budget of its own, apart
/// from the processes kept for longer, so one client's kept processes never make it fail.
pub const HEAL_GRACE_SECS: f64 = agentd_protocol::limits::MAX_HEALING_GRACE_SECS;

/// Longest pause between two attempts to reconnect while healing.
const HEAL_BACKOFF_MAX: Duration = Duration::from_secs(1);

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

/// A websocket URL, its bearer token and the link's deadlines.
struct UrlConnector {
    url: String,
    token: Option<String>,
    deadlines: Deadlines,
}

#[async_trait]
impl Connector for UrlConnector {
    async fn connect(&self) -> Result<Link> {
        Link::connect_within(&self.url, self.token.as_deref(), &[], self.deadlines).await
    }
}

impl AgentdSandbox {
    /// Connects to the agentd at `url` (`ws://host:port`), with [`Deadlines::from_env`].
    pub async fn connect(url: &str, token: Option<&str>) -> Result<Self> {
        Self::connect_within(url, token, Deadlines::from_env()?).await
    }

    /// [`AgentdSandbox::connect`] whose links (this one and any reconnection) wait within `deadlines`.
    pub async fn connect_within(url: &str, token: Option<&str>, deadlines: Deadlines) -> Result<Self> {
        let connector = UrlConnector { url: url.to_owned(), token: token.map(str::to_owned), deadlines };
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

    /// Runs a request with every option of the protocol (cwd, env, stdin, streaming, offload,
    /// keep). Over TCP an exec without `keep` and `offload` is kept for [`HEAL_GRACE_SECS`]; one
    /// that is kept (so, or by the caller) survives its link dropping: it is attached again over a
    /// new link, its output from the last byte delivered to `on_output`, its whole result returned.
    /// A kept exec without a `process` name gets one where agentd takes names, so a drop before
    /// `exec_started` heals as well (see the module doc).
    pub async fn exec(
        &self,
        mut request: ExecRequest,
        mut on_output: Option<OutputSink<'_>>,
    ) -> Result<ExecResult> {
        let link = self.link().await?;
        // Kept only to heal: once its result is in hand, agentd need not retain it.
        let release = request.keep.is_none();
        if release {
            if request.offload.is_some() || !link.agentd_outlives() {
                return link.exec(request, on_output).await;
            }
            request.keep = Some(HEAL_GRACE_SECS);
        }
        let grace = request.keep.filter(|g| *g > 0.0).map_or(HEAL_GRACE_SECS, |g| g.min(HEAL_GRACE_SECS));
        let timeout = request.timeout;
        // Named here where agentd takes names, so that a drop before `exec_started` (which names
        // the process) heals too: the request goes again under its name, and if it had arrived
        // the first time, agentd refuses it as existing and it is attached to. It runs once.
        if request.process.is_none() && link.hello().named_processes {
            request.process = random_hex().get(..32).map(|hex| format!("h{hex}"));
        }
        let give_up = tokio::time::Instant::now() + Duration::from_secs_f64(grace);
        let mut pause = Duration::from_millis(20);
        let mut link = link;
        let mut sent_again = false;
        let (process, delivered) = loop {
            let mut tracked = Tracked::default();
            let err = match link.exec_tracked(request.clone(), reborrow(&mut on_output), &mut tracked).await {
                Ok(result) => {
                    if release {
                        link.release(&result.process);
                    }
                    return Ok(result);
                }
                Err(err) => err,
            };
            match (tracked.process, &request.process) {
                (Some(process), _) if link.is_closed() => break (process, tracked.delivered),
                // Started by the first request: this one started nothing.
                (None, Some(name))
                    if sent_again
                        && matches!(err, SandboxError::Refused { code: ErrorCode::ProcessExists, .. }) =>
                {
                    break (name.clone(), 0);
                }
                (None, Some(_))
                    if is_link_failure(&err) && link.is_closed() && tokio::time::Instant::now() < give_up =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(HEAL_BACKOFF_MAX);
                    sent_again = true;
                    link = match self.link().await {
                        Ok(link) => link,
                        Err(err) if is_link_failure(&err) && tokio::time::Instant::now() < give_up => {
                            continue;
                        }
                        Err(err) => return Err(err),
                    };
                }
                _ => return Err(err),
            }
        };
        let healed = self.heal(&process, delivered, on_output, timeout, grace).await;
        if let (true, Ok(_)) = (release, &healed)
            && let Ok(link) = self.link().await
        {
            link.release(&process);
        }
        healed
    }

    /// Attaches again to the kept `process` whose link dropped, over new links until one holds or
    /// `grace` seconds passed: its output from byte `delivered` to `on_output`, then its result.
    async fn heal(
        &self,
        process: &str,
        mut delivered: u64,
        mut on_output: Option<OutputSink<'_>>,
        timeout: Option<f64>,
        grace: f64,
    ) -> Result<ExecResult> {
        let give_up = tokio::time::Instant::now() + Duration::from_secs_f64(grace);
        let mut pause = Duration::from_millis(20);
        loop {
            let attempt = match self.link().await {
                Ok(link) => {
                    let streamed = match reborrow(&mut on_output) {
                        Some(sink) => {
                            let from = delivered;
                            let mut got = 0u64;
                            let mut counted = |data: &[u8]| {
                                got += data.len() as u64;
                                sink(data);
                            };
                            let attached = link.attach(process, from, Some(&mut counted), timeout).await;
                            delivered += got;
                            attached.map(drop)
                        }
                        None => Ok(()),
                    };
                    // The whole result, its output read back from the journal.
                    match streamed {
                        Ok(()) => link.attach(process, 0, None, timeout).await,
                        Err(err) => Err(err),
                    }
                }
                Err(err) => Err(err),
            };
            match attempt {
                Ok(result) => return Ok(result),
                Err(err) if is_link_failure(&err) && tokio::time::Instant::now() < give_up => {
                    tracing::debug!(process, "the link dropped again while healing: {err}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(HEAL_BACKOFF_MAX);
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Streams the file at `path` into `sink` (a file, a socket: any size, in bounded memory),
    /// checking its size and sha256. `Ok(Err(error))` is the contract's per-file error.
    pub async fn download_to(
        &self,
        path: &str,
        sink: impl tokio::io::AsyncWrite + Unpin,
    ) -> Result<Result<crate::contract::link::Downloaded, String>> {
        self.link().await?.download(path, sink, |_, _| {}).await
    }

    /// The workspace agentd runs in (default cwd of commands).
    pub async fn workspace(&self) -> Result<String> {
        Ok(self.link().await?.hello().workspace.clone())
    }
}

/// The sink again, for one more call.
fn reborrow<'s>(sink: &'s mut Option<OutputSink<'_>>) -> Option<OutputSink<'s>> {
    match sink {
        Some(sink) => Some(&mut **sink),
        None => None,
    }
}

/// The link is what failed (not the request): another link may do.
pub(crate) fn is_link_failure(err: &SandboxError) -> bool {
    matches!(err, SandboxError::LinkClosed | SandboxError::Connect { .. } | SandboxError::Io(_))
}

/// Seconds for the wire: `None` leaves agentd's default, zero is "no limit".
fn wire_timeout(timeout: Option<Duration>) -> Option<f64> {
    timeout.map(|t| t.as_secs_f64())
}

/// The note a timed-out command's output ends with (its exit code reads 124).
pub fn timeout_note(secs: f64) -> String {
    format!("[Command timed out after {secs:.1}s; its process tree was killed]")
}

/// The contract's view of a native result. A timeout reads as exit code 124 with a note, the
/// convention of `timeout(1)` that models and harnesses already know; output that agentd could not
/// store whole ends with [`ExecResult::capture_note`] (and `truncated` is set).
pub fn execute_response(result: &ExecResult) -> Result<ExecuteResponse> {
    let bytes = result.output_bytes().map_err(|e| SandboxError::Protocol(e.to_string()))?;
    let mut output = String::from_utf8_lossy(&bytes).into_owned();
    let mut exit_code = result.exit_code;
    let mut note = |text: &str| {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(text);
    };
    if let Some(lost) = result.capture_note() {
        note(&lost);
    }
    if result.ending.timed_out {
        note(&timeout_note(result.duration));
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
                Ok(match link.download_at_most(path, DOWNLOAD_FILES_MOST, &mut content, |_, _| {}).await? {
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

    async fn execute_with_offload(&self, request: &OffloadRequest) -> Result<ExecuteOffloadResult> {
        let OffloadRequest { command, capture_path, inline_budget, max_capture_bytes, timeout } = request;
        let request = ExecRequest {
            command: command.clone(),
            timeout: wire_timeout(*timeout),
            max_capture_bytes: Some(max_capture_bytes.unwrap_or(DEFAULT_MAX_CAPTURE_BYTES)),
            offload: Some(Offload { capture_path: capture_path.clone(), inline_budget: *inline_budget }),
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

    /// [`BaseSandbox::agentd_source`]; default: none (the link is all there is).
    fn source(&self) -> Option<AgentdSource> {
        None
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

    fn agentd_source(&self) -> Option<AgentdSource> {
        self.source()
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

    async fn execute_with_offload(&self, request: &OffloadRequest) -> Result<ExecuteOffloadResult> {
        self.linked().execute_with_offload(request).await
    }
}
