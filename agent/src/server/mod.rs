//! The websocket server: authentication on the upgrade, then one [`Session`] per connection that
//! dispatches requests by id, many in flight at once.
//!
//! Each request runs in its own task and answers through the connection's outgoing queue, so a slow
//! exec never delays another. Bad input is answered with an `error` reply and the connection stays
//! up. Every request of every kind is in the connection's [`Requests`] (duplicate ids, caps, cancel
//! and disconnect reach them all). When a connection closes, its running execs are killed, its
//! unfinished uploads removed and its verbs and downloads stopped: no result could be delivered any
//! more, and nothing should be left running unseen.
//!
//! The session only transports: it parses each message, dispatches it and writes the reply. An
//! exec is prepared by [`crate::exec::prepare`] (admit, plan) and run by the [`Executor`]; uploads
//! and downloads are [`transfer`]'s; file verbs are [`crate::fs`]'s.
//!
//! A kept exec (`keep`) is the exception: its connection's end only detaches it, and the process
//! verbs ([`process`]: `attach`, `processes`, `kill`, `wait`, `forget`, stdin, `resize`) reach it
//! from any connection.
//!
//! Connections are budgeted ([`Connections`]): the HTTP upgrade must complete within
//! [`HANDSHAKE_TIMEOUT_SECS`], and a new connection over the budget evicts the oldest one still in
//! its upgrade.

mod process;

use std::sync::Arc;
use std::time::Duration;

use agentd_protocol::fs::FsRequest;
use agentd_protocol::limits::{
    HANDSHAKE_TIMEOUT_SECS, MAX_BINARY_MESSAGE, MAX_BLOCKING_PER_CONNECTION, MAX_INLINE_CAPTURE,
    MAX_TEXT_MESSAGE, MAX_WEBSOCKET_MESSAGE, WEBSOCKET_READ_BUFFER,
};
use agentd_protocol::process::{ProcessDone, ProcessesResult};
use agentd_protocol::{
    CancelResult, ClientMessage, DownloadRequest, ErrorCode, ErrorReply, ExecRequest, ExecStarted, FsReply,
    HelloReply, PROTOCOL_VERSION, ServerMessage, TerminalSize, UploadRequest, chunk, decode_client,
};
use futures_util::StreamExt as _;
use nix::unistd::Pid;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Message};

use crate::admission::ServerPolicy;
use crate::auth::Token;
use crate::cancel::{CANCELLED, Cancel};
use crate::confine::{Confiner, FileWork};
use crate::exec::prepare::{self, Prepared};
use crate::exec::{Executor, Watchers, tree};
use crate::inbound::{LargeMessages, Meter, Metered};
use crate::outbox::{self, Outbox, Room};
use crate::process::{Budget, ProcessError, Processes, Wanted};
use crate::registry::{Admitted, Connections, Global, Handle, Requests, Slot};
use crate::root::Workspace;
use crate::transfer::{self, UploadEvent};

/// Live output chunks queued per streamed exec.
const LIVE_QUEUE: usize = 16;

/// What every connection shares.
pub struct Shared {
    pub executor: Executor,
    /// Set at SIGTERM: sessions close, no exec starts.
    pub shutdown: Cancel,
    /// Every exec by process id, and kept processes after their connection.
    pub processes: Arc<Processes>,
    /// Where file verbs and transfers resolve paths (confined with `--root`).
    pub workspace: Workspace,
    /// The sandbox profile (a permissive one when `--profile` was not given); shared with the
    /// blocking pool, where plans are made.
    pub confiner: Arc<Confiner>,
    /// Where file verbs and transfers do their file work: behind the profile's walls when there is
    /// one ([`FileWork`]).
    pub files: FileWork,
    pub token: Option<Token>,
    /// What a request may do: the server's profile (`--profile`) and default timeout.
    pub policy: ServerPolicy,
    /// Requests in flight across all connections.
    pub global: Arc<Global>,
    /// The connection budget.
    pub connections: Arc<Connections>,
    /// Room for replies queued across all connections.
    pub room: Room,
    /// Permits for large messages being received.
    pub large_messages: LargeMessages,
}

