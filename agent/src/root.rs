//! The workspace, and with `--root` the virtual-path guard: every path a verb, transfer or exec
//! names is resolved under the root, `/` meaning the root itself, and a path that would leave it (a
//! `..` component, or a symlink whose target lies outside) is refused.
//!
//! Resolution works on file descriptors, never on path strings: it walks one component at a time
//! from a directory fd (`openat(dir, name, O_PATH | O_NOFOLLOW)`), reads every link it meets with
//! `readlinkat` on the link's own fd and resolves the target itself, and hands out what it opened:
//! an [`Entry`] (the directory fd holding the last component, and its name) and a [`Node`] (the
//! object, opened `O_PATH`, with its `stat`). Callers then work on those fds (`*at` calls, `fstat`,
//! reads from a reopened fd), so a command that swaps a path component for a symlink between the
//! check and the use cannot redirect agentd outside the root: every step of the walk and every later
//! open refuses to follow a link the walk did not resolve itself.
//!
//! Meaning of paths under `--root` (the same as before resolution became fd-based):
//! - `/` and relative paths start at the root; any `..` component of the request path is refused.
//! - A relative link target resolves from the link's directory; its `..` steps back up the walked
//!   directories and is refused above the root.
//! - An absolute link target is read as a path of the machine: it must lie inside the root's real
//!   path (`root/in -> /real/root/sub` works), and resolves from the root fd; any other is refused.
//! - More than [`MAX_LINKS`] links in one resolution fail with `ELOOP`, as in the kernel.
//!
//! `openat2(RESOLVE_IN_ROOT)` is not used: it reads an absolute link target relative to the root,
//! which would change the meaning above (`/real/root/sub` would become `root/real/root/sub`); the
//! walk gives that meaning on every kernel, with or without `openat2`.
//!
//! Without `--root` the workspace is agentd's working directory: relative paths start there, and
//! absolute paths and links are the machine's own (`..` is the physical parent, absolute links
//! restart at `/`), as in any sandbox where agentd is the only tenant. It is the same walk with no
//! root to stay in.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use agentd_protocol::permission::Operation;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, FcntlArg, OFlag, fcntl, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use thiserror::Error;

use crate::permission::Permissions;

/// Links followed in one resolution before it fails with `ELOOP` (the kernel's limit).
pub const MAX_LINKS: u32 = 40;

/// Why a path could not be resolved.
#[derive(Debug, Error)]
pub enum ResolveError {
    /// The path would leave the root.
    #[error("path leaves the root")]
    Escape,
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<Errno> for ResolveError {
    fn from(errno: Errno) -> Self {
        Self::Io(errno.into())
    }
}

impl ResolveError {
    /// The errno of an IO failure.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Self::Escape => None,
            Self::Io(err) => err.raw_os_error().map(Errno::from_raw),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Workspace {
    /// Default working directory of commands; base of relative paths. With a root: its real path.
    dir: PathBuf,
    /// Confined: the root, opened once (`O_PATH`), so even a rename of its path changes nothing.
    root: Option<Arc<OwnedFd>>,
    /// The profile's path permissions, which the file verbs and transfers check
    /// ([`crate::guard`]); empty without a profile.
    permissions: Arc<Permissions>,
}

/// A directory reached by a walk: its fd (`O_PATH`) and its real location below the top (the root,
/// or `/` without one).
#[derive(Debug)]
struct Cursor {
    fd: OwnedFd,
    location: PathBuf,
}

impl Cursor {
    fn try_clone(&self) -> io::Result<Self> {
        Ok(Self { fd: self.fd.try_clone()?, location: self.location.clone() })
    }
}

/// The last component of a path and the directory that holds it (every link before it followed).
#[derive(Debug)]
pub struct Entry {
    dir: Cursor,
    /// `None` when the path names a directory with no name of its own here: `/`, `.`, or a final `..`.
    last: Option<CString>,
    /// The path ended in `/`: the last component must be a directory (a link to one is followed).
    slash: bool,
    /// Links already followed on the way.
    links: u32,
}

impl Entry {
    /// The directory holding the last component.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.fd.as_fd()
    }

    /// The last component as written (`None`: see [`Entry`]).
    pub fn name(&self) -> Option<&CStr> {
        self.last.as_deref()
    }

