//! # agentd-protocol
//!
//! The wire types of agentd and the framing helpers that make results unforgeable. This crate does no
//! IO: it turns bytes into typed messages and back, so the daemon, the host library and clients in other
//! languages (see `protocol/README.md`) agree on one definition.
//!
//! ## Layout
//! - [`message`]: every websocket text message, client to server ([`ClientMessage`]) and server to
//!   client ([`ServerMessage`]), the [`ErrorCode`]s, [`decode_client`] with precise errors, and the
//!   protocol version.
//! - [`chunk`]: binary websocket frames (an 8-byte request id, then payload) that carry file data and
//!   live output.
//! - [`limits`]: sizes both sides enforce, with the reason for each.
//! - [`contract`]: the model-facing result types of the `BaseSandbox` contract (`ExecuteResponse`,
//!   `FileUploadResponse`, …) and the per-file transfer error codes.
//! - [`fs`]: the seven file verbs: [`FsRequest`] and the result types.
//! - [`glob`]: glob matching as deepagents does it (wcmatch's rules): the name matcher, brace
//!   expansion, whole paths, and the include globs of `glob` and `grep`.
//! - [`framing`]: a random quoted-heredoc delimiter that never occurs in the command it frames.
//! - [`permission`]: path permission rules (deepagents' `FilesystemPermission` shape).
//! - [`profile`]: sandbox profiles, per-request tightening, and the report of what was enforced;
//!   [`profile::env`]: which of the harness's variables a sandbox the host starts passes on.
//! - [`process`]: processes that outlive their connection: `keep`, `attach` from a byte offset,
//!   `processes`, `kill`, `wait`, `forget`, a stdin pipe and a terminal.
//! - [`meta`]: the result meta line with a random per-call sentinel, so command output cannot forge it.
//! - `cli` (feature `cli`): the file verbs as clap subcommands, shared by `agentd fs` and `agentctl`.
//!
//! ## Example
//! ```
//! use agentd_protocol::{decode_client, ClientMessage};
//!
//! let msg = decode_client(r#"{"type":"exec","id":7,"command":"echo hi","timeout":2.5}"#).unwrap();
//! match msg {
//!     ClientMessage::Exec(exec) => {
//!         assert_eq!(exec.id, 7);
//!         assert_eq!(exec.timeout, Some(2.5));
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```

pub mod chunk;
#[cfg(feature = "cli")]
pub mod cli;
pub mod contract;
pub mod framing;
pub mod fs;
pub mod glob;
pub mod limits;
pub mod message;
pub mod meta;
pub mod permission;
pub mod process;
pub mod profile;

pub use contract::{
    ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse, TransferError,
};
pub use fs::{FsRequest, FsResponse, Verb};
pub use message::{
    CancelRequest, CancelResult, ClientMessage, DecodeError, DownloadRequest, DownloadResult, DownloadStart,
    ErrorCode, ErrorReply, ExecRequest, ExecResult, ExecStarted, Hello, HelloReply, Offload,
    PROTOCOL_VERSION, ServerMessage, UploadEnd, UploadRequest, UploadResult, decode_client,
};
pub use message::{FsMessage, FsReply};
pub use process::{Ending, ProcessInfo, ProcessState, StdinMode, TerminalSize};
