//! [`DaytonaSandbox`]: a Daytona sandbox driven through its REST API (its published
//! OpenAPI document), and [`DaytonaProvider`], the same as a [`Provider`].
//! The API's calls are in `api`; the toolbox's (files, exec) in `toolbox`.
//!
//! - **Configuration** like Daytona's SDKs ([`DaytonaConfig::from_env`]): `DAYTONA_API_KEY`
//!   (required), `DAYTONA_API_URL` (default `https://app.daytona.io/api`), `DAYTONA_TARGET`.
//! - **Source** of a new sandbox: a spec containing `/` or `:` is an image (`python:3.12-slim`,
//!   `registry/x`), built through `buildInfo` (`FROM <image>`); any other non-empty spec is a
//!   snapshot name; an empty spec is the organisation's default snapshot. Sandboxes carry the label
//!   [`LABEL`]` = 1` (what [`Provider::list`] finds) and `autoStopInterval: 0` (a linked agentd must
//!   not be stopped under the host's feet).
//! - **agentd gets in** baked into the image (`agentd` on `PATH`) or **injected**: the static binary
//!   is uploaded through the toolbox, then started through the toolbox exec with a fresh token in a
//!   token file (`agentd serve --listen 0.0.0.0:PORT --token-file F`, detached with `setsid`/`nohup`).
//! - **Channels.** Files always travel through the toolbox's bulk endpoints (the adapter's own
//!   channel); a download to a local path streams the part to its file, in bounded memory, when
//!   there is no link (with one, over the link). `execute`, the verbs and the offload go over the websocket link to agentd, reached
//!   through the port's preview URL (`X-Daytona-Preview-Token`, re-fetched on every reconnect because
//!   it changes when the sandbox restarts). Without a link they fall back to the toolbox exec (the
//!   verbs then run `agentd fs` through it). [`DaytonaMode`] chooses; [`DaytonaSandbox::channel`]
//!   says which is in use, and it is logged. Asking for [`DaytonaMode::Link`] never degrades; the
//!   choice is made once, at create/attach: a link that drops later is reopened (agentd restarted if
//!   it died) or its call fails with a clear error, never silently moved to the toolbox exec.

mod api;
mod toolbox;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd_protocol::{ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;

pub use self::api::{
    Api, DEFAULT_API_URL, DaytonaConfig, ENV_API_KEY, ENV_API_URL, ENV_TARGET, Preview, SandboxRecord,
};
pub use self::toolbox::Toolbox;
use crate::adapters::linked::{LinkMode, Linked, Machine, made_or_deleted};
use crate::contract::BaseSandbox;
use crate::contract::agentd::Connector;
use crate::contract::error::{Result, SandboxError};
use crate::contract::link::Link;
use crate::contract::provider::{Kind, Provider, SandboxInfo};
use crate::contract::random::random_hex;

/// This kind, as its row of the kinds table names it.
pub const KIND: Kind = Kind::new("daytona");

/// Label on every sandbox this adapter creates.
pub const LABEL: &str = "dev.agentd.sandbox";
/// Label holding the spec a sandbox was created from (for `sandbox ls`).
pub const SOURCE_LABEL: &str = "dev.agentd.source";
/// The header that carries a preview URL's token.
pub const PREVIEW_TOKEN_HEADER: &str = "X-Daytona-Preview-Token";

/// How `execute`, the verbs and the offload reach the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DaytonaMode {
    /// The websocket link to agentd, or an error: never a silent fallback.
    Link,
    /// The toolbox exec (agentd is still injected, for the derived verbs).
    ToolboxExec,
    /// The link when it can be made, else the toolbox exec (with a warning in the log).
    #[default]
    Auto,
}

/// The channel in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Link,
    ToolboxExec,
}

/// How to create or attach a sandbox.
#[derive(Debug, Clone)]
pub struct DaytonaOptions {
    pub mode: DaytonaMode,
    /// The port agentd listens on inside the sandbox; `None`: one drawn from 7700–7999, so two hosts
    /// attached to one sandbox do not collide.
    pub port: Option<u16>,
    /// Longest wait for the sandbox to reach `started` (image builds included).
    pub start_timeout: Duration,
    /// Longest wait for agentd to answer through the preview URL, per (re)connection.
    pub link_timeout: Duration,
    /// The agentd to inject; `None`: agentd on the sandbox's `PATH` if any, else [`static_agentd`](crate::adapters::inject::static_agentd).
    pub agentd_binary: Option<PathBuf>,
}

