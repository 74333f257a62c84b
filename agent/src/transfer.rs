//! Uploads and downloads, streamed in chunks with a sha256 over every byte.
//!
//! An upload is written to a hidden temporary file in the destination directory and renamed into
//! place only after the digest matched, so the destination never holds a partial file: an interrupted
//! or failed upload leaves nothing behind (the temporary file is removed).

use std::io;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd_protocol::limits::CHUNK_SIZE;
use agentd_protocol::{DownloadResult, DownloadStart, ServerMessage, TransferError, chunk};
use sha2::{Digest as _, Sha256};
use std::io::Write as _;

use tokio::io::AsyncReadExt as _;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::{Bytes, Message};

use crate::root::Workspace;

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
    dest: Result<PathBuf, String>,
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

/// The file a transfer's path names: the contract's first check (absolute, no NUL) without IO, then
/// the workspace's resolution (with `--root`, an escape is `invalid_path` too).
pub fn destination(workspace: &Workspace, path: &str) -> Result<PathBuf, String> {
    TransferError::check_path(path).map_err(|e| e.as_str().to_owned())?;
    workspace.resolve(path).map_err(|_| TransferError::InvalidPath.as_str().to_owned())
}

/// Writes `bytes` to `dest` as an upload does (parents, temp file, rename): the one implementation
/// behind both `upload` and the `write` verb.
pub fn write_whole(dest: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut target = UploadTarget::open(dest, None)?;
    if let Err(err) = target.write(bytes) {
        target.remove();
        return Err(format!("write failed: {err}"));
    }
    target.commit()
}

/// A file being uploaded: a hidden temporary file beside the destination, renamed into place by
/// [`UploadTarget::commit`]. Blocking IO.
pub struct UploadTarget {
    dest: PathBuf,
    temp: PathBuf,
    file: std::fs::File,
    mode: u32,
}

impl UploadTarget {
    /// Checks that `dest` (from [`destination`]) is not a directory, creates missing parents and the
    /// temporary file. The error is the contract's transfer code, or a message.
    pub fn open(dest: &Path, mode: Option<u32>) -> Result<Self, String> {
        let dest = dest.to_owned();
        let existing_mode = match std::fs::metadata(&dest) {
            Ok(meta) if meta.is_dir() => return Err(TransferError::IsDirectory.as_str().to_owned()),
            Ok(meta) => Some(meta.permissions().mode() & 0o7777),
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => return Err(error_text(&err)),
        };
        let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Err(TransferError::InvalidPath.as_str().to_owned());
        };
        std::fs::create_dir_all(parent).map_err(|e| error_text(&e))?;
        let temp =
            parent.join(format!(".{}.agentd-{:016x}.part", name.to_string_lossy(), rand::random::<u64>()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| error_text(&e))?;
        Ok(Self { dest, temp, file, mode: mode.or(existing_mode).unwrap_or(0o644) })
    }

    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)
    }

    /// Sets the mode and renames the data into place; the temporary file is gone either way.
    pub fn commit(self) -> Result<(), String> {
        let done = self
            .file
            .set_permissions(std::fs::Permissions::from_mode(self.mode))
            .and_then(|()| std::fs::rename(&self.temp, &self.dest));
        done.map_err(|err| {
            let _ = std::fs::remove_file(&self.temp);
            error_text(&err)
        })
    }

    /// Abandons the upload: the temporary file is removed, the destination untouched.
    pub fn remove(self) {
        drop(self.file);
        let _ = std::fs::remove_file(&self.temp);
    }
}

/// Sends one file as `download_start`, chunks and the final result.
pub async fn download(
    id: u64,
    path: String,
    source: Result<PathBuf, String>,
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
    let mut file = match open_for_download(&source).await {
        Ok(file) => file,
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

async fn open_for_download(path: &Path) -> Result<tokio::fs::File, String> {
    let file = tokio::fs::File::open(path).await.map_err(|e| error_text(&e))?;
    let meta = file.metadata().await.map_err(|e| error_text(&e))?;
    if meta.is_dir() {
        return Err(TransferError::IsDirectory.as_str().to_owned());
    }
    Ok(file)
}
