//! Capture at the source: the command's merged output goes to a [`CaptureFile`] up to its cap, and
//! the rest is counted and dropped without passing through user space.
//!
//! Small outputs stay in memory (most commands print little, and a file per exec would cost a create
//! and an unlink); past [`SPILL_BYTES`] they move to the file. So output is never held whole in memory,
//! and what is held is bounded by the cap.
//!
//! Small output is read on the runtime. Once a capture outgrows memory or is full, the rest of its
//! pipe is drained by a thread of its own ([`Bulk`]): the capture file is never touched on the
//! runtime (creating it may truncate a large old file), and a
//! command writing gigabytes does not take the runtime thread from every other request. That thread
//! keeps up with the writer (a pipe kept nearly empty is the writer's cheapest: it never waits for
//! room), tries a pipe it found empty again for a few microseconds before it sleeps (a sleeping
//! reader costs the writer a wake-up per write, [`Pace`]), and runs at [`DRAIN_NICE`], so while the
//! machine is busy the CPU goes to requests first.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, openat, splice};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};
use tokio::net::unix::pipe::Receiver;
use tokio::sync::{mpsc, oneshot, watch};

/// Output up to this size stays in memory; beyond it the capture moves to its file.
pub const SPILL_BYTES: usize = 64 * 1024;

/// Read size from the pipe.
const READ_BYTES: usize = 256 * 1024;

/// Bytes read per call until one read fills them.
const FIRST_READ_BYTES: usize = 4 * 1024;

/// Linux's default pipe capacity: a read this large means the command fills the pipe.
const DEFAULT_PIPE_BYTES: usize = 64 * 1024;

/// Pipe capacity for commands that fill the default one (the kernel's default maximum).
const PIPE_BYTES: i32 = 1 << 20;

/// The nice value of the threads draining large outputs: a short command's spawn and reply beside a
/// flood get the CPU first, and the flood still gets a share (not starved, as `SCHED_IDLE` would be).
const DRAIN_NICE: libc::c_int = 10;

/// How long a draining thread keeps trying a pipe it found empty before it sleeps ([`Pace`]).
const SPIN: Duration = Duration::from_micros(20);

/// A draining thread whose pipe never runs dry looks at its stop once per this many moves.
const STOP_CHECK_MOVES: u32 = 64;

/// Stack of a draining thread: it calls no deep code.
const DRAIN_STACK_BYTES: usize = 256 * 1024;

/// Where a capture file lives: a name in a directory fd, resolved once. The file is created there
/// (`O_NOFOLLOW`) and removed there (`unlinkat`), so both reach the same place whatever happens to
/// the path in between, and never a link's target.
#[derive(Debug)]
pub struct CaptureTarget {
    /// Shared: every inline capture lives in agentd's own scratch directory.
    dir: Arc<OwnedFd>,
    name: CString,
    /// The path shown in results and messages.
    shown: PathBuf,
    /// The file, made ahead by whoever may make it ([`CaptureTarget::made`]).
    made: Option<File>,
    /// Made 0600, and only if the name is free: a file of agentd's own directory.
    private: bool,
}

impl CaptureTarget {
    /// A file the user asked for (an offload): made as any file is (0666 less the umask), replacing
    /// what is there.
    pub fn new(dir: Arc<OwnedFd>, name: CString, shown: PathBuf) -> Self {
        Self { dir, name, shown, made: None, private: false }
    }

    /// A file of agentd's own scratch directory (an inline capture, a journal): readable by agentd's
    /// user only, and a fresh file (`O_EXCL`), never one found there.
    pub fn private(dir: Arc<OwnedFd>, name: CString, shown: PathBuf) -> Self {
        Self { dir, name, shown, made: None, private: true }
    }

    /// The file made now, by the calling thread: where only the sandbox's own file work may make
    /// it (a server profile), agentd does not make it later as itself.
    pub fn made(mut self) -> io::Result<Self> {
        self.made = Some(self.create()?);
        Ok(self)
    }

    fn create(&self) -> io::Result<File> {
        if let Some(file) = &self.made {
            return file.try_clone();
        }
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
        let (flags, mode) = if self.private {
            (flags | OFlag::O_EXCL, Mode::S_IRUSR | Mode::S_IWUSR)
        } else {
            (flags | OFlag::O_TRUNC, Mode::from_bits_truncate(0o666))
        };
        Ok(File::from(openat(&*self.dir, self.name.as_c_str(), flags, mode)?))
    }