/// Where agentd listens.
pub enum Listener {
    /// TCP: every upgrade must carry the bearer token.
    Tcp(TcpListener),
    /// A Unix socket for a local session (`agentctl up`, `LocalSandbox`): no token; the peer's
    /// process is checked instead, and agentd's own commands are refused.
    Unix(UnixListener),
}

/// Accepts connections until the listener fails.
pub async fn serve(listener: Listener, shared: Arc<Shared>) {
    loop {
        let accepted = match &listener {
            Listener::Tcp(tcp) => tcp.accept().await.map(|(stream, peer)| {
                // Over budget with every connection authenticated: closed unanswered.
                let Some(admitted) = shared.connections.admit() else { return };
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection(
                    stream,
                    peer.to_string(),
                    Peer::Remote,
                    Arc::clone(&shared),
                    admitted,
                ));
            }),
            Listener::Unix(unix) => unix.accept().await.map(|(stream, _)| {
                let Some(admitted) = shared.connections.admit() else { return };
                let shared = Arc::clone(&shared);
                let peer = stream.peer_cred().ok().and_then(|cred| cred.pid());
                let label = peer.map_or("unix socket".to_owned(), |pid| format!("unix socket, pid {pid}"));
                tokio::spawn(async move {
                    let peer = match peer {
                        // Zero: a process of another pid namespace, which cannot be one of ours.
                        Some(pid) => {
                            let pid = Pid::from_raw(pid.max(0));
                            let ours = tokio::task::spawn_blocking(move || tree::is_agentd_descendant(pid));
                            if ours.await.unwrap_or(true) { Peer::OwnCommand } else { Peer::Local }
                        }
                        None => Peer::OwnCommand,
                    };
                    connection(stream, label, peer, shared, admitted).await;
                });
            }),
        };
        if let Err(err) = accepted {
            // EMFILE and friends pass; back off so a full fd table does not spin.
            tracing::warn!("accept failed: {err}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Who is at the other end of a connection, as far as the socket tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// TCP: anyone who can reach the address; the token decides.
    Remote,
    /// A process on this machine that agentd did not start.
    Local,
    /// One of agentd's own commands (or a process it could not identify): it must never drive the
    /// agentd that confines it.
    OwnCommand,
}

/// One connection: the upgrade within [`HANDSHAKE_TIMEOUT_SECS`] (unless a newer connection evicts
/// this one first), then its session. `admitted` holds its place in the budget until it ends.
async fn connection<S>(stream: S, peer: String, who: Peer, shared: Arc<Shared>, mut admitted: Admitted)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    #[expect(clippy::result_large_err, reason = "tungstenite's `Callback` signature")]
    let auth =
        |request: &Request, response: Response| authorize(shared.token.as_ref(), who, request, response);
    let (stream, meter) = Metered::new(stream, shared.large_messages.clone());
    let upgrade = tokio::time::timeout(
        Duration::from_secs(HANDSHAKE_TIMEOUT_SECS),
        tokio_tungstenite::accept_hdr_async_with_config(stream, auth, Some(ws_config())),
    );
    let ws = tokio::select! {
        upgraded = upgrade => match upgraded {
            Ok(Ok(ws)) => ws,
            Ok(Err(err)) => {
                tracing::info!(%peer, "websocket upgrade refused: {err}");
                return;
            }
            Err(_) => {
                tracing::info!(%peer, "no upgrade within {HANDSHAKE_TIMEOUT_SECS} s: closed");
                return;
            }
        },
        () = admitted.evicted() => {
            tracing::info!(%peer, "closed in its upgrade to make room for a newer connection");
            return;
        }
    };
    if !admitted.authenticate() {
        return;
    }
    tracing::debug!(%peer, "connected");
    meter.upgraded();
    meter.completed();
    session(ws, shared, Some(&admitted), Some(meter)).await;
    tracing::debug!(%peer, "disconnected");
    drop(admitted);
}

/// Serves one session over stdin/stdout: websocket frames without the HTTP upgrade, for a channel
/// that is already authenticated (`docker exec -i … agentd serve --stdio`). Returns at EOF.
pub async fn serve_stdio(shared: Arc<Shared>) {
    let io = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(ws_config())).await;
    session(ws, shared, None, None).await;
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WEBSOCKET_READ_BUFFER)
        .max_message_size(Some(MAX_WEBSOCKET_MESSAGE))
        .max_frame_size(Some(MAX_WEBSOCKET_MESSAGE))
}

