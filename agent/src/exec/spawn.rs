//! Starting `/bin/sh -c COMMAND` in a new session: `clone(CLONE_VM)`, the child's steps, `execve`.
//!
//! The child shares agentd's memory until its exec, as in glibc's `posix_spawn`: no page tables are
//! copied and no copy-on-write faults follow, which measured about 60–200 µs faster per exec than
//! std's `fork` path. Unlike `posix_spawn` (and `vfork`), the parent does not wait for the exec: it
//! goes on serving while the child works through its steps and exec. The kernel clears a word of the
//! child's once the child is done with agentd's memory (`CLONE_CHILD_CLEARTID`: at its exec, or its
//! exit, before either is seen), and only then is what the child read given back ([`Launch`]). A
//! command's exit comes later still, so most commands are never waited for; a streamed one waits
//! for the word before `exec_started` is sent ([`Launch::exec_done`]). Waiting in the clone cost the
//! runtime thread a median 69–129 µs per spawn, and the whole life of `sh -c true` (about 1 ms) at
//! the 90th percentile, when the scheduler woke the parent on the child's CPU; every other request
//! waited with it.
//!
//! agentd makes the clone itself because a command under a profile needs steps `posix_spawn` cannot
//! express (cgroup, rlimits, landlock, seccomp), and because what every spawn needs is kept across
//! spawns ([`Spawner`]): the children's stacks, which glibc maps and unmaps on every call.
//!
//! The child, on data prepared before the clone, makes raw system calls only ([`crate::syscall`]: it
//! runs beside the thread that cloned it, on that thread's `errno`): default dispositions for the
//! signals agentd ignores or handles (Rust ignores SIGPIPE, and ignored signals survive `exec`; the
//! set is read once, [`altered_signals`]), stdio, every other descriptor close-on-exec, working
//! directory, a new session, the profile's steps ([`ChildSteps::enter`]), an empty signal mask, and
//! the exec.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::fd::{AsRawFd as _, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentd_protocol::profile::Enforcement;
use nix::unistd::Pid;

use crate::syscall;

use crate::confine::{ChildStatus, ChildSteps};

/// agentd's environment as `KEY=VALUE` C strings, built once: it does not change after start-up
/// (the token was removed before), and every exec starts from it.
#[derive(Debug)]
pub struct BaseEnv {
    entries: Vec<CString>,
}

impl BaseEnv {
    pub fn capture() -> Self {
        let entries = std::env::vars_os()
            .filter_map(|(key, value)| {
                let mut entry = key.into_vec();
                entry.push(b'=');
                entry.extend_from_slice(value.as_bytes());
                CString::new(entry).ok()
            })
            .collect();
        Self { entries }
    }
}

/// What to start.
pub struct Shell<'a> {
    /// With a profile: only these variables of `base_env` are passed (`None`: all).
    pub env_allowlist: Option<&'a [String]>,
    /// With a profile: variables every command gets, before the request's own.
    pub fixed_env: &'a BTreeMap<String, String>,
    pub command: &'a str,
    /// The working directory, opened (`O_PATH`): the child changes into this fd, not into a path.
    pub cwd: BorrowedFd<'a>,
    /// agentd's own environment (which no longer holds the token).
    pub base_env: &'a Arc<BaseEnv>,
    /// Added to `base_env`, replacing variables of the same name.
    pub env: &'a BTreeMap<String, String>,
    /// `(name, value)` of the exec tag.
    pub tag: (&'a str, &'a str),
    /// Read end for the child's stdin; `None`: `/dev/null`.
    pub stdin: Option<&'a OwnedFd>,
    /// Write end the child's stdout and stderr both go to.
    pub output: &'a OwnedFd,
    /// `output` (and `stdin`) is a terminal's side: the shell makes it its controlling terminal.
    pub terminal: bool,
}

fn cstring(bytes: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a command, path or variable"))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) }
}

