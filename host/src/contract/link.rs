//! The websocket client: one connection to agentd, many requests in flight on it.
//!
//! A reader task routes every incoming message to the request that owns its id. A request is
//! written by its caller when the socket is free, else queued for a writer task (`link/outgoing.rs`).
//! The process verbs over one link (`processes`, `attach`, `kill`, …) are in `link/process.rs`.
//! Each request gets a bounded route, so a caller that reads slowly (a large
//! download) slows the socket rather than growing memory.
//!
//! Nothing the other end says is trusted: every wait has a deadline ([`Deadlines`]); a message is
//! at most [`MAX_REPLY_BYTES`] (text) or [`MAX_BINARY_MESSAGE`] (a chunk); a reply that cannot be
//! read, or a chunk too large, fails the request it names; a download stops at the size it
//! announced. A reply for an id nobody waits on (a second terminal reply, an unknown id) is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentd_protocol::limits::{CHUNK_SIZE, MAX_BINARY_MESSAGE, MAX_REPLY_BYTES, WEBSOCKET_READ_BUFFER};
use agentd_protocol::{
    CancelRequest, ClientMessage, DownloadRequest, ErrorReply, ExecRequest, ExecResult, FsMessage, FsRequest,
    FsResponse, Hello, HelloReply, PROTOCOL_VERSION, ServerMessage, TransferError, UploadEnd, UploadRequest,
    chunk,
};
use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

mod outgoing;
mod process;
use outgoing::Outgoing;
pub use process::{ProcessEvent, SpawnedProcess, Tracked};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Bytes, Message};

use crate::contract::deadlines::{Deadlines, within};
use crate::contract::error::{Result, SandboxError};

/// A failed upgrade: 401 is the token, anything else is said with agentd's reason.
fn upgrade_error(url: &str, err: tungstenite::Error) -> SandboxError {
    let reason = match err {
        tungstenite::Error::Http(response) if response.status() == StatusCode::UNAUTHORIZED => {
            return SandboxError::Unauthorized { url: url.to_owned() };
        }
        tungstenite::Error::Http(response) => {
            let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            format!("refused with HTTP {}: {}", response.status(), body.trim())
        }
        err => err.to_string(),
    };
    SandboxError::Connect { url: url.to_owned(), reason }
}

/// What a request's route receives.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "each message is moved once, through its route's channel: boxing the large variant (an \
              `ExecResult`) would add an allocation per message and save nothing"
)]
enum Incoming {
    Message(ServerMessage),
    Chunk(Bytes),
    /// A message for this request that breaks the protocol (unreadable, a chunk too large): said
    /// to the request, which fails, rather than dropped while it waits.
    Broken(String),
}

/// Receives live output of a streamed exec, chunk by chunk.
pub type OutputSink<'a> = &'a mut (dyn FnMut(&[u8]) + Send);

/// Messages routed to one request before the reader waits for it. With chunks of at most
/// [`MAX_BINARY_MESSAGE`], a request that reads slowly holds at most this many of them.
const ROUTE_QUEUE: usize = 8;

type Routes = Arc<Mutex<HashMap<u64, mpsc::Sender<Incoming>>>>;

/// The process ids `exec_started` named, by request id: read by a kept exec's caller only when its
/// link dropped (to attach again), so the reader records them without waking anyone.
type Started = Arc<Mutex<HashMap<u64, String>>>;

/// Requests whose caller waits for `exec_started` itself ([`Link::spawn`]): it is routed to them.
type Announced = Arc<Mutex<std::collections::HashSet<u64>>>;

/// A live connection to one agentd.
pub struct Link {
    url: String,
    /// agentd (and so a kept exec) outlives this link: a link over TCP or through a bridge can drop
    /// while agentd runs on; one over agentd's stdio or a local Unix socket ends only with it.
    outlives: bool,
    out: Outgoing,
    routes: Routes,
    started: Started,
    announced: Announced,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    hello: HelloReply,
    deadlines: Deadlines,
    tasks: [JoinHandle<()>; 2],
}

/// A finished download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    pub size: u64,
    pub sha256: String,
}

impl Link {
    /// Connects, authenticates with `token` (if any) and completes the `hello` handshake. `url` is
    /// `ws://HOST:PORT` or, for a local session's Unix socket, `unix:PATH`. The deadlines are
    /// [`Deadlines::from_env`].
    pub async fn connect(url: &str, token: Option<&str>) -> Result<Self> {
        Self::connect_with_headers(url, token, &[]).await
    }

