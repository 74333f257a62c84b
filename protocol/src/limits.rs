//! Sizes both sides enforce. Each has its reason beside it; `protocol/README.md` lists them for clients.

/// Largest text (JSON) message agentd accepts. It bounds the memory one request can pin (an `exec`
/// with inline stdin is the largest legitimate one); a larger message gets a `frame_too_large` error
/// reply and the connection stays up.
pub const MAX_TEXT_MESSAGE: usize = 16 * 1024 * 1024;

/// Largest JSON text of one reply agentd sends (an `fs_result` with its whole result). The same as
/// `MAX_TEXT_MESSAGE`, so both directions have one bound: a client sized for what it may send can
/// read every reply, and one verb's result (a `grep` of a huge file, a base64 `read`) cannot make
/// agentd build a reply of arbitrary size. Verbs that collect stop early and say `truncated`.
pub const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// Part of `MAX_REPLY_BYTES` kept for what surrounds a verb's list or content: the message type,
/// the id and the result's other fields take a few hundred bytes; the rest is the verb's budget.
pub const REPLY_ENVELOPE_BYTES: usize = 4096;

/// Largest file `read` returns as base64 when its UTF-8 sniff fails (the contract has no cap
/// there): the largest size whose base64 plus the envelope fits `MAX_REPLY_BYTES` (12 MiB less
/// 3 KiB). A larger file gets `Binary file exceeds maximum preview size of {N} bytes`.
pub const MAX_READ_BASE64_BYTES: usize = (MAX_REPLY_BYTES - REPLY_ENVELOPE_BYTES) / 4 * 3;

/// Largest binary message: the 8-byte id plus at most 4 MiB of data. Larger chunks buy no speed
/// and make one slow upload hold more memory.
pub const MAX_BINARY_MESSAGE: usize = 8 + 4 * 1024 * 1024;

/// Hard limit given to the websocket codec. A message above it cannot be read without buffering it,
/// so the connection is closed (code 1009) instead of answered; everything between the limits above
/// and this one is read, discarded and answered with `frame_too_large`.
pub const MAX_WEBSOCKET_MESSAGE: usize = 64 * 1024 * 1024;

/// The websocket codec's read size, on both ends of a link. The codec zero-fills this much before
/// every read of the socket, so the default (128 KiB) cost each small message a 128 KiB memset on
/// each side (7 % of a busy client's CPU samples here); a large frame is still read whole, in reads
/// of this size.
pub const WEBSOCKET_READ_BUFFER: usize = 16 * 1024;

/// Size of the data chunks agentd sends and recommends: large enough that per-frame overhead is
/// noise, small enough that a 1 GiB transfer never holds more than a few chunks in memory.
pub const CHUNK_SIZE: usize = 256 * 1024;

/// Default cap of the capture file: output beyond it is counted and dropped.
pub const DEFAULT_MAX_CAPTURE_BYTES: u64 = 10 * 1024 * 1024;

/// Largest capture file of an offloaded exec; a larger `max_capture_bytes` is clamped to it. It
/// bounds the disk one command's output can fill (the contract's default is 10 MiB).
pub const MAX_OFFLOAD_CAPTURE_BYTES: u64 = 1024 * 1024 * 1024;

/// Plain `exec` always returns at least this much output untruncated (the contract's 512000 bytes).
pub const MIN_INLINE_CAPTURE_BYTES: u64 = 512_000;

/// Requests one connection may have in flight; one more gets `too_many_requests`. It bounds the
/// processes and files a single client can hold open.
pub const MAX_IN_FLIGHT: usize = 4096;

/// Requests in flight across all connections; one more gets `too_many_requests`. It bounds what all
/// clients together can make agentd hold (processes, open files, queued verbs), whatever the number
/// of connections.
pub const MAX_IN_FLIGHT_GLOBAL: usize = 8192;

/// Blocking file work (`fs` verbs, downloads) one connection runs at once; its other such requests
/// wait, still in flight and cancellable. One client's walks and reads then take at most this many
/// threads of the blocking pool (plus a verb's own few walker threads), so other clients keep
/// theirs.
pub const MAX_BLOCKING_PER_CONNECTION: usize = 4;

