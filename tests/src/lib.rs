//! Support for the end-to-end tests and benchmarks: a real agentd (started through
//! [`agentd_host::LocalSandbox`]), a raw websocket client for malformed input, and `/proc` helpers
//! to check that nothing is left running.
//!
//! ## Layout
//! - [`agentctl`]: agentctl as a child process, isolated from the machine's providers, its peak RSS
//!   measured.
//! - [`channels`]: what the provider benchmarks share: one sandbox through the link and through the
//!   provider's own exec channel.
//! - [`containers`]: the fake providers' sandboxes as Docker containers, driven by the `docker` CLI.
//! - [`evil_agentd`]: an agentd that lies, for the tests of a hostile sandbox (`evil-agentd`).
//! - [`fake_daytona`]: a fake Daytona (API, toolbox, preview proxy; `fake-daytona`).
//! - [`fake_kube`]: a fake Kubernetes API server (discovery, objects, watch, Pods as containers,
//!   exec over websockets; `fake-kube`).
//! - [`fake_modal`]: a fake Modal (control plane and command router over gRPC; `fake-modal`).
//!
//! The tests need the `agentd` and `agentctl` binaries built: `cargo build --workspace` (the README's
//! test command does it first).

// Test support: a failed setup step should abort the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::{Message, http::HeaderValue};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub mod agentctl;
pub mod channels;
pub mod containers;
pub mod evil_agentd;
pub mod fake_daytona;
pub mod fake_kube;
pub mod fake_modal;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A started agentd with its address and token, for tests that speak the protocol by hand.
pub struct Daemon {
    pub child: std::process::Child,
    pub url: String,
    pub token: String,
    pub workspace: tempfile::TempDir,
    /// Holds the socket of a daemon started with [`Daemon::start_unix`].
    pub socket_dir: Option<tempfile::TempDir>,
}

impl Daemon {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts agentd with extra `serve` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_in(tempfile::tempdir().expect("tempdir"), extra)
    }

    /// Starts agentd in `workspace` (its working directory) with extra `serve` arguments.
    pub fn start_in(workspace: tempfile::TempDir, extra: &[&str]) -> Self {
        Self::launch(&[], workspace, extra, None)
    }

    /// Starts agentd on TCP with a fresh token, through `wrapper` when given (a command that ends by
    /// running its arguments, e.g. a shell that first joins a cgroup), in `workspace`, with extra
    /// `serve` arguments. The token goes in through `token_file` when given, else `AGENTD_TOKEN`.
    pub fn launch(
        wrapper: &[&str],
        workspace: tempfile::TempDir,
        extra: &[&str],
        token_file: Option<&std::path::Path>,
    ) -> Self {
        let token = format!("test-token-{}", rand::random::<u64>());
        let agentd = binary("agentd");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = std::process::Command::new(program);
                command.args(rest).arg(&agentd);
                command
            }
            None => std::process::Command::new(&agentd),
        };
        command.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
        match token_file {
            Some(path) => {
                std::fs::write(path, &token).expect("token file");
                command.arg("--token-file").arg(path);
            }
            None => {
                command.env("AGENTD_TOKEN", &token);
            }
        }
        Self::spawn(command, workspace, token, None)
    }

    /// Starts agentd on a Unix socket (a local session: no token), with extra `serve` arguments.
    pub fn start_unix(extra: &[&str]) -> Self {
        let socket_dir = tempfile::tempdir().expect("tempdir");
        let mut command = std::process::Command::new(binary("agentd"));
        command.arg("serve").arg("--unix").arg(socket_dir.path().join("agentd.sock")).args(extra);
        Self::spawn(command, tempfile::tempdir().expect("tempdir"), String::new(), Some(socket_dir))
    }

    fn spawn(
        mut command: std::process::Command,
        workspace: tempfile::TempDir,
        token: String,
        socket_dir: Option<tempfile::TempDir>,
    ) -> Self {
        let mut child = command
            .current_dir(workspace.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn agentd");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("read address");
        let url = line.trim().strip_prefix("agentd listening on ").expect("address line").to_owned();
        Self { child, url, token, workspace, socket_dir }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        remove_scratch(self.child.id());
    }
}

