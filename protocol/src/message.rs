//! Text (JSON) messages. Every message is an object with a `type` and, except for connection-level
//! errors, the request `id` the client chose. Many requests may be in flight on one connection; each
//! gets exactly one terminal reply with its id (`hello`, `exec_result`, `upload_result`,
//! `download_result`, `cancel_result` or `error`), possibly preceded by non-terminal ones
//! (`exec_started`, `download_start`, binary chunks).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::fs::{FsRequest, FsResponse};
use crate::process::{
    AttachRequest, CloseStdinRequest, Ending, ForgetRequest, KillRequest, KillResult, OutputGap, ProcessDone,
    ProcessesRequest, ProcessesResult, ResizeRequest, StdinMode, StdinWritten, TerminalSize, WaitRequest,
    WaitResult, WriteStdinRequest,
};
use crate::profile::{Enforcement, ProfileOverride};

/// The protocol version this crate speaks. A client offers the versions it knows in `hello`; the
/// server picks the highest one it shares.
pub const PROTOCOL_VERSION: u32 = 1;

/// Messages from the client. Field docs are the wire docs; `protocol/README.md` shows each in JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    Hello(Hello),
    Exec(ExecRequest),
    Cancel(CancelRequest),
    Upload(UploadRequest),
    UploadEnd(UploadEnd),
    Download(DownloadRequest),
    Fs(FsMessage),
    Attach(AttachRequest),
    Processes(ProcessesRequest),
    Kill(KillRequest),
    Wait(WaitRequest),
    Forget(ForgetRequest),
    WriteStdin(WriteStdinRequest),
    CloseStdin(CloseStdinRequest),
    Resize(ResizeRequest),
}

impl ClientMessage {
    /// The request id the message carries.
    pub fn id(&self) -> u64 {
        match self {
            Self::Hello(m) => m.id,
            Self::Exec(m) => m.id,
            Self::Cancel(m) => m.id,
            Self::Upload(m) => m.id,
            Self::UploadEnd(m) => m.id,
            Self::Download(m) => m.id,
            Self::Fs(m) => m.id,
            Self::Attach(m) => m.id,
            Self::Processes(m) => m.id,
            Self::Kill(m) => m.id,
            Self::Wait(m) => m.id,
            Self::Forget(m) => m.id,
            Self::WriteStdin(m) => m.id,
            Self::CloseStdin(m) => m.id,
            Self::Resize(m) => m.id,
        }
    }

    /// Encodes the message as the JSON text the server expects.
    pub fn to_json(&self) -> String {
        match self {
            Self::Hello(m) => with_type("hello", m),
            Self::Exec(m) => with_type("exec", m),
            Self::Cancel(m) => with_type("cancel", m),
            Self::Upload(m) => with_type("upload", m),
            Self::UploadEnd(m) => with_type("upload_end", m),
            Self::Download(m) => with_type("download", m),
            Self::Fs(m) => with_type("fs", m),
            Self::Attach(m) => with_type("attach", m),
            Self::Processes(m) => with_type("processes", m),
            Self::Kill(m) => with_type("kill", m),
            Self::Wait(m) => with_type("wait", m),
            Self::Forget(m) => with_type("forget", m),
            Self::WriteStdin(m) => with_type("write_stdin", m),
            Self::CloseStdin(m) => with_type("close_stdin", m),
            Self::Resize(m) => with_type("resize", m),
        }
    }
}

/// Opens a session: the first message on every connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub id: u64,
    /// Protocol versions the client can speak.
    pub versions: Vec<u32>,
}