/// One client's requests until its connection ends: the client closes it, the writer gives up on
/// it, it sends no `hello` within [`HANDSHAKE_TIMEOUT_SECS`], (`admitted`) a newer connection
/// needs its place while it is idle, or agentd shuts down.
async fn session<S>(
    ws: WebSocketStream<S>,
    shared: Arc<Shared>,
    admitted: Option<&Admitted>,
    meter: Option<Meter>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut source) = ws.split();
    let (out, outgoing) = Outbox::new(shared.room.clone());
    let writer = tokio::spawn(outbox::write(sink, outgoing, shared.shutdown.clone()));

    let activity = admitted.map(Admitted::activity);
    let requests = Arc::new(Requests::new(Arc::clone(&shared.global), activity));
    let blocking = Arc::new(Semaphore::new(MAX_BLOCKING_PER_CONNECTION));
    let client = shared.processes.client();
    let mut session = Session { shared, out, requests, blocking, greeted: false, client };
    let evicted = async {
        match admitted {
            Some(admitted) => admitted.evicted().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(evicted);
    let hello_by = tokio::time::sleep(Duration::from_secs(HANDSHAKE_TIMEOUT_SECS));
    tokio::pin!(hello_by);
    let shutdown = session.shared.shutdown.clone();
    let going_away = shutdown.cancelled();
    tokio::pin!(going_away);
    loop {
        let frame = tokio::select! {
            // Every end is checked before the next frame: a client sending without pause is no
            // exception.
            biased;
            // Nothing new starts once agentd is shutting down (the writer sends the close frame).
            () = &mut going_away => None,
            // A writer that gave up (the client stopped reading) ends the session too.
            () = session.out.closed() => None,
            () = &mut evicted => {
                tracing::info!("idle session closed to make room for a newer connection");
                None
            }
            () = &mut hello_by, if !session.greeted => {
                tracing::info!("no hello within {HANDSHAKE_TIMEOUT_SECS} s: closed");
                None
            }
            frame = source.next() => frame,
        };
        let Some(frame) = frame else { break };
        if let Some(meter) = &meter {
            meter.completed();
        }
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
    session.requests.close();
    drop(session);
    let _ = writer.await;
}

/// Accepts the upgrade only from a peer that may drive agentd: never one of agentd's own commands
/// (403), never a web page (an `Origin` header: 403), and with the right bearer token when agentd
/// has one (else 401). Browsers send `Origin` on every websocket upgrade and cannot leave it out, so
/// no page a local browser opens can reach agentd, whatever it guesses.
#[expect(
    clippy::result_large_err,
    reason = "the error type is tungstenite's `Callback` signature, not ours to box"
)]
fn authorize(
    token: Option<&Token>,
    peer: Peer,
    request: &Request,
    response: Response,
) -> Result<Response, ErrorResponse> {
    let refuse = |status: StatusCode, message: &str| {
        let mut reject = ErrorResponse::new(Some(format!("{message}\n")));
        *reject.status_mut() = status;
        Err(reject)
    };
    if peer == Peer::OwnCommand {
        return refuse(StatusCode::FORBIDDEN, "agentd's own commands may not connect to it");
    }
    if request.headers().contains_key("origin") {
        return refuse(StatusCode::FORBIDDEN, "upgrades from web pages (with an Origin header) are refused");
    }
    let Some(token) = token else {
        return Ok(response);
    };
    let header = request.headers().get("authorization").map(|v| v.as_bytes());
    if token.accepts(header) {
        return Ok(response);
    }
    refuse(StatusCode::UNAUTHORIZED, "invalid or missing bearer token")
}

