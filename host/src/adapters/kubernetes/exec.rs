//! The `pods/exec` subresource (a websocket, `v5.channel.k8s.io` with the `v4` fallback, as kube
//! negotiates it): one argv with its stdio ([`PodExec`], the provider's exec channel), and the link
//! to agentd through `agentd bridge` ([`BridgeConnector`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, AttachedProcess};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};

use crate::adapters::argv::{ArgvExec, ExecOutput, ExitStatus};
use crate::contract::agentd::Connector;
use crate::contract::error::{Result, SandboxError};
use crate::contract::link::Link;

use super::PROVIDER;

/// Bytes each direction of an exec stream buffers (kube's default is 1 KiB: too small for files).
const STREAM_BUFFER: usize = 256 * 1024;
/// The most of a bridge's stderr kept for an error message.
const STDERR_KEPT: usize = 4096;

/// Exec into one container of one Pod.
#[derive(Clone)]
pub struct PodExec {
    pub(super) pods: kube::Api<Pod>,
    pub(super) pod: String,
    pub(super) container: Option<String>,
}

impl PodExec {
    fn params(&self, stdin: bool) -> AttachParams {
        let params = AttachParams::default()
            .stdin(stdin)
            .stdout(true)
            .stderr(true)
            .max_stdin_buf_size(STREAM_BUFFER)
            .max_stdout_buf_size(STREAM_BUFFER)
            .max_stderr_buf_size(STREAM_BUFFER);
        match &self.container {
            Some(container) => params.container(container.clone()),
            None => params,
        }
    }

    /// Starts `args` with its stdio attached.
    pub async fn start(&self, args: &[String], stdin: bool) -> Result<AttachedProcess> {
        self.pods
            .exec(&self.pod, args.to_vec(), &self.params(stdin))
            .await
            .map_err(|e| kube_error(e, &self.pod))
    }
}

/// How an exec ended, from the status the error channel carried (`None`: the stream ended without
/// one, so the exit is unknown).
fn exit_status(status: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>) -> ExitStatus {
    let Some(status) = status else { return ExitStatus::NoAnswer };
    if status.status.as_deref() == Some("Success") {
        return ExitStatus::Code(0);
    }
    let code = status
        .details
        .and_then(|d| d.causes)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message?.parse().ok());
    ExitStatus::Code(code.unwrap_or(1))
}

/// Something that completes once the exec's stream is over.
type Over = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An exec's output that ends (EOF) once the stream is over and nothing is left in it. kube closes
/// an output pipe only when the status came: when the stream breaks instead (the API server went
/// away), the pipe stays open and its reader would wait forever.
struct Ending<R> {
    inner: R,
    over: Option<Over>,
}

impl<R> Ending<R> {
    fn new(inner: R, over: Over) -> Self {
        Self { inner, over: Some(over) }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Ending<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            // Nothing buffered (the pipe says pending only then): over means the end.
            Poll::Pending => {
                let ended = match this.over.as_mut() {
                    None => true,
                    Some(over) => over.as_mut().poll(cx).is_ready(),
                };
                if ended {
                    this.over = None;
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                }
            }
            ready => ready,
        }
    }
}

/// A future that completes when `over` is set.
fn over_when(mut over: tokio::sync::watch::Receiver<bool>) -> Over {
    Box::pin(async move {
        let _ = over.wait_for(|done| *done).await;
    })
}

/// Reads `from` to its end, keeping at most `cap` bytes (the rest is read and dropped, so the
/// stream is never held up).
async fn read_capped(mut from: impl AsyncRead + Unpin, cap: u64) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = usize::try_from(cap).unwrap_or(usize::MAX).saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    kept
}

#[async_trait]
impl ArgvExec for PodExec {
    async fn run(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
        timeout: Option<Duration>,
        cap: u64,
    ) -> Result<ExecOutput> {
        let started = Instant::now();
        let mut process = self.start(args, true).await?;
        let (Some(mut input), Some(stdout), Some(stderr), Some(status)) =
            (process.stdin(), process.stdout(), process.stderr(), process.take_status())
        else {
            return Err(SandboxError::Protocol("an exec stream without its stdio".to_owned()));
        };
        // The status resolves when the stream ends, with or without one: the outputs end with it.
        let (ended, over) = tokio::sync::watch::channel(false);
        let status = tokio::spawn(async move {
            let status = status.await;
            let _ = ended.send(true);
            status
        });
        let stdout = Ending::new(stdout, over_when(over.clone()));
        let stderr = Ending::new(stderr, over_when(over));
        let bytes = stdin.unwrap_or_default().to_vec();
        // Dropping the writer after the bytes half-closes stdin (v5's close signal): the command
        // sees its end.
        let feed = async move {
            let _ = input.write_all(&bytes).await;
            let _ = input.shutdown().await;
        };
        let run = async {
            let ((), out, err, status) =
                tokio::join!(feed, read_capped(stdout, cap), read_capped(stderr, cap), status);
            (out, err, exit_status(status.ok().flatten()))
        };
        let (stdout, stderr, status) = match timeout {
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(done) => done,
                Err(_) => (Vec::new(), Vec::new(), ExitStatus::NoAnswer),
            },
            None => run.await,
        };
        Ok(ExecOutput { stdout, stderr, status, elapsed: started.elapsed() })
    }
}

