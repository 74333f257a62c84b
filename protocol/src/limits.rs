//! Sizes both sides enforce. Each has its reason beside it; `protocol/README.md` lists them for clients.

/// Largest text (JSON) message agentd accepts. It bounds the memory one request can pin (an `exec`
/// with inline stdin is the largest legitimate one); a larger message gets a `frame_too_large` error
/// reply and the connection stays up.
pub const MAX_TEXT_MESSAGE: usize = 16 * 1024 * 1024;

/// Largest binary message: the 8-byte id plus at most 4 MiB of data. Larger chunks buy no speed
/// and make one slow upload hold more memory.
pub const MAX_BINARY_MESSAGE: usize = 8 + 4 * 1024 * 1024;

/// Hard limit given to the websocket codec. A message above it cannot be read without buffering it,
/// so the connection is closed (code 1009) instead of answered; everything between the limits above
/// and this one is read, discarded and answered with `frame_too_large`.
pub const MAX_WEBSOCKET_MESSAGE: usize = 64 * 1024 * 1024;

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