    /// The real location of [`Entry::dir`] below the top (the root, or `/` without one).
    pub fn dir_location(&self) -> &Path {
        &self.dir.location
    }

    /// The real location of the last component below the top (the link itself when it is one).
    pub fn location(&self) -> PathBuf {
        match &self.last {
            Some(name) => self.dir.location.join(OsStr::from_bytes(name.to_bytes())),
            None => self.dir.location.clone(),
        }
    }
}

/// Directories a walk made (`mkdir -p`), in the order made: each with the directory fd it was made
/// in. [`Made::undo`] removes them again.
#[derive(Debug, Default)]
pub struct Made(Vec<(OwnedFd, CString)>);

impl Made {
    /// Removes the directories made, deepest first, each only while it is still empty: the first
    /// one that is not (something was put there meanwhile) stops the undo, as its parents then hold it.
    pub fn undo(self) {
        for (dir, name) in self.0.into_iter().rev() {
            if unlinkat(&dir, name.as_c_str(), UnlinkatFlags::RemoveDir).is_err() {
                break;
            }
        }
    }
}

/// What a path names: opened `O_PATH`, its `stat`, and where it was found.
#[derive(Debug)]
pub struct Node {
    /// The directory it was found in (for a directory with no name there: itself).
    dir: OwnedFd,
    /// Its name in `dir` (`.` for a directory reached as `/`, `.` or `..`).
    name: CString,
    fd: OwnedFd,
    stat: FileStat,
    /// Real location below the top (the root, or `/` without one).
    location: PathBuf,
}

/// What a file is, from its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

impl Kind {
    pub fn of(stat: &FileStat) -> Self {
        match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => Self::Dir,
            SFlag::S_IFREG => Self::File,
            SFlag::S_IFLNK => Self::Symlink,
            _ => Self::Other,
        }
    }
}

impl Node {
    pub fn stat(&self) -> &FileStat {
        &self.stat
    }

    pub fn kind(&self) -> Kind {
        Kind::of(&self.stat)
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == Kind::Dir
    }

    pub fn is_file(&self) -> bool {
        self.kind() == Kind::File
    }

    /// The real location below the top: the root with `--root`, else `/`.
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// The directory it was found in (for a directory with no name there: itself), and its name
    /// there: where a replacement of this very file goes (`renameat`), links already followed.
    pub fn parent(&self) -> (BorrowedFd<'_>, &CStr) {
        (self.dir.as_fd(), self.name.as_c_str())
    }

    /// The `O_PATH` fd: a directory fd for `*at` calls, `fchdir`, `fstat`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens this very file for IO (`flags`: access mode and the like). It is reopened by its name in
    /// the directory fd it was found in, never following a link, and must still be the same inode:
    /// a swap in between fails with `ESTALE` instead of reaching another file. Opened non-blocking
    /// (a FIFO never hangs agentd), then switched back to blocking unless `flags` asks otherwise.
    pub fn open(&self, flags: OFlag) -> io::Result<File> {
        let extra = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
        let fd = openat(&self.dir, self.name.as_c_str(), flags | extra, Mode::empty())?;
        let now = fstat(&fd)?;
        if (now.st_dev, now.st_ino) != (self.stat.st_dev, self.stat.st_ino) {
            return Err(Errno::ESTALE.into());
        }
        if !flags.contains(OFlag::O_NONBLOCK) {
            let status = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL)?);
            fcntl(&fd, FcntlArg::F_SETFL(status - OFlag::O_NONBLOCK))?;
        }
        Ok(File::from(fd))
    }

    /// Whether names can be looked up in this directory (search permission): a lookup of `.` in it.
    pub fn is_searchable(&self) -> bool {
        open_path(self.fd.as_fd(), c".").is_ok()
    }

    /// This directory opened for listing (through its own fd: no name is looked up again).
    pub fn open_dir(&self) -> io::Result<OwnedFd> {
        Ok(openat(&self.fd, c".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?)
    }
}

/// One entry of a listed directory; `kind` from the listing, or `lstat` when it did not say.
#[derive(Debug, Clone)]
pub struct Child {
    pub name: CString,
    pub kind: Option<Kind>,
}

impl Child {
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(self.name.to_bytes()).into_owned()
    }
}