    /// [`Link::connect`] with extra headers on the upgrade request (a proxy's own token, e.g.
    /// Daytona's `X-Daytona-Preview-Token`). `wss://` URLs use TLS (rustls) where the build has it.
    pub async fn connect_with_headers(
        url: &str,
        token: Option<&str>,
        headers: &[(&'static str, String)],
    ) -> Result<Self> {
        Self::connect_within(url, token, headers, Deadlines::from_env()?).await
    }

    /// [`Link::connect_with_headers`] with the link's `deadlines`: connecting, upgrading and `hello`
    /// together end within `deadlines.connect`.
    pub async fn connect_within(
        url: &str,
        token: Option<&str>,
        headers: &[(&'static str, String)],
        deadlines: Deadlines,
    ) -> Result<Self> {
        let what = format!("connecting to agentd at {url} (TCP, upgrade, hello)");
        within(&what, Some(deadlines.connect), Self::open(url, token, headers, deadlines)).await
    }

    async fn open(
        url: &str,
        token: Option<&str>,
        headers: &[(&'static str, String)],
        deadlines: Deadlines,
    ) -> Result<Self> {
        let connect_error = |reason: String| SandboxError::Connect { url: url.to_owned(), reason };
        // A local session's Unix socket: the upgrade's URL only names the resource.
        let socket = url.strip_prefix("unix:");
        let mut request = socket
            .map_or(url, |_| "ws://localhost/")
            .into_client_request()
            .map_err(|e| connect_error(e.to_string()))?;
        if let Some(token) = token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|e| connect_error(e.to_string()))?;
            request.headers_mut().insert("authorization", value);
        }
        for (name, value) in headers {
            let value = HeaderValue::from_str(value).map_err(|e| connect_error(e.to_string()))?;
            request.headers_mut().insert(*name, value);
        }
        match socket {
            Some(path) => {
                let stream =
                    tokio::net::UnixStream::connect(path).await.map_err(|e| connect_error(e.to_string()))?;
                let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(config()))
                    .await
                    .map_err(|e| upgrade_error(url, e))?;
                Self::over(ws, url, false, deadlines).await
            }
            None => {
                let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config()), true)
                    .await
                    .map_err(|e| upgrade_error(url, e))?;
                Self::over(ws, url, true, deadlines).await
            }
        }
    }

    /// A link over an already open byte stream that speaks websocket frames without the HTTP
    /// upgrade (`agentd serve --stdio` behind `docker exec -i`); `label` names it in errors. The
    /// deadlines are [`Deadlines::from_env`]; `hello` must come within their `connect`.
    pub async fn over_stream<S>(stream: S, label: &str) -> Result<Self>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let deadlines = Deadlines::from_env()?;
        let ws = WebSocketStream::from_raw_socket(stream, Role::Client, Some(config())).await;
        let what = format!("hello from agentd over {label}");
        within(&what, Some(deadlines.connect), Self::over(ws, label, false, deadlines)).await
    }

