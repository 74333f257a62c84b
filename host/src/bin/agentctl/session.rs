//! The `agentctl up` session's files: `session.json` (where its agentd listens, its pid, what `down`
//! removes) in `~/.agentd` (or the file `AGENTCTL_SESSION` names), beside its log.
//!
//! agentctl acts on what it reads there as its own user (root, often): it signals the pid, removes
//! the directories and sends the token file's content as a bearer token. So it trusts nothing a
//! command could have written:
//! - `up` refuses a session directory inside the workspace, which is lent to commands (a workspace
//!   that is `$HOME` lends `~/.agentd`);
//! - the directory must be this user's and writable by no one else, the files this user's, 0600,
//!   regular, with one link, and none is reached through a symlink (`O_NOFOLLOW`);
//! - `down` signals the pid only while it is this user's `agentd serve --unix` of the recorded
//!   socket.

use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat};
use serde::{Deserialize, Serialize};

/// Largest session or token file read: both are a few hundred bytes.
const MOST_BYTES: u64 = 64 << 10;

/// What `agentctl up` leaves for later commands.
#[derive(Serialize, Deserialize)]
pub struct SessionFile {
    /// `unix:PATH` of the session's agentd.
    pub url: String,
    /// The file holding the token agentd requires (mode 0600 in the session's private socket
    /// directory; agentd withholds it from its commands). The secret is never in this file.
    pub token_file: PathBuf,
    pub pid: u32,
    pub workspace: PathBuf,
    /// The workspace was created by `up`, so `down` removes it.
    pub owns_workspace: bool,
    /// The profile's private tmp, profile directory and socket directory, removed by `down`.
    #[serde(default)]
    pub private_dirs: Vec<PathBuf>,
}

/// Why a session file is not used.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("HOME is not set; set AGENTCTL_SESSION to a file path")]
    NoHome,
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "{}: {why}; a command may have written it, so agentctl does not use it (remove it if it is yours)",
        path.display()
    )]
    Untrusted { path: PathBuf, why: String },
    #[error(
        "the session's files ({}) would be inside the workspace {}, which commands may write: choose \
         another --workspace, or set AGENTCTL_SESSION to a file outside it",
        dir.display(),
        workspace.display()
    )]
    InsideWorkspace { dir: PathBuf, workspace: PathBuf },
    #[error("{}: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
}

impl SessionError {
    fn io(path: &Path) -> impl FnOnce(nix::Error) -> Self + '_ {
        move |errno| Self::Io { path: path.to_owned(), source: errno.into() }
    }
}

/// Where the session is recorded: `AGENTCTL_SESSION`, else `~/.agentd/session.json`.
pub fn path() -> Result<PathBuf, SessionError> {
    if let Some(path) = std::env::var_os("AGENTCTL_SESSION") {
        return Ok(PathBuf::from(path));
    }
    let home = std::env::var_os("HOME").ok_or(SessionError::NoHome)?;
    Ok(PathBuf::from(home).join(".agentd").join("session.json"))
}

/// The session file's directory and its name in it.
fn split(path: &Path) -> Result<(&Path, &std::ffi::OsStr), SessionError> {
    let untrusted = |why: &str| SessionError::Untrusted { path: path.to_owned(), why: why.to_owned() };
    let name = path.file_name().ok_or_else(|| untrusted("not a file name"))?;
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((dir, name))
}

/// Whether the owner and mode of what `fd` opened leave it to this user alone: owned by it, and
/// writable (`private`: also readable) by no one else. `kind` is the file type it must be.
fn check_own(fd: impl AsFd, path: &Path, kind: SFlag, private: bool) -> Result<u64, SessionError> {
    let stat = fstat(fd).map_err(SessionError::io(path))?;
    let untrusted = |why: String| Err(SessionError::Untrusted { path: path.to_owned(), why });
    let me = nix::unistd::geteuid().as_raw();
    let others = if private { 0o077 } else { 0o022 };
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != kind {
        return untrusted("not of the expected type".to_owned());
    }
    if stat.st_uid != me {
        return untrusted(format!("owned by uid {}, not by this user (uid {me})", stat.st_uid));
    }
    if stat.st_mode & others != 0 {
        return untrusted(format!("mode {:o} lets other users in", stat.st_mode & 0o7777));
    }
    if kind == SFlag::S_IFREG && stat.st_nlink != 1 {
        return untrusted(format!("{} links to it", stat.st_nlink));
    }
    Ok(u64::try_from(stat.st_size).unwrap_or(u64::MAX))
}

