//! The process verbs of a session: `attach`, `kill`, `wait`, `write_stdin`, `close_stdin` (the
//! others answer at once in the dispatch). Each that waits is a request like any other (its id in
//! flight, `cancel` and the connection's end stop it), and stopping it never touches the process.

use std::sync::Arc;

use agentd_protocol::limits::{CHUNK_SIZE, MAX_STDIN_WRITE};
use agentd_protocol::process::{
    AttachRequest, CloseStdinRequest, KillRequest, KillResult, OutputGap, ProcessDone, StdinWritten,
    WaitRequest, WaitResult, WriteStdinRequest,
};
use agentd_protocol::{ErrorCode, ErrorReply, ExecStarted, ServerMessage, chunk};
use base64::Engine as _;
use nix::sys::signal::Signal;

use super::{Session, process_error};
use crate::admission;
use crate::cancel::Cancel;
use crate::exec::capture::Journal;
use crate::exec::{kept_head_len, kept_reply_size, set_kept_output};
use crate::outbox::Outbox;
use crate::process::Process;
use crate::registry::Handle;

impl Session {
    /// Streams a kept process's journal from `from`, then its live output, then its result.
    pub(super) async fn attach(&self, request: AttachRequest) {
        let id = request.id;
        let attached = self.shared.processes.get(&request.process).and_then(|process| {
            let attachment = process.attach(false)?;
            let journal = process.attachable()?;
            Ok((process, attachment, journal))
        });
        let (process, attachment, journal) = match attached {
            Ok(attached) => attached,
            Err(err) => return self.send(process_error(id, &err)).await,
        };
        let total = journal.progress().total;
        if request.from > total {
            let message = format!(
                "`from` {} is past the {total} bytes process `{}` has written",
                request.from, process.id
            );
            return self.reply_error(Some(id), ErrorCode::InvalidField, message).await;
        }
        let cancel = Cancel::default();
        let Some(slot) = self.register(id, Handle::Work(cancel.clone())).await else { return };
        let (out, requests) = (self.out.clone(), Arc::clone(&self.requests));
        tokio::spawn(async move {
            let reply = follow(id, &request, &process, &journal, &out, &cancel).await;
            drop(attachment);
            requests.finish(id);
            drop(slot);
            let _ = match reply {
                Some((reply, reserved)) => out.reply_in(reply, reserved).await,
                None => out.reply(cancelled(id, &process.id)).await,
            };
        });
    }

    /// `kill`: the kill ladder, or one signal to every member. A process whose shell ended still
    /// has its strays killed (they stay in its cgroup where it has one).
    pub(super) async fn kill(&self, request: KillRequest) {
        let id = request.id;
        let signal = match request.signal.as_deref().map(parse_signal).transpose() {
            Ok(signal) => signal,
            Err(message) => return self.reply_error(Some(id), ErrorCode::InvalidField, message).await,
        };
        let process = match self.shared.processes.get(&request.process) {
            Ok(process) => process,
            Err(err) => return self.send(process_error(id, &err)).await,
        };
        let (out, shared) = (self.out.clone(), Arc::clone(&self.shared));
        tokio::spawn(async move {
            let Some(target) = process.target() else {
                // Not spawned yet: the ladder will find it as it starts.
                process.cancel.cancel();
                let reply = KillResult { id, process: process.id.clone(), signalled: 0 };
                let _ = out.reply(ServerMessage::KillResult(reply)).await;
                return;
            };
            let counted = target.clone();
            let signalled = tokio::task::spawn_blocking(move || match signal {
                Some(signal) => counted.signal_members(signal),
                None => counted.members().len(),
            })
            .await
            .unwrap_or(0);
            if signal.is_none() {
                if process.is_ended() {
                    shared.executor.kill(&target).await;
                } else {
                    process.cancel.cancel();
                    process.wait().await;
                }
            }
            let signalled = u32::try_from(signalled).unwrap_or(u32::MAX);
            let reply = KillResult { id, process: process.id.clone(), signalled };
            let _ = out.reply(ServerMessage::KillResult(reply)).await;
        });
    }