    /// A link through a byte stream that reaches an agentd's listener (`agentd bridge` to its Unix
    /// socket, behind Kubernetes' `pods/exec`): the websocket upgrade goes through it, with no
    /// token (the channel is the authentication). agentd outlives the stream, so execs over this
    /// link are healed when it drops. `label` names it in errors; the deadlines are
    /// [`Deadlines::from_env`], and upgrade plus `hello` must come within their `connect`.
    pub async fn through<S>(stream: S, label: &str) -> Result<Self>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let deadlines = Deadlines::from_env()?;
        let what = format!("hello from agentd through {label}");
        let open = async {
            let request = "ws://localhost/"
                .into_client_request()
                .map_err(|e| SandboxError::Connect { url: label.to_owned(), reason: e.to_string() })?;
            let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(config()))
                .await
                .map_err(|e| upgrade_error(label, e))?;
            Self::over(ws, label, true, deadlines).await
        };
        within(&what, Some(deadlines.connect), open).await
    }

    /// Starts the reader and writer tasks on `ws` and completes the `hello` handshake.
    async fn over<S>(ws: WebSocketStream<S>, url: &str, outlives: bool, deadlines: Deadlines) -> Result<Self>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sink, mut source) = ws.split();
        let (out, writer) = Outgoing::start(sink, ROUTE_QUEUE);
        let routes: Routes = Arc::default();
        let started: Started = Arc::default();
        let announced: Announced = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let reader = {
            let (routes, closed) = (Arc::clone(&routes), Arc::clone(&closed));
            let (started, announced) = (Arc::clone(&started), Arc::clone(&announced));
            tokio::spawn(async move {
                while let Some(Ok(frame)) = source.next().await {
                    match frame {
                        Message::Text(text) => match ServerMessage::from_json(text.as_str()) {
                            Ok(message) => route_message(&routes, &started, &announced, message).await,
                            Err(err) => match id_of(text.as_str()) {
                                Some(id) => {
                                    let why = format!("agentd's reply to request {id} is unreadable: {err}");
                                    route(&routes, id, Incoming::Broken(why), true).await
                                }
                                None => tracing::warn!("unreadable message from agentd: {err}"),
                            },
                        },
                        Message::Binary(data) => match chunk::decode(&data) {
                            Ok((id, _)) if data.len() > MAX_BINARY_MESSAGE => {
                                let why = format!(
                                    "agentd sent a chunk of {} bytes for request {id}; the most is {MAX_BINARY_MESSAGE}",
                                    data.len()
                                );
                                route(&routes, id, Incoming::Broken(why), true).await
                            }
                            Ok((id, _)) => {
                                route(&routes, id, Incoming::Chunk(data.slice(chunk::HEADER_LEN..)), false)
                                    .await
                            }
                            Err(err) => tracing::warn!("unreadable chunk from agentd: {err}"),
                        },
                        Message::Close(_) => break,
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                    }
                }
                closed.store(true, Ordering::Release);
                // Dropping every route wakes every waiting request with `LinkClosed`.
                routes.lock().unwrap_or_else(PoisonError::into_inner).clear();
            })
        };
        let mut link = Self {
            url: url.to_owned(),
            outlives,
            out,
            routes,
            started,
            announced,
            next_id: AtomicU64::new(1),
            closed,
            // Filled in by the handshake below.
            hello: HelloReply::default(),
            deadlines,
            tasks: [reader, writer],
        };
        let mut route = link.open_route();
        let id = route.id;
        link.send(ClientMessage::Hello(Hello { id, versions: vec![PROTOCOL_VERSION] })).await?;
        match link.terminal(&mut route).await? {
            ServerMessage::Hello(hello) => link.hello = hello,
            other => return Err(unexpected(&other)),
        }
        Ok(link)
    }

    /// agentd's answer to `hello`: version, workspace, pid, limits.
    pub fn hello(&self) -> &HelloReply {
        &self.hello
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether agentd outlives this link (TCP, a bridge), so an exec kept over it can be attached
    /// again after it drops.
    pub fn agentd_outlives(&self) -> bool {
        self.outlives
    }

    /// The deadlines this link waits within.
    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    /// The connection is gone; a new `Link` is needed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.out.is_closed()
    }

    /// Runs a command; `request.id` is assigned here. With `on_output`, output is streamed to it as it
    /// comes (and still returned whole in the result). The result must come within the command's
    /// timeout and [`Deadlines::exec_margin`]; past it, the command is cancelled and this is a
    /// [`SandboxError::Timeout`].
    pub async fn exec(&self, request: ExecRequest, on_output: Option<OutputSink<'_>>) -> Result<ExecResult> {
        // A timeout agentd would refuse (negative, not a number) gets its refusal, so no deadline.
        let timeout = request.timeout.map(Duration::try_from_secs_f64);
        let deadline = match timeout {
            Some(Err(_)) => Some(self.deadlines.silence),
            Some(Ok(t)) => self.deadlines.exec(Some(t)),
            None => self.deadlines.exec(None),
        };
        within("the result of an exec from agentd", deadline, self.exec_unbounded(request, on_output, None))
            .await
    }

    async fn exec_unbounded(
        &self,
        mut request: ExecRequest,
        mut on_output: Option<OutputSink<'_>>,
        mut tracked: Option<&mut Tracked>,
    ) -> Result<ExecResult> {
        let mut route = self.open_route();
        let id = route.id;
        request.id = id;
        request.stream = on_output.is_some();
        self.send(ClientMessage::Exec(request)).await?;
        // Dropping this future mid-exec cancels the command instead of leaving it running.
        let guard = self.cancel_on_drop(id);
        loop {
            let Some(incoming) = route.rx.recv().await else {
                // The link is gone: a kept exec's caller may attach to it again.
                if let Some(tracked) = tracked.as_mut() {
                    tracked.process = route.process();
                }
                return Err(SandboxError::LinkClosed);
            };
            match incoming {
                Incoming::Chunk(data) => {
                    if let Some(tracked) = tracked.as_mut() {
                        tracked.delivered += data.len() as u64;
                    }
                    if let Some(on_output) = on_output.as_mut() {
                        on_output(&data);
                    }
                }
                Incoming::Message(ServerMessage::ExecResult(result)) => {
                    guard.disarm();
                    return Ok(result);
                }
                Incoming::Message(ServerMessage::Error(err)) => {
                    guard.disarm();
                    return Err(refused(err));
                }
                Incoming::Message(other) => return Err(unexpected(&other)),
                Incoming::Broken(why) => return Err(SandboxError::Protocol(why)),
            }
        }
    }

    /// Runs one file verb natively; the reply must come within [`Deadlines::silence`] (a verb that
    /// was still running is cancelled then).
    pub async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        self.quiet("the reply to a file verb from agentd", async {
            let mut route = self.open_route();
            let id = route.id;
            self.send(ClientMessage::Fs(FsMessage { id, request })).await?;
            let guard = self.cancel_on_drop(id);
            let reply = self.terminal(&mut route).await;
            guard.disarm();
            match reply? {
                ServerMessage::FsResult(reply) => Ok(reply.result),
                other => Err(unexpected(&other)),
            }
        })
        .await
    }

    /// Asks agentd to stop request `target`; returns whether it was running.
    pub async fn cancel(&self, target: u64) -> Result<bool> {
        self.quiet("the reply to a cancel from agentd", async {
            let mut route = self.open_route();
            let id = route.id;
            self.send(ClientMessage::Cancel(CancelRequest { id, target })).await?;
            match self.terminal(&mut route).await? {
                ServerMessage::CancelResult(result) => Ok(result.found),
                other => Err(unexpected(&other)),
            }
        })
        .await
    }

    /// Streams `data` to `path` in chunks; returns the per-file error (`None`: written). Each chunk
    /// must be taken, and the final reply come, within [`Deadlines::silence`].
    pub async fn upload(
        &self,
        path: &str,
        mut data: impl AsyncRead + Unpin,
        mut progress: impl FnMut(u64),
    ) -> Result<Option<String>> {
        let mut route = self.open_route();
        let id = route.id;
        let request = ClientMessage::Upload(UploadRequest { id, path: path.to_owned(), mode: None });
        self.quiet("agentd to take an upload", self.send(request)).await?;
        // An upload left half-way (an error here, a caller that stopped waiting) is cancelled, so
        // agentd removes its temporary file instead of waiting for the rest.
        let guard = self.cancel_on_drop(id);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK_SIZE];
        loop {
            let n = data.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            let piece = Message::binary(chunk::encode(id, &buf[..n]));
            self.quiet("agentd to take an upload's next chunk", async { self.out.send(piece).await }).await?;
            progress(n as u64);
            // agentd answers early only when the upload failed; stop sending then.
            match route.rx.try_recv() {
                Ok(Incoming::Message(message)) => {
                    guard.disarm();
                    return upload_outcome(message);
                }
                Ok(Incoming::Broken(why)) => return Err(SandboxError::Protocol(why)),
                Ok(Incoming::Chunk(_)) => return Err(stray_chunk()),
                Err(_) => {}
            }
        }
        let sha256 = format!("{:x}", hasher.finalize());
        let outcome = self
            .quiet("agentd's reply to an upload", async {
                self.send(ClientMessage::UploadEnd(UploadEnd { id, sha256 })).await?;
                self.terminal(&mut route).await
            })
            .await;
        guard.disarm();
        upload_outcome(outcome?)
    }

    /// Streams the file at `path` into `sink`, checking its sha256. `Ok(Err(error))` is a per-file
    /// error (`file_not_found`, …) with nothing written to `sink`.
    pub async fn download(
        &self,
        path: &str,
        sink: impl AsyncWrite + Unpin,
        progress: impl FnMut(u64, u64),
    ) -> Result<Result<Downloaded, String>> {
        self.download_at_most(path, u64::MAX, sink, progress).await
    }

    /// [`Link::download`] of a file of at most `most` bytes: a larger one is the per-file error
    /// `file_too_large`, said before any byte reaches `sink`. agentd must announce the size first
    /// and send exactly that many bytes: a chunk before the announcement, or one byte more, is a
    /// [`SandboxError::Protocol`] at once. Each part must come within [`Deadlines::silence`].
    pub async fn download_at_most(
        &self,
        path: &str,
        most: u64,
        mut sink: impl AsyncWrite + Unpin,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Result<Downloaded, String>> {
        let mut route = self.open_route();
        let id = route.id;
        let request = ClientMessage::Download(DownloadRequest { id, path: path.to_owned() });
        self.quiet("agentd to take a download", self.send(request)).await?;
        // A download left early (too large, a lie, a caller gone) is cancelled: agentd stops sending.
        let guard = self.cancel_on_drop(id);
        let mut hasher = Sha256::new();
        let mut received = 0u64;
        let mut announced: Option<u64> = None;
        loop {
            let next = self.quiet("the next part of a download from agentd", async {
                route.rx.recv().await.ok_or(SandboxError::LinkClosed)
            });
            match next.await? {
                Incoming::Message(ServerMessage::DownloadStart(start)) => {
                    if announced.is_some() {
                        return Err(SandboxError::Protocol(format!(
                            "agentd began the download of {path} twice"
                        )));
                    }
                    if start.size > most {
                        return Ok(Err(TransferError::FileTooLarge.as_str().to_owned()));
                    }
                    announced = Some(start.size);
                }
                Incoming::Chunk(data) => {
                    let Some(size) = announced else {
                        let why = format!("agentd sent data of {path} before announcing its size");
                        return Err(SandboxError::Protocol(why));
                    };
                    received += data.len() as u64;
                    if received > size {
                        let why = format!("agentd sent more of {path} than the {size} bytes it announced");
                        return Err(SandboxError::Protocol(why));
                    }
                    hasher.update(&data);
                    sink.write_all(&data).await?;
                    progress(received, size);
                }
                Incoming::Message(ServerMessage::DownloadResult(result)) => {
                    guard.disarm();
                    sink.flush().await?;
                    if let Some(error) = result.error {
                        return Ok(Err(error));
                    }
                    let actual = format!("{:x}", hasher.finalize());
                    let expected = result.sha256.unwrap_or_default();
                    if actual != expected || result.size != Some(received) || announced != Some(received) {
                        return Err(SandboxError::DigestMismatch { path: path.to_owned(), expected, actual });
                    }
                    return Ok(Ok(Downloaded { size: received, sha256: actual }));
                }
                Incoming::Message(ServerMessage::Error(err)) => {
                    guard.disarm();
                    return Err(refused(err));
                }
                Incoming::Message(other) => return Err(unexpected(&other)),
                Incoming::Broken(why) => return Err(SandboxError::Protocol(why)),
            }
        }
    }

    /// `call`, or a [`SandboxError::Timeout`] about `what` after [`Deadlines::silence`].
    async fn quiet<T>(&self, what: &str, call: impl Future<Output = Result<T>>) -> Result<T> {
        within(what, Some(self.deadlines.silence), call).await
    }

    fn open_route(&self) -> Route {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(ROUTE_QUEUE);
        self.routes.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
        Route { id, rx, routes: Arc::clone(&self.routes), started: Arc::clone(&self.started) }
    }

    /// `exec_started` of request `id` goes to its route.
    fn announce(&self, id: u64) {
        self.announced.lock().unwrap_or_else(PoisonError::into_inner).insert(id);
    }

    /// Sends `cancel` for request `target` when dropped armed.
    fn cancel_on_drop(&self, target: u64) -> CancelOnDrop<'_> {
        CancelOnDrop { out: self.out.clone(), target, armed: true, next_id: &self.next_id }
    }

    async fn send(&self, message: ClientMessage) -> Result<()> {
        self.out.send(Message::text(message.to_json())).await
    }

    /// Waits for the request's terminal message, skipping nothing: anything else is a protocol error.
    async fn terminal(&self, route: &mut Route) -> Result<ServerMessage> {
        match route.rx.recv().await.ok_or(SandboxError::LinkClosed)? {
            Incoming::Message(ServerMessage::Error(err)) => Err(refused(err)),
            Incoming::Message(message) => Ok(message),
            Incoming::Chunk(_) => Err(stray_chunk()),
            Incoming::Broken(why) => Err(SandboxError::Protocol(why)),
        }
    }
}