    /// Removes the file if there is one; a failure is only logged (the result is still good).
    fn remove_quietly(&self) {
        match unlinkat(&*self.dir, self.name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(err) => tracing::warn!(path = %self.shown.display(), "cannot remove capture file: {err}"),
        }
    }
}

/// The stored head of an exec's output.
#[derive(Debug)]
pub struct CaptureFile {
    target: CaptureTarget,
    cap: u64,
    memory: Vec<u8>,
    file: Option<File>,
    captured: u64,
    newlines: u64,
    total: u64,
    /// Why storing stopped before the cap, if it did: the file could not be made or written.
    failure: Option<String>,
    /// A kept exec's: told of every byte stored or dropped, so its [`Journal`] readers follow.
    progress: Option<watch::Sender<Progress>>,
    /// A kept exec's: what its [`Journal`] reads, the head in memory until it spills.
    shared: Option<Arc<Shared>>,
}

impl CaptureFile {
    /// A capture that will use `target` once it spills, storing at most `cap` bytes.
    pub fn new(target: CaptureTarget, cap: u64) -> Self {
        Self {
            target,
            cap,
            memory: Vec::new(),
            file: None,
            captured: 0,
            newlines: 0,
            total: 0,
            failure: None,
            progress: None,
            shared: None,
        }
    }

    /// A kept exec's capture, and the [`Journal`] that reads it from any offset while it grows and
    /// after the exec ended. Like any capture it holds up to [`SPILL_BYTES`] in memory (most
    /// commands print little: no file is made for them) and moves to its file past that; the
    /// journal reads whichever holds the bytes.
    pub fn journal(target: CaptureTarget, cap: u64) -> (Self, Journal) {
        let (progress, watch) = watch::channel(Progress::default());
        let shared = Arc::new(Shared::default());
        let journal = Journal {
            shared: Arc::clone(&shared),
            progress: watch,
            dir: Arc::clone(&target.dir),
            name: target.name.clone(),
        };
        let mut capture = Self::new(target, cap);
        capture.progress = Some(progress);
        capture.shared = Some(shared);
        (capture, journal)
    }

    /// Follows how far the capture is (made on the first call).
    pub fn watch(&mut self) -> watch::Receiver<Progress> {
        match &self.progress {
            Some(progress) => progress.subscribe(),
            None => {
                let (progress, watch) = watch::channel(Progress::default());
                self.progress = Some(progress);
                watch
            }
        }
    }

    /// Tells the journal's readers how far the capture is.
    fn publish(&self) {
        if let Some(progress) = &self.progress {
            progress.send_replace(Progress {
                stored: self.captured,
                total: self.total,
                full: self.is_full(),
            });
        }
    }

    /// Why storing stopped short of the cap (the capture file could not be created or written),
    /// naming the file: every byte written after it was dropped.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Bytes stored.
    pub fn captured(&self) -> u64 {
        self.captured
    }

    /// Bytes the command wrote in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// LF bytes among the stored bytes.
    pub fn newlines(&self) -> u64 {
        self.newlines
    }

    /// The capture reached its cap: more output is only counted.
    pub fn is_full(&self) -> bool {
        self.captured >= self.cap
    }

    /// Nothing was written to the file: every stored byte is in memory.
    pub fn in_memory(&self) -> bool {
        self.file.is_none()
    }

    /// Bytes that still fit in memory before the capture must spill to its file.
    fn memory_room(&self) -> usize {
        if self.file.is_some() { 0 } else { SPILL_BYTES.saturating_sub(self.memory.len()) }
    }

    /// More output would be written to the file or only counted: the bulk of a large output.
    fn past_memory(&self) -> bool {
        self.memory_room() == 0 || self.is_full()
    }

    /// The capture file's path as the client named it (absolute).
    pub fn path(&self) -> &Path {
        &self.target.shown
    }

    /// Stores what fits under the cap and counts all of `data`. A file that cannot be made or
    /// written ends the storing, not the exec: the capture counts as full from then on, so the pipe
    /// keeps being drained and the command never sees a closed pipe, and [`Self::failure`] says why
    /// (the result must not pass for complete).
    pub fn accept(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let room = usize::try_from(self.cap - self.captured.min(self.cap)).unwrap_or(usize::MAX);
        let kept = &data[..data.len().min(room)];
        if kept.is_empty() {
            return self.publish();
        }
        if let Err(err) = self.store(kept) {
            let failure = self.failed(&err);
            tracing::warn!("{failure}");
            self.failure = Some(failure);
            self.cap = self.captured;
            return self.publish();
        }
        self.newlines += memchr::memchr_iter(b'\n', kept).count() as u64;
        self.captured += kept.len() as u64;
        self.publish();
    }