/// The entries of the directory `dir` (opened for reading), in directory order, without `.` and `..`.
pub fn list(dir: &OwnedFd) -> io::Result<Vec<Child>> {
    let mut children = Vec::new();
    visit(dir, |child| {
        children.push(child);
        ControlFlow::Continue(())
    })?;
    Ok(children)
}

/// Hands each entry of `dir` to `f` in directory order, without `.` and `..`, until `f` breaks;
/// nothing is collected, so a huge directory costs no memory here.
pub fn visit(dir: &OwnedFd, mut f: impl FnMut(Child) -> ControlFlow<()>) -> io::Result<()> {
    use nix::dir::{Dir, Type};
    let mut listing = Dir::from_fd(dir.try_clone()?)?;
    for entry in listing.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let kind = match entry.file_type() {
            Some(Type::Directory) => Some(Kind::Dir),
            Some(Type::File) => Some(Kind::File),
            Some(Type::Symlink) => Some(Kind::Symlink),
            Some(_) => Some(Kind::Other),
            // Some file systems do not say: ask, without following.
            None => fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok().map(|s| Kind::of(&s)),
        };
        if f(Child { name: name.to_owned(), kind }).is_break() {
            break;
        }
    }
    Ok(())
}

/// The subdirectory `name` of `dir` opened for listing; a link there fails (`ELOOP`/`ENOTDIR`).
pub fn open_child_dir(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(openat(dir, name, flags, Mode::empty())?)
}

/// The regular file `name` of `dir` opened for reading; a link, FIFO or device there fails.
pub fn open_child_file(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<File> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
    let fd = openat(dir, name, flags, Mode::empty())?;
    if Kind::of(&fstat(&fd)?) != Kind::File {
        return Err(Errno::EINVAL.into());
    }
    let status = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL)?);
    fcntl(&fd, FcntlArg::F_SETFL(status - OFlag::O_NONBLOCK))?;
    Ok(File::from(fd))
}

fn open_path(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    openat(dir, name, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
}

fn cstring(bytes: &[u8]) -> Result<CString, ResolveError> {
    CString::new(bytes).map_err(|_| ResolveError::Io(Errno::EINVAL.into()))
}

/// The components of `path`, split on `/` (empty ones dropped), as a stack: the first on top.
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty()).rev().map(<[u8]>::to_vec).collect()
}

impl Workspace {
    /// An unconfined workspace at `dir`.
    pub fn open(dir: PathBuf) -> Self {
        Self { dir, root: None, permissions: Arc::default() }
    }

    /// The same workspace, its verbs held to `permissions`.
    pub fn with_permissions(self, permissions: Permissions) -> Self {
        Self { permissions: Arc::new(permissions), ..self }
    }

    /// The path permissions the verbs check.
    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    /// A confined workspace: `dir` must be canonical (no symlinks in it); it is opened now.
    pub fn confined(dir: PathBuf) -> io::Result<Self> {
        let fd = nix::fcntl::open(
            dir.as_path(),
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self { dir, root: Some(Arc::new(fd)), permissions: Arc::default() })
    }

    /// The workspace directory (the root's real path with `--root`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether paths are confined to a root (`--root`).
    pub fn is_confined(&self) -> bool {
        self.root.is_some()
    }

    /// The machine's path of a [`Node::location`].
    pub fn real_path(&self, location: &Path) -> PathBuf {
        match &self.root {
            Some(_) => self.dir.join(location),
            None => Path::new("/").join(location),
        }
    }

    /// A request path as the client sees it, absolute: under `--root` in the virtual tree (`/` is
    /// the root), else joined to the workspace. Not normalized; for results and messages only.
    pub fn shown(&self, path: &str) -> PathBuf {
        match (&self.root, path.starts_with('/')) {
            (Some(_), false) => PathBuf::from(format!("/{path}")),
            (Some(_), true) | (None, true) => PathBuf::from(path),
            (None, false) => self.dir.join(path),
        }
    }

    /// The directory holding the last component of `path`, with every link before it followed.
    /// With `create`, missing directories on the way are made (`mkdir -p`, mode 0777 less umask).
    pub fn entry(&self, path: &str, create: bool) -> Result<Entry, ResolveError> {
        let mut made = Made::default();
        self.entry_made(path, create.then_some(&mut made))
    }

