//! Raw system calls for a child between its clone and its exec.
//!
//! The child shares agentd's memory and runs beside the thread that cloned it
//! ([`crate::exec::spawn`]), on that thread's thread-local area. libc's wrappers write `errno` there
//! (and glibc's cancellation points touch the thread's descriptor), so the child calls the kernel
//! directly: the result is the return value, `-errno` on failure, and nothing else is written.

use std::ffi::c_long;

/// A system call's failure: the kernel's `errno`.
pub type Errno = i32;

/// `syscall` with up to 6 arguments; `Err(errno)` when the kernel returns one of -4095..=-1.
///
/// # Safety
/// The arguments must be valid for system call `number` (pointers to memory that lives through
/// the call, descriptors the caller may use).
#[inline(always)]
pub unsafe fn call(number: c_long, args: [usize; 6]) -> Result<usize, Errno> {
    // SAFETY: the caller's promise; the instruction itself clobbers only what is declared below.
    let ret = unsafe { raw(number, args) };
    if (-4095..0).contains(&ret) {
        // -4095..=-1 fits an `Errno`; the fallback is not reached.
        Err(Errno::try_from(-ret).unwrap_or(libc::EIO))
    } else {
        // Addresses above `isize::MAX` come back negative: the bits are the value.
        Ok(ret.cast_unsigned())
    }
}

#[cfg(target_arch = "x86_64")]
/// The system call instruction itself: the kernel's raw return value.
///
/// # Safety
/// As [`call`]: the arguments must be valid for system call `number`.
#[inline(always)]
unsafe fn raw(number: c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 Linux system call convention: number in rax, arguments in rdi, rsi, rdx,
    // r10, r8, r9; rcx and r11 are clobbered by the instruction; the result comes back in rax.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") isize::try_from(number).unwrap_or(-1) => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
/// The system call instruction itself: the kernel's raw return value.
///
/// # Safety
/// As [`call`]: the arguments must be valid for system call `number`.
#[inline(always)]
unsafe fn raw(number: c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 Linux system call convention: number in x8, arguments in x0-x5, the
    // result in x0.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") a[0].cast_signed() => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack),
        );
    }
    ret
}

/// A pointer as a system call argument.
pub fn ptr<T>(p: *const T) -> usize {
    p as usize
}

/// A descriptor or other small integer as a system call argument (sign-extended, as the kernel
/// reads an `int`).
pub fn int(value: i32) -> usize {
    // An `i32` always fits an `isize` on the targets agentd is built for.
    isize::try_from(value).unwrap_or(-1).cast_unsigned()
}

/// `rt_sigaction(signal, SIG_DFL)`: the kernel's own `struct sigaction` (handler, flags, restorer,
/// mask), all zero, which is the default action.
pub fn default_action(signal: i32) -> Result<(), Errno> {
    let action = [0usize; 4];
    // SAFETY: `action` is a valid kernel sigaction for the call's duration; no old action asked.
    unsafe { call(libc::SYS_rt_sigaction, [int(signal), ptr(action.as_ptr()), 0, 8, 0, 0]) }.map(drop)
}

/// `rt_sigprocmask(SIG_SETMASK, {})`: nothing blocked.
pub fn unblock_all_signals() -> Result<(), Errno> {
    let none: u64 = 0;
    // SAFETY: an 8-byte empty set, alive through the call.
    unsafe { call(libc::SYS_rt_sigprocmask, [int(libc::SIG_SETMASK), ptr(&raw const none), 0, 8, 0, 0]) }
        .map(drop)
}

/// `dup3(from, to, 0)`, or, when they are the same descriptor, its close-on-exec flag cleared.
pub fn dup_onto(from: i32, to: i32) -> Result<(), Errno> {
    // SAFETY: descriptor calls on integers; nothing is read from memory.
    unsafe {
        if from == to {
            let flags = call(libc::SYS_fcntl, [int(to), int(libc::F_GETFD), 0, 0, 0, 0])?;
            call(
                libc::SYS_fcntl,
                [int(to), int(libc::F_SETFD), flags & !(libc::FD_CLOEXEC as usize), 0, 0, 0],
            )
            .map(drop)
        } else {
            call(libc::SYS_dup3, [int(from), int(to), 0, 0, 0, 0]).map(drop)
        }
    }
}

