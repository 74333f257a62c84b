//! [`ModalSandbox`]: a Modal sandbox driven through Modal's gRPC API (its published
//! `.proto` files), and [`ModalProvider`], the same as a [`Provider`].
//!
//! - [`config`]: settings as Modal's SDKs read them (variables, else the active profile of
//!   `~/.modal.toml`).
//! - [`control`]: the control plane: channel, metadata, retries, the create sequence, list, terminate.
//! - [`router`]: the command router: execs with streamed stdio behind a refreshed JWT.
//! - [`transfer`]: files through the router's exec, with the contract's per-file codes.
//!
//! **Create**: app `agentd` → image `FROM <IMAGE>` (joined until built) → sandbox with the agentd
//! port in `open_ports`, the tags [`TAG`]` = 1` and [`SOURCE_TAG`]` = IMAGE` (what
//! [`Provider::list`] finds), a lifetime (never 0) and an optional idle timeout → its task.
//!
//! **agentd gets in** baked (`agentd` on the image's `PATH`) or injected: the static binary goes in
//! through the router exec's stdin, then `agentd serve --listen 0.0.0.0:PORT --token-file F` starts
//! detached (its own session, stdio to a log) with a fresh token. Attaching reuses an agentd that
//! runs already (its token read from its token file), since the tunnelled port is fixed at create.
//!
//! **Channels.** Files always travel through the router exec. `execute`, the verbs and the offload
//! go over the websocket link to agentd through the port's tunnel; without one they run through the
//! router exec (the verbs as `agentd fs` there). [`ModalMode`] chooses, [`ModalSandbox::channel`]
//! says which is in use; the choice is made once, and [`ModalMode::Link`] never degrades.

pub mod config;
pub mod control;
pub mod proto;
pub mod router;
pub mod transfer;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentd_protocol::{ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;

pub use self::config::ModalConfig;
pub use self::control::{Control, CreateSpec};
pub use self::router::{ExecOutput, ExitStatus, Router};
use crate::adapters::agentd::{
    AgentdSandbox, Connector, DEFAULT_EXEC_TIMEOUT, LinkOrExec, link_or_exec_sandbox, link_or_fallback,
    timeout_note,
};
use crate::adapters::capped::EXEC_RESULT_MAX;
use crate::adapters::inject::{AgentdSource, random_hex, static_agentd};
use crate::error::{Result, SandboxError};
use crate::link::Link;
use crate::provider::{Kind, Provider, SandboxInfo};
use crate::sandbox::BaseSandbox;
use config::PROVIDER;

/// Tag on every sandbox this adapter creates.
pub const TAG: &str = "dev.agentd.sandbox";
/// Tag holding the image a sandbox was created from.
pub const SOURCE_TAG: &str = "dev.agentd.source";
/// Where injected agentd and its run files live inside the sandbox.
pub const RUN_DIR: &str = "/tmp/.agentd";
/// The port agentd listens on unless [`ModalOptions::port`] says otherwise.
pub const DEFAULT_PORT: u16 = 7700;
/// Commands longer than this travel as an uploaded script: one `sh -c` argument is limited to
/// 128 KiB by Linux (MAX_ARG_STRLEN).
const INLINE_COMMAND_MAX: usize = 64 * 1024;

/// How `execute`, the verbs and the offload reach the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModalMode {
    /// The websocket link through the tunnel, or an error: never a silent fallback.
    Link,
    /// The router exec (agentd is still put in, for the derived verbs).
    RouterExec,
    /// The link when it can be made, else the router exec (with a warning in the log).
    #[default]
    Auto,
}

/// The channel in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Link,
    RouterExec,
}