/// Threads of agentd's blocking pool (file IO, transfers' reads and writes). Work beyond it queues.
/// It bounds agentd's threads whatever the clients ask; nothing blocks a thread indefinitely (verbs
/// poll their cancellation, FIFOs and devices are refused or opened non-blocking), so the queue moves.
pub const MAX_BLOCKING_THREADS: usize = 64;

/// Seconds a new connection has to complete its HTTP upgrade (with the token, on TCP); a socket
/// that has not authenticated by then — half-sent, or idle since it connected — is closed. A real
/// client needs milliseconds.
pub const HANDSHAKE_TIMEOUT_SECS: u64 = 5;

/// Connections open at once, authenticated or not (further capped by the fd budget: the soft
/// `RLIMIT_NOFILE`, raised to the hard one at start, less `FD_RESERVE`). When full, the oldest
/// connection still in its upgrade is closed to make room; only when all are authenticated is a new
/// one closed unanswered.
pub const MAX_CONNECTIONS: usize = 1024;

/// Connections still in their upgrade at once; one more closes the oldest of them. A flood of
/// half-sent upgrades thus never keeps a client with the right token out.
pub const MAX_PENDING_CONNECTIONS: usize = 128;

/// File descriptors kept free of connections for the work itself (exec pipes and capture files,
/// transfers, verbs' walks), so a full connection budget never makes a request fail to open a file.
pub const FD_RESERVE: usize = 256;

/// Milliseconds agentd waits at shutdown (SIGTERM) for blocking work still running after its
/// requests were cancelled, before exiting anyway: a stuck file system never keeps agentd alive.
pub const SHUTDOWN_GRACE_MS: u64 = 1000;

/// Upper clamp of a plain exec's capture (`max_capture_bytes`) and of an offload's `inline_budget`:
/// the output travels inline in one reply, and 12 MiB is the most whose base64 still fits
/// [`MAX_REPLY_BYTES`]. Output whose JSON escaping would not fit is cut and reported `truncated`.
pub const MAX_INLINE_CAPTURE: u64 = 12 * 1024 * 1024;

/// Bytes of replies queued for sending, across all connections. A reply larger than
/// [`SMALL_REPLY_BYTES`] waits for room before it is queued, so clients that read slowly (or not at
/// all) make agentd hold at most this much however many large replies they ask for.
pub const MAX_QUEUED_REPLY_BYTES: usize = 64 * 1024 * 1024;

/// Replies up to this size never wait for [`MAX_QUEUED_REPLY_BYTES`]: acknowledgements, errors and
/// small results always go out.
pub const SMALL_REPLY_BYTES: usize = 64 * 1024;

/// Seconds agentd waits for a client to take a reply off the socket. A client that reads nothing for
/// this long while agentd has something for it is disconnected (as if it had closed: its execs
/// are killed), so it cannot hold queued replies forever.
pub const WRITE_TIMEOUT_SECS: u64 = 60;

/// Bytes of one message a connection may have read before that message counts as large: past it,
/// reading on takes one of [`MAX_LARGE_MESSAGES`] permits shared by all connections. Requests and
/// the recommended 256 KiB upload chunks stay below it and never wait.
pub const LARGE_MESSAGE_BYTES: usize = 1024 * 1024;

/// Large messages being received at once, across connections. The websocket codec holds a message
/// whole until its last byte, up to [`MAX_WEBSOCKET_MESSAGE`]; this bounds what unfinished large
/// messages hold, however many connections send them. The others wait, reading nothing.
pub const MAX_LARGE_MESSAGES: usize = 2;

/// Seconds a connection may take to finish a large message once it holds a permit; slower, it is
/// disconnected, so a slow sender cannot keep the permits from others.
pub const LARGE_MESSAGE_TIMEOUT_SECS: u64 = 30;

/// Kept processes (`keep` above [`MAX_HEALING_GRACE_SECS`], or `0`) one client (one connection)
/// may have running at once; one more is refused (`limit_reached`). Each holds a journal file,
/// its pipes, and its process tree past its connection: this bounds what one client that leaves
/// its processes behind can make agentd hold, and leaves room for other clients.
pub const MAX_KEPT_PROCESSES: usize = 128;

