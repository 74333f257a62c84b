//! A connection's outgoing messages: a bounded queue whose large messages first take room from a
//! budget shared by every connection ([`Room`], [`MAX_QUEUED_REPLY_BYTES`]), and the writer that
//! sends them, flushing in batches, until agentd shuts down (then it sends the close frame only).
//!
//! Room is taken before a large reply is built where its size is known early (an exec's inline
//! output is read back only once its room is reserved), else before it is queued, and given back
//! once the writer has flushed it to the socket. However many large replies clients ask for, and
//! however slowly they read, agentd holds at most the budget of them (plus one reply being
//! built per blocking thread). A client that takes nothing off its socket for
//! [`WRITE_TIMEOUT_SECS`] while a reply waits for it is disconnected, so it cannot pin the budget.

use std::sync::Arc;
use std::time::Duration;

use agentd_protocol::ServerMessage;
use agentd_protocol::limits::{MAX_QUEUED_REPLY_BYTES, SMALL_REPLY_BYTES, WRITE_TIMEOUT_SECS};
use futures_util::{Sink, SinkExt as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Messages queued for one connection's writer. Bounded, so a client that stops reading slows its
/// own execs' streaming and downloads instead of growing agentd's memory.
const QUEUE: usize = 64;

/// Room is counted in units of this many bytes (a semaphore's permits are `u32`).
const UNIT: usize = 1024;

/// Messages written between two flushes: many small results, one write.
const BATCH: usize = 64;

/// The budget of reply bytes queued across all connections.
#[derive(Clone)]
pub struct Room(Arc<Semaphore>);

impl Room {
    pub fn new() -> Self {
        Room(Arc::new(Semaphore::new(MAX_QUEUED_REPLY_BYTES / UNIT)))
    }

    /// Room for a message of `len` bytes; nothing is taken for a small one. Waits until there is
    /// room; `None` only if the budget was closed.
    pub async fn reserve(&self, len: usize) -> Option<Reserved> {
        if len <= SMALL_REPLY_BYTES {
            return Some(Reserved { len, _permit: None });
        }
        let units = u32::try_from(len.div_ceil(UNIT).min(MAX_QUEUED_REPLY_BYTES / UNIT)).ok()?;
        let permit = Arc::clone(&self.0).acquire_many_owned(units).await.ok()?;
        Some(Reserved { len, _permit: Some(permit) })
    }

    /// Units free now (for tests and figures).
    #[cfg(test)]
    fn free(&self) -> usize {
        self.0.available_permits()
    }
}

/// Room held for one message; given back when dropped.
#[derive(Debug)]
pub struct Reserved {
    len: usize,
    _permit: Option<OwnedSemaphorePermit>,
}

/// One queued message and the room it holds until it is on the socket.
pub struct Outgoing {
    message: Message,
    _room: Reserved,
}

/// The sending side of a connection's queue; cheap to clone into each request's task.
#[derive(Clone)]
pub struct Outbox {
    queue: mpsc::Sender<Outgoing>,
    room: Room,
}

/// The connection is gone: nothing more can be sent on it.
#[derive(Debug)]
pub struct Closed;

impl Outbox {
    pub fn new(room: Room) -> (Self, mpsc::Receiver<Outgoing>) {
        let (queue, rx) = mpsc::channel(QUEUE);
        (Outbox { queue, room }, rx)
    }

    /// The shared budget, to reserve room before building a reply.
    pub fn room(&self) -> &Room {
        &self.room
    }

    /// Queues a reply. The message is dropped once serialized: a reply waiting for room holds only
    /// its JSON text.
    pub async fn reply(&self, message: ServerMessage) -> Result<(), Closed> {
        self.reply_in(message, None).await
    }

    /// Queues a reply built in room reserved beforehand (if it turned out larger, that room is given
    /// back and room for the whole is taken).
    pub async fn reply_in(&self, message: ServerMessage, reserved: Option<Reserved>) -> Result<(), Closed> {
        let text = message.to_json();
        drop(message);
        self.send(Message::text(text), reserved).await
    }

    /// Queues a binary message (a download's or a streamed exec's chunk).
    pub async fn binary(&self, data: Vec<u8>) -> Result<(), Closed> {
        self.send(Message::binary(data), None).await
    }

    async fn send(&self, message: Message, reserved: Option<Reserved>) -> Result<(), Closed> {
        let len = message.len();
        let room = match reserved {
            Some(reserved) if reserved.len >= len || len <= SMALL_REPLY_BYTES => reserved,
            too_small => {
                // Never wait for room while holding some: waiters holding room could wait for each
                // other forever.
                drop(too_small);
                // The connection may close while this waits for room: stop waiting then.
                tokio::select! {
                    room = self.room.reserve(len) => room.ok_or(Closed)?,
                    () = self.queue.closed() => return Err(Closed),
                }
            }
        };
        self.queue.send(Outgoing { message, _room: room }).await.map_err(|_| Closed)
    }

    /// Resolves when the writer has stopped (the client left or stopped reading).
    pub async fn closed(&self) {
        self.queue.closed().await;
    }
}

/// Sends queued messages until the queue ends or the client stops taking them: a batch that cannot
/// be flushed within [`WRITE_TIMEOUT_SECS`] ends the writer, which closes the queue (and with it
/// the session). Room is given back after each flush. Once agentd begins to shut down, nothing
/// more is sent but a close frame with status 1001 (going away): the results of the requests the
/// shutdown stops would tell of a kill the client never asked for.
pub async fn write<S>(sink: S, queue: mpsc::Receiver<Outgoing>, shutdown: crate::cancel::Cancel)
where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
{
    let timeout = Duration::from_secs(WRITE_TIMEOUT_SECS);
    write_within(sink, queue, timeout, async move { shutdown.cancelled().await }).await;
}

async fn write_within<S>(
    mut sink: S,
    mut queue: mpsc::Receiver<Outgoing>,
    timeout: Duration,
    going_away: impl Future<Output = ()>,
) where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
{
    let mut going_away = std::pin::pin!(going_away);
    loop {
        let first = tokio::select! {
            // Checked first, here and below: a result queued by the shutdown's kills is never sent.
            biased;
            () = &mut going_away => break,
            first = queue.recv() => first,
        };
        let Some(first) = first else {
            let _ = sink.close().await;
            return;
        };
        let batch = async {
            let mut held = Vec::with_capacity(BATCH);
            let mut next = Some(first);
            while let Some(Outgoing { message, _room }) = next {
                sink.feed(message).await?;
                held.push(_room);
                next = if held.len() < BATCH { queue.try_recv().ok() } else { None };
            }
            sink.flush().await
        };
        let sent = tokio::select! {
            biased;
            () = &mut going_away => break,
            sent = tokio::time::timeout(timeout, batch) => sent,
        };
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::debug!("writing to the client failed: {err}");
                return;
            }
            Err(_) => {
                tracing::info!("the client took nothing for {timeout:?}: disconnected");
                return;
            }
        }
    }
    let away = CloseFrame { code: CloseCode::Away, reason: "agentd is shutting down".into() };
    let _ = tokio::time::timeout(timeout, sink.send(Message::Close(Some(away)))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_messages_hold_room_until_flushed() {
        let room = Room::new();
        let all = room.free();
        let (outbox, mut rx) = Outbox::new(room.clone());
        outbox.binary(vec![0; 10]).await.unwrap();
        assert_eq!(room.free(), all, "small messages take no room");
        outbox.binary(vec![0; 1024 * 1024]).await.unwrap();
        assert_eq!(room.free(), all - 1024);
        drop(rx.recv().await);
        assert_eq!(room.free(), all - 1024);
        drop(rx.recv().await);
        assert_eq!(room.free(), all, "given back once sent");
    }

    #[tokio::test]
    async fn a_full_budget_makes_large_replies_wait_not_fail() {
        let room = Room::new();
        let (outbox, mut rx) = Outbox::new(room.clone());
        let hog = room.reserve(MAX_QUEUED_REPLY_BYTES).await.unwrap();
        let waiting = tokio::spawn(async move { outbox.binary(vec![1; 100_000]).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "waits for room");
        assert!(rx.try_recv().is_err());
        drop(hog);
        waiting.await.unwrap().unwrap();
        assert_eq!(rx.recv().await.map(|o| o.message.len()), Some(100_000));
    }

    #[tokio::test]
    async fn a_client_that_reads_nothing_is_given_up_and_its_room_returned() {
        use tokio_tungstenite::WebSocketStream;
        use tokio_tungstenite::tungstenite::protocol::Role;
        // A real websocket over a 64 KiB in-memory pipe whose far end is never read.
        let (ours, _theirs) = tokio::io::duplex(64 * 1024);
        let ws = WebSocketStream::from_raw_socket(ours, Role::Server, None).await;
        let room = Room::new();
        let all = room.free();
        let (outbox, rx) = Outbox::new(room.clone());
        let writer = tokio::spawn(write_within(ws, rx, Duration::from_millis(300), std::future::pending()));
        for _ in 0..4 {
            outbox.binary(vec![7; 200_000]).await.unwrap();
        }
        let started = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(10), outbox.closed()).await.expect("the writer gave up");
        assert!(started.elapsed() >= Duration::from_millis(250), "not before its timeout");
        writer.await.unwrap();
        assert!(outbox.binary(vec![1; 10]).await.is_err(), "the connection is over");
        assert_eq!(room.free(), all, "its room is back");
    }

    #[tokio::test]
    async fn going_away_sends_a_close_frame_and_nothing_queued_after_it() {
        use futures_util::StreamExt as _;
        use tokio_tungstenite::WebSocketStream;
        use tokio_tungstenite::tungstenite::protocol::Role;
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let ws = WebSocketStream::from_raw_socket(ours, Role::Server, None).await;
        let mut client = WebSocketStream::from_raw_socket(theirs, Role::Client, None).await;
        let (outbox, rx) = Outbox::new(Room::new());
        let (away, going_away) = tokio::sync::oneshot::channel::<()>();
        let writer = tokio::spawn(write_within(ws, rx, Duration::from_secs(5), async {
            let _ = going_away.await;
        }));
        outbox.binary(b"before".to_vec()).await.unwrap();
        let first = client.next().await.unwrap().unwrap();
        assert_eq!(first.into_data().as_ref(), b"before");
        // The shutdown begins, and a kill's result is queued before the writer runs again.
        away.send(()).unwrap();
        outbox.binary(b"after".to_vec()).await.unwrap();
        match client.next().await.unwrap().unwrap() {
            Message::Close(Some(frame)) => {
                assert_eq!((frame.code, frame.reason.as_str()), (CloseCode::Away, "agentd is shutting down"));
            }
            other => panic!("expected the close frame, got {other:?}"),
        }
        writer.await.unwrap();
        assert!(client.next().await.is_none_or(|frame| frame.is_err()), "nothing after the close");
    }

    #[tokio::test]
    async fn a_closed_connection_stops_the_wait() {
        let room = Room::new();
        let (outbox, rx) = Outbox::new(room.clone());
        let _hog = room.reserve(MAX_QUEUED_REPLY_BYTES).await.unwrap();
        let waiting = tokio::spawn(async move { outbox.binary(vec![1; 100_000]).await });
        drop(rx);
        assert!(waiting.await.unwrap().is_err());
    }
}
