//! Uploads and downloads, streamed in chunks with a sha256 over every byte.
//!
//! An upload is written to a hidden temporary file in the destination directory and renamed into
//! place only after the digest matched, so the destination never holds a partial file: an interrupted
//! or failed upload leaves nothing behind (the temporary file and the directories it made are
//! removed). [`UploadTarget`] is the one replacement of a file: `write` and `edit` use it too. Temp
//! names, their locks and the sweep of those a killed agentd left: [`temp`].
//!
//! Paths resolve through the [`Workspace`] into file descriptors: the temporary file is created in the
//! destination's directory fd (`O_EXCL | O_NOFOLLOW`) and renamed within it (`renameat`), parents are
//! made one `mkdirat` at a time, and a download reads the very file the resolution opened.
//!
//! The server registers an `upload` or `download` request and hands it to [`serve_upload`] or
//! [`serve_download`], which answer its result.

mod temp;

use std::ffi::{CStr, CString};
use std::io;
use std::io::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use agentd_protocol::limits::CHUNK_SIZE;
use agentd_protocol::permission::Operation;
use agentd_protocol::{
    DownloadRequest, DownloadResult, DownloadStart, ServerMessage, TransferError, UploadRequest,
    UploadResult, chunk,
};
use nix::fcntl::{OFlag, renameat};
use nix::sys::stat::{FileStat, Mode, fchmod};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, fdatasync, unlinkat};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncReadExt as _;
use tokio::sync::{Semaphore, mpsc};
use tokio_tungstenite::tungstenite::Bytes;

use crate::cancel::{CANCELLED, Cancel};
use crate::confine::FileWork;
use crate::guard;
use crate::outbox::Outbox;
use crate::root::{Made, Node, ResolveError, Workspace};
use temp::Temp;

/// Chunks queued for one upload before the connection's reader waits for the disk.
const UPLOAD_QUEUE: usize = 16;

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

/// The queue of one upload's events: the connection's reader sends them (waiting when it is full is
/// the upload's backpressure), [`serve_upload`] receives them.
pub fn upload_queue() -> (mpsc::Sender<UploadEvent>, mpsc::Receiver<UploadEvent>) {
    mpsc::channel(UPLOAD_QUEUE)
}

/// An `upload` request once registered: its path checked, its chunks written as `events` bring them,
/// its result.
pub async fn serve_upload(
    work: &FileWork,
    workspace: &Workspace,
    request: UploadRequest,
    events: mpsc::Receiver<UploadEvent>,
) -> UploadResult {
    let dest = destination(workspace, &request.path, Operation::Write);
    let error = upload(work, dest, request.mode, events).await;
    UploadResult { id: request.id, path: request.path, error }
}

/// A `download` request once registered: its path checked; its reads run on the blocking pool, so it
/// waits for one of the connection's `permits` first (or its cancel), then sends the file.
pub async fn serve_download(
    work: &FileWork,
    workspace: &Workspace,
    request: DownloadRequest,
    permits: Arc<Semaphore>,
    out: Outbox,
    cancel: Cancel,
) -> DownloadResult {
    let source = destination(workspace, &request.path, Operation::Read);
    let permit = tokio::select! {
        permit = permits.acquire_owned() => permit.ok(),
        () = cancel.cancelled() => None,
    };
    match permit {
        Some(permit) => {
            let result = download(work, request.id, request.path, source, out, cancel).await;
            drop(permit);
            result
        }
        None => DownloadResult {
            id: request.id,
            path: request.path,
            error: Some(CANCELLED.to_owned()),
            sha256: None,
            size: None,
        },
    }
}