/// One request's end of its route; dropping it forgets the id, so what agentd still sends for a
/// request nobody waits on (after an error, a deadline, a cancelled future) is dropped on arrival.
struct Route {
    id: u64,
    rx: mpsc::Receiver<Incoming>,
    routes: Routes,
    started: Started,
}

impl Route {
    /// The process id `exec_started` named for this request, if it came.
    fn process(&self) -> Option<String> {
        self.started.lock().unwrap_or_else(PoisonError::into_inner).get(&self.id).cloned()
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
        self.started.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// agentd's largest message is a reply of [`MAX_REPLY_BYTES`] (its chunks are smaller): a larger one
/// is not buffered but closes the link. A chunk's own bound is checked per message, above.
fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WEBSOCKET_READ_BUFFER)
        .max_message_size(Some(MAX_REPLY_BYTES))
        .max_frame_size(Some(MAX_REPLY_BYTES))
}

/// Sends `cancel` for an exec whose caller stopped waiting.
struct CancelOnDrop<'a> {
    out: Outgoing,
    target: u64,
    armed: bool,
    next_id: &'a AtomicU64,
}

impl CancelOnDrop<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let cancel = ClientMessage::Cancel(CancelRequest { id, target: self.target });
            self.out.send_now(Message::text(cancel.to_json()));
        }
    }
}

