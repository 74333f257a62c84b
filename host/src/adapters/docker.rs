//! [`DockerSandbox`]: a container driven through the Docker Engine API (`bollard`).
//!
//! Two ways in:
//! - **created** ([`DockerSandbox::create`]): a container from an image, agentd its PID 1: the
//!   image's own when its entrypoint is agentd (**baked**, see `images/`), else the static binary
//!   copied in through the archive API before start (**injected**, the image's entrypoint replaced).
//!   The token goes in the same way, the port is published on 127.0.0.1 only, and the link is a
//!   websocket to it.
//! - **attached** ([`DockerSandbox::attach`]): an already running container. The static binary is
//!   copied in (injected) and started with `agentd serve --stdio` under `docker exec -i`; the link
//!   runs over that attach stream, so no port is published and no token is needed (the Docker API is
//!   the authentication).
//!
//! [`BaseSandbox::agentd_source`] says which way agentd got in. Either way `id` is the container
//! id, `execute`, the verbs and the offload go over the link, and
//! `upload_files` / `download_files` use the archive API (tar), the adapter's own channel, with the
//! contract's per-file codes. Containers this adapter creates carry the label [`LABEL`], so
//! [`DockerProvider::list`] (`agentctl sandbox ls`, `agentctl sandbox gc`) can find leftovers.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use agentd_protocol::{FileDownloadResponse, FileUploadResponse, TransferError};
use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use bollard::query_parameters::{
    DownloadFromContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StopContainerOptions, UploadToContainerOptions,
};
use futures_util::{Stream, StreamExt as _};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::adapters::inject::static_agentd;
use crate::contract::AgentdSource;
use crate::contract::BaseSandbox;
use crate::contract::agentd::{AgentdSandbox, Connector, OverAgentd};
use crate::contract::error::{Result, SandboxError};
use crate::contract::link::Link;
use crate::contract::provider::{Kind, Provider, SandboxInfo};
use crate::contract::random::random_hex;
use crate::contract::untrusted::{bad_id, check_id};

/// This kind, as its row of the kinds table names it.
pub const KIND: Kind = Kind::new("docker");

/// Label on every container this adapter creates.
pub const LABEL: &str = "dev.agentd.sandbox";
/// agentd's port inside a baked container.
pub const PORT: u16 = 7700;
/// Where a baked image keeps agentd.
pub const BAKED_AGENTD: &str = "/usr/local/bin/agentd";
/// Where an injected agentd is copied.
pub const INJECTED_AGENTD: &str = "/tmp/.agentd/agentd";
/// Where a created container's agentd reads its token (relative: a path in the archive).
const TOKEN_FILE: &str = "run/agentd/token";
/// How long a new container may take until agentd answers.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A container with agentd in it.
pub struct DockerSandbox {
    docker: Docker,
    container: String,
    agentd: AgentdSandbox,
    source: AgentdSource,
    /// agentd inside: the image's entrypoint, or [`INJECTED_AGENTD`].
    agentd_path: String,
    /// Created by this adapter: stopped and removed by [`DockerSandbox::close`].
    owned: bool,
}

/// The provider's name in errors.
const PROVIDER: &str = "Docker";

/// A container id (hex) or name (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`, Docker's own rule), checked before
/// it goes into an Engine API path: bollard puts it in the path as it is, and resolves `..`.
pub fn check_container(id: &str) -> Result<()> {
    check_id(PROVIDER, id)?;
    if id.starts_with(|c: char| c.is_ascii_alphanumeric()) { Ok(()) } else { Err(bad_id(PROVIDER, id)) }
}

fn docker_error(err: bollard::errors::Error) -> SandboxError {
    failed(err.to_string())
}

/// The engine refused or failed a request; `message` is what it said (`Docker: …`).
fn failed(message: String) -> SandboxError {
    SandboxError::Provider { provider: PROVIDER, status: None, message }
}

/// The local Docker Engine, or a clear error when it cannot be reached.
pub async fn engine() -> Result<Docker> {
    let docker = Docker::connect_with_local_defaults().map_err(docker_error)?;
    docker.ping().await.map_err(|e| failed(format!("the Docker engine is not reachable: {e}")))?;
    Ok(docker)
}