/// `execute`, the verbs and the offload on any sandbox, whichever channel carries them: exact
/// output and exit codes, shell text untouched, a write larger than one `sh -c` argument, an
/// offloaded capture. Leaves `/tmp/verbs/{a,big,cap}.txt`.
pub async fn check_commands_and_verbs(sb: &dyn agentd_host::BaseSandbox) {
    let r = sb.execute("printf a; printf b >&2; exit 3", None).await.expect("transport");
    assert_eq!((r.output.as_str(), r.exit_code), ("ab", Some(3)));
    // Quotes, `$` and newlines reach the shell untouched.
    let r = sb.execute("x='it''s'; echo \"$x\" \"$((6*7))\"\necho two", None).await.expect("transport");
    assert_eq!(r.output, "its 42\ntwo\n");
    let w = sb.write("/tmp/verbs/a.txt", "one\ntwo\nthree\n").await.expect("transport");
    assert_eq!((w.error, w.path.as_deref()), (None, Some("/tmp/verbs/a.txt")));
    let read = sb.read("/tmp/verbs/a.txt", 1, 1).await.expect("transport");
    assert_eq!(read.file_data.expect("read: content").content, "two");
    let e = sb.edit("/tmp/verbs/a.txt", "three", "3", false).await.expect("transport");
    assert_eq!((e.error, e.occurrences), (None, Some(1)));
    let g = sb.grep("3", Some("/tmp/verbs"), None, None).await.expect("transport");
    assert_eq!(
        g.matches.expect("grep: matches").iter().map(|m| (m.path.as_str(), m.line)).collect::<Vec<_>>(),
        [("/tmp/verbs/a.txt", 3)]
    );
    // A write larger than one `sh -c` argument may hold (the fallback uploads it as a script).
    let big = "x".repeat(300 << 10);
    assert_eq!(sb.write("/tmp/verbs/big.txt", &big).await.expect("transport").error, None);
    let back = sb.download_files(&["/tmp/verbs/big.txt".into()]).await.expect("transport");
    assert_eq!(back[0].content.as_deref(), Some(big.as_bytes()));
    let off = sb
        .execute_with_offload(&agentd_host::OffloadRequest::new("seq 1 20000", "/tmp/verbs/cap.txt", 1000))
        .await
        .expect("transport");
    assert!(off.offloaded, "{off:?}");
    let ls = sb.ls("/tmp/verbs").await.expect("transport");
    let mut names: Vec<_> = ls.entries.expect("ls: entries").into_iter().map(|e| e.path).collect();
    names.sort();
    assert_eq!(names, ["/tmp/verbs/a.txt", "/tmp/verbs/big.txt", "/tmp/verbs/cap.txt"]);
}

/// 100 MiB of random bytes up to `/tmp/big/file.bin` and back with matching sha256, through the
/// sandbox's own transfer channel (`how` names it in the printed timing), then the per-file codes.
pub async fn check_transfers(sb: &dyn agentd_host::BaseSandbox, how: &str) {
    use sha2::{Digest as _, Sha256};
    let mut data = vec![0u8; 100 << 20];
    rand::Fill::fill(&mut data[..], &mut rand::rng());
    let digest = format!("{:x}", Sha256::digest(&data));
    let started = std::time::Instant::now();
    let up = sb.upload_files(&[("/tmp/big/file.bin".into(), data)]).await.unwrap();
    assert_eq!(up[0].error, None);
    let down = sb.download_files(&["/tmp/big/file.bin".into()]).await.unwrap();
    assert_eq!(down[0].error, None);
    assert_eq!(format!("{:x}", Sha256::digest(down[0].content.as_ref().unwrap())), digest);
    eprintln!("100 MiB up and down through {how}: {:?}", started.elapsed());
    check_per_file_codes(sb).await;
}