/// How to create or attach a sandbox.
#[derive(Debug, Clone)]
pub struct ModalOptions {
    pub mode: ModalMode,
    /// The port agentd listens on, opened as a tunnel at create.
    pub port: u16,
    /// The sandbox's longest lifetime (`timeout_secs`; rounded up to whole seconds, at least 1).
    pub lifetime: Duration,
    /// Ended after this long without activity (`idle_timeout_secs`); `None`: only the lifetime.
    pub idle_timeout: Option<Duration>,
    /// Longest wait for the image build and for the sandbox's task.
    pub start_timeout: Duration,
    /// Longest wait for agentd to answer through the tunnel, per (re)connection.
    pub link_timeout: Duration,
    /// The agentd to inject; `None`: agentd on the sandbox's `PATH` if any, else [`static_agentd`].
    pub agentd_binary: Option<std::path::PathBuf>,
}

impl Default for ModalOptions {
    fn default() -> Self {
        Self {
            mode: ModalMode::Auto,
            port: DEFAULT_PORT,
            lifetime: Duration::from_secs(3600),
            idle_timeout: None,
            start_timeout: Duration::from_secs(600),
            link_timeout: Duration::from_secs(60),
            agentd_binary: None,
        }
    }
}

/// The websocket URL of a tunnel (§C): `wss://host[:port]` (no `:443`), or `ws://host:port` when
/// the control plane is `http://` on a loopback host (a local control plane's tunnels are plaintext).
pub fn tunnel_url(host: &str, port: u32, server_url: &str) -> String {
    let host =
        if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
    if control::is_local_plaintext(server_url) {
        format!("ws://{host}:{port}")
    } else if port == 443 {
        format!("wss://{host}")
    } else {
        format!("wss://{host}:{port}")
    }
}

/// The contract's view of a router exec of `sh -c`: stdout then stderr; a kill at or past the
/// command's `timeout` (or no exit by the deadline) reads as exit code 124 with agentd's note.
pub fn execute_response(out: &ExecOutput, timeout: Option<Duration>) -> ExecuteResponse {
    let mut bytes = out.stdout.clone();
    bytes.extend_from_slice(&out.stderr);
    let mut output = String::from_utf8_lossy(&bytes).into_owned();
    let timed_out = match out.status {
        ExitStatus::NoAnswer => true,
        ExitStatus::Signal(_) => timeout.is_some_and(|t| out.elapsed >= t),
        ExitStatus::Code(_) => false,
    };
    if !timed_out {
        return ExecuteResponse { output, exit_code: out.status.code(), truncated: false };
    }
    if !output.is_empty() && !output.ends_with('\n') {
        output.push('\n');
    }
    output.push_str(&timeout_note(timeout.unwrap_or(out.elapsed).as_secs_f64()));
    ExecuteResponse { output, exit_code: Some(124), truncated: false }
}

/// Terminates a half-made sandbox if construction fails.
struct TerminateOnDrop {
    control: Control,
    id: String,
    armed: bool,
}

impl Drop for TerminateOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let (control, id) = (self.control.clone(), std::mem::take(&mut self.id));
            tokio::spawn(async move {
                let _ = control.terminate(&id).await;
            });
        }
    }
}

/// A Modal sandbox with agentd in it.
pub struct ModalSandbox {
    control: Control,
    id: String,
    router: std::sync::Arc<Router>,
    agentd_path: String,
    /// How agentd got in; `None` until it has (or when it could not).
    agentd_source: Option<AgentdSource>,
    link: Option<AgentdSandbox>,
    /// Created by this adapter: terminated by [`ModalSandbox::close`].
    owned: bool,
}

impl ModalSandbox {
    /// Creates a sandbox from `image`, waits for its task, puts agentd in and links to it as
    /// `options.mode` says.
    pub async fn create(config: ModalConfig, image: &str, options: &ModalOptions) -> Result<Self> {
        let control = Control::new(config)?;
        let spec = CreateSpec {
            image: image.to_owned(),
            timeout_secs: router::wire_secs(options.lifetime),
            idle_timeout_secs: options.idle_timeout.map(router::wire_secs),
            port: options.port,
            tags: vec![(TAG.to_owned(), "1".to_owned()), (SOURCE_TAG.to_owned(), image.to_owned())],
        };
        let id = control.create(&spec, options.start_timeout).await?;
        let mut guard = TerminateOnDrop { control: control.clone(), id: id.clone(), armed: true };
        tracing::info!(sandbox = %id, "created Modal sandbox from `{image}`");
        let sandbox = Self::setup(control, id, options, true).await?;
        guard.armed = false;
        Ok(sandbox)
    }