    /// [`Workspace::entry`], recording in `made` (when given: parents are made) the directories it
    /// made, so a caller that fails later can remove them ([`Made::undo`]). On an error the
    /// directories made so far are removed already.
    pub fn entry_making(&self, path: &str) -> Result<(Entry, Made), ResolveError> {
        let mut made = Made::default();
        match self.entry_made(path, Some(&mut made)) {
            Ok(entry) => Ok((entry, made)),
            Err(err) => {
                made.undo();
                Err(err)
            }
        }
    }

    fn entry_made(&self, path: &str, made: Option<&mut Made>) -> Result<Entry, ResolveError> {
        if path.contains('\0') {
            return Err(Errno::EINVAL.into());
        }
        let path = path.as_bytes();
        if self.root.is_some() && path.split(|b| *b == b'/').any(|c| c == b"..") {
            return Err(ResolveError::Escape);
        }
        let start = if path.starts_with(b"/") {
            self.top()?
        } else {
            match &self.root {
                Some(_) => self.top()?,
                None => Cursor {
                    fd: nix::fcntl::open(
                        self.dir.as_path(),
                        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                        Mode::empty(),
                    )?,
                    location: self.dir.strip_prefix("/").unwrap_or(&self.dir).to_owned(),
                },
            }
        };
        self.walk(start, path, made, 0)
    }