struct Session {
    shared: Arc<Shared>,
    out: Outbox,
    requests: Arc<Requests>,
    /// Permits for this connection's blocking verbs ([`MAX_BLOCKING_PER_CONNECTION`]).
    blocking: Arc<Semaphore>,
    /// A `hello` was answered; before it only `hello` is served.
    greeted: bool,
    /// What this connection's kept processes are counted under: a client is a connection.
    client: u64,
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
                    profile: self.shared.policy.profile.is_some().then(|| self.shared.confiner.capability()),
                    named_processes: true,
                };
                self.send(ServerMessage::Hello(reply)).await;
            }
            ClientMessage::Exec(request) => self.exec(request).await,
            ClientMessage::Attach(request) => self.attach(request).await,
            ClientMessage::Processes(request) => {
                let (processes, next) = self.shared.processes.list(request.from);
                self.send(ServerMessage::ProcessesResult(ProcessesResult { id, processes, next })).await;
            }
            ClientMessage::Kill(request) => self.kill(request).await,
            ClientMessage::Wait(request) => self.wait(request).await,
            ClientMessage::Forget(request) => {
                let reply = match self.shared.processes.forget(&request.process) {
                    Ok(()) => ServerMessage::ForgetResult(ProcessDone { id, process: request.process }),
                    Err(err) => process_error(id, &err),
                };
                self.send(reply).await;
            }
            ClientMessage::WriteStdin(request) => self.write_stdin(request).await,
            ClientMessage::CloseStdin(request) => self.close_stdin(request).await,
            ClientMessage::Resize(request) => {
                let size = TerminalSize { rows: request.rows, cols: request.cols };
                let resized = self.shared.processes.get(&request.process).and_then(|p| p.resize(size));
                let reply = match resized {
                    Ok(()) => ServerMessage::ResizeResult(ProcessDone { id, process: request.process }),
                    Err(err) => process_error(id, &err),
                };
                self.send(reply).await;
            }
            ClientMessage::Fs(message) => self.fs(id, message.request).await,
            ClientMessage::Cancel(request) => {
                let found = self.requests.cancel(request.target);
                self.send(ServerMessage::CancelResult(CancelResult { id, target: request.target, found }))
                    .await;
            }
            ClientMessage::Upload(request) => self.upload(request).await,
            ClientMessage::UploadEnd(end) => match self.requests.upload(id) {
                Some(events) => {
                    let _ = events.send(UploadEvent::End { sha256: end.sha256 }).await;
                }
                None => {
                    self.reply_error(Some(id), ErrorCode::UnknownId, "no upload in progress with this id")
                        .await
                }
            },
            ClientMessage::Download(request) => self.download(request).await,
        }
    }

    async fn on_binary(&mut self, data: Bytes) {
        let (id, _) = match chunk::decode(&data) {
            Ok(decoded) => decoded,
            Err(err) => {
                return self.reply_error(None, ErrorCode::MalformedFrame, err.to_string()).await;
            }
        };
        let Some(events) = self.requests.upload(id) else {
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
        let command = request.command.clone();
        let context = prepare::Context {
            policy: &self.shared.policy,
            confiner: &self.shared.confiner,
            files: &self.shared.files,
            workspace: &self.shared.workspace,
        };
        let Prepared { mut spec, keep, name } = match prepare::prepare(&context, request).await {
            Ok(prepared) => prepared,
            Err(err) => return self.reply_error(Some(id), err.code(), err.to_string()).await,
        };
        if Budget::of(keep) == Budget::Healing {
            // A plain exec's capture: a healing exec reserves nothing of the journals' budget.
            spec.max_capture_bytes = spec.max_capture_bytes.min(MAX_INLINE_CAPTURE);
        }
        let journal_cap = crate::exec::journal_cap(spec.max_capture_bytes);
        let wanted = Wanted { command, keep, pty: spec.pty, journal_cap, name, client: self.client };
        let process = match self.shared.processes.start(wanted) {
            Ok(process) => process,
            Err(err) => return self.reply_error(Some(id), err.code(), err.to_string()).await,
        };
        let cancel = process.cancel.clone();
        let detach = Cancel::default();
        let handle = match keep {
            Some(_) => Handle::Kept { cancel: cancel.clone(), detach: detach.clone() },
            None => Handle::Work(cancel.clone()),
        };
        let Some(slot) = self.register(id, handle).await else {
            process.failed();
            return;
        };
        // The exec's own connection follows it until the connection ends (which only detaches a
        // kept one) or the process does.
        let own = process.attach(true).ok();
        let (out, requests, shared) =
            (self.out.clone(), Arc::clone(&self.requests), Arc::clone(&self.shared));
        tokio::spawn(async move {
            // A kept exec's connection may go first: its attachment goes with it (the grace
            // starts). Any other exec ends with its connection, and its attachment with it.
            let (detached, own) = match keep {
                Some(_) => {
                    let detached = tokio::spawn(async move {
                        detach.cancelled().await;
                        drop(own);
                    });
                    (Some(detached), None)
                }
                None => (None, own),
            };
            let (spawned_tx, spawned_rx) = oneshot::channel();
            let mut watchers = Watchers { spawned: Some(spawned_tx), ..Watchers::default() };
            let forwarder = if stream {
                let (started_tx, started_rx) = oneshot::channel();
                let (live_tx, live_rx) = mpsc::channel(LIVE_QUEUE);
                watchers.started = Some(started_tx);
                watchers.live = Some(live_tx);
                let name = process.id.clone();
                Some(tokio::spawn(forward_live(id, name, started_rx, live_rx, out.clone())))
            } else {
                None
            };
            let running = shared.executor.run(spec, &cancel, watchers, Some(out.room()));
            let follow = async {
                if let Ok(spawned) = spawned_rx.await {
                    let pid = crate::pid::to_wire(spawned.pid);
                    process.spawned(spawned);
                    // A kept exec's client learns its process id at once (to attach again after a
                    // blip), without waiting for the exec itself: if the command then cannot start,
                    // an `error` still ends the request.
                    if keep.is_some() && !stream {
                        let started = ExecStarted { id, pid, process: process.id.clone() };
                        let _ = out.reply(ServerMessage::ExecStarted(started)).await;
                    }
                }
            };
            let (finished, ()) = tokio::join!(running, follow);
            if let Some(forwarder) = forwarder {
                // Every chunk goes out before the result.
                let _ = forwarder.await;
            }
            if let Some(detached) = detached {
                detached.abort();
            }
            drop(own);
            requests.finish(id);
            drop(slot);
            let (reply, reserved) = match finished {
                Ok((mut result, reserved)) => {
                    process.ended(&mut result);
                    result.id = id;
                    (ServerMessage::ExecResult(result), reserved)
                }
                Err(err) => {
                    process.failed();
                    (
                        ServerMessage::Error(ErrorReply {
                            id: Some(id),
                            code: err.code(),
                            message: err.to_string(),
                        }),
                        None,
                    )
                }
            };
            let _ = out.reply_in(reply, reserved).await;
        });
    }

    /// An `upload`: registered with the queue its chunks arrive on, then received.
    async fn upload(&self, request: UploadRequest) {
        let id = request.id;
        let (events, rx) = transfer::upload_queue();
        let Some(slot) = self.register(id, Handle::Upload(events)).await else { return };
        let (out, requests, shared) =
            (self.out.clone(), Arc::clone(&self.requests), Arc::clone(&self.shared));
        tokio::spawn(async move {
            let result = transfer::serve_upload(&shared.files, &shared.workspace, request, rx).await;
            requests.finish(id);
            drop(slot);
            let _ = out.reply(ServerMessage::UploadResult(result)).await;
        });
    }

    /// A `download`: registered, then sent once one of the connection's blocking permits is free.
    async fn download(&self, request: DownloadRequest) {
        let id = request.id;
        let cancel = Cancel::default();
        let Some(slot) = self.register(id, Handle::Work(cancel.clone())).await else { return };
        let (out, requests, shared) =
            (self.out.clone(), Arc::clone(&self.requests), Arc::clone(&self.shared));
        let permits = Arc::clone(&self.blocking);
        tokio::spawn(async move {
            let result = transfer::serve_download(
                &shared.files,
                &shared.workspace,
                request,
                permits,
                out.clone(),
                cancel,
            )
            .await;
            requests.finish(id);
            drop(slot);
            let _ = out.reply(ServerMessage::DownloadResult(result)).await;
        });
    }

    /// Records a new request of any kind; answers `duplicate_id` or `too_many_requests` and returns
    /// `None` if it can't. The slot must live as long as the request's work.
    async fn register(&self, id: u64, handle: Handle) -> Option<Slot> {
        match self.requests.register(id, handle) {
            Ok(slot) => Some(slot),
            Err(refusal) => {
                self.reply_error(Some(id), refusal.code(), refusal.to_string()).await;
                None
            }
        }
    }

    /// A file verb: registered like any request, run on the blocking pool once one of the
    /// connection's permits is free, with a token its loops poll. A verb cancelled before it ran, or
    /// a read-only verb cancelled while it ran, answers `"cancelled"` in its result's `error`;
    /// `write` and `delete` are short and not interrupted once started, and `edit` stops only before
    /// it replaces the file, so they answer what they did.
    async fn fs(&self, id: u64, request: FsRequest) {
        let cancel = Cancel::default();
        let Some(slot) = self.register(id, Handle::Work(cancel.clone())).await else { return };
        let (out, requests, shared) =
            (self.out.clone(), Arc::clone(&self.requests), Arc::clone(&self.shared));
        let permits = Arc::clone(&self.blocking);
        tokio::spawn(async move {
            let verb = request.verb();
            let cancelled = verb.failed(CANCELLED.to_owned());
            let permit = tokio::select! {
                permit = permits.acquire_owned() => permit.ok(),
                () = cancel.cancelled() => None,
            };
            let response = match permit {
                Some(permit) => {
                    let token = cancel.clone();
                    let work = Arc::clone(&shared);
                    let ran = shared
                        .files
                        .run(move || {
                            let response = crate::fs::run(request, &work.workspace, &token);
                            // The slot goes with the work, when it has really ended.
                            drop(slot);
                            response
                        })
                        .await;
                    let response = match ran {
                        Ok(_) if !verb.writes() && cancel.is_cancelled() => Ok(cancelled),
                        ran => ran,
                    };
                    (response, Some(permit))
                }
                None => {
                    drop(slot);
                    (Ok(cancelled), None)
                }
            };
            let (response, permit) = response;
            requests.finish(id);
            let reply = match response {
                Ok(result) => ServerMessage::FsResult(FsReply { id, result }),
                Err(err) => ServerMessage::Error(ErrorReply {
                    id: Some(id),
                    code: ErrorCode::Internal,
                    message: format!("file verb failed: {err}"),
                }),
            };
            let _ = out.reply(reply).await;
            // The permit is held until the reply is queued: a client that does not read its replies
            // has at most MAX_BLOCKING_PER_CONNECTION of them built and waiting for room.
            drop(permit);
        });
    }

    async fn reply_error(&self, id: Option<u64>, code: ErrorCode, message: impl Into<String>) {
        self.send(ServerMessage::Error(ErrorReply { id, code, message: message.into() })).await;
    }

    async fn send(&self, message: ServerMessage) {
        let _ = self.out.reply(message).await;
    }
}

/// The `error` reply of a process verb that could not be done.
fn process_error(id: u64, err: &ProcessError) -> ServerMessage {
    ServerMessage::Error(ErrorReply { id: Some(id), code: err.code(), message: err.to_string() })
}

/// Sends `exec_started`, then each live chunk, of a streamed exec.
async fn forward_live(
    id: u64,
    process: String,
    started: oneshot::Receiver<Pid>,
    mut live: mpsc::Receiver<Vec<u8>>,
    out: Outbox,
) {
    if let Ok(pid) = started.await {
        let pid = crate::pid::to_wire(pid);
        let _ = out.reply(ServerMessage::ExecStarted(ExecStarted { id, pid, process })).await;
    }
    while let Some(data) = live.recv().await {
        let _ = out.binary(chunk::encode(id, &data)).await;
    }
}