/// How to create or attach a container.
#[derive(Debug, Clone, Default)]
pub struct DockerOptions {
    /// Host directories mounted at the same path inside the container.
    pub mounts: Vec<std::path::PathBuf>,
    /// agentd's working directory (its workspace) inside the container.
    pub workdir: Option<String>,
}

impl DockerSandbox {
    /// Creates and starts a container from `image`, waits until agentd answers. agentd is the
    /// image's when its entrypoint is agentd, else the static one ([`static_agentd`]) is injected.
    pub async fn create(image: &str) -> Result<Self> {
        Self::create_with(image, &DockerOptions::default()).await
    }

    /// [`DockerSandbox::create`] with bind mounts and a working directory.
    pub async fn create_with(image: &str, options: &DockerOptions) -> Result<Self> {
        let docker = engine().await?;
        let (source, agentd_path) = agentd_in(&docker, image).await?;
        // Injected: the binary comes before start and is the entrypoint, with the baked image's
        // command (`images/Dockerfile`).
        let (entrypoint, cmd, binary) = match source {
            AgentdSource::Baked => (None, None, None),
            AgentdSource::Injected => {
                let serve = [
                    "serve",
                    "--listen",
                    &format!("0.0.0.0:{PORT}"),
                    "--token-file",
                    &format!("/{TOKEN_FILE}"),
                ]
                .map(str::to_owned);
                (Some(vec![INJECTED_AGENTD.to_owned()]), Some(serve.to_vec()), Some(static_agentd()?))
            }
        };
        let token = random_hex();
        let port_key = format!("{PORT}/tcp");
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint,
            cmd,
            working_dir: options.workdir.clone(),
            labels: Some(HashMap::from([(LABEL.to_owned(), "1".to_owned())])),
            exposed_ports: Some(HashMap::from([(port_key.clone(), HashMap::new())])),
            host_config: Some(HostConfig {
                // Loopback only: the token guards agentd, and nothing else needs to reach it.
                port_bindings: Some(HashMap::from([(
                    port_key.clone(),
                    Some(vec![PortBinding {
                        host_ip: Some("127.0.0.1".to_owned()),
                        host_port: Some(String::new()),
                    }]),
                )])),
                binds: Some(options.mounts.iter().map(|dir| format!("{0}:{0}", dir.display())).collect()),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        let created = docker
            .create_container(None::<bollard::query_parameters::CreateContainerOptions>, body)
            .await
            .map_err(docker_error)?;
        let container = created.id;
        let cleanup = Cleanup { docker: docker.clone(), container: container.clone(), armed: true };
        // The token arrives as a file before start: never in the image, the command line or the env.
        let tar = tar_one(TOKEN_FILE, token.as_bytes(), 0o600)?;
        upload_tar(&docker, &container, "/", tar).await.map_err(failed)?;
        if let Some(binary) = &binary {
            put_agentd(&docker, &container, binary).await?;
        }
        docker
            .start_container(&container, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(docker_error)?;
        let inspect = docker
            .inspect_container(&container, None::<InspectContainerOptions>)
            .await
            .map_err(docker_error)?;
        let host_port = inspect
            .network_settings
            .and_then(|n| n.ports)
            .and_then(|ports| ports.get(&port_key).cloned().flatten())
            .and_then(|bindings| bindings.into_iter().find_map(|b| b.host_port))
            .ok_or_else(|| failed(format!("container {container} published no port for {PORT}")))?;
        let url = format!("ws://127.0.0.1:{host_port}");
        let agentd = connect_when_ready(&url, &token, &container).await?;
        cleanup.disarm();
        Ok(Self { docker, container, agentd, source, agentd_path, owned: true })
    }

    /// Links to a running container that has no agentd: copies the static `agentd_binary` in and
    /// runs it over a `docker exec -i` attach stream.
    pub async fn attach(container: &str, agentd_binary: &Path) -> Result<Self> {
        Self::attach_with(container, agentd_binary, None).await
    }

    /// [`DockerSandbox::attach`] with agentd's working directory inside the container.
    pub async fn attach_with(container: &str, agentd_binary: &Path, workdir: Option<String>) -> Result<Self> {
        check_container(container)?;
        let docker = engine().await?;
        let inspect = docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .map_err(docker_error)?;
        let id = inspect.id.unwrap_or_else(|| container.to_owned());
        check_container(&id)?;
        put_agentd(&docker, &id, agentd_binary).await?;
        let connector = StdioConnector { docker: docker.clone(), container: id.clone(), workdir };
        let agentd = AgentdSandbox::with_connector(Box::new(connector), format!("docker:{id}")).await?;
        let agentd_path = INJECTED_AGENTD.to_owned();
        Ok(Self { docker, container: id, agentd, source: AgentdSource::Injected, agentd_path, owned: false })
    }

    /// The link-based sandbox inside (all protocol options).
    pub fn agentd(&self) -> &AgentdSandbox {
        &self.agentd
    }

    pub fn container(&self) -> &str {
        &self.container
    }

    /// Stops and removes a container this adapter created (an attached one is left running).
    pub async fn close(self) -> Result<()> {
        if self.owned {
            remove(&self.docker, &self.container).await?;
        }
        Ok(())
    }
}

/// How a container from `image` gets agentd, and where agentd is in it: baked when the image's
/// entrypoint is a program named `agentd`, else injected.
async fn agentd_in(docker: &Docker, image: &str) -> Result<(AgentdSource, String)> {
    let inspect = docker.inspect_image(image).await.map_err(docker_error)?;
    let entrypoint = inspect.config.and_then(|config| config.entrypoint).unwrap_or_default();
    Ok(match entrypoint.into_iter().next() {
        Some(program) if Path::new(&program).file_name() == Some("agentd".as_ref()) => {
            (AgentdSource::Baked, program)
        }
        _ => (AgentdSource::Injected, INJECTED_AGENTD.to_owned()),
    })
}

/// Copies the static `binary` to [`INJECTED_AGENTD`] in `container` (running, or created and not
/// yet started) through the archive API.
async fn put_agentd(docker: &Docker, container: &str, binary: &Path) -> Result<()> {
    let bytes = tokio::fs::read(binary)
        .await
        .map_err(|e| SandboxError::Start(format!("cannot read {}: {e}", binary.display())))?;
    let tar = tar_one(INJECTED_AGENTD.trim_start_matches('/'), &bytes, 0o755)?;
    upload_tar(docker, container, "/", tar).await.map_err(failed)
}

/// Stops (agentd ends its commands on SIGTERM) and removes a container.
pub async fn remove(docker: &Docker, container: &str) -> Result<()> {
    check_container(container)?;
    let _ = docker.stop_container(container, Some(StopContainerOptions { t: Some(5), signal: None })).await;
    docker
        .remove_container(container, Some(RemoveContainerOptions { force: true, v: true, link: false }))
        .await
        .map_err(docker_error)
}

/// Containers carrying [`LABEL`]: (id, image, status). The ids are the engine's word: [`remove`]
/// and [`DockerSandbox::attach`] check them.
pub async fn list(docker: &Docker) -> Result<Vec<(String, String, String)>> {
    let filters = HashMap::from([("label".to_owned(), vec![LABEL.to_owned()])]);
    let options =
        ListContainersOptions { all: true, filters: Some(filters), ..ListContainersOptions::default() };
    let containers = docker.list_containers(Some(options)).await.map_err(docker_error)?;
    Ok(containers
        .into_iter()
        .map(|c| (c.id.unwrap_or_default(), c.image.unwrap_or_default(), c.status.unwrap_or_default()))
        .collect())
}

/// Removes a half-built container if construction fails.
struct Cleanup {
    docker: Docker,
    container: String,
    armed: bool,
}

impl Cleanup {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            let (docker, container) = (self.docker.clone(), self.container.clone());
            tokio::spawn(async move {
                let _ = remove(&docker, &container).await;
            });
        }
    }
}

async fn connect_when_ready(url: &str, token: &str, container: &str) -> Result<AgentdSandbox> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match AgentdSandbox::connect(url, Some(token)).await {
            Ok(sandbox) => return Ok(sandbox),
            Err(err) if Instant::now() >= deadline => {
                return Err(SandboxError::Start(format!(
                    "agentd in container {container} did not answer: {err}"
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Opens a link by starting `agentd serve --stdio` under `docker exec -i`.
struct StdioConnector {
    docker: Docker,
    container: String,
    workdir: Option<String>,
}

#[async_trait]
impl Connector for StdioConnector {
    async fn connect(&self) -> Result<Link> {
        let exec = self
            .docker
            .create_exec(
                &self.container,
                CreateExecOptions {
                    attach_stdin: Some(true),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(false),
                    cmd: Some(vec![INJECTED_AGENTD.to_owned(), "serve".to_owned(), "--stdio".to_owned()]),
                    working_dir: self.workdir.clone(),
                    ..CreateExecOptions::default()
                },
            )
            .await
            .map_err(docker_error)?;
        match self.docker.start_exec(&exec.id, None).await.map_err(docker_error)? {
            StartExecResults::Attached { output, input } => {
                let stream = ExecStream { output, input, pending: bytes::Bytes::new() };
                Link::over_stream(stream, &format!("docker-exec:{}", self.container)).await
            }
            StartExecResults::Detached => Err(failed("docker exec did not attach".to_owned())),
        }
    }
}

type OutputStream =
    Pin<Box<dyn Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A `docker exec` attach stream as one byte stream: agentd's stdout in, its stdin out. Its stderr
/// (logs) is passed to tracing.
struct ExecStream {
    output: OutputStream,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    pending: bytes::Bytes,
}

impl AsyncRead for ExecStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                let chunk = self.pending.split_to(n);
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            match self.output.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(err))) => return Poll::Ready(Err(std::io::Error::other(err))),
                Poll::Ready(Some(Ok(LogOutput::StdOut { message }))) => self.pending = message,
                Poll::Ready(Some(Ok(LogOutput::StdErr { message }))) => {
                    tracing::debug!("agentd in container: {}", String::from_utf8_lossy(&message).trim_end());
                }
                Poll::Ready(Some(Ok(LogOutput::StdIn { .. } | LogOutput::Console { .. }))) => {}
            }
        }
    }
}