    /// What `path` names, its last link followed when `follow` (or when the path ends in `/`).
    /// `Ok(None)`: nothing is there (a missing component, or a dangling link).
    pub fn node(&self, path: &str, follow: bool) -> Result<Option<Node>, ResolveError> {
        match self.entry(path, false) {
            Ok(entry) => self.lookup(&entry, follow),
            Err(err) if err.errno() == Some(Errno::ENOENT) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// What `rel` (a relative path, bytes) names below the directory `dir`, as [`Workspace::node`]
    /// would find it: the walk starts from `dir`'s fd (for walks that hold a directory already).
    pub fn node_in(&self, dir: &Node, rel: &[u8], follow: bool) -> Result<Option<Node>, ResolveError> {
        if rel.contains(&0) {
            return Err(Errno::EINVAL.into());
        }
        if self.root.is_some() && rel.split(|b| *b == b'/').any(|c| c == b"..") {
            return Err(ResolveError::Escape);
        }
        let start = Cursor { fd: dir.fd.try_clone()?, location: dir.location.clone() };
        match self.walk(start, rel, None, 0) {
            Ok(entry) => self.lookup(&entry, follow),
            Err(err) if err.errno() == Some(Errno::ENOENT) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// What the last component of `entry` is, its link followed when `follow` (or when the path
    /// ended in `/`). `Ok(None)`: nothing is there.
    pub fn lookup(&self, entry: &Entry, follow: bool) -> Result<Option<Node>, ResolveError> {
        let mut dir = entry.dir.try_clone()?;
        let mut last = entry.last.clone();
        let mut slash = entry.slash;
        let mut links = entry.links;
        loop {
            let Some(name) = last else {
                let fd = open_path(dir.fd.as_fd(), c".")?;
                let stat = fstat(&fd)?;
                return Ok(Some(Node {
                    dir: dir.fd,
                    name: c".".to_owned(),
                    fd,
                    stat,
                    location: dir.location,
                }));
            };
            let fd = match open_path(dir.fd.as_fd(), &name) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Ok(None),
                Err(err) => return Err(err.into()),
            };
            let stat = fstat(&fd)?;
            let kind = Kind::of(&stat);
            if kind == Kind::Symlink && (follow || slash) {
                let target = self.link_target(&fd, &mut links)?;
                let next = match self.link_start(dir, &target).and_then(|(start, rest)| {
                    self.walk_components(start, rest, target.ends_with(b"/"), None, links)
                }) {
                    Ok(next) => next,
                    Err(err) if err.errno() == Some(Errno::ENOENT) => return Ok(None),
                    Err(err) => return Err(err),
                };
                (dir, last, slash, links) = (next.dir, next.last, slash || next.slash, next.links);
                continue;
            }
            if slash && kind != Kind::Dir {
                return Err(Errno::ENOTDIR.into());
            }
            let location = dir.location.join(OsStr::from_bytes(name.to_bytes()));
            return Ok(Some(Node { dir: dir.fd, name, fd, stat, location }));
        }
    }

    /// The root (with `--root`) or `/`: where absolute paths start.
    fn top(&self) -> Result<Cursor, ResolveError> {
        let fd = match &self.root {
            Some(root) => root.try_clone()?,
            None => {
                nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?
            }
        };
        Ok(Cursor { fd, location: PathBuf::new() })
    }

    /// Reads the link opened (`O_PATH | O_NOFOLLOW`) as `fd`, counting it.
    fn link_target(&self, fd: &OwnedFd, links: &mut u32) -> Result<Vec<u8>, ResolveError> {
        *links += 1;
        if *links > MAX_LINKS {
            return Err(Errno::ELOOP.into());
        }
        // An empty name reads the link `fd` itself: the very link that was examined.
        Ok(readlinkat(fd, c"")?.as_bytes().to_vec())
    }

    /// Where a link's target starts and its components: relative targets from the link's directory
    /// `dir`; absolute ones from the top (with a root, only those inside its real path).
    fn link_start(&self, dir: Cursor, target: &[u8]) -> Result<(Cursor, Vec<Vec<u8>>), ResolveError> {
        if target.is_empty() {
            return Err(Errno::ENOENT.into());
        }
        if !target.starts_with(b"/") {
            return Ok((dir, components(target)));
        }
        drop(dir);
        if self.root.is_none() {
            return Ok((self.top()?, components(target)));
        }
        let inside =
            Path::new(OsStr::from_bytes(target)).strip_prefix(&self.dir).map_err(|_| ResolveError::Escape)?;
        Ok((self.top()?, components(inside.as_os_str().as_bytes())))
    }

    /// Walks `path` from `cur` up to its last component.
    fn walk(
        &self,
        cur: Cursor,
        path: &[u8],
        made: Option<&mut Made>,
        links: u32,
    ) -> Result<Entry, ResolveError> {
        self.walk_components(cur, components(path), path.ends_with(b"/"), made, links)
    }

    /// Walks the stack `pending` (first component on top) from `cur` up to its last component;
    /// with `made`, missing directories are made and recorded there.
    fn walk_components(
        &self,
        mut cur: Cursor,
        mut pending: Vec<Vec<u8>>,
        slash: bool,
        mut made: Option<&mut Made>,
        mut links: u32,
    ) -> Result<Entry, ResolveError> {
        while let Some(name) = pending.pop() {
            match name.as_slice() {
                b"." => {}
                b".." => cur = self.parent(cur)?,
                _ if pending.is_empty() => {
                    return Ok(Entry { dir: cur, last: Some(cstring(&name)?), slash, links });
                }
                _ => {
                    let cname = cstring(&name)?;
                    let fd = match open_path(cur.fd.as_fd(), &cname) {
                        Err(Errno::ENOENT) if made.is_some() => {
                            // A directory is made where the walk is, whatever the path said: the
                            // permission rules are checked there (a verb's own check comes later).
                            let at = self.real_path(&cur.location.join(OsStr::from_bytes(&name)));
                            if self.permissions.denies(Operation::Write, &at.to_string_lossy()) {
                                return Err(Errno::EACCES.into());
                            }
                            let mode = Mode::from_bits_truncate(0o777);
                            match mkdirat(cur.fd.as_fd(), cname.as_c_str(), mode) {
                                Ok(()) => {
                                    if let Some(made) = made.as_deref_mut() {
                                        made.0.push((cur.fd.try_clone()?, cname.clone()));
                                    }
                                }
                                // Made by someone else meanwhile: not ours to remove.
                                Err(Errno::EEXIST) => {}
                                Err(err) => return Err(err.into()),
                            }
                            open_path(cur.fd.as_fd(), &cname)?
                        }
                        other => other?,
                    };
                    match Kind::of(&fstat(&fd)?) {
                        Kind::Dir => {
                            cur.location.push(OsStr::from_bytes(&name));
                            cur.fd = fd;
                        }
                        Kind::Symlink => {
                            let target = self.link_target(&fd, &mut links)?;
                            let (start, rest) = self.link_start(cur, &target)?;
                            cur = start;
                            pending.extend(rest);
                        }
                        // `mkdir -p` through a file says the file exists; a lookup, that it is no directory.
                        Kind::File | Kind::Other if made.is_some() => return Err(Errno::EEXIST.into()),
                        Kind::File | Kind::Other => return Err(Errno::ENOTDIR.into()),
                    }
                }
            }
        }
        Ok(Entry { dir: cur, last: None, slash: false, links })
    }

    /// The directory above `cur`. With a root: one step back up the walked directories, re-walked
    /// from the root without following anything (never `..` on an fd, which a directory moved out of
    /// the root would lead outside); refused above the root. Without one: the physical parent.
    fn parent(&self, cur: Cursor) -> Result<Cursor, ResolveError> {
        let Cursor { fd, mut location } = cur;
        if self.root.is_none() {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let fd = openat(&fd, c"..", flags, Mode::empty())?;
            location.pop();
            return Ok(Cursor { fd, location });
        }
        drop(fd);
        if !location.pop() {
            return Err(ResolveError::Escape);
        }
        let mut up = self.top()?;
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        for component in location.components() {
            let Component::Normal(name) = component else { continue };
            up.fd = openat(&up.fd, name, flags, Mode::empty())?;
        }
        up.location = location;
        Ok(up)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    struct Case {
        _dir: tempfile::TempDir,
        _outside: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        ws: Workspace,
    }

    /// A root with `sub/f` (a file), `file`, and links: `in -> <real root>/sub`, `out -> <outside>`,
    /// `rel -> sub`, `up -> sub/../file`-style relative ones made by each test.
    fn case() -> Case {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), "in").unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        symlink(outside.path(), root.join("out")).unwrap();
        symlink(root.join("sub"), root.join("in")).unwrap();
        symlink("sub", root.join("rel")).unwrap();
        let ws = Workspace::confined(root.clone()).unwrap();
        Case { root, outside: outside.path().to_owned(), ws, _dir: dir, _outside: outside }
    }

    /// Where `path` leads (links followed), or the error as a short string.
    fn at(ws: &Workspace, path: &str) -> Result<Option<String>, String> {
        match ws.node(path, true) {
            Ok(node) => Ok(node.map(|n| n.location().to_string_lossy().into_owned())),
            Err(ResolveError::Escape) => Err("escape".into()),
            Err(err) => Err(err.errno().map_or_else(|| err.to_string(), |e| format!("{e:?}"))),
        }
    }

    fn found(location: &str) -> Result<Option<String>, String> {
        Ok(Some(location.to_owned()))
    }

    #[test]
    fn virtual_paths_and_parent_components() {
        let c = case();
        assert_eq!(at(&c.ws, "/sub/f"), found("sub/f"));
        assert_eq!(at(&c.ws, "sub/f"), found("sub/f"));
        assert_eq!(at(&c.ws, "/"), found(""));
        assert_eq!(at(&c.ws, ""), found(""));
        assert_eq!(at(&c.ws, "/./sub//f"), found("sub/f"));
        assert_eq!(at(&c.ws, "/sub/missing"), Ok(None));
        assert_eq!(at(&c.ws, "/nodir/missing"), Ok(None));
        for path in ["/../etc/passwd", "..", "sub/../../x", "sub/..", "/sub/../sub/f"] {
            assert_eq!(at(&c.ws, path), Err("escape".into()), "{path}");
        }
    }

    #[test]
    fn links_inside_are_followed_and_links_outside_refused() {
        let c = case();
        // Absolute targets are read as the machine's paths: inside the root's real path they work.
        assert_eq!(at(&c.ws, "/in/f"), found("sub/f"));
        assert_eq!(at(&c.ws, "/in"), found("sub"));
        assert_eq!(at(&c.ws, "/rel/f"), found("sub/f"));
        symlink(&c.root, c.root.join("self")).unwrap();
        assert_eq!(at(&c.ws, "/self/self/sub/f"), found("sub/f"));
        assert_eq!(at(&c.ws, "/out/secret"), Err("escape".into()));
        assert_eq!(at(&c.ws, "/out"), Err("escape".into()));
        // Not following the last link: the link itself is inside.
        let link = c.ws.node("/out", false).unwrap().unwrap();
        assert_eq!((link.kind(), link.location()), (Kind::Symlink, Path::new("out")));
        // Relative targets step back up the walked directories, never above the root.
        symlink("../file", c.root.join("sub/up")).unwrap();
        assert_eq!(at(&c.ws, "/sub/up"), found("file"));
        symlink("../../x", c.root.join("sub/esc")).unwrap();
        assert_eq!(at(&c.ws, "/sub/esc"), Err("escape".into()));
        symlink("../..", c.root.join("sub/escdir")).unwrap();
        assert_eq!(at(&c.ws, "/sub/escdir/etc"), Err("escape".into()));
        let up_out = format!("{}/../x", c.root.display());
        symlink(&up_out, c.root.join("absup")).unwrap();
        assert_eq!(at(&c.ws, "/absup"), Err("escape".into()));
        // A path that only shares a prefix of text with the root is outside.
        symlink(format!("{}x/f", c.root.display()), c.root.join("twin")).unwrap();
        assert_eq!(at(&c.ws, "/twin"), Err("escape".into()));
        // Dangling links lead nowhere; outside targets are refused before they are looked at.
        symlink("nowhere", c.root.join("dangling")).unwrap();
        assert_eq!(at(&c.ws, "/dangling"), Ok(None));
        symlink(c.outside.join("nothing"), c.root.join("outdangling")).unwrap();
        assert_eq!(at(&c.ws, "/outdangling"), Err("escape".into()));
    }

    #[test]
    fn trailing_slashes_loops_and_files_on_the_way() {
        let c = case();
        assert_eq!(at(&c.ws, "/file/"), Err("ENOTDIR".into()));
        assert_eq!(at(&c.ws, "/file/x"), Err("ENOTDIR".into()));
        assert_eq!(at(&c.ws, "/sub/f/"), Err("ENOTDIR".into()));
        assert_eq!(at(&c.ws, "/sub/"), found("sub"));
        // A trailing slash follows a last link even when asked not to.
        let node = c.ws.node("/in/", false).unwrap().unwrap();
        assert_eq!((node.kind(), node.location()), (Kind::Dir, Path::new("sub")));
        symlink("loop", c.root.join("loop")).unwrap();
        symlink("b", c.root.join("a")).unwrap();
        symlink("a", c.root.join("b")).unwrap();
        assert_eq!(at(&c.ws, "/loop"), Err("ELOOP".into()));
        assert_eq!(at(&c.ws, "/a/x"), Err("ELOOP".into()));
        // Making parents through a file fails as `mkdir -p` does.
        let err = c.ws.entry("/file/x/y", true).unwrap_err();
        assert_eq!(err.errno(), Some(Errno::EEXIST));
        assert_eq!(c.ws.entry("/x\0y", false).unwrap_err().errno(), Some(Errno::EINVAL));
    }

    #[test]
    fn parents_are_made_inside_the_root() {
        let c = case();
        let entry = c.ws.entry("/in/new/deeper/leaf", true).unwrap();
        assert_eq!(entry.name(), Some(c"leaf"));
        assert!(c.root.join("sub/new/deeper").is_dir());
        assert!(matches!(c.ws.entry("/out/new/leaf", true), Err(ResolveError::Escape)));
        assert!(!c.outside.join("new").exists());
        let entry = c.ws.entry("/", false).unwrap();
        assert_eq!(entry.name(), None);
    }

    #[test]
    fn made_directories_are_undone_deepest_first_while_empty() {
        let c = case();
        let (entry, made) = c.ws.entry_making("/in/a/b/leaf").unwrap();
        assert_eq!(entry.dir_location(), Path::new("sub/a/b"));
        assert!(c.root.join("sub/a/b").is_dir());
        made.undo();
        assert!(!c.root.join("sub/a").exists() && c.root.join("sub/f").is_file());
        // Only what this walk made: an existing parent stays; a filled directory stops the undo.
        let (_, made) = c.ws.entry_making("/sub/x/y/z/leaf").unwrap();
        std::fs::write(c.root.join("sub/x/y/mine"), "m").unwrap();
        made.undo();
        assert!(c.root.join("sub/x/y/mine").is_file() && !c.root.join("sub/x/y/z").exists());
        // A walk that fails after making some (a name too long) removes them itself.
        let err = c.ws.entry_making(&format!("/made/{}/leaf", "n".repeat(256))).unwrap_err();
        assert_eq!(err.errno(), Some(Errno::ENAMETOOLONG));
        assert!(!c.root.join("made").exists());
    }

    #[test]
    fn lookups_from_a_directory_node_keep_the_same_rules() {
        let c = case();
        let sub = c.ws.node("/sub", true).unwrap().unwrap();
        let found = |rel: &[u8]| c.ws.node_in(&sub, rel, true).map(|n| n.map(|n| n.location().to_owned()));
        assert_eq!(found(b"f").unwrap(), Some(PathBuf::from("sub/f")));
        assert!(matches!(found(b"../file"), Err(ResolveError::Escape)));
        symlink("../file", c.root.join("sub/up")).unwrap();
        assert_eq!(found(b"up").unwrap(), Some(PathBuf::from("file")));
        symlink(c.outside.join("secret"), c.root.join("sub/sec")).unwrap();
        assert!(matches!(found(b"sec"), Err(ResolveError::Escape)));
        assert_eq!(found(b"missing").unwrap(), None);
    }

    #[test]
    fn nodes_reopen_only_the_same_file() {
        let c = case();
        let node = c.ws.node("/sub/f", true).unwrap().unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut node.open(OFlag::O_RDONLY).unwrap(), &mut text).unwrap();
        assert_eq!(text, "in");
        // Swapped for a link (to a file outside) after the lookup: the reopen refuses it.
        std::fs::remove_file(c.root.join("sub/f")).unwrap();
        symlink(c.outside.join("secret"), c.root.join("sub/f")).unwrap();
        assert_eq!(node.open(OFlag::O_RDONLY).unwrap_err().raw_os_error(), Some(libc::ELOOP));
        // Swapped for another file: refused too.
        std::fs::remove_file(c.root.join("sub/f")).unwrap();
        std::fs::write(c.root.join("sub/f"), "other").unwrap();
        assert_eq!(node.open(OFlag::O_RDONLY).unwrap_err().raw_os_error(), Some(libc::ESTALE));
    }

    #[test]
    fn listing_and_child_opens_do_not_follow_links() {
        let c = case();
        let root = c.ws.node("/", true).unwrap().unwrap().open_dir().unwrap();
        let mut names: Vec<(String, Option<Kind>)> =
            list(&root).unwrap().into_iter().map(|ch| (ch.name_lossy(), ch.kind)).collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            names,
            [
                ("file".into(), Some(Kind::File)),
                ("in".into(), Some(Kind::Symlink)),
                ("out".into(), Some(Kind::Symlink)),
                ("rel".into(), Some(Kind::Symlink)),
                ("sub".into(), Some(Kind::Dir)),
            ]
        );
        assert!(open_child_dir(root.as_fd(), c"out").is_err());
        assert!(open_child_dir(root.as_fd(), c"sub").is_ok());
        symlink(c.outside.join("secret"), c.root.join("sec")).unwrap();
        assert!(open_child_file(root.as_fd(), c"sec").is_err());
        assert!(open_child_file(root.as_fd(), c"file").is_ok());
    }

    #[test]
    fn unconfined_paths_are_the_machines() {
        let c = case();
        let open = Workspace::open(c.root.clone());
        let rel = c.root.join("sub/f");
        let real = |path: &str| open.node(path, true).unwrap().map(|n| Path::new("/").join(n.location()));
        assert_eq!(real("sub/f"), Some(rel.clone()));
        assert_eq!(real("/etc/passwd"), Some(PathBuf::from("/etc/passwd")));
        assert_eq!(real("out/secret"), Some(c.outside.canonicalize().unwrap().join("secret")));
        assert_eq!(real("sub/../sub/f"), Some(rel));
        assert_eq!(real("/.."), Some(PathBuf::from("/")));
        assert_eq!(open.shown("x"), c.root.join("x"));
        assert_eq!(c.ws.shown("x"), PathBuf::from("/x"));
        assert_eq!(c.ws.shown("/x"), PathBuf::from("/x"));
    }
}