/// Opens the session's directory, never through a symlink, and checks it is this user's alone.
fn open_dir(dir: &Path) -> Result<OwnedFd, SessionError> {
    let fd = open_dir_unchecked(dir)?;
    check_own(&fd, dir, SFlag::S_IFDIR, false)?;
    Ok(fd)
}

fn open_dir_unchecked(dir: &Path) -> Result<OwnedFd, SessionError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    nix::fcntl::open(dir, flags, Mode::empty()).map_err(SessionError::io(dir))
}

/// Reads a small private file of this user: opened without following a symlink, regular, this
/// user's, 0600 or tighter, one link, at most [`MOST_BYTES`]. `None` when it does not exist.
pub fn read_private(
    dir: impl AsFd,
    name: &std::ffi::OsStr,
    path: &Path,
) -> Result<Option<String>, SessionError> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = match openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
        Err(nix::errno::Errno::ELOOP) => {
            return Err(SessionError::Untrusted { path: path.to_owned(), why: "a symlink".to_owned() });
        }
        Err(errno) => return Err(SessionError::io(path)(errno)),
    };
    let size = check_own(&fd, path, SFlag::S_IFREG, true)?;
    if size > MOST_BYTES {
        return Err(SessionError::Untrusted { path: path.to_owned(), why: format!("{size} bytes") });
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MOST_BYTES)
        .read_to_string(&mut text)
        .map_err(|source| SessionError::Io { path: path.to_owned(), source })?;
    Ok(Some(text))
}