/// An exec's stdout and stdin as one byte stream; the exec stays open as long as this lives.
struct ExecStream {
    io: tokio::io::Join<
        Ending<tokio::io::ReadHalf<tokio::io::SimplexStream>>,
        tokio::io::WriteHalf<tokio::io::SimplexStream>,
    >,
    _process: AttachedProcess,
}

impl AsyncRead for ExecStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for ExecStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Opens the link to agentd through an exec of `agentd bridge`: one exec per (re)connection, which
/// first starts agentd on its Unix socket in the run directory unless it runs, detached from the
/// exec (its own session), so that agentd and its commands outlive every stream. The cluster's
/// RBAC on `pods/exec` is the authentication; no port and no token.
pub struct BridgeConnector {
    pub(super) exec: PodExec,
    pub(super) agentd: String,
    pub(super) run_dir: String,
    pub(super) timeout: Duration,
}

impl BridgeConnector {
    /// The script one exec runs: agentd started if it is not running, then the bridge.
    pub fn script(&self) -> String {
        let (dir, agentd) = (&self.run_dir, &self.agentd);
        format!(
            r#"umask 077; mkdir -p {dir} || exit 1
s={dir}/agentd.sock
alive() {{ p=$(cat {dir}/pid 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null && [ -S "$s" ]; }}
if ! alive; then
  rm -f "$s"
  S=; command -v setsid >/dev/null 2>&1 && S=setsid
  $S {agentd} serve --unix "$s" >{dir}/log 2>&1 </dev/null &
  echo $! >{dir}/pid
  i=0; while [ ! -S "$s" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
fi
exec {agentd} bridge --unix "$s""#
        )
    }

    async fn try_connect(&self) -> Result<Link> {
        let args = ["sh".to_owned(), "-c".to_owned(), self.script()];
        let mut process = self.exec.start(&args, true).await?;
        let (Some(stdin), Some(stdout), Some(stderr), Some(status)) =
            (process.stdin(), process.stdout(), process.stderr(), process.take_status())
        else {
            return Err(SandboxError::Protocol("an exec stream without its stdio".to_owned()));
        };
        // What the script or the bridge says on stderr, for the error if the link does not come up.
        let (ended, over) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            drop(status.await);
            let _ = ended.send(true);
        });
        let said =
            tokio::spawn(read_capped(Ending::new(stderr, over_when(over.clone())), STDERR_KEPT as u64));
        let stdout = Ending::new(stdout, over_when(over));
        let stream = ExecStream { io: tokio::io::join(stdout, stdin), _process: process };
        let label = format!("kubernetes exec {}/{}", self.exec.pods_namespace(), self.exec.pod);
        match Link::through(stream, &label).await {
            Ok(link) => Ok(link),
            Err(err) => {
                let text = match tokio::time::timeout(Duration::from_secs(2), said).await {
                    Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).trim().to_owned(),
                    _ => String::new(),
                };
                Err(if text.is_empty() {
                    err
                } else {
                    SandboxError::Start(format!("{err}; agentd said: {text}"))
                })
            }
        }
    }
}

impl PodExec {
    fn pods_namespace(&self) -> &str {
        self.pods.namespace().unwrap_or("default")
    }
}

#[async_trait]
impl Connector for BridgeConnector {
    async fn connect(&self) -> Result<Link> {
        let deadline = Instant::now() + self.timeout;
        let mut delay = Duration::from_millis(50);
        loop {
            let err = match self.try_connect().await {
                Ok(link) => return Ok(link),
                // The Pod is gone, or the credentials are refused: no retry fixes it.
                Err(err @ (SandboxError::NotFound { .. } | SandboxError::Auth { .. })) => return Err(err),
                Err(err) => err,
            };
            if Instant::now() + delay >= deadline {
                return Err(SandboxError::Start(format!(
                    "agentd in Pod {}/{} did not answer through the exec stream within {:?}: {err}",
                    self.exec.pods_namespace(),
                    self.exec.pod,
                    self.timeout
                )));
            }
            tracing::debug!(pod = %self.exec.pod, "the bridge to agentd failed, again in {delay:?}: {err}");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
}

/// A kube error as this crate's: the API server's own status message, 404 as `NotFound`, 401/403
/// as `Auth`.
pub fn kube_error(err: kube::Error, what: &str) -> SandboxError {
    match err {
        kube::Error::Api(status) => match status.code {
            404 => {
                SandboxError::NotFound { provider: PROVIDER, what: format!("{what} ({})", status.message) }
            }
            401 => SandboxError::Auth {
                provider: PROVIDER,
                variable: "KUBECONFIG (the credentials of its context)",
            },
            code => {
                SandboxError::Provider { provider: PROVIDER, status: Some(code), message: status.message }
            }
        },
        other => {
            SandboxError::Provider { provider: PROVIDER, status: None, message: format!("{what}: {other}") }
        }
    }
}