/// Receives one upload; returns its error, `None` on success. The file work and the digest run on
/// the blocking pool, one chunk at a time, so waiting for the disk is the upload's backpressure and
/// the runtime only passes chunks on.
pub async fn upload(
    work: &FileWork,
    dest: Result<Destination, String>,
    mode: Option<u32>,
    mut events: mpsc::Receiver<UploadEvent>,
) -> Option<String> {
    let opened = work.run(move || UploadTarget::open(&dest?, mode)).await;
    // The file being written with the digest of what it holds so far: they go to a blocking thread
    // and back together.
    let mut target = match opened.unwrap_or_else(Err) {
        Ok(target) => Some((target, Sha256::new())),
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
    let mut failure = None;
    while let Some(event) = events.recv().await {
        match event {
            UploadEvent::Data(data) => {
                let Some((mut t, mut h)) = target.take() else { continue };
                let written = work
                    .run(move || {
                        h.update(&data);
                        let result = t.write(&data);
                        (t, h, result)
                    })
                    .await;
                match written {
                    Ok((t, h, Ok(()))) => target = Some((t, h)),
                    Ok((t, _, Err(err))) => {
                        failure = Some(format!("write failed: {err}"));
                        blocking(work, move || t.remove()).await;
                    }
                    Err(err) => failure = Some(format!("write failed: {err}")),
                }
            }
            UploadEvent::End { sha256 } => {
                let Some((t, hasher)) = target.take() else { return failure };
                let received = format!("{:x}", hasher.finalize());
                if !received.eq_ignore_ascii_case(&sha256) {
                    blocking(work, move || t.remove()).await;
                    return Some(format!("sha256 mismatch: expected {sha256}, received {received}"));
                }
                return work.run(move || t.commit()).await.unwrap_or_else(Err).err();
            }
            UploadEvent::Abort(reason) => {
                if let Some((t, _)) = target.take() {
                    blocking(work, move || t.remove()).await;
                }
                return Some(reason);
            }
        }
    }
    if let Some((t, _)) = target.take() {
        blocking(work, move || t.remove()).await;
    }
    Some("connection closed before upload_end".to_owned())
}

async fn blocking(work: &FileWork, job: impl FnOnce() + Send + 'static) {
    let _ = work.run(job).await;
}

/// The file a transfer's path names, not resolved yet (that is file IO, done off the runtime).
#[derive(Debug)]
pub struct Destination {
    workspace: Workspace,
    path: String,
    operation: Operation,
}

/// The contract's first check of a transfer's path (absolute, no NUL), without IO; the workspace
/// resolves it later (with `--root`, an escape is `invalid_path` too), and the permission rules are
/// checked then for `operation` (writing for an upload, reading for a download).
pub fn destination(workspace: &Workspace, path: &str, operation: Operation) -> Result<Destination, String> {
    TransferError::check_path(path).map_err(|e| e.as_str().to_owned())?;
    Ok(Destination { workspace: workspace.clone(), path: path.to_owned(), operation })
}

impl Destination {
    /// The permission rules allow the transfer of the path as written, else `permission_denied`
    /// (no IO; where it resolves is checked on what the walk finds, [`Destination::permitted_at`]).
    fn permitted(&self) -> Result<(), String> {
        match guard::refusal_as_written(&self.workspace, self.operation, &self.path) {
            Some(_) => Err(TransferError::PermissionDenied.as_str().to_owned()),
            None => Ok(()),
        }
    }

    /// The permission rules allow the transfer where the walk found the file (`location`, real).
    fn permitted_at(&self, location: &Path) -> Result<(), String> {
        match guard::refusal_at(&self.workspace, self.operation, &self.path, location) {
            Some(_) => Err(TransferError::PermissionDenied.as_str().to_owned()),
            None => Ok(()),
        }
    }

    /// [`Destination::permitted_at`] of the file the walk found, and of its other names.
    fn permitted_node(&self, node: &Node) -> Result<(), String> {
        match guard::refusal_of(&self.workspace, self.operation, &self.path, node) {
            Some(_) => Err(TransferError::PermissionDenied.as_str().to_owned()),
            None => Ok(()),
        }
    }
}

/// The contract's text for a failed resolution.
fn resolve_text(err: &ResolveError) -> String {
    match err {
        ResolveError::Escape => TransferError::InvalidPath.as_str().to_owned(),
        ResolveError::Io(err) => error_text(err),
    }
}

/// Writes `bytes` to `dest` as an upload does (parents, temp file, rename): the one implementation
/// behind both `upload` and the `write` verb. Not synced to disk (see [`UploadTarget::commit`]).
pub fn write_whole(dest: &Destination, bytes: &[u8]) -> Result<(), String> {
    UploadTarget::open(dest, None)?.unsynced().write_all(bytes)
}

/// The mode a replacement gets: the client's `mode` as asked (setuid and setgid too: asked for
/// explicitly), else the replaced file's mode without setuid and setgid (new content must not inherit
/// a privilege granted to the old one), else 0o644.
pub fn replacement_mode(asked: Option<u32>, replaced: Option<u32>) -> u32 {
    match (asked, replaced) {
        (Some(mode), _) => mode & 0o7777,
        (None, Some(mode)) => mode & 0o7777 & !(libc::S_ISUID | libc::S_ISGID),
        (None, None) => 0o644,
    }
}

/// A replacement being written (an upload, `write`, `edit`): a temporary file in the destination's
/// directory, renamed over the destination's name by [`UploadTarget::commit`], so the destination is
/// at every moment wholly the old or wholly the new content. Blocking IO, all of it relative to the
/// directory's fd. The temp name has a fixed length (a 255-byte destination name still works) and is
/// swept when a killed agentd leaves it (see [`temp`]).
pub struct UploadTarget {
    dir: OwnedFd,
    name: CString,
    temp: Temp,
    mode: u32,
    /// The replaced file's owner, kept where agentd may (`fchown` needs CAP_CHOWN for another uid).
    owner: Option<(u32, u32)>,
    /// Directories the upload made, removed again if it fails.
    made: Made,
    /// `fdatasync` before the rename (see [`UploadTarget::commit`]).
    sync: bool,
}

impl UploadTarget {
    /// Creates missing parents of `dest`, checks that it is not a directory, and creates the
    /// temporary file. The error is the contract's transfer code, or a message; on an error the
    /// directories made are removed again.
    pub fn open(dest: &Destination, mode: Option<u32>) -> Result<Self, String> {
        let ws = &dest.workspace;
        dest.permitted()?;
        let (entry, made) = ws.entry_making(&dest.path).map_err(|e| resolve_text(&e))?;
        // The name is replaced where the walk found it; a link there is judged by where it leads
        // too, as deepagents judges a path by where it resolves.
        let existing = dest.permitted_at(&entry.location()).and_then(|()| match ws.lookup(&entry, true) {
            Ok(Some(node)) if node.is_dir() => Err(TransferError::IsDirectory.as_str().to_owned()),
            Ok(Some(node)) => dest.permitted_node(&node).map(|()| Some(*node.stat())),
            Ok(None) => Ok(None),
            Err(err) => Err(resolve_text(&err)),
        });
        // `/`, `.` or `..`: a directory.
        let name = entry.name().ok_or_else(|| TransferError::IsDirectory.as_str().to_owned());
        let opened = existing.and_then(|existing| {
            let real_dir = ws.real_path(entry.dir_location());
            Self::create(entry.dir(), name?, &real_dir, existing.as_ref(), mode).map_err(|e| error_text(&e))
        });
        match opened {
            Ok(target) => Ok(Self { made, ..target }),
            Err(err) => {
                made.undo();
                Err(err)
            }
        }
    }

    /// A replacement of the file `name` in `dir` (real path `real_dir`), which is `existing` now
    /// (its mode and owner are kept, setuid and setgid dropped), `mode` when the client asked for one.
    pub fn create(
        dir: BorrowedFd<'_>,
        name: &CStr,
        real_dir: &Path,
        existing: Option<&FileStat>,
        mode: Option<u32>,
    ) -> io::Result<Self> {
        let owned = dir.try_clone_to_owned()?;
        let temp = Temp::create(dir, real_dir)?;
        let owner = existing.map(|stat| (stat.st_uid, stat.st_gid));
        Ok(Self {
            dir: owned,
            name: name.to_owned(),
            temp,
            mode: replacement_mode(mode, existing.map(|stat| stat.st_mode)),
            owner,
            made: Made::default(),
            sync: true,
        })
    }

    /// No `fdatasync` before the rename: for `write` and `edit` (see [`UploadTarget::commit`]).
    pub fn unsynced(self) -> Self {
        Self { sync: false, ..self }
    }

    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.temp.file.write_all(data)
    }

    /// Writes all of `bytes` and commits; on a write error the replacement is abandoned.
    pub fn write_all(mut self, bytes: &[u8]) -> Result<(), String> {
        if let Err(err) = self.write(bytes) {
            self.remove();
            return Err(format!("write failed: {err}"));
        }
        self.commit()
    }

    /// Gives the data the replaced file's owner (where allowed) and the mode, flushes it to disk
    /// (uploads), and renames it over the destination; the temporary file is gone either way.
    ///
    /// Against a killed agentd the rename alone is enough: it is atomic whether or not the data has
    /// reached the disk. The `fdatasync` is for a crash of the machine, where a file system may
    /// persist the rename before the data (an empty file): uploads, where it costs little next to the
    /// transfer and the client takes success as "stored", do it; `write` and `edit`, small and
    /// interactive, do not (an `fdatasync` measured 0.43 ms median on this project's ext4, more than
    /// a whole native edit round trip), and rely on the file systems' replace-by-rename ordering
    /// (ext4 `auto_da_alloc`, btrfs) there. The directory is never synced: all-or-nothing does not
    /// need the rename to be durable.
    pub fn commit(self) -> Result<(), String> {
        self.commit_io().map_err(|err| error_text(&err))
    }

    /// [`UploadTarget::commit`] with the IO error.
    pub fn commit_io(self) -> io::Result<()> {
        let file = self.temp.file.as_fd();
        if let Some((uid, gid)) = self.owner {
            // Before the mode: a chown clears setuid and setgid. Not allowed (another owner without
            // CAP_CHOWN): the file becomes agentd's, as any new file.
            let (uid, gid) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
            if fchown(file, uid, gid).is_err() {
                let _ = fchown(file, None, gid);
            }
        }
        let done = fchmod(file, Mode::from_bits_truncate(self.mode))
            .and_then(|()| if self.sync { fdatasync(file) } else { Ok(()) })
            .and_then(|()| renameat(&self.dir, self.temp.name.as_c_str(), &self.dir, self.name.as_c_str()));
        match done {
            Ok(()) => {
                self.temp.done();
                Ok(())
            }
            Err(errno) => {
                self.remove();
                Err(errno.into())
            }
        }
    }

    /// Abandons the upload: the temporary file and the directories it made are removed, the
    /// destination untouched.
    pub fn remove(self) {
        let _ = unlinkat(&self.dir, self.temp.name.as_c_str(), UnlinkatFlags::NoRemoveDir);
        self.temp.done();
        self.made.undo();
    }
}

