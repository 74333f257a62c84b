//! The derived offload's meta line: `meta::parse` takes any output (a command can print anything,
//! forged meta lines included) without panicking; only the line with the right sentinel counts.
#![no_main]

use agentd_protocol::ExecuteResponse;
use agentd_protocol::meta;
use libfuzzer_sys::fuzz_target;

/// The sentinel the fuzzed output must not be able to guess.
const SENTINEL: &str = "AGENTD_META_00112233445566778899__";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (exit_code, truncated) = (data.first().map(|b| i32::from(*b)), data.len().is_multiple_of(2));
    let response = ExecuteResponse { output: text.to_owned(), exit_code, truncated };
    let parsed = meta::parse(response.clone(), SENTINEL);
    if !text.starts_with(SENTINEL) {
        assert!(!parsed.offloaded);
        assert_eq!(parsed.response, response);
    }
});