    /// Attaches to the running sandbox `id`.
    pub async fn attach(config: ModalConfig, id: &str, options: &ModalOptions) -> Result<Self> {
        Self::setup(Control::new(config)?, id.to_owned(), options, false).await
    }

    async fn setup(control: Control, id: String, options: &ModalOptions, owned: bool) -> Result<Self> {
        let task_id = control.task_id(&id, options.start_timeout).await?;
        let router = std::sync::Arc::new(Router::new(control.clone(), task_id));
        let mut sandbox = Self {
            control,
            id,
            router,
            agentd_path: "agentd".to_owned(),
            agentd_source: None,
            link: None,
            owned,
        };
        let injected = sandbox.put_agentd(options).await;
        let (wanted, required) = (options.mode != ModalMode::RouterExec, options.mode == ModalMode::Link);
        let open = sandbox.open_link(options);
        let link = link_or_fallback(&sandbox.id, "router exec", injected, wanted, required, open).await?;
        sandbox.link = link;
        tracing::info!(sandbox = %sandbox.id, channel = ?sandbox.channel(), agentd = %sandbox.agentd_path, "Modal sandbox ready");
        Ok(sandbox)
    }

    /// Runs a shell script through the router exec and gives its exit code and stdout+stderr.
    async fn sh(&self, script: &str, stdin: Option<&[u8]>) -> Result<(Option<i32>, String)> {
        sh(&self.router, script, stdin).await
    }

