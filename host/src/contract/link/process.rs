//! The process verbs over one link: a kept exec that says where it got to when the link drops
//! ([`Tracked`]), `attach` from a byte offset, `spawn` with a handle, and `processes`, `kill`,
//! `wait`, `forget`, stdin and `resize`.

use std::time::Duration;

use agentd_protocol::process::{
    AttachRequest, CloseStdinRequest, ForgetRequest, KillRequest, ProcessesRequest, ResizeRequest,
    WaitRequest, WriteStdinRequest,
};
use agentd_protocol::{ClientMessage, ExecRequest, ExecResult, ExecStarted, ProcessInfo, ServerMessage};
use base64::Engine as _;

use super::{Incoming, Link, OutputSink, Route, refused, unexpected};
use crate::contract::deadlines::within;
use crate::contract::error::{Result, SandboxError};

/// Pages of `processes` the host reads at most (each at most `limits::PROCESSES_PAGE` processes,
/// a few MiB): more than an agentd's bounds let it hold, so a sandbox that keeps saying `next`
/// cannot hold the caller or fill its memory.
const MOST_LISTED_PAGES: usize = 64;

/// Where a kept exec got to when its link dropped: its process id (once `exec_started` came) and
/// the output bytes delivered to the caller so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tracked {
    pub process: Option<String>,
    pub delivered: u64,
}

/// A process started with [`Link::spawn`]: its id, and its output and result as they come.
pub struct SpawnedProcess {
    pub process: String,
    pub pid: u32,
    route: Route,
    done: bool,
}

/// What a spawned or attached process sends next.
#[derive(Debug)]
pub enum ProcessEvent {
    Output(Vec<u8>),
    /// Bytes from this offset on were past the journal's cap: they are not sent.
    Gap(u64),
    Ended(Box<ExecResult>),
}

impl SpawnedProcess {
    /// The next piece of output, or the result (then `None` after it). No deadline: a process
    /// may be quiet for as long as it runs.
    pub async fn next(&mut self) -> Result<Option<ProcessEvent>> {
        if self.done {
            return Ok(None);
        }
        let event = next_event(&mut self.route).await?;
        self.done = matches!(event, ProcessEvent::Ended(_));
        Ok(Some(event))
    }
}

async fn next_event(route: &mut Route) -> Result<ProcessEvent> {
    loop {
        match route.rx.recv().await.ok_or(SandboxError::LinkClosed)? {
            Incoming::Chunk(data) => return Ok(ProcessEvent::Output(data.to_vec())),
            Incoming::Message(ServerMessage::OutputGap(gap)) => return Ok(ProcessEvent::Gap(gap.offset)),
            Incoming::Message(ServerMessage::ExecResult(result)) => {
                return Ok(ProcessEvent::Ended(Box::new(result)));
            }
            Incoming::Message(ServerMessage::ExecStarted(_)) => continue,
            Incoming::Message(ServerMessage::Error(err)) => return Err(refused(err)),
            Incoming::Message(other) => return Err(unexpected(&other)),
            Incoming::Broken(why) => return Err(SandboxError::Protocol(why)),
        }
    }
}

impl Link {
    /// [`Link::exec`] of a kept exec (`request.keep` set), telling `tracked` where it got to, so
    /// that when the link drops its caller can [`Link::attach`] to it over a new one.
    pub async fn exec_tracked(
        &self,
        request: ExecRequest,
        on_output: Option<OutputSink<'_>>,
        tracked: &mut Tracked,
    ) -> Result<ExecResult> {
        let deadline = self.exec_deadline(request.timeout);
        within(
            "the result of an exec from agentd",
            deadline,
            self.exec_unbounded(request, on_output, Some(tracked)),
        )
        .await
    }

    /// The deadline of an exec with `timeout` (seconds): its timeout and the margin.
    fn exec_deadline(&self, timeout: Option<f64>) -> Option<Duration> {
        match timeout.map(Duration::try_from_secs_f64) {
            Some(Err(_)) => Some(self.deadlines.silence),
            Some(Ok(t)) => self.deadlines.exec(Some(t)),
            None => self.deadlines.exec(None),
        }
    }

