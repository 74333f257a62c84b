//! Any text a peer sends: `decode_client` (agentd's side) and `ServerMessage::from_json` (the
//! client's) return a message or an error naming the problem, never panic; a client message they
//! accept encodes back to JSON that decodes to the same message.
#![no_main]

use agentd_protocol::ServerMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match agentd_protocol::decode_client(text) {
        Ok(message) => {
            let again = agentd_protocol::decode_client(&message.to_json());
            assert_eq!(again.as_ref().ok(), Some(&message), "re-encoded: {again:?}");
        }
        Err(error) => {
            let _ = error.into_reply().to_json();
        }
    }
    if let Ok(message) = ServerMessage::from_json(text) {
        let _ = message.to_json();
    }
});