    fn store(&mut self, kept: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(file) => file.write_all(kept)?,
            None if self.memory.len() + kept.len() <= SPILL_BYTES => {
                self.memory.extend_from_slice(kept);
                if let Some(shared) = &self.shared {
                    lock(&shared.memory).extend_from_slice(kept);
                }
            }
            None => {
                let mut file = self.target.create()?;
                file.write_all(&self.memory)?;
                file.write_all(kept)?;
                self.memory = Vec::new();
                if let Some(shared) = &self.shared {
                    // Readers go to the file from now on; what memory held is in it already.
                    let _ = shared.file.set(file.try_clone()?);
                    *lock(&shared.memory) = Vec::new();
                }
                self.file = Some(file);
            }
        }
        Ok(())
    }

    /// The reason told for `err`, which stopped the storing.
    fn failed(&self, err: &io::Error) -> String {
        let (verb, at) = match self.file {
            None => ("created", String::new()),
            Some(_) => ("written", format!(" past {} bytes", self.captured)),
        };
        format!("the capture file {} cannot be {verb}{at}: {err}", self.target.shown.display())
    }

    /// Counts bytes that were dropped without being read.
    pub fn count_dropped(&mut self, n: u64) {
        self.total += n;
        self.publish();
    }

    /// `len` stored bytes from `offset` (fewer at the end).
    pub fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let end = self.captured.min(offset.saturating_add(len as u64));
        let len = usize::try_from(end.saturating_sub(offset)).unwrap_or(0);
        match &self.file {
            None => {
                // In memory: the offset of a stored byte fits a `usize`.
                let from = usize::try_from(offset).unwrap_or(usize::MAX);
                Ok(self.memory.get(from..from.saturating_add(len)).unwrap_or_default().to_vec())
            }
            Some(file) => {
                let mut buf = vec![0; len];
                file.read_exact_at(&mut buf, offset)?;
                Ok(buf)
            }
        }
    }

    /// Everything stored.
    pub fn bytes(&self) -> io::Result<Vec<u8>> {
        match &self.file {
            None => Ok(self.memory.clone()),
            Some(file) => {
                let mut buf = vec![0; usize::try_from(self.captured).unwrap_or(0)];
                file.read_exact_at(&mut buf, 0)?;
                Ok(buf)
            }
        }
    }

    /// Everything stored; the file, if this capture created one, is removed.
    pub fn into_bytes(self) -> io::Result<Vec<u8>> {
        if self.file.is_none() {
            return Ok(self.memory);
        }
        let bytes = self.bytes()?;
        self.discard();
        Ok(bytes)
    }

    /// Makes sure the stored bytes are in the file at [`Self::path`], which is kept. When the file
    /// cannot be made, the bytes stay in memory and [`Self::failure`] says why.
    pub fn persist(&mut self) -> io::Result<()> {
        if self.file.is_none() {
            let made = self.target.create().and_then(|mut file| {
                file.write_all(&self.memory)?;
                Ok(file)
            });
            match made {
                Ok(file) => {
                    self.memory = Vec::new();
                    self.file = Some(file);
                }
                Err(err) => {
                    self.failure = Some(self.failed(&err));
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Removes the file, if it exists (a file left at the path from before included).
    pub fn discard(self) {
        self.target.remove_quietly();
    }
}

/// How far a kept exec's capture is: what its [`Journal`] can give.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes in the journal: offsets `0..stored` can be read.
    pub stored: u64,
    /// Bytes the command wrote; past `stored` they were dropped (the cap), never to be read.
    pub total: u64,
    /// The journal reached its cap: what comes from now on is only counted.
    pub full: bool,
}

/// A kept exec's output on disk, read from any byte offset while the exec writes it and after it
/// ended, by any number of readers. Memory does not grow with the output: a reader holds what it
/// reads, a chunk at a time.
#[derive(Debug)]
pub struct Journal {
    shared: Arc<Shared>,
    progress: watch::Receiver<Progress>,
    dir: Arc<OwnedFd>,
    name: CString,
}

impl Journal {
    /// How far the capture is now.
    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    /// Follows the capture: changes each time it stores or drops bytes.
    pub fn watch(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }

    /// Up to `len` stored bytes from `offset` (fewer at what is stored so far). Blocking: a `pread`.
    pub fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let end = self.progress().stored.min(offset.saturating_add(len as u64));
        let mut buf = vec![0; usize::try_from(end.saturating_sub(offset)).unwrap_or(0)];
        // Under the lock the spill cannot pass unseen: the file is set before memory is emptied.
        let memory = lock(&self.shared.memory);
        match self.shared.file.get() {
            Some(file) => {
                drop(memory);
                file.read_exact_at(&mut buf, offset)?;
            }
            None => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                let bytes = memory.get(start..start.saturating_add(buf.len())).unwrap_or_default();
                buf.truncate(bytes.len());
                buf.copy_from_slice(bytes);
            }
        }
        Ok(buf)
    }

    /// Removes the journal's file (its bytes go once no reader holds it open).
    pub fn remove(&self) {
        match unlinkat(&*self.dir, self.name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(err) => tracing::warn!("cannot remove a journal: {err}"),
        }
    }
}