async fn route_message(routes: &Routes, started: &Started, announced: &Announced, message: ServerMessage) {
    let terminal = match &message {
        ServerMessage::ExecStarted(exec)
            if announced.lock().unwrap_or_else(PoisonError::into_inner).remove(&exec.id) =>
        {
            false
        }
        // No other caller waits for it (the pid is in the result): routing it would wake the
        // caller, on another thread, for nothing while its command runs. A kept exec's process id
        // is noted.
        ServerMessage::ExecStarted(exec) => {
            if !exec.process.is_empty()
                && routes.lock().unwrap_or_else(PoisonError::into_inner).contains_key(&exec.id)
            {
                started.lock().unwrap_or_else(PoisonError::into_inner).insert(exec.id, exec.process.clone());
            }
            return;
        }
        ServerMessage::DownloadStart(_) | ServerMessage::OutputGap(_) => false,
        ServerMessage::Hello(_)
        | ServerMessage::ExecResult(_)
        | ServerMessage::CancelResult(_)
        | ServerMessage::UploadResult(_)
        | ServerMessage::DownloadResult(_)
        | ServerMessage::FsResult(_)
        | ServerMessage::ProcessesResult(_)
        | ServerMessage::KillResult(_)
        | ServerMessage::WaitResult(_)
        | ServerMessage::ForgetResult(_)
        | ServerMessage::WriteStdinResult(_)
        | ServerMessage::CloseStdinResult(_)
        | ServerMessage::ResizeResult(_)
        | ServerMessage::Error(_) => true,
    };
    match message.id() {
        Some(id) => route(routes, id, Incoming::Message(message), terminal).await,
        None => tracing::warn!("agentd reported a connection-level error: {message:?}"),
    }
}