/// Runs `command` under `/bin/sh -c`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub id: u64,
    /// POSIX shell text; may span lines and hold heredocs.
    pub command: String,
    /// Working directory; relative paths resolve against the workspace. Default: the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables added to (or replacing) the child's inherited environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Seconds, fractions allowed. Absent: the server's default. `0`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// Bytes for the command's stdin, base64. Absent: stdin is `/dev/null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_base64: Option<String>,
    /// Send output as binary chunks while the command runs (and `exec_started` first).
    #[serde(default, skip_serializing_if = "is_false")]
    pub stream: bool,
    /// Cap of the capture file; output past it is counted and dropped. Default 10 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_capture_bytes: Option<u64>,
    /// Present: keep large output in a file and answer with a preview (the contract's offload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<Offload>,
    /// Tightens the server's sandbox profile for this command; loosening is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Box<ProfileOverride>>,
    /// Keep the process when this connection closes: it runs on (its timeout still counts), its
    /// output goes to a journal on disk, and any connection may `attach` to it. The value is its
    /// grace: seconds it may run with no client attached before the kill ladder ends it (`0`: no
    /// grace limit). Absent: the exec ends with its connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<f64>,
    /// The kept process's name, chosen by the client (with `keep` only; [`valid_process_name`]):
    /// a request whose name is held already is refused with `process_exists` and starts nothing.
    /// So a client whose connection dropped before `exec_started` sends the request again under
    /// the same name and, refused, attaches: the command runs once. Absent: agentd names it.
    /// Only where `hello` says `named_processes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// `"pipe"`: stdin stays open for `write_stdin` until `close_stdin`. Not with `stdin_base64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinMode>,
    /// Run under a new terminal of this size: the shell is a session leader with the terminal as
    /// its controlling terminal and as stdin, stdout and stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<TerminalSize>,
}

/// Where an offloaded exec keeps its output, and how much may come back inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offload {
    /// Path of the capture file (relative: under the workspace). Parents are created.
    pub capture_path: String,
    /// Output of at most this many bytes comes back whole and the file is removed.
    pub inline_budget: u64,
}

/// Stops a running exec (same kill ladder as a timeout) or aborts an upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub id: u64,
    /// The id of the request to cancel.
    pub target: u64,
}

/// Starts an upload; the data follows as binary chunks with the same id, then `upload_end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadRequest {
    pub id: u64,
    /// Absolute destination path. Missing parents are created; an existing file is replaced.
    pub path: String,
    /// File mode bits for a new file (default 0o644).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// Ends an upload: the server checks the digest, then renames the data into place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadEnd {
    pub id: u64,
    /// Lower-case hex sha256 of all bytes sent.
    pub sha256: String,
}

/// Asks for a file; it comes as `download_start`, binary chunks, then `download_result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownloadRequest {
    pub id: u64,
    /// Absolute path of the file.
    pub path: String,
}

/// Runs one file verb (`ls`, `read`, `write`, `edit`, `glob`, `grep`, `delete`) natively.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FsMessage {
    pub id: u64,
    #[serde(flatten)]
    pub request: FsRequest,
}

/// The result of an `fs` request: `result` is the verb's result keyed by the verb's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FsReply {
    pub id: u64,
    pub result: FsResponse,
}

/// Messages from the server.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerMessage {
    Hello(HelloReply),
    ExecStarted(ExecStarted),
    ExecResult(ExecResult),
    CancelResult(CancelResult),
    UploadResult(UploadResult),
    DownloadStart(DownloadStart),
    DownloadResult(DownloadResult),
    FsResult(FsReply),
    Error(ErrorReply),
    OutputGap(OutputGap),
    ProcessesResult(ProcessesResult),
    KillResult(KillResult),
    WaitResult(WaitResult),
    ForgetResult(ProcessDone),
    WriteStdinResult(StdinWritten),
    CloseStdinResult(ProcessDone),
    ResizeResult(ProcessDone),
}

impl ServerMessage {
    /// Encodes the message as JSON text.
    pub fn to_json(&self) -> String {
        match self {
            Self::Hello(m) => with_type("hello", m),
            Self::ExecStarted(m) => with_type("exec_started", m),
            Self::ExecResult(m) => with_type("exec_result", m),
            Self::CancelResult(m) => with_type("cancel_result", m),
            Self::UploadResult(m) => with_type("upload_result", m),
            Self::DownloadStart(m) => with_type("download_start", m),
            Self::DownloadResult(m) => with_type("download_result", m),
            Self::FsResult(m) => with_type("fs_result", m),
            Self::Error(m) => with_type("error", m),
            Self::OutputGap(m) => with_type("output_gap", m),
            Self::ProcessesResult(m) => with_type("processes_result", m),
            Self::KillResult(m) => with_type("kill_result", m),
            Self::WaitResult(m) => with_type("wait_result", m),
            Self::ForgetResult(m) => with_type("forget_result", m),
            Self::WriteStdinResult(m) => with_type("write_stdin_result", m),
            Self::CloseStdinResult(m) => with_type("close_stdin_result", m),
            Self::ResizeResult(m) => with_type("resize_result", m),
        }
    }