/// What a capture and its journal's readers share: the head while it is in memory, then the file.
#[derive(Debug, Default)]
struct Shared {
    memory: Mutex<Vec<u8>>,
    file: OnceLock<File>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the drain did when it stopped.
pub enum DrainEnd {
    /// The pipe reached EOF: every writer is gone.
    Eof,
    /// Stopped on request; the rest of the pipe is discarded in the background.
    Stopped,
}

/// Where live output goes, chunk by chunk.
type LiveSender = mpsc::Sender<Vec<u8>>;

/// The capture, how the drain ended, and a read error that ended it early (the capture holds what
/// came before).
pub type Drained = (CaptureFile, DrainEnd, io::Result<()>);

/// Reads the command's output pipe into `capture` until EOF or until `stop` fires, sending each
/// stored chunk to `live` as well. After `stop`, any writer still holding the pipe (a background
/// grandchild) keeps being drained to nowhere, so it never blocks or gets SIGPIPE. `Err`: the
/// draining thread was lost, and the capture with it.
pub async fn drain(
    pipe: OwnedFd,
    mut capture: CaptureFile,
    mut live: Option<LiveSender>,
    mut stop: oneshot::Receiver<()>,
) -> io::Result<Drained> {
    // A pipe or a terminal's master side, non-blocking already: tokio's pipe type reads either.
    let mut pipe = match Receiver::from_owned_fd_unchecked(pipe) {
        Ok(pipe) => pipe,
        Err(err) => return Ok((capture, DrainEnd::Eof, Err(err))),
    };
    // Small until the command writes more than a trickle: thousands of quiet execs in flight then
    // hold a few KiB each, not a 256 KiB buffer each.
    let mut buf = vec![0u8; FIRST_READ_BYTES];
    let mut widened = false;
    let mut bulk_tried = false;
    loop {
        if capture.past_memory() && !bulk_tried {
            bulk_tried = true;
            match Bulk::start(pipe, capture, live) {
                Ok(running) => return running.finish(stop).await,
                // No thread to be had: the runtime goes on draining.
                Err(Unstarted::Parts(parts)) => (pipe, capture, live) = *parts,
                Err(Unstarted::Lost(err)) => return Err(err),
            }
        }
        // Until the thread has the pipe, the runtime reads no more than fits in memory (spilling to
        // the file is the thread's work); when no thread could be had, it reads on.
        let room = if bulk_tried { buf.len() } else { buf.len().min(capture.memory_room()) };
        let step = tokio::select! {
            biased;
            step = read_step(&pipe, &mut capture, &mut buf[..room], live.as_ref()) => step,
            _ = &mut stop => {
                tokio::spawn(discard_rest(pipe));
                return Ok((capture, DrainEnd::Stopped, Ok(())));
            }
        };
        match step {
            Ok(Some(moved)) => {
                // Only a command that fills the default pipe gets the bigger one (fewer wakeups per
                // megabyte); a command that prints a line does not pay for it.
                if buf.len() < READ_BYTES && moved >= room {
                    buf.resize(READ_BYTES, 0);
                }
                if !widened && moved >= DEFAULT_PIPE_BYTES {
                    widened = true;
                    widen(&pipe);
                }
            }
            Ok(None) => return Ok((capture, DrainEnd::Eof, Ok(()))),
            Err(err) => return Ok((capture, DrainEnd::Eof, Err(err))),
        }
    }
}

/// One read (or, once the capture is full, one splice to /dev/null): the bytes moved, `None` at EOF.
async fn read_step(
    pipe: &Receiver,
    capture: &mut CaptureFile,
    buf: &mut [u8],
    live: Option<&LiveSender>,
) -> io::Result<Option<usize>> {
    pipe.readable().await?;
    match pipe.try_io(|| step(pipe, capture, buf)) {
        Ok(Moved::Eof) => Ok(None),
        Ok(Moved::Dropped(n)) => Ok(Some(n)),
        Ok(Moved::Read(n)) => {
            if let Some(live) = live {
                // A client that went away must not stop the capture.
                let _ = live.send(buf[..n].to_vec()).await;
            }
            Ok(Some(n))
        }
        Err(err) if matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
            Ok(Some(0))
        }
        Err(err) => Err(err),
    }
}

