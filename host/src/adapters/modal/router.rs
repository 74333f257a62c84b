//! The command router (`modal.task_command_router.TaskCommandRouter`, provider facts §A1, §A3
//! step 7): execs with streamed stdio behind a JWT that the control plane hands out.
//!
//! - **Access**: `TaskGetCommandRouterAccess` gives `{jwt, url}`; the JWT is refreshed when its
//!   `exp` is less than 30 s away and once more after an `UNAUTHENTICATED`.
//! - **Exec**: `TaskExecStart` (both pipes explicitly `PIPE`), then at once both `TaskExecStdioRead`
//!   streams (reopened at the byte offset already received after a retryable error), the stdin
//!   stream (resumed from `TaskExecStdinStatus`) and `TaskExecWait` (60 s per call, retried until
//!   the exec's own deadline).
//! - Output still flowing after the exit is read until it ends or stays idle for [`DRAIN_IDLE`]:
//!   a background child holding the pipe open must not hold the caller forever; with no exit by
//!   the exec's deadline, what arrived is all there is.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use tokio::sync::{Mutex, mpsc, watch};
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use super::config::PROVIDER;
use super::control::{Control, MAX_MESSAGE, channel, retryable, uuid4};
use super::proto::task_command_router::{
    self as pb, task_command_router_client::TaskCommandRouterClient,
    task_exec_stdin_write_stream_request::Payload, task_exec_wait_response::ExitStatus as WireStatus,
};
use crate::contract::error::{Result, SandboxError};

/// Refresh the JWT when it expires sooner than this.
const REFRESH_BEFORE: Duration = Duration::from_secs(30);
/// A JWT without `exp` is taken to live this long (the Go SDK's assumption).
const ASSUMED_LIFETIME: Duration = Duration::from_secs(20 * 60);
/// Retries of a router unary call (10 ms doubling) and of a stdio stream between received messages.
const RETRIES: u32 = 10;
/// Resumes of a stdin stream.
const STDIN_RESUMES: u32 = 9;
/// Bytes per stdin message (the Go SDK's chunk).
pub const STDIN_CHUNK: usize = 256 * 1024;
/// Deadline of one `TaskExecWait` call; the exec's own deadline is enforced across calls.
const WAIT_CALL: Duration = Duration::from_secs(60);
/// Output still arriving after the exit is read until it stays idle this long.
pub const DRAIN_IDLE: Duration = Duration::from_secs(5);
/// Deadline of an ordinary router call.
const CALL_DEADLINE: Duration = Duration::from_secs(30);

pub use crate::adapters::argv::{ExecOutput, ExitStatus};

/// The `exp` claim (seconds since the epoch) of a three-part JWT.
pub fn jwt_exp(jwt: &str) -> Option<u64> {
    let mut parts = jwt.split('.');
    let (Some(_), Some(payload), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let bytes =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?;
    exp.as_u64().or_else(|| exp.as_f64().filter(|e| *e >= 0.0).map(fractional_secs))
}

/// A fractional `exp` (seconds, not negative) in whole seconds, as JWT libraries read it.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "the fraction is dropped on purpose; `as` saturates a value past u64::MAX, and the caller keeps out negatives and NaN"
)]
fn fractional_secs(exp: f64) -> u64 {
    exp as u64
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Whether a JWT expiring at `exp` must be refreshed at `now` (both in epoch seconds).
pub fn needs_refresh(exp: u64, now: u64) -> bool {
    exp.saturating_sub(now) < REFRESH_BEFORE.as_secs()
}

/// The error for a failed router call about `what`.
fn router_error(status: &Status, what: &str) -> SandboxError {
    match status.code() {
        Code::NotFound => SandboxError::NotFound { provider: PROVIDER, what: what.to_owned() },
        code => SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("{what} (command router): {code:?}: {}", status.message()),
        },
    }
}

struct Access {
    client: TaskCommandRouterClient<Channel>,
    url: String,
    bearer: AsciiMetadataValue,
    /// Epoch seconds.
    exp: u64,
}

/// The command router of one task.
pub struct Router {
    control: Control,
    task_id: String,
    /// Go's rule: the control plane is on a loopback host, so the router is dialled in plaintext.
    loopback_plaintext: bool,
    access: Mutex<Option<Access>>,
}

/// Why a router call failed: the call itself, or getting access for it.
enum Failure {
    Status(Status),
    Access(SandboxError),
}

#[async_trait::async_trait]
impl crate::adapters::argv::ArgvExec for Router {
    async fn run(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
        timeout: Option<Duration>,
        cap: u64,
    ) -> Result<ExecOutput> {
        self.exec(args, stdin, timeout, cap).await
    }
}