    /// Finds agentd on the sandbox's `PATH`, or uploads the static one (unless the same one is
    /// there already: a running binary cannot be rewritten in place, so a new one is renamed over).
    async fn put_agentd(&mut self, options: &ModalOptions) -> Result<()> {
        let target = format!("{RUN_DIR}/agentd");
        let probe = format!(
            "umask 077 && mkdir -p {RUN_DIR} && chmod 700 {RUN_DIR} || exit 1\n\
             echo \"path=$(command -v agentd || true)\"\n\
             [ -x {target} ] && echo \"size=$(wc -c < {target})\"\n\
             exit 0"
        );
        let (code, found) = self.sh(&probe, None).await?;
        if code != Some(0) {
            return Err(SandboxError::Start(format!(
                "cannot make {RUN_DIR} in the sandbox: {}",
                found.trim()
            )));
        }
        let field =
            |key: &str| found.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).map(str::to_owned);
        if options.agentd_binary.is_none()
            && let Some(path) = field("path=").filter(|p| p.starts_with('/'))
        {
            self.agentd_path = path;
            self.agentd_source = Some(AgentdSource::Baked);
            return Ok(());
        }
        let binary = match &options.agentd_binary {
            Some(path) => path.clone(),
            None => static_agentd()?,
        };
        let bytes = tokio::fs::read(&binary)
            .await
            .map_err(|e| SandboxError::Start(format!("cannot read {}: {e}", binary.display())))?;
        if field("size=").and_then(|s| s.parse::<usize>().ok()) != Some(bytes.len()) {
            let staged = format!("{target}.{}", &random_hex()[..12]);
            let up = transfer::upload(&self.router, &[(staged.clone(), bytes)]).await?;
            if let Some(error) = up.into_iter().find_map(|u| u.error) {
                return Err(SandboxError::Start(format!("cannot upload agentd to {staged}: {error}")));
            }
            let (code, out) =
                self.sh(&format!("chmod 755 {staged} && mv -f {staged} {target}"), None).await?;
            if code != Some(0) {
                return Err(SandboxError::Start(format!(
                    "cannot install the injected agentd: {}",
                    out.trim()
                )));
            }
        }
        self.agentd_path = target;
        self.agentd_source = Some(AgentdSource::Injected);
        Ok(())
    }

    /// The tunnel of agentd's port, and the link through it (agentd started if not running).
    async fn open_link(&self, options: &ModalOptions) -> Result<AgentdSandbox> {
        let tunnels = self.control.tunnels(&self.id, options.start_timeout).await?;
        let port = u32::from(options.port);
        let tunnel =
            tunnels.iter().find(|t| t.container_port == port).ok_or_else(|| SandboxError::Provider {
                provider: PROVIDER,
                status: None,
                message: format!(
                    "sandbox {} has no tunnel for port {port} (it is opened only at create)",
                    self.id
                ),
            })?;
        let url = tunnel_url(&tunnel.host, tunnel.port, &self.control.config().server_url);
        let connector = TunnelConnector {
            router: std::sync::Arc::clone(&self.router),
            id: self.id.clone(),
            url,
            port: options.port,
            agentd: self.agentd_path.clone(),
            token: Mutex::new(String::new()),
            timeout: options.link_timeout,
        };
        connector.ensure_agentd().await?;
        AgentdSandbox::with_connector(Box::new(connector), format!("modal:{}", self.id)).await
    }

    /// The channel `execute`, the verbs and the offload use.
    pub fn channel(&self) -> Channel {
        if self.link.is_some() { Channel::Link } else { Channel::RouterExec }
    }

    /// The control-plane client.
    pub fn control(&self) -> &Control {
        &self.control
    }

    /// The command router of this sandbox's task.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Terminates a sandbox this adapter created; an attached one keeps running.
    pub async fn close(self) -> Result<()> {
        if self.owned { self.control.terminate(&self.id).await } else { Ok(()) }
    }

    /// `sh -c COMMAND` through the router exec (stdin closed; a long command as an uploaded script).
    async fn router_execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        let timeout = match timeout {
            None => Some(DEFAULT_EXEC_TIMEOUT),
            Some(t) if t.is_zero() => None,
            Some(t) => Some(t),
        };
        let mut script = None;
        let mut text = format!("exec </dev/null\n{command}");
        if text.len() > INLINE_COMMAND_MAX {
            let path = format!("{RUN_DIR}/cmd-{}.sh", &random_hex()[..16]);
            let up = transfer::upload(&self.router, &[(path.clone(), command.as_bytes().to_vec())]).await?;
            if let Some(error) = up.into_iter().find_map(|u| u.error) {
                return Err(SandboxError::Start(format!("cannot upload a long command to {path}: {error}")));
            }
            text = format!("exec </dev/null\n. {path}");
            script = Some(path);
        }
        let args = ["sh".to_owned(), "-c".to_owned(), text];
        let out = self.router.exec(&args, None, timeout, EXEC_RESULT_MAX).await;
        if let Some(path) = script {
            let _ = self.sh(&format!("rm -f {path}"), None).await;
        }
        Ok(execute_response(&out?, timeout))
    }
}