/// What one [`step`] moved.
enum Moved {
    /// Bytes read into the capture; they are in `buf[..n]`.
    Read(usize),
    /// Bytes dropped (the capture is full): only counted.
    Dropped(usize),
    Eof,
}

/// Moves what the pipe holds: into the capture, or once it is full, to /dev/null inside the kernel.
fn step(pipe: &impl AsFd, capture: &mut CaptureFile, buf: &mut [u8]) -> io::Result<Moved> {
    if capture.is_full() {
        let n = splice_to_null(pipe)?;
        capture.count_dropped(n as u64);
        return Ok(if n == 0 { Moved::Eof } else { Moved::Dropped(n) });
    }
    let n = match nix::unistd::read(pipe, buf) {
        Ok(n) => n,
        // A terminal's master side once no process holds the terminal open: its EOF.
        Err(Errno::EIO) => 0,
        Err(Errno::EAGAIN) => return Err(io::ErrorKind::WouldBlock.into()),
        Err(err) => return Err(err.into()),
    };
    capture.accept(&buf[..n]);
    Ok(if n == 0 { Moved::Eof } else { Moved::Read(n) })
}

/// The bulk of a large output, drained on a thread of its own.
struct Bulk {
    /// The read end (non-blocking).
    pipe: OwnedFd,
    capture: CaptureFile,
    live: Option<LiveSender>,
    /// Hangs up when the exec stops waiting for EOF: the capture goes back then.
    stop: OwnedFd,
    done: oneshot::Sender<Drained>,
}

/// A started [`Bulk`]: dropping `stop` asks for the capture back.
struct BulkRunning {
    stop: OwnedFd,
    done: oneshot::Receiver<Drained>,
}

/// Why a [`Bulk`] did not start.
enum Unstarted {
    /// No thread (or stop pipe) could be made: the parts come back to the runtime.
    Parts(Box<(Receiver, CaptureFile, Option<LiveSender>)>),
    /// The pipe could not be taken off the runtime after the thread started.
    Lost(io::Error),
}

impl Bulk {
    /// Hands the pipe to a new thread.
    fn start(
        pipe: Receiver,
        capture: CaptureFile,
        live: Option<LiveSender>,
    ) -> Result<BulkRunning, Unstarted> {
        let (stop_read, stop_write) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
            Ok(ends) => ends,
            Err(err) => {
                tracing::warn!("no stop pipe for a large output, the runtime drains it: {err}");
                return Err(Unstarted::Parts(Box::new((pipe, capture, live))));
            }
        };
        let (done, done_rx) = oneshot::channel();
        let (hand, taken) = std::sync::mpsc::sync_channel::<Bulk>(1);
        let spawned = std::thread::Builder::new()
            .name("agentd-drain".to_owned())
            .stack_size(DRAIN_STACK_BYTES)
            .spawn(move || {
                settle_drain_thread();
                if let Ok(bulk) = taken.recv() {
                    bulk.run();
                }
            });
        if let Err(err) = spawned {
            tracing::warn!("no thread for a large output, the runtime drains it: {err}");
            return Err(Unstarted::Parts(Box::new((pipe, capture, live))));
        }
        let pipe = pipe.into_nonblocking_fd().map_err(Unstarted::Lost)?;
        widen(&pipe);
        // The thread waits for exactly this message.
        let _ = hand.send(Bulk { pipe, capture, live, stop: stop_read, done });
        Ok(BulkRunning { stop: stop_write, done: done_rx })
    }

    fn run(self) {
        let Bulk { pipe, mut capture, live, stop, done } = self;
        let mut buf = vec![0u8; READ_BYTES];
        let mut pace = Pace::new(pipe.as_fd(), Some(stop.as_fd()));
        let (end, result) = loop {
            let stopped = match step(&pipe, &mut capture, &mut buf) {
                Ok(Moved::Eof) => break (DrainEnd::Eof, Ok(())),
                Ok(moved) => {
                    if let (Moved::Read(n), Some(live)) = (moved, &live) {
                        // A client that went away must not stop the capture.
                        let _ = live.blocking_send(buf[..n].to_vec());
                    }
                    pace.moved()
                }
                Err(err) if matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                    match pace.empty() {
                        Ok(stopped) => stopped,
                        Err(err) => break (DrainEnd::Eof, Err(err)),
                    }
                }
                Err(err) => break (DrainEnd::Eof, Err(err)),
            };
            if stopped {
                let _ = done.send((capture, DrainEnd::Stopped, Ok(())));
                discard(&pipe);
                return;
            }
        };
        let _ = done.send((capture, end, result));
    }
}