impl AsyncWrite for ExecStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.input.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.input.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.input.as_mut().poll_shutdown(cx)
    }
}

/// A tar archive holding one regular file at `path` (relative) with `mode`.
fn tar_one(path: &str, data: &[u8], mode: u32) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::with_capacity(data.len() + 1024));
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(mode);
    header.set_mtime(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    );
    header.set_entry_type(tar::EntryType::Regular);
    builder.append_data(&mut header, path, data)?;
    Ok(builder.into_inner()?)
}

/// PUT /containers/{id}/archive; the error is Docker's message.
async fn upload_tar(
    docker: &Docker,
    container: &str,
    at: &str,
    tar: Vec<u8>,
) -> std::result::Result<(), String> {
    // Refuse to replace a directory with a file (the contract's `is_directory`).
    let options = UploadToContainerOptions {
        path: at.to_owned(),
        no_overwrite_dir_non_dir: Some("true".to_owned()),
        ..UploadToContainerOptions::default()
    };
    docker
        .upload_to_container(container, Some(options), bollard::body_full(tar.into()))
        .await
        .map_err(|e| e.to_string())
}

/// The contract's code for a Docker archive error.
fn archive_code(message: &str) -> String {
    let lower = message.to_lowercase();
    let code = if lower.contains("not a directory") {
        TransferError::InvalidPath
    } else if lower.contains("cannot overwrite directory") || lower.contains("is a directory") {
        TransferError::IsDirectory
    } else if lower.contains("permission denied") || lower.contains("read-only") {
        TransferError::PermissionDenied
    } else if lower.contains("no such file") || lower.contains("not found") || lower.contains("404") {
        TransferError::FileNotFound
    } else {
        return message.to_owned();
    };
    code.as_str().to_owned()
}

