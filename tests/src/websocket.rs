//! A raw websocket client for agentd, without the host library: malformed input, frames by hand,
//! replies as JSON.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::{Message, http::HeaderValue};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::daemon::Daemon;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens a websocket with an optional bearer token, without the protocol handshake.
pub async fn raw_connect(
    url: &str,
    token: Option<&str>,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut request = url.into_client_request()?;
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).expect("header"));
    }
    Ok(tokio_tungstenite::connect_async(request).await?.0)
}

pub async fn send_text(ws: &mut Ws, text: impl Into<String>) {
    ws.send(Message::text(text.into())).await.expect("send");
}

/// A connection to `daemon` that said `hello`.
pub async fn greeted(daemon: &Daemon) -> Ws {
    let mut ws = raw_connect(&daemon.url, Some(&daemon.token)).await.expect("connect");
    send_text(&mut ws, serde_json::json!({"type": "hello", "id": 0, "versions": [1]}).to_string()).await;
    let hello = recv_json(&mut ws).await;
    assert_eq!(hello["type"], "hello", "{hello}");
    ws
}

/// Sends `message` and returns the next text reply.
pub async fn ask(ws: &mut Ws, message: serde_json::Value) -> serde_json::Value {
    send_text(ws, message.to_string()).await;
    recv_json(ws).await
}

/// The next text message as JSON (binary messages are skipped), within 30 s.
pub async fn recv_json(ws: &mut Ws) -> serde_json::Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.next()).await.expect("reply in time");
        match frame.expect("open").expect("frame") {
            Message::Text(text) => return serde_json::from_str(text.as_str()).expect("json"),
            _ => continue,
        }
    }
}