impl Router {
    pub fn new(control: Control, task_id: String) -> Self {
        let host = super::control::url_host(&control.config().server_url).unwrap_or_default().to_owned();
        let loopback_plaintext = matches!(host.as_str(), "localhost" | "127.0.0.1" | "::1" | "172.21.0.1");
        Self { control, task_id, loopback_plaintext, access: Mutex::new(None) }
    }

    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// A client and its bearer value, fetching a new JWT when `force`d or expiring.
    async fn access(&self, force: bool) -> Result<(TaskCommandRouterClient<Channel>, AsciiMetadataValue)> {
        let mut access = self.access.lock().await;
        if let Some(current) = access.as_ref().filter(|a| !force && !needs_refresh(a.exp, now_secs())) {
            return Ok((current.client.clone(), current.bearer.clone()));
        }
        let (jwt, url) =
            self.control.router_access(&self.task_id).await.map_err(|status| match status.code() {
                Code::FailedPrecondition => SandboxError::Provider {
                    provider: PROVIDER,
                    status: None,
                    message: format!("task {} has no command router: {}", self.task_id, status.message()),
                },
                _ => {
                    super::control::status_error(&status, &format!("command router of task {}", self.task_id))
                }
            })?;
        let exp = jwt_exp(&jwt).unwrap_or_else(|| now_secs() + ASSUMED_LIFETIME.as_secs());
        let bearer = AsciiMetadataValue::try_from(format!("Bearer {jwt}"))
            .map_err(|_| SandboxError::Protocol("the router JWT is not valid metadata".to_owned()))?;
        let client = match access.take().filter(|a| a.url == url) {
            Some(previous) => previous.client,
            None => TaskCommandRouterClient::new(channel(&url, self.loopback_plaintext)?)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        };
        *access = Some(Access { client: client.clone(), url, bearer: bearer.clone(), exp });
        Ok((client, bearer))
    }

    fn request<T>(message: T, bearer: &AsciiMetadataValue, deadline: Option<Duration>) -> Request<T> {
        let mut request = Request::new(message);
        request.metadata_mut().insert("authorization", bearer.clone());
        if let Some(deadline) = deadline {
            request.set_timeout(deadline);
        }
        request
    }