/// When a draining thread that found its pipe empty tries it again, and when it looks at its stop.
///
/// A reader asleep on an empty pipe is woken by the next write: a context switch on each side for
/// every write (every 8 KiB, for `head`), which took a fast writer's pipe to half its speed here.
/// So a drain that finds its pipe empty tries it again for [`SPIN`] before it sleeps in `poll`: a
/// fast writer's next write comes within microseconds, and a slow one costs the drain at most that
/// much CPU per write.
struct Pace<'a> {
    pipe: BorrowedFd<'a>,
    /// Hangs up (or becomes readable) when the drain is to stop.
    stop: Option<BorrowedFd<'a>>,
    /// When the pipe was first found empty, since it last held anything.
    empty_since: Option<Instant>,
    /// Moves since `stop` was last looked at.
    moves: u32,
}

impl<'a> Pace<'a> {
    fn new(pipe: BorrowedFd<'a>, stop: Option<BorrowedFd<'a>>) -> Self {
        Self { pipe, stop, empty_since: None, moves: 0 }
    }

    /// After a move: `true` when the drain is to stop (looked at once per [`STOP_CHECK_MOVES`], so
    /// that a writer that never lets the pipe go empty cannot keep the drain from seeing it).
    fn moved(&mut self) -> bool {
        self.empty_since = None;
        self.moves += 1;
        if self.moves < STOP_CHECK_MOVES {
            return false;
        }
        self.moves = 0;
        self.stop.is_some_and(|stop| {
            let mut fds = [PollFd::new(stop, PollFlags::POLLIN)];
            matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        })
    }

    /// After finding the pipe empty: returns at once while within [`SPIN`] of the first time it
    /// was found so, and otherwise sleeps until the pipe holds something, hangs up, or `stop` fires
    /// (`Ok(true)`).
    fn empty(&mut self) -> io::Result<bool> {
        let since = *self.empty_since.get_or_insert_with(Instant::now);
        if since.elapsed() < SPIN {
            std::hint::spin_loop();
            return Ok(false);
        }
        self.empty_since = None;
        self.moves = 0;
        // Without a stop, only the first entry is polled (the second is a placeholder).
        let mut fds = [
            PollFd::new(self.pipe, PollFlags::POLLIN),
            PollFd::new(self.stop.unwrap_or(self.pipe), PollFlags::POLLIN),
        ];
        let polled = if self.stop.is_some() { 2 } else { 1 };
        match poll(&mut fds[..polled], PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(err) => return Err(err.into()),
        }
        Ok(self.stop.is_some() && fds[1].any().unwrap_or(true))
    }
}

impl BulkRunning {
    /// The drained capture: at EOF, or as soon as `stop` fires (the thread then discards the rest).
    async fn finish(self, stop: oneshot::Receiver<()>) -> io::Result<Drained> {
        let BulkRunning { stop: hang_up, mut done } = self;
        let lost = |_| io::Error::other("the thread draining the output ended without its capture");
        tokio::select! {
            drained = &mut done => drained.map_err(lost),
            _ = stop => {
                drop(hang_up);
                done.await.map_err(lost)
            }
        }
    }
}

