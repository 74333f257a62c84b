//! Processes: an exec named by a process id that any connection can find again.
//!
//! Every exec gets a process id (`exec_started.process`, `exec_result.process`). An exec started
//! with `keep` outlives its connection: its output goes to a journal on disk, any authenticated
//! connection can `attach` to it from a byte offset, and its result is retained after it ends. The
//! verbs here (`attach`, `processes`, `kill`, `wait`, `forget`, `write_stdin`, `close_stdin`,
//! `resize`) name a process, not a request: they may come from any connection.

use serde::{Deserialize, Serialize};

/// What a command's stdin is, beside the bytes of `stdin_base64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// A pipe that stays open: `write_stdin` feeds it, `close_stdin` (or the process's end) closes it.
    Pipe,
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalSize {
    pub rows: u16,
    pub cols: u16,
}

/// Streams a kept process's output from byte `from` of its journal, then live, then its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachRequest {
    pub id: u64,
    pub process: String,
    /// The first byte wanted, an offset into everything the process wrote. Default 0.
    #[serde(default)]
    pub from: u64,
    /// Send the output as binary chunks with this request's id (default true); false: only the
    /// terminal `exec_result`, when the process ends.
    #[serde(default = "yes")]
    pub stream: bool,
}

/// Lists the processes agentd holds: running ones and retained results, oldest first, a page of
/// at most [`PROCESSES_PAGE`](crate::limits::PROCESSES_PAGE) at a time.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessesRequest {
    pub id: u64,
    /// Where the page starts: the `next` of the page before (absent or 0: the oldest process).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub from: u64,
}

/// Ends a process: the kill ladder (as a timeout), or one signal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    pub id: u64,
    pub process: String,
    /// A signal name (`"SIGINT"`, `"INT"`) sent once to every process of the exec; absent: the
    /// kill ladder (SIGTERM, a grace, SIGKILL) ends them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

/// Waits for a process to end, at most `timeout` seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    pub id: u64,
    pub process: String,
    /// Seconds, fractions allowed. Absent or `0`: until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
}

/// Drops a finished process's retained result and journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    pub id: u64,
    pub process: String,
}

/// Writes bytes to a process's stdin pipe (or terminal). Answered once every byte is taken.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteStdinRequest {
    pub id: u64,
    pub process: String,
    /// The bytes as text (exactly one of `data` and `data_base64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
}

/// Closes a process's stdin pipe: it reads EOF (on a terminal: the EOF character, `^D`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseStdinRequest {
    pub id: u64,
    pub process: String,
}

/// Sets the size of a process's terminal (it gets `SIGWINCH`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    pub id: u64,
    pub process: String,
    pub rows: u16,
    pub cols: u16,
}

/// Where a process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    #[default]
    Running,
    Exited,
}

/// How a process ended, beside its exit status: the same fields, with the same meaning, in an
/// `exec_result` and in a process's listing (flattened into both).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ending {
    /// Name of the signal that ended the shell (`"SIGKILL"`), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The timeout fired and the process tree was killed.
    #[serde(default)]
    pub timed_out: bool,
    /// A `cancel` or a `kill` ended it.
    #[serde(default)]
    pub cancelled: bool,
    /// A kept process that ran with no client attached for its `keep` grace: the kill ladder
    /// ended it. Present only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
}

/// One process as `processes` and `wait` tell it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub process: String,
    /// The command, its first [`MAX_LISTED_COMMAND_BYTES`](crate::limits::MAX_LISTED_COMMAND_BYTES)
    /// (as JSON text) in a listing; `command_truncated` says when it was cut.
    pub command: String,
    /// `command` is a prefix of a longer command.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub command_truncated: bool,
    pub state: ProcessState,
    /// The shell's pid (also its process group and session).
    pub pid: u32,
    /// Unix time of the start, seconds.
    pub started: f64,
    /// Unix time of the shell's end, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<f64>,
    /// The exit status, once ended (a death by signal `n`: `128 + n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What ended it, beside its own exit (all unset while it runs).
    #[serde(flatten)]
    pub ending: Ending,
    /// Bytes the process wrote so far.
    pub total_bytes: u64,
    /// Bytes of them its journal holds (a head: the rest was past the cap).
    pub stored_bytes: u64,
    /// Processes of the exec still running beside (or after) its shell, where they can be counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stray_processes: Option<u32>,
    /// Started with `keep`: it outlives its connection and can be attached.
    pub kept: bool,
    /// Its `keep` grace in seconds (0: none), for a kept process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<f64>,
    /// Clients attached now (the exec's own connection included while it waits).
    pub attached: u32,
    /// `"pipe"` while a stdin pipe or terminal is open for `write_stdin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinMode>,
    /// Its terminal's size, for an exec with a PTY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<TerminalSize>,
}

/// The answer to `processes`: one page.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProcessesResult {
    pub id: u64,
    pub processes: Vec<ProcessInfo>,
    /// More processes follow: ask again with this as `from`. Absent: this page is the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

impl ProcessInfo {
    /// Cuts `command` to its first [`MAX_LISTED_COMMAND_BYTES`](crate::limits::MAX_LISTED_COMMAND_BYTES)
    /// as JSON text (on a character boundary), and says so.
    pub fn cut_command(&mut self) {
        let kept =
            crate::limits::json_prefix_within(&self.command, crate::limits::MAX_LISTED_COMMAND_BYTES).len();
        if kept < self.command.len() {
            self.command.truncate(kept);
            self.command_truncated = true;
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The answer to `kill`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillResult {
    pub id: u64,
    pub process: String,
    /// Processes that were signalled (0: nothing of it was running any more).
    pub signalled: u32,
}

/// The answer to `wait`: the process as it is when it ended or when the wait's timeout passed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitResult {
    pub id: u64,
    pub process: ProcessInfo,
}

/// The answer to `forget`, `close_stdin` and `resize`: done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessDone {
    pub id: u64,
    pub process: String,
}

/// The answer to `write_stdin`: every byte was taken by the pipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StdinWritten {
    pub id: u64,
    pub process: String,
    pub bytes: u64,
}

/// Sent at most once in an attached or streamed output, after its last chunk: the bytes from
/// `offset` to the output's end (`total_bytes` in the result) were past the journal's cap and
/// were not kept. They are not sent; nothing stands in for them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputGap {
    pub id: u64,
    pub process: String,
    pub offset: u64,
}

fn yes() -> bool {
    true
}
