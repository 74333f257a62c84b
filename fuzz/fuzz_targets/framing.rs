//! The derived path's heredoc: for any command, `frame` picks a delimiter that does not occur in it,
//! and what the heredoc delivers, unframed, is the command byte for byte.
#![no_main]

use agentd_protocol::framing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(command) = std::str::from_utf8(data) else { return };
    let mut rng = rand::rng();
    let script = framing::frame("sh -s", command, &mut rng);
    let (first, rest) = script.split_once('\n').expect("a first line");
    let delimiter = first.strip_prefix("sh -s <<'").and_then(|d| d.strip_suffix('\'')).expect("head");
    assert!(!command.contains(delimiter));
    // The shell's heredoc ends at the first line that is exactly the delimiter.
    let mut body = Vec::new();
    let mut ended = false;
    for line in rest.split_inclusive('\n') {
        if line == format!("{delimiter}\n") {
            ended = true;
            break;
        }
        body.extend_from_slice(line.as_bytes());
    }
    assert!(ended);
    assert_eq!(framing::unframe(&body), command.as_bytes());
});