impl Default for DaytonaOptions {
    fn default() -> Self {
        Self {
            mode: DaytonaMode::Auto,
            port: None,
            start_timeout: Duration::from_secs(300),
            link_timeout: Duration::from_secs(30),
            agentd_binary: None,
        }
    }
}

/// The Daytona side of one sandbox: its REST client, toolbox and run directory ([`Machine`]).
pub struct Daytona {
    api: Api,
    id: String,
    toolbox: Toolbox,
    /// Where this adapter keeps its agentd's token, pid and log inside the sandbox.
    run_dir: String,
    /// [`DaytonaOptions::port`] and [`DaytonaOptions::link_timeout`].
    port: Option<u16>,
    link_timeout: Duration,
}

/// A Daytona sandbox with agentd in it.
pub type DaytonaSandbox = Linked<Daytona>;

impl From<DaytonaMode> for LinkMode {
    fn from(mode: DaytonaMode) -> Self {
        match mode {
            DaytonaMode::Link => LinkMode::Link,
            DaytonaMode::ToolboxExec => LinkMode::ProviderExec,
            DaytonaMode::Auto => LinkMode::Auto,
        }
    }
}

/// A short random name part.
fn random_suffix() -> String {
    random_hex()[..16].to_owned()
}

/// The `CreateSandbox` body for `source` (see the module docs for the image/snapshot rule).
pub fn create_body(source: &str, target: Option<&str>) -> serde_json::Value {
    let mut body = serde_json::json!({
        "labels": { LABEL: "1", SOURCE_LABEL: source },
        "autoStopInterval": 0,
    });
    if source.contains('/') || source.contains(':') {
        body["buildInfo"] = serde_json::json!({ "dockerfileContent": format!("FROM {source}\n") });
    } else if !source.is_empty() {
        body["snapshot"] = serde_json::json!(source);
    }
    if let Some(target) = target {
        body["target"] = serde_json::json!(target);
    }
    body
}

impl Linked<Daytona> {
    /// Creates a sandbox from `source` (image or snapshot), waits until it is `started`, puts agentd
    /// in and links to it as `options.mode` says.
    pub async fn create(config: DaytonaConfig, source: &str, options: &DaytonaOptions) -> Result<Self> {
        let api = Api::new(config)?;
        let body = create_body(source, api.config().target.as_deref());
        let created = api.create(&body).await?;
        tracing::info!(sandbox = %created.id, state = created.state(), "created Daytona sandbox from `{source}`");
        let delete = {
            let (api, id) = (api.clone(), created.id.clone());
            async move { api.delete(&id).await }
        };
        let make = async {
            let record = api.wait_started(&created.id, options.start_timeout).await?;
            Self::from_record(api.clone(), record, options, true).await
        };
        made_or_deleted(&format!("Daytona sandbox {}", created.id), delete, make).await
    }

    /// Attaches to the sandbox `id`, starting it first if it is stopped.
    pub async fn attach(config: DaytonaConfig, id: &str, options: &DaytonaOptions) -> Result<Self> {
        let api = Api::new(config)?;
        let record = start_if_needed(&api, id, options.start_timeout).await?;
        Self::from_record(api, record, options, false).await
    }

    async fn from_record(
        api: Api,
        record: SandboxRecord,
        options: &DaytonaOptions,
        owned: bool,
    ) -> Result<Self> {
        let toolbox = Toolbox::new(
            api.http().clone(),
            api.toolbox_base(&record).await?,
            api.config().api_key.clone(),
            record.id.clone(),
        );
        let machine = Daytona {
            api,
            id: record.id,
            toolbox,
            run_dir: format!("/tmp/agentd-{}", random_suffix()),
            port: options.port,
            link_timeout: options.link_timeout,
        };
        Linked::setup(machine, options.mode.into(), options.agentd_binary.clone(), owned).await
    }

    /// The channel `execute`, the verbs and the offload use.
    pub fn channel(&self) -> Channel {
        if self.linked() { Channel::Link } else { Channel::ToolboxExec }
    }

    /// The REST client (lifecycle calls: stop, start, preview URLs).
    pub fn api(&self) -> &Api {
        &self.machine().api
    }