    /// Parses a server message (what a client does with each text frame).
    pub fn from_json(text: &str) -> Result<Self, DecodeError> {
        // Read `type` and `id` first, then the whole text straight into its type: no intermediate
        // tree, which matters for a grep result of megabytes.
        let envelope: Envelope<'_> = serde_json::from_str(text)
            .map_err(|e| DecodeError::new(None, ErrorCode::MalformedFrame, format!("not a message: {e}")))?;
        let id = envelope.id;
        let Some(kind) = envelope.kind else {
            return Err(DecodeError::new(id, ErrorCode::MissingField, "missing field `type`"));
        };
        match kind.as_ref() {
            "hello" => typed(text, id).map(Self::Hello),
            "exec_started" => typed(text, id).map(Self::ExecStarted),
            "exec_result" => typed(text, id).map(Self::ExecResult),
            "cancel_result" => typed(text, id).map(Self::CancelResult),
            "upload_result" => typed(text, id).map(Self::UploadResult),
            "download_start" => typed(text, id).map(Self::DownloadStart),
            "download_result" => typed(text, id).map(Self::DownloadResult),
            "fs_result" => typed(text, id).map(Self::FsResult),
            "error" => typed(text, id).map(Self::Error),
            "output_gap" => typed(text, id).map(Self::OutputGap),
            "processes_result" => typed(text, id).map(Self::ProcessesResult),
            "kill_result" => typed(text, id).map(Self::KillResult),
            "wait_result" => typed(text, id).map(Self::WaitResult),
            "forget_result" => typed(text, id).map(Self::ForgetResult),
            "write_stdin_result" => typed(text, id).map(Self::WriteStdinResult),
            "close_stdin_result" => typed(text, id).map(Self::CloseStdinResult),
            "resize_result" => typed(text, id).map(Self::ResizeResult),
            _ => Err(DecodeError::new(id, ErrorCode::UnknownType, format!("unknown message type `{kind}`"))),
        }
    }

    /// The request id the message answers, if any.
    pub fn id(&self) -> Option<u64> {
        match self {
            Self::Hello(m) => Some(m.id),
            Self::ExecStarted(m) => Some(m.id),
            Self::ExecResult(m) => Some(m.id),
            Self::CancelResult(m) => Some(m.id),
            Self::UploadResult(m) => Some(m.id),
            Self::DownloadStart(m) => Some(m.id),
            Self::DownloadResult(m) => Some(m.id),
            Self::FsResult(m) => Some(m.id),
            Self::Error(m) => m.id,
            Self::OutputGap(m) => Some(m.id),
            Self::ProcessesResult(m) => Some(m.id),
            Self::KillResult(m) => Some(m.id),
            Self::WaitResult(m) => Some(m.id),
            Self::ForgetResult(m) | Self::CloseStdinResult(m) | Self::ResizeResult(m) => Some(m.id),
            Self::WriteStdinResult(m) => Some(m.id),
        }
    }
}

/// The server's answer to `hello`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HelloReply {
    pub id: u64,
    /// The version both sides now speak.
    pub version: u32,
    /// agentd's release, for logs.
    pub agentd_version: String,
    /// Absolute path of the workspace: the default cwd and the base of relative paths.
    pub workspace: String,
    /// Process id of agentd inside the sandbox.
    pub pid: u32,
    /// Largest text message accepted.
    pub max_text_message: u64,
    /// Largest binary message accepted (id header included).
    pub max_binary_message: u64,
    /// The kernel's landlock ABI (0: none).
    #[serde(default)]
    pub landlock_abi: u32,
    /// The server's sandbox profile and what of it this kernel can enforce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Enforcement>,
    /// `exec` takes `process`, a name the client chooses (absent: an older agentd, which refuses it).
    #[serde(default, skip_serializing_if = "is_false")]
    pub named_processes: bool,
}

/// The longest name a client may give a kept process.
pub const MAX_PROCESS_NAME: usize = 64;

