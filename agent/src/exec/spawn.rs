//! Starting `/bin/sh -c COMMAND` in a new session: `clone(CLONE_VM | CLONE_VFORK)`, the child's
//! steps, `execve`.
//!
//! The clone is the one glibc's `posix_spawn` makes: no page tables are copied and no copy-on-write
//! faults follow, which measured about 60–200 µs faster per exec than std's `fork` path. agentd
//! makes it itself because a command under a profile needs steps `posix_spawn` cannot express
//! (cgroup, rlimits, landlock, seccomp), and because what every spawn needs is kept across spawns
//! ([`Spawner`]): the child's stack, which glibc maps and unmaps on every call.
//!
//! The child, on data prepared before the clone, makes system calls only: default dispositions for
//! the signals agentd ignores or handles (Rust ignores SIGPIPE, and ignored signals survive `exec`;
//! the set is read once, [`altered_signals`]), stdio, working
//! directory, a new session, the profile's steps ([`ChildSteps::enter`]), an empty signal mask, and
//! the exec.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd as _, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};

use agentd_protocol::profile::Enforcement;

use nix::errno::Errno;

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
    pub base_env: &'a BaseEnv,
    /// Added to `base_env`, replacing variables of the same name.
    pub env: &'a BTreeMap<String, String>,
    /// `(name, value)` of the exec tag.
    pub tag: (&'a str, &'a str),
    /// Read end for the child's stdin; `None`: `/dev/null`.
    pub stdin: Option<&'a OwnedFd>,
    /// Write end the child's stdout and stderr both go to.
    pub output: &'a OwnedFd,
}

fn cstring(bytes: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a command, path or variable"))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) }
}

/// What every spawn reuses: the stack children run on until their exec. Mapping a stack per spawn
/// cost its page faults and, on unmapping, a TLB flush on every CPU agentd ran on.
pub struct Spawner {
    stack: std::sync::Mutex<Option<ChildStack>>,
    /// The standard signals a child sets back to their default action ([`altered_signals`]), read
    /// at the first spawn.
    altered: std::sync::OnceLock<Vec<libc::c_int>>,
}

impl Spawner {
    /// Also resets, in agentd itself, every real-time signal it inherited ignored: agentd never
    /// sets one's disposition (nor do its crates), so they all stay at their default from here on
    /// and a child resets only the standard signals that are not at theirs.
    pub fn new() -> Self {
        reset_ignored_realtime_signals();
        Self { stack: std::sync::Mutex::new(None), altered: std::sync::OnceLock::new() }
    }

