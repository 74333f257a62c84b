//! The websocket server: authentication on the upgrade, then one [`Session`] per connection that
//! dispatches requests by id, many in flight at once.
//!
//! Each request runs in its own task and answers through the connection's outgoing queue, so a slow
//! exec never delays another. Bad input is answered with an `error` reply and the connection stays
//! up. When a connection closes, its running execs are killed and its unfinished uploads removed: no
//! result could be delivered any more, and nothing should be left running unseen.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentd_protocol::limits::{
    DEFAULT_MAX_CAPTURE_BYTES, MAX_BINARY_MESSAGE, MAX_IN_FLIGHT, MAX_TEXT_MESSAGE, MAX_WEBSOCKET_MESSAGE,
};
use agentd_protocol::{
    CancelResult, ClientMessage, DecodeError, ErrorCode, ErrorReply, ExecRequest, ExecStarted, FsReply,
    HelloReply, PROTOCOL_VERSION, ServerMessage, UploadResult, chunk, decode_client,
};
use base64::Engine as _;
use futures_util::StreamExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Message};

use crate::auth::Token;
use crate::confine::{ConfineError, Confiner};
use crate::exec::{CancelHandle, CaptureMode, Confined, ExecError, ExecSpec, Executor};
use crate::root::Workspace;
use crate::transfer::{self, UploadEvent};

/// Messages queued for one connection's writer. Bounded, so a client that stops reading slows its
/// own execs' streaming and downloads instead of growing agentd's memory.
const OUTGOING_QUEUE: usize = 64;

/// Chunks queued for one upload before the connection's reader waits for the disk.
const UPLOAD_QUEUE: usize = 16;

/// Live output chunks queued per streamed exec.
const LIVE_QUEUE: usize = 16;

/// What every connection shares.
pub struct Shared {
    pub executor: Executor,
    /// Where file verbs and transfers resolve paths (confined with `--root`).
    pub workspace: Workspace,
    /// The sandbox profile (a permissive one when `--profile` was not given).
    pub confiner: Confiner,
    /// `--profile` was given: every command is confined.
    pub profiled: bool,
    pub token: Option<Token>,
    /// Timeout for an exec that names none; `None`: no limit.
    pub default_timeout: Option<Duration>,
}

/// Accepts connections until the listener fails.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(connection(stream, peer, Arc::clone(&shared)));
            }
            Err(err) => {
                // EMFILE and friends pass; back off so a full fd table does not spin.
                tracing::warn!("accept failed: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    #[allow(clippy::result_large_err)] // tungstenite's `Callback` signature
    let auth = |request: &Request, response: Response| authorize(shared.token.as_ref(), request, response);
    let ws = match tokio_tungstenite::accept_hdr_async_with_config(stream, auth, Some(ws_config())).await {
        Ok(ws) => ws,
        Err(err) => {
            tracing::info!(%peer, "websocket upgrade refused: {err}");
            return;
        }
    };
    tracing::debug!(%peer, "connected");
    session(ws, shared).await;
    tracing::debug!(%peer, "disconnected");
}

/// Serves one session over stdin/stdout: websocket frames without the HTTP upgrade, for a channel
/// that is already authenticated (`docker exec -i … agentd serve --stdio`). Returns at EOF.
pub async fn serve_stdio(shared: Arc<Shared>) {
    let io = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(ws_config())).await;
    session(ws, shared).await;
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_WEBSOCKET_MESSAGE))
        .max_frame_size(Some(MAX_WEBSOCKET_MESSAGE))
}