/// Kept processes (as [`MAX_KEPT_PROCESSES`] counts them) running at once across all clients; one
/// more is refused (`limit_reached`).
pub const MAX_KEPT_PROCESSES_TOTAL: usize = 4 * MAX_KEPT_PROCESSES;

/// The longest `keep` grace, in seconds, of an exec kept to heal: a host keeps every `execute`
/// over TCP this long so that a dropped link can attach again. Such an exec is on a budget of its
/// own ([`MAX_HEALING_PROCESSES`]), not the kept processes', so one client's kept processes never
/// make another's executes fail; its capture is a plain exec's (at most [`MAX_INLINE_CAPTURE`]).
pub const MAX_HEALING_GRACE_SECS: f64 = 30.0;

/// Execs kept to heal (a grace of at most [`MAX_HEALING_GRACE_SECS`]) one client may have running
/// at once: as many as it may have requests in flight.
pub const MAX_HEALING_PROCESSES: usize = MAX_IN_FLIGHT;

/// Execs kept to heal running at once across all clients: as many as all clients may have
/// requests in flight. Past their connection they run at most their grace.
pub const MAX_HEALING_PROCESSES_TOTAL: usize = MAX_IN_FLIGHT_GLOBAL;

/// Bytes one process's journal may hold: its capture cap (`max_capture_bytes`, clamped to the
/// offload cap). Output past it is counted and dropped, and an attach reports it as a gap.
pub const MAX_JOURNAL_BYTES: u64 = MAX_OFFLOAD_CAPTURE_BYTES;

/// Bytes all journals together may hold on disk: a running kept process counts its whole cap (an
/// exec kept to heal counts none: its capture is a plain exec's), a retained one what it stored. A new kept process over it first makes the oldest retained results
/// go, then is refused (`limit_reached`). It bounds the disk left processes can fill.
pub const MAX_JOURNAL_BYTES_TOTAL: u64 = 4 * 1024 * 1024 * 1024;

/// Finished kept processes whose result and journal are retained for `attach` and `wait`; past it,
/// the oldest finished one goes (as `forget` would).
pub const MAX_RETAINED_RESULTS: usize = 256;

/// Seconds a finished kept process's result and journal are retained after its end; then they go
/// (as `forget` would). An hour covers a client that reconnects after a long outage.
pub const RESULT_RETENTION_SECS: u64 = 3600;

/// Clients attached to one process at once (`attach` requests in flight, and the exec's own
/// connection); one more gets `limit_reached`. Each is a reader of the journal and a stream.
pub const MAX_ATTACHMENTS: usize = 16;

/// Largest `keep` grace, in seconds (a week); `0` asks for no limit, which the kept process cap
/// still bounds.
pub const MAX_KEEP_SECS: f64 = 7.0 * 24.0 * 3600.0;

/// Bytes of one `write_stdin` once decoded; a larger one is refused (`invalid_field`): bigger
/// input is sent in several writes, each answered when the pipe has taken it.
pub const MAX_STDIN_WRITE: usize = 1024 * 1024;

/// `write_stdin` requests waiting for one process's pipe at once; one more is refused
/// (`too_many_requests`). With [`MAX_STDIN_WRITE`] it bounds the input agentd holds for a process
/// that does not read: flow control is the answer to each write.
pub const MAX_STDIN_WAITING: usize = 4;

/// Bytes of a process's command a `processes` listing shows, as JSON text; the rest is cut
/// (`command_truncated`). A command may be as long as a message (16 MiB): 200 retained ones once
/// made a 23 MiB listing, past [`MAX_REPLY_BYTES`]. `wait` and `attach` are not cut (one process).
pub const MAX_LISTED_COMMAND_BYTES: usize = 4096;

/// Bytes of one listed process's other fields at most, as JSON: its id (at most 64 bytes), a
/// signal name, a dozen numbers and flags with their names (about 450 bytes in all, measured in
/// `limits::tests`), with room to spare.
pub const LISTED_PROCESS_FIELDS_BYTES: usize = 1024;