/// What every spawn reuses: the stacks children run on until their exec. Mapping a stack per spawn
/// cost its page faults and, on unmapping, a TLB flush on every CPU agentd ran on.
pub struct Spawner {
    stacks: Arc<Mutex<Vec<ChildStack>>>,
    /// The standard signals a child sets back to their default action ([`altered_signals`]), read
    /// at the first spawn.
    altered: std::sync::OnceLock<Altered>,
}

/// Stacks kept for the next children; more are mapped while more children are between clone and
/// exec at once, and unmapped once they are done.
const KEPT_STACKS: usize = 16;

impl Spawner {
    /// Also resets, in agentd itself, every real-time signal it inherited ignored: agentd never
    /// sets one's disposition (nor do its crates), so they all stay at their default from here on
    /// and a child resets only the standard signals that are not at theirs.
    pub fn new() -> Self {
        reset_ignored_realtime_signals();
        Self { stacks: Arc::new(Mutex::new(Vec::new())), altered: std::sync::OnceLock::new() }
    }

    /// Starts the shell: returns at once, with its pid (also its session and process group id) and
    /// the [`Launch`] to await before anything is said of it. With `steps`, the child applies the
    /// profile's steps before its exec.
    ///
    /// The child borrows the parent's memory, page tables included, until it execs, so nothing is
    /// copied, and it hands back what it measured through that memory. The parent does not wait
    /// for the exec (no `CLONE_VFORK`): everything the child reads is owned by the `Launch`, which
    /// keeps it until the child exec'd or exited (see [`Launch::conclude`]).
    ///
    /// Every descriptor agentd holds at the clone is copied into the child until its exec, so make
    /// a command's pipe and close agentd's copies of its child's ends in one step with this call,
    /// with no other spawn between: no child then holds another command's pipe.
    ///
    /// Call with the reaper's lock held ([`crate::reaper::Reaper::spawn`]), so the pid is registered
    /// before anyone reaps it.
    pub fn spawn(&self, shell: &Shell<'_>, steps: Option<ChildSteps>) -> io::Result<Launch> {
        let program = cstring("/bin/sh")?;
        let argv_owned = vec![cstring("/bin/sh")?, cstring("-c")?, cstring(shell.command)?];
        let mut argv: Vec<*const libc::c_char> = argv_owned.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let added = added_env(shell)?;
        let mut envp = inherited_env(shell);
        envp.extend(added.iter().map(|e| e.as_ptr()));
        envp.push(std::ptr::null());
        // Opened for each command, not shared: one open file description among all commands would
        // share its flags (and locks) between them.
        let dev_null;
        let stdin = match shell.stdin {
            Some(stdin) => stdin.as_raw_fd(),
            None => {
                dev_null = std::fs::File::open("/dev/null")?;
                dev_null.as_raw_fd()
            }
        };
        // Set to 0 by the kernel, with a futex wake, once the child is done with our memory: at its
        // exec or its exit (`CLONE_CHILD_CLEARTID`).
        let done = Arc::new(AtomicI32::new(IN_USE));
        let stack = match self.stacks.lock().unwrap_or_else(PoisonError::into_inner).pop() {
            Some(stack) => stack,
            None => ChildStack::new()?,
        };
        let steps = steps.map(Box::new);
        let mut context = Box::new(Context {
            altered: *self.altered.get_or_init(altered_signals),
            program: program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            stdin,
            output: shell.output.as_raw_fd(),
            terminal: shell.terminal,
            cwd: shell.cwd.as_raw_fd(),
            steps: steps.as_deref().map(std::ptr::from_ref),
            status: ChildStatus::default(),
            errno: 0,
        });
        let pid = {
            // Every signal blocked across the clone: the child runs on our memory with our handlers
            // until it has reset them, and a handler must not run there. Restored right after.
            let _blocked = BlockedSignals::all()?;
            // SAFETY: `child` runs on its own stack (`stack`, which no other child uses until this
            // one is done), gets `context`, and reads only what the `Launch` below owns and keeps
            // until the child exec'd or exited (`done` tells). It makes raw system calls only
            // ([`crate::syscall`]): nothing of this thread's (its `errno`, its locks) is touched
            // while both run. `done` outlives the child's use of it (the `Launch` keeps it).
            unsafe {
                libc::clone(
                    child,
                    stack.top(),
                    libc::CLONE_VM | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD,
                    std::ptr::from_mut(&mut *context).cast(),
                    std::ptr::null_mut::<libc::pid_t>(),
                    std::ptr::null_mut::<libc::c_void>(),
                    done.as_ptr(),
                )
            }
        };
        if pid < 0 {
            let err = io::Error::last_os_error();
            self.stacks.lock().unwrap_or_else(PoisonError::into_inner).push(stack);
            return Err(err);
        }
        let kept = Kept {
            context,
            stack: Some(stack),
            stacks: Arc::clone(&self.stacks),
            _strings: Strings {
                _program: program,
                _argv: argv_owned,
                _added: added,
                _argv_pointers: argv,
                _envp: envp,
                _base_env: Arc::clone(shell.base_env),
            },
            steps,
        };
        Ok(Launch { pid: Pid::from_raw(pid), done, kept: ManuallyDrop::new(kept) })
    }
}