/// One client's requests until its connection ends.
async fn session<S>(ws: WebSocketStream<S>, shared: Arc<Shared>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut source) = ws.split();
    let (out, mut outgoing) = mpsc::channel::<Message>(OUTGOING_QUEUE);
    // `forward` flushes only when the queue is momentarily empty: many small results, one write.
    let writer =
        tokio::spawn(futures_util::stream::poll_fn(move |cx| outgoing.poll_recv(cx)).map(Ok).forward(sink));

    let mut session = Session { shared, out, in_flight: Arc::default(), greeted: false };
    while let Some(frame) = source.next().await {
        match frame {
            Ok(Message::Text(text)) => session.on_text(text.as_str()).await,
            Ok(Message::Binary(data)) => session.on_binary(data).await,
            Ok(Message::Close(_)) => break,
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => {}
            Err(err) => {
                tracing::debug!("connection ended: {err}");
                break;
            }
        }
    }
    session.close();
    drop(session);
    let _ = writer.await;
}

/// Accepts the upgrade only with the right bearer token (when agentd has one); else HTTP 401.
// The error type is tungstenite's `Callback` signature, not ours to box.
#[allow(clippy::result_large_err)]
fn authorize(
    token: Option<&Token>,
    request: &Request,
    response: Response,
) -> Result<Response, ErrorResponse> {
    let Some(token) = token else {
        return Ok(response);
    };
    let header = request.headers().get("authorization").map(|v| v.as_bytes());
    if token.accepts(header) {
        return Ok(response);
    }
    let mut reject = ErrorResponse::new(Some("invalid or missing bearer token\n".to_owned()));
    *reject.status_mut() = StatusCode::UNAUTHORIZED;
    Err(reject)
}

/// A request in flight, as far as the connection must reach it again.
enum InFlight {
    Exec(Arc<CancelHandle>),
    Upload(mpsc::Sender<UploadEvent>),
    Download(Arc<Notify>),
}

type InFlightMap = Arc<Mutex<HashMap<u64, InFlight>>>;

struct Session {
    shared: Arc<Shared>,
    out: mpsc::Sender<Message>,
    in_flight: InFlightMap,
    /// A `hello` was answered; before it only `hello` is served.
    greeted: bool,
}