/// Whether `name` may name a kept process (`exec.process`): 1 to [`MAX_PROCESS_NAME`] ASCII
/// letters, digits, `.`, `_` and `-`.
pub fn valid_process_name(name: &str) -> bool {
    (1..=MAX_PROCESS_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Sent before any output of a streamed exec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecStarted {
    pub id: u64,
    /// Process id of the shell (also its process group and session id).
    pub pid: u32,
    /// The process id that names this exec across connections (`attach`, `kill`, `processes`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub process: String,
}

/// The outcome of an exec. Output fields follow the capture rules in `protocol/README.md`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExecResult {
    pub id: u64,
    /// The shell's exit status; a death by signal `n` is `128 + n`.
    pub exit_code: i32,
    /// What ended it, beside its own exit.
    #[serde(flatten)]
    pub ending: Ending,
    /// The process id of this exec (see `exec_started`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub process: String,
    /// Wall time from spawn to the reaping of the shell, in seconds.
    pub duration: f64,
    /// Output (stdout and stderr merged) when it is valid UTF-8: the whole capture, the inline
    /// output or the preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The same bytes, base64, when they are not valid UTF-8 (then `output` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_base64: Option<String>,
    /// Output was dropped: past the capture cap for a plain exec; `capped` for an offloaded one.
    #[serde(default)]
    pub truncated: bool,
    /// Bytes the command wrote in all.
    pub total_bytes: u64,
    /// The capture stopped at `max_capture_bytes`.
    #[serde(default)]
    pub capped: bool,
    /// The output stayed in the capture file and `output` is a preview of it.
    #[serde(default)]
    pub offloaded: bool,
    /// Absolute path of the kept capture file (offloaded results only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_path: Option<String>,
    /// Lines the head/tail preview left out (the number in its marker); 0 without that marker.
    #[serde(default)]
    pub omitted_lines: u64,
    /// Why storing the output stopped short of the cap: the capture file could not be created or
    /// written (its path and the system's error). Output written after that was dropped, and
    /// `truncated` says so whenever any was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_error: Option<String>,
    /// What the sandbox profile enforced for this command (absent without a profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// The command was stopped by a resource limit: `cpu_seconds` (SIGXCPU) or `file_size` (SIGXFSZ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_exceeded: Option<String>,
    /// Processes of this exec still running when the shell was reaped (background processes it left
    /// behind; they run on until they exit or agentd stops, which kills them). Counted where the exec
    /// has its own pids cgroup, or when one of them held the output pipe open; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stray_processes: Option<u32>,
}

impl ExecResult {
    /// The line that ends the contract's view of an output that storing failed to keep whole
    /// (`capture_error` with `truncated`): a model reading the output learns that it is cut, and why.
    pub fn capture_note(&self) -> Option<String> {
        let why = self.capture_error.as_deref().filter(|_| self.truncated)?;
        Some(format!("[Output incomplete: {why}; the command wrote {} bytes]", self.total_bytes))
    }

    /// The output bytes, whichever field carries them.
    pub fn output_bytes(&self) -> Result<Vec<u8>, DecodeError> {
        use base64::Engine as _;
        match (&self.output, &self.output_base64) {
            (Some(text), _) => Ok(text.as_bytes().to_vec()),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| {
                DecodeError::new(Some(self.id), ErrorCode::InvalidField, format!("output_base64: {e}"))
            }),
            (None, None) => Ok(Vec::new()),
        }
    }

    /// Stores `bytes` in `output` when they are UTF-8, else in `output_base64`.
    pub fn set_output(&mut self, bytes: Vec<u8>) {
        use base64::Engine as _;
        match String::from_utf8(bytes) {
            Ok(text) => {
                self.output = Some(text);
                self.output_base64 = None;
            }
            Err(err) => {
                self.output = None;
                self.output_base64 = Some(base64::engine::general_purpose::STANDARD.encode(err.into_bytes()));
            }
        }
    }

    /// [`set_output`](Self::set_output), cut so that the encoded field (escaped text or base64) takes
    /// at most `budget` bytes of the reply. Returns whether output had to be dropped.
    pub fn set_output_within(&mut self, mut bytes: Vec<u8>, budget: usize) -> bool {
        let keep = match std::str::from_utf8(&bytes) {
            Ok(text) => crate::limits::json_prefix_within(text, budget).len(),
            // Base64: 4 bytes for every 3.
            Err(_) => bytes.len().min(budget / 4 * 3),
        };
        let whole = bytes.len();
        bytes.truncate(keep);
        // Cut binary output can become text, whose escaping may cost more than base64 would.
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let keep = crate::limits::json_prefix_within(text, budget).len();
            bytes.truncate(keep);
        }
        let cut = bytes.len() < whole;
        self.set_output(bytes);
        cut
    }
}

