//! Uploads and downloads, streamed in chunks with a sha256 over every byte.
//!
//! An upload is written to a hidden temporary file in the destination directory and renamed into
//! place only after the digest matched, so the destination never holds a partial file: an interrupted
//! or failed upload leaves nothing behind (the temporary file is removed).
//!
//! Paths resolve through the [`Workspace`] into file descriptors: the temporary file is created in the
//! destination's directory fd (`O_EXCL | O_NOFOLLOW`) and renamed within it (`renameat`), parents are
//! made one `mkdirat` at a time, and a download reads the very file the resolution opened.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;

use agentd_protocol::limits::CHUNK_SIZE;
use agentd_protocol::{DownloadResult, DownloadStart, ServerMessage, TransferError, chunk};
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};
use sha2::{Digest as _, Sha256};
use std::io::Write as _;

use tokio::io::AsyncReadExt as _;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::{Bytes, Message};

use crate::root::{ResolveError, Workspace};

/// What the connection hands an upload in progress.
#[derive(Debug)]
pub enum UploadEvent {
    Data(Bytes),
    End {
        sha256: String,
    },
    /// The upload cannot succeed (cancel, oversized chunk, connection gone).
    Abort(String),
}

/// The contract's text for an IO failure: a transfer code where one applies, else the message.
pub fn error_text(err: &io::Error) -> String {
    match err.raw_os_error().and_then(TransferError::from_errno) {
        Some(code) => code.as_str().to_owned(),
        None => err.to_string(),
    }
}

/// Receives one upload; returns its error, `None` on success. The file work runs on the blocking
/// pool, one chunk at a time, so waiting for the disk is the upload's backpressure.
pub async fn upload(
    dest: Result<Destination, String>,
    mode: Option<u32>,
    mut events: mpsc::Receiver<UploadEvent>,
) -> Option<String> {
    let opened = tokio::task::spawn_blocking(move || UploadTarget::open(&dest?, mode)).await;
    let mut target = match opened.unwrap_or_else(|e| Err(e.to_string())) {
        Ok(target) => Some(target),
        Err(error) => {
            // Keep consuming the chunks already on their way; answer once, at the end.
            while let Some(event) = events.recv().await {
                if matches!(event, UploadEvent::End { .. } | UploadEvent::Abort(_)) {
                    break;
                }
            }
            return Some(error);
        }
    };
    let mut hasher = Sha256::new();
    let mut failure = None;
    while let Some(event) = events.recv().await {
        match event {
            UploadEvent::Data(data) => {
                hasher.update(&data);
                let Some(mut t) = target.take() else { continue };
                let written = tokio::task::spawn_blocking(move || {
                    let result = t.write(&data);
                    (t, result)
                })
                .await;
                match written {
                    Ok((t, Ok(()))) => target = Some(t),
                    Ok((t, Err(err))) => {
                        failure = Some(format!("write failed: {err}"));
                        blocking(move || t.remove()).await;
                    }
                    Err(err) => failure = Some(format!("write failed: {err}")),
                }
            }
            UploadEvent::End { sha256 } => {
                let Some(t) = target.take() else { return failure };
                let received = format!("{:x}", hasher.finalize());
                if !received.eq_ignore_ascii_case(&sha256) {
                    blocking(move || t.remove()).await;
                    return Some(format!("sha256 mismatch: expected {sha256}, received {received}"));
                }
                return tokio::task::spawn_blocking(move || t.commit())
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()))
                    .err();
            }
            UploadEvent::Abort(reason) => {
                if let Some(t) = target.take() {
                    blocking(move || t.remove()).await;
                }
                return Some(reason);
            }
        }
    }
    if let Some(t) = target.take() {
        blocking(move || t.remove()).await;
    }
    Some("connection closed before upload_end".to_owned())
}

async fn blocking(work: impl FnOnce() + Send + 'static) {
    let _ = tokio::task::spawn_blocking(work).await;
}

/// The file a transfer's path names, not resolved yet (that is file IO, done off the runtime).
#[derive(Debug)]
pub struct Destination {
    workspace: Workspace,
    path: String,
}

/// The contract's first check of a transfer's path (absolute, no NUL), without IO; the workspace
/// resolves it later (with `--root`, an escape is `invalid_path` too).
pub fn destination(workspace: &Workspace, path: &str) -> Result<Destination, String> {
    TransferError::check_path(path).map_err(|e| e.as_str().to_owned())?;
    Ok(Destination { workspace: workspace.clone(), path: path.to_owned() })
}

/// The contract's text for a failed resolution.
fn resolve_text(err: &ResolveError) -> String {
    match err {
        ResolveError::Escape => TransferError::InvalidPath.as_str().to_owned(),
        ResolveError::Io(err) => error_text(err),
    }
}

/// Writes `bytes` to `dest` as an upload does (parents, temp file, rename): the one implementation
/// behind both `upload` and the `write` verb.
pub fn write_whole(dest: &Destination, bytes: &[u8]) -> Result<(), String> {
    let mut target = UploadTarget::open(dest, None)?;
    if let Err(err) = target.write(bytes) {
        target.remove();
        return Err(format!("write failed: {err}"));
    }
    target.commit()
}

/// A file being uploaded: a hidden temporary file in the destination's directory, renamed into
/// place by [`UploadTarget::commit`]. Blocking IO, all of it relative to the directory's fd.
pub struct UploadTarget {
    dir: OwnedFd,
    name: CString,
    temp: CString,
    file: std::fs::File,
    mode: u32,
}