/// The recorded session, if there is one and its agentd is alive (a dead one's file is removed).
pub fn read() -> Result<Option<SessionFile>, SessionError> {
    let path = path()?;
    let (dir, name) = split(&path)?;
    let dir_fd = match open_dir_unchecked(dir) {
        Err(SessionError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        other => other?,
    };
    // The file first: another user (a command) is told it may not read it, as the kernel says.
    let Some(text) = read_private(&dir_fd, name, &path)? else { return Ok(None) };
    check_own(&dir_fd, dir, SFlag::S_IFDIR, false)?;
    let session: SessionFile =
        serde_json::from_str(&text).map_err(|source| SessionError::Json { path: path.clone(), source })?;
    if !session.agentd_alive() {
        eprintln!("agentctl: the `up` session (pid {}) is gone; removing {}", session.pid, path.display());
        let _ = nix::unistd::unlinkat(&dir_fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        return Ok(None);
    }
    Ok(Some(session))
}

impl SessionFile {
    /// The socket's path (`url` without `unix:`).
    fn socket(&self) -> Option<&Path> {
        self.url.strip_prefix("unix:").map(Path::new)
    }

    /// Whether `pid` is still this session's agentd: a process of this user running `agentd serve
    /// --unix` on the recorded socket (not a pid reused since, nor one named by anyone else).
    pub fn agentd_alive(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        let Some(socket) = self.socket() else { return false };
        let proc = PathBuf::from(format!("/proc/{}", self.pid));
        let mine = std::fs::metadata(&proc).is_ok_and(|meta| meta.uid() == nix::unistd::geteuid().as_raw());
        let cmdline = std::fs::read(proc.join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        mine && args.get(1) == Some(&&b"serve"[..])
            && args.windows(2).any(|pair| pair[0] == b"--unix" && pair[1] == socket.as_os_str().as_bytes())
    }

    /// The session's token, from its file: private to this user, in the socket's own directory.
    pub fn token(&self) -> Result<String, SessionError> {
        let path = &self.token_file;
        let untrusted = |why: &str| SessionError::Untrusted { path: path.clone(), why: why.to_owned() };
        let (dir, name) = split(path)?;
        if self.socket().and_then(Path::parent) != Some(dir) {
            return Err(untrusted("not in the directory of the session's socket"));
        }
        let dir_fd = open_dir(dir)?;
        let text = read_private(&dir_fd, name, path)?.ok_or_else(|| untrusted("missing"))?;
        Ok(text.trim().to_owned())
    }
}

/// Makes the session's directory for `up` (0700 when new) and checks it: this user's alone, and
/// not inside `workspace` (resolved; checked before anything is made there; `None`: a new one).
/// Returns it, opened.
pub fn prepare(path: &Path, workspace: Option<&Path>) -> Result<OwnedFd, SessionError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let (dir, _) = split(path)?;
    // Where it is or would be: its nearest existing ancestor resolved, the rest as written.
    let absolute =
        std::path::absolute(dir).map_err(|source| SessionError::Io { path: dir.to_owned(), source })?;
    let real = absolute
        .ancestors()
        .find_map(|above| {
            let rest = absolute.strip_prefix(above).ok()?;
            std::fs::canonicalize(above).ok().map(|above| above.join(rest))
        })
        .unwrap_or(absolute.clone());
    if let Some(workspace) = workspace.filter(|workspace| real.starts_with(workspace)) {
        return Err(SessionError::InsideWorkspace { dir: real, workspace: workspace.to_owned() });
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| SessionError::Io { path: dir.to_owned(), source })?;
    open_dir(dir)
}

/// Opens `name` in the session's directory to write (created 0600 when missing), never through a
/// symlink; it must be this user's and writable by no one else.
pub fn create_own(
    dir: impl AsFd,
    name: &std::ffi::OsStr,
    path: &Path,
    append: bool,
) -> Result<std::fs::File, SessionError> {
    let how = if append { OFlag::O_APPEND } else { OFlag::O_TRUNC };
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | how;
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(0o600)).map_err(SessionError::io(path))?;
    check_own(&fd, path, SFlag::S_IFREG, false)?;
    Ok(std::fs::File::from(fd))
}

/// Records `session` at `path`, whose directory [`prepare`] opened as `dir`.
pub fn write(dir: impl AsFd, path: &Path, session: &SessionFile) -> Result<(), SessionError> {
    let (_, name) = split(path)?;
    let text = serde_json::to_string_pretty(session)
        .map_err(|source| SessionError::Json { path: path.to_owned(), source })?;
    create_own(dir, name, path, false)?
        .write_all(text.as_bytes())
        .map_err(|source| SessionError::Io { path: path.to_owned(), source })
}

/// Removes the session's file (`down`), never through a symlink in its place or its directory's.
pub fn remove(path: &Path) -> Result<(), SessionError> {
    let (dir, name) = split(path)?;
    let dir_fd = open_dir(dir)?;
    nix::unistd::unlinkat(&dir_fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir)
        .map_err(SessionError::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_users_private_files_are_read() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let fd = open_dir(dir.path()).unwrap();
        let name = std::ffi::OsStr::new("f");
        let path = dir.path().join("f");
        assert!(read_private(&fd, name, &path).unwrap().is_none());
        create_own(&fd, name, &path, false).unwrap().write_all(b"x").unwrap();
        assert_eq!(read_private(&fd, name, &path).unwrap().as_deref(), Some("x"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(read_private(&fd, name, &path), Err(SessionError::Untrusted { .. })));
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert!(matches!(read_private(&fd, name, &path), Err(SessionError::Untrusted { .. })));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(open_dir(dir.path()), Err(SessionError::Untrusted { .. })));
    }

    #[test]
    fn a_session_inside_the_workspace_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let home_path = std::fs::canonicalize(home.path()).unwrap();
        let inside = home_path.join(".agentd").join("session.json");
        assert!(matches!(prepare(&inside, Some(&home_path)), Err(SessionError::InsideWorkspace { .. })));
        let apart = tempfile::tempdir().unwrap();
        assert!(prepare(&apart.path().join("session.json"), Some(&home_path)).is_ok());
    }
}
