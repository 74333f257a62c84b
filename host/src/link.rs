//! The websocket client: one connection to agentd, many requests in flight on it.
//!
//! A reader task routes every incoming message to the request that owns its id; a writer task owns
//! the socket's sending half. Each request gets a bounded route, so a caller that reads slowly (a large
//! download) slows the socket rather than growing memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agentd_protocol::limits::{CHUNK_SIZE, WEBSOCKET_READ_BUFFER};
use agentd_protocol::{
    CancelRequest, ClientMessage, DownloadRequest, ErrorReply, ExecRequest, ExecResult, FsMessage, FsRequest,
    FsResponse, Hello, HelloReply, PROTOCOL_VERSION, ServerMessage, UploadEnd, UploadRequest, chunk,
};
use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Bytes, Message};

use crate::error::{Result, SandboxError};

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
// Each message is moved once, through its route's channel: boxing the large variant (an
// `ExecResult`) would add an allocation per message and save nothing.
#[allow(clippy::large_enum_variant)]
enum Incoming {
    Message(ServerMessage),
    Chunk(Bytes),
}

/// Receives live output of a streamed exec, chunk by chunk.
pub type OutputSink<'a> = &'a mut (dyn FnMut(&[u8]) + Send);

/// Messages routed to one request before the reader waits for it.
const ROUTE_QUEUE: usize = 64;

type Routes = Arc<Mutex<HashMap<u64, mpsc::Sender<Incoming>>>>;