impl Session {
    async fn on_text(&mut self, text: &str) {
        if text.len() > MAX_TEXT_MESSAGE {
            let message =
                format!("text message of {} bytes exceeds the limit of {MAX_TEXT_MESSAGE}", text.len());
            return self.reply_error(None, ErrorCode::FrameTooLarge, message).await;
        }
        let message = match decode_client(text) {
            Ok(message) => message,
            Err(err) => return self.send(err.into_reply()).await,
        };
        let id = message.id();
        if !self.greeted && !matches!(message, ClientMessage::Hello(_)) {
            return self.reply_error(Some(id), ErrorCode::HandshakeRequired, "send `hello` first").await;
        }
        match message {
            ClientMessage::Hello(hello) => {
                if !hello.versions.contains(&PROTOCOL_VERSION) {
                    let message = format!(
                        "this agentd speaks protocol version {PROTOCOL_VERSION}, offered {:?}",
                        hello.versions
                    );
                    return self.reply_error(Some(id), ErrorCode::UnsupportedVersion, message).await;
                }
                self.greeted = true;
                let reply = HelloReply {
                    id,
                    version: PROTOCOL_VERSION,
                    agentd_version: env!("CARGO_PKG_VERSION").to_owned(),
                    workspace: self.shared.executor.workspace().to_string_lossy().into_owned(),
                    pid: std::process::id(),
                    max_text_message: MAX_TEXT_MESSAGE as u64,
                    max_binary_message: MAX_BINARY_MESSAGE as u64,
                    landlock_abi: self.shared.confiner.landlock_abi(),
                    profile: self.shared.profiled.then(|| self.shared.confiner.capability()),
                };
                self.send(ServerMessage::Hello(reply)).await;
            }
            ClientMessage::Exec(request) => self.exec(request).await,
            ClientMessage::Fs(message) => {
                let (out, shared) = (self.out.clone(), Arc::clone(&self.shared));
                tokio::spawn(async move {
                    // The verbs do blocking file IO: keep it off the connection's runtime thread.
                    let response = tokio::task::spawn_blocking(move || {
                        crate::fs::run(message.request, &shared.workspace)
                    })
                    .await;
                    let reply = match response {
                        Ok(response) => ServerMessage::FsResult(FsReply { id, result: response }),
                        Err(err) => ServerMessage::Error(ErrorReply {
                            id: Some(id),
                            code: ErrorCode::Internal,
                            message: format!("file verb failed: {err}"),
                        }),
                    };
                    let _ = out.send(Message::text(reply.to_json())).await;
                });
            }
            ClientMessage::Cancel(request) => {
                let found = match self.lock().get(&request.target) {
                    Some(InFlight::Exec(cancel)) => {
                        cancel.cancel();
                        true
                    }
                    Some(InFlight::Upload(events)) => {
                        // Queued behind chunks if need be; the reader must not wait for the disk here.
                        let events = events.clone();
                        tokio::spawn(
                            async move { events.send(UploadEvent::Abort("cancelled".to_owned())).await },
                        );
                        true
                    }
                    Some(InFlight::Download(cancel)) => {
                        cancel.notify_one();
                        true
                    }
                    None => false,
                };
                self.send(ServerMessage::CancelResult(CancelResult { id, target: request.target, found }))
                    .await;
            }
            ClientMessage::Upload(request) => {
                let dest = transfer::destination(&self.shared.workspace, &request.path);
                let (events, rx) = mpsc::channel(UPLOAD_QUEUE);
                if !self.register(id, InFlight::Upload(events)).await {
                    return;
                }
                let (out, in_flight) = (self.out.clone(), Arc::clone(&self.in_flight));
                tokio::spawn(async move {
                    let error = transfer::upload(dest, request.mode, rx).await;
                    finish(&in_flight, id);
                    let reply = ServerMessage::UploadResult(UploadResult { id, path: request.path, error });
                    let _ = out.send(Message::text(reply.to_json())).await;
                });
            }
            ClientMessage::UploadEnd(end) => {
                let events = match self.lock().get(&id) {
                    Some(InFlight::Upload(events)) => Some(events.clone()),
                    _ => None,
                };
                match events {
                    Some(events) => {
                        let _ = events.send(UploadEvent::End { sha256: end.sha256 }).await;
                    }
                    None => {
                        self.reply_error(Some(id), ErrorCode::UnknownId, "no upload in progress with this id")
                            .await
                    }
                }
            }
            ClientMessage::Download(request) => {
                let source = transfer::destination(&self.shared.workspace, &request.path);
                let cancel = Arc::new(Notify::new());
                if !self.register(id, InFlight::Download(Arc::clone(&cancel))).await {
                    return;
                }
                let (out, in_flight) = (self.out.clone(), Arc::clone(&self.in_flight));
                tokio::spawn(async move {
                    let result = transfer::download(id, request.path, source, out.clone(), cancel).await;
                    finish(&in_flight, id);
                    let _ = out.send(Message::text(ServerMessage::DownloadResult(result).to_json())).await;
                });
            }
        }
    }

    async fn on_binary(&mut self, data: Bytes) {
        let (id, _) = match chunk::decode(&data) {
            Ok(decoded) => decoded,
            Err(err) => {
                return self.reply_error(None, ErrorCode::MalformedFrame, err.to_string()).await;
            }
        };
        let events = match self.lock().get(&id) {
            Some(InFlight::Upload(events)) => Some(events.clone()),
            _ => None,
        };
        let Some(events) = events else {
            return self
                .reply_error(
                    Some(id),
                    ErrorCode::UnknownId,
                    "binary chunk for an id with no upload in progress",
                )
                .await;
        };
        let event = if data.len() > MAX_BINARY_MESSAGE {
            UploadEvent::Abort(format!(
                "frame_too_large: chunk of {} bytes exceeds the limit of {MAX_BINARY_MESSAGE}",
                data.len()
            ))
        } else {
            // The payload is a view into the received message: no copy.
            UploadEvent::Data(data.slice(chunk::HEADER_LEN..))
        };
        // Waiting here is the upload's backpressure: the socket is not read faster than the disk.
        let _ = events.send(event).await;
    }

