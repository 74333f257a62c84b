//! `pods/{name}/exec` over a websocket, on the Kubernetes channel protocols:
//!
//! - `GET|POST /api/v1/namespaces/{ns}/pods/{name}/exec?command=a&command=b&stdin=true&stdout=true&stderr=true&tty=false&container=c`,
//!   upgraded to a websocket whose subprotocol is the first the server supports among those the
//!   client offers, in the server's order: `v5.channel.k8s.io`, `v4.channel.k8s.io`,
//!   `v3.channel.k8s.io`, `v2.channel.k8s.io`, `channel.k8s.io` (none offered: `channel.k8s.io`).
//! - Binary frames whose first byte is the channel: 0 stdin, 1 stdout, 2 stderr, 3 error, 4
//!   resize (`{"Width":W,"Height":H}`, v3 and later). The server first sends an empty frame on the
//!   lowest output channel it will write (stdout, else stderr, else error), as the kubelet does.
//! - The end: on channel 3, v4 and v5 send a `Status` (`{"metadata":{},"status":"Success"}`, or
//!   `Failure` with reason `NonZeroExitCode` and `details.causes[{"reason":"ExitCode","message":"N"}]`);
//!   earlier versions send nothing on success and the error text otherwise. Then a close frame.
//! - v5 adds the close signal: the client's frame `[255, 0]` closes the command's stdin (EOF).
//!
//! The command runs under `docker exec` (the Docker API, attached), bytes bridged both ways with
//! backpressure: a frame is read from one side only once the other took the previous one, so a
//! command that writes gigabytes waits for the client instead of growing the fake's memory.
//!
//! A websocket that drops (the client goes, or [`super::FakeKube::drop_exec_streams`] cuts it)
//! kills nothing: the command's stdin reaches EOF and its output streams are closed, so it runs
//! on until it ends by itself or is killed by SIGPIPE on its next write (as under a real kubelet).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use futures_util::{SinkExt as _, StreamExt as _};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, frame::coding::CloseCode};

use super::Shared;
use super::call::{Call, error_response};
use super::resource::ResourceKey;
use super::status::ApiError;

/// The subprotocols served, preferred first.
pub const PROTOCOLS: [&str; 5] =
    ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
/// v5's close signal: `[CLOSE, channel]`.
const CLOSE: u8 = 255;

/// The exec websockets open, and the switch that cuts them all.
#[derive(Default)]
pub struct Streams {
    open: AtomicUsize,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Streams {
    /// Cuts every open exec websocket; how many were open.
    pub fn cut(&self) -> usize {
        let open = self.open.load(Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
        open
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

/// Counts an open stream while it lives.
struct OpenGuard<'a>(&'a AtomicUsize);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Protocol version (1 for `channel.k8s.io`, 2…5 for `vN.channel.k8s.io`).
fn version_of(protocol: &str) -> u8 {
    protocol
        .strip_prefix('v')
        .and_then(|rest| rest.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// What was asked for.
struct Request {
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

/// Checks the pod and the request (the apiserver's and kubelet's 400/404 answers come before any
/// upgrade), then upgrades and runs the session.
pub async fn serve(shared: Arc<Shared>, namespace: &str, name: &str, call: Call) -> Response {
    match prepare(&shared, namespace, name, &call) {
        Ok((container_id, request, protocol)) => upgrade(shared, call, container_id, request, protocol),
        Err(error) => error_response(&error),
    }
}

fn prepare(
    shared: &Shared,
    namespace: &str,
    name: &str,
    call: &Call,
) -> Result<(String, Request, Option<&'static str>), ApiError> {
    let pod = shared.store.get(&ResourceKey::core("pods"), namespace, name)?;
    let upgrade = call.headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if upgrade.eq_ignore_ascii_case("SPDY/3.1") {
        return Err(ApiError::bad_request(
            "fake-kube serves exec over websockets only (v5.channel.k8s.io, v4.channel.k8s.io, channel.k8s.io); \
             SPDY/3.1 is not supported"
                .into(),
        ));
    }
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return Err(ApiError::bad_request("Upgrade request required".into()));
    }
    if pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(format!("pod {name} does not have a host assigned")));
    }
    let container = super::pods::pick_container(&pod, call.param("container"))?;
    let request = Request {
        command: call.params("command"),
        stdin: call.flag("stdin"),
        stdout: call.flag("stdout"),
        stderr: call.flag("stderr"),
        tty: call.flag("tty"),
    };
    if request.command.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command".into()));
    }
    if !(request.stdin || request.stdout || request.stderr) {
        return Err(ApiError::bad_request("you must specify at least 1 of stdin, stdout, stderr".into()));
    }
    let (running, _) = super::pods::container_state(&pod, &container);
    let id = shared.kubelet.container_of(namespace, name, &container).filter(|_| running);
    let Some(id) = id else {
        return Err(ApiError::bad_request(format!("container not found ({container:?})")));
    };
    let offered: Vec<String> = call
        .headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_owned()))
        .filter(|p| !p.is_empty())
        .collect();
    let protocol = if offered.is_empty() {
        None
    } else {
        let chosen = PROTOCOLS.iter().find(|p| offered.iter().any(|o| o == *p)).copied();
        if chosen.is_none() {
            return Err(ApiError::bad_request(format!(
                "requested protocol(s) are not supported: {offered:?}; supports {PROTOCOLS:?}"
            )));
        }
        chosen
    };
    Ok((id, request, protocol))
}