/// A live connection to one agentd.
pub struct Link {
    url: String,
    out: mpsc::Sender<Message>,
    routes: Routes,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    hello: HelloReply,
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
    /// `ws://HOST:PORT` or, for a local session's Unix socket, `unix:PATH`.
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
                Self::over(ws, url).await
            }
            None => {
                let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config()), true)
                    .await
                    .map_err(|e| upgrade_error(url, e))?;
                Self::over(ws, url).await
            }
        }
    }

    /// A link over an already open byte stream that speaks websocket frames without the HTTP
    /// upgrade (`agentd serve --stdio` behind `docker exec -i`); `label` names it in errors.
    pub async fn over_stream<S>(stream: S, label: &str) -> Result<Self>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ws = WebSocketStream::from_raw_socket(stream, Role::Client, Some(config())).await;
        Self::over(ws, label).await
    }

    /// Starts the reader and writer tasks on `ws` and completes the `hello` handshake.
    async fn over<S>(ws: WebSocketStream<S>, url: &str) -> Result<Self>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sink, mut source) = ws.split();
        let (out, mut outgoing) = mpsc::channel::<Message>(ROUTE_QUEUE);
        // `forward` flushes only when the queue is momentarily empty: one write for a burst.
        let writer = tokio::spawn(async move {
            let _ =
                futures_util::stream::poll_fn(move |cx| outgoing.poll_recv(cx)).map(Ok).forward(sink).await;
        });
        let routes: Routes = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let reader = {
            let (routes, closed) = (Arc::clone(&routes), Arc::clone(&closed));
            tokio::spawn(async move {
                while let Some(Ok(frame)) = source.next().await {
                    match frame {
                        Message::Text(text) => match ServerMessage::from_json(text.as_str()) {
                            Ok(message) => route_message(&routes, message).await,
                            Err(err) => tracing::warn!("unreadable message from agentd: {err}"),
                        },
                        Message::Binary(data) => match chunk::decode(&data) {
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
            out,
            routes,
            next_id: AtomicU64::new(1),
            closed,
            // Filled in by the handshake below.
            hello: HelloReply::default(),
            tasks: [reader, writer],
        };
        let (id, mut route) = link.open_route();
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

    /// The connection is gone; a new `Link` is needed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.out.is_closed()
    }

    /// Runs a command; `request.id` is assigned here. With `on_output`, output is streamed to it as it
    /// comes (and still returned whole in the result).
    pub async fn exec(
        &self,
        mut request: ExecRequest,
        mut on_output: Option<OutputSink<'_>>,
    ) -> Result<ExecResult> {
        let (id, mut route) = self.open_route();
        request.id = id;
        request.stream = on_output.is_some();
        self.send(ClientMessage::Exec(request)).await?;
        // Dropping this future mid-exec cancels the command instead of leaving it running.
        let guard = CancelOnDrop { out: self.out.clone(), target: id, armed: true, next_id: &self.next_id };
        loop {
            match route.recv().await.ok_or(SandboxError::LinkClosed)? {
                Incoming::Chunk(data) => {
                    if let Some(on_output) = on_output.as_mut() {
                        on_output(&data);
                    }
                }
                Incoming::Message(ServerMessage::ExecStarted(_)) => {}
                Incoming::Message(ServerMessage::ExecResult(result)) => {
                    guard.disarm();
                    return Ok(result);
                }
                Incoming::Message(ServerMessage::Error(err)) => {
                    guard.disarm();
                    return Err(refused(err));
                }
                Incoming::Message(other) => return Err(unexpected(&other)),
            }
        }
    }

    /// Runs one file verb natively.
    pub async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        let (id, mut route) = self.open_route();
        self.send(ClientMessage::Fs(FsMessage { id, request })).await?;
        match self.terminal(&mut route).await? {
            ServerMessage::FsResult(reply) => Ok(reply.result),
            other => Err(unexpected(&other)),
        }
    }

    /// Asks agentd to stop request `target`; returns whether it was running.
    pub async fn cancel(&self, target: u64) -> Result<bool> {
        let (id, mut route) = self.open_route();
        self.send(ClientMessage::Cancel(CancelRequest { id, target })).await?;
        match self.terminal(&mut route).await? {
            ServerMessage::CancelResult(result) => Ok(result.found),
            other => Err(unexpected(&other)),
        }
    }

    /// Streams `data` to `path` in chunks; returns the per-file error (`None`: written).
    pub async fn upload(
        &self,
        path: &str,
        mut data: impl AsyncRead + Unpin,
        mut progress: impl FnMut(u64),
    ) -> Result<Option<String>> {
        let (id, mut route) = self.open_route();
        self.send(ClientMessage::Upload(UploadRequest { id, path: path.to_owned(), mode: None })).await?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK_SIZE];
        loop {
            let n = data.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            self.out
                .send(Message::binary(chunk::encode(id, &buf[..n])))
                .await
                .map_err(|_| SandboxError::LinkClosed)?;
            progress(n as u64);
            // agentd answers early only when the upload failed; stop sending then.
            if let Ok(Incoming::Message(message)) = route.try_recv() {
                return upload_outcome(message);
            }
        }
        let sha256 = format!("{:x}", hasher.finalize());
        self.send(ClientMessage::UploadEnd(UploadEnd { id, sha256 })).await?;
        upload_outcome(self.terminal(&mut route).await?)
    }

    /// Streams the file at `path` into `sink`, checking its sha256. `Ok(Err(error))` is a per-file
    /// error (`file_not_found`, …) with nothing written to `sink`.
    pub async fn download(
        &self,
        path: &str,
        mut sink: impl AsyncWrite + Unpin,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Result<Downloaded, String>> {
        let (id, mut route) = self.open_route();
        self.send(ClientMessage::Download(DownloadRequest { id, path: path.to_owned() })).await?;
        let mut hasher = Sha256::new();
        let mut received = 0u64;
        let mut size = 0u64;
        loop {
            match route.recv().await.ok_or(SandboxError::LinkClosed)? {
                Incoming::Message(ServerMessage::DownloadStart(start)) => size = start.size,
                Incoming::Chunk(data) => {
                    hasher.update(&data);
                    sink.write_all(&data).await?;
                    received += data.len() as u64;
                    progress(received, size);
                }
                Incoming::Message(ServerMessage::DownloadResult(result)) => {
                    sink.flush().await?;
                    if let Some(error) = result.error {
                        return Ok(Err(error));
                    }
                    let actual = format!("{:x}", hasher.finalize());
                    let expected = result.sha256.unwrap_or_default();
                    if actual != expected || result.size != Some(received) {
                        return Err(SandboxError::DigestMismatch { path: path.to_owned(), expected, actual });
                    }
                    return Ok(Ok(Downloaded { size: received, sha256: actual }));
                }
                Incoming::Message(ServerMessage::Error(err)) => return Err(refused(err)),
                Incoming::Message(other) => return Err(unexpected(&other)),
            }
        }
    }

    fn open_route(&self) -> (u64, mpsc::Receiver<Incoming>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(ROUTE_QUEUE);
        self.routes.lock().unwrap_or_else(PoisonError::into_inner).insert(id, tx);
        (id, rx)
    }

    async fn send(&self, message: ClientMessage) -> Result<()> {
        self.out.send(Message::text(message.to_json())).await.map_err(|_| SandboxError::LinkClosed)
    }

    /// Waits for the request's terminal message, skipping nothing: anything else is a protocol error.
    async fn terminal(&self, route: &mut mpsc::Receiver<Incoming>) -> Result<ServerMessage> {
        match route.recv().await.ok_or(SandboxError::LinkClosed)? {
            Incoming::Message(ServerMessage::Error(err)) => Err(refused(err)),
            Incoming::Message(message) => Ok(message),
            Incoming::Chunk(_) => Err(SandboxError::Protocol("unexpected binary chunk".to_owned())),
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Inline outputs travel as one JSON message; their size is bounded by agentd's capture cap.
fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WEBSOCKET_READ_BUFFER)
        .max_message_size(Some(512 << 20))
        .max_frame_size(Some(512 << 20))
}

/// Sends `cancel` for an exec whose caller stopped waiting.
struct CancelOnDrop<'a> {
    out: mpsc::Sender<Message>,
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
            let _ = self.out.try_send(Message::text(cancel.to_json()));
        }
    }
}

async fn route_message(routes: &Routes, message: ServerMessage) {
    let terminal = match &message {
        ServerMessage::ExecStarted(_) | ServerMessage::DownloadStart(_) => false,
        ServerMessage::Hello(_)
        | ServerMessage::ExecResult(_)
        | ServerMessage::CancelResult(_)
        | ServerMessage::UploadResult(_)
        | ServerMessage::DownloadResult(_)
        | ServerMessage::FsResult(_)
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