impl DockerSandbox {
    async fn upload_one(&self, path: &str, bytes: &[u8]) -> Option<String> {
        if let Err(code) = TransferError::check_path(path) {
            return Some(code.as_str().to_owned());
        }
        // Extracted at `/`, so missing parents are created like `mkdir -p`.
        let tar = match tar_one(path.trim_start_matches('/'), bytes, 0o644) {
            Ok(tar) => tar,
            Err(err) => return Some(err.to_string()),
        };
        upload_tar(&self.docker, &self.container, "/", tar).await.err().map(|e| archive_code(&e))
    }

    async fn download_one(&self, path: &str) -> std::result::Result<Vec<u8>, String> {
        TransferError::check_path(path).map_err(|code| code.as_str().to_owned())?;
        let mut target = path.to_owned();
        // Follow symlinks the way opening the file would (a few hops at most).
        for _ in 0..8 {
            let options = DownloadFromContainerOptions { path: target.clone() };
            let mut stream = self.docker.download_from_container(&self.container, Some(options));
            let mut archive = Vec::new();
            while let Some(chunk) = stream.next().await {
                archive.extend_from_slice(&chunk.map_err(|e| archive_code(&e.to_string()))?);
            }
            let mut tar = tar::Archive::new(archive.as_slice());
            let mut entries = tar.entries().map_err(|e| e.to_string())?;
            let Some(entry) = entries.next() else {
                return Err(TransferError::FileNotFound.as_str().to_owned());
            };
            let mut entry = entry.map_err(|e| e.to_string())?;
            match entry.header().entry_type() {
                tar::EntryType::Directory => return Err(TransferError::IsDirectory.as_str().to_owned()),
                tar::EntryType::Symlink => {
                    let link =
                        entry.link_name().map_err(|e| e.to_string())?.ok_or("symlink without target")?;
                    let link = link.to_string_lossy().into_owned();
                    target = if link.starts_with('/') {
                        link
                    } else {
                        let parent = Path::new(&target)
                            .parent()
                            .map_or("/".into(), |p| p.to_string_lossy().into_owned());
                        format!("{}/{link}", parent.trim_end_matches('/'))
                    };
                }
                _ => {
                    let mut content = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0));
                    entry.read_to_end(&mut content).map_err(|e| e.to_string())?;
                    return Ok(content);
                }
            }
        }
        Err("invalid_path".to_owned())
    }
}

