//! An agentd that lies: a websocket server on loopback that misbehaves in one chosen way, for the
//! tests of what the host does when the sandbox has replaced agentd (docs/security.md, "The host against a hostile sandbox").
//! It speaks just enough of the protocol to reach the misbehaviour, and records nothing.
//!
//! Standalone as the `evil-agentd` binary (the Python tests start it): `evil-agentd MODE` prints
//! `ws://127.0.0.1:PORT` and serves until killed.

use std::net::SocketAddr;
use std::time::Duration;

use agentd_protocol::process::ProcessesResult;
use agentd_protocol::{
    DownloadResult, DownloadStart, ExecResult, HelloReply, PROTOCOL_VERSION, ProcessInfo, ServerMessage,
    chunk,
};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::ServerThread;

/// How the server misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evil {
    /// Accepts TCP connections and never answers the HTTP upgrade.
    NoUpgrade,
    /// Completes the upgrade and never answers `hello`.
    NoHello,
    /// Answers `hello`, then no request at all.
    Mute,
    /// Answers every request with a message of a type no client knows, carrying the request's id.
    Garbage,
    /// Answers a download with `size: 10`, then chunks without end.
    EndlessDownload,
    /// Announces a download of 2 GiB and sends it all (the honest part is the size).
    HugeDownload,
    /// Sends a download's data before announcing its size.
    ChunkFirst,
    /// Answers every request with one binary chunk of 8 MiB (agentd's are at most 4 MiB).
    HugeChunk,
    /// Answers every request with a 64 MiB text message (agentd's replies are at most 16 MiB).
    HugeText,
    /// Answers each `exec` twice (two results), then a result for an id never asked, then keeps
    /// answering normally: the first answer counts, the rest are dropped.
    DoubleReply,
    /// Answers every `processes` page with one process and a `next` page, without end.
    EndlessPages,
}

impl Evil {
    /// Every mode, with the name the binary takes.
    pub const ALL: [(&'static str, Evil); 11] = [
        ("no-upgrade", Evil::NoUpgrade),
        ("no-hello", Evil::NoHello),
        ("mute", Evil::Mute),
        ("garbage", Evil::Garbage),
        ("endless-download", Evil::EndlessDownload),
        ("huge-download", Evil::HugeDownload),
        ("chunk-first", Evil::ChunkFirst),
        ("huge-chunk", Evil::HugeChunk),
        ("huge-text", Evil::HugeText),
        ("double-reply", Evil::DoubleReply),
        ("endless-pages", Evil::EndlessPages),
    ];

    pub fn from_name(name: &str) -> Option<Evil> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, evil)| *evil)
    }
}

/// A running evil agentd; dropping it stops it.
pub struct EvilAgentd {
    addr: SocketAddr,
    _thread: ServerThread,
}

impl EvilAgentd {
    pub fn start(evil: Evil) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let thread = ServerThread::spawn("evil-agentd", move || async move {
            let Ok(listener) = TcpListener::from_std(listener) else { return };
            // Held so that a `NoUpgrade` connection stays open, unanswered.
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                if evil == Evil::NoUpgrade {
                    held.push(stream);
                } else {
                    tokio::spawn(serve(stream, evil));
                }
            }
        })?;
        Ok(Self { addr, _thread: thread })
    }

    /// `ws://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }
}

async fn serve(stream: TcpStream, evil: Evil) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else { return };
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else { continue };
        let Ok(request) = serde_json::from_str::<Value>(text.as_str()) else { continue };
        let id = request["id"].as_u64().unwrap_or(0);
        let kind = request["type"].as_str().unwrap_or_default().to_owned();
        if kind == "hello" {
            if evil != Evil::NoHello {
                let hello = HelloReply {
                    id,
                    version: PROTOCOL_VERSION,
                    agentd_version: "0.0.0-evil".to_owned(),
                    workspace: "/".to_owned(),
                    pid: std::process::id(),
                    ..HelloReply::default()
                };
                let _ = ws.send(Message::text(ServerMessage::Hello(hello).to_json())).await;
            }
            continue;
        }
        let from = request["from"].as_u64().unwrap_or(0);
        if answer(&mut ws, evil, id, &kind, from).await.is_err() {
            return;
        }
    }
}

type Sent = Result<(), tokio_tungstenite::tungstenite::Error>;

/// What `evil` answers to request `id` of type `kind` (`from`: a `processes` page's start).
async fn answer(ws: &mut WebSocketStream<TcpStream>, evil: Evil, id: u64, kind: &str, from: u64) -> Sent {
    match evil {
        Evil::NoUpgrade | Evil::NoHello | Evil::Mute => Ok(()),
        Evil::Garbage => ws.send(Message::text(json!({"type": "surprise", "id": id}).to_string())).await,
        Evil::EndlessDownload | Evil::HugeDownload | Evil::ChunkFirst if kind == "download" => {
            let size: u64 = if evil == Evil::HugeDownload { 2 << 30 } else { 10 };
            if evil != Evil::ChunkFirst {
                ws.send(start(id, size)).await?;
            }
            let piece = tokio_tungstenite::tungstenite::Bytes::from(chunk::encode(id, &[b'x'; 256 * 1024]));
            let mut sent = 0u64;
            while evil != Evil::HugeDownload || sent < size {
                ws.feed(Message::binary(piece.clone())).await?;
                sent += 256 * 1024;
                if evil == Evil::ChunkFirst && sent == 256 * 1024 {
                    ws.send(start(id, size)).await?;
                }
            }
            ws.flush().await?;
            let result =
                DownloadResult { id, path: "/x".to_owned(), error: None, sha256: None, size: Some(sent) };
            ws.send(Message::text(ServerMessage::DownloadResult(result).to_json())).await
        }
        Evil::EndlessDownload | Evil::HugeDownload | Evil::ChunkFirst => Ok(()),
        Evil::HugeChunk => ws.send(Message::binary(chunk::encode(id, &vec![0u8; 8 << 20]))).await,
        Evil::HugeText => {
            // Built by hand: serializing 64 MiB through serde takes seconds in a debug build.
            let mut text = format!(r#"{{"type":"fs_result","id":{id},"padding":""#);
            text.push_str(&"x".repeat(64 << 20));
            text.push_str(r#""}"#);
            ws.send(Message::text(text)).await
        }
        Evil::DoubleReply if kind == "exec" => {
            for (n, reply_id) in [(1, id), (2, id), (3, id + 1000)] {
                let result = ExecResult {
                    id: reply_id,
                    output: Some(format!("answer {n}\n")),
                    ..ExecResult::default()
                };
                ws.send(Message::text(ServerMessage::ExecResult(result).to_json())).await?;
            }
            Ok(())
        }
        Evil::DoubleReply => Ok(()),
        Evil::EndlessPages if kind == "processes" => {
            let process = ProcessInfo { process: format!("p{from}"), ..ProcessInfo::default() };
            let page = ProcessesResult { id, processes: vec![process], next: Some(from + 1) };
            ws.send(Message::text(ServerMessage::ProcessesResult(page).to_json())).await
        }
        Evil::EndlessPages => Ok(()),
    }
}

fn start(id: u64, size: u64) -> Message {
    Message::text(ServerMessage::DownloadStart(DownloadStart { id, path: "/x".to_owned(), size }).to_json())
}

/// How long a test waits on a misbehaving server before it calls the client hung.
pub const HUNG: Duration = Duration::from_secs(60);