/// `sh -c SCRIPT` through `router`: the exit code and stdout then stderr, as text.
async fn sh(router: &Router, script: &str, stdin: Option<&[u8]>) -> Result<(Option<i32>, String)> {
    let args = ["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    let out = router.exec(&args, stdin, Some(Duration::from_secs(60)), EXEC_RESULT_MAX).await?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code(), text))
}

/// Opens the link through the tunnel; each connection makes sure our agentd runs (restarting a
/// dead one, at most [`RESTARTS`] times per connection) and gives up after `timeout` with its log.
struct TunnelConnector {
    router: std::sync::Arc<Router>,
    id: String,
    url: String,
    port: u16,
    agentd: String,
    /// agentd's bearer token: fresh when we start it, read back when one runs already.
    token: Mutex<String>,
    timeout: Duration,
}

/// Most restarts of a dead agentd within one connection.
const RESTARTS: u32 = 2;

impl TunnelConnector {
    /// Starts agentd detached (own session, stdio to a log) unless ours runs; learns its token.
    /// The fresh token travels on stdin, never in a command line.
    async fn ensure_agentd(&self) -> Result<()> {
        let port = self.port;
        let (token_file, pid_file, log) = (
            format!("{RUN_DIR}/token-{port}"),
            format!("{RUN_DIR}/pid-{port}"),
            format!("{RUN_DIR}/log-{port}"),
        );
        let script = format!(
            r#"new=$(cat)
alive() {{ p=$(cat {pid_file} 2>/dev/null) && [ -n "$p" ] && grep -qF -- {token_file} /proc/$p/cmdline 2>/dev/null; }}
if alive && [ -s {token_file} ]; then cat {token_file}; exit 0; fi
# Private run files; agentd itself keeps the sandbox's umask (files it makes for commands).
(umask 077 && mkdir -p {RUN_DIR} && printf %s "$new" > {token_file} && chmod 600 {token_file}) || exit 1
S=; command -v setsid >/dev/null 2>&1 && S=setsid
N=; command -v nohup >/dev/null 2>&1 && N=nohup
$N $S {agentd} serve --listen 0.0.0.0:{port} --token-file {token_file} >{log} 2>&1 </dev/null &
echo $! > {pid_file}
cat {token_file}"#,
            agentd = self.agentd,
        );
        let (code, out) = sh(&self.router, &script, Some(random_hex().as_bytes())).await?;
        let token = out.trim();
        if code != Some(0) || token.is_empty() || token.contains(char::is_whitespace) {
            return Err(SandboxError::Start(format!(
                "cannot start agentd in Modal sandbox {}: {token}",
                self.id
            )));
        }
        if let Ok(mut current) = self.token.lock() {
            *current = token.to_owned();
        }
        Ok(())
    }

    async fn log_tail(&self) -> String {
        match sh(&self.router, &format!("tail -c 2000 {RUN_DIR}/log-{} 2>/dev/null", self.port), None).await {
            Ok((_, text)) if !text.trim().is_empty() => text.trim().to_owned(),
            _ => "(empty)".to_owned(),
        }
    }

    async fn try_connect(&self, budget: Duration) -> Result<Link> {
        let token = self.token.lock().map(|t| t.clone()).unwrap_or_default();
        tokio::time::timeout(budget, Link::connect(&self.url, Some(&token)))
            .await
            .map_err(|_| SandboxError::Timeout { what: format!("agentd at {}", self.url), after: budget })?
    }
}

#[async_trait]
impl Connector for TunnelConnector {
    async fn connect(&self) -> Result<Link> {
        let deadline = Instant::now() + self.timeout;
        let (mut restarts, mut delay) = (0, Duration::from_millis(50));
        loop {
            let budget = deadline
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_secs(1), Duration::from_secs(10));
            let err = match self.try_connect(budget).await {
                Ok(link) => return Ok(link),
                Err(err) => err,
            };
            if Instant::now() >= deadline {
                return Err(SandboxError::Start(format!(
                    "agentd in Modal sandbox {} did not answer through the tunnel {} within {:?}: {err}; its log: {}",
                    self.id,
                    self.url,
                    self.timeout,
                    self.log_tail().await
                )));
            }
            // A refused token: agentd was restarted by someone else with a new one.
            if restarts < RESTARTS
                && (matches!(err, SandboxError::Unauthorized { .. }) || delay >= Duration::from_millis(400))
            {
                restarts += 1;
                self.ensure_agentd().await?;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }
}

#[async_trait]
impl LinkOrExec for ModalSandbox {
    fn sandbox_id(&self) -> &str {
        &self.id
    }

    fn agentd_path(&self) -> &str {
        &self.agentd_path
    }

    fn agentd_source(&self) -> Option<AgentdSource> {
        self.agentd_source
    }

    fn link(&self) -> Option<&AgentdSandbox> {
        self.link.as_ref()
    }

    async fn exec_channel(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        self.router_execute(command, timeout).await
    }

    async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        transfer::upload(&self.router, files).await
    }

    async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        transfer::download(&self.router, paths).await
    }
}

link_or_exec_sandbox!(ModalSandbox);

/// Modal as a [`Provider`]: `modal:IMAGE`, `modal-attach:SANDBOX_ID`.
pub struct ModalProvider {
    config: ModalConfig,
    options: ModalOptions,
}

impl ModalProvider {
    pub fn new(config: ModalConfig, options: ModalOptions) -> Self {
        Self { config, options }
    }