/// Moves up to 1 MiB from the pipe to /dev/null inside the kernel.
fn splice_to_null(pipe: &impl AsFd) -> io::Result<usize> {
    let null = dev_null()?;
    match splice(pipe.as_fd(), None, null.as_fd(), None, PIPE_BYTES as usize, SpliceFFlags::SPLICE_F_NONBLOCK)
    {
        Ok(n) => Ok(n),
        Err(Errno::EAGAIN) => Err(io::ErrorKind::WouldBlock.into()),
        // /dev/null that cannot be spliced to, or a terminal (splice needs a pipe).
        Err(Errno::EINVAL) => read_to_nowhere(pipe),
        Err(err) => Err(err.into()),
    }
}

/// Fallback for kernels whose /dev/null cannot be spliced to, and for terminals.
fn read_to_nowhere(pipe: &impl AsFd) -> io::Result<usize> {
    let mut buf = [0u8; 64 * 1024];
    match nix::unistd::read(pipe, &mut buf) {
        Ok(n) => Ok(n),
        Err(Errno::EIO) => Ok(0),
        Err(Errno::EAGAIN) => Err(io::ErrorKind::WouldBlock.into()),
        Err(err) => Err(err.into()),
    }
}

fn dev_null() -> io::Result<&'static File> {
    static NULL: OnceLock<File> = OnceLock::new();
    if let Some(null) = NULL.get() {
        return Ok(null);
    }
    let file = OpenOptions::new().write(true).open("/dev/null")?;
    Ok(NULL.get_or_init(|| file))
}

