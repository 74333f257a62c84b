//! The socket's sending half, shared by the link's callers and its writer task.
//!
//! A caller that finds the socket free and nothing queued before it writes its message itself, on
//! its own thread: a request goes out without waking another thread first, which on a 2-core
//! machine was about 25 µs of every round trip. Otherwise the message waits in a bounded queue for
//! the writer task, which also finishes any write a caller left half done (the socket was full).
//! Either way messages reach the socket in the order their `send`s returned, and a caller never
//! awaits while it holds the socket, so dropping its future mid-send loses nothing.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_util::{Sink, SinkExt as _};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::contract::error::{Result, SandboxError};

type Socket = Pin<Box<dyn Sink<Message, Error = tungstenite::Error> + Send>>;

/// The socket and the writer task's waker, under one lock that is never held across an await.
struct Shared {
    socket: Socket,
    /// The writer task's waker: a caller's write polls the socket with it, so whatever the socket
    /// leaves pending (a full buffer) wakes the writer, which finishes it. `None` until the writer
    /// first runs.
    writer: Option<Waker>,
}

/// One link's way out. Cloned into every guard that must send from `Drop` (a cancel).
#[derive(Clone)]
pub(super) struct Outgoing {
    shared: Arc<Mutex<Shared>>,
    queue: mpsc::Sender<Message>,
    /// Messages queued and not yet handed to the socket: a caller writes itself only when it is 0,
    /// so nothing overtakes what was queued before it.
    queued: Arc<AtomicUsize>,
}

impl Outgoing {
    /// Shares `socket` and starts the writer task, which holds at most `depth` messages queued.
    pub(super) fn start<S>(socket: S, depth: usize) -> (Self, JoinHandle<()>)
    where
        S: Sink<Message, Error = tungstenite::Error> + Send + 'static,
    {
        let shared = Arc::new(Mutex::new(Shared { socket: Box::pin(socket), writer: None }));
        let (queue, incoming) = mpsc::channel(depth);
        let queued = Arc::new(AtomicUsize::new(0));
        let writer = tokio::spawn(write_queued(Arc::clone(&shared), incoming, Arc::clone(&queued)));
        (Self { shared, queue, queued }, writer)
    }

    /// Sends `message`: written at once when the socket is free, else queued, waiting for room in
    /// the queue. `LinkClosed` when the socket failed or the writer is gone.
    pub(super) async fn send(&self, message: Message) -> Result<()> {
        let Some(message) = self.write_now(message)? else { return Ok(()) };
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.queue.send(message).await.map_err(|_| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            SandboxError::LinkClosed
        })
    }

    /// [`Outgoing::send`] without waiting, for `Drop`: a message that finds the queue full is lost.
    pub(super) fn send_now(&self, message: Message) {
        if let Ok(Some(message)) = self.write_now(message) {
            self.queued.fetch_add(1, Ordering::AcqRel);
            if self.queue.try_send(message).is_err() {
                self.queued.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// The writer task has ended (the socket failed or the link is being dropped).
    pub(super) fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }

    /// Hands `message` to the socket if it is free, nothing is queued and the socket takes it now;
    /// gives it back otherwise.
    fn write_now(&self, message: Message) -> Result<Option<Message>> {
        let Ok(mut shared) = self.shared.try_lock() else { return Ok(Some(message)) };
        if self.queued.load(Ordering::Acquire) != 0 || self.queue.is_closed() {
            return Ok(Some(message));
        }
        let Some(writer) = shared.writer.clone() else { return Ok(Some(message)) };
        let mut cx = Context::from_waker(&writer);
        match shared.socket.poll_ready_unpin(&mut cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return Err(SandboxError::LinkClosed),
            Poll::Pending => return Ok(Some(message)),
        }
        shared.socket.start_send_unpin(message).map_err(|_| SandboxError::LinkClosed)?;
        // Pending: the socket is full for now; it wakes the writer, which flushes the rest.
        match shared.socket.poll_flush_unpin(&mut cx) {
            Poll::Ready(Err(_)) => Err(SandboxError::LinkClosed),
            Poll::Ready(Ok(())) | Poll::Pending => Ok(None),
        }
    }
}

/// The writer task: hands queued messages to the socket in order and flushes when the queue is
/// momentarily empty (one write for a burst). Ends when the socket fails or every sender is gone.
async fn write_queued(
    shared: Arc<Mutex<Shared>>,
    mut incoming: mpsc::Receiver<Message>,
    queued: Arc<AtomicUsize>,
) {
    let mut next: Option<Message> = None;
    std::future::poll_fn(|cx| {
        let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if !shared.writer.as_ref().is_some_and(|waker| waker.will_wake(cx.waker())) {
            shared.writer = Some(cx.waker().clone());
        }
        loop {
            let message = match next.take() {
                Some(message) => message,
                None => match incoming.poll_recv(cx) {
                    Poll::Ready(Some(message)) => message,
                    Poll::Ready(None) => return Poll::Ready(()),
                    Poll::Pending => break,
                },
            };
            match shared.socket.poll_ready_unpin(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => {
                    next = Some(message);
                    return Poll::Pending;
                }
            }
            if shared.socket.start_send_unpin(message).is_err() {
                return Poll::Ready(());
            }
            queued.fetch_sub(1, Ordering::AcqRel);
        }
        match shared.socket.poll_flush_unpin(cx) {
            Poll::Ready(Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(())) | Poll::Pending => Poll::Pending,
        }
    })
    .await
}