/// An unnamed file in `$TMPDIR` (see [`Temp::unnamed`]): where an `edit` that must rewrite its file in
/// place (the directory takes no new file) stages the new content before copying it over the file.
pub fn spool() -> io::Result<std::fs::File> {
    let dir = std::env::temp_dir();
    let fd = std::fs::File::open(&dir)?;
    Temp::unnamed(fd.as_fd(), &dir)
}

/// Removes the temp files a killed agentd (or `agentd fs`) left in this workspace, as recorded in
/// [`temp::records_dir`]; records of other workspaces are left to their agentd. Blocking; for the
/// start of `agentd serve`. Returns how many were removed.
pub fn sweep_recorded(ws: &Workspace) -> usize {
    let mut removed = 0;
    for recorded in temp::recorded() {
        let inside = match ws.is_confined() {
            true => recorded.real_dir.strip_prefix(ws.dir()).ok().map(|rel| Path::new("/").join(rel)),
            false => Some(recorded.real_dir.clone()),
        };
        let Some(path) = inside.and_then(|p| p.to_str().map(str::to_owned)) else { continue };
        let dir = match ws.node(&path, true) {
            Ok(Some(node)) if node.is_dir() => node.fd().try_clone_to_owned().ok(),
            Ok(_) => None,
            Err(_) => continue,
        };
        if recorded.sweep(dir.as_ref()) == temp::Found::Removed {
            removed += 1;
        }
    }
    removed
}