    /// One attempt, and one more with a fresh JWT after an `UNAUTHENTICATED`.
    async fn once<Req, Resp, Fut>(
        &self,
        message: &Req,
        deadline: Duration,
        call: &impl Fn(TaskCommandRouterClient<Channel>, Request<Req>) -> Fut,
    ) -> std::result::Result<Resp, Failure>
    where
        Req: Clone,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let mut refreshed = false;
        loop {
            let (client, bearer) = self.access(refreshed).await.map_err(Failure::Access)?;
            match call(client, Self::request(message.clone(), &bearer, Some(deadline))).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if status.code() == Code::Unauthenticated && !refreshed => refreshed = true,
                Err(status) => return Err(Failure::Status(status)),
            }
        }
    }

    /// A unary call with §A1's router policy: retryable codes 10 times from 10 ms doubling.
    async fn unary<Req, Resp, Fut>(
        &self,
        what: &str,
        message: Req,
        call: impl Fn(TaskCommandRouterClient<Channel>, Request<Req>) -> Fut,
    ) -> Result<Resp>
    where
        Req: Clone,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let mut delay = Duration::from_millis(10);
        for attempt in 0.. {
            match self.once(&message, CALL_DEADLINE, &call).await {
                Ok(response) => return Ok(response),
                Err(Failure::Access(err)) => return Err(err),
                Err(Failure::Status(status)) if retryable(status.code()) && attempt < RETRIES => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(Failure::Status(status)) => return Err(router_error(&status, what)),
            }
        }
        Err(SandboxError::Protocol(format!("{what}: out of retries")))
    }

    /// Runs `args` (argv, no shell), feeding `stdin` if given; `timeout` (`None`: no limit) is the
    /// router's `timeout_secs`, and the exec's deadline is that plus a margin. Each of stdout and
    /// stderr is held up to `cap` bytes: past it the exec fails with [`SandboxError::TooLarge`] (a
    /// command, or a sandbox, that prints without end costs bounded memory).
    pub async fn exec(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
        timeout: Option<Duration>,
        cap: u64,
    ) -> Result<ExecOutput> {
        let started = Instant::now();
        let exec_id = uuid4();
        let request = pb::TaskExecStartRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.clone(),
            command_args: args.to_vec(),
            stdout_config: pb::TaskExecStdoutConfig::Pipe as i32,
            stderr_config: pb::TaskExecStderrConfig::Pipe as i32,
            timeout_secs: timeout.map(wire_secs),
            ..Default::default()
        };
        self.unary("exec start", request, |mut c, r| async move { c.task_exec_start(r).await }).await?;
        let deadline = timeout.map(|t| started + t + Duration::from_secs(30));
        let (exited, exit_seen) = watch::channel(None);
        let stdout = self.read(&exec_id, pb::TaskExecStdioFileDescriptor::Stdout, exit_seen.clone(), cap);
        let stderr = self.read(&exec_id, pb::TaskExecStdioFileDescriptor::Stderr, exit_seen, cap);
        let feed = async {
            match stdin {
                Some(bytes) => self.write_stdin(&exec_id, bytes).await,
                None => Ok(()),
            }
        };
        let wait = async {
            let status = self.wait(&exec_id, deadline).await;
            let _ = exited.send(Some(status.as_ref().map_or(ExitStatus::NoAnswer, |s| *s)));
            status
        };
        let (stdout, stderr, (), status) = tokio::try_join!(stdout, stderr, feed, wait)?;
        Ok(ExecOutput { stdout, stderr, status, elapsed: started.elapsed() })
    }

    /// One descriptor's whole output (at most `cap` bytes), reopened at the offset received so
    /// far after a retryable error (10 tries between messages) or with a fresh JWT after an
    /// `UNAUTHENTICATED`.
    async fn read(
        &self,
        exec_id: &str,
        fd: pb::TaskExecStdioFileDescriptor,
        mut exit_seen: watch::Receiver<Option<ExitStatus>>,
        cap: u64,
    ) -> Result<Vec<u8>> {
        let what = format!("{} of exec {exec_id}", fd.as_str_name().to_lowercase());
        let mut data = Vec::new();
        let (mut failures, mut delay, mut refresh, mut refreshed) =
            (0, Duration::from_millis(10), false, false);
        let mut gone = false;
        loop {
            let (mut client, bearer) = self.access(refresh).await?;
            refresh = false;
            let request = pb::TaskExecStdioReadRequest {
                task_id: self.task_id.clone(),
                exec_id: exec_id.to_owned(),
                offset: data.len() as u64,
                file_descriptor: fd as i32,
            };
            let status = match client.task_exec_stdio_read(Self::request(request, &bearer, None)).await {
                Err(status) => status,
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    loop {
                        let exit = *exit_seen.borrow();
                        // No exit by the deadline: a command still talking must not hold the call.
                        if exit == Some(ExitStatus::NoAnswer) {
                            return Ok(data);
                        }
                        let next = if exit.is_some() || gone {
                            match tokio::time::timeout(DRAIN_IDLE, stream.message()).await {
                                Ok(next) => next,
                                Err(_) => {
                                    tracing::debug!("{what}: still open {DRAIN_IDLE:?} after the exit; left");
                                    return Ok(data);
                                }
                            }
                        } else {
                            tokio::select! {
                                next = stream.message() => next,
                                changed = exit_seen.changed() => {
                                    gone |= changed.is_err();
                                    continue;
                                }
                            }
                        };
                        match next {
                            Ok(Some(message)) => {
                                if data.len() as u64 + message.data.len() as u64 > cap {
                                    return Err(SandboxError::TooLarge {
                                        what: format!("{what} in Modal's command router"),
                                        limit: cap,
                                    });
                                }
                                data.extend_from_slice(&message.data);
                                (failures, delay, refreshed) = (0, Duration::from_millis(10), false);
                            }
                            Ok(None) => return Ok(data),
                            Err(status) => break status,
                        }
                    }
                }
            };
            if status.code() == Code::Unauthenticated && !refreshed {
                (refresh, refreshed) = (true, true);
            } else if retryable(status.code()) && failures < RETRIES {
                failures += 1;
                tracing::debug!("{what}: {:?} at byte {}, reopening", status.code(), data.len());
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            } else {
                return Err(router_error(&status, &what));
            }
        }
    }

    /// Sends `bytes` then closes stdin, resuming from `TaskExecStdinStatus` after a failure.
    async fn write_stdin(&self, exec_id: &str, bytes: &[u8]) -> Result<()> {
        let what = format!("stdin of exec {exec_id}");
        let total = bytes.len() as u64;
        let (mut offset, mut resumes, mut refresh) = (0_u64, 0, false);
        loop {
            let (mut client, bearer) = self.access(refresh).await?;
            let (tx, rx) = mpsc::channel::<pb::TaskExecStdinWriteStreamRequest>(4);
            let messages =
                futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
            let start = pb::TaskExecStdinWriteStreamStart {
                task_id: self.task_id.clone(),
                exec_id: exec_id.to_owned(),
                offset,
            };
            let rest = bytes.get(usize::try_from(offset).unwrap_or(usize::MAX)..).unwrap_or_default();
            let feed = async move {
                let message = |payload| pb::TaskExecStdinWriteStreamRequest { payload: Some(payload) };
                if tx.send(message(Payload::Start(start))).await.is_err() {
                    return;
                }
                for chunk in rest.chunks(STDIN_CHUNK) {
                    if tx.send(message(Payload::Data(chunk.to_vec()))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(message(Payload::End(pb::TaskExecStdinWriteStreamEnd {}))).await;
            };
            let call = client.task_exec_stdin_write_stream(Self::request(messages, &bearer, None));
            let ((), result) = tokio::join!(feed, call);
            let status = match result {
                Ok(_) => return Ok(()),
                Err(status) => status,
            };
            let resumable = retryable(status.code()) || status.code() == Code::Unauthenticated;
            if !resumable || resumes >= STDIN_RESUMES {
                return Err(router_error(&status, &what));
            }
            resumes += 1;
            refresh = status.code() == Code::Unauthenticated;
            let request =
                pb::TaskExecStdinStatusRequest { task_id: self.task_id.clone(), exec_id: exec_id.to_owned() };
            let written = self
                .unary(&what, request, |mut c, r| async move { c.task_exec_stdin_status(r).await })
                .await?;
            match (written.closed, written.num_bytes_written) {
                // Only the answer was lost.
                (true, n) if n == total => return Ok(()),
                (true, n) => {
                    return Err(SandboxError::Provider {
                        provider: PROVIDER,
                        status: None,
                        message: format!("{what} was closed after {n} of {total} bytes"),
                    });
                }
                (false, n) => offset = n.min(total),
            }
            tracing::debug!("{what}: {:?}, resuming at byte {offset}", status.code());
        }
    }

    /// `TaskExecWait`, 60 s per call, retried every second until `deadline`.
    async fn wait(&self, exec_id: &str, deadline: Option<Instant>) -> Result<ExitStatus> {
        let what = format!("wait for exec {exec_id}");
        let request = pb::TaskExecWaitRequest { task_id: self.task_id.clone(), exec_id: exec_id.to_owned() };
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(ExitStatus::NoAnswer);
            }
            let per_call = left.map_or(WAIT_CALL, |l| l.min(WAIT_CALL)).max(Duration::from_secs(1));
            match self.once(&request, per_call, &|mut c, r| async move { c.task_exec_wait(r).await }).await {
                Ok(response) => {
                    return match response.exit_status {
                        Some(WireStatus::Code(code)) => Ok(ExitStatus::Code(code)),
                        Some(WireStatus::Signal(signal)) => Ok(ExitStatus::Signal(signal)),
                        None => {
                            Err(SandboxError::Protocol(format!("{what}: an answer without an exit status")))
                        }
                    };
                }
                Err(Failure::Access(err)) => return Err(err),
                Err(Failure::Status(status)) if retryable(status.code()) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(Failure::Status(status)) => return Err(router_error(&status, &what)),
            }
        }
    }
}

