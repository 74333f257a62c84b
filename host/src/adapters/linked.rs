//! [`Linked`]: what every provider whose sandboxes carry an agentd link shares, written once. A
//! provider implements [`Machine`] for one of its sandboxes (its id, its own exec channel, its file
//! transfers, how the link to agentd is reached, how the sandbox is deleted); [`Linked::setup`]
//! does the rest:
//!
//! - **agentd gets in** baked (`agentd` on the sandbox's `PATH`) or **injected**: the static binary
//!   ([`static_agentd`]) is uploaded into [`Machine::run_dir`] through the provider's channel,
//!   unless the same one is there already (a running binary cannot be rewritten in place, so a new
//!   one is staged and renamed over).
//! - **The channel is chosen once** ([`LinkMode`]): the link to agentd, the provider's exec (the
//!   verbs then derived through `agentd fs` there), or the link when it can be had. A link required
//!   never degrades; a link that drops later is reopened through the provider's [`Connector`].
//! - **Nothing half-made is left** ([`made_or_deleted`]): a sandbox created for this use is deleted
//!   when making it fails, or when the future making it is dropped.
//! - [`Linked::close`] deletes what it created, and stops only its own agentd in one it attached to.
//! - `Linked<M>` is a [`BaseSandbox`]: `execute`, the verbs and the offload over the link, or through
//!   the exec channel with the derived verbs and offload; transfers take the provider's channel (or
//!   the link, for a provider whose channel is a plain exec: [`Machine::TRANSFERS_OVER_LINK`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentd_protocol::{
    ExecuteOffloadResult, ExecuteResponse, FileDownloadResponse, FileUploadResponse, FsRequest, FsResponse,
};
use async_trait::async_trait;
use tokio::io::AsyncWrite;

use crate::adapters::inject::static_agentd;
use crate::contract::AgentdSource;
use crate::contract::agentd::{AgentdSandbox, Connector};
use crate::contract::download::write_whole;
use crate::contract::error::{Result, SandboxError};
use crate::contract::link::Downloaded;
use crate::contract::random::random_hex;
use crate::contract::{BaseSandbox, OffloadRequest};

/// Where an agentd baked in beside the image is found when it is not on `PATH`: an initContainer
/// copies the static binary into a shared `emptyDir` mounted at `/opt/agentd/bin` (README,
/// "Kubernetes").
pub const WELL_KNOWN: &str = "/opt/agentd/bin/agentd";

/// One provider's sandbox, as far as the provider's own API reaches it.
#[async_trait]
pub trait Machine: Send + Sync + 'static {
    /// The provider's name, in logs and errors (`Daytona`).
    const PROVIDER: &'static str;
    /// What its exec channel is called, in logs (`toolbox exec`).
    const EXEC: &'static str;
    /// Files travel over the link when there is one (else through [`Machine::upload`] and
    /// [`Machine::download`] always, as for a provider with bulk file endpoints of its own).
    const TRANSFERS_OVER_LINK: bool = false;

    /// The sandbox's id ([`BaseSandbox::id`]).
    fn id(&self) -> &str;

    /// Where injected agentd and this host's run files (token, pid, log) live in the sandbox.
    fn run_dir(&self) -> &str;

    /// `execute` through the provider's own exec channel (`sh -c COMMAND`, stdout then stderr).
    async fn exec(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse>;

    /// [`BaseSandbox::upload_files`] through the provider's channel.
    async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>>;

    /// [`BaseSandbox::download_files`] through the provider's channel.
    async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>>;

    /// [`BaseSandbox::download_into`] through the provider's channel, when there is no link.
    /// Default: [`Machine::download`] (whole, in memory); a provider that can stream overrides it.
    async fn download_into(
        &self,
        remote: &str,
        sink: &mut (dyn AsyncWrite + Unpin + Send),
        _progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<std::result::Result<Downloaded, String>> {
        write_whole(self.download(&[remote.to_owned()]).await?, sink).await
    }

    /// How to open (and reopen) the link to the agentd at `agentd` (a path in the sandbox): the
    /// provider's port, tunnel or stream, and starting agentd there when it does not run.
    async fn connector(self: Arc<Self>, agentd: &str) -> Result<Box<dyn Connector>>;

    /// Deletes the sandbox.
    async fn delete(&self) -> Result<()>;

    /// What closing a sandbox this host attached to (and did not create) does, besides dropping the
    /// link: stop the agentd this host started there, when it is this host's own. Default: nothing.
    async fn detach(&self) -> Result<()> {
        Ok(())
    }
}

/// How `execute`, the verbs and the offload reach the sandbox; providers name the exec side their
/// own way (`DaytonaMode::ToolboxExec`) and convert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkMode {
    /// The link to agentd, or an error: never a silent fallback.
    Link,
    /// The provider's exec (agentd is still put in, for the derived verbs).
    ProviderExec,
    /// The link when it can be made, else the provider's exec (with a warning in the log).
    #[default]
    Auto,
}

