//! Bodies from a provider, read with a cap: a hostile or broken provider that answers with
//! gigabytes (or without end) costs a bounded amount of memory and fails with a
//! [`TooLarge`](crate::contract::error::SandboxError::TooLarge) error as soon as it passes the
//! cap, not when the machine runs out.
//!
//! The caps, each named with what it bounds:
//! - [`JSON_BODY_MAX`]: an API answer (a sandbox record, a listing, an error body).
//! - [`EXEC_RESULT_MAX`]: a toolbox exec's answer, the command's whole output as one JSON string.
//! - One downloaded file (a part of a bulk download, a router exec's `cat`) has the contract's
//!   bound, [`DOWNLOAD_FILES_MOST`](crate::contract::agentd::DOWNLOAD_FILES_MOST).
//!
//! `read_capped` reads an HTTP body (Daytona, feature `daytona`); Modal's gRPC messages are
//! bounded by tonic's `max_decoding_message_size` and its router exec's streams by the same caps.

#[cfg(feature = "daytona")]
use bytes::{Bytes, BytesMut};

#[cfg(feature = "daytona")]
use crate::contract::error::{Result, SandboxError};

/// An API answer: a sandbox record is a few KiB, a listing of thousands of sandboxes a few MiB.
pub const JSON_BODY_MAX: u64 = 16 << 20;
/// A toolbox exec's answer (and each stream of a Modal router exec). Daytona documents no cap of its own on the output;
/// what the adapter runs there (the derived verbs' `agentd fs`/`agentd exec`) answers at most
/// agentd's reply limit of 16 MiB (`MAX_REPLY_BYTES`), so 25 MiB leaves room for the JSON string's
/// escapes while bounding a command that prints without end.
pub const EXEC_RESULT_MAX: u64 = 25 << 20;
/// Room reserved at most before the first bytes arrive, whatever `Content-Length` claims.
#[cfg(feature = "daytona")]
const PREALLOCATE_MAX: u64 = 1 << 20;

/// The whole body of `response`, refused at once when its `Content-Length` announces more than
/// `cap` bytes and as soon as the bytes received pass `cap`. `what` names the answer in the
/// error; `transport` turns a failed read into the caller's error.
#[cfg(feature = "daytona")]
pub async fn read_capped(
    mut response: reqwest::Response,
    cap: u64,
    what: &str,
    transport: impl Fn(&reqwest::Error) -> SandboxError,
) -> Result<Bytes> {
    let too_large = || SandboxError::TooLarge { what: what.to_owned(), limit: cap };
    let announced = response.content_length();
    if announced.is_some_and(|len| len > cap) {
        return Err(too_large());
    }
    let reserve = announced.unwrap_or(0).min(PREALLOCATE_MAX);
    let mut body = BytesMut::with_capacity(usize::try_from(reserve).unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
        if body.len() as u64 + chunk.len() as u64 > cap {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

#[cfg(test)]
#[cfg(feature = "daytona")]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A one-shot HTTP server answering `head` then `body_len` bytes of `x` (written lazily), and
    /// how many bytes it managed to write before the client hung up.
    async fn serve(head: String, body_len: u64) -> (String, tokio::task::JoinHandle<u64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0_u8; 4096];
            let _ = stream.read(&mut request).await;
            if stream.write_all(head.as_bytes()).await.is_err() {
                return 0;
            }
            let chunk = vec![b'x'; 64 << 10];
            let mut sent = 0;
            while sent < body_len {
                let n = chunk.len().min(usize::try_from(body_len - sent).unwrap());
                if stream.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                sent += n as u64;
            }
            sent
        });
        (url, server)
    }

    fn transport(err: &reqwest::Error) -> SandboxError {
        SandboxError::Protocol(err.to_string())
    }

    async fn get(url: &str) -> reqwest::Response {
        reqwest::get(url).await.unwrap()
    }

    #[tokio::test]
    async fn a_body_within_the_cap_is_read_whole() {
        let (url, server) = serve("HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n".to_owned(), 1000).await;
        let body = read_capped(get(&url).await, 1000, "answer", transport).await.unwrap();
        assert_eq!(body, Bytes::from(vec![b'x'; 1000]));
        assert_eq!(server.await.unwrap(), 1000);
    }

    #[tokio::test]
    async fn an_announced_length_past_the_cap_is_refused_before_reading() {
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 2147483648\r\n\r\n".to_owned();
        let (url, server) = serve(head, 2 << 30).await;
        let err = read_capped(get(&url).await, 1 << 20, "sandbox list", transport).await.unwrap_err();
        assert!(matches!(&err, SandboxError::TooLarge { limit: 1048576, .. }), "{err}");
        assert_eq!(err.to_string(), "sandbox list: the answer passed the limit of 1048576 bytes; refused");
        // The server gave up long before 2 GiB: the client stopped reading and hung up.
        assert!(server.await.unwrap() < 1 << 30);
    }

    #[tokio::test]
    async fn an_endless_chunked_body_is_cut_at_the_cap() {
        let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_owned();
        // One chunk header announcing far more than is sent before the client gives up.
        let (url, server) = serve(format!("{head}80000000\r\n"), 2 << 30).await;
        let err = read_capped(get(&url).await, 256 << 10, "exec", transport).await.unwrap_err();
        assert!(matches!(err, SandboxError::TooLarge { limit: 262144, .. }), "{err}");
        assert!(server.await.unwrap() < 1 << 30);
    }

    #[tokio::test]
    async fn a_body_one_byte_past_the_cap_is_refused() {
        let (url, _server) = serve("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_owned(), 1001).await;
        let err = read_capped(get(&url).await, 1000, "answer", transport).await.unwrap_err();
        assert!(matches!(err, SandboxError::TooLarge { .. }), "{err}");
    }
}