    /// `wait`: answers when the process ended or `timeout` passed, with the process as it is then.
    pub(super) async fn wait(&self, request: WaitRequest) {
        let id = request.id;
        let timeout = match request.timeout.map(|t| admission::seconds(t, "`timeout`")).transpose() {
            Ok(timeout) => timeout.filter(|t| !t.is_zero()),
            Err(err) => return self.reply_error(Some(id), err.code(), err.to_string()).await,
        };
        let process = match self.shared.processes.get(&request.process) {
            Ok(process) => process,
            Err(err) => return self.send(process_error(id, &err)).await,
        };
        let name = process.id.clone();
        let waited = async move {
            let limit = async {
                match timeout {
                    Some(timeout) => tokio::time::sleep(timeout).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = process.wait() => {}
                () = limit => {}
            }
            ServerMessage::WaitResult(WaitResult { id, process: process.info() })
        };
        self.cancellable(id, name, waited).await;
    }

    /// `write_stdin`: answered once the pipe took every byte (or when it cannot).
    pub(super) async fn write_stdin(&self, request: WriteStdinRequest) {
        let id = request.id;
        let data = match (request.data, request.data_base64) {
            (Some(text), None) => Ok(text.into_bytes()),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("`data_base64` is not valid base64: {e}")),
            _ => Err("exactly one of `data` and `data_base64` is needed".to_owned()),
        };
        let data = match data {
            Ok(data) if data.len() > MAX_STDIN_WRITE => {
                Err(format!("{} bytes in one write: at most {MAX_STDIN_WRITE} are taken", data.len()))
            }
            other => other,
        };
        let data = match data {
            Ok(data) => data,
            Err(message) => return self.reply_error(Some(id), ErrorCode::InvalidField, message).await,
        };
        let input = self.shared.processes.get(&request.process).and_then(|process| process.input());
        let input = match input {
            Ok(input) => input,
            Err(err) => return self.send(process_error(id, &err)).await,
        };
        let process = request.process;
        let name = process.clone();
        let written = async move {
            match input.write(&process, &data).await {
                Ok(bytes) => ServerMessage::WriteStdinResult(StdinWritten { id, process, bytes }),
                Err(err) => process_error(id, &err),
            }
        };
        self.cancellable(id, name, written).await;
    }

    /// `close_stdin`: after the writes already waiting.
    pub(super) async fn close_stdin(&self, request: CloseStdinRequest) {
        let id = request.id;
        let process = match self.shared.processes.get(&request.process) {
            Ok(process) => process,
            Err(err) => return self.send(process_error(id, &err)).await,
        };
        let name = process.id.clone();
        let closed = async move {
            match process.close_input().await {
                Ok(()) => ServerMessage::CloseStdinResult(ProcessDone { id, process: process.id.clone() }),
                Err(err) => process_error(id, &err),
            }
        };
        self.cancellable(id, name, closed).await;
    }

    /// Runs `work` as request `id`, in flight until it answers: `cancel` or the connection's end
    /// stop it (answered `cancelled`), never the process it names.
    async fn cancellable<F>(&self, id: u64, process: String, work: F)
    where
        F: Future<Output = ServerMessage> + Send + 'static,
    {
        let cancel = Cancel::default();
        let Some(slot) = self.register(id, Handle::Work(cancel.clone())).await else { return };
        let (out, requests) = (self.out.clone(), Arc::clone(&self.requests));
        tokio::spawn(async move {
            let reply = tokio::select! {
                reply = work => reply,
                () = cancel.cancelled() => cancelled(id, &process),
            };
            requests.finish(id);
            drop(slot);
            let _ = out.reply(reply).await;
        });
    }
}