/// A provider's sandbox with agentd in it (see the module docs).
pub struct Linked<M: Machine> {
    machine: Arc<M>,
    agentd_path: String,
    /// How agentd got in; `None` when it could not.
    agentd_source: Option<AgentdSource>,
    link: Option<AgentdSandbox>,
    /// Created for this use: deleted by [`Linked::close`].
    owned: bool,
}

/// Finishes making a sandbox that was just created (`make`: wait for it, [`Linked::setup`]), so
/// that nothing half-made is left: when `make` fails the sandbox is deleted (awaited) before the
/// error is returned, and when this future is dropped halfway it is deleted in the background.
pub async fn made_or_deleted<T, D>(what: &str, delete: D, make: impl Future<Output = Result<T>>) -> Result<T>
where
    D: Future<Output = Result<()>> + Send + 'static,
{
    struct OnDrop<D: Future<Output = Result<()>> + Send + 'static>(Option<D>);
    impl<D: Future<Output = Result<()>> + Send + 'static> Drop for OnDrop<D> {
        fn drop(&mut self) {
            if let Some(delete) = self.0.take() {
                tokio::spawn(async move {
                    let _ = delete.await;
                });
            }
        }
    }
    let mut guard = OnDrop(Some(delete));
    let made = make.await;
    if let (Err(_), Some(delete)) = (&made, guard.0.take())
        && let Err(err) = delete.await
    {
        tracing::warn!("{what} that failed to start was not removed: {err}");
    }
    guard.0 = None;
    made
}

impl<M: Machine> Linked<M> {
    /// Puts agentd into `machine` and links to it as `mode` says; `owned`: created for this use
    /// (so [`Linked::close`] deletes it). Wrap the making of a new sandbox in [`made_or_deleted`].
    pub async fn setup(
        machine: M,
        mode: LinkMode,
        agentd_binary: Option<PathBuf>,
        owned: bool,
    ) -> Result<Self> {
        Self::link_up(Arc::new(machine), mode, agentd_binary, owned).await
    }

    async fn link_up(machine: Arc<M>, mode: LinkMode, binary: Option<PathBuf>, owned: bool) -> Result<Self> {
        let put = put_agentd(&*machine, binary).await;
        let (required, wanted) = (mode == LinkMode::Link, mode != LinkMode::ProviderExec);
        let id = machine.id().to_owned();
        let (agentd_path, agentd_source, link) = match put {
            Err(err) if required => return Err(err),
            Err(err) => {
                tracing::warn!(sandbox = %id, "no agentd in the sandbox ({err}): only `execute` works, through the {}", M::EXEC);
                ("agentd".to_owned(), None, None)
            }
            Ok((path, source)) if !wanted => (path, Some(source), None),
            Ok((path, source)) => {
                let open = async {
                    let connector = Arc::clone(&machine).connector(&path).await?;
                    let label = format!("{}:{id}", M::PROVIDER.to_lowercase());
                    AgentdSandbox::with_connector(connector, label).await
                };
                match open.await {
                    Ok(link) => (path, Some(source), Some(link)),
                    Err(err) if required => return Err(err),
                    Err(err) => {
                        tracing::warn!(sandbox = %id, "no link to agentd ({err}): falling back to the {}", M::EXEC);
                        (path, Some(source), None)
                    }
                }
            }
        };
        let sandbox = Self { machine, agentd_path, agentd_source, link, owned };
        tracing::info!(sandbox = %id, linked = sandbox.link.is_some(), agentd = %sandbox.agentd_path, "{} sandbox ready", M::PROVIDER);
        Ok(sandbox)
    }

    /// The provider's side of this sandbox (its API clients, exec channel, …).
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// Whether `execute`, the verbs and the offload go over the link (else the provider's exec).
    pub fn linked(&self) -> bool {
        self.link.is_some()
    }