/// The answer to `cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelResult {
    pub id: u64,
    pub target: u64,
    /// The target was running (or uploading) and is being stopped.
    pub found: bool,
}

/// The outcome of one upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UploadResult {
    pub id: u64,
    pub path: String,
    /// `None` on success, else a transfer error code or a message.
    pub error: Option<String>,
}

/// A download is starting; `size` bytes follow as binary chunks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DownloadStart {
    pub id: u64,
    pub path: String,
    pub size: u64,
}

/// The end of a download: success with the digest of what was sent, or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DownloadResult {
    pub id: u64,
    pub path: String,
    /// `None` on success, else a transfer error code or a message.
    pub error: Option<String>,
    /// Lower-case hex sha256 of the bytes sent (success only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Bytes sent (success only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// A request (or message) that could not be served. Terminal for its id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// The request's id, when it could be read.
    pub id: Option<u64>,
    pub code: ErrorCode,
    /// What was wrong, for a person.
    pub message: String,
}

/// Machine-readable error codes of `error` replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, or not a JSON object, or a binary message without its id header.
    MalformedFrame,
    /// A `type` this version does not know.
    UnknownType,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong type or an impossible value, or is not known.
    InvalidField,
    /// A message above the size limits.
    FrameTooLarge,
    /// A request before a successful `hello`.
    HandshakeRequired,
    /// No protocol version in common.
    UnsupportedVersion,
    /// The id is already in flight on this connection.
    DuplicateId,
    /// A chunk or `upload_end` for an id with no open upload.
    UnknownId,
    /// Too many requests in flight on this connection.
    TooManyRequests,
    /// The command could not be started (missing cwd, shell not executable, …).
    SpawnFailed,
    /// The request would loosen the sandbox profile, or the command is not in `allowed_commands`.
    ProfileViolation,
    /// A strict profile's rules cannot all be enforced on this kernel: nothing was run.
    NotEnforceable,
    /// A failure inside agentd that is not the client's fault.
    Internal,
    /// No such process: it never existed, was forgotten, or its retained result expired.
    UnknownProcess,
    /// The process cannot do that now: not kept (attach), still running (forget), no stdin pipe or
    /// stdin closed (write_stdin), no terminal (resize), or it has ended.
    ProcessState,
    /// One of agentd's process bounds (`protocol/src/limits.rs`) is reached: nothing was started.
    LimitReached,
    /// An `attach`, `wait`, `write_stdin` or `close_stdin` was cancelled (by `cancel`): the process
    /// runs on.
    Cancelled,
    /// An `exec` named a process (`process`) that exists already: nothing was started; `attach`
    /// to it.
    ProcessExists,
}

/// Why a client message could not be decoded; becomes an `error` reply.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("{code:?}: {message}")]
pub struct DecodeError {
    pub id: Option<u64>,
    pub code: ErrorCode,
    pub message: String,
}

impl DecodeError {
    pub fn new(id: Option<u64>, code: ErrorCode, message: impl Into<String>) -> Self {
        Self { id, code, message: message.into() }
    }

    /// The `error` reply for this failure.
    pub fn into_reply(self) -> ServerMessage {
        ServerMessage::Error(ErrorReply { id: self.id, code: self.code, message: self.message })
    }
}

/// Parses one client text message, naming exactly what is wrong when it can't.
pub fn decode_client(text: &str) -> Result<ClientMessage, DecodeError> {
    let (kind, id, value) = split_envelope(text)?;
    if id.is_none() {
        let code = if value.get("id").is_some() { ErrorCode::InvalidField } else { ErrorCode::MissingField };
        return Err(DecodeError::new(None, code, "field `id` must be an unsigned integer"));
    }
    match kind.as_str() {
        "hello" => from_value(value, id).map(ClientMessage::Hello),
        "exec" => from_value(value, id).map(ClientMessage::Exec),
        "cancel" => from_value(value, id).map(ClientMessage::Cancel),
        "upload" => from_value(value, id).map(ClientMessage::Upload),
        "upload_end" => from_value(value, id).map(ClientMessage::UploadEnd),
        "download" => from_value(value, id).map(ClientMessage::Download),
        "fs" => from_value(value, id).map(ClientMessage::Fs),
        "attach" => from_value(value, id).map(ClientMessage::Attach),
        "processes" => from_value(value, id).map(ClientMessage::Processes),
        "kill" => from_value(value, id).map(ClientMessage::Kill),
        "wait" => from_value(value, id).map(ClientMessage::Wait),
        "forget" => from_value(value, id).map(ClientMessage::Forget),
        "write_stdin" => from_value(value, id).map(ClientMessage::WriteStdin),
        "close_stdin" => from_value(value, id).map(ClientMessage::CloseStdin),
        "resize" => from_value(value, id).map(ClientMessage::Resize),
        _ => Err(DecodeError::new(id, ErrorCode::UnknownType, format!("unknown message type `{kind}`"))),
    }
}

