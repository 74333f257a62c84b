//! The command router (`modal.task_command_router.TaskCommandRouter`): execs as `docker exec -i`
//! processes in the task's container. Their stdout and stderr are kept whole, so a read starts at
//! any offset and streams while the process runs; stdin takes bytes at a checked offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use super::control::{GrpcStream, stream_of};
use super::proto::task_command_router::task_command_router_server::{
    TaskCommandRouter, TaskCommandRouterServer,
};
use super::proto::task_command_router::*;
use super::{Shared, lock};
use crate::containers;

/// Bytes per `TaskExecStdioReadResponse`.
const CHUNK: usize = 256 * 1024;
/// In every exec's environment, so a timeout can kill all of its processes.
const EXEC_MARKER: &str = "FAKE_MODAL_EXEC";

/// Everything one descriptor has produced so far, and whether it has ended.
#[derive(Default)]
pub struct Output {
    pub bytes: Vec<u8>,
    pub eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// The exec's stdin: the pipe into `docker exec -i` until closed, and the bytes accepted so far.
pub struct Stdin {
    pipe: Option<tokio::process::ChildStdin>,
    written: u64,
    closed: bool,
}

/// One exec, keyed by its `exec_id`.
pub struct Exec {
    pub task_id: String,
    /// [`super::FakeModal::endless_stdout`]: no process; stdout is zeros without end.
    endless: bool,
    stdout: watch::Sender<Output>,
    stderr: watch::Sender<Output>,
    stdin: tokio::sync::Mutex<Stdin>,
    /// Bumped by `TaskExecStdinStatus`: a stdin stream opened before it is evicted.
    stdin_epoch: AtomicU64,
    exit: watch::Sender<Option<Exit>>,
    /// Killed by its timeout or by the sandbox's end: reported as signal 9.
    killed: AtomicBool,
}

impl Exec {
    pub fn mark_killed(&self) {
        self.killed.store(true, Ordering::SeqCst);
    }

    fn pipe(&self, fd: i32) -> &watch::Sender<Output> {
        if fd == TaskExecStdioFileDescriptor::Stderr as i32 { &self.stderr } else { &self.stdout }
    }

    /// Accepts `data` at `offset` (which must be the count accepted so far), then closes stdin on
    /// `eof`.
    async fn write_stdin(&self, offset: Option<u64>, data: &[u8], eof: bool) -> Result<(), Status> {
        let mut stdin = self.stdin.lock().await;
        if let Some(offset) = offset
            && offset != stdin.written
        {
            return Err(Status::failed_precondition(format!(
                "stdin offset {offset} does not match the {} bytes written so far",
                stdin.written
            )));
        }
        if stdin.closed && (!data.is_empty() || !eof) {
            return Err(Status::failed_precondition("stdin is closed"));
        }
        if !data.is_empty() {
            // A process that has exited takes no more input; the bytes still count as accepted.
            if let Some(pipe) = stdin.pipe.as_mut()
                && pipe.write_all(data).await.is_err()
            {
                stdin.pipe = None;
            }
            stdin.written += data.len() as u64;
        }
        if eof {
            stdin.closed = true;
            if let Some(mut pipe) = stdin.pipe.take() {
                let _ = pipe.shutdown().await;
            }
        }
        Ok(())
    }
}

pub(crate) fn service(shared: Arc<Shared>) -> TaskCommandRouterServer<Router> {
    TaskCommandRouterServer::new(Router { shared })
        .max_decoding_message_size(100 << 20)
        .max_encoding_message_size(100 << 20)
}

pub struct Router {
    shared: Arc<Shared>,
}

impl Router {
    fn exec(&self, exec_id: &str) -> Result<Arc<Exec>, Status> {
        lock(&self.shared.execs)
            .get(exec_id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("exec {exec_id} not found")))
    }