    async fn exec(&mut self, request: ExecRequest) {
        let (id, stream) = (request.id, request.stream);
        let spec = match self.exec_spec(request) {
            Ok(spec) => spec,
            Err(err) => return self.send(err.into_reply()).await,
        };
        let cancel = Arc::new(CancelHandle::default());
        if !self.register(id, InFlight::Exec(Arc::clone(&cancel))).await {
            return;
        }
        let (out, in_flight, shared) =
            (self.out.clone(), Arc::clone(&self.in_flight), Arc::clone(&self.shared));
        tokio::spawn(async move {
            let (started, live, forwarder) = if stream {
                let (started_tx, started_rx) = oneshot::channel();
                let (live_tx, live_rx) = mpsc::channel(LIVE_QUEUE);
                let forwarder = tokio::spawn(forward_live(id, started_rx, live_rx, out.clone()));
                (Some(started_tx), Some(live_tx), Some(forwarder))
            } else {
                (None, None, None)
            };
            let result = shared.executor.run(spec, &cancel, started, live).await;
            if let Some(forwarder) = forwarder {
                // Every chunk goes out before the result.
                let _ = forwarder.await;
            }
            finish(&in_flight, id);
            let reply = match result {
                Ok(mut result) => {
                    result.id = id;
                    ServerMessage::ExecResult(result)
                }
                Err(err) => ServerMessage::Error(ErrorReply {
                    id: Some(id),
                    code: match err {
                        ExecError::NotEnforceable(_) => ErrorCode::NotEnforceable,
                        _ if err.is_spawn_failure() => ErrorCode::SpawnFailed,
                        _ => ErrorCode::Internal,
                    },
                    message: err.to_string(),
                }),
            };
            let _ = out.send(Message::text(reply.to_json())).await;
        });
    }