    /// Attaches to the kept process `process`: with `on_output`, its output from byte `from` goes
    /// there as it comes and the result carries no output; without, only the result comes, its
    /// output read from the journal's head. `timeout` (the process's, seconds) bounds the wait.
    pub async fn attach(
        &self,
        process: &str,
        from: u64,
        mut on_output: Option<OutputSink<'_>>,
        timeout: Option<f64>,
    ) -> Result<ExecResult> {
        let deadline = self.exec_deadline(timeout);
        within("the result of an attached process from agentd", deadline, async {
            let mut route = self.open_route();
            let id = route.id;
            let stream = on_output.is_some();
            let request = AttachRequest { id, process: process.to_owned(), from, stream };
            self.send(ClientMessage::Attach(request)).await?;
            // Leaving early stops the attachment, never the process.
            let guard = self.cancel_on_drop(id);
            loop {
                match next_event(&mut route).await? {
                    ProcessEvent::Output(data) => {
                        if let Some(on_output) = on_output.as_mut() {
                            on_output(&data);
                        }
                    }
                    ProcessEvent::Gap(_) => {}
                    ProcessEvent::Ended(result) => {
                        guard.disarm();
                        return Ok(*result);
                    }
                }
            }
        })
        .await
    }

    /// Starts a kept exec (`keep: 0` unless the request says otherwise) and returns once agentd
    /// named its process; with `request.stream`, the handle then gives its output as it comes.
    pub async fn spawn(&self, mut request: ExecRequest) -> Result<SpawnedProcess> {
        let mut route = self.open_route();
        request.id = route.id;
        if request.keep.is_none() {
            request.keep = Some(0.0);
        }
        self.announce(route.id);
        self.send(ClientMessage::Exec(request)).await?;
        let started = self.started(&mut route, "agentd to start a process").await?;
        Ok(SpawnedProcess { process: started.process, pid: started.pid, route, done: false })
    }

    /// Follows the kept process `process` from byte `from`: its output as it comes, then its
    /// result (which carries no output: it came as chunks). No deadline: it may be quiet long.
    pub async fn follow(&self, process: &str, from: u64) -> Result<SpawnedProcess> {
        let mut route = self.open_route();
        let id = route.id;
        self.announce(id);
        let request = AttachRequest { id, process: process.to_owned(), from, stream: true };
        self.send(ClientMessage::Attach(request)).await?;
        let started = self.started(&mut route, "agentd to attach to a process").await?;
        Ok(SpawnedProcess { process: started.process, pid: started.pid, route, done: false })
    }

    /// The `exec_started` that names the process of `route`'s request, within
    /// [`Deadlines::silence`](crate::contract::deadlines::Deadlines::silence); `what` names the wait.
    async fn started(&self, route: &mut Route, what: &str) -> Result<ExecStarted> {
        within(what, Some(self.deadlines.silence), async {
            match route.rx.recv().await.ok_or(SandboxError::LinkClosed)? {
                Incoming::Message(ServerMessage::ExecStarted(started)) => Ok(started),
                Incoming::Message(ServerMessage::Error(err)) => Err(refused(err)),
                Incoming::Message(other) => Err(unexpected(&other)),
                Incoming::Chunk(_) => Err(super::stray_chunk()),
                Incoming::Broken(why) => Err(SandboxError::Protocol(why)),
            }
        })
        .await
    }