/// Sends one file as `download_start`, chunks and the final result.
pub async fn download(
    work: &FileWork,
    id: u64,
    path: String,
    source: Result<Destination, String>,
    out: Outbox,
    cancel: Cancel,
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
    // Opened where the sandbox's file work runs; read from the descriptor afterwards.
    let opened = work.run(move || open_for_download(&source)).await;
    let mut file = match opened.unwrap_or_else(Err) {
        Ok(file) => tokio::fs::File::from_std(file),
        Err(error) => return failed(error),
    };
    let size = match file.metadata().await {
        Ok(meta) => meta.len(),
        Err(err) => return failed(error_text(&err)),
    };
    let start = ServerMessage::DownloadStart(DownloadStart { id, path: path.clone(), size });
    if out.reply(start).await.is_err() {
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
            () = cancel.cancelled() => return failed(CANCELLED.to_owned()),
        };
        hasher.update(&buf[..n]);
        sent += n as u64;
        if out.binary(chunk::encode(id, &buf[..n])).await.is_err() {
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
    source.permitted()?;
    let node = match source.workspace.node(&source.path, true) {
        Ok(Some(node)) => node,
        Ok(None) => return Err(TransferError::FileNotFound.as_str().to_owned()),
        Err(err) => return Err(resolve_text(&err)),
    };
    source.permitted_node(&node)?;
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

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;

    #[test]
    fn setuid_and_setgid_are_dropped_unless_asked_for() {
        assert_eq!(replacement_mode(None, None), 0o644);
        assert_eq!(replacement_mode(None, Some(0o100_4755)), 0o755);
        assert_eq!(replacement_mode(None, Some(0o2750)), 0o750);
        assert_eq!(replacement_mode(None, Some(0o1640)), 0o1640);
        assert_eq!(replacement_mode(Some(0o4755), Some(0o644)), 0o4755);
        assert_eq!(replacement_mode(Some(0o600), Some(0o4755)), 0o600);
    }

    #[test]
    fn replacements_keep_mode_and_owner_and_fit_long_names() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path().into());
        let long = "n".repeat(255);
        let path = dir.path().join(&long);
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6751)).unwrap();
        // Another owner, where this test may give one (as root).
        let chowned = std::os::unix::fs::chown(&path, Some(4321), Some(4322)).is_ok();
        let dest = destination(&ws, path.to_str().unwrap(), Operation::Write).unwrap();
        write_whole(&dest, b"new").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((std::fs::read(&path).unwrap(), meta.mode() & 0o7777), (b"new".to_vec(), 0o751));
        if chowned {
            assert_eq!((meta.uid(), meta.gid()), (4321, 4322));
        }
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from(&long)]);
    }

    #[test]
    fn failed_uploads_remove_only_the_directories_they_made() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path().into());
        let base = dir.path().to_str().unwrap();
        std::fs::create_dir(dir.path().join("kept")).unwrap();
        for (parent, left) in [("new", None), ("kept", Some("kept"))] {
            let dest = destination(&ws, &format!("{base}/{parent}/b/c/f"), Operation::Write).unwrap();
            let mut target = UploadTarget::open(&dest, None).unwrap();
            target.write(b"partial").unwrap();
            assert!(dir.path().join(parent).join("b/c").is_dir());
            target.remove();
            let mut names: Vec<_> =
                std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            assert_eq!(names, [std::ffi::OsString::from("kept")], "{parent}: {left:?}");
            assert_eq!(std::fs::read_dir(dir.path().join("kept")).unwrap().count(), 0);
        }
        // A directory that something else filled meanwhile stays, with its parents.
        let dest = destination(&ws, &format!("{base}/x/y/f"), Operation::Write).unwrap();
        let target = UploadTarget::open(&dest, None).unwrap();
        std::fs::write(dir.path().join("x/other"), "mine").unwrap();
        target.remove();
        assert!(dir.path().join("x/other").is_file());
        assert!(!dir.path().join("x/y").exists());
        // A failure at commit (the name is too long for the file system) undoes the parents too.
        let dest = destination(&ws, &format!("{base}/z/{}", "n".repeat(256)), Operation::Write).unwrap();
        assert!(write_whole(&dest, b"x").is_err());
        assert!(!dir.path().join("z").exists());
    }

    #[test]
    fn a_confined_start_sweeps_only_its_own_roots_leftovers() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root_path = root.path().canonicalize().unwrap();
        std::fs::create_dir(root_path.join("sub")).unwrap();
        let ws = Workspace::confined(root_path.clone()).unwrap();
        // Two writers killed mid-write (their temp files dropped unrenamed, the records kept).
        let left = |dir: &Path| {
            let fd = std::fs::File::open(dir).unwrap();
            let temp = Temp::create(fd.as_fd(), dir).unwrap();
            dir.join(std::ffi::OsStr::from_bytes(temp.name.to_bytes()))
        };
        let (inside, other) = (left(&root_path.join("sub")), left(outside.path()));
        // A live one in the root stays.
        let fd = std::fs::File::open(&root_path).unwrap();
        let live = UploadTarget::create(fd.as_fd(), c"f", &root_path, None, None).unwrap();
        assert!(inside.exists() && other.exists());
        sweep_recorded(&ws);
        assert!(!inside.exists(), "the root's leftover is swept");
        assert!(other.exists(), "another workspace's is left to its agentd");
        live.write_all(b"done").unwrap();
        assert_eq!(std::fs::read(root_path.join("f")).unwrap(), b"done");
        sweep_recorded(&Workspace::open(outside.path().into()));
        assert!(!other.exists());
    }

    /// The race between a sweep and live writers: 1000 replacements while another thread sweeps
    /// their directory without pause. Every replacement must succeed (no live temp file is taken).
    #[test]
    fn sweeps_never_take_a_live_temp_file() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let sweeps = std::sync::Arc::new(AtomicUsize::new(0));
        let sweeper = {
            let (path, done, sweeps) = (path.clone(), done.clone(), sweeps.clone());
            std::thread::spawn(move || {
                let fd = std::fs::File::open(&path).unwrap();
                let mut removed = 0;
                while !done.load(Ordering::Relaxed) {
                    removed += temp::sweep(fd.as_fd());
                    sweeps.fetch_add(1, Ordering::Relaxed);
                }
                removed
            })
        };
        let fd = std::fs::File::open(&path).unwrap();
        for round in 0..1000u32 {
            let target = UploadTarget::create(fd.as_fd(), c"dest", &path, None, None).unwrap().unsynced();
            let result = target.write_all(&round.to_be_bytes());
            assert_eq!(result, Ok(()), "round {round}");
        }
        done.store(true, Ordering::Relaxed);
        assert_eq!(sweeper.join().unwrap(), 0, "a sweep removed a live temp file");
        assert_eq!(std::fs::read(path.join("dest")).unwrap(), 999u32.to_be_bytes());
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 1);
        eprintln!("1000 replacements, {} sweeps meanwhile", sweeps.load(Ordering::Relaxed));
    }
}