async fn route(routes: &Routes, id: u64, incoming: Incoming, terminal: bool) {
    let sender = {
        let mut routes = routes.lock().unwrap_or_else(PoisonError::into_inner);
        if terminal { routes.remove(&id) } else { routes.get(&id).cloned() }
    };
    if let Some(sender) = sender {
        // The caller may have stopped waiting; then the message has nobody to go to.
        let _ = sender.send(incoming).await;
    }
}

/// The id of a message that is not one this client reads, if it has one.
fn id_of(text: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Named {
        id: u64,
    }
    serde_json::from_str::<Named>(text).ok().map(|named| named.id)
}

fn stray_chunk() -> SandboxError {
    SandboxError::Protocol("agentd sent a binary chunk for a request that has no data".to_owned())
}

fn upload_outcome(message: ServerMessage) -> Result<Option<String>> {
    match message {
        ServerMessage::UploadResult(result) => Ok(result.error),
        ServerMessage::Error(err) => Err(refused(err)),
        other => Err(unexpected(&other)),
    }
}

fn refused(err: ErrorReply) -> SandboxError {
    SandboxError::Refused { code: err.code, message: err.message }
}

fn unexpected(message: &ServerMessage) -> SandboxError {
    SandboxError::Protocol(format!("unexpected message {}", message.to_json()))
}