    /// The toolbox (bulk files, exec) of this sandbox.
    pub fn toolbox(&self) -> &Toolbox {
        &self.machine().toolbox
    }
}

#[async_trait]
impl Machine for Daytona {
    const PROVIDER: &'static str = "Daytona";
    const EXEC: &'static str = "toolbox exec";

    fn id(&self) -> &str {
        &self.id
    }

    fn run_dir(&self) -> &str {
        &self.run_dir
    }

    async fn exec(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        self.toolbox.execute(command, timeout).await
    }

    async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        self.toolbox.upload(files).await
    }

    async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        self.toolbox.download(paths).await
    }

    /// The bulk download's part streamed into `sink`: memory does not follow the file's size.
    async fn download_into(
        &self,
        remote: &str,
        sink: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<std::result::Result<crate::contract::link::Downloaded, String>> {
        self.toolbox.download_into(remote, sink, progress).await
    }

    /// The link through the preview URL of agentd's port.
    async fn connector(self: Arc<Self>, agentd: &str) -> Result<Box<dyn Connector>> {
        Ok(Box::new(PreviewConnector {
            port: self.port.unwrap_or_else(|| 7700 + rand::random_range(0..300)),
            token: random_hex(),
            agentd: agentd.to_owned(),
            timeout: self.link_timeout,
            daytona: self,
        }))
    }

    async fn delete(&self) -> Result<()> {
        self.api.delete(&self.id).await
    }

    /// Stops the agentd this host started and removes its run directory.
    async fn detach(&self) -> Result<()> {
        let stop = format!("kill $(cat {0}/pid) 2>/dev/null; rm -rf {0}", self.run_dir);
        self.toolbox.execute(&stop, Some(Duration::from_secs(30))).await?;
        Ok(())
    }
}

/// The sandbox `id`, started (and waited for) if it is at rest or on its way.
async fn start_if_needed(api: &Api, id: &str, timeout: Duration) -> Result<SandboxRecord> {
    let record = api.get(id).await?;
    match record.state() {
        "started" => Ok(record),
        "stopped" | "archived" | "paused" => {
            tracing::info!(sandbox = %id, state = record.state(), "starting Daytona sandbox");
            api.start(id).await?;
            api.wait_started(id, timeout).await
        }
        "stopping" | "archiving" | "pausing" => {
            // Let it come to rest, then start it.
            let deadline = Instant::now() + timeout;
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let state = api.get(id).await?.state.unwrap_or_default();
                if matches!(state.as_str(), "stopped" | "archived" | "paused") {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(SandboxError::Timeout {
                        what: format!("Daytona sandbox {id} to stop (last state `{state}`)"),
                        after: timeout,
                    });
                }
            }
            api.start(id).await?;
            api.wait_started(id, timeout).await
        }
        _ => api.wait_started(id, timeout).await,
    }
}

/// Opens the link through the preview URL. Each connection fetches the URL and its token afresh
/// (they change when the sandbox restarts) and (re)starts agentd when it is not running; it gives
/// up after `timeout` with agentd's log.
struct PreviewConnector {
    daytona: Arc<Daytona>,
    port: u16,
    /// agentd's own bearer token (the preview token only opens the proxy).
    token: String,
    agentd: String,
    timeout: Duration,
}

/// Most attempts to restart a dead agentd within one connection.
const RESTARTS: u32 = 2;

impl PreviewConnector {
    /// Starts agentd detached from the exec (its own session) unless the one we started runs.
    async fn start_agentd(&self) -> Result<()> {
        let (dir, port) = (&self.daytona.run_dir, self.port);
        let token_file = format!("{dir}/token");
        let up = self.daytona.toolbox.upload(&[(token_file.clone(), self.token.as_bytes().to_vec())]).await?;
        if let Some(error) = up.into_iter().find_map(|u| u.error) {
            return Err(SandboxError::Start(format!("cannot write agentd's token file: {error}")));
        }
        let script = format!(
            r#"chmod 600 {token_file}
{alive}
if alive; then exit 0; fi
S=; command -v setsid >/dev/null 2>&1 && S=setsid
N=; command -v nohup >/dev/null 2>&1 && N=nohup
$N $S {agentd} serve --listen 0.0.0.0:{port} --token-file {token_file} >{dir}/log 2>&1 </dev/null &
echo $! >{dir}/pid"#,
            agentd = self.agentd,
            alive = self.alive_fn(),
        );
        let started = self.daytona.toolbox.execute(&script, Some(Duration::from_secs(60))).await?;
        if started.exit_code != Some(0) {
            return Err(SandboxError::Start(format!("cannot start agentd: {}", started.output.trim())));
        }
        tracing::info!(sandbox = %self.daytona.id, port, "started agentd in the Daytona sandbox");
        Ok(())
    }