    /// Starts the shell; returns its pid (also its session and process group id). With
    /// `confinement`, the child applies the profile's steps before its exec and the report is
    /// corrected with what it measured; a strict child that got less than it asked for does not
    /// exec, and the error holds a [`crate::confine::ConfineError::NotEnforceable`].
    ///
    /// The child borrows the parent's memory, page tables included, until it execs, so nothing is
    /// copied, and it hands back what it measured through that memory: no pipe.
    ///
    /// Call with the reaper's lock held ([`super::reaper::Reaper::spawn`]): a child that fails before
    /// its exec is reaped here.
    pub fn spawn(
        &self,
        shell: &Shell<'_>,
        confinement: Option<(&ChildSteps, &mut Enforcement)>,
    ) -> io::Result<u32> {
        let program = cstring("/bin/sh")?;
        let argv_owned = [cstring("/bin/sh")?, cstring("-c")?, cstring(shell.command)?];
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
        // Held until the child exec'd or exited: one child runs on it at a time.
        let mut kept = self.stack.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let stack = match &mut *kept {
            Some(stack) => stack,
            None => kept.insert(ChildStack::new()?),
        };
        let (steps, report) = match confinement {
            Some((steps, report)) => (Some(steps), Some(report)),
            None => (None, None),
        };
        let altered = self.altered.get_or_init(altered_signals);
        let mut context = Context {
            altered,
            program: program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            stdin,
            output: shell.output.as_raw_fd(),
            cwd: shell.cwd.as_raw_fd(),
            steps,
            status: ChildStatus::default(),
            errno: 0,
        };
        let pid = {
            // Every signal blocked across the clone: the child runs on our memory with our handlers
            // until it has reset them, and a handler must not run there. Restored right after.
            let _blocked = BlockedSignals::all()?;
            // SAFETY: `child` runs on its own stack (`stack`, mapped for it and held locked), gets
            // `context`, which lives until `clone` returns, and calls only async-signal-safe
            // functions on data prepared above. With CLONE_VFORK this thread waits until the child
            // exec'd or exited, so nothing here is touched meanwhile; no other thread knows
            // `context`, and none can take the stack.
            unsafe {
                libc::clone(
                    child,
                    stack.top(),
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    std::ptr::from_mut(&mut context).cast(),
                )
            }
        };
        drop(kept);
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        let spawned = if context.errno == 0 {
            Ok(pid as u32)
        } else {
            // The child failed before its exec and exited: reaped here (the reaper's lock is held),
            // so its pid is not left a zombie nor reported to anyone.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            Err(io::Error::from_raw_os_error(context.errno))
        };
        match (steps, report) {
            (Some(steps), Some(report)) => steps.conclude(&context.status, spawned, report),
            _ => spawned,
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
struct Context<'a> {
    /// The signals to set back to their default action.
    altered: &'a [libc::c_int],
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdin: RawFd,
    output: RawFd,
    cwd: RawFd,
    /// The profile's steps; `None`: unconfined.
    steps: Option<&'a ChildSteps>,
    status: ChildStatus,
    /// 0: the child reached its exec (which then succeeded, or the child would have set this).
    errno: libc::c_int,
}

/// The child, between clone and exec: system calls only, on `Context`.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Context` `Spawner::spawn` passed, alive and untouched by the parent
    // (which waits) until this child exec'd or exited.
    let context = unsafe { &mut *arg.cast::<Context<'_>>() };
    let errno = match prepare(context) {
        // SAFETY: the paths, argv and envp are NUL-terminated C strings and null-terminated arrays
        // owned by the parent, alive until the exec.
        Ok(()) => unsafe {
            libc::execve(context.program, context.argv, context.envp);
            Errno::last_raw()
        },
        Err(errno) => errno as libc::c_int,
    };
    // Never 0: the parent takes 0 for a successful exec.
    context.errno = if errno == 0 { libc::EIO } else { errno };
    // SAFETY: `_exit` ends the child without running anything of the parent's (no atexit handlers, no
    // stdio flush on the shared memory).
    unsafe { libc::_exit(127) }
}

/// The child's steps before its exec.
fn prepare(context: &mut Context<'_>) -> Result<(), Errno> {
    default_signal_dispositions(context.altered);
    dup_onto(context.stdin, 0)?;
    dup_onto(context.output, 1)?;
    dup_onto(context.output, 2)?;
    // SAFETY: fchdir on a descriptor the parent holds open.
    Errno::result(unsafe { libc::fchdir(context.cwd) })?;
    nix::unistd::setsid()?;
    if let Some(steps) = context.steps {
        steps.enter(&mut context.status)?;
    }
    // The last step: a signal pending now takes its default action, as it would after the exec.
    let mut none = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: `sigemptyset` initialises the set before `sigprocmask` reads it.
    unsafe {
        libc::sigemptyset(none.as_mut_ptr());
        Errno::result(libc::sigprocmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut()))?;
    }
    Ok(())
}

/// `dup2(from, to)`, and when they are the same descriptor, clears its close-on-exec flag instead.
fn dup_onto(from: RawFd, to: RawFd) -> Result<(), Errno> {
    // SAFETY: plain descriptor system calls.
    unsafe {
        if from == to {
            let flags = Errno::result(libc::fcntl(to, libc::F_GETFD))?;
            Errno::result(libc::fcntl(to, libc::F_SETFD, flags & !libc::FD_CLOEXEC))?;
        } else {
            Errno::result(libc::dup2(from, to))?;
        }
    }
    Ok(())
}

/// The standard signals whose disposition is not the default (ignored, as Rust ignores SIGPIPE and
/// `nohup` SIGHUP, or handled), and those agentd handles ([`super::reaper::HANDLED`], in case their
/// handlers are installed after this is read): the ones a child must set back. Read once, at the
/// first spawn, by which time agentd has installed its handlers; it never changes a disposition
/// after that. A child then makes a few `sigaction` calls instead of 29 (21 µs per spawn here,
/// timed in the child).
fn altered_signals() -> Vec<libc::c_int> {
    let handled = |signal: libc::c_int| super::reaper::HANDLED.iter().any(|&h| h as libc::c_int == signal);
    // 1 to 31; those between 31 and SIGRTMIN are glibc's own, and it refuses them.
    (1..32)
        .filter(|&signal| signal != libc::SIGKILL && signal != libc::SIGSTOP)
        .filter(|signal| {
            let mut current = MaybeUninit::<libc::sigaction>::uninit();
            // SAFETY: `sigaction` only reads the current action into `current` (initialised by the
            // call when it succeeds, and read only then).
            let at_default = unsafe {
                libc::sigaction(*signal, std::ptr::null(), current.as_mut_ptr()) == 0
                    && current.assume_init().sa_sigaction == libc::SIG_DFL
            };
            !at_default || handled(*signal)
        })
        .collect()
}

/// `signals` back to their default action: no handler of agentd may run in the child (it would run
/// on agentd's memory), and ignored signals would stay ignored across the exec.
fn default_signal_dispositions(signals: &[libc::c_int]) {
    // SAFETY: `sigaction` with a zeroed action (SIG_DFL, empty mask, no flags).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        for &signal in signals {
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
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