/// The contract's per-file transfer codes, in order, with exact bytes next to failures, on any
/// sandbox: `/tmp/big` must be a directory there.
pub async fn check_per_file_codes(sb: &dyn agentd_host::BaseSandbox) {
    let up = sb
        .upload_files(&[
            ("/tmp/big".into(), b"x".to_vec()),
            ("rel".into(), vec![]),
            ("/tmp/n/deep/f".into(), b"\0\r\n\xff".to_vec()),
        ])
        .await
        .expect("upload");
    let errors: Vec<_> = up.iter().map(|u| u.error.as_deref()).collect();
    assert_eq!(errors, [Some("is_directory"), Some("invalid_path"), None]);
    let paths = ["/tmp/missing", "/tmp/big", "relative", "/tmp/n/deep/f"].map(String::from);
    let down = sb.download_files(&paths).await.expect("download");
    let errors: Vec<_> = down.iter().map(|d| d.error.as_deref()).collect();
    assert_eq!(errors, [Some("file_not_found"), Some("is_directory"), Some("invalid_path"), None]);
    assert_eq!(down[3].content.as_deref(), Some(&b"\0\r\n\xff"[..]));
}

/// A fake server's own thread and runtime (two workers), so it serves whether or not the caller's
/// runtime is busy or blocked. Stopping it (or dropping it) ends the server without waiting for
/// calls in flight, then joins the thread; dropping the runtime ends the tasks the server spawned.
pub struct ServerThread {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::runtime::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Runs the future `serve` makes (inside the runtime, so it can register listeners there) on
    /// a thread named `name`, until it ends or the server is stopped.
    pub fn spawn<F>(name: &str, serve: impl FnOnce() -> F + Send + 'static) -> std::io::Result<Self>
    where
        F: std::future::Future<Output = ()>,
    {
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let handle = runtime.handle().clone();
        let thread = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            runtime.block_on(async move {
                // No graceful shutdown: a call in flight must not hold up the drop.
                tokio::select! {
                    _ = serve() => {}
                    _ = stop => {}
                }
            });
        })?;
        Ok(Self { shutdown: Some(shutdown), handle, thread: Some(thread) })
    }

    /// Runs `future` to completion on the server's runtime, from a thread outside any runtime (a
    /// fake's binary waits for its signals there: one runtime, one signal driver).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// The server's runtime, to spawn tasks (controllers) on it.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Ends the server and joins its thread (idempotent).
    pub fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Returns on SIGINT or SIGTERM (what a fake's binary serves until).
pub async fn until_terminated() {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Sends SIGTERM to `child` and waits up to `within` for it to exit (a failure past that).
pub async fn sigterm_and_wait(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .expect("SIGTERM");
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "{} ignored SIGTERM", child.id());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` random bytes as lowercase hex.
pub fn random_hex(n: usize) -> String {
    (0..n).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

/// The scratch directories of agentd `pid` in `parent`: `agentd-<pid>.<16 hex>`.
pub fn scratch_dirs_in(parent: &std::path::Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("agentd-{pid}.");
    let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(|name| name.strip_prefix(&prefix))
                .is_some_and(|random| random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .map(|entry| entry.path())
        .collect()
}

/// The scratch directory of agentd `pid`, wherever agentd may have made it (`$TMPDIR`, `/run`,
/// `/var/tmp`, `/tmp`; see agent/src/scratch.rs).
pub fn scratch_dir(pid: u32) -> Option<PathBuf> {
    let parents = [std::env::temp_dir(), "/run".into(), "/var/tmp".into(), "/tmp".into()];
    parents.iter().flat_map(|parent| scratch_dirs_in(parent, pid)).next()
}

/// Removes the scratch directory of an agentd that could not remove it itself (killed with SIGKILL,
/// or by a test's pids cap). Call it only once that agentd is gone.
pub fn remove_scratch(pid: u32) {
    while let Some(dir) = scratch_dir(pid) {
        if std::fs::remove_dir_all(&dir).is_err() {
            break;
        }
    }
}

/// Path of a workspace binary built next to the test executable (`target/<profile>/NAME`).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(path.is_file(), "{} is missing: run `cargo build --workspace` first", path.display());
    path
}

/// Opens a websocket with an optional bearer token, without the protocol handshake.
pub async fn raw_connect(
    url: &str,
    token: Option<&str>,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut request = url.into_client_request()?;
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).expect("header"));
    }
    Ok(tokio_tungstenite::connect_async(request).await?.0)
}

pub async fn send_text(ws: &mut Ws, text: impl Into<String>) {
    ws.send(Message::text(text.into())).await.expect("send");
}

/// A connection to `daemon` that said `hello`.
pub async fn greeted(daemon: &Daemon) -> Ws {
    let mut ws = raw_connect(&daemon.url, Some(&daemon.token)).await.expect("connect");
    send_text(&mut ws, serde_json::json!({"type": "hello", "id": 0, "versions": [1]}).to_string()).await;
    let hello = recv_json(&mut ws).await;
    assert_eq!(hello["type"], "hello", "{hello}");
    ws
}

/// Sends `message` and returns the next text reply.
pub async fn ask(ws: &mut Ws, message: serde_json::Value) -> serde_json::Value {
    send_text(ws, message.to_string()).await;
    recv_json(ws).await
}

/// The next text message as JSON (binary messages are skipped), within 30 s.
pub async fn recv_json(ws: &mut Ws) -> serde_json::Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.next()).await.expect("reply in time");
        match frame.expect("open").expect("frame") {
            Message::Text(text) => return serde_json::from_str(text.as_str()).expect("json"),
            _ => continue,
        }
    }
}

/// Live processes below `pid` (by parent pid), as (pid, cmdline with spaces).
pub fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(p) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid: u32 = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
        if state != "Z" {
            parent_of.push((p, ppid));
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(current) = queue.pop() {
        for &(child, parent) in &parent_of {
            if parent == current {
                queue.push(child);
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                found.push((child, String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_owned()));
            }
        }
    }
    found
}

/// Live processes anywhere whose command line is exactly `cmdline` (words joined by spaces).
pub fn processes_named(cmdline: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&raw).replace('\0', " ").trim() == cmdline
        })
        .collect()
}

/// A `/proc/<pid>/status` field in kB (`VmRSS`, `VmHWM`).
pub fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok()
        })
        .expect("field")
}

/// Waits up to `within` for `check` to hold.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// A sandbox whose only powers are the four required members: `execute` through a local
/// `/bin/sh -c` (stdout and stderr merged) in `cwd`, and uploads/downloads as local file IO with the
/// contract's codes. It stands in for a provider's exec channel, so the seven verbs and the offload
/// run through the derived path (`agentd fs request`, `agentd exec`).
pub struct ShellSandbox {
    pub cwd: PathBuf,
    agentd: String,
}

impl ShellSandbox {
    pub fn new(cwd: &std::path::Path) -> Self {
        Self { cwd: cwd.to_owned(), agentd: binary("agentd").to_string_lossy().into_owned() }
    }
}

#[agentd_host::async_trait]
impl agentd_host::BaseSandbox for ShellSandbox {
    fn id(&self) -> &str {
        "shell"
    }

    fn agentd_command(&self) -> &str {
        &self.agentd
    }

    async fn execute(
        &self,
        command: &str,
        timeout: Option<Duration>,
    ) -> agentd_host::Result<agentd_protocol::ExecuteResponse> {
        let mut child = tokio::process::Command::new("/bin/sh");
        // `exec 2>&1` first: one stream, in emission order, as a provider's channel gives.
        child.arg("-c").arg(format!("exec 2>&1\n{command}")).current_dir(&self.cwd).kill_on_drop(true);
        let run = child.output();
        let output = match timeout.filter(|t| !t.is_zero()) {
            Some(t) => match tokio::time::timeout(t, run).await {
                Ok(output) => output?,
                Err(_) => {
                    return Ok(agentd_protocol::ExecuteResponse {
                        output: String::new(),
                        exit_code: Some(124),
                        truncated: false,
                    });
                }
            },
            None => run.await?,
        };
        Ok(agentd_protocol::ExecuteResponse {
            output: String::from_utf8_lossy(&output.stdout).into_owned(),
            exit_code: output.status.code(),
            truncated: false,
        })
    }

    async fn upload_files(
        &self,
        files: &[(String, Vec<u8>)],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileUploadResponse>> {
        use agentd_protocol::TransferError;
        Ok(files
            .iter()
            .map(|(path, bytes)| {
                let error = TransferError::check_path(path).err().map(|e| e.to_string()).or_else(|| {
                    let target = std::path::Path::new(path);
                    let written = match std::fs::metadata(target) {
                        Ok(meta) if meta.is_dir() => return Some(TransferError::IsDirectory.to_string()),
                        _ => target
                            .parent()
                            .map_or(Ok(()), std::fs::create_dir_all)
                            .and_then(|()| std::fs::write(target, bytes)),
                    };
                    written.err().map(|e| transfer_code(&e))
                });
                agentd_protocol::FileUploadResponse { path: path.clone(), error }
            })
            .collect())
    }

    async fn download_files(
        &self,
        paths: &[String],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileDownloadResponse>> {
        use agentd_protocol::TransferError;
        Ok(paths
            .iter()
            .map(|path| {
                let read = TransferError::check_path(path).map_err(|e| e.to_string()).and_then(|()| {
                    match std::fs::metadata(path) {
                        Ok(meta) if meta.is_dir() => Err(TransferError::IsDirectory.to_string()),
                        _ => std::fs::read(path).map_err(|e| transfer_code(&e)),
                    }
                });
                match read {
                    Ok(content) => agentd_protocol::FileDownloadResponse {
                        path: path.clone(),
                        content: Some(content),
                        error: None,
                    },
                    Err(error) => agentd_protocol::FileDownloadResponse {
                        path: path.clone(),
                        content: None,
                        error: Some(error),
                    },
                }
            })
            .collect())
    }
}

fn transfer_code(err: &std::io::Error) -> String {
    match err.raw_os_error().and_then(agentd_protocol::TransferError::from_errno) {
        Some(code) => code.to_string(),
        None => err.to_string(),
    }
}

/// Small helpers the benchmarks share.
pub mod stats {
    use std::time::Duration;

    /// The middle of `times` (sorted in place).
    pub fn median(mut times: Vec<Duration>) -> Duration {
        times.sort();
        times[times.len() / 2]
    }

    /// The value below which the fraction `p` of `sorted` lies (nearest rank; 0.5 is the median).
    pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
        sorted[((sorted.len() - 1) as f64 * p).round() as usize]
    }

    /// Milliseconds, for printing.
    pub fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }
}

/// A sandbox seen only through its four required members (and where agentd lives): the verbs and
/// the offload take the derived path through `execute`, whatever the sandbox could do natively.
pub struct ExecOnly(pub std::sync::Arc<dyn agentd_host::BaseSandbox>);

#[agentd_host::async_trait]
impl agentd_host::BaseSandbox for ExecOnly {
    fn id(&self) -> &str {
        self.0.id()
    }

    fn agentd_command(&self) -> &str {
        self.0.agentd_command()
    }

    async fn execute(
        &self,
        command: &str,
        timeout: Option<Duration>,
    ) -> agentd_host::Result<agentd_protocol::ExecuteResponse> {
        self.0.execute(command, timeout).await
    }

    async fn upload_files(
        &self,
        files: &[(String, Vec<u8>)],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileUploadResponse>> {
        self.0.upload_files(files).await
    }

    async fn download_files(
        &self,
        paths: &[String],
    ) -> agentd_host::Result<Vec<agentd_protocol::FileDownloadResponse>> {
        self.0.download_files(paths).await
    }
}

/// Whether the Docker engine and `image` are there; when not, the running test is [`skip`]ped
/// (a failure when `AGENTD_REQUIRE_DOCKER` is set: CI on a machine with Docker).
pub async fn docker_available(image: &str) -> bool {
    use agentd_host::adapters::docker;
    let reason = match docker::engine().await {
        Err(err) => Some(err.to_string()),
        Ok(engine) => match engine.inspect_image(image).await {
            Ok(_) => None,
            Err(_) => Some(format!("image {image} is missing: run images/build.sh")),
        },
    };
    match reason {
        None => true,
        Some(reason) => {
            skip(Need::Docker, reason);
            false
        }
    }
}

/// What a test needs from the machine that the machine may not have.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// A Docker engine and the images `images/build.sh` builds.
    Docker,
    /// Landlock (at the ABI the test names in its reason).
    Landlock,
    /// A writable cgroup v1 `pids` hierarchy (root).
    Cgroup,
    /// python3, for the probes the shell cannot make.
    Python3,
    /// The official `daytona` Python SDK: `$AGENTD_DAYTONA_PYTHON` names a python that imports it.
    DaytonaSdk,
    /// The official `modal` Python client: `$AGENTD_MODAL_PYTHON` names a python that imports it.
    ModalSdk,
    /// The official Kubernetes Python clients (`kubernetes`, `k8s-agent-sandbox`):
    /// `$AGENTD_KUBE_PYTHON` names a python that imports them.
    KubeSdk,
    /// deepagents itself (its `StateBackend` is the reference for `StateSandbox`):
    /// `$AGENTD_DEEPAGENTS_PYTHON` names a python that imports it.
    Deepagents,
    /// `kubectl` on the `PATH`.
    Kubectl,
    /// Root, for what only root may do to the machine around agentd (mounts).
    Root,
}

impl Need {
    /// The variable that makes a skip for this need a failure (`.ci/run` sets them all).
    pub fn variable(self) -> &'static str {
        match self {
            Self::Docker => "AGENTD_REQUIRE_DOCKER",
            Self::Landlock => "AGENTD_REQUIRE_LANDLOCK",
            Self::Cgroup => "AGENTD_REQUIRE_CGROUP",
            Self::Python3 => "AGENTD_REQUIRE_PYTHON3",
            Self::DaytonaSdk => "AGENTD_REQUIRE_DAYTONA_SDK",
            Self::ModalSdk => "AGENTD_REQUIRE_MODAL_SDK",
            Self::KubeSdk => "AGENTD_REQUIRE_KUBE_SDK",
            Self::Deepagents => "AGENTD_REQUIRE_DEEPAGENTS",
            Self::Kubectl => "AGENTD_REQUIRE_KUBECTL",
            Self::Root => "AGENTD_REQUIRE_ROOT",
        }
    }
}

/// The one way a test says it cannot run here; the caller returns right after.
///
/// libtest has no runtime skip, so a skipped test counts as passed there. This makes it visible:
/// it fails the test when `need`'s `AGENTD_REQUIRE_*` variable is set; otherwise it writes
/// `skipped: <binary>::<test>: <reason>` to stderr (straight to the descriptor, so libtest's capture
/// does not hide it) and appends the same line to the file `$AGENTD_SKIP_LOG` names, from which
/// `.ci/run` counts skips (one per test) and takes them off the passed count.
pub fn skip(need: Need, reason: impl std::fmt::Display) {
    use std::io::Write as _;
    let variable = need.variable();
    assert!(std::env::var_os(variable).is_none(), "{variable} is set, but this test would skip: {reason}");
    let line = format!("skipped: {}: {reason}\n", test_name());
    // One write each: lines from tests running in parallel do not mix.
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os("AGENTD_SKIP_LOG") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(err) = appended {
            panic!("cannot record the skip in {}: {err}", std::path::Path::new(&log).display());
        }
    }
}

/// Whether this test runs as root; it skips otherwise, saying `why` root is needed.
pub fn as_root(why: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        skip(Need::Root, why);
    }
    root
}

/// A daemon in a new workspace holding `files` (path → content), serving `profile` (TOML, `{W}`
/// replaced by the workspace's real path), a link to it, and the directory holding the profile file.
/// `None` (after [`skip`]) when the kernel's landlock is older than ABI 4, which profiles need.
pub async fn profiled(
    profile: &str,
    files: &[(&str, &str)],
) -> Option<(Daemon, agentd_host::AgentdSandbox, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let w = workspace.path().canonicalize().unwrap();
    for (path, content) in files {
        let path = w.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let path = dir.path().join("profile.toml");
    std::fs::write(&path, profile.replace("{W}", w.to_str().unwrap())).unwrap();
    let daemon = Daemon::start_in(workspace, &["--profile", path.to_str().unwrap()]);
    let sandbox = agentd_host::AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let abi = sandbox.link().await.unwrap().hello().landlock_abi;
    if abi < 4 {
        skip(Need::Landlock, format!("this kernel's landlock ABI is {abi}; profiles need 4"));
        return None;
    }
    Some((daemon, sandbox, dir))
}

/// Runs `command` on `sandbox` (20 s at most); the exec must be answered.
pub async fn run(sandbox: &agentd_host::AgentdSandbox, command: &str) -> agentd_protocol::ExecResult {
    let request = agentd_protocol::ExecRequest {
        command: command.to_owned(),
        timeout: Some(20.0),
        ..agentd_protocol::ExecRequest::default()
    };
    sandbox.exec(request, None).await.unwrap()
}

/// `agentctl` with the session file `session`, and no sandbox named by the environment.
pub fn agentctl_in(session: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(binary("agentctl"));
    command
        .env("AGENTCTL_SESSION", session)
        .env_remove("AGENTD_URL")
        .env_remove("AGENTD_TOKEN")
        .env_remove("DAYTONA_API_KEY");
    command
}

/// `<test binary>::<test>`: libtest runs each test on a thread named after it; the binary's name
/// (without cargo's hash) tells apart tests of the same name in several binaries.
fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
        .unwrap_or_else(|| "?".to_owned());
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}

/// A pids cgroup made by the test beneath its own (cgroup v1 `pids`), with a small `pids.max`: a
/// ceiling for everything started inside it, so a fork bomb or an escape cannot fill the machine's
/// process table. Dropping it kills what is left and removes it.
pub struct PidsCap {
    pub dir: PathBuf,
}

impl PidsCap {
    /// `None` where no writable cgroup v1 `pids` hierarchy is mounted (not root, cgroup v2 only).
    pub fn new(max: u32) -> Option<Self> {
        let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let own = membership.lines().find_map(|l| l.split_once(":pids:").map(|(_, path)| path.to_owned()))?;
        let root = std::path::Path::new("/sys/fs/cgroup/pids");
        let dir =
            root.join(own.trim_start_matches('/')).join(format!("agentd-test-{}", rand::random::<u32>()));
        std::fs::create_dir(&dir).ok()?;
        let cap = Self { dir };
        std::fs::write(cap.dir.join("pids.max"), max.to_string()).ok()?;
        Some(cap)
    }

    /// [`PidsCap::new`], or [`skip`] (`Need::Cgroup`) and `None`.
    pub fn or_skip(max: u32) -> Option<Self> {
        let cap = Self::new(max);
        if cap.is_none() {
            skip(Need::Cgroup, "needs a writable cgroup v1 pids hierarchy (root)");
        }
        cap
    }

    /// A wrapper for [`Daemon::launch`]: a shell that joins the cap, then runs its arguments.
    pub fn enter(&self) -> String {
        format!("echo $$ > {}/cgroup.procs && exec \"$@\"", self.dir.display())
    }

    /// Moves the calling thread into the cap until the guard drops: what it spawns meanwhile (an
    /// agentd through `LocalSandbox::start`) starts inside. cgroup v1 moves single threads through
    /// `tasks`, so the test's other threads stay where they are.
    pub fn join_thread(&self) -> ThreadInCap {
        let tid = nix::unistd::gettid().to_string();
        let back = self.dir.parent().expect("parent cgroup").join("tasks");
        std::fs::write(self.dir.join("tasks"), &tid).expect("join the cap");
        ThreadInCap { tid, back }
    }

    /// Every pid in the cap's tree.
    pub fn pids(&self) -> Vec<i32> {
        pids_below(&self.dir)
    }
}

/// The calling thread inside a [`PidsCap`]; dropping it moves the thread back to the cap's parent.
pub struct ThreadInCap {
    tid: String,
    back: PathBuf,
}

impl Drop for ThreadInCap {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.back, &self.tid);
    }
}

/// Every pid in the cgroup `dir` and beneath it.
pub fn pids_below(dir: &std::path::Path) -> Vec<i32> {
    let mut pids = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        pids.extend(procs.lines().filter_map(|l| l.parse::<i32>().ok()));
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    pids
}

impl Drop for PidsCap {
    fn drop(&mut self) {
        for _ in 0..100 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Deepest first.
        let mut dirs = vec![self.dir.clone()];
        let mut i = 0;
        while i < dirs.len() {
            let children: Vec<_> = std::fs::read_dir(&dirs[i])
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            dirs.extend(children);
            i += 1;
        }
        for dir in dirs.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The agentd a benchmark runs: the static one (`target/x86_64-unknown-linux-gnu/release/agentd`)
/// when it exists, else `target/release/agentd`.
pub fn bench_agentd() -> PathBuf {
    let release = binary("agentd");
    let target = release.parent().and_then(|p| p.parent()).expect("target dir");
    let static_bin = target.join("x86_64-unknown-linux-gnu/release/agentd");
    if static_bin.is_file() { static_bin } else { release }
}

/// The static agentd built for injection (`images/build.sh` builds it).
pub fn static_agentd() -> PathBuf {
    let release = binary("agentd");
    let target = release.parent().and_then(|p| p.parent()).expect("target dir");
    let path = target.join("x86_64-unknown-linux-gnu/release/agentd");
    assert!(path.is_file(), "{} is missing: images/build.sh builds it", path.display());
    path
}

/// A running container from `image` whose process only waits (no agentd), with `mounts` bound at
/// the same paths.
pub fn plain_container(image: &str, mounts: &[&std::path::Path]) -> String {
    let mut args =
        vec!["run".to_owned(), "-d".into(), "--label".into(), agentd_host::adapters::docker::LABEL.into()];
    for dir in mounts {
        args.extend(["-v".to_owned(), format!("{0}:{0}", dir.display())]);
    }
    args.extend(["--entrypoint".into(), "/bin/sh".into(), image.into(), "-c".into(), "sleep 3600".into()]);
    let out = std::process::Command::new("docker").args(&args).output().expect("docker run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A Docker sandbox with `workspace` bind-mounted at the same path and as agentd's working
/// directory: baked (`image` has agentd) or injected into a plain container of `image`. The
/// container is removed when the returned guard drops, and also when a step here fails.
pub async fn docker_sandbox(
    image: &str,
    inject: bool,
    workspace: &std::path::Path,
) -> (agentd_host::adapters::docker::DockerSandbox, RemoveOnDrop) {
    use agentd_host::adapters::docker::{DockerOptions, DockerSandbox};
    let workdir = Some(workspace.to_string_lossy().into_owned());
    if inject {
        let agentd = static_agentd();
        let container = RemoveOnDrop(plain_container(image, &[workspace]));
        let sandbox = DockerSandbox::attach_with(&container.0, &agentd, workdir).await.expect("attach");
        (sandbox, container)
    } else {
        let options = DockerOptions { mounts: vec![workspace.to_owned()], workdir };
        let sandbox = DockerSandbox::create_with(image, &options).await.expect("create");
        let container = RemoveOnDrop(sandbox.container().to_owned());
        (sandbox, container)
    }
}

/// Removes a container when dropped (tests: also when they fail).
pub struct RemoveOnDrop(pub String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A plain-number `/proc/<pid>/status` field (`Threads`).
pub fn status_count(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':')?.trim().parse().ok())
        .expect("field")
}

/// CPU time (user + system) `pid` has used, in clock ticks, from `/proc/<pid>/stat`.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces) start at `state`, field 3.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// Open file descriptors of `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// A thread that exchanges two names in a directory (`renameat2(RENAME_EXCHANGE)`, atomic) in a tight
/// loop, as a racing command would: e.g. a real directory and a symlink leading out. Stops when
/// dropped.
pub struct Swapper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    swaps: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    /// Starts exchanging `a` and `b` in `dir`.
    pub fn start(dir: &std::path::Path, a: &'static str, b: &'static str) -> Self {
        use nix::fcntl::{OFlag, RenameFlags, open, renameat2};
        use std::sync::atomic::Ordering;
        let fd =
            open(dir, OFlag::O_PATH | OFlag::O_DIRECTORY, nix::sys::stat::Mode::empty()).expect("open dir");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swaps = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let thread = {
            let (stop, swaps) = (std::sync::Arc::clone(&stop), std::sync::Arc::clone(&swaps));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    renameat2(&fd, a, &fd, b, RenameFlags::RENAME_EXCHANGE).expect("exchange");
                    swaps.fetch_add(1, Ordering::Relaxed);
                    // Two cores: leave agentd and the client room to run between swaps.
                    std::thread::yield_now();
                }
            })
        };
        Self { stop, swaps, thread: Some(thread) }
    }

    /// Exchanges made so far.
    pub fn swaps(&self) -> u64 {
        self.swaps.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