    fn exec_spec(&self, request: ExecRequest) -> Result<ExecSpec, DecodeError> {
        let invalid = |message: &str| DecodeError::new(Some(request.id), ErrorCode::InvalidField, message);
        let refused =
            |code: ErrorCode, err: ConfineError| DecodeError::new(Some(request.id), code, err.to_string());
        // The profile for this command: the server's (if any), tightened by the request's.
        let profile = if self.shared.profiled || request.profile.is_some() {
            let confiner = &self.shared.confiner;
            let profile = confiner
                .effective(request.profile.as_deref())
                .map_err(|e| refused(ErrorCode::ProfileViolation, e))?;
            Confiner::check_command(&profile, &request.command)
                .map_err(|e| refused(ErrorCode::ProfileViolation, e))?;
            Some(profile)
        } else {
            None
        };
        let max_timeout = profile.as_ref().and_then(|p| p.max_timeout);
        let default_timeout = match profile.as_ref().and_then(|p| p.default_timeout) {
            Some(seconds) => Some(Duration::from_secs_f64(seconds)),
            // The server's default never exceeds the profile's maximum.
            None => match (self.shared.default_timeout, max_timeout) {
                (Some(default), Some(max)) => Some(default.min(Duration::from_secs_f64(max))),
                (None, Some(max)) => Some(Duration::from_secs_f64(max)),
                (default, None) => default,
            },
        };
        let timeout = match request.timeout {
            None => default_timeout,
            Some(t) if !t.is_finite() || !(0.0..=1e9).contains(&t) => {
                return Err(invalid("`timeout` must be a number of seconds between 0 and 1e9 (0: no limit)"));
            }
            Some(0.0) => None,
            Some(t) => Some(Duration::from_secs_f64(t)),
        };
        if let Some(max) = max_timeout {
            let asked = timeout.map_or(f64::INFINITY, |t| t.as_secs_f64());
            if asked > max {
                let message = format!("a timeout of {asked} s is above the profile's max_timeout of {max} s");
                return Err(DecodeError::new(Some(request.id), ErrorCode::ProfileViolation, message));
            }
        }
        let stdin = match &request.stdin_base64 {
            None => None,
            Some(b64) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| invalid(&format!("`stdin_base64` is not valid base64: {e}")))?,
            ),
        };
        let max_capture_bytes = request.max_capture_bytes.unwrap_or(DEFAULT_MAX_CAPTURE_BYTES);
        if max_capture_bytes == 0 {
            return Err(invalid("`max_capture_bytes` must be at least 1"));
        }
        let mode = match request.offload {
            None => CaptureMode::Inline,
            Some(offload) if offload.capture_path.is_empty() || offload.capture_path.contains('\0') => {
                return Err(invalid("`offload.capture_path` must be a non-empty path without NUL"));
            }
            Some(offload) => {
                CaptureMode::Offload { path: offload.capture_path, inline_budget: offload.inline_budget }
            }
        };
        if request.command.contains('\0')
            || request.env.iter().any(|(k, v)| k.contains(['\0', '=']) || k.is_empty() || v.contains('\0'))
        {
            return Err(invalid(
                "`command` and `env` must not contain NUL, and env names must not be empty or contain `=`",
            ));
        }
        let confined = match profile {
            None => None,
            Some(profile) => {
                let plan = self.shared.confiner.plan(&profile).map_err(|e| match e {
                    ConfineError::NotEnforceable { .. } => refused(ErrorCode::NotEnforceable, e),
                    _ => refused(ErrorCode::Internal, e),
                })?;
                Some(Confined {
                    plan,
                    env_allowlist: profile.env_allowlist,
                    fixed_env: profile.env,
                    limits: profile.limits,
                })
            }
        };
        Ok(ExecSpec {
            confined,
            command: request.command,
            cwd: request.cwd,
            env: request.env,
            timeout,
            stdin,
            max_capture_bytes,
            mode,
        })
    }

    /// Records a new request; answers `duplicate_id` or `too_many_requests` and returns false if it can't.
    async fn register(&mut self, id: u64, entry: InFlight) -> bool {
        let refusal = {
            let mut in_flight = self.lock();
            if in_flight.contains_key(&id) {
                Some((ErrorCode::DuplicateId, format!("request id {id} is already in flight")))
            } else if in_flight.len() >= MAX_IN_FLIGHT {
                Some((
                    ErrorCode::TooManyRequests,
                    format!("at most {MAX_IN_FLIGHT} requests may be in flight per connection"),
                ))
            } else {
                in_flight.insert(id, entry);
                None
            }
        };
        match refusal {
            Some((code, message)) => {
                self.reply_error(Some(id), code, message).await;
                false
            }
            None => true,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, InFlight>> {
        self.in_flight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn reply_error(&self, id: Option<u64>, code: ErrorCode, message: impl Into<String>) {
        self.send(ServerMessage::Error(ErrorReply { id, code, message: message.into() })).await;
    }

    async fn send(&self, message: ServerMessage) {
        let _ = self.out.send(Message::text(message.to_json())).await;
    }

    /// The connection is gone: stop everything it started. Dropping an upload's sender ends it
    /// without a result, which removes its temporary file.
    fn close(&self) {
        let entries: Vec<(u64, InFlight)> = self.lock().drain().collect();
        for (_, entry) in entries {
            match entry {
                InFlight::Exec(cancel) => cancel.cancel(),
                InFlight::Upload(events) => drop(events),
                InFlight::Download(cancel) => cancel.notify_one(),
            }
        }
    }
}

/// Removes a finished request before its terminal reply goes out, so the client may reuse the id.
fn finish(in_flight: &InFlightMap, id: u64) {
    in_flight.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
}

/// Sends `exec_started`, then each live chunk, of a streamed exec.
async fn forward_live(
    id: u64,
    started: oneshot::Receiver<u32>,
    mut live: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<Message>,
) {
    if let Ok(pid) = started.await {
        let _ = out.send(Message::text(ServerMessage::ExecStarted(ExecStarted { id, pid }).to_json())).await;
    }
    while let Some(data) = live.recv().await {
        let _ = out.send(Message::binary(chunk::encode(id, &data))).await;
    }
}