impl UploadTarget {
    /// Creates missing parents of `dest`, checks that it is not a directory, and creates the
    /// temporary file. The error is the contract's transfer code, or a message.
    pub fn open(dest: &Destination, mode: Option<u32>) -> Result<Self, String> {
        let ws = &dest.workspace;
        let entry = ws.entry(&dest.path, true).map_err(|e| resolve_text(&e))?;
        let existing_mode = match ws.lookup(&entry, true) {
            Ok(Some(node)) if node.is_dir() => return Err(TransferError::IsDirectory.as_str().to_owned()),
            Ok(Some(node)) => Some(node.stat().st_mode & 0o7777),
            Ok(None) => None,
            Err(err) => return Err(resolve_text(&err)),
        };
        let Some(name) = entry.name() else {
            // `/`, `.` or `..`: a directory.
            return Err(TransferError::IsDirectory.as_str().to_owned());
        };
        let mut temp = b".".to_vec();
        temp.extend_from_slice(name.to_bytes());
        temp.extend_from_slice(format!(".agentd-{:016x}.part", rand::random::<u64>()).as_bytes());
        let temp = CString::new(temp).map_err(|_| TransferError::InvalidPath.as_str().to_owned())?;
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(entry.dir(), temp.as_c_str(), flags, Mode::from_bits_truncate(0o600))
            .map_err(|e| error_text(&e.into()))?;
        let dir = entry.dir().try_clone_to_owned().map_err(|e| error_text(&e))?;
        Ok(Self {
            dir,
            name: name.to_owned(),
            temp,
            file: fd.into(),
            mode: mode.or(existing_mode).unwrap_or(0o644),
        })
    }

    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)
    }

    /// Sets the mode and renames the data into place; the temporary file is gone either way.
    pub fn commit(self) -> Result<(), String> {
        let done = self
            .file
            .set_permissions(std::fs::Permissions::from_mode(self.mode))
            .and_then(|()| Ok(renameat(&self.dir, self.temp.as_c_str(), &self.dir, self.name.as_c_str())?));
        done.map_err(|err| {
            let _ = unlinkat(&self.dir, self.temp.as_c_str(), UnlinkatFlags::NoRemoveDir);
            error_text(&err)
        })
    }

    /// Abandons the upload: the temporary file is removed, the destination untouched.
    pub fn remove(self) {
        drop(self.file);
        let _ = unlinkat(&self.dir, self.temp.as_c_str(), UnlinkatFlags::NoRemoveDir);
    }
}

/// Sends one file as `download_start`, chunks and the final result.
pub async fn download(
    id: u64,
    path: String,
    source: Result<Destination, String>,
    out: mpsc::Sender<Message>,
    cancel: Arc<Notify>,
) -> DownloadResult {
    let failed = |error: String| DownloadResult {
        id,
        path: path.clone(),
        error: Some(error),
        sha256: None,
        size: None,
    };
    let source = match source {
        Ok(source) => source,
        Err(error) => return failed(error),
    };
    let opened = tokio::task::spawn_blocking(move || open_for_download(&source)).await;
    let mut file = match opened.unwrap_or_else(|e| Err(e.to_string())) {
        Ok(file) => tokio::fs::File::from_std(file),
        Err(error) => return failed(error),
    };
    let size = match file.metadata().await {
        Ok(meta) => meta.len(),
        Err(err) => return failed(error_text(&err)),
    };
    let start = ServerMessage::DownloadStart(DownloadStart { id, path: path.clone(), size });
    if out.send(Message::text(start.to_json())).await.is_err() {
        return failed("connection closed".to_owned());
    }
    let mut hasher = Sha256::new();
    let mut sent = 0u64;
    let mut buf = vec![0u8; CHUNK_SIZE];
    loop {
        let n = tokio::select! {
            read = file.read(&mut buf) => match read {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) => return failed(format!("read failed: {err}")),
            },
            () = cancel.notified() => return failed("cancelled".to_owned()),
        };
        hasher.update(&buf[..n]);
        sent += n as u64;
        if out.send(Message::binary(chunk::encode(id, &buf[..n]))).await.is_err() {
            return failed("connection closed".to_owned());
        }
    }
    DownloadResult {
        id,
        path,
        error: None,
        sha256: Some(format!("{:x}", hasher.finalize())),
        size: Some(sent),
    }
}

/// A download of anything but a regular file (or a directory: `is_directory`).
pub const NOT_A_FILE: &str = "not a regular file";

/// The file to send, opened through the workspace (the very inode the resolution found).
fn open_for_download(source: &Destination) -> Result<std::fs::File, String> {
    let node = match source.workspace.node(&source.path, true) {
        Ok(Some(node)) => node,
        Ok(None) => return Err(TransferError::FileNotFound.as_str().to_owned()),
        Err(err) => return Err(resolve_text(&err)),
    };
    let file = node.open(OFlag::O_RDONLY).map_err(|e| error_text(&e))?;
    if node.is_dir() {
        return Err(TransferError::IsDirectory.as_str().to_owned());
    }
    // A FIFO, socket or device could block a read forever (or never end): only regular files.
    if !node.is_file() {
        return Err(NOT_A_FILE.to_owned());
    }
    Ok(file)
}