/// `done` while the child may still read the `Launch`'s memory.
const IN_USE: i32 = -1;

/// A child between its clone and its exec, and everything it reads meanwhile.
pub struct Launch {
    pub pid: Pid,
    /// The child's clear-tid word: 0 once it exec'd or exited (the kernel clears it when the child
    /// leaves our memory, before its exec closes its descriptors or its exit is reported).
    done: Arc<AtomicI32>,
    /// Dropped only once the child is done with it (else leaked, see `Drop`).
    kept: ManuallyDrop<Kept>,
}

/// What the child reads until its exec, kept at the same addresses.
struct Kept {
    context: Box<Context>,
    /// Back to `stacks` once the child is done with it.
    stack: Option<ChildStack>,
    stacks: Arc<Mutex<Vec<ChildStack>>>,
    _strings: Strings,
    steps: Option<Box<ChildSteps>>,
}

/// The program, argv and the added environment, the pointer arrays into them, and the `BaseEnv`
/// the environment's other pointers point into.
struct Strings {
    _program: CString,
    _argv: Vec<CString>,
    _added: Vec<CString>,
    _argv_pointers: Vec<*const libc::c_char>,
    _envp: Vec<*const libc::c_char>,
    _base_env: Arc<BaseEnv>,
}

// SAFETY: the raw pointers point into the `CString`s and the `BaseEnv` held beside them, whose
// heap memory does not move with this value; nothing else writes to them.
unsafe impl Send for Strings {}

impl Launch {
    /// Waits, on the blocking pool, until the child exec'd or exited: `Ok` when it exec'd (what
    /// must not be said of a command that never started, `exec_started`, waits for this). A
    /// command's exit needs no wait: its child was done by then.
    pub async fn exec_done(&mut self) -> io::Result<()> {
        if !self.is_done() {
            let done = Arc::clone(&self.done);
            tokio::task::spawn_blocking(move || wait_until_done(&done, None))
                .await
                .map_err(io::Error::other)?;
        }
        self.spawned().map(drop)
    }

