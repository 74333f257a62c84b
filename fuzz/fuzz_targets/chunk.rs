//! Binary messages: `chunk::decode` splits any bytes without panicking, and inverts `encode`.
#![no_main]

use agentd_protocol::chunk;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match chunk::decode(data) {
        Ok((id, payload)) => assert_eq!(chunk::encode(id, payload), data),
        Err(chunk::ShortChunk(len)) => assert!(len == data.len() && len < 8),
    }
});