    async fn start(&self, request: TaskExecStartRequest) -> Result<(), Status> {
        if request.command_args.is_empty() {
            return Err(Status::invalid_argument("command_args is empty"));
        }
        if lock(&self.shared.execs).contains_key(&request.exec_id) {
            return Ok(());
        }
        let found = lock(&self.shared.state)
            .sandboxes
            .values()
            .find(|s| s.task_id == request.task_id && s.result.is_none())
            .map(|s| s.container.clone());
        let container = match found {
            Some(Some(container)) => container,
            Some(None) if *lock(&self.shared.endless_stdout) => {
                let exec = Arc::new(Exec {
                    task_id: request.task_id.clone(),
                    endless: true,
                    stdout: watch::Sender::new(Output::default()),
                    stderr: watch::Sender::new(Output { bytes: Vec::new(), eof: true }),
                    stdin: tokio::sync::Mutex::new(Stdin { pipe: None, written: 0, closed: false }),
                    stdin_epoch: AtomicU64::new(0),
                    exit: watch::Sender::new(None),
                    killed: AtomicBool::new(false),
                });
                lock(&self.shared.execs).entry(request.exec_id).or_insert(exec);
                return Ok(());
            }
            _ => return Err(Status::not_found(format!("task {} not found or finished", request.task_id))),
        };
        let marker = containers::exec_marker(EXEC_MARKER);
        let mut command = tokio::process::Command::new("docker");
        command.args(["exec", "-i", "-e", &marker]);
        if let Some(dir) = request.workdir.as_deref().filter(|d| !d.is_empty()) {
            command.args(["-w", dir]);
        }
        for (key, value) in &request.env {
            command.arg("-e").arg(format!("{key}={value}"));
        }
        let mut child = command
            .arg(&container)
            .args(&request.command_args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| Status::internal(format!("fake-modal: docker exec: {err}")))?;
        let exec = Arc::new(Exec {
            task_id: request.task_id.clone(),
            endless: false,
            stdout: watch::Sender::new(Output::default()),
            stderr: watch::Sender::new(Output::default()),
            stdin: tokio::sync::Mutex::new(Stdin { pipe: child.stdin.take(), written: 0, closed: false }),
            stdin_epoch: AtomicU64::new(0),
            exit: watch::Sender::new(None),
            killed: AtomicBool::new(false),
        });
        {
            let mut execs = lock(&self.shared.execs);
            if execs.contains_key(&request.exec_id) {
                // A concurrent retry won: this child is dropped (and killed).
                return Ok(());
            }
            execs.insert(request.exec_id.clone(), exec.clone());
        }
        let piped = |config: i32| config != TaskExecStdoutConfig::Devnull as i32;
        let stdout_to = piped(request.stdout_config).then(|| exec.clone());
        let stderr_to = match TaskExecStderrConfig::try_from(request.stderr_config) {
            Ok(TaskExecStderrConfig::Pipe) => Some((exec.clone(), TaskExecStdioFileDescriptor::Stderr)),
            Ok(TaskExecStderrConfig::Stdout) => Some((exec.clone(), TaskExecStdioFileDescriptor::Stdout)),
            _ => None,
        };
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let out_pump = tokio::spawn(async move {
            pump(stdout, stdout_to.as_ref().map(|e| e.pipe(TaskExecStdioFileDescriptor::Stdout as i32)))
                .await;
        });
        let err_pump = tokio::spawn(async move {
            pump(stderr, stderr_to.as_ref().map(|(e, fd)| e.pipe(*fd as i32))).await;
        });
        let timeout = request.timeout_secs.filter(|t| *t > 0).map(|t| Duration::from_secs(u64::from(t)));
        tokio::spawn(async move {
            let status = match timeout {
                None => child.wait().await,
                Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        exec.mark_killed();
                        containers::kill_marked(&container, &marker).await;
                        child.wait().await
                    }
                },
            };
            let _ = out_pump.await;
            let _ = err_pump.await;
            for fd in [TaskExecStdioFileDescriptor::Stdout, TaskExecStdioFileDescriptor::Stderr] {
                exec.pipe(fd as i32).send_modify(|output| output.eof = true);
            }
            let exit = if exec.killed.load(Ordering::SeqCst) {
                Exit::Signal(9)
            } else {
                match status {
                    Ok(status) => {
                        match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                            (Some(code), _) => Exit::Code(code),
                            (None, Some(signal)) => Exit::Signal(signal),
                            (None, None) => Exit::Code(-1),
                        }
                    }
                    Err(_) => Exit::Code(-1),
                }
            };
            exec.exit.send_replace(Some(exit));
        });
        Ok(())
    }

    async fn stdin_stream(
        &self,
        mut stream: Streaming<TaskExecStdinWriteStreamRequest>,
    ) -> Result<(), Status> {
        use task_exec_stdin_write_stream_request::Payload;
        let first = stream.message().await?.and_then(|m| m.payload);
        let Some(Payload::Start(start)) = first else {
            return Err(Status::invalid_argument("the first message must be `start`"));
        };
        let exec = self.exec(&start.exec_id)?;
        let epoch = exec.stdin_epoch.load(Ordering::SeqCst);
        exec.write_stdin(Some(start.offset), &[], false).await?;
        while let Some(message) = stream.message().await? {
            if exec.stdin_epoch.load(Ordering::SeqCst) != epoch {
                return Err(Status::aborted("evicted by TaskExecStdinStatus"));
            }
            match message.payload {
                Some(Payload::Data(data)) => exec.write_stdin(None, &data, false).await?,
                Some(Payload::End(_)) => return exec.write_stdin(None, &[], true).await,
                Some(Payload::Start(_)) => return Err(Status::invalid_argument("`start` sent twice")),
                None => {}
            }
        }
        Ok(())
    }
}