    /// Configured as Modal's SDKs are ([`ModalConfig::from_env`]), default options.
    pub fn from_env() -> Result<Self> {
        Ok(Self::new(ModalConfig::from_env()?, ModalOptions::default()))
    }
}

/// The state `sandbox ls` shows: `running`, or how the task ended.
fn state_of(info: &proto::client::SandboxInfo) -> String {
    match info.task_info.as_ref().and_then(|t| t.result.as_ref()).filter(|r| r.status != 0) {
        Some(result) => control::describe(result),
        None => "running".to_owned(),
    }
}

#[async_trait]
impl Provider for ModalProvider {
    fn kind(&self) -> Kind {
        Kind::Modal
    }

    async fn create(&self, source: &str) -> Result<Box<dyn BaseSandbox>> {
        if source.is_empty() {
            return Err(SandboxError::InvalidSpec {
                spec: "modal:".to_owned(),
                why: "an image is needed after the colon".to_owned(),
            });
        }
        Ok(Box::new(ModalSandbox::create(self.config.clone(), source, &self.options).await?))
    }

    async fn attach(&self, id: &str) -> Result<Box<dyn BaseSandbox>> {
        Ok(Box::new(ModalSandbox::attach(self.config.clone(), id, &self.options).await?))
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let control = Control::new(self.config.clone())?;
        Ok(control
            .list(&[(TAG, "1")])
            .await?
            .into_iter()
            .map(|info| SandboxInfo {
                kind: Kind::Modal,
                source: info
                    .tags
                    .iter()
                    .find(|t| t.tag_name == SOURCE_TAG)
                    .map(|t| t.tag_value.clone())
                    .unwrap_or_default(),
                state: state_of(&info),
                id: info.id,
            })
            .collect())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        Control::new(self.config.clone())?.terminate(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunnels_are_wss_except_for_a_local_plaintext_control_plane() {
        let cloud = "https://api.modal.com:443";
        assert_eq!(tunnel_url("abc.modal.host", 443, cloud), "wss://abc.modal.host");
        assert_eq!(tunnel_url("abc.modal.host", 8443, cloud), "wss://abc.modal.host:8443");
        assert_eq!(tunnel_url("127.0.0.1", 40000, "http://127.0.0.1:5000"), "ws://127.0.0.1:40000");
        assert_eq!(tunnel_url("127.0.0.1", 443, "http://localhost:5000"), "ws://127.0.0.1:443");
        // Plaintext to a remote host is still a public tunnel: TLS.
        assert_eq!(tunnel_url("h", 443, "http://10.1.2.3:5000"), "wss://h");
        assert_eq!(tunnel_url("::1", 9, "http://[::1]:5000"), "ws://[::1]:9");
    }

    fn out(stdout: &str, stderr: &str, status: ExitStatus, elapsed: u64) -> ExecOutput {
        ExecOutput {
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            status,
            elapsed: Duration::from_secs(elapsed),
        }
    }

    #[test]
    fn router_execs_read_as_the_contract_says() {
        let t = Some(Duration::from_secs(2));
        let plain = execute_response(&out("a", "b", ExitStatus::Code(3), 0), t);
        assert_eq!((plain.output.as_str(), plain.exit_code, plain.truncated), ("ab", Some(3), false));
        let killed_early = execute_response(&out("", "", ExitStatus::Signal(9), 1), t);
        assert_eq!(killed_early.exit_code, Some(137));
        let timed_out = execute_response(&out("partial", "", ExitStatus::Signal(9), 2), t);
        assert_eq!(timed_out.exit_code, Some(124));
        assert_eq!(timed_out.output, "partial\n[Command timed out after 2.0s; its process tree was killed]");
        let no_answer = execute_response(&out("", "", ExitStatus::NoAnswer, 40), t);
        assert_eq!(no_answer.exit_code, Some(124));
        let no_limit = execute_response(&out("", "", ExitStatus::Signal(15), 99), None);
        assert_eq!(no_limit.exit_code, Some(143));
    }
}