/// `execute`, the verbs and the offload go over the link; the id and the transfers are the
/// container's (archive API).
#[async_trait]
impl OverAgentd for DockerSandbox {
    fn linked(&self) -> &AgentdSandbox {
        &self.agentd
    }

    fn sandbox_id(&self) -> &str {
        &self.container
    }

    fn agentd_path(&self) -> &str {
        &self.agentd_path
    }

    fn source(&self) -> Option<AgentdSource> {
        Some(self.source)
    }

    async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        let mut out = Vec::with_capacity(files.len());
        for (path, bytes) in files {
            out.push(FileUploadResponse { path: path.clone(), error: self.upload_one(path, bytes).await });
        }
        Ok(out)
    }

    async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            out.push(match self.download_one(path).await {
                Ok(content) => {
                    FileDownloadResponse { path: path.clone(), content: Some(content), error: None }
                }
                Err(error) => FileDownloadResponse { path: path.clone(), content: None, error: Some(error) },
            });
        }
        Ok(out)
    }
}

/// Docker sandboxes: `create` makes a container from an image, agentd baked in or injected (removed
/// by `remove`/`close`), `attach` injects the static agentd into a running container, `list` finds
/// the containers carrying [`LABEL`].
#[derive(Debug, Default, Clone)]
pub struct DockerProvider {
    /// Used for `create` (mounts, working directory).
    pub options: DockerOptions,
}

#[async_trait]
impl Provider for DockerProvider {
    fn kind(&self) -> Kind {
        KIND
    }

    async fn create(&self, source: &str) -> Result<Box<dyn BaseSandbox>> {
        Ok(Box::new(DockerSandbox::create_with(source, &self.options).await?))
    }

    async fn attach(&self, id: &str) -> Result<Box<dyn BaseSandbox>> {
        check_container(id)?;
        let binary = static_agentd()?;
        Ok(Box::new(DockerSandbox::attach_with(id, &binary, self.options.workdir.clone()).await?))
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let containers = list(&engine().await?).await?;
        Ok(containers
            .into_iter()
            .map(|(id, source, state)| SandboxInfo { kind: KIND, id, source, state })
            .collect())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        // Before reaching for the engine: a malformed id is refused even without one.
        check_container(id)?;
        remove(&engine().await?, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_and_names_have_docker_s_shape() {
        for id in ["3f2a9c0d1e2b", "agentd-x_1.v2", "a"] {
            assert!(check_container(id).is_ok(), "{id}");
        }
        for id in ["", "-rf", ".hidden", "_x", "../../images/x", "a/b", "a%2Fb", "a b", "\u{1b}[2J"] {
            let err = check_container(id).unwrap_err();
            assert!(matches!(err, SandboxError::BadId { provider: PROVIDER, .. }), "{id}: {err}");
        }
    }
}