fn upgrade(
    shared: Arc<Shared>,
    call: Call,
    container: String,
    request: Request,
    protocol: Option<&'static str>,
) -> Response {
    let Some(key) = call.headers.get(header::SEC_WEBSOCKET_KEY).map(|k| k.as_bytes().to_vec()) else {
        return error_response(&ApiError::bad_request("Sec-WebSocket-Key is missing".into()));
    };
    let mut http = call.request;
    let on_upgrade = hyper::upgrade::on(&mut http);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        session(shared, ws, container, request, version_of(protocol.unwrap_or("channel.k8s.io"))).await;
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(protocol) = protocol {
        headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    }
    response
}

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::binary(bytes)
}

/// The status frame's payload for an exit code (None: the command could not run, `message`).
fn status_payload(version: u8, command: &[String], exit: Result<i64, String>) -> Option<Vec<u8>> {
    let failure = match &exit {
        Ok(0) => None,
        Ok(code) => Some(format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            command.join(" ")
        )),
        Err(message) => Some(message.clone()),
    };
    if version < 4 {
        return failure.map(String::into_bytes);
    }
    let status = match (exit, failure) {
        (Ok(0), _) | (_, None) => json!({"metadata": {}, "status": "Success"}),
        (Ok(code), Some(message)) => json!({
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        (Err(_), Some(message)) => json!({
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        }),
    };
    Some(status.to_string().into_bytes())
}

async fn session(shared: Arc<Shared>, ws: Ws, container: String, request: Request, version: u8) {
    shared.exec_streams.open.fetch_add(1, Ordering::SeqCst);
    let _open = OpenGuard(&shared.exec_streams.open);
    let mut cut = shared.exec_streams.cut.subscribe();
    let (mut sink, mut source) = ws.split();
    let docker = match shared.kubelet.docker() {
        Ok(docker) => docker,
        Err(error) => {
            finish(&mut sink, version, &request.command, Err(error.message)).await;
            return;
        }
    };
    let exec = docker
        .create_exec(
            &container,
            CreateExecOptions {
                attach_stdin: Some(request.stdin),
                attach_stdout: Some(request.stdout),
                attach_stderr: Some(request.stderr && !request.tty),
                tty: Some(request.tty),
                cmd: Some(request.command.clone()),
                ..CreateExecOptions::default()
            },
        )
        .await;
    let exec_id = match exec {
        Ok(exec) => exec.id,
        Err(err) => {
            finish(
                &mut sink,
                version,
                &request.command,
                Err(format!("container not found ({container:?}): {err}")),
            )
            .await;
            return;
        }
    };
    let started = docker
        .start_exec(
            &exec_id,
            Some(StartExecOptions { detach: false, tty: request.tty, output_capacity: None }),
        )
        .await;
    let (mut output, input) = match started {
        Ok(StartExecResults::Attached { output, input }) => (output, input),
        Ok(StartExecResults::Detached) => {
            finish(&mut sink, version, &request.command, Err("the exec did not attach".into())).await;
            return;
        }
        Err(err) => {
            finish(&mut sink, version, &request.command, Err(err.to_string())).await;
            return;
        }
    };
    let first = if request.stdout {
        STDOUT
    } else if request.stderr && !request.tty {
        STDERR
    } else {
        ERROR
    };
    if sink.send(frame(first, &[])).await.is_err() {
        return;
    }

    // Client → command: stdin, v5's close signal, resizes. Ends when the client's side does.
    let tty = request.tty;
    let inbound = {
        let docker = docker.clone();
        let exec_id = exec_id.clone();
        async move {
            let mut input = Some(input);
            while let Some(Ok(message)) = source.next().await {
                // Text frames carry the same channel bytes (the Python client sends stdin as text);
                // the real server reads both kinds alike.
                let data = match message {
                    Message::Binary(data) => data,
                    Message::Text(text) => axum::body::Bytes::copy_from_slice(text.as_bytes()),
                    Message::Close(_) => break,
                    _ => continue,
                };
                match data.first().copied() {
                    Some(STDIN) => {
                        if let Some(writer) = input.as_mut()
                            && writer.write_all(&data[1..]).await.is_err()
                        {
                            input = None;
                        }
                    }
                    Some(CLOSE) if version >= 5 && data.get(1) == Some(&STDIN) => {
                        if let Some(mut writer) = input.take() {
                            let _ = writer.shutdown().await;
                        }
                    }
                    Some(RESIZE) if tty && version >= 3 => {
                        let size: Value = serde_json::from_slice(&data[1..]).unwrap_or(Value::Null);
                        let dimension = |key: &str| {
                            size.get(key).and_then(Value::as_u64).and_then(|n| u16::try_from(n).ok())
                        };
                        if let (Some(width), Some(height)) = (dimension("Width"), dimension("Height")) {
                            let _ = docker.resize_exec(&exec_id, ResizeExecOptions { width, height }).await;
                        }
                    }
                    _ => {}
                }
            }
            // The client is gone (or closed): the command's stdin ends.
            if let Some(mut writer) = input.take() {
                let _ = writer.shutdown().await;
            }
        }
    };
    // Command → client, then the status and the close.
    let outbound = async move {
        while let Some(item) = output.next().await {
            let message = match item {
                Ok(bollard::container::LogOutput::StdOut { message }) => frame(STDOUT, &message),
                Ok(bollard::container::LogOutput::Console { message }) => frame(STDOUT, &message),
                Ok(bollard::container::LogOutput::StdErr { message }) => frame(STDERR, &message),
                Ok(bollard::container::LogOutput::StdIn { .. }) => continue,
                Err(_) => break,
            };
            if sink.send(message).await.is_err() {
                return;
            }
        }
        let exit = exit_code(&docker, &exec_id).await;
        finish(&mut sink, version, &request.command, exit).await;
    };
    tokio::pin!(inbound);
    tokio::pin!(outbound);
    let mut inbound_done = false;
    loop {
        tokio::select! {
            // Cut: return without a close frame; dropping the halves closes the connection.
            _ = cut.changed() => return,
            () = &mut outbound => return,
            () = &mut inbound, if !inbound_done => inbound_done = true,
        }
    }
}

/// The exec's exit code once Docker has it.
async fn exit_code(docker: &bollard::Docker, exec_id: &str) -> Result<i64, String> {
    for _ in 0..100 {
        match docker.inspect_exec(exec_id).await {
            Ok(inspect) if inspect.running != Some(true) => {
                return inspect.exit_code.ok_or_else(|| "the command's exit code is unknown".to_owned());
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(err) => return Err(err.to_string()),
        }
    }
    Err("the command did not end after its output did".into())
}

/// Sends the status on the error channel (when there is one to send) and a normal close.
async fn finish<S>(sink: &mut S, version: u8, command: &[String], exit: Result<i64, String>)
where
    S: futures_util::Sink<Message> + Unpin,
{
    if let Some(payload) = status_payload(version, command, exit) {
        let _ = sink.send(frame(ERROR, &payload)).await;
    }
    let _ = sink.send(Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() }))).await;
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_frames_follow_the_protocol_versions() {
        let command = vec!["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        let ok: Value = serde_json::from_slice(&status_payload(5, &command, Ok(0)).unwrap()).unwrap();
        assert_eq!(ok, json!({"metadata": {}, "status": "Success"}));
        let failed: Value = serde_json::from_slice(&status_payload(4, &command, Ok(3)).unwrap()).unwrap();
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"], json!([{"reason": "ExitCode", "message": "3"}]));
        assert_eq!(status_payload(1, &command, Ok(0)), None);
        assert!(
            String::from_utf8(status_payload(1, &command, Ok(3)).unwrap()).unwrap().contains("exit code 3")
        );
        assert_eq!(version_of("v5.channel.k8s.io"), 5);
        assert_eq!(version_of("channel.k8s.io"), 1);
    }
}
