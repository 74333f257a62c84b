//! Binary websocket messages: an 8-byte big-endian request id, then raw payload bytes.
//!
//! The id says which stream the bytes belong to: the data of an `upload` (client to server), of a
//! `download` (server to client), or the live output of an `exec` that asked for `stream`. A request
//! has at most one such stream, so no further tag is needed.

use thiserror::Error;

/// Length of the id header of a binary message.
pub const HEADER_LEN: usize = 8;

/// A binary message shorter than its header.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("binary message of {0} bytes is shorter than its 8-byte id header")]
pub struct ShortChunk(pub usize);

/// Builds a binary message carrying `data` for request `id`.
pub fn encode(id: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + data.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// Splits a binary message into its request id and payload.
pub fn decode(message: &[u8]) -> Result<(u64, &[u8]), ShortChunk> {
    match message.split_first_chunk::<HEADER_LEN>() {
        Some((id, data)) => Ok((u64::from_be_bytes(*id), data)),
        None => Err(ShortChunk(message.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let msg = encode(0x0102_0304_0506_0708, b"\0data\xff");
        assert_eq!(&msg[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(decode(&msg), Ok((0x0102_0304_0506_0708, &b"\0data\xff"[..])));
        assert_eq!(decode(&encode(9, b"")), Ok((9, &b""[..])));
    }

    #[test]
    fn short_message_is_an_error() {
        assert_eq!(decode(b"1234567"), Err(ShortChunk(7)));
    }
}
