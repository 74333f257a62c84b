//! A sandbox's file saved to a local path ([`download_to_path`]: `agentctl download`, Python's
//! `download_file`): streamed by the sandbox's [`BaseSandbox::download_into`] (over the agentd link
//! when there is one, a provider's own streamed transfer such as Daytona's bulk download, any size
//! in bounded memory), else through the contract's `download_files`. The local file has no name
//! until it is whole and checked, so neither an error nor a killed client leaves a part of it behind.
//!
//! ```no_run
//! # async fn demo(sandbox: &dyn agentd_host::BaseSandbox) -> agentd_host::Result<()> {
//! let saved = agentd_host::contract::download::download_to_path(sandbox, "/work/out.tar", "out.tar".as_ref(), |_, _| {}).await?;
//! match saved {
//!     Ok(done) => println!("{} bytes, sha256 {}", done.size, done.sha256),
//!     Err(error) => eprintln!("per-file error: {error}"),
//! }
//! # Ok(()) }
//! ```

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use agentd_protocol::FileDownloadResponse;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt as _};

use crate::contract::BaseSandbox;
use crate::contract::error::Result;
use crate::contract::link::Downloaded;

/// Saves the sandbox's file `remote` as `local` (replaced at once when whole), streamed by
/// [`BaseSandbox::download_into`]. `progress` gets (bytes so far, size or 0). `Ok(Err(error))` is
/// the contract's per-file error (`file_not_found`, …), with `local` untouched.
pub async fn download_to_path(
    sandbox: &dyn BaseSandbox,
    remote: &str,
    local: &Path,
    mut progress: impl FnMut(u64, u64) + Send,
) -> Result<Result<Downloaded, String>> {
    let dir = local.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let partial = Partial::new_in(dir)?;
    let mut file = tokio::fs::File::from_std(partial.file()?);
    let outcome = sandbox.download_into(remote, &mut file, &mut progress).await?;
    if outcome.is_ok() {
        file.flush().await?;
        partial.persist(local)?;
    }
    Ok(outcome)
}

/// [`BaseSandbox::download_into`]'s default: over the agentd link when there is one, else the
/// contract's `download_files` ([`write_whole`]).
pub(crate) async fn download_into<S: BaseSandbox + ?Sized>(
    sandbox: &S,
    remote: &str,
    sink: &mut (dyn AsyncWrite + Unpin + Send),
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<Result<Downloaded, String>> {
    match sandbox.agentd() {
        Some(agentd) => agentd.link().await?.download(remote, sink, progress).await,
        None => write_whole(sandbox.download_files(&[remote.to_owned()]).await?, sink).await,
    }
}

/// The one file a whole-file download answered (`responses`, as `download_files` gives them),
/// written to `sink`.
pub(crate) async fn write_whole(
    mut responses: Vec<FileDownloadResponse>,
    sink: &mut (dyn AsyncWrite + Unpin + Send),
) -> Result<Result<Downloaded, String>> {
    let Some(response) = responses.pop() else {
        return Ok(Err("the sandbox answered a download with nothing".to_owned()));
    };
    match (response.content, response.error) {
        (Some(content), None) => {
            sink.write_all(&content).await?;
            sink.flush().await?;
            let sha256 = format!("{:x}", Sha256::digest(&content));
            Ok(Ok(Downloaded { size: content.len() as u64, sha256 }))
        }
        (_, error) => Ok(Err(error.unwrap_or_else(|| "no content".to_owned()))),
    }
}

/// A download's file before it is whole: an `O_TMPFILE` file, which has no name (a kill leaves
/// nothing) until [`Partial::persist`] links it in; a named temporary file where the file system
/// has no `O_TMPFILE` (removed on drop, so only a kill can leave it).
enum Partial {
    Unnamed { file: std::fs::File, dir: PathBuf },
    Named(tempfile::NamedTempFile),
}

impl Partial {
    fn new_in(dir: &Path) -> std::io::Result<Self> {
        let unnamed = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(dir);
        match unnamed {
            Ok(file) => Ok(Self::Unnamed { file, dir: dir.to_owned() }),
            Err(err) if matches!(err.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
                Ok(Self::Named(tempfile::NamedTempFile::new_in(dir)?))
            }
            Err(err) => Err(err),
        }
    }

    /// A handle to write through.
    fn file(&self) -> std::io::Result<std::fs::File> {
        match self {
            Self::Unnamed { file, .. } => file.try_clone(),
            Self::Named(named) => named.reopen(),
        }
    }

    /// Gives the whole file the name `local`, replacing what was there at once (a rename).
    fn persist(self, local: &Path) -> std::io::Result<()> {
        match self {
            Self::Named(named) => named.persist(local).map(drop).map_err(|e| e.error),
            Self::Unnamed { file, dir } => {
                use std::os::fd::AsRawFd as _;
                // linkat cannot replace a file: link under a fresh name, then rename over `local`.
                let fresh = dir.join(format!(".agentctl-download-{}", crate::contract::random::random_hex()));
                let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
                nix::unistd::linkat(
                    nix::fcntl::AT_FDCWD,
                    proc_path.as_str(),
                    nix::fcntl::AT_FDCWD,
                    &fresh,
                    nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
                )?;
                std::fs::rename(&fresh, local).inspect_err(|_| {
                    let _ = std::fs::remove_file(&fresh);
                })
            }
        }
    }
}
