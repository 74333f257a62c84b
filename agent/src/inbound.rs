//! What clients' unfinished messages may make agentd hold. The websocket codec buffers a message
//! until its last byte arrives (up to `MAX_WEBSOCKET_MESSAGE`), so many connections each sending a
//! large message slowly would hold that much each. [`Metered`] wraps a connection's socket and counts
//! the bytes read since its last complete message: past [`LARGE_MESSAGE_BYTES`], the connection
//! needs one of [`MAX_LARGE_MESSAGES`] permits shared by all connections to read on (it waits for
//! one, reading nothing meanwhile), and must finish that message within
//! [`LARGE_MESSAGE_TIMEOUT_SECS`] or be disconnected, so a slow sender cannot keep the permit.
//! What it reads reaches the codec through [`pieces`]: a large message's memory goes with the
//! message instead of staying with the connection.

mod pieces;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use agentd_protocol::limits::{LARGE_MESSAGE_BYTES, LARGE_MESSAGE_TIMEOUT_SECS, MAX_LARGE_MESSAGES};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use self::pieces::Pieces;

type Acquiring =
    Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>> + Send>>;

/// The permits for large messages in progress, shared by every connection.
#[derive(Clone)]
pub struct LargeMessages(Arc<Semaphore>);

impl LargeMessages {
    pub fn new() -> Self {
        LargeMessages(Arc::new(Semaphore::new(MAX_LARGE_MESSAGES)))
    }
}

/// The session's side of a [`Metered`] socket: it says when a message was complete.
#[derive(Clone, Default)]
pub struct Meter(Arc<MeterState>);

#[derive(Default)]
struct MeterState {
    /// Bytes read since the last complete message.
    since: AtomicUsize,
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    /// The HTTP upgrade is complete: frames follow.
    upgraded: AtomicBool,
}

impl Meter {
    /// A whole message arrived: the count restarts and a large-message permit is given back.
    pub fn completed(&self) {
        self.0.since.store(0, Ordering::Release);
        self.0.permit.lock().unwrap_or_else(PoisonError::into_inner).take();
    }

    /// The HTTP upgrade is complete: what is read from here on is websocket frames.
    pub fn upgraded(&self) {
        self.0.upgraded.store(true, Ordering::Release);
    }
}

/// A socket whose reads are metered (see the module doc); writes pass through.
pub struct Metered<S> {
    inner: S,
    meter: Meter,
    large: LargeMessages,
    acquiring: Option<Acquiring>,
    timeout: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    pieces: Pieces,
}

impl<S> Metered<S> {
    pub fn new(inner: S, large: LargeMessages) -> (Self, Meter) {
        Self::with_timeout(inner, large, Duration::from_secs(LARGE_MESSAGE_TIMEOUT_SECS))
    }

    fn with_timeout(inner: S, large: LargeMessages, timeout: Duration) -> (Self, Meter) {
        let meter = Meter::default();
        let pieces = Pieces::new();
        (
            Metered { inner, meter: meter.clone(), large, acquiring: None, timeout, deadline: None, pieces },
            meter,
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.meter.0.upgraded.load(Ordering::Acquire) {
            this.pieces.upgraded();
        }
        loop {
            let before = buf.filled().len();
            this.pieces.hand_on(buf);
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
            match this.poll_socket(cx) {
                Poll::Ready(Ok(0)) if this.pieces.held() == 0 => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(0)) => this.pieces.ended(),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S: AsyncRead + Unpin> Metered<S> {
    /// Reads the socket into [`Pieces`], once the connection may read on (see the module doc).
    fn poll_socket(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let state = &self.meter.0;
        if state.since.load(Ordering::Acquire) <= LARGE_MESSAGE_BYTES {
            self.deadline = None;
        } else {
            let mut permit = state.permit.lock().unwrap_or_else(PoisonError::into_inner);
            if permit.is_none() {
                let large = Arc::clone(&self.large.0);
                let acquiring = self.acquiring.get_or_insert_with(|| Box::pin(large.acquire_owned()));
                match acquiring.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(acquired) => {
                        self.acquiring = None;
                        *permit = Some(acquired.map_err(io::Error::other)?);
                        self.deadline = Some(Box::pin(tokio::time::sleep(self.timeout)));
                    }
                }
            }
        }
        let mut buf = ReadBuf::new(self.pieces.spare());
        match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                self.pieces.received(n);
                state.since.fetch_add(n, Ordering::AcqRel);
                Poll::Ready(Ok(n))
            }
            Poll::Pending => match self.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("a large message took over {:?}", self.timeout),
                ))),
                _ => Poll::Pending,
            },
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};

    use super::*;

    /// Reads from `stream` until `n` bytes came or it waits (then `false` after 200 ms).
    async fn reads(stream: &mut Metered<DuplexStream>, n: usize) -> io::Result<bool> {
        let mut buf = vec![0; n];
        match tokio::time::timeout(Duration::from_millis(200), stream.read_exact(&mut buf)).await {
            Ok(read) => read.map(|_| true),
            Err(_) => Ok(false),
        }
    }

    #[tokio::test]
    async fn large_messages_are_read_a_few_at_a_time_and_must_finish() {
        let large = LargeMessages::new();
        let mut peers = Vec::new();
        let mut metered = Vec::new();
        for _ in 0..=MAX_LARGE_MESSAGES {
            let (ours, mut theirs) = tokio::io::duplex(4 * LARGE_MESSAGE_BYTES);
            theirs.write_all(&vec![1; 3 * LARGE_MESSAGE_BYTES]).await.unwrap();
            metered.push(Metered::with_timeout(ours, large.clone(), Duration::from_millis(500)));
            peers.push(theirs);
        }
        // Everyone reads its first MiB freely; past it, only MAX_LARGE_MESSAGES go on.
        for (stream, _) in &mut metered {
            assert!(reads(stream, LARGE_MESSAGE_BYTES + 1).await.unwrap());
        }
        let mut went_on = 0;
        for (stream, _) in &mut metered {
            went_on += usize::from(reads(stream, LARGE_MESSAGE_BYTES).await.unwrap());
        }
        assert_eq!(went_on, MAX_LARGE_MESSAGES);
        // One message completes: its permit goes to the one that waited.
        metered[0].1.completed();
        let (last, _) = metered.last_mut().unwrap();
        assert!(reads(last, LARGE_MESSAGE_BYTES).await.unwrap(), "the waiting one reads on");
        // A holder whose sender stops sending is cut off at its deadline.
        let (stalled, _) = &mut metered[1];
        let mut rest = vec![0; 4 * LARGE_MESSAGE_BYTES];
        let cut = tokio::time::timeout(Duration::from_secs(5), stalled.read_exact(&mut rest)).await.unwrap();
        assert_eq!(cut.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