/// `close_range(first, ~0, flags)`: every descriptor from `first` up closed, or with
/// `CLOSE_RANGE_CLOEXEC` marked close-on-exec (Linux 5.9, the flag 5.11).
pub fn close_from(first: u32, flags: u32) -> Result<(), Errno> {
    // SAFETY: integers only; descriptors closed are no longer used by the caller.
    unsafe { call(libc::SYS_close_range, [first as usize, u32::MAX as usize, flags as usize, 0, 0, 0]) }
        .map(drop)
}

/// `fchdir(fd)`.
pub fn fchdir(fd: i32) -> Result<(), Errno> {
    // SAFETY: a descriptor call.
    unsafe { call(libc::SYS_fchdir, [int(fd), 0, 0, 0, 0, 0]) }.map(drop)
}

/// `ioctl(fd, TIOCSCTTY, 0)`: the terminal `fd` becomes the session's controlling terminal.
pub fn set_controlling_terminal(fd: i32) -> Result<(), Errno> {
    let request = usize::try_from(libc::TIOCSCTTY).map_err(|_| libc::EINVAL)?;
    // SAFETY: TIOCSCTTY takes an integer argument and touches no memory.
    unsafe { call(libc::SYS_ioctl, [int(fd), request, 0, 0, 0, 0]) }.map(drop)
}

/// `setsid()`.
pub fn setsid() -> Result<(), Errno> {
    // SAFETY: no arguments.
    unsafe { call(libc::SYS_setsid, [0; 6]) }.map(drop)
}

/// `write(fd, bytes)`: how many were written.
pub fn write(fd: i32, bytes: &[u8]) -> Result<usize, Errno> {
    // SAFETY: `bytes` is readable for its length through the call.
    unsafe { call(libc::SYS_write, [int(fd), ptr(bytes.as_ptr()), bytes.len(), 0, 0, 0]) }
}

/// `prlimit64(0, resource, {soft, hard}, NULL)`: the calling process's limit.
pub fn set_rlimit(resource: u32, soft: u64, hard: u64) -> Result<(), Errno> {
    let limit = [soft, hard];
    // SAFETY: a `struct rlimit64` alive through the call; no old limit asked.
    unsafe { call(libc::SYS_prlimit64, [0, resource as usize, ptr(limit.as_ptr()), 0, 0, 0]) }.map(drop)
}

/// `prctl(option, arg2)`.
pub fn prctl(option: i32, arg2: usize) -> Result<usize, Errno> {
    // SAFETY: the options used here take integers only.
    unsafe { call(libc::SYS_prctl, [int(option), arg2, 0, 0, 0, 0]) }
}