    /// Deletes a sandbox created for this use; one attached to keeps running, without the agentd
    /// this host started in it.
    pub async fn close(self) -> Result<()> {
        let Self { machine, link, owned, .. } = self;
        drop(link);
        if owned { machine.delete().await } else { machine.detach().await }
    }
}

/// agentd on the sandbox's `PATH` (unless `binary` names one to inject), else the static agentd
/// uploaded into the run directory: its path and how it got there.
async fn put_agentd<M: Machine>(machine: &M, binary: Option<PathBuf>) -> Result<(String, AgentdSource)> {
    let dir = machine.run_dir();
    let target = format!("{dir}/agentd");
    let probe = format!(
        "umask 077 && mkdir -p {dir} && chmod 700 {dir} || exit 1\n\
         echo \"path=$(command -v agentd || {{ [ -x {WELL_KNOWN} ] && echo {WELL_KNOWN}; }} || true)\"\n\
         [ -x {target} ] && echo \"size=$(wc -c < {target})\"\n\
         exit 0"
    );
    let found = machine.exec(&probe, Some(Duration::from_secs(60))).await?;
    if found.exit_code != Some(0) {
        return Err(SandboxError::Start(format!(
            "cannot make {dir} in the sandbox: {}",
            found.output.trim()
        )));
    }
    let field =
        |key: &str| found.output.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).map(str::to_owned);
    if binary.is_none()
        && let Some(path) = field("path=").filter(|p| p.starts_with('/'))
    {
        return Ok((path, AgentdSource::Baked));
    }
    let binary = match binary {
        Some(path) => path,
        None => static_agentd()?,
    };
    let bytes = tokio::fs::read(&binary)
        .await
        .map_err(|e| SandboxError::Start(format!("cannot read {}: {e}", binary.display())))?;
    if field("size=").and_then(|s| s.parse::<usize>().ok()) != Some(bytes.len()) {
        let staged = format!("{target}.{}", &random_hex()[..12]);
        let up = machine.upload(&[(staged.clone(), bytes)]).await?;
        if let Some(error) = up.into_iter().find_map(|u| u.error) {
            return Err(SandboxError::Start(format!("cannot upload agentd to {staged}: {error}")));
        }
        let install = machine
            .exec(&format!("chmod 755 {staged} && mv -f {staged} {target}"), Some(Duration::from_secs(60)))
            .await?;
        if install.exit_code != Some(0) {
            return Err(SandboxError::Start(format!(
                "cannot install the injected agentd: {}",
                install.output.trim()
            )));
        }
    }
    Ok((target, AgentdSource::Injected))
}

#[async_trait]
impl<M: Machine> BaseSandbox for Linked<M> {
    fn id(&self) -> &str {
        self.machine.id()
    }

    fn agentd_command(&self) -> &str {
        &self.agentd_path
    }

    fn agentd_source(&self) -> Option<AgentdSource> {
        self.agentd_source
    }

    fn agentd(&self) -> Option<&AgentdSandbox> {
        self.link.as_ref()
    }

    async fn execute(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        // The link bounds its own waits (`Deadlines`).
        match &self.link {
            Some(link) => link.execute(command, timeout).await,
            None => self.machine.exec(command, timeout).await,
        }
    }

    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        match &self.link {
            Some(link) if M::TRANSFERS_OVER_LINK => link.upload_files(files).await,
            _ => self.machine.upload(files).await,
        }
    }

    async fn download_files(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        match &self.link {
            Some(link) if M::TRANSFERS_OVER_LINK => link.download_files(paths).await,
            _ => self.machine.download(paths).await,
        }
    }

    async fn download_into(
        &self,
        remote: &str,
        sink: &mut (dyn AsyncWrite + Unpin + Send),
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<std::result::Result<Downloaded, String>> {
        match &self.link {
            Some(_) => crate::contract::download::download_into(self, remote, sink, progress).await,
            None => self.machine.download_into(remote, sink, progress).await,
        }
    }

    async fn fs(&self, request: FsRequest) -> Result<FsResponse> {
        match &self.link {
            Some(link) => link.fs(request).await,
            None => Ok(crate::contract::derived::fs(self, request).await),
        }
    }

    async fn execute_with_offload(&self, request: &OffloadRequest) -> Result<ExecuteOffloadResult> {
        match &self.link {
            Some(link) => link.execute_with_offload(request).await,
            None => crate::contract::derived::execute_with_offload(self, request).await,
        }
    }
}