/// An attachment's stream and its result (`None`: it was cancelled first).
async fn follow(
    id: u64,
    request: &AttachRequest,
    process: &Arc<Process>,
    journal: &Arc<Journal>,
    out: &Outbox,
    cancel: &Cancel,
) -> Option<(ServerMessage, Option<crate::outbox::Reserved>)> {
    let pid = process.target().map_or(0, |target| crate::pid::to_wire(target.root));
    let started = ExecStarted { id, pid, process: process.id.clone() };
    if out.reply(ServerMessage::ExecStarted(started)).await.is_err() {
        return None;
    }
    if request.stream && !stream(id, request.from, process, journal, out, cancel).await {
        return None;
    }
    tokio::select! {
        () = process.wait() => {}
        () = cancel.cancelled() => return None,
    }
    let Some(mut result) = process.result() else {
        let message = format!("process `{}` did not start, or its result was lost", process.id);
        return Some((error(id, ErrorCode::Internal, message), None));
    };
    result.id = id;
    let stored = journal.progress().stored;
    let reserved = out.room().reserve(kept_reply_size(if request.stream { 0 } else { stored })).await;
    if !request.stream {
        let reader = Arc::clone(journal);
        let head = tokio::task::spawn_blocking(move || reader.read_at(0, kept_head_len())).await;
        match head {
            Ok(Ok(head)) => set_kept_output(&mut result, head, stored),
            Ok(Err(err)) => {
                let message = format!("the journal of process `{}` cannot be read: {err}", process.id);
                return Some((error(id, ErrorCode::Internal, message), None));
            }
            Err(err) => return Some((error(id, ErrorCode::Internal, err.to_string()), None)),
        }
    } else {
        // The output came as chunks; the result tells only whether bytes were past the cap.
        result.truncated = result.total_bytes > stored;
    }
    Some((ServerMessage::ExecResult(result), reserved))
}

/// Sends the journal from `from` as chunks until the process ended and all it stored went out,
/// then the gap past the cap, if any. False: cancelled, or the connection is gone.
async fn stream(
    id: u64,
    from: u64,
    process: &Arc<Process>,
    journal: &Arc<Journal>,
    out: &Outbox,
    cancel: &Cancel,
) -> bool {
    let mut watch = journal.watch();
    let mut offset = from;
    loop {
        let progress = *watch.borrow_and_update();
        if offset < progress.stored {
            let len = usize::try_from(progress.stored - offset).unwrap_or(CHUNK_SIZE).min(CHUNK_SIZE);
            let reader = Arc::clone(journal);
            let data = match tokio::task::spawn_blocking(move || reader.read_at(offset, len)).await {
                Ok(Ok(data)) if !data.is_empty() => data,
                _ => return false,
            };
            offset += data.len() as u64;
            if out.binary(chunk::encode(id, &data)).await.is_err() {
                return false;
            }
            continue;
        }
        let ended = process.is_ended();
        if ended {
            // The capture published its last bytes before the result came in.
            let last = journal.progress();
            if offset < last.stored {
                continue;
            }
            if last.total > offset.max(last.stored) {
                let gap = OutputGap { id, process: process.id.clone(), offset: offset.max(last.stored) };
                return out.reply(ServerMessage::OutputGap(gap)).await.is_ok();
            }
            return true;
        }
        if progress.full && progress.total > progress.stored {
            // Nothing more will be stored: the rest is a gap, told once the process ended.
            tokio::select! {
                () = process.wait() => continue,
                () = cancel.cancelled() => return false,
            }
        }
        tokio::select! {
            changed = watch.changed() => {
                if changed.is_err() {
                    // The capture is done: the result comes next.
                    tokio::select! {
                        () = process.wait() => {}
                        () = cancel.cancelled() => return false,
                    }
                }
            }
            () = process.wait() => {}
            () = cancel.cancelled() => return false,
        }
    }
}

/// A signal by name: `SIGINT`, `INT`, `sigint`.
fn parse_signal(name: &str) -> Result<Signal, String> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    full.parse::<Signal>().map_err(|_| format!("`signal` {name:?} is not a signal name (like \"SIGINT\")"))
}

fn error(id: u64, code: ErrorCode, message: String) -> ServerMessage {
    ServerMessage::Error(ErrorReply { id: Some(id), code, message })
}

fn cancelled(id: u64, process: &str) -> ServerMessage {
    error(id, ErrorCode::Cancelled, format!("cancelled; process `{process}` is not affected"))
}
