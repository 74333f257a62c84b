//! [`ModalSandbox`]: a Modal sandbox driven through Modal's gRPC API (its published
//! `.proto` files), and [`ModalProvider`], the same as a [`Provider`].
//!
//! - [`config`]: settings as Modal's SDKs read them (variables, else the active profile of
//!   `~/.modal.toml`).
//! - [`control`]: the control plane: channel, metadata, retries, the create sequence, list, terminate.
//! - [`router`]: the command router: execs with streamed stdio behind a refreshed JWT. Files,
//!   `execute` without a link and the setup scripts go through it as
//!   [`argv`] runs them.
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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentd_protocol::{ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;

pub use self::config::ModalConfig;
pub use self::control::{Control, CreateSpec};
pub use self::router::{ExecOutput, ExitStatus, Router};
use crate::adapters::argv;
use crate::adapters::linked::{LinkMode, Linked, Machine, made_or_deleted};
use crate::contract::BaseSandbox;
use crate::contract::agentd::Connector;
use crate::contract::error::{Result, SandboxError};
use crate::contract::link::Link;
use crate::contract::provider::{Kind, Provider, SandboxInfo};
use crate::contract::random::random_hex;
use config::PROVIDER;

/// This kind, as its row of the kinds table names it.
pub const KIND: Kind = Kind::new("modal");

/// Tag on every sandbox this adapter creates.
pub const TAG: &str = "dev.agentd.sandbox";
/// Tag holding the image a sandbox was created from.
pub const SOURCE_TAG: &str = "dev.agentd.source";
/// Where injected agentd and its run files live inside the sandbox.
pub const RUN_DIR: &str = "/tmp/.agentd";
/// The port agentd listens on unless [`ModalOptions::port`] says otherwise.
pub const DEFAULT_PORT: u16 = 7700;

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
    /// The agentd to inject; `None`: agentd on the sandbox's `PATH` if any, else [`static_agentd`](crate::adapters::inject::static_agentd).
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

/// The Modal side of one sandbox: its control plane, its task's command router ([`Machine`]).
pub struct Modal {
    control: Control,
    id: String,
    router: std::sync::Arc<Router>,
    /// [`ModalOptions::port`], [`ModalOptions::start_timeout`], [`ModalOptions::link_timeout`].
    port: u16,
    start_timeout: Duration,
    link_timeout: Duration,
}

/// A Modal sandbox with agentd in it.
pub type ModalSandbox = Linked<Modal>;

impl From<ModalMode> for LinkMode {
    fn from(mode: ModalMode) -> Self {
        match mode {
            ModalMode::Link => LinkMode::Link,
            ModalMode::RouterExec => LinkMode::ProviderExec,
            ModalMode::Auto => LinkMode::Auto,
        }
    }
}

impl Linked<Modal> {
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
        tracing::info!(sandbox = %id, "created Modal sandbox from `{image}`");
        let delete = {
            let (control, id) = (control.clone(), id.clone());
            async move { control.terminate(&id).await }
        };
        let make = Self::from_id(control, id.clone(), options, true);
        made_or_deleted(&format!("Modal sandbox {id}"), delete, make).await
    }

    /// Attaches to the running sandbox `id`.
    pub async fn attach(config: ModalConfig, id: &str, options: &ModalOptions) -> Result<Self> {
        Self::from_id(Control::new(config)?, id.to_owned(), options, false).await
    }

    async fn from_id(control: Control, id: String, options: &ModalOptions, owned: bool) -> Result<Self> {
        let task_id = control.task_id(&id, options.start_timeout).await?;
        let router = std::sync::Arc::new(Router::new(control.clone(), task_id));
        let machine = Modal {
            control,
            id,
            router,
            port: options.port,
            start_timeout: options.start_timeout,
            link_timeout: options.link_timeout,
        };
        Linked::setup(machine, options.mode.into(), options.agentd_binary.clone(), owned).await
    }

    /// The channel `execute`, the verbs and the offload use.
    pub fn channel(&self) -> Channel {
        if self.linked() { Channel::Link } else { Channel::RouterExec }
    }

    /// The control-plane client.
    pub fn control(&self) -> &Control {
        &self.machine().control
    }

    /// The command router of this sandbox's task.
    pub fn router(&self) -> &Router {
        &self.machine().router
    }
}

#[async_trait]
impl Machine for Modal {
    const PROVIDER: &'static str = "Modal";
    const EXEC: &'static str = "router exec";

    fn id(&self) -> &str {
        &self.id
    }

    fn run_dir(&self) -> &str {
        RUN_DIR
    }

    async fn exec(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        argv::sh_execute(&*self.router, RUN_DIR, command, timeout).await
    }

    async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        argv::upload(&*self.router, files).await
    }

    async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        argv::download(&*self.router, paths).await
    }

    /// The tunnel of agentd's port, and agentd started behind it if it does not run.
    async fn connector(self: std::sync::Arc<Self>, agentd: &str) -> Result<Box<dyn Connector>> {
        let tunnels = self.control.tunnels(&self.id, self.start_timeout).await?;
        let port = u32::from(self.port);
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
            port: self.port,
            agentd: agentd.to_owned(),
            token: Mutex::new(String::new()),
            timeout: self.link_timeout,
        };
        connector.ensure_agentd().await?;
        Ok(Box::new(connector))
    }

    async fn delete(&self) -> Result<()> {
        self.control.terminate(&self.id).await
    }
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
        let (code, out) = argv::sh(&*self.router, &script, Some(random_hex().as_bytes())).await?;
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
        match argv::sh(&*self.router, &format!("tail -c 2000 {RUN_DIR}/log-{} 2>/dev/null", self.port), None)
            .await
        {
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
        KIND
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
                kind: KIND,
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

/// Why Modal sandboxes cannot be used here, if they cannot: no token, in the variables or the
/// config file, as Modal's SDKs read it (the kinds table's `missing`).
pub fn missing() -> Option<String> {
    missing_when(ModalConfig::from_env().is_ok())
}

fn missing_when(configured: bool) -> Option<String> {
    (!configured).then(|| {
        "modal sandboxes need a token: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or the active profile \
         of ~/.modal.toml, as Modal's own SDKs read them; MODAL_SERVER_URL for another control plane)"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_names_the_token() {
        assert_eq!(missing_when(true), None);
        assert!(missing_when(false).unwrap().contains("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"));
    }

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
}
