//! The preview proxy: one listener on 127.0.0.1 per (sandbox, port). It reads the HTTP request head
//! (a websocket upgrade, typically), checks the preview token, then pipes bytes both ways to the
//! container's address on the Docker bridge.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::Shared;

/// The request head may not be larger than this.
const MAX_HEAD: usize = 64 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The listener for (`sandbox`, `port`), started on first use: (its port, the current token), or
/// None when the sandbox is unknown.
pub fn ensure_listener(
    shared: &Arc<Shared>,
    sandbox: &str,
    port: u16,
) -> std::io::Result<Option<(u16, String)>> {
    let mut sandboxes = shared.lock_sandboxes();
    let Some(record) = sandboxes.get_mut(sandbox) else {
        return Ok(None);
    };
    if let Some(listen) = record.previews.get(&port) {
        return Ok(Some((*listen, record.preview_token.clone())));
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let listen = listener.local_addr()?.port();
    let listener = TcpListener::from_std(listener)?;
    let (shared, id) = (shared.clone(), sandbox.to_owned());
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // A proxy must not add Nagle's delay to every small websocket reply (~40 ms each).
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(shared.clone(), id.clone(), port, stream));
        }
    });
    record.previews.insert(port, listen);
    record.preview_tasks.push(task.abort_handle());
    Ok(Some((listen, record.preview_token.clone())))
}

async fn respond(mut stream: TcpStream, status: &str, message: &str) {
    let body = serde_json::json!({
        "statusCode": status.split(' ').next().and_then(|c| c.parse::<u16>().ok()).unwrap_or(500),
        "message": message,
    })
    .to_string();
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Reads up to the end of the request head; the bytes read so far (head and whatever followed).
async fn read_head(stream: &mut TcpStream) -> Option<(Vec<u8>, usize)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some((buf, end + 4));
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
    }
}

async fn serve(shared: Arc<Shared>, id: String, port: u16, mut client: TcpStream) {
    let Ok(Some((bytes, head_len))) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await else {
        return;
    };
    let head = String::from_utf8_lossy(&bytes[..head_len]).into_owned();
    let mut lines = head.split("\r\n");
    let target = lines.next().and_then(|l| l.split(' ').nth(1)).unwrap_or("").to_owned();
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    };
    let query_token = target.split_once('?').and_then(|(_, query)| {
        query.split('&').find_map(|pair| pair.strip_prefix("DAYTONA_SANDBOX_AUTH_KEY=").map(str::to_owned))
    });
    let found = shared
        .lock_sandboxes()
        .get(&id)
        .map(|s| (s.preview_token.clone(), s.public, s.state.clone(), s.ip.clone(), s.cut.subscribe()));
    let Some((token, public, state, ip, mut cut)) = found else {
        return respond(client, "404 Not Found", "sandbox not found").await;
    };
    let authorized = public
        || header("x-daytona-preview-token").as_deref() == Some(&token)
        || query_token.as_deref() == Some(&token)
        || header("authorization").as_deref() == Some(&format!("Bearer {}", shared.key));
    if !authorized {
        return respond(client, "401 Unauthorized", "Unauthorized").await;
    }
    let Some(ip) = ip.filter(|_| state == "started") else {
        return respond(client, "502 Bad Gateway", &format!("sandbox is {state}")).await;
    };
    let upstream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((ip.as_str(), port))).await;
    let Ok(Ok(mut upstream)) = upstream else {
        return respond(client, "502 Bad Gateway", &format!("nothing answers on port {port}")).await;
    };
    let _ = upstream.set_nodelay(true);
    if upstream.write_all(&bytes).await.is_err() {
        return;
    }
    // Stop, delete or the test knob bump `cut`: the connection ends like a dropped link.
    cut.mark_unchanged();
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        _ = cut.changed() => {}
    }
}