/// Drains the pipe to nowhere until its last writer is gone: on the runtime while the writer (a
/// background process left by a finished command) trickles, on a thread of its own once it floods.
async fn discard_rest(pipe: Receiver) {
    let mut moved = 0;
    while moved <= SPILL_BYTES {
        if pipe.readable().await.is_err() {
            return;
        }
        match pipe.try_io(|| splice_to_null(&pipe)) {
            Ok(0) => return,
            Ok(n) => moved += n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
    if let Ok(pipe) = pipe.into_nonblocking_fd() {
        discard_on_thread(pipe);
    }
}

/// Drains the pipe to nowhere until its last writer is gone, on a thread of its own. With no thread
/// to be had the pipe is closed: a writer left then gets EPIPE.
fn discard_on_thread(pipe: OwnedFd) {
    let spawned = std::thread::Builder::new()
        .name("agentd-discard".to_owned())
        .stack_size(DRAIN_STACK_BYTES)
        .spawn(move || {
            settle_drain_thread();
            widen(&pipe);
            discard(&pipe);
        });
    if let Err(err) = spawned {
        tracing::warn!("no thread to drain a background process's output, its pipe is closed: {err}");
    }
}

/// Gives a large output the large pipe (the writer waits for room less often), where the system
/// allows it; otherwise the pipe keeps its size.
fn widen(pipe: &impl AsFd) {
    let _ = fcntl(pipe.as_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
}

/// Readies a thread that drains a large output: signals stay with the runtime thread, and the thread
/// yields the CPU to requests ([`DRAIN_NICE`]). Nice values are per thread on Linux.
fn settle_drain_thread() {
    crate::reaper::keep_signals_off_this_thread();
    let tid = nix::unistd::gettid().as_raw();
    // A thread id is positive; 0 (not reached) would name the calling thread too.
    let tid = libc::id_t::try_from(tid).unwrap_or(0);
    // SAFETY: setpriority takes plain integers and touches no memory of ours. Failing (a seccomp
    // filter of the host's, say) only leaves the thread at the runtime's priority.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, DRAIN_NICE) };
}

/// Splices the pipe to /dev/null until EOF (or an error).
fn discard(pipe: &OwnedFd) {
    let mut pace = Pace::new(pipe.as_fd(), None);
    loop {
        match splice_to_null(pipe) {
            Ok(0) => return,
            Ok(_) => {
                pace.moved();
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                if pace.empty().is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(dir: &Path, name: &str) -> CaptureTarget {
        let fd = nix::fcntl::open(dir, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        CaptureTarget::new(Arc::new(fd), CString::new(name).unwrap(), dir.join(name))
    }

    #[test]
    fn stores_up_to_the_cap_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut capture = CaptureFile::new(target(dir.path(), "c"), 100_000);
        for _ in 0..30 {
            capture.accept(&[b'x'; 9_999]);
            capture.accept(b"\n");
        }
        capture.count_dropped(5);
        assert_eq!((capture.captured(), capture.total(), capture.newlines()), (100_000, 300_005, 10));
        assert!(capture.is_full());
        assert!(dir.path().join("c").exists(), "past SPILL_BYTES the capture is a file");
        assert_eq!(capture.read_at(99_998, 10).unwrap(), b"x\n");
        let bytes = capture.into_bytes().unwrap();
        assert_eq!(bytes.len(), 100_000);
        assert!(!dir.path().join("c").exists());
    }

    #[test]
    fn a_private_capture_is_a_fresh_file_only_its_owner_reads() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let private = |name: &str| {
            let fd = nix::fcntl::open(dir.path(), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
            CaptureTarget::private(Arc::new(fd), CString::new(name).unwrap(), dir.path().join(name))
        };
        let made = private("journal-0").made().unwrap();
        let mode = std::fs::metadata(dir.path().join("journal-0")).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o600);
        drop(made);
        // A name already there (planted) is refused, never opened.
        std::fs::write(dir.path().join("capture-1"), "planted").unwrap();
        assert_eq!(private("capture-1").made().unwrap_err().raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read_to_string(dir.path().join("capture-1")).unwrap(), "planted");
    }

    #[test]
    fn small_output_never_touches_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut capture = CaptureFile::new(target(dir.path(), "c"), 10);
        capture.accept(b"hello\nworld\n");
        assert_eq!((capture.captured(), capture.total(), capture.newlines()), (10, 12, 1));
        assert!(!dir.path().join("c").exists());
        capture.persist().unwrap();
        assert_eq!(std::fs::read(dir.path().join("c")).unwrap(), b"hello\nworl");
    }

    #[test]
    fn a_failing_disk_stops_storing_but_keeps_counting() {
        // A directory removed after its fd was taken: nothing can be created in it.
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        std::fs::create_dir(&gone).unwrap();
        let target = target(&gone, "c");
        std::fs::remove_dir(&gone).unwrap();
        let mut capture = CaptureFile::new(target, 1 << 20);
        capture.accept(&[b'a'; SPILL_BYTES]);
        capture.accept(b"more");
        capture.accept(b"and more");
        assert!(capture.is_full(), "the pipe must go on being drained");
        assert_eq!((capture.captured(), capture.total()), (SPILL_BYTES as u64, SPILL_BYTES as u64 + 12));
        let why = format!("the capture file {} cannot be created: ", gone.join("c").display());
        assert!(
            capture.failure().is_some_and(|failure| failure.starts_with(&why)),
            "{:?}",
            capture.failure()
        );
        assert_eq!(capture.into_bytes().unwrap().len(), SPILL_BYTES);
    }

    #[test]
    fn the_file_is_made_and_removed_in_its_directory_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "keep").unwrap();
        std::os::unix::fs::symlink(outside.path().join("victim"), dir.path().join("c")).unwrap();
        let mut capture = CaptureFile::new(target(dir.path(), "c"), 10);
        capture.accept(b"data");
        let err = capture.persist().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        capture.discard();
        assert_eq!(std::fs::read_to_string(outside.path().join("victim")).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(dir.path().join("c")).is_err(), "the link itself is removed");
    }

    #[test]
    fn a_drain_whose_pipe_never_runs_dry_still_sees_its_stop() {
        let (pipe, _writer) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let (stop, hang_up) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let mut pace = Pace::new(pipe.as_fd(), Some(stop.as_fd()));
        assert!((0..10 * STOP_CHECK_MOVES).all(|_| !pace.moved()), "no stop asked for yet");
        drop(hang_up);
        assert!((0..STOP_CHECK_MOVES).any(|_| pace.moved()), "the stop is seen between moves");
    }

    #[test]
    fn an_empty_pipe_is_waited_for_until_the_stop_or_the_writer_comes() {
        let (pipe, writer) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let (stop, hang_up) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let mut pace = Pace::new(pipe.as_fd(), Some(stop.as_fd()));
        // Within the spin it returns at once; then it sleeps in poll until one of them comes.
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(hang_up);
        });
        let began = Instant::now();
        while !pace.empty().unwrap() {
            assert!(began.elapsed() < Duration::from_secs(10), "the stop was never seen");
        }
        assert!(stopper.join().is_ok());
        // A hung-up pipe wakes it too, past the spin (the caller then reads its EOF).
        let mut pace = Pace::new(pipe.as_fd(), None);
        drop(writer);
        let began = Instant::now();
        while began.elapsed() < 10 * SPIN {
            assert!(!pace.empty().unwrap());
        }
    }
}