/// Copies `from` into `to` (or drops it) until EOF.
async fn pump<R: tokio::io::AsyncRead + Unpin>(from: Option<R>, to: Option<&watch::Sender<Output>>) {
    let Some(mut from) = from else {
        return;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Some(to) = to {
                    to.send_modify(|output| output.bytes.extend_from_slice(&buf[..n]));
                }
            }
        }
    }
}

fn exit_of<T>(exit: Option<Exit>, code: impl Fn(i32) -> T, signal: impl Fn(i32) -> T) -> Option<T> {
    exit.map(|exit| match exit {
        Exit::Code(c) => code(c),
        Exit::Signal(s) => signal(s),
    })
}

#[tonic::async_trait]
impl TaskCommandRouter for Router {
    async fn task_exec_start(
        &self,
        request: Request<TaskExecStartRequest>,
    ) -> Result<Response<TaskExecStartResponse>, Status> {
        let call = self.shared.begin_router("TaskExecStart", request.metadata())?;
        call.end(self.start(request.into_inner()).await.map(|()| Response::new(TaskExecStartResponse {})))
    }

    type TaskExecStdioReadStream = GrpcStream<TaskExecStdioReadResponse>;

    async fn task_exec_stdio_read(
        &self,
        request: Request<TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        let call = self.shared.begin_router("TaskExecStdioRead", request.metadata())?;
        let request = request.into_inner();
        let exec = match self.exec(&request.exec_id) {
            Ok(exec) => exec,
            Err(status) => return call.end(Err(status)),
        };
        let shared = self.shared.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        if exec.endless && request.file_descriptor == TaskExecStdioFileDescriptor::Stdout as i32 {
            tokio::spawn(async move {
                let zeros = vec![0u8; CHUNK];
                while tx.send(Ok(TaskExecStdioReadResponse { data: zeros.clone() })).await.is_ok() {}
            });
            return call.end(Ok(Response::new(stream_of(rx))));
        }
        tokio::spawn(async move {
            let mut output = exec.pipe(request.file_descriptor).subscribe();
            let mut offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
            let mut sent = 0u64;
            loop {
                let (chunk, eof) = {
                    let now = output.borrow_and_update();
                    let start = offset.min(now.bytes.len());
                    (now.bytes[start..now.bytes.len().min(start.saturating_add(CHUNK))].to_vec(), now.eof)
                };
                if chunk.is_empty() {
                    if eof || output.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                let mut chunk = chunk;
                let mut cut = false;
                {
                    let mut knob = lock(&shared.cut_stdio);
                    if let Some(limit) = *knob
                        && sent + chunk.len() as u64 > limit
                    {
                        *knob = None;
                        chunk.truncate(usize::try_from(limit - sent).unwrap_or(0));
                        cut = true;
                    }
                }
                let len = chunk.len();
                if len > 0 && tx.send(Ok(TaskExecStdioReadResponse { data: chunk })).await.is_err() {
                    return;
                }
                if cut {
                    let _ = tx.send(Err(Status::unavailable("fake-modal: stdio stream cut"))).await;
                    return;
                }
                offset += len;
                sent += len as u64;
            }
        });
        call.end(Ok(Response::new(stream_of(rx))))
    }

    async fn task_exec_stdin_write_stream(
        &self,
        request: Request<Streaming<TaskExecStdinWriteStreamRequest>>,
    ) -> Result<Response<TaskExecStdinWriteStreamResponse>, Status> {
        let call = self.shared.begin_router("TaskExecStdinWriteStream", request.metadata())?;
        let done = self.stdin_stream(request.into_inner()).await;
        call.end(done.map(|()| Response::new(TaskExecStdinWriteStreamResponse {})))
    }

    async fn task_exec_stdin_write(
        &self,
        request: Request<TaskExecStdinWriteRequest>,
    ) -> Result<Response<TaskExecStdinWriteResponse>, Status> {
        let call = self.shared.begin_router("TaskExecStdinWrite", request.metadata())?;
        let request = request.into_inner();
        let done = match self.exec(&request.exec_id) {
            Ok(exec) => exec.write_stdin(Some(request.offset), &request.data, request.eof).await,
            Err(status) => Err(status),
        };
        call.end(done.map(|()| Response::new(TaskExecStdinWriteResponse {})))
    }

    async fn task_exec_stdin_status(
        &self,
        request: Request<TaskExecStdinStatusRequest>,
    ) -> Result<Response<TaskExecStdinStatusResponse>, Status> {
        let call = self.shared.begin_router("TaskExecStdinStatus", request.metadata())?;
        let exec = match self.exec(&request.into_inner().exec_id) {
            Ok(exec) => exec,
            Err(status) => return call.end(Err(status)),
        };
        exec.stdin_epoch.fetch_add(1, Ordering::SeqCst);
        let stdin = exec.stdin.lock().await;
        call.end(Ok(Response::new(TaskExecStdinStatusResponse {
            num_bytes_written: stdin.written,
            closed: stdin.closed,
        })))
    }

    async fn task_exec_wait(
        &self,
        request: Request<TaskExecWaitRequest>,
    ) -> Result<Response<TaskExecWaitResponse>, Status> {
        use task_exec_wait_response::ExitStatus;
        let call = self.shared.begin_router("TaskExecWait", request.metadata())?;
        let exec = match self.exec(&request.into_inner().exec_id) {
            Ok(exec) => exec,
            Err(status) => return call.end(Err(status)),
        };
        let mut exit = exec.exit.subscribe();
        let ended = exit.wait_for(Option::is_some).await.map(|e| *e);
        let response = match ended {
            Ok(ended) => {
                Ok(TaskExecWaitResponse { exit_status: exit_of(ended, ExitStatus::Code, ExitStatus::Signal) })
            }
            Err(_) => Err(Status::internal("the exec vanished")),
        };
        call.end(response.map(Response::new))
    }

    async fn task_exec_poll(
        &self,
        request: Request<TaskExecPollRequest>,
    ) -> Result<Response<TaskExecPollResponse>, Status> {
        use task_exec_poll_response::ExitStatus;
        let call = self.shared.begin_router("TaskExecPoll", request.metadata())?;
        let response = self.exec(&request.into_inner().exec_id).map(|exec| TaskExecPollResponse {
            exit_status: exit_of(*exec.exit.borrow(), ExitStatus::Code, ExitStatus::Signal),
        });
        call.end(response.map(Response::new))
    }
}