/// `landlock_restrict_self(ruleset, 0)`.
pub fn landlock_restrict_self(ruleset: i32) -> Result<(), Errno> {
    // SAFETY: a descriptor call.
    unsafe { call(libc::SYS_landlock_restrict_self, [int(ruleset), 0, 0, 0, 0, 0]) }.map(drop)
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, program)`.
pub fn seccomp_filter(program: &[seccompiler::sock_filter]) -> Result<(), Errno> {
    /// The kernel's `struct sock_fprog`.
    #[repr(C)]
    struct Fprog {
        len: u16,
        filter: *const seccompiler::sock_filter,
    }
    let fprog =
        Fprog { len: u16::try_from(program.len()).map_err(|_| libc::EINVAL)?, filter: program.as_ptr() };
    // SAFETY: `fprog` points at `program`, both alive through the call; the kernel copies them.
    unsafe {
        call(libc::SYS_seccomp, [libc::SECCOMP_SET_MODE_FILTER as usize, 0, ptr(&raw const fprog), 0, 0, 0])
    }
    .map(drop)
}

/// `execve(program, argv, envp)`: returns only on failure.
///
/// # Safety
/// `program` is a NUL-terminated path; `argv` and `envp` are null-terminated arrays of
/// NUL-terminated strings; all alive through the call.
pub unsafe fn execve(
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> Errno {
    // SAFETY: the caller's promise.
    match unsafe { call(libc::SYS_execve, [ptr(program), ptr(argv), ptr(envp), 0, 0, 0]) } {
        Ok(_) => libc::EIO,
        Err(errno) => errno,
    }
}

/// `exit(code)`: ends the calling task at once (no exit handlers: they are agentd's).
pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: `exit` takes an integer and does not return.
        let _ = unsafe { call(libc::SYS_exit, [int(code), 0, 0, 0, 0, 0]) };
    }
}

/// `setgroups(0, NULL)`: no supplementary groups (the calling thread only, unlike libc's).
pub fn drop_groups() -> Result<(), Errno> {
    // SAFETY: an empty list; nothing is read.
    unsafe { call(libc::SYS_setgroups, [0; 6]) }.map(drop)
}

/// `setresgid(gid, gid, gid)` (the calling thread only, unlike libc's).
pub fn set_gid(gid: u32) -> Result<(), Errno> {
    let gid = gid as usize;
    // SAFETY: integers only.
    unsafe { call(libc::SYS_setresgid, [gid, gid, gid, 0, 0, 0]) }.map(drop)
}

/// `setresuid(uid, uid, uid)` (the calling thread only, unlike libc's).
pub fn set_uid(uid: u32) -> Result<(), Errno> {
    let uid = uid as usize;
    // SAFETY: integers only.
    unsafe { call(libc::SYS_setresuid, [uid, uid, uid, 0, 0, 0]) }.map(drop)
}

/// The kernel's `struct __user_cap_header_struct` and two `__user_cap_data_struct`s (version 3:
/// 64 capabilities).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// `capset`: no effective, permitted or inheritable capability left to the calling thread.
pub fn clear_capabilities() -> Result<(), Errno> {
    let header = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let data = [CapData::default(); 2];
    // SAFETY: a header and two data structs alive through the call; the kernel only reads them.
    unsafe { call(libc::SYS_capset, [ptr(&raw const header), ptr(data.as_ptr()), 0, 0, 0, 0]) }.map(drop)
}

/// `capget`: whether the calling thread holds no effective, permitted or inheritable capability.
pub fn has_no_capabilities() -> Result<bool, Errno> {
    let header = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: a header and room for two data structs, alive through the call.
    unsafe { call(libc::SYS_capget, [ptr(&raw const header), ptr(data.as_mut_ptr()), 0, 0, 0, 0]) }?;
    Ok(data.iter().all(|d| d.effective == 0 && d.permitted == 0 && d.inheritable == 0))
}

/// `getuid()` and `getgid()`: the calling thread's real ids.
pub fn ids() -> (u32, u32) {
    // SAFETY: no arguments; they cannot fail.
    unsafe {
        (
            u32::try_from(call(libc::SYS_getuid, [0; 6]).unwrap_or(usize::MAX)).unwrap_or(u32::MAX),
            u32::try_from(call(libc::SYS_getgid, [0; 6]).unwrap_or(usize::MAX)).unwrap_or(u32::MAX),
        )
    }
}

/// `setns(fd, nstype)`.
pub fn setns(fd: i32, nstype: i32) -> Result<(), Errno> {
    // SAFETY: a descriptor call.
    unsafe { call(libc::SYS_setns, [int(fd), int(nstype), 0, 0, 0, 0]) }.map(drop)
}

/// `prctl(option, arg2, arg3)`.
pub fn prctl3(option: i32, arg2: usize, arg3: usize) -> Result<usize, Errno> {
    // SAFETY: the options used here take integers only.
    unsafe { call(libc::SYS_prctl, [int(option), arg2, arg3, 0, 0, 0]) }
}