/// The part of a server message read before its type is known.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    id: Option<u64>,
}

/// A server message's text as its type (server messages ignore the `type` field they carry).
fn typed<T: for<'de> Deserialize<'de>>(text: &str, id: Option<u64>) -> Result<T, DecodeError> {
    serde_json::from_str(text).map_err(|e| field_error(id, &e))
}

/// Reads `type` and `id` and returns the object without `type`.
fn split_envelope(text: &str) -> Result<(String, Option<u64>, Value), DecodeError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| DecodeError::new(None, ErrorCode::MalformedFrame, format!("not valid JSON: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(DecodeError::new(None, ErrorCode::MalformedFrame, "a message must be a JSON object"));
    };
    let id = object.get("id").and_then(Value::as_u64);
    let kind = match object.remove("type") {
        Some(Value::String(kind)) => kind,
        Some(_) => {
            return Err(DecodeError::new(id, ErrorCode::InvalidField, "field `type` must be a string"));
        }
        None => {
            return Err(DecodeError::new(id, ErrorCode::MissingField, "missing field `type`"));
        }
    };
    Ok((kind, id, Value::Object(object)))
}

fn from_value<T: for<'de> Deserialize<'de>>(value: Value, id: Option<u64>) -> Result<T, DecodeError> {
    serde_json::from_value(value).map_err(|e| field_error(id, &e))
}

/// A serde error as a decode error: `missing_field` or `invalid_field`, with serde's words.
fn field_error(id: Option<u64>, err: &serde_json::Error) -> DecodeError {
    let message = err.to_string();
    let code =
        if message.starts_with("missing field") { ErrorCode::MissingField } else { ErrorCode::InvalidField };
    DecodeError::new(id, code, message)
}