/// Processes in one `processes` reply; past it, the reply says `next` and the client asks again
/// from there.
pub const PROCESSES_PAGE: usize = 1000;

// A full page of the longest entries fits one reply.
const _: () = assert!(
    PROCESSES_PAGE * (MAX_LISTED_COMMAND_BYTES + LISTED_PROCESS_FIELDS_BYTES + 1) + REPLY_ENVELOPE_BYTES
        <= MAX_REPLY_BYTES
);

/// Bytes `s` takes inside a JSON string as serde_json writes it (quotes excluded): what a reply
/// budget counts.
pub fn json_escaped_len(s: &str) -> usize {
    s.len() + s.bytes().map(escape_extra).sum::<usize>()
}

/// The longest prefix of `s` (cut on a character boundary) whose escaped form fits `budget` bytes.
pub fn json_prefix_within(s: &str, budget: usize) -> &str {
    let mut used = 0;
    for (at, c) in s.char_indices() {
        let cost = c.len_utf8() + if c.is_ascii() { escape_extra(c as u8) } else { 0 };
        if used + cost > budget {
            return &s[..at];
        }
        used += cost;
    }
    s
}

/// Extra bytes serde_json spends on one byte of a string: `\"`, `\\`, the short escapes and `\u00XX`.
fn escape_extra(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
        0..0x20 => 5,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_lengths_are_what_serde_json_writes() {
        let samples =
            ["", "plain", "q\"b\\", "\n\r\t\u{8}\u{c}", "\u{0}\u{1}\u{1f}\u{7f}", "é😀", "a\u{0}é\"z"];
        for s in samples {
            let written = serde_json::to_string(s).unwrap();
            assert_eq!(json_escaped_len(s), written.len() - 2, "{s:?}");
        }
    }

    #[test]
    fn the_longest_listed_process_fits_its_share_of_a_page() {
        use crate::process::{ProcessInfo, ProcessState, StdinMode, TerminalSize};
        let mut info = ProcessInfo {
            process: "p".repeat(crate::message::MAX_PROCESS_NAME),
            // Every byte escaped to six.
            command: "\u{1}".repeat(MAX_TEXT_MESSAGE),
            state: ProcessState::Exited,
            pid: u32::MAX,
            started: f64::MAX,
            ended: Some(f64::MAX),
            exit_code: Some(i32::MIN),
            ending: crate::process::Ending {
                signal: Some("SIGRTMAX-14".to_owned()),
                timed_out: true,
                cancelled: true,
                abandoned: true,
            },
            total_bytes: u64::MAX,
            stored_bytes: u64::MAX,
            stray_processes: Some(u32::MAX),
            kept: true,
            keep: Some(f64::MAX),
            attached: u32::MAX,
            stdin: Some(StdinMode::Pipe),
            pty: Some(TerminalSize { rows: u16::MAX, cols: u16::MAX }),
            command_truncated: false,
        };
        info.cut_command();
        assert!(info.command_truncated);
        let json = serde_json::to_string(&info).unwrap();
        assert!(json.len() <= MAX_LISTED_COMMAND_BYTES + LISTED_PROCESS_FIELDS_BYTES, "{}", json.len());
        let mut short = ProcessInfo { command: "echo hi".to_owned(), ..ProcessInfo::default() };
        short.cut_command();
        assert_eq!((short.command.as_str(), short.command_truncated), ("echo hi", false));
    }

    #[test]
    fn prefixes_fit_their_budget_and_cut_on_characters() {
        let s = "ab\u{1}é😀\"c";
        for budget in 0..=json_escaped_len(s) + 1 {
            let prefix = json_prefix_within(s, budget);
            assert!(json_escaped_len(prefix) <= budget, "{budget}");
            // The next character would not have fitted.
            if let Some(next) = s[prefix.len()..].chars().next() {
                let longer = &s[..prefix.len() + next.len_utf8()];
                assert!(json_escaped_len(longer) > budget, "{budget}");
            }
        }
        assert_eq!(json_prefix_within(s, usize::MAX), s);
    }
}
