//! Large frames handed to the websocket codec in small pieces. The codec reads a frame whole into
//! its read buffer and hands the message out as a view of that buffer's allocation; the buffer then
//! reuses the allocation for the connection's life (`BytesMut` never shrinks), so a connection
//! that once received a 60 MiB frame held 60 MiB until it closed. Split into continuation frames of
//! [`PIECE`] bytes, a large message is assembled by the codec in a buffer of its own, freed with the
//! message, and the read buffer never grows past a piece.
//!
//! The bytes between the socket and the codec pass through [`Pieces`]: frames up to
//! [`LARGE_MESSAGE_BYTES`] (and whatever the codec will refuse: control frames, unmasked or
//! oversized ones) as they came, larger data frames cut. Frame headers are read and written with
//! the codec's own [`FrameHeader`].

use std::io::Cursor;

use agentd_protocol::limits::{LARGE_MESSAGE_BYTES, MAX_WEBSOCKET_MESSAGE, WEBSOCKET_READ_BUFFER};
use tokio::io::ReadBuf;
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

/// Payload bytes of each piece of a large frame. A multiple of 4, so every piece keeps the frame's
/// mask (byte `i` of a payload is masked with byte `i % 4` of the key).
const PIECE: u64 = WEBSOCKET_READ_BUFFER as u64;
const _: () = assert!(PIECE.is_multiple_of(4));

/// Where the stream handed to the codec stands.
enum At {
    /// The HTTP upgrade: one line per read, so the handshake, which stops reading at the blank line
    /// ending its request, leaves the first frame whole to [`At::Header`].
    Upgrade,
    /// At a frame's header.
    Header,
    /// In a frame: `piece` payload bytes left of the piece handed on, then `rest` more of the frame,
    /// in pieces of `next` (whose `is_final` is the frame's).
    Payload { piece: u64, rest: u64, next: FrameHeader },
    /// Past something the codec will refuse (a header it cannot parse, an end of stream inside a
    /// header): everything as it came, for the codec to fail on.
    Verbatim,
}

/// The reframing state of one connection's inbound bytes (see the module doc).
pub struct Pieces {
    at: At,
    /// Bytes read from the socket; those from `start` to `end` are not handed on yet.
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// A header made here, not handed on yet.
    header: Vec<u8>,
}

impl Pieces {
    pub fn new() -> Self {
        Pieces { at: At::Upgrade, input: Vec::new(), start: 0, end: 0, header: Vec::new() }
    }

    /// The upgrade is complete: frames from here on.
    pub fn upgraded(&mut self) {
        if matches!(self.at, At::Upgrade) {
            self.at = At::Header;
        }
    }