/// Whole seconds for `timeout_secs`, never rounding a short timeout down to 0 ("none").
pub fn wire_secs(timeout: Duration) -> u32 {
    u32::try_from(crate::contract::deadlines::whole_secs(timeout)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", b64(r#"{"alg":"HS256"}"#), b64(payload))
    }

    #[test]
    fn the_expiry_comes_from_the_payload() {
        assert_eq!(jwt_exp(&jwt(r#"{"exp":1700000000,"sub":"t"}"#)), Some(1_700_000_000));
        assert_eq!(jwt_exp(&jwt(r#"{"exp":1700000000.5}"#)), Some(1_700_000_000));
        assert_eq!(jwt_exp(&jwt(r#"{"sub":"t"}"#)), None);
        assert_eq!(jwt_exp("a.b"), None);
        assert_eq!(jwt_exp("a.b.c.d"), None);
        assert_eq!(jwt_exp("a.!!!.c"), None);
    }

    #[test]
    fn refresh_30_seconds_before_expiry() {
        assert!(!needs_refresh(1_000, 969));
        assert!(needs_refresh(1_000, 971));
        assert!(needs_refresh(1_000, 2_000));
    }

    #[test]
    fn exit_statuses_map_as_the_sdks() {
        assert_eq!(ExitStatus::Code(3).code(), Some(3));
        assert_eq!(ExitStatus::Signal(9).code(), Some(137));
        assert_eq!(ExitStatus::NoAnswer.code(), None);
    }

    #[test]
    fn wire_timeouts_are_whole_seconds_and_never_zero() {
        assert_eq!(wire_secs(Duration::from_millis(100)), 1);
        assert_eq!(wire_secs(Duration::from_millis(1500)), 2);
        assert_eq!(wire_secs(Duration::from_secs(30)), 30);
    }
}