    /// After the child exec'd or exited (its exit was reaped, or [`Launch::exec_done`]): `Ok` when
    /// it exec'd. With `report` (confined), the report is corrected with what the child measured; a
    /// strict child that got less than it asked for did not exec, and the error holds a
    /// [`crate::confine::ConfineError::NotEnforceable`].
    pub fn conclude(self, report: Option<&mut Enforcement>) -> io::Result<()> {
        if !self.is_done() {
            // Not reached: an exit is reported only after the child left our memory.
            wait_until_done(&self.done, None);
        }
        let spawned = self.spawned();
        match (self.kept.steps.as_deref(), report) {
            (Some(steps), Some(report)) => {
                steps.conclude(&self.kept.context.status, spawned, report).map(drop)
            }
            _ => spawned.map(drop),
        }
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire) == 0
    }

    /// What the child said of its steps and exec (once it is done).
    fn spawned(&self) -> io::Result<Pid> {
        match self.kept.context.errno {
            0 => Ok(self.pid),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

impl Drop for Launch {
    /// A launch given up before its child was done (shutdown ended the exec that awaited it) waits
    /// for it here: the child still reads what this value holds. A child that is not done within
    /// [`GIVEN_UP_WAIT`] (stopped before its exec by someone) keeps it: it is leaked, never freed
    /// under the child.
    fn drop(&mut self) {
        if self.is_done() || wait_until_done(&self.done, Some(GIVEN_UP_WAIT)) {
            // SAFETY: dropped once, here; the child is done with it.
            unsafe { ManuallyDrop::drop(&mut self.kept) };
        }
    }
}

/// How long a dropped [`Launch`] waits for its child to be done.
const GIVEN_UP_WAIT: Duration = Duration::from_secs(1);

/// Waits until the kernel cleared `done` (a futex it wakes), at most `limit`: whether it did. In
/// slices, as the kernel wakes one waiter only and a second may wait beside the first.
fn wait_until_done(done: &AtomicI32, limit: Option<Duration>) -> bool {
    const SLICE: Duration = Duration::from_millis(50);
    let start = Instant::now();
    loop {
        let seen = done.load(Ordering::Acquire);
        if seen == 0 {
            return true;
        }
        let slice = match limit {
            None => SLICE,
            Some(limit) => match limit.checked_sub(start.elapsed()) {
                Some(left) if !left.is_zero() => left.min(SLICE),
                _ => return false,
            },
        };
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: i64::from(slice.subsec_nanos()) };
        // SAFETY: a wait on a live word, with a timeout alive through the call; a shared (not
        // private) futex, as the kernel's wake at the child's exit or exec is one. Woken, timed out,
        // interrupted or changed meanwhile, the loop looks again.
        unsafe {
            libc::syscall(libc::SYS_futex, done.as_ptr(), libc::FUTEX_WAIT, seen, &raw const timeout);
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(stack) = self.stack.take() {
            let mut stacks = self.stacks.lock().unwrap_or_else(PoisonError::into_inner);
            if stacks.len() < KEPT_STACKS {
                stacks.push(stack);
            }
        }
    }
}

/// The command's environment, as pointers: the entries of `base_env` that the profile's allowlist
/// lets through and that nothing added replaces. They stay valid while `shell` is borrowed.
fn inherited_env(shell: &Shell<'_>) -> Vec<*const libc::c_char> {
    let replaced = |key: &[u8]| {
        let key = std::str::from_utf8(key).unwrap_or_default();
        shell.fixed_env.contains_key(key) || shell.env.contains_key(key) || key == shell.tag.0
    };
    let mut entries = Vec::with_capacity(shell.base_env.entries.len() + shell.env.len() + 2);
    for entry in &shell.base_env.entries {
        let bytes = entry.as_bytes();
        // Only `KEY=VALUE` entries are passed on.
        let Some(at) = bytes.iter().position(|b| *b == b'=') else { continue };
        let key = &bytes[..at];
        let allowed = shell.env_allowlist.is_none_or(|names| names.iter().any(|n| n.as_bytes() == key));
        if allowed && !replaced(key) {
            entries.push(entry.as_ptr());
        }
    }
    entries
}

/// What the command's environment adds to [`inherited_env`]: the profile's fixed variables, the
/// request's (replacing the same names), and the exec tag.
fn added_env(shell: &Shell<'_>) -> io::Result<Vec<CString>> {
    let fixed =
        shell.fixed_env.iter().filter(|(key, _)| !shell.env.contains_key(*key) && *key != shell.tag.0);
    let own = shell.env.iter().filter(|(key, _)| *key != shell.tag.0);
    fixed
        .chain(own)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(std::iter::once(shell.tag))
        .map(|(key, value)| cstring(format!("{key}={value}")))
        .collect()
}

/// What the child needs, prepared before the clone; the child writes `status` and `errno`.
struct Context {
    /// The signals to set back to their default action.
    altered: Altered,
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdin: RawFd,
    output: RawFd,
    /// `output` is a terminal to take as the controlling one.
    terminal: bool,
    cwd: RawFd,
    /// The profile's steps; `None`: unconfined.
    steps: Option<*const ChildSteps>,
    status: ChildStatus,
    /// 0: the child reached its exec (which then succeeded, or the child would have set this).
    errno: libc::c_int,
}

// SAFETY: the pointers point into the `Strings` and the steps that the same `Launch` holds (heap
// memory that does not move with it); the parent reads the rest only once the child is done.
unsafe impl Send for Context {}

/// The child, between clone and exec: raw system calls only ([`crate::syscall`]), on `Context`.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Context` `Spawner::spawn` passed, alive and untouched by the parent
    // until this child exec'd or exited (the `Launch` holding it waits for that).
    let context = unsafe { &mut *arg.cast::<Context>() };
    let errno = match prepare(context) {
        // SAFETY: the path, argv and envp are NUL-terminated C strings and null-terminated arrays
        // owned by the `Launch`, alive until the exec.
        Ok(()) => unsafe { syscall::execve(context.program, context.argv, context.envp) },
        Err(errno) => errno,
    };
    // Never 0: the parent takes 0 for a successful exec.
    context.errno = if errno == 0 { libc::EIO } else { errno };
    syscall::exit(127)
}

/// The child's steps before its exec.
fn prepare(context: &mut Context) -> Result<(), syscall::Errno> {
    for &signal in context.altered.signals() {
        syscall::default_action(signal)?;
    }
    syscall::dup_onto(context.stdin, 0)?;
    syscall::dup_onto(context.output, 1)?;
    syscall::dup_onto(context.output, 2)?;
    // Only stdio reaches the command, whatever agentd holds or was given (runc's CVE-2024-21626:
    // a descriptor left open is a way past every wall). Close-on-exec, so the steps below still use
    // theirs (working directory, cgroup, ruleset, namespace) until the exec closes them all. A
    // kernel without the flag (before 5.11) is passed over: agentd opens every descriptor
    // close-on-exec and closed what it inherited at start.
    match syscall::close_from(3, libc::CLOSE_RANGE_CLOEXEC) {
        Ok(()) | Err(libc::ENOSYS | libc::EINVAL) => {}
        Err(errno) => return Err(errno),
    }
    syscall::fchdir(context.cwd)?;
    syscall::setsid()?;
    if context.terminal {
        // A session leader without a controlling terminal takes the one on its stdout.
        syscall::set_controlling_terminal(1)?;
    }
    if let Some(steps) = context.steps {
        // SAFETY: the steps are boxed in the `Launch`, alive and unchanged until the exec.
        unsafe { &*steps }.enter(&mut context.status)?;
    }
    // The last step: a signal pending now takes its default action, as it would after the exec.
    syscall::unblock_all_signals()
}

/// The standard signals a child sets back to their default action, by value: the child reads
/// nothing of the `Spawner`'s.
#[derive(Debug, Clone, Copy)]
struct Altered {
    signals: [libc::c_int; 32],
    len: usize,
}

impl Altered {
    fn signals(&self) -> &[libc::c_int] {
        self.signals.get(..self.len).unwrap_or_default()
    }
}

/// The standard signals whose disposition is not the default (ignored, as Rust ignores SIGPIPE and
/// `nohup` SIGHUP, or handled), and those agentd handles ([`crate::reaper::HANDLED`], in case their
/// handlers are installed after this is read): the ones a child must set back. Read once, at the
/// first spawn, by which time agentd has installed its handlers; it never changes a disposition
/// after that. A child then makes a few `sigaction` calls instead of 29 (21 µs per spawn here,
/// timed in the child).
fn altered_signals() -> Altered {
    let handled = |signal: libc::c_int| crate::reaper::HANDLED.iter().any(|&h| h as libc::c_int == signal);
    let mut altered = Altered { signals: [0; 32], len: 0 };
    // 1 to 31; those between 31 and SIGRTMIN are glibc's own, and it refuses them.
    for signal in (1..32).filter(|&signal| signal != libc::SIGKILL && signal != libc::SIGSTOP) {
        let mut current = MaybeUninit::<libc::sigaction>::uninit();
        // SAFETY: `sigaction` only reads the current action into `current` (initialised by the
        // call when it succeeds, and read only then).
        let at_default = unsafe {
            libc::sigaction(signal, std::ptr::null(), current.as_mut_ptr()) == 0
                && current.assume_init().sa_sigaction == libc::SIG_DFL
        };
        if (!at_default || handled(signal))
            && let Some(slot) = altered.signals.get_mut(altered.len)
        {
            *slot = signal;
            altered.len += 1;
        }
    }
    altered
}

/// Sets every real-time signal that is ignored back to its default action (a handled one is left:
/// agentd installs none, so none is found).
fn reset_ignored_realtime_signals() {
    // SAFETY: `sigaction` reads the current action into `current` (initialised by the call when it
    // succeeds, and read only then), and sets a zeroed one (SIG_DFL).
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in libc::SIGRTMIN()..=libc::SIGRTMAX() {
            let mut current = MaybeUninit::<libc::sigaction>::uninit();
            if libc::sigaction(signal, std::ptr::null(), current.as_mut_ptr()) == 0
                && current.assume_init().sa_sigaction == libc::SIG_IGN
            {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
}

/// Every signal blocked on this thread while it lives; the previous mask comes back on drop.
struct BlockedSignals {
    previous: libc::sigset_t,
}

impl BlockedSignals {
    fn all() -> io::Result<Self> {
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: `sigfillset` initialises `all`; `pthread_sigmask` initialises `previous` when it
        // succeeds, and only then is it read.
        unsafe {
            libc::sigfillset(all.as_mut_ptr());
            check(libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), previous.as_mut_ptr()))?;
            Ok(Self { previous: previous.assume_init() })
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores a mask `pthread_sigmask` returned.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// A child's stack, with a guard page below it so an overflow faults instead of writing
/// over agentd's memory.
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping belongs to this value alone (nothing else holds its address), so it may move
// to another thread; it is used only under `Spawner`'s lock.
unsafe impl Send for ChildStack {}

/// Far more than the child's steps use (a few KiB); only the pages touched are ever allocated.
const CHILD_STACK: usize = 256 * 1024;

impl ChildStack {
    fn new() -> io::Result<Self> {
        // SAFETY: `sysconf` has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = CHILD_STACK + page;
        // SAFETY: a new anonymous private mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Self { base, len };
        // SAFETY: the lowest page of the mapping just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The stack grows down from here (the mapping's end, page aligned).
    fn top(&self) -> *mut libc::c_void {
        self.base.cast::<u8>().wrapping_add(self.len).cast()
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; the child no longer runs on it (it exec'd
        // or exited before `clone` returned).
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_resets_what_is_ignored_or_handled_and_leaves_the_rest() {
        let altered = altered_signals();
        let altered = altered.signals();
        // Rust's runtime ignores SIGPIPE in every program it starts, this test's too.
        assert!(altered.contains(&libc::SIGPIPE), "{altered:?}");
        for handled in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
            assert!(altered.contains(&handled), "{handled} in {altered:?}");
        }
        // SIGUSR1 is at its default here: nothing to reset, and SIGKILL/SIGSTOP cannot be.
        for untouched in [libc::SIGUSR1, libc::SIGKILL, libc::SIGSTOP] {
            assert!(!altered.contains(&untouched), "{untouched} in {altered:?}");
        }
    }
}