    /// Where the next read of the socket goes (at most [`WEBSOCKET_READ_BUFFER`] bytes, after what
    /// is still held); [`Pieces::received`] says how much came.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.input.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.input.len() < self.end + WEBSOCKET_READ_BUFFER {
            self.input.resize(self.end + WEBSOCKET_READ_BUFFER, 0);
        }
        &mut self.input[self.end..]
    }

    pub fn received(&mut self, n: usize) {
        self.end += n;
    }

    /// Bytes read and not handed on yet.
    pub fn held(&self) -> usize {
        self.end - self.start
    }

    /// The socket ended: what is held goes on as it came.
    pub fn ended(&mut self) {
        self.at = At::Verbatim;
    }

    /// Hands on to `out` what can be: nothing when a header is incomplete (read more).
    pub fn hand_on(&mut self, out: &mut ReadBuf<'_>) {
        loop {
            if out.remaining() == 0 {
                return;
            }
            if !self.header.is_empty() {
                let n = self.header.len().min(out.remaining());
                out.put_slice(&self.header[..n]);
                self.header.drain(..n);
                continue;
            }
            let input = &self.input[self.start..self.end];
            if input.is_empty() {
                return;
            }
            match &mut self.at {
                At::Upgrade => {
                    let line = input.iter().position(|b| *b == b'\n').map_or(input.len(), |at| at + 1);
                    let n = line.min(out.remaining());
                    out.put_slice(&input[..n]);
                    self.start += n;
                    return;
                }
                At::Verbatim => {
                    let n = input.len().min(out.remaining());
                    out.put_slice(&input[..n]);
                    self.start += n;
                }
                At::Header => {
                    let mut cursor = Cursor::new(input);
                    match FrameHeader::parse(&mut cursor) {
                        Ok(None) => return,
                        Err(_) => self.at = At::Verbatim,
                        Ok(Some((header, len))) => {
                            let size = usize::try_from(cursor.position()).unwrap_or(input.len());
                            let large = matches!(header.opcode, OpCode::Data(_))
                                && header.mask.is_some()
                                && len > LARGE_MESSAGE_BYTES as u64
                                && len <= MAX_WEBSOCKET_MESSAGE as u64;
                            if large {
                                let first = FrameHeader { is_final: false, ..header.clone() };
                                let next = FrameHeader { opcode: OpCode::Data(Data::Continue), ..header };
                                self.at = At::Payload { piece: 0, rest: len, next };
                                self.start += size;
                                self.piece(first);
                            } else {
                                self.header.extend_from_slice(&input[..size]);
                                self.start += size;
                                self.at = At::Payload { piece: len, rest: 0, next: header };
                            }
                        }
                    }
                }
                At::Payload { piece: 0, rest: 0, .. } => self.at = At::Header,
                At::Payload { piece: 0, next, .. } => {
                    let next = next.clone();
                    self.piece(next);
                }
                At::Payload { piece, .. } => {
                    let n =
                        input.len().min(out.remaining()).min(usize::try_from(*piece).unwrap_or(usize::MAX));
                    out.put_slice(&input[..n]);
                    self.start += n;
                    *piece -= n as u64;
                }
            }
        }
    }

    /// Starts the next piece of a split frame with `header` (its opcode and bits; final only if it
    /// is the frame's last piece of a final frame).
    fn piece(&mut self, mut header: FrameHeader) {
        let At::Payload { piece, rest, next } = &mut self.at else { return };
        let size = (*rest).min(PIECE);
        *piece = size;
        *rest -= size;
        header.is_final = *rest == 0 && next.is_final;
        // Writing to a Vec cannot fail.
        let _ = header.format(size, &mut self.header);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket, WebSocketConfig};
    use tokio_tungstenite::tungstenite::{Message, protocol::frame::Frame};

    use super::*;

    const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    /// What a client sends: its upgrade request, then `frames` (masked).
    fn client_bytes(frames: &[Frame]) -> Vec<u8> {
        let mut bytes = REQUEST.to_vec();
        for frame in frames {
            let mut frame = frame.clone();
            frame.header_mut().mask = Some([1, 2, 3, 4]);
            frame.format(&mut bytes).unwrap();
        }
        bytes
    }

    /// `bytes` through [`Pieces`] in reads of `read` bytes into buffers of `room`: the upgrade's
    /// bytes (checked to come no further than a line per read), then the frames' bytes.
    fn through(bytes: &[u8], read: usize, room: usize) -> (Vec<u8>, Vec<u8>) {
        let mut pieces = Pieces::new();
        let (mut upgrade, mut framed) = (Vec::new(), Vec::new());
        let mut source = bytes;
        loop {
            let mut out = vec![0; room];
            let mut buf = ReadBuf::new(&mut out);
            pieces.hand_on(&mut buf);
            let handed = buf.filled().to_vec();
            if handed.is_empty() {
                if source.is_empty() {
                    break;
                }
                let spare = pieces.spare();
                let n = read.min(source.len()).min(spare.len());
                spare[..n].copy_from_slice(&source[..n]);
                pieces.received(n);
                source = &source[n..];
            } else if matches!(pieces.at, At::Upgrade) {
                let line = handed.iter().position(|b| *b == b'\n');
                assert!(line.is_none_or(|at| at == handed.len() - 1), "{handed:?}");
                upgrade.extend(handed);
                if upgrade.ends_with(b"\r\n\r\n") {
                    pieces.upgraded();
                }
            } else {
                framed.extend(handed);
            }
        }
        (upgrade, framed)
    }

    /// A stream that reads `framed` and drops what the codec writes (its pong).
    struct Replies<'a>(Cursor<&'a [u8]>);

    impl std::io::Read for Replies<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl std::io::Write for Replies<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The messages a server codec reads from `framed`, and the largest frame it was handed.
    fn read_messages(framed: &[u8]) -> (Vec<Message>, u64) {
        let mut largest = 0;
        let mut at = Cursor::new(framed);
        while let Some((_, len)) = FrameHeader::parse(&mut at).unwrap() {
            largest = largest.max(len);
            at.set_position(at.position() + len);
        }
        let config = WebSocketConfig::default().max_message_size(Some(MAX_WEBSOCKET_MESSAGE));
        let mut ws = WebSocket::from_raw_socket(Replies(Cursor::new(framed)), Role::Server, Some(config));
        let mut messages = Vec::new();
        while let Ok(message) = ws.read() {
            messages.push(message);
        }
        (messages, largest)
    }

    #[test]
    fn large_frames_reach_the_codec_in_pieces_and_make_the_same_messages() {
        let large = LARGE_MESSAGE_BYTES + 12345;
        let text: String = (0..large).map(|i| char::from(b'a' + u8::try_from(i % 26).unwrap())).collect();
        let binary: Vec<u8> = (0..large).map(|i| u8::try_from(i * 7 % 256).unwrap()).collect();
        let frames = [
            Frame::message(text.clone(), OpCode::Data(Data::Text), true),
            Frame::ping(b"p".to_vec()),
            Frame::message(b"small".to_vec(), OpCode::Data(Data::Binary), true),
            // A message the client fragmented itself, its large part split again here.
            Frame::message(binary[..10].to_vec(), OpCode::Data(Data::Binary), false),
            Frame::message(binary[10..].to_vec(), OpCode::Data(Data::Continue), true),
            Frame::message(Vec::new(), OpCode::Data(Data::Text), true),
        ];
        let bytes = client_bytes(&frames);
        let expected = [
            Message::text(text),
            Message::Ping(b"p".to_vec().into()),
            Message::binary(b"small".to_vec()),
            Message::binary(binary),
            Message::text(""),
        ];
        for (read, room) in
            [(WEBSOCKET_READ_BUFFER, WEBSOCKET_READ_BUFFER), (1, 7), (5000, 3), (777, 1 << 20)]
        {
            let (upgrade, framed) = through(&bytes, read, room);
            // At most a line per read during the upgrade: the handshake never reads into the frames.
            assert_eq!(upgrade, REQUEST, "{read}/{room}");
            let (messages, largest) = read_messages(&framed);
            let summary = |m: &[Message]| m.iter().map(|m| (m.len(), m.is_text())).collect::<Vec<_>>();
            assert_eq!(summary(&messages), summary(&expected), "{read}/{room}");
            assert!(messages == expected, "{read}/{room}: the same sizes, other bytes");
            assert!(largest <= PIECE, "a frame of {largest} bytes reached the codec");
        }
    }

    #[test]
    fn what_the_codec_refuses_reaches_it_as_it_came() {
        // Unmasked, over the codec's limit, or not a frame at all: the codec sees the same bytes.
        let mut unmasked = Vec::new();
        Frame::message(vec![0; LARGE_MESSAGE_BYTES + 1], OpCode::Data(Data::Binary), true)
            .format(&mut unmasked)
            .unwrap();
        let mut oversized = Vec::new();
        let header = FrameHeader { mask: Some([1, 2, 3, 4]), ..FrameHeader::default() };
        header.format(MAX_WEBSOCKET_MESSAGE as u64 + 1, &mut oversized).unwrap();
        oversized.extend([0; 100]);
        for frames in [unmasked, oversized, vec![0xff; 40]] {
            let mut bytes = REQUEST.to_vec();
            bytes.extend(&frames);
            let (_, framed) = through(&bytes, 1000, 1000);
            assert_eq!(framed, frames);
        }
    }
}