    /// A shell function `alive`: whether the pid file names a process that is our agentd (after a
    /// restart the pid may belong to anything).
    fn alive_fn(&self) -> String {
        let dir = &self.daytona.run_dir;
        format!(
            r#"alive() {{ p=$(cat {dir}/pid 2>/dev/null) && [ -n "$p" ] && grep -qF -- {dir}/token /proc/$p/cmdline 2>/dev/null; }}"#
        )
    }

    /// Whether the agentd we started is running (`None`: the sandbox could not be asked).
    async fn running(&self) -> Option<bool> {
        let probe = format!("{}\nalive", self.alive_fn());
        let answer = self.daytona.toolbox.execute(&probe, Some(Duration::from_secs(30))).await.ok()?;
        Some(answer.exit_code == Some(0))
    }

    async fn log_tail(&self) -> String {
        let tail = format!("tail -c 2000 {}/log 2>/dev/null", self.daytona.run_dir);
        match self.daytona.toolbox.execute(&tail, Some(Duration::from_secs(30))).await {
            Ok(answer) if !answer.output.trim().is_empty() => answer.output.trim().to_owned(),
            _ => "(empty)".to_owned(),
        }
    }

    async fn try_connect(&self, budget: Duration) -> Result<Link> {
        let preview = self.daytona.api.preview(&self.daytona.id, self.port).await?;
        let url = ws_url(&preview.url)?;
        let headers = [(PREVIEW_TOKEN_HEADER, preview.token)];
        let connect = Link::connect_with_headers(&url, Some(&self.token), &headers);
        tokio::time::timeout(budget, connect)
            .await
            .map_err(|_| SandboxError::Timeout { what: format!("agentd at {url}"), after: budget })?
    }
}

#[async_trait]
impl Connector for PreviewConnector {
    async fn connect(&self) -> Result<Link> {
        let deadline = Instant::now() + self.timeout;
        let mut restarts = 0;
        let mut delay = Duration::from_millis(50);
        loop {
            let budget = deadline
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_secs(1), Duration::from_secs(10));
            let err = match self.try_connect(budget).await {
                Ok(link) => {
                    tracing::debug!(sandbox = %self.daytona.id, "linked to agentd through the preview URL");
                    return Ok(link);
                }
                // Nothing a retry fixes: the API key, or an agentd that is not ours.
                Err(err @ (SandboxError::Auth { .. } | SandboxError::NotFound { .. })) => return Err(err),
                Err(err) => err,
            };
            let state = self.daytona.api.get(&self.daytona.id).await?;
            if state.state() != "started" {
                return Err(SandboxError::Provider {
                    provider: api::PROVIDER,
                    status: None,
                    message: format!(
                        "sandbox {} is `{}`, not started: no link to agentd ({err})",
                        self.daytona.id,
                        state.state()
                    ),
                });
            }
            if Instant::now() >= deadline {
                return Err(SandboxError::Start(format!(
                    "agentd in Daytona sandbox {} did not answer through the preview URL of port {} within {:?}: {err}; its log: {}",
                    self.daytona.id,
                    self.port,
                    self.timeout,
                    self.log_tail().await
                )));
            }
            if restarts < RESTARTS && self.running().await == Some(false) {
                restarts += 1;
                self.start_agentd().await?;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }
}

/// The websocket URL of a preview URL: `http` → `ws`, `https` → `wss`.
fn ws_url(url: &str) -> Result<String> {
    if let Some(rest) = url.strip_prefix("https://") {
        Ok(format!("wss://{rest}"))
    } else if let Some(rest) = url.strip_prefix("http://") {
        Ok(format!("ws://{rest}"))
    } else {
        Err(SandboxError::Protocol(format!("a preview URL that is not http(s): {url}")))
    }
}

/// Daytona as a [`Provider`]: `daytona:SNAPSHOT_OR_IMAGE`, `daytona-attach:ID`.
pub struct DaytonaProvider {
    config: DaytonaConfig,
    options: DaytonaOptions,
}

impl DaytonaProvider {
    pub fn new(config: DaytonaConfig, options: DaytonaOptions) -> Self {
        Self { config, options }
    }