/// `{"type":"<kind>", …the fields of `body`…}`, serialized once into one buffer (`type` first for
/// readers of logs).
fn with_type<T: Serialize>(kind: &str, body: &T) -> String {
    let mut out = format!("{{\"type\":\"{kind}\"").into_bytes();
    let start = out.len();
    // Our message structs always serialize to a JSON object, which cannot fail.
    if serde_json::to_writer(&mut out, body).is_err() || out.get(start) != Some(&b'{') {
        out.truncate(start);
        out.push(b'}');
    } else if out.len() == start + 2 {
        // `{}`: no fields to follow `type`.
        out.truncate(start + 1);
        out[start] = b'}';
    } else {
        out[start] = b',';
    }
    String::from_utf8(out).unwrap_or_default()
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_round_trips_through_json() {
        let msg = ClientMessage::Exec(ExecRequest {
            id: 3,
            command: "echo hi".into(),
            timeout: Some(1.5),
            env: BTreeMap::from([("A".into(), "b".into())]),
            offload: Some(Offload { capture_path: "/tmp/c".into(), inline_budget: 100 }),
            ..ExecRequest::default()
        });
        let text = msg.to_json();
        assert!(text.starts_with(r#"{"type":"exec","#), "{text}");
        assert_eq!(decode_client(&text), Ok(msg));
    }

    #[test]
    fn how_it_ended_is_flat_on_the_wire() {
        let ending = Ending { signal: Some("SIGKILL".into()), timed_out: true, ..Ending::default() };
        let result = ExecResult { id: 1, exit_code: 137, ending, ..ExecResult::default() };
        let json = serde_json::to_string(&result).unwrap();
        assert!(
            json.starts_with(
                r#"{"id":1,"exit_code":137,"signal":"SIGKILL","timed_out":true,"cancelled":false,"duration""#
            ),
            "{json}"
        );
        let back: ExecResult = serde_json::from_str(&json).unwrap();
        assert_eq!(back, result);
    }

    #[test]
    fn server_messages_round_trip() {
        let ending = Ending { signal: Some("SIGINT".into()), ..Ending::default() };
        let mut result = ExecResult { id: 9, exit_code: 130, ending, ..ExecResult::default() };
        result.set_output(b"\xffbinary".to_vec());
        let msg = ServerMessage::ExecResult(result);
        assert_eq!(ServerMessage::from_json(&msg.to_json()), Ok(msg));
    }

    #[test]
    fn output_is_text_when_utf8_else_base64() {
        let mut result = ExecResult::default();
        result.set_output(b"plain".to_vec());
        assert_eq!((result.output.as_deref(), result.output_base64.as_deref()), (Some("plain"), None));
        result.set_output(vec![0xff, 0]);
        assert_eq!((result.output.as_deref(), result.output_base64.as_deref()), (None, Some("/wA=")));
        assert_eq!(result.output_bytes(), Ok(vec![0xff, 0]));
    }

    #[test]
    fn output_within_a_budget_is_cut_after_encoding() {
        let mut result = ExecResult::default();
        // 10 control bytes escape to 60: a 30-byte budget keeps 5.
        assert!(result.set_output_within(vec![1; 10], 30));
        assert_eq!(result.output.as_deref(), Some("\u{1}\u{1}\u{1}\u{1}\u{1}"));
        assert_eq!(result.output.as_deref().map(str::len), Some(5));
        assert!(!result.set_output_within(b"fits".to_vec(), 4));
        assert_eq!(result.output.as_deref(), Some("fits"));
        // Binary: 8 base64 bytes hold 6 raw bytes.
        assert!(result.set_output_within(vec![0xff; 9], 8));
        assert_eq!(result.output_bytes(), Ok(vec![0xff; 6]));
        // Binary cut into text is then held to the text's escaped size.
        let mut mixed = vec![0u8; 6];
        mixed.push(0xff);
        assert!(result.set_output_within(mixed, 8));
        assert_eq!(result.output.as_deref(), Some("\u{0}"));
        for (bytes, budget) in [(vec![b'"'; 100], 51), (vec![0xc3, 0xa9, 0xff, 0], 4)] {
            result.set_output_within(bytes, budget);
            let field = match (&result.output, &result.output_base64) {
                (Some(text), None) => crate::limits::json_escaped_len(text),
                (None, Some(base64)) => base64.len(),
                other => panic!("{other:?}"),
            };
            assert!(field <= budget, "{field} > {budget}");
        }
    }

    #[test]
    fn numbers_come_back_as_they_were_sent() {
        // A timeout that a best-effort float parser reads one unit off (the fuzzer's find), so that
        // its own encoding decoded to another number: numbers are parsed exactly.
        let text = r#"{"type":"exec","id":2,"command":"echo hi","timeout":1055555555555595555555}"#;
        let message = decode_client(text).unwrap();
        let ClientMessage::Exec(exec) = &message else { panic!("{message:?}") };
        assert_eq!(exec.timeout, Some(1.0555555555555955e21));
        assert_eq!(decode_client(&message.to_json()).as_ref(), Ok(&message));
    }

    #[test]
    fn decode_errors_name_the_problem() {
        let cases = [
            ("not json", None, ErrorCode::MalformedFrame),
            ("[1,2]", None, ErrorCode::MalformedFrame),
            (r#"{"id":1}"#, Some(1), ErrorCode::MissingField),
            (r#"{"type":"exec"}"#, None, ErrorCode::MissingField),
            (r#"{"type":"exec","id":"x"}"#, None, ErrorCode::InvalidField),
            (r#"{"type":"launch","id":4}"#, Some(4), ErrorCode::UnknownType),
            (r#"{"type":"exec","id":5}"#, Some(5), ErrorCode::MissingField),
            (r#"{"type":"exec","id":6,"command":1}"#, Some(6), ErrorCode::InvalidField),
            (r#"{"type":"exec","id":7,"command":"x","bogus":1}"#, Some(7), ErrorCode::InvalidField),
        ];
        for (text, id, code) in cases {
            let err = decode_client(text).err();
            assert_eq!(err.as_ref().map(|e| (e.id, e.code)), Some((id, code)), "{text}: {err:?}");
        }
        let err = decode_client(r#"{"type":"exec","id":5}"#).err().map(|e| e.message);
        assert_eq!(err.as_deref(), Some("missing field `command`"));
    }
}