    /// Every process agentd holds, oldest first, page after page (long commands come cut:
    /// `command_truncated`). A listing of more than 64 pages (`MOST_LISTED_PAGES`), or whose pages do
    /// not move forward, is refused as a protocol error.
    pub async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        let mut all = Vec::new();
        let mut from = 0;
        for _ in 0..MOST_LISTED_PAGES {
            let page = match self.ask(|id| ClientMessage::Processes(ProcessesRequest { id, from })).await? {
                ServerMessage::ProcessesResult(result) => result,
                other => return Err(unexpected(&other)),
            };
            all.extend(page.processes);
            match page.next {
                None => return Ok(all),
                Some(next) if next > from => from = next,
                Some(next) => {
                    return Err(SandboxError::Protocol(format!(
                        "a `processes` page from {from} said the next starts at {next}, not after it"
                    )));
                }
            }
        }
        Err(SandboxError::Protocol(format!("agentd listed more than {MOST_LISTED_PAGES} pages of processes")))
    }

    /// Ends `process` with the kill ladder, or sends it one `signal`; returns how many processes
    /// were signalled.
    pub async fn kill(&self, process: &str, signal: Option<&str>) -> Result<u32> {
        let (process, signal) = (process.to_owned(), signal.map(str::to_owned));
        match self.ask(|id| ClientMessage::Kill(KillRequest { id, process, signal })).await? {
            ServerMessage::KillResult(result) => Ok(result.signalled),
            other => Err(unexpected(&other)),
        }
    }

    /// Waits for `process` to end, at most `timeout`; returns it as it is then.
    pub async fn wait(&self, process: &str, timeout: Option<Duration>) -> Result<ProcessInfo> {
        let request =
            WaitRequest { id: 0, process: process.to_owned(), timeout: timeout.map(|t| t.as_secs_f64()) };
        let deadline = timeout.map(|t| t + self.deadlines.silence);
        within("agentd's answer to a wait", deadline, async {
            let mut route = self.open_route();
            let id = route.id;
            self.send(ClientMessage::Wait(WaitRequest { id, ..request })).await?;
            let guard = self.cancel_on_drop(id);
            let reply = self.terminal(&mut route).await;
            guard.disarm();
            match reply? {
                ServerMessage::WaitResult(result) => Ok(result.process),
                other => Err(unexpected(&other)),
            }
        })
        .await
    }

    /// Drops a finished process's result and journal without waiting for the answer: for a result
    /// already in hand, so that agentd does not retain it.
    pub fn release(&self, process: &str) {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let forget = ClientMessage::Forget(ForgetRequest { id, process: process.to_owned() });
        self.out.send_now(tokio_tungstenite::tungstenite::Message::text(forget.to_json()));
    }

    /// Drops a finished process's result and journal.
    pub async fn forget(&self, process: &str) -> Result<()> {
        let process = process.to_owned();
        match self.ask(|id| ClientMessage::Forget(ForgetRequest { id, process })).await? {
            ServerMessage::ForgetResult(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Writes `data` to the process's stdin; returns once the pipe took it all.
    pub async fn write_stdin(&self, process: &str, data: &[u8]) -> Result<()> {
        let (process, data) = (process.to_owned(), base64::engine::general_purpose::STANDARD.encode(data));
        let request = |id| {
            ClientMessage::WriteStdin(WriteStdinRequest { id, process, data: None, data_base64: Some(data) })
        };
        match self.ask(request).await? {
            ServerMessage::WriteStdinResult(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Closes the process's stdin (on a terminal: types `^D`).
    pub async fn close_stdin(&self, process: &str) -> Result<()> {
        let process = process.to_owned();
        match self.ask(|id| ClientMessage::CloseStdin(CloseStdinRequest { id, process })).await? {
            ServerMessage::CloseStdinResult(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Sets the size of the process's terminal.
    pub async fn resize(&self, process: &str, rows: u16, cols: u16) -> Result<()> {
        let process = process.to_owned();
        match self.ask(|id| ClientMessage::Resize(ResizeRequest { id, process, rows, cols })).await? {
            ServerMessage::ResizeResult(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends one request and returns its terminal reply, within [`Deadlines::silence`].
    ///
    /// [`Deadlines::silence`]: crate::contract::deadlines::Deadlines::silence
    async fn ask(&self, request: impl FnOnce(u64) -> ClientMessage) -> Result<ServerMessage> {
        self.quiet("agentd's answer to a process verb", async {
            let mut route = self.open_route();
            self.send(request(route.id)).await?;
            self.terminal(&mut route).await
        })
        .await
    }
}