    /// Configured from the environment ([`DaytonaConfig::from_env`]), default options.
    pub fn from_env() -> Result<Self> {
        Ok(Self::new(DaytonaConfig::from_env()?, DaytonaOptions::default()))
    }
}

#[async_trait]
impl Provider for DaytonaProvider {
    fn kind(&self) -> Kind {
        KIND
    }

    async fn create(&self, source: &str) -> Result<Box<dyn BaseSandbox>> {
        Ok(Box::new(DaytonaSandbox::create(self.config.clone(), source, &self.options).await?))
    }

    async fn attach(&self, id: &str) -> Result<Box<dyn BaseSandbox>> {
        Ok(Box::new(DaytonaSandbox::attach(self.config.clone(), id, &self.options).await?))
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let api = Api::new(self.config.clone())?;
        let labels = HashMap::from([(LABEL.to_owned(), "1".to_owned())]);
        Ok(api
            .list(&labels)
            .await?
            .into_iter()
            .map(|record| SandboxInfo {
                kind: KIND,
                source: record
                    .labels
                    .get(SOURCE_LABEL)
                    .cloned()
                    .or_else(|| record.snapshot.clone())
                    .unwrap_or_default(),
                state: record.state().to_owned(),
                id: record.id,
            })
            .collect())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        Api::new(self.config.clone())?.delete(id).await
    }
}

/// Why Daytona sandboxes cannot be used here, if they cannot: the API key is not set (the kinds
/// table's `missing`).
pub fn missing() -> Option<String> {
    missing_when(std::env::var_os(ENV_API_KEY).is_some())
}

fn missing_when(key_set: bool) -> Option<String> {
    (!key_set).then(|| {
        format!(
            "daytona sandboxes need the API key in {ENV_API_KEY} (and DAYTONA_API_URL, \
             DAYTONA_TARGET when not the defaults, as Daytona's own SDKs read them)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_names_the_key() {
        assert_eq!(missing_when(true), None);
        assert!(missing_when(false).unwrap().contains(ENV_API_KEY));
    }

    #[test]
    fn images_build_and_names_are_snapshots() {
        let image = create_body("agentd-base-debian:latest", Some("eu"));
        assert_eq!(image["buildInfo"]["dockerfileContent"], "FROM agentd-base-debian:latest\n");
        assert_eq!((image["target"].as_str(), image.get("snapshot")), (Some("eu"), None));
        assert_eq!(image["labels"][LABEL], "1");
        assert_eq!(image["autoStopInterval"], 0);
        let snapshot = create_body("my-snapshot", None);
        assert_eq!((snapshot["snapshot"].as_str(), snapshot.get("buildInfo")), (Some("my-snapshot"), None));
        let default = create_body("", None);
        assert_eq!((default.get("snapshot"), default.get("buildInfo")), (None, None));
    }

    /// `wss://` takes the TLS path (rustls), rather than failing for want of a TLS feature.
    #[tokio::test]
    async fn wss_links_speak_tls() {
        use tokio::io::AsyncWriteExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\n\r\nplain text, not TLS").await;
        });
        let err = Link::connect(&format!("wss://127.0.0.1:{port}"), None).await.err().unwrap().to_string();
        assert!(!err.contains("not compiled"), "{err}");
        // The handshake reached the listener, and failed on its plain-text answer.
        server.await.unwrap();
        assert!(err.to_lowercase().contains("corrupt") || err.to_lowercase().contains("tls"), "{err}");
    }

    #[test]
    fn a_missing_key_names_the_variable() {
        assert_eq!(SandboxError::MissingEnv(ENV_API_KEY).to_string(), "DAYTONA_API_KEY is not set");
    }

    #[test]
    fn preview_urls_map_to_websockets() {
        assert_eq!(ws_url("https://7700-abc.proxy.example").unwrap(), "wss://7700-abc.proxy.example");
        assert_eq!(ws_url("http://127.0.0.1:4000").unwrap(), "ws://127.0.0.1:4000");
        assert!(ws_url("ftp://x").is_err());
    }
}
